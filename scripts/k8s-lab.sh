#!/usr/bin/env bash
# A real Kubernetes cluster on this machine, built from Kubernetes' own Go modules: etcd,
# kube-apiserver (Node + RBAC authorizers), kube-controller-manager (node lifecycle controller
# on, its version's grace period), kube-scheduler, and one node (or N: --nodes): a private
# container runtime with a locally built pause image and a CNI bridge, and a kubelet
# registered with its own client certificate (system:node:<name>). For people and for the tests (cli/tests/real_kubelet.rs):
#
#   k8s-lab.sh build [--kubelet-only] VERSION...     build into the cache; prints the dir last
#   k8s-lab.sh up --kubelet V [--control-plane V] [--runtime containerd|crio|docker] [--feature-gates A=true,...] [--max-pods N] [--nodes N] [--dir DIR]
#                                                    start everything; prints `export` lines
#                                                    (--nodes N: N kubelets, each with its own
#                                                    runtime, bridge, cgroup root and client
#                                                    certificate; every node's lines again with
#                                                    the suffix _i, and NODES="name1 ...")
#   k8s-lab.sh add-node --dir DIR [--kubelet V] [--runtime R] [--name NAME]
#                                                    one more node (another version or runtime)
#   k8s-lab.sh stop-kubelet|start-kubelet|stop-runtime|start-runtime --dir DIR [--node NAME]
#                                                    what `kubelet-rehash upgrade` is given
#   k8s-lab.sh images --dir DIR [--node NAME]        import the local image set; prints refs
#   k8s-lab.sh env --dir DIR                         the lines `up` printed, as they are now
#   k8s-lab.sh down --dir DIR                        stop what `up` started, by pid; remove
#                                                    its containers, mounts and bridge
#
# VERSION is 1.31 (its newest patch the Go module proxy serves) or 1.31.14. Builds are cached
# outside the clone, keyed by version: $KUBELET_REHASH_CACHE (default /var/cache/kubelet-rehash)
# /k8s/<version>/, the Go module and build caches are Go's own (also outside). The build
# requires k8s.io/kubernetes at the version and replaces each k8s.io staging module with its
# v0.Y.Z release; where the proxy does not serve that exact patch of a staging module, the
# nearest served patch of the same minor is used and written to the build's BUILD-INFO.
# 1.15-1.19 are built with the Go of their release (era_go), unpacked into $cache/go/, and with
# third_party/vbom-util in place of vbom.ml/util, which the proxy refuses.
#
# Runtimes: containerd (2.1.9 from scripts/setup-containerd.sh, or $LAB_CONTAINERD), CRI-O
# 1.30.14 (scripts/setup-crio.sh, or $LAB_CRIO), Docker 26.1.5 (or $LAB_DOCKER) with the kubelet's own dockershim (kubelet
# <= 1.23) or cri-dockerd 0.4.1 (scripts/setup-cri-dockerd.sh): which one the kubelet flags file
# says, as on a kubeadm node (docs/lab.md).
# Needs root. Everything `up` starts is its own: private paths under DIR, its own ports, a
# dummy interface for the node's address, a bridge of its own name, a cgroup root of its own.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${KUBELET_REHASH_CACHE:-/var/cache/kubelet-rehash}"
node_name="${LAB_NODE_NAME:-lab-node}"

log() { echo "k8s-lab: $*" >&2; }
die() { echo "k8s-lab: $*" >&2; exit 1; }

# ---- versions and builds ------------------------------------------------------------------------

served_versions() { # module -> its versions, one a line
    go list -m -versions "$1" 2>/dev/null | tr ' ' '\n' | tail -n +2
}

# 1.31 -> 1.31.14 (newest served release patch); 1.31.14 -> itself
resolve_version() {
    local want="$1" v
    case "$want" in
        [0-9]*.[0-9]*.[0-9]*) echo "$want"; return ;;
        [0-9]*.[0-9]*) ;;
        *) die "not a version: $want (1.31 or 1.31.14)" ;;
    esac
    v="$(served_versions k8s.io/kubernetes | grep -E "^v${want//./\\.}\.[0-9]+$" | sort -t. -k3,3n | tail -1)"
    if [ -z "$v" ]; then
        # The proxy's list is partial: older exact versions are served without being listed.
        # Probe the patches of the minor and take the newest one served.
        local z
        for z in $(seq 0 30); do
            (cd / && go list -m "k8s.io/kubernetes@v$want.$z") >/dev/null 2>&1 && v="v$want.$z"
        done
    fi
    [ -n "$v" ] || die "the Go module proxy serves no release of k8s.io/kubernetes $want (served: $(served_versions k8s.io/kubernetes | tr '\n' ' '))"
    echo "${v#v}"
}

# the v0.Y.Z a staging module is replaced with: exact when served, else the nearest served patch
staging_version() {
    local mod="$1" full="$2" minor patch exact list best
    minor="$(cut -d. -f2 <<<"$full")"
    patch="$(cut -d. -f3 <<<"$full")"
    exact="v0.$minor.$patch"
    list="$(served_versions "$mod" | grep -E "^v0\.$minor\.[0-9]+$" || true)"
    if grep -qx "$exact" <<<"$list"; then echo "$exact"; return; fi
    # the proxy's list is partial: an exact patch it does not list may still be served (1.24.17's
    # api, apimachinery, apiserver, client-go: the nearest listed ones, v0.24.1-3, do not build
    # with it). Its source must be: the proxy answers for some versions whose zip it refuses
    # (k8s.io/controller-manager v0.25.16: "403 Forbidden ... not available").
    if (cd / && go mod download "$mod@$exact") >/dev/null 2>&1; then echo "$exact"; return; fi
    if [ -z "$list" ]; then
        # none listed and the exact one refused: the nearest patch whose source is served
        local d z
        for d in $(seq 1 30); do
            for z in $((patch - d)) $((patch + d)); do
                [ "$z" -ge 0 ] || continue
                if (cd / && go mod download "$mod@v0.$minor.$z") >/dev/null 2>&1; then echo "v0.$minor.$z"; return; fi
            done
        done
        echo "$exact"; return
    fi
    best="$(awk -F. -v p="$patch" '{d=$3-p; if (d<0) d=-d; print d, $0}' <<<"$list" | sort -n | head -1 | cut -d' ' -f2)"
    echo "$best"
}

stamped() { # binary version: built, and says it is that version
    [ -x "$1" ] || return 1
    if [ "${1##*/}" = kubectl ]; then
        # (JSON: before 1.28 the plain output is a Go struct that does not end in the version)
        "$1" version --client -o json 2>/dev/null | grep "\"gitVersion\": \"v$2\"" >/dev/null
    else
        "$1" --version 2>/dev/null | grep "v$2\$" >/dev/null
    fi
}

# The Go a minor is built with, when not the go on PATH: the one its release was built with
# (build/build-image/cross/VERSION), where today's Go builds binaries that do not work. Their
# json-iterator uses modern-go/reflect2 v1.0.1, whose map iteration crashes (SIGSEGV) when
# built with Go 1.18 or newer: Go 1.26 builds the 1.16 kubelet, which would crash wherever
# json-iterator encodes a map (apimachinery's YAML and pretty JSON encoders). 1.20-1.22 still
# pin reflect2 v1.0.1 (1.23 moved to v1.0.2, which works with any Go). 1.15 was
# released with Go 1.12.17, which has no -trimpath: 1.13.15.
era_go() { # minor -> goX.Y.Z, or nothing
    case "$1" in
        15|16|17|18) echo go1.13.15 ;;
        19|20) echo go1.15.15 ;;
        21|22) echo go1.16.15 ;;
    esac
}

era_go_bin() { # goX.Y.Z -> its bin/go, unpacked from the proxy's golang.org/toolchain module
    local v="$1" dir="$cache/go/$1" mod
    if [ ! -x "$dir/bin/go" ]; then
        log "$v: downloading golang.org/toolchain@v0.0.1-$v"
        mod="$(cd / && go mod download -json "golang.org/toolchain@v0.0.1-$v.linux-$(go env GOHOSTARCH)" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')"
        [ -n "$mod" ] || die "$v: the Go module proxy refuses golang.org/toolchain@v0.0.1-$v"
        # a copy: the module cache is read-only and keeps no execute bits
        rm -rf "$dir.tmp"
        mkdir -p "$cache/go"
        cp -r "$mod" "$dir.tmp"
        chmod -R u+w "$dir.tmp"
        chmod +x "$dir.tmp"/bin/* "$dir.tmp"/pkg/tool/*/*
        mv "$dir.tmp" "$dir"
    fi
    echo "$dir/bin/go"
}

