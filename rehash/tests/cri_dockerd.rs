//! The dockershim → cri-dockerd switch on the bundled real Docker 20.10 node (kubelet 1.14),
//! offline: the plan's hazards and targets for 1.24 and 1.31, the checkpoints patch copies
//! into cri-dockerd's root and rollback removes, and the bad inputs that change nothing.
//! (The real cri-dockerd run is cli/tests/cri_dockerd_live.rs.)

mod common;

use common::{node, Node};
use rehash::cri_dockerd::checkpoint::{CheckpointData, SandboxCheckpoint, Writer};
use rehash::cri_dockerd::{plan_switch, SwitchOptions};
use rehash::plan::RecordClass;
use rehash::{Error, From, Plan};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use testtools::tree::snapshot;

/// The bundled node with, under its own root (the `--host-root`): a cri-dockerd binary that
/// answers `--version` as 0.4.1 does, dockershim's checkpoints for every running sandbox but
/// the first (as kubelet 1.14 wrote them: dockershim's checksum), and kubeadm's flags file
/// with dockershim-only flags.
struct Switch {
    n: Node,
    /// Sandboxes with a dockershim checkpoint.
    with: Vec<String>,
    /// The running sandbox without one.
    without: String,
}

impl Switch {
    fn new() -> Switch {
        let n = node("docker-20.10");
        let bin = n.dir.join("usr/bin/cri-dockerd");
        fs::create_dir_all(bin.parent().unwrap()).unwrap();
        fs::write(&bin, "#!/bin/sh\necho 'cri-dockerd 0.4.1 (v0.4.1)'\n").unwrap();
        fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
        let flags = n.dir.join("var/lib/kubelet/kubeadm-flags.env");
        fs::create_dir_all(flags.parent().unwrap()).unwrap();
        fs::write(
            &flags,
            "KUBELET_KUBEADM_ARGS=\"--network-plugin=cni --pod-infra-container-image=k8s.gcr.io/pause:3.1\"\n",
        )
        .unwrap();
        let pods: Value =
            serde_json::from_slice(&fs::read(n.dir.join("pods.json")).unwrap()).unwrap();
        let host_network: BTreeMap<String, bool> = pods["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["metadata"]["uid"].as_str().unwrap().to_string(),
                    p["spec"]["hostNetwork"].as_bool().unwrap_or(false),
                )
            })
            .collect();
        let plan = plain_plan(&n, "1.24");
        let mut running: Vec<&rehash::PlanRecord> = plan
            .records
            .iter()
            .filter(|r| r.kind == RecordClass::Sandbox && r.pid.is_some())
            .collect();
        running.sort_by(|a, b| a.id.cmp(&b.id));
        assert_eq!(running.len(), 14, "the bundled node runs 14 sandboxes");
        let dir = shim_dir(&n);
        fs::create_dir_all(&dir).unwrap();
        let without = running[0].id.clone();
        let mut with = Vec::new();
        for r in &running[1..] {
            let cp = SandboxCheckpoint {
                version: "v1".into(),
                name: r.pod.clone().unwrap(),
                namespace: r.namespace.clone().unwrap(),
                data: CheckpointData {
                    port_mappings: None,
                    host_network: host_network
                        .get(r.pod_uid.as_deref().unwrap())
                        .copied()
                        .unwrap_or(false),
                },
                checksum: 0,
            };
            fs::write(dir.join(&r.id), cp.for_dockershim()).unwrap();
            with.push(r.id.clone());
        }
        Switch { n, with, without }
    }

    fn options(&self) -> SwitchOptions {
        SwitchOptions {
            host_root: Some(self.n.dir.clone()),
            ..SwitchOptions::default()
        }
    }

    fn plan(&self, to: &str) -> Result<Plan, Error> {
        let mut plan = plain_plan(&self.n, to);
        let pods = fs::read(self.n.dir.join("pods.json")).unwrap();
        plan_switch(&mut plan, &pods, &self.options())?;
        Ok(plan)
    }

    fn target_dir(&self) -> PathBuf {
        self.n.dir.join("var/lib/cri-dockerd/sandbox")
    }
}

fn shim_dir(n: &Node) -> PathBuf {
    n.dir.join("var/lib/dockershim/sandbox")
}

