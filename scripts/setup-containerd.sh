#!/usr/bin/env bash
# Idempotent setup for storepatch's live containerd test (tests/containerd_live.rs).
#
# * containerd 1.6.20 + runc + busybox-static: Debian 12 packages, installed normally (the
#   package's own service is never started: a temporary policy-rc.d refuses it).
# * containerd 1.7.24 (Debian 13 trixie) and 2.1.9 (Debian sid): fetched from Debian's own
#   archive through a PRIVATE apt configuration under .cache/apt-private (scripts/apt-private.sh:
#   its own sources list, lists and cache directories, on the system's mirror), `apt-get download`
#   and `dpkg-deb -x` into .cache/runtimes/containerd-<version>/. Never installed system-wide.
#   Each folder must hold usr/bin/{containerd,ctr,containerd-shim-runc-v2}, which must run here.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="$here/.cache"
priv="$cache/apt-private"
runtimes="$cache/runtimes"
# version wanted -> Debian suite it comes from
declare -A SUITE=( [1.7.24]=trixie [2.1.9]=sid )

log() { echo "setup-containerd: $*"; }
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

# ---- 1. Debian 12 packages -------------------------------------------------------------------
need=()
installed containerd || need+=(containerd)
installed runc || need+=(runc)
# a dynamically linked busybox cannot run inside a one-layer image: the static one is required
installed busybox-static || need+=(busybox-static)
if [ ${#need[@]} -gt 0 ]; then
    . "$here/scripts/apt-install.sh"
    apt_install_quietly "${need[@]}"
    log "installed ${need[*]}"
fi
log "system: $(containerd --version), $(runc --version | head -1)"
# the same layout for the system line, so the test finds every line under .cache/runtimes/
sys16="$runtimes/containerd-1.6.20/usr/bin"
mkdir -p "$sys16"
for b in containerd ctr containerd-shim-runc-v2; do ln -sfn "/usr/bin/$b" "$sys16/$b"; done
case "$(containerd --version)" in
    *" 1.6.20"*) ;;
    *) echo "setup-containerd: /usr/bin/containerd is not 1.6.20: $(containerd --version)" >&2; exit 1 ;;
esac

# ---- 2. newer lines from a private apt configuration -----------------------------------------
runtime_ok() { # $1 = dir
    [ -x "$1/usr/bin/containerd" ] && [ -x "$1/usr/bin/ctr" ] && [ -x "$1/usr/bin/containerd-shim-runc-v2" ] \
        && "$1/usr/bin/containerd" --version >/dev/null 2>&1
}

missing=()
for v in "${!SUITE[@]}"; do
    runtime_ok "$runtimes/containerd-$v" || missing+=("$v")
done

if [ ${#missing[@]} -gt 0 ]; then
    . "$here/scripts/apt-private.sh"
    # shellcheck disable=SC2046 # one word per suite
    apt_private_init $(printf '%s\n' "${SUITE[@]}" | sort -u)
    APT=("${APT_PRIVATE[@]}")
    for v in "${missing[@]}"; do
        # exact Debian version of containerd <v> in the private suites, e.g. 1.7.24~ds1-6+deb13u1
        debver="$(apt-cache "${APT[@]}" madison containerd | awk -F'|' '{gsub(/ /,"",$2); print $2}' \
                  | grep -E "^([0-9]+:)?${v//./\\.}([~+-]|$)" | head -1 || true)"
        if [ -z "$debver" ]; then
            echo "setup-containerd: no containerd $v in ${SUITE[$v]}; the archive has:" >&2
            apt-cache "${APT[@]}" madison containerd >&2 || true
            exit 1
        fi
        log "downloading containerd=$debver (${SUITE[$v]})"
        (cd "$priv/debs" && apt-get "${APT[@]}" download "containerd=$debver" 2>&1 | grep -v "unsandboxed as root" || true)
        # apt-get download names the file <pkg>_<version without epoch, ':' -> %3a>_<arch>.deb
        deb="$(find "$priv/debs" -maxdepth 1 -name "containerd_${debver#*:}_*.deb" | head -1)"
        [ -n "$deb" ] || { echo "setup-containerd: downloaded .deb for $debver not found in $priv/debs" >&2; exit 1; }
        dest="$runtimes/containerd-$v"
        rm -rf "$dest.tmp" && mkdir -p "$dest.tmp"
        dpkg-deb -x "$deb" "$dest.tmp"
        echo "$debver" > "$dest.tmp/DEBIAN_VERSION"
        rm -rf "$dest" && mv "$dest.tmp" "$dest"
        if ! runtime_ok "$dest"; then
            echo "setup-containerd: $dest/usr/bin/containerd does not run on this system:" >&2
            "$dest/usr/bin/containerd" --version >&2 || true
            exit 1
        fi
    done
fi
for v in 1.6.20 "${!SUITE[@]}"; do
    log "$runtimes/containerd-$v: $("$runtimes/containerd-$v/usr/bin/containerd" --version)"
done
