//! The node workflow through the library API alone, on the bundled real nodes (containerd 1.7,
//! Docker 20.10, CRI-O 1.30): plan with typed results that match the node's expected.json,
//! patch, verify, an idempotent second patch, and a byte-exact rollback. Then the typed
//! errors a library user acts on.

use rehash::{Action, Error, ErrorClass, From, Plan, Stage, StoreLocation, Version};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

use storepatch::RuntimeKind;

mod common;
use common::node;
use testtools::tree::snapshot;

fn full_cycle(name: &str, to: &str) {
    let n = node(name);
    let expected: Value =
        serde_json::from_slice(&std::fs::read(n.dir.join("expected.json")).unwrap()).unwrap();
    let pods = std::fs::read(n.dir.join("pods.json")).unwrap();
    let to: Version = to.parse().unwrap();
    let before = snapshot(&n.dir);
    let store = n.location.open().expect("the store opens");

    let plan = Plan::build(&pods, store.as_ref(), From::Auto, to).expect("plan");
    let from: Version = expected["from_kubelet"].as_str().unwrap().parse().unwrap();
    assert!(
        plan.from_candidates.contains(&from),
        "{name}: --from auto finds the node's kubelet {from} among {:?}",
        plan.from_candidates
    );
    assert_eq!(plan.stage, Stage::Plan);
    let by_id: BTreeMap<&str, &rehash::PlanRecord> =
        plan.records.iter().map(|r| (r.id.as_str(), r)).collect();
    let mut proven = 0;
    for c in expected["containers"].as_array().unwrap() {
        let id = c["id"].as_str().unwrap();
        let r = by_id[id];
        if let Some(want) = c["targets"][to.to_string()]["hash"].as_str() {
            assert_eq!(
                r.target_hash.map(|h| h.to_string()).as_deref(),
                Some(want),
                "{name} {id}: the target hash is the real kubelet's"
            );
        }
        if c["stored_hash_verifies"] == Value::Bool(true)
            && c["targets"][to.to_string()]["stored_ne_target"] == Value::Bool(true)
        {
            assert_eq!(
                r.action,
                Action::Rewrite,
                "{name} {id}: a proven hash is rewritten"
            );
            proven += 1;
        }
    }
    assert!(proven > 0, "{name}: the node has containers to rewrite");
    assert_eq!(
        plan.rewrites().len(),
        proven,
        "{name}: one rewrite per proven container"
    );

    // The report round-trips through its JSON form.
    assert_eq!(
        Plan::from_json(&plan.to_json()).expect("a report reads back"),
        plan,
        "{name}: the report round-trips"
    );

    let backup = n.backup("backup");
    let events = std::cell::RefCell::new(Vec::new());
    let record = |e: rehash::Event| events.borrow_mut().push(e);
    let done = rehash::patch(&plan, store.as_ref(), &backup, &record).expect("patch");
    assert_eq!(
        done.changed, proven,
        "{name}: every proven container changed"
    );
    assert_eq!(done.report.stage, Stage::Patch);
    assert_eq!(done.backup_dir.as_deref(), Some(backup.dir.as_path()));
    assert!(
        events
            .borrow()
            .contains(&rehash::Event::RewriteStarted { rewrites: proven }),
        "{name}: progress reports the rewrite"
    );
    let stored = Plan::from_json(&std::fs::read(backup.dir.join("report.json")).unwrap())
        .expect("the backup holds the report");
    assert_eq!(
        stored, done.report,
        "{name}: report.json is the returned report"
    );

    let after = Plan::build(&pods, store.as_ref(), From::Auto, to).unwrap();
    assert!(
        rehash::verify(&after).ok(),
        "{name}: nothing left to rewrite"
    );
    let again = rehash::patch(
        &after,
        store.as_ref(),
        &n.backup("backup-2"),
        &rehash::Silent,
    )
    .unwrap();
    assert_eq!(
        (again.changed, again.backup_dir),
        (0, None),
        "{name}: a second patch writes nothing"
    );

    let rb = rehash::rollback(&backup.dir, &n.location, false).expect("rollback");
    assert!(!rb.files.is_empty());
    assert!(
        snapshot(&n.dir) == before,
        "{name}: rollback restores every byte of the node"
    );
}

