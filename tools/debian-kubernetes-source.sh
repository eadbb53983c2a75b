# Sourced by the tools' run.sh scripts: provides the real Kubernetes source tree that Debian 12
# ships, as the source package `kubernetes` (1.20.5+really1.20.2: Kubernetes 1.20.2, with vendor/
# and staging/), unpacked by `apt-get source` with Debian's patches applied. Debian has no
# k8s.io/api or k8s.io/apimachinery -dev package; this source package is the only Kubernetes
# source it carries.
#
# The download uses the ordinary client only: `apt-get source` through a private apt state under
# the cache directory, whose deb-src entries are derived from this machine's Debian `deb`
# entries. The system's apt configuration is not changed, and nothing lands in the repository.
#
#   debian_kubernetes_source    sets KUBE_TREE (the unpacked tree) and KUBE_ORIGIN (for logs)
#
# Environment:
#   KUBERNETES_SRC        use this Kubernetes source tree instead (nothing is downloaded)
#   REHASH_TOOLS_CACHE    cache directory (default ${XDG_CACHE_HOME:-$HOME/.cache}/kubelet-rehash)

tools_die() { echo "$(basename "$(dirname "$0")"): $*" >&2; exit 2; }

# Installs missing Debian packages (needs root), without starting services.
tools_need_packages() {
    local missing=() p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    # shellcheck source=../scripts/apt-install.sh
    . "$(dirname "${BASH_SOURCE[0]}")/../scripts/apt-install.sh"
    apt_install_quietly "${missing[@]}" || tools_die "could not install ${missing[*]}"
}

# Writes deb-src twins of this machine's Debian `deb` entries into $1 (the release's own suites
# only: third-party repositories usually publish no sources).
_tools_write_deb_src_entries() {
    local out=$1 codename f
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    [ -n "$codename" ] || tools_die "no VERSION_CODENAME in /etc/os-release"
    mkdir -p "$out/sources.list.d"
    : > "$out/sources.list"
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -e "$f" ] || continue
        awk -v cn="$codename" '
            function flush() {
                if (is_deb && own_suite) print st
                st = ""; is_deb = 0; own_suite = 0
            }
            /^[ \t]*$/ { flush(); next }
            /^#/ { next }
            $1 == "Types:" {
                for (i = 2; i <= NF; i++) if ($i == "deb") is_deb = 1
                st = st "Types: deb-src\n"; next
            }
            {
                st = st $0 "\n"
                if ($1 == "Suites:") for (i = 2; i <= NF; i++) if ($i == cn || index($i, cn "-") == 1) own_suite = 1
            }
            END { flush() }' "$f" > "$out/sources.list.d/$(basename "$f")"
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -e "$f" ] || continue
        awk -v cn="$codename" '
            $1 == "deb" {
                s = 2; if ($2 ~ /^\[/) { while ($s !~ /\]$/) s++; s++ }
                suite = $(s + 1)
                if (suite == cn || index(suite, cn "-") == 1) { $1 = "deb-src"; print }
            }' "$f" >> "$out/sources.list"
    done
    cat "$out/sources.list" "$out"/sources.list.d/* 2>/dev/null | grep -q . \
        || tools_die "no Debian $codename entries in /etc/apt to derive deb-src entries from"
}

debian_kubernetes_source() {
    if [ -n "${KUBERNETES_SRC:-}" ]; then
        KUBE_TREE=$KUBERNETES_SRC
        KUBE_ORIGIN="KUBERNETES_SRC=$KUBERNETES_SRC"
        return 0
    fi
    local cache=${REHASH_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubelet-rehash}/debian-kubernetes
    if [ ! -f "$cache/SOURCE-PACKAGE" ]; then
        # dpkg-source (dpkg-dev) unpacks the package and applies Debian's patches.
        tools_need_packages dpkg-dev
        local apt="$cache/apt"
        rm -rf "$cache" && mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$cache/src"
        _tools_write_deb_src_entries "$apt"
        local opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o "Dir::Etc::SourceParts=$apt/sources.list.d"
            -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o APT::Sandbox::User=root)
        echo "$(basename "$(dirname "$0")"): fetching Debian's kubernetes source package (about 35 MB) into $cache" >&2
        apt-get "${opts[@]}" -qq update || tools_die "apt-get update of the derived deb-src entries failed"
        (cd "$cache/src" && apt-get "${opts[@]}" -qq source kubernetes >/dev/null) \
            || tools_die "apt-get source kubernetes failed"
        local dscs=("$cache"/src/kubernetes_*.dsc) trees=("$cache"/src/kubernetes-*/)
        [ -f "${dscs[0]}" ] && [ -d "${trees[0]}" ] || tools_die "apt-get source left no unpacked tree in $cache/src"
        rm -rf "$apt" "$cache"/src/*.tar.* "$cache"/src/*.dsc
        echo "$(basename "${dscs[0]}" .dsc) ${trees[0]%/}" > "$cache/SOURCE-PACKAGE"
    fi
    local package
    read -r package KUBE_TREE < "$cache/SOURCE-PACKAGE"
    KUBE_ORIGIN="Debian source package $package"
}
