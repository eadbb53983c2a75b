#!/usr/bin/env bash
# Regenerates a containerd node of fixtures/nodes on the real node of scripts/k8s-lab.sh: the
# real kubelet FROM creates the lab's workloads on the given containerd, its store, pods.json
# and the CRI's answers are kept, and expected.json gets the hashes the real kubelet TO stores
# for the same containers (cli/tests/real_kubelet/node_fixture.rs says how). Needs root and the
# lab's builds (cached: scripts/k8s-lab.sh build, scripts/setup-containerd-module.sh).
#   scripts/make-node-fixture.sh CONTAINERD_VERSION [FROM-TO]
#   e.g. scripts/make-node-fixture.sh 2.4.2 1.30-1.31   -> fixtures/nodes/containerd-2.4
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
version="${1:?containerd version, e.g. 2.4.2}"
pair="${2:-1.30-1.31}"
minor="${version%.*}"
runtime_dir="$PWD/.cache/runtimes/containerd-$version"
[ -x "$runtime_dir/usr/bin/containerd" ] || bash scripts/setup-containerd-module.sh "$version"
out="$PWD/fixtures/nodes/containerd-$minor"
LAB_PAIRS="$pair" LAB_HOLD_CASES=0 LAB_CONTAINERD="$runtime_dir" REAL_KUBELET_NODE_FIXTURE="$out" \
    cargo test --release -p kubelet-rehash --test real_kubelet -- --nocapture
echo "$pair on containerd $version" > "$out/RECIPE"
echo "scripts/make-node-fixture.sh $version $pair" >> "$out/RECIPE"
du -sh "$out"
