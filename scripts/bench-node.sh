#!/usr/bin/env bash
# Whole-node benchmark: plan + patch (with backups) on the two real 2,000-container nodes of
# fixtures/nodes-large, from a fresh copy each run, with the release binary. Prints the tool's
# own timings (from its JSON report) and the wall time of each command; medians over N runs.
#   scripts/bench-node.sh [N]      (default 5)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
n="${1:-5}"
cargo build --release -q -p kubelet-rehash
bin="$PWD/target/release/kubelet-rehash"
work="$(mktemp -d /tmp/kubelet-rehash-bench.XXXXXX)"
trap 'rm -rf "$work"' EXIT

median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.1f\n", (a[NR/2]+a[NR/2+1])/2}'; }

for node in containerd-1.7 docker-20.10; do
    mkdir -p "$work/pristine-$node"
    tar -xzf "fixtures/nodes-large/$node-large.tar.gz" -C "$work/pristine-$node"
    case "$node" in
        containerd*) flags=(--root var/lib/containerd);;
        docker*) flags=(--root var/lib/docker --live-restore true);;
    esac
    : > "$work/plan.ms"; : > "$work/patch.ms"; : > "$work/apply.ms"
    for i in $(seq "$n"); do
        rm -rf "$work/n" "$work/backup"
        cp -a "$work/pristine-$node" "$work/n"
        sync
        cd "$work/n"
        common=(--pods pods.json --to 1.31 "${flags[@]}" --runtime-socket "$work/none.sock" --runtime-pidfile "$work/none.pid")
        t0=$(date +%s%N)
        "$bin" plan "${common[@]}" -o json > "$work/plan.json" || [ $? = 4 ]
        t1=$(date +%s%N)
        "$bin" patch "${common[@]}" --backup-dir "$work/backup" -o json > "$work/patch.json" 2>/dev/null || [ $? = 4 ]
        t2=$(date +%s%N)
        cd - >/dev/null
        echo $(( (t1 - t0) / 1000000 )) >> "$work/plan.ms"
        echo $(( (t2 - t1) / 1000000 )) >> "$work/patch.ms"
        python3 -c "import json,sys; print(round(json.load(open('$work/patch.json'))['timings']['backup_and_apply_ms'],1))" >> "$work/apply.ms"
    done
    rewrites=$(python3 -c "import json; print(json.load(open('$work/patch.json'))['summary']['actions'].get('rewrite', 0))")
    echo "$node-large (2,000 containers, $rewrites rewrites, median of $n): plan $(median < "$work/plan.ms") ms, patch $(median < "$work/patch.ms") ms (backup+apply $(median < "$work/apply.ms") ms)  [load $(cut -d' ' -f1-3 /proc/loadavg)]"
done
