#!/usr/bin/env bash
# Regenerates a containerd or CRI-O node of fixtures/nodes on the real node of scripts/k8s-lab.sh:
# the real kubelet FROM creates the lab's workloads on the given runtime, its store, pods.json
# and the CRI's answers are kept, and expected.json gets the hashes the real kubelet TO stores
# for the same containers (cli/tests/real_kubelet/node_fixture.rs says how). Needs root and the
# lab's builds (cached: scripts/k8s-lab.sh build, scripts/setup-containerd-module.sh).
#   scripts/make-node-fixture.sh [crio:]VERSION [FROM-TO]
#   e.g. scripts/make-node-fixture.sh 2.4.2 1.30-1.31        -> fixtures/nodes/containerd-2.4
#        scripts/make-node-fixture.sh crio:1.36.3 1.30-1.31  -> fixtures/nodes/crio-1.36
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=fixture-recipe.sh
. scripts/fixture-recipe.sh
arg="${1:?[crio:]VERSION, e.g. 2.4.2 or crio:1.36.3}"
pair="${2:-1.30-1.31}"
case "$arg" in
    crio:*)
        version="${arg#crio:}"
        bins="$PWD/.cache/runtimes/crio-$version/usr/bin"
        [ -x "$bins/crio" ] || bash scripts/setup-crio-module.sh "$version"
        out="$PWD/fixtures/nodes/crio-${version%.*}"
        export LAB_CRIO="$bins" LAB_PAIRS="crio:$pair"
        runtime="CRI-O $version" ;;
    *)
        version="$arg"
        runtime_dir="$PWD/.cache/runtimes/containerd-$version"
        [ -x "$runtime_dir/usr/bin/containerd" ] || bash scripts/setup-containerd-module.sh "$version"
        out="$PWD/fixtures/nodes/containerd-${version%.*}"
        export LAB_CONTAINERD="$runtime_dir" LAB_PAIRS="$pair"
        runtime="containerd $version" ;;
esac
LAB_HOLD_CASES=0 REAL_KUBELET_NODE_FIXTURE="$out" \
    cargo test --release -p kubelet-rehash --test real_kubelet -- --nocapture
write_regenerate "$out" "$pair on $runtime" scripts/make-node-fixture.sh "$arg" "$pair"
du -sh "$out"
