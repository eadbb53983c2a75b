//! Hazards outside the hash that the plan finds in the versions, the pods and the node (a
//! store's own come from its scan): what an operator must know (or fix) before the window,
//! each a [`Hazard`] with a stable code (docs/report.md).

use crate::node::ApiFacts;
use crate::report::{Action, PlanRecord};
use hashcompat::KubeletVersion;
use serde::Deserialize;
use storepatch::RuntimeKind;

/// The one hazard type, which store scans emit too; re-exported where this crate's users
/// found it.
pub use storepatch::{Hazard, Severity};

/// Known upgrade (and downgrade) hazards outside the hash, from the versions, the runtime and
/// the records.
pub(crate) fn version_hazards(
    runtime: RuntimeKind,
    from: KubeletVersion,
    to: KubeletVersion,
    records: &[PlanRecord],
) -> Vec<Hazard> {
    let mut w = Vec::new();
    if runtime.runtime().behind_dockershim() && to.minor() >= 24 && from.minor() < 24 {
        w.push(
            Hazard::warn(
                "dockershim-removed",
                format!(
                    "kubelet {to} has no dockershim (removed in 1.24): this node needs cri-dockerd, which keeps the same Docker labels"
                ),
            )
            .reference("https://kubernetes.io/blog/2022/02/17/dockershim-faq/"),
        );
    }
    if runtime.runtime().behind_dockershim() && to.minor() < 24 && from.minor() >= 24 {
        w.push(Hazard::warn(
            "dockershim-returns",
            format!(
                "kubelet {to} talks to Docker through its built-in dockershim, kubelet {from} through cri-dockerd: stop cri-dockerd and drop --container-runtime-endpoint when going back"
            ),
        ));
    }
    if from.minor() < 14 && to.minor() >= 14 {
        w.push(Hazard::warn("log-path-moved", "kubelet 1.14 moved container logs to /var/log/pods/<namespace>_<pod>_<uid>/<container>/<n>.log: containers adopted from an older kubelet keep their old log paths (kubectl logs may miss them until they restart)"));
    }
    let undecodable: Vec<String> = records
        .iter()
        .filter(|r| r.action == Action::Undecodable)
        .map(|r| r.id.clone())
        .collect();
    if !undecodable.is_empty() {
        w.push(
            Hazard::warn(
                "undecodable-records",
                format!(
                    "{} store record(s) cannot be decoded; the runtime may drop them on restart and the kubelet start a second copy",
                    undecodable.len()
                ),
            )
            .containers(undecodable),
        );
    }
    w
}

/// The hazards of the kubelet's checkpoint files for the kubelet `to` (kubeletstate decides,
/// computing each file's checksum as that version does).
pub(crate) fn checkpoint_hazards(
    findings: &[kubeletstate::Finding],
    to: KubeletVersion,
) -> Vec<Hazard> {
    use kubeletstate::{Severity as S, Verdict};
    let mut out = Vec::new();
    for f in findings {
        let file = f.path.display().to_string();
        let (code, severity, what) = match (&f.verdict, f.severity) {
            (Verdict::Rejected { reason }, S::Block) => (
                "checkpoint-rejected",
                Severity::Block,
                format!("kubelet {to} rejects {file} ({reason}) and will not start: the node goes NotReady and its pods are evicted"),
            ),
            (Verdict::Rejected { reason }, _) => (
                "checkpoint-state-lost",
                Severity::Warn,
                format!("kubelet {to} rejects {file} ({reason}) and starts without the state it holds"),
            ),
            (Verdict::Undetermined { reason }, _) => (
                "checkpoint-undetermined",
                Severity::Warn,
                format!("cannot tell whether kubelet {to} accepts {file}: {reason}"),
            ),
            (Verdict::Accepted | Verdict::NotRead { .. }, _) => continue,
        };
        let remedy = if f.remedy.is_empty() {
            String::new()
        } else {
            format!("; {}", f.remedy)
        };
        let set_aside = if severity == Severity::Block {
            " (`patch --set-aside-checkpoints` moves it into the backup; `rollback` puts it back)"
        } else {
            ""
        };
        let mut h = Hazard {
            code: code.to_string(),
            severity,
            message: format!("{what}{remedy}{set_aside}"),
            files: vec![file],
            containers: Vec::new(),
            reference: None,
        };
        h = h.reference(f.reference);
        out.push(h);
    }
    out
}

/// The kubelet's configuration file kubeadm writes, inside its root directory.
pub const KUBELET_CONFIG_FILE: &str = "config.yaml";

