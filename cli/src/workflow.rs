//! plan → patch → verify → rollback for one node.

use crate::exit;
use crate::plan::{self, Action, FromVersion, Plan, PlanError, PlanInput};
use crate::pods::PodIndex;
use hashcompat::KubeletVersion;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;
use storepatch::containerd::{ContainerdOptions, ContainerdStore};
use storepatch::crio::{CrioOptions, CrioStore};
use storepatch::docker::{DockerOptions, DockerStore};
use storepatch::{RuntimeKind, RuntimeStore, StoreError};

/// A failure with the exit code it maps to.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub msg: String,
}

impl Failure {
    pub fn new(code: u8, msg: impl Into<String>) -> Self {
        Failure {
            code,
            msg: msg.into(),
        }
    }
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        let code = if e.is_refusal() {
            exit::REFUSED
        } else {
            exit::FAILURE
        };
        Failure::new(code, e.to_string())
    }
}

impl From<PlanError> for Failure {
    fn from(e: PlanError) -> Self {
        match e {
            PlanError::Usage(m) => Failure::new(exit::USAGE, m),
            PlanError::Refused(m) => Failure::new(exit::REFUSED, m),
        }
    }
}

/// Where the store is and how to tell whether its runtime runs.
#[derive(Debug, Clone, Default)]
pub struct StoreArgs {
    pub runtime: Option<String>,
    pub root: Option<PathBuf>,
    /// The runtime's API socket (running check; also `verify --live` default endpoint).
    pub runtime_socket: Option<PathBuf>,
    /// dockerd/crio pid file (running check).
    pub runtime_pidfile: Option<PathBuf>,
    /// Docker: `--live-restore` as given to dockerd (overrides daemon.json).
    pub live_restore: Option<bool>,
    pub daemon_json: Option<PathBuf>,
    /// CRI-O runroot.
    pub runroot: Option<PathBuf>,
}

const DEFAULT_ROOTS: [(RuntimeKind, &str); 3] = [
    (RuntimeKind::Containerd, "/var/lib/containerd"),
    (RuntimeKind::Docker, "/var/lib/docker"),
    (RuntimeKind::Crio, "/var/lib/containers/storage"),
];

fn looks_like(kind: RuntimeKind, root: &Path) -> bool {
    match kind {
        RuntimeKind::Containerd => root.join(storepatch::containerd::META_DB).is_file(),
        RuntimeKind::Docker => root.join("containers").is_dir(),
        RuntimeKind::Crio => root.join("overlay-containers").is_dir(),
    }
}

pub fn parse_runtime(s: &str) -> Result<RuntimeKind, Failure> {
    match s {
        "docker" | "dockershim" | "cri-dockerd" => Ok(RuntimeKind::Docker),
        "containerd" => Ok(RuntimeKind::Containerd),
        "crio" | "cri-o" => Ok(RuntimeKind::Crio),
        other => Err(Failure::new(
            exit::USAGE,
            format!("--runtime {other:?}: expected docker, containerd or crio"),
        )),
    }
}

/// Opens the store named by the flags, detecting the runtime from the root's layout when
/// `--runtime` is absent.
pub fn open_store(a: &StoreArgs) -> Result<Box<dyn RuntimeStore>, Failure> {
    let kind = a.runtime.as_deref().map(parse_runtime).transpose()?;
    let (kind, root) = match (kind, &a.root) {
        (Some(k), Some(r)) => (k, r.clone()),
        (Some(k), None) => (
            k,
            PathBuf::from(
                DEFAULT_ROOTS
                    .iter()
                    .find(|(d, _)| *d == k)
                    .expect("all kinds")
                    .1,
            ),
        ),
        (None, Some(r)) => {
            let k = DEFAULT_ROOTS
                .iter()
                .map(|(k, _)| *k)
                .find(|k| looks_like(*k, r))
                .ok_or_else(|| {
                    Failure::new(
                        exit::USAGE,
                        format!(
                            "{} is not a containerd root (no {}), a Docker data-root (no containers/) or a CRI-O graphroot (no overlay-containers/); give --runtime",
                            r.display(),
                            storepatch::containerd::META_DB
                        ),
                    )
                })?;
            (k, r.clone())
        }
        (None, None) => {
            let found: Vec<_> = DEFAULT_ROOTS
                .iter()
                .filter(|(k, r)| looks_like(*k, Path::new(r)))
                .collect();
            match found.as_slice() {
                [(k, r)] => (*k, PathBuf::from(r)),
                [] => {
                    return Err(Failure::new(
                        exit::USAGE,
                        "no runtime store found at /var/lib/containerd, /var/lib/docker or /var/lib/containers/storage; give --runtime and --root",
                    ))
                }
                _ => {
                    return Err(Failure::new(
                        exit::USAGE,
                        "more than one runtime store on this node; give --runtime",
                    ))
                }
            }
        }
    };
    if !root.is_dir() {
        return Err(Failure::new(
            exit::USAGE,
            format!(
                "store root {} does not exist or is not a directory",
                root.display()
            ),
        ));
    }
    let store: Box<dyn RuntimeStore> = match kind {
        RuntimeKind::Docker => {
            let mut o = DockerOptions::default();
            if let Some(p) = &a.runtime_pidfile {
                o.pidfile = p.clone();
            }
            if let Some(s) = &a.runtime_socket {
                o.socket = s.clone();
            }
            if let Some(d) = &a.daemon_json {
                o.daemon_json = d.clone();
            }
            o.live_restore = a.live_restore;
            Box::new(DockerStore::with_options(&root, o)?)
        }
        RuntimeKind::Containerd => Box::new(ContainerdStore::with_options(
            &root,
            ContainerdOptions {
                socket: a.runtime_socket.clone(),
            },
        )?),
        RuntimeKind::Crio => Box::new(CrioStore::with_options(
            &root,
            CrioOptions {
                runroot: a.runroot.clone(),
                socket: a.runtime_socket.clone(),
                pidfile: a.runtime_pidfile.clone(),
            },
        )?),
    };
    Ok(store)
}

