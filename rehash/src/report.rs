//! The report: what `plan` decided and `patch` did, record by record (`-o json`, `--report`,
//! `report.json` in the backup; a stable contract, docs/report.md). A [`Plan`] is the patch's
//! report too: `patch` fills in what it wrote ([`Stage::Patch`], its timings, the backup).
//!
//! These are the types every step shares (the plan writes them; patch, verify, rollback, the
//! cri-dockerd switch and the upgrade read them), so this module names none of those steps:
//! they all import it, and it imports none of them.

use crate::pods::{ContainerState, ContainerType};
use hashcompat::{Hash, KubeletVersion};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use storepatch::{Hazard, Rewrite, RuntimeKind};

/// The version of the report this crate writes (docs/report.md); [`Plan::from_json`] reads
/// only this one.
pub const REPORT_FORMAT: u32 = 1;

/// What a store record is, as the report tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordClass {
    /// A container (of the kubelet or not).
    Container,
    /// A pod sandbox.
    Sandbox,
}

/// What patch does with one record, and why the kubelet will or will not restart it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// Proven, and the target differs: the stored value is rewritten.
    Rewrite,
    /// The stored value already equals the target.
    Unchanged,
    /// The stored value matches no version for the spec we have: the container restarts.
    Unproven,
    /// No such pod/container in the pods list: the kubelet will kill it, not restart it.
    Orphan,
    /// A pod sandbox: carries no container hash.
    Sandbox,
    /// Not created by the kubelet; never touched.
    NotKubernetes,
    /// The store record could not be decoded (by us, and maybe by the runtime).
    Undecodable,
}

/// One line of the plan (the JSON report's `records[]`; a stable contract, see docs/report.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanRecord {
    /// The runtime's container id.
    pub id: String,
    /// Container or sandbox.
    pub kind: RecordClass,
    /// Pod namespace, from the store's labels.
    pub namespace: Option<String>,
    /// Pod name, from the store's labels.
    pub pod: Option<String>,
    /// Pod uid, from the store's labels: what ties the record to a pod spec.
    pub pod_uid: Option<String>,
    /// Container name, from the store's labels.
    pub container: Option<String>,
    /// How the kubelet treats the container (decides whether it compares the hash).
    pub container_type: Option<ContainerType>,
    /// The kubelet's restart attempt number.
    pub attempt: Option<u32>,
    /// The state pod status reports for this id.
    pub state: Option<ContainerState>,
    /// The pid the runtime recorded: `verify --live` checks it is unchanged.
    pub pid: Option<u32>,
    /// The image reference the runtime recorded.
    pub image: Option<String>,
    /// The hash in the store, exactly as stored (it may be damaged, so it stays text).
    pub stored_hash: Option<String>,
    /// What the node's current kubelet computes for the spec.
    pub from_hash: Option<Hash>,
    /// What the target kubelet will compute.
    pub target_hash: Option<Hash>,
    /// `hashWithoutResources` in the store, exactly as stored.
    pub stored_hash_without_resources: Option<String>,
    /// What the current kubelet computes as `hashWithoutResources`.
    pub from_hash_without_resources: Option<Hash>,
    /// The `hashWithoutResources` patch writes (only where the store holds one).
    pub target_hash_without_resources: Option<Hash>,
    /// What patch does.
    pub action: Action,
    /// Why, in a sentence an operator can act on.
    pub reason: String,
    /// Whether the target kubelet restarts the container if nothing is rewritten.
    pub would_restart_without_rewrite: bool,
    /// Whether it restarts the container even after the rewrite.
    pub would_restart_after_rewrite: bool,
    /// The container belongs to a static pod, matched through its mirror pod's
    /// `kubernetes.io/config.mirror` (absent in the JSON when false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub static_pod: bool,
}

/// The counts an operator decides on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Records that are kubelet containers (rewrite, unchanged, unproven, orphan).
    pub containers: usize,
    /// Pod sandboxes.
    pub sandboxes: usize,
    /// How many records get each action.
    pub actions: BTreeMap<Action, usize>,
    /// Containers the target kubelet restarts without a rewrite.
    pub would_restart_without_rewrite: usize,
    /// Containers it restarts even after the rewrite.
    pub would_restart_after_rewrite: usize,
    /// The same in one sentence.
    pub sentence: String,
}

/// Where the time went, in milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Timings {
    /// Reading the store.
    pub scan_ms: f64,
    /// Hashing every distinct spec for every version needed, and (`--from auto`) the vote
    /// on the source version, which decides what is needed.
    pub hash_ms: f64,
    /// Hashing and deciding.
    pub plan_ms: f64,
    /// Backup and rewrite (patch only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_and_apply_ms: Option<f64>,
    /// Reading back what was written (patch only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify_ms: Option<f64>,
    /// The steps of the store's rewrite inside `backup_and_apply_ms`, in order (patch only;
    /// each runtime's own steps, e.g. containerd's `edit`, `page_plan`, `check`, `backup`,
    /// `commit`, `read_back`): where a slow patch spent the window.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub apply_phases: Vec<PhaseTiming>,
    /// The whole command.
    pub total_ms: f64,
}

/// One step of a store's rewrite and its wall time ([`Timings::apply_phases`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseTiming {
    /// The step, as the store names it.
    pub phase: String,
    /// Its wall time in milliseconds.
    pub ms: f64,
}

