//! Whether the kubelet of a target version will accept each checkpoint file another kubelet
//! version left in its root directory (`/var/lib/kubelet`).
//!
//! The kubelet's checkpoint manager reads a file with `json.Unmarshal` into that version's Go
//! struct and then verifies its checksum, in most versions FNV-32a over go-spew's `%#v` text of
//! the struct (`checksum.New`, `DeepHashObject`). Whether a given version accepts a given file
//! is therefore a computation, not a guess: this crate decodes the file into the target
//! version's struct layout (data in `data/`, each citing its source tag and path; see
//! [`gotype`]), computes the checksum as that version's code does (including its fallbacks and
//! legacy-name rewrites), and compares. The golden values are produced by real Go code:
//! `tools/kubelet-checkpoints/run.sh` writes each case as the writing version does and checks
//! it with each reading version's code; `tests/golden.rs` asserts the same verdicts and
//! checksums here.
//!
//! What a rejected file does to the kubelet decides the severity: the DRA, pod status, CPU and
//! memory managers refuse to start (the kubelet exits or panics: "please drain this node and delete
//! ... checkpoint file"), so their rejections [`Severity::Block`]; the device manager logs a
//! warning and runs on with an empty allocation state ([`Severity::Warn`]).
//!
//! ```no_run
//! use kubeletstate::{scan_dir, KubeletVersion, Verdict};
//! let target: KubeletVersion = "1.31".parse().unwrap();
//! for f in scan_dir("/var/lib/kubelet".as_ref(), target).unwrap() {
//!     if let Verdict::Rejected { reason } = &f.verdict {
//!         eprintln!("{}: {reason} ({})", f.path.display(), f.remedy);
//!     }
//! }
//! ```
#![deny(missing_docs)]

pub mod gotype;
mod readers;

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

pub use hashcompat::KubeletVersion;
use hashcompat::{Node, NodeValue};
use readers::{Outcome, Reader};
use serde::Serialize;

/// The checkpoint files this crate knows, by the manager that owns them. Each is read, when
/// it is read at all, while the kubelet starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointKind {
    /// `cpu_manager_state` (CPU manager).
    CpuManager,
    /// `memory_manager_state` (memory manager, v1.21+).
    MemoryManager,
    /// `device-plugins/kubelet_internal_checkpoint` (device manager).
    DeviceManager,
    /// `dra_manager_state` (dynamic resource allocation manager, v1.27+).
    DraManager,
    /// `pod_status_manager_state` (in-place resize allocations, v1.27–v1.32).
    PodStatusManager,
    /// `allocated_pods_state` (allocation manager, v1.33+).
    AllocatedPods,
    /// `actuated_pods_state` (allocation manager, v1.33+).
    ActuatedPods,
}

impl CheckpointKind {
    /// Every kind, in the order [`scan_dir`] reports them.
    pub const ALL: [CheckpointKind; 7] = [
        CheckpointKind::CpuManager,
        CheckpointKind::MemoryManager,
        CheckpointKind::DeviceManager,
        CheckpointKind::DraManager,
        CheckpointKind::PodStatusManager,
        CheckpointKind::AllocatedPods,
        CheckpointKind::ActuatedPods,
    ];