build_one() { # full version, kubelet-only (0/1) -> prints the output dir
    local full="$1" only="$2" out work mod bins b need=0 src line m
    out="$cache/k8s/$full"
    bins="kubelet"
    [ "$only" = 1 ] || bins="kubelet kube-apiserver kube-controller-manager kube-scheduler kubectl"
    # One build of a version at a time: scripts/test.sh's build lane and the suite's `up` may
    # ask for the same version at once; the second waits and then finds it cached. (This
    # function runs in a command substitution: the lock goes with it.)
    local lock_fd
    mkdir -p "$cache/k8s-build"
    exec {lock_fd}>"$cache/k8s-build/$full.lock"
    if ! flock -n "$lock_fd"; then
        log "$full: another build of it is running; waiting for it"
        flock "$lock_fd"
    fi
    for b in $bins; do
        stamped "$out/$b" "$full" || need=1
    done
    if [ "$need" = 0 ]; then log "$full: cached in $out ($bins)"; echo "$out"; return; fi
    # 1.8-1.14 predate Go modules: built in GOPATH mode from their Godeps.json
    # (scripts/k8s-gopath-build.sh, which keeps its own work tree and lock)
    if [ "$(cut -d. -f2 <<<"$full")" -lt 15 ]; then
        local only_flag=()
        [ "$only" = 0 ] || only_flag=(--kubelet-only)
        "$here/scripts/k8s-gopath-build.sh" "$full" "$out" "${only_flag[@]}" >&2 || die "$full: the GOPATH-mode build failed"
        echo "$out"
        return
    fi
    work="$cache/k8s-build/$full"
    mkdir -p "$work" "$out"
    local minor ego gocmd=(go) godirective=1.22 cgo=0
    minor="$(cut -d. -f2 <<<"$full")"
    ego="$(era_go "$minor")"
    if [ -n "$ego" ]; then
        # no GOFLAGS, not even from the go env file (GOENV=off): -buildvcs=false, which this
        # environment sets, is unknown to Go <= 1.17 (and they update go.mod as needed by
        # default: -mod=mod only exists from 1.14); the proxy is the one today's go uses
        gocmd=(env GOENV=off GOFLAGS= GOTOOLCHAIN=local "GOPROXY=$(go env GOPROXY)" "$(era_go_bin "$ego")")
        godirective="$(sed -E 's/^go([0-9]+\.[0-9]+).*/\1/' <<<"$ego")"
    fi
    # with cgo, as Kubernetes built its kubelet (not in hack/lib/golang.sh's static list):
    # cadvisor's gonvml before 1.20 has no Go file without cgo
    [ "$minor" -ge 20 ] || cgo=1
    log "$full: resolving the module and its staging modules"
    (cd "$work" && go mod download "k8s.io/kubernetes@v$full") >/dev/null \
        || die "$full: the Go module proxy refuses k8s.io/kubernetes@v$full"
    src="$(go env GOMODCACHE)/k8s.io/kubernetes@v$full"
    # Before 1.24 the API server's OpenAPI definitions (pkg/generated/openapi/
    # zz_generated.openapi.go) were generated at build time, never committed: the module has
    # no such file and kube-apiserver does not compile ("undefined: GetOpenAPIDefinitions").
    # Then the build uses a writable copy of the module with the file generated as
    # Kubernetes' Makefile.generated_files did (openapi_gen below).
    local openapi=0
    if [ "$only" = 0 ] && [ ! -f "$src/pkg/generated/openapi/zz_generated.openapi.go" ]; then
        openapi=1
        rm -rf "$work/kubernetes"
        cp -r "$src" "$work/kubernetes"
        chmod -R u+w "$work/kubernetes"
    fi
    {
        echo "module k8slab"
        echo
        echo "go $godirective"
        echo
        echo "require k8s.io/kubernetes v$full"
        echo
        echo "replace ("
        [ "$openapi" = 0 ] || echo "	k8s.io/kubernetes => ./kubernetes"
        while read -r line; do
            m="$(awk '{print $1}' <<<"$line")"
            echo "	$m => $m $(staging_version "$m" "$full")"
        done < <(grep -E '^\s+k8s\.io/[a-z0-9-]+ => \./staging' "$src/go.mod")
        # 1.15-1.19 need vbom.ml/util (1.15-1.16 require it, 1.17-1.19 through k8s.io/kubectl,
        # their go.mod names it in its replace block), which the proxy refuses (403): our
        # module of the one function kubectl uses stands in (third_party/vbom-util/README.md)
        if grep -q 'vbom\.ml/util' "$src/go.mod"; then
            echo "	vbom.ml/util => $here/third_party/vbom-util"
        fi
        echo ")"
    } > "$work/go.mod"
    printf 'package k8slab\n\nimport (\n' > "$work/tools.go"
    sed -i '1i //go:build tools\n' "$work/tools.go"
    for b in $bins; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$b" >> "$work/tools.go"; done
    [ "$openapi" = 0 ] || printf '\t_ "k8s.io/kube-openapi/cmd/openapi-gen"\n' >> "$work/tools.go"
    echo ")" >> "$work/tools.go"
    local pkgs=() resolve=(mod tidy) t0
    for b in $bins; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
    local listed=("${pkgs[@]}")
    [ "$openapi" = 0 ] || listed+=(k8s.io/kube-openapi/cmd/openapi-gen)
    # Go <= 1.15's tidy also resolves the imports of the dependencies' tests, and 1.15's
    # heketi tests import packages k8s.io/kubernetes no longer has: with those, only what the
    # build imports (their go list adds the requirements it needs to go.mod)
    # (Go 1.16 made -mod=readonly the default: -mod=mod lets it write go.mod and go.sum as the
    # older ones did; the flag exists from 1.14)
    local modflag=()
    case "$ego" in go1.1[6-9]*) modflag=(-mod=mod) ;; esac
    [ -z "$ego" ] || resolve=(list "${modflag[@]}" -deps "${listed[@]}")
    log "$full: go ${resolve[*]:0:2}"
    (cd "$work" && "${gocmd[@]}" "${resolve[@]}") > "$work/tidy.log" 2>&1 || { tail -20 "$work/tidy.log" >&2; die "$full: go ${resolve[*]:0:2} failed ($work/tidy.log)"; }
    local gover
    gover="$("${gocmd[@]}" version | awk '{print $3}')"
    [ "$openapi" = 0 ] || openapi_gen
    log "$full: building $bins ($gover)"
    t0=$SECONDS
    # the version stamps hack/lib/version.sh sets: kubelet --version, the API server's
    # /version and the Node's kubeletVersion read them
    # (1.16 and older: k8s.io/kubernetes/pkg/version; 1.16's kubectl: k8s.io/kubectl/pkg/version,
    # 1.15's: k8s.io/kubernetes/pkg/kubectl/version)
    local ldflags="" pkg
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version k8s.io/kubernetes/pkg/version k8s.io/kubectl/pkg/version k8s.io/kubernetes/pkg/kubectl/version; do
        ldflags="$ldflags -X $pkg.gitVersion=v$full -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
    done
    # providerless: without the in-tree cloud providers (their SDKs are a third of the older
    # kubelets and controller managers), as every distribution that needs none builds them; the
    # lab runs no cloud provider. LAB_GO_TAGS= (empty) builds with them.
    local tags="${LAB_GO_TAGS-providerless}"
    (cd "$work" && CGO_ENABLED=$cgo "${gocmd[@]}" build "${modflag[@]}" -trimpath -tags "$tags" -ldflags "$ldflags" -o "$out/" "${pkgs[@]}") > "$work/build.log" 2>&1 \
        || { tail -30 "$work/build.log" >&2; die "$full: build failed ($work/build.log)"; }
    {
        echo "k8s.io/kubernetes v$full, built $(date -u +%FT%TZ) with $gover (CGO_ENABLED=$cgo) -tags '$tags' in $((SECONDS - t0)) s"
        grep -E '=> k8s.io' "$work/go.mod" | awk -v f="v0.$(cut -d. -f2,3 <<<"$full")" '$4 != f {print "staging " $1 " at " $4 " (the proxy does not serve " f ")"}'
    } > "$out/BUILD-INFO"
    log "$full: built in $((SECONDS - t0)) s"
    echo "$out"
}

