//! Node layout discovery, in one place: where each Kubernetes distribution keeps its runtime's
//! store, socket and configuration, and which store of a node to work on.
//!
//! | layout | runtime | store root | socket | configuration read |
//! | --- | --- | --- | --- | --- |
//! | [`Layout::Docker`] (kubeadm, dockershim / cri-dockerd) | docker | `/var/lib/docker` | `/var/run/docker.sock` | `/etc/docker/daemon.json` |
//! | [`Layout::Containerd`] (kubeadm) | containerd | `/var/lib/containerd` | `/run/containerd/containerd.sock` | `/etc/containerd/config.toml` |
//! | [`Layout::Crio`] (kubeadm, OpenShift) | crio | `/var/lib/containers/storage` | `/var/run/crio/crio.sock` | `/etc/containers/storage.conf`, `/etc/crio/crio.conf`, `/etc/crio/crio.conf.d/*.conf` |
//! | [`Layout::K3s`] | containerd | `/var/lib/rancher/k3s/agent/containerd` | `/run/k3s/containerd/containerd.sock` | `/var/lib/rancher/k3s/agent/etc/containerd/config.toml` |
//! | [`Layout::Rke2`] | containerd | `/var/lib/rancher/rke2/agent/containerd` | `/run/k3s/containerd/containerd.sock` | `/var/lib/rancher/rke2/agent/etc/containerd/config.toml` |
//! | [`Layout::MicroK8s`] | containerd | `/var/snap/microk8s/common/var/lib/containerd` | `/var/snap/microk8s/common/run/containerd.sock` | `/var/snap/microk8s/current/args/containerd`, `…/args/containerd.toml` (else `…/args/containerd-template.toml`) |
//!
//! Where the paths come from:
//!
//! * k3s: `pkg/agent/config/config.go` sets `Containerd.Root = <data-dir>/agent/containerd`,
//!   `Config = <data-dir>/agent/etc/containerd/config.toml`, `State = /run/k3s/containerd` and
//!   `Address = <State>/containerd.sock` (k3s-io/k3s); `pkg/agent/containerd`
//!   `getContainerdArgs` starts containerd with `-c <Config> -a <Address> --state <State>
//!   --root <Root>`. Command-line flags win over the file in containerd, so for k3s the file is
//!   only checked to be readable: its `root`, `state`, `address` cannot move the store.
//! * RKE2 runs k3s's agent code with the data-dir `/var/lib/rancher/rke2` (docs.rke2.io:
//!   "Configuring containerd", `/var/lib/rancher/rke2/agent/etc/containerd/config.toml`), so its
//!   root moves with the data-dir and its socket stays `/run/k3s/containerd/containerd.sock`.
//! * MicroK8s: `microk8s-resources/default-args/containerd` (canonical/microk8s) holds
//!   containerd's flags, `--config ${SNAP_DATA}/args/containerd.toml --root
//!   ${SNAP_COMMON}/var/lib/containerd --state ${SNAP_COMMON}/run/containerd --address
//!   ${SNAP_COMMON}/run/containerd.sock`, with `SNAP_DATA = /var/snap/microk8s/current` and
//!   `SNAP_COMMON = /var/snap/microk8s/common`. The flags file is read (an operator may edit
//!   it), then the config for what no flag sets.
//! * Docker, containerd and CRI-O stock paths are the runtimes' own defaults; the config files
//!   and what is read from them are in [`config`].
//!
//! A k3s or RKE2 started with another `--data-dir`, or a runtime started with a `--config`
//! elsewhere, is not found by itself: give `--root` (and `--runtime-socket`).
//!
//! Which store: [`find`] looks at every layout (under the [`HostRoot`]), keeps those whose root
//! holds a store, and refuses when there is not exactly one, naming them, unless the operator
//! picked the runtime or the root. A Docker node usually also has containerd's store (dockerd
//! runs on containerd): that is two stores, and the operator says which.

pub mod config;

pub use crate::node::{HostRoot, HostRootError};
pub use config::ConfigError;

use crate::contract::StoreOptions;
use crate::RuntimeKind;
use std::path::{Path, PathBuf};

/// A known way of laying out a node's runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Docker at its stock paths (kubeadm with dockershim or cri-dockerd), moved by daemon.json.
    Docker,
    /// containerd at its stock paths (kubeadm), moved by config.toml.
    Containerd,
    /// CRI-O at its stock paths (kubeadm, OpenShift), moved by storage.conf / crio.conf.
    Crio,
    /// k3s's embedded containerd.
    K3s,
    /// RKE2's embedded containerd.
    Rke2,
    /// MicroK8s's containerd (snap).
    MicroK8s,
}

