#!/usr/bin/env bash
# berth's scale benchmark on examples/cluster.sh's cluster (PostgreSQL,
# the Temporal server, versitygw, three worker hosts in their network
# namespaces), driven through the SDK by bench/scale (a scripted model
# it serves on the bridge answers each turn with one shell call):
#
#   sudo bench/scale.sh                 # N=10000 idle sessions, K=100 woken, C=200 x 1/s x 10m
#   sudo N=1000 K=50 C=20 FOR=2m bench/scale.sh
#
# idle: a template session writes a file and is kept as a snapshot; N
# sessions are made hibernated from it (BOOT=1: each boots its sandbox
# and hibernates it after HIBERNATE_AFTER); then each host's worker RSS
# (and the server's, PostgreSQL's Pss), the sandbox daemons left (0),
# and the load average are printed; K random sessions are woken one
# after another (message to the command's start). load: C more sessions
# each run a command every second for FOR: berth's overhead per tool
# call (the call's wall time at the model less the command's own), and
# each session's ran.log says no command was lost or run twice; the
# hosts are measured halfway, with a CPU profile of a worker and
# top (SCALE_DIR). The cluster is taken down at the end (KEEP=1
# leaves it). Settings: N, K, C, FOR, BOOT, PER_MANAGER (100), PARALLEL (16),
# HIBERNATE_AFTER (20s), CACHE (the workers' --workflow-cache; default
# theirs), SCALE_DIR (/tmp/berth-scale-out), and examples/cluster.sh's
# CLUSTER_* (this script's own defaults keep clear of a default cluster).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export CLUSTER_DIR=${CLUSTER_DIR:-/tmp/berth-scale} CLUSTER_NAME=${CLUSTER_NAME:-berthscale}
export CLUSTER_NET=${CLUSTER_NET:-100.87.77} CLUSTER_TEMPORAL_PORT=${CLUSTER_TEMPORAL_PORT:-7433}
export CLUSTER_S3_PORT=${CLUSTER_S3_PORT:-7470} CLUSTER_PG_PORT=${CLUSTER_PG_PORT:-55632}
out=${SCALE_DIR:-/tmp/berth-scale-out}
gw=$CLUSTER_NET.1
hosts=${CLUSTER_HOSTS:-3}
model=$gw:18077

# hook PHASE: what the driver runs between its phases.
hook() {
  case $1 in
  up)
    export CLUSTER_WORKER_ENV="BERTH_MODEL=fake-model OPENAI_API_KEY=sk-fake OPENAI_BASE_URL=http://$model/v1"
    # --max-memory 0: the load's sessions never pause, and a host's
    # default bound (its memory, at 2 GiB a sandbox without a limit)
    # would hold 10 of them.
    export CLUSTER_WORKER_ARGS="--metrics-address :9177 --pprof --max-memory 0 ${CACHE:+--workflow-cache $CACHE}"
    examples/cluster.sh up >"$out/cluster.log" 2>&1 || { cat "$out/cluster.log"; exit 1; }
    grep -h "berth worker is ready" "$CLUSTER_DIR"/h*.log | sed 's/^/  /'
    ;;
  *) measure "$1" ;;
  esac
}

# mem PID FIELD: a field of a process's smaps_rollup (Rss, Pss,
# Anonymous), MiB. The workers and the server share berth-host's pages
# (~180 MiB of its text): Rss counts them in each, Pss shares them out,
# Anonymous is a process's own.
mem() { awk -v f="$2:" '$1 == f {printf "%.0f", $2 / 1024}' "/proc/$1/smaps_rollup"; }

# measure PHASE: memory, daemons and load, to stdout and SCALE_DIR.
measure() {
  local i pid rss=0 pss=0 anon=0 pg=0 daemons
  {
    echo "== $1: $(date -u +%FT%TZ), load average $(cut -d' ' -f1-3 /proc/loadavg)"
    for i in $(seq "$hosts"); do
      pid=$(cat "$CLUSTER_DIR/h$i.pid")
      # The daemons of the host's sandboxes: processes in its cgroups.
      daemons=$(find "/sys/fs/cgroup/pids/$CLUSTER_NAME/h$i" -mindepth 2 -name cgroup.procs -exec cat {} + 2>/dev/null | wc -l)
      # The linux provider keeps warm daemons (its pool, linux.pool) in cgroups named warm-*.
      echo "host $i: worker Rss $(mem "$pid" Rss) MiB, Pss $(mem "$pid" Pss) MiB, Anonymous $(mem "$pid" Anonymous) MiB; processes in its sandboxes' cgroups $daemons ($(find "/sys/fs/cgroup/pids/$CLUSTER_NAME/h$i" -mindepth 2 -type d -name 'warm-*' | wc -l) warm)"
      curl -s "http://$CLUSTER_NET.$((10 + i)):9177/metrics" | grep -E '^temporal_sticky_cache_size.*agent.Session|^go_goroutines|^go_memstats_heap_inuse_bytes' | sed 's/^/  /' || true
      rss=$((rss + $(mem "$pid" Rss))) pss=$((pss + $(mem "$pid" Pss))) anon=$((anon + $(mem "$pid" Anonymous)))
    done
    echo "workers, total: Rss $rss MiB, Pss $pss MiB, Anonymous $anon MiB"
    pid=$(cat "$CLUSTER_DIR/server.pid")
    echo "Temporal server: Rss $(mem "$pid" Rss) MiB, Pss $(mem "$pid" Pss) MiB, Anonymous $(mem "$pid" Anonymous) MiB"
    for pid in $(pgrep -u postgres postgres); do
      pg=$((pg + $(awk '/^Pss:/ {print $2}' "/proc/$pid/smaps_rollup" 2>/dev/null || echo 0)))
    done
    echo "PostgreSQL Pss, all its processes: $((pg / 1024)) MiB"
  } | tee -a "$out/measure.txt"
  curl -s -o "$out/$1-h1-heap.pprof" "http://$CLUSTER_NET.11:9177/debug/pprof/heap" || true
  if [ "$1" = load ]; then
    curl -s -o "$out/load-h1-cpu.pprof" "http://$CLUSTER_NET.11:9177/debug/pprof/profile?seconds=20" &
    wait
    top -b -n 1 -o %CPU | head -20 >"$out/load-top.txt"
  fi
}

if [ "${1:-}" = hook ]; then
  hook "$2"
  exit
fi

[ "$(id -u)" = 0 ] || { echo "scale.sh: run as root (the cluster makes namespaces and cgroups)" >&2; exit 1; }
mkdir -p "$out"
: >"$out/measure.txt"
go build -o "$out/scale" ./bench/scale
trap '[ -n "${KEEP:-}" ] || examples/cluster.sh down >>"$out/cluster.log" 2>&1' EXIT
TEMPORAL_ADDRESS=$gw:$CLUSTER_TEMPORAL_PORT TEMPORAL_NAMESPACE=default "$out/scale" -model "$model" \
  -hook "bash $root/bench/scale.sh hook" \
  -n "${N-10000}" -k "${K:-100}" -c "${C:-200}" -for "${FOR:-10m}" -per-manager "${PER_MANAGER:-100}" \
  -parallel "${PARALLEL:-16}" -hibernate-after "${HIBERNATE_AFTER:-20s}" ${BOOT:+-boot} 2>&1 | tee "$out/scale.txt"
