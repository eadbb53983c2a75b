//! The node's declared features as the target kubelet will declare them, and the features each
//! pod needs (NodeDeclaredFeatures, KEP-5328; issue 52).
//!
//! From 1.36 (gate beta, on by default; GA and locked on in 1.37) a kubelet declares, in the
//! Node's `status.declaredFeatures`, each feature of its registry
//! (k8s.io/component-helpers/nodedeclaredfeatures/features/registry.go) whose `Discover` holds:
//! the feature's gate is on in the kubelet's gates, and for some features the runtime reports
//! support (the CRI's `RuntimeStatus.features`). At its start it admits every pod again, and its
//! last admit handler (`declaredFeaturesAdmitHandler`, pkg/kubelet/lifecycle/handlers.go,
//! registered after the predicate handler in pkg/kubelet/kubelet.go, only with the gate on)
//! rejects a pod that needs a feature it does not declare: reason `PodFeatureUnsupported`,
//! "Pod requires node features that are not available: A, B" (the framework sorts its registry
//! by name, so the names come sorted).
//!
//! What a pod needs is inferred from its spec by `InferForScheduling`. Of the registry's
//! features, in v0.36.3 and v0.37.2 of component-helpers, only three infer anything from a
//! pod's spec; the others (`ExtendWebSocketsToKubelet`, the in-place resize ones, the DRA ones)
//! infer only for updates or never, so they never make the kubelet reject a running pod:
//! - `RestartAllContainersOnContainerExits` (1.36+): a container or init container with a
//!   `restartPolicyRules` rule whose action is `RestartAllContainers`;
//! - `UserNamespacesHostNetworkSupport` (1.36+): `hostNetwork: true` with `hostUsers: false`;
//!   declared only when the runtime supports user namespaces with the host network;
//! - `VolumeBindMountOptions` (1.37+): a volume mount of a container, init container or
//!   ephemeral container with `bindMountOptions`; declared only when the runtime supports
//!   mount options.
//!
//! The gates are the target version's defaults (pkg/features/kube_features.go of v1.36.3 and
//! v1.37.2), overridden by the configuration file's `featureGates` and then by the kubelet's
//! `--feature-gates` flag, which wins over the file (as the kubelet merges them). What the
//! runtime supports is not asked here: a feature the Node already declares has it; one it does
//! not declare is undecided, and the plan says so instead of guessing.

use hashcompat::KubeletVersion;
use std::collections::{BTreeMap, BTreeSet};

/// The reason the kubelet gives a pod it rejects for a feature it does not declare.
pub const REASON: &str = "PodFeatureUnsupported";

/// A feature of the registry that can make the kubelet reject a running pod.
struct Feature {
    /// Its name, as declared and as the rejection names it.
    name: &'static str,
    /// The feature gate its `Discover` reads.
    gate: &'static str,
    /// Whether its `Discover` also needs the runtime's support.
    needs_runtime: bool,
    /// The first minor whose registry holds it.
    since: u32,
}

/// The features that infer a need from a pod's spec, by name (the registry's order once sorted).
const FEATURES: [Feature; 3] = [
    Feature {
        name: "RestartAllContainersOnContainerExits",
        gate: "RestartAllContainersOnContainerExits",
        needs_runtime: false,
        since: 36,
    },
    Feature {
        name: "UserNamespacesHostNetworkSupport",
        gate: "UserNamespacesHostNetworkSupport",
        needs_runtime: true,
        since: 36,
    },
    Feature {
        name: "VolumeBindMountOptions",
        gate: "VolumeBindMountOptions",
        needs_runtime: true,
        since: 37,
    },
];

/// The gate that registers the admit handler.
const HANDLER_GATE: &str = "NodeDeclaredFeatures";

/// A gate's default in kubelet minor `minor` (kube_features.go; a minor past 1.37 takes 1.37's).
fn gate_default(gate: &str, minor: u32) -> bool {
    match gate {
        // alpha 1.35 (off), beta 1.36 (on), GA 1.37 (locked on)
        "NodeDeclaredFeatures" | "RestartAllContainersOnContainerExits" => minor >= 36,
        // alpha 1.35 on, still alpha in 1.37 / alpha from 1.37
        _ => false,
    }
}

/// What a pod's spec says about the features it needs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PodNeeds {
    /// A `restartPolicyRules` rule with the action `RestartAllContainers`.
    pub restart_all_containers: bool,
    /// `hostNetwork: true` and `hostUsers: false`.
    pub host_network_user_namespace: bool,
    /// A volume mount with `bindMountOptions`.
    pub bind_mount_options: bool,
}