# kube-apiserver's OpenAPI definitions for a version that did not commit them (build_one's
# locals: work, gocmd, modflag, full): the openapi-gen of the kube-openapi the version pins, over
# every package tagged `+k8s:openapi-gen=` in the module and its staging modules but
# code-generator's and sample-apiserver's (Makefile.generated_files' KUBE_OPENAPI_TAG_FILES),
# written into the build's copy of the module. k8s.io/cloud-provider's component configuration
# is left out: run from the module cache, openapi-gen cannot resolve the controller manager's
# config types it embeds ("failed to generate default in ...CloudControllerManagerConfiguration");
# it is a component's configuration file type, which no API server serves.
openapi_gen() {
    local mc dirs=() m v d t0=$SECONDS
    mc="$(go env GOMODCACHE)"
    log "$full: generating pkg/generated/openapi (openapi-gen)"
    (cd "$work" && "${gocmd[@]}" build "${modflag[@]}" -o "$work/openapi-gen" k8s.io/kube-openapi/cmd/openapi-gen) > "$work/openapi.log" 2>&1 \
        || { tail -20 "$work/openapi.log" >&2; die "$full: openapi-gen does not build ($work/openapi.log)"; }
    tagged() { # module dir, import path prefix -> the tagged packages
        # (a staging module no binary imports was never downloaded: none of its types is served)
        [ -d "$1" ] || return 0
        (cd "$1" && find . \( -name '_*' -o -name '.[^.]*' -o \( -name vendor -type d \) -o -name testdata \) -prune \
            -o -type f -name '*.go' -print | xargs grep -l '^// *+k8s:openapi-gen=' 2>/dev/null \
            | xargs -rn1 dirname | LC_ALL=C sort -u | sed "s|^\.|$2|")
    }
    mapfile -t dirs < <(
        tagged "$work/kubernetes" k8s.io/kubernetes | grep -v '^k8s\.io/kubernetes/staging/\|/test/'
        grep -E '^\s+k8s\.io/[a-z0-9-]+ => k8s\.io' "$work/go.mod" | while read -r m _ _ v; do
            case "$m" in k8s.io/code-generator|k8s.io/sample-apiserver) continue ;; esac
            tagged "$mc/$m@$v" "$m" | grep -v '^k8s\.io/cloud-provider/config/'
        done
    )
    [ "${#dirs[@]}" -gt 10 ] || die "$full: only ${#dirs[@]} packages tagged +k8s:openapi-gen found"
    printf '/*\nCopyright The Kubernetes Authors.\n*/\n\n' > "$work/boilerplate.txt"
    rm -rf "$work/openapi-out"
    # (it writes the API rule violations it finds to the report: Kubernetes' known ones)
    # its go/build asks the `go` on PATH about packages: the build's own Go, as the build runs it
    local run=(env)
    [ "${#gocmd[@]}" -eq 1 ] || run=("${gocmd[@]:0:${#gocmd[@]}-1}" "PATH=$(dirname "${gocmd[-1]}"):$PATH")
    (cd "$work" && "${run[@]}" "GOFLAGS=${modflag[*]}" ./openapi-gen -i "$(IFS=,; echo "${dirs[*]}")" \
        -p k8s.io/kubernetes/pkg/generated/openapi -O zz_generated.openapi -h boilerplate.txt \
        -o "$work/openapi-out" -r "$work/openapi-violations.txt") >> "$work/openapi.log" 2>&1 \
        || { tail -20 "$work/openapi.log" >&2; die "$full: openapi-gen failed ($work/openapi.log)"; }
    d="$work/openapi-out/k8s.io/kubernetes/pkg/generated/openapi/zz_generated.openapi.go"
    [ -s "$d" ] || die "$full: openapi-gen wrote no $d"
    cp "$d" "$work/kubernetes/pkg/generated/openapi/"
    log "$full: OpenAPI definitions of ${#dirs[@]} packages generated in $((SECONDS - t0)) s"
}

cmd_build() {
    local only=0 v full dir=""
    [ $# -gt 0 ] || die "build: which versions?"
    for v in "$@"; do
        case "$v" in
            --kubelet-only) only=1; continue ;;
        esac
        full="$(resolve_version "$v")"
        dir="$(build_one "$full" "$only")"
    done
    echo "$dir"
}

# ---- the lab ------------------------------------------------------------------------------------

taken_ports=" "
free_port() { # VAR: a port nothing uses and this run has not handed out yet (no subshell:
    # the ports handed out are remembered here)
    local p
    while :; do
        p=$((20000 + RANDOM % 20000))
        case "$taken_ports" in *" $p "*) continue ;; esac
        ss -Htan "sport = :$p" | grep . >/dev/null || { taken_ports="$taken_ports$p "; printf -v "$1" '%s' "$p"; return; }
    done
}

# starts "$@" in its own session, output to logs/<name>.log, pid to pids/<name>
# The started process writes its own pid (exec keeps it): `$!` would be setsid's when setsid
# has to fork (a caller with job control makes the child a group leader), and the pid file
# would name a process long gone while the daemon leaks.
spawn() {
    local name="$1"; shift
    printf '%q ' "$@" > "$dir/cmd/$name"
    setsid bash -c 'echo $$ > "$0"; exec "$@"' "$dir/pids/$name" "$@" </dev/null >>"$dir/logs/$name.log" 2>&1 &
    wait_pidfile "$name"
}

wait_pidfile() { local i; for ((i = 0; i < 50; i++)); do [ -s "$dir/pids/$1" ] && return; sleep 0.1; done; }

respawn() { # re-runs the recorded command line of <name>
    local name="$1"
    [ -f "$dir/cmd/$name" ] || die "$dir has no recorded $name command"
    setsid bash -c "exec $(cat "$dir/cmd/$name")" </dev/null >>"$dir/logs/$name.log" 2>&1 &
    echo $! > "$dir/pids/$name"
}

pid_of() { [ -f "$dir/pids/$1" ] && cat "$dir/pids/$1"; }
alive() { local p; p="$(pid_of "$1")" && [ -n "$p" ] && kill -0 "$p" 2>/dev/null; }

stop_pid_of() { # name [timeout s]: SIGTERM, wait, SIGKILL
    local name="$1" wait="${2:-30}" p i
    p="$(pid_of "$name" || true)"
    [ -n "$p" ] || return 0
    if kill -0 "$p" 2>/dev/null; then
        kill -TERM "$p" 2>/dev/null || true
        for ((i = 0; i < wait * 10; i++)); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$p" 2>/dev/null && kill -KILL "$p" 2>/dev/null || true
        for ((i = 0; i < 50; i++)); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    fi
    rm -f "$dir/pids/$name"
}

wait_for() { # what, seconds, command...
    local what="$1" secs="$2" i; shift 2
    for ((i = 0; i < secs * 5; i++)); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.2
    done
    local l
    for l in "$dir"/logs/*.log; do
        [ -s "$l" ] && { echo "--- ${l##*/} (last lines)"; tail -5 "$l"; } >&2
    done
    die "$what did not come up within $secs s (logs in $dir/logs)"
}

lab_env() { # the lab's variables, read back from DIR/env
    [ -f "$dir/env" ] || die "$dir is not a lab directory (no env file)"
    # shellcheck disable=SC1091
    . "$dir/env"
}

etcd_bin() {
    local d="$cache/debs/etcd-server"
    if [ ! -x "$d/usr/bin/etcd" ]; then
        . "$here/scripts/apt-private.sh"
        apt_private_init trixie >&2
        mkdir -p "$d/debs"
        (cd "$d/debs" && apt-get "${APT_PRIVATE[@]}" download etcd-server 2>&1 | grep -v "unsandboxed as root" >&2 || true)
        local deb
        deb="$(find "$d/debs" -name 'etcd-server_*.deb' | head -1)"
        [ -n "$deb" ] || die "etcd-server was not downloaded"
        dpkg-deb -x "$deb" "$d"
    fi
    echo "$d/usr/bin/etcd"
}

cni_bin() {
    local d="$cache/debs/cni"
    if [ ! -x "$d/usr/lib/cni/bridge" ]; then
        mkdir -p "$d/debs"
        (cd "$d/debs" && apt-get download containernetworking-plugins 2>&1 | grep -v "unsandboxed as root" >&2 || true)
        if [ -z "$(find "$d/debs" -name 'containernetworking-plugins_*.deb' | head -1)" ]; then
            apt-get update -qq >&2
            (cd "$d/debs" && apt-get download containernetworking-plugins 2>&1 | grep -v "unsandboxed as root" >&2 || true)
        fi
        dpkg-deb -x "$(find "$d/debs" -name 'containernetworking-plugins_*.deb' | head -1)" "$d"
    fi
    echo "$d/usr/lib/cni"
}

containerd_dir() {
    local d="${LAB_CONTAINERD:-$here/.cache/runtimes/containerd-2.1.9}"
    if [ ! -x "$d/usr/bin/containerd" ]; then
        "$here/scripts/setup-containerd.sh" >&2
    fi
    [ -x "$d/usr/bin/containerd" ] || die "no containerd at $d"
    echo "$d"
}

# a certificate signed by the lab's CA: CA-PKI-DIR OUT-PREFIX SUBJECT USAGE [SAN]
sign_cert() {
    openssl req -new -newkey rsa:2048 -nodes -keyout "$2.key" -out "$2.csr" -subj "$3" 2>/dev/null
    {
        echo "basicConstraints=CA:FALSE"
        echo "keyUsage=digitalSignature,keyEncipherment"
        echo "extendedKeyUsage=$4"
        [ -z "${5:-}" ] || echo "subjectAltName=$5"
    } > "$2.ext"
    openssl x509 -req -in "$2.csr" -CA "$1/ca.crt" -CAkey "$1/ca.key" -CAcreateserial -CAserial "$1/ca.srl" \
        -out "$2.crt" -days 3650 -extfile "$2.ext" 2>/dev/null
    chmod 600 "$2.key"
}

certs() { # the lab's CA and the control plane's certificates
    local p="$dir/pki"
    mkdir -p "$p"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$p/ca.key" -out "$p/ca.crt" -days 3650 -subj "/CN=k8s-lab-ca" 2>/dev/null
    openssl genrsa -out "$p/sa.key" 2048 2>/dev/null
    openssl rsa -in "$p/sa.key" -pubout -out "$p/sa.pub" 2>/dev/null
    chmod 600 "$p/ca.key" "$p/sa.key"
    sign_cert "$p" "$p/apiserver" "/CN=kube-apiserver" serverAuth "IP:127.0.0.1,IP:$node_ip,IP:10.96.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:localhost"
    sign_cert "$p" "$p/admin" "/O=system:masters/CN=lab-admin" clientAuth
    sign_cert "$p" "$p/controller-manager" "/CN=system:kube-controller-manager" clientAuth
    sign_cert "$p" "$p/scheduler" "/CN=system:kube-scheduler" clientAuth
}

