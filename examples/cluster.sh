#!/usr/bin/env bash
# A berth cluster on one machine: PostgreSQL (from Debian), the Temporal
# server on it as its own process (berth-host server, its schema applied
# by Temporal's own SQL tool, which berth-host links), an S3 store (versitygw) and three
# berth workers, each in its own network namespace and cgroup with its
# own data directory. Everything listens on loopback or on a bridge of
# private addresses this script makes; the namespaces have no route out.
#
#   examples/cluster.sh up | down | status
#   examples/cluster.sh kill-host N     # SIGKILL host N's worker and all it runs; delete its namespace
#   examples/cluster.sh partition N     # cut host N from the server and the store; its worker and sandboxes run on
#   examples/cluster.sh heal N          # undo partition N
#   examples/cluster.sh kill-server     # SIGKILL the Temporal server
#   examples/cluster.sh start-server    # start it again, on the same database
#   examples/cluster.sh stop-s3         # SIGKILL the S3 store (an outage)
#   examples/cluster.sh start-s3        # start it again, on the same data and keys
#   examples/cluster.sh freeze-s3       # SIGSTOP it: it takes connections and answers none (a hung store)
#   examples/cluster.sh thaw-s3         # SIGCONT it
#   examples/cluster.sh fill-disk N     # fill host N's disk (its data directory's own file system)
#   examples/cluster.sh free-disk N     # free what fill-disk took
#
# As root (namespaces, cgroups, PostgreSQL run as the postgres user).
# docs/cluster.md says more; settings (environment, defaults):
#   CLUSTER_DIR      state: databases, store, hosts' data, logs (/tmp/berth-cluster)
#   CLUSTER_NAME     prefix of the namespaces, bridge and cgroups (berthc)
#   CLUSTER_NET      the bridge's /24, as its first three octets (100.87.1)
#   CLUSTER_HOSTS    how many workers (3)
#   CLUSTER_TEMPORAL_PORT, CLUSTER_S3_PORT, CLUSTER_PG_PORT   (7233, 7070, 55432)
#   CLUSTER_HEARTBEAT   the workers' --heartbeat-timeout (5s)
#   CLUSTER_HOST_DISK   the size of each host's disk, an ext4 image mounted on its data directory (4G)
#   CLUSTER_STORE_RETRY the workers' --store-retry (their default, 2m, when empty)
#   CLUSTER_STORE_REQUEST_TIMEOUT the workers' --store-request-timeout (their default, 1m, when empty)
#   CLUSTER_MIN_FREE_DISK the workers' --min-free-disk (their default when empty)
#   CLUSTER_WORKER_ARGS more arguments of every worker (--workflow-cache 300)
#   CLUSTER_WORKER_ENV  VAR=value words set in every worker's environment (a model: BERTH_MODEL=... OPENAI_BASE_URL=...)
#   BERTH_BIN        a directory with berth-host and berth-sandboxd (default: built into CLUSTER_DIR/bin)
#   TEMPORAL_SQL_TOOL   a temporal-sql-tool of the server's version (default: berth-host's own)
# After up, CLUSTER_DIR/env holds what clients need (TEMPORAL_ADDRESS,
# TEMPORAL_NAMESPACE, the store's URL and keys): source it.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
dir=${CLUSTER_DIR:-/tmp/berth-cluster}
name=${CLUSTER_NAME:-berthc}
net=${CLUSTER_NET:-100.87.1}
hosts=${CLUSTER_HOSTS:-3}
temporal_port=${CLUSTER_TEMPORAL_PORT:-7233}
s3_port=${CLUSTER_S3_PORT:-7070}
pg_port=${CLUSTER_PG_PORT:-55432}
heartbeat=${CLUSTER_HEARTBEAT:-5s}
host_disk=${CLUSTER_HOST_DISK:-4G}
store_retry=${CLUSTER_STORE_RETRY:-}
min_free_disk=${CLUSTER_MIN_FREE_DISK:-}
store_request_timeout=${CLUSTER_STORE_REQUEST_TIMEOUT:-}
worker_args=${CLUSTER_WORKER_ARGS:-}
worker_env=${CLUSTER_WORKER_ENV:-}

