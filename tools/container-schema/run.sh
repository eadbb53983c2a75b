#!/usr/bin/env bash
# Regenerates hashcompat/schemas/<major>.<minor>.json — the reflect walk of
# k8s.io/api/core/v1.Container — with real Go code (main.go here) built against the real
# k8s.io/api and k8s.io/apimachinery modules of that Kubernetes version, from the Go module proxy.
#
#   run.sh [--check|--write] [VERSION...]
#
# VERSION is a minor version (1.36). Without one: every committed schema file.
# --check (default): compare byte for byte with the committed file.
# --write: write hashcompat/schemas/<minor>.json (for a new version: 1.37).
#
# Which module versions: for a committed file, the patch its "source_tag" names
# (kubernetes-1.36.3 -> k8s.io/api v0.36.3, k8s.io/apimachinery v0.36.3); for a version without a
# file, the newest release k8s.io/api v0.<minor>.x the proxy serves. Where the proxy does not
# serve that exact patch of a module, the nearest served patch of the same minor is used and said
# (the labels in the output then name what was used, so --check shows it as a difference).
# The "sources" labels are the tags of what was built (k8s.io/api v0.36.3 is the tag
# kubernetes-1.36.3 of that repository); gopkg.in/inf.v0 is the version the module graph selects,
# v0.9.0 spelled as the commit Kubernetes' Godeps pinned, 3887ee99…, as the committed files of
# the Godeps era (<= 1.15) spell it.
#
# Builds happen outside the clone: ${KUBELET_REHASH_CACHE:-/var/cache/kubelet-rehash}
# /container-schema/<minor>/ (go.mod, go.sum, main.go copy, logs, schema.json, BUILD-INFO); Go's own
# module and build caches are used. GOTOOLCHAIN is left to the caller (default "auto": a module
# that needs a newer Go than the local one makes the go command fetch that toolchain).
#
# Exit: 0 all identical (or written), 1 a difference, 2 a version whose modules the proxy does
# not serve or whose build failed.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
schemas="$repo/hashcompat/schemas"
cache="${KUBELET_REHASH_CACHE:-/var/cache/kubelet-rehash}/container-schema"
inf_v090_commit=3887ee99ecf07df5b447e9b00d9c0b2adaa9f3e4

log() { echo "container-schema: $*" >&2; }

mode=check
versions=()
for a in "$@"; do
    case "$a" in
        --check) mode=check ;;
        --write) mode=write ;;
        -h|--help) sed -n '2,32p' "$0"; exit 0 ;;
        [0-9]*.[0-9]*) [[ "$a" =~ ^[0-9]+\.[0-9]+$ ]] || { log "not a minor version: $a (1.36)"; exit 2; }
                       versions+=("$a") ;;
        *) log "unknown argument: $a"; exit 2 ;;
    esac
