#!/usr/bin/env bash
# Whole-node benchmark on the two real 2,000-container nodes of fixtures/nodes-large, side by
# side with what the same work costs without this tool (issue 16). Not part of scripts/test.sh
# (CI): it needs root, a loop device, and minutes of a quiet machine.
#
#   sudo scripts/bench-node.sh [PAIRS]        (default 5; at least 5 for figures worth quoting)
#   BIN_BEFORE=/path/to/older/kubelet-rehash sudo scripts/bench-node.sh    (also time that one)
#   BIN=dist/…/kubelet-rehash sudo scripts/bench-node.sh    (time that binary instead of a fresh
#       --release build: e.g. the static musl one scripts/release.sh ships, which is not the
#       glibc build the figures in the README are of; see the README's Cost section)
#
# Environment (all optional):
#   NODES="docker-20.10 containerd-1.7"   which of the two large nodes (default both)
#   AB=1          the A/B part below: interleaved pairs against the references (0 skips it)
#   SCALE=1       the scaling part: `patch` on the node grown or shrunk to each of SIZES
#                 containers (0 skips it)
#   SIZES="500 2000 10000"   containers per scaling point; 2000 is the real node itself, any
#                 other size is made from it by testtools' grow-node (whole pods cloned under
#                 new ids, pod uids and names, or a prefix of its pods kept; see
#                 testtools/src/grow.rs); a size with an `r` suffix (e.g. 2000r) is rewritten
#                 the way a grown one is (containerd: a bulk-written meta.db) even at the node's
#                 own count, for a like-for-like point
#   SCALE_RUNS=3  runs per scaling point (medians)
#   BIN_BEFORE    as above: the scaling part then runs that build too, in the same rounds
#
# Everything timed runs on a journaled ext4 file system the script makes in a file and
# loop-mounts (the root file system of a build VM is often ext4 without a journal, where
# creating files shortly after mass deletes stalls in the kernel and `cp` timings scatter over
# 30×). Setup is untimed: a fresh copy of the node for every run, then `sync` and a short
# settle. Each pair runs the tool and its reference back to back, alternating which goes first,
# and the medians are over the pairs:
#
# * Docker: `plan` + `patch` against (a) `cp -r` + `sync` of the node's `containers/` tree
#   (every file the patch could touch, copied once); also the floor of any crash-safe rewrite
#   of the files the patch rewrites (scripts/replace-floor.py: temp files, syncfs, renames,
#   syncfs; no reading, editing or backup), to show how much of the ratio the atomic write
#   alone takes.
# * containerd: the whole `patch` (scan, plan, backup, apply, verify) against (b) Go bbolt
#   (tools/bbolt-rewrite, built offline by scripts/setup-bbolt-tool.sh rewrite) rewriting the same
#   hashes in the same meta.db in one transaction, opened with NoFreelistSync as containerd
#   >= 1.7 opens it; also our backup + apply alone against Go's transaction alone.
# * Peak RSS (`/usr/bin/time -v`) of `patch` against the size of the store's files, and the
#   bytes the backup wrote.
#
# The scaling part (issue 16: "also at 500, 2,000 and 10,000 containers, grown from the real
# nodes, to show linear cost"; "peak RSS of patch <= 1.0x the store size, and flat per
# container from 2,000 to 10,000") times `patch` alone at each size on the same journaled
# mount (setup untimed: grow, fresh copy, sync, settle), and prints per size: wall, CPU,
# peak RSS, RSS / store size, ms of CPU (and wall) per container, KB of RSS per container above
# the binary's own baseline (peak RSS of `kubelet-rehash --version`), and between consecutive
# sizes the marginal cost: CPU ms and RSS KB per added container. Linear cost reads as a
# constant ms/container; bounded memory as a marginal RSS/container near 0.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
here="$PWD"
pairs="${1:-5}"
nodes="${NODES:-docker-20.10 containerd-1.7}"
sizes="${SIZES:-500 2000 10000}"
scale_runs="${SCALE_RUNS:-3}"
[ "$(id -u)" = 0 ] || { echo "bench-node.sh: needs root (mkfs + loop mount)" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "bench-node.sh: needs /usr/bin/time (Debian package time)" >&2; exit 2; }

[ -n "${BIN:-}" ] || cargo build --release -q -p kubelet-rehash
[ "${SCALE:-1}" = 1 ] && cargo build --release -q -p testtools --bin grow-node
grower="${CARGO_TARGET_DIR:-$here/target}/release/grow-node"
bin="${BIN:-${CARGO_TARGET_DIR:-$here/target}/release/kubelet-rehash}"
[ -x "$bin" ] || { echo "bench-node.sh: $bin is not an executable" >&2; exit 2; }
# (BIN may be relative: the runs cd into the node)
bin="$(realpath "$bin")"
bins=("$bin")
names=(after)
if [ -n "${BIN_BEFORE:-}" ]; then
    bins=("$BIN_BEFORE" "$bin")
    names=(before after)
