#!/usr/bin/env bash
# Regenerates fixtures/golden/real-kubelet/: the container specs (as the API server serves
# them) and the hash each real kubelet built from Kubernetes' Go modules stored for them (read
# from the runtime through the CRI). It runs the real-node suite (cli/tests/real_kubelet.rs)
# on the pairs given (default: every adjacent pair the Go module proxy serves), which writes
# one <version>.jsonl per kubelet version. Needs root; builds are cached (scripts/k8s-lab.sh).
#   scripts/real-kubelet-golden.sh [PAIRS]      e.g. 1.30-1.31,1.36-1.37
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out="$PWD/fixtures/golden/real-kubelet"
mkdir -p "$out"
LAB_PAIRS="${1:-all}" REAL_KUBELET_GOLDEN="$out" \
    cargo test --release -p kubelet-rehash --test real_kubelet -- --nocapture
ls -l "$out"