/// Kubelet 1.35+ refuses to start on a cgroup v1 host unless its configuration sets
/// `failCgroupV1: false` (KEP-5573: the default turned true in 1.35; there is no flag). The real
/// kubelet 1.35 did exactly that on this project's lab after a 1.34 → 1.35 upgrade ("kubelet is
/// configured to not run on a host using cgroup v1"), and the upgrade went back. A `block`
/// hazard when the target is 1.35 or newer, the host's cgroup hierarchy (`cgroup_fs`, normally
/// `/sys/fs/cgroup`) is v1 (no `cgroup.controllers`), and the kubelet's `config.yaml` in
/// `kubelet_dir` exists without `failCgroupV1: false`. No config file there: nothing is said
/// (the configuration is elsewhere, and unread).
pub fn cgroup_v1_hazard(
    kubelet_dir: &std::path::Path,
    cgroup_fs: &std::path::Path,
    to: KubeletVersion,
) -> Option<Hazard> {
    if to.minor() < 35 || cgroup_fs.join("cgroup.controllers").exists() {
        return None;
    }
    if !cgroup_fs.is_dir() {
        return None;
    }
    let config = kubelet_dir.join(KUBELET_CONFIG_FILE);
    let (bytes, _) = storepatch::atomic::read_regular_nofollow(&config).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    let allowed = text.lines().any(|l| {
        let l = l.trim().trim_start_matches('"');
        l.strip_prefix("failCgroupV1")
            .map(|rest| rest.trim_start_matches('"').trim_start())
            .and_then(|rest| rest.strip_prefix(':'))
            .is_some_and(|v| v.trim().trim_end_matches(',').trim() == "false")
    });
    if allowed {
        return None;
    }
    let mut h = Hazard::block(
        "kubelet-refuses-cgroup-v1",
        format!(
            "kubelet {to} refuses to start on a cgroup v1 host unless its configuration sets failCgroupV1: false (the default is true from 1.35; there is no flag), and this node runs cgroup v1 while {} does not set it: add `failCgroupV1: false` to it (kubelets from 1.31 read it) before the upgrade, or move the node to cgroup v2; otherwise the new kubelet exits at start and the upgrade goes back",
            config.display()
        ),
    )
    .reference("https://github.com/kubernetes/enhancements/tree/master/keps/sig-node/5573-remove-cgroup-v1");
    h.files = vec![config.display().to_string()];
    Some(h)
}

/// A kubelet before 1.35 resets every container's Started and Ready when it starts
/// (KEP-4781 ended that in 1.35): readiness probes run again from Failure, so a pod with one
/// leaves its Services' endpoints until its probe passes, however short the window and whether
/// or not the node is held Ready. A `warn` naming how many pods have a readiness probe.
pub fn readiness_reset_hazard(
    pods: &crate::pods::PodIndex<'_>,
    to: KubeletVersion,
) -> Option<Hazard> {
    #[derive(Deserialize)]
    struct Probed {
        #[serde(rename = "readinessProbe", default)]
        readiness_probe: Option<serde::de::IgnoredAny>,
    }
    if to.minor() >= 35 {
        return None;
    }
    let probed: Vec<String> = pods
        .pods
        .iter()
        .filter(|p| {
            p.containers.iter().any(|c| {
                serde_json::from_slice::<Probed>(c.spec).is_ok_and(|s| s.readiness_probe.is_some())
            })
        })
        .map(|p| format!("{}/{}", p.namespace, p.name))
        .collect();
    if probed.is_empty() {
        return None;
    }
    let h = Hazard::warn(
        "readiness-reset-on-restart",
        format!(
            "kubelet {to} (before 1.35) resets container readiness when it starts: {} pod(s) with a readiness probe leave their Services' endpoints until the probe passes again (about one probe period), held Ready or not: {}",
            probed.len(),
            probed.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
                + if probed.len() > 5 { ", ..." } else { "" }
        ),
    )
    .reference("https://github.com/kubernetes/enhancements/issues/4781");
    Some(h)
}

/// The version skew policy between the target kubelet and the API server it will talk to
/// (<https://kubernetes.io/releases/version-skew-policy/#kubelet>): never newer than the API
/// server, and at most three minors older (two before kubelet 1.25). Upgrading a kubelet past
/// its control plane is how nodes go NotReady after an "in-place" upgrade: the API server must
/// be upgraded first. Both are `block` hazards; an API server version that does not parse is a
/// `warn`, the policy then unchecked.
pub fn version_skew_hazards(api: &ApiFacts, to: KubeletVersion) -> Vec<Hazard> {
    let reference = "https://kubernetes.io/releases/version-skew-policy/#kubelet";
    let server: KubeletVersion = match api.server_version.parse() {
        Ok(v) => v,
        Err(_) => {
            // a version beyond this tool's table (a newer control plane) still has a minor
            let minor = api
                .server_version
                .trim_start_matches('v')
                .split('.')
                .nth(1)
                .and_then(|m| m.parse::<u32>().ok());
            match minor {
                Some(m) if m > to.minor() => {
                    let allowed = if to.minor() >= 25 { 3 } else { 2 };
                    if m - to.minor() > allowed {
                        return vec![Hazard::block(
                            "kubelet-too-old-for-apiserver",
                            format!(
                                "API server {} is {} minors ahead of kubelet {to}; the skew policy allows {allowed}: upgrade the kubelet in steps or to a newer version",
                                api.server_version,
                                m - to.minor()
                            ),
                        )
                        .reference(reference)];
                    }
                    return Vec::new();
                }
                _ => {
                    return vec![Hazard::warn(
                        "apiserver-version-unknown",
                        format!(
                            "API server {} reports version {:?}, which this tool cannot read: the version skew between it and kubelet {to} is not checked",
                            api.server, api.server_version
                        ),
                    )]
                }
            }
        }
    };
    let mut out = Vec::new();
    if to.major() != server.major() || to.minor() > server.minor() {
        out.push(
            Hazard::block(
                "kubelet-newer-than-apiserver",
                format!(
                    "kubelet {to} would be newer than API server {} ({}): the skew policy forbids it, and such a kubelet can leave the node NotReady; upgrade the control plane first",
                    api.server_version, api.server
                ),
            )
            .reference(reference),
        );
    } else {
        let allowed = if to.minor() >= 25 { 3 } else { 2 };
        let behind = server.minor() - to.minor();
        if behind > allowed {
            out.push(
                Hazard::block(
                    "kubelet-too-old-for-apiserver",
                    format!(
                        "kubelet {to} would be {behind} minors behind API server {}; the skew policy allows {allowed} for kubelet {to}: target a newer kubelet",
                        api.server_version
                    ),
                )
                .reference(reference),
            );
        }
    }
    out
}
