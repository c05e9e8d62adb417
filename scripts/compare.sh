#!/usr/bin/env bash
# Issue 7's side-by-side figures, one system at a time, in one run:
# Meridian against PostgreSQL (TATP, TPC-C; disk durability, fsync on),
# Redis (YCSB-A/B; memory durability, no persistence), etcd (RMW; disk,
# fsync on), the null-RPC rate against redis-benchmark GET, and TATP at
# 100k and 1M subscribers. Results: bench-results/compare/*.json and a
# summary in bench-results/compare/summary.txt.
#
#   scripts/compare.sh [seconds per run, default 15] ["parts", default all:
#                      "tatp tpcc ycsb rmw rpc scale"]
#
# PAIRS=N (default 1) runs each peer-against-Meridian comparison N times,
# alternating, and prints each figure's ratio pooled over the pairs (total
# Meridian rate over total peer rate). The machine is shared: a busy
# stretch that hits one system and not the other moved single ratios by up
# to 40 % (docs/performance.md), and alternating pairs spread it over both.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS="${1:-15}"
# Which parts to run (default all): tatp tpcc ycsb rmw rpc scale.
PARTS="${2:-tatp tpcc ycsb rmw rpc scale}"
want() { [[ " $PARTS " == *" $1 "* ]]; }
OUT=bench-results/compare
mkdir -p "$OUT"
# The bench runs its clusters' nodes from the meridian binary next to it.
B=target/release/meridian-bench
cargo build --release -q -p meridian-cli -p meridian-bench
bash scripts/peers.sh start all >/dev/null
trap 'bash scripts/peers.sh stop all >/dev/null 2>&1 || true' EXIT
SUM="$OUT/summary.txt"
[ "$PARTS" = "tatp tpcc ycsb rmw rpc scale" ] && : >"$SUM"
RAN=""
run() { # name, then the bench arguments
  local name="$1"; shift
  RAN="$RAN $name"
  echo "== $name: $*" | tee -a "$SUM"
  if "$B" "$@" --json "$OUT/$name.json" >"$OUT/$name.out" 2>&1; then
    grep -E "committed:|MQTh|tpmC|clock:|null-RPC|null RPC|cpu per|per stage|memory:|audit|consistency|lease false|^all " "$OUT/$name.out" | tee -a "$SUM" || true
  else
    echo "FAILED (see $OUT/$name.out)" | tee -a "$SUM"
  fi
}
CMP_PAIRS="${PAIRS:-1}"
# Run name suffix of pair $1 (the first pair keeps the plain names).
sfx() { if [ "$1" = 1 ]; then echo ""; else echo "-p$1"; fi; }
for p in $(seq "$CMP_PAIRS"); do
s=$(sfx "$p")
if want tatp; then for n in 8 32; do
  run "tatp-pg-$n$s" tatp --target postgres --subscribers 100000 --clients $n --duration "$SECS"
  run "tatp-meridian-disk-$n$s" tatp --subscribers 100000 --clients $n --duration "$SECS" --baseline 5
done; fi
if want tpcc; then
run "tpcc-pg-16$s" tpcc --target postgres --warehouses 2 --clients 16 --duration "$SECS"
run "tpcc-meridian-disk-16$s" tpcc --warehouses 2 --clients 16 --duration "$SECS" --baseline 0
fi
if want ycsb; then for w in b a; do
  run "ycsb-$w-redis-16$s" ycsb --target redis --workload $w --clients 16 --duration "$SECS"
  # --baseline 5: the null-RPC rate at the same 16 sessions, the floor
  # of a round trip here (docs/performance.md, goal 3).
  run "ycsb-$w-meridian-memory-16$s" ycsb --workload $w --clients 16 --duration "$SECS" --durability memory --baseline 5
done; fi
if want rmw; then for n in 8 32; do
  run "rmw-etcd-$n$s" rmw --target etcd --clients $n --duration "$SECS"
  run "rmw-meridian-disk-$n$s" rmw --clients $n --duration "$SECS" --baseline 0
done; fi
done
if [ "$CMP_PAIRS" -gt 1 ]; then
python3 - "$OUT" "$CMP_PAIRS" "$PARTS" <<'EOF' | tee -a "$SUM"
import json, sys
out, pairs, parts = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
def rate(name, key):
    try:
        r = json.load(open(f"{out}/{name}.json"))
    except (OSError, ValueError):
        return None
    return r.get(key) if key == "committed_per_s" else r.get("extra", {}).get(key)
figures = []
if "tatp" in parts:
    figures += [(f"TATP {n} sessions vs PostgreSQL", f"tatp-meridian-disk-{n}", f"tatp-pg-{n}", "committed_per_s") for n in (8, 32)]
