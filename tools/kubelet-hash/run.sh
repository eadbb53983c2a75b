#!/usr/bin/env bash
# Computes the golden container hashes (fixtures/golden/hashes.jsonl) with the real kubelet code of
# the given Kubernetes versions and compares them with the committed lines, or prints them.
#
#   run.sh [--check|--print] [--tmp-cache] VERSION...   VERSION: 1.36 (newest served patch), 1.36.3
#
#   --check (default)  per version: compare the generated lines with that version's lines in
#                      fixtures/golden/hashes.jsonl byte for byte; print the counts and the first
#                      differences. Exit 1 when any line of any version differs, 2 when a version
#                      cannot be built or has no committed lines.
#   --print            print the generated lines (hashes.jsonl format) on stdout, nothing else.
#   --tmp-cache        build each version with a private GOCACHE in its work dir, removed after
#                      the version (for versions not in the shared build cache: one compile adds
#                      about 0.5-1 GB to the cache; the disk here once ran full).
#
# Per version: the newest k8s.io/kubernetes patch the Go module proxy serves (as
# scripts/k8s-lab.sh resolves it), a module in $KUBELET_REHASH_CACHE (default
# /var/cache/kubelet-rehash)/kubelet-hash/<version> outside the clone that requires
# k8s.io/kubernetes at that version and replaces every staging module (k8s.io/api,
# k8s.io/apimachinery, ...) with its v0.Y.Z release (the exact patch when served, else the nearest
# served patch of the minor, recorded in BUILD-INFO), main.go (+ without_resources.go where
# pkg/kubelet/container has HashContainerWithoutResources), `go mod tidy`, `go build`, run on
# fixtures/golden/specs.jsonl. The Go module and build caches are Go's own. Go commands run under
# `nice`. GOTOOLCHAIN etc. come from the environment.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
golden="$repo/fixtures/golden"
cache="${KUBELET_REHASH_CACHE:-/var/cache/kubelet-rehash}/kubelet-hash"

log() { echo "kubelet-hash: $*" >&2; }
die() { echo "kubelet-hash: $*" >&2; exit 2; }

# shellcheck source=../k8s-module.sh
. "$here/../k8s-module.sh"

# ---- build and run --------------------------------------------------------------------------

build() { # full version -> the binary's path on stdout
    local full="$1" work src line m tags="" t0=$SECONDS
    work="$cache/$full"
    mkdir -p "$work"
    (cd "$work" && nice go mod download "k8s.io/kubernetes@v$full") >/dev/null 2>&1 \
        || die "$full: the Go module proxy refuses k8s.io/kubernetes@v$full"
    src="$(go env GOMODCACHE)/k8s.io/kubernetes@v$full"
    [ -f "$src/pkg/kubelet/container/helpers.go" ] || die "$full: no pkg/kubelet/container/helpers.go in $src"
    if [ ! -f "$work/go.mod.in" ] || ! grep -q "k8s.io/kubernetes v$full\$" "$work/go.mod.in"; then
        log "$full: resolving the staging modules"
        k8s_module_gomod kubelethash "$full" "$src" > "$work/go.mod.in"
    fi
    if grep -q 'vbom\.ml/util => \./stub' "$work/go.mod.in"; then
        mkdir -p "$work/stub/vbom.ml-util"
        printf 'module vbom.ml/util\n' > "$work/stub/vbom.ml-util/go.mod"
    fi
    cp "$work/go.mod.in" "$work/go.mod"
    rm -f "$work/go.sum"
    cp "$here/main.go" "$here/without_resources.go" "$work/"
    grep -q '^func HashContainerWithoutResources(' "$src/pkg/kubelet/container/helpers.go" && tags="withoutresources"
    log "$full: go mod tidy"
    (cd "$work" && nice go mod tidy) > "$work/tidy.log" 2>&1 \
        || { tail -20 "$work/tidy.log" >&2; die "$full: go mod tidy failed ($work/tidy.log)"; }
    log "$full: go build ($(go env GOVERSION)${tags:+, -tags $tags})"
    (cd "$work" && CGO_ENABLED=0 nice go build -trimpath -tags "$tags" -o "$work/kubelet-hash" .) > "$work/build.log" 2>&1 \
        || { tail -30 "$work/build.log" >&2; die "$full: go build failed ($work/build.log)"; }
    {
        echo "k8s.io/kubernetes v$full, built $(date -u +%FT%TZ) with $(go env GOVERSION) in $((SECONDS - t0)) s${tags:+, -tags $tags}"
        (cd "$work" && go list -m k8s.io/api k8s.io/apimachinery github.com/davecgh/go-spew k8s.io/utils 2>/dev/null) | sed 's/^/module /'
        awk -v f="v0.${full#*.}" '/=> k8s.io/ && $4 != f {print "staging " $1 " at " $4 " (the proxy does not serve " f ")"}' "$work/go.mod"
    } > "$work/BUILD-INFO"
    log "$full: built in $((SECONDS - t0)) s"
    echo "$work/kubelet-hash"
}

