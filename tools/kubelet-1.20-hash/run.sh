#!/usr/bin/env bash
# Regenerates the kubelet 1.20 part of the golden baseline with the real kubelet code and diffs
# it against fixtures/golden: the "1.20" lines of hashes.jsonl (all 300 specs) and the reference
# bytes spew/1.20/ and json/1.20/ (first 20 specs). Exit 0 when everything is identical, 1 on
# any difference, 2 when the inputs cannot be had.
#
# What runs: main.go (ours: reads specs.jsonl, decodes each container with encoding/json into
# 1.20's v1.Container, calls the kubelet's HashContainer) compiled with Debian's Go in GOPATH
# mode against Debian 12's `kubernetes` source package, Kubernetes 1.20.2 with its vendor/ tree
# (k8s.io/api, apimachinery, go-spew v1.1.1 ...; see ../debian-kubernetes-source.sh).
# GO111MODULE=off and GOPROXY=off: nothing is downloaded by Go. The build compiles a few hundred
# vendored packages: about 2 minutes on 2 cores, once per run.
#
# Only version 1.20 can be regenerated this way: Debian ships no other Kubernetes tree. The
# golden set was made from the types of kubernetes-1.20.15 (versions.json); its README records
# that patch releases within a minor do not change the hashed types, which this run confirms for
# 1.20.2 as far as the golden specs reach.
#
# Environment: KUBERNETES_SRC and REHASH_TOOLS_CACHE (see ../debian-kubernetes-source.sh);
# KEEP_OUTPUT=dir also keeps the generated files there.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
golden="$repo/fixtures/golden"

# shellcheck source=../debian-kubernetes-source.sh
. "$here/../debian-kubernetes-source.sh"
tools_need_packages golang-go
debian_kubernetes_source
[ -f "$KUBE_TREE/pkg/kubelet/container/helpers.go" ] || tools_die "$KUBE_TREE has no pkg/kubelet/container"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Our command must sit inside k8s.io/kubernetes so that the tree's vendor/ resolves its imports
# (a v1.Container from another import path would be another type). The GOPATH's
# k8s.io/kubernetes is therefore a directory of links to the tree's entries plus our command:
# the cached tree itself is not modified.
kube="$work/gopath/src/k8s.io/kubernetes"
mkdir -p "$kube/cmd/kubelet-rehash-golden-1.20"
for entry in "$KUBE_TREE"/*; do
    [ "$(basename "$entry")" = cmd ] || ln -s "$entry" "$kube/"
done
for entry in "$KUBE_TREE"/cmd/*; do ln -s "$entry" "$kube/cmd/"; done
ln -s "$here/main.go" "$kube/cmd/kubelet-rehash-golden-1.20/main.go"

echo "kubelet-1.20-hash: $(go version)"
echo "kubelet-1.20-hash: kubelet code from $KUBE_ORIGIN ($KUBE_TREE)"
echo "kubelet-1.20-hash: building (GOPATH mode, vendored dependencies)..."
(cd "$work" && GO111MODULE=off GOPATH="$work/gopath" GOPROXY=off GOFLAGS= GOTOOLCHAIN=local \
    CGO_ENABLED=0 GOCACHE="${GOCACHE:-$work/gocache}" \
    go build -o "$work/kubelet-1.20-hash" k8s.io/kubernetes/cmd/kubelet-rehash-golden-1.20) \
    || tools_die "go build failed"

out="$work/out"
"$work/kubelet-1.20-hash" "$golden/specs.jsonl" "$out" > "$out.hashes.jsonl"
[ -z "${KEEP_OUTPUT:-}" ] || { mkdir -p "$KEEP_OUTPUT" && cp -r "$out"/. "$KEEP_OUTPUT"/ && cp "$out.hashes.jsonl" "$KEEP_OUTPUT/hashes-1.20.jsonl"; }

status=0
grep -F '"version": "1.20"' "$golden/hashes.jsonl" > "$work/committed-1.20.jsonl"
specs=$(wc -l < "$golden/specs.jsonl")
if diff -u --label committed --label generated "$work/committed-1.20.jsonl" "$out.hashes.jsonl" > "$work/diff"; then
    echo "kubelet-1.20-hash: hashes.jsonl: $specs/$specs specs give the committed 1.20 hash"
else
    head -40 "$work/diff"
    echo "kubelet-1.20-hash: hashes.jsonl: $(grep -c '^+{' "$work/diff" || true) 1.20 lines differ" >&2
    status=1
fi
for kind in spew json; do
    n=$(find "$golden/$kind/1.20" -type f | wc -l)
    if diff -r "$golden/$kind/1.20" "$out/$kind/1.20" > "$work/diff-$kind"; then
        echo "kubelet-1.20-hash: $kind/1.20: $n/$n reference files byte-identical"
    else
        head -20 "$work/diff-$kind"
        echo "kubelet-1.20-hash: $kind/1.20 differs" >&2
        status=1
    fi
done
exit "$status"
