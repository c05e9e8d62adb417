#!/usr/bin/env bash
# Lists Rust functions longer than N lines (default 150) in crates' src/,
# tests excluded, relying on rustfmt's layout: a function ends at the first
# line that is its own indentation followed by `}`.
# Usage: scripts/long-fns.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
max=${1:-150}
git ls-files 'crates/*/src/**.rs' 'crates/*/src/*.rs' | sort -u | while read -r f; do
  awk -v max="$max" -v file="$f" '
    /^[[:space:]]*#\[cfg\(test\)\]/ { intest = 1 }
    !intest && match($0, /^[[:space:]]*(pub(\([a-z]+\))? )?(async )?(const )?fn [A-Za-z0-9_]+/) {
      if (!open) { open = 1; start = NR; match($0, /^[[:space:]]*/); ind = substr($0, 1, RLENGTH)
        name = $0; sub(/^[[:space:]]*/, "", name); sub(/\(.*/, "", name); sub(/.*fn /, "", name)
        # a one-line or bodiless declaration
        if ($0 ~ /;[[:space:]]*$/ || $0 ~ /\}[[:space:]]*$/) open = 0
        next }
    }
    open && $0 == ind "}" { n = NR - start + 1; if (n > max) printf "%5d %s:%d %s\n", n, file, start, name; open = 0 }
  ' "$f"
done | sort -rn
