#!/usr/bin/env bash
# Install, start and stop the peers Meridian is compared with (issue 7),
# on loopback only, from Debian's packages.
#
#   scripts/peers.sh start redis     # redis-server on 127.0.0.1:6379, no persistence
#   scripts/peers.sh start postgres  # PostgreSQL 15 on 127.0.0.1:5432, fsync on
#   scripts/peers.sh start etcd      # etcd on 127.0.0.1:2379, WAL fsync on
#   scripts/peers.sh start all
#   scripts/peers.sh stop redis|postgres|etcd|all
#   scripts/peers.sh status
#   PEER_CPUS=1 scripts/peers.sh start all   # servers on CPU 1 only (taskset -c
#                                            # syntax), the match of
#                                            # `meridian-bench --node-cpus 1`
#
# Durability is matched to Meridian's modes: Redis runs without persistence
# (save "", appendonly no), the match of Meridian's memory mode (FaRM's
# non-volatile DRAM assumption); PostgreSQL and etcd fsync every commit,
# the match of Meridian's disk mode. Data and logs live in .peers/<peer>
# under the project root, removed by `stop`.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD/.peers"
cmd="${1:-}"
peer="${2:-}"
# The servers' CPUs (PEER_CPUS, taskset -c syntax), or every CPU.
PIN=()
if [ -n "${PEER_CPUS:-}" ]; then
  taskset -c "$PEER_CPUS" true || { echo "PEER_CPUS=$PEER_CPUS: not a usable CPU list" >&2; exit 1; }
  PIN=(taskset -c "$PEER_CPUS")
fi

need_root() {
  if [ "$(id -u)" != 0 ]; then
    echo "installing $1 needs root (apt-get)" >&2
    exit 1
  fi
}

install_redis() {
  if ! command -v redis-server >/dev/null; then
    need_root redis-server
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools >/dev/null
  fi
  # The package starts a system instance on 6379: stop it, ours runs instead.
  if command -v systemctl >/dev/null && systemctl is-active --quiet redis-server 2>/dev/null; then
    systemctl stop redis-server || true
  fi
  # (Only one not started by this script: ours has a pid file.)
  if [ ! -f "$ROOT/redis/redis.pid" ]; then pkill -f "redis-server .*:6379" 2>/dev/null || true; fi
}

start_redis() {
  if command -v redis-cli >/dev/null && redis-cli -p 6379 ping >/dev/null 2>&1; then
    echo "redis already answers on 127.0.0.1:6379"
    return
  fi
  install_redis
  mkdir -p "$ROOT/redis"
  "${PIN[@]}" redis-server --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
    --dir "$ROOT/redis" --logfile "$ROOT/redis/redis.log" --daemonize yes \
    --pidfile "$ROOT/redis/redis.pid"
  for _ in $(seq 50); do
    redis-cli -p 6379 ping >/dev/null 2>&1 && { echo "redis started on 127.0.0.1:6379 (no persistence)"; return; }
    sleep 0.1
  done
  echo "redis did not start; see $ROOT/redis/redis.log" >&2
  exit 1
}

stop_redis() {
  if [ -f "$ROOT/redis/redis.pid" ]; then
    kill "$(cat "$ROOT/redis/redis.pid")" 2>/dev/null || true
  fi
  redis-cli -p 6379 shutdown nosave >/dev/null 2>&1 || true
  rm -rf "$ROOT/redis"
  echo "redis stopped"
}

# ---------------------------------------------------------------- postgres
PG_BIN=/usr/lib/postgresql/15/bin
PG_PORT=5432

install_postgres() {
  if [ ! -x "$PG_BIN/postgres" ]; then
    need_root postgresql-15
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15 >/dev/null
  fi
  # The package's own cluster may hold 5432: ours runs instead.
  if command -v pg_ctlcluster >/dev/null; then pg_ctlcluster 15 main stop 2>/dev/null || true; fi
}

# PostgreSQL refuses to run as root: as root, its files belong to the
# package's `postgres` user and its commands run as that user.
as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

