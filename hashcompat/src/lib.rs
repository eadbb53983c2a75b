//! Bit-exact reproduction of the kubelet's container hash (`HashContainer`, and
//! `HashContainerWithoutResources` for 1.27–1.30) for every kubelet from 1.8 to 1.36.
//!
//! The kubelet stores this hash with each container and restarts any container whose hash it
//! computes differently. Across minor versions the `v1.Container` type tree grows and the
//! algorithm changes, so an upgraded kubelet computes different hashes for unchanged
//! containers. Reproducing each version's hash exactly is what lets kubelet-rehash rewrite the
//! stored values before the upgrade.
//!
//! How: the JSON spec (as the API server serves it) is decoded the way Go's `encoding/json`
//! decodes it into that version's type tree ([`schema`], embedded data files), then printed
//! the way the kubelet's `DeepHashObject` prints it (go-spew of the struct, or of the bytes of
//! `json.Marshal`), straight into FNV-1a 32.
//!
//! One container spec, hashed as the kubelet before and after an upgrade 1.30 → 1.31 computes it:
//!
//! ```
//! use hashcompat::{hash_container, Hash, KubeletVersion};
//!
//! // The container of the kubelet's own unit test TestHashContainer (helpers_test.go).
//! let spec = serde_json::json!({
//!     "name": "test_container", "image": "foo/image:v1",
//!     "args": ["/bin/sh", "-c", "echo abc"], "ports": [{"containerPort": 8001}]
//! });
//! let from: KubeletVersion = "1.30".parse().unwrap();
//! let to: KubeletVersion = "v1.31.2".parse().unwrap(); // patch and `v` are accepted
//!
//! let stored = hash_container(&spec, from).unwrap();
//! let target = hash_container(&spec, to).unwrap();
//! // The test's expected values: 0x3c42280f in the JSON era (1.16–1.30), 0x8e45cbd0 from 1.31.
//! // Display gives the text the kubelet stores in io.kubernetes.container.hash.
//! assert_eq!(stored.hash.to_string(), "3c42280f");
//! assert_eq!(target.hash, Hash(0x8e45cbd0));
//! // 1.27–1.30 may also store hashWithoutResources; for a spec without resources it is the hash.
//! assert_eq!(stored.hash_without_resources, Some(stored.hash));
//! assert_eq!(target.hash_without_resources, None);
//! // The values differ: kubelet 1.31 would restart this unchanged container unless the stored
//! // hash is rewritten to `target.hash` before it starts.
//! assert_ne!(stored.hash, target.hash);
//! ```

#![deny(missing_docs)]

pub mod batch;
pub mod gojson;
pub mod quantity;
pub mod schema;
mod serde_impls;
pub mod sink;
pub mod spew;
pub mod value;
mod version;

pub use batch::hash_many;
pub use gojson::parse::{
    parse as parse_json, parse_streaming as parse_json_streaming, Node, NodeValue, Streamed,
    SyntaxError,
};
pub use value::DecodeError;
pub use version::{HashForm, KubeletVersion, VersionError};

use schema::{Kind, TypeTree};
use sink::{Fnv32a, Sink, SpewByteSlice};
use std::fmt;
use value::GoValue;

/// A kubelet container hash. Displays as the kubelet stores it: `strconv.FormatUint(h, 16)`,
/// lowercase, no zero padding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Hash(pub u32);

impl fmt::Display for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:x}", self.0)
    }
}

impl std::str::FromStr for Hash {
    type Err = std::num::ParseIntError;
    /// Parses the kubelet's text form (hex, case-insensitive, no `0x`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        u32::from_str_radix(s, 16).map(Hash)
    }
}

impl serde::Serialize for Hash {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// What one kubelet version stores for one container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ContainerHashes {
    /// The kubelet version these values belong to.
    pub version: KubeletVersion,
    /// `io.kubernetes.container.hash`.
    pub hash: Hash,
    /// `io.kubernetes.container.hashWithoutResources` (1.27–1.30 only).
    pub hash_without_resources: Option<Hash>,
}

