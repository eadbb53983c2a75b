#!/usr/bin/env bash
# Every test of kubelet-rehash, as CI runs it: installs what the integration tests need
# (Debian's docker.io and containerd, containerd 1.7/2.x unpacked from Debian's own newer
# suites, the runtimes built from the Go module proxy, CRI-O and cri-dockerd from third_party/),
# Go bbolt's checker, then the whole workspace test suite in release mode (the golden set, the
# real-node workflow, the real-daemon tests and the real kubelets of scripts/k8s-lab.sh), the
# check that the production binary has no crash path, the Go baselines that regenerate here,
# the release artifacts, the fuzz smoke run, and the lint gates. Nothing is skipped or sampled.
# Needs root (apt-get, private daemons); every daemon it starts is its own, on private paths,
# and stopped by pid.
#
# How the run is arranged (issue 49: a cold run on 2 cores must fit CI's limit): the work that
# waits and the work that computes run side by side, and what is built once is kept outside
# the clone, keyed by version ($KUBELET_REHASH_CACHE, default /var/cache/kubelet-rehash):
#
#   lane "k8s"    (nice 10)  the Kubernetes builds of the real-node suite, from the first second
#   foreground               runtime setup -> README commands -> test build -> every test but the
#                            real-node suite -> (after "k8s") the real-node suite
#   lane "checks" (nice 10)  once the tests that compute are done: the release artifacts, the
#                            fuzz smoke run, fmt, clippy, docs; (after "k8s") the Go baselines
#
# The real-node suite mostly waits (kubelet starts, windows held past the grace period), so the
# niced lanes take the CPU it leaves; it keeps priority because its timings matter. Each lane
# logs to $LOGS/<lane>.log (printed when it ends); the run fails when any lane fails. At its end
# the run prints a table of every stage: its lane, when it started and how long it took.
#
# CARGO_TARGET_DIR defaults to $KUBELET_REHASH_CACHE/cargo-target (a fresh clone then compiles
# only the workspace's own crates), the fuzz build to .../cargo-target-fuzz, and the clone's
# .cache/ (CRI-O, cri-dockerd, Go 1.24, ... built from third_party/, each with its STAMP) is a
# link to .../checkout-cache when the clone has none of its own.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
here=$PWD

cache="${KUBELET_REHASH_CACHE:-/var/cache/kubelet-rehash}"
mkdir -p "$cache"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$cache/cargo-target}"
if [ ! -e .cache ] && [ ! -L .cache ]; then
    mkdir -p "$cache/checkout-cache"
    ln -s "$cache/checkout-cache" .cache
fi

LOGS="${TEST_LOGS:-$(mktemp -d /tmp/kubelet-rehash-test.XXXXXX)}"
mkdir -p "$LOGS"
timings="$LOGS/timings.tsv"
: > "$timings"
run_t0=$(date +%s)
echo "test.sh: logs in $LOGS; CARGO_TARGET_DIR=$CARGO_TARGET_DIR"

# stage LANE NAME CMD...: runs CMD, records (lane, name, start offset, seconds, status).
stage() {
    local lane="$1" name="$2" t0 rc=0
    shift 2
    t0=$(date +%s)
    echo "test.sh: [$lane] $name: start (+$((t0 - run_t0)) s)"
    # In the background, so `set -e` holds inside CMD (a shell function here): bash ignores it
    # in anything whose status is tested, as `CMD || rc=$?` would be.
    "$@" &
    wait "$!" || rc=$?
    printf '%s\t%s\t%s\t%s\t%s\n' "$lane" "$name" "$((t0 - run_t0))" "$(($(date +%s) - t0))" \
        "$([ "$rc" = 0 ] && echo ok || echo "FAILED ($rc)")" >> "$timings"
    echo "test.sh: [$lane] $name: $([ "$rc" = 0 ] && echo done || echo "FAILED ($rc)") in $(($(date +%s) - t0)) s"
    return "$rc"
}

print_timings() {
    local total=$(($(date +%s) - run_t0))
    echo
    echo "test.sh: where the time went (wall clock; lanes overlap, so the stages add up to more than the run)"
    printf '%-8s  %-52s  %8s  %8s  %s\n' lane stage "start s" "took s" status
    sort -t$'\t' -k3,3n "$timings" | while IFS=$'\t' read -r lane name start took status; do
        printf '%-8s  %-52s  %8s  %8s  %s\n' "$lane" "$name" "$start" "$took" "$status"
    done
    printf '%-8s  %-52s  %8s  %8s\n' all "the whole run" 0 "$total"
}

