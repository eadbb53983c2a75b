//! `upgrade` and `rollback --state`: flags in, [`rehash::upgrade`] out, as lines or the state
//! JSON and an exit code. The workflow, the service control and the state file are the
//! library's.

use crate::render::Output;
use crate::{exit, parse_from, parse_version, write_report, Done, Failure, PlanFlags, StoreFlags};
use clap::Args;
use rehash::upgrade::{
    KubeletFlags, SystemNode, UpgradeOptions, UpgradeReport, UpgradeResult, DEFAULT_HEALTHZ,
};
use rehash::Plan;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The default state file on the node (under --host-root).
/// The largest `--budget`, seconds.
const MAX_BUDGET_S: f64 = 86_400.0;

const DEFAULT_STATE: &str = "/var/lib/kubelet-rehash/upgrade-state.json";

/// How the node's services are driven.
#[derive(Args, Clone)]
pub struct ServiceFlags {
    /// Shell command (`sh -c`) that stops the kubelet. Default: systemctl stop kubelet.
    #[arg(long, value_name = "CMD")]
    stop_kubelet: Option<String>,
    /// Shell command that starts the kubelet. Default: systemctl start kubelet.
    #[arg(long, value_name = "CMD")]
    start_kubelet: Option<String>,
    /// Shell command that stops the runtime (trusted to leave the containers running; their
    /// pids are checked after it). Default: systemctl stop <the runtime's unit>, after checking
    /// that the unit's KillMode is process or none; a Docker node switching to cri-dockerd
    /// stops cri-docker.socket and cri-docker.service first (a command given here must stop
    /// cri-dockerd too, and --start-runtime start it).
    #[arg(long, value_name = "CMD")]
    stop_runtime: Option<String>,
    /// Shell command that starts the runtime. Default: systemctl start <the runtime's unit>.
    #[arg(long, value_name = "CMD")]
    start_runtime: Option<String>,
    /// The runtime's systemd unit (default: containerd, crio or docker).
    #[arg(long, value_name = "UNIT")]
    runtime_unit: Option<String>,
    /// The running kubelet's pid file (default: the process named --kubelet-process).
    #[arg(long, value_name = "FILE")]
    kubelet_pidfile: Option<PathBuf>,
    /// The running kubelet's process name, as in /proc/PID/comm.
    #[arg(long, value_name = "NAME", default_value = "kubelet")]
    kubelet_process: String,
    /// The kubelet's health endpoint (plain http).
    #[arg(long, value_name = "URL", default_value = DEFAULT_HEALTHZ)]
    kubelet_healthz: String,
}

impl ServiceFlags {
    fn node(&self, kind: storepatch::RuntimeKind, host_root: Option<&Path>) -> SystemNode {
        let mut n = SystemNode::systemd(kind, host_root);
        if let Some(u) = &self.runtime_unit {
            n = SystemNode {
                stop_runtime: format!("{} stop {u}", n.systemctl),
                start_runtime: format!("{} start {u}", n.systemctl),
                runtime_unit: u.clone(),
                ..n
            };
        }
        if let Some(c) = &self.stop_kubelet {
            n.stop_kubelet = c.clone();
        }
        if let Some(c) = &self.start_kubelet {
            n.start_kubelet = c.clone();
        }
        if let Some(c) = &self.stop_runtime {
            n.stop_runtime = c.clone();
            n.runtime_commands_given = true;
            // the operator's commands are trusted to cover cri-dockerd too (docs/upgrade.md)
            n.stop_cri_dockerd = None;
            n.start_cri_dockerd = None;
        }
        if let Some(c) = &self.start_runtime {
            n.start_runtime = c.clone();
        }
        n.kubelet_pidfile = self.kubelet_pidfile.clone();
        n.kubelet_process = self.kubelet_process.clone();
        n
    }
}