#[test]
fn containerd_1_7_node_plan_patch_verify_rollback() {
    full_cycle("containerd-1.7", "1.31");
}

#[test]
fn docker_20_10_node_plan_patch_verify_rollback() {
    full_cycle("docker-20.10", "1.23");
}

#[test]
fn crio_1_30_node_plan_patch_verify_rollback() {
    full_cycle("crio-1.30", "1.33");
}

#[test]
fn value_rollback_undoes_exactly_what_the_patch_wrote() {
    let n = node("containerd-1.7");
    let pods = std::fs::read(n.dir.join("pods.json")).unwrap();
    let store = n.location.open().unwrap();
    let to = "1.31".parse().unwrap();
    let plan = Plan::build(&pods, store.as_ref(), From::Auto, to).unwrap();
    let backup = n.backup("backup");
    let done = rehash::patch(&plan, store.as_ref(), &backup, &rehash::Silent).unwrap();
    let undo = rehash::rollback_values(&backup.dir, store.as_ref(), &backup.state)
        .expect("value rollback");
    assert_eq!(undo.restored, done.changed);
    let replanned = Plan::build(&pods, store.as_ref(), From::Auto, to).unwrap();
    assert_eq!(
        replanned.rewrites(),
        plan.rewrites(),
        "after the value rollback the store plans exactly as before the patch"
    );
}

#[test]
fn errors_carry_the_class_a_caller_acts_on() {
    let n = node("containerd-1.7");
    let pods = std::fs::read(n.dir.join("pods.json")).unwrap();

    let missing = StoreLocation::new(RuntimeKind::Containerd, n.dir.join("no-such-root"));
    let e = missing.open().err().expect("a missing root does not open");
    assert_eq!(
        e.class(),
        ErrorClass::Usage,
        "a missing root is a usage error: {e}"
    );

    let store = n.location.open().unwrap();
    let e = Plan::build(
        b"{\"kind\":\"Node\"}",
        store.as_ref(),
        From::Auto,
        "1.31".parse().unwrap(),
    )
    .unwrap_err();
    assert!(matches!(e, Error::Pods(_)), "{e}");
    assert_eq!(e.class(), ErrorClass::Usage);

    for bad in [
        &b"[]"[..],
        b"{\"format\": 2}",
        b"{\"format\": 1, \"to\": 3}",
        b"not json",
    ] {
        let e = Plan::from_json(bad).unwrap_err();
        assert!(matches!(e, Error::Report { .. }), "{e}");
        assert_eq!(e.class(), ErrorClass::Usage);
    }

    // verify_live refuses what it cannot check, before asking any runtime.
    let plan = Plan::build(&pods, store.as_ref(), From::Auto, "1.31".parse().unwrap()).unwrap();
    let e = rehash::verify_live(&plan, None).unwrap_err();
    assert!(
        matches!(e, Error::NothingToVerify(_)),
        "a plan is not a patch report: {e}"
    );
    let mut nothing = plan.clone();
    nothing.stage = Stage::Patch;
    nothing.records.retain(|r| r.action != Action::Rewrite);
    let e = rehash::verify_live(&nothing, None).unwrap_err();
    assert!(
        matches!(e, Error::NothingToVerify(_)),
        "no rewritten container: {e}"
    );

    // A running runtime refuses the patch, and nothing is written.
    let before = snapshot(&n.dir);
    let sock = n.location.options.socket.clone().unwrap();
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let e = rehash::patch(&plan, store.as_ref(), &n.backup("backup"), &rehash::Silent).unwrap_err();
    assert_eq!(e.class(), ErrorClass::Refused, "{e}");
    assert!(snapshot(&n.dir) == before, "a refused patch writes nothing");

    // A plan of another store is refused.
    let other = node("containerd-1.6");
    let other_store = other.location.open().unwrap();
    let e = rehash::patch(
        &plan,
        other_store.as_ref(),
        &other.backup("backup"),
        &rehash::Silent,
    )
    .unwrap_err();
    assert!(matches!(e, Error::PlanMismatch { .. }), "{e}");
}

