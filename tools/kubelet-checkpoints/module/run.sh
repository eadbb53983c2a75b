#!/usr/bin/env bash
# Every (writer, reader) pair of kubelet versions for every checkpoint file, decided by the real
# kubelet code of both versions: fixtures/checkpoints-module.
#
#   run.sh [--check|--write] [VERSION...]
#
# VERSION: an exact release (1.37.2) or a minor (1.37: its newest patch the Go module proxy
# serves, ../k8s-module.sh). Default: the releases the committed fixtures were made with
# (1.30.14 1.31.14 1.32.13 1.33.13 1.34.12 1.35.8 1.36.5 1.37.2 1.38.0-beta.0), so a patch the proxy starts
# serving later does not change what --check compares. Per version:
# a module in $KUBELET_REHASH_CACHE (default /var/cache/kubelet-rehash)/kubelet-checkpoints/<ver>
# outside the clone with main.go and the adapters of this directory, built with the build tags
# that fit the version's API (found in its source: constructor signatures, the managers it has).
# Then each version writes each case it can (cpu-static, cpu-none, memory-static, memory-none,
# device, dra, status (1.30-1.32), allocated and actuated (1.33+)) with its own state code, and
# the same cases again with PodLevelResourceManagers=true where the version has that gate
# (1.36+, for the CPU and memory managers: the gate changes what they write); and every version
# loads every file as its kubelet does at start (NewCheckpointState / NewStateCheckpoint /
# GetCheckpoint / GetOrCreate), once with default gates and, for the gate's cases, once with the
# gate on where it knows it. A rejection's error text keeps the kubelet's words; the temporary
# directory in it is written as <dir>.
#
#   --check (default)  compare with fixtures/checkpoints-module byte for byte: exit 0 when
#                      identical, 1 on any difference, 2 when a version cannot be built
#   --write            replace fixtures/checkpoints-module with the generated cases
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
committed="$repo/fixtures/checkpoints-module"
cache="${KUBELET_REHASH_CACHE:-/var/cache/kubelet-rehash}/kubelet-checkpoints"

log() { echo "kubelet-checkpoints-module: $*" >&2; }
die() { echo "kubelet-checkpoints-module: $*" >&2; exit 2; }

# shellcheck source=../../k8s-module.sh
. "$here/../../k8s-module.sh"

mode=check
versions=()
for a in "$@"; do
    case "$a" in
        --check) mode=check ;;
        --write) mode=write ;;
        -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "${BASH_SOURCE[0]}"; exit 0 ;;
        -*) die "unknown option $a" ;;
        *) versions+=("$a") ;;
    esac
done
[ "${#versions[@]}" -gt 0 ] || versions=(1.30.14 1.31.14 1.32.13 1.33.13 1.34.12 1.35.8 1.36.5 1.37.2 1.38.0-beta.0)

# the build tags that fit the API of the source tree $1
tags_for() {
    local k="$1/pkg/kubelet" t=()
    grep -q '^func NewCheckpointState(logger' "$k/cm/cpumanager/state/state_checkpoint.go" && t+=(cpulogger)
    grep -q '^func NewCheckpointState(logger' "$k/cm/memorymanager/state/state_checkpoint.go" && t+=(memlogger)
    grep -q ') SetPodCPUSet(' "$k/cm/cpumanager/state/state_checkpoint.go" && t+=(cpupod)
    grep -q ') SetPodMemoryBlocks(' "$k/cm/memorymanager/state/state_checkpoint.go" && t+=(mempod)
    if [ -f "$k/status/state/state_checkpoint.go" ]; then
        t+=(status)
        grep -q 'SetContainerResourceAllocation(.*v1.ResourceRequirements' "$k/status/state/state_checkpoint.go" && t+=(statusreq)
    fi
    if [ -f "$k/allocation/state/state_checkpoint.go" ]; then
        t+=(alloc)
        grep -q '^func NewStateCheckpoint(logger' "$k/allocation/state/state_checkpoint.go" && t+=(alloclogger)
        grep -q '^func NewStateCheckpoint(.*maskFn' "$k/allocation/state/state_checkpoint.go" && t+=(allocmask)
    fi
    if [ -f "$k/cm/dra/state/checkpointer.go" ]; then t+=(dra131)
    elif [ -f "$k/cm/dra/state/state_checkpoint.go" ]; then t+=(dra130)
    fi
    echo "${t[*]}"
}

