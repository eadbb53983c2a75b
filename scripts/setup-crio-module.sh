#!/usr/bin/env bash
# CRI-O releases newer than the committed 1.30.14 archive (scripts/setup-crio.sh), built from the
# Go module proxy: `github.com/cri-o/cri-o@vX.Y.Z`'s crio and its test/copyimg image importer,
# plus pinns (C) from the same source, into a cache outside the clone keyed by version
# ($KUBELET_REHASH_CACHE, default /var/cache/kubelet-rehash, /crio/<version>/usr/bin/{crio,
# copyimg,pinns}), linked as .cache/runtimes/crio-<version>. Nothing is rebuilt when the cached
# binaries are there and crio reports its version.
#
#   scripts/setup-crio-module.sh [VERSION...]     default: 1.36.3
#
# * The proxy's zip has go.mod/go.sum (no replace directives) but no vendor/: the source is
#   copied to <cache>/crio-build/<version>/src and built in module mode from the proxy;
#   GOTOOLCHAIN=auto fetches the Go its go.mod asks for (1.36: go 1.26.3).
# * CGO_ENABLED=0, tags containers_image_openpgp (Go openpgp, no gpgme),
#   containers_image_ostree_stub, exclude_graphdriver_btrfs/devicemapper; no seccomp, selinux,
#   apparmor or libsqlite3 tag: no C library is linked. Consequences: CRI-O applies no seccomp
#   profile, and containers/image's SQLite blob-info cache falls back to its in-memory cache.
# * The version is the source's constant (internal/version.Version); buildDate is stamped as the
#   Makefile does, buildCommit is not and -buildvcs=false: the commit is "unknown", so the version
#   file CRI-O writes says "1.36.3+unknown", like setup-crio.sh's "1.30.14+unknown".
# * pinns: CRI-O's small static C helper that pins the pod namespaces. It is built with the
#   source's own pinns/Makefile (gcc, make, libc6-dev); its source is unchanged since 1.30.14,
#   so without a C compiler the 1.30.14 .cache/crio/bin/pinns from setup-crio.sh is copied.
# * Run-time tools as for 1.30 (testtools/src/crio.rs): Debian 12's conmon 2.1.6 and runc 1.1.5
#   (CRI-O 1.36 only feature-checks conmon: --sync needs >= 2.0.19, --log-global-size-max
#   >= 2.1.2; runc must answer `runc features`), containernetworking-plugins, busybox-static.
#   The default runtime of 1.36 is crun: configure default_runtime = "runc" (testtools/data/crio.conf.in does).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=go-module.sh
. "$here/scripts/go-module.sh"
root="${KUBELET_REHASH_CACHE:-/var/cache/kubelet-rehash}"
cache="$root/crio"
tags="containers_image_openpgp containers_image_ostree_stub exclude_graphdriver_btrfs exclude_graphdriver_devicemapper"
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(1.36.3)

log() { echo "setup-crio-module: $*" >&2; }
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

# Debian 12 packages CRI-O needs at run time and for pinns, installed with apt when absent
need=()
for p in conmon runc containernetworking-plugins busybox-static gcc make libc6-dev; do
    installed "$p" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
    . "$here/scripts/apt-install.sh"
    apt_install_quietly "${need[@]}"
    log "installed ${need[*]}"
fi

built() { # dir version
    local b
    for b in crio copyimg pinns; do [ -x "$1/usr/bin/$b" ] || return 1; done
    # 1.30 prints "Version:  X", 1.36 prints "crio version X"
    "$1/usr/bin/crio" --version 2>/dev/null | grep -E "^(crio version|Version:) +$2$" >/dev/null
}

for v in "${versions[@]}"; do
    out="$cache/$v"
    if ! built "$out" "$v"; then
        work="$root/crio-build/$v"
        rm -rf "$work" "$out/usr" && mkdir -p "$work" "$out/usr/bin"
        t0=$SECONDS
        mod="github.com/cri-o/cri-o@v$v"
        log "$v: downloading $mod"
        go_module_source "$mod" "$work" || { log "$v: go mod download $mod gave no source"; exit 1; }
        pkg=github.com/cri-o/cri-o/internal/version
        ldflags="-s -w -X $pkg.buildDate=$(date -u +%FT%TZ)"
        log "$v: building crio, copyimg ($(cd "$work/src" && GOTOOLCHAIN=auto go env GOVERSION))"
        (cd "$work/src" && CGO_ENABLED=0 GOTOOLCHAIN=auto go build -trimpath -buildvcs=false -tags "$tags" \
            -ldflags "$ldflags" -o "$out/usr/bin/" ./cmd/crio ./test/copyimg) \
            > "$work/build.log" 2>&1 || { tail -30 "$work/build.log" >&2; log "$v: build failed ($work/build.log)"; exit 1; }
        if command -v cc >/dev/null && make -s -C "$work/src/pinns" >> "$work/build.log" 2>&1; then
            cp "$work/src/bin/pinns" "$out/usr/bin/pinns"
            pinns="built from $mod/pinns"
        elif [ -x "$here/.cache/crio/bin/pinns" ]; then
            cp "$here/.cache/crio/bin/pinns" "$out/usr/bin/pinns"
            pinns="copied from .cache/crio/bin (1.30.14, same source)"
        else
            log "$v: no C compiler and no .cache/crio/bin/pinns (scripts/setup-crio.sh) to reuse"; exit 1
        fi
        built "$out" "$v" || { "$out/usr/bin/crio" --version >&2 || true; log "$v: the built crio does not report $v"; exit 1; }
        echo "$mod from the Go module proxy, built $(date -u +%FT%TZ) with $(cd "$work/src" && GOTOOLCHAIN=auto go env GOVERSION) CGO_ENABLED=0 tags '$tags' in $((SECONDS - t0)) s; pinns $pinns" > "$out/BUILD-INFO"
        rm -rf "$work/src"
        log "$v: built in $((SECONDS - t0)) s"
    fi
    link_runtime "$out" "crio-$v"
    log "$v: $("$out/usr/bin/crio" --version | head -1) in $out"
done
