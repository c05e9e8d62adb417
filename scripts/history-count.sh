#!/usr/bin/env bash
# Counts what the docs-and-code renovation removes, at a revision (default
# the working tree): injected-bug switches in production code, and history
# narrated in non-test code and in the docs (seed numbers, issue numbers,
# dates, sessions, review findings). docs/performance-history.md is where
# past measurements belong and is not counted.
# Usage: scripts/history-count.sh [REV]
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:-}
HIST='((^|[^-])[Ss]eeds? [0-9]{2,}|(^|[^-])seed [0-9]|[Ii]ssue [0-9]+|20[0-9]{2}-[0-9]{2}-[0-9]{2}|(first|second|third|[a-z]+th) session|[Rr]eview (finding|hazard)|pre-existing|found by|diagnosed by)'
grep_rev() { # pattern, pathspecs...
  local pat=$1; shift
  if [ -n "$rev" ]; then
    git grep -h -E "$pat" "$rev" -- "$@" || true
  else
    git grep -h -E "$pat" -- "$@" || true
  fi
}
# Non-test Rust: src/ files, without their #[cfg(test)] modules is too
# fine for grep; tests/ directories and test-only files are left out.
src=(':(glob)crates/*/src/**/*.rs' ':(exclude,glob)crates/*/tests/**')
docs=('ARCHITECTURE.md' 'README.md' ':(glob)docs/**/*.md' ':(exclude)docs/performance-history.md')
lines() { if [ -n "$rev" ]; then git show "$rev:$1" 2>/dev/null | wc -l; else wc -l < "$1" 2>/dev/null || echo 0; fi; }
echo "revision: ${rev:-working tree}"
echo "ARCHITECTURE.md lines: $(lines ARCHITECTURE.md)"
echo "broken_ switches in src (non-test crates' code): $(grep_rev 'broken_[a-z_]+' "${src[@]}" | grep -v '^\s*//' | wc -l)"
echo "history in src comments: $(grep_rev "$HIST" "${src[@]}" | grep -E '^\s*//' | wc -l)"
echo "history in docs: $(grep_rev "$HIST" "${docs[@]}" | wc -l)"
echo "seed-named tests: $(grep_rev 'fn [a-z_]*seeds?_[0-9]' ':(glob)crates/**/*.rs' | wc -l)"