# constraint_holds EXPR TAGS: does a //go:build line of the form `a && !b` hold for TAGS (only
# && and ! are used in this directory; anything else is refused)
constraint_holds() {
    local expr="$1" tags=" $2 " term
    [ -n "$expr" ] || return 0
    case "$expr" in *'||'*|*'('*) die "unsupported build constraint: $expr" ;; esac
    for term in ${expr//&&/ }; do
        if [ "${term#!}" != "$term" ]; then
            [[ "$tags" != *" ${term#!} "* ]] || return 1
        else
            [[ "$tags" == *" $term "* ]] || return 1
        fi
    done
}

build() { # minor -> "full binary" on stdout
    local full work src tags t0=$SECONDS
    full="$(resolve_version "$1")"
    work="$cache/$full"
    mkdir -p "$work"
    src="$(go env GOMODCACHE)/k8s.io/kubernetes@v$full"
    # (a release needing a newer Go is downloaded by that toolchain)
    [ -f "$src/go.mod" ] || (cd "$work" && nice go mod download "k8s.io/kubernetes@v$full") >/dev/null 2>&1 \
        || (cd "$work" && GOTOOLCHAIN="${NEWER_GOTOOLCHAIN:-go1.27.3}" nice go mod download "k8s.io/kubernetes@v$full") >/dev/null 2>&1 \
        || die "$full: the Go module proxy refuses k8s.io/kubernetes@v$full"
    if [ ! -f "$work/go.mod.in" ] || ! grep -q "k8s.io/kubernetes v$full\$" "$work/go.mod.in"; then
        log "$full: resolving the staging modules"
        k8s_module_gomod kubeletcheckpoints "$full" "$src" > "$work/go.mod.in"
    fi
    cp "$work/go.mod.in" "$work/go.mod"
    rm -f "$work/go.sum" "$work"/*.go
    tags="$(tags_for "$src")"
    # a release that needs a newer Go than the one installed (1.38 needs 1.27) is built with
    # that toolchain, which the go command fetches once from the proxy
    local need have
    need="$(sed -n 's/^go \([0-9]*\.[0-9]*\).*/\1/p' "$src/go.mod")"
    have="$(go env GOVERSION | sed 's/^go\([0-9]*\.[0-9]*\).*/\1/')"
    if [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | tail -1)" != "$have" ]; then
        export GOTOOLCHAIN="${NEWER_GOTOOLCHAIN:-go1.27.3}"
        log "$full: needs Go $need, built with $GOTOOLCHAIN"
    else
        export GOTOOLCHAIN=local
    fi
    # only the files this version's tags select: `go mod tidy` looks at every build tag at once
    # and would chase the packages the other versions' adapters import
    for f in "$here"/*.go; do
        if constraint_holds "$(sed -n 's|^//go:build ||p' "$f")" "$tags"; then cp "$f" "$work/"; fi
    done
    (cd "$work" && nice go mod tidy) > "$work/tidy.log" 2>&1 \
        || { tail -20 "$work/tidy.log" >&2; die "$full: go mod tidy failed ($work/tidy.log)"; }
    (cd "$work" && CGO_ENABLED=0 nice go build -trimpath -tags "$tags" -o "$work/bin" .) > "$work/build.log" 2>&1 \
        || { tail -30 "$work/build.log" >&2; die "$full: go build failed ($work/build.log)"; }
    log "$full: built with -tags '$tags' in $((SECONDS - t0)) s"
    echo "$full $work/bin"
}

gate=PodLevelResourceManagers
knows_gate() { grep -q "^	$gate: {" "$(go env GOMODCACHE)/k8s.io/kubernetes@v$1/pkg/features/kube_features.go"; }

policy_of() {
    case "$1" in
        cpu-static*) echo static ;; cpu-none*) echo none ;;
        memory-static*) echo Static ;; memory-none*) echo None ;;
        *) echo - ;;
    esac
}

declare -A bin full
minors=()
for v in "${versions[@]}"; do
    read -r f b < <(build "$v") || exit 2
    [ -n "${b:-}" ] || exit 2
    m="$(cut -d. -f1,2 <<<"$f")"
    [ -z "${bin[$m]:-}" ] || die "two releases of $m given"
    bin[$m]="$b"; full[$m]="$f"; minors+=("$m")
done

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
cases="$out/cases"
mkdir -p "$cases"

# ---- write --------------------------------------------------------------------------------
for w in "${minors[@]}"; do
    for c in $("${bin[$w]}" cases); do
        configs=(default)
        case "$c" in cpu-*|memory-*) knows_gate "${full[$w]}" && configs+=(plrm) ;; esac
        for g in "${configs[@]}"; do
            name="$c-$w"; gates=""
            [ "$g" = plrm ] && { name="$name-plrm"; gates="$gate=true"; }
            dir="$cases/$name"
            "${bin[$w]}" -gates "$gates" write "$c" "$dir" 2>"$out/write.log" \
                || { cat "$out/write.log" >&2; die "${full[$w]}: writing $c failed"; }
            files=("$dir"/*)
            [ "${#files[@]}" = 1 ] || die "$name: ${#files[@]} files written, expected 1"
            printf '%s\n%s\n%s\n' "$(basename "${files[0]}")" "$w" "$gates" > "$out/$name.meta"
        done
    done
done

# ---- read ---------------------------------------------------------------------------------
ncases=0; nverdicts=0
for meta in "$out"/*.meta; do
    name="$(basename "$meta" .meta)"
    { read -r file; read -r writer; read -r wgates || true; } < "$meta"
    policy="$(policy_of "$name")"
    {
        printf '{\n  "case": "%s",\n  "file": "%s",\n  "written_by": "%s",\n  "writer_kubernetes": "%s",\n  "writer_gates": "%s",\n  "verdicts": [' \
            "$name" "$file" "$writer" "${full[$writer]}" "$wgates"
        sep=""
        for r in "${minors[@]}"; do
            rconfigs=("")
            [ -n "$wgates" ] && knows_gate "${full[$r]}" && rconfigs+=("$gate=true")
            for rg in "${rconfigs[@]}"; do
                tmp="$(mktemp -d)"
                cp "$cases/$name/$file" "$tmp/$file"
                v="$("${bin[$r]}" -gates "$rg" read "$file" "$policy" "$tmp" 2>"$out/read.log")" \
                    || { cat "$out/read.log" >&2; die "${full[$r]}: reading $name failed"; }
                rm -rf "$tmp"
                v="${v//$tmp/<dir>}"
                printf '%s\n    {"target": "%s", "target_kubernetes": "%s", "gates": "%s", "result": %s}' \
                    "$sep" "$r" "${full[$r]}" "$rg" "$v"
                sep=","
                nverdicts=$((nverdicts + 1))
            done
        done
        printf '\n  ]\n}\n'
    } > "$cases/$name/verdicts.json"
    ncases=$((ncases + 1))
done
log "$ncases cases, $nverdicts verdicts"

if [ "$mode" = write ]; then
    rm -rf "$committed"
    cp -r "$cases" "$committed"
    log "wrote $committed"
    exit 0
fi
if diff -r "$committed" "$cases" > "$out/diff"; then
    echo "kubelet-checkpoints-module: $ncases cases, $nverdicts verdicts, byte-identical to fixtures/checkpoints-module"
else
    head -40 "$out/diff"
    echo "kubelet-checkpoints-module: fixtures/checkpoints-module differs from the generated cases" >&2
    exit 1
fi
