//! Static pods: pods the kubelet runs from manifest files (every kubeadm control-plane node).
//! The API server only shows their *mirror* pods, whose `metadata.uid` is the API server's;
//! the kubelet's own UID — the one in the runtime's labels — is in the mirror's annotation
//! `kubernetes.io/config.mirror`. [`crate::pods::PodIndex`] indexes a mirror pod under both.
//!
//! Whether the pod survives a kubelet upgrade depends on where that UID came from. A manifest
//! with `metadata.uid` pins it. Without one the kubelet derives it (pkg/kubelet/config/
//! common.go `applyDefaults`): an md5 over `DeepHashObject` of the whole decoded Pod object
//! plus the node name and file path, as 32 lowercase hex digits. The Pod types grow in almost
//! every minor release, and a new field changes what go-spew prints and so the md5: a kubelet
//! of another minor version derives another UID, sees a new pod, kills the old one and starts
//! the new one — a restart no hash rewrite prevents. We count it so, whatever the hashes say.

use std::fs;
use std::path::{Path, PathBuf};

pub mod pin;

/// The kubelet's default `staticPodPath` (kubeadm's too).
pub const DEFAULT_MANIFESTS_DIR: &str = "/etc/kubernetes/manifests";

/// One static pod manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// The file it came from.
    pub file: PathBuf,
    /// `metadata.namespace` (the kubelet's default: `default`).
    pub namespace: String,
    /// `metadata.name`; the mirror pod is named `<name>-<nodeName>`.
    pub name: String,
    /// `metadata.uid` when the manifest pins one.
    pub uid: Option<String>,
}

/// The static pod manifests found on the node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StaticManifests {
    /// The directory read.
    pub dir: PathBuf,
    /// Every manifest, by file name order.
    pub manifests: Vec<Manifest>,
}

/// A manifest directory the plan cannot use (exit 2): nothing is read as a guess instead.
#[derive(Debug, Clone, thiserror::Error)]
#[error("static pod manifests: {file}: {reason}")]
pub struct ManifestError {
    /// The file or directory.
    pub file: String,
    /// What is wrong with it.
    pub reason: String,
}

impl StaticManifests {
    /// Reads every manifest in `dir` the way the kubelet's file source does: regular files not
    /// starting with `.`, each one Pod in YAML or JSON. An unparsable file is an error: the
    /// kubelet would skip it, but a guess here could call a restarting pod safe.
    pub fn read(dir: &Path) -> Result<StaticManifests, ManifestError> {
        let err = |file: &Path, reason: String| ManifestError {
            file: file.display().to_string(),
            reason,
        };
        let rd = fs::read_dir(dir).map_err(|e| err(dir, e.to_string()))?;
        let mut files = Vec::new();
        for entry in rd {
            let entry = entry.map_err(|e| err(dir, e.to_string()))?;
            let name = entry.file_name();
            if name.to_string_lossy().starts_with('.') {
                continue;
            }
            let path = entry.path();
            let meta = fs::metadata(&path).map_err(|e| err(&path, e.to_string()))?;
            if meta.is_file() {
                files.push(path);
            }
        }
        files.sort();
        let mut manifests = Vec::new();
        for file in files {
            let bytes = fs::read(&file).map_err(|e| err(&file, e.to_string()))?;
            manifests.push(parse_manifest(&file, &bytes).map_err(|r| err(&file, r))?);
        }
        Ok(StaticManifests {
            dir: dir.to_path_buf(),
            manifests,
        })
    }

    /// The manifest a mirror pod `namespace/mirror_name` on `node` comes from.
    pub fn for_mirror(&self, namespace: &str, mirror_name: &str, node: &str) -> Option<&Manifest> {
        self.manifests.iter().find(|m| {
            m.namespace == namespace
                && mirror_name
                    .strip_suffix(node)
                    .and_then(|s| s.strip_suffix('-'))
                    == Some(m.name.as_str())
        })
    }
}

