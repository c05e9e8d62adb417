#!/usr/bin/env bash
# Install, start and stop the peers Meridian is compared with (issue 7),
# on loopback only, from Debian's packages.
#
#   scripts/peers.sh start redis     # redis-server on 127.0.0.1:6379, no persistence
#   scripts/peers.sh stop redis
#   scripts/peers.sh status
#
# Redis runs without persistence (save "", appendonly no): the match of
# Meridian's memory mode (FaRM's non-volatile DRAM assumption). Its data
# and log live in .peers/redis under the project root, removed by `stop`.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD/.peers"
cmd="${1:-}"
peer="${2:-}"

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
  pkill -f "redis-server .*:6379" 2>/dev/null || true
}

start_redis() {
  install_redis
  mkdir -p "$ROOT/redis"
  if redis-cli -p 6379 ping >/dev/null 2>&1; then
    echo "redis already answers on 127.0.0.1:6379"
    return
  fi
  redis-server --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
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

case "$cmd/$peer" in
  start/redis) start_redis ;;
  stop/redis) stop_redis ;;
  status/*)
    if redis-cli -p 6379 ping >/dev/null 2>&1; then echo "redis: up on 127.0.0.1:6379"; else echo "redis: down"; fi
    ;;
  *)
    echo "usage: scripts/peers.sh start|stop redis | status" >&2
    echo "(postgres and etcd are not wired yet: issue 7)" >&2
    exit 2
    ;;
esac
