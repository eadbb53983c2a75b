#!/usr/bin/env bash
# Fuzz smoke run: builds the cargo-fuzz targets of fuzz/ and runs each for FUZZ_TIME seconds
# (default 20). Exits non-zero when any target finds a crash (the input is left in
# fuzz/artifacts/<target>/). Idempotent: installs cargo-fuzz when missing.
#
# Corpora: fuzz/corpus/<target>/ is committed (minimized with `cargo fuzz cmin`), so every run
# starts where the earlier ones left off; libFuzzer adds the new inputs it finds there. Seeds
# made from fixtures/ every time go to a temp dir (read only), as does fuzz/seeds/<target>/.
# fuzz/EXECUTIONS.md records the executions each target has had in all (FUZZ_RECORD=1 adds
# this run's to it); FUZZ_CMIN=1 minimizes each corpus in place after the run.
#
# The machine has only stable Rust: cargo-fuzz's nightly flags (-Zsanitizer=address, sancov)
# are enabled with RUSTC_BOOTSTRAP=1. Environment:
#   FUZZ_TIME=20            seconds per target
#   FUZZ_TARGETS="a b"      subset of targets (default: all)
#   FUZZ_SANITIZER=address  or none (faster, no ASan)
#   FUZZ_JOBS=1             targets run at the same time (the machine has 2 shared cores)
#   FUZZ_RECORD=0           1: add this run's executions to fuzz/EXECUTIONS.md
#   FUZZ_CMIN=0             1: `cargo fuzz cmin` each corpus after the run
#   FUZZ_GOAL=0             1: instead of FUZZ_TIME, run each target the executions it still
#                           lacks to its goal in fuzz/EXECUTIONS.md (10 M for the parser
#                           targets, 1 M for the two bolt targets: issue 35); implies FUZZ_RECORD=1
#   FUZZ_UNIT_TIMEOUT=10    libFuzzer's -timeout (seconds one input may take); a long goal run
#                           beside other work wants 60: starved, a 1.5 s input can take over 10 s
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD

TIME=${FUZZ_TIME:-20}
GOAL=${FUZZ_GOAL:-0}
[ "$GOAL" = 1 ] && FUZZ_RECORD=1
SAN=${FUZZ_SANITIZER:-address}
JOBS=${FUZZ_JOBS:-1}
ALL=(quantity_parse spec_hash_all_versions cri_extension_edit docker_config_edit bolt_open_scan bolt_edit_model)
read -r -a TARGETS <<<"${FUZZ_TARGETS:-${ALL[*]}}"

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz-smoke: installing cargo-fuzz" >&2
    cargo install --locked cargo-fuzz
fi
export RUSTC_BOOTSTRAP=1

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
SEEDS=$TMP/seeds

# ---- seed corpora from fixtures/ (into $SEEDS, not the committed corpus) --------------------
put() { # put <target> <file-with-content>: copy under its content hash
    local dir=$SEEDS/$1 h
    mkdir -p "$dir"
    h=$(sha1sum "$2" | cut -c1-16)
    [ -e "$dir/seed-$h" ] || cp "$2" "$dir/seed-$h"
}
put_text() { # put_text <target> <text>
    local tmp
    tmp=$(mktemp)
    printf '%s' "$2" >"$tmp"
    put "$1" "$tmp"
    rm -f "$tmp"
}
seed() {
    local specs=fixtures/golden/specs.jsonl f line q
    # spec_hash_all_versions: the container object of every golden spec
    while IFS= read -r line; do
        put_text spec_hash_all_versions "$(sed -e 's/^.*"container"://' -e 's/}[[:space:]]*$//' <<<"$line")"
    done <"$specs"
    # quantity_parse: every quantity string and number of the golden specs, plus edge cases
    while IFS= read -r q; do
        put_text quantity_parse "$q"
    done < <(grep -ohE '"(cpu|memory|ephemeral-storage|storage|divisor|sizeLimit|hugepages-[0-9A-Za-z]+)":("[^"]*"|[-+0-9.eE]+)' "$specs" |
        sed -E 's/^"[^"]*"://; s/^"(.*)"$/\1/' | sort -u)
    for q in 0 -0 +1 01 1E3 100e-3 1000E 0.5e-2147483648 1000e2147483647 1Ki .Ki .Ei 1.5Gi 9223372036854775807 \
        '"100m"' null '" 1 "'; do
        put_text quantity_parse "$q"
    done
    # docker_config_edit: every real config.v2.json
    while IFS= read -r f; do put docker_config_edit "$f"; done < <(find fixtures -name config.v2.json)
    # bolt_open_scan: the small real meta.db files (256 KiB, containerd 1.6.20; synced and
    # unsynced freelist)
    for f in fixtures/stores/containerd-1.6.20/meta.db.*; do put bolt_open_scan "$f"; done
    # bolt_edit_model: edit scripts (first byte: the base file and build; then transactions and
    # edits, decoded modulo); the base files are compiled into the target
    for script in 'Dq7#kz!0Lm' 'Ax9(Pq2&wR+t' 'Fb3$nE8*Zc1%Yv' 'w0o0o0o0o0o0' 'G~~~~~~~~~~~~~~~~'; do
        put_text bolt_edit_model "$script"
    done
    # cri_extension_edit: fuzz/seeds/cri_extension_edit (committed; real values from the
    # fixtures' meta.db files) is passed as a further corpus directory
    mkdir -p "$SEEDS/cri_extension_edit"
}
seed
for t in "${TARGETS[@]}"; do mkdir -p fuzz/corpus/"$t" "$SEEDS/$t"; done