fn plain_plan(n: &Node, to: &str) -> Plan {
    let pods = fs::read(n.dir.join("pods.json")).unwrap();
    let store = n.location.open().unwrap();
    Plan::build(&pods, store.as_ref(), From::Auto, to.parse().unwrap()).unwrap()
}

fn codes(plan: &Plan) -> Vec<&str> {
    plan.hazards.iter().map(|h| h.code.as_str()).collect()
}

fn hazard<'p>(plan: &'p Plan, code: &str) -> &'p rehash::Hazard {
    plan.hazards
        .iter()
        .find(|h| h.code == code)
        .unwrap_or_else(|| panic!("no hazard {code}: {:?}", codes(plan)))
}

/// expected.json's target hash of every container for `version` (the real Go hashers).
fn expected_targets(version: &str) -> BTreeMap<String, String> {
    let path = testtools::fixtures_dir().join("nodes/docker-20.10/expected.json");
    let e: Value = serde_json::from_slice(&fs::read(path).unwrap()).unwrap();
    e["containers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| {
            let h = c["targets"][version]["hash"].as_str()?;
            Some((c["id"].as_str().unwrap().to_string(), h.to_string()))
        })
        .collect()
}

#[test]
fn plan_lists_the_switch_with_codes_and_the_real_targets() {
    let sw = Switch::new();
    // 1.24 is not among expected.json's targets; the real 1.23 and 1.26 hashers agree on every
    // container of this node, so 1.24 (between them) computes the same.
    for (to, expected_as) in [("1.24", "1.23"), ("1.24", "1.26"), ("1.31", "1.31")] {
        let plan = sw.plan(to).unwrap();
        assert_eq!(plan.from.unwrap().to_string(), "1.14");
        let c = codes(&plan);
        for code in [
            "cri-dockerd-binary",
            "cri-dockerd-checkpoints",
            "cri-dockerd-checkpoint-missing",
            "kubelet-flags-change",
        ] {
            assert!(c.contains(&code), "{to}: {code} missing from {c:?}");
        }
        assert!(
            !c.contains(&"dockershim-removed"),
            "{to}: the switch replaces the bare warning: {c:?}"
        );
        assert_eq!(plan.warnings.len(), plan.hazards.len());
        let bin = hazard(&plan, "cri-dockerd-binary");
        assert!(
            bin.message.contains("cri-dockerd 0.4.1 (v0.4.1)")
                && bin
                    .message
                    .contains(&sw.n.dir.join("usr/bin/cri-dockerd").display().to_string()),
            "{}",
            bin.message
        );
        let carried = hazard(&plan, "cri-dockerd-checkpoints");
        assert_eq!(carried.containers.len(), 13);
        let missing = hazard(&plan, "cri-dockerd-checkpoint-missing");
        assert_eq!(missing.containers, vec![sw.without.clone()]);
        assert!(missing.message.contains("recreates"), "{}", missing.message);
        let flags = hazard(&plan, "kubelet-flags-change");
        assert!(
            flags
                .message
                .contains("--container-runtime-endpoint=unix:///var/run/cri-dockerd.sock")
                && flags.message.contains("--network-plugin (")
                && flags.message.contains("kubeadm-flags.env"),
            "{}",
            flags.message
        );
        let s = plan.cri_dockerd.as_ref().unwrap();
        assert_eq!(s.version.as_deref(), Some("cri-dockerd 0.4.1 (v0.4.1)"));
        assert_eq!(Path::new(&s.root), sw.n.dir.join("var/lib/cri-dockerd"));
        assert_eq!(s.sandboxes.len(), 14);
        assert_eq!(s.checkpoints.len(), 13);
        assert!(s
            .checkpoints
            .iter()
            .all(|c| Path::new(&c.target).parent().unwrap() == sw.target_dir()));
        let want = expected_targets(expected_as);
        let mut checked = 0;
        for r in plan.records.iter().filter(|r| r.target_hash.is_some()) {
            assert_eq!(
                Some(&r.target_hash.unwrap().to_string()),
                want.get(&r.id),
                "{to}: target of {}",
                r.id
            );
            checked += 1;
        }
        assert_eq!(checked, 25, "{to}");
    }
    // No crossing, no switch: 1.23 keeps dockershim.
    let plan = sw.plan("1.23").unwrap();
    assert!(plan.cri_dockerd.is_none());
    assert!(!codes(&plan).iter().any(|c| c.starts_with("cri-dockerd")));
}

