#!/usr/bin/env bash
# Times berth's client commands end to end against a running berth dev
# (server, worker and sandbox on this machine), with hyperfine, beside
# the temporal CLI doing the same work through the same server when a
# `temporal` binary is on PATH: the same berth.exec Update on the same
# sandbox, and the same Run workflow started and waited for.
#
#   bash bench/cli.sh            # as root; prints a table, writes bench/cli.md
#
# Each figure is a whole process: start, dial, the operation, exit.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v hyperfine >/dev/null || { apt-get update -qq && apt-get install -y -qq hyperfine >/dev/null; }
go build -o bin/ ./cmd/berth ./cmd/berth-host
CGO_ENABLED=0 go build -o bin/ ./cmd/berth-sandboxd # static: it runs in Docker images too
data=$(mktemp -d /tmp/berth-bench.XXXXXX)
port=${PORT:-17455}
bin/berth dev --data-dir "$data" --port "$port" --ui-port 0 2>"$data.log" &
dev=$!
trap 'kill $dev 2>/dev/null; wait $dev 2>/dev/null; rm -rf "$data" "$data.log"' EXIT
export TEMPORAL_ADDRESS=127.0.0.1:$port
for _ in $(seq 100); do
  bin/berth run -- true >/dev/null 2>&1 && break
  sleep 0.2
done
id=$(bin/berth sandbox create --no-idle-timeout)

cmds=(
  "bin/berth version"
  "bin/berth sandbox exec $id -- /bin/true"
  "bin/berth run -- /bin/true"
)
names=("berth version" "berth sandbox exec ID -- /bin/true" "berth run -- /bin/true")
if command -v temporal >/dev/null; then
  cmds+=(
    "temporal --version"
    "temporal workflow update execute --workflow-id $id --name berth.exec --input '{\"argv\":[\"/bin/true\"]}'"
    "temporal workflow execute --type Run --task-queue berth --input '{\"provider\":\"linux\",\"argv\":[\"/bin/true\"]}'"
  )
  names+=("temporal --version" "temporal workflow update execute (berth.exec, same sandbox)" "temporal workflow execute (Run)")
else
  echo "no temporal CLI on PATH: its figures are left out" >&2
fi
args=()
for i in "${!cmds[@]}"; do args+=(--command-name "${names[$i]}" "${cmds[$i]}"); done
hyperfine -N --warmup 5 --runs "${RUNS:-40}" --export-markdown bench/cli.md "${args[@]}"
echo
echo "peak memory (max RSS):"
for c in "bin/berth version" "temporal --version"; do
  command -v "${c%% *}" >/dev/null || [ -x "${c%% *}" ] || continue
  /usr/bin/time -f "  $c: %M KiB" $c >/dev/null
done
