#!/usr/bin/env bash
# Builds a Kubernetes release from before Go modules (1.14 and older: no go.mod, a Godeps.json
# and a vendor/ tree that the module zip does not carry) in GOPATH mode, from what the Go module
# proxy serves:
#
#   k8s-gopath-build.sh VERSION OUTDIR [--kubelet-only]
#
#   VERSION  a full release, 1.14.10
#   OUTDIR   where kubelet (and kube-apiserver, kube-controller-manager, kube-scheduler,
#            kubectl without --kubelet-only) and BUILD-INFO go
#
# How: k8s.io/kubernetes@vVERSION from the proxy is copied into a GOPATH
# ($KUBELET_REHASH_CACHE/gopath-build/VERSION/gopath/src/k8s.io/kubernetes); its vendor/ is
# filled from Godeps/Godeps.json: each repository it names is downloaded at the Godeps revision
# and the listed packages are copied in. The proxy refuses a bare commit, so a revision is had
# as its pseudo-version where one is known (known_pseudo below, or any go.mod/go.sum in the
# module cache) or as the tag Godeps names; what is not had so is substituted and written to
# OUTDIR/BUILD-INFO (fetch_one). Checked: 1.14.10, 1.13.12, 1.12.10 (all five binaries);
# 1.14.10 has every revision but vbom.ml/util's.
# vendor/k8s.io/<staging repo> are symlinks to staging/src/k8s.io/<repo>, as in Kubernetes' git
# tree. vbom.ml/util, which the proxy refuses, is third_party/vbom-util (its README). For the
# control plane, pkg/generated/openapi/zz_generated.openapi.go (never committed) is generated
# with the vendored openapi-gen over the packages build/root/Makefile.generated_files picks.
# The Go is the newest patch of the minor the release was built with
# (build/build-image/cross/VERSION), from the proxy's golang.org/toolchain module, unpacked
# into $cache/go/ (as scripts/k8s-lab.sh's era_go_bin does); $GOPATH_BUILD_GO=goX.Y.Z overrides.
# Built with cgo and with the in-tree cloud providers (these releases know no providerless tag).
# Idempotent: binaries that already report VERSION (with their BUILD-INFO, written last) are
# kept. One build of a version at a time. Work trees and caches: $cache/gopath-build/VERSION/.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${KUBELET_REHASH_CACHE:-/var/cache/kubelet-rehash}"

log() { echo "k8s-gopath-build: $*" >&2; }
die() { echo "k8s-gopath-build: error: $*" >&2; exit 1; }

usage() { echo "usage: $0 VERSION OUTDIR [--kubelet-only]   (VERSION: 1.14.10)" >&2; exit 2; }

full="" out="" only=0
for a in "$@"; do
    case "$a" in
        --kubelet-only) only=1 ;;
        -h|--help) usage ;;
        -*) echo "unknown option: $a" >&2; usage ;;
        *) if [ -z "$full" ]; then full="${a#v}"; elif [ -z "$out" ]; then out="$a"; else usage; fi ;;
    esac
done
[ -n "$full" ] && [ -n "$out" ] || usage
[[ "$full" =~ ^1\.([0-9]+)\.[0-9]+$ ]] || die "not a full version: $full (1.14.10)"
minor="${BASH_REMATCH[1]}"
[ "$minor" -le 14 ] || die "$full has a go.mod (1.15+): build it with scripts/k8s-lab.sh build"
command -v jq >/dev/null || die "needs jq"
command -v python3 >/dev/null || die "needs python3"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

bins="kubelet"
[ "$only" = 1 ] || bins="kubelet kube-apiserver kube-controller-manager kube-scheduler kubectl"

stamped() { # binary version: built, and says it is that version
    [ -x "$1" ] || return 1
    if [ "${1##*/}" = kubectl ] || [ "${1##*/}" = kubectl.tmp ]; then
        "$1" version --client -o json 2>/dev/null | grep "\"gitVersion\": \"v$2\"" >/dev/null
    else
        "$1" --version 2>/dev/null | grep "v$2\$" >/dev/null
    fi
}
all_stamped() { # (BUILD-INFO is written last: a build cut short has none)
    local b
    [ -f "$out/BUILD-INFO" ] || return 1
    for b in $bins; do stamped "$out/$b" "$full" || return 1; done
}
if all_stamped; then log "$full: cached in $out ($bins)"; echo "$out"; exit 0; fi

work="$cache/gopath-build/$full"
mkdir -p "$work"
exec {lock_fd}>"$work.lock"
if ! flock -n "$lock_fd"; then
    log "$full: another build of it is running; waiting for it"
    flock "$lock_fd"
    if all_stamped; then log "$full: cached in $out ($bins)"; echo "$out"; exit 0; fi
fi

# ---- Go ------------------------------------------------------------------------------------------

go_bin() { # goX.Y.Z -> its bin/go, unpacked from the proxy's golang.org/toolchain module
    local v="$1" dir="$cache/go/$1" mod
    if [ ! -x "$dir/bin/go" ]; then
        log "$v: downloading golang.org/toolchain@v0.0.1-$v"
        mod="$(cd / && go mod download -json "golang.org/toolchain@v0.0.1-$v.linux-$(go env GOHOSTARCH)" | jq -r '.Dir // empty')"
        [ -n "$mod" ] || die "the Go module proxy refuses golang.org/toolchain@v0.0.1-$v.linux-$(go env GOHOSTARCH)"
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

# ---- the source ----------------------------------------------------------------------------------

log "$full: k8s.io/kubernetes@v$full from the Go module proxy"
src="$(cd / && go mod download -json "k8s.io/kubernetes@v$full" | jq -r '.Dir // empty')" || true
[ -n "$src" ] || die "the Go module proxy refuses k8s.io/kubernetes@v$full: $(cd / && go mod download "k8s.io/kubernetes@v$full" 2>&1 | tail -1)"
[ -f "$src/Godeps/Godeps.json" ] || die "$src has no Godeps/Godeps.json"
[ ! -f "$src/go.mod" ] || die "$full has a go.mod: build it with scripts/k8s-lab.sh"

ego="${GOPATH_BUILD_GO:-}"
if [ -z "$ego" ]; then
    rel="$(sed -E 's/^v?([0-9]+\.[0-9]+).*/\1/' "$src/build/build-image/cross/VERSION")" # v1.12.12-1 -> 1.12
    case "$rel" in
        1.12) ego=go1.12.17 ;;
        1.11) ego=go1.11.13 ;;
        1.10) ego=go1.10.8 ;;
        1.9) ego=go1.9.7 ;;
        *) die "$full was released with Go $rel: no Go chosen for it (set GOPATH_BUILD_GO=goX.Y.Z)" ;;
    esac
