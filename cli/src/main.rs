//! `kubelet-rehash`: upgrade a node's kubelet across minor versions without restarting its
//! containers. Flags in, the `rehash` library's typed results out as tables, JSON and exit
//! codes; no workflow logic and no runtime-specific code lives here.

mod api_pods;
mod dist;
mod guard_cmd;
mod hash_cmd;
mod hold_ready;
mod render;
mod spinner;
mod upgrade_cmd;

/// The allocator of the static musl binaries we ship: a per-thread cache of freed blocks in
/// front of musl's malloc, which serialises every call on one lock (the `alloccache` crate
/// says why). Not in glibc builds: glibc's malloc has per-thread caches and arenas of its own,
/// and the cache on top of them bought no time and raised the containerd node's peak RSS from
/// 0.95x to 1.11x its meta.db. scripts/test-release.sh runs the shipped binaries, cache
/// included, through the golden set and every bundled node.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: alloccache::ThreadCache = alloccache::ThreadCache;

use clap::{Args, CommandFactory, Parser, Subcommand};
use hashcompat::KubeletVersion;
use rehash::static_pods::StaticManifests;
use rehash::{Error, ErrorClass, From, NodeFiles, Plan, StoreLocation};
use render::Output;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use storepatch::{RuntimeKind, StoreOptions};

/// Exit codes, fixed from 0.1 on (documented in `--help` and the README).
mod exit {
    /// Done / verified.
    pub const OK: u8 = 0;
    /// Unexpected failure.
    pub const FAILURE: u8 = 1;
    /// Usage: bad flags, unknown versions, unreadable pods file.
    pub const USAGE: u8 = 2;
    /// Refused: runtime running, pre-check failed, store changed since the backup.
    pub const REFUSED: u8 = 3;
    /// Finished, but some containers are unproven and will restart (plan/patch), or
    /// verification failed (verify).
    pub const INCOMPLETE: u8 = 4;
}

const EXIT_CODES_HELP: &str = "Exit codes:
  0  done / verified
  1  unexpected failure (or, for `hash`, some input could not be hashed)
  2  usage error (bad flags, unknown versions, unreadable pods file or kubeconfig)
  3  refused: runtime running, store locked by another run, pre-check failed, a
     block hazard, another node's pods file (or --node-name not the node whose
     credential is used, a Node the API server does not know), store changed
     since the backup, an untrusted backup or one of another store
  4  finished, but some containers are unproven and will restart (plan/patch),
     or verification failed (verify)
  5  the API server could not be asked: unreachable, not trusted (TLS), the
     credential expired or not accepted (401), not allowed (403); nothing changed";

#[derive(Parser)]
#[command(
    name = "kubelet-rehash",
    version,
    long_version = dist::long_version(),
    about = about(),
    long_about = format!("{}.\n\n{LONG_ABOUT}", about()),
    after_help = EXIT_CODES_HELP
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The one-line description, with the supported range as the embedded schemas give it.
fn about() -> String {
    format!(
        "Upgrade a node's kubelet across minor versions ({}–{}) without restarting its containers",
        hashcompat::KubeletVersion::oldest(),
        hashcompat::KubeletVersion::newest()
    )
}

const LONG_ABOUT: &str = "The kubelet stores a hash of every container's spec in the container runtime, and restarts any container whose hash it computes differently. A newer kubelet computes different hashes, so an upgrade restarts every container of the node. kubelet-rehash computes each container's hash exactly as the target kubelet will, proves that the stored hash is what the current kubelet computed, and rewrites it in the stopped runtime's store, with backups and byte-exact rollback.";

