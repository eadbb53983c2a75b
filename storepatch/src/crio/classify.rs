//! What a `config.json` is: a kubelet container, a sandbox, something else, or undecodable, read
//! from CRI-O's annotations exactly as CRI-O needs them to load the container.

use super::edit::{find_spans, EditSpans, HASH_KEYS};
use super::layout::check_components;
use super::{
    CrioStore, CONTAINER_MANAGER, CRIO_ANNOTATIONS, CRIO_CONTAINER_ID, CRIO_CONTAINER_TYPE,
    CRIO_IMAGE_NAME, CRIO_LABELS, CRIO_METADATA,
};
use crate::atomic;
use crate::{
    RecordKind, StoreError, StoreRecord, HASH_ANNOTATION, HASH_WITHOUT_RESOURCES_ANNOTATION,
};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

const LABEL_POD_NAME: &str = "io.kubernetes.pod.name";
const LABEL_POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
const LABEL_POD_UID: &str = "io.kubernetes.pod.uid";
const LABEL_CONTAINER_NAME: &str = "io.kubernetes.container.name";

impl CrioStore {
    /// The record of one `<driver>-containers/<id>` directory; never fails as a whole: what
    /// cannot be read or decoded is reported in the record.
    pub(super) fn scan_one(&self, container_dir: &Path) -> StoreRecord {
        let id = container_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let cfg = container_dir.join("userdata").join("config.json");
        let location = cfg.display().to_string();
        if let Err(e) = check_components(&self.graphroot, &cfg) {
            let mut r = StoreRecord::new(&id, RecordKind::Undecodable, &location);
            r.problem = Some(e.to_string());
            return r;
        }
        let bytes = match atomic::read_regular_nofollow(&cfg) {
            Ok((b, _)) => b,
            Err(StoreError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                let mut r = StoreRecord::new(&id, RecordKind::NotKubernetes, &location);
                r.problem = Some("no userdata/config.json: not a container CRI-O created".into());
                return r;
            }
            Err(e) => {
                let mut r = StoreRecord::new(&id, RecordKind::Undecodable, &location);
                r.problem = Some(e.to_string());
                return r;
            }
        };
        let mut record = analyse(&id, &location, &bytes).record;
        if record.kind == RecordKind::Container {
            record.other_copy = self.disagreeing_runroot_copy(container_dir, &record);
            let state = container_dir.join("userdata").join("state.json");
            if let Ok((b, _)) = atomic::read_regular_nofollow(&state) {
                match serde_json::from_slice::<Value>(&b) {
                    Ok(v) => {
                        // `pid` while running; CRI-O keeps only `initPid` once the
                        // container exited (what its verbose status reports).
                        record.pid = ["pid", "initPid"].iter().find_map(|k| {
                            v.get(*k)
                                .and_then(Value::as_u64)
                                .filter(|p| *p > 0)
                                .and_then(|p| u32::try_from(p).ok())
                        });
                    }
                    Err(e) => append_problem(
                        &mut record,
                        format!("{}: not valid JSON ({e}); pid unknown", state.display()),
                    ),
                }
            }
        }
        record
    }
}

impl CrioStore {
    /// The runroot copy of this container's `config.json` (the runc bundle) when its stored
    /// hashes differ from the graphroot copy's `graph`: which one the container was created
    /// from is then unknown, and the plan decides (see [`crate::StoreRecord::other_copy`]).
    /// A runroot copy that is missing, agrees, or is not a readable kubelet container (the
    /// patch refuses that one itself, naming it) gives `None`.
    fn disagreeing_runroot_copy(
        &self,
        container_dir: &Path,
        graph: &StoreRecord,
    ) -> Option<crate::OtherCopy> {
        let run_cfg = self.runroot_config(container_dir).ok()??;
        let (bytes, _) = atomic::read_regular_nofollow(&run_cfg).ok()?;
        let location = run_cfg.display().to_string();
        let run = analyse(&graph.id, &location, &bytes);
        if run.record.kind != RecordKind::Container {
            return None;
        }
        // Every value the copy holds counts, the plain annotation too (runc was handed this
        // file, plain keys included): one differing anywhere makes the copy disagree.
        let (hash, hash_without_resources) = run
            .hash_pairs()
            .into_iter()
            .find(|pair| (&pair.0, &pair.1) != (&graph.hash, &graph.hash_without_resources))?;
        Some(crate::OtherCopy {
            location,
            hash,
            hash_without_resources,
        })
    }
}

