//! The allocatable the target kubelet computes from its configuration file (issue 52).
//!
//! A restarted kubelet admits every running pod against the Node's allocatable. An operator
//! who changes `kubeReserved`, `systemReserved`, `evictionHard`, `maxPods` or `podsPerCore` in
//! the configuration the new kubelet reads changes that allocatable, and the Node's
//! `status.allocatable` — what the old kubelet reported — no longer says what the new one
//! admits against. This module computes the new one the way the kubelet does:
//! - capacity is the Node's `status.capacity` (the same machine), with `pods` replaced by
//!   `maxPods`, or `podsPerCore × cores` when that is smaller and `podsPerCore` is set
//!   (pkg/kubelet/nodestatus/setters.go `MachineInfo`, 1.8–1.37);
//! - the reservation of each resource is `systemReserved + kubeReserved + ` the hard eviction
//!   threshold that reserves it: `memory.available` for memory, `nodefs.available` for
//!   ephemeral-storage, each a quantity or a percentage of capacity
//!   (pkg/kubelet/cm/node_container_manager_linux.go `GetNodeAllocatableReservation`,
//!   pkg/kubelet/cm/helpers.go `hardEvictionReservation`,
//!   pkg/kubelet/eviction/api `GetThresholdQuantity`);
//! - allocatable is capacity minus the reservation, never below 0, and memory also minus every
//!   `hugepages-*` capacity (setters.go).
//!
//! `evictionHard` unset is the kubelet's default (`memory.available<100Mi`,
//! `nodefs.available<10%`, …: cmd/kubelet/app/server.go `loadConfigFile`); set, it replaces the
//! default whole, except from 1.33 with `mergeDefaultEvictionSettings: true`, which fills each
//! signal it does not name from the default. Read from the configuration file only: the same
//! settings given as command-line flags (`--kube-reserved`, `--max-pods`, …) or in a drop-in
//! directory (`--config-dir`) override it and are not read here (the plan says so).

use crate::admission::parse_quantity_millis;
use hashcompat::KubeletVersion;
use serde::Deserialize;
use std::collections::BTreeMap;

/// The settings of a `KubeletConfiguration` that make allocatable.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AllocatableConfig {
    /// `maxPods` (default 110).
    #[serde(default)]
    pub max_pods: Option<i64>,
    /// `podsPerCore` (default 0: off).
    #[serde(default)]
    pub pods_per_core: Option<i64>,
    /// `systemReserved`.
    #[serde(default)]
    pub system_reserved: Option<BTreeMap<String, String>>,
    /// `kubeReserved`.
    #[serde(default)]
    pub kube_reserved: Option<BTreeMap<String, String>>,
    /// `evictionHard`: `None` when unset (the default applies).
    #[serde(default)]
    pub eviction_hard: Option<BTreeMap<String, String>>,
    /// `mergeDefaultEvictionSettings` (1.33+).
    #[serde(default)]
    pub merge_default_eviction_settings: Option<bool>,
}

/// The kubelet's default `evictionHard` on Linux (pkg/kubelet/eviction/defaults_linux.go).
const DEFAULT_EVICTION_HARD: [(&str, &str); 4] = [
    ("memory.available", "100Mi"),
    ("nodefs.available", "10%"),
    ("nodefs.inodesFree", "5%"),
    ("imagefs.available", "15%"),
];

impl AllocatableConfig {
    /// Parses a kubelet configuration file (YAML or JSON).
    pub fn parse(text: &str) -> Result<AllocatableConfig, String> {
        let v: serde_yaml::Value =
            serde_yaml::from_str(text).map_err(|e| format!("not YAML or JSON: {e}"))?;
        if v.get("kind").and_then(|k| k.as_str()) != Some("KubeletConfiguration") {
            return Err("not a KubeletConfiguration (kind)".into());
        }
        serde_yaml::from_value(v).map_err(|e| format!("its allocatable settings: {e}"))
    }

