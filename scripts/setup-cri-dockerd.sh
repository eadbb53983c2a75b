#!/usr/bin/env bash
# Idempotent setup for the real-cri-dockerd test (cli/tests/cri_dockerd_live.rs): builds
# cri-dockerd 0.4.1 into .cache/cri-dockerd/bin/ (about 8 minutes on 2 shared cores with an
# empty Go cache; nothing when it is up to date), unpacks Debian 13's dockerd 26.1.5 into
# .cache/runtimes/docker-26.1.5/ and Debian's CNI plugins (bridge, host-local, loopback) into
# .cache/cni/bin/.
#
# * Source: third_party/cri-dockerd-0.4.1.tar.gz (the v0.4.1 source with its complete vendor/
#   tree), committed in the repository and checked against its sha256 below. Committed rather
#   than fetched for the same reasons as CRI-O's (scripts/setup-crio.sh): CI runs on a clean
#   clone with no network access to GitHub guaranteed, the vendor/ tree makes the build fully
#   offline (GOFLAGS=-mod=vendor GOPROXY=off GOTOOLCHAIN=local), and a pinned in-repo file cannot
#   change under us the way a regenerated tag archive can.
# * Go 1.24: the private trixie toolchain of scripts/setup-go-1.24.sh (.cache/go-1.24); go.mod
#   asks for go 1.23.12, which 1.24 builds with GOTOOLCHAIN=local.
# * dockerd 26.1.5: cri-dockerd 0.4.1 refuses a Docker Engine older than API 1.42 (Docker 23.0;
#   libdocker.MinimumDockerAPIVersion), so Debian 12's docker.io 20.10 (API 1.41) cannot run
#   behind it. Debian 13 trixie's docker.io is fetched through the private apt configuration
#   (scripts/apt-private.sh) and unpacked into .cache/runtimes/docker-26.1.5/, never installed
#   system-wide; it runs with Debian 12's containerd and runc (setup-docker.sh installs them).
# * CNI plugins: Debian 12's containernetworking-plugins, `apt-get download` + `dpkg-deb -x`
#   into .cache/cni: never installed system-wide, so the test's plugins are exactly these and a
#   node's own /opt/cni/bin is never used or changed.
# The build is redone only when the archive, the flags or the Go version change (.cache/cri-dockerd/STAMP).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="$here/.cache"
tarball="$here/third_party/cri-dockerd-0.4.1.tar.gz"
tarball_sha256=9478ee390603d4dcadc6db57d0a83f60ee3d330df6e34053623e051d9925b3b6
version=0.4.1
out="$cache/cri-dockerd"
cni="$cache/cni"

log() { echo "setup-cri-dockerd: $*"; }

# ---- 1. CNI plugins (Debian 12), unpacked -----------------------------------------------------
cni_ok() { for b in bridge host-local loopback; do [ -x "$cni/bin/$b" ] || return 1; done; }
if ! cni_ok; then
    debs="$cni/debs"
    mkdir -p "$debs"
    if [ -z "$(find "$debs" -maxdepth 1 -name 'containernetworking-plugins_*.deb' | head -1)" ]; then
        log "downloading containernetworking-plugins"
        fetch_cni() { (cd "$debs" && apt-get download containernetworking-plugins 2>&1 | grep -v "unsandboxed as root" || true); }
        fetch_cni
        # a clean machine may have no package lists yet: update them once and try again
        if [ -z "$(find "$debs" -maxdepth 1 -name 'containernetworking-plugins_*.deb' | head -1)" ]; then
            apt-get update -qq
            fetch_cni
        fi
    fi
    deb="$(find "$debs" -maxdepth 1 -name 'containernetworking-plugins_*.deb' | head -1)"
    [ -n "$deb" ] || { echo "setup-cri-dockerd: containernetworking-plugins was not downloaded into $debs" >&2; exit 1; }
    rm -rf "$cni/unpack" && mkdir -p "$cni/unpack"
    dpkg-deb -x "$deb" "$cni/unpack"
    rm -rf "$cni/bin" && mkdir -p "$cni/bin"
    for b in bridge host-local loopback; do
        cp "$cni/unpack/usr/lib/cni/$b" "$cni/bin/$b"
    done
    rm -rf "$cni/unpack"
    cni_ok || { echo "setup-cri-dockerd: $deb lacks bridge/host-local/loopback" >&2; exit 1; }