fi
gobin="$(go_bin "$ego")"
gopath="$work/gopath"
k="$gopath/src/k8s.io/kubernetes"
# the build's environment (the go on PATH stays today's: it talks to the module proxy)
genv=(env GOPATH="$gopath" GO111MODULE=off GOFLAGS= GOENV=off GOTOOLCHAIN=local GOROOT="$(dirname "$(dirname "$gobin")")"
    GOCACHE="$work/gocache" PATH="$(dirname "$gobin"):$PATH")
gover="$("${genv[@]}" "$gobin" version | awk '{print $3}')"

if [ ! -f "$work/tree.ok" ]; then
    log "$full: copying the module into $k"
    rm -rf "$k" "$work/vendor.ok" "$work/openapi.ok"
    mkdir -p "$(dirname "$k")"
    cp -r "$src" "$k"
    chmod -R u+w "$k"
    touch "$work/tree.ok"
fi

# ---- vendor/ from Godeps.json --------------------------------------------------------------------

# Godeps.json -> "importpath root rev comment" lines, the root being the repository (module) it
# is in, the comment Godeps' `git describe --tags` of the revision ("-" when none)
python3 - "$src/Godeps/Godeps.json" > "$work/godeps.txt" <<'EOF'
import json, re, sys
d = json.load(open(sys.argv[1]))
for dep in d["Deps"]:
    p = dep["ImportPath"]; s = p.split("/")
    h = s[0]
    if h in ("github.com", "bitbucket.org", "golang.org", "gonum.org", "gitlab.com"):
        n = 3
    elif h == "gopkg.in":
        n = 2 if re.search(r"\.v\d+$", s[1]) else 3
    else:  # k8s.io, sigs.k8s.io, go.uber.org, google.golang.org, cloud.google.com, vbom.ml, go4.org
        n = 2
    print(p, "/".join(s[:n]), dep["Rev"], dep.get("Comment", "").replace(" ", "_") or "-")