fn parse_manifest(file: &Path, bytes: &[u8]) -> Result<Manifest, String> {
    let v: serde_yaml::Value =
        serde_yaml::from_slice(bytes).map_err(|e| format!("not YAML or JSON: {e}"))?;
    let kind = v.get("kind").and_then(|k| k.as_str());
    if kind != Some("Pod") {
        return Err(format!(
            "kind {kind:?}: a static pod manifest holds one Pod"
        ));
    }
    let meta = v.get("metadata");
    let s = |k: &str| {
        meta.and_then(|m| m.get(k))
            .and_then(|x| x.as_str())
            .filter(|x| !x.is_empty())
            .map(str::to_string)
    };
    let name = s("name").ok_or("no metadata.name")?;
    Ok(Manifest {
        file: file.to_path_buf(),
        namespace: s("namespace").unwrap_or_else(|| "default".into()),
        name,
        uid: s("uid"),
    })
}

/// Where a static pod's UID came from, and how we know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UidOrigin {
    /// The manifest sets `metadata.uid`: every kubelet version keeps it.
    Pinned,
    /// The manifest has no `metadata.uid`: the kubelet derived it.
    Derived,
    /// No manifest found; the UID has the md5 form (32 lowercase hex digits) the kubelet derives.
    DerivedByForm,
    /// No manifest found; the UID is not of the derived form, so a manifest pinned it.
    PinnedByForm,
}

impl UidOrigin {
    /// Whether a kubelet of another minor version gives the pod a new UID.
    pub fn changes_across_versions(self) -> bool {
        matches!(self, UidOrigin::Derived | UidOrigin::DerivedByForm)
    }
}

/// Decides a static pod's [`UidOrigin`] from its manifest, or from the UID's form.
pub fn uid_origin(manifest: Option<&Manifest>, kubelet_uid: &str) -> UidOrigin {
    match manifest {
        Some(m) if m.uid.is_some() => UidOrigin::Pinned,
        Some(_) => UidOrigin::Derived,
        None if is_derived_form(kubelet_uid) => UidOrigin::DerivedByForm,
        None => UidOrigin::PinnedByForm,
    }
}

/// `hex.EncodeToString(md5)`: exactly 32 lowercase hex digits.
pub fn is_derived_form(uid: &str) -> bool {
    uid.len() == 32
        && uid
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A static pod whose derived UID `patch` pins in its manifest (`--pin-static-pod-uids`): what
/// the plan decided, with the sha256 of the manifest it decided from and of what it writes, so
/// the write can prove it writes exactly what was planned.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UidPin {
    /// The manifest file.
    pub manifest: String,
    /// The static pod's `metadata.namespace`.
    pub namespace: String,
    /// Its `metadata.name` (the mirror pod is `<name>-<node>`).
    pub name: String,
    /// The UID pinned: the one the running kubelet uses, as read from the runtime's pod UID
    /// label and the mirror pod's annotations (never computed).
    pub uid: String,
    /// sha256 of the manifest as planned.
    pub sha256_original: String,
    /// sha256 of the manifest with the pin.
    pub sha256_pinned: String,
}

/// Decides the pin of one static pod: `kubelet_uid` is the UID its runtime containers carry
/// (their `io.kubernetes.pod.uid` label, which the mirror pod's `kubernetes.io/config.mirror`
/// matched), `config_hash` the mirror's `kubernetes.io/config.hash`; both are the kubelet's
/// UID, so when they disagree neither is trusted. The edit is made in memory only.
pub fn plan_pin(
    manifest: &Manifest,
    kubelet_uid: &str,
    config_hash: Option<&str>,
) -> Result<UidPin, String> {
    if let Some(h) = config_hash.filter(|h| *h != kubelet_uid) {
        return Err(format!(
            "the runtime's containers carry pod UID {kubelet_uid} but the mirror pod's kubernetes.io/config.hash is {h}: which UID the kubelet uses is unsure, so none is pinned"
        ));
    }
    let (bytes, _) = storepatch::atomic::read_regular_nofollow(&manifest.file)
        .map_err(|e| format!("{}: {e}", manifest.file.display()))?;
    let edit = match pin::pin_uid(&bytes, kubelet_uid)
        .map_err(|e| format!("{}: {e}", manifest.file.display()))?
    {
        pin::Pin::Edit(e) => e,
        pin::Pin::AlreadyPinned => {
            return Err(format!(
                "{} already pins metadata.uid {kubelet_uid}",
                manifest.file.display()
            ))
        }
    };
    // Recorded absolute: a rollback run from another directory restores the same file.
    let file = std::path::absolute(&manifest.file).unwrap_or_else(|_| manifest.file.clone());
    Ok(UidPin {
        manifest: file.display().to_string(),
        namespace: manifest.namespace.clone(),
        name: manifest.name.clone(),
        uid: kubelet_uid.to_string(),
        sha256_original: storepatch::backup::sha256_hex(&bytes),
        sha256_pinned: storepatch::backup::sha256_hex(&edit.bytes),
    })
}

