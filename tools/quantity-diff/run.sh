#!/usr/bin/env bash
# Regenerates fixtures/quantity/go-differential.tsv with real Go and real apimachinery code and
# diffs it against the committed file: exit 0 when every line matches, 1 on any difference,
# 2 when the inputs cannot be had.
#
# What runs: tools/quantity-diff/main.go + resource/zz_rehash_dump.go (ours), compiled in
# GOPATH mode (GO111MODULE=off, GOPROXY=off: no module download) against
#   - k8s.io/apimachinery pkg/api/resource/{quantity,amount,math,scale_int,suffix}.go, unmodified,
#     from Debian 12's `kubernetes` source package (Kubernetes 1.20.2; see
#     ../debian-kubernetes-source.sh);
#   - gopkg.in/inf.v0 from Debian's golang-gopkg-inf.v0-dev (0.9.1);
#   - Debian's Go (golang-go, 1.19.8 in Debian 12).
# The tokens are the first column of the committed tsv; the Go output is what is compared.
#
# Environment: KUBERNETES_SRC and REHASH_TOOLS_CACHE (see ../debian-kubernetes-source.sh);
# KEEP_OUTPUT=path also writes the generated tsv there.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
committed="$repo/fixtures/quantity/go-differential.tsv"
resource_files=(quantity.go amount.go math.go scale_int.go suffix.go)
inf_dir=/usr/share/gocode/src/gopkg.in/inf.v0

# shellcheck source=../debian-kubernetes-source.sh
. "$here/../debian-kubernetes-source.sh"
die() { tools_die "$@"; }
tools_need_packages golang-go golang-gopkg-inf.v0-dev
debian_kubernetes_source
resource_dir="$KUBE_TREE/staging/src/k8s.io/apimachinery/pkg/api/resource"
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
echo "quantity-diff: apimachinery resource from $KUBE_ORIGIN:"
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