kubeconfig() { # file user cert key
    cat > "$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster:
    certificate-authority: $dir/pki/ca.crt
    server: https://127.0.0.1:$api_port
users:
- name: $2
  user:
    client-certificate: $dir/pki/$3.crt
    client-key: $dir/pki/$3.key
contexts:
- name: lab
  context: {cluster: lab, user: $2}
current-context: lab
EOF
    chmod 600 "$1"
}

# The local image set: OCI layouts with one layer of static busybox, imported into the
# runtime (no registry anywhere). pause: the sandbox image; busybox: sh, sleep and friends.
build_image() { # name tag entrypoint-json -> tar path
    local name="$1" tag="$2" entry="$3" w="$dir/images/$1" root layer lsum lsize csum csize msum msize
    rm -rf "$w"; mkdir -p "$w/rootfs/bin" "$w/rootfs/etc" "$w/rootfs/tmp" "$w/layout/blobs/sha256"
    root="$w/rootfs"
    cp /bin/busybox "$root/bin/busybox"
    for l in sh sleep true cat ls echo touch date wget nc httpd ps kill mkdir rm test env hostname id; do ln -s busybox "$root/bin/$l"; done
    echo "root:x:0:0:root:/:/bin/sh" > "$root/etc/passwd"
    echo "root:x:0:" > "$root/etc/group"
    tar --owner=0 --group=0 --numeric-owner --sort=name --mtime=@0 -C "$root" -cf "$w/layer.tar" .
    lsum="$(sha256sum "$w/layer.tar" | cut -d' ' -f1)"; lsize="$(stat -c %s "$w/layer.tar")"
    cp "$w/layer.tar" "$w/layout/blobs/sha256/$lsum"
    printf '{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/bin"],"Entrypoint":%s},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"history":[{"created_by":"k8s-lab.sh"}]}' \
        "$entry" "$lsum" > "$w/config.json"
    csum="$(sha256sum "$w/config.json" | cut -d' ' -f1)"; csize="$(stat -c %s "$w/config.json")"
    cp "$w/config.json" "$w/layout/blobs/sha256/$csum"
    printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' \
        "$csum" "$csize" "$lsum" "$lsize" > "$w/manifest.json"
    msum="$(sha256sum "$w/manifest.json" | cut -d' ' -f1)"; msize="$(stat -c %s "$w/manifest.json")"
    cp "$w/manifest.json" "$w/layout/blobs/sha256/$msum"
    printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"platform":{"architecture":"amd64","os":"linux"},"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
        "$msum" "$msize" "$tag" "${tag##*:}" > "$w/layout/index.json"
    echo '{"imageLayoutVersion":"1.0.0"}' > "$w/layout/oci-layout"
    tar --owner=0 --group=0 --numeric-owner -C "$w/layout" -cf "$w.tar" .
    echo "$w.tar"
}

import_images() {
    local pause busybox
    pause="$(build_image pause "$pause_image" '["/bin/sh","-c","trap \"exit 0\" TERM INT; while true; do sleep 3600 & wait $!; done"]')"
    busybox="$(build_image busybox "$busybox_image" '["/bin/sh"]')"
    if [ "$runtime" = crio ]; then
        crio_import "$pause" "$pause_image"
        crio_import "$busybox" "$busybox_image"
    elif [ "$runtime" = docker ]; then
        docker_import pause "$pause_image" '["/bin/sh","-c","trap \"exit 0\" TERM INT; while true; do sleep 3600 & wait $!; done"]'
        docker_import busybox "$busybox_image" '["/bin/sh"]'
    else
        "$ctr_bin/ctr" --address "$runtime_sock" -n k8s.io images import "$pause" >/dev/null
        "$ctr_bin/ctr" --address "$runtime_sock" -n k8s.io images import "$busybox" >/dev/null
    fi
}