/// Docker with live-restore *known* to be off (`--live-restore false`, or daemon.json saying
/// `"live-restore": false`): stopping dockerd has already killed every container, and its
/// restart recreates nothing the kubelet would adopt. Refuse rather than pretend to help.
/// When it is only unknown (no daemon.json, dockerd stopped so its flags cannot be read), the
/// plan's loud warning stands and the patch goes on: the operator stopped dockerd knowingly.
fn precheck_live_restore(store: &dyn RuntimeStore, a: &StoreArgs) -> Result<(), Failure> {
    if store.kind() != RuntimeKind::Docker {
        return Ok(());
    }
    let daemon_json = a
        .daemon_json
        .clone()
        .unwrap_or_else(|| DockerOptions::default().daemon_json);
    let configured_off = std::fs::read(&daemon_json)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v.get("live-restore").and_then(|x| x.as_bool()))
        == Some(false);
    let source = match a.live_restore {
        Some(false) => Some("--live-restore false".to_string()),
        Some(true) => None,
        None if configured_off => Some(format!(
            "{} says \"live-restore\": false",
            daemon_json.display()
        )),
        None => None,
    };
    match source {
        Some(src) => Err(Failure::new(
            exit::REFUSED,
            format!(
                "refused: dockerd live-restore is off ({src}); stopping dockerd kills every container, so there is nothing to keep. If dockerd does run with --live-restore, say so with --live-restore true"
            ),
        )),
        None => Ok(()),
    }
}

/// Everything `plan`, `patch` and `verify` share.
pub struct PlanArgs {
    pub pods: PathBuf,
    pub to: String,
    pub from: String,
    pub store: StoreArgs,
}

pub fn read_pods(path: &Path) -> Result<Vec<u8>, Failure> {
    if path.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf)
            .map_err(|e| Failure::new(exit::USAGE, format!("cannot read pods from stdin: {e}")))?;
        return Ok(buf);
    }
    std::fs::read(path).map_err(|e| {
        Failure::new(
            exit::USAGE,
            format!("cannot read pods file {}: {e}", path.display()),
        )
    })
}

fn parse_version(flag: &str, s: &str) -> Result<KubeletVersion, Failure> {
    s.parse()
        .map_err(|e| Failure::new(exit::USAGE, format!("{flag}: {e}")))
}

/// Scans the store and plans. Returns the store too, for `patch`.
pub fn build_plan(args: &PlanArgs) -> Result<(Box<dyn RuntimeStore>, Plan), Failure> {
    let t0 = Instant::now();
    let to = parse_version("--to", &args.to)?;
    let from = if args.from == "auto" {
        FromVersion::Auto
    } else {
        FromVersion::Version(parse_version("--from", &args.from)?)
    };
    let pods_bytes = read_pods(&args.pods)?;
    let pods =
        PodIndex::parse(&pods_bytes).map_err(|e| Failure::new(exit::USAGE, e.to_string()))?;
    let store = open_store(&args.store)?;
    let t_scan = Instant::now();
    let scan = store.scan()?;
    let scan_ms = t_scan.elapsed().as_secs_f64() * 1e3;
    let mut plan = plan::make_plan(&PlanInput {
        pods: &pods,
        scan: &scan,
        runtime: store.kind(),
        root: store.root().display().to_string(),
        from,
        to,
    })?;
    plan.timings.scan_ms = scan_ms;
    plan.timings.total_ms = t0.elapsed().as_secs_f64() * 1e3;
    Ok((store, plan))
}

