//! The preflight, with nothing stopped: plan the node, refuse what the window could not undo
//! or would not fit in its budget, and stage the new kubelet beside the installed one so the
//! window's install is one rename.

use super::run::{binary_meta, first_few, Run};
use super::{Step, StepRecord};
use crate::error::{Error, ErrorClass};
use crate::hazard::Severity;
use crate::plan::{From, Plan};
use crate::pods::ContainerState;
use std::path::Path;
use std::time::{Duration, Instant};
use storepatch::RuntimeStore;

/// The switch's hazard for a cri-dockerd that answers (it must be stopped before the patch).
const CRI_DOCKERD_RUNNING: &str = "cri-dockerd-running";
/// A warning for `plan`/`patch` (cri-dockerd may be installed after the patch, before the new
/// kubelet starts), a refusal for `upgrade`: its window starts the new kubelet, which without
/// cri-dockerd finds no runtime, and its verify step could only fail after the node was down.
const CRI_DOCKERD_MISSING: &str = "cri-dockerd-missing";

/// Defaults when no earlier run measured this node: generous, so a first run is not refused
/// for times it has not seen.
const DEFAULT_STOP_KUBELET: Duration = Duration::from_secs(2);
const DEFAULT_STOP_RUNTIME: Duration = Duration::from_secs(3);
const DEFAULT_START_RUNTIME: Duration = Duration::from_secs(5);
const DEFAULT_KUBELET_HEALTHY: Duration = Duration::from_secs(10);

/// How the preflight said no (nothing was stopped).
pub(super) enum Preflight {
    /// Not a refusal (a wrong request, or something broke): the run's `Err`, with the
    /// error's own class.
    Usage(Error),
    /// Refused (exit 3).
    Refused(String),
    /// The plan says some containers restart, and that was not accepted (exit 4).
    Restarts(String),
}

/// A refusal keeps the error's text; an error of any other class is the run's error.
impl std::convert::From<Error> for Preflight {
    fn from(e: Error) -> Self {
        match e.class() {
            ErrorClass::Refused => Preflight::Refused(e.to_string()),
            _ => Preflight::Usage(e),
        }
    }
}

