//! Kubelet versions and the hash algorithm each one uses.

use crate::schema;
use std::fmt;
use std::str::FromStr;

/// How a kubelet version hashes a container (see `HashContainer` in
/// `pkg/kubelet/container/helpers.go`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HashForm {
    /// 1.8–1.15: go-spew `%#v` of the `v1.Container` struct value.
    Struct,
    /// 1.16–1.26: go-spew of the `[]byte` of `json.Marshal(container)`.
    Json,
    /// 1.27–1.30: as `Json`, plus `HashContainerWithoutResources` (the same with `Resources`
    /// emptied), stored as `io.kubernetes.container.hashWithoutResources`.
    JsonWithoutResources,
    /// 1.31+: go-spew of the `[]byte` of `json.Marshal(map[string]string{name, image})`.
    NameImage,
}

impl HashForm {
    /// One line saying what the kubelet feeds into FNV-1a in this form.
    pub fn description(self) -> &'static str {
        match self {
            HashForm::Struct => "go-spew %#v of the v1.Container struct value",
            HashForm::Json => "go-spew of the []byte of json.Marshal(container)",
            HashForm::JsonWithoutResources => {
                "go-spew of the []byte of json.Marshal(container); hashWithoutResources with Resources emptied"
            }
            HashForm::NameImage => {
                "go-spew of the []byte of json.Marshal({\"image\":…,\"name\":…})"
            }
        }
    }
}

/// A kubelet minor version inside the supported range (the embedded schema files).
///
/// ```
/// use hashcompat::KubeletVersion;
/// let v: KubeletVersion = "v1.14.3-eks-abc".parse().unwrap();
/// assert_eq!(v.to_string(), "1.14");
/// assert!("1.7".parse::<KubeletVersion>().unwrap_err().to_string().contains("1.8"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KubeletVersion {
    major: u32,
    minor: u32,
}

/// Why a text is not a supported kubelet version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    /// The text (given) does not look like a Kubernetes version at all.
    #[error("{0:?} is not a kubelet version (expected e.g. 1.14, v1.14.3 or 1.14.3-eks-abc)")]
    Syntax(String),
    /// A version (given as `major.minor`) outside the oldest–newest range that has a schema
    /// file; hashing it would be a guess.
    #[error("kubelet {0} is not supported: the supported range is {1} to {2}")]
    OutOfRange(String, KubeletVersion, KubeletVersion),
    /// A version newer than the newest this build knows (the given text and that newest).
    #[error("kubelet {0} is newer than this kubelet-rehash knows (it knows 1.8 to {1}): its container hash and checkpoint formats are not in this build's data, and a guess could restart every container or stop the kubelet; use a kubelet-rehash release that lists {0} in `kubelet-rehash versions`")]
    Newer(String, KubeletVersion),
}

impl KubeletVersion {
    /// The major version (1).
    pub fn major(self) -> u32 {
        self.major
    }

    /// The minor version: the only part that changes the hash (patch releases do not).
    pub fn minor(self) -> u32 {
        self.minor
    }

    /// Every supported version, ascending.
    pub fn all() -> Vec<KubeletVersion> {
        schema::embedded_versions()
            .map(|(major, minor)| KubeletVersion { major, minor })
            .collect()
    }

    /// The oldest supported version (1.8).
    pub fn oldest() -> KubeletVersion {
        Self::all()[0]
    }

    /// The newest supported version (the newest embedded schema file).
    pub fn newest() -> KubeletVersion {
        *Self::all().last().expect("at least one embedded schema")
    }

    /// The hash algorithm of this version. Versions newer than 1.30 use the name+image form
    /// (the newest known one), so a new version needs only its schema file.
    pub fn hash_form(self) -> HashForm {
        match self.minor {
            ..=15 => HashForm::Struct,
            16..=26 => HashForm::Json,
            27..=30 => HashForm::JsonWithoutResources,
            _ => HashForm::NameImage,
        }
    }

    /// Whether this version may also store `io.kubernetes.container.hashWithoutResources`
    /// (1.27–1.30; only kubelets with the `InPlacePodVerticalScaling` gate write it).
    pub fn has_hash_without_resources(self) -> bool {
        self.hash_form() == HashForm::JsonWithoutResources
    }