mode=check
tmp_cache=0
versions=()
for a in "$@"; do
    case "$a" in
        --check) mode=check ;;
        --print) mode=print ;;
        --tmp-cache) tmp_cache=1 ;;
        -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "${BASH_SOURCE[0]}"; exit 0 ;;
        -*) die "unknown option $a" ;;
        *) versions+=("$a") ;;
    esac
done
[ "${#versions[@]}" -gt 0 ] || die "which versions? (run.sh [--check|--print] 1.36 ...)"

status=0
for v in "${versions[@]}"; do
    t0=$SECONDS
    # a version that cannot be had or built is reported (exit 2) and the others still run
    full="$(resolve_version "$v")" || { [ "$status" = 1 ] || status=2; continue; }
    if [ "$tmp_cache" = 1 ]; then export GOCACHE="$cache/$full/gocache"; fi
    bin="$(build "$full")" || bin=""
    [ "$tmp_cache" = 0 ] || rm -rf "$cache/$full/gocache"
    [ -n "$bin" ] || { [ "$status" = 1 ] || status=2; continue; }
    minor="$(cut -d. -f1,2 <<<"$full")"
    out="$cache/$full/hashes-$minor.jsonl"
    # the binary (about 50 MB) is not kept: a rebuild from the build cache takes seconds
    "$bin" -version "$minor" "$golden/specs.jsonl" > "$out" || { log "$full: kubelet-hash failed"; rm -f "$bin"; [ "$status" = 1 ] || status=2; continue; }
    rm -f "$bin"
    if [ "$mode" = print ]; then
        cat "$out"
        log "$full: $(wc -l < "$out") lines in $((SECONDS - t0)) s"
        continue
    fi
    committed="$cache/$full/committed-$minor.jsonl"
    grep -F "\"version\": \"$minor\"" "$golden/hashes.jsonl" > "$committed" || true
    ncommitted=$(wc -l < "$committed")
    if [ "$ncommitted" = 0 ]; then
        log "$full: fixtures/golden/hashes.jsonl has no \"$minor\" lines to check against"
        [ "$status" = 1 ] || status=2
        continue
    fi
    # line by line, byte-exact: both files are in specs.jsonl order
    read -r equal differ < <(awk 'NR == FNR {c[FNR] = $0; n = FNR; next}
        {if (FNR in c && c[FNR] == $0) e++; else d++} END {m = FNR; if (n > m) d += n - m; print e + 0, d + 0}' "$committed" "$out")
    ngen=$(wc -l < "$out")
    cat "$cache/$full/BUILD-INFO" | sed "s/^/kubelet-hash: $full: /" >&2
    if [ "$differ" = 0 ] && [ "$ngen" = "$ncommitted" ]; then
        echo "kubelet-hash: $full ($minor): $equal/$ncommitted lines equal to the committed ones ($((SECONDS - t0)) s)"
    else
        echo "kubelet-hash: $full ($minor): $equal/$ncommitted lines equal, $differ differ ($ngen generated) ($((SECONDS - t0)) s)"
        diff --label "committed $minor" --label "generated $full" -u "$committed" "$out" | head -30 || true
        status=1
    fi
done
exit "$status"