impl Run<'_> {
    /// The preflight as one recorded step (`Preflight`), its refusal the step's error.
    pub(super) fn preflight(&mut self) -> Result<(), Preflight> {
        let t0 = Instant::now();
        self.state.steps.push(StepRecord::begin(Step::Preflight));
        self.save();
        let out = self.preflight_checks();
        let rec = self.state.steps.last_mut().expect("begun above");
        let err = match &out {
            Ok(()) => None,
            Err(Preflight::Usage(e)) => Some(e.to_string()),
            Err(Preflight::Refused(w)) | Err(Preflight::Restarts(w)) => Some(w.clone()),
        };
        rec.end(t0.elapsed(), err);
        self.save();
        out
    }

    fn preflight_checks(&mut self) -> Result<(), Preflight> {
        let refuse = |s: String| Err(Preflight::Refused(s));
        // Any error of the node's refuses here, whatever its class: nothing was stopped.
        self.node
            .before(Step::Preflight)
            .map_err(|e| Preflight::Refused(e.to_string()))?;
        if self.interrupted() {
            return refuse(
                "interrupted (SIGINT/SIGTERM) before the window; nothing stopped".into(),
            );
        }
        let plan = self.plan(self.opts.from).map_err(Preflight::from)?;
        self.state.from = plan.from;
        self.state.summary = Some(plan.summary.clone());
        self.state.hazards = plan
            .hazards
            .iter()
            .map(|h| format!("[{}] {}", h.code, h.message))
            .collect();
        self.save();
        let blocking: Vec<String> = plan
            .hazards
            .iter()
            .filter(|h| h.severity == Severity::Block || h.code == CRI_DOCKERD_MISSING)
            .filter(|h| !(self.opts.set_aside_checkpoints && h.code == "checkpoint-rejected"))
            // a pod the new kubelet rejects restarts like any container the plan counts:
            // --accept-restarts accepts both
            .filter(|h| !(self.opts.accept_restarts && h.code == crate::admission::REJECTED))
            // the window stops cri-dockerd with the runtime; the patch step's plan, made with
            // both stopped, refuses if it still answers
            .filter(|h| h.code != CRI_DOCKERD_RUNNING)
            .map(|h| format!("[{}] {}", h.code, h.message))
            .collect();
        if !blocking.is_empty() {
            return refuse(format!("block hazard(s): {}", blocking.join("; ")));
        }
        if plan.hazards.iter().any(|h| h.code == CRI_DOCKERD_RUNNING) {
            self.state.notes.push(
                "cri-dockerd answers now: the runtime's stop in the window stops it too".into(),
            );
        }
        let endpoint = self.endpoint();
        match self
            .node
            .runtime_keeps_containers(self.store.kind(), &endpoint)
        {
            Ok(how) => self
                .state
                .notes
                .push(format!("runtime stop keeps the containers: {how}")),
            Err(why) => return refuse(why.to_string()),
        }
        if let Err(e) = self.store.precheck() {
            return refuse(e.to_string());
        }
        self.kept_pids = kept_pids(&plan);
        let dead = self.dead_kept_containers();
        if !dead.is_empty() {
            return refuse(format!(
                "the runtime records {} running container(s) whose process does not exist: {}; is this the node's store, and is the pods file current?",
                dead.len(),
                first_few(&dead)
            ));
        }
        // Also watched from here on, by the window's check and the hold: the pods' sandboxes
        // and the unproven containers that run now. Their death in the window is the pod's
        // recreation by the new kubelet, which holding the node Ready must not hide. Only
        // those alive now: a store's record of one is not proof enough to refuse on.
        let also: Vec<(String, u32)> = also_watched(&plan.records)
            .into_iter()
            .filter(|(_, pid)| self.node.pid_alive(*pid))
            .collect();
        self.kept_pids.extend(also);
        let running: Option<Vec<String>> = self
            .node
            .kubelet_pid()
            .and_then(|pid| self.node.cmdline(pid))
            .map(|argv| argv.into_iter().skip(1).collect());
        let switched_args = self.plan_kubelet_flags(&plan, running.as_deref())?;
        self.check_new_kubelet(switched_args)?;
        if std::fs::read_dir(&self.opts.backup_dir).is_ok_and(|mut d| d.next().is_some()) {
            return refuse(format!(
                "the backup directory {} is not empty: give each run a new one",
                self.opts.backup_dir.display()
            ));
        }
        self.check_backup_room(&plan)?;
        if let Some(hold) = &self.opts.hold_ready {
            let mut hb = hold.heartbeat.lock().unwrap_or_else(|p| p.into_inner());
            match hb.check() {
                Ok(()) => self.state.notes.push(format!(
                    "holding the node Ready while the kubelet is down: renewing the {} every {:.0} s for at most {:.0} s (a dry-run renewal was allowed)",
                    hb.describe(),
                    hb.interval().as_secs_f64(),
                    hold.max.as_secs_f64()
                )),
                Err(e) => {
                    return refuse(format!(
                        "cannot hold the node Ready: {e}; nothing stopped (--no-hold-ready goes without, inside the grace period)"
                    ))
                }
            }
        }
        let predicted = self.predicted_window(&plan);
        self.state.predicted_window_s = Some(predicted.as_secs_f64());
        if predicted > self.budget {
            return refuse(format!(
                "the predicted kubelet-down window {:.1} s does not fit the budget {:.0} s ({})",
                predicted.as_secs_f64(),
                self.budget.as_secs_f64(),
                self.state.measured.describe()
            ));
        }
        self.preflight_restarts = plan.summary.would_restart_after_rewrite;
        if plan.incomplete() && !self.opts.accept_restarts {
            return Err(Preflight::Restarts(format!(
                "{}; nothing stopped (accept with --accept-restarts)",
                plan.summary.sentence
            )));
        }
        if let Some(new) = &self.opts.new_kubelet {
            // Written and fsynced now, with nothing stopped: a 100 MB binary costs the window
            // one rename instead of a copy.
            let staged = storepatch::atomic::read_regular_nofollow(new).and_then(|(bytes, _)| {
                storepatch::atomic::stage_file(&self.opts.kubelet_path, &bytes, binary_meta())
            });
            match staged {
                Ok(s) => self.staged_kubelet = Some(s),
                Err(e) => {
                    return refuse(format!(
                        "cannot stage the new kubelet beside {}: {e}",
                        self.opts.kubelet_path.display()
                    ))
                }
            }
        }
        Ok(())
    }

    /// The plan, and the dockershim → cri-dockerd switch when the node crosses 1.23 → 1.24
    /// (recorded in the state, and the node told: its runtime stop and start cover
    /// cri-dockerd from then on).
    pub(super) fn plan(&mut self, from: From) -> Result<Plan, Error> {
        let (mut plan, networks) = Plan::build_with_networks(
            &self.opts.pods,
            self.store,
            from,
            self.opts.to,
            &self.opts.node_files,
        )?;
        crate::cri_dockerd::plan_switch_with_networks(
            &mut plan,
            &networks,
            &self.opts.cri_dockerd,
        )?;
        if let Some(switch) = &plan.cri_dockerd {
            self.state.cri_dockerd_endpoint = Some(switch.endpoint.clone());
            self.node.switching_to_cri_dockerd();
        }
        Ok(plan)
    }

    /// The new binary reports `--to` and accepts the node's kubelet command line: the
    /// running one's, or `switched_args` (that one as the rewritten flag files give it).
    fn check_new_kubelet(&mut self, switched_args: Option<Vec<String>>) -> Result<(), Preflight> {
        let Some(new) = &self.opts.new_kubelet else {
            return Ok(());
        };
        let (ok, out) = self
            .node
            .run_binary(new, &["--version".to_string()])
            .map_err(|e| Preflight::Refused(format!("{} --version: {e}", new.display())))?;
        if !ok {
            return Err(Preflight::Refused(format!(
                "{} --version failed: {}",
                new.display(),
                out.trim()
            )));
        }
        match version_in(&out) {
            Some((1, minor)) if minor == self.opts.to.minor() => {}
            Some((major, minor)) => {
                return Err(Preflight::Refused(format!(
                    "{} is kubelet {major}.{minor}, not {} (--to)",
                    new.display(),
                    self.opts.to
                )))
            }
            None => {
                return Err(Preflight::Refused(format!(
                    "{} --version printed no kubelet version: {}",
                    new.display(),
                    out.trim()
                )))
            }
        }
        let Some(pid) = self.node.kubelet_pid() else {
            return Err(Preflight::Refused(
                "no single running kubelet found (none, or several processes named kubelet: another node's or a containerized one beside this node's), so its command line cannot be checked against the new binary: give this node's kubelet pid file (--kubelet-pidfile)".into(),
            ));
        };
        let Some(argv) = self.node.cmdline(pid) else {
            return Err(Preflight::Refused(format!(
                "cannot read the command line of the kubelet (pid {pid})"
            )));
        };
        let mut args: Vec<String> =
            switched_args.unwrap_or_else(|| argv.into_iter().skip(1).collect());
        args.push("--version".into());
        let (ok, out) = self
            .node
            .run_binary(new, &args)
            .map_err(|e| Preflight::Refused(format!("{}: {e}", new.display())))?;
        if !ok {
            return Err(Preflight::Refused(format!(
                "the new kubelet {} does not accept this node's kubelet command line (it would not start): {}",
                new.display(),
                out.trim()
            )));
        }
        self.state.notes.push(format!(
            "the new kubelet accepts the running kubelet's {} argument(s)",
            args.len() - 1
        ));
        Ok(())
    }

    fn check_backup_room(&mut self, plan: &Plan) -> Result<(), Preflight> {
        let mut need: u64 = 1 << 20;
        need += backup_estimate(self.store, plan);
        if self.opts.new_kubelet.is_some() {
            need += std::fs::metadata(&self.opts.kubelet_path)
                .map(|m| m.len())
                .unwrap_or(0);
        }
        let Some(free) = free_bytes(&self.opts.backup_dir) else {
            return Err(Preflight::Refused(format!(
                "cannot tell the free space for the backup at {}",
                self.opts.backup_dir.display()
            )));
        };
        self.state.notes.push(format!(
            "backup needs about {} KiB, {} KiB free",
            need / 1024,
            free / 1024
        ));
        if free < need {
            return Err(Preflight::Refused(format!(
                "no room for the backup at {}: about {} KiB needed, {} KiB free",
                self.opts.backup_dir.display(),
                need / 1024,
                free / 1024
            )));
        }
        Ok(())
    }

    /// The kubelet-down window: the services' stop and start times (measured by earlier runs
    /// in the state file, else the defaults) plus our own steps, scaled from this node's plan:
    /// backup and rewrite and read-back cost about as much again as the plan's scan, and the
    /// window plans once more.
    fn predicted_window(&self, plan: &Plan) -> Duration {
        let m = &self.state.measured;
        let ours = Duration::from_secs_f64(plan.timings.total_ms.max(1.0) * 3.0 / 1e3);
        let binary = if self.opts.new_kubelet.is_some() {
            Duration::from_millis(500)
        } else {
            Duration::ZERO
        };
        m.stop_kubelet(DEFAULT_STOP_KUBELET)
            + m.stop_runtime(DEFAULT_STOP_RUNTIME)
            + m.start_runtime(DEFAULT_START_RUNTIME)
            + m.kubelet_healthy(DEFAULT_KUBELET_HEALTHY)
            + ours
            + binary
    }
}