    /// The file's path relative to the kubelet's root directory.
    pub fn relative_path(self) -> &'static str {
        match self {
            CheckpointKind::CpuManager => "cpu_manager_state",
            CheckpointKind::MemoryManager => "memory_manager_state",
            CheckpointKind::DeviceManager => "device-plugins/kubelet_internal_checkpoint",
            CheckpointKind::DraManager => "dra_manager_state",
            CheckpointKind::PodStatusManager => "pod_status_manager_state",
            CheckpointKind::AllocatedPods => "allocated_pods_state",
            CheckpointKind::ActuatedPods => "actuated_pods_state",
        }
    }

    /// The upstream reference that documents what goes wrong with this file across versions.
    pub fn reference(self) -> &'static str {
        match self {
            CheckpointKind::CpuManager => "https://github.com/kubernetes/kubernetes/issues/86676",
            CheckpointKind::MemoryManager => {
                "https://github.com/kubernetes/kubernetes/tree/master/pkg/kubelet/cm/memorymanager/state"
            }
            CheckpointKind::DeviceManager => "https://github.com/kubernetes/kubernetes/issues/102880",
            CheckpointKind::DraManager => "https://github.com/kubernetes/kubernetes/issues/127653",
            CheckpointKind::PodStatusManager => {
                "https://github.com/kubernetes/kubernetes/blob/master/CHANGELOG/CHANGELOG-1.32.md#no-really-you-must-read-this-before-you-upgrade"
            }
            CheckpointKind::AllocatedPods | CheckpointKind::ActuatedPods => {
                "https://github.com/kubernetes/kubernetes/pull/130599"
            }
        }
    }

    /// How the kubelet reacts when it rejects this file.
    fn rejection_severity(self) -> Severity {
        match self {
            CheckpointKind::DeviceManager => Severity::Warn,
            _ => Severity::Block,
        }
    }

    /// When the target kubelet reads the file at all (its feature gate and that gate's
    /// default in the target version).
    fn condition(self, target: KubeletVersion, gates: FeatureGates) -> Option<&'static str> {
        let minor = target.minor();
        match self {
            CheckpointKind::CpuManager | CheckpointKind::MemoryManager
                if (36..=38).contains(&minor) =>
            {
                Some(if gates.pod_level_resource_managers(target) {
                    "judged as read with the PodLevelResourceManagers feature gate enabled (the kubelet's config.yaml enables it)"
                } else {
                    "judged as read with the PodLevelResourceManagers feature gate disabled (its default in v1.36-v1.38; enabled in the kubelet's config.yaml, the v1.36 reading differs)"
                })
            }
            CheckpointKind::DraManager if minor >= 34 => Some(
                "read unless the DynamicResourceAllocation feature gate is disabled (GA, on by default from v1.34)",
            ),
            CheckpointKind::DraManager => Some(
                "read only with the DynamicResourceAllocation feature gate enabled (off by default before v1.34)",
            ),
            CheckpointKind::PodStatusManager
            | CheckpointKind::AllocatedPods
            | CheckpointKind::ActuatedPods
                if minor >= 33 =>
            {
                Some(
                    "read unless the InPlacePodVerticalScaling feature gate is disabled (on by default from v1.33)",
                )
            }
            CheckpointKind::PodStatusManager
            | CheckpointKind::AllocatedPods
            | CheckpointKind::ActuatedPods => Some(
                "read only with the InPlacePodVerticalScaling feature gate enabled (off by default before v1.33)",
            ),
            CheckpointKind::CpuManager
            | CheckpointKind::MemoryManager
            | CheckpointKind::DeviceManager => None,
        }
    }
}

/// What the target kubelet does with a file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// It decodes the file and its checksum matches.
    Accepted,
    /// It fails to decode the file or its checksum does not match.
    Rejected {
        /// What fails, in the kubelet's terms.
        reason: String,
    },
    /// That kubelet version does not read this file.
    NotRead {
        /// Why.
        reason: String,
    },
    /// This crate cannot decide (a version or a field whose definition is not in its data).
    Undetermined {
        /// What is missing.
        reason: String,
    },
}

/// How serious a finding is for an upgrade (or downgrade) to the target version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// The target kubelet will not start with this file in place.
    Block,
    /// The target kubelet starts but loses state, or acceptance could not be decided.
    Warn,
    /// Nothing to do: the file is accepted or not read.
    None,
}

/// The decision for one checkpoint file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// The file.
    pub path: PathBuf,
    /// Which manager's checkpoint it is.
    pub kind: CheckpointKind,
    /// The format the file is written in, and which kubelet versions write it.
    pub format: &'static str,
    /// The target kubelet's verdict.
    #[serde(flatten)]
    pub verdict: Verdict,
    /// How serious the verdict is.
    pub severity: Severity,
    /// When the target kubelet reads the file at all (a feature gate), if it is conditional.
    pub condition: Option<&'static str>,
    /// The target version's code the verdict comes from.
    pub source: Option<&'static str>,
    /// Upstream issue or note.
    pub reference: &'static str,
    /// What the operator should do; empty when nothing is needed.
    pub remedy: String,
}