/// Human-readable table.
pub fn render_table(plan: &Plan, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        out,
        "runtime {} at {}; kubelet {} → {}",
        plan.runtime.name(),
        plan.root,
        plan.from
            .map(|v| v.to_string())
            .unwrap_or_else(|| "?".into()),
        plan.to
    )?;
    if plan.from_candidates.len() > 1 {
        writeln!(
            out,
            "(stored hashes are consistent with kubelet {}; they all hash these containers alike)",
            plan::ranges(&plan.from_candidates.iter().copied().collect())
        )?;
    }
    writeln!(
        out,
        "{:<14} {:<36} {:<18} {:<9} {:<9} {:<9} {:<12} REASON",
        "ID", "POD", "CONTAINER", "STORED", "FROM", "TARGET", "ACTION"
    )?;
    let mut rows: Vec<_> = plan.records.iter().collect();
    rows.sort_by(|a, b| {
        (
            a.namespace.as_deref(),
            a.pod.as_deref(),
            a.kind,
            a.container.as_deref(),
            a.attempt,
        )
            .cmp(&(
                b.namespace.as_deref(),
                b.pod.as_deref(),
                b.kind,
                b.container.as_deref(),
                b.attempt,
            ))
    });
    for r in rows {
        let pod = match (&r.namespace, &r.pod) {
            (Some(n), Some(p)) => format!("{n}/{p}"),
            _ => "-".into(),
        };
        let action = serde_json::to_value(r.action)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        writeln!(
            out,
            "{:<14} {:<36} {:<18} {:<9} {:<9} {:<9} {:<12} {}",
            &r.id[..r.id.len().min(12)],
            truncate(&pod, 36),
            truncate(r.container.as_deref().unwrap_or("-"), 18),
            r.stored_hash.as_deref().unwrap_or("-"),
            r.from_hash.as_deref().unwrap_or("-"),
            r.target_hash.as_deref().unwrap_or("-"),
            action,
            r.reason
        )?;
    }
    for w in &plan.warnings {
        writeln!(out, "WARNING: {w}")?;
    }
    writeln!(out, "{}", plan.summary.sentence)
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}

pub fn write_plan(plan: &Plan, output: &str, out: &mut dyn Write) -> Result<(), Failure> {
    let r = match output {
        "json" => serde_json::to_writer_pretty(&mut *out, plan)
            .map_err(std::io::Error::other)
            .and_then(|_| writeln!(out)),
        _ => render_table(plan, out),
    };
    r.map_err(|e| Failure::new(exit::FAILURE, format!("cannot write output: {e}")))
}

fn plan_exit(plan: &Plan) -> u8 {
    if plan.summary.would_restart_after_rewrite > 0 {
        exit::INCOMPLETE
    } else {
        exit::OK
    }
}

pub fn cmd_plan(args: &PlanArgs, output: &str, out: &mut dyn Write) -> Result<u8, Failure> {
    let (_, plan) = build_plan(args)?;
    write_plan(&plan, output, out)?;
    Ok(plan_exit(&plan))
}

fn default_backup_dir(runtime: RuntimeKind) -> PathBuf {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    PathBuf::from(format!(
        "/var/lib/kubelet-rehash/backups/{}-{secs}",
        runtime.name()
    ))
}

pub struct PatchArgs {
    pub plan: PlanArgs,
    pub backup_dir: Option<PathBuf>,
    pub report: Option<PathBuf>,
    pub dry_run: bool,
}