bridge=${name}0
gw=$net.1
# The cgroup v1 controllers berth's linux provider puts sandboxes in,
# below the cgroup of the worker that makes them: a host's cgroup holds
# its worker and every sandbox it made, so that kill-host kills them all.
controllers=(memory cpu pids freezer)
cgroups=/sys/fs/cgroup

log() { echo "cluster: $*" >&2; }
die() { log "$*"; exit 1; }

[ "${#name}" -le 12 ] || die "CLUSTER_NAME $name: at most 12 characters (interface names are 15 at most)"
[ "$(id -u)" = 0 ] || die "run as root: it makes network namespaces and cgroups"

netns() { echo "$name-h$1"; }
hostdir() { echo "$dir/h$1"; }

# alive PIDFILE: the process of PIDFILE runs, and is ours (its command
# line names CLUSTER_DIR), not a process that got its pid since.
alive() {
  local pid
  [ -f "$1" ] || return 1
  pid=$(cat "$1")
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$dir"
}

# stop_pid PIDFILE: SIGKILL its process and wait until it is gone.
stop_pid() {
  if alive "$1"; then
    local pid
    pid=$(cat "$1")
    kill -KILL "$pid" 2>/dev/null || true
    for _ in $(seq 100); do [ -d "/proc/$pid" ] && [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ] || break; sleep 0.05; done
  fi
  rm -f "$1"
}

# wait_log FILE TEXT PIDFILE SECONDS: wait for TEXT in FILE while the
# process runs.
wait_log() {
  local deadline=$((SECONDS + $4))
  until grep -qF -- "$2" "$1" 2>/dev/null; do
    alive "$3" || { tail -n 30 "$1" >&2 || true; die "$(basename "$1" .log) exited before it was ready (log: $1)"; }
    [ $SECONDS -lt "$deadline" ] || { tail -n 30 "$1" >&2 || true; die "$(basename "$1" .log) not ready after $4 s (log: $1)"; }
    sleep 0.1
  done
}

# spawn PIDFILE LOG CMD...: start CMD in the background, in its own
# session, its output to LOG.
spawn() {
  local pidfile=$1 logfile=$2 pid
  shift 2
  setsid "$@" >>"$logfile" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$pidfile"
  # Until the child has exec'd, its cmdline is this shell's, which alive
  # does not take for it: wait for the exec (or the child's end), so
  # that a check right after does not find a starting process gone.
  local deadline=$((SECONDS + 10))
  while [ -r "/proc/$pid/cmdline" ] && ! tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$dir"; do
    [ $SECONDS -lt "$deadline" ] || break
    sleep 0.05
  done
}

binaries() {
  if [ -n "${BERTH_BIN:-}" ]; then
    bin=$BERTH_BIN
  else
    bin=$dir/bin
    log "building berth-host and berth-sandboxd into $bin"
    (cd "$repo" && go build -o "$bin/" ./cmd/berth-host && CGO_ENABLED=0 go build -o "$bin/" ./cmd/berth-sandboxd)
  fi
  [ -x "$bin/berth-host" ] || die "no berth-host in $bin"
}

start_postgres() {
  local pg=$dir/pg
  command -v initdb >/dev/null || PATH=$PATH:$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | tail -n 1)
  command -v initdb >/dev/null || die "PostgreSQL is not installed (apt-get install postgresql)"
  id postgres >/dev/null 2>&1 || die "no postgres user (apt-get install postgresql makes it)"
  mkdir -p "$pg/sock"
  head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$pg/password"
  chown -R postgres: "$pg"
  chmod 700 "$pg"
  runuser -u postgres -- initdb -D "$pg/data" -U temporal --pwfile="$pg/password" -E UTF8 \
    --auth-local=peer --auth-host=scram-sha-256 >"$pg/initdb.log" 2>&1 || { cat "$pg/initdb.log" >&2; die "initdb failed"; }
  # Loopback only, and a socket in its own directory, so that it
  # neither meets the system's PostgreSQL nor is reached from outside.
  runuser -u postgres -- pg_ctl -D "$pg/data" -l "$pg/postgres.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $pg_port -k $pg/sock -c max_connections=200 -c fsync=on" start >/dev/null ||
    { tail -n 20 "$pg/postgres.log" >&2; die "PostgreSQL did not start"; }
}

