#!/usr/bin/env bash
# Idempotent: Go 1.24 from Debian trixie (golang-1.24-go + golang-1.24-src) unpacked into
# .cache/go-1.24, for the Go builds of the live tests (scripts/setup-crio.sh, setup-cri-dockerd.sh).
# Fetched through the PRIVATE apt configuration of scripts/apt-private.sh (.cache/apt-private)
# with `apt-get download` and `dpkg-deb -x`; never installed system-wide. The -go package's
# GOROOT links src/, lib/, misc/, test/, api/ and pkg/include into /usr/share/go-1.24 (the -src
# package); those links are replaced by the real trees.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="$here/.cache"
goroot="$cache/go-1.24"
go_debver=1.24.4-1
log() { echo "setup-go-1.24: $*"; }

go_ok() { [ -x "$goroot/bin/go" ] && [ -d "$goroot/src/runtime" ] && [ ! -L "$goroot/src" ] \
    && GOROOT="$goroot" "$goroot/bin/go" version 2>/dev/null | grep -q 'go1\.24'; }
if ! go_ok; then
    . "$here/scripts/apt-private.sh"
    apt_private_init trixie
    debs="$cache/apt-private/debs"
    mkdir -p "$debs"
    for p in golang-1.24-go golang-1.24-src; do
        if [ -z "$(find "$debs" -maxdepth 1 -name "${p}_${go_debver}_*.deb" | head -1)" ]; then
            log "downloading $p=$go_debver (trixie)"
            (cd "$debs" && apt-get "${APT_PRIVATE[@]}" download "$p=$go_debver" 2>&1 | grep -v "unsandboxed as root" || true)
        fi
    done
    unpack="$goroot.unpack"
    rm -rf "$unpack" && mkdir -p "$unpack"
    for p in golang-1.24-go golang-1.24-src; do
        deb="$(find "$debs" -maxdepth 1 -name "${p}_${go_debver}_*.deb" | head -1)"
        [ -n "$deb" ] || { echo "setup-go-1.24: $p $go_debver was not downloaded into $debs" >&2; exit 1; }
        dpkg-deb -x "$deb" "$unpack"
    done
    root="$unpack/usr/lib/go-1.24"
    # the -go package's links point at /usr/share/go-1.24 (absolute or relative): use the
    # unpacked -src trees instead
    for d in src lib misc test api pkg/include; do
        if [ -L "$root/$d" ]; then
            rm "$root/$d"
            if [ -e "$unpack/usr/share/go-1.24/$d" ]; then
                cp -a "$unpack/usr/share/go-1.24/$d" "$root/$d"
            fi
        fi
    done
    rm -rf "$goroot" && mv "$root" "$goroot" && rm -rf "$unpack"
    go_ok || { echo "setup-go-1.24: the unpacked Go in $goroot does not run" >&2; GOROOT="$goroot" "$goroot/bin/go" version >&2 || true; exit 1; }
fi
log "$(GOROOT="$goroot" "$goroot/bin/go" version) in $goroot"
