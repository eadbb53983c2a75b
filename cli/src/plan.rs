//! The plan: for every record of the store, what the target kubelet will compute, whether we
//! can prove the stored hash, and what to do about it.
//!
//! A stored hash is *proven* when it equals what the FROM kubelet computes for the pod spec we
//! have (and so does the stored `hashWithoutResources`, when there is one). Only proven hashes
//! are rewritten: a stored hash we cannot reproduce means the spec changed since the container
//! was created (or we do not understand it), and the kubelet restarting that container is the
//! right outcome — rewriting would suppress it.

use crate::pods::{ContainerType, PodIndex};
use hashcompat::{ContainerHashes, Hash, KubeletVersion, SpecError};
use rayon::prelude::*;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use storepatch::{RecordKind, Rewrite, RuntimeKind, ScanReport, StoreRecord};

/// `--from`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FromVersion {
    Auto,
    Version(KubeletVersion),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
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
    Sandbox,
    NotKubernetes,
    /// The store record could not be decoded (by us, and maybe by the runtime).
    Undecodable,
}

/// One line of the plan (the JSON report's `records[]`; a stable contract, see docs/report.md).
#[derive(Debug, Clone, Serialize)]
pub struct PlanRecord {
    pub id: String,
    pub kind: &'static str,
    pub namespace: Option<String>,
    pub pod: Option<String>,
    pub pod_uid: Option<String>,
    pub container: Option<String>,
    pub container_type: Option<ContainerType>,
    pub attempt: Option<u32>,
    pub state: Option<&'static str>,
    pub pid: Option<u32>,
    pub image: Option<String>,
    pub stored_hash: Option<String>,
    pub from_hash: Option<String>,
    pub target_hash: Option<String>,
    pub stored_hash_without_resources: Option<String>,
    pub from_hash_without_resources: Option<String>,
    pub target_hash_without_resources: Option<String>,
    pub action: Action,
    pub reason: String,
    pub would_restart_without_rewrite: bool,
    pub would_restart_after_rewrite: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub containers: usize,
    pub sandboxes: usize,
    pub actions: BTreeMap<Action, usize>,
    pub would_restart_without_rewrite: usize,
    pub would_restart_after_rewrite: usize,
    pub sentence: String,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Timings {
    pub scan_ms: f64,
    pub hash_ms: f64,
    pub plan_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backup_and_apply_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verify_ms: Option<f64>,
    pub total_ms: f64,
}

/// The whole report (`-o json`).
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub format: u32,
    pub from: Option<KubeletVersion>,
    /// With `--from auto`: every version consistent with all proven containers.
    pub from_candidates: Vec<KubeletVersion>,
    pub to: KubeletVersion,
    pub runtime: RuntimeKind,
    pub root: String,
    pub records: Vec<PlanRecord>,
    pub summary: Summary,
    pub warnings: Vec<String>,
    pub timings: Timings,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backup_dir: Option<String>,
}

/// Plan failures that are not about one record.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PlanError {
    /// Maps to exit code 2.
    #[error("{0}")]
    Usage(String),
    /// Maps to exit code 3: we refuse to guess.
    #[error("{0}")]
    Refused(String),
}

type Hashes = Vec<Result<ContainerHashes, SpecError>>;
/// The hashes of one version out of a [`Hashes`] row.
type HashesAt<'f> =
    &'f dyn Fn(&Hashes, KubeletVersion) -> Option<Result<ContainerHashes, SpecError>>;

fn hex(h: Hash) -> String {
    h.to_string()
}

/// Whether the target kubelet compares the hash of this container at all: running regular
/// containers always, running native sidecars from 1.32 on; exited, created-but-never-started,
/// init and ephemeral containers never (a changed spec does not restart them). `running` comes
/// from pod status, or from the runtime's recorded pid when the status does not list the id.
fn compared(ctype: ContainerType, running: bool, to: KubeletVersion) -> bool {
    if !running {
        return false;
    }
    match ctype {
        ContainerType::Container => true,
        ContainerType::Sidecar => to.minor() >= 32,
        ContainerType::Init | ContainerType::Ephemeral => false,
    }
}

pub struct PlanInput<'p, 'a> {
    pub pods: &'p PodIndex<'a>,
    pub scan: &'p ScanReport,
    pub runtime: RuntimeKind,
    pub root: String,
    pub from: FromVersion,
    pub to: KubeletVersion,
}