EOF
# The proxy refuses a bare commit (".../@v/<hash>.info: 403 Forbidden: This module version is not
# available"): it serves versions it already knows. A Godeps revision is had as
#  1. the pseudo-version of that commit, where known_pseudo below or any go.mod or go.sum in
#     the module cache names one (Kubernetes 1.15.0's go.mod, converted from 1.14's Godeps
#     file, names many; it is downloaded first for that);
#  2. the tag Godeps' comment names when the revision is exactly a tag (v1.1.0, not v1.1.0-3-gabc);
#  3. the module's @latest, when that is a pseudo-version of the commit (a repository with no
#     commit since);
#  4. else a SUBSTITUTE (written to BUILD-INFO): the version Kubernetes 1.15.0's go.mod builds
#     with, else the module's @latest; a substitute is vendored whole (its packages differ from
#     the ones Godeps.json lists), and imports it has that nothing vendors are added at the
#     version Kubernetes 1.15.0 builds with (build_kube below).
(cd / && go mod download k8s.io/kubernetes@v1.15.0) >/dev/null 2>&1 || log "note: k8s.io/kubernetes@v1.15.0 (a source of pseudo-versions and substitutes) is refused"
k115="$(go env GOMODCACHE)/k8s.io/kubernetes@v1.15.0/go.mod"
# Pseudo-versions of Godeps.json revisions of 1.12-1.14 that the proxy serves, as public go.mod
# files name them (kops' go.mod at Kubernetes 1.13.5, the 2018 vgo conversion of Kubernetes
# 1.12's Godeps, others found by the commit hash): the proxy serves a pseudo-version it knows,
# never the bare commit, and a pseudo-version cannot be made without the commit's time.
known_pseudo() {
    cat <<'KNOWN'
bitbucket.org/bertimus9/systemstat v0.0.0-20180207000608-0eeff89b0690
cloud.google.com/go v0.0.0-20160913182117-3b1ae45394a2
github.com/Azure/go-ansiterm v0.0.0-20170929234023-d6e3b3328b78
github.com/GeertJohan/go.rice v0.0.0-20170420135705-c02ca9a983da
github.com/JeffAshton/win_pdh v0.0.0-20161109143554-76bb4ee9f0ab
github.com/MakeNowJust/heredoc v0.0.0-20170808103936-bb23615498cd
github.com/Microsoft/hcsshim v0.0.0-20190110205307-69ac8d3f7fc1
github.com/NYTimes/gziphandler v0.0.0-20170623195520-56545f4a5d46
github.com/Nvveen/Gotty v0.0.0-20120604004816-cd527374f1e5
github.com/PuerkitoBio/urlesc v0.0.0-20160726150825-5bd2802263f2
github.com/Rican7/retry v0.1.1-0.20160712041035-272ad122d6e5
github.com/armon/circbuf v0.0.0-20150827004946-bbbad097214e
github.com/asaskevich/govalidator v0.0.0-20160715170612-593d64559f76
github.com/bazelbuild/buildtools v0.0.0-20171220125010-1a9c38e0df93
github.com/beorn7/perks v0.0.0-20160229213445-3ac7bf7a47d1
github.com/chai2010/gettext-go v0.0.0-20160711120539-c6fed771bfd5
github.com/client9/misspell v0.0.0-20170928000206-9ce5d979ffda
github.com/clusterhq/flocker-go v0.0.0-20160920122132-2b8b7259d313
github.com/cockroachdb/cmux v0.0.0-20160228191917-112f0506e774
github.com/codedellemc/goscaleio v0.0.0-20170830184815-20e2ce2cf885
github.com/containerd/console v0.0.0-20170925154832-84eeaae905fa
github.com/coreos/go-semver v0.0.0-20150304020126-568e959cd898
github.com/coreos/go-systemd v0.0.0-20161114122254-48702e0da86b
github.com/coreos/pkg v0.0.0-20160620232715-fa29b1d70f0b
github.com/cyphar/filepath-securejoin v0.0.0-20170720062807-ae69057f2299
github.com/d2g/dhcp4 v0.0.0-20170904100407-a1d1b6c41b1c
github.com/d2g/dhcp4client v0.0.0-20170829104524-6e570ed0a266
github.com/daaku/go.zipexe v0.0.0-20150329023125-a5fe2436ffcb
github.com/davecgh/go-spew v0.0.0-20170626231645-782f4967f2dc
github.com/daviddengcn/go-colortext v0.0.0-20160507010035-511bcaf42ccd
github.com/dgrijalva/jwt-go v0.0.0-20160705203006-01aeca54ebda
github.com/docker/distribution v0.0.0-20170726174610-edc3ab29cdff
github.com/docker/docker v0.0.0-20180612054059-a9fbbdc8dd87
github.com/docker/go-units v0.0.0-20170127094116-9e638d38cf69
github.com/elazarl/go-bindata-assetfs v0.0.0-20150624150248-3dcc96556217
github.com/elazarl/goproxy v0.0.0-20170405201442-c4fc26588b6e
github.com/emicklei/go-restful v0.0.0-20170410110728-ff4f55a20633
github.com/emicklei/go-restful-swagger12 v0.0.0-20170208215640-dcef7f557305
github.com/exponent-io/jsonpath v0.0.0-20151013193312-d6023ce2651d
github.com/fatih/camelcase v0.0.0-20160318181535-f6a740d52f96
github.com/fsnotify/fsnotify v0.0.0-20160816051541-f12c6236fe7b
github.com/ghodss/yaml v0.0.0-20150909031657-73d445a93680
github.com/go-openapi/analysis v0.0.0-20160815203709-b44dc874b601
github.com/go-openapi/errors v0.0.0-20160704190347-d24ebc2075ba
github.com/go-openapi/jsonpointer v0.0.0-20160704185906-46af16f9f7b1
github.com/go-openapi/jsonreference v0.0.0-20160704190145-13c6e3589ad9
github.com/go-openapi/loads v0.0.0-20170520182102-a80dea3052f0
github.com/go-openapi/runtime v0.0.0-20160704190703-11e322eeecc1
github.com/go-openapi/spec v0.0.0-20180213232550-1de3e0542de6
github.com/go-openapi/strfmt v0.0.0-20160812050534-d65c7fdb29ec
github.com/go-openapi/swag v0.0.0-20170606142751-f3f9494671f9
github.com/go-openapi/validate v0.0.0-20171117174350-d509235108fc
github.com/godbus/dbus v0.0.0-20151105175453-c7fdd8b5cd55
github.com/gogo/protobuf v0.0.0-20170330071051-c0656edd0d9e
github.com/golang/glog v0.0.0-20141105023935-44145f04b68c
github.com/golang/groupcache v0.0.0-20160516000752-02826c3e7903
github.com/golang/mock v0.0.0-20160127222235-bd3c8e81be01
github.com/google/btree v0.0.0-20160524151835-7d79101e329e
github.com/google/gofuzz v0.0.0-20161122191042-44d81051d367
github.com/google/uuid v0.0.0-20171113160352-8c31c18f31ed
github.com/googleapis/gnostic v0.0.0-20170729233727-0c5108395e2d
github.com/gophercloud/gophercloud v0.0.0-20180330165814-781450b3c4fc
github.com/gorilla/websocket v0.0.0-20150714140627-6eb6ad425a89
github.com/gregjones/httpcache v0.0.0-20170728041850-787624de3eb7
github.com/grpc-ecosystem/go-grpc-prometheus v0.0.0-20170330212424-2500245aa611
github.com/hashicorp/golang-lru v0.0.0-20160207214719-a0d98a5f2880
github.com/hashicorp/hcl v0.0.0-20160711231752-d8c773c4cba1
github.com/heketi/heketi v0.0.0-20170623005005-aaf40619d85f
github.com/jmespath/go-jmespath v0.0.0-20160202185014-0b12d6b521d8
github.com/jmhodges/clock v0.0.0-20160418191101-880ee4c33548
github.com/jmoiron/sqlx v0.0.0-20180124204410-05cef0741ade
github.com/jonboulle/clockwork v0.0.0-20141017032234-72f9bd7c4e0c
github.com/json-iterator/go v0.0.0-20180612202835-f2b4162afba3
github.com/jteeuwen/go-bindata v0.0.0-20151023091102-a0ff2567cfb7
github.com/kardianos/osext v0.0.0-20150410034420-8fef92e41e22
github.com/kisielk/sqlstruct v0.0.0-20150923205031-648daed35d49
github.com/kr/fs v0.0.0-20131111012553-2788f0dbd169
github.com/lib/pq v0.0.0-20180201184707-88edab080323
github.com/libopenstorage/openstorage v0.0.0-20170906232338-093a0c388875
github.com/lpabon/godbc v0.0.0-20140613165803-9577782540c1
github.com/magiconair/properties v0.0.0-20160816085511-61b492c03cf4
github.com/mailru/easyjson v0.0.0-20170624190925-2f5df55504eb
github.com/marstr/guid v0.0.0-20170427235115-8bdf7d1a087c
github.com/mattn/go-shellwords v0.0.0-20180605041737-f8471b0a71de
github.com/mesos/mesos-go v0.0.0-20180906210748-ff8175bfda54
github.com/mholt/caddy v0.0.0-20180213163048-2de495001514
github.com/miekg/dns v0.0.0-20160614162101-5d001d020961
github.com/mindprince/gonvml v0.0.0-20171110221305-fee913ce8fb2
github.com/mistifyio/go-zfs v0.0.0-20151009155749-1b4ae6fb4e77
github.com/mitchellh/go-wordwrap v0.0.0-20150314170334-ad45545899c7
github.com/mitchellh/mapstructure v0.0.0-20170307201123-53818660ed49
github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd
github.com/mohae/deepcopy v0.0.0-20170603005431-491d3605edfb
github.com/mrunalp/fileutils v0.0.0-20160930181131-4ee1cc9a8058
github.com/mvdan/xurls v0.0.0-20160110113200-1b768d7c393a
github.com/onsi/ginkgo v0.0.0-20170318221715-67b9df7f55fe
github.com/onsi/gomega v0.0.0-20160911051023-d59fa0ac68bb
github.com/opencontainers/go-digest v0.0.0-20170106003457-a6d0ee40d420
github.com/opencontainers/image-spec v0.0.0-20170604055404-372ad780f634
github.com/opencontainers/runc v0.0.0-20180424185634-871ba2e58e24
github.com/opencontainers/selinux v0.0.0-20170621221121-4a2974bf1ee9
github.com/pborman/uuid v0.0.0-20150603214016-ca53cad383ca
github.com/pkg/sftp v0.0.0-20160930220758-4d0e916071f6
github.com/pmezard/go-difflib v0.0.0-20151028094244-d8ed2627bdf0
github.com/prometheus/client_golang v0.0.0-20170531130054-e7e903064f5e
github.com/prometheus/client_model v0.0.0-20150212101744-fa8ad6fec335
github.com/prometheus/common v0.0.0-20170427095455-13ba4ddd0caa
github.com/prometheus/procfs v0.0.0-20170519190837-65c1f6f8f0fc
github.com/rancher/go-rancher v0.0.0-20160922212217-09693a8743ba
github.com/renstrom/dedent v0.0.0-20150819195903-020d11c3b9c0
github.com/robfig/cron v0.0.0-20170309132418-df38d32658d8
github.com/rubiojr/go-vhd v0.0.0-20160810183302-0bfd3b39853c
github.com/russross/blackfriday v0.0.0-20151117072312-300106c228d5
github.com/seccomp/libseccomp-golang v0.0.0-20150813023252-1b506fc7c24e
github.com/shurcooL/sanitized_anchor_name v0.0.0-20151028001915-10ef21a441db
github.com/sirupsen/logrus v0.0.0-20170822132746-89742aefa4b2
github.com/spf13/afero v0.0.0-20160816080757-b28a7effac97
github.com/spf13/cast v0.0.0-20160730092037-e31f36ffc91a
github.com/spf13/cobra v0.0.0-20180319062004-c439c4fa0937
github.com/spf13/jwalterweatherman v0.0.0-20160311093646-33c24e77fb80
github.com/spf13/viper v0.0.0-20160820190039-7fb2782df3d8
github.com/storageos/go-api v0.0.0-20180126153955-3a4032328d99
github.com/stretchr/objx v0.0.0-20150928122152-1a9d0bb9f541
github.com/stretchr/testify v0.0.0-20180319223459-c679ae2cc0cb
github.com/syndtr/gocapability v0.0.0-20160928074757-e7cb7fa329f4
github.com/tools/godep v0.0.0-20180126220526-ce0bfadeb516
github.com/ugorji/go v0.0.0-20170107133203-ded73eae5db7
github.com/ugorji/go v0.0.0-20171019201919-bdcc60b419d1
github.com/vishvananda/netns v0.0.0-20171111001504-be1fbeda1936
github.com/vmware/govmomi v0.0.0-20180822160426-22f74650cf39
github.com/vmware/photon-controller-go-sdk v0.0.0-20170310013346-4a435daef6cc
github.com/xanzy/go-cloudstack v0.0.0-20160728180336-1e2cbf647e57
golang.org/x/crypto v0.0.0-20180808211826-de0752318171
golang.org/x/exp v0.0.0-20160623011055-292a51b8d262
golang.org/x/net v0.0.0-20180124060956-0ed95abb35c4
golang.org/x/oauth2 v0.0.0-20170412232759-a6bd8cefa181
golang.org/x/sys v0.0.0-20171031081856-95c657629925
golang.org/x/text v0.0.0-20170810154203-b19bf474d317
golang.org/x/time v0.0.0-20161028155119-f51c12702a4d
golang.org/x/tools v0.0.0-20170428054726-2382e3994d48
golang.org/x/tools v0.0.0-20190205050122-7f7074d5bcfd
gonum.org/v1/gonum v0.0.0-20180726124543-cebdade430cc
google.golang.org/api v0.0.0-20180621000839-3639d6d93f37
google.golang.org/genproto v0.0.0-20170731182057-09f6ed296fc6
gopkg.in/natefinch/lumberjack.v2 v2.0.0-20150622162204-20b71e5b60d7
gopkg.in/square/go-jose.v2 v2.0.0-20180411045311-89060dee6a84
gopkg.in/yaml.v2 v2.0.0-20170721113624-670d4cfef054
k8s.io/gengo v0.0.0-20180702041517-fdcf9f9480fd
k8s.io/gengo v0.0.0-20181106084056-51747d6e00da
k8s.io/klog v0.0.0-20181108234604-8139d8cb77af
k8s.io/klog v0.0.0-20190306015804-8e90cee79f82
k8s.io/kube-openapi v0.0.0-20180711000925-0cf8f7e6ed1d
k8s.io/utils v0.0.0-20180726175726-66066c83e385
KNOWN
}
index_pseudo() {
    local m
    m="$(go env GOMODCACHE)"
    known_pseudo
    { find "$m/cache/download" -name '*.mod' -size -200k 2>/dev/null
      find "$m" -maxdepth 5 \( -name go.sum -o -name go.mod \) -path '*@*' 2>/dev/null
    } | xargs grep -hoE '[a-zA-Z0-9._~/-]+ v[0-9]+\.[0-9]+\.[0-9]+-[0-9.a-z]*[0-9]{14}-[0-9a-f]{12}' 2>/dev/null \
      | awk '{print $1, $2}' | LC_ALL=C sort -u
}
# Substitutes chosen by hand, where neither the revision nor the above builds:
# "root rev-prefix version why" (version: of root, or module@version for a repository renamed)
pinned() {
    cat <<'PINS'
bitbucket.org/ww/goautoneg 75cd24fc2f2c github.com/munnerz/goautoneg@v0.0.0-20120707110453-a547fc61f48d its copy on GitHub (the same 2012-07-07 commit; Kubernetes 1.15 moved to it); the proxy refuses bitbucket.org/ww/goautoneg
github.com/renstrom/dedent 020d11c3b9c0 github.com/lithammer/dedent@v1.1.0 the repository's new name (the proxy refuses every version under the old one); v1.1.0 is what Kubernetes 1.14 vendors from it
k8s.io/kube-openapi fd52d7a69c20 v0.0.0-20181109181836-c59034cc13d5 the revision Kubernetes 1.13.0-1.13.5 vendor (1.13.12's later one is not served); Kubernetes 1.15.0's lacks handler.BuildAndRegisterOpenAPIService
github.com/ugorji/go bdcc60b419d1 v1.1.1 its codec's GenVersion is 8, as etcd's generated client code (coreos/etcd/client/keys.generated.go) requires; newer tags moved codec into a module of its own
gonum.org/v1/gonum cebdade430cc v0.0.0-20180816165407-929014505bf4 its dot.Marshal still takes the strict argument pkg/controller/garbagecollector/dump.go passes (Kubernetes 1.15.0's gonum does not)
PINS
}
export -f pinned
fetch_one() { # root rev comment -> $work/dl/<root>@<rev>: "status version dir [error]" (status exact|substitute|refused)
    local root="$1" rev="$2" comment="$3" f c cands=() v dir e="" tag
    f="$work/dl/${root//\//_}@$rev"
    # (a final answer is kept; a refusal is asked again on the next run)
    if [ -s "$f" ] && ! grep -q '^refused' "$f"; then return 0; fi
    mapfile -t cands < <(awk -v r="$root" -v h="${rev:0:12}" '$1 == r && $2 ~ ("-" h "$") {print $2}' "$work/pseudo-index.txt")
    if [[ "$comment" =~ ^v?([0-9]+)(\.[0-9]+)?(\.[0-9]+)?$ ]]; then
        tag="v${BASH_REMATCH[1]}${BASH_REMATCH[2]:-.0}${BASH_REMATCH[3]:-.0}"
        cands+=("$tag" "$tag+incompatible")
    elif [[ "$comment" =~ ^v?[0-9]+\.[0-9]+\.[0-9]+-[0-9A-Za-z.-]+$ ]] && ! [[ "$comment" =~ -[0-9]+-g[0-9a-f]+$ ]]; then
        # a pre-release tag (v1.3.1-coreos.6), not `git describe`'s tag-N-gHASH
        tag="v${comment#v}"
        cands+=("$tag" "$tag+incompatible")
    fi
    for c in "${cands[@]}"; do
        v="$(cd / && go mod download -json "$root@$c" 2>/dev/null)" || true
        dir="$(jq -r '.Dir // empty' <<<"$v" 2>/dev/null || true)"
        if [ -n "$dir" ]; then echo "exact $(jq -r .Version <<<"$v") $dir" > "$f"; return 0; fi
        e="$e; $c: $(jq -r '.Error // empty' <<<"$v" 2>/dev/null | head -1)"
    done
    # the error for the commit itself, as the proxy words it
    e="$( (cd / && go mod download -json "$root@$rev") 2>/dev/null | jq -r '.Error // empty' | tr '\n' ' ')$e"
    local latest
    latest="$(cd / && go list -m -json "$root@latest" 2>/dev/null | jq -r '.Version // empty')" || true
    if [[ "$latest" == *-"${rev:0:12}" ]]; then
        dir="$(cd / && go mod download -json "$root@$latest" 2>/dev/null | jq -r '.Dir // empty')" || true
        if [ -n "$dir" ]; then echo "exact $latest $dir" > "$f"; return 0; fi
    fi
    local why
    read -r c why < <(pinned | awk -v r="$root" -v h="$rev" '$1 == r && index(h, $2) == 1 {$1 = ""; $2 = ""; print substr($0, 3)}')
    if [ -n "$c" ]; then
        local m="$root@$c"
        [[ "$c" != *@* ]] || m="$c"
        dir="$(cd / && go mod download -json "$m" 2>/dev/null | jq -r '.Dir // empty')" || true
        if [ -n "$dir" ]; then echo "pinned $c $dir $why; the revision: $e" > "$f"; return 0; fi
        e="$e; $c (pinned): refused"
    fi
    # substitute: the version Kubernetes 1.15.0 builds with (its replace block, else its require)
    c="$(awk -v r="$root" '$1 == r && $2 == "=>" && $3 == r {print $4; exit}' "$k115" 2>/dev/null)"
    [ -n "$c" ] || c="$(awk -v r="$root" '($1 == r || $1 == "require" && $2 == r) && $0 !~ /=>/ {print ($1 == "require" ? $3 : $2); exit}' "$k115" 2>/dev/null)"
    if [ -n "$c" ]; then
        v="$(cd / && go mod download -json "$root@$c" 2>/dev/null)" || true
        dir="$(jq -r '.Dir // empty' <<<"$v" 2>/dev/null || true)"
        if [ -n "$dir" ]; then echo "substitute $c $dir $e" > "$f"; return 0; fi
        e="$e; $c (1.15.0's): $(jq -r '.Error // empty' <<<"$v" | head -1)"
    fi
    if [ -n "$latest" ]; then
        dir="$(cd / && go mod download -json "$root@$latest" 2>/dev/null | jq -r '.Dir // empty')" || true
        if [ -n "$dir" ]; then echo "newest $latest $dir $e" > "$f"; return 0; fi
    fi
    echo "refused - - $e" > "$f"
}
export -f fetch_one
export work k115

vendor_whole() { # root dir: the module's tree into vendor/root (its vendor/ and testdata/ left out)
    local v="${3:-$k/vendor.tmp}"
    mkdir -p "$v/$1"
    cp -r "$2/." "$v/$1/"
    chmod -R u+w "$v/$1"
    find "$v/$1" -mindepth 1 -type d \( -name vendor -o -name testdata \) -prune -exec rm -rf {} +
}

if [ ! -f "$work/vendor.ok" ]; then
    index_pseudo > "$work/pseudo-index.txt"
    mkdir -p "$work/dl"
    log "$full: resolving $(awk '{print $2, $3}' "$work/godeps.txt" | sort -u | wc -l) repositories at their Godeps.json revisions (8 at a time)"
    awk '{print $2, $3, $4}' "$work/godeps.txt" | sort -u | xargs -P 8 -n 3 bash -c 'fetch_one "$@"' _
    # the vendor tree: the packages Godeps.json lists, each directory's files (not its subdirectories)
    rm -rf "$k/vendor.tmp"
    mkdir -p "$k/vendor.tmp"
    : > "$work/missing.txt"
    while read -r ip root rev comment; do
        read -r status ver dir err < "$work/dl/${root//\//_}@$rev"
        note="$root ${rev:0:12}$([ "$comment" = - ] || echo " ($comment)")"
        if [ "$status" = refused ] && [ "$root" = vbom.ml/util ]; then
            status=ours dir="$here/third_party/vbom-util"
            grep -q "^$root " "$work/missing.txt" || echo "$note: refused by the proxy ($err); third_party/vbom-util (ours, sortorder.NaturalLess) used instead" >> "$work/missing.txt"
        fi
        case "$status" in
            refused)
                grep -q "^$root " "$work/missing.txt" || echo "$note: NOT AVAILABLE: $err" >> "$work/missing.txt"
                continue ;;
            substitute|newest|pinned)
                if [ ! -d "$k/vendor.tmp/$root" ] || ! grep -q "^$root " "$work/missing.txt"; then
                    if [ "$status" = pinned ]; then
                        echo "$note: SUBSTITUTE $ver (chosen by hand: $err), vendored whole" >> "$work/missing.txt"
                    elif [ "$status" = substitute ]; then
                        echo "$note: SUBSTITUTE $ver (what Kubernetes 1.15.0 builds with), vendored whole; the revision: $err" >> "$work/missing.txt"
                    else
                        echo "$note: SUBSTITUTE $ver (the module's newest; Kubernetes 1.15.0 has none), vendored whole; the revision: $err" >> "$work/missing.txt"
                    fi
                    vendor_whole "$root" "$dir"
                fi
                continue ;;
        esac
        sub="${ip#"$root"}"
        if [ ! -d "$dir$sub" ]; then
            echo "$note: package $ip is not in $root@$ver" >> "$work/missing.txt"
            continue
        fi
        mkdir -p "$k/vendor.tmp/$ip"
        find "$dir$sub" -maxdepth 1 -type f -exec cp {} "$k/vendor.tmp/$ip/" \;
        for l in LICENSE LICENSE.txt LICENSE.md COPYING NOTICE PATENTS; do
            [ ! -f "$dir/$l" ] || [ -f "$k/vendor.tmp/$root/$l" ] || { mkdir -p "$k/vendor.tmp/$root"; cp "$dir/$l" "$k/vendor.tmp/$root/"; }
        done
    done < "$work/godeps.txt"
    chmod -R u+w "$k/vendor.tmp"
    # staging: vendor/k8s.io/<repo> -> ../../staging/src/k8s.io/<repo>, as in git
    mkdir -p "$k/vendor.tmp/k8s.io"
    for s in "$k"/staging/src/k8s.io/*/; do
        s="$(basename "$s")"
        [ ! -e "$k/vendor.tmp/k8s.io/$s" ] || die "vendor/k8s.io/$s is both in Godeps.json and in staging"
        ln -s "../../staging/src/k8s.io/$s" "$k/vendor.tmp/k8s.io/$s"
    done
    cp "$src/vendor/BUILD" "$src/vendor/OWNERS" "$k/vendor.tmp/" 2>/dev/null || true
    rm -rf "$k/vendor"
    mv "$k/vendor.tmp" "$k/vendor"
    # github.com/emicklei/go-restful-swagger12 (1.13 and older) is refused whole ("@v/list: 403");
    # k8s.io/apiserver imports it for the Swagger 1.2 spec (/swaggerapi, deprecated, gone in
    # 1.14). A stand-in of ours: the types the API server names and a RegisterSwaggerService that
    # registers nothing, so an API server built so serves no /swaggerapi (its OpenAPI spec,
    # /openapi/v2, which kubectl reads, is not affected); the kubelet only links it.
    if grep -q '^github.com/emicklei/go-restful-swagger12 .*NOT AVAILABLE' "$work/missing.txt"; then
        mkdir -p "$k/vendor/github.com/emicklei/go-restful-swagger12"
        cat > "$k/vendor/github.com/emicklei/go-restful-swagger12/swagger.go" <<'GO'
// Package swagger stands in for github.com/emicklei/go-restful-swagger12, which the Go module
// proxy does not serve (written by kubelet-rehash's scripts/k8s-gopath-build.sh): the
// configuration type k8s.io/apiserver fills in, and a RegisterSwaggerService that registers
// no Swagger 1.2 endpoints.
package swagger

import restful "github.com/emicklei/go-restful"

// Config is the Swagger 1.2 service's configuration, as k8s.io/apiserver sets it.
type Config struct {
	WebServicesUrl      string
	ApiPath             string
	SwaggerPath         string
	SwaggerFilePath     string
	WebServices         []*restful.WebService
	DisableCORS         bool
	ApiVersion          string
	SchemaFormatHandler func(typeName string) string
}

// RegisterSwaggerService registers nothing: no /swaggerapi.
func RegisterSwaggerService(config Config, wsContainer *restful.Container) {}
GO
        echo "  -> a stand-in of ours (scripts/k8s-gopath-build.sh) in its place: the API server serves no Swagger 1.2 spec (/swaggerapi); its OpenAPI spec is not affected" >> "$work/missing.txt"
    fi
    # github.com/storageos/go-api before 1.14 (0.3.4) is refused whole but for a 2018-09
    # pseudo-version, which has no types.Controller pkg/volume/storageos uses: the StorageOS
    # volume plugin is left out of the kubelet and the controller manager
    if grep -q '^github.com/storageos/go-api .*\(SUBSTITUTE\|NOT AVAILABLE\)' "$work/missing.txt" \
        && ! grep -q 'Controller' "$k/vendor/github.com/storageos/go-api/types/controller.go" 2>/dev/null \
        && grep -q 'storageos.ProbeVolumePlugins' "$k/cmd/kubelet/app/plugins.go"; then
        sed -i '/"k8s.io\/kubernetes\/pkg\/volume\/storageos"/d; /storageos\.ProbeVolumePlugins()/d' \
            "$k/cmd/kubelet/app/plugins.go" "$k/cmd/kube-controller-manager/app/plugins.go"
        echo "  -> so the StorageOS volume plugin (pkg/volume/storageos, which needs its types.Controller) is left out of the kubelet and kube-controller-manager (cmd/*/app/plugins.go)" >> "$work/missing.txt"
    fi
    # github.com/rancher/go-rancher is refused whole (".../@v/list: 403"): the kubelet's Rancher
    # registry credential provider (pkg/credentialprovider/rancher, used only with RANCHER_URL
    # set) is left out of the kubelet
    if grep -q '^github.com/rancher/go-rancher .*NOT AVAILABLE' "$work/missing.txt" \
        && grep -q '^\s*_ "k8s.io/kubernetes/pkg/credentialprovider/rancher"' "$k/cmd/kubelet/app/plugins.go"; then
        sed -i '/^\s*_ "k8s.io\/kubernetes\/pkg\/credentialprovider\/rancher"/d' "$k/cmd/kubelet/app/plugins.go"
        echo "  -> so cmd/kubelet/app/plugins.go no longer imports pkg/credentialprovider/rancher: the kubelet has no Rancher registry credential provider" >> "$work/missing.txt"
    fi
    touch "$work/vendor.ok"
    log "$full: $(cat "$work"/dl/* | grep -c '^exact') of $(ls "$work"/dl | wc -l) repositories at their exact revision"
    if [ -s "$work/missing.txt" ]; then
        log "$full: dependencies not had at their Godeps.json revision:"
        sed 's/^/  /' "$work/missing.txt" >&2
    fi