done
if [ ${#versions[@]} -eq 0 ]; then
    mapfile -t versions < <(cd "$schemas" && ls ./*.json | sed 's|^\./||; s|\.json$||' | sort -t. -k1,1n -k2,2n)
fi

# Go commands run from a neutral directory unless told otherwise (no go.mod of the repo applies).
gonice() { nice -n 10 go "$@"; }

served_list() { # module, minor -> its served release versions v0.<minor>.z, one a line, ascending
    (cd / && go list -m -versions "$1" 2>/dev/null) | tr ' ' '\n' | grep -E "^v0\.$2\.[0-9]+$" | sort -t. -k3,3n || true
}
served() { # module@version -> 0 when the proxy serves it (listed or not)
    (cd / && go list -m "$1") >/dev/null 2>&1
}
# module, minor, wanted patch ("" = newest) -> the version to use, or nothing
pick_version() {
    local mod="$1" minor="$2" patch="$3" list z best
    if [ -n "$patch" ] && served "$mod@v0.$minor.$patch"; then echo "v0.$minor.$patch"; return; fi
    list=$(served_list "$mod" "$minor")
    if [ -z "$list" ]; then
        # The proxy's list is partial: older exact versions are served without being listed.
        for z in $(seq 0 40); do served "$mod@v0.$minor.$z" && list+="v0.$minor.$z"$'\n'; done
        list=$(sed '/^$/d' <<<"$list")
    fi
    if [ -z "$list" ]; then
        # No release of the minor yet: its newest listed pre-release (v0.38.0-beta.0), said so
        # by the label it gets (kubernetes-1.38.0-beta.0).
        (cd / && go list -m -versions "$mod" 2>/dev/null) | tr ' ' '\n' |
            grep -E "^v0\.$minor\.0-(alpha|beta|rc)\.[0-9]+$" | sort -t- -k2,2V | tail -1
        return 0
    fi
    if [ -z "$patch" ]; then tail -1 <<<"$list"; return; fi
    best=$(awk -F. -v p="$patch" '{d=$3-p; if (d<0) d=-d; print d, $3, $0}' <<<"$list" | sort -k1,1n -k2,2nr | head -1 | cut -d' ' -f3)
    echo "$best"
}

# minor, wanted patch ("" = newest) -> k8s.io/kubernetes v1.<minor>.<patch> to use, or nothing
pick_kubernetes() {
    local minor="$1" patch="$2" list z
    if [ -n "$patch" ] && served "k8s.io/kubernetes@v1.$minor.$patch"; then echo "v1.$minor.$patch"; return; fi
    list=$( (cd / && go list -m -versions k8s.io/kubernetes 2>/dev/null) | tr ' ' '\n' | grep -E "^v1\.$minor\.[0-9]+$" || true)
    if [ -z "$list" ]; then
        for z in $(seq 0 40); do served "k8s.io/kubernetes@v1.$minor.$z" && list+="v1.$minor.$z"$'\n'; done
        list=$(sed '/^$/d' <<<"$list")
    fi
    [ -n "$list" ] || return 0
    [ -n "$patch" ] || patch=999
    awk -F. -v p="$patch" '{d=$3-p; if (d<0) d=-d; print d, $3, $0}' <<<"$list" | sort -k1,1n -k2,2nr | head -1 | cut -d' ' -f3
}

tag_of() { echo "kubernetes-1.${1#v0.}"; } # v0.36.3 -> kubernetes-1.36.3

worst=0
results=()
note() { results+=("$1"); }
fail() { # code, message
    [ "$1" -le "$worst" ] || worst=$1
    note "$2"
}

for minor in "${versions[@]}"; do
    committed="$schemas/$minor.json"
    mn=${minor#*.}
    want=""
    if [ -f "$committed" ]; then
        tag=$(sed -n 's/^ "source_tag": "\(.*\)",$/\1/p' "$committed")
        [[ "$tag" =~ ^kubernetes-1\.$mn\.([0-9]+(-(alpha|beta|rc)\.[0-9]+)?)$ ]] || { fail 2 "$minor: committed source_tag '$tag' is not kubernetes-$minor.<patch>"; continue; }
        want=${BASH_REMATCH[1]}
    elif [ "$mode" = check ]; then
        fail 2 "$minor: no committed $committed to check (use --write)"; continue
    fi
    work="$cache/$minor"
    mkdir -p "$work"
    rm -f "$work/go.mod" "$work/go.sum" "$work/main.go" "$work/container-schema" "$work/schema.json"
    cp "$here/main.go" "$work/main.go"

    api=$(pick_version k8s.io/api "$mn" "$want")
    mach=$(pick_version k8s.io/apimachinery "$mn" "${want:-${api#v0."$mn".}}")
    if [ -n "$api" ] && [ -n "$mach" ]; then
        # ---- module era (1.15+): the published k8s.io/api and k8s.io/apimachinery modules
        [ -z "$want" ] || [ "$api" = "v0.$mn.$want" ] || log "$minor: the proxy does not serve k8s.io/api v0.$mn.$want; using the nearest served, $api"
        [ -z "$want" ] || [ "$mach" = "v0.$mn.$want" ] || log "$minor: the proxy does not serve k8s.io/apimachinery v0.$mn.$want; using the nearest served, $mach"
        api_label=$(tag_of "$api"); mach_label=$(tag_of "$mach"); origin="k8s.io/api $api, k8s.io/apimachinery $mach"
        {
            echo "module container-schema"
            echo
            echo "go 1.19"
            echo
            echo "require ("
            echo "	k8s.io/api $api"
            echo "	k8s.io/apimachinery $mach"
            echo ")"
            # k8s.io/api's own requirement must not pull apimachinery elsewhere
            echo
            echo "replace k8s.io/apimachinery => k8s.io/apimachinery $mach"
        } > "$work/go.mod"
    else
        # ---- Godeps era (<= 1.14): k8s.io/api had no module releases. The proxy serves
        # k8s.io/kubernetes v1.<minor>.<patch>, whose staging/src/k8s.io/{api,apimachinery} are the
        # trees the publishing bot tagged kubernetes-1.<minor>.<patch> in those repositories. They
        # are copied out (a throwaway module cache, removed after) and built as local modules.
        # gopkg.in/inf.v0 is the revision apimachinery's Godeps.json pins; the other third-party
        # packages (none of them has a type in the Container tree) are compiled at the versions
        # the first module release, k8s.io/apimachinery v0.15.12, requires, plus what tidy finds.
        kube=$(pick_kubernetes "$mn" "$want")
        if [ -z "$kube" ]; then
            fail 2 "$minor: the Go module proxy serves neither k8s.io/api v0.$mn.x nor k8s.io/kubernetes v1.$mn.x"
            continue
        fi
        [ -z "$want" ] || [ "$kube" = "v1.$mn.$want" ] || log "$minor: the proxy does not serve k8s.io/kubernetes v1.$mn.$want; using the nearest served, $kube"
        if [ "$(cat "$work/src/FROM" 2>/dev/null)" != "k8s.io/kubernetes@$kube" ]; then
            log "$minor: fetching k8s.io/kubernetes@$kube (about 20 MB) for its staging trees"
            rm -rf "$work/src" "$work/modcache-tmp"
            dir=$(cd "$work" && GOFLAGS=-modcacherw GOMODCACHE="$work/modcache-tmp" go mod download -json "k8s.io/kubernetes@$kube" \
                  | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p') || true
            if [ -z "$dir" ] || [ ! -d "$dir/staging/src/k8s.io/api" ]; then
                rm -rf "$work/modcache-tmp"
                fail 2 "$minor: could not download k8s.io/kubernetes@$kube"; continue
            fi
            mkdir -p "$work/src"
            cp -r "$dir/staging/src/k8s.io/api" "$work/src/api"
            cp -r "$dir/staging/src/k8s.io/apimachinery" "$work/src/apimachinery"
            rm -rf "$work/modcache-tmp"
            echo "module k8s.io/api" > "$work/src/api/go.mod"
            echo "module k8s.io/apimachinery" > "$work/src/apimachinery/go.mod"
            echo "k8s.io/kubernetes@$kube" > "$work/src/FROM"
        fi
        inf_rev=$(python3 -c 'import json,sys; print(next(d["Rev"] for d in json.load(open(sys.argv[1]))["Deps"] if d["ImportPath"]=="gopkg.in/inf.v0"))' \
                  "$work/src/apimachinery/Godeps/Godeps.json") || inf_rev=""
        if [ "$inf_rev" != "$inf_v090_commit" ]; then
            fail 2 "$minor: apimachinery's Godeps.json pins gopkg.in/inf.v0 at '$inf_rev', not v0.9.0's commit (no module version known for it)"; continue
        fi
        base=$(cd / && go mod download -json k8s.io/apimachinery@v0.15.12 | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
        {
            echo "module container-schema"
            echo
            echo "go 1.19"
            echo
            echo "replace k8s.io/api => ./src/api"
            echo
            echo "replace k8s.io/apimachinery => ./src/apimachinery"
            echo
            echo "require ("
            echo "	k8s.io/api v0.0.0"
            echo "	k8s.io/apimachinery v0.0.0"
            sed -n '/^require (/,/^)/p' "$base" | sed '1d;$d' | grep -v -E '^\s*(k8s\.io/(api|apimachinery)|gopkg\.in/inf\.v0) '
            echo "	gopkg.in/inf.v0 v0.9.0"
            echo ")"
            echo
            sed -n '/^replace (/,/^)/p' "$base"
        } > "$work/go.mod"
        api_label="kubernetes-1.${kube#v1.}"; mach_label=$api_label; origin="k8s.io/kubernetes $kube staging"
    fi

    log "$minor: $origin: go mod tidy, go build (in $work)"
    if ! (cd "$work" && GOFLAGS=-mod=mod gonice mod tidy) > "$work/tidy.log" 2>&1; then
        tail -20 "$work/tidy.log" >&2
        fail 2 "$minor: go mod tidy failed ($work/tidy.log)"; continue
    fi
    if ! (cd "$work" && CGO_ENABLED=0 gonice build -trimpath -o container-schema .) > "$work/build.log" 2>&1; then
        tail -20 "$work/build.log" >&2
        fail 2 "$minor: go build failed ($work/build.log)"; continue
    fi
    infmod=$(cd "$work" && go list -m -f '{{if .Replace}}{{.Replace.Version}}{{else}}{{.Version}}{{end}}' gopkg.in/inf.v0)
    inf=$infmod
    [ "$inf" != v0.9.0 ] || inf=$inf_v090_commit
    goversion=$(cd "$work" && go env GOVERSION)
    if ! "$work/container-schema" -k8s-version "$minor" -source-tag "$api_label" \
        -api-source "$api_label" -apimachinery-source "$mach_label" -inf-source "$inf" \
        > "$work/schema.json" 2> "$work/run.log"; then
        cat "$work/run.log" >&2
        fail 2 "$minor: the generator failed ($work/run.log)"; continue
    fi
    rm -f "$work/container-schema" # about 20 MB a version; rebuilt from Go's build cache in seconds
    {
        echo "$origin, gopkg.in/inf.v0 $infmod"
        echo "built with $goversion $(go env GOOS)/$(go env GOARCH) on $(date -u +%FT%TZ)"
    } > "$work/BUILD-INFO"
    if [ "$mode" = write ]; then
        cp "$work/schema.json" "$committed"
        note "$minor: wrote hashcompat/schemas/$minor.json ($origin, $goversion)"
    elif cmp -s "$committed" "$work/schema.json"; then
        note "$minor: identical ($origin, $goversion)"
    else
        diff -u --label "committed $minor.json" --label generated "$committed" "$work/schema.json" | head -60 >&2 || true
        fail 1 "$minor: DIFFERS ($origin, $goversion); generated file: $work/schema.json"
    fi
done

printf '%s\n' "${results[@]}"
exit "$worst"
