//! The dockershim → cri-dockerd switch: a Docker node whose kubelet goes from ≤ 1.23 (built-in
//! dockershim) to ≥ 1.24 (no dockershim) keeps its containers when the hashes are rewritten
//! *and* cri-dockerd (dockershim moved out of the kubelet; it reads the same Docker labels and
//! names) finds each running sandbox's checkpoint in its own root directory.
//!
//! [`plan_switch`] adds to a plan what the switch needs besides the hashes, as hazards with
//! codes (docs/report.md): the cri-dockerd binary and its version, the checkpoints to carry
//! over from dockershim's directory (default `/var/lib/dockershim/sandbox`, the kubelet's
//! `--experimental-dockershim-root-directory`) to cri-dockerd's (default
//! `/var/lib/cri-dockerd/sandbox`, its `--cri-dockerd-root-directory`), the running sandboxes
//! without one (their pods are recreated), and the kubelet flags that change. The plan records
//! the switch ([`CriDockerdSwitch`]); `patch` then copies every checkpoint (with the checksum
//! cri-dockerd computes: [`checkpoint`]) into cri-dockerd's root, listed in the backup so
//! `rollback` removes exactly those copies; the dockershim originals are never touched.
//! `verify --live` asks cri-dockerd over the CRI: every rewritten container's hash and pid, and
//! `PodSandboxStatus` of every sandbox (ready, and its IP when it has a network of its own).

pub mod checkpoint;
pub mod flags;

use crate::error::Error;
use crate::pods::PodNetworks;
use crate::report::{Plan, PlanRecord, RecordClass};
use checkpoint::{SandboxCheckpoint, Writer};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use storepatch::layout::HostRoot;
use storepatch::Hazard;

/// dockershim's checkpoint directory on a node (kubelet ≤ 1.23 default).
pub const DOCKERSHIM_SANDBOX_DIR: &str = "/var/lib/dockershim/sandbox";
/// cri-dockerd's default `--cri-dockerd-root-directory` (cri-dockerd 0.4.1
/// `cmd/cri/options/options.go`); its checkpoints are in `sandbox/` below it.
pub const CRI_DOCKERD_ROOT: &str = "/var/lib/cri-dockerd";
/// cri-dockerd's default `--container-runtime-endpoint`.
pub const CRI_DOCKERD_SOCKET: &str = "/var/run/cri-dockerd.sock";
/// Where the binary is looked for on the node when `--cri-dockerd` is not given (the package's
/// and the release tarball's install paths).
pub const BINARY_PATHS: [&str; 2] = ["/usr/bin/cri-dockerd", "/usr/local/bin/cri-dockerd"];
/// The backup's list of the checkpoints a patch copied (rollback removes them).
pub const COPIED_LIST: &str = "cri-dockerd-checkpoints.json";

/// The switch as the report records it lives with the report's other types; named here too,
/// where it has always been found.
pub use crate::report::{CarryOver, CriDockerdSwitch, ExpectedSandbox};

/// What the operator gives (each `None`: the node's default, under the host root).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SwitchOptions {
    /// The cri-dockerd binary the node will run (`--cri-dockerd`).
    pub binary: Option<PathBuf>,
    /// dockershim's checkpoint directory (`--dockershim-checkpoints`).
    pub dockershim_dir: Option<PathBuf>,
    /// cri-dockerd's root directory (`--cri-dockerd-root`).
    pub root: Option<PathBuf>,
    /// cri-dockerd's CRI endpoint, for `verify --live` (`--cri-dockerd-endpoint`).
    pub endpoint: Option<String>,
    /// The node's `/` (a privileged Job's `/host`).
    pub host_root: Option<PathBuf>,
}

/// Whether the switch applies: a store of a runtime behind dockershim (Docker) crossing from
/// ≤ 1.23 to ≥ 1.24.
pub fn applies(plan: &Plan) -> bool {
    plan.runtime.runtime().behind_dockershim()
        && plan.to.minor() >= 24
        && plan.from.is_some_and(|f| f.minor() < 24)
}

pub(crate) fn host(options: &SwitchOptions) -> Result<HostRoot, Error> {
    match &options.host_root {
        Some(dir) => HostRoot::new(dir).map_err(|e| Error::Checkpoint(e.to_string())),
        None => Ok(HostRoot::none()),
    }
}

