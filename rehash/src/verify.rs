//! verify: offline, every proven container now holds its target; live, the restarted runtime
//! reports the target hash for every rewritten container, which still runs with its pid.

use crate::error::Error;
use crate::plan::{Action, Plan};
use crate::pods::ContainerState;
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
    let rewritten: Vec<_> = report
        .records
        .iter()
        .filter(|r| r.action == Action::Rewrite)
        .collect();
    if rewritten.is_empty() {
        return Err(Error::NothingToVerify(
            "the patch report has no rewritten containers: there is nothing to verify live".into(),
        ));
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
    let mut problems = Vec::new();
    for r in &rewritten {
        let id = r.id.clone();
        let Some(l) = live.get(&r.id) else {
            problems.push(LiveProblem::Missing { id });
            continue;
        };
        let want = r.target_hash.expect("a rewrite has a target").to_string();
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
    Ok(LiveVerification {
        endpoint,
        checked: rewritten.len(),
        problems,
    })
}
