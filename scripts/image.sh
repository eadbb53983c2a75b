#!/usr/bin/env bash
# Builds the container image kubelet-rehash:<version>: FROM scratch, the static amd64 release
# binary alone at /kubelet-rehash (its entrypoint). Nothing else is in it, so it runs as a
# privileged Job with the node's / mounted at /host (docs/fleet.md) and pulls no base image.
#   scripts/image.sh [TAG]        (default kubelet-rehash:<version>)
# The binary: $KUBELET_REHASH_BIN, else the one scripts/release.sh built. The docker CLI talks
# to $DOCKER_HOST when set (the tests point it at their private dockerd). Without the buildx
# plugin, the classic builder does it (DOCKER_BUILDKIT=0): `FROM scratch` needs nothing more.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

version=$(cargo pkgid -p kubelet-rehash)
version=${version##*[@#]}
tag=${1:-kubelet-rehash:$version}
bin=${KUBELET_REHASH_BIN:-${CARGO_TARGET_DIR:-target}/x86_64-unknown-linux-musl/dist/kubelet-rehash}
[ -x "$bin" ] || { echo "image.sh: no binary at $bin: run scripts/release.sh first" >&2; exit 1; }
# An image without a libc or loader can only hold a static binary.
if readelf -lW "$bin" | grep INTERP >/dev/null || readelf -dW "$bin" | grep '(NEEDED)' >/dev/null; then
    echo "image.sh: $bin is dynamically linked: it cannot run in a FROM scratch image" >&2
    exit 1
fi

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
install -m 0755 "$bin" "$ctx/kubelet-rehash"
cat > "$ctx/Dockerfile" <<DOCKERFILE
FROM scratch
COPY kubelet-rehash /kubelet-rehash
LABEL org.opencontainers.image.title="kubelet-rehash" \\
      org.opencontainers.image.version="$version" \\
      org.opencontainers.image.licenses="Apache-2.0" \\
      org.opencontainers.image.description="Upgrade a node's kubelet across minor versions without restarting its containers"
ENTRYPOINT ["/kubelet-rehash"]
DOCKERFILE

if [ -z "${DOCKER_BUILDKIT:-}" ] && ! docker buildx version >/dev/null 2>&1; then
    export DOCKER_BUILDKIT=0
fi
docker build --quiet -t "$tag" "$ctx" >/dev/null
echo "image.sh: built $tag ($(docker image inspect -f '{{.Size}}' "$tag") bytes)"