/// The containers that must outlive the window: every record the runtime says runs (pod
/// status, or a recorded pid when the status does not list it) whose hash is kept.
fn kept_pids(plan: &Plan) -> Vec<(String, u32)> {
    use crate::plan::Action;
    plan.records
        .iter()
        .filter(|r| matches!(r.action, Action::Rewrite | Action::Unchanged))
        .filter(|r| match r.state {
            Some(s) => s == ContainerState::Running,
            None => true,
        })
        .filter_map(|r| r.pid.filter(|p| *p > 0).map(|p| (r.id.clone(), p)))
        .collect()
}

/// The running pod sandboxes and unproven containers: not kept by the plan, but their
/// death in the window is a pod the new kubelet recreates.
fn also_watched(records: &[crate::report::PlanRecord]) -> Vec<(String, u32)> {
    use crate::plan::Action;
    records
        .iter()
        .filter(|r| matches!(r.action, Action::Sandbox | Action::Unproven))
        .filter(|r| match r.state {
            Some(s) => s == ContainerState::Running,
            None => true,
        })
        .filter_map(|r| r.pid.filter(|p| *p > 0).map(|p| (r.id.clone(), p)))
        .collect()
}

/// About how many bytes the store's backup takes, as its runtime estimates it
/// ([`storepatch::Runtime::backup_estimate`]).
fn backup_estimate(store: &dyn RuntimeStore, plan: &Plan) -> u64 {
    store
        .kind()
        .runtime()
        .backup_estimate(store.root(), plan.rewrites().len())
}

