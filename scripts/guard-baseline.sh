#!/usr/bin/env bash
# The status guard's baselines (statusguard/tests/baseline.rs): the AdmissionReviews the real
# API server sent the guard on the lab, for real kubelets' status updates that change readiness
# (the startup NotReady and readiness resets it held, the updates it let through), with what the
# guard did. Runs the lab's guard fail-safes and the pairs of LAB_PAIRS (default: the docker
# pair 1.23 -> 1.24, whose kubelets report NotReady at start) with KUBELET_REHASH_GUARD_RECORD,
# then keeps a few of each kind per window in fixtures/guard/. Needs root and the lab's builds.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
rec="$(mktemp -d)"
trap 'rm -rf "$rec"' EXIT
export KUBELET_REHASH_GUARD_RECORD="$rec"
cargo test --release -p kubelet-rehash --test real_kubelet -- --exact guard::the_status_guard_fails_safe --nocapture
LAB_PAIRS="${LAB_PAIRS:-docker:1.23-1.24}" LAB_HOLD_CASES=0 \
    cargo test --release -p kubelet-rehash --test real_kubelet -- --exact \
    the_real_kubelet_adopts_every_container_kubelet_rehash_rewrote --nocapture
python3 - "$rec" fixtures/guard <<'PY'
import json, os, shutil, sys
rec, out = sys.argv[1], sys.argv[2]
shutil.rmtree(out, ignore_errors=True)
for window in sorted(os.listdir(rec)):
    kept = {}
    for f in sorted(os.listdir(os.path.join(rec, window))):
        action = json.load(open(os.path.join(rec, window, f)))["action"]
        # every hold of the node and every end of a bound; two of the rest, per window
        limit = 100 if action in ("held-node-not-ready", "bound-over") else 2
        if kept.get(action, 0) < limit:
            kept[action] = kept.get(action, 0) + 1
            os.makedirs(os.path.join(out, window), exist_ok=True)
            shutil.copy(os.path.join(rec, window, f), os.path.join(out, window, f))
    print(f"{window}: {kept}")
PY