    /// The hard eviction thresholds the kubelet `to` runs with.
    fn eviction_hard(&self, to: KubeletVersion) -> BTreeMap<String, String> {
        let defaults = || {
            DEFAULT_EVICTION_HARD
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
        };
        match &self.eviction_hard {
            None => defaults().collect(),
            Some(set) => {
                let mut set = set.clone();
                if to.minor() >= 33 && self.merge_default_eviction_settings == Some(true) {
                    for (k, v) in defaults() {
                        set.entry(k).or_insert(v);
                    }
                }
                set
            }
        }
    }

    /// The allocatable of a node of `capacity` (the Node's `status.capacity`) under this
    /// configuration, for kubelet `to`: each resource as a quantity (cpu in millicores).
    pub fn allocatable(
        &self,
        capacity: &BTreeMap<String, String>,
        to: KubeletVersion,
    ) -> Result<BTreeMap<String, String>, String> {
        // amounts in thousandths (MilliValue), as Quantity arithmetic keeps them exactly
        let parse = |what: &str, q: &str| {
            parse_quantity_millis(q).ok_or_else(|| format!("{what}: {q:?} is not a quantity"))
        };
        let mut cap: BTreeMap<String, i128> = BTreeMap::new();
        for (k, q) in capacity {
            cap.insert(k.clone(), parse(&format!("capacity {k}"), q)?);
        }
        let max_pods = self.max_pods.unwrap_or(110);
        let pods = match self.pods_per_core.unwrap_or(0) {
            ppc if ppc > 0 => {
                // info.NumCores: the Node's cpu capacity is that count
                let cores = cap.get("cpu").copied().unwrap_or(0) / 1000;
                (cores as i64).saturating_mul(ppc).min(max_pods)
            }
            _ => max_pods,
        };
        cap.insert("pods".into(), i128::from(pods) * 1000);

        let mut reserved: BTreeMap<String, i128> = BTreeMap::new();
        for (which, list) in [
            ("systemReserved", &self.system_reserved),
            ("kubeReserved", &self.kube_reserved),
        ] {
            for (k, q) in list.iter().flatten() {
                *reserved.entry(k.clone()).or_default() += parse(&format!("{which} {k}"), q)?;
            }
        }
        for (signal, value) in self.eviction_hard(to) {
            let resource = match signal.as_str() {
                "memory.available" => "memory",
                "nodefs.available" => "ephemeral-storage",
                _ => continue,
            };
            let Some(&capacity) = cap.get(resource) else {
                continue;
            };
            let amount = match value.strip_suffix('%') {
                // ParseFloat(…, 32) / 100 in float32, then int64(float64(capacity.Value()) *
                // float64(percentage)) (GetThresholdQuantity)
                Some(p) => {
                    let p: f32 = p
                        .trim()
                        .parse()
                        .map_err(|_| format!("evictionHard {signal}: {value:?}"))?;
                    let percentage = p / 100.0f32;
                    let whole = (capacity + 999).div_euclid(1000);
                    ((whole as f64 * f64::from(percentage)) as i64 as i128) * 1000
                }
                None => parse(&format!("evictionHard {signal}"), &value)?,
            };
            *reserved.entry(resource.to_string()).or_default() += amount;
        }

        let mut out = BTreeMap::new();
        for (k, &c) in &cap {
            let a = (c - reserved.get(k).copied().unwrap_or(0)).max(0);
            out.insert(k.clone(), a);
        }
        let hugepages: i128 = cap
            .iter()
            .filter(|(k, _)| k.starts_with("hugepages-"))
            .map(|(_, v)| *v)
            .sum();
        if let Some(m) = out.get_mut("memory") {
            *m = (*m - hugepages).max(0);
        }
        Ok(out
            .into_iter()
            .map(|(k, v)| {
                let q = if v % 1000 == 0 {
                    (v / 1000).to_string()
                } else {
                    format!("{v}m")
                };
                (k, q)
            })
            .collect())
    }
}

/// Command-line flags that set a part of allocatable and override the configuration file; a
/// kubelet run with one is not recomputed from the file.
pub const OVERRIDING_FLAGS: [&str; 7] = [
    "--max-pods",
    "--pods-per-core",
    "--kube-reserved",
    "--system-reserved",
    "--eviction-hard",
    "--reserved-cpus",
    "--config-dir",
];