/// Why no store could be found or chosen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DetectError {
    /// The root given matches no runtime's layout.
    #[error("{root} is not {hints}; give the runtime explicitly")]
    NotAStore {
        /// The root that was given.
        root: PathBuf,
        /// What each runtime's root would hold.
        hints: String,
    },
    /// No runtime store at any known layout's root.
    #[error("no runtime store found (looked at {roots}); give --runtime and --root, or, in a container, --host-root where the node's / is mounted")]
    NoneFound {
        /// The layouts and roots that were looked at.
        roots: String,
    },
    /// Several known layouts' roots hold stores.
    #[error("more than one runtime store on this node: {found}; pick one with --root (or --runtime, when they are of different runtimes)")]
    Several {
        /// The stores found: runtime, layout and root of each.
        found: String,
    },
    /// The root does not exist.
    #[error("store root {0} does not exist or is not a directory")]
    RootMissing(PathBuf),
    /// A runtime's configuration file exists but cannot be used.
    #[error(transparent)]
    Config(#[from] crate::layout::ConfigError),
    /// `--host-root` cannot be used.
    #[error(transparent)]
    HostRoot(#[from] crate::layout::HostRootError),
    /// A node path could not be resolved inside the host root.
    #[error("{}: cannot be resolved inside the host root: {reason}", path.display())]
    Resolve {
        /// The node path.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The runtime given does not match the root's layout (a usage error, like a root that
    /// matches no runtime: the flags contradict each other, nothing is read as a guess).
    #[error("--runtime {runtime} does not match {root}: it is not {hint}{detected}")]
    RuntimeMismatch {
        /// The runtime that was given.
        runtime: &'static str,
        /// The root that was given.
        root: PathBuf,
        /// What that runtime's root would hold.
        hint: String,
        /// `; it looks like a … root`, when another runtime's layout matches.
        detected: String,
    },
}

/// The runtime whose layout `root` has.
pub fn detect_kind(root: &Path) -> Result<RuntimeKind, DetectError> {
    RuntimeKind::ALL
        .into_iter()
        .find(|k| k.runtime().looks_like(root))
        .ok_or_else(|| DetectError::NotAStore {
            root: root.to_path_buf(),
            hints: RuntimeKind::ALL
                .iter()
                .map(|k| k.runtime().layout_hint())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// Decides which runtime and root to use on this machine's own `/`: both given, the runtime
/// whose layout `root` has, or the one store among the known layouts
/// ([`find`], which also gives the socket and the other defaults).
pub fn locate(
    kind: Option<RuntimeKind>,
    root: Option<&Path>,
) -> Result<(RuntimeKind, PathBuf), DetectError> {
    let found = find(&HostRoot::none(), kind, root)?;
    Ok((found.kind, found.root))
}

/// One layout's store as found on a node: every path as seen from here (under the host root).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovered {
    /// Which layout.
    pub layout: Layout,
    /// The store root.
    pub root: PathBuf,
    /// The socket, pid file, daemon.json and runroot that go with it.
    pub options: StoreOptions,
    /// containerd's `state` directory (reported; the store does not need it).
    pub state: Option<PathBuf>,
    /// The configuration files that exist and were read.
    pub read: Vec<PathBuf>,
}

/// What [`find`] chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The runtime.
    pub kind: RuntimeKind,
    /// The store root (as given, or as discovered).
    pub root: PathBuf,
    /// The layout whose root this is, when it is a known one.
    pub layout: Option<Layout>,
    /// Defaults for whatever the operator did not give (socket, pid file, …).
    pub defaults: StoreOptions,
}

const MICROK8S_SNAP_DATA: &str = "/var/snap/microk8s/current";
const MICROK8S_SNAP_COMMON: &str = "/var/snap/microk8s/common";

impl Layout {
    /// Every layout, in the order candidates are listed.
    pub const ALL: [Layout; 6] = [
        Layout::Containerd,
        Layout::Docker,
        Layout::Crio,
        Layout::K3s,
        Layout::Rke2,
        Layout::MicroK8s,
    ];

    /// Its name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Layout::Docker => "docker",
            Layout::Containerd => "containerd",
            Layout::Crio => "cri-o",
            Layout::K3s => "k3s",
            Layout::Rke2 => "rke2",
            Layout::MicroK8s => "microk8s",
        }
    }

    /// The runtime it runs.
    pub fn runtime(self) -> RuntimeKind {
        match self {
            Layout::Docker => RuntimeKind::Docker,
            Layout::Crio => RuntimeKind::Crio,
            Layout::Containerd | Layout::K3s | Layout::Rke2 | Layout::MicroK8s => {
                RuntimeKind::Containerd
            }
        }
    }

    /// The store root when no configuration moves it.
    pub fn default_root(self) -> &'static Path {
        Path::new(match self {
            // The stock layouts are the runtimes' own defaults.
            Layout::Docker | Layout::Containerd | Layout::Crio => {
                return self.runtime().runtime().default_root()
            }
            Layout::K3s => "/var/lib/rancher/k3s/agent/containerd",
            Layout::Rke2 => "/var/lib/rancher/rke2/agent/containerd",
            Layout::MicroK8s => "/var/snap/microk8s/common/var/lib/containerd",
        })
    }

    /// The API socket when no configuration moves it.
    pub fn default_socket(self) -> &'static Path {
        Path::new(match self {
            Layout::Docker => "/var/run/docker.sock",
            Layout::Containerd => crate::containerd::DEFAULT_SOCKET,
            Layout::Crio => crate::crio::DEFAULT_SOCKET,
            Layout::K3s | Layout::Rke2 => "/run/k3s/containerd/containerd.sock",
            Layout::MicroK8s => "/var/snap/microk8s/common/run/containerd.sock",
        })
    }

    /// The configuration files it reads, as node paths (the README's table).
    pub fn config_files(self) -> &'static [&'static str] {
        match self {
            Layout::Docker => &["/etc/docker/daemon.json"],
            Layout::Containerd => &["/etc/containerd/config.toml"],
            Layout::Crio => &[
                "/etc/containers/storage.conf",
                "/etc/crio/crio.conf",
                "/etc/crio/crio.conf.d/*.conf",
            ],
            Layout::K3s => &["/var/lib/rancher/k3s/agent/etc/containerd/config.toml"],
            Layout::Rke2 => &["/var/lib/rancher/rke2/agent/etc/containerd/config.toml"],
            Layout::MicroK8s => &[
                "/var/snap/microk8s/current/args/containerd",
                "/var/snap/microk8s/current/args/containerd.toml",
                "/var/snap/microk8s/current/args/containerd-template.toml",
            ],
        }
    }

    /// Reads this layout's configuration under `host` and says where its store and socket are.
    /// Does not check that a store is there.
    pub fn discover(self, host: &HostRoot) -> Result<Discovered, DetectError> {
        let mut d = Discover {
            host,
            read: Vec::new(),
        };
        let mut options = StoreOptions::default();
        let (root, state) = match self {
            Layout::Docker => {
                let file = d.path(Path::new("/etc/docker/daemon.json"))?;
                let cfg = match d.read(&file)? {
                    Some(b) => config::parse_daemon_json(&file, &b)?,
                    None => config::DockerConfig::default(),
                };
                options.socket =
                    Some(d.path(cfg.socket.as_deref().unwrap_or(self.default_socket()))?);
                options.pidfile = Some(
                    d.path(
                        cfg.pidfile
                            .as_deref()
                            .unwrap_or(Path::new("/var/run/docker.pid")),
                    )?,
                );
                options.daemon_json = Some(file);
                (cfg.data_root, None)
            }
            Layout::Containerd => {
                let file = d.path(Path::new("/etc/containerd/config.toml"))?;
                let cfg = d.containerd_toml(&file)?.unwrap_or_default();
                options.socket =
                    Some(d.path(cfg.address.as_deref().unwrap_or(self.default_socket()))?);
                let state = d.path(cfg.state.as_deref().unwrap_or(Path::new("/run/containerd")))?;
                (cfg.root, Some(state))
            }
            Layout::K3s | Layout::Rke2 => {
                // k3s passes --root, --state and --address: the file cannot move them, but a
                // broken one still means a node we do not understand.
                let file = d.path(Path::new(self.config_files()[0]))?;
                d.containerd_toml(&file)?;
                options.socket = Some(d.path(self.default_socket())?);
                (None, Some(d.path(Path::new("/run/k3s/containerd"))?))
            }
            Layout::MicroK8s => {
                let flags = d.microk8s_flags()?;
                let config = match &flags.config {
                    Some(c) => d.path(c)?,
                    None => {
                        let rendered =
                            d.path(Path::new("/var/snap/microk8s/current/args/containerd.toml"))?;
                        if rendered.exists() {
                            rendered
                        } else {
                            d.path(Path::new(
                                "/var/snap/microk8s/current/args/containerd-template.toml",
                            ))?
                        }
                    }
                };
                let cfg = d.containerd_toml(&config)?.unwrap_or_default();
                let address = flags.address.or(cfg.address);
                options.socket = Some(d.path(address.as_deref().unwrap_or(self.default_socket()))?);
                let state = flags
                    .state
                    .or(cfg.state)
                    .unwrap_or_else(|| PathBuf::from("/var/snap/microk8s/common/run/containerd"));
                (flags.root.or(cfg.root), Some(d.path(&state)?))
            }
            Layout::Crio => {
                let crio = d.crio()?;
                options.socket =
                    Some(d.path(crio.listen.as_deref().unwrap_or(self.default_socket()))?);
                let runroot = d.path(
                    crio.runroot
                        .as_deref()
                        .unwrap_or(Path::new(crate::crio::DEFAULT_RUNROOT)),
                )?;
                // After a reboot the tmpfs runroot is gone; the store then warns about it.
                options.runroot = runroot.is_dir().then_some(runroot);
                (crio.root, None)
            }
        };
        options.host = host.clone();
        let root = d.path(root.as_deref().unwrap_or(self.default_root()))?;
        Ok(Discovered {
            layout: self,
            root,
            options,
            state,
            read: d.read,
        })
    }
}