/// Why no hash can be computed for a spec.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The input is not JSON that Go's decoder accepts, so no kubelet could have read it.
    #[error("{0}")]
    Syntax(#[from] SyntaxError),
    /// The top-level value is of another JSON kind (named as in Go's decoder errors); Go
    /// would refuse to decode it into a `v1.Container`.
    #[error("a container spec must be a JSON object, not {0}")]
    NotAnObject(&'static str),
    /// The kubelet of `version` could not have decoded this spec.
    #[error("kubelet {version} cannot decode this container: {error}")]
    Decode {
        /// The version whose type tree rejected the spec (others may accept it).
        version: KubeletVersion,
        /// What `encoding/json` of that version would have reported.
        error: DecodeError,
    },
}

/// A container decoded with one version's type tree. Decoding is shared by all versions with
/// the same tree; hashing from here streams the text into the hasher without materialising it.
#[derive(Debug, Clone)]
pub struct DecodedContainer<'a> {
    tree: usize,
    value: GoValue<'a>,
}

fn tree_of(v: KubeletVersion) -> &'static TypeTree {
    &schema::all().trees[v.tree_index()]
}

/// Decodes a parsed spec as the kubelet of `version` would.
pub fn decode<'a>(
    node: &Node<'a>,
    version: KubeletVersion,
) -> Result<DecodedContainer<'a>, SpecError> {
    if !matches!(node.value, NodeValue::Object(_)) {
        return Err(SpecError::NotAnObject(node.kind_name()));
    }
    let tree = tree_of(version);
    let value = value::decode_container(tree, node)
        .map_err(|error| SpecError::Decode { version, error })?;
    Ok(DecodedContainer {
        tree: version.tree_index(),
        value,
    })
}