/// Which step wrote a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    /// `plan` (or `patch --dry-run`, or offline `verify`): nothing was written.
    #[default]
    Plan,
    /// `patch`: the store was rewritten as the records say.
    Patch,
}

/// The whole report (`-o json`, `--report`, `report.json` in the backup).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// [`REPORT_FORMAT`].
    pub format: u32,
    /// Which step wrote it. Reports written before the field existed read as `plan`, unless
    /// they name a backup (only `patch` wrote one).
    #[serde(default)]
    pub stage: Stage,
    /// The node's current kubelet version (with `From::Auto`, the oldest candidate).
    pub from: Option<KubeletVersion>,
    /// With `From::Auto`: every version consistent with all proven containers.
    pub from_candidates: Vec<KubeletVersion>,
    /// The target kubelet version.
    pub to: KubeletVersion,
    /// Which runtime's store was read.
    pub runtime: RuntimeKind,
    /// The store root.
    pub root: String,
    /// The runtime's API endpoint, where `verify --live` asks after the restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// One line per store record.
    pub records: Vec<PlanRecord>,
    /// The counts.
    pub summary: Summary,
    /// Hazards outside the hash an operator must know before the window, with stable codes
    /// and severities. Reports written before the field existed read as none.
    #[serde(default)]
    pub hazards: Vec<Hazard>,
    /// The hazards' messages, in the same order (kept for readers of earlier reports).
    pub warnings: Vec<String>,
    /// Where the time went.
    pub timings: Timings,
    /// Where `patch` put the backup and its copy of this report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_dir: Option<String>,
    /// The dockershim → cri-dockerd switch, when a Docker node crosses 1.23 → 1.24
    /// ([`crate::cri_dockerd::plan_switch`]): what `patch` copies and `verify --live` asks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cri_dockerd: Option<CriDockerdSwitch>,
    /// The static pods whose derived UID `patch` pins in their manifests
    /// (`--pin-static-pod-uids`; absent in the JSON when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub static_pod_pins: Vec<crate::static_pods::UidPin>,
}

impl Plan {
    /// The rewrites this plan asks for.
    pub fn rewrites(&self) -> Vec<Rewrite> {
        self.records
            .iter()
            .filter(|r| r.action == Action::Rewrite)
            .map(|r| Rewrite {
                id: r.id.clone(),
                hash: r.target_hash.expect("a rewrite has a target"),
                hash_without_resources: r.target_hash_without_resources,
            })
            .collect()
    }

    /// Whether some container restarts even after the rewrite (exit code 4 of `plan`/`patch`).
    pub fn incomplete(&self) -> bool {
        self.summary.would_restart_after_rewrite > 0
    }

    /// The report as pretty JSON, as `-o json` prints it.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).expect("a plan always serializes")
    }

    /// [`Plan::to_json`]'s bytes written to `out` as they are made (give a buffered writer):
    /// on a node of thousands of containers the report is megabytes, and building it in
    /// memory made it the largest allocation of a `patch` (its peak memory, at its end).
    pub fn write_json(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        serde_json::to_writer_pretty(out, self).map_err(std::io::Error::from)
    }

    /// Whether `patch` wrote this report (it names a backup, or says so).
    pub fn is_patch_report(&self) -> bool {
        self.stage == Stage::Patch || self.backup_dir.is_some()
    }
}

/// One checkpoint patch copies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CarryOver {
    /// The sandbox id (the file's name).
    pub sandbox: String,
    /// dockershim's file.
    pub source: String,
    /// cri-dockerd's file.
    pub target: String,
    /// sha256 of the source as planned (patch refuses when it changed since).
    pub source_sha256: String,
    /// sha256 of what patch writes.
    pub target_sha256: String,
    /// The target already holds exactly that (a rerun): nothing to copy.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub present: bool,
}

/// A sandbox the target kubelet will ask cri-dockerd about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpectedSandbox {
    /// The sandbox id.
    pub id: String,
    /// `namespace/name` of its pod.
    pub pod: String,
    /// The pod uses the node's network (cri-dockerd reports no IP for it).
    pub host_network: bool,
    /// The pod's IP as the API server knows it (`status.podIP`), for a pod network of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_ip: Option<String>,
}

/// The switch as planned (the report's `cri_dockerd`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CriDockerdSwitch {
    /// The binary found (or given), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binary: Option<String>,
    /// Its `--version`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// dockershim's checkpoint directory.
    pub dockershim_dir: String,
    /// cri-dockerd's root directory.
    pub root: String,
    /// cri-dockerd's CRI endpoint: `verify --live` asks it.
    pub endpoint: String,
    /// The checkpoints to copy.
    pub checkpoints: Vec<CarryOver>,
    /// Every running sandbox.
    pub sandboxes: Vec<ExpectedSandbox>,
}

/// `1.16–1.18, 1.22` for a set of versions.
pub fn ranges(set: &BTreeSet<KubeletVersion>) -> String {
    let all = KubeletVersion::all();
    let mut out: Vec<String> = Vec::new();
    let mut run: Vec<KubeletVersion> = Vec::new();
    let flush = |run: &mut Vec<KubeletVersion>, out: &mut Vec<String>| {
        match run.len() {
            0 => {}
            1 => out.push(run[0].to_string()),
            _ => out.push(format!("{}–{}", run[0], run[run.len() - 1])),
        }
        run.clear();
    };
    for v in all {
        if set.contains(&v) {
            run.push(v);
        } else {
            flush(&mut run, &mut out);
        }
    }
    flush(&mut run, &mut out);
    out.join(", ")
}