fi
scripts/setup-bbolt-tool.sh rewrite >/dev/null
gobin="$here/.cache/bin/bbolt-rewrite"

work="$(mktemp -d "${BENCH_DIR:-/tmp}/kubelet-rehash-bench.XXXXXX")"
mnt="$work/mnt"
cleanup() {
    mountpoint -q "$mnt" && umount "$mnt"
    rm -rf "$work"
}
trap cleanup EXIT
truncate -s 4G "$work/fs.img"
mkfs.ext4 -q -F -O has_journal "$work/fs.img"
mkdir -p "$mnt"
mount -o loop "$work/fs.img" "$mnt"
dumpe2fs -h "$work/fs.img" 2>/dev/null | grep 'features:.*has_journal' >/dev/null || { echo "bench-node.sh: the file system has no journal" >&2; exit 1; }
echo "journaled ext4 on $(findmnt -n -o SOURCE "$mnt"); nodes: $nodes; A/B ${AB:-1} ($pairs pairs), scaling ${SCALE:-1} (sizes $sizes, $scale_runs runs each); load $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"

median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.1f\n", (a[NR/2]+a[NR/2+1])/2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
settle() { sync; sleep 0.5; }
# timed CMD...: runs CMD, prints "wall_ms rss_kb cpu_ms" (cpu = user + sys: on a shared machine
# the wall time swings with the other jobs' load, the CPU time much less)
timed() {
    local t0 t1 rc=0
    t0=$(date +%s%N)
    /usr/bin/time -v -o "$work/time.txt" "$@" > "$work/out.json" 2> "$work/err.txt" || rc=$?
    t1=$(date +%s%N)
    [ "$rc" = 0 ] || [ "$rc" = 4 ] || { echo "failed ($rc): $*" >&2; cat "$work/err.txt" >&2; exit 1; }
    echo "$(( (t1 - t0) / 1000000 )) $(awk -F': ' '/Maximum resident set size/ {rss=$2} /User time/ {u=$2} /System time/ {s=$2} END {printf "%d %d", rss, (u + s) * 1000}' "$work/time.txt")"
}
col() { awk -v c="$1" '{print $c}' "$2" | median; }

# node_files NODE: sets root, flags, files (what the store size counts) for that node
node_files() {
    case "$1" in
        containerd*) root=var/lib/containerd; flags=(--root "$root"); files="$root/io.containerd.metadata.v1.bolt/meta.db";;
        docker*) root=var/lib/docker; flags=(--root "$root" --live-restore true); files="$root/containers";;
        *) echo "bench-node.sh: unknown node $1 (docker-20.10 or containerd-1.7)" >&2; exit 2;;
    esac
}

[ "${AB:-1}" = 1 ] && for node in $nodes; do
    pristine="$mnt/pristine-$node"
    mkdir -p "$pristine"
    tar -xzf "fixtures/nodes-large/$node-large.tar.gz" -C "$pristine"
    node_files "$node"
    store_bytes=$(du -sb --apparent-size "$pristine/$files" | cut -f1)
    common=(--pods pods.json --to 1.31 "${flags[@]}" --runtime-socket "$work/none.sock" --runtime-pidfile "$work/none.pid")
    # the same hashes our plan writes, for the Go rewriter (containerd), and the files it
    # rewrites, for the floor of the atomic write (Docker)
    (cd "$pristine" && "$bin" plan "${common[@]}" -o json > "$work/plan.json") || [ $? = 4 ]
    python3 -c 'import json, sys
for r in json.load(open(sys.argv[1]))["records"]:
    if r["action"] == "rewrite": print(r["id"])' "$work/plan.json" > "$work/ids.txt"
    if [ "$node" = containerd-1.7 ]; then
        python3 - "$work/plan.json" > "$work/hashes.txt" <<'EOF'
import json, sys
for r in json.load(open(sys.argv[1]))["records"]:
    if r["action"] == "rewrite":
        print(r["id"], r["target_hash"], r.get("target_hash_without_resources") or "")