impl<'a> DecodedContainer<'a> {
    fn tree(&self) -> &'static TypeTree {
        &schema::all().trees[self.tree]
    }

    fn root_field(&self, name: &str) -> Option<&GoValue<'a>> {
        let tree = self.tree();
        let i = tree.field_index(tree.root, name)?;
        match &self.value {
            GoValue::Struct(fs) => fs.get(i),
            _ => None,
        }
    }

    /// The copy `HashContainerWithoutResources` hashes: `Resources` replaced by an empty
    /// `ResourceRequirements`.
    fn without_resources(&self) -> GoValue<'a> {
        let tree = self.tree();
        let mut v = self.value.clone();
        if let (Some(i), GoValue::Struct(fs)) = (tree.field_index(tree.root, "Resources"), &mut v) {
            if let Kind::Struct(fields) = &tree.ty(tree.root).kind {
                fs[i] = value::zero(tree, fields[i].ty);
            }
        }
        v
    }

    /// Writes the JSON of [`Self::without_resources`] without copying the container.
    fn write_json_without_resources<S: Sink>(&self, out: &mut S) {
        let tree = self.tree();
        let i = tree.field_index(tree.root, "Resources");
        match (i, &tree.ty(tree.root).kind) {
            (Some(i), Kind::Struct(fields)) => {
                let zero = value::zero(tree, fields[i].ty);
                gojson::encode::write_struct_replacing(out, tree, tree.root, &self.value, i, &zero)
            }
            _ => gojson::encode::write_value(out, tree, tree.root, &self.value),
        }
    }

    /// Streams the hashed text of `form` for `value` into `out`.
    fn emit<S: Sink>(&self, out: &mut S, form: HashForm, value: &GoValue) {
        let tree = self.tree();
        match form {
            HashForm::Struct => spew::write_top(out, tree, tree.root, value),
            HashForm::Json | HashForm::JsonWithoutResources => {
                let mut bytes = SpewByteSlice::begin(out);
                gojson::encode::write_value(&mut bytes, tree, tree.root, value);
                bytes.end();
            }
            HashForm::NameImage => {
                let mut bytes = SpewByteSlice::begin(out);
                self.write_name_image_json(&mut bytes);
                bytes.end();
            }
        }
    }

    fn write_name_image_json<S: Sink>(&self, out: &mut S) {
        let get = |n: &str| match self.root_field(n) {
            Some(GoValue::Str(s)) => s.as_ref(),
            _ => "",
        };
        // json.Marshal(map[string]string) sorts keys: "image" < "name".
        out.put(b"{\"image\":");
        gojson::encode::write_string(out, get("Image"));
        out.put(b",\"name\":");
        gojson::encode::write_string(out, get("Name"));
        out.put(b"}");
    }

    /// The hashes the kubelet of `version` stores. `version` must share this container's
    /// type tree (use the version it was decoded for).
    pub fn hashes(&self, version: KubeletVersion) -> ContainerHashes {
        debug_assert_eq!(version.tree_index(), self.tree, "decoded for another tree");
        let form = version.hash_form();
        let mut h = Fnv32a::new();
        self.emit(&mut h, form, &self.value);
        let hash_without_resources = (form == HashForm::JsonWithoutResources).then(|| {
            let mut h = Fnv32a::new();
            let mut bytes = SpewByteSlice::begin(&mut h);
            self.write_json_without_resources(&mut bytes);
            bytes.end();
            Hash(h.sum32())
        });
        ContainerHashes {
            version,
            hash: Hash(h.sum32()),
            hash_without_resources,
        }
    }

    /// The exact text the kubelet of `version` writes into the hasher, and the JSON inside
    /// it for the JSON forms.
    pub fn explain(&self, version: KubeletVersion) -> Explanation {
        let form = version.hash_form();
        let one = |value: &GoValue| {
            let mut text = Vec::new();
            self.emit(&mut text, form, value);
            let json = match form {
                HashForm::Struct => None,
                HashForm::NameImage => {
                    let mut j = Vec::new();
                    self.write_name_image_json(&mut j);
                    Some(j)
                }
                _ => {
                    let mut j = Vec::new();
                    let tree = self.tree();
                    gojson::encode::write_value(&mut j, tree, tree.root, value);
                    Some(j)
                }
            };
            ExplainedText {
                hash: Hash(sink::fnv32a(&text)),
                text,
                json,
            }
        };
        Explanation {
            version,
            form,
            hash: one(&self.value),
            without_resources: (form == HashForm::JsonWithoutResources)
                .then(|| one(&self.without_resources())),
        }
    }
}

/// The hashed text of one hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExplainedText {
    /// The bytes written into FNV-1a (UTF-8 in practice, but strings are raw).
    pub text: Vec<u8>,
    /// For the JSON forms, the JSON whose bytes `text` spells out.
    pub json: Option<Vec<u8>>,
    /// FNV-1a 32 of `text`: equal to the computed hash, which is what makes the text a proof.
    pub hash: Hash,
}

/// What the kubelet of one version hashes for one container: the input of
/// `io.kubernetes.container.hash` and, for 1.27–1.30, of `hashWithoutResources`. Lets a
/// mismatch be traced to the exact bytes instead of a bare number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explanation {
    /// The kubelet version explained.
    pub version: KubeletVersion,
    /// The hash algorithm of that version.
    pub form: HashForm,
    /// The text behind `io.kubernetes.container.hash`.
    pub hash: ExplainedText,
    /// The text behind `io.kubernetes.container.hashWithoutResources` (1.27–1.30 only).
    pub without_resources: Option<ExplainedText>,
}

/// Hashes of a parsed spec for one version.
pub fn hash_node(node: &Node<'_>, version: KubeletVersion) -> Result<ContainerHashes, SpecError> {
    Ok(decode(node, version)?.hashes(version))
}