pub(crate) fn resolve(host: &HostRoot, p: &str) -> Result<PathBuf, Error> {
    host.resolve(Path::new(p)).map_err(|e| Error::Io {
        path: PathBuf::from(p),
        source: e,
    })
}

/// The pods' `spec.hostNetwork` and `status.podIP`, by uid. Read one item at a time
/// ([`hashcompat::parse_json_streaming`]): the pods file of a large node is megabytes whose
/// tree would be several times that.
fn pod_networks(pods: &[u8]) -> PodNetworks {
    use hashcompat::{Node, NodeValue};
    let network = crate::pods::pod_network;
    let mut out = BTreeMap::new();
    let mut member = 0;
    let Ok(streamed) = hashcompat::parse_json_streaming(pods, "items", |occurrence, item| {
        if occurrence != member {
            // only the last `items` member counts, as when decoding the whole document
            member = occurrence;
            out.clear();
        }
        out.extend(network(&item));
    }) else {
        return BTreeMap::new();
    };
    let items_array = matches!(
        streamed.doc.get("items"),
        Some(Node {
            value: NodeValue::Array(_),
            ..
        })
    );
    if !(streamed.streamed && items_array) {
        // one pod (or no list): the document itself
        out.clear();
        out.extend(network(&streamed.doc));
    }
    out
}

/// `cri-dockerd --version`'s first line, e.g. `cri-dockerd 0.4.1 (v0.4.1)`.
fn binary_version(bin: &Path) -> Option<String> {
    let out = std::process::Command::new(bin)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .output()
        .ok()?;
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    text.lines()
        .find(|l| l.starts_with("cri-dockerd "))
        .map(|l| l.trim().to_string())
}

fn find_binary(host: &HostRoot, given: Option<&Path>) -> Result<Option<PathBuf>, Error> {
    if let Some(p) = given {
        // a given path that is not there is "no cri-dockerd", said with that path
        return Ok(p.is_file().then(|| p.to_path_buf()));
    }
    for p in BINARY_PATHS {
        let r = resolve(host, p)?;
        if r.is_file() {
            return Ok(Some(r));
        }
    }
    // Inside a Job the tool's own PATH is the container's, not the node's.
    if host.dir().is_none() {
        if let Some(path) = std::env::var_os("PATH") {
            for d in std::env::split_paths(&path) {
                let p = d.join("cri-dockerd");
                if p.is_file() {
                    return Ok(Some(p));
                }
            }
        }
    }
    Ok(None)
}

/// The dockershim-only kubelet flags kubelet 1.24 removed (kubelet 1.24 refuses to start with
/// any of them; CHANGELOG-1.24 "dockershim removal"), and the cri-dockerd flag each becomes.
pub const REMOVED_KUBELET_FLAGS: [(&str, &str); 8] = [
    ("--network-plugin", "--network-plugin"),
    ("--cni-conf-dir", "--cni-conf-dir"),
    ("--cni-bin-dir", "--cni-bin-dir"),
    ("--cni-cache-dir", "--cni-cache-dir"),
    ("--network-plugin-mtu", "--network-plugin-mtu"),
    ("--docker-endpoint", "--docker-endpoint"),
    (
        "--image-pull-progress-deadline",
        "--image-pull-progress-deadline",
    ),
    (
        "--experimental-dockershim-root-directory",
        "--cri-dockerd-root-directory (with the checkpoints carried over)",
    ),
];

/// The kubelet flag files kubeadm and the distribution packages keep.
pub const KUBELET_FLAG_FILES: [&str; 3] = [
    "/var/lib/kubelet/kubeadm-flags.env",
    "/etc/default/kubelet",
    "/etc/sysconfig/kubelet",
];

/// (file, flag) for every removed flag set in the node's kubelet flag files.
fn removed_flags_in_use(host: &HostRoot) -> Vec<(String, &'static str)> {
    let mut out = Vec::new();
    for f in KUBELET_FLAG_FILES {
        let Ok(p) = resolve(host, f) else { continue };
        let Ok(text) = std::fs::read_to_string(&p) else {
            continue;
        };
        for (flag, _) in REMOVED_KUBELET_FLAGS {
            let set = text
                .split(|c: char| c.is_whitespace() || c == '"' || c == '\'')
                .any(|w| w == flag || w.starts_with(&format!("{flag}=")));
            if set {
                out.push((p.display().to_string(), flag));
            }
        }
    }
    out
}

