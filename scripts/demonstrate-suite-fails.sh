#!/usr/bin/env bash
# Shows that the real-node suite (cli/tests/real_kubelet.rs) can fail (issue 55): it runs the
# suite, as built from this tree, against deliberately broken builds of kubelet-rehash, and
# passes only when every one of them fails the suite on every pair given.
#
#   scripts/demonstrate-suite-fails.sh [--build-only] [PAIRS]     default: 1.30-1.31 (LAB_PAIRS syntax)
#
# (--build-only: the broken builds and the suite, no lab: to build while another lab runs)
#
# The broken builds (scripts/sabotage/*.patch, applied to a copy of this tree):
#   unproven      the plan proves no stored hash: every container is `unproven`, nothing is
#                 rewritten, and the plan says they restart
#   skip-rewrite  the plan is right, but the rewrite writes nothing
# Give pairs where some hash changes (the golden set says which: 1.30 -> 1.31 and 1.15 -> 1.16
# change every one; 1.23 -> 1.24 and 1.31 -> 1.37 none, and there a tool that does nothing is
# indistinguishable from one that works, which the suite's row says).
#
# Each run is the suite on one lab (the windows longer than the grace period left out:
# LAB_HOLD_CASES=0), a few minutes a pair. Builds go to $KUBELET_REHASH_CACHE/sabotage
# (default /var/cache/kubelet-rehash/sabotage), keyed by the patch and the tree's sources.
# Needs root, as the suite does; never run it beside another lab (CI's real-node lane).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
build_only=0
[ "${1:-}" != --build-only ] || { build_only=1; shift; }
pairs="${1:-1.30-1.31}"
cache="${KUBELET_REHASH_CACHE:-/var/cache/kubelet-rehash}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$cache/cargo-target}"
test_name=the_real_kubelet_adopts_every_container_kubelet_rehash_rewrote
log() { echo "demonstrate-suite-fails: $*" >&2; }

# the suite itself, from this tree
suite=$(cargo test --release -p kubelet-rehash --test real_kubelet --no-run --message-format=json 2>/dev/null |
    sed -n 's/.*"executable":"\([^"]*real_kubelet[^"]*\)".*/\1/p' | tail -1)
[ -x "$suite" ] || { log "the suite did not build"; exit 1; }

failed=0
for patch in scripts/sabotage/*.patch; do
    name=$(basename "$patch" .patch)
    # the sources the binary is built from (not the tests, docs or scripts), and the patch
    key=$( (git ls-files -s -- Cargo.lock Cargo.toml '*/Cargo.toml' '*/src/*' ':!cli/tests' ':!fuzz' ':!testtools'; cat "$patch") | sha256sum | cut -c1-16)
    src="$cache/sabotage/$name-$key"
    if [ ! -x "$src/bin/kubelet-rehash" ]; then
        log "$name: building a broken kubelet-rehash ($patch)"
        rm -rf "$src" && mkdir -p "$src/tree"
        # (one tar: xargs may split the list over several, whose streams the reader cuts at
        # the first's end)
        git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$src/tree"
        git -C "$src/tree" init -q && git -C "$src/tree" apply "$here/$patch"
        (cd "$src/tree" && CARGO_TARGET_DIR="$cache/sabotage/target" cargo build --release -q -p kubelet-rehash)
        mkdir -p "$src/bin" && cp "$cache/sabotage/target/release/kubelet-rehash" "$src/bin/"
        rm -rf "$src/tree"
    fi
    [ "$build_only" = 0 ] || { log "$name: built ($src/bin/kubelet-rehash)"; continue; }
    IFS=, read -ra each <<<"$pairs"
    for pair in "${each[@]}"; do
        out="$cache/sabotage/$name-$(echo "$pair" | tr ':' '_').log"
        log "$name: the suite on $pair (log $out)"
        if KUBELET_REHASH_BIN="$src/bin/kubelet-rehash" LAB_PAIRS="$pair" LAB_HOLD_CASES=0 \
            "$suite" --exact "$test_name" --nocapture >"$out" 2>&1; then
            log "$name: the suite PASSED on $pair with a broken build: it cannot tell"
            failed=1
        else
            log "$name: the suite failed on $pair, as it must: $(grep -m1 -A1 "panicked at" "$out" | tail -1 | cut -c1-300)"
        fi
    done
done
exit "$failed"
