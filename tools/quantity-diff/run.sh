#!/usr/bin/env bash
# Regenerates fixtures/quantity/go-differential.tsv with real Go and real apimachinery code and
# diffs it against the committed file: exit 0 when every line matches, 1 on any difference,
# 2 when the inputs cannot be had.
#
# What runs: tools/quantity-diff/main.go + resource/zz_rehash_dump.go (ours), compiled in
# GOPATH mode (GO111MODULE=off, GOPROXY=off: no module download) against
#   - k8s.io/apimachinery pkg/api/resource/{quantity,amount,math,scale_int,suffix}.go, unmodified,
#     from Debian 12's `kubernetes` source package (1.20.5+really1.20.2: Kubernetes 1.20.2;
#     Debian ships no apimachinery -dev package);
#   - gopkg.in/inf.v0 from Debian's golang-gopkg-inf.v0-dev (0.9.1);
#   - Debian's Go (golang-go, 1.19.8 in Debian 12).
# The tokens are the first column of the committed tsv; the Go output is what is compared.
#
# Inputs are fetched with the ordinary Debian clients only: missing packages with apt-get
# install (needs root), the source package with `apt-get source --download-only` through a
# private apt state in the cache directory (deb-src entries derived from the Debian entries
# this machine already has; the system's apt configuration is not changed). Nothing fetched is
# copied into the repository.
#
# Environment:
#   KUBERNETES_SRC       a Kubernetes source tree to use instead (must contain
#                        staging/src/k8s.io/apimachinery/pkg/api/resource)
#   QUANTITY_DIFF_CACHE  where the Debian source is kept (default
#                        ${XDG_CACHE_HOME:-$HOME/.cache}/kubelet-rehash/quantity-diff)
#   KEEP_OUTPUT=path     also write the generated tsv there
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
committed="$repo/fixtures/quantity/go-differential.tsv"
cache=${QUANTITY_DIFF_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubelet-rehash/quantity-diff}
resource_files=(quantity.go amount.go math.go scale_int.go suffix.go)
inf_dir=/usr/share/gocode/src/gopkg.in/inf.v0

die() { echo "quantity-diff: $*" >&2; exit 2; }