#[test]
fn patch_copies_checkpoints_with_cri_dockerds_checksum_and_rollback_removes_them() {
    let sw = Switch::new();
    let originals = snapshot(&shim_dir(&sw.n));
    let docker_before = snapshot(&sw.n.dir.join("var/lib/docker"));
    let plan = sw.plan("1.24").unwrap();
    let store = sw.n.location.open().unwrap();
    let backup = sw.n.backup("backup");
    let done = rehash::patch(&plan, store.as_ref(), &backup, &rehash::Silent).unwrap();
    assert_eq!(done.changed, plan.rewrites().len());
    for id in &sw.with {
        let copy = fs::read(sw.target_dir().join(id)).unwrap();
        let cp = SandboxCheckpoint::parse(&copy).unwrap();
        assert_eq!(cp.writer(), Writer::CriDockerd, "{id}");
        let orig = SandboxCheckpoint::parse(&fs::read(shim_dir(&sw.n).join(id)).unwrap()).unwrap();
        assert_eq!(orig.writer(), Writer::Dockershim);
        assert_eq!(
            (&cp.name, &cp.namespace, &cp.data),
            (&orig.name, &orig.namespace, &orig.data)
        );
    }
    assert!(!sw.target_dir().join(&sw.without).exists());
    assert_eq!(
        snapshot(&shim_dir(&sw.n)),
        originals,
        "dockershim's files are never touched"
    );
    // planned again: everything is carried over, nothing conflicts, a rerun writes nothing
    let again = sw.plan("1.24").unwrap();
    assert!(again
        .cri_dockerd
        .as_ref()
        .unwrap()
        .checkpoints
        .iter()
        .all(|c| c.present));
    assert!(!codes(&again).contains(&"cri-dockerd-checkpoint-conflict"));

    rehash::rollback(&backup.dir, &sw.n.location, false).unwrap();
    assert!(
        !sw.n.dir.join("var/lib/cri-dockerd").exists(),
        "rollback removes the copies and the directories the patch made"
    );
    assert_eq!(snapshot(&sw.n.dir.join("var/lib/docker")), docker_before);
    assert_eq!(snapshot(&shim_dir(&sw.n)), originals);
    // twice is fine
    rehash::rollback(&backup.dir, &sw.n.location, false).unwrap();
}

#[test]
fn other_checkpoints_in_cri_dockerds_root_are_refused_by_name_and_nothing_changes() {
    let sw = Switch::new();
    fs::create_dir_all(sw.target_dir()).unwrap();
    // one of another sandbox (a cri-dockerd ran here), one of ours with other content
    let foreign = sw.target_dir().join("f".repeat(64));
    fs::write(&foreign, b"{}").unwrap();
    let differing = sw.target_dir().join(&sw.with[0]);
    fs::write(
        &differing,
        fs::read(shim_dir(&sw.n).join(&sw.with[0])).unwrap(),
    )
    .unwrap();
    let before = snapshot(&sw.n.dir);
    let plan = sw.plan("1.24").unwrap();
    let h = hazard(&plan, "cri-dockerd-checkpoint-conflict");
    assert_eq!(h.severity, rehash::Severity::Block);
    for f in [&foreign, &differing] {
        assert!(
            h.message.contains(&f.display().to_string()),
            "{}",
            h.message
        );
    }
    let store = sw.n.location.open().unwrap();
    let backup = sw.n.backup("backup");
    let err = rehash::patch(&plan, store.as_ref(), &backup, &rehash::Silent).unwrap_err();
    assert!(matches!(err, Error::Blocked(_)), "{err}");
    assert!(
        err.to_string().contains(&foreign.display().to_string()),
        "{err}"
    );
    assert_eq!(snapshot(&sw.n.dir), before, "nothing changed");
    assert!(!backup.dir.exists());

    // identical copies are no conflict: the differing one made identical, the foreign one gone
    fs::remove_file(&foreign).unwrap();
    let cp =
        SandboxCheckpoint::parse(&fs::read(shim_dir(&sw.n).join(&sw.with[0])).unwrap()).unwrap();
    fs::write(&differing, cp.for_cri_dockerd()).unwrap();
    let plan = sw.plan("1.24").unwrap();
    assert!(
        !codes(&plan).contains(&"cri-dockerd-checkpoint-conflict"),
        "{:?}",
        codes(&plan)
    );
    let s = plan.cri_dockerd.unwrap();
    assert_eq!(s.checkpoints.iter().filter(|c| c.present).count(), 1);
}