fi
log "CNI plugins in $cni/bin: $(ls "$cni/bin" | tr '\n' ' ')"

# ---- 2. dockerd 26.1.5 (trixie), unpacked ------------------------------------------------------
docker_ver=26.1.5
docker_debver=26.1.5+dfsg1-9+deb13u1+b1
docker_dir="$cache/runtimes/docker-$docker_ver"
docker_ok() { "$docker_dir/usr/sbin/dockerd" --version 2>/dev/null | grep "version $docker_ver" >/dev/null; }
if ! docker_ok; then
    . "$here/scripts/apt-private.sh"
    apt_private_init trixie
    debs="$cache/apt-private/debs"
    mkdir -p "$debs"
    if [ -z "$(find "$debs" -maxdepth 1 -name "docker.io_${docker_debver}_*.deb" | head -1)" ]; then
        log "downloading docker.io=$docker_debver (trixie)"
        (cd "$debs" && apt-get "${APT_PRIVATE[@]}" download "docker.io=$docker_debver" 2>&1 | grep -v "unsandboxed as root" || true)
    fi
    deb="$(find "$debs" -maxdepth 1 -name "docker.io_${docker_debver}_*.deb" | head -1)"
    [ -n "$deb" ] || { echo "setup-cri-dockerd: docker.io $docker_debver was not downloaded into $debs" >&2; exit 1; }
    rm -rf "$docker_dir" && mkdir -p "$docker_dir"
    dpkg-deb -x "$deb" "$docker_dir"
    docker_ok || { echo "setup-cri-dockerd: $docker_dir/usr/sbin/dockerd does not run here" >&2; "$docker_dir/usr/sbin/dockerd" --version >&2 || true; exit 1; }
fi
log "$("$docker_dir/usr/sbin/dockerd" --version) in $docker_dir"

# ---- 3. Go 1.24 ------------------------------------------------------------------------------
"$here/scripts/setup-go-1.24.sh"
goroot="$cache/go-1.24"
export GOROOT="$goroot" PATH="$goroot/bin:$PATH"

# ---- 4. cri-dockerd 0.4.1 --------------------------------------------------------------------
echo "$tarball_sha256  $tarball" | sha256sum -c --quiet - \
    || { echo "setup-cri-dockerd: $tarball does not have sha256 $tarball_sha256" >&2; exit 1; }
# The archive has no .git: the Makefile's `git describe` would give nothing, so the version is
# stamped here the way the Makefile does (cri-dockerd --version then prints "0.4.1").
ldflags="-s -w -X github.com/Mirantis/cri-dockerd/cmd/version.Version=$version -X github.com/Mirantis/cri-dockerd/cmd/version.GitCommit=v$version"
stamp="$tarball_sha256 $(go version) $ldflags cgo=0"
bin_ok() { [ -x "$out/bin/cri-dockerd" ] && "$out/bin/cri-dockerd" --version 2>&1 | grep "$version" >/dev/null; }
if bin_ok && [ "$(cat "$out/STAMP" 2>/dev/null)" = "$stamp" ]; then
    log "$out/bin is up to date: $("$out/bin/cri-dockerd" --version 2>&1 | head -1)"
    exit 0
fi
start=$(date +%s)
src="$out/src"
rm -rf "$src" "$out/bin.tmp" && mkdir -p "$src" "$out/bin.tmp"
tar -xzf "$tarball" -C "$src" --strip-components=1
(
    cd "$src"
    # CGO_ENABLED=0: nothing in cri-dockerd needs cgo, and a static binary needs no gcc here.
    env GOCACHE="$out/go-build" GOPATH="$out/gopath" GOFLAGS=-mod=vendor GOPROXY=off GOSUMDB=off \
        GOTOOLCHAIN=local CGO_ENABLED=0 \
        go build -trimpath -buildvcs=false -ldflags "$ldflags" -o "$out/bin.tmp/cri-dockerd" .
)
rm -rf "$out/bin" && mv "$out/bin.tmp" "$out/bin" && rm -rf "$src"
echo "$stamp" > "$out/STAMP"
log "built $out/bin/cri-dockerd in $(( $(date +%s) - start )) s: $("$out/bin/cri-dockerd" --version 2>&1 | head -1)"
