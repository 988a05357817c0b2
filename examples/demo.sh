#!/usr/bin/env bash
# The first thing to run on a fresh machine (as root, Go 1.26 installed):
# builds berth, starts `berth dev` (an embedded Temporal server and a
# worker), runs a Python program in a durable sandbox with `berth run`,
# then drives a standalone sandbox (idle pause, wake, snapshot, cp out, rm),
# then, when a model is there, gives the coding agent a task, and stops
# the server.
set -euo pipefail
cd "$(dirname "$0")/.."
go build -o bin/ ./cmd/berth ./cmd/berth-host
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o bin/ ./cmd/berth-sandboxd # static: it runs in Docker images too
data=$(mktemp -d "${TMPDIR:-/tmp}/berth-demo.XXXXXX")
# The coding agent's model: BERTH_MODEL with OPENAI_API_KEY (OpenAI) or
# OPENAI_BASE_URL (any compatible server); with a key alone, a small
# OpenAI model; with neither, a local Ollama if one answers.
if [ -z "${BERTH_MODEL:-}" ] && [ -n "${OPENAI_API_KEY:-}" ] && [ -z "${OPENAI_BASE_URL:-}" ]; then
  export BERTH_MODEL=gpt-4.1-mini
fi
if [ -z "${BERTH_MODEL:-}" ] && [ -z "${OPENAI_BASE_URL:-}" ] &&
  models=$(curl -sf --max-time 1 http://127.0.0.1:11434/v1/models 2>/dev/null) &&
  model=$(printf '%s' "$models" | sed -n 's/.*"id":"\([^"]*\)".*/\1/p' | head -n1) && [ -n "$model" ]; then
  export OPENAI_BASE_URL=http://127.0.0.1:11434/v1 BERTH_MODEL=$model
fi
# berth dev picks free ports (--port 0) and logs the server's address
# once it is ready; the demo waits for that, and gives up at once if
# berth dev exits. BERTH_DEV_FLAGS adds flags of berth dev's (for
# example --provider docker).
# shellcheck disable=SC2086 # the flags are words
bin/berth dev --data-dir "$data" --port 0 --ui-port 0 ${BERTH_DEV_FLAGS:-} 2>"$data.log" &
dev=$!
cleanup() {
  set +e # every step runs, whatever the one before did
  kill "$dev" 2>/dev/null
  wait "$dev" 2>/dev/null
  rm -rf "$data" "$data.log"
}
trap cleanup EXIT
addr=
for _ in $(seq 600); do # 60 s
  addr=$(sed -n 's/.*berth dev is ready.* address=\([^ ]*\).*/\1/p' "$data.log" | head -n1)
  [ -n "$addr" ] && break
  if ! kill -0 "$dev" 2>/dev/null; then
    echo "berth dev exited:"; cat "$data.log"; exit 1
  fi
  sleep 0.1
done
if [ -z "$addr" ]; then echo "berth dev was not ready in 60 s:"; cat "$data.log"; exit 1; fi
cat > "$data/hello.py" <<'PY'
import os, platform, sys
print("hello from", platform.node(), "as uid", os.getuid(), "in", os.getcwd())
print("files:", sorted(os.listdir(".")))
print("network:", [l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:]])
sys.exit(3)
PY
set +e
if [ -x /usr/bin/python3 ]; then
  bin/berth run --address $addr --file hello.py="$data/hello.py" --memory 256Mi -- /usr/bin/python3 hello.py
else # no Python on this machine: the same in sh
  bin/berth run --address $addr --memory 256Mi -- /bin/sh -c 'echo "hello from $(hostname) as uid $(id -u) in $PWD"; exit 3'
fi
echo "berth run exited with $? (the program's own exit code)"
set -e

# A standalone sandbox: it lives in its own workflow, pauses when idle
# (here after 2 s) and wakes on the next command, processes and all.
b() { bin/berth "$1" "$2" --address $addr "${@:3}"; }
id=$(b sandbox create --idle-timeout 2s)
echo "created standalone sandbox $id"
b sandbox exec "$id" -- sh -c 'echo "state kept across pauses" > note.txt; sleep 1000 > /dev/null 2>&1 &'
sleep 4
b sandbox ls
b sandbox exec "$id" -- sh -c 'cat note.txt; pgrep -x sleep > /dev/null && echo "background process still alive"'
snap=$(b sandbox snapshot "$id")
echo "snapshot $snap"
b sandbox cp "$id:." "$data/copied-out"
echo "copied the workspace out: $(ls "$data/copied-out")"
b sandbox rm "$id"
echo "removed $id"

# The coding agent: a session, a task, the tool calls and the answer as
# they come. It needs a model; without one, say what to set.
if [ -n "${BERTH_MODEL:-}" ]; then
  sess=$(b session new --title demo)
  echo "coding agent session $sess, model $BERTH_MODEL:"
  b session send "$sess" "Write fib.py with a function fib(n) and a test file test_fib.py using unittest; run the tests with python3 -m unittest and fix anything that fails." || true
  b session rm "$sess"
else
  echo "the coding agent needs a model: set BERTH_MODEL and OPENAI_API_KEY (OpenAI), or OPENAI_BASE_URL (a compatible server: vLLM, Ollama, llama.cpp, LiteLLM), then run this again"
fi
