#!/usr/bin/env bash
# Install what Meridian needs on a fresh machine: a Rust toolchain. Idempotent.
set -euo pipefail
if ! command -v cargo >/dev/null 2>&1; then
  if [ -x "$HOME/.cargo/bin/cargo" ]; then
    echo "cargo found in ~/.cargo/bin; add it to PATH: export PATH=\$HOME/.cargo/bin:\$PATH" >&2
  else
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
    echo "installed Rust; run: export PATH=\$HOME/.cargo/bin:\$PATH" >&2
  fi
fi