# ---- build and run --------------------------------------------------------------------------
cd fuzz
FLAGS=(-O -a -s "$SAN")
cargo fuzz build "${FLAGS[@]}"

export TMPDIR=$TMP  # bolt_open_scan writes its private store root here

goal_of() { # goal_of <target>: the cumulative executions issue 35 asks of it
    case $1 in bolt_*) echo 1000000 ;; *) echo 10000000 ;; esac
}
recorded() { # recorded <target>: its cumulative executions in EXECUTIONS.md
    awk -F'|' -v t="$1" '$2 == " " t " " { gsub(/ /, "", $3); print $3 }' EXECUTIONS.md
}

run() { # run <target>: libFuzzer's output goes to $TMP/<target>.log
    local t=$1 dirs=(corpus/"$1" "$SEEDS/$1") limit=(-max_total_time="$TIME") lacking
    [ -d seeds/"$t" ] && dirs+=(seeds/"$t")
    if [ "$GOAL" = 1 ]; then
        lacking=$(($(goal_of "$t") - $(recorded "$t")))
        if [ "$lacking" -le 0 ]; then
            echo "fuzz-smoke: $t: at its goal already" >"$TMP/$t.log"
            return 0
        fi
        limit=(-runs="$lacking")
    fi
    local start=$SECONDS
    cargo fuzz run "${FLAGS[@]}" "$t" "${dirs[@]}" -- \
        "${limit[@]}" -timeout="${FUZZ_UNIT_TIMEOUT:-10}" -rss_limit_mb=2048 -print_final_stats=1 \
        >"$TMP/$t.log" 2>&1
    local rc=$?
    echo $((SECONDS - start)) >"$TMP/$t.seconds"
    return "$rc"
}

record() { # record <target> <execs> <seconds>: adds to the target's row of fuzz/EXECUTIONS.md
    local f=EXECUTIONS.md
    awk -v t="$1" -v n="$2" -v san="$SAN" -v d="$(date -u +%F)" -v s="$3" '
        BEGIN { FS = OFS = "|" }
        $2 == " " t " " { $3 = " " ($3 + n) " "; $4 = " " ($4 + 1) " "; $5 = " " d " (" s " s, " san ") " }
        { print }' "$f" >"$f.new" && mv "$f.new" "$f"
}

# Each target is reported (and recorded) as soon as it ends, not after the last one: a long
# run stopped half-way keeps the executions of every target it finished.
finished() { # finished <target>
    local t=$1 execs cov secs
    execs=$(grep -E '^stat::number_of_executed_units' "$TMP/$t.log" | awk '{print $2}')
    cov=$(grep -E '^#[0-9]+.*(DONE|cov:)' "$TMP/$t.log" | tail -1 | grep -oE 'cov: [0-9]+ ft: [0-9]+' || true)
    echo "fuzz-smoke: $t: ${execs:-?} execs, ${cov:-no stats}"
    secs=$(cat "$TMP/$t.seconds" 2>/dev/null || echo "$TIME")
    if [ "${FUZZ_RECORD:-0}" = 1 ] && [ -n "${execs:-}" ]; then record "$t" "$execs" "$secs"; fi
}

failed=()
pids=()
names=()
reap_first() { # waits for the oldest running target
    if ! wait "${pids[0]}"; then failed+=("${names[0]}"); fi
    finished "${names[0]}"
    pids=("${pids[@]:1}")
    names=("${names[@]:1}")
}
for t in "${TARGETS[@]}"; do
    run "$t" &
    pids+=($!)
    names+=("$t")
    if [ "${#pids[@]}" -ge "$JOBS" ]; then reap_first; fi
done
while [ "${#pids[@]}" -gt 0 ]; do reap_first; done

# Minimizing keeps every input that adds an edge (-use_counters=0: hit counts do not count,
# which keeps a corpus a quarter the size); bolt_open_scan then keeps its smallest inputs up to
# 512 KiB: its inputs are bolt files of tens to hundreds of KiB, and the 256 KiB real files
# come back as seeds every run (small valid ones are in fuzz/seeds/bolt_open_scan).
if [ "${FUZZ_CMIN:-0}" = 1 ]; then
    for t in "${TARGETS[@]}"; do
        cargo fuzz cmin "${FLAGS[@]}" "$t" corpus/"$t" -- -use_counters=0 >"$TMP/$t.cmin.log" 2>&1 ||
            { echo "fuzz-smoke: cmin $t failed" >&2; tail -n 20 "$TMP/$t.cmin.log" >&2; exit 1; }
        if [ "$t" = bolt_open_scan ]; then
            total=0
            while IFS= read -r f; do
                s=$(stat -c %s corpus/"$t"/"$f")
                if [ $((total + s)) -le 524288 ]; then total=$((total + s)); else rm -f corpus/"$t"/"$f"; fi
            done < <(ls -Sr corpus/"$t")
        fi
        echo "fuzz-smoke: $t: corpus $(find corpus/"$t" -type f | wc -l) files, $(du -sb corpus/"$t" | cut -f1) bytes after cmin"
    done
fi
if [ "${#failed[@]}" -gt 0 ]; then
    for t in "${failed[@]}"; do
        echo "fuzz-smoke: $t FAILED; last lines of its log:" >&2
        tail -n 40 "$TMP/$t.log" >&2
    done
    echo "fuzz-smoke: crash inputs are in fuzz/artifacts/<target>/" >&2
    exit 1
fi
if [ "$GOAL" = 1 ]; then
    echo "fuzz-smoke: all ${#TARGETS[@]} targets ran to their goal without a crash"
else
    echo "fuzz-smoke: all ${#TARGETS[@]} targets ran ${TIME}s without a crash"
fi