/// A `block` hazard for each of the node's kubelet flag files with a line that sets a flag
/// the switch drops but that the rewriter cannot parse ([`flags::unparsed_flag_lines`]).
fn unparsed_flag_hazards(host: &HostRoot) -> Vec<Hazard> {
    KUBELET_FLAG_FILES
        .iter()
        .filter_map(|f| resolve(host, f).ok())
        .filter_map(|p| {
            let text = std::fs::read_to_string(&p).ok()?;
            unparsed_flags_hazard(&p, &text)
        })
        .collect()
}

/// The `kubelet-flags-unparsed` hazard of one flag file, when it has such lines.
pub(crate) fn unparsed_flags_hazard(path: &Path, text: &str) -> Option<Hazard> {
    let lines = flags::unparsed_flag_lines(text);
    if lines.is_empty() {
        return None;
    }
    let mut h = Hazard::block(
        "kubelet-flags-unparsed",
        format!(
            "{}: {} set a dockershim-era flag the new kubelet refuses or must not keep, on a line the flag rewrite cannot parse (a `\\` continuation, `export`, a shell expansion): rewrite it as a plain NAME=\"--flag ...\" line, or remove the flag yourself; until then the new kubelet would keep it",
            path.display(),
            lines
                .iter()
                .map(|(n, l)| format!("line {n} ({})", l.trim()))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );
    h.files = vec![path.display().to_string()];
    Some(h)
}

pub(crate) fn sha256(b: &[u8]) -> String {
    storepatch::backup::sha256_hex(b)
}

/// Plans the switch on `plan` when it applies ([`applies`]): records [`CriDockerdSwitch`] in
/// `plan.cri_dockerd` and replaces the `dockershim-removed` warning by the switch's hazards.
/// Reads the checkpoint directories (never writes). A checkpoint file that is not valid JSON
/// is [`Error::Checkpoint`], naming it: nothing can be planned (or changed) until it is fixed
/// or moved away.
pub fn plan_switch(plan: &mut Plan, pods: &[u8], options: &SwitchOptions) -> Result<(), Error> {
    if !applies(plan) {
        return Ok(());
    }
    plan_switch_with_networks(plan, &pod_networks(pods), options)
}

/// [`plan_switch`] with the pods' networks already read ([`Plan::build_with_networks`]): the
/// pods file is not parsed a second time.
pub fn plan_switch_with_networks(
    plan: &mut Plan,
    networks: &PodNetworks,
    options: &SwitchOptions,
) -> Result<(), Error> {
    if !applies(plan) {
        return Ok(());
    }
    let to = plan.to;
    let host = host(options)?;
    let dockershim_dir = match &options.dockershim_dir {
        Some(d) => d.clone(),
        None => resolve(&host, DOCKERSHIM_SANDBOX_DIR)?,
    };
    let root = match &options.root {
        Some(d) => d.clone(),
        None => resolve(&host, CRI_DOCKERD_ROOT)?,
    };
    let target_dir = root.join("sandbox");
    let endpoint = match &options.endpoint {
        Some(e) => e.clone(),
        None => format!("unix://{}", resolve(&host, CRI_DOCKERD_SOCKET)?.display()),
    };
    let running_ids: Vec<String> = plan
        .records
        .iter()
        .filter(|r| r.kind == RecordClass::Sandbox && r.pid.is_some())
        .map(|r| r.id.clone())
        .collect();
    // `--from auto` proves a set of versions; when it reaches 1.24 (1.21–1.26 hash many specs
    // alike) the hashes cannot tell dockershim from cri-dockerd, the disk can: cri-dockerd's
    // root already holding running sandboxes' checkpoints, dockershim's none, is a node on
    // cri-dockerd already, and there is nothing to switch.
    let ambiguous = plan.from_candidates.iter().any(|v| v.minor() >= 24);
    let shim_has_running = running_ids
        .iter()
        .any(|id| dockershim_dir.join(id).is_file());
    let target_has_running = running_ids.iter().any(|id| target_dir.join(id).is_file());
    if ambiguous && !shim_has_running && target_has_running {
        let msg = format!(
            "the node already runs cri-dockerd: {} holds its sandboxes' checkpoints and {} none (the stored hashes prove kubelet {}, which includes versions after dockershim); no switch is planned",
            target_dir.display(),
            dockershim_dir.display(),
            crate::report::ranges(&plan.from_candidates.iter().copied().collect())
        );
        let removed: Vec<String> = plan
            .hazards
            .iter()
            .filter(|h| h.code == "dockershim-removed")
            .map(|h| h.message.clone())
            .collect();
        plan.hazards.retain(|h| h.code != "dockershim-removed");
        plan.warnings.retain(|w| !removed.contains(w));
        plan.warnings.push(msg.clone());
        plan.hazards.push(Hazard::warn("cri-dockerd-already", msg));
        return Ok(());
    }
    // what the node's kubelet is given: the node's own path, not the one under a Job's mount
    let node_endpoint = options
        .endpoint
        .clone()
        .unwrap_or_else(|| format!("unix://{CRI_DOCKERD_SOCKET}"));
    let mut hazards = Vec::new();
    // cri-dockerd must not run while its checkpoints are written: it writes them too
    let answers = crate::verify::endpoint_socket(&endpoint)
        .is_some_and(|s| std::os::unix::net::UnixStream::connect(s).is_ok());
    if answers {
        hazards.push(Hazard::block(
            "cri-dockerd-running",
            format!(
                "cri-dockerd answers at {endpoint}: stop it (and the kubelet) before the patch, which writes into its checkpoint directory"
            ),
        ));
    }

    // 1. the binary
    let binary = find_binary(&host, options.binary.as_deref())?;
    let version = binary.as_deref().and_then(binary_version);
    match (&binary, &version) {
        (Some(b), Some(v)) => hazards.push(
            Hazard::warn(
                "cri-dockerd-binary",
                format!(
                    "kubelet {to} has no dockershim: this node switches to cri-dockerd; found {v} at {}. cri-dockerd 0.4 needs Docker Engine 23.0 or newer (API 1.42); it runs with --cri-dockerd-root-directory {} and --container-runtime-endpoint {node_endpoint}",
                    b.display(),
                    options.root.as_deref().unwrap_or(Path::new(CRI_DOCKERD_ROOT)).display()
                ),
            )
            .reference("https://github.com/Mirantis/cri-dockerd"),
        ),
        (Some(b), None) => hazards.push(Hazard::block(
            "cri-dockerd-binary-unusable",
            format!(
                "{} does not answer `--version` as cri-dockerd does: kubelet {to} needs a working cri-dockerd (give it with --cri-dockerd PATH)",
                b.display()
            ),
        )),
        (None, _) => hazards.push(
            Hazard::warn(
                "cri-dockerd-missing",
                format!(
                    "kubelet {to} has no dockershim and no cri-dockerd was found ({}; --cri-dockerd PATH names it): install cri-dockerd (0.4 needs Docker Engine 23.0+) before starting kubelet {to}, or every pod of the node is lost",
                    match &options.binary {
                        Some(b) => format!("{} does not exist", b.display()),
                        None => format!("{} or PATH", BINARY_PATHS.join(", ")),
                    }
                ),
            )
            .reference("https://github.com/Mirantis/cri-dockerd"),
        ),
    }

    // 2. the checkpoints
    let running: Vec<&PlanRecord> = plan
        .records
        .iter()
        .filter(|r| r.kind == RecordClass::Sandbox && r.pid.is_some())
        .collect();
    let sandboxes: Vec<ExpectedSandbox> = running
        .iter()
        .map(|r| {
            let (host_network, pod_ip) = r
                .pod_uid
                .as_deref()
                .and_then(|u| networks.get(u).cloned())
                .unwrap_or((false, None));
            ExpectedSandbox {
                id: r.id.clone(),
                pod: format!(
                    "{}/{}",
                    r.namespace.as_deref().unwrap_or("?"),
                    r.pod.as_deref().unwrap_or("?")
                ),
                host_network,
                pod_ip: if host_network { None } else { pod_ip },
            }
        })
        .collect();
    let mut checkpoints = Vec::new();
    let mut missing = Vec::new();
    let mut unverified = Vec::new();
    let mut conflicts = Vec::new();
    for sb in &sandboxes {
        let source = dockershim_dir.join(&sb.id);
        let bytes = match std::fs::read(&source) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                missing.push(sb);
                continue;
            }
            Err(e) => {
                return Err(Error::Io {
                    path: source,
                    source: e,
                })
            }
        };
        let cp = SandboxCheckpoint::parse(&bytes).map_err(|why| {
            Error::Checkpoint(format!(
                "{}: {why}; cri-dockerd could not use it either. Nothing was changed: move it away (its pod {} is then recreated) or restore it",
                source.display(),
                sb.pod
            ))
        })?;
        if cp.writer() == Writer::Unknown {
            unverified.push(source.display().to_string());
        }
        let new = cp.for_cri_dockerd();
        let target = target_dir.join(&sb.id);
        let present = match std::fs::read(&target) {
            Ok(existing) if existing == new => true,
            Ok(_) => {
                conflicts.push(target.display().to_string());
                false
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => {
                return Err(Error::Io {
                    path: target,
                    source: e,
                })
            }
        };
        checkpoints.push(CarryOver {
            sandbox: sb.id.clone(),
            source: source.display().to_string(),
            target: target.display().to_string(),
            source_sha256: sha256(&bytes),
            target_sha256: sha256(&new),
            present,
        });
    }
    // cri-dockerd's root holding checkpoints of sandboxes we do not carry over: another
    // cri-dockerd ran here; merging would hand it sandboxes it never had or lose its own.
    let ours: BTreeSet<&str> = checkpoints.iter().map(|c| c.sandbox.as_str()).collect();
    if let Ok(rd) = std::fs::read_dir(&target_dir) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !ours.contains(name.as_str()) && !name.starts_with('.') {
                conflicts.push(e.path().display().to_string());
            }
        }
    }
    conflicts.sort();
    if !checkpoints.is_empty() {
        let todo = checkpoints.iter().filter(|c| !c.present).count();
        let mut h = Hazard::warn(
            "cri-dockerd-checkpoints",
            format!(
                "{} sandbox checkpoint(s) of {} are carried over to {} ({todo} to copy; the checksum becomes cri-dockerd's, which names other Go types than dockershim's; the originals stay): cri-dockerd needs them to tear down and port-map these sandboxes",
                checkpoints.len(),
                dockershim_dir.display(),
                target_dir.display()
            ),
        );
        h.files = checkpoints.iter().map(|c| c.source.clone()).collect();
        h.containers = checkpoints.iter().map(|c| c.sandbox.clone()).collect();
        hazards.push(h);
    }
    if !missing.is_empty() {
        hazards.push(
            Hazard::warn(
                "cri-dockerd-checkpoint-missing",
                format!(
                    "{} running sandbox(es) have no checkpoint in {}: cri-dockerd cannot tear their networks down, and kubelet {to} recreates these pods: {}",
                    missing.len(),
                    dockershim_dir.display(),
                    missing.iter().map(|s| s.pod.as_str()).collect::<Vec<_>>().join(", ")
                ),
            )
            .containers(missing.iter().map(|s| s.id.clone()))
            .reference("https://github.com/rancher/rke/issues/2993"),
        );
    }
    if !unverified.is_empty() {
        let mut h = Hazard::warn(
            "cri-dockerd-checkpoint-unverified",
            format!(
                "{} checkpoint(s) carry a checksum neither dockershim nor cri-dockerd computes for their data (edited since?); they are carried over with cri-dockerd's checksum of what they hold",
                unverified.len()
            ),
        );
        h.files = unverified;
        hazards.push(h);
    }
    if !conflicts.is_empty() {
        let mut h = Hazard::block(
            "cri-dockerd-checkpoint-conflict",
            format!(
                "cri-dockerd's checkpoint directory {} already holds checkpoints that are not the ones carried over from dockershim: {}; a cri-dockerd already ran on this node. Nothing is written until they are moved away (or are identical)",
                target_dir.display(),
                conflicts.join(", ")
            ),
        );
        h.files = conflicts;
        hazards.push(h);
    }

    // 3. the kubelet's flags
    for h in unparsed_flag_hazards(&host) {
        hazards.push(h);
    }
    let in_use = removed_flags_in_use(&host);
    let found = if in_use.is_empty() {
        String::new()
    } else {
        format!(
            "; set on this node: {}",
            in_use
                .iter()
                .map(|(f, flag)| format!("{flag} ({f})"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    hazards.push(
        Hazard::warn(
            "kubelet-flags-change",
            format!(
                "kubelet {to} talks to cri-dockerd: give it --container-runtime-endpoint={node_endpoint} (and --container-runtime=remote before 1.27); it refuses the removed dockershim flags {}, which move to cri-dockerd as {}{found}",
                REMOVED_KUBELET_FLAGS.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(", "),
                REMOVED_KUBELET_FLAGS.iter().map(|(_, c)| *c).collect::<Vec<_>>().join(", "),
            ),
        )
        .reference("https://github.com/kubernetes/kubernetes/blob/master/CHANGELOG/CHANGELOG-1.24.md"),
    );

    // the switch replaces the bare warning
    let removed: Vec<String> = plan
        .hazards
        .iter()
        .filter(|h| h.code == "dockershim-removed")
        .map(|h| h.message.clone())
        .collect();
    plan.hazards.retain(|h| h.code != "dockershim-removed");
    plan.warnings.retain(|w| !removed.contains(w));
    for h in hazards {
        plan.warnings.push(h.message.clone());
        plan.hazards.push(h);
    }
    plan.cri_dockerd = Some(CriDockerdSwitch {
        binary: binary.map(|b| b.display().to_string()),
        version,
        dockershim_dir: dockershim_dir.display().to_string(),
        root: root.display().to_string(),
        endpoint,
        checkpoints,
        sandboxes,
    });
    Ok(())
}

/// One checkpoint a patch wrote (the backup's [`COPIED_LIST`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Copied {
    /// The file written.
    pub path: PathBuf,
    /// sha256 of what was written: rollback removes the file only while it holds exactly this.
    pub sha256: String,
    /// The directories the patch created for it (outermost first), removed when empty.
    #[serde(default)]
    pub created_dirs: Vec<PathBuf>,
}

/// Checks that every checkpoint to copy still is what the plan read (before anything is
/// written).
pub(crate) fn check_sources(switch: &CriDockerdSwitch) -> Result<(), Error> {
    for c in switch.checkpoints.iter().filter(|c| !c.present) {
        let bytes = std::fs::read(&c.source).map_err(|e| Error::Io {
            path: PathBuf::from(&c.source),
            source: e,
        })?;
        if sha256(&bytes) != c.source_sha256 {
            return Err(Error::Checkpoint(format!(
                "{} changed since the plan was made; nothing was written: plan again",
                c.source
            )));
        }
        if Path::new(&c.target).exists() {
            return Err(Error::Checkpoint(format!(
                "{} appeared since the plan was made (is cri-dockerd running?); nothing was written",
                c.target
            )));
        }
    }
    Ok(())
}

/// Copies every checkpoint of `switch` that is not there yet, each atomically (temp, fsync,
/// rename, directory fsync), recording each one in the backup before it is written. Returns
/// what was copied.
pub(crate) fn carry_over(
    switch: &CriDockerdSwitch,
    backup: &storepatch::backup::Backup,
) -> Result<Vec<Copied>, Error> {
    let todo: Vec<&CarryOver> = switch.checkpoints.iter().filter(|c| !c.present).collect();
    let mut copied: Vec<Copied> = Vec::new();
    if todo.is_empty() {
        return Ok(copied);
    }
    let target_dir = Path::new(&switch.root).join("sandbox");
    let mut created_dirs = Vec::new();
    for d in [Path::new(&switch.root), target_dir.as_path()] {
        if !d.exists() {
            std::fs::create_dir(d).map_err(|e| Error::Io {
                path: d.to_path_buf(),
                source: e,
            })?;
            created_dirs.push(d.to_path_buf());
        }
    }
    let record = |copied: &[Copied]| -> Result<(), Error> {
        let bytes = serde_json::to_vec_pretty(copied).expect("a list serializes");
        backup.attach(COPIED_LIST, &bytes)?;
        Ok(())
    };
    for (i, c) in todo.iter().enumerate() {
        let bytes = std::fs::read(&c.source).map_err(|e| Error::Io {
            path: PathBuf::from(&c.source),
            source: e,
        })?;
        let cp = SandboxCheckpoint::parse(&bytes)
            .map_err(|why| Error::Checkpoint(format!("{}: {why}", c.source)))?;
        let new = cp.for_cri_dockerd();
        // Listed before it is written: a crash right after the rename still rolls back.
        copied.push(Copied {
            path: PathBuf::from(&c.target),
            sha256: sha256(&new),
            created_dirs: if i == 0 {
                created_dirs.clone()
            } else {
                Vec::new()
            },
        });
        record(&copied)?;
        // cri-dockerd writes its checkpoints 0644 (store/filestore.go).
        let meta = storepatch::atomic::FileMeta {
            mode: 0o644,
            ..storepatch::atomic::FileMeta::private()
        };
        storepatch::atomic::replace_file(Path::new(&c.target), &new, meta)?;
    }
    Ok(copied)
}

/// The checkpoints the patch of the backup in `dir` copied (none when it copied none).
pub fn copied_in_backup(dir: &Path) -> Result<Vec<Copied>, Error> {
    let path = dir.join(COPIED_LIST);
    match storepatch::atomic::read_regular_nofollow(&path) {
        Ok((bytes, _)) => serde_json::from_slice(&bytes).map_err(|e| {
            Error::Checkpoint(format!("{}: not a list of copies: {e}", path.display()))
        }),
        Err(storepatch::StoreError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            Ok(Vec::new())
        }
        Err(e) => Err(e.into()),
    }
}

/// Refuses, naming them, copies that no longer hold what the patch wrote (cri-dockerd rewrote
/// them: the pod was recreated since). Run before the rollback restores anything.
pub(crate) fn check_copies(copies: &[Copied]) -> Result<(), Error> {
    let changed: Vec<String> = copies
        .iter()
        .filter(|c| {
            std::fs::read(&c.path)
                .map(|b| sha256(&b) != c.sha256)
                .unwrap_or(false)
        })
        .map(|c| c.path.display().to_string())
        .collect();
    if changed.is_empty() {
        Ok(())
    } else {
        Err(Error::Checkpoint(format!(
            "the cri-dockerd checkpoint(s) {} no longer hold what the patch copied (cri-dockerd wrote them since); nothing was restored: move them away to roll back",
            changed.join(", ")
        )))
    }
}

/// Removes the copies (and the directories the patch created, when empty). Already gone is
/// fine: rollback runs twice.
pub(crate) fn remove_copies(copies: &[Copied]) -> Result<usize, Error> {
    let mut removed = 0;
    for c in copies {
        match std::fs::remove_file(&c.path) {
            Ok(()) => {
                removed += 1;
                if let Some(parent) = c.path.parent() {
                    storepatch::atomic::sync_dir(parent)?;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(Error::Io {
                    path: c.path.clone(),
                    source: e,
                })
            }
        }
    }
    for c in copies {
        for d in c.created_dirs.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The networks the plan reads with the pods (PodIndex, one parse) are the ones a parse of
    /// their own gives, on every node fixture and on the document shapes Go decodes specially.
    #[test]
    fn networks_read_with_the_pods_are_those_of_their_own_parse() {
        let nodes = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/nodes");
        let mut docs: Vec<(String, Vec<u8>)> = std::fs::read_dir(&nodes)
            .unwrap()
            .map(|e| e.unwrap().path().join("pods.json"))
            .filter(|p| p.is_file())
            .map(|p| (p.display().to_string(), std::fs::read(&p).unwrap()))
            .collect();
        assert!(docs.len() >= 4, "the node fixtures' pods files");
        let pod = |uid: &str, host: bool, ip: &str| {
            format!(
                r#"{{"kind":"Pod","metadata":{{"name":"p{uid}","uid":"{uid}"}},"spec":{{"hostNetwork":{host},"containers":[{{"name":"c"}}]}},"status":{{"podIP":"{ip}"}}}}"#
            )
        };
        docs.push(("one pod".into(), pod("u1", false, "10.0.0.1").into_bytes()));
        docs.push((
            "two items members, the last decoded".into(),
            format!(
                r#"{{"kind":"PodList","items":[{}],"items":[{},{}]}}"#,
                pod("u1", false, "10.0.0.1"),
                pod("u2", true, "192.168.0.2"),
                pod("u3", false, "")
            )
            .into_bytes(),
        ));
        for (name, bytes) in &docs {
            let index = crate::pods::PodIndex::parse(bytes)
                .unwrap_or_else(|e| panic!("{name}: the pods parse: {e}"));
            assert!(!index.networks.is_empty(), "{name}: some pod has a network");
            assert_eq!(
                index.networks,
                pod_networks(bytes),
                "{name}: networks read with the pods differ from their own parse"
            );
        }
    }
}