/// Why a kubelet directory or file cannot be judged.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The path is a symbolic link: the kubelet follows it, but this tool judges only files it
    /// can be sure are the kubelet's own.
    #[error("{path}: is a symbolic link; kubelet checkpoint files are regular files (refusing to follow it)")]
    Symlink {
        /// The path.
        path: PathBuf,
    },
    /// The kubelet directory does not exist or is not a directory (a mistyped `--kubelet-dir`
    /// must not pass as a node without checkpoints).
    #[error("{path}: not a kubelet directory: {why}")]
    NoKubeletDir {
        /// The path.
        path: PathBuf,
        /// What is there instead.
        why: String,
    },
    /// The path exists but is not a regular file.
    #[error("{path}: not a regular file")]
    NotRegular {
        /// The path.
        path: PathBuf,
    },
    /// The file is not JSON.
    #[error("{path}: not a kubelet checkpoint: {error}")]
    NotJson {
        /// The path.
        path: PathBuf,
        /// The syntax error.
        error: String,
    },
    /// The file is JSON but not in any shape a kubelet version writes for it.
    #[error("{path}: JSON of unknown shape for {kind}: {what}")]
    UnknownShape {
        /// The path.
        path: PathBuf,
        /// The file it was expected to be.
        kind: &'static str,
        /// What is found instead.
        what: String,
    },
    /// Reading failed.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// Judges every known checkpoint file present under `kubelet_dir` for `target`. Files that
/// do not exist are skipped (the kubelet creates them); symbolic links, non-regular files,
/// files that are not JSON or not of a known shape are errors, and nothing is judged then.
/// `kubelet_dir` itself may be a symbolic link (nodes often link /var/lib/kubelet to a data
/// disk); it must be a directory.
///
/// The target is judged with the feature gates of the kubelet's configuration file
/// (`config.yaml` in `kubelet_dir`, as kubeadm lays it out; see [`FeatureGates::from_config`]),
/// on the assumption that the new kubelet runs with the same configuration.
pub fn scan_dir(kubelet_dir: &Path, target: KubeletVersion) -> Result<Vec<Finding>, Error> {
    let gates = FeatureGates::from_kubelet_dir(kubelet_dir);
    scan_dir_with_gates(kubelet_dir, target, gates)
}

/// [`scan_dir`] with the target's feature gates given.
pub fn scan_dir_with_gates(
    kubelet_dir: &Path,
    target: KubeletVersion,
    gates: FeatureGates,
) -> Result<Vec<Finding>, Error> {
    match std::fs::metadata(kubelet_dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(Error::NoKubeletDir {
                path: kubelet_dir.to_path_buf(),
                why: "not a directory".into(),
            })
        }
        Err(e) => {
            return Err(Error::NoKubeletDir {
                path: kubelet_dir.to_path_buf(),
                why: e.to_string(),
            })
        }
    }
    let mut findings = Vec::new();
    for kind in CheckpointKind::ALL {
        let path = kubelet_dir.join(kind.relative_path());
        if let Some(parent) = Path::new(kind.relative_path()).parent() {
            if !parent.as_os_str().is_empty() {
                let dir = kubelet_dir.join(parent);
                match std::fs::symlink_metadata(&dir) {
                    Ok(m) if m.file_type().is_symlink() => {
                        return Err(Error::Symlink { path: dir })
                    }
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(source) => return Err(Error::Io { path: dir, source }),
                }
            }
        }
        let Some(bytes) = read_no_follow(&path)? else {
            continue;
        };
        findings.push(check_bytes_with_gates(&path, kind, &bytes, target, gates)?);
    }
    Ok(findings)
}