/// One layout's discovery under way: the host root and the files read so far.
struct Discover<'a> {
    host: &'a HostRoot,
    read: Vec<PathBuf>,
}

/// The MicroK8s flags file's settings (`--flag value` or `--flag=value`, one a line).
#[derive(Default)]
struct MicroK8sFlags {
    config: Option<PathBuf>,
    root: Option<PathBuf>,
    state: Option<PathBuf>,
    address: Option<PathBuf>,
}

impl Discover<'_> {
    fn path(&self, node_path: &Path) -> Result<PathBuf, DetectError> {
        self.host
            .resolve(node_path)
            .map_err(|e| DetectError::Resolve {
                path: node_path.to_path_buf(),
                reason: e.to_string(),
            })
    }

    fn read(&mut self, file: &Path) -> Result<Option<Vec<u8>>, DetectError> {
        let bytes = config::read_optional(file)?;
        if bytes.is_some() {
            self.read.push(file.to_path_buf());
        }
        Ok(bytes)
    }

    /// A containerd config file and every file it imports, merged as containerd merges them:
    /// breadth first, each file once, later files over earlier ones. containerd 2.x's own
    /// default config imports `/etc/containerd/conf.d/*.toml`, so a drop-in there can move
    /// the root or the socket.
    fn containerd_toml(
        &mut self,
        file: &Path,
    ) -> Result<Option<config::ContainerdConfig>, DetectError> {
        let Some(b) = self.read(file)? else {
            return Ok(None);
        };
        let mut merged = config::parse_containerd_toml(file, &b)?;
        let mut loaded = std::collections::BTreeSet::from([file.to_path_buf()]);
        let mut pending = self.imports(file, &merged.imports)?;
        while let Some(import) = pending.first().cloned() {
            pending.remove(0);
            if !loaded.insert(import.clone()) {
                continue;
            }
            // containerd refuses to start when an import it names does not exist
            let bytes = self.read(&import)?.ok_or_else(|| ConfigError {
                file: import.clone(),
                reason: format!("is imported by {} but does not exist", file.display()),
            })?;
            let cfg = config::parse_containerd_toml(&import, &bytes)?;
            pending.extend(self.imports(&import, &cfg.imports)?);
            merged = merged.overlay(cfg);
        }
        Ok(Some(merged))
    }

    /// The files `imports` of `parent` (a resolved path) name, resolved: relative to the
    /// parent's directory, `*` expanded as Go's `filepath.Glob` does (matches in name order).
    fn imports(&self, parent: &Path, imports: &[String]) -> Result<Vec<PathBuf>, DetectError> {
        let parent_node = self.host.node_path(parent);
        let mut out = Vec::new();
        for import in imports {
            let mut node = PathBuf::from(import);
            if !node.is_absolute() {
                node = parent_node.parent().unwrap_or(Path::new("/")).join(node);
            }
            if !import.contains('*') {
                out.push(self.path(&node)?);
                continue;
            }
            let mut matches = vec![PathBuf::from("/")];
            for part in node.components().skip(1) {
                let part = part.as_os_str().to_string_lossy().into_owned();
                let mut next = Vec::new();
                for base in &matches {
                    if !part.contains('*') {
                        next.push(base.join(&part));
                        continue;
                    }
                    let Ok(entries) = std::fs::read_dir(self.path(base)?) else {
                        continue;
                    };
                    let mut names: Vec<String> = entries
                        .flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .filter(|n| wildcard_match(&part, n))
                        .collect();
                    names.sort();
                    next.extend(names.into_iter().map(|n| base.join(n)));
                }
                matches = next;
            }
            for m in matches {
                let resolved = self.path(&m)?;
                if resolved.exists() {
                    out.push(resolved);
                }
            }
        }
        Ok(out)
    }

    fn microk8s_flags(&mut self) -> Result<MicroK8sFlags, DetectError> {
        let file = self.path(Path::new("/var/snap/microk8s/current/args/containerd"))?;
        let mut flags = MicroK8sFlags::default();
        let Some(bytes) = self.read(&file)? else {
            return Ok(flags);
        };
        let text = String::from_utf8(bytes).map_err(|e| ConfigError {
            file: file.clone(),
            reason: format!("is not UTF-8 text: {e}"),
        })?;
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (flag, value) = match line.split_once(['=', ' ', '\t']) {
                Some((f, v)) => (f, v.trim()),
                None => (line, ""),
            };
            let slot = match flag {
                "--config" | "-c" => &mut flags.config,
                "--root" => &mut flags.root,
                "--state" => &mut flags.state,
                "--address" | "-a" => &mut flags.address,
                _ => continue,
            };
            let value = value
                .trim_matches('"')
                .replace("${SNAP_DATA}", MICROK8S_SNAP_DATA)
                .replace("$SNAP_DATA", MICROK8S_SNAP_DATA)
                .replace("${SNAP_COMMON}", MICROK8S_SNAP_COMMON)
                .replace("$SNAP_COMMON", MICROK8S_SNAP_COMMON);
            let p = PathBuf::from(&value);
            if !p.is_absolute() {
                return Err(ConfigError {
                    file: file.clone(),
                    reason: format!("{flag} {value:?} is not an absolute path"),
                }
                .into());
            }
            *slot = Some(p);
        }
        Ok(flags)
    }

    fn crio(&mut self) -> Result<config::CrioConfig, DetectError> {
        // containers/storage reads /etc/containers/storage.conf, else the distribution's
        // /usr/share/containers/storage.conf.
        let mut storage = config::StorageConfig::default();
        for f in [
            "/etc/containers/storage.conf",
            "/usr/share/containers/storage.conf",
        ] {
            let file = self.path(Path::new(f))?;
            if let Some(b) = self.read(&file)? {
                storage = config::parse_storage_conf(&file, &b)?;
                break;
            }
        }
        let mut crio = config::CrioConfig {
            root: storage.graphroot,
            runroot: storage.runroot,
            listen: None,
        };
        let main = self.path(Path::new("/etc/crio/crio.conf"))?;
        if let Some(b) = self.read(&main)? {
            crio = crio.overlay(config::parse_crio_conf(&main, &b)?);
        }
        let dir = self.path(Path::new("/etc/crio/crio.conf.d"))?;
        let mut dropins = Vec::new();
        match std::fs::read_dir(&dir) {
            Ok(rd) => {
                for entry in rd {
                    let entry = entry.map_err(|e| ConfigError {
                        file: dir.clone(),
                        reason: format!("cannot be listed: {e}"),
                    })?;
                    let name = entry.file_name();
                    if name.to_string_lossy().ends_with(".conf") {
                        dropins.push(name);
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(ConfigError {
                    file: dir,
                    reason: format!("cannot be listed: {e}"),
                }
                .into())
            }
        }
        dropins.sort();
        for name in dropins {
            // Each drop-in is resolved on its own: it may be a link like any node path.
            let file = self.path(&Path::new("/etc/crio/crio.conf.d").join(&name))?;
            if let Some(b) = self.read(&file)? {
                crio = crio.overlay(config::parse_crio_conf(&file, &b)?);
            }
        }
        Ok(crio)
    }
}

/// Whether `a` and `b` name the same directory (both resolved by the kernel).
fn same_dir(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

fn describe(c: &Discovered) -> String {
    format!(
        "{} ({}) at {}",
        c.layout.runtime().name(),
        c.layout.name(),
        c.root.display()
    )
}

/// Decides which store to work on: the root and runtime given (`root` is taken as given, not
/// under the host root), the runtime whose layout `root` has, or the one store among every
/// known layout of `kind` (or of all runtimes). [`Found::defaults`] carry the socket and other
/// paths of the layout the root belongs to, so only what the operator gave overrides them.
pub fn find(
    host: &HostRoot,
    kind: Option<RuntimeKind>,
    root: Option<&Path>,
) -> Result<Found, DetectError> {
    let layouts = |k: Option<RuntimeKind>| {
        Layout::ALL
            .into_iter()
            .filter(move |l| k.is_none_or(|k| l.runtime() == k))
    };
    if let Some(root) = root {
        if !root.is_dir() {
            return Err(DetectError::RootMissing(root.to_path_buf()));
        }
        let kind = match kind {
            Some(k) => {
                // Flags that contradict each other are a usage error, never a guess.
                if !k.runtime().looks_like(root) {
                    let detected = RuntimeKind::ALL
                        .into_iter()
                        .find(|o| o.runtime().looks_like(root))
                        .map(|o| format!("; it looks like a {} root", o.name()))
                        .unwrap_or_default();
                    return Err(DetectError::RuntimeMismatch {
                        runtime: k.name(),
                        root: root.to_path_buf(),
                        hint: k.runtime().layout_hint(),
                        detected,
                    });
                }
                k
            }
            None => detect_kind(root)?,
        };
        // The layout this root belongs to gives the socket and the rest; a root of no known
        // layout gets the runtime's stock ones (read from its configuration).
        let mut stock = None;
        for l in layouts(Some(kind)) {
            let d = l.discover(host)?;
            if same_dir(&d.root, root) {
                return Ok(Found {
                    kind,
                    root: root.to_path_buf(),
                    layout: Some(l),
                    defaults: d.options,
                });
            }
            stock.get_or_insert(d);
        }
        let stock = stock.expect("every runtime has a stock layout");
        return Ok(Found {
            kind,
            root: root.to_path_buf(),
            layout: None,
            // The runroot goes with its graphroot, not with the runtime: the store finds the
            // one beside this root itself.
            defaults: StoreOptions {
                runroot: None,
                ..stock.options
            },
        });
    }
    let mut looked = Vec::new();
    let mut found: Vec<Discovered> = Vec::new();
    for l in layouts(kind) {
        let d = l.discover(host)?;
        if l.runtime().runtime().looks_like(&d.root)
            && !found.iter().any(|f| same_dir(&f.root, &d.root))
        {
            found.push(d);
        } else {
            looked.push(d);
        }
    }
    match found.len() {
        1 => {
            let d = found.pop().expect("one");
            Ok(Found {
                kind: d.layout.runtime(),
                root: d.root,
                layout: Some(d.layout),
                defaults: d.options,
            })
        }
        0 => match kind {
            // The runtime was named: its stock root is the one that is missing.
            Some(k) => {
                let stock = looked
                    .into_iter()
                    .find(|d| d.layout.runtime() == k)
                    .expect("every runtime has a stock layout");
                if !stock.root.is_dir() {
                    return Err(DetectError::RootMissing(stock.root));
                }
                Ok(Found {
                    kind: k,
                    root: stock.root,
                    layout: Some(stock.layout),
                    defaults: stock.options,
                })
            }
            None => Err(DetectError::NoneFound {
                roots: looked.iter().map(describe).collect::<Vec<_>>().join(", "),
            }),
        },
        _ => Err(DetectError::Several {
            found: found.iter().map(describe).collect::<Vec<_>>().join(", "),
        }),
    }
}

/// `*` (any run of characters within one path element) against `name`. Go's `filepath.Match`
/// has no hidden-file rule (`*.toml` matches `.x.toml`), so neither has this.
fn wildcard_match(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if parts.len() == 1 {
        return pattern == name;
    }
    if !name.starts_with(first) || name.len() < first.len() + last.len() || !name.ends_with(last) {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}