lane_pids=()
# lane NAME FUNCTION: runs FUNCTION in the background with its output in $LOGS/NAME.log and
# its exit status in $LOGS/NAME.rc.
lane() {
    local name="$1" fn="$2" nice_level="$3"
    (
        renice -n "$nice_level" -p "$BASHPID" >/dev/null
        rc=0
        "$fn" > "$LOGS/$name.log" 2>&1 &
        wait "$!" || rc=$?
        echo "$rc" > "$LOGS/$name.rc"
        exit "$rc"
    ) &
    lane_pids+=("$!")
    echo "test.sh: lane $name started (nice $nice_level, log $LOGS/$name.log)"
}

# wait_lane NAME: waits for the lane, prints its log, fails the run when the lane failed.
wait_lane() {
    local name="$1" rc
    while [ ! -e "$LOGS/$name.rc" ]; do sleep 2; done
    rc=$(cat "$LOGS/$name.rc")
    echo "test.sh: ---- lane $name (exit $rc): $LOGS/$name.log ----"
    cat "$LOGS/$name.log"
    echo "test.sh: ---- end of lane $name ----"
    [ "$rc" = 0 ] || { echo "test.sh: lane $name failed (exit $rc)" >&2; return 1; }
}

# kill_tree PID: SIGTERM to PID, then to every descendant (each parent before its children,
# whose list is taken first, so that no parent starts a next step). A lane's builds are
# grandchildren and further (lane -> stage -> k8s-lab.sh -> go build): signalling the lane's
# children alone left a Kubernetes build running after a failed run, and the next run waited
# for its lock.
kill_tree() {
    local c kids
    kids=$(pgrep -P "$1" 2>/dev/null || true)
    kill -TERM "$1" 2>/dev/null || true
    for c in $kids; do kill_tree "$c"; done
}