/// Plan, refuse while the runtime runs, back up, rewrite, re-scan and verify, report.
pub fn cmd_patch(args: &PatchArgs, output: &str, out: &mut dyn Write) -> Result<u8, Failure> {
    let t0 = Instant::now();
    let (store, mut plan) = build_plan(&args.plan)?;
    let rewrites = plan::rewrites(&plan);
    if args.dry_run {
        write_plan(&plan, output, out)?;
        return Ok(plan_exit(&plan));
    }
    store.ensure_stopped()?;
    precheck_live_restore(store.as_ref(), &args.plan.store)?;
    let swept = store.sweep_stale_temps()?;
    if swept > 0 {
        eprintln!(
            "kubelet-rehash: removed {swept} temp file(s) an interrupted earlier run left behind"
        );
    }
    if rewrites.is_empty() {
        eprintln!("kubelet-rehash: nothing to rewrite: every proven container already holds its target hash");
    } else {
        let dir = args
            .backup_dir
            .clone()
            .unwrap_or_else(|| default_backup_dir(store.kind()));
        let t_apply = Instant::now();
        let progress = crate::progress::Progress::start(rewrites.len());
        let mut backup =
            storepatch::backup::Backup::create(&dir, store.kind().name(), store.root())?;
        let outcome = store.apply(&rewrites, &mut backup)?;
        progress.finish(outcome.changed.len());
        plan.timings.backup_and_apply_ms = Some(t_apply.elapsed().as_secs_f64() * 1e3);
        plan.backup_dir = Some(dir.display().to_string());
        // Read back what the runtime will read: every rewrite must now hold its target.
        let t_verify = Instant::now();
        let after = store.scan()?;
        let by_id: std::collections::HashMap<&str, &storepatch::StoreRecord> =
            after.records.iter().map(|r| (r.id.as_str(), r)).collect();
        let mut bad = Vec::new();
        for rw in &rewrites {
            let r = by_id.get(rw.id.as_str());
            let ok = r.is_some_and(|r| {
                r.hash.as_deref() == Some(rw.hash.as_str())
                    && (rw.hash_without_resources.is_none()
                        || r.hash_without_resources == rw.hash_without_resources)
            });
            if !ok {
                bad.push(rw.id.clone());
            }
        }
        plan.timings.verify_ms = Some(t_verify.elapsed().as_secs_f64() * 1e3);
        plan.timings.total_ms = t0.elapsed().as_secs_f64() * 1e3;
        let report = serde_json::to_vec_pretty(&plan).expect("plan serialises");
        backup.attach("report.json", &report)?;
        if !bad.is_empty() {
            return Err(Failure::new(
                exit::FAILURE,
                format!(
                    "after the rewrite {} record(s) do not hold their target hash: {}; roll back with `kubelet-rehash rollback --backup-dir {}`",
                    bad.len(),
                    bad.join(", "),
                    dir.display()
                ),
            ));
        }
        eprintln!(
            "kubelet-rehash: rewrote {} container(s) ({} already current); backup and report in {}",
            outcome.changed.len(),
            outcome.already.len(),
            dir.display()
        );
    }
    plan.timings.total_ms = t0.elapsed().as_secs_f64() * 1e3;
    if let Some(path) = &args.report {
        let report = serde_json::to_vec_pretty(&plan).expect("plan serialises");
        std::fs::write(path, report).map_err(|e| {
            Failure::new(
                exit::FAILURE,
                format!("cannot write report {}: {e}", path.display()),
            )
        })?;
    }
    write_plan(&plan, output, out)?;
    Ok(plan_exit(&plan))
}

pub struct VerifyArgs {
    pub plan: PlanArgs,
    pub live: bool,
    pub endpoint: Option<String>,
    pub report: Option<PathBuf>,
}

/// Offline: every proven container now holds its target. Live: the restarted runtime reports
/// the target hash for every rewritten container, it runs, and kept its pid.
pub fn cmd_verify(args: &VerifyArgs, output: &str, out: &mut dyn Write) -> Result<u8, Failure> {
    if args.live {
        return crate::live::verify_live(args, out);
    }
    let (_, plan) = build_plan(&args.plan)?;
    let pending: Vec<_> = plan
        .records
        .iter()
        .filter(|r| r.action == Action::Rewrite)
        .collect();
    write_plan(&plan, output, out)?;
    if pending.is_empty() {
        eprintln!(
            "kubelet-rehash: verified: every proven container holds its kubelet {} hash",
            plan.to
        );
        Ok(exit::OK)
    } else {
        eprintln!(
            "kubelet-rehash: {} container(s) do not hold their kubelet {} hash yet",
            pending.len(),
            plan.to
        );
        Ok(exit::INCOMPLETE)
    }
}