/// A store whose every scan after the first returns the first one: what a store that silently
/// dropped its writes would show. The read-back must catch it, and the error must still carry
/// the report (so `--report` is written) and name the backup.
struct StaleScans<'s> {
    inner: &'s dyn storepatch::RuntimeStore,
    first: std::sync::Mutex<Option<storepatch::ScanReport>>,
}

impl storepatch::RuntimeStore for StaleScans<'_> {
    fn kind(&self) -> RuntimeKind {
        self.inner.kind()
    }
    fn root(&self) -> &Path {
        self.inner.root()
    }
    fn scan(&self) -> Result<storepatch::ScanReport, storepatch::StoreError> {
        let mut first = self.first.lock().unwrap();
        if first.is_none() {
            *first = Some(self.inner.scan()?);
        }
        Ok(first.clone().unwrap())
    }
    fn ensure_stopped(&self) -> Result<(), storepatch::StoreError> {
        self.inner.ensure_stopped()
    }
    fn endpoint(&self) -> String {
        self.inner.endpoint()
    }
    fn apply(
        &self,
        rewrites: &[storepatch::Rewrite],
        backup: &mut storepatch::backup::Backup,
    ) -> Result<storepatch::ApplyOutcome, storepatch::StoreError> {
        self.inner.apply(rewrites, backup)
    }
}

#[test]
fn a_failed_read_back_is_a_failure_that_still_carries_the_report() {
    let n = node("containerd-1.7");
    let pods = std::fs::read(n.dir.join("pods.json")).unwrap();
    let real = n.location.open().unwrap();
    let store = StaleScans {
        inner: real.as_ref(),
        first: std::sync::Mutex::new(None),
    };
    let plan = Plan::build(&pods, &store, From::Auto, "1.31".parse().unwrap()).unwrap();
    let backup = n.backup("backup");
    let e = rehash::patch(&plan, &store, &backup, &rehash::Silent).unwrap_err();
    assert_eq!(e.class(), ErrorClass::Failure, "{e}");
    let Error::ReadBack {
        ids,
        backup_dir,
        report,
    } = e
    else {
        panic!("a read-back error, not {e}")
    };
    assert_eq!(ids.len(), plan.rewrites().len(), "every rewrite is named");
    assert_eq!(backup_dir, backup.dir);
    assert_eq!(report.stage, Stage::Patch);
    assert_eq!(
        report.backup_dir.as_deref(),
        Some(backup.dir.to_str().unwrap()),
        "the carried report names the backup"
    );
    let stored = Plan::from_json(&std::fs::read(backup.dir.join("report.json")).unwrap()).unwrap();
    assert_eq!(
        &stored,
        report.as_ref(),
        "report.json is written before the error"
    );
}

/// The report `patch` streams into the backup (and `-o json` to stdout) is byte for byte the
/// one `Plan::to_json` builds in memory, and reads back as the same plan.
#[test]
fn the_streamed_report_is_the_built_one() {
    let n = node("docker-20.10");
    let pods = std::fs::read(n.dir.join("pods.json")).unwrap();
    let store = n.location.open().unwrap();
    let plan = Plan::build(&pods, store.as_ref(), From::Auto, "1.23".parse().unwrap()).unwrap();
    let backup = n.backup("backup");
    let done = rehash::patch(&plan, store.as_ref(), &backup, &rehash::Silent).unwrap();
    assert!(done.changed > 0, "the patch rewrote the node");
    let stored = std::fs::read(backup.dir.join("report.json")).unwrap();
    assert_eq!(
        String::from_utf8(stored.clone()).unwrap(),
        String::from_utf8(done.report.to_json()).unwrap(),
        "the streamed report.json holds the bytes to_json builds"
    );
    let mut streamed = Vec::new();
    plan.write_json(&mut streamed).unwrap();
    assert_eq!(
        streamed,
        plan.to_json(),
        "write_json writes to_json's bytes"
    );
    assert_eq!(Plan::from_json(&stored).unwrap(), done.report);
}
