#!/usr/bin/env bash
# Regenerates a Docker node of fixtures/nodes: the pods the real kubelet made of a node of
# scripts/make-node-fixture.sh (default fixtures/nodes/containerd-2.4), with the labels,
# annotations and hashes the real kubelet sent, created on a real dockerd in cri-dockerd's shape
# (testtools/src/bin/make-docker-node.rs says how). Needs root; the Docker builds are cached
# (scripts/setup-docker-module.sh, and scripts/setup-runc-module.sh for Docker 29's engine).
#   scripts/make-docker-node-fixture.sh 28.5.2           -> fixtures/nodes/docker-28.5
#   scripts/make-docker-node-fixture.sh v2.0.0-beta.24   -> fixtures/nodes/docker-29.8-beta.24
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=fixture-recipe.sh
. scripts/fixture-recipe.sh
version="${1:?a Docker version of scripts/setup-docker-module.sh: 28.5.2 or v2.0.0-beta.24}"
src="${2:-fixtures/nodes/containerd-2.4}"
dockerd="$PWD/.cache/runtimes/docker-$version/usr/bin/dockerd"
[ -x "$dockerd" ] || bash scripts/setup-docker-module.sh "$version"
runc=()
case "$version" in
    v2.0.0-beta.24)
        # Docker 29's engine (releases/versions.yaml: 29.8) asks for a time namespace: runc >= 1.2
        out="fixtures/nodes/docker-29.8-beta.24"
        [ -x .cache/runtimes/runc-1.4.3/usr/bin/runc ] || bash scripts/setup-runc-module.sh 1.4.3
        runc=("$PWD/.cache/runtimes/runc-1.4.3/usr/bin/runc") ;;
    *) out="fixtures/nodes/docker-${version%.*}" ;;
esac
cargo run --release -q -p testtools --bin make-docker-node -- "$src" "$out" "$dockerd" "${runc[@]}"
write_regenerate "$out" "the pods of $src on Docker $version" scripts/make-docker-node-fixture.sh "$version" "$src"
du -sh "$out"