fi

# ---- the OpenAPI definitions ---------------------------------------------------------------------

openapi_gen() {
    local t0=$SECONDS dirs
    log "$full: generating pkg/generated/openapi (openapi-gen, $gover)"
    (cd "$k" && "${genv[@]}" nice -n 10 "$gobin" build -o "$work/openapi-gen" ./vendor/k8s.io/kube-openapi/cmd/openapi-gen) > "$work/openapi.log" 2>&1 \
        || { tail -20 "$work/openapi.log" >&2; die "$full: openapi-gen does not build ($work/openapi.log)"; }
    # Makefile.generated_files: every directory but ./vendor, ./_*, ./.*, ./docs with a Go file
    # tagged `// +k8s:` and `+k8s:openapi-gen=` in it, staging/src named vendor
    dirs="$(cd "$k" && find -H . -not \( \( -path ./vendor -o -path './_*' -o -path './.*' -o -path ./docs \) -prune \) -type f -name '*.go' \
        | xargs grep -l '^// *+k8s:' | xargs grep -l '+k8s:openapi-gen=' | xargs -n1 dirname | sed 's|^\./staging/src|vendor|; s|^\./||' \
        | LC_ALL=C sort -u | sed 's|^|k8s.io/kubernetes/|' | paste -sd,)"
    [ "$(tr ',' '\n' <<<"$dirs" | wc -l)" -gt 10 ] || die "$full: too few packages tagged +k8s:openapi-gen found"
    (cd "$k" && "${genv[@]}" nice -n 10 "$work/openapi-gen" --logtostderr -i "$dirs" -p k8s.io/kubernetes/pkg/generated/openapi \
        -O zz_generated.openapi -h vendor/k8s.io/code-generator/hack/boilerplate.go.txt \
        -r "$work/openapi-violations.report") >> "$work/openapi.log" 2>&1 \
        || { tail -20 "$work/openapi.log" >&2; die "$full: openapi-gen failed ($work/openapi.log)"; }
    [ -s "$k/pkg/generated/openapi/zz_generated.openapi.go" ] || die "$full: openapi-gen wrote no pkg/generated/openapi/zz_generated.openapi.go"
    if [ -f "$k/api/api-rules/violation_exceptions.list" ] && ! diff -q "$work/openapi-violations.report" "$k/api/api-rules/violation_exceptions.list" >/dev/null; then
        log "$full: note: openapi-gen's API rule violations differ from api/api-rules/violation_exceptions.list ($work/openapi-violations.report)"
    fi
    log "$full: OpenAPI definitions of $(tr ',' '\n' <<<"$dirs" | wc -l) packages generated in $((SECONDS - t0)) s"
    touch "$work/openapi.ok"
}
if [ "$only" = 0 ] && [ ! -f "$k/pkg/generated/openapi/zz_generated.openapi.go" -o ! -f "$work/openapi.ok" ]; then
    openapi_gen