impl Analysis {
    /// The (hash, hashWithoutResources) pairs this `config.json` holds: the embedded one
    /// (what CRI-O reports: the record's), then the plain annotations' (a plain key that is
    /// absent counts as agreeing with the embedded one). Equal pairs when the file agrees
    /// with itself.
    pub(super) fn hash_pairs(&self) -> [(Option<String>, Option<String>); 2] {
        let r = &self.record;
        let plain = |i: usize| {
            self.doc
                .as_ref()
                .and_then(|d| d.get("annotations"))
                .and_then(|a| a.get(HASH_KEYS[i]))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        [
            (r.hash.clone(), r.hash_without_resources.clone()),
            (
                plain(0).or_else(|| r.hash.clone()),
                plain(1).or_else(|| r.hash_without_resources.clone()),
            ),
        ]
    }
}

fn append_problem(r: &mut StoreRecord, p: String) {
    r.problem = Some(match r.problem.take() {
        Some(old) => format!("{old}; {p}"),
        None => p,
    });
}

/// One `config.json` as classified, with what an edit of it needs (for kubelet containers).
pub(super) struct Analysis {
    pub(super) record: StoreRecord,
    /// The whole document, parsed (for containers).
    pub(super) doc: Option<Value>,
    /// The embedded annotation map (for containers).
    pub(super) embedded: BTreeMap<String, String>,
    pub(super) edit: Option<EditSpans>,
}

/// A record that is left alone, with the reason it is reported under.
fn left_alone(kind: RecordKind, id: &str, location: &str, why: String) -> Analysis {
    let mut r = StoreRecord::new(id, kind, location);
    r.problem = Some(why);
    Analysis {
        record: r,
        doc: None,
        embedded: BTreeMap::new(),
        edit: None,
    }
}

fn undecodable(id: &str, location: &str, why: String) -> Analysis {
    left_alone(RecordKind::Undecodable, id, location, why)
}

fn not_kubernetes(id: &str, location: &str, why: String) -> Analysis {
    left_alone(RecordKind::NotKubernetes, id, location, why)
}

/// Decodes a JSON string annotation into a map of strings, as CRI-O's
/// `json.Unmarshal(…, &map[string]string)` must succeed on it.
fn string_map(
    ann: &serde_json::Map<String, Value>,
    key: &str,
) -> Result<BTreeMap<String, String>, String> {
    let Some(s) = ann.get(key).and_then(Value::as_str) else {
        return Err(format!(
            "annotation {key} is missing; CRI-O cannot load this container (it would delete it at start)"
        ));
    };
    serde_json::from_str::<BTreeMap<String, String>>(s).map_err(|e| {
        format!("annotation {key} is not a JSON object of strings ({e}); CRI-O cannot load this container (it would delete it at start)")
    })
}

/// Classifies one `config.json` and, for a kubelet container, finds the spans to edit.
pub(super) fn analyse(id: &str, location: &str, bytes: &[u8]) -> Analysis {
    let doc: Value = match serde_json::from_slice(bytes) {
        Ok(v) => v,
        Err(e) => return undecodable(id, location, format!("config.json is not valid JSON ({e})")),
    };
    let Some(obj) = doc.as_object() else {
        return undecodable(id, location, "config.json is not a JSON object".into());
    };
    let ann = match obj.get("annotations") {
        None | Some(Value::Null) => {
            return not_kubernetes(id, location, "the spec has no annotations".into())
        }
        Some(Value::Object(m)) => m,
        Some(_) => {
            return undecodable(
                id,
                location,
                "spec annotations are not a JSON object".into(),
            )
        }
    };
    if let Some((k, _)) = ann.iter().find(|(_, v)| !v.is_string()) {
        return undecodable(
            id,
            location,
            format!("spec annotation {k} is not a string; CRI-O cannot decode this spec"),
        );
    }
    let get = |k: &str| ann.get(k).and_then(Value::as_str);
    if let Some(m) = get(CONTAINER_MANAGER) {
        if m != "cri-o" {
            return not_kubernetes(
                id,
                location,
                format!("{CONTAINER_MANAGER} is {m:?}: not a CRI-O container (CRI-O ignores it)"),
            );
        }
    }
    let Some(ctype) = get(CRIO_CONTAINER_TYPE) else {
        return not_kubernetes(
            id,
            location,
            format!("no {CRIO_CONTAINER_TYPE} annotation: not created through CRI-O"),
        );
    };
    let kind = match ctype {
        "container" => RecordKind::Container,
        "sandbox" => RecordKind::Sandbox,
        other => return undecodable(id, location, format!("{CRIO_CONTAINER_TYPE} is {other:?}")),
    };
    let labels = match string_map(ann, CRIO_LABELS) {
        Ok(m) => m,
        Err(e) => return undecodable(id, location, e),
    };
    let metadata: Value = match get(CRIO_METADATA).map(serde_json::from_str::<Value>) {
        Some(Ok(v @ Value::Object(_))) => v,
        Some(Ok(_)) => {
            return undecodable(
                id,
                location,
                format!("annotation {CRIO_METADATA} is not a JSON object"),
            )
        }
        Some(Err(e)) => {
            return undecodable(
                id,
                location,
                format!("annotation {CRIO_METADATA} is not JSON ({e})"),
            )
        }
        None => {
            return undecodable(
                id,
                location,
                format!("annotation {CRIO_METADATA} is missing"),
            )
        }
    };
    let embedded = match string_map(ann, CRIO_ANNOTATIONS) {
        Ok(m) => m,
        Err(e) => return undecodable(id, location, e),
    };

    let mut r = StoreRecord::new(id, kind.clone(), location);
    r.namespace = labels.get(LABEL_POD_NAMESPACE).cloned();
    r.pod = labels.get(LABEL_POD_NAME).cloned();
    r.pod_uid = labels.get(LABEL_POD_UID).cloned();
    r.attempt = match metadata.get("attempt") {
        None | Some(Value::Null) => Some(0),
        Some(v) => v.as_u64().and_then(|a| u32::try_from(a).ok()),
    };
    r.image = get(CRIO_IMAGE_NAME)
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    if let Some(cid) = get(CRIO_CONTAINER_ID) {
        if cid != id {
            r.problem = Some(format!(
                "{CRIO_CONTAINER_ID} is {cid} but the record's directory is {id}"
            ));
        }
    }
    let mut missing: Vec<&str> = [LABEL_POD_UID, LABEL_POD_NAME, LABEL_POD_NAMESPACE]
        .into_iter()
        .filter(|k| !labels.contains_key(*k))
        .collect();
    if kind == RecordKind::Sandbox {
        return Analysis {
            record: if missing.len() == 3 {
                let mut r = r;
                r.kind = RecordKind::NotKubernetes;
                r.problem = Some("a sandbox without kubelet pod labels".into());
                r
            } else if !missing.is_empty() {
                let mut r = r;
                r.kind = RecordKind::Undecodable;
                r.problem = Some(format!("sandbox labels lack {}", missing.join(", ")));
                r
            } else {
                r
            },
            doc: None,
            embedded: BTreeMap::new(),
            edit: None,
        };
    }
    r.container = labels.get(LABEL_CONTAINER_NAME).cloned();
    if r.container.is_none() {
        missing.push(LABEL_CONTAINER_NAME);
    }
    r.hash = embedded.get(HASH_ANNOTATION).cloned();
    r.hash_without_resources = embedded.get(HASH_WITHOUT_RESOURCES_ANNOTATION).cloned();
    if !missing.is_empty() {
        let kubelet = embedded
            .keys()
            .any(|k| k.starts_with("io.kubernetes.container."));
        let mut r = r;
        if kubelet {
            r.kind = RecordKind::Undecodable;
            r.problem = Some(format!(
                "carries kubelet annotations but its {CRIO_LABELS} lack {}; cannot tell which pod it belongs to",
                missing.join(", ")
            ));
        } else {
            r.kind = RecordKind::NotKubernetes;
            r.problem = Some(format!("no kubelet labels ({})", missing.join(", ")));
        }
        return Analysis {
            record: r,
            doc: None,
            embedded: BTreeMap::new(),
            edit: None,
        };
    }

    // Spans. serde_json accepted the document, so the scanner fails only where CRI-O (Go)
    // would read it differently: a repeated or differently-cased `annotations` field, or a
    // non-string duplicate of an annotation (see crate::jsonspan).
    let spans = match find_spans(bytes) {
        Ok(s) => s,
        Err(e) => return undecodable(id, location, e),
    };
    for (i, key) in HASH_KEYS.iter().enumerate() {
        let plain = get(key);
        let inner = embedded.get(*key).map(String::as_str);
        if let (Some(p), Some(v)) = (plain, inner) {
            if p != v {
                append_problem(
                    &mut r,
                    format!("top-level {key} is {p} but {CRIO_ANNOTATIONS} (what CRI-O reports) says {v}"),
                );
            }
        }
        debug_assert_eq!(spans.plain[i].is_some(), plain.is_some());
    }
    Analysis {
        record: r,
        doc: Some(doc),
        embedded,
        edit: Some(spans),
    }
}
