#!/usr/bin/env bash
# Regenerates fixtures/checkpoints with real Go code and compares it with the committed files
# byte for byte: exit 0 when identical, 1 on any difference, 2 when the inputs cannot be had.
#
# What runs: ckpt/ (ours): minimal transcriptions of each kubelet version's checkpoint structs,
# constructors, MarshalCheckpoint and VerifyChecksum/restore paths (every package names its
# source tag and path), and ckpt/cmd, which writes each case's file as the writing version does
# and checks it with every reading version's code. Compiled with Debian's Go in GOPATH mode
# against real dependencies, so the text hashed is what the kubelet hashes:
#   - go-spew 1.1.1 from Debian's golang-github-davecgh-go-spew-dev (the kubelet vendors 1.1.1);
#   - k8s.io/apimachinery pkg/api/resource (five files, unmodified) from Debian 12's kubernetes
#     source package (1.20.2; Quantity's fields are unchanged up to 1.32) and gopkg.in/inf.v0
#     from golang-gopkg-inf.v0-dev, as ../quantity-diff/run.sh uses them.
# GO111MODULE=off and GOPROXY=off: nothing is downloaded by Go.
#
# Environment: KUBERNETES_SRC and REHASH_TOOLS_CACHE (see ../debian-kubernetes-source.sh);
# KEEP_OUTPUT=dir also keeps the generated tree there.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
committed="$repo/fixtures/checkpoints"
resource_files=(quantity.go amount.go math.go scale_int.go suffix.go)

# shellcheck source=../debian-kubernetes-source.sh
. "$here/../debian-kubernetes-source.sh"
tools_need_packages golang-go golang-gopkg-inf.v0-dev golang-github-davecgh-go-spew-dev
debian_kubernetes_source
resource_dir="$KUBE_TREE/staging/src/k8s.io/apimachinery/pkg/api/resource"
for f in "${resource_files[@]}"; do
    [ -f "$resource_dir/$f" ] || tools_die "missing $resource_dir/$f"
done
spew_dir=/usr/share/gocode/src/github.com/davecgh/go-spew
[ -d "$spew_dir/spew" ] || tools_die "missing $spew_dir"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
src="$work/gopath/src"
mkdir -p "$src/k8s.io/apimachinery/pkg/api/resource" "$src/gopkg.in" "$src/github.com/davecgh" "$src/rehash"
for f in "${resource_files[@]}"; do ln -s "$resource_dir/$f" "$src/k8s.io/apimachinery/pkg/api/resource/$f"; done
ln -s /usr/share/gocode/src/gopkg.in/inf.v0 "$src/gopkg.in/inf.v0"
ln -s "$spew_dir" "$src/github.com/davecgh/go-spew"
ln -s "$here/ckpt" "$src/rehash/ckpt"

echo "kubelet-checkpoints: $(go version)"
echo "kubelet-checkpoints: go-spew from golang-github-davecgh-go-spew-dev $(dpkg-query -W -f='${Version}' golang-github-davecgh-go-spew-dev 2>/dev/null || echo '(version unknown)')"
echo "kubelet-checkpoints: apimachinery resource from $KUBE_ORIGIN"
(cd "$src/rehash/ckpt/cmd" \
    && GO111MODULE=off GOPATH="$work/gopath" GOPROXY=off GOFLAGS= GOTOOLCHAIN=local CGO_ENABLED=0 \
        GOCACHE="${GOCACHE:-$work/gocache}" go build -o "$work/kubelet-checkpoints" .) \
    || tools_die "go build failed"

out="$work/out"
"$work/kubelet-checkpoints" "$out"
[ -z "${KEEP_OUTPUT:-}" ] || { mkdir -p "$KEEP_OUTPUT" && cp -r "$out"/. "$KEEP_OUTPUT"/; }

cases=$(find "$out" -name verdicts.json | wc -l)
if diff -r "$committed" "$out" > "$work/diff"; then
    echo "kubelet-checkpoints: $cases/$cases cases byte-identical to fixtures/checkpoints"
else
    head -40 "$work/diff"
    echo "kubelet-checkpoints: fixtures/checkpoints differs from the generated cases" >&2
    exit 1
fi