/// The planned edit of `pin`, made again from the manifest's bytes now: `Ok(None)` when the
/// manifest already holds the pinned bytes (a rerun), else its bytes, mode and owner now and
/// the pinned bytes. A manifest changed since the plan is refused.
#[allow(clippy::type_complexity)]
pub fn redo_pin(
    pin: &UidPin,
) -> Result<Option<(Vec<u8>, storepatch::atomic::FileMeta, Vec<u8>)>, String> {
    let path = Path::new(&pin.manifest);
    let (bytes, meta) = storepatch::atomic::read_regular_nofollow(path)
        .map_err(|e| format!("{}: {e}", pin.manifest))?;
    let sha = storepatch::backup::sha256_hex(&bytes);
    if sha == pin.sha256_pinned {
        return Ok(None);
    }
    if sha != pin.sha256_original {
        return Err(format!(
            "{} changed since the plan (sha256 {sha}, planned from {}): not pinned",
            pin.manifest, pin.sha256_original
        ));
    }
    match pin::pin_uid(&bytes, &pin.uid) {
        Ok(pin::Pin::Edit(e)) if storepatch::backup::sha256_hex(&e.bytes) == pin.sha256_pinned => {
            Ok(Some((bytes, meta, e.bytes)))
        }
        Ok(_) => Err(format!(
            "{}: the edit does not reproduce the planned bytes",
            pin.manifest
        )),
        Err(e) => Err(format!("{}: {e}", pin.manifest)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_form_is_exactly_32_lowercase_hex() {
        assert!(is_derived_form("0123456789abcdef0123456789abcdef"));
        assert!(!is_derived_form("0123456789ABCDEF0123456789abcdef"));
        assert!(!is_derived_form("c312adc6-2956-4f5a-ac9d-6841c1188886"));
        assert!(!is_derived_form("0123456789abcdef0123456789abcde"));
    }

    #[test]
    fn manifests_parse_yaml_and_json_and_refuse_the_rest() {
        let d = tempfile::tempdir().unwrap();
        fs::write(
            d.path().join("etcd.yaml"),
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: etcd\n  namespace: kube-system\nspec:\n  containers: []\n",
        )
        .unwrap();
        fs::write(
            d.path().join("pinned.json"),
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","uid":"u-1"},"spec":{}}"#,
        )
        .unwrap();
        fs::write(d.path().join(".swp"), "garbage: [").unwrap();
        let m = StaticManifests::read(d.path()).unwrap();
        assert_eq!(
            m.manifests.len(),
            2,
            "hidden files are skipped, like the kubelet does"
        );
        assert_eq!(m.manifests[0].name, "etcd");
        assert_eq!(m.manifests[0].uid, None);
        assert_eq!(m.manifests[1].namespace, "default");
        assert_eq!(m.manifests[1].uid.as_deref(), Some("u-1"));
        assert_eq!(
            m.for_mirror("kube-system", "etcd-node-1", "node-1")
                .map(|m| &m.name),
            Some(&"etcd".to_string())
        );
        assert!(m
            .for_mirror("kube-system", "etcd-node-2", "node-1")
            .is_none());

        fs::write(d.path().join("broken.yaml"), "kind: Pod\nmetadata: [").unwrap();
        let e = StaticManifests::read(d.path()).unwrap_err();
        assert!(e.file.ends_with("broken.yaml"), "{e}");
        fs::write(d.path().join("broken.yaml"), "kind: Deployment\n").unwrap();
        let e = StaticManifests::read(d.path()).unwrap_err();
        assert!(e.reason.contains("one Pod"), "{e}");
        let e = StaticManifests::read(&d.path().join("nope")).unwrap_err();
        assert!(e.file.ends_with("nope"), "{e}");
    }
}