#[test]
fn a_checkpoint_that_is_not_json_is_a_clear_error_and_nothing_changes() {
    let sw = Switch::new();
    let bad = shim_dir(&sw.n).join(&sw.with[3]);
    fs::write(&bad, b"{\"version\":\"v1\",\"name\":").unwrap();
    let before = snapshot(&sw.n.dir);
    let err = sw.plan("1.24").unwrap_err();
    assert!(matches!(err, Error::Checkpoint(_)), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains(&bad.display().to_string()) && msg.contains("Nothing was changed"),
        "{msg}"
    );
    assert_eq!(err.class(), rehash::ErrorClass::Usage);
    assert_eq!(snapshot(&sw.n.dir), before);
}

#[test]
fn no_binary_is_a_hazard_and_a_given_one_is_asked() {
    let sw = Switch::new();
    fs::remove_file(sw.n.dir.join("usr/bin/cri-dockerd")).unwrap();
    let plan = sw.plan("1.24").unwrap();
    assert!(
        codes(&plan).contains(&"cri-dockerd-missing"),
        "{:?}",
        codes(&plan)
    );
    assert!(plan.cri_dockerd.unwrap().binary.is_none());
    let not_it = sw.n.tmp.path().join("true");
    fs::write(&not_it, "#!/bin/sh\nexit 0\n").unwrap();
    fs::set_permissions(&not_it, fs::Permissions::from_mode(0o755)).unwrap();
    let mut plan = plain_plan(&sw.n, "1.24");
    let opts = SwitchOptions {
        binary: Some(not_it),
        ..sw.options()
    };
    plan_switch(
        &mut plan,
        &fs::read(sw.n.dir.join("pods.json")).unwrap(),
        &opts,
    )
    .unwrap();
    assert_eq!(
        hazard(&plan, "cri-dockerd-binary-unusable").severity,
        rehash::Severity::Block
    );
}

#[test]
fn a_running_cri_dockerd_blocks_the_patch() {
    let sw = Switch::new();
    let sock = sw.n.dir.join("var/run/cri-dockerd.sock");
    fs::create_dir_all(sock.parent().unwrap()).unwrap();
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let plan = sw.plan("1.24").unwrap();
    let h = hazard(&plan, "cri-dockerd-running");
    assert_eq!(h.severity, rehash::Severity::Block);
    let before = snapshot(&sw.n.dir);
    let store = sw.n.location.open().unwrap();
    let backup = sw.n.backup("backup");
    let err = rehash::patch(&plan, store.as_ref(), &backup, &rehash::Silent).unwrap_err();
    assert!(matches!(err, Error::Blocked(_)), "{err}");
    assert_eq!(snapshot(&sw.n.dir), before);
}

/// Issue 35: a dockershim flag on a line the flag rewrite cannot parse (`export`, a `\`
/// continuation, a shell expansion) was kept silently; the plan now blocks on it, naming the
/// file and the line, and the patch refuses, writing nothing.
#[test]
fn a_dockershim_flag_on_a_line_the_rewrite_cannot_parse_blocks_naming_the_line() {
    let sw = Switch::new();
    let plan = sw.plan("1.24").unwrap();
    assert!(
        !codes(&plan).contains(&"kubelet-flags-unparsed"),
        "kubeadm's plain line is rewritten, nothing to block on"
    );
    let file = sw.n.dir.join("etc/default/kubelet");
    fs::create_dir_all(file.parent().unwrap()).unwrap();
    fs::write(
        &file,
        "# set by the image\nKUBELET_EXTRA_ARGS=\"--v=2 \\\n  --network-plugin-mtu=1460\"\n",
    )
    .unwrap();
    let plan = sw.plan("1.24").unwrap();
    let h = hazard(&plan, "kubelet-flags-unparsed");
    assert_eq!(h.severity, rehash::Severity::Block);
    assert_eq!(h.files, vec![file.display().to_string()]);
    assert!(
        h.message.contains("line 3 (--network-plugin-mtu=1460\")"),
        "names the line: {}",
        h.message
    );
    let before = snapshot(&sw.n.dir);
    let store = sw.n.location.open().unwrap();
    let backup = sw.n.backup("backup");
    let err = rehash::patch(&plan, store.as_ref(), &backup, &rehash::Silent).unwrap_err();
    assert!(
        matches!(err, Error::Blocked(_)) && err.to_string().contains("kubelet-flags-unparsed"),
        "{err}"
    );
    assert_eq!(snapshot(&sw.n.dir), before, "nothing written");
}

