# Shared by the tools that build against k8s.io/kubernetes from the Go module proxy
# (kubelet-hash, kubelet-checkpoints/module): which patch of a minor to use, and the go.mod that
# requires it with every staging module replaced by its v0.Y.Z release.
#
# The caller defines die() (prints and exits 2).

# ---- versions (the logic of scripts/k8s-lab.sh resolve_version / staging_version) ------------

served_versions() { # module -> its listed versions, one a line
    (cd / && go list -m -versions "$1" 2>/dev/null) | tr ' ' '\n' | tail -n +2
}

served() { # module@version -> does the proxy serve it (listed or not)
    (cd / && go list -m "$1") >/dev/null 2>&1
}

# 1.31 -> 1.31.14 (newest served release patch); 1.31.14 (or 1.38.0-beta.0) -> itself
resolve_version() {
    local want="$1" v="" z miss
    case "$want" in
        [0-9]*.[0-9]*.[0-9]*) echo "$want"; return ;;
        [0-9]*.[0-9]*) ;;
        *) die "not a version: $want (1.36 or 1.36.3)" ;;
    esac
    v="$(served_versions k8s.io/kubernetes | grep -E "^v${want//./\\.}\.[0-9]+$" | sort -t. -k3,3n | tail -1 || true)"
    # The proxy's list is partial: patches are served without being listed, both for minors it
    # lists nothing of and above the newest patch it lists (2026-12-05: listed 1.36.3, served
    # 1.36.5). k8s-lab.sh probes only the first case; here also the patches above the newest
    # listed one, until 6 in a row are not served (served patches have gaps of up to 3).
    if [ -z "$v" ]; then
        for z in $(seq 0 30); do
            served "k8s.io/kubernetes@v$want.$z" && v="v$want.$z"
        done
    else
        z="${v##*.}"; miss=0
        while [ "$miss" -lt 6 ] && [ "$z" -lt 60 ]; do
            z=$((z + 1))
            if served "k8s.io/kubernetes@v$want.$z"; then v="v$want.$z"; miss=0; else miss=$((miss + 1)); fi
        done
    fi
    [ -n "$v" ] || die "the Go module proxy serves no release of k8s.io/kubernetes $want"
    echo "${v#v}"
}

# the v0.Y.Z a staging module is replaced with: exact when served (listed or probed), else the
# nearest served patch of the same minor
staging_version() {
    local mod="$1" full="$2" minor patch exact list
    minor="$(cut -d. -f2 <<<"$full")"
    patch="${full#*.}"; patch="${patch#*.}"   # 1.36.3 -> 3, 1.38.0-beta.0 -> 0-beta.0
    exact="v0.$minor.$patch"
    list="$(served_versions "$mod" | grep -E "^v0\.$minor\.[0-9]+$" || true)"
    if grep -qx "$exact" <<<"$list" || served "$mod@$exact" || [ -z "$list" ]; then
        echo "$exact"; return
    fi
    awk -F. -v p="$patch" '{d=$3-p; if (d<0) d=-d; print d, $0}' <<<"$list" | sort -n | head -1 | cut -d' ' -f2
}

# k8s_module_gomod MODULE FULL SRC: a go.mod for module MODULE that requires k8s.io/kubernetes
# vFULL (source tree SRC) and replaces every staging module with its release
k8s_module_gomod() {
    local module="$1" full="$2" src="$3" line m
    echo "module $module"
    echo
    echo "go 1.22"
    echo
    echo "require k8s.io/kubernetes v$full"
    echo
    echo "replace ("
    while read -r line; do
        m="$(awk '{print $1}' <<<"$line")"
        echo "	$m => $m $(staging_version "$m" "$full")"
    done < <(grep -E '^\s+k8s\.io/[a-z0-9-]+ => \./staging' "$src/go.mod")
    # 1.16-1.19 require vbom.ml/util (kubectl's sortorder), which the proxy no longer
    # serves (403); no package these tools import uses it, so an empty module
    # of that path completes the module graph (were a package of it needed, the build
    # would fail rather than use something else)
    if grep -q 'vbom\.ml/util' "$src/go.mod"; then
        echo "	vbom.ml/util => ./stub/vbom.ml-util"
    fi
    echo ")"
}
