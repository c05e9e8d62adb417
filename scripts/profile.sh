#!/usr/bin/env bash
# Where a TATP transaction's time goes (issue 7, docs/performance.md):
# CPU per committed transaction of the client process and of the nodes
# (from /proc/<pid>/stat over a 10 s window of a running bench), and a
# perf profile of the client and of one node.
#
#   scripts/profile.sh [memory|disk] [sessions] [tatp|ycsb-b|ycsb-a]
set -euo pipefail
cd "$(dirname "$0")/.."
DUR="${1:-memory}"
N="${2:-32}"
W="${3:-tatp}"
OUT=bench-results/profile-$W-$DUR-$N
case "$W" in
  tatp) ARGS=(tatp --subscribers 100000) ;;
  ycsb-*) ARGS=(ycsb --workload "${W#ycsb-}") ;;
  *) echo "unknown workload $W (tatp, ycsb-b, ycsb-a)" >&2; exit 2 ;;
esac
mkdir -p "$OUT"
# The bench runs its cluster's nodes from the meridian binary next to it.
B=target/release/meridian-bench
cargo build --release -q -p meridian-cli -p meridian-bench
"$B" "${ARGS[@]}" --clients "$N" --duration 30 --baseline 0 \
  --durability "$DUR" --dir "$OUT/cluster" --json "$OUT/bench.json" >"$OUT/bench.out" 2>&1 &
BENCH=$!
# Wait for the load to finish and the run to settle.
for _ in $(seq 120); do grep -q "loaded" "$OUT/bench.out" 2>/dev/null && break; sleep 1; done
sleep 4
CLIENT=$(pgrep -f "^$B ${ARGS[0]}" | head -1)
NODES=$(pgrep -f "meridian node .*$OUT/cluster" | tr '\n' ' ')
ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
declare -A before
for p in $CLIENT $NODES; do before[$p]=$(ticks "$p"); done
t0=$(date +%s.%N)
# perf: the client and the first node, 5 s each at once.
FIRST=$(echo "$NODES" | awk '{print $1}')
perf record -F 999 -g -o "$OUT/client.perf" -p "$CLIENT" -- sleep 5 >/dev/null 2>&1 &
perf record -F 999 -g -o "$OUT/node.perf" -p "$FIRST" -- sleep 5 >/dev/null 2>&1 &
sleep 10
t1=$(date +%s.%N)
HZ=$(getconf CLK_TCK)
{
  echo "window: $(echo "$t1 - $t0" | bc) s"
  echo "client cpu s: $(echo "($(ticks "$CLIENT") - ${before[$CLIENT]}) / $HZ" | bc -l)"
  for p in $NODES; do echo "node $p cpu s: $(echo "($(ticks "$p") - ${before[$p]}) / $HZ" | bc -l)"; done
} | tee "$OUT/cpu.txt"
wait $BENCH || true
grep -E "committed|clock" "$OUT/bench.out" | tee -a "$OUT/cpu.txt"
for f in client node; do
  perf report -i "$OUT/$f.perf" --no-children --sort symbol --stdio 2>/dev/null \
    | grep -E "^ +[0-9]" | head -30 >"$OUT/$f-top.txt" || true
done
echo "written $OUT/{cpu.txt,client-top.txt,node-top.txt}"