impl PodNeeds {
    fn needs(&self, feature: &str) -> bool {
        match feature {
            "RestartAllContainersOnContainerExits" => self.restart_all_containers,
            "UserNamespacesHostNetworkSupport" => self.host_network_user_namespace,
            "VolumeBindMountOptions" => self.bind_mount_options,
            _ => false,
        }
    }
}

/// The kubelet's feature gates as set on this node: the configuration file's `featureGates`,
/// then `--feature-gates` from its command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Gates {
    set: BTreeMap<String, bool>,
}

impl Gates {
    /// The gates a configuration file (YAML or JSON; `featureGates`) and a command line set.
    /// A file that is not YAML sets none (the allocatable's reading of it says why).
    pub fn read(config: Option<&str>, args: Option<&[String]>) -> Gates {
        let mut set = BTreeMap::new();
        if let Some(v) = config.and_then(|t| serde_yaml::from_str::<serde_yaml::Value>(t).ok()) {
            if let Some(m) = v.get("featureGates").and_then(|g| g.as_mapping()) {
                for (k, v) in m {
                    if let (Some(k), Some(v)) = (k.as_str(), v.as_bool()) {
                        set.insert(k.to_string(), v);
                    }
                }
            }
        }
        for list in args.into_iter().flatten().enumerate().filter_map(|(i, a)| {
            a.strip_prefix("--feature-gates=")
                .map(str::to_string)
                .or_else(|| {
                    (a == "--feature-gates")
                        .then(|| args.and_then(|x| x.get(i + 1).cloned()))
                        .flatten()
                })
        }) {
            for kv in list.split(',') {
                if let Some((k, v)) = kv.split_once('=') {
                    if let Ok(b) = v.trim().parse::<bool>() {
                        set.insert(k.trim().to_string(), b);
                    }
                }
            }
        }
        Gates { set }
    }

    /// Whether `gate` is on in kubelet `minor`.
    fn enabled(&self, gate: &str, minor: u32) -> bool {
        if gate == HANDLER_GATE && minor >= 37 {
            // locked to its default: the kubelet refuses to start with it off
            return true;
        }
        self.set
            .get(gate)
            .copied()
            .unwrap_or_else(|| gate_default(gate, minor))
    }
}

/// What the target kubelet declares, of the features that can reject a pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeFeatures {
    /// Declared.
    pub declared: BTreeSet<&'static str>,
    /// Gated on, but declared only if the runtime supports it, which the Node does not say.
    pub undecided: BTreeSet<&'static str>,
}

/// What kubelet `to` declares with `gates`, on a node whose Node object declares
/// `node_declared` now; `None` when it registers no declared-features admit handler (before
/// 1.36, or the gate off in 1.36).
pub fn target(to: KubeletVersion, gates: &Gates, node_declared: &[String]) -> Option<NodeFeatures> {
    let minor = to.minor();
    if minor < 36 || !gates.enabled(HANDLER_GATE, minor) {
        return None;
    }
    let mut out = NodeFeatures::default();
    for f in FEATURES.iter().filter(|f| f.since <= minor) {
        if !gates.enabled(f.gate, minor) {
            continue;
        }
        if !f.needs_runtime || node_declared.iter().any(|d| d == f.name) {
            out.declared.insert(f.name);
        } else {
            out.undecided.insert(f.name);
        }
    }
    Some(out)
}

/// The verdict on one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every feature it needs is declared.
    Admitted,
    /// Rejected: the message the kubelet gives (reason [`REASON`]).
    Rejected(String),
    /// It needs these features, declared only if the runtime supports them.
    Undecided(Vec<&'static str>),
}