    /// Index of this version's type tree in [`schema::all`].
    pub(crate) fn tree_index(self) -> usize {
        schema::all()
            .versions
            .iter()
            .find(|&&(ma, mi, _)| ma == self.major && mi == self.minor)
            .map(|&(_, _, i)| i)
            .expect("a KubeletVersion is always one of the embedded versions")
    }
}

impl fmt::Display for KubeletVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl FromStr for KubeletVersion {
    type Err = VersionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let syntax = || VersionError::Syntax(s.to_string());
        let t = s.trim();
        let t = t.strip_prefix('v').unwrap_or(t);
        // Build metadata and pre-release/vendor suffixes: 1.14.3-eks-abc, 1.30.2+k3s1.
        let core = t.split(['-', '+']).next().unwrap_or("");
        let parts: Vec<&str> = core.split('.').collect();
        if !(2..=3).contains(&parts.len())
            || parts
                .iter()
                .any(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) || p.len() > 6)
        {
            return Err(syntax());
        }
        if parts.len() == 2 && core.len() != t.len() {
            // "1.14-eks" without a patch number is not a version string anyone prints.
            return Err(syntax());
        }
        let major: u32 = parts[0].parse().map_err(|_| syntax())?;
        let minor: u32 = parts[1].parse().map_err(|_| syntax())?;
        let v = KubeletVersion { major, minor };
        let all = Self::all();
        let newest = *all.last().expect("non-empty");
        if major == newest.major && minor > newest.minor {
            return Err(VersionError::Newer(format!("{major}.{minor}"), newest));
        }
        if !all.contains(&v) {
            return Err(VersionError::OutOfRange(
                format!("{major}.{minor}"),
                all[0],
                *all.last().expect("non-empty"),
            ));
        }
        Ok(v)
    }
}

impl serde::Serialize for KubeletVersion {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The version list is read off the embedded files without building a tree; it is exactly
    /// the versions the trees are built for, in the same order, each with a tree.
    #[test]
    fn the_versions_listed_without_a_tree_are_those_with_one() {
        let listed = KubeletVersion::all();
        let trees = schema::all();
        let with_tree: Vec<KubeletVersion> = trees
            .versions
            .iter()
            .map(|&(major, minor, _)| KubeletVersion { major, minor })
            .collect();
        assert_eq!(listed, with_tree, "the same versions in the same order");
        assert!(listed.windows(2).all(|w| w[0] < w[1]), "ascending");
        for v in &listed {
            assert!(v.tree_index() < trees.trees.len(), "{v} has a tree");
        }
    }

    #[test]
    fn parses_the_usual_spellings() {
        for (s, want) in [
            ("1.14", "1.14"),
            ("v1.14.3", "1.14"),
            ("1.14.3-eks-abc", "1.14"),
            ("v1.30.2+k3s1", "1.30"),
            (" 1.8 ", "1.8"),
            ("1.36.0", "1.36"),
        ] {
            assert_eq!(
                s.parse::<KubeletVersion>().unwrap().to_string(),
                want,
                "{s}"
            );
        }
    }

    #[test]
    fn rejects_garbage_and_out_of_range_naming_the_range() {
        let newest = KubeletVersion::newest();
        let next = format!("1.{}", newest.minor() + 1);
        for s in [
            "", "1", "1.x", "x.14", "1.14.", "2.0", "1.7", &next, "v", "1..2", "1.14-eks",
        ] {
            let e = s.parse::<KubeletVersion>().unwrap_err();
            if let VersionError::OutOfRange(..) = e {
                assert!(e.to_string().contains(&format!("1.8 to {newest}")), "{e}");
            }
        }
        // newer than the newest known: refused, saying why and what to do
        let e = next.parse::<KubeletVersion>().unwrap_err();
        assert!(
            matches!(e, VersionError::Newer(..))
                && e.to_string()
                    .contains("newer than this kubelet-rehash knows")
                && e.to_string().contains(&format!("1.8 to {newest}")),
            "{e}"
        );
        assert!(matches!(
            "1.7".parse::<KubeletVersion>(),
            Err(VersionError::OutOfRange(..))
        ));
    }

    #[test]
    fn forms() {
        let f = |s: &str| s.parse::<KubeletVersion>().unwrap().hash_form();
        assert_eq!(f("1.15"), HashForm::Struct);
        assert_eq!(f("1.16"), HashForm::Json);
        assert_eq!(f("1.27"), HashForm::JsonWithoutResources);
        assert_eq!(f("1.31"), HashForm::NameImage);
    }
}