/// Reads a file without following a symbolic link at its last component; `None` when it
/// does not exist.
pub fn read_no_follow(path: &Path) -> Result<Option<Vec<u8>>, Error> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        // O_NONBLOCK: a FIFO planted at the path must not hang the scan.
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path);
    let mut file: File = match file {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(Error::Symlink {
                path: path.to_path_buf(),
            })
        }
        Err(source) => {
            return Err(Error::Io {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let meta = file.metadata().map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    if !meta.is_file() {
        return Err(Error::NotRegular {
            path: path.to_path_buf(),
        });
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.read_to_end(&mut bytes).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(Some(bytes))
}

/// The checksum a target version's code computed while judging a file, with the verdict:
/// what the golden tests compare with real Go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judgement {
    /// The verdict.
    pub verdict: Verdict,
    /// The checksum the last verification step computed (`None` when decoding failed first,
    /// or when the file is not read).
    pub computed_checksum: Option<u64>,
    /// The target version's code.
    pub source: Option<&'static str>,
}

/// The feature gates that change how a kubelet reads (and writes) its checkpoints; `None`
/// means the target version's default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FeatureGates {
    /// `PodLevelResourceManagers` (alpha in v1.36, beta in v1.37, off by default in both): with
    /// it the CPU manager of v1.36 reads and writes V3, the memory manager V2, both with pod
    /// entries, which no earlier version and no v1.36 without the gate accepts. Ignored by
    /// versions without the gate.
    pub pod_level_resource_managers: Option<bool>,
}

impl FeatureGates {
    /// The gates a kubelet configuration file sets (`featureGates:` of a KubeletConfiguration,
    /// YAML or JSON): `PodLevelResourceManagers: true` (or `false`, the name quoted or not).
    /// The gate's name appears nowhere else in a kubelet configuration, so finding it is enough
    /// without a YAML parser; a gate given by `--feature-gates` on the command line is not seen.
    pub fn from_config(text: &str) -> FeatureGates {
        const GATE: &str = "PodLevelResourceManagers";
        let mut gates = FeatureGates::default();
        // every occurrence, in YAML (`Gate: true`) or JSON on any line (`"Gate":true,`); the
        // last one wins, as a later key does in both
        for (at, _) in text.match_indices(GATE) {
            let rest = text[at + GATE.len()..].trim_start_matches(['"', '\'']);
            let Some(value) = rest.trim_start_matches([' ', '\t']).strip_prefix(':') else {
                continue;
            };
            let value = value.trim_start_matches([' ', '\t']);
            let word: String = value
                .chars()
                .take_while(|c| c.is_ascii_alphabetic())
                .collect();
            match word.as_str() {
                "true" => gates.pod_level_resource_managers = Some(true),
                "false" => gates.pod_level_resource_managers = Some(false),
                _ => {}
            }
        }
        gates
    }

    /// [`FeatureGates::from_config`] of `<kubelet_dir>/config.yaml` when it is a regular file;
    /// the defaults otherwise.
    pub fn from_kubelet_dir(kubelet_dir: &Path) -> FeatureGates {
        let path = kubelet_dir.join("config.yaml");
        match std::fs::metadata(&path) {
            Ok(m) if m.is_file() => std::fs::read(&path)
                .map(|b| FeatureGates::from_config(&String::from_utf8_lossy(&b)))
                .unwrap_or_default(),
            _ => FeatureGates::default(),
        }
    }

    fn pod_level_resource_managers(self, target: KubeletVersion) -> bool {
        target.minor() >= 36 && self.pod_level_resource_managers.unwrap_or(false)
    }
}

/// Judges one file's bytes as `kind` for `target` with its default feature gates.
pub fn judge(
    path: &Path,
    kind: CheckpointKind,
    bytes: &[u8],
    target: KubeletVersion,
) -> Result<(Judgement, &'static str), Error> {
    judge_with_gates(path, kind, bytes, target, FeatureGates::default())
}

/// Judges one file's bytes as `kind` for `target` running with `gates`.
pub fn judge_with_gates(
    path: &Path,
    kind: CheckpointKind,
    bytes: &[u8],
    target: KubeletVersion,
    gates: FeatureGates,
) -> Result<(Judgement, &'static str), Error> {
    let node = hashcompat::parse_json(bytes).map_err(|e| Error::NotJson {
        path: path.to_path_buf(),
        error: e.to_string(),
    })?;
    let format = detect_format(path, kind, &node)?;
    let judgement = match reader_for(kind, target, gates) {
        Choice::NotRead(reason) => Judgement {
            verdict: Verdict::NotRead {
                reason: reason.to_string(),
            },
            computed_checksum: None,
            source: None,
        },
        Choice::Undetermined(reason) => Judgement {
            verdict: Verdict::Undetermined {
                reason: reason.to_string(),
            },
            computed_checksum: None,
            source: None,
        },
        Choice::Read(reader) => {
            let (verdict, computed_checksum) = match reader.read(&node) {
                Outcome::Accepted { computed } => (Verdict::Accepted, Some(computed)),
                Outcome::Rejected { reason, computed } => (Verdict::Rejected { reason }, computed),
                Outcome::Undetermined { reason } => (Verdict::Undetermined { reason }, None),
            };
            Judgement {
                verdict,
                computed_checksum,
                source: Some(reader.source),
            }
        }
    };
    Ok((judgement, format))
}

/// Judges one file's bytes as `kind` for `target` (default feature gates) and says what to do
/// about it.
pub fn check_bytes(
    path: &Path,
    kind: CheckpointKind,
    bytes: &[u8],
    target: KubeletVersion,
) -> Result<Finding, Error> {
    check_bytes_with_gates(path, kind, bytes, target, FeatureGates::default())
}

/// [`check_bytes`] for a target running with `gates`.
pub fn check_bytes_with_gates(
    path: &Path,
    kind: CheckpointKind,
    bytes: &[u8],
    target: KubeletVersion,
    gates: FeatureGates,
) -> Result<Finding, Error> {
    let (judgement, format) = judge_with_gates(path, kind, bytes, target, gates)?;
    let severity = match judgement.verdict {
        Verdict::Rejected { .. } => kind.rejection_severity(),
        Verdict::Undetermined { .. } => Severity::Warn,
        Verdict::Accepted | Verdict::NotRead { .. } => Severity::None,
    };
    let remedy = match (&judgement.verdict, severity) {
        (Verdict::Rejected { .. }, _) => remedy(kind, path, target),
        (Verdict::Undetermined { .. }, _) => format!(
            "check by hand whether kubelet {target} starts with {} in place; if unsure, drain the node and set the file aside before starting it",
            path.display()
        ),
        _ => String::new(),
    };
    Ok(Finding {
        path: path.to_path_buf(),
        kind,
        format,
        verdict: judgement.verdict,
        severity,
        condition: kind.condition(target, gates),
        source: judgement.source,
        reference: kind.reference(),
        remedy,
    })
}

fn remedy(kind: CheckpointKind, path: &Path, target: KubeletVersion) -> String {
    let p = path.display();
    match kind {
        CheckpointKind::DraManager => format!(
            "kubelet {target} will refuse to start (\"failed to get checkpoint dra_manager_state: checkpoint is corrupted\"): drain the node's pods that use resource claims, stop the kubelet, set {p} aside, then start kubelet {target}, which creates an empty checkpoint"
        ),
        CheckpointKind::PodStatusManager
        | CheckpointKind::AllocatedPods
        | CheckpointKind::ActuatedPods => format!(
            "kubelet {target} will panic at start (\"could not restore state from checkpoint\"): set {p} aside before starting it; it rebuilds the allocations from the pods (in-progress resizes are decided again)"
        ),
        CheckpointKind::CpuManager => format!(
            "kubelet {target} will refuse to start (\"could not restore state from checkpoint ... please drain this node and delete the CPU manager checkpoint file\"): drain the node, set {p} aside, then start kubelet {target}; exclusive CPU assignments are rebuilt for new pods only"
        ),
        CheckpointKind::DeviceManager => format!(
            "kubelet {target} starts but forgets every device allocation (\"Continue after failing to read checkpoint file\"), so pods may be admitted without their devices until the device plugins register again: drain the node's device-using pods first, or set {p} aside knowingly"
        ),
        CheckpointKind::MemoryManager => format!(
            "kubelet {target} will refuse to start (\"could not restore state from checkpoint\", asking to drain the node and delete the memory manager checkpoint file): drain the node, set {p} aside, then start kubelet {target}"
        ),
    }
}

enum Choice {
    Read(&'static Reader),
    NotRead(&'static str),
    Undetermined(&'static str),
}

/// Which reading code a version runs for a file.
fn reader_for(kind: CheckpointKind, target: KubeletVersion, gates: FeatureGates) -> Choice {
    let minor = target.minor();
    let pod_level = gates.pod_level_resource_managers(target);
    match kind {
        CheckpointKind::DraManager => match minor {
            ..=26 => Choice::NotRead("the DRA manager keeps a checkpoint from v1.27 on"),
            27..=29 => Choice::Undetermined(
                "the DRA checkpoint structs of v1.27-v1.29 are not in this tool's data",
            ),
            30 => Choice::Read(&readers::DRA_1_30),
            _ => Choice::Read(&readers::DRA_1_31),
        },
        CheckpointKind::PodStatusManager => match minor {
            ..=26 => Choice::NotRead("in-place resize allocations are checkpointed from v1.27 on"),
            27..=31 => Choice::Read(&readers::STATUS_1_27),
            32 => Choice::Read(&readers::STATUS_1_32),
            _ => Choice::NotRead(
                "from v1.33 the allocation manager keeps allocated_pods_state and actuated_pods_state instead (PR #130599)",
            ),
        },
        CheckpointKind::AllocatedPods | CheckpointKind::ActuatedPods => match minor {
            ..=32 => Choice::NotRead("the allocation manager's checkpoints exist from v1.33 on"),
            33..=37 => Choice::Read(&readers::ALLOCATION_1_33),
            38 => Choice::Read(&readers::ALLOCATION_1_38),
            _ => Choice::Undetermined(
                "the allocation manager's checkpoint of v1.39 and later is not in this tool's data",
            ),
        },
        CheckpointKind::CpuManager => match minor {
            ..=9 => Choice::Undetermined("the CPU manager state of v1.8/v1.9 is not in this tool's data"),
            10..=17 => Choice::Read(&readers::CPU_1_17),
            18..=35 => Choice::Read(&readers::CPU_1_18),
            36 if pod_level => Choice::Read(&readers::CPU_1_36_POD_LEVEL),
            36 => Choice::Read(&readers::CPU_1_36),
            // v1.38.0-beta.0's cpumanager/state is v1.37.2's, file for file
            37..=38 if pod_level => Choice::Read(&readers::CPU_1_37_POD_LEVEL),
            37..=38 => Choice::Read(&readers::CPU_1_37),
            _ => Choice::Undetermined(
                "the CPU manager checkpoint of v1.39 and later is not in this tool's data",
            ),
        },
        CheckpointKind::DeviceManager => match minor {
            ..=19 => Choice::Read(&readers::DEVICE_1_19),
            // The fallback to pre-1.20 data reached v1.21 and v1.22 only in late patch releases
            // (#106254, #106253): without the patch level, the safe answer is the unpatched code.
            20..=22 => Choice::Read(&readers::DEVICE_1_20),
            _ => Choice::Read(&readers::DEVICE_1_23),
        },
        CheckpointKind::MemoryManager => match minor {
            ..=20 => Choice::NotRead("the memory manager exists from v1.21 on"),
            21..=35 => Choice::Read(&readers::MEMORY_1_21),
            36 if pod_level => Choice::Read(&readers::MEMORY_1_36_POD_LEVEL),
            36 => Choice::Read(&readers::MEMORY_1_36),
            // v1.38.0-beta.0's memorymanager/state is v1.37.2's
            37..=38 => Choice::Read(&readers::MEMORY_1_37),
            _ => Choice::Undetermined(
                "the memory manager checkpoint of v1.39 and later is not in this tool's data",
            ),
        },
    }
}

fn members<'a>(node: &'a Node<'a>) -> Option<&'a [(std::borrow::Cow<'a, str>, Node<'a>)]> {
    match &node.value {
        NodeValue::Object(m) => Some(m),
        _ => None,
    }
}

pub(crate) fn member<'a>(node: &'a Node<'a>, name: &str) -> Option<&'a Node<'a>> {
    members(node)?
        .iter()
        .rev()
        .find(|(k, _)| gotype::go_equal_fold(name, k))
        .map(|(_, v)| v)
}

/// Names the format a file is written in, or refuses a file no kubelet version writes.
fn detect_format(
    path: &Path,
    kind: CheckpointKind,
    node: &Node<'_>,
) -> Result<&'static str, Error> {
    let unknown = |what: String| Error::UnknownShape {
        path: path.to_path_buf(),
        kind: kind.relative_path(),
        what,
    };
    let Some(ms) = members(node) else {
        return Err(unknown(format!(
            "a JSON {}, not an object",
            node.kind_name()
        )));
    };
    let has = |name: &str| ms.iter().any(|(k, _)| gotype::go_equal_fold(name, k));
    let names = || {
        ms.iter()
            .map(|(k, _)| k.as_ref())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let any_of = |names: &[&str]| names.iter().any(|n| has(n));
    match kind {
        CheckpointKind::DraManager => {
            if has("data") {
                Ok("DRA envelope {Data, Checksum} (kubelet 1.31+)")
            } else if any_of(&["version", "entries", "checksum"]) {
                Ok("DRA v1 {version, entries, checksum} (kubelet 1.27-1.30)")
            } else {
                Err(unknown(format!("members {{{}}}", names())))
            }
        }
        CheckpointKind::PodStatusManager => {
            if has("data") {
                Ok("pod status envelope {data, checksum} (kubelet 1.32)")
            } else if any_of(&["allocationEntries", "resizeStatusEntries", "checksum"]) {
                Ok("pod status allocations {allocationEntries, resizeStatusEntries, checksum} (kubelet 1.27-1.31)")
            } else {
                Err(unknown(format!("members {{{}}}", names())))
            }
        }
        CheckpointKind::CpuManager => {
            if !any_of(&["policyName", "defaultCpuSet", "entries", "checksum"]) {
                return Err(unknown(format!("members {{{}}}", names())));
            }
            if any_of(&["data", "dataChecksum"]) {
                return Ok(
                    "CPU manager V4 {data, dataChecksum} beside the V2 members (kubelet 1.37+)",
                );
            }
            if has("podEntries") {
                return Ok(
                    "CPU manager V3 with pod entries (kubelet 1.36 with PodLevelResourceManagers)",
                );
            }
            let entries = member(node, "entries").and_then(members).unwrap_or(&[]);
            Ok(match entries.first().map(|(_, v)| &v.value) {
                Some(NodeValue::String(_)) => {
                    "CPU manager V1, entries by container ID (kubelet <= 1.17)"
                }
                Some(NodeValue::Object(_)) => {
                    "CPU manager V2, entries by pod and container (kubelet 1.18+)"
                }
                _ => "CPU manager without entries (V1 or V2)",
            })
        }
        CheckpointKind::DeviceManager => {
            let Some(data) = member(node, "Data").filter(|d| members(d).is_some()) else {
                return Err(unknown(format!("members {{{}}}, no Data object", names())));
            };
            let entries = match member(data, "PodDeviceEntries").map(|e| &e.value) {
                Some(NodeValue::Array(items)) => items.as_slice(),
                _ => &[],
            };
            let ids = entries.iter().find_map(|e| member(e, "DeviceIDs"));
            Ok(match ids.map(|n| &n.value) {
                Some(NodeValue::Array(_)) => {
                    "device manager, device IDs as a list (kubelet <= 1.19)"
                }
                Some(NodeValue::Object(_)) => {
                    "device manager, device IDs per NUMA node (kubelet 1.20+)"
                }
                _ => "device manager without device entries (any version)",
            })
        }
        CheckpointKind::AllocatedPods | CheckpointKind::ActuatedPods => {
            if has("data") && has("version") {
                Ok("allocation envelope {version, data, checksum} (kubelet 1.38+)")
            } else if has("data") {
                Ok("allocation envelope {data, checksum} (kubelet 1.33-1.37)")
            } else {
                Err(unknown(format!("members {{{}}}", names())))
            }
        }
        CheckpointKind::MemoryManager => {
            if any_of(&["data", "dataChecksum"]) {
                Ok("memory manager V3 {data, dataChecksum} beside the V1 members (kubelet 1.37+)")
            } else if has("podEntries") {
                Ok("memory manager V2 with pod entries (kubelet 1.36 with PodLevelResourceManagers)")
            } else if any_of(&["policyName", "machineState", "entries", "checksum"]) {
                Ok("memory manager (kubelet 1.21+)")
            } else {
                Err(unknown(format!("members {{{}}}", names())))
            }
        }
    }
}
