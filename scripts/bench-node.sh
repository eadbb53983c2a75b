#!/usr/bin/env bash
# Whole-node benchmark on the two real 2,000-container nodes of fixtures/nodes-large, side by
# side with what the same work costs without this tool (issue 16). Not part of scripts/test.sh
# (CI): it needs root, a loop device, and minutes of a quiet machine.
#
#   sudo scripts/bench-node.sh [PAIRS]        (default 5; at least 5 for figures worth quoting)
#   BIN_BEFORE=/path/to/older/kubelet-rehash sudo scripts/bench-node.sh    (also time that one)
#   NODES=containerd-1.7 sudo scripts/bench-node.sh    (one node only: docker-20.10, containerd-1.7)
#
# Everything timed runs on a journaled ext4 file system the script makes in a file and
# loop-mounts (the root file system of a build VM is often ext4 without a journal, where
# creating files shortly after mass deletes stalls in the kernel and `cp` timings scatter over
# 30×). Setup is untimed: a fresh copy of the node for every run, then `sync` and a short
# settle. Each pair runs the tool and its reference back to back, alternating which goes first,
# and the medians are over the pairs:
#
# * Docker: `plan` + `patch` against (a) `cp -r` + `sync` of the node's `containers/` tree
#   (every file the patch could touch, copied once).
# * containerd: the whole `patch` (scan, plan, backup, apply, verify) against (b) Go bbolt
#   (tools/bbolt-rewrite, built offline by scripts/setup-bbolt-tool.sh rewrite) rewriting the same
#   hashes in the same meta.db in one transaction, opened with NoFreelistSync as containerd
#   >= 1.7 opens it; also our backup + apply alone against Go's transaction alone.
# * Peak RSS (`/usr/bin/time -v`) of `patch` against the size of the store's files, and the
#   bytes the backup wrote.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
here="$PWD"
pairs="${1:-5}"
[ "$(id -u)" = 0 ] || { echo "bench-node.sh: needs root (mkfs + loop mount)" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "bench-node.sh: needs /usr/bin/time (Debian package time)" >&2; exit 2; }

cargo build --release -q -p kubelet-rehash
bin="${CARGO_TARGET_DIR:-$here/target}/release/kubelet-rehash"
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
truncate -s 2G "$work/fs.img"
mkfs.ext4 -q -F -O has_journal "$work/fs.img"
mkdir -p "$mnt"
mount -o loop "$work/fs.img" "$mnt"
dumpe2fs -h "$work/fs.img" 2>/dev/null | grep -q 'features:.*has_journal' || { echo "bench-node.sh: the file system has no journal" >&2; exit 1; }
echo "journaled ext4 on $(findmnt -n -o SOURCE "$mnt"); $pairs pairs; load $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"

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

for node in ${NODES:-docker-20.10 containerd-1.7}; do
    pristine="$mnt/pristine-$node"
    mkdir -p "$pristine"
    tar -xzf "fixtures/nodes-large/$node-large.tar.gz" -C "$pristine"
    case "$node" in
        containerd*) root=var/lib/containerd; flags=(--root "$root"); files="$root/io.containerd.metadata.v1.bolt/meta.db";;
        docker*) root=var/lib/docker; flags=(--root "$root" --live-restore true); files="$root/containers";;
    esac
    store_bytes=$(du -sb --apparent-size "$pristine/$files" | cut -f1)
    common=(--pods pods.json --to 1.31 "${flags[@]}" --runtime-socket "$work/none.sock" --runtime-pidfile "$work/none.pid")
    if [ "$node" = containerd-1.7 ]; then
        # the same hashes our plan writes, for the Go rewriter
        (cd "$pristine" && "$bin" plan "${common[@]}" -o json > "$work/plan.json") || [ $? = 4 ]
        python3 - "$work/plan.json" > "$work/hashes.txt" <<'EOF'
import json, sys
for r in json.load(open(sys.argv[1]))["records"]:
    if r["action"] == "rewrite":
        print(r["id"], r["target_hash"], r.get("target_hash_without_resources") or "")
EOF
    fi
    for v in "${!bins[@]}"; do : > "$work/ours-$v.txt"; : > "$work/apply-$v.txt"; : > "$work/backup-$v.txt"; done
    : > "$work/ref.txt"; : > "$work/ref-tx.txt"
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
            du -sb --apparent-size --exclude=report.json "$mnt/backup" | cut -f1 >> "$work/backup-$v.txt"
        }
        run_ref() {
            rm -rf "$mnt/n" "$mnt/copy"; cp -a "$pristine" "$mnt/n"; settle
            if [ "$node" = docker-20.10 ]; then
                timed sh -c "cp -r '$mnt/n/$files' '$mnt/copy' && sync" >> "$work/ref.txt"
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
    for v in "${!bins[@]}"; do
        ours=$(col 1 "$work/ours-$v.txt")
        rss=$(col 2 "$work/ours-$v.txt")
        cpu=$(col 3 "$work/ours-$v.txt")
        apply=$(median < "$work/apply-$v.txt")
        echo "   ${names[$v]}: $ourname $ours ms (min $(sort -n "$work/ours-$v.txt" | head -1 | cut -d' ' -f1)) = $(ratio "$ours" "$ref")× reference (CPU $cpu ms = $(ratio "$cpu" "$refcpu")×); backup+apply $apply ms$([ "$node" = containerd-1.7 ] && echo " = $(ratio "$apply" "$(median < "$work/ref-tx.txt")")× Go's transaction"); patch peak RSS $((rss / 1024)) MB = $(ratio "$((rss * 1024))" "$store_bytes")× store; backup wrote $(median < "$work/backup-$v.txt") bytes"
    done
    rm -f "$work/hashes.txt"
    rm -rf "$pristine" "$mnt/n" "$mnt/copy" "$mnt/backup"
done
echo "load at the end $(cut -d' ' -f1-3 /proc/loadavg)"