/// Free bytes on the file system `path` (or its nearest existing parent) is on.
fn free_bytes(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let mut p = path;
    while !p.exists() {
        p = p.parent()?;
    }
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs writes into the zeroed struct we pass; the path is NUL-terminated.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return None;
    }
    Some(s.f_bavail as u64 * s.f_frsize as u64)
}

/// `v1.31.2` (or `1.31`) in what `kubelet --version` printed: `Kubernetes v1.31.2`.
fn version_in(out: &str) -> Option<(u32, u32)> {
    out.split_whitespace().find_map(|w| {
        let w = w.trim_start_matches('v');
        let mut it = w.split('.');
        let major = it.next()?.parse().ok()?;
        let minor: String = it
            .next()?
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        Some((major, minor.parse().ok()?))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_sandboxes_and_unproven_containers_are_watched_too() {
        let record = |id: &str, kind: &str, action: &str, state: Option<&str>, pid: u32| {
            serde_json::from_value::<crate::report::PlanRecord>(serde_json::json!({
                "id": id, "kind": kind, "action": action, "state": state, "pid": pid,
                "reason": "", "would_restart_without_rewrite": false,
                "would_restart_after_rewrite": false,
            }))
            .unwrap()
        };
        let records = [
            record("pause", "sandbox", "sandbox", None, 10),
            record("odd", "container", "unproven", Some("running"), 11),
            record("done", "container", "unproven", Some("exited"), 12),
            record("kept", "container", "rewrite", Some("running"), 13),
            record("gone", "container", "orphan", Some("running"), 14),
            record("nopid", "sandbox", "sandbox", None, 0),
        ];
        assert_eq!(
            also_watched(&records),
            vec![("pause".to_string(), 10), ("odd".to_string(), 11)],
            "the running sandboxes and unproven containers are watched besides the kept ones"
        );
    }

    #[test]
    fn kubelet_version_output_is_read() {
        assert_eq!(version_in("Kubernetes v1.31.2\n"), Some((1, 31)));
        assert_eq!(version_in("Kubernetes v1.32.0-eks-abc"), Some((1, 32)));
        assert_eq!(version_in("nothing here"), None);
    }
}