if "tpcc" in parts:
    figures += [("TPC-C NEW_ORDER/s vs PostgreSQL", "tpcc-meridian-disk-16", "tpcc-pg-16", "new_order_per_s")]
if "ycsb" in parts:
    figures += [(f"YCSB-{w.upper()} vs Redis", f"ycsb-{w}-meridian-memory-16", f"ycsb-{w}-redis-16", "committed_per_s") for w in ("b", "a")]
if "rmw" in parts:
    figures += [(f"RMW {n} sessions vs etcd", f"rmw-meridian-disk-{n}", f"rmw-etcd-{n}", "committed_per_s") for n in (8, 32)]
for label, mine, peer, key in figures:
    m_sum, p_sum, each = 0.0, 0.0, []
    for i in range(1, pairs + 1):
        s = "" if i == 1 else f"-p{i}"
        m, q = rate(mine + s, key), rate(peer + s, key)
        if not m or not q:
            each.append(f"pair {i}: missing")
            continue
        m_sum += m
        p_sum += q
        each.append(f"{m:.0f}/{q:.0f} = {m / q:.2f}")
    pooled = f"{m_sum / p_sum:.2f}x" if p_sum > 0 else "n/a"
    print(f"pooled over {pairs} pairs: {label}: {pooled} ({'; '.join(each)})")
EOF
fi
if want rpc; then
# The null-RPC rate against redis-benchmark GET, 32 connections each.
run rpc-32 rpc --clients 32 --duration 10
echo "== redis-benchmark GET, 32 connections" | tee -a "$SUM"
redis-benchmark -q -t get -c 32 -n 500000 -d 100 | tr '\r' '\n' | grep -E "GET:.*requests per second" | tail -1 | tee -a "$SUM" || true
fi
if want scale; then
# TATP at 1M subscribers against 100k (memory durability, so the figure
# is the store's, not the disk's), in alternating pairs: one pair swung
# from 0.95 to 0.66 between runs minutes apart on this machine, so the
# ratio is pooled over the pairs (total 1M commits over total 100k).
PAIRS="${SCALE_PAIRS:-2}"
for i in $(seq "$PAIRS"); do
  run "tatp-memory-100k-$i" tatp --subscribers 100000 --clients 32 --duration "$SECS" --durability memory --baseline 0
  run "tatp-memory-1m-$i" tatp --subscribers 1000000 --clients 32 --duration "$SECS" --durability memory --baseline 0
done
python3 - "$OUT" "$PAIRS" <<'EOF' | tee -a "$SUM"
import json, sys
out, pairs = sys.argv[1], int(sys.argv[2])
def rate(name):
    try:
        r = json.load(open(f"{out}/{name}.json"))
    except (OSError, ValueError):
        return None
    ex = r.get("extra", {})
    # A reconfiguration during the load or the run leaves the measured
    # run on another placement: say so beside the figure.
    flag = ex.get("config_commits", 0) > 0
    return r["committed_per_s"], flag
small, big, each = 0.0, 0.0, []
for i in range(1, pairs + 1):
    a, b = rate(f"tatp-memory-100k-{i}"), rate(f"tatp-memory-1m-{i}")
    if a is None or b is None:
        each.append(f"pair {i}: missing")
        continue
    small += a[0]; big += b[0]
    note = " (reconfigured)" if a[1] or b[1] else ""
    each.append(f"pair {i}: {b[0]:.0f} / {a[0]:.0f} = {b[0] / a[0]:.2f}{note}")
pooled = f"{big / small:.2f}" if small > 0 else "n/a"
print(f"goal 8: TATP 1M / 100k, memory, 32 sessions, pooled over {pairs} pairs: {pooled} ({'; '.join(each)})")
EOF
fi
# CPU per transaction of every run of this invocation (client: the bench
# process; servers: the nodes, or the peer's processes), beside its rate:
# the cost of a transaction, steadier than the rate on this shared machine.
python3 - "$OUT" $RAN <<'EOF' | tee -a "$SUM"
import json, sys
out, names = sys.argv[1], sys.argv[2:]
print(f"{'run':<30} {'tx/s':>9} {'client µs/tx':>13} {'servers µs/tx':>14} {'total µs/tx':>12}")
for n in names:
    try:
        r = json.load(open(f"{out}/{n}.json"))
    except (OSError, ValueError):
        continue
    x = r.get("extra", {})
    c, s = x.get("client_cpu_us_per_tx"), x.get("server_cpu_us_per_tx")
    if c is None:
        continue
    tot = f"{c + s:.1f}" if s is not None else "-"
    sv = f"{s:.1f}" if s is not None else "-"
    print(f"{n:<30} {r['committed_per_s']:>9.0f} {c:>13.1f} {sv:>14} {tot:>12}")
EOF
echo "summary in $SUM"
