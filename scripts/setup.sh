#!/usr/bin/env bash
# Install what Meridian needs on a fresh machine. Idempotent.
#
# The server binary (`cargo build --release -p meridian-cli`) needs only a
# Rust toolchain. Everything after it here is for the benchmark tool
# (`meridian-bench`, crates/bench) and the tests: fontconfig/freetype and
# protoc to build the bench, nftables/iproute2 and the peer servers for
# the tests that use them.
set -euo pipefail
if ! command -v cargo >/dev/null 2>&1; then
  if [ -x "$HOME/.cargo/bin/cargo" ]; then
    echo "cargo found in ~/.cargo/bin; add it to PATH: export PATH=\$HOME/.cargo/bin:\$PATH" >&2
  else
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
    echo "installed Rust; run: export PATH=\$HOME/.cargo/bin:\$PATH" >&2
  fi
fi
# The fuzz smoke test (scripts/fuzz-smoke.sh, docs/internals/fuzzing.md):
# cargo-fuzz runs on the nightly toolchain (libFuzzer, sanitizers).
if command -v rustup >/dev/null 2>&1 || [ -x "$HOME/.cargo/bin/rustup" ]; then
  RUSTUP="$(command -v rustup || echo "$HOME/.cargo/bin/rustup")"
  if ! "$RUSTUP" toolchain list 2>/dev/null | grep -q '^nightly'; then
    "$RUSTUP" toolchain install nightly --profile minimal
  fi
fi
if ! command -v cargo-fuzz >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/cargo-fuzz" ]; then
  "$(command -v cargo || echo "$HOME/.cargo/bin/cargo")" install --locked cargo-fuzz
fi
# Bench only: meridian-bench plots timelines with plotters, whose text
# rendering links fontconfig and freetype (and needs a font at run time).
if ! pkg-config --exists fontconfig freetype2 2>/dev/null || ! fc-list 2>/dev/null | grep -q .; then
  if command -v apt-get >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      pkg-config libfontconfig1-dev libfreetype6-dev fonts-dejavu-core >/dev/null
  else
    echo "install pkg-config, fontconfig and freetype development files and a font" >&2
  fi
fi
# Partition tests put nodes in network namespaces and cut them with
# nftables (root only; the tests skip cleanly elsewhere).
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  if ! command -v nft >/dev/null 2>&1 || ! command -v ip >/dev/null 2>&1; then
    apt-get update -qq || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nftables iproute2 >/dev/null || \
      echo "could not install nftables/iproute2: the partition tests will skip" >&2
  fi
fi
# Bench only: its etcd peer driver (etcd-client) compiles etcd's gRPC
# protos at build time, which needs protoc. The server does not link it.
if ! command -v protoc >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq protobuf-compiler >/dev/null
  else
    echo "install protoc (protobuf-compiler): building meridian-bench needs it" >&2
  fi
fi
# The peer drivers' tests run a real redis-server, PostgreSQL 15 and etcd
# on free loopback ports (issue 7; they skip where one is missing).
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  missing=""
  command -v redis-server >/dev/null 2>&1 || missing="$missing redis-server"
  [ -x /usr/lib/postgresql/15/bin/initdb ] || missing="$missing postgresql-15"
  command -v etcd >/dev/null 2>&1 || missing="$missing etcd-server"
  if [ -n "$missing" ]; then
    apt-get update -qq || true
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null || \
      echo "could not install$missing: those peer tests will skip" >&2
    # Debian starts the packaged servers; the tests and scripts/peers.sh
    # run their own.
    pkill -x etcd 2>/dev/null || true
  fi
fi
