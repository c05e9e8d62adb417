#!/usr/bin/env bash
# Check that the release server binary (`meridian`, package meridian-cli),
# built on its own, carries none of the bench's peer drivers or plotting
# and none of the injected-bug code.
#
# It builds `cargo build --release -p meridian-cli` by itself on purpose:
# cargo unifies features across one build, so a workspace build that
# enables a feature for another package's sake (the simulator's tests
# enabling `sim-bugs`) would compile it into the server binary too. This
# build is what ships; the check reads its symbols (nm) and strings.
#
# Usage: scripts/check-server-binary.sh            # build, then check
#        scripts/check-server-binary.sh --no-build BINARY   # check BINARY only
# Exits non-zero on a hit, or if the binary has no symbols to check.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--no-build" ]; then
  BIN=${2:?usage: $0 --no-build BINARY}
else
  echo "== cargo build --release -p meridian-cli (on its own)"
  cargo build --release -p meridian-cli
  BIN="${CARGO_TARGET_DIR:-target}/release/meridian"
fi
[ -f "$BIN" ] || { echo "no binary at $BIN" >&2; exit 2; }
command -v nm >/dev/null || { echo "nm (binutils) is needed" >&2; exit 2; }

SYMS=$(mktemp)
STRS=$(mktemp)
trap 'rm -f "$SYMS" "$STRS"' EXIT
nm -C "$BIN" 2>/dev/null >"$SYMS" || true
strings -a "$BIN" >"$STRS"
echo "== checking $BIN ($(stat -c %s "$BIN") bytes, $(wc -l <"$SYMS") symbols)"

# A positive control: a binary without symbols would pass every check.
if ! grep -q 'meridian_node::' "$SYMS"; then
  echo "FAIL: no meridian_node symbols in $BIN (stripped?); nothing can be checked" >&2
  exit 1
fi

hits=0
# check NAME SYMBOL-REGEX [STRING-REGEX]: the first over the demangled
# symbols (nm -C), the second over the binary's strings (source paths in
# panic locations and debug info, or C library entry points).
check() {
  local name=$1 sym=$2 str=${3:-} n_sym n_str=0
  n_sym=$(grep -cE -- "$sym" "$SYMS" || true)
  [ -n "$str" ] && n_str=$(grep -cE -- "$str" "$STRS" || true)
  if [ "$n_sym" -gt 0 ] || [ "$n_str" -gt 0 ]; then
    echo "FAIL  $name: $n_sym symbols matching '$sym'${str:+, $n_str strings matching '$str'}"
    grep -E -- "$sym" "$SYMS" | head -3 | sed 's/^/        /' || true
    [ -z "$str" ] || grep -E -- "$str" "$STRS" | head -3 | sed 's/^/        /' || true
    hits=$((hits + 1))
  else
    echo "ok    $name: 0 symbols matching '$sym'${str:+, 0 strings matching '$str'}"
  fi
}
B='(^|[^[:alnum:]_])'
check "etcd-client" "${B}etcd_client::" '/etcd-client-[0-9]'
check "tokio-postgres" "${B}(tokio_postgres|postgres_protocol|postgres_types)::" '/(tokio-postgres|postgres-protocol)-[0-9]'
check "redis" "${B}redis::" '/redis-[0-9]'
check "plotters" "${B}plotters(_backend|_bitmap)?::" '/plotters-[0-9]'
check "tonic/prost (etcd's gRPC)" "${B}(tonic|prost)::" '/(tonic|prost)-[0-9]'
check "fontconfig/freetype" "${B}(font_kit|yeslogic_fontconfig_sys|freetype_sys)::|${B}(FcInit|FT_Init_FreeType)([^[:alnum:]_]|$)"
check "meridian-bench" "${B}meridian_bench::" 'crates/bench/src/'
check "injected bugs: meridian_bugs (Bug, Bugs, marks)" 'meridian_bugs::' 'crates/bugs/src/'
check "injected bugs: sim_bugs" 'sim_bugs'
check "injected bugs: the broken branches" "${B}(read_past_locks|read_latest_past_locks|merge_chunk_unfenced|shell_bugs|with_bugs|set_bugs|run_unstarted)([^[:alnum:]_]|$)"
if [ "$hits" -gt 0 ]; then
  echo "== $hits check(s) failed: the server binary links code it must not" >&2
  exit 1
fi
echo "== the server binary is clean"