# apply_schema: Temporal's own SQL tool (linked into berth-host, at the
# version of the server it serves) creates both databases and applies the
# schema built into it.
apply_schema() {
  local db
  for db in temporal:temporal temporal_visibility:visibility; do
    local schema=postgresql/v12/${db#*:}
    db=${db%%:*}
    for step in create-database "setup-schema -v 0.0" "update-schema --schema-name $schema"; do
      # shellcheck disable=SC2086 # step holds a command and its flags
      SQL_PASSWORD=$(cat "$dir/pg/password") "${sql_tool[@]}" --plugin postgres12 --ep 127.0.0.1 -p "$pg_port" -u temporal \
        --db "$db" $step >>"$dir/schema.log" 2>&1 || { tail -n 20 "$dir/schema.log" >&2; die "temporal-sql-tool $step on $db failed"; }
    done
  done
}

start_network() {
  ip link add "$bridge" type bridge
  ip addr add "$gw/24" dev "$bridge"
  ip link set "$bridge" up
  local i ns
  for i in $(seq "$hosts"); do
    ns=$(netns "$i")
    ip netns add "$ns"
    ip link add "${name}h$i" type veth peer name "${name}p$i"
    ip link set "${name}p$i" netns "$ns"
    ip -n "$ns" link set "${name}p$i" name eth0
    ip -n "$ns" addr add "$net.$((10 + i))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    ip link set "${name}h$i" master "$bridge" up
  done
}

s3_keys() {
  mkdir -p "$dir/s3/data"
  echo "berth$RANDOM$RANDOM" >"$dir/s3/access"
  head -c 24 /dev/urandom | base64 | tr -d '/+=' >"$dir/s3/secret"
}

# s3_request METHOD: a signed request on the bucket (the SHA-256 is
# that of the empty body): PUT creates it, HEAD finds it.
s3_request() {
  local head=()
  [ "$1" != HEAD ] || head=(-I)
  curl -sf -o /dev/null --max-time 5 --aws-sigv4 "aws:amz:us-east-1:s3" --user "$(cat "$dir/s3/access"):$(cat "$dir/s3/secret")" \
    -H "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" \
    "${head[@]}" -X "$1" "http://$gw:$s3_port/berth"
}

# start_s3: versitygw on the store's directory and keys, which a
# restart keeps: what was stored before is there again.
start_s3() {
  command -v versitygw >/dev/null || die "versitygw is not installed (.ci/run installs it)"
  alive "$dir/s3.pid" && { log "the S3 store already runs"; return; }
  spawn "$dir/s3.pid" "$dir/s3.log" versitygw --access "$(cat "$dir/s3/access")" --secret "$(cat "$dir/s3/secret")" \
    --port "$gw:$s3_port" posix "$dir/s3/data"
  local deadline=$((SECONDS + 30))
  until s3_request HEAD || s3_request PUT; do
    alive "$dir/s3.pid" || { tail -n 30 "$dir/s3.log" >&2; die "versitygw exited"; }
    [ $SECONDS -lt "$deadline" ] || die "versitygw did not serve the bucket in 30 s"
    sleep 0.1
  done
}

# signal_s3 SIGNAL: freeze (STOP) or thaw (CONT) the store.
signal_s3() {
  alive "$dir/s3.pid" || die "the S3 store does not run"
  kill -"$1" "$(cat "$dir/s3.pid")"
}

# mount_disk N: host N's data directory is a file system of its own, of
# CLUSTER_HOST_DISK (a sparse ext4 image on a loop device), so that
# filling it fills that host alone.
mount_disk() {
  local hd img
  hd=$(hostdir "$1")
  img=$dir/h$1.disk
  mkdir -p "$hd"
  mountpoint -q "$hd" && return
  [ -f "$img" ] || {
    truncate -s "$host_disk" "$img"
    mkfs.ext4 -q -F -m 0 -E lazy_itable_init=1,nodiscard "$img" >/dev/null || die "mkfs.ext4 of $img failed"
  }
  mount -o loop "$img" "$hd" || die "mount $img on $hd failed"
}

# fill_disk N: take every free block of host N's disk, in one file.
fill_disk() {
  local hd avail
  hd=$(hostdir "$1")
  mountpoint -q "$hd" || die "host $1 has no disk of its own mounted at $hd"
  avail=$(df -B1 --output=avail "$hd" | tail -n 1 | tr -d ' ')
  # What ext4 needs for the file's own extents comes off what it says
  # is free: ask for less until it fits.
  while [ "$avail" -gt 0 ] && ! fallocate -l "$avail" "$hd/fill-disk" 2>/dev/null; do
    avail=$((avail - 1048576))
  done
  log "host $1: disk filled ($(df -h --output=avail "$hd" | tail -n 1 | tr -d ' ') left)"
}

start_server() {
  alive "$dir/server.pid" && { log "the Temporal server already runs"; return; }
  # A fresh log, so that the wait below reads this start's lines.
  [ ! -f "$dir/server.log" ] || { cat "$dir/server.log" >>"$dir/server.log.old"; : >"$dir/server.log"; }
  BERTH_POSTGRES_PASSWORD=$(cat "$dir/pg/password") spawn "$dir/server.pid" "$dir/server.log" "$bin/berth-host" server \
    --address "$gw:$temporal_port" --postgres-address "127.0.0.1:$pg_port" --postgres-user temporal --data-dir "$dir/temporal"
  wait_log "$dir/server.log" "berth server is ready" "$dir/server.pid" 120
}

blob_url() { echo "s3://berth?endpoint=http://$gw:$s3_port&use_path_style=true&region=us-east-1"; }

start_host() {
  local i=$1 ns c cg
  ns=$(netns "$i")
  for c in "${controllers[@]}"; do
    mkdir -p "$cgroups/$c/$name/h$i"
  done
  mount_disk "$i"
  : >"$dir/h$i.log"
  # The shell joins the host's cgroups, then becomes the worker in the
  # host's network namespace (nsenter: ip netns exec would remount
  # /sys, and with it the cgroup hierarchies, in a namespace of its own).
  # shellcheck disable=SC2016,SC2086 # expanded by the inner shell; worker_env and worker_args are words
  AWS_ACCESS_KEY_ID=$(cat "$dir/s3/access") AWS_SECRET_ACCESS_KEY=$(cat "$dir/s3/secret") \
    AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null \
    spawn "$dir/h$i.pid" "$dir/h$i.log" env -u BERTH_MODEL -u OPENAI_API_KEY -u OPENAI_BASE_URL -u TEMPORAL_API_KEY $worker_env \
    sh -c 'for c in "$@"; do case $c in --) break;; esac; echo $$ >"$c/cgroup.procs"; done
           while [ "$1" != -- ]; do shift; done; shift; exec "$@"' cgroups \
    $(for c in "${controllers[@]}"; do echo "$cgroups/$c/$name/h$i"; done) -- \
    nsenter --net="/run/netns/$ns" "$bin/berth-host" worker --address "$gw:$temporal_port" --namespace default \
    --data-dir "$(hostdir "$i")" --blob "$(blob_url)" --host-queue "berth@h$i" --provider linux \
    --heartbeat-timeout "$heartbeat" ${store_retry:+--store-retry "$store_retry"} ${store_request_timeout:+--store-request-timeout "$store_request_timeout"} ${min_free_disk:+--min-free-disk "$min_free_disk"} $worker_args
}

# kill_host N: the host is lost for good: its worker and every process
# of its cgroups (its sandboxes) killed, its namespace and link deleted.
kill_host() {
  local i=$1 c cg pids
  stop_pid "$dir/h$i.pid"
  cg=$cgroups/pids/$name/h$i
  if [ -d "$cg" ]; then
    # Freeze, kill, thaw: nothing forks its way out meanwhile.
    [ -d "$cgroups/freezer/$name/h$i" ] && echo FROZEN >"$cgroups/freezer/$name/h$i/freezer.state" 2>/dev/null || true
    for _ in $(seq 100); do
      pids=$(find "$cg" -name cgroup.procs -exec cat {} + 2>/dev/null || true)
      [ -n "$pids" ] || break
      # shellcheck disable=SC2086
      kill -KILL $pids 2>/dev/null || true
      [ -d "$cgroups/freezer/$name/h$i" ] && echo THAWED >"$cgroups/freezer/$name/h$i/freezer.state" 2>/dev/null || true
      sleep 0.05
    done
  fi
  for c in "${controllers[@]}"; do
    [ -d "$cgroups/$c/$name/h$i" ] && find "$cgroups/$c/$name/h$i" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  ip netns del "$(netns "$i")" 2>/dev/null || true
  ip link del "${name}h$i" 2>/dev/null || true
  # Workspaces the killed sandboxes had mounted or attached.
  release_mounts "$(hostdir "$i")"
}

# partition N: host N's namespace drops every packet to and from the
# bridge's address, where the Temporal server and the store listen
# (nftables in the host's namespace): its worker and its sandboxes run
# on, cut off, their connections hanging as across a broken network
# rather than refused. The sandboxes' own namespaces are not touched.
partition() {
  local ns
  ns=$(netns "$1")
  ip netns list | grep -qw "$ns" || die "no host $1 ($ns)"
  nsenter --net="/run/netns/$ns" nft -f - <<EOF
table inet berth_partition
delete table inet berth_partition
table inet berth_partition {
  chain input { type filter hook input priority -10; policy accept; ip saddr $gw drop; }
  chain output { type filter hook output priority -10; policy accept; ip daddr $gw drop; }
}
EOF
}

# heal N: undo partition N; the connections cut come back (or time out
# and are made again) on their own.
heal() {
  local ns
  ns=$(netns "$1")
  ip netns list | grep -qw "$ns" || die "no host $1 ($ns)"
  nsenter --net="/run/netns/$ns" nft delete table inet berth_partition 2>/dev/null || true
}

# release_mounts DIR: unmount what is mounted below DIR, detach the loop
# devices of its files.
release_mounts() {
  local m l
  for m in $(findmnt -rn -o TARGET | grep -F -- "$1/" | sort -r || true); do umount -l "$m" 2>/dev/null || true; done
  for l in $(losetup -nl -O NAME,BACK-FILE 2>/dev/null | awk -v d="$1/" 'index($2, d) == 1 {print $1}'); do losetup -d "$l" 2>/dev/null || true; done
}

write_env() {
  umask 077
  cat >"$dir/env" <<EOF
export TEMPORAL_ADDRESS=$gw:$temporal_port
export TEMPORAL_NAMESPACE=default
export BERTH_BLOB='$(blob_url)'
export AWS_ACCESS_KEY_ID=$(cat "$dir/s3/access")
export AWS_SECRET_ACCESS_KEY=$(cat "$dir/s3/secret")
export AWS_REGION=us-east-1
EOF
}

up() {
  [ ! -e "$dir/up" ] || die "already up in $dir (examples/cluster.sh down first)"
  ! ip link show "$bridge" >/dev/null 2>&1 || die "a bridge $bridge exists: another cluster of this CLUSTER_NAME runs (down it first)"
  mkdir -p "$dir"
  chmod 755 "$dir" # the postgres user reaches its directory inside
  touch "$dir/up"
  binaries
  echo "$bin" >"$dir/bin.path"
  log "PostgreSQL on 127.0.0.1:$pg_port"
  start_postgres
  if [ -n "${TEMPORAL_SQL_TOOL:-}" ]; then sql_tool=("$TEMPORAL_SQL_TOOL"); else sql_tool=("$bin/berth-host" temporal-sql-tool); fi
  log "schema, with ${sql_tool[*]}"
  apply_schema
  log "network: bridge $bridge ($gw/24), namespaces $(netns 1)..$(netns "$hosts")"
  start_network
  log "S3 (versitygw) at $gw:$s3_port"
  s3_keys
  start_s3
  log "Temporal server at $gw:$temporal_port"
  start_server
  local i
  for i in $(seq "$hosts"); do
    log "host $i: $(netns "$i") at $net.$((10 + i)), queue berth@h$i"
    start_host "$i"
  done
  for i in $(seq "$hosts"); do
    wait_log "$dir/h$i.log" "berth worker is ready" "$dir/h$i.pid" 120
  done
  write_env
  log "up: source $dir/env to use it"
}

down() {
  local i
  for i in $(seq "$hosts"); do kill_host "$i"; done
  # Hosts of an earlier run with more of them.
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$name-h[0-9]+$" || true); do
    kill_host "${ns##*-h}"
  done
  stop_pid "$dir/server.pid"
  stop_pid "$dir/s3.pid"
  if [ -f "$dir/pg/data/postmaster.pid" ]; then
    runuser -u postgres -- "$(command -v pg_ctl || ls /usr/lib/postgresql/*/bin/pg_ctl | tail -n 1)" -D "$dir/pg/data" -m immediate -w stop >/dev/null 2>&1 || true
  fi
  ip link del "$bridge" 2>/dev/null || true
  for c in "${controllers[@]}"; do
    [ -d "$cgroups/$c/$name" ] && find "$cgroups/$c/$name" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  if [ -d "$dir" ]; then
    release_mounts "$dir"
    rm -rf "$dir"
  fi
  log "down"
}

status() {
  local ok=0 i
  if [ -f "$dir/pg/data/postmaster.pid" ] && runuser -u postgres -- pg_isready -q -h "$dir/pg/sock" -p "$pg_port" 2>/dev/null; then
    echo "postgresql  up    127.0.0.1:$pg_port"
  else
    echo "postgresql  down"; ok=1
  fi
  if alive "$dir/server.pid"; then echo "temporal    up    $gw:$temporal_port (pid $(cat "$dir/server.pid"))"; else echo "temporal    down"; ok=1; fi
  if alive "$dir/s3.pid" && [ "$(awk '{print $3}' "/proc/$(cat "$dir/s3.pid")/stat")" = T ]; then
    echo "s3          frozen $gw:$s3_port (pid $(cat "$dir/s3.pid"))"; ok=1
  elif alive "$dir/s3.pid"; then echo "s3          up    $gw:$s3_port (pid $(cat "$dir/s3.pid"))"; else echo "s3          down"; ok=1; fi
  for i in $(seq "$hosts"); do
    if alive "$dir/h$i.pid" && ip netns list | grep -qw "$(netns "$i")"; then
      echo "host $i      up    $(netns "$i") $net.$((10 + i)) berth@h$i (pid $(cat "$dir/h$i.pid"))"
    else
      echo "host $i      down"; ok=1
    fi
  done
  return $ok
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  kill-host) [ -n "${2:-}" ] || die "kill-host N"; kill_host "$2"; log "host $2 killed" ;;
  partition) [ -n "${2:-}" ] || die "partition N"; partition "$2"; log "host $2 cut from the server and the store" ;;
  heal) [ -n "${2:-}" ] || die "heal N"; heal "$2"; log "host $2 healed" ;;
  kill-server) stop_pid "$dir/server.pid"; log "Temporal server killed" ;;
  start-server) [ -e "$dir/up" ] || die "not up"; bin=$(cat "$dir/bin.path"); start_server ;;
  stop-s3) stop_pid "$dir/s3.pid"; log "S3 store killed" ;;
  start-s3) [ -e "$dir/up" ] || die "not up"; start_s3; log "S3 store started" ;;
  freeze-s3) signal_s3 STOP; log "S3 store frozen" ;;
  thaw-s3) signal_s3 CONT; log "S3 store thawed" ;;
  fill-disk) [ -n "${2:-}" ] || die "fill-disk N"; fill_disk "$2" ;;
  free-disk) [ -n "${2:-}" ] || die "free-disk N"; rm -f "$(hostdir "$2")/fill-disk"; log "host $2: disk freed" ;;
  *) echo "usage: $0 up | down | status | kill-host N | partition N | heal N | kill-server | start-server | stop-s3 | start-s3 | freeze-s3 | thaw-s3 | fill-disk N | free-disk N" >&2; exit 2 ;;
esac
