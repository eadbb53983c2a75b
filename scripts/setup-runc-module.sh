#!/usr/bin/env bash
# runc releases newer than Debian 12's 1.1.5, built from the Go module proxy
# (`github.com/opencontainers/runc@vX.Y.Z`) into a cache outside the clone keyed by version
# ($KUBELET_REHASH_CACHE, default /var/cache/kubelet-rehash, /runc/<version>/usr/bin/runc),
# linked as .cache/runtimes/runc-<version>. Nothing is rebuilt when the cached runc reports its
# version.
#
#   scripts/setup-runc-module.sh [VERSION...]     default: 1.4.3
#
# Why: Docker 29's engine asks runc for a time namespace in every container's spec, which runc
# learned in 1.2 ("namespace {"time" ""} does not exist" from 1.1.5); storepatch/tests/
# docker_live.rs gives that dockerd this runc as its default runtime.
# * a version check reads the whole output (`grep >/dev/null`, never `grep -q`): under
#   pipefail, `grep -q` exits at its first match and runc, still writing its next lines, dies
#   of SIGPIPE, which failed the check of a runc that reported its version (a CI run, 2026-12-07).
# * cgo is required (runc's nsenter is C); built with the seccomp tag against Debian 12's
#   libseccomp-dev (installed with apt when absent), as runc's own Makefile builds it, with its
#   version and commit stamped the Makefile's way.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=go-module.sh
. "$here/scripts/go-module.sh"
root="${KUBELET_REHASH_CACHE:-/var/cache/kubelet-rehash}"
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(1.4.3)

log() { echo "setup-runc-module: $*" >&2; }
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

# shellcheck source=apt-install.sh
. "$here/scripts/apt-install.sh"
for p in gcc libc6-dev libseccomp-dev pkg-config; do
    installed "$p" || apt_install_quietly "$p"
done

for v in "${versions[@]}"; do
    out="$root/runc/$v"
    if ! "$out/usr/bin/runc" --version 2>/dev/null | grep "^runc version $v$" >/dev/null; then
        work="$root/runc-build/$v"
        rm -rf "$work" "$out/usr" && mkdir -p "$work" "$out/usr/bin"
        t0=$SECONDS
        mod="github.com/opencontainers/runc@v$v"
        log "$v: downloading $mod"
        go_module_source "$mod" "$work" || { log "$v: go mod download $mod gave no source"; exit 1; }
        (cd "$work/src" && CGO_ENABLED=1 GOTOOLCHAIN=auto go build -trimpath -buildmode=pie -tags seccomp \
            -ldflags "-X main.version=$v -X main.gitCommit=module-proxy" -o "$out/usr/bin/runc" .) \
            > "$work/build.log" 2>&1 || { tail -30 "$work/build.log" >&2; log "$v: build failed ($work/build.log)"; exit 1; }
        "$out/usr/bin/runc" --version | grep "^runc version $v$" >/dev/null || { log "$v: the built runc does not report $v"; exit 1; }
        echo "$mod from the Go module proxy, cgo + seccomp (Debian 12 libseccomp), built $(date -u +%FT%TZ) with $(cd "$work/src" && GOTOOLCHAIN=auto go env GOVERSION) in $((SECONDS - t0)) s" > "$out/BUILD-INFO"
        rm -rf "$work"
        log "$v: built in $((SECONDS - t0)) s"
    fi
    link_runtime "$out" "runc-$v"
    log "$v: $("$out/usr/bin/runc" --version | head -1) in $out"
done