pub fn make_plan(input: &PlanInput<'_, '_>) -> Result<Plan, PlanError> {
    let started = std::time::Instant::now();
    let versions = KubeletVersion::all();
    let wanted: Vec<KubeletVersion> = match input.from {
        FromVersion::Auto => versions.clone(),
        FromVersion::Version(f) => {
            if f > input.to {
                return Err(PlanError::Usage(format!(
                    "--to {} is older than --from {f}: a kubelet is never downgraded in place",
                    input.to
                )));
            }
            let mut v = vec![f, input.to];
            v.dedup();
            v
        }
    };

    // Hash every distinct spec once, in parallel.
    let mut specs: HashMap<&[u8], Option<Hashes>> = HashMap::new();
    for r in &input.scan.records {
        if let Some(c) = spec_of(input.pods, r) {
            specs.entry(c.spec.raw).or_insert(None);
        }
    }
    let keys: Vec<&[u8]> = specs.keys().copied().collect();
    let computed: Vec<(&[u8], Hashes)> = keys
        .par_iter()
        .map(|raw| {
            let node = hashcompat::parse_json(raw).expect("a span of a parsed document parses");
            (*raw, hashcompat::hash_versions(&node, &wanted))
        })
        .collect();
    for (k, h) in computed {
        specs.insert(k, Some(h));
    }
    let hash_ms = started.elapsed().as_secs_f64() * 1e3;
    let hashes_for = |r: &StoreRecord| -> Option<&Hashes> {
        spec_of(input.pods, r).and_then(|c| specs.get(c.spec.raw).and_then(|h| h.as_ref()))
    };
    let at = |h: &Hashes, v: KubeletVersion| -> Option<Result<ContainerHashes, SpecError>> {
        wanted.iter().position(|w| *w == v).map(|i| h[i].clone())
    };

    // Which versions does each container's stored value prove?
    let matches = |r: &StoreRecord, h: &ContainerHashes| -> bool {
        let Some(stored) = r.hash.as_deref() else {
            return false;
        };
        if stored.parse::<Hash>().ok() != Some(h.hash) {
            return false;
        }
        // A stored hashWithoutResources must match where the version computes one; versions
        // without it (≤1.26, ≥1.31) neither write nor read it, so a stale one left by a 1.30
        // kubelet says nothing against them.
        match (&r.hash_without_resources, h.hash_without_resources) {
            (Some(s), Some(w)) => s.parse::<Hash>().ok() == Some(w),
            _ => true,
        }
    };

    let (from, from_candidates) = match input.from {
        FromVersion::Version(f) => (Some(f), vec![f]),
        FromVersion::Auto => {
            let mut agreed: Option<BTreeSet<KubeletVersion>> = None;
            let mut proven_any = false;
            let mut disagreeing: Vec<String> = Vec::new();
            let proven: Vec<(&StoreRecord, BTreeSet<KubeletVersion>)> = input
                .scan
                .records
                .iter()
                .filter(|r| r.kind == RecordKind::Container)
                .filter_map(|r| {
                    let h = hashes_for(r)?;
                    let set: BTreeSet<KubeletVersion> = h
                        .iter()
                        .filter_map(|x| x.as_ref().ok())
                        .filter(|x| matches(r, x))
                        .map(|x| x.version)
                        .collect();
                    (!set.is_empty()).then_some((r, set))
                })
                .collect();
            // A container that already holds its target hash stays unchanged whatever the
            // source version, so it says nothing about it: after an interrupted patch (some
            // containers rewritten, the others not) only the others decide. When every
            // container holds its target (a finished patch), all of them do.
            let pending = proven.iter().any(|(_, set)| !set.contains(&input.to));
            for (r, set) in proven {
                if pending && set.contains(&input.to) {
                    continue;
                }
                proven_any = true;
                let next: BTreeSet<KubeletVersion> = match &agreed {
                    None => set.clone(),
                    Some(a) => a.intersection(&set).copied().collect(),
                };
                if next.is_empty() {
                    disagreeing.push(format!(
                        "{} ({}/{}) is consistent only with {}",
                        short(&r.id),
                        r.pod.as_deref().unwrap_or("?"),
                        r.container.as_deref().unwrap_or("?"),
                        ranges(&set)
                    ));
                } else {
                    agreed = Some(next);
                }
            }
            if !proven_any {
                return Err(PlanError::Refused(
                    "--from auto: no container's stored hash matches any kubelet version 1.8–1.36 for the pod specs given; is this the right pods file for this node? Give --from to see per-container reasons".into(),
                ));
            }
            if !disagreeing.is_empty() {
                return Err(PlanError::Refused(format!(
                    "--from auto: the containers do not agree on one kubelet version (the others agree on {}): {}; give --from explicitly",
                    ranges(agreed.as_ref().expect("some container agreed")),
                    disagreeing.join("; ")
                )));
            }
            let agreed: Vec<KubeletVersion> = agreed.expect("proven").into_iter().collect();
            // All candidates give every proven container the same hash, so any of them plans
            // the same actions; report the oldest (the range is in `from_candidates`).
            let from = agreed[0];
            if from > input.to {
                return Err(PlanError::Usage(format!(
                    "--to {} is older than the node's kubelet ({}): a kubelet is never downgraded in place",
                    input.to,
                    ranges(&agreed.iter().copied().collect())
                )));
            }
            (Some(from), agreed)
        }
    };
    let from_v = from.expect("set above");

    let mut records = Vec::with_capacity(input.scan.records.len());
    for r in &input.scan.records {
        records.push(plan_record(input, r, hashes_for(r), &at, &matches, from_v));
    }
    let summary = summarize(&records, input.to);
    let mut warnings = input.scan.warnings.clone();
    warnings.extend(hazards(input, from_v, &records));
    let plan_ms = started.elapsed().as_secs_f64() * 1e3;
    Ok(Plan {
        format: 1,
        from,
        from_candidates,
        to: input.to,
        runtime: input.runtime,
        root: input.root.clone(),
        records,
        summary,
        warnings,
        timings: Timings {
            hash_ms,
            plan_ms,
            ..Timings::default()
        },
        backup_dir: None,
    })
}

fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
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

fn spec_of<'p, 'a>(
    pods: &'p PodIndex<'a>,
    r: &StoreRecord,
) -> Option<&'p crate::pods::PodContainer<'a>> {
    if r.kind != RecordKind::Container {
        return None;
    }
    let pod = pods.pod(r.pod_uid.as_deref()?)?;
    let name = r.container.as_deref()?;
    pod.containers.iter().find(|c| c.name == name)
}

fn plan_record(
    input: &PlanInput<'_, '_>,
    r: &StoreRecord,
    hashes: Option<&Hashes>,
    at: HashesAt<'_>,
    matches: &dyn Fn(&StoreRecord, &ContainerHashes) -> bool,
    from: KubeletVersion,
) -> PlanRecord {
    let spec = spec_of(input.pods, r);
    let state = input.pods.status_by_id.get(&r.id).map(|s| s.state);
    let running = match state {
        Some(s) => s == "running",
        None => r.pid.is_some_and(|p| p > 0),
    };
    let mut p = PlanRecord {
        id: r.id.clone(),
        kind: if r.kind == RecordKind::Sandbox {
            "sandbox"
        } else {
            "container"
        },
        namespace: r.namespace.clone(),
        pod: r.pod.clone(),
        pod_uid: r.pod_uid.clone(),
        container: r.container.clone(),
        container_type: spec.map(|c| c.ctype),
        attempt: r.attempt,
        state,
        pid: r.pid,
        image: r.image.clone(),
        stored_hash: r.hash.clone(),
        from_hash: None,
        target_hash: None,
        stored_hash_without_resources: r.hash_without_resources.clone(),
        from_hash_without_resources: None,
        target_hash_without_resources: None,
        action: Action::NotKubernetes,
        reason: String::new(),
        would_restart_without_rewrite: false,
        would_restart_after_rewrite: false,
    };
    match r.kind {
        RecordKind::Sandbox => {
            p.action = Action::Sandbox;
            p.reason = "pod sandbox: carries no container hash".into();
            return p;
        }
        RecordKind::NotKubernetes => {
            p.action = Action::NotKubernetes;
            p.reason = "not created by the kubelet; never touched".into();
            return p;
        }
        RecordKind::Undecodable => {
            p.action = Action::Undecodable;
            p.reason = format!(
                "store record cannot be decoded: {}; never touched",
                r.problem.as_deref().unwrap_or("unknown problem")
            );
            return p;
        }
        RecordKind::Container => {}
    }
    let (Some(spec), Some(hashes)) = (spec, hashes) else {
        p.action = Action::Orphan;
        p.reason = if input.pods.pod(r.pod_uid.as_deref().unwrap_or("")).is_some() {
            "the pod has no container of this name: the kubelet will remove it".into()
        } else {
            "no pod with this uid in the pods list (deleted?): the kubelet will remove it, not restart it".into()
        };
        return p;
    };
    let target = at(hashes, input.to).expect("target hashed");
    let from_h = at(hashes, from).expect("from hashed");
    let target = match target {
        Ok(t) => t,
        Err(e) => {
            p.action = Action::Unproven;
            p.reason = format!("the target kubelet cannot decode this spec: {e}");
            p.would_restart_without_rewrite = compared(spec.ctype, running, input.to);
            p.would_restart_after_rewrite = p.would_restart_without_rewrite;
            return p;
        }
    };
    p.target_hash = Some(hex(target.hash));
    p.target_hash_without_resources = if r.hash_without_resources.is_some() {
        target.hash_without_resources.map(hex)
    } else {
        None
    };
    if let Ok(f) = &from_h {
        p.from_hash = Some(hex(f.hash));
        p.from_hash_without_resources = f.hash_without_resources.map(hex);
    }
    let cmp = compared(spec.ctype, running, input.to);
    let stored = r.hash.as_deref().and_then(|s| s.parse::<Hash>().ok());
    let stored_eq_target = stored == Some(target.hash)
        && match (&r.hash_without_resources, target.hash_without_resources) {
            (Some(s), Some(w)) => s.parse::<Hash>().ok() == Some(w),
            _ => true,
        };
    p.would_restart_without_rewrite = cmp && stored != Some(target.hash);
    if stored_eq_target {
        p.action = Action::Unchanged;
        p.reason = "the stored hash already equals the target".into();
        return p;
    }
    match &from_h {
        Ok(f) if matches(r, f) => {
            p.action = Action::Rewrite;
            p.reason = format!(
                "stored hash proven for kubelet {from}; target {} differs",
                input.to
            );
        }
        Ok(_) => {
            p.action = Action::Unproven;
            p.reason = match r.hash {
                None => "no hash stored".into(),
                Some(_) => format!(
                    "stored hash is not what kubelet {from} computes for the current spec (spec changed since the container was created?): it will restart"
                ),
            };
            p.would_restart_after_rewrite = p.would_restart_without_rewrite;
        }
        Err(e) => {
            p.action = Action::Unproven;
            p.reason = format!("kubelet {from} cannot decode this spec: {e}");
            p.would_restart_after_rewrite = p.would_restart_without_rewrite;
        }
    }
    p
}

