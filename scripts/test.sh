#!/usr/bin/env bash
# Every test of kubelet-rehash, as CI runs it: installs what the integration tests need
# (Debian's docker.io and containerd, containerd 1.7/2.x unpacked from Debian's own newer
# suites into .cache/), then the whole workspace test suite in release mode (the golden set,
# the real-node workflow and the real-daemon tests), the fuzz smoke run, and the lint gates.
# Needs root (apt-get, private dockerd/containerd daemons); every daemon it starts is its own,
# on private paths, and stopped by pid.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/setup-docker.sh
scripts/setup-containerd.sh

cargo test --workspace --release --no-fail-fast

if [ -x scripts/fuzz-smoke.sh ]; then
    scripts/fuzz-smoke.sh
fi

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
