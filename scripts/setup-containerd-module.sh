#!/usr/bin/env bash
# containerd releases Debian does not package (2.2, 2.3 LTS, 2.4; issue 39), built from the Go
# module proxy: `github.com/containerd/containerd/v2@vX.Y.Z`'s containerd, ctr and
# containerd-shim-runc-v2, with the release's version stamp, into a cache outside the clone keyed
# by version ($KUBELET_REHASH_CACHE, default /var/cache/kubelet-rehash, /containerd/<version>/
# usr/bin/), linked as .cache/runtimes/containerd-<version> where the tests look (testtools'
# containerd lines). Nothing is rebuilt when the cached binaries report their version.
#
#   scripts/setup-containerd-module.sh [VERSION...]     default: 2.2.9 2.3.7 2.4.2
#
# * CGO_ENABLED=0 with the tags containerd's own static release build uses (no_btrfs,
#   no_devmapper, no_zfs): nothing here needs those snapshotters, and no C toolchain is needed.
# * The module's go.mod may ask for a newer Go than the machine's; GOTOOLCHAIN=auto fetches it
#   from the proxy.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=go-module.sh
. "$here/scripts/go-module.sh"
cache="${KUBELET_REHASH_CACHE:-/var/cache/kubelet-rehash}/containerd"
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(2.2.9 2.3.7 2.4.2)

log() { echo "setup-containerd-module: $*" >&2; }

built() { # dir version
    local b
    for b in containerd ctr containerd-shim-runc-v2; do [ -x "$1/usr/bin/$b" ] || return 1; done
    "$1/usr/bin/containerd" --version 2>/dev/null | grep " v$2 " >/dev/null
}

for v in "${versions[@]}"; do
    out="$cache/$v"
    if ! built "$out" "$v"; then
        work="$cache/build/$v"
        rm -rf "$work" && mkdir -p "$work" "$out/usr/bin"
        t0=$SECONDS
        log "$v: resolving github.com/containerd/containerd/v2@v$v"
        {
            echo "module containerdbuild"
            echo
            echo "go 1.24"
            echo
            echo "require github.com/containerd/containerd/v2 v$v"
        } > "$work/go.mod"
        printf '//go:build tools\n\npackage containerdbuild\n\nimport (\n' > "$work/tools.go"
        for c in containerd ctr containerd-shim-runc-v2; do
            printf '\t_ "github.com/containerd/containerd/v2/cmd/%s"\n' "$c" >> "$work/tools.go"
        done
        echo ")" >> "$work/tools.go"
        (cd "$work" && GOTOOLCHAIN=auto go mod tidy) > "$work/tidy.log" 2>&1 \
            || { tail -20 "$work/tidy.log" >&2; log "$v: go mod tidy failed ($work/tidy.log)"; exit 1; }
        pkg=github.com/containerd/containerd/v2
        ldflags="-s -w -X $pkg/version.Version=v$v -X $pkg/version.Revision=module-proxy -X $pkg/version.Package=github.com/containerd/containerd/v2"
        log "$v: building containerd, ctr, containerd-shim-runc-v2 ($(cd "$work" && GOTOOLCHAIN=auto go env GOVERSION))"
        (cd "$work" && CGO_ENABLED=0 GOTOOLCHAIN=auto go build -trimpath -tags "no_btrfs no_devmapper no_zfs urfave_cli_no_docs" \
            -ldflags "$ldflags" -o "$out/usr/bin/" "$pkg/cmd/containerd" "$pkg/cmd/ctr" "$pkg/cmd/containerd-shim-runc-v2") \
            > "$work/build.log" 2>&1 || { tail -30 "$work/build.log" >&2; log "$v: build failed ($work/build.log)"; exit 1; }
        built "$out" "$v" || { "$out/usr/bin/containerd" --version >&2 || true; log "$v: the built containerd does not report v$v"; exit 1; }
        echo "github.com/containerd/containerd/v2 v$v from the Go module proxy, built $(date -u +%FT%TZ) with $(cd "$work" && GOTOOLCHAIN=auto go env GOVERSION) in $((SECONDS - t0)) s" > "$out/BUILD-INFO"
        log "$v: built in $((SECONDS - t0)) s"
    fi
    link_runtime "$out" "containerd-$v"
    log "$v: $("$out/usr/bin/containerd" --version) in $out"
done
