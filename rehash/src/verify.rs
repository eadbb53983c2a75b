//! verify: offline, every proven container now holds its target; live, the restarted runtime
//! reports the target hash for every rewritten container, which still runs with its pid.

use crate::error::Error;
use crate::pods::ContainerState;
use crate::report::{Action, CriDockerdSwitch, Plan, PlanRecord};
use std::collections::HashMap;

/// The offline check of a plan made after the patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verification {
    /// Containers that are proven but do not hold their target yet.
    pub pending: Vec<String>,
}

impl Verification {
    /// Whether every proven container holds its target.
    pub fn ok(&self) -> bool {
        self.pending.is_empty()
    }
}

/// Offline verification: a plan of the patched store has nothing left to rewrite.
pub fn verify(plan: &Plan) -> Verification {
    Verification {
        pending: plan
            .records
            .iter()
            .filter(|r| r.action == Action::Rewrite)
            .map(|r| r.id.clone())
            .collect(),
    }
}

/// One disagreement between a patch report and the running runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LiveProblem {
    /// The runtime does not list the container any more.
    Missing {
        /// The container id.
        id: String,
    },
    /// The runtime serves another hash than the one written.
    Hash {
        /// The container id.
        id: String,
        /// Which annotation (`hash` or `hashWithoutResources`).
        which: &'static str,
        /// What the runtime reports.
        found: Option<String>,
        /// What patch wrote.
        want: String,
    },
    /// It ran before and does not run now.
    NotRunning {
        /// The container id.
        id: String,
    },
    /// Its pid changed: it was restarted or recreated.
    PidChanged {
        /// The container id.
        id: String,
        /// The pid before the patch.
        before: u32,
        /// The pid now.
        now: Option<u32>,
    },
    /// cri-dockerd does not know the sandbox (`PodSandboxStatus` failed).
    SandboxMissing {
        /// The sandbox id.
        id: String,
        /// What cri-dockerd answered.
        reason: String,
    },
    /// cri-dockerd reports the sandbox not ready: the kubelet recreates the pod.
    SandboxNotReady {
        /// The sandbox id.
        id: String,
    },
    /// A sandbox with a network of its own has no IP, or another one than before.
    SandboxIp {
        /// The sandbox id.
        id: String,
        /// The pod's IP before (`status.podIP`), when known.
        before: Option<String>,
        /// What cri-dockerd reports (empty: none).
        now: String,
    },
}

impl std::fmt::Display for LiveProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LiveProblem::Missing { id } => {
                write!(f, "{id}: the runtime no longer lists this container")
            }
            LiveProblem::Hash {
                id,
                which,
                found,
                want,
            } => write!(
                f,
                "{id}: the runtime reports {which} {} instead of {want}",
                found.as_deref().unwrap_or("(none)")
            ),
            LiveProblem::NotRunning { id } => write!(
                f,
                "{id}: was running before the upgrade and is not running now"
            ),
            LiveProblem::PidChanged { id, before, now } => write!(
                f,
                "{id}: pid changed from {before} to {} (the container was recreated or restarted)",
                now.map(|p| p.to_string()).unwrap_or_else(|| "none".into())
            ),
            LiveProblem::SandboxMissing { id, reason } => {
                write!(f, "sandbox {id}: cri-dockerd does not report it: {reason}")
            }
            LiveProblem::SandboxNotReady { id } => write!(
                f,
                "sandbox {id}: cri-dockerd reports it not ready (the kubelet recreates the pod)"
            ),
            LiveProblem::SandboxIp { id, before, now } => match (before, now.is_empty()) {
                (_, true) => write!(
                    f,
                    "sandbox {id}: cri-dockerd reports no IP for a pod with a network of its own (the kubelet recreates the pod)"
                ),
                (Some(b), false) => write!(f, "sandbox {id}: IP {now}, was {b}"),
                (None, false) => write!(f, "sandbox {id}: IP {now}"),
            },
        }
    }
}

/// What [`verify_live`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveVerification {
    /// The endpoint that was asked.
    pub endpoint: String,
    /// How many rewritten containers were checked.
    pub checked: usize,
    /// Every disagreement; empty means verified.
    pub problems: Vec<LiveProblem>,
}