/// What the target kubelet's allocatable will be, as far as its configuration tells.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// No configuration file to read (or no capacity on the Node): the Node's allocatable.
    Unknown,
    /// The file gives the allocatable the Node already reports.
    Same,
    /// The file gives another allocatable: `(resource, now, then)` for each that differs, and
    /// the whole new list.
    Changed {
        /// The configuration file read.
        config: String,
        /// `(resource, the Node's, the new kubelet's)`.
        changes: Vec<(String, String, String)>,
        /// The new kubelet's allocatable (the Node's, with every recomputed resource replaced).
        allocatable: BTreeMap<String, String>,
    },
    /// There is a file, but what it says is not what the kubelet will use, or is unreadable.
    NotRecomputed {
        /// The configuration file.
        config: String,
        /// Why.
        why: String,
    },
}

/// The configuration file the kubelet reads: `explicit` (`--kubelet-config`), else the
/// running kubelet's `--config`, else `default` (`<kubelet dir>/config.yaml`, kubeadm's).
pub fn config_path(
    explicit: Option<&std::path::Path>,
    args: Option<&[String]>,
    default: Option<&std::path::Path>,
) -> Option<std::path::PathBuf> {
    if let Some(p) = explicit {
        return Some(p.to_path_buf());
    }
    let from_args = args.and_then(|a| {
        a.iter().enumerate().find_map(|(i, x)| {
            x.strip_prefix("--config=")
                .map(str::to_string)
                .or_else(|| (x == "--config").then(|| a.get(i + 1).cloned()).flatten())
        })
    });
    from_args
        .map(std::path::PathBuf::from)
        .or_else(|| default.map(std::path::Path::to_path_buf))
}

/// The target kubelet's allocatable on this node: the configuration `text` (read from
/// `config`) applied to the Node's capacity, compared with the Node's allocatable. `args` is
/// the running kubelet's command line when known (the new kubelet gets the same): a flag of
/// [`OVERRIDING_FLAGS`] there, or `reservedSystemCPUs` in the file, leaves it not recomputed.
pub fn target(
    config: &std::path::Path,
    text: &str,
    capacity: &BTreeMap<String, String>,
    allocatable: &BTreeMap<String, String>,
    args: Option<&[String]>,
    to: KubeletVersion,
) -> Target {
    let config_name = config.display().to_string();
    let not = |why: String| Target::NotRecomputed {
        config: config_name.clone(),
        why,
    };
    if capacity.is_empty() {
        return Target::Unknown;
    }
    if let Some(flag) = args.and_then(|a| {
        a.iter().find_map(|x| {
            OVERRIDING_FLAGS
                .iter()
                .find(|f| x == *f || x.starts_with(&format!("{f}=")))
        })
    }) {
        return not(format!(
            "the kubelet runs with {flag}, which overrides the file: admission is predicted against the Node's allocatable"
        ));
    }
    let parsed = match AllocatableConfig::parse(text) {
        Ok(c) => c,
        Err(e) => {
            return not(format!(
                "{e}: admission is predicted against the Node's allocatable"
            ))
        }
    };
    if text
        .lines()
        .any(|l| l.trim_start().starts_with("reservedSystemCPUs"))
    {
        return not(
            "it sets reservedSystemCPUs, not recomputed here: admission is predicted against the Node's allocatable".into(),
        );
    }
    let new = match parsed.allocatable(capacity, to) {
        Ok(a) => a,
        Err(e) => {
            return not(format!(
                "{e}: admission is predicted against the Node's allocatable"
            ))
        }
    };
    let same = |a: &str, b: &str| {
        parse_quantity_millis(a).is_some() && parse_quantity_millis(a) == parse_quantity_millis(b)
    };
    let mut changes = Vec::new();
    let mut merged = allocatable.clone();
    for (k, v) in &new {
        let now = allocatable.get(k).map(String::as_str).unwrap_or("");
        if !same(now, v) {
            changes.push((k.clone(), now.to_string(), v.clone()));
        }
        merged.insert(k.clone(), v.clone());
    }
    if changes.is_empty() {
        Target::Same
    } else {
        Target::Changed {
            config: config_name,
            changes,
            allocatable: merged,
        }
    }
}

#[cfg(test)]
mod tests;