start_postgres() {
  install_postgres
  local dir="$ROOT/postgres"
  if as_pg "$PG_BIN/pg_ctl" -D "$dir" status >/dev/null 2>&1; then
    echo "postgres already runs on 127.0.0.1:$PG_PORT"
    return
  fi
  rm -rf "$dir"
  mkdir -p "$dir"
  [ "$(id -u)" = 0 ] && chown postgres "$dir"
  as_pg "$PG_BIN/initdb" -D "$dir" -U postgres --auth=trust -E UTF8 >/dev/null
  # Durability as shipped (fsync, synchronous_commit, full_page_writes on):
  # a commit returns once its WAL record is on disk, the match of
  # Meridian's disk mode. Enough connections for 256 sessions, buffers
  # that hold the benchmarks' data.
  cat >>"$dir/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$dir'
max_connections = 300
shared_buffers = 2GB
fsync = on
synchronous_commit = on
max_pred_locks_per_transaction = 256
CONF
  as_pg "${PIN[@]}" "$PG_BIN/pg_ctl" -D "$dir" -l "$dir/postgres.log" -w start >/dev/null
  echo "postgres started on 127.0.0.1:$PG_PORT (fsync on, SERIALIZABLE by the driver)"
}

stop_postgres() {
  local dir="$ROOT/postgres"
  if [ -d "$dir" ]; then
    as_pg "$PG_BIN/pg_ctl" -D "$dir" -m fast -w stop >/dev/null 2>&1 || true
    rm -rf "$dir"
  fi
  echo "postgres stopped"
}

# -------------------------------------------------------------------- etcd
# etcd answers /health over plain HTTP; curl is enough (etcdctl ships in
# another package, etcd-client, which a fresh machine may lack).
etcd_healthy() {
  curl -fsS --max-time 1 http://127.0.0.1:2379/health 2>/dev/null | grep -q '"health":"true"'
}

install_etcd() {
  if ! command -v etcd >/dev/null; then
    need_root etcd-server
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null
  fi
  # The package may start a system instance on 2379: ours runs instead.
  pkill -f "^/usr/bin/etcd$" 2>/dev/null || true
}

start_etcd() {
  install_etcd
  local dir="$ROOT/etcd"
  if [ -f "$dir/etcd.pid" ] && kill -0 "$(cat "$dir/etcd.pid")" 2>/dev/null; then
    echo "etcd already runs on 127.0.0.1:2379"
    return
  fi
  rm -rf "$dir"
  mkdir -p "$dir"
  # One member (etcd fsyncs its WAL on every commit; there is no switch
  # to turn that off short of --unsafe-no-fsync, not used). Compaction
  # keeps the benchmarks' update history bounded.
  ETCD_UNSUPPORTED_ARCH= nohup "${PIN[@]}" etcd --name bench --data-dir "$dir/data" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster bench=http://127.0.0.1:2380 \
    --quota-backend-bytes 8589934592 --auto-compaction-mode revision --auto-compaction-retention 100000 \
    >"$dir/etcd.log" 2>&1 &
  echo $! >"$dir/etcd.pid"
  for _ in $(seq 100); do
    if etcd_healthy; then
      echo "etcd started on 127.0.0.1:2379 (WAL fsync on every commit)"
      return
    fi
    sleep 0.1
  done
  echo "etcd did not start; see $dir/etcd.log" >&2
  exit 1
}

stop_etcd() {
  local dir="$ROOT/etcd"
  if [ -f "$dir/etcd.pid" ]; then
    kill "$(cat "$dir/etcd.pid")" 2>/dev/null || true
    sleep 0.5
  fi
  rm -rf "$dir"
  echo "etcd stopped"
}

case "$cmd/$peer" in
  start/redis) start_redis ;;
  stop/redis) stop_redis ;;
  start/postgres) start_postgres ;;
  stop/postgres) stop_postgres ;;
  start/etcd) start_etcd ;;
  stop/etcd) stop_etcd ;;
  start/all) start_redis; start_postgres; start_etcd ;;
  stop/all) stop_redis; stop_postgres; stop_etcd ;;
  status/*)
    if redis-cli -p 6379 ping >/dev/null 2>&1; then echo "redis: up on 127.0.0.1:6379"; else echo "redis: down"; fi
    if [ -d "$ROOT/postgres" ] && as_pg "$PG_BIN/pg_ctl" -D "$ROOT/postgres" status >/dev/null 2>&1; then
      echo "postgres: up on 127.0.0.1:$PG_PORT"; else echo "postgres: down"; fi
    if etcd_healthy; then
      echo "etcd: up on 127.0.0.1:2379"; else echo "etcd: down"; fi
    ;;
  *)
    echo "usage: scripts/peers.sh start|stop redis|postgres|etcd|all | status" >&2
    exit 2
    ;;
esac
