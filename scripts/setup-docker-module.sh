#!/usr/bin/env bash
# Docker Engine releases Debian does not package (28.x), built from the Go module proxy:
# `github.com/docker/docker@vX.Y.Z+incompatible`'s dockerd and docker-proxy, with the release's
# version stamp, into a cache outside the clone keyed by version ($KUBELET_REHASH_CACHE, default
# /var/cache/kubelet-rehash, /docker/<version>/usr/bin/), linked as .cache/runtimes/docker-<version>
# next to the Debian docker-26.1.5 tree. Nothing is rebuilt when the cached dockerd reports its version.
#
#   scripts/setup-docker-module.sh [VERSION...]     default: 28.5.2 v2.0.0-beta.24
#
# * The repository is not a Go module: it has vendor.mod/vendor.sum instead of go.mod/go.sum,
#   and the proxy's zip drops vendor/ (only vendor/modules.txt is left). So the module source
#   is copied to <cache>/docker-build/<version>/src, vendor.mod/vendor.sum become go.mod/go.sum,
#   and the build resolves the pinned dependencies from the proxy in module mode (go.mod and
#   go.sum are complete: the build leaves them unchanged).
# * CGO_ENABLED=0 with the tags of Docker's own static build (hack/make.sh: netgo osusergo
#   static_build) plus exclude_graphdriver_btrfs/devicemapper: no C toolchain is needed. The
#   version variables are the ones hack/make/.go-autogen sets (github.com/docker/docker/dockerversion).
# * Not built: docker-init (tini, C; dockerd finds Debian's /usr/bin/docker-init on PATH), the
#   docker CLI, containerd and runc (use a containerd from .cache/runtimes via --containerd=).
# * usr/sbin is a link to usr/bin, so the Debian-layout path <dir>/usr/sbin/dockerd works too.
# * Docker 29 is not on the proxy as docker/docker (v29.x.y+incompatible: 403 "This module version
#   is not available"), nor as moby/moby/v2 v29.x tags (403); its engine is published as the module
#   github.com/moby/moby/v2 (v2.0.0-beta.N, a real go.mod), built the same way from that module
#   (VERSION v2.0.0-beta.24; dockerd reports 2.0.0-beta.24).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=go-module.sh
. "$here/scripts/go-module.sh"
root="${KUBELET_REHASH_CACHE:-/var/cache/kubelet-rehash}"
cache="$root/docker"
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(28.5.2 v2.0.0-beta.24)

log() { echo "setup-docker-module: $*" >&2; }

# The version dockerd reports: the release, or for a moby/moby/v2 module version the module
# version without its "v" (the proxy serves Docker 29's engine only as v2.0.0-beta.N; its
# releases/versions.yaml names the release line, 29.8 for beta.24).
stamp() { echo "${1#v}"; }

built() { # dir version
    local b
    for b in dockerd docker-proxy; do [ -x "$1/usr/bin/$b" ] || return 1; done
    "$1/usr/bin/dockerd" --version 2>/dev/null | grep "^Docker version $(stamp "$2")," >/dev/null
}

for v in "${versions[@]}"; do
    out="$cache/$v"
    if ! built "$out" "$v"; then
        work="$root/docker-build/$v"
        rm -rf "$work" "$out/usr" && mkdir -p "$work" "$out/usr/bin"
        t0=$SECONDS
        case "$v" in
            v2.*) mod="github.com/moby/moby/v2@$v"; pkg=github.com/moby/moby/v2/dockerversion ;;
            *) mod="github.com/docker/docker@v$v+incompatible"; pkg=github.com/docker/docker/dockerversion ;;
        esac
        log "$v: downloading $mod"
        go_module_source "$mod" "$work" || { log "$v: go mod download $mod gave no source"; exit 1; }
        rm -rf "$work/src/vendor"
        if [ -f "$work/src/vendor.mod" ]; then
            cp "$work/src/vendor.mod" "$work/src/go.mod" && cp "$work/src/vendor.sum" "$work/src/go.sum"
        fi
        ldflags="-s -w -X $pkg.Version=$(stamp "$v") -X $pkg.GitCommit=module-proxy -X $pkg.BuildTime=$(date -u +%FT%TZ) -X '$pkg.PlatformName=Docker Engine - Community'"
        log "$v: building dockerd, docker-proxy ($(cd "$work/src" && GOTOOLCHAIN=auto go env GOVERSION))"
        (cd "$work/src" && CGO_ENABLED=0 GOTOOLCHAIN=auto go build -mod=mod -trimpath \
            -tags "netgo osusergo static_build exclude_graphdriver_btrfs exclude_graphdriver_devicemapper" \
            -ldflags "$ldflags" -o "$out/usr/bin/" ./cmd/dockerd ./cmd/docker-proxy) \
            > "$work/build.log" 2>&1 || { tail -30 "$work/build.log" >&2; log "$v: build failed ($work/build.log)"; exit 1; }
        ln -sfn bin "$out/usr/sbin"
        built "$out" "$v" || { "$out/usr/bin/dockerd" --version >&2 || true; log "$v: the built dockerd does not report $v"; exit 1; }
        echo "$mod from the Go module proxy (vendor.mod as go.mod), built $(date -u +%FT%TZ) with $(cd "$work/src" && GOTOOLCHAIN=auto go env GOVERSION) in $((SECONDS - t0)) s" > "$out/BUILD-INFO"
        rm -rf "$work/src"
        log "$v: built in $((SECONDS - t0)) s"
    fi
    link_runtime "$out" "docker-$v"
    log "$v: $("$out/usr/bin/dockerd" --version) in $out"
done
