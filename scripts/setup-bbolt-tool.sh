#!/usr/bin/env bash
# Usage: scripts/setup-bbolt-tool.sh check|rewrite
# Idempotent: builds the Go bbolt program tools/bbolt-<tool> into .cache/bin/bbolt-<tool>:
#   check   — Go bbolt's own tx.Check, run by the tests on every meta.db they write
#             (scripts/setup-bbolt-check.sh);
#   rewrite — the Go bbolt reference rewriter of scripts/bench-node.sh (not used by the tests).
# Installs Debian's Go toolchain and bbolt
# source (golang-go, golang-github-coreos-bbolt-dev, golang-golang-x-sys-dev) when missing and
# builds fully offline against that source: module mode with go.mod's `replace` directives
# pointing into /usr/share/gocode, no proxy, no checksum database, caches under .cache/.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tool="${1:?usage: setup-bbolt-tool.sh check|rewrite}"
case "$tool" in
    check | rewrite) ;;
    *) echo "setup-bbolt-tool: unknown tool '$tool' (check or rewrite)" >&2; exit 2 ;;
esac
cache="$here/.cache"
bin="$cache/bin/bbolt-$tool"
src="$here/tools/bbolt-$tool"
log() { echo "setup-bbolt-$tool: $*"; }
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

need=()
for p in golang-go golang-github-coreos-bbolt-dev golang-golang-x-sys-dev; do
    installed "$p" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
    . "$here/scripts/apt-install.sh"
    apt_install_quietly "${need[@]}"
    log "installed ${need[*]}"
fi

# Rebuild when the binary is missing or older than its source (or the bbolt source).
if [ -x "$bin" ] && [ -z "$(find "$src" /usr/share/gocode/src/go.etcd.io/bbolt -newer "$bin" -type f -print -quit)" ]; then
    log "$bin is up to date"
    exit 0
fi
mkdir -p "$cache/bin"
(
    cd "$src"
    env GOCACHE="$cache/go-build" GOPATH="$cache/gopath" GOFLAGS=-mod=mod GOPROXY=off \
        GOSUMDB=off GONOSUMDB='*' GOTOOLCHAIN=local CGO_ENABLED=0 \
        go build -trimpath -o "$bin.tmp" .
)
mv -f "$bin.tmp" "$bin"
log "built $bin ($(go version | awk '{print $3}'), bbolt $(dpkg-query -W -f='${Version}' golang-github-coreos-bbolt-dev))"