/// Hashes of a container spec given as JSON bytes (one element of `pod.spec.containers`).
/// This is the exact path: raw number and string tokens reach the quantity parser as Go's
/// decoder hands them over.
pub fn hash_container_bytes(
    spec: &[u8],
    version: KubeletVersion,
) -> Result<ContainerHashes, SpecError> {
    hash_node(&parse_json(spec)?, version)
}

/// Hashes of a container spec given as a `serde_json::Value`. Numbers keep their digits
/// (serde_json's `arbitrary_precision` is on), but serde_json respells exponents (`1E3` →
/// `1e+3`), and a quantity given as a bare JSON number is hashed from its literal text: for
/// such specs use [`hash_container_bytes`] on the original bytes. API servers always send
/// quantities as strings, so served specs hash the same either way.
pub fn hash_container(
    spec: &serde_json::Value,
    version: KubeletVersion,
) -> Result<ContainerHashes, SpecError> {
    let bytes = serde_json::to_vec(spec).expect("a Value always serialises");
    hash_container_bytes(&bytes, version)
}

/// Hashes for every version in `versions` (ascending), decoding once per distinct type tree
/// and hashing once per distinct (tree, form): versions that share both (1.10 and 1.11, 1.16
/// to 1.18, …) hash every container identically, so the hash is computed once and given to
/// each. One entry per version: a spec may decode for some versions and not for others.
pub fn hash_versions(
    node: &Node<'_>,
    versions: &[KubeletVersion],
) -> Vec<Result<ContainerHashes, SpecError>> {
    let mut cache: Option<(usize, Result<DecodedContainer, SpecError>)> = None;
    // the last version hashed, by (tree, form)
    let mut last: Option<((usize, HashForm), ContainerHashes)> = None;
    versions
        .iter()
        .map(|&v| {
            let idx = v.tree_index();
            if cache.as_ref().map(|(i, _)| *i) != Some(idx) {
                cache = Some((idx, decode(node, v)));
            }
            match &cache.as_ref().expect("just set").1 {
                Ok(d) => {
                    let key = (idx, v.hash_form());
                    let h = match &last {
                        Some((k, h)) if *k == key => ContainerHashes { version: v, ..*h },
                        _ => d.hashes(v),
                    };
                    last = Some((key, h));
                    Ok(h)
                }
                Err(SpecError::Decode { error, .. }) => Err(SpecError::Decode {
                    version: v,
                    error: error.clone(),
                }),
                Err(e) => Err(e.clone()),
            }
        })
        .collect()
}

/// One row of [`versions`].
#[derive(Debug, Clone, serde::Serialize)]
pub struct VersionInfo {
    /// The kubelet minor version.
    pub version: KubeletVersion,
    /// Its hash algorithm.
    pub form: HashForm,
    /// One line saying what that algorithm hashes (for `kubelet-rehash versions`).
    pub description: &'static str,
    /// Whether this kubelet also writes `io.kubernetes.container.hashWithoutResources`
    /// (1.27–1.30, only with the `InPlacePodVerticalScaling` feature gate on).
    pub has_hash_without_resources: bool,
    /// Versions with the same number hash every container identically.
    pub equivalence_class: usize,
}

/// Every supported version with its algorithm.
pub fn versions() -> Vec<VersionInfo> {
    let mut class = 0;
    let mut prev: Option<(usize, HashForm)> = None;
    KubeletVersion::all()
        .into_iter()
        .map(|v| {
            let key = (v.tree_index(), v.hash_form());
            // 1.31+ hash only name and image: tree changes no longer matter.
            let same = match prev {
                Some((_, HashForm::NameImage)) if key.1 == HashForm::NameImage => true,
                Some(p) => p == key,
                None => true,
            };
            if !same {
                class += 1;
            }
            prev = Some(key);
            VersionInfo {
                version: v,
                form: v.hash_form(),
                description: v.hash_form().description(),
                has_hash_without_resources: v.has_hash_without_resources(),
                equivalence_class: class,
            }
        })
        .collect()
}