#[derive(Subcommand)]
enum Command {
    /// Print the node's pods as the plan reads them from the API server: one PodList, the
    /// served items byte for byte (compare with `kubectl get pods -A --field-selector
    /// spec.nodeName=NODE -o json`). Nothing else is read or written.
    #[command(after_help = EXIT_CODES_HELP)]
    Pods {
        /// The kubeconfig (default: the kubelet's of the node's layout).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// The node's name (default as for `plan`).
        #[arg(long)]
        node_name: Option<String>,
        /// Where the node's / is mounted (also KUBELET_REHASH_HOST_ROOT).
        #[arg(long, value_name = "DIR")]
        host_root: Option<PathBuf>,
    },
    /// Compute the kubelet's container hash for specs (JSON Lines of {"id","container"}, a Pod,
    /// a PodList/List or a bare container) and write JSON Lines {"id","version","hash"}.
    #[command(after_help = EXIT_CODES_HELP)]
    Hash {
        /// Kubelet version (1.14, v1.14.3, 1.14.3-eks-abc), repeatable, or `all`.
        #[arg(long = "kubelet-version", short = 'k', required = true)]
        kubelet_version: Vec<String>,
        /// Print the exact hashed text (and JSON) instead, for one version.
        #[arg(long)]
        explain: bool,
        /// Input file; standard input when absent or `-`.
        file: Option<PathBuf>,
    },
    /// Show, for every container of the node, what the target kubelet will compute and what
    /// patch would do. Never writes.
    #[command(after_help = EXIT_CODES_HELP)]
    Plan {
        #[command(flatten)]
        plan: PlanFlags,
        /// Output format.
        #[arg(short = 'o', long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// Plan, refuse while the runtime runs, back up, rewrite every proven hash, verify what was
    /// written, and write the report. Safe to run twice.
    #[command(after_help = EXIT_CODES_HELP)]
    Patch {
        #[command(flatten)]
        plan: PlanFlags,
        /// Where the backup and report go (must not exist or be empty; created 0700).
        /// Default: /var/lib/kubelet-rehash/backups/<runtime>-<unix time>.
        #[arg(long)]
        backup_dir: Option<PathBuf>,
        /// Also write the JSON report here.
        #[arg(long)]
        report: Option<PathBuf>,
        /// Plan only; same as `plan`.
        #[arg(long)]
        dry_run: bool,
        /// Move every kubelet checkpoint the target kubelet would reject (hazard
        /// checkpoint-rejected) into the backup so it starts without it; `rollback` puts them
        /// back. Without this flag such a plan is refused (exit 3).
        #[arg(long)]
        set_aside_checkpoints: bool,
        /// Go on although the target kubelet rejects some pods when it admits them again at
        /// its start (hazard kubelet-rejects-pod-at-admission): their containers restart
        /// whatever the patch does. Without this flag such a plan is refused (exit 3).
        #[arg(long)]
        accept_restarts: bool,
        /// How containerd's meta.db is backed up: `pages` (the original bytes of every page
        /// the transaction overwrites, a few hundred KB) or `full` (a copy of the whole
        /// file). Docker and CRI-O files are always copied whole. Rollback restores either
        /// byte for byte.
        #[arg(long, value_enum, default_value_t = BackupKind::Pages)]
        backup: BackupKind,
        #[arg(short = 'o', long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// Check the result. Offline: every proven container's stored hash equals the target.
    /// With --live: ask the restarted runtime for every rewritten container's hash, state and pid.
    #[command(after_help = EXIT_CODES_HELP)]
    Verify {
        /// The pods, as for `plan` (not needed with --live).
        #[command(flatten)]
        source: api_pods::PodsFlags,
        /// The kubelet version the node was upgraded to (not needed with --live).
        #[arg(long, required_unless_present = "live")]
        to: Option<String>,
        /// The node's previous kubelet version, or `auto`.
        #[arg(long, default_value = "auto")]
        from: String,
        #[command(flatten)]
        store: StoreFlags,
        #[command(flatten)]
        node: NodeFlags,
        /// Ask the running runtime instead of reading its store: every container the patch
        /// report names as rewritten must report its new hash, run, and keep its pid. Needs
        /// only --report (the report names the runtime, its endpoint and the containers).
        #[arg(long, requires = "report")]
        live: bool,
        /// Runtime API endpoint for --live (default: the one the report names, else the
        /// runtime's usual socket).
        #[arg(long)]
        endpoint: Option<String>,
        /// The report `patch` wrote (for --live).
        #[arg(long)]
        report: Option<PathBuf>,
        #[arg(short = 'o', long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// One node's whole kubelet upgrade window: preflight, stop, patch, install, start, verify;
    /// back to the old kubelet on any failure.
    ///
    /// Preflight with nothing stopped (plan, hazards,
    /// the runtime unit keeps its containers, the new kubelet binary's version and flags, room
    /// for the backup, the predicted window within the budget), then stop the kubelet and the
    /// runtime, patch, install the new kubelet, start the runtime, verify live, start the
    /// kubelet and wait for its health endpoint. Any failure, SIGINT or SIGTERM in the window
    /// rolls back and starts the runtime and the old kubelet; a killed run is finished by the
    /// next one with the same --state. Exit 0 done; 3 refused (nothing stopped) or rolled back;
    /// 4 some containers would restart and --accept-restarts was not given (nothing stopped).
    #[command(after_help = EXIT_CODES_HELP)]
    Upgrade {
        #[command(flatten)]
        plan: PlanFlags,
        #[command(flatten)]
        upgrade: Box<upgrade_cmd::UpgradeFlags>,
        #[arg(short = 'o', long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// Restore every file of a backup byte for byte (refuses, naming the file, when the store
    /// changed since the patch).
    ///
    /// With --state: finish an `upgrade` that was killed mid-window by going back (store,
    /// kubelet binary, runtime and old kubelet started).
    #[command(after_help = EXIT_CODES_HELP)]
    Rollback {
        #[arg(long, required_unless_present = "state")]
        backup_dir: Option<PathBuf>,
        /// The state file of an `upgrade` run to finish by going back.
        #[arg(long, value_name = "FILE", conflicts_with_all = ["backup_dir", "values", "accept_unrecorded"])]
        state: Option<PathBuf>,
        #[command(flatten)]
        services: Box<upgrade_cmd::ServiceFlags>,
        #[command(flatten)]
        store: StoreFlags,
        /// Restore a file whose patched sha256 was never recorded (a crash mid-patch) even though
        /// it differs from the original.
        #[arg(long)]
        accept_unrecorded: bool,
        /// Instead of restoring bytes, write the previous hash values back (from the report in
        /// the backup dir), after checking every rewritten container still holds what the patch
        /// wrote. For a store the runtime has written to since (containerd commits to meta.db
        /// at every start).
        #[arg(long)]
        values: bool,
    },
    /// Keep a window's nodes Ready and their pods in their Services while their kubelets
    /// restart: the status guard, an admission webhook run from the operator's side.
    ///
    /// Run with an administrator's kubeconfig, it holds
    /// back for a bounded time what a starting kubelet before 1.31 (its node's startup-only
    /// NotReady) and before 1.35 (its probed containers' readiness) writes about the very
    /// containers it adopted. Registered with failurePolicy Ignore: a guard that is down blocks
    /// nothing. Removed when --for is over, at SIGINT/SIGTERM, or by --remove after a killed
    /// run. Writes JSON Lines: armed, every update held back, removed.
    #[command(after_help = EXIT_CODES_HELP)]
    Guard {
        #[command(flatten)]
        guard: guard_cmd::GuardFlags,
    },
    /// List the supported kubelet versions and their hash algorithms.
    Versions {
        /// Output format.
        #[arg(short = 'o', long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// Print the shell completion script for SHELL (e.g. `kubelet-rehash completions bash >
    /// /etc/bash_completion.d/kubelet-rehash`).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the man pages (kubelet-rehash.1, kubelet-rehash-plan.1, …) into DIR, for
    /// packagers (scripts/release.sh).
    #[command(hide = true)]
    Man { dir: PathBuf },
}

#[derive(Args, Clone)]
struct StoreFlags {
    /// docker, containerd or crio; detected from --root (or from the node's known layouts)
    /// when absent.
    #[arg(long)]
    runtime: Option<String>,
    /// The runtime's root: Docker data-root, containerd root (holding
    /// io.containerd.metadata.v1.bolt/meta.db), or CRI-O graphroot. Default: the one store
    /// among the node's known layouts (stock, k3s, RKE2, MicroK8s; moved roots read from the
    /// runtime's configuration file).
    #[arg(long)]
    root: Option<PathBuf>,
    /// The runtime's API socket, for the running check (default: the socket of the node's layout,
    /// or the one its configuration file names).
    #[arg(long)]
    runtime_socket: Option<PathBuf>,
    /// dockerd's (or crio's) pid file, for the running check.
    #[arg(long)]
    runtime_pidfile: Option<PathBuf>,
    /// Docker: whether dockerd runs with --live-restore (overrides daemon.json).
    #[arg(long)]
    live_restore: Option<bool>,
    /// Docker: daemon.json to read live-restore from (default /etc/docker/daemon.json).
    #[arg(long)]
    daemon_json: Option<PathBuf>,
    /// CRI-O: the containers/storage runroot (discovered when absent).
    #[arg(long)]
    runroot: Option<PathBuf>,
    /// Where the node's / is mounted, e.g. /host in a privileged Job (also
    /// KUBELET_REHASH_HOST_ROOT). Every default path (runtime configuration files, store roots,
    /// sockets, pid files, the default backup directory) is resolved inside it, symbolic links
    /// as if chrooted there; paths given explicitly (--root, --pods, ...) are taken as given.
    /// `/` is the same as leaving it out.
    #[arg(long, value_name = "DIR")]
    host_root: Option<PathBuf>,
}

/// The environment variable standing for `--host-root` (a Job's manifest sets it once).
const HOST_ROOT_ENV: &str = "KUBELET_REHASH_HOST_ROOT";

impl StoreFlags {
    fn location(&self) -> Result<StoreLocation, Failure> {
        let runtime = self
            .runtime
            .as_deref()
            .map(|r| {
                r.parse::<RuntimeKind>()
                    .map_err(|e| Failure::usage(format!("--runtime: {e}")))
            })
            .transpose()?;
        let location = StoreLocation {
            runtime,
            root: self.root.clone(),
            options: StoreOptions {
                socket: self.runtime_socket.clone(),
                pidfile: self.runtime_pidfile.clone(),
                live_restore: self.live_restore,
                daemon_json: self.daemon_json.clone(),
                runroot: self.runroot.clone(),
                ..StoreOptions::default()
            },
            host_root: self.host_root.clone().or_else(|| {
                std::env::var_os(HOST_ROOT_ENV)
                    .filter(|v| !v.is_empty())
                    .map(PathBuf::from)
            }),
            // on the node's disk with a host root (StoreLocation::state_dirs)
            state: None,
        };
        Ok(location)
    }
}

#[derive(Args, Clone)]
struct PlanFlags {
    #[command(flatten)]
    source: api_pods::PodsFlags,
    /// The kubelet version the node is upgraded to.
    #[arg(long)]
    to: String,
    /// The node's current kubelet version, or `auto`: found from the stored hashes.
    #[arg(long, default_value = "auto")]
    from: String,
    #[command(flatten)]
    store: StoreFlags,
    #[command(flatten)]
    node: NodeFlags,
    /// Pin the UID of every static pod whose manifest sets no metadata.uid and which the
    /// target kubelet would therefore restart (it derives the UID from a hash of its own Pod
    /// type): `patch` writes `metadata.uid: <the UID the kubelet uses now>` into the manifest,
    /// read from the runtime's pod UID label and the mirror pod's annotations, never
    /// computed. One line is inserted, every other byte is kept; the original goes into the
    /// backup and `rollback` restores it. Default: on for `upgrade` (its promise is a window
    /// without restarts it can avoid, and the pin changes nothing for the running kubelet),
    /// off for `plan` and `patch` (they touch only the store unless asked). A later `kubeadm
    /// upgrade` rewrites the manifest without the pin (docs/upgrade.md).
    #[arg(long, overrides_with = "no_pin_static_pod_uids")]
    pin_static_pod_uids: bool,
    /// Leave static pod manifests alone: a pod with a derived UID is planned as a restart.
    #[arg(long, overrides_with = "pin_static_pod_uids")]
    no_pin_static_pod_uids: bool,
}

impl PlanFlags {
    /// Whether static pods' UIDs are pinned: as given, else the command's `default`.
    fn pin_uids(&self, default: bool) -> bool {
        match (self.pin_static_pod_uids, self.no_pin_static_pod_uids) {
            (true, _) => true,
            (_, true) => false,
            _ => default,
        }
    }
}

/// The kubelet's default --root-dir.
const DEFAULT_KUBELET_DIR: &str = "/var/lib/kubelet";

/// What the plan reads from the node besides the store and the pods file.
#[derive(Args, Clone, Default)]
struct NodeFlags {
    /// The kubelet's static pod manifests (its `staticPodPath`): tells a static pod's pinned
    /// UID (kept by every kubelet) from a derived one (a new pod under another kubelet
    /// version). Default /etc/kubernetes/manifests, read when it exists.
    #[arg(long, value_name = "DIR")]
    manifests: Option<PathBuf>,
    /// The kubelet's root directory (its --root-dir), whose checkpoint files (CPU, memory,
    /// device, DRA managers, pod status / allocation state) the target kubelet must accept.
    /// Default /var/lib/kubelet, read when it exists.
    #[arg(long, value_name = "DIR")]
    kubelet_dir: Option<PathBuf>,
    /// The kubelet configuration file the target kubelet reads: the allocatable it admits the
    /// running pods against is recomputed from it (maxPods, podsPerCore, systemReserved,
    /// kubeReserved, evictionHard). Default: the running kubelet's --config, else config.yaml
    /// in --kubelet-dir, read when it exists.
    #[arg(long, value_name = "FILE")]
    kubelet_config: Option<PathBuf>,
    /// Docker, kubelet ≤ 1.23 → ≥ 1.24 (dockershim → cri-dockerd): the cri-dockerd binary the
    /// node will run, asked for its version. Default: /usr/bin/cri-dockerd,
    /// /usr/local/bin/cri-dockerd (under --host-root), else PATH (without --host-root).
    #[arg(long = "cri-dockerd", value_name = "PATH")]
    cri_dockerd: Option<PathBuf>,
    /// Docker, dockershim → cri-dockerd: where dockershim kept its sandbox checkpoints
    /// (default /var/lib/dockershim/sandbox, under --host-root).
    #[arg(long, value_name = "DIR")]
    dockershim_checkpoints: Option<PathBuf>,
    /// Docker, dockershim → cri-dockerd: cri-dockerd's --cri-dockerd-root-directory, which
    /// patch copies the checkpoints into (`sandbox/`; default /var/lib/cri-dockerd, under
    /// --host-root).
    #[arg(long, value_name = "DIR")]
    cri_dockerd_root: Option<PathBuf>,
    /// Docker, dockershim → cri-dockerd: cri-dockerd's CRI endpoint, which `verify --live`
    /// asks (default unix:///var/run/cri-dockerd.sock, under --host-root).
    #[arg(long, value_name = "ENDPOINT")]
    cri_dockerd_endpoint: Option<String>,
    /// Where the kubelet binary is installed on the node (under --host-root): `upgrade`
    /// replaces it; with the pods from a file, its `--version` is what `--from auto` takes
    /// where the stored hashes allow several versions (from the API server, the Node's
    /// reported version is).
    #[arg(long, value_name = "PATH", default_value = "/usr/bin/kubelet")]
    pub kubelet_path: PathBuf,
    /// The node's Node object (`kubectl get node NAME -o json`), with --pods: the target
    /// kubelet admits every pod again when it starts, against this Node's labels, taints and
    /// allocatable, and the plan names each pod it would reject (a block hazard). From the
    /// API server the Node is read with the pods; without either, the plan says admission
    /// is not predicted.
    #[arg(long = "node", value_name = "FILE")]
    node_object: Option<PathBuf>,
}

impl NodeFlags {
    /// The dockershim → cri-dockerd switch's paths as given (defaults under `--host-root`).
    fn switch_options(
        &self,
        store: &StoreFlags,
    ) -> Result<rehash::cri_dockerd::SwitchOptions, Failure> {
        Ok(rehash::cri_dockerd::SwitchOptions {
            binary: self.cri_dockerd.clone(),
            dockershim_dir: self.dockershim_checkpoints.clone(),
            root: self.cri_dockerd_root.clone(),
            endpoint: self.cri_dockerd_endpoint.clone(),
            host_root: store.location()?.host_root,
        })
    }

    /// Offline, what the installed kubelet says of itself (`--kubelet-path`, under
    /// `--host-root`): `None` where there is no such file; a binary that does not answer is
    /// said on stderr and left out (the hashes alone then decide).
    pub fn installed_kubelet(
        &self,
        store: &StoreFlags,
    ) -> Result<Option<rehash::InstalledKubelet>, Failure> {
        let path = crate::upgrade_cmd::node_path(store, &self.kubelet_path)?;
        if !path.is_file() {
            return Ok(None);
        }
        match rehash::upgrade::kubelet_version_of(&path) {
            Ok(version) => Ok(Some(rehash::InstalledKubelet {
                path: path.display().to_string(),
                version,
            })),
            Err(e) => {
                eprintln!("kubelet-rehash: {e}; --from auto goes by the stored hashes alone");
                Ok(None)
            }
        }
    }

    /// Reads what the flags name; a default path that is not there is simply not read, a
    /// path given explicitly must be. Defaults are the node's paths, under `--host-root`.
    fn read(&self, store: &StoreFlags) -> Result<NodeFiles, Failure> {
        let host = match store.location()?.host_root {
            Some(dir) => storepatch::layout::HostRoot::new(&dir)
                .map_err(|e| Failure::usage(e.to_string()))?,
            None => storepatch::layout::HostRoot::none(),
        };
        let default_dir = |node_path: &str| -> Result<Option<PathBuf>, Failure> {
            let d = host
                .resolve(Path::new(node_path))
                .map_err(|e| Failure::usage(format!("{node_path} under the host root: {e}")))?;
            Ok(d.is_dir().then_some(d))
        };
        let manifests = match &self.manifests {
            Some(dir) => Some(dir.clone()),
            None => default_dir(rehash::static_pods::DEFAULT_MANIFESTS_DIR)?,
        };
        let manifests = manifests
            .map(|d| StaticManifests::read(&d))
            .transpose()
            .map_err(|e| Failure::usage(e.to_string()))?;
        let kubelet_dir = match &self.kubelet_dir {
            Some(dir) => Some(dir.clone()),
            None => default_dir(DEFAULT_KUBELET_DIR)?,
        };
        Ok(NodeFiles {
            manifests,
            kubelet_dir,
            // the hierarchy this process sees is the host's kind (v1 or v2), in a Job too
            cgroup_fs: None,
            api: None,
            installed_kubelet: None,
            pin_static_pod_uids: false,
            node_object: self
                .node_object
                .as_deref()
                .map(read_node_object)
                .transpose()?,
            kubelet_config: self.kubelet_config.clone(),
            // the host's processes: this one's /proc, also in a pod with hostPID; without
            // --host-root only (a copied node's root is not the running node)
            kubelet_args: host
                .dir()
                .is_none()
                .then(|| rehash::node::running_kubelet_args(Path::new("/proc"), None))
                .flatten(),
        })
    }
}

/// The Node the API server served with the pods becomes the one admission is predicted
/// against, unless `--node` gave one.
fn adopt_served_node(node: &mut NodeFiles, served: Option<Vec<u8>>) -> Result<(), Failure> {
    if let (None, Some(raw)) = (&node.node_object, served) {
        node.node_object = Some(
            rehash::admission::NodeObject::parse(&raw)
                .map_err(|e| Failure::usage(format!("the API server's Node: {e}")))?,
        );
    }
    Ok(())
}

/// `--node FILE` (or `-` for stdin): a Node object; one that does not parse is a usage error.
fn read_node_object(path: &Path) -> Result<rehash::admission::NodeObject, Failure> {
    let bytes = read_source(Some(path), "node file ", "node from stdin").map_err(Failure::usage)?;
    rehash::admission::NodeObject::parse(&bytes)
        .map_err(|e| Failure::usage(format!("node file {}: {e}", path.display())))
}

/// A command's "no": a message and its exit code. Every library error becomes one here, in
/// one place ([`exit_code`]).
struct Failure {
    code: u8,
    msg: String,
}

impl Failure {
    fn usage(msg: impl Into<String>) -> Self {
        Failure {
            code: exit::USAGE,
            msg: msg.into(),
        }
    }
    fn output(e: std::io::Error) -> Self {
        Failure {
            code: exit::FAILURE,
            msg: format!("cannot write output: {e}"),
        }
    }
}

/// The one mapping of error classes to exit codes.
fn exit_code(class: ErrorClass) -> u8 {
    match class {
        ErrorClass::Failure => exit::FAILURE,
        ErrorClass::Usage => exit::USAGE,
        ErrorClass::Refused => exit::REFUSED,
    }
}

impl std::convert::From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure {
            code: exit_code(e.class()),
            msg: e.to_string(),
        }
    }
}

type Done = Result<u8, Failure>;

/// The bytes of `path`, or of standard input for `-` (or no path). `file` and `stdin` name
/// the source in the error: "cannot read {file}{path}" / "cannot read {stdin}".
fn read_source(path: Option<&Path>, file: &str, stdin: &str) -> Result<Vec<u8>, String> {
    match path {
        Some(p) if p.as_os_str() != "-" => {
            std::fs::read(p).map_err(|e| format!("cannot read {file}{}: {e}", p.display()))
        }
        _ => {
            let mut buf = Vec::new();
            std::io::stdin()
                .read_to_end(&mut buf)
                .map_err(|e| format!("cannot read {stdin}: {e}"))?;
            Ok(buf)
        }
    }
}

fn parse_version(flag: &str, s: &str) -> Result<KubeletVersion, Failure> {
    s.parse()
        .map_err(|e| Failure::usage(format!("{flag}: {e}")))
}

fn parse_from(s: &str) -> Result<From, Failure> {
    if s == "auto" {
        Ok(From::Auto)
    } else {
        parse_version("--from", s).map(From::Version)
    }
}

fn parse_versions(args: &[String]) -> Result<Vec<KubeletVersion>, String> {
    let mut out = Vec::new();
    for a in args {
        for part in a.split(',') {
            if part.trim() == "all" {
                out.extend(KubeletVersion::all());
            } else {
                out.push(part.parse::<KubeletVersion>().map_err(|e| e.to_string())?);
            }
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// The store, the plan and (with `lock`, for `patch`) the store's lock, taken before the
/// plan reads anything and held by the caller to its end, for `plan`, `patch` and offline
/// `verify`. Flags are checked before anything is read, so a bad `--to` never touches the
/// store.
fn plan_node(
    source: &api_pods::PodsFlags,
    to: &str,
    from: &str,
    store: &StoreFlags,
    node: &NodeFlags,
    (lock, pin_uids): (bool, bool),
) -> Result<PlannedNode, Failure> {
    let to = parse_version("--to", to)?;
    let from = parse_from(from)?;
    let switch = node.switch_options(store)?;
    let node_flags = node;
    let mut node = node.read(store)?;
    node.pin_static_pod_uids = pin_uids;
    let location = store.location()?;
    // Pods from the API server are read first: one that cannot be asked leaves even the
    // store's lock file untouched. A pods file (or stdin) is read under the lock, as before:
    // a second run is refused before it waits on its input.
    let from_api = source.pods.is_none();
    let early = if from_api {
        Some(source.read(location.host_root.as_deref(), false)?)
    } else {
        None
    };
    // offline, the installed kubelet's own --version (with the pods from the API server, the
    // Node's reported version)
    let installed = if from_api {
        None
    } else {
        node_flags.installed_kubelet(store)?
    };
    let store = location.open()?;
    let lock = lock
        .then(|| storepatch::session::hold(store.root(), &location.state_dirs()))
        .transpose()
        .map_err(Error::from)?;
    let api_pods::Pods {
        bytes: pods,
        api,
        node: served,
    } = match early {
        Some(p) => p,
        None => source.read(location.host_root.as_deref(), false)?,
    };
    node.installed_kubelet = installed;
    node.api = api;
    adopt_served_node(&mut node, served)?;
    let (mut plan, networks) = Plan::build_with_networks(&pods, store.as_ref(), from, to, &node)?;
    rehash::cri_dockerd::plan_switch_with_networks(&mut plan, &networks, &switch)?;
    Ok((store, plan, lock))
}

type PlannedNode = (
    Box<dyn storepatch::RuntimeStore>,
    Plan,
    Option<storepatch::lock::StoreLock>,
);

fn plan_exit(plan: &Plan) -> u8 {
    if plan.incomplete() {
        exit::INCOMPLETE
    } else {
        exit::OK
    }
}

fn cmd_pods(source: &api_pods::PodsFlags, host_root: Option<PathBuf>, out: &mut dyn Write) -> Done {
    let pods = source.read(host_root.as_deref(), false)?;
    out.write_all(&pods.bytes).map_err(Failure::output)?;
    writeln!(out).map_err(Failure::output)?;
    Ok(exit::OK)
}

fn cmd_plan(flags: &PlanFlags, output: Output, out: &mut dyn Write) -> Done {
    let (_, plan, _) = plan_node(
        &flags.source,
        &flags.to,
        &flags.from,
        &flags.store,
        &flags.node,
        (false, flags.pin_uids(false)),
    )?;
    render::plan(&plan, output, out).map_err(Failure::output)?;
    Ok(plan_exit(&plan))
}

/// `--report` must not be a symlink: root writing through one overwrites whatever it points
/// at. Checked before the patch (so a refused report never follows a rewritten store) and
/// again right before the write.
fn refuse_report_symlink(path: &Path) -> Result<(), Failure> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => Err(Failure::usage(format!(
            "--report {} is a symbolic link; refusing to write through it (give the real path)",
            path.display()
        ))),
        _ => Ok(()),
    }
}

/// Writes the report mode 0600 through a temp file and a rename (a crash leaves the old
/// report or the new one, a symlink planted after the check is replaced, not followed), and
/// creates missing parents 0700, whatever the umask: the report names every container.
fn write_report(path: &Path, plan: &Plan) -> Result<(), Failure> {
    refuse_report_symlink(path)?;
    let fail = |e: storepatch::StoreError| Failure {
        code: exit::FAILURE,
        msg: format!("cannot write report {}: {e}", path.display()),
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        storepatch::atomic::create_dir_all_private(parent).map_err(fail)?;
    }
    storepatch::atomic::replace_file_with(path, storepatch::atomic::FileMeta::private(), &mut |w| {
        plan.write_json(w)
    })
    .map_err(fail)
}

/// `patch --backup`: how containerd's meta.db is backed up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum BackupKind {
    /// The original bytes of the pages the transaction overwrites.
    Pages,
    /// A copy of the whole file.
    Full,
}

fn cmd_patch(
    flags: &PlanFlags,
    backup_dir: Option<PathBuf>,
    (set_aside_checkpoints, accept_restarts, backup_kind): (bool, bool, BackupKind),
    report: Option<&Path>,
    dry_run: bool,
    output: Output,
    out: &mut dyn Write,
) -> Done {
    if let (Some(path), false) = (report, dry_run) {
        refuse_report_symlink(path)?;
    }
    let (store, plan, _lock) = plan_node(
        &flags.source,
        &flags.to,
        &flags.from,
        &flags.store,
        &flags.node,
        (!dry_run, flags.pin_uids(false)),
    )?;
    if dry_run {
        render::plan(&plan, output, out).map_err(Failure::output)?;
        return Ok(plan_exit(&plan));
    }
    let mut backup = rehash::BackupOptions::new(match backup_dir {
        Some(dir) => dir,
        None => flags.store.location()?.default_backup_dir(store.kind())?,
    });
    backup.set_aside_checkpoints = set_aside_checkpoints;
    backup.accept_restarts = accept_restarts;
    backup.bolt_full_copy = backup_kind == BackupKind::Full;
    backup.state = flags.store.location()?.state_dirs();
    let progress = spinner::Stderr::default();
    let done = match rehash::patch(&plan, store.as_ref(), &backup, &progress) {
        Ok(done) => done,
        Err(Error::ReadBack {
            ids,
            backup_dir,
            report: partial,
        }) => {
            // The operator needs the report most when the read-back failed.
            if let Some(path) = report {
                write_report(path, &partial)?;
            }
            return Err(Error::ReadBack {
                ids,
                backup_dir,
                report: partial,
            }
            .into());
        }
        Err(e) => return Err(e.into()),
    };
    drop(progress);
    if let Some(dir) = &done.backup_dir {
        eprintln!(
            "kubelet-rehash: rewrote {} container(s) ({} already current); backup and report in {}",
            done.changed,
            done.already,
            dir.display()
        );
        for f in &done.set_aside {
            eprintln!(
                "kubelet-rehash: set aside {} into the backup (the target kubelet rejects it; rollback puts it back)",
                f.display()
            );
        }
    }
    if let Some(path) = report {
        write_report(path, &done.report)?;
    }
    render::plan(&done.report, output, out).map_err(Failure::output)?;
    Ok(plan_exit(&done.report))
}

struct VerifyFlags<'a> {
    source: &'a api_pods::PodsFlags,
    to: Option<&'a str>,
    from: &'a str,
    store: &'a StoreFlags,
    node: &'a NodeFlags,
    live: bool,
    endpoint: Option<&'a str>,
    report: Option<&'a Path>,
}

fn cmd_verify(f: &VerifyFlags<'_>, output: Output, out: &mut dyn Write) -> Done {
    if f.live {
        let path = f.report.expect("clap: --live requires --report");
        let bytes = std::fs::read(path)
            .map_err(|e| Failure::usage(format!("cannot read report {}: {e}", path.display())))?;
        let report = Plan::from_json(&bytes)
            .map_err(|e| Failure::usage(format!("{}: {e}", path.display())))?;
        let v = rehash::verify_live(&report, f.endpoint)?;
        for p in &v.problems {
            writeln!(out, "FAIL {p}").map_err(Failure::output)?;
        }
        return if v.ok() {
            writeln!(out, "verified live: {} rewritten container(s) report their target hash, run, and kept their pid", v.checked).map_err(Failure::output)?;
            Ok(exit::OK)
        } else {
            writeln!(
                out,
                "{} problem(s) over {} rewritten container(s)",
                v.problems.len(),
                v.checked
            )
            .map_err(Failure::output)?;
            Ok(exit::INCOMPLETE)
        };
    }
    let to = f.to.expect("clap: --to required without --live");
    let (_, plan, _) = plan_node(f.source, to, f.from, f.store, f.node, (false, false))?;
    render::plan(&plan, output, out).map_err(Failure::output)?;
    let v = rehash::verify(&plan);
    if v.ok() {
        eprintln!(
            "kubelet-rehash: verified: every proven container holds its kubelet {} hash",
            plan.to
        );
        Ok(exit::OK)
    } else {
        eprintln!(
            "kubelet-rehash: {} container(s) do not hold their kubelet {} hash yet",
            v.pending.len(),
            plan.to
        );
        Ok(exit::INCOMPLETE)
    }
}

fn cmd_rollback(
    backup_dir: &Path,
    store: &StoreFlags,
    accept_unrecorded: bool,
    values: bool,
    out: &mut dyn Write,
) -> Done {
    let location = store.location()?;
    // A --backup-dir that is not there is a wrong argument (exit 2), like a missing --root;
    // any other error reading it is the rollback's own.
    if let Err(e) = std::fs::symlink_metadata(backup_dir) {
        if e.kind() == std::io::ErrorKind::NotFound {
            return Err(Failure::usage(format!(
                "--backup-dir {}: no such directory",
                backup_dir.display()
            )));
        }
    }
    if values {
        let s = rehash::rollback::open_backed_up_store(backup_dir, &location)?;
        let v = rehash::rollback_values(backup_dir, s.as_ref(), &location.state_dirs())?;
        match &v.undo_backup {
            Some(dir) => writeln!(
                out,
                "restored the previous hash of {} container(s) ({} already had it); backup of this undo in {}",
                v.restored,
                v.already,
                dir.display()
            ),
            None => writeln!(
                out,
                "every rewritten container already holds its previous hash ({})",
                v.already
            ),
        }
        .map_err(Failure::output)?;
        write_rollback_files(&v.set_aside, out)?;
        return Ok(exit::OK);
    }
    let report = rehash::rollback(backup_dir, &location, accept_unrecorded)?;
    write_rollback_files(&report, out)?;
    Ok(exit::OK)
}

/// One line per file of a rollback report; a set-aside checkpoint that came back over one a
/// newer kubelet wrote says where that one is kept.
fn write_rollback_files(
    report: &storepatch::backup::RollbackReport,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    use storepatch::backup::RollbackAction;
    for (path, action) in &report.files {
        match action {
            RollbackAction::Restored => writeln!(out, "restored: {}", path.display()),
            RollbackAction::AlreadyOriginal => writeln!(out, "already original: {}", path.display()),
            RollbackAction::RestoredOverNewer { kept } => writeln!(
                out,
                "restored: {} (a newer kubelet had written its own since the patch set ours aside: kept at {})",
                path.display(),
                kept.display()
            ),
        }
        .map_err(Failure::output)?;
    }
    Ok(())
}

fn cmd_versions(output: Output, out: &mut dyn Write) -> std::io::Result<()> {
    let rows = hashcompat::versions();
    match output {
        Output::Json => {
            serde_json::to_writer_pretty(&mut *out, &rows).map_err(std::io::Error::other)?;
            writeln!(out)
        }
        Output::Table => {
            writeln!(
                out,
                "{:<8} {:<24} {:<6} ALGORITHM",
                "VERSION", "FORM", "CLASS"
            )?;
            for r in &rows {
                writeln!(
                    out,
                    "{:<8} {:<24} {:<6} {}",
                    r.version.to_string(),
                    format!("{:?}", r.form),
                    r.equivalence_class,
                    r.description
                )?;
            }
            Ok(())
        }
    }
}

fn cmd_hash(
    kubelet_version: &[String],
    explain: bool,
    file: &Option<PathBuf>,
    out: &mut dyn Write,
) -> Done {
    let versions = parse_versions(kubelet_version).map_err(Failure::usage)?;
    let input = read_source(file.as_deref(), "", "standard input").map_err(Failure::usage)?;
    let result = if explain {
        if versions.len() != 1 {
            return Err(Failure::usage(
                "--explain takes exactly one --kubelet-version",
            ));
        }
        hash_cmd::explain(&input, versions[0], out)
    } else {
        hash_cmd::run(&input, &versions, out)
    };
    match result {
        Ok(true) => Ok(exit::OK),
        Ok(false) => Ok(exit::FAILURE),
        Err(e) => Err(Failure::output(e)),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let result = match &cli.command {
        Command::Hash {
            kubelet_version,
            explain,
            file,
        } => cmd_hash(kubelet_version, *explain, file, &mut out),
        Command::Pods {
            kubeconfig,
            node_name,
            host_root,
        } => cmd_pods(
            &api_pods::PodsFlags {
                pods: None,
                kubeconfig: kubeconfig.clone(),
                node_name: node_name.clone(),
            },
            host_root.clone().or_else(|| {
                std::env::var_os(HOST_ROOT_ENV)
                    .filter(|v| !v.is_empty())
                    .map(PathBuf::from)
            }),
            &mut out,
        ),
        Command::Plan { plan, output } => cmd_plan(plan, *output, &mut out),
        Command::Patch {
            plan,
            backup_dir,
            report,
            dry_run,
            set_aside_checkpoints,
            accept_restarts,
            backup,
            output,
        } => cmd_patch(
            plan,
            backup_dir.clone(),
            (*set_aside_checkpoints, *accept_restarts, *backup),
            report.as_deref(),
            *dry_run,
            *output,
            &mut out,
        ),
        Command::Verify {
            source,
            to,
            from,
            store,
            node,
            live,
            endpoint,
            report,
            output,
        } => cmd_verify(
            &VerifyFlags {
                source,
                to: to.as_deref(),
                from,
                store,
                node,
                live: *live,
                endpoint: endpoint.as_deref(),
                report: report.as_deref(),
            },
            *output,
            &mut out,
        ),
        Command::Upgrade {
            plan,
            upgrade,
            output,
        } => upgrade_cmd::cmd_upgrade(plan, upgrade, *output, &mut out),
        Command::Rollback {
            state: Some(state),
            store,
            services,
            ..
        } => upgrade_cmd::cmd_rollback_state(state, store, services, &mut out),
        Command::Rollback {
            backup_dir,
            store,
            accept_unrecorded,
            values,
            ..
        } => cmd_rollback(
            backup_dir
                .as_deref()
                .expect("clap: --backup-dir without --state"),
            store,
            *accept_unrecorded,
            *values,
            &mut out,
        ),
        Command::Guard { guard } => guard_cmd::cmd_guard(guard, &mut out),
        Command::Versions { output } => cmd_versions(*output, &mut out)
            .map(|_| exit::OK)
            .map_err(Failure::output),
        Command::Completions { shell } => dist::completions(*shell, Cli::command(), &mut out)
            .map(|_| exit::OK)
            .map_err(Failure::output),
        Command::Man { dir } => dist::man_pages(Cli::command(), dir)
            .map(|_| exit::OK)
            .map_err(|e| Failure {
                code: exit::FAILURE,
                msg: format!("cannot write man pages into {}: {e}", dir.display()),
            }),
    };
    let code = match result {
        Ok(code) => code,
        Err(f) => {
            let _ = out.flush();
            eprintln!("kubelet-rehash: {}", f.msg);
            f.code
        }
    };
    let _ = out.flush();
    ExitCode::from(code)
}