EOF
    fi
    for v in "${!bins[@]}"; do : > "$work/ours-$v.txt"; : > "$work/apply-$v.txt"; : > "$work/backup-$v.txt"; : > "$work/phases-$v.txt"; done
    : > "$work/ref.txt"; : > "$work/ref-tx.txt"; : > "$work/floor.txt"
    for i in $(seq "$pairs"); do
        run_ours() {
            local v=$1 b=${bins[$1]} plan patch
            rm -rf "$mnt/n" "$mnt/backup"; cp -a "$pristine" "$mnt/n"; settle
            cd "$mnt/n"
            if [ "$node" = docker-20.10 ]; then
                plan=$(timed "$b" plan "${common[@]}" -o json)
            else
                plan="0 0 0"
            fi
            patch=$(timed "$b" patch "${common[@]}" --backup-dir "$mnt/backup" -o json)
            cd "$here"
            read -r pw _ pc <<< "$plan"
            read -r w r c <<< "$patch"
            echo "$(( pw + w )) $r $(( pc + c ))" >> "$work/ours-$v.txt"
            python3 -c "import json; print(round(json.load(open('$work/out.json'))['timings']['backup_and_apply_ms'], 1))" >> "$work/apply-$v.txt"
            # the steps of the rewrite (timings.apply_phases; a build without them gives {})
            python3 -c "import json; print(json.dumps({p['phase']: p['ms'] for p in json.load(open('$work/out.json'))['timings'].get('apply_phases', [])}))" >> "$work/phases-$v.txt"
            du -sb --apparent-size --exclude=report.json "$mnt/backup" | cut -f1 >> "$work/backup-$v.txt"
        }
        run_ref() {
            rm -rf "$mnt/n" "$mnt/copy"; cp -a "$pristine" "$mnt/n"; settle
            if [ "$node" = docker-20.10 ]; then
                timed sh -c "cp -r '$mnt/n/$files' '$mnt/copy' && sync" >> "$work/ref.txt"
                rm -rf "$mnt/n" "$mnt/copy"; cp -a "$pristine" "$mnt/n"; settle
                python3 scripts/replace-floor.py "$mnt/n/$files" "$work/ids.txt" \
                    | python3 -c "import json, sys; print(json.load(sys.stdin)['ms'])" >> "$work/floor.txt"
            else
                timed "$gobin" "$mnt/n/$files" "$work/hashes.txt" >> "$work/ref.txt"
                python3 -c "import json; print(json.load(open('$work/out.json'))['tx_ms'])" >> "$work/ref-tx.txt"
            fi
        }
        if [ $((i % 2)) = 1 ]; then
            for v in "${!bins[@]}"; do run_ours "$v"; done; run_ref
        else
            run_ref; for v in "${!bins[@]}"; do run_ours "$v"; done
        fi
    done
    ref=$(col 1 "$work/ref.txt")
    refcpu=$(col 3 "$work/ref.txt")
    if [ "$node" = docker-20.10 ]; then
        refname="cp -r + sync of containers/ ($(find "$pristine/$files" -type f | wc -l) files)"
        ourname="plan + patch"
    else
        refname="Go bbolt rewrite (NoFreelistSync), whole process"
        ourname="patch"
    fi
    echo "== $node-large: store $store_bytes bytes ($files); medians of $pairs interleaved pairs"
    echo "   reference: $refname: $ref ms (min $(sort -n "$work/ref.txt" | head -1 | cut -d' ' -f1)), CPU $refcpu ms"
    [ "$node" = containerd-1.7 ] && echo "   Go transaction alone: $(median < "$work/ref-tx.txt") ms"
    if [ "$node" = docker-20.10 ]; then
        floor=$(median < "$work/floor.txt")
        echo "   floor of the atomic rewrite alone ($(wc -l < "$work/ids.txt") files: temp files, syncfs, renames, syncfs; scripts/replace-floor.py): $floor ms = $(ratio "$floor" "$ref")× reference"
    fi
    for v in "${!bins[@]}"; do
        ours=$(col 1 "$work/ours-$v.txt")
        rss=$(col 2 "$work/ours-$v.txt")
        cpu=$(col 3 "$work/ours-$v.txt")
        apply=$(median < "$work/apply-$v.txt")
        echo "   ${names[$v]}: $ourname $ours ms (min $(sort -n "$work/ours-$v.txt" | head -1 | cut -d' ' -f1)) = $(ratio "$ours" "$ref")× reference (CPU $cpu ms = $(ratio "$cpu" "$refcpu")×); backup+apply $apply ms$([ "$node" = containerd-1.7 ] && echo " = $(ratio "$apply" "$(median < "$work/ref-tx.txt")")× Go's transaction"); patch peak RSS $((rss / 1024)) MB = $(ratio "$((rss * 1024))" "$store_bytes")× store; backup wrote $(median < "$work/backup-$v.txt") bytes"
        # The steps of the rewrite, medians over the runs. For containerd, edit + page_plan +
        # commit is the work Go's db.Update does (read the values, rewrite them, copy-on-write
        # the pages, write, two fdatasyncs): the like-for-like "transaction alone"; read
        # (taken over from the scan), check, backup and read_back are this tool's safety steps.
        python3 - "$work/phases-$v.txt" "$node" "$(median < "$work/ref-tx.txt" 2>/dev/null || true)" <<'EOF'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