/// `upgrade`'s own flags (besides those of `plan`).
#[derive(Args, Clone)]
pub struct UpgradeFlags {
    /// The new kubelet binary to install (checked first: its --version must be --to's minor,
    /// and it must accept the running kubelet's command line).
    #[arg(long, value_name = "NEW")]
    kubelet_binary: Option<PathBuf>,
    /// How many seconds the kubelet may be down (default 40; 50 for --to 1.32 and newer).
    #[arg(long, value_name = "SECONDS")]
    budget: Option<f64>,
    /// The state file, rewritten atomically at every step (docs/upgrade.md); a run killed
    /// mid-window is finished by the next `upgrade` or `rollback --state` given the same file.
    /// Default /var/lib/kubelet-rehash/upgrade-state.json (under --host-root).
    #[arg(long, value_name = "FILE")]
    state: Option<PathBuf>,
    /// Also write the patch report here (docs/report.md).
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
    /// This run's backups: the store's in DIR/store, the old kubelet in DIR/kubelet (must not
    /// exist or be empty). Default: /var/lib/kubelet-rehash/backups/<runtime>-<unix time>.
    #[arg(long, value_name = "DIR")]
    backup_dir: Option<PathBuf>,
    /// A Docker node switching to cri-dockerd (kubelet 1.23 or older to 1.24 or newer): the
    /// kubelet flag file to rewrite (a `NAME="--flag ..."` EnvironmentFile of the kubelet's
    /// unit; repeatable): the removed dockershim flags dropped, cri-dockerd's endpoint set;
    /// the original goes into the backup and back when the window fails. Default: those of
    /// /var/lib/kubelet/kubeadm-flags.env, /etc/default/kubelet, /etc/sysconfig/kubelet that
    /// exist (under --host-root).
    #[arg(long, value_name = "FILE", conflicts_with = "keep_kubelet_flags")]
    kubelet_flags_file: Vec<PathBuf>,
    /// A Docker node switching to cri-dockerd: leave the kubelet's flags alone (they are
    /// managed elsewhere); the new kubelet binary is checked with the running kubelet's
    /// command line as it is.
    #[arg(long)]
    keep_kubelet_flags: bool,
    /// Go on when the plan says some containers restart anyway (else exit 4, nothing stopped),
    /// pods the new kubelet rejects at admission included (hazard
    /// kubelet-rejects-pod-at-admission; else exit 3, nothing stopped).
    #[arg(long)]
    accept_restarts: bool,
    /// As for `patch`: move checkpoints the target kubelet rejects into the backup.
    #[arg(long)]
    set_aside_checkpoints: bool,
    /// Runtime API endpoint for the live verification (default: the store's; a Docker node
    /// switching to cri-dockerd is verified at --cri-dockerd-endpoint).
    #[arg(long)]
    endpoint: Option<String>,
    /// Do not renew the node's heartbeat while the kubelet is down: the node goes NotReady
    /// (and its pods leave the endpoints) if the window outlasts the grace period, and the
    /// budget defaults to that grace period.
    #[arg(long)]
    no_hold_ready: bool,
    /// Renew the node's heartbeat (holding it Ready) for at most this many seconds after the
    /// kubelet's stop; the budget defaults to it while holding.
    #[arg(long, value_name = "SECONDS", default_value_t = 300.0)]
    hold_ready_max: f64,
    /// What to renew: the node's Lease (auto: when it has one) or its Ready condition's
    /// lastHeartbeatTime (clusters without node leases).
    #[arg(long, value_enum, default_value_t = crate::hold_ready::Via::Auto)]
    hold_ready_via: crate::hold_ready::Via,
    #[command(flatten)]
    services: ServiceFlags,
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Whether SIGINT or SIGTERM came.
pub(crate) fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// SIGINT and SIGTERM only raise the flag the library checks: inside the window the run goes
/// back to a safe state, and a second signal changes nothing.
pub(crate) fn catch_signals() {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
}

pub(crate) fn node_path(store: &StoreFlags, path: &Path) -> Result<PathBuf, Failure> {
    let location = store.location()?;
    location
        .host()
        .map_err(Failure::from)?
        .resolve(path)
        .map_err(|e| Failure::usage(format!("{} under the host root: {e}", path.display())))
}

/// The node's heartbeat to hold it Ready with, unless --no-hold-ready; none (said on stderr)
/// where no kubeconfig is at hand: the window must then fit the grace period.
fn hold_ready(
    plan: &PlanFlags,
    f: &UpgradeFlags,
    host_root: Option<&Path>,
) -> Result<Option<rehash::upgrade::HoldReady>, Failure> {
    if f.no_hold_ready {
        return Ok(None);
    }
    let Some(c) = plan.source.connect(host_root, false)? else {
        eprintln!("kubelet-rehash: not holding the node Ready: no --kubeconfig and no kubelet kubeconfig on this node; the window must fit the grace period (--no-hold-ready says so on purpose)");
        return Ok(None);
    };
    let hb =
        crate::hold_ready::heartbeat(c.api, &c.node, f.hold_ready_via).map_err(|e| Failure {
            code: exit::REFUSED,
            msg: format!("cannot hold the node Ready: {e}; nothing stopped"),
        })?;
    Ok(Some(rehash::upgrade::HoldReady {
        heartbeat: std::sync::Arc::new(std::sync::Mutex::new(hb)),
        max: Duration::from_secs_f64(f.hold_ready_max),
    }))
}

pub fn cmd_upgrade(
    plan: &PlanFlags,
    f: &UpgradeFlags,
    output: Output,
    out: &mut dyn Write,
) -> Done {
    let to = parse_version("--to", &plan.to)?;
    let from = parse_from(&plan.from)?;
    if let Some(b) = f.budget {
        // a day is far past any grace period; beyond it a Duration can overflow (1e30 panicked)
        if !(b.is_finite() && b > 0.0 && b <= MAX_BUDGET_S) {
            return Err(Failure::usage(format!(
                "--budget: a positive number of seconds, at most {MAX_BUDGET_S} (a day)"
            )));
        }
    }
    if f.services.stop_runtime.is_some() != f.services.start_runtime.is_some()
        || f.services.stop_kubelet.is_some() != f.services.start_kubelet.is_some()
    {
        return Err(Failure::usage(
            "--stop-runtime and --start-runtime (and --stop-kubelet and --start-kubelet) go together",
        ));
    }
    if !f.services.kubelet_healthz.starts_with("http://") {
        return Err(Failure::usage(
            "--kubelet-healthz: a plain http:// URL (the kubelet's healthz port)",
        ));
    }
    if let Some(path) = &f.report {
        crate::refuse_report_symlink(path)?;
    }
    if !(f.hold_ready_max.is_finite() && f.hold_ready_max > 0.0 && f.hold_ready_max <= MAX_BUDGET_S)
    {
        return Err(Failure::usage(format!(
            "--hold-ready-max: a positive number of seconds, at most {MAX_BUDGET_S} (a day)"
        )));
    }
    let mut node_files = plan.node.read(&plan.store)?;
    node_files.pin_static_pod_uids = plan.pin_uids(true);
    let cri_dockerd = plan.node.switch_options(&plan.store)?;
    let location = plan.store.location()?;
    let kind = location.open()?.kind();
    // the kubelet this upgrade stops, by its pid file when given: its flags are the new one's
    if let Some(pidfile) = &f.services.kubelet_pidfile {
        node_files.kubelet_args = location
            .host_root
            .is_none()
            .then(|| rehash::node::running_kubelet_args(Path::new("/proc"), Some(pidfile)))
            .flatten();
    }
    let crate::api_pods::Pods {
        bytes: pods,
        api,
        node: served,
    } = plan.source.read(location.host_root.as_deref(), false)?;
    if api.is_none() {
        node_files.installed_kubelet = plan.node.installed_kubelet(&plan.store)?;
    }
    node_files.api = api;
    crate::adopt_served_node(&mut node_files, served)?;
    let hold_ready = hold_ready(plan, f, location.host_root.as_deref())?;
    let backup_dir = match &f.backup_dir {
        Some(d) => d.clone(),
        None => location.default_backup_dir(kind)?,
    };
    let state_path = match &f.state {
        Some(s) => s.clone(),
        None => node_path(&plan.store, Path::new(DEFAULT_STATE))?,
    };
    let kubelet_path = node_path(&plan.store, &plan.node.kubelet_path)?;
    let node = f.services.node(kind, location.host_root.as_deref());
    let kubelet_flags = if f.keep_kubelet_flags {
        KubeletFlags::Keep
    } else if f.kubelet_flags_file.is_empty() {
        KubeletFlags::NodeFiles
    } else {
        KubeletFlags::Files(
            f.kubelet_flags_file
                .iter()
                .map(|p| node_path(&plan.store, p))
                .collect::<Result<_, _>>()?,
        )
    };
    let opts = UpgradeOptions {
        pods,
        from,
        to,
        location,
        node_files,
        backup_dir,
        set_aside_checkpoints: f.set_aside_checkpoints,
        kubelet_path,
        new_kubelet: f.kubelet_binary.clone(),
        budget: f.budget.map(Duration::from_secs_f64),
        state_path: state_path.clone(),
        healthz: f.services.kubelet_healthz.clone(),
        accept_restarts: f.accept_restarts,
        endpoint: f.endpoint.clone(),
        cri_dockerd,
        kubelet_flags,
        interrupt: &INTERRUPTED,
        hold_ready,
    };
    catch_signals();
    let report = rehash::upgrade(&opts, &node)?;
    if let (Some(path), Some(rep)) = (&f.report, &report.state.report) {
        if let Ok(bytes) = std::fs::read(rep) {
            if let Ok(plan) = Plan::from_json(&bytes) {
                write_report(path, &plan)?;
            }
        }
    }
    render(&report, &state_path, output, out)
}

pub fn cmd_rollback_state(
    state: &Path,
    store: &StoreFlags,
    services: &ServiceFlags,
    out: &mut dyn Write,
) -> Done {
    let prev = rehash::UpgradeState::read(state)?.ok_or_else(|| {
        Failure::usage(format!("--state {}: no such state file", state.display()))
    })?;
    let location = store.location()?;
    let node = services.node(prev.runtime, location.host_root.as_deref());
    catch_signals();
    let report = rehash::upgrade::rollback_state(
        state,
        &location,
        &services.kubelet_healthz,
        &node,
        &INTERRUPTED,
    )?;
    render(&report, state, Output::Table, out)
}

fn render(report: &UpgradeReport, state_path: &Path, output: Output, out: &mut dyn Write) -> Done {
    let s = &report.state;
    match output {
        Output::Json => {
            out.write_all(&s.to_json()).map_err(Failure::output)?;
            writeln!(out).map_err(Failure::output)?;
        }
        Output::Table => {
            for st in &s.steps {
                writeln!(
                    out,
                    "{:<22} {:>9} {:?}{}",
                    format!("{:?}", st.step),
                    st.duration_ms
                        .map(|d| format!("{d:.0} ms"))
                        .unwrap_or_else(|| "-".into()),
                    st.outcome,
                    st.error
                        .as_deref()
                        .map(|e| format!(": {e}"))
                        .unwrap_or_default()
                )
                .map_err(Failure::output)?;
            }
            let fmt = |v: Option<f64>| {
                v.map(|d| format!("{:.1} s", d / 1e3))
                    .unwrap_or_else(|| "-".into())
            };
            writeln!(
                out,
                "kubelet down {}, runtime down {}, budget {:.0} s; state in {}",
                fmt(s.kubelet_down_ms),
                fmt(s.runtime_down_ms),
                s.budget_s,
                state_path.display()
            )
            .map_err(Failure::output)?;
            if let Some(h) = &s.hold_ready {
                let failed = h.renewals.iter().filter(|r| r.error.is_some()).count();
                writeln!(
                    out,
                    "held Ready: {} renewal(s) of the {}{}; ended {}",
                    h.renewals.len() - failed,
                    h.what,
                    if failed > 0 {
                        format!(" ({failed} failed)")
                    } else {
                        String::new()
                    },
                    match (&h.ended, &h.ended_because) {
                        (Some(e), Some(why)) => format!("{e:?}: {why}"),
                        _ => "-".into(),
                    }
                )
                .map_err(Failure::output)?;
            }
        }
    }
    let (code, line) = match &report.result {
        UpgradeResult::Done => (
            exit::OK,
            format!(
                "upgraded to kubelet {}: {} container(s) rewritten, verified live",
                s.to, s.rewritten
            ),
        ),
        UpgradeResult::Refused(why) => (exit::REFUSED, format!("refused, nothing stopped: {why}")),
        UpgradeResult::RestartsNotAccepted(why) => (exit::INCOMPLETE, why.clone()),
        UpgradeResult::RolledBack { step, cause } => (
            exit::REFUSED,
            format!(
                "{step:?} failed: {cause}; rolled back: the runtime and the old kubelet run again"
            ),
        ),
        UpgradeResult::Failed { step, cause } => (
            exit::FAILURE,
            format!("{step:?} failed: {cause}; see {}", state_path.display()),
        ),
    };
    eprintln!("kubelet-rehash: {line}");
    Ok(code)
}