/// Kubelet `to`'s declared-features verdict on a pod with `needs`, given what it declares.
pub fn verdict(to: KubeletVersion, node: &NodeFeatures, needs: &PodNeeds) -> Verdict {
    let required = FEATURES
        .iter()
        .filter(|f| f.since <= to.minor() && needs.needs(f.name));
    let missing: Vec<&'static str> = required
        .filter(|f| !node.declared.contains(f.name))
        .map(|f| f.name)
        .collect();
    if missing.is_empty() {
        return Verdict::Admitted;
    }
    let certain: Vec<&str> = missing
        .iter()
        .copied()
        .filter(|m| !node.undecided.contains(m))
        .collect();
    if certain.is_empty() {
        return Verdict::Undecided(missing);
    }
    // the undecided ones may be unsatisfied too; the kubelet names every one it lacks, so the
    // message quoted is the certain part
    Verdict::Rejected(format!(
        "Pod requires node features that are not available: {}",
        certain.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(minor: u32) -> KubeletVersion {
        format!("1.{minor}").parse().unwrap()
    }

    const RESTART_ALL: PodNeeds = PodNeeds {
        restart_all_containers: true,
        host_network_user_namespace: false,
        bind_mount_options: false,
    };

    #[test]
    fn no_handler_before_1_36_or_with_its_gate_off_in_1_36() {
        let none = Gates::default();
        assert_eq!(target(v(35), &none, &[]), None, "1.35: alpha, off");
        assert!(target(v(36), &none, &[]).is_some(), "1.36: beta, on");
        let off = Gates::read(Some("featureGates:\n  NodeDeclaredFeatures: false\n"), None);
        assert_eq!(target(v(36), &off, &[]), None, "1.36 with the gate off");
        assert!(
            target(v(37), &off, &[]).is_some(),
            "1.37: GA, locked on whatever the file says"
        );
    }

    #[test]
    fn a_gate_turned_off_in_the_target_configuration_rejects_the_pods_that_need_it() {
        let on = target(v(36), &Gates::default(), &[]).unwrap();
        assert_eq!(verdict(v(36), &on, &RESTART_ALL), Verdict::Admitted);
        let gates = Gates::read(
            Some("kind: KubeletConfiguration\nfeatureGates: {RestartAllContainersOnContainerExits: false}\n"),
            None,
        );
        let off = target(v(37), &gates, &[]).unwrap();
        assert_eq!(
            verdict(v(37), &off, &RESTART_ALL),
            Verdict::Rejected(
                "Pod requires node features that are not available: RestartAllContainersOnContainerExits".into()
            )
        );
        assert_eq!(
            verdict(v(37), &off, &PodNeeds::default()),
            Verdict::Admitted,
            "a pod that needs nothing is admitted"
        );
    }

    #[test]
    fn the_command_line_wins_over_the_file() {
        let args: Vec<String> = vec![
            "--feature-gates".into(),
            "A=true,RestartAllContainersOnContainerExits=false".into(),
        ];
        let g = Gates::read(
            Some("featureGates:\n  RestartAllContainersOnContainerExits: true\n"),
            Some(&args),
        );
        assert!(!g.enabled("RestartAllContainersOnContainerExits", 37));
        let eq: Vec<String> =
            vec!["--feature-gates=RestartAllContainersOnContainerExits=true".into()];
        assert!(Gates::read(None, Some(&eq)).enabled("RestartAllContainersOnContainerExits", 37));
    }

    #[test]
    fn a_feature_the_runtime_must_support_is_undecided_unless_the_node_declares_it() {
        let gates = Gates::read(
            Some("featureGates: {UserNamespacesHostNetworkSupport: true}"),
            None,
        );
        let needs = PodNeeds {
            host_network_user_namespace: true,
            ..PodNeeds::default()
        };
        let unknown = target(v(36), &gates, &[]).unwrap();
        assert_eq!(
            verdict(v(36), &unknown, &needs),
            Verdict::Undecided(vec!["UserNamespacesHostNetworkSupport"])
        );
        let known = target(v(36), &gates, &["UserNamespacesHostNetworkSupport".into()]).unwrap();
        assert_eq!(verdict(v(36), &known, &needs), Verdict::Admitted);
        let off = target(
            v(36),
            &Gates::default(),
            &["UserNamespacesHostNetworkSupport".into()],
        )
        .unwrap();
        assert!(
            matches!(verdict(v(36), &off, &needs), Verdict::Rejected(_)),
            "gated off (its default): not declared, whatever the runtime supports"
        );
    }

    #[test]
    fn a_feature_unknown_to_the_target_registry_is_not_inferred() {
        // 1.36's registry has no VolumeBindMountOptions: going back, it infers no need for it
        let needs = PodNeeds {
            bind_mount_options: true,
            ..PodNeeds::default()
        };
        let t36 = target(v(36), &Gates::default(), &[]).unwrap();
        assert_eq!(verdict(v(36), &t36, &needs), Verdict::Admitted);
        let t37 = target(v(37), &Gates::default(), &[]).unwrap();
        assert!(matches!(verdict(v(37), &t37, &needs), Verdict::Rejected(_)));
    }
}