runs = [r for r in runs if r]
if not runs:
    print("   (this build reports no apply_phases)")
    sys.exit()
med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
print("   steps of the rewrite (medians): " + ", ".join(f"{k} {v:.1f}" for k, v in med.items()) + " ms")
if sys.argv[2].startswith("containerd") and sys.argv[3]:
    tx = statistics.median(r["edit"] + r["page_plan"] + r["commit"] for r in runs)
    go = float(sys.argv[3])
    print(f"   transaction alone (edit + page_plan + commit): {tx:.1f} ms = {tx / go:.2f}x Go's transaction ({go} ms)")
EOF
    done
    rm -f "$work/hashes.txt"
    rm -rf "$pristine" "$mnt/n" "$mnt/copy" "$mnt/backup"
done

# ---- scaling: patch alone at each size -------------------------------------------------------
if [ "${SCALE:-1}" = 1 ]; then
    /usr/bin/time -v -o "$work/time.txt" "$bin" --version > /dev/null
    base_kb=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$work/time.txt")
    echo "== scaling: patch at $sizes containers; $scale_runs runs each, medians; baseline RSS ($(basename "$bin") --version) $base_kb KB; load $(cut -d' ' -f1-3 /proc/loadavg)"
    for node in $nodes; do
        node_files "$node"
        common=(--pods pods.json --to 1.31 "${flags[@]}" --runtime-socket "$work/none.sock" --runtime-pidfile "$work/none.pid")
        real="$mnt/real-$node"
        mkdir -p "$real"
        tar -xzf "fixtures/nodes-large/$node-large.tar.gz" -C "$real"
        : > "$work/scale-$node.txt"
        for size in $sizes; do
            n="${size%r}"
            extra=()
            [ "$n" != "$size" ] && extra=(--rebuild)
            pristine="$mnt/scale-$node-$size"
            "$grower" "$real" "$pristine" "$n" "${extra[@]}" > "$work/grow.txt"
            store_bytes=$(du -sb --apparent-size "$pristine/$files" | cut -f1)
            for v in "${!bins[@]}"; do : > "$work/scale-run-$v.txt"; done
            for i in $(seq "$scale_runs"); do
                for v in "${!bins[@]}"; do
                    rm -rf "$mnt/n" "$mnt/backup"; cp -a "$pristine" "$mnt/n"; settle
                    cd "$mnt/n"
                    timed "${bins[$v]}" patch "${common[@]}" --backup-dir "$mnt/backup" -o json >> "$work/scale-run-$v.txt"
                    cd "$here"
                done
            done
            for v in "${!bins[@]}"; do
                echo "$size $n $store_bytes ${names[$v]} $(col 1 "$work/scale-run-$v.txt") $(col 3 "$work/scale-run-$v.txt") $(col 2 "$work/scale-run-$v.txt")" >> "$work/scale-$node.txt"
            done
            rm -rf "$pristine" "$mnt/n" "$mnt/backup"
        done
        rm -rf "$real"
        echo "-- $node-large, patch (wall is noisy under load: read CPU and RSS)"
        for v in "${!bins[@]}"; do
            awk -v name="${names[$v]}" -v base="$base_kb" '
                $4 == name {
                    n = $2; wall = $5; cpu = $6; rss = $7; store = $3
                    printf "   %-5s %-6s %6d ctrs: wall %6d ms, CPU %6d ms, peak RSS %7.1f MB = %.2f× store (%.1f MB, %.1f KB/ctr); %.3f ms CPU/ctr (%.3f wall), %.1f KB RSS/ctr above baseline",
                        name, $1, n, wall, cpu, rss / 1024, rss * 1024 / store, store / 1e6, store / n / 1024, cpu / n, wall / n, (rss - base) / n
                    if (seen && n != pn) printf "; marginal from %d: %.3f ms CPU/ctr, %.1f KB RSS/ctr", pn, (cpu - pc) / (n - pn), (rss - pr) / (n - pn)
                    printf "\n"
                    seen = 1; pn = n; pc = cpu; pr = rss
                }' "$work/scale-$node.txt"
        done
    done
fi
echo "load at the end $(cut -d' ' -f1-3 /proc/loadavg)"