write_containerd_config() {
    cat > "$dir/containerd/config.toml" <<EOF
version = 2
root = "$runtime_root"
state = "$dir/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.nri.v1.nri", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "$runtime_sock"

[ttrpc]
  address = "$runtime_sock.ttrpc"

[debug]
  address = "$dir/containerd/debug.sock"

[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/containerd/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause_image"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  # these sandboxes may not lower an oom_score_adj (no CAP_SYS_RESOURCE): without this the
  # pause container's -998 fails runc's init
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$cni_dir"
    conf_dir = "$dir/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "$dir/containerd/runc"
        SystemdCgroup = false
EOF
}

# CRI-O (--runtime crio): CRI-O 1.30.14 built by scripts/setup-crio.sh (crio, pinns, copyimg),
# or another build's directory of those three as $LAB_CRIO (scripts/setup-crio-module.sh's
# .cache/runtimes/crio-1.36.3/usr/bin), Debian's conmon and runc; the node's own
# containers/storage under $dir/crio, no pause process (drop_infra_ctr: pinns holds the
# namespaces), the lab's CNI bridge and images.
crio_bin() {
    local d="${LAB_CRIO:-$here/.cache/crio/bin}"
    [ -x "$d/crio" ] || [ -n "${LAB_CRIO:-}" ] || "$here/scripts/setup-crio.sh" >&2
    [ -x "$d/crio" ] || die "no crio at $d"
    echo "$d"
}

write_crio_config() {
    local c="$dir/crio"
    mkdir -p "$c/etc/crio.conf.d" "$c/etc/containers" "$c/var/log/crio" "$c/var/run/crio" "$c/var/lib/crio"
    echo '{"default":[{"type":"insecureAcceptAnything"}]}' > "$c/etc/containers/policy.json"
    printf '[storage]\ndriver = "overlay"\ngraphroot = "%s"\nrunroot = "%s"\n' "$runtime_root" "$runtime_runroot" > "$c/etc/containers/storage.conf"
    : > "$c/etc/containers/registries.conf"
    # the template testtools' CRI-O node uses too
    sed -e "s|@GRAPHROOT@|$runtime_root|g" -e "s|@RUNROOT@|$runtime_runroot|g" \
        -e "s|@VERSION_FILE@|$c/var/run/crio/version|g" -e "s|@CLEAN_SHUTDOWN@|$c/var/lib/crio/clean.shutdown|g" \
        -e "s|@SOCK@|$runtime_sock|g" -e "s|@PINNS@|$crio_dir/pinns|g" -e "s|@PAUSE_IMAGE@|$pause_image|g" \
        -e "s|@NETWORK@|k8s-lab-$slot|g" -e "s|@NETWORK_DIR@|$dir/cni/net.d|g" -e "s|@CNI_BIN@|$cni_dir|g" \
        -e "s|@T@|$c|g" "$here/testtools/data/crio.conf.in" > "$c/crio.conf"
}

# copyimg into the node's containers/storage, CRI-O stopped, in a mount namespace of its own
# whose /var/lib is a read-only tmpfs (containers/image would make its blob-info cache in the
# host's /var/lib/containers otherwise; unable to, it keeps it in memory)
crio_import() { # tar name
    CONTAINERS_STORAGE_CONF="$dir/crio/etc/containers/storage.conf" unshare -m sh -c \
        'mount --make-rprivate / && mount -t tmpfs -o ro tmpfs /var/lib && exec "$0" --root "$1" --runroot "$2" --storage-driver overlay --signature-policy "$3" --image-name "$4" --import-from "oci-archive:$5"' \
        "$crio_dir/copyimg" "$runtime_root" "$runtime_runroot" "$dir/crio/etc/containers/policy.json" "$2" "$1" >/dev/null
}

# Docker (--runtime docker): Debian 13's dockerd 26.1.5 unpacked by scripts/setup-cri-dockerd.sh
# (cri-dockerd 0.4.1 refuses a Docker Engine older than API 1.42), with Debian 12's containerd
# and runc (scripts/setup-docker.sh), live-restore (stopping it keeps the containers), every
# path private under $dir/docker. The kubelet reaches it through its own dockershim (<= 1.23:
# `--container-runtime=docker`) or through cri-dockerd 0.4.1, as the kubelet flags file
# ($dir/kubelet/flags.env, kubeadm's kubeadm-flags.env) says: `kubelet-rehash upgrade` rewrites
# that file across 1.23 -> 1.24, and start-runtime then starts cri-dockerd with dockerd, as a
# node's enabled cri-docker.service does. dockershim serves the kubelet's CRI on
# $dir/docker/dockershim.sock (a node's /var/run/dockershim.sock), cri-dockerd on
# $dir/docker/cri-dockerd.sock (/var/run/cri-dockerd.sock): the flags file names the one in use.
docker_dir() {
    # $LAB_DOCKER: another Docker's tree with usr/sbin/dockerd (scripts/setup-docker-module.sh's
    # .cache/runtimes/docker-28.5.2); its dockerd runs with the same flags and Debian's containerd
    local d="${LAB_DOCKER:-$here/.cache/runtimes/docker-26.1.5}"
    # Kubelets up to 1.18 ask dockerd without an API version (their docker client of 2019-03:
    # `NewClient(endpoint, "")` sets it empty), so Docker 25+ answers as API 1.44+, which has no
    # `VirtualSize`, and dockershim's image status fails: "Id or size of image ... is not set",
    # no container ever starts. They ran with Docker 18.09-20.10: Debian 12's docker.io 20.10
    # (scripts/setup-docker.sh installs it for the Docker store tests) is the lab's Docker there.
    if [ -z "${LAB_DOCKER:-}" ] && [ "$(minor_of "$kubelet_version")" -le 18 ]; then
        "$here/scripts/setup-docker.sh" >&2
        d=/
    fi
    if [ ! -x "$d/usr/sbin/dockerd" ] || [ ! -x "$here/.cache/cri-dockerd/bin/cri-dockerd" ]; then
        "$here/scripts/setup-docker.sh" >&2
        "$here/scripts/setup-cri-dockerd.sh" >&2
    fi
    [ -x "$d/usr/sbin/dockerd" ] || die "no dockerd at $d"
    echo "$d"
}

docker_api() { # method path [curl args...]
    local m="$1" p="$2"; shift 2
    curl -sf --unix-socket "$dir/docker/docker.sock" -X "$m" "$@" "http://docker$p"
}

# a one-layer image from the busybox root file system (`docker import`, as testtools does)
docker_import() { # name ref entrypoint-json
    local repo="${2%:*}" tag="${2##*:}"
    [ -f "$dir/images/$1/layer.tar" ] || die "no layer for $1"
    docker_api POST /images/create --url-query fromSrc=- --url-query "repo=$repo" --url-query "tag=$tag" \
        --url-query "changes=ENTRYPOINT $3" --url-query "changes=ENV PATH=/bin" \
        -H 'Content-Type: application/x-tar' --data-binary "@$dir/images/$1/layer.tar" >/dev/null \
        || die "docker import of $2 failed"
}

# dockershim and cri-dockerd give every sandbox oom_score_adj -998, which runc sets only with
# CAP_SYS_RESOURCE; without it (these VMs) every RunPodSandbox fails with "can't get final
# child's PID from pipe: EOF" (containerd's labs clamp it with restrict_oom_score_adj; Docker has
# no such setting). There dockerd's default runtime is a wrapper that raises a negative
# oomScoreAdj in the bundle to 0 and runs the real runc, as testtools' cri-dockerd node does.
write_docker_config() {
    local capeff runc
    capeff="$(awk '/^CapEff:/ {print $2}' /proc/self/status)"
    # live-restore in daemon.json, where kubelet-rehash reads it (--daemon-json)
    if (( (16#$capeff >> 24) & 1 )); then
        echo '{"live-restore": true}' > "$dir/docker/daemon.json"
        return
    fi
    runc="$(command -v runc || echo /usr/sbin/runc)"
    sed "s|@RUNC@|$runc|" "$here/testtools/data/runc-no-negative-oom.sh.in" > "$dir/docker/runc-no-negative-oom"
    chmod 755 "$dir/docker/runc-no-negative-oom"
    printf '{"live-restore": true, "runtimes": {"lab-runc": {"path": "%s"}}, "default-runtime": "lab-runc"}\n' "$dir/docker/runc-no-negative-oom" > "$dir/docker/daemon.json"
}

write_kubelet_flags() { # kubeadm's kubeadm-flags.env: the dockershim flags of a 1.23 node
    # (--cni-cache-dir is from 1.16: 1.15 refuses the flag; its cache is /var/lib/cni/cache)
    local cni_cache=" --cni-cache-dir=$dir/cni/cache"
    [ "$(minor_of "$kubelet_version")" -ge 16 ] || cni_cache=""
    cat > "$dir/kubelet/flags.env" <<EOF
KUBELET_KUBEADM_ARGS="--container-runtime=docker --container-runtime-endpoint=unix://$dir/docker/dockershim.sock --docker-endpoint=unix://$dir/docker/docker.sock --experimental-dockershim-root-directory=$dir/docker/dockershim --network-plugin=cni --cni-bin-dir=$cni_dir --cni-conf-dir=$dir/cni/net.d$cni_cache --pod-infra-container-image=$pause_image"
EOF
}

# cri-dockerd runs when the kubelet's flags no longer name dockershim
uses_cri_dockerd() { ! grep -q -- '--container-runtime=docker' "$dir/kubelet/flags.env"; }

start_docker() {
    PATH="$docker_bin:/usr/sbin:/usr/bin:/sbin:/bin" setsid bash -c 'echo $$ > "$0"; exec "$@"' "$dir/pids/runtime" \
        "$docker_bin/dockerd" --data-root "$runtime_root" --exec-root "$dir/docker/exec" \
        --pidfile "$dir/docker/docker.pid" -H "unix://$dir/docker/docker.sock" --config-file "$dir/docker/daemon.json" \
        --iptables=false --ip-masq=false --bridge=none --userland-proxy=false --storage-driver=vfs \
        </dev/null >>"$dir/logs/dockerd.log" 2>&1 &
    wait_pidfile runtime
    wait_for dockerd 90 docker_api GET /_ping
    if uses_cri_dockerd; then
        rm -f "$dir/pids/cri-dockerd"
        PATH="/usr/sbin:/usr/bin:/sbin:/bin" setsid bash -c 'echo $$ > "$0"; exec "$@"' "$dir/pids/cri-dockerd" \
            "$cri_dockerd" --container-runtime-endpoint "unix://$dir/docker/cri-dockerd.sock" \
            --docker-endpoint "unix://$dir/docker/docker.sock" --cri-dockerd-root-directory "$dir/docker/cri-dockerd" \
            --network-plugin cni --cni-bin-dir "$cni_dir" --cni-conf-dir "$dir/cni/net.d" --cni-cache-dir "$dir/cni/cache" \
            --pod-infra-container-image "$pause_image" --streaming-bind-addr 127.0.0.1 \
            </dev/null >>"$dir/logs/cri-dockerd.log" 2>&1 &
        wait_pidfile cri-dockerd
        wait_for cri-dockerd 60 test -S "$dir/docker/cri-dockerd.sock"
    fi
}

stop_docker() {
    local p i
    stop_pid_of cri-dockerd 30
    rm -f "$dir/docker/cri-dockerd.sock"
    stop_pid_of runtime 60
    # its managed containerd exits after it (the shims stay, with the containers)
    for ((i = 0; i < 300; i++)); do
        p="$(pgrep -f "^containerd --config $dir/docker/exec/" || true)"
        [ -n "$p" ] || break
        sleep 0.1
    done
}

minor_of() { cut -d. -f2 <<<"$1"; }

write_kubelet_config() {
    local minor extra=""
    minor="$(minor_of "$kubelet_version")"
    # 1.35+ refuses cgroup v1 unless told (these machines have no cgroup v2). Set from 1.31, the
    # first kubelet that reads it, as an operator on cgroup v1 must before upgrading to 1.35:
    # a 1.34 config without it made the real 1.35 kubelet exit at start (kubelet-rehash's plan
    # now blocks on that: kubelet-refuses-cgroup-v1)
    [ "$minor" -lt 31 ] || extra="failCgroupV1: false"
    # `up --max-pods N`: a node filled past the kubelet's default of 110 pods (the pod subnet is
    # a /24: 253 addresses)
    [ -z "${max_pods:-}" ] || extra="$extra
maxPods: $max_pods"
    cat > "$dir/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $node_ip
port: $kubelet_port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $healthz_port
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $dir/pki/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $dir/pki/kubelet-serving.crt
tlsPrivateKeyFile: $dir/pki/kubelet-serving.key
cgroupDriver: cgroupfs
cgroupRoot: /$cgroup_root
failSwapOn: false
staticPodPath: $dir/manifests
clusterDomain: cluster.local
clusterDNS: [10.96.0.10]
resolvConf: $dir/kubelet/resolv.conf
evictionHard: {}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
syncFrequency: 10s
fileCheckFrequency: 5s
serializeImagePulls: false
$extra
$(feature_gates_yaml)
EOF
}

# The lab's feature gates (`up --feature-gates A=true,B=false`), as the kubelet configuration's
# `featureGates` map; nothing when none is given (each version's defaults).
feature_gates_yaml() {
    [ -n "${feature_gates:-}" ] || return 0
    echo "featureGates:"
    local g gates
    IFS=, read -ra gates <<<"$feature_gates"
    for g in "${gates[@]}"; do echo "  ${g%%=*}: ${g#*=}"; done
}

# `--feature-gates=...` for the control plane's components, when the lab has gates.
feature_gates_flag() { [ -z "${feature_gates:-}" ] || echo "--feature-gates=$feature_gates"; }

kubelet_cmd() {
    # Docker: the runtime flags come from the flags file, as kubeadm's unit reads it
    local endpoint=(--container-runtime-endpoint="unix://$runtime_sock")
    [ "$runtime" != docker ] || endpoint=()
    printf '%q ' "$dir/bin/kubelet" \
        --config="$dir/kubelet/config.yaml" \
        --kubeconfig="$dir/kubelet.conf" \
        --root-dir="$dir/kubelet/root" \
        --cert-dir="$dir/kubelet/pki" \
        "${endpoint[@]}" \
        --hostname-override="$node_name" \
        --node-ip="$node_ip" \
        --v=2
    [ "$runtime" != docker ] || echo '$KUBELET_KUBEADM_ARGS'
}

start_kubelet() {
    rm -f "$dir/pids/kubelet"
    {
        [ "$runtime" != docker ] || echo ". $dir/kubelet/flags.env"
        echo "echo \$\$ > $dir/pids/kubelet; exec $(kubelet_cmd)"
    } > "$dir/cmd/kubelet.sh"
    setsid bash "$dir/cmd/kubelet.sh" </dev/null >>"$dir/logs/kubelet.log" 2>&1 &
    wait_pidfile kubelet
}

start_runtime() {
    rm -f "$dir/pids/runtime"
    if [ "$runtime" = docker ]; then start_docker; return; fi
    if [ "$runtime" = crio ]; then
        CONTAINERS_STORAGE_CONF="$dir/crio/etc/containers/storage.conf" CONTAINERS_REGISTRIES_CONF="$dir/crio/etc/containers/registries.conf" \
            PATH="/usr/sbin:/usr/bin:/sbin:/bin" setsid bash -c 'echo $$ > "$0"; exec "$@"' "$dir/pids/runtime" \
            "$crio_dir/crio" --config "$dir/crio/crio.conf" --config-dir "$dir/crio/etc/crio.conf.d" </dev/null >>"$dir/logs/crio.log" 2>&1 &
        wait_pidfile runtime
        return
    fi
    PATH="$ctr_bin:/usr/sbin:/usr/bin:/sbin:/bin" setsid bash -c 'echo $$ > "$0"; exec "$@"' "$dir/pids/runtime" \
        "$ctr_bin/containerd" --config "$dir/containerd/config.toml" </dev/null >>"$dir/logs/containerd.log" 2>&1 &
    wait_pidfile runtime
}

runtime_answers() {
    if [ "$runtime" = docker ]; then
        docker_api GET /_ping && { ! uses_cri_dockerd || test -S "$dir/docker/cri-dockerd.sock"; }
    elif [ "$runtime" = crio ]; then
        "$crio_dir/crio" status --socket "$runtime_sock" config >/dev/null 2>&1
    else
        "$ctr_bin/ctr" --address "$runtime_sock" version
    fi
}

# ---- a node: its slot, runtime, certificates and kubelet ----------------------------------------
# The first node lives in the lab directory itself (the layout of a one-node lab); every other
# node of a multi-node lab (`up --nodes N`, `add-node`) in DIR/nodes/<name>/, laid out the same
# way, with its own env file (cluster_dir= names the lab's) and links to the lab's CA, kubectl
# and admin kubeconfig: every node function runs with $dir set to the node's directory.

# a slot (bridge, subnet, cgroup root) no other lab or node on this machine holds
node_slot() {
    local tries=0
    while :; do
        slot=$(( ($$ + RANDOM) % 200 + 20 ))
        ip link show "labbr$slot" >/dev/null 2>&1 || [ -d "/sys/fs/cgroup/cpu/k8s-lab-$slot" ] || break
        tries=$((tries + 1))
        [ "$tries" -lt 400 ] || die "no free lab slot: 200 bridges labbr20-labbr219 exist (down the labs left behind)"
    done
    # the node's address is the pods' gateway on the node's bridge: the bridge plugin accepts
    # a bridge that already holds its gateway address, and nothing the lab sends leaves the
    # machine (no dummy interface driver on these VMs)
    node_ip="10.236.$slot.1"
    pod_subnet="10.236.$slot.0/24"
    bridge="labbr$slot"
    cgroup_root="k8s-lab-$slot"
}

# the runtime's paths under the node's directory, and its binaries
node_runtime_paths() {
    runtime_runroot="" crio_dir="" ctr_bin="" docker_bin="" cri_dockerd=""
    if [ "$runtime" = docker ]; then
        [ "$(minor_of "$kubelet_version")" -le 23 ] || die "--runtime docker starts a kubelet <= 1.23 on its dockershim (the node kubelet-rehash switches to cri-dockerd); $kubelet_version has none"
        runtime_root="$dir/docker/root"
        runtime_sock="$dir/docker/dockershim.sock"
        docker_bin="$(docker_dir)"; docker_bin="${docker_bin%/}/usr/sbin"
        cri_dockerd="$here/.cache/cri-dockerd/bin/cri-dockerd"
        mkdir -p "$dir/docker/root" "$dir/docker/exec" "$dir/docker/dockershim" "$dir/docker/cri-dockerd" "$dir/cni/cache"
        write_docker_config
    elif [ "$runtime" = crio ]; then
        # laid out as a node's own / under $dir/crio, so kubelet-rehash finds the runroot, the
        # version file and the clean-shutdown marker from --root as on a node
        runtime_root="$dir/crio/var/lib/containers/storage"
        runtime_runroot="$dir/crio/run/containers/storage"
        runtime_sock="$dir/crio/crio.sock"
        crio_dir="$(crio_bin)"
        mkdir -p "$dir/crio"
    else
        runtime_root="$dir/containerd/root"
        runtime_sock="$dir/containerd/containerd.sock"
        local cdir; cdir="$(containerd_dir)"; ctr_bin="$cdir/usr/bin"
    fi
    cni_dir="$(cni_bin)"
    docker_version=""
    [ -z "$docker_bin" ] || docker_version="$("$docker_bin/dockerd" --version | sed -E 's/^Docker version ([^ ,]+).*/\1/')"
}

node_env() { # the node's variables, as its env file holds them
    cat <<NODE
kubelet_version=$kubelet_version
node_name=$node_name
slot=$slot
node_ip=$node_ip
pod_subnet=$pod_subnet
bridge=$bridge
cgroup_root=$cgroup_root
kubelet_port=$kubelet_port
healthz_port=$healthz_port
runtime=$runtime
runtime_root=$runtime_root
runtime_sock=$runtime_sock
runtime_runroot=$runtime_runroot
crio_dir=$crio_dir
ctr_bin=$ctr_bin
docker_bin=$docker_bin
cri_dockerd=$cri_dockerd
cni_dir=$cni_dir
docker_version=$docker_version
NODE
}

cluster_env() { # the variables every node of the lab shares
    cat <<CLUSTER
cp_version=$cp_version
api_port=$api_port
pause_image=$pause_image
busybox_image=$busybox_image
feature_gates=$feature_gates
max_pods=$max_pods
CLUSTER
}

# the node's bridge and cgroup root on this machine
node_host_setup() {
    # a fixed MAC: a bridge without one takes its lowest port's, which changes as pods come and
    # go, and the CNI bridge plugin's CHECK (CRI-O runs it at its start to restore each
    # sandbox's IP) then fails ("Bridge interface ... Mac doesn't match"): CRI-O reports those
    # sandboxes without an IP and the kubelet recreates their pods
    ip link add "$bridge" address "$(printf '02:6c:61:62:%02x:01' "$slot")" type bridge
    ip addr add "$node_ip/24" dev "$bridge"
    ip link set "$bridge" up
    # CRI-O on a cgroup v1 host whose hugetlb controller is compiled in but not mounted (these
    # VMs: no systemd mounts it) takes the controller as present (/proc/cgroups) and hands runc
    # the kubelet's hugepage limits, which runc cannot set ("cannot set hugetlb limit");
    # containerd tolerates the missing controller. A real node has it mounted (systemd does): the
    # lab mounts it where runc and the kubelet look (/sys/fs/cgroup/hugetlb: they find a v1
    # controller beside the others, not by its mount alone) and, the last of its cgroups
    # removed, unmounts it at `down` (env: hugetlb_mounted).
    hugetlb_mounted=""
    if [ "$runtime" = crio ] && awk '$1 == "hugetlb" && $4 == 1 {f=1} END {exit !f}' /proc/cgroups \
        && ! awk '$3 == "cgroup" && $4 ~ /(^|,)hugetlb(,|$)/ {f=1} END {exit !f}' /proc/mounts; then
        mkdir -p /sys/fs/cgroup/hugetlb
        mount -t cgroup -o hugetlb k8s-lab-hugetlb /sys/fs/cgroup/hugetlb
        hugetlb_mounted=1
        echo "hugetlb_mounted=1" >> "$dir/env"
        # (the lab's first node, downed last, unmounts it when this node is gone)
        [ -z "${cluster_dir:-}" ] || echo "hugetlb_mounted=1" >> "$cluster_dir/env"
    fi
    for c in /sys/fs/cgroup/*/; do
        [ -d "$c" ] && [ -w "$c" ] && mkdir -p "$c$cgroup_root" 2>/dev/null || true
    done
}

# the node's own client (system:node:<name>) and serving certificates, signed by the lab's CA
# in $1 (its pki directory)
node_certs() {
    sign_cert "$1" "$dir/pki/kubelet-client" "/O=system:nodes/CN=system:node:$node_name" clientAuth
    sign_cert "$1" "$dir/pki/kubelet-serving" "/CN=$node_name" serverAuth "IP:$node_ip,DNS:$node_name"
    kubeconfig "$dir/kubelet.conf" "system:node:$node_name" kubelet-client
    printf 'nameserver 127.0.0.1\n' > "$dir/kubelet/resolv.conf"
}

# CNI, runtime, images, kubelet: the node up and Ready
node_start() {
    log "$node_name: $runtime (${ctr_bin:-${crio_dir:-$docker_bin}}), CNI bridge $bridge ($pod_subnet)"
    # kubelet 1.15's libcni (0.6) takes results up to 0.3.1 ("unsupported CNI result version
    # 0.4.0"); 1.16's (0.7.1) 0.4.0
    local cni_version=0.4.0
    [ "$(minor_of "$kubelet_version")" -ge 16 ] || cni_version=0.3.1
    cat > "$dir/cni/net.d/10-lab.conflist" <<CNI
{"cniVersion": "$cni_version", "name": "k8s-lab-$slot", "plugins": [
  {"type": "bridge", "bridge": "$bridge", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$dir/cni/ipam", "ranges": [[{"subnet": "$pod_subnet"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "loopback"}]}
CNI
    if [ "$runtime" = docker ]; then
        write_kubelet_flags
        start_runtime
        import_images
    elif [ "$runtime" = crio ]; then
        # CRI-O's images go into its storage before it starts (copyimg)
        write_crio_config
        import_images
        start_runtime
        wait_for crio 60 runtime_answers
    else
        write_containerd_config
        start_runtime
        wait_for containerd 60 runtime_answers
        import_images
    fi

    log "$node_name: kubelet $kubelet_version"
    write_kubelet_config
    start_kubelet
    wait_for "node $node_name Ready" 180 node_ready
}

# One more node in the lab $dir (its env loaded): NAME KUBELET_VERSION RUNTIME. Run in a
# subshell: it sets the node's variables over the lab's. The node is listed in DIR/nodes.list
# before anything of it starts, so that `down` (and a failed `up`) stop what it started.
node_add() {
    local kdir cluster_dir="$dir"
    node_name="$1"; kubelet_version="$(resolve_version "$2")"; runtime="$3"
    case "$runtime" in containerd|crio|docker) ;; *) die "--runtime $runtime: containerd, crio or docker" ;; esac
    ! grep -qsx "$node_name" "$cluster_dir/nodes.list" || die "the lab already has a node $node_name"
    kdir="$(build_one "$kubelet_version" 1)"
    dir="$cluster_dir/nodes/$node_name"
    mkdir -p "$dir"/{pids,logs,cmd,bin,manifests,containerd,kubelet/root,kubelet/pki,cni/net.d,images,pki}
    chmod 755 "$dir"
    node_slot
    free_port kubelet_port; free_port healthz_port
    node_runtime_paths
    install -m 0755 "$kdir/kubelet" "$dir/bin/kubelet"
    ln -sf "$cluster_dir/bin/kubectl" "$dir/bin/kubectl"
    ln -sf "$cluster_dir/admin.conf" "$dir/admin.conf"
    ln -sf "$cluster_dir/pki/ca.crt" "$dir/pki/ca.crt"
    { echo "cluster_dir=$cluster_dir"; cluster_env; node_env; } > "$dir/env"
    echo "$node_name" >> "$cluster_dir/nodes.list"
    node_host_setup
    node_certs "$cluster_dir/pki"
    node_start
}

cmd_up() {
    local kubelet_v="" cp_v="" runtime=containerd nodes=1
    dir=""
    feature_gates=""
    max_pods=""
    while [ $# -gt 0 ]; do
        case "$1" in
            --kubelet) kubelet_v="$2"; shift 2 ;;
            --max-pods) max_pods="$2"; shift 2 ;;
            --feature-gates) feature_gates="$2"; shift 2 ;;
            --control-plane) cp_v="$2"; shift 2 ;;
            --runtime) runtime="$2"; shift 2 ;;
            --nodes) nodes="$2"; shift 2 ;;
            --dir) dir="$2"; shift 2 ;;
            *) die "up: unknown argument $1" ;;
        esac
    done
    [ -n "$kubelet_v" ] || die "up: --kubelet VERSION"
    [ -z "$max_pods" ] || { [[ "$max_pods" =~ ^[0-9]+$ ]] && [ "$max_pods" -ge 1 ] && [ "$max_pods" -le 250 ]; } \
        || die "up: --max-pods $max_pods: a number from 1 to 250 (the lab's pod subnet is a /24)"
    case "$runtime" in containerd|crio|docker) ;; *) die "up: --runtime $runtime: containerd, crio or docker" ;; esac
    { [[ "$nodes" =~ ^[0-9]+$ ]] && [ "$nodes" -ge 1 ] && [ "$nodes" -le 20 ]; } \
        || die "up: --nodes $nodes: a number from 1 to 20 (each node is a kubelet, a runtime and a bridge on this machine)"
    [ "$(id -u)" = 0 ] || die "up needs root"
    kubelet_version="$(resolve_version "$kubelet_v")"
    local cp_version
    cp_version="$(resolve_version "${cp_v:-$kubelet_v}")"
    local kdir cpdir
    kdir="$(build_one "$kubelet_version" 1)"
    cpdir="$(build_one "$cp_version" 0)"
    [ -n "$dir" ] || dir="$(mktemp -d /tmp/k8s-lab.XXXXXX)"
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
    [ ! -f "$dir/env" ] || die "$dir already holds a lab: down it first"
    mkdir -p "$dir"/{pids,logs,cmd,bin,manifests,etcd,containerd,kubelet/root,kubelet/pki,cni/net.d,images}
    chmod 755 "$dir"
    node_slot
    local etcd_port etcd_peer cm_port sched_port
    free_port api_port; free_port etcd_port; free_port etcd_peer; free_port cm_port
    free_port sched_port; free_port kubelet_port; free_port healthz_port
    pause_image="k8s-lab.local/pause:1.0"
    busybox_image="k8s-lab.local/busybox:1.0"
    node_runtime_paths
    local etcd; etcd="$(etcd_bin)"
    install -m 0755 "$kdir/kubelet" "$dir/bin/kubelet"
    for b in kube-apiserver kube-controller-manager kube-scheduler kubectl; do ln -sf "$cpdir/$b" "$dir/bin/$b"; done
    { cluster_env; node_env; } > "$dir/env"
    # an `up` that fails stops what it started (a caller that gets no environment back
    # cannot bring the lab down)
    trap 'echo "k8s-lab: up failed: stopping what it started" >&2; (cmd_down --dir "$dir") || true' EXIT
    node_host_setup
    certs
    kubeconfig "$dir/admin.conf" admin admin
    kubeconfig "$dir/controller-manager.conf" controller-manager controller-manager
    kubeconfig "$dir/scheduler.conf" scheduler scheduler
    node_certs "$dir/pki"

    log "etcd"
    spawn etcd "$etcd" --name lab --data-dir "$dir/etcd" \
        --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
        --listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
        --initial-cluster "lab=http://127.0.0.1:$etcd_peer" --listen-metrics-urls "" --log-level warn
    wait_for etcd 30 curl -sf "http://127.0.0.1:$etcd_port/health"

    log "kube-apiserver $cp_version"
    # before 1.20 the audiences do not default to the issuer: the three flags go together; and
    # the insecure port defaults to 127.0.0.1:8080, which a second such lab cannot bind ("Stopped
    # listening on 127.0.0.1:8080", then its usage): off, as kubeadm set it
    local api_audiences=""
    [ "$(minor_of "$cp_version")" -ge 20 ] || api_audiences="--api-audiences=https://kubernetes.default.svc --insecure-port=0"
    spawn apiserver "$dir/bin/kube-apiserver" --etcd-servers "http://127.0.0.1:$etcd_port" \
        --bind-address 127.0.0.1 --secure-port "$api_port" --advertise-address "$node_ip" \
        --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
        --client-ca-file "$dir/pki/ca.crt" --tls-cert-file "$dir/pki/apiserver.crt" --tls-private-key-file "$dir/pki/apiserver.key" \
        --kubelet-client-certificate "$dir/pki/admin.crt" --kubelet-client-key "$dir/pki/admin.key" \
        --kubelet-certificate-authority "$dir/pki/ca.crt" \
        --service-account-key-file "$dir/pki/sa.pub" --service-account-signing-key-file "$dir/pki/sa.key" \
        --service-account-issuer https://kubernetes.default.svc --service-cluster-ip-range 10.96.0.0/16 \
        --allow-privileged=true --endpoint-reconciler-type none $api_audiences $(feature_gates_flag)
    # (/readyz is from 1.16: 1.15 answers /healthz)
    local ready_path=/readyz
    [ "$(minor_of "$cp_version")" -ge 16 ] || ready_path=/healthz
    wait_for kube-apiserver 120 "$dir/bin/kubectl" --kubeconfig "$dir/admin.conf" get --raw "$ready_path"

    log "kube-controller-manager, kube-scheduler"
    # (before 1.24 both also serve an insecure port, 10252 and 10251 by default: off, as for the
    # API server, so that two labs of those versions can run at once)
    local insecure_off=""
    [ "$(minor_of "$cp_version")" -ge 24 ] || insecure_off="--port=0"
    spawn controller-manager "$dir/bin/kube-controller-manager" --kubeconfig "$dir/controller-manager.conf" \
        --authentication-kubeconfig "$dir/controller-manager.conf" --authorization-kubeconfig "$dir/controller-manager.conf" \
        --bind-address 127.0.0.1 --secure-port "$cm_port" --leader-elect=false \
        --service-account-private-key-file "$dir/pki/sa.key" --root-ca-file "$dir/pki/ca.crt" \
        --use-service-account-credentials=true --cluster-signing-cert-file "$dir/pki/ca.crt" \
        --cluster-signing-key-file "$dir/pki/ca.key" --controllers '*,bootstrapsigner,tokencleaner' $insecure_off $(feature_gates_flag)
    spawn scheduler "$dir/bin/kube-scheduler" --kubeconfig "$dir/scheduler.conf" \
        --authentication-kubeconfig "$dir/scheduler.conf" --authorization-kubeconfig "$dir/scheduler.conf" \
        --bind-address 127.0.0.1 --secure-port "$sched_port" --leader-elect=false $insecure_off $(feature_gates_flag)

    node_start
    # the other nodes (`--nodes N`): lab-node-2 ... lab-node-N, each of the first's kubelet
    # version and runtime (`add-node` adds one of another)
    local i
    [ "$nodes" = 1 ] || : > "$dir/nodes.list"
    for ((i = 2; i <= nodes; i++)); do
        (node_add "$node_name-$i" "$kubelet_version" "$runtime")
    done
    # pods are admitted once the controller-manager made the namespace's service account
    wait_for "the default service account" 60 "$dir/bin/kubectl" --kubeconfig "$dir/admin.conf" get serviceaccount default
    # (the environment printed first: an `up` whose print fails is a failed `up`, stopped)
    print_env
    trap - EXIT
}

node_ready() {
    [ "$("$dir/bin/kubectl" --kubeconfig "$dir/admin.conf" get node "$node_name" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

print_env() {
    cat <<EOF
export KUBECONFIG=$dir/admin.conf
LAB_DIR=$dir
KUBECTL=$dir/bin/kubectl
CONTROL_PLANE_VERSION=$cp_version
FEATURE_GATES=$feature_gates
MAX_PODS=${max_pods:-110}
ETCD_BIN=$(etcd_bin)
EOF
    node_lines
    # a multi-node lab: every node's lines again with the suffix _i (the first node's _1)
    [ -f "$dir/nodes.list" ] || return 0
    local names i=1 n
    names="$node_name $(tr '\n' ' ' < "$dir/nodes.list")"
    for n in $names; do
        (node_dir_of "$n"; lab_env; node_lines) | sed -E "s/^([A-Z_]+)=/\1_$i=/"
        i=$((i + 1))
    done
    echo "NODES=\"${names% }\""
}

node_lines() { # the lines of the node whose env is loaded
    cat <<EOF
NODE=$node_name
NODE_DIR=$dir
RUNTIME=$runtime
RUNTIME_ROOT=$runtime_root
RUNTIME_RUNROOT=$runtime_runroot
RUNTIME_ENDPOINT=unix://$runtime_sock
KUBELET_PATH=$dir/bin/kubelet
KUBELET_CONFIG=$dir/kubelet/config.yaml
KUBELET_DIR=$dir/kubelet/root
KUBELET_HEALTHZ=http://127.0.0.1:$healthz_port/healthz
KUBELET_PIDFILE=$dir/pids/kubelet
MANIFESTS=$dir/manifests
KUBELET_VERSION=$kubelet_version
EOF
    [ "$runtime" != docker ] || cat <<EOF
DOCKER_SOCKET=$dir/docker/docker.sock
DOCKER_VERSION=$docker_version
DOCKER_PIDFILE=$dir/docker/docker.pid
DOCKER_DAEMON_JSON=$dir/docker/daemon.json
CRI_DOCKERD_ENDPOINT=unix://$dir/docker/cri-dockerd.sock
KUBELET_FLAGS_FILE=$dir/kubelet/flags.env
CRI_DOCKERD=$cri_dockerd
CRI_DOCKERD_ROOT=$dir/docker/cri-dockerd
DOCKERSHIM_CHECKPOINTS=$dir/docker/dockershim/sandbox
EOF
}

# $dir from the lab's directory to node NAME's (the first node's is the lab's)
node_dir_of() {
    local lab="${cluster_dir:-$dir}"
    if [ "$1" = "$(. "$lab/env"; echo "$node_name")" ]; then dir="$lab"; return; fi
    grep -qsx -- "$1" "$lab/nodes.list" || die "the lab $lab has no node $1 (its nodes: $(. "$lab/env"; echo "$node_name") $(tr '\n' ' ' < "$lab/nodes.list" 2>/dev/null))"
    dir="$lab/nodes/$1"
}

need_dir() { # --dir DIR [--node NAME]: the lab's (or that node's) env loaded
    dir=""
    local node=""
    while [ $# -gt 0 ]; do
        case "$1" in
            --dir) dir="$2"; shift 2 ;;
            --node) node="$2"; shift 2 ;;
            *) die "unknown argument $1" ;;
        esac
    done
    [ -n "$dir" ] || die "--dir DIR"
    dir="$(cd "$dir" && pwd)"
    lab_env
    [ -z "$node" ] || { node_dir_of "$node"; lab_env; }
}

cmd_down() {
    need_dir "$@"
    [ -z "${cluster_dir:-}" ] || die "down: the lab's directory ($cluster_dir), not a node's"
    # the other nodes first (their directories are under the lab's), then the first node and
    # the control plane
    local n
    if [ -f "$dir/nodes.list" ]; then
        for n in $(tac "$dir/nodes.list"); do
            [ -f "$dir/nodes/$n/env" ] || continue
            (dir="$dir/nodes/$n"; lab_env; node_down; mv "$dir/env" "$dir/env.down")
        done
    fi
    node_down
    for n in scheduler controller-manager apiserver etcd; do stop_pid_of "$n" 30; done
    log "down: $dir stopped (files kept: rm -rf it when done)"
    mv "$dir/env" "$dir/env.down"
}

node_down() { # the node's kubelet, pods, runtime, mounts, bridge and cgroups
    stop_pid_of kubelet 30
    # the pods' processes: every task the runtime runs, then the runtime and its shims
    local p
    for c in /sys/fs/cgroup/*/"$cgroup_root"; do
        [ -d "$c" ] || continue
        # (find fails when a cgroup vanishes under it as its processes die: with pipefail and
        # set -e that ended `down` right here, leaving the runtime and control plane running)
        { find "$c" -name cgroup.procs -exec cat {} + 2>/dev/null || true; } | while read -r p; do kill -KILL "$p" 2>/dev/null || true; done
    done
    if [ "$runtime" = docker ]; then
        stop_docker
        for p in $(pgrep -f "containerd.*$dir/docker/" || true); do kill -KILL "$p" 2>/dev/null || true; done
    else
        stop_pid_of runtime 30
    fi
    for p in $(pgrep -f "containerd-shim.*-address $runtime_sock" || true); do kill -KILL "$p" 2>/dev/null || true; done
    for p in $(pgrep -f "conmon.* $dir/" || true); do kill -KILL "$p" 2>/dev/null || true; done
    # mounts the runtime left (rootfs, shm, netns), deepest first
    awk -v d="$dir/" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
    ip link del "$bridge" 2>/dev/null || true
    for c in /sys/fs/cgroup/*/"$cgroup_root"; do
        [ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null || true
    done
    # the hugetlb hierarchy this node mounted (CRI-O), when nothing else made cgroups in it
    if [ "${hugetlb_mounted:-}" = 1 ] && [ -z "$(find /sys/fs/cgroup/hugetlb -mindepth 1 -type d 2>/dev/null | head -1)" ]; then
        umount /sys/fs/cgroup/hugetlb 2>/dev/null && rmdir /sys/fs/cgroup/hugetlb 2>/dev/null || true
    fi
}

# `add-node --dir DIR [--kubelet V] [--runtime R] [--name NAME]`: one more node in a running
# lab, of the first node's kubelet version and runtime unless told; prints the lab's lines
cmd_add_node() {
    local args=() kubelet_v="" rt="" name=""
    while [ $# -gt 0 ]; do
        case "$1" in
            --kubelet) kubelet_v="$2"; shift 2 ;;
            --runtime) rt="$2"; shift 2 ;;
            --name) name="$2"; shift 2 ;;
            --dir) args+=("$1" "$2"); shift 2 ;;
            *) die "add-node: unknown argument $1" ;;
        esac
    done
    need_dir "${args[@]}"
    [ -z "${cluster_dir:-}" ] || die "add-node: the lab's directory ($cluster_dir), not a node's"
    [ "$(id -u)" = 0 ] || die "add-node needs root"
    local count=1
    [ ! -f "$dir/nodes.list" ] || count=$(( $(wc -l < "$dir/nodes.list") + 1 ))
    [ -n "$name" ] || name="$node_name-$((count + 1))"
    [ -f "$dir/nodes.list" ] || : > "$dir/nodes.list"
    (node_add "$name" "${kubelet_v:-$kubelet_version}" "${rt:-$runtime}") || die "add-node: $name did not come up (its logs: $dir/nodes/$name/logs; \`down\` stops it with the lab)"
    print_env
}

case "${1:-}" in
    build) shift; cmd_build "$@" ;;
    up) shift; cmd_up "$@" ;;
    add-node) shift; cmd_add_node "$@" ;;
    stop-kubelet) shift; need_dir "$@"; stop_pid_of kubelet 30 ;;
    start-kubelet) shift; need_dir "$@"; start_kubelet ;;
    stop-runtime) shift; need_dir "$@"; if [ "$runtime" = docker ]; then stop_docker; else stop_pid_of runtime 60; fi ;;
    start-runtime) shift; need_dir "$@"; start_runtime; wait_for "$runtime" 90 runtime_answers ;;
    images) shift; need_dir "$@"; import_images; echo "$pause_image"; echo "$busybox_image" ;;
    env) shift; need_dir "$@"; [ -z "${cluster_dir:-}" ] || { dir="$cluster_dir"; lab_env; }; print_env ;;
    down) shift; cmd_down "$@" ;;
    *) sed -n '2,35p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
