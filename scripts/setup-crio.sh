#!/usr/bin/env bash
# Idempotent setup for the real-CRI-O tests (cli/tests/crio_live.rs): builds CRI-O 1.30.14
# (`crio`, `pinns`, and CRI-O's own `test/copyimg` image importer) into .cache/crio/bin/.
#
# * Source: third_party/cri-o-1.30.14.tar.gz, committed in the repository and checked against
#   its sha256 below. It is committed rather than downloaded because CI runs on a clean clone
#   with no network access guaranteed to GitHub, the archive carries its complete vendor/ tree
#   so the build is fully offline (GOFLAGS=-mod=vendor GOPROXY=off), and a pinned in-repo file
#   cannot change under us the way a re-generated GitHub tag archive can.
# * Go 1.24: Debian trixie's golang-1.24-go + golang-1.24-src, unpacked privately into
#   .cache/go-1.24/ by scripts/setup-go-1.24.sh (shared with setup-cri-dockerd.sh).
# * Debian 12 packages CRI-O needs at run time or for cgo, installed with apt when absent:
#   conmon, runc, containernetworking-plugins (bridge, host-local, loopback), libseccomp-dev,
#   libsqlite3-dev, pkg-config, busybox-static (the stand-in image's only binary).
#   The archive lacks go-sqlite3's bundled amalgamation; the `libsqlite3` tag links Debian's.
# The build is redone only when the archive, the tags or the Go version change (.cache/crio/STAMP).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="$here/.cache"
tarball="$here/third_party/cri-o-1.30.14.tar.gz"
tarball_sha256=c259e59c0eec9bfb77379c6abbd369571f3499223cd964a80666ead7c66e1f53
goroot="$cache/go-1.24"
crio="$cache/crio"
tags="libsqlite3 containers_image_openpgp containers_image_ostree_stub exclude_graphdriver_btrfs btrfs_noversion exclude_graphdriver_devicemapper seccomp"

log() { echo "setup-crio: $*"; }
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

# ---- 1. Debian 12 packages -------------------------------------------------------------------
need=()
for p in conmon runc containernetworking-plugins libseccomp-dev libsqlite3-dev pkg-config busybox-static gcc make libc6-dev; do
    installed "$p" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
    . "$here/scripts/apt-install.sh"
    apt_install_quietly "${need[@]}"
    log "installed ${need[*]}"
fi

# ---- 2. Go 1.24 from trixie (scripts/setup-go-1.24.sh) -----------------------------------------
"$here/scripts/setup-go-1.24.sh"
export GOROOT="$goroot" PATH="$goroot/bin:$PATH"
log "$(go version) in $goroot"

# ---- 3. CRI-O 1.30.14 -------------------------------------------------------------------------
echo "$tarball_sha256  $tarball" | sha256sum -c --quiet - \
    || { echo "setup-crio: $tarball does not have sha256 $tarball_sha256" >&2; exit 1; }
# -buildvcs=false: the source is unpacked inside this repository's .cache, and Go would stamp
# our own commit into CRI-O's version ("1.30.14+<our sha>"), which CRI-O writes into its
# version file; a git archive of the tag gives "1.30.14+unknown", as on the bundled node.
stamp="$tarball_sha256 $(go version) $tags buildvcs=false"
bins_ok() { for b in crio pinns copyimg; do [ -x "$crio/bin/$b" ] || return 1; done; "$crio/bin/crio" --version >/dev/null 2>&1; }
if bins_ok && [ "$(cat "$crio/STAMP" 2>/dev/null)" = "$stamp" ]; then
    log "$crio/bin is up to date: $("$crio/bin/crio" --version | awk '/^Version:/ {print $2}')"
    exit 0
fi
start=$(date +%s)
src="$crio/src"
rm -rf "$src" "$crio/bin.tmp" && mkdir -p "$src" "$crio/bin.tmp"
tar -xzf "$tarball" -C "$src" --strip-components=1
goenv=(env GOCACHE="$crio/go-build" GOPATH="$crio/gopath" GOFLAGS=-mod=vendor GOPROXY=off
       GOSUMDB=off GOTOOLCHAIN=local CGO_ENABLED=1)
(
    cd "$src"
    "${goenv[@]}" go build -trimpath -buildvcs=false -tags "$tags" -o "$crio/bin.tmp/crio" ./cmd/crio
    "${goenv[@]}" go build -trimpath -buildvcs=false -tags "$tags" -o "$crio/bin.tmp/copyimg" ./test/copyimg
    make -s -C pinns
    cp bin/pinns "$crio/bin.tmp/pinns"
)
rm -rf "$crio/bin" && mv "$crio/bin.tmp" "$crio/bin"
echo "$stamp" > "$crio/STAMP"
log "built crio, copyimg, pinns into $crio/bin in $(( $(date +%s) - start )) s: $("$crio/bin/crio" --version | awk '/^Version:/ {print $2}')"