fi

# ---- the build -----------------------------------------------------------------------------------

ldflags=""
for pkg in k8s.io/kubernetes/pkg/version k8s.io/kubernetes/vendor/k8s.io/client-go/pkg/version; do
    ldflags="$ldflags -X $pkg.gitVersion=v$full -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
pkgs=()
for b in $bins; do pkgs+=("./cmd/$b"); done
repo_root() { # import path -> its repository root (as for Godeps.json above)
    local IFS=/ s
    read -ra s <<<"$1"
    case "${s[0]}" in
        github.com|bitbucket.org|golang.org|gonum.org|gitlab.com) echo "${s[0]}/${s[1]}/${s[2]}" ;;
        gopkg.in) if [[ "${s[1]}" =~ \.v[0-9]+$ ]]; then echo "${s[0]}/${s[1]}"; else echo "${s[0]}/${s[1]}/${s[2]}"; fi ;;
        *) echo "${s[0]}/${s[1]}" ;;
    esac
}
add_missing() { # build log -> 0 when a package it could not find was added to vendor/
    local ip root c dir added=1
    for ip in $(grep -o 'cannot find package "[^"]*"' "$1" | cut -d'"' -f2 | sort -u); do
        [ ! -d "$k/vendor/$ip" ] || continue
        root="$(repo_root "$ip")"
        if [ -d "$k/vendor/$root" ] && grep -q "^$root .*SUBSTITUTE\|^$root: ADDED" "$work/missing.txt"; then
            continue # vendored whole: the package is not in that version
        fi
        # a repository Godeps.json has at its revision, but not this package of it
        dir="$(cat "$work/dl/${root//\//_}@"* 2>/dev/null | awk '$1 == "exact" {print $3; exit}')"
        if [ -n "$dir" ] && [ -d "$dir/${ip#"$root"/}" ]; then
            log "$full: adding $ip from $root at its Godeps.json revision (a substitute imports it)"
            echo "$root: package $ip ADDED from the Godeps.json revision (a substitute imports it)" >> "$work/missing.txt"
            mkdir -p "$k/vendor/$ip"
            find "$dir/${ip#"$root"/}" -maxdepth 1 -type f -exec cp {} "$k/vendor/$ip/" \;
            chmod -R u+w "$k/vendor/$ip"
            added=0
            continue
        fi
        # bitbucket.org/ww/goautoneg (which a substitute kube-openapi imports) is gone and refused:
        # its copy on GitHub, which Kubernetes 1.15 moved to
        if [ "$root" = bitbucket.org/ww/goautoneg ]; then
            c=github.com/munnerz/goautoneg@v0.0.0-20120707110453-a547fc61f48d
            dir="$(cd / && go mod download -json "$c" 2>/dev/null | jq -r '.Dir // empty')" || true
            [ -n "$dir" ] || { log "$ip: not vendored, and the proxy refuses $c"; continue; }
            log "$full: adding $root as $c (imported by a substitute; the proxy refuses $root)"
            echo "$root: ADDED as $c, its copy on GitHub (not in Godeps.json, a substitute imports it; the proxy refuses $root@v0.0.0-20120707110453-75cd24fc2f2c)" >> "$work/missing.txt"
            vendor_whole "$root" "$dir" "$k/vendor"
            added=0
            continue
        fi
        c="$(awk -v r="$root" '$1 == r && $2 == "=>" && $3 == r {print $4; exit}' "$k115" 2>/dev/null)"
        [ -n "$c" ] || c="$(awk -v r="$root" '($1 == r || $1 == "require" && $2 == r) && $0 !~ /=>/ {print ($1 == "require" ? $3 : $2); exit}' "$k115" 2>/dev/null)"
        # else the newest pseudo-version known of it
        [ -n "$c" ] || c="$(awk -v r="$root" '$1 == r {print $2}' "$work/pseudo-index.txt" | LC_ALL=C sort | tail -1)"
        [ -n "$c" ] || { log "$ip: not vendored, and Kubernetes 1.15.0 names no version of $root, nor any go.mod known"; continue; }
        dir="$(cd / && go mod download -json "$root@$c" 2>/dev/null | jq -r '.Dir // empty')" || true
        [ -n "$dir" ] || { log "$ip: not vendored, and the proxy refuses $root@$c"; continue; }
        log "$full: adding $root@$c (imported by a substitute, not in Godeps.json), vendored whole"
        echo "$root: ADDED $c (Kubernetes 1.15.0's, else the newest known; not in Godeps.json, a substitute imports $ip), vendored whole" >> "$work/missing.txt"
        vendor_whole "$root" "$dir" "$k/vendor"
        added=0
    done
    return $added
}

log "$full: building $bins ($gover, GOPATH mode, cgo)"
t0=$SECONDS
: > "$work/build.log"
# (Go before 1.13 has no -trimpath and `go build -o DIR/` of several packages needs 1.13: one at a time)
for b in $bins; do
    for round in 1 2 3 4 5 6; do
        if (cd "$k" && "${genv[@]}" CGO_ENABLED=1 nice -n 10 "$gobin" build -ldflags "$ldflags" -o "$out/$b.tmp" "./cmd/$b") > "$work/build-$b.log" 2>&1; then
            break
        fi
        cat "$work/build-$b.log" >> "$work/build.log"
        if [ "$round" -lt 6 ] && add_missing "$work/build-$b.log"; then continue; fi
        { grep -v '^\s' "$work/build-$b.log" || true; } | tail -30 >&2
        die "$full: go build ./cmd/$b failed ($work/build-$b.log)"
    done
    stamped "$out/$b.tmp" "$full" || die "$full: $out/$b.tmp does not report v$full: $("$out/$b.tmp" --version 2>&1 | head -1)"
done
# all or none: the binaries of one vendor tree, then their BUILD-INFO
rm -f "$out/BUILD-INFO"
for b in $bins; do mv "$out/$b.tmp" "$out/$b"; done
{
    echo "k8s.io/kubernetes v$full ($bins), built $(date -u +%FT%TZ) with $gover in GOPATH mode (CGO_ENABLED=1, in-tree cloud providers) in $((SECONDS - t0)) s by scripts/k8s-gopath-build.sh"
    cat "$work/missing.txt"
} > "$out/BUILD-INFO"
log "$full: built in $((SECONDS - t0)) s into $out"
echo "$out"