/// With `--from auto` proving 1.21–1.26 (hashes alike), a node whose cri-dockerd root already
/// holds its running sandboxes' checkpoints (and dockershim's directory none) is on cri-dockerd
/// already: no switch, no false "recreated" or "conflict" hazards.
#[test]
fn a_node_already_on_cri_dockerd_is_not_switched_again() {
    let sw = Switch::new();
    fs::create_dir_all(sw.target_dir()).unwrap();
    for id in &sw.with {
        let cp = SandboxCheckpoint::parse(&fs::read(shim_dir(&sw.n).join(id)).unwrap()).unwrap();
        fs::write(sw.target_dir().join(id), cp.for_cri_dockerd()).unwrap();
    }
    fs::remove_dir_all(shim_dir(&sw.n)).unwrap();
    let mut plan = sw.plan("1.24").unwrap();
    // the bundled node proves 1.14 alone; make its candidates reach past dockershim, as
    // 1.21–1.26 do for many specs
    plan.from_candidates = ["1.23", "1.24", "1.25"]
        .iter()
        .map(|v| v.parse().unwrap())
        .collect();
    plan.cri_dockerd = None;
    plan.hazards
        .retain(|h| !h.code.starts_with("cri-dockerd") && h.code != "kubelet-flags-change");
    plan.hazards
        .push(rehash::Hazard::warn("dockershim-removed", "x"));
    plan_switch(
        &mut plan,
        &fs::read(sw.n.dir.join("pods.json")).unwrap(),
        &sw.options(),
    )
    .unwrap();
    assert!(plan.cri_dockerd.is_none());
    let c = codes(&plan);
    assert!(c.contains(&"cri-dockerd-already"), "{c:?}");
    assert!(
        !c.contains(&"dockershim-removed") && !c.contains(&"cri-dockerd-checkpoint-conflict"),
        "{c:?}"
    );
}

#[test]
fn a_value_rollback_removes_the_copies_too_and_refuses_a_copy_cri_dockerd_rewrote() {
    let sw = Switch::new();
    let plan = sw.plan("1.24").unwrap();
    let store = sw.n.location.open().unwrap();
    let backup = sw.n.backup("backup");
    rehash::patch(&plan, store.as_ref(), &backup, &rehash::Silent).unwrap();
    // a copy cri-dockerd rewrote since (its pod was recreated): refused, named, nothing undone
    let rewritten = sw.target_dir().join(&sw.with[0]);
    let mut cp = SandboxCheckpoint::parse(&fs::read(&rewritten).unwrap()).unwrap();
    cp.data.host_network = !cp.data.host_network;
    fs::write(&rewritten, cp.for_cri_dockerd()).unwrap();
    let before = snapshot(&sw.n.dir);
    let err = rehash::rollback_values(&backup.dir, store.as_ref(), &backup.state).unwrap_err();
    assert!(
        err.to_string().contains(&rewritten.display().to_string()),
        "{err}"
    );
    assert_eq!(snapshot(&sw.n.dir), before);
    fs::remove_file(&rewritten).unwrap();
    let v = rehash::rollback_values(&backup.dir, store.as_ref(), &backup.state).unwrap();
    assert_eq!(v.restored, plan.rewrites().len());
    assert!(!sw.n.dir.join("var/lib/cri-dockerd").exists());
}
