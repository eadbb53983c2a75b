#!/usr/bin/env bash
# Every test of kubelet-rehash, as CI runs it: installs what the integration tests need
# (Debian's docker.io and containerd, containerd 1.7/2.x unpacked from Debian's own newer
# suites into .cache/), Go bbolt's checker, then the whole workspace test suite in release
# mode (the golden set, the real-node workflow and the real-daemon tests), the check that the
# production binary has no crash path, the fixture generators that run here, the fuzz smoke run, and the lint gates.
# Needs root (apt-get, private dockerd/containerd daemons); every daemon it starts is its own,
# on private paths, and stopped by pid.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/setup-docker.sh
scripts/setup-containerd.sh
# containerd 2.2.9, 2.3.7 (the first LTS) and 2.4.2, which Debian does not package: built from
# the Go module proxy into /var/cache/kubelet-rehash/containerd/<version> (about 1 min each)
scripts/setup-containerd-module.sh
# Docker 28.5.2 and Docker 29's engine (github.com/moby/moby/v2 v2.0.0-beta.24), and CRI-O
# 1.36.3, built from the Go module proxy the same way (storepatch/tests/docker_live.rs,
# cli/tests/crio_live.rs; cold 2-5 min each, cached by version)
scripts/setup-docker-module.sh
scripts/setup-runc-module.sh
scripts/setup-crio-module.sh
# CRI-O 1.30.14 built from third_party/ into .cache/crio (cli/tests/crio_live.rs)
scripts/setup-crio.sh
# cri-dockerd 0.4.1 built from third_party/ into .cache/cri-dockerd, and Debian's CNI bridge +
# host-local plugins unpacked into .cache/cni (cli/tests/cri_dockerd_live.rs)
scripts/setup-cri-dockerd.sh
# Go bbolt's own check, run by the tests on every meta.db they write (.cache/bin/bbolt-check)
scripts/setup-bbolt-check.sh
# Debian's ansible-core unpacked into .cache/ansible (cli/tests/ansible_live.rs drives deploy/ansible/)
scripts/setup-ansible.sh

# The real node (cli/tests/real_kubelet.rs): kubelets and control planes built from Kubernetes'
# own Go modules by scripts/k8s-lab.sh, cached outside the clone by version
# (/var/cache/kubelet-rehash/k8s/<version>/; a cold build is about 4-6 min a version here).
# The pairs CI runs: 1.30 -> 1.31 (every container's hash changes) on containerd and on CRI-O
# 1.30.14 (scripts/setup-crio.sh, above), 1.23 -> 1.24 on Docker with the dockershim ->
# cri-dockerd switch (dockerd 26.1.5 and cri-dockerd 0.4.1 from scripts/setup-cri-dockerd.sh,
# above), and 1.36 -> 1.37, today's release (the newest pair kubelet-rehash supports), with the
# node-Ready hold's fail-safes.
lab_t0=$SECONDS
scripts/k8s-lab.sh build --kubelet-only 1.23 1.30 1.36
scripts/k8s-lab.sh build 1.24 1.31 1.37
echo "test.sh: Kubernetes builds for the real-node suite ready in $((SECONDS - lab_t0)) s"

# The README's two commands as a newcomer types them (read from the README: they cannot drift):
# the demo plan runs verbatim and prints the plan; .ci/run runs exactly the second.
scripts/readme-commands.sh

cargo test --workspace --release --no-fail-fast

# The baselines that real Go code can regenerate here are regenerated and compared byte for
# byte (tools/README.md): the resource.Quantity differential and kubelet 1.20's golden hashes,
# from Debian's Kubernetes 1.20.2 source, and the kubelet checkpoint verdicts.
tools/quantity-diff/run.sh
tools/kubelet-1.20-hash/run.sh
tools/kubelet-checkpoints/run.sh
# ... and, from the Go module proxy, the newest supported version's schema (with the one before
# it, proving the generator still reproduces a committed file) and its golden hashes from the
# real HashContainer (the kubelet build of the real-node suite leaves its packages compiled).
# Every version the proxy serves: tools/container-schema/run.sh and tools/kubelet-hash/run.sh
# with the versions (tools/README.md), too long for every CI run.
tools/container-schema/run.sh --check 1.36 1.37
tools/kubelet-hash/run.sh --check 1.37
# Every checkpoint file written by each kubelet 1.30-1.38 and read by each of them, with their
# real state code (nine small builds of k8s.io/kubernetes packages, about a minute warm):
# fixtures/checkpoints-module, which kubeletstate's module_matrix test holds the crate to.
tools/kubelet-checkpoints/module/run.sh --check

# The production binary has no crash path: storepatch's `crash-points` feature is on only in
# test builds, through dev-dependencies (storesafe/src/fault.rs). The test build just left its
# binary, crash points included, at the same path: finding the variable's name there first
# proves the grep would see it.
bin="${CARGO_TARGET_DIR:-target}/release/kubelet-rehash"
if ! grep -q -a KUBELET_REHASH_CRASH_AT "$bin"; then
    echo "test.sh: the test-built $bin has no crash points: the sweeps did not run them" >&2
    exit 1
fi
cargo build --release -p kubelet-rehash
if grep -q -a KUBELET_REHASH_CRASH_AT "$bin"; then
    echo "test.sh: the production build $bin contains the crash-injection path (KUBELET_REHASH_CRASH_AT)" >&2
    exit 1
fi
echo "test.sh: production $bin carries no crash-injection code"

# The release artifacts: both static musl binaries (arm64 under qemu user emulation) reproduce
# the golden hashes and the reviewed plan output of every bundled node, and the FROM scratch
# image under a private dockerd plans mounted node copies as the host binary does.
scripts/test-release.sh

if [ -x scripts/fuzz-smoke.sh ]; then
    scripts/fuzz-smoke.sh
fi

cargo fmt --all -- --check
# (the release-artifacts feature adds the image test target, which test-release.sh runs)
cargo clippy --workspace --all-targets --features kubelet-rehash/release-artifacts -- -D warnings
# every library crate documents every public item (#![deny(missing_docs)]) with links that resolve
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --lib --exclude kubelet-rehash