need_packages=()
command -v go >/dev/null || need_packages+=(golang-go)
[ -f "$inf_dir/dec.go" ] || need_packages+=(golang-gopkg-inf.v0-dev)
if [ ${#need_packages[@]} -gt 0 ]; then
    # shellcheck source=../../scripts/apt-install.sh
    . "$repo/scripts/apt-install.sh"
    apt_install_quietly "${need_packages[@]}" || die "could not install ${need_packages[*]}"
fi

# Writes deb-src twins of this machine's Debian `deb` entries (the release's own suites only:
# third-party repositories usually publish no sources).
write_deb_src_entries() {
    local out=$1 codename
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    [ -n "$codename" ] || die "no VERSION_CODENAME in /etc/os-release"
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
    grep -qs . "$out/sources.list" "$out"/sources.list.d/* \
        || die "no Debian $codename entries in /etc/apt to derive deb-src entries from"
}

fetch_debian_kubernetes_source() {
    local apt_dir="$cache/apt" dest=$1
    rm -rf "$apt_dir"
    mkdir -p "$apt_dir/sources.list.d" "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/src"
    write_deb_src_entries "$apt_dir"
    local opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o "Dir::Etc::SourceParts=$apt_dir/sources.list.d"
        -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" -o APT::Sandbox::User=root)
    apt-get "${opts[@]}" -qq update || die "apt-get update of the deb-src entries failed"
    (cd "$apt_dir/src" && apt-get "${opts[@]}" -qq source --download-only kubernetes) \
        || die "apt-get source --download-only kubernetes failed"
    local origs=("$apt_dir"/src/kubernetes_*.orig.tar.*) debian_tars=("$apt_dir"/src/kubernetes_*.debian.tar.*)
    local orig=${origs[0]} debian_tar=${debian_tars[0]}
    [ -f "$orig" ] && [ -f "$debian_tar" ] || die "the source package has no orig or debian tarball"
    # The resource package is taken from the upstream tarball; a Debian patch to it would make
    # that tree differ from the packaged one.
    if tar -xOf "$debian_tar" --wildcards 'debian/patches/*' 2>/dev/null | grep -q 'apimachinery/pkg/api/resource/'; then
        die "a Debian patch in $(basename "$debian_tar") touches pkg/api/resource; apply it first"
    fi
    local top
    # sed reads the whole listing: head would close the pipe early and pipefail would trip.
    top=$(tar -tf "$orig" | sed -n '1s|/.*||p')
    local members=()
    for f in "${resource_files[@]}"; do members+=("$top/staging/src/k8s.io/apimachinery/pkg/api/resource/$f"); done
    rm -rf "$dest.tmp" && mkdir -p "$dest.tmp"
    tar -xf "$orig" -C "$dest.tmp" "${members[@]}"
    local dscs=("$apt_dir"/src/kubernetes_*.dsc)
    basename "${dscs[0]}" .dsc > "$dest.tmp/$top/DEBIAN-SOURCE-PACKAGE"
    rm -rf "$dest" && mv "$dest.tmp/$top" "$dest" && rm -rf "$dest.tmp" "$apt_dir"
}

if [ -n "${KUBERNETES_SRC:-}" ]; then
    src=$KUBERNETES_SRC
    origin="KUBERNETES_SRC=$src"
else
    src="$cache/kubernetes"
    [ -f "$src/DEBIAN-SOURCE-PACKAGE" ] || { mkdir -p "$cache" && fetch_debian_kubernetes_source "$src"; }
    origin="Debian source package $(cat "$src/DEBIAN-SOURCE-PACKAGE")"
fi
resource_dir="$src/staging/src/k8s.io/apimachinery/pkg/api/resource"
for f in "${resource_files[@]}"; do
    [ -f "$resource_dir/$f" ] || die "missing $resource_dir/$f"
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The GOPATH links the sources in place: the package is apimachinery's five files plus our dump
# helper; the protobuf and deepcopy files are left out (nothing on the parse/format path uses them).
pkg="$work/gopath/src/k8s.io/apimachinery/pkg/api/resource"
mkdir -p "$pkg" "$work/gopath/src/gopkg.in" "$work/gopath/src/rehash/quantity-diff"
for f in "${resource_files[@]}"; do ln -s "$resource_dir/$f" "$pkg/$f"; done
ln -s "$here/resource/zz_rehash_dump.go" "$pkg/zz_rehash_dump.go"
ln -s "$inf_dir" "$work/gopath/src/gopkg.in/inf.v0"
ln -s "$here/main.go" "$work/gopath/src/rehash/quantity-diff/main.go"

echo "quantity-diff: $(go version)"
echo "quantity-diff: apimachinery resource from $origin:"
(cd "$resource_dir" && sha256sum "${resource_files[@]}") | sed 's/^/    /'
echo "quantity-diff: gopkg.in/inf.v0 from golang-gopkg-inf.v0-dev $(dpkg-query -W -f='${Version}' golang-gopkg-inf.v0-dev 2>/dev/null || echo '(version unknown)')"

(cd "$work/gopath/src/rehash/quantity-diff" \
    && GO111MODULE=off GOPATH="$work/gopath" GOPROXY=off GOFLAGS= GOTOOLCHAIN=local CGO_ENABLED=0 \
        GOCACHE="$work/gocache" go build -o "$work/quantity-diff" .) || die "go build failed"

generated="$work/go-differential.tsv"
cut -f1 "$committed" | "$work/quantity-diff" > "$generated"
[ -z "${KEEP_OUTPUT:-}" ] || cp "$generated" "$KEEP_OUTPUT"

lines=$(wc -l < "$committed")
if diff -u --label committed --label generated "$committed" "$generated" > "$work/diff"; then
    echo "quantity-diff: $lines/$lines lines identical to fixtures/quantity/go-differential.tsv"
else
    differing=$(grep -c '^-[^-]' "$work/diff" || true)
    head -40 "$work/diff"
    echo "quantity-diff: $differing of $lines lines differ from fixtures/quantity/go-differential.tsv" >&2
    exit 1
fi