fn summarize(records: &[PlanRecord], to: KubeletVersion) -> Summary {
    let mut actions = BTreeMap::new();
    for r in records {
        *actions.entry(r.action).or_insert(0) += 1;
    }
    let sandboxes = records.iter().filter(|r| r.kind == "sandbox").count();
    let containers = records
        .iter()
        .filter(|r| {
            matches!(
                r.action,
                Action::Rewrite | Action::Unchanged | Action::Unproven | Action::Orphan
            )
        })
        .count();
    let without = records
        .iter()
        .filter(|r| r.would_restart_without_rewrite)
        .count();
    let after = records
        .iter()
        .filter(|r| r.would_restart_after_rewrite)
        .count();
    let mut reasons = Vec::new();
    let unproven_restart = records
        .iter()
        .filter(|r| r.action == Action::Unproven && r.would_restart_after_rewrite)
        .count();
    if unproven_restart > 0 {
        reasons.push(format!(
            "{unproven_restart} unproven: stored hash does not match the current spec"
        ));
    }
    let orphans = actions.get(&Action::Orphan).copied().unwrap_or(0);
    if orphans > 0 {
        reasons.push(format!(
            "{orphans} orphaned container(s) will be removed, not restarted"
        ));
    }
    let sentence = format!(
        "without rewrite {without} of {containers} containers would restart under kubelet {to}; after rewrite {after} will{}",
        if reasons.is_empty() {
            String::new()
        } else {
            format!(" ({})", reasons.join("; "))
        }
    );
    Summary {
        containers,
        sandboxes,
        actions,
        would_restart_without_rewrite: without,
        would_restart_after_rewrite: after,
        sentence,
    }
}

/// Known upgrade hazards outside the hash.
fn hazards(input: &PlanInput<'_, '_>, from: KubeletVersion, records: &[PlanRecord]) -> Vec<String> {
    let mut w = Vec::new();
    if input.runtime == RuntimeKind::Docker && input.to.minor() >= 24 {
        w.push(format!(
            "kubelet {} has no dockershim (removed in 1.24): this node needs cri-dockerd, which keeps the same Docker labels",
            input.to
        ));
    }
    if from.minor() < 14 && input.to.minor() >= 14 {
        w.push("kubelet 1.14 moved container logs to /var/log/pods/<namespace>_<pod>_<uid>/<container>/<n>.log: containers adopted from an older kubelet keep their old log paths (kubectl logs may miss them until they restart)".into());
    }
    let undecodable = records
        .iter()
        .filter(|r| r.action == Action::Undecodable)
        .count();
    if undecodable > 0 {
        w.push(format!(
            "{undecodable} store record(s) cannot be decoded; the runtime may drop them on restart and the kubelet start a second copy"
        ));
    }
    w
}

/// The rewrites a plan asks for.
pub fn rewrites(plan: &Plan) -> Vec<Rewrite> {
    plan.records
        .iter()
        .filter(|r| r.action == Action::Rewrite)
        .map(|r| Rewrite {
            id: r.id.clone(),
            hash: r.target_hash.clone().expect("a rewrite has a target"),
            hash_without_resources: r.target_hash_without_resources.clone(),
        })
        .collect()
}