pub fn cmd_rollback(
    backup_dir: &Path,
    store_args: &StoreArgs,
    accept_unknown_new: bool,
    by_value: bool,
    out: &mut dyn Write,
) -> Result<u8, Failure> {
    let manifest = storepatch::backup::read_manifest(backup_dir)?;
    let mut sa = store_args.clone();
    sa.runtime.get_or_insert(manifest.runtime.clone());
    sa.root.get_or_insert(manifest.store_root.clone());
    let store = open_store(&sa)?;
    store.ensure_stopped()?;
    if by_value {
        return rollback_values(backup_dir, store.as_ref(), out);
    }
    let report = match storepatch::backup::rollback(backup_dir, accept_unknown_new) {
        Ok(r) => r,
        Err(e @ StoreError::RollbackConflict { .. }) => {
            return Err(Failure::new(
                exit::REFUSED,
                format!(
                    "{e}. If the runtime has run since the patch (containerd commits to meta.db at every start), `rollback --values --backup-dir {}` writes the old hash values back instead, after checking that every rewritten container still holds exactly the value we wrote",
                    backup_dir.display()
                ),
            ))
        }
        Err(e) => return Err(e.into()),
    };
    for (path, action) in &report.files {
        let a = match action {
            storepatch::backup::RollbackAction::Restored => "restored",
            storepatch::backup::RollbackAction::AlreadyOriginal => "already original",
        };
        writeln!(out, "{a}: {}", path.display())
            .map_err(|e| Failure::new(exit::FAILURE, e.to_string()))?;
    }
    Ok(exit::OK)
}

/// Value-level undo: for every container the patch rewrote (from the report in the backup
/// dir), check that the store still holds exactly the value we wrote, then write the old value
/// back through the normal apply path (with a backup of its own under `<dir>/undo-<time>`).
/// For stores the runtime has written to since the patch, where byte restore would lose the
/// runtime's own changes.
fn rollback_values(
    backup_dir: &Path,
    store: &dyn RuntimeStore,
    out: &mut dyn Write,
) -> Result<u8, Failure> {
    let report_path = backup_dir.join("report.json");
    let bytes = std::fs::read(&report_path).map_err(|e| {
        Failure::new(
            exit::REFUSED,
            format!(
                "{}: {e}: a value rollback needs the patch report",
                report_path.display()
            ),
        )
    })?;
    let report: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| {
        Failure::new(
            exit::REFUSED,
            format!("{}: not a patch report: {e}", report_path.display()),
        )
    })?;
    let scan = store.scan()?;
    let now: std::collections::HashMap<&str, &storepatch::StoreRecord> =
        scan.records.iter().map(|r| (r.id.as_str(), r)).collect();
    let mut undo = Vec::new();
    let mut already = 0;
    let mut conflicts = Vec::new();
    for r in report["records"].as_array().into_iter().flatten() {
        if r["action"] != "rewrite" {
            continue;
        }
        let id = r["id"].as_str().unwrap_or_default();
        let (Some(old), Some(new)) = (r["stored_hash"].as_str(), r["target_hash"].as_str()) else {
            conflicts.push(format!("{id}: the report lacks its hashes"));
            continue;
        };
        let old_wr = r["stored_hash_without_resources"].as_str();
        let new_wr = r["target_hash_without_resources"].as_str();
        let Some(cur) = now.get(id) else {
            conflicts.push(format!("{id}: no longer in the store"));
            continue;
        };
        let cur_h = cur.hash.as_deref();
        let cur_wr = cur.hash_without_resources.as_deref();
        if cur_h == Some(old) && (new_wr.is_none() || cur_wr == old_wr) {
            already += 1;
            continue;
        }
        if cur_h != Some(new) || (new_wr.is_some() && cur_wr != new_wr) {
            conflicts.push(format!(
                "{id}: holds {} but the patch wrote {new}: changed since, not ours to undo",
                cur_h.unwrap_or("(none)")
            ));
            continue;
        }
        undo.push(storepatch::Rewrite {
            id: id.to_string(),
            hash: old.to_string(),
            hash_without_resources: new_wr.and(old_wr).map(str::to_string),
        });
    }
    if !conflicts.is_empty() {
        return Err(Failure::new(
            exit::REFUSED,
            format!(
                "value rollback refused, nothing written: {}",
                conflicts.join("; ")
            ),
        ));
    }
    if !undo.is_empty() {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let dir = backup_dir.join(format!("undo-{secs}"));
        let mut backup =
            storepatch::backup::Backup::create(&dir, store.kind().name(), store.root())?;
        store.apply(&undo, &mut backup)?;
        writeln!(
            out,
            "restored the previous hash of {} container(s) ({already} already had it); backup of this undo in {}",
            undo.len(),
            dir.display()
        )
        .map_err(|e| Failure::new(exit::FAILURE, e.to_string()))?;
    } else {
        writeln!(
            out,
            "every rewritten container already holds its previous hash ({already})"
        )
        .map_err(|e| Failure::new(exit::FAILURE, e.to_string()))?;
    }
    Ok(exit::OK)
}