finish() {
    local rc=$?
    for p in "${lane_pids[@]}"; do
        if kill -0 "$p" 2>/dev/null; then
            echo "test.sh: stopping lane pid $p (the run is ending with exit $rc)" >&2
            kill_tree "$p"
        fi
    done
    print_timings
    # The plain closing line of every test the cargo runs executed, in every lane.
    cat "$LOGS"/*.log 2>/dev/null | awk '/^test result: /{p += $4; f += $6} END {printf "test.sh: cargo tests: %d passed, %d failed\n", p, f}'
    exit "$rc"
}
trap finish EXIT

# ---- lane "k8s": the real node's builds -------------------------------------------------------
# Kubelets and control planes built from Kubernetes' own Go modules by scripts/k8s-lab.sh,
# cached by version in $cache/k8s/<version>/ (a cold build is about 4-6 min a version here).
# The pairs CI runs: 1.30 -> 1.31 (every container's hash changes; on containerd with the
# InPlacePodVerticalScaling gate and a pod resized in place, judged by its hashWithoutResources)
# on containerd and on CRI-O
# 1.30.14 (scripts/setup-crio.sh), 1.23 -> 1.24 on Docker with the dockershim -> cri-dockerd
# switch (dockerd 26.1.5 and cri-dockerd 0.4.1 from scripts/setup-cri-dockerd.sh), 1.15 -> 1.16
# on Docker 20.10 (Debian 12's; every hash changes: the oldest pair the lab builds, with the Go
# 1.13 of its era and its API server's OpenAPI definitions generated: about 10 min cold), and
# 1.36 -> 1.37, today's release (the newest pair kubelet-rehash supports), with the node-Ready
# hold's fail-safes.
# In the order the suite's pairs run: the suite starts as soon as the other tests end and its
# `k8s-lab.sh up` waits for a version this lane is building (or builds one it has not reached),
# so the later pairs' builds overlap the earlier pairs' waiting.
k8s_lane() {
    stage k8s "kubelet 1.30, all five of 1.31" build_pair 1.30 1.31
    stage k8s "kubelet 1.23, all five of 1.24" build_pair 1.23 1.24
    stage k8s "kubelet 1.15, all five of 1.16" build_pair 1.15 1.16
    stage k8s "kubelet 1.36, all five of 1.37" build_pair 1.36 1.37
}
build_pair() { # FROM TO: the old kubelet, and the new version's kubelet and control plane
    scripts/k8s-lab.sh build --kubelet-only "$1"
    scripts/k8s-lab.sh build "$2"
}
# (every check runs even when one before it failed; the lane fails if any did)

# ---- lane "checks": what computes while the real-node suite waits ----------------------------
checks_lane() {
    # The release artifacts: both static musl binaries (arm64 under qemu user emulation)
    # reproduce the golden hashes and the reviewed plan output of every bundled node, and the
    # FROM scratch image under a private dockerd plans mounted node copies as the host binary does.
    local failed=0
    stage checks "release artifacts (scripts/test-release.sh)" scripts/test-release.sh || failed=1
    stage checks "fuzz smoke run" env CARGO_TARGET_DIR="$cache/cargo-target-fuzz" scripts/fuzz-smoke.sh || failed=1
    stage checks "cargo fmt --check" cargo fmt --all -- --check || failed=1
    # (the release-artifacts feature adds the image test target, which test-release.sh runs)
    stage checks "cargo clippy -D warnings" cargo clippy --workspace --all-targets --features kubelet-rehash/release-artifacts -- -D warnings || failed=1
    # every library crate documents every public item (#![deny(missing_docs)]) with links that resolve
    stage checks "cargo doc -D warnings" env RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --lib --exclude kubelet-rehash || failed=1

    # The baselines that real Go code can regenerate here are regenerated and compared byte
    # for byte (tools/README.md): the resource.Quantity differential and kubelet 1.20's golden
    # hashes, from Debian's Kubernetes 1.20.2 source, and the kubelet checkpoint verdicts ...
    stage checks "Go tests and baselines (vbom-util, quantity, 1.20 hashes, checkpoints)" go_baselines || failed=1
    # ... and, from the Go module proxy, the newest supported version's schema (with the one
    # before it, proving the generator still reproduces a committed file) and its golden hashes
    # from the real HashContainer: the kubelet build of lane k8s leaves its packages compiled,
    # so these wait for it. Every version the proxy serves: tools/container-schema/run.sh and
    # tools/kubelet-hash/run.sh with the versions (tools/README.md), too long for every CI run.
    while [ ! -e "$LOGS/k8s.rc" ]; do sleep 5; done
    stage checks "schema + golden hashes of 1.37 from the module" module_baselines || failed=1
    return "$failed"
}
go_baselines() {
    # our stand-in for vbom.ml/util, which the lab's 1.15-1.19 builds use (issue 50)
    (cd third_party/vbom-util && go test ./...)
    tools/quantity-diff/run.sh
    tools/kubelet-1.20-hash/run.sh
    tools/kubelet-checkpoints/run.sh
}
module_baselines() {
    tools/container-schema/run.sh --check 1.36 1.37
    tools/kubelet-hash/run.sh --check 1.37
    # Every checkpoint file written by each kubelet 1.30-1.38 and read by each of them, with
    # their real state code (nine small builds of k8s.io/kubernetes packages, about a minute
    # warm): fixtures/checkpoints-module, which kubeletstate's module_matrix test holds to.
    tools/kubelet-checkpoints/module/run.sh --check
}

lane k8s k8s_lane 10

# ---- foreground --------------------------------------------------------------------------------
setup_runtimes() {
    scripts/setup-docker.sh
    scripts/setup-containerd.sh
    # containerd 2.2.9, 2.3.7 (the first LTS) and 2.4.2, which Debian does not package: built
    # from the Go module proxy into $cache/containerd/<version> (about 1 min each)
    scripts/setup-containerd-module.sh
    # Docker 28.5.2 and Docker 29's engine (github.com/moby/moby/v2 v2.0.0-beta.24), and CRI-O
    # 1.36.3, built from the Go module proxy the same way (storepatch/tests/docker_live.rs,
    # cli/tests/crio_live.rs; cold 2-5 min each, cached by version)
    scripts/setup-docker-module.sh
    scripts/setup-runc-module.sh
    scripts/setup-crio-module.sh
}
stage main "runtimes from Debian and the Go module proxy" setup_runtimes
# CRI-O 1.30.14 built from third_party/ into .cache/crio (cli/tests/crio_live.rs)
stage main "CRI-O 1.30.14 from third_party/" scripts/setup-crio.sh
# cri-dockerd 0.4.1 built from third_party/ into .cache/cri-dockerd, and Debian's CNI bridge +
# host-local plugins unpacked into .cache/cni (cli/tests/cri_dockerd_live.rs)
stage main "cri-dockerd 0.4.1 from third_party/" scripts/setup-cri-dockerd.sh
# Go bbolt's own check, run by the tests on every meta.db they write (.cache/bin/bbolt-check);
# Debian's ansible-core unpacked into .cache/ansible (cli/tests/ansible_live.rs drives deploy/ansible/)
stage main "bbolt check, ansible" bash -c 'scripts/setup-bbolt-check.sh && scripts/setup-ansible.sh'

# The README's two commands as a newcomer types them (read from the README: they cannot drift):
# the demo plan runs verbatim and prints the plan; .ci/run runs exactly the second.
stage main "README commands (the demo plan)" scripts/readme-commands.sh

# The production binary has no crash path: storepatch's `crash-points` feature is on only in
# test builds, through dev-dependencies (storesafe/src/fault.rs). The demo's `cargo run
# --release` just built the production binary (the default member, as `cargo build --release
# -p kubelet-rehash` does); the test build below replaces it with the crash points' build at
# the same path, and finding the variable's name there proves the grep would see it.
bin="$CARGO_TARGET_DIR/release/kubelet-rehash"
production_check() {
    [ -x "$bin" ] || { echo "test.sh: the demo built no $bin" >&2; return 1; }
    if grep -q -a KUBELET_REHASH_CRASH_AT "$bin"; then
        echo "test.sh: the production build $bin contains the crash-injection path (KUBELET_REHASH_CRASH_AT)" >&2
        return 1
    fi
    echo "test.sh: production $bin carries no crash-injection code"
}
stage main "production binary has no crash path" production_check

stage main "test build (cargo test --no-run)" cargo test --workspace --release --no-run
test_build_check() {
    if ! grep -q -a KUBELET_REHASH_CRASH_AT "$bin"; then
        echo "test.sh: the test-built $bin has no crash points: the sweeps would not run them" >&2
        return 1
    fi
}
stage main "test binary carries the crash points" test_build_check

# Every test but the real-node suite's lab tests, while lane k8s builds (niced).
real_node_test=the_real_kubelet_adopts_every_container_kubelet_rehash_rewrote
# the full node (issue 52): one lab filled to 8, 110 and 250 pods, after the pairs (one lab at a time)
full_node_test=full_node::the_real_kubelet_keeps_every_container_of_a_full_node
# the status guard's fail-safes (issues 54 and 56): one lab, kubelet 1.24
guard_test=guard::the_status_guard_fails_safe
# a multi-node lab (issue 53): three real kubelets, each node upgraded in turn on its own lines
fleet_test=fleet::every_node_of_a_multi_node_lab_keeps_its_containers_through_its_own_upgrade
# deploy/ansible/ over three real kubelets, the second's new kubelet never healthy (issue 53)
rollout_test=fleet::the_ansible_rollout_stops_at_the_node_whose_new_kubelet_never_becomes_healthy
set +e
stage main "cargo test (all but the real-node suite)" \
    cargo test --workspace --release --no-fail-fast -- --skip "$real_node_test" --skip "$full_node_test" --skip "$guard_test" --skip "$fleet_test" --skip "$rollout_test" 2>&1 | tee "$LOGS/tests.log"
tests_rc=${PIPESTATUS[0]}
set -e

lane checks checks_lane 10

# One lab test of cli/tests/real_kubelet.rs as a stage of its own (one lab at a time), which
# must report that very test passed (a filter that matched nothing would pass): lab_test
# TITLE TEST LOG-NAME. Sets real_rc=1 when it fails.
real_rc=0
lab_test() {
    local title="$1" test="$2" log="$LOGS/$3.log" rc
    set +e
    stage main "$title" \
        cargo test --release -p kubelet-rehash --test real_kubelet --no-fail-fast -- --exact "$test" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    set -e
    if ! grep -q "^test $test \.\.\. ok" "$log"; then
        echo "test.sh: $test did not report it passed" >&2
        rc=1
    fi
    [ "$rc" = 0 ] || real_rc=1
}
lab_test "real-node suite (cli/tests/real_kubelet.rs)" "$real_node_test" real-node
lab_test "full node: 8, 110 and 250 pods, 1.30 -> 1.31 and back (cli/tests/real_kubelet/full_node.rs)" "$full_node_test" full-node
lab_test "status guard fail-safes (cli/tests/real_kubelet/guard.rs)" "$guard_test" guard
lab_test "multi-node lab: five kubelets, each in its turn (two without the tool) (cli/tests/real_kubelet/fleet.rs)" "$fleet_test" fleet
lab_test "Ansible rollout over three real kubelets, stopped at a failed node (cli/tests/real_kubelet/fleet.rs)" "$rollout_test" rollout

checks_rc=0
wait_lane k8s || checks_rc=1
wait_lane checks || checks_rc=1

[ "$tests_rc" = 0 ] || echo "test.sh: the workspace tests failed (exit $tests_rc)" >&2
[ "$real_rc" = 0 ] || echo "test.sh: the real-node suite failed (exit $real_rc)" >&2
[ "$tests_rc" = 0 ] && [ "$real_rc" = 0 ] && [ "$checks_rc" = 0 ]