impl LiveVerification {
    /// Whether every rewritten container reports its target, runs, and kept its pid.
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Asks the restarted runtime about every container a patch rewrote, from the patch report
/// alone: the report names the runtime, its endpoint, the containers, their targets and pids.
/// `endpoint` overrides the report's. Refuses ([`Error::NothingToVerify`]) a report that is not
/// a patch report or rewrote nothing, rather than verify nothing.
pub fn verify_live(report: &Plan, endpoint: Option<&str>) -> Result<LiveVerification, Error> {
    if !report.is_patch_report() {
        return Err(Error::NothingToVerify(
            "the report is a plan, not a patch report: give the report `patch` wrote (--report, or report.json in the backup dir)".into(),
        ));
    }
    // After the dockershim → cri-dockerd switch every kept container matters, also those whose
    // hash the target computes alike (1.23 → 1.24 changes none of many specs): cri-dockerd must
    // adopt them all.
    let kept = |a: Action| {
        a == Action::Rewrite || (report.cri_dockerd.is_some() && a == Action::Unchanged)
    };
    let rewritten: Vec<_> = report
        .records
        .iter()
        .filter(|r| kept(r.action) && r.target_hash.is_some())
        .collect();
    if rewritten.is_empty() && report.cri_dockerd.is_none() {
        return Err(Error::NothingToVerify(
            "the patch report has no rewritten containers: there is nothing to verify live".into(),
        ));
    }
    if let Some(switch) = &report.cri_dockerd {
        let endpoint = endpoint.unwrap_or(&switch.endpoint);
        return verify_through_cri_dockerd(report, &rewritten, switch, endpoint);
    }
    let runtime = report.runtime.runtime();
    let endpoint = endpoint
        .map(str::to_string)
        .or_else(|| report.endpoint.clone())
        .unwrap_or_else(|| runtime.default_endpoint());
    let live: HashMap<String, storepatch::LiveContainer> = runtime
        .live_containers(&endpoint)?
        .into_iter()
        .map(|c| (c.id.clone(), c))
        .collect();
    Ok(LiveVerification {
        problems: container_problems(&rewritten, &live),
        endpoint,
        checked: rewritten.len(),
    })
}

/// After the dockershim → cri-dockerd switch the target kubelet talks to cri-dockerd, not to
/// dockerd: ask cri-dockerd over the CRI, as that kubelet will, for every rewritten container
/// and for `PodSandboxStatus` of every sandbox that ran (ready; an IP, the one the pod had,
/// for a pod with a network of its own).
#[cfg(feature = "live")]
fn verify_through_cri_dockerd(
    _report: &Plan,
    rewritten: &[&PlanRecord],
    switch: &CriDockerdSwitch,
    endpoint: &str,
) -> Result<LiveVerification, Error> {
    use storepatch::live::cri::CriClient;
    use storepatch::{HASH_ANNOTATION, HASH_WITHOUT_RESOURCES_ANNOTATION};
    let live_err = |e: String| {
        storepatch::StoreError::Live(format!("cannot ask cri-dockerd at {endpoint}: {e}"))
    };
    let client = CriClient::connect(endpoint).map_err(|e| live_err(e.to_string()))?;
    let live: HashMap<String, storepatch::LiveContainer> = client
        .list_containers()
        .map_err(|e| live_err(e.to_string()))?
        .into_iter()
        .map(|c| {
            let l = storepatch::LiveContainer {
                hash: c.annotations.get(HASH_ANNOTATION).cloned(),
                hash_without_resources: c
                    .annotations
                    .get(HASH_WITHOUT_RESOURCES_ANNOTATION)
                    .cloned(),
                running: c.state == "CONTAINER_RUNNING",
                pid: c.pid.filter(|p| *p != 0),
                id: c.id.clone(),
            };
            (c.id, l)
        })
        .collect();
    let mut problems = container_problems(rewritten, &live);
    for sb in &switch.sandboxes {
        let st = match client.pod_sandbox_status(&sb.id) {
            Ok(st) => st,
            Err(e) => {
                problems.push(LiveProblem::SandboxMissing {
                    id: sb.id.clone(),
                    reason: e.to_string(),
                });
                continue;
            }
        };
        if !st.ready {
            problems.push(LiveProblem::SandboxNotReady { id: sb.id.clone() });
        }
        if sb.host_network || st.host_network {
            continue;
        }
        let ip_ok = !st.ip.is_empty()
            && sb
                .pod_ip
                .as_ref()
                .is_none_or(|b| *b == st.ip || st.additional_ips.contains(b));
        if !ip_ok {
            problems.push(LiveProblem::SandboxIp {
                id: sb.id.clone(),
                before: sb.pod_ip.clone(),
                now: st.ip.clone(),
            });
        }
    }
    Ok(LiveVerification {
        endpoint: endpoint.to_string(),
        checked: rewritten.len() + switch.sandboxes.len(),
        problems,
    })
}

/// Without the `live` feature there is no CRI client: say so instead of checking nothing.
#[cfg(not(feature = "live"))]
fn verify_through_cri_dockerd(
    _report: &Plan,
    _rewritten: &[&PlanRecord],
    _switch: &CriDockerdSwitch,
    endpoint: &str,
) -> Result<LiveVerification, Error> {
    Err(storepatch::StoreError::Live(format!(
        "cannot ask cri-dockerd at {endpoint}: this build has no CRI client (feature `live`)"
    ))
    .into())
}

/// What is wrong with each rewritten container, by what the runtime reports.
fn container_problems(
    rewritten: &[&PlanRecord],
    live: &HashMap<String, storepatch::LiveContainer>,
) -> Vec<LiveProblem> {
    let mut problems = Vec::new();
    for r in rewritten {
        let id = r.id.clone();
        let Some(l) = live.get(&r.id) else {
            problems.push(LiveProblem::Missing { id });
            continue;
        };
        let want = r
            .target_hash
            .expect("only records with a target")
            .to_string();
        if l.hash.as_deref() != Some(want.as_str()) {
            problems.push(LiveProblem::Hash {
                id: id.clone(),
                which: "hash",
                found: l.hash.clone(),
                want,
            });
        }
        if let Some(t) = r.target_hash_without_resources {
            let want = t.to_string();
            if l.hash_without_resources.as_deref() != Some(want.as_str()) {
                problems.push(LiveProblem::Hash {
                    id: id.clone(),
                    which: "hashWithoutResources",
                    found: l.hash_without_resources.clone(),
                    want,
                });
            }
        }
        let was_running =
            r.state == Some(ContainerState::Running) || (r.state.is_none() && r.pid.is_some());
        if was_running && !l.running {
            problems.push(LiveProblem::NotRunning { id: id.clone() });
        }
        if let (true, Some(before)) = (was_running, r.pid) {
            if l.pid != Some(before) {
                problems.push(LiveProblem::PidChanged {
                    id,
                    before,
                    now: l.pid,
                });
            }
        }
    }
    problems
}

/// The socket path of a `unix://` endpoint (or a bare absolute path).
pub(crate) fn endpoint_socket(endpoint: &str) -> Option<std::path::PathBuf> {
    let path = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
    path.starts_with('/')
        .then(|| std::path::PathBuf::from(path))
}
