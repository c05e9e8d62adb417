#!/usr/bin/env bash
# Fuzz smoke test (CI): build every cargo-fuzz target in fuzz/ and run each
# for FUZZ_SECONDS (default 60) from its committed seed corpus; fails on
# the first crash, leak, timeout or out-of-memory. New inputs libFuzzer
# finds go to a temporary directory, not into fuzz/corpus/. A crash leaves
# its input in fuzz/artifacts/<target>/ (see docs/internals/fuzzing.md to
# reproduce it).
#
#   bash scripts/fuzz-smoke.sh                  # every target, 60 s each
#   FUZZ_SECONDS=10 bash scripts/fuzz-smoke.sh participant
#
# Needs the nightly toolchain and cargo-fuzz (scripts/setup.sh installs
# both). Honours CARGO_TARGET_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
secs="${FUZZ_SECONDS:-60}"
if [ "$#" -gt 0 ]; then
  targets=("$@")
else
  targets=(frame_decoder participant wal_reader config_parser)
fi
start=$(date +%s)
if [ "$#" -gt 0 ]; then
  for t in "${targets[@]}"; do cargo +nightly fuzz build "$t"; done
else
  cargo +nightly fuzz build
fi
built=$(date +%s)
echo "fuzz-smoke: built in $((built - start)) s"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for t in "${targets[@]}"; do
  mkdir -p "$work/$t"
  echo "fuzz-smoke: $t for $secs s"
  if ! cargo +nightly fuzz run "$t" "$work/$t" "fuzz/corpus/$t" -- \
      -max_total_time="$secs" -rss_limit_mb=2048 -print_final_stats=1 \
      >"$work/$t.log" 2>&1; then
    tail -n 60 "$work/$t.log"
    echo "fuzz-smoke: $t FAILED; the input is in fuzz/artifacts/$t/" >&2
    exit 1
  fi
  grep -E '^#[0-9]+[[:space:]]+DONE' "$work/$t.log" || true
done
echo "fuzz-smoke: all passed in $(( $(date +%s) - start )) s (build $((built - start)) s)"
