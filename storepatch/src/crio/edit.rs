//! The byte-preserving edit of one `config.json`: the spans of the hash values (the plain
//! annotation and its copy inside `io.kubernetes.cri-o.Annotations`), the splice, and the proof
//! that only those values changed.

use super::classify::{analyse, Analysis};
use super::CRIO_ANNOTATIONS;
use crate::jsonspan;
use crate::{RecordKind, StoreError, HASH_ANNOTATION, HASH_WITHOUT_RESOURCES_ANNOTATION};
use serde_json::Value;
use std::collections::BTreeMap;
use std::ops::Range;

/// The two annotations a rewrite may change, in this order everywhere below.
pub(super) const HASH_KEYS: [&str; 2] = [HASH_ANNOTATION, HASH_WITHOUT_RESOURCES_ANNOTATION];

/// Byte spans of the values a rewrite may replace.
#[derive(Debug, Clone)]
pub(super) struct EditSpans {
    /// Plain top-level annotation values (`"…"`), per [`HASH_KEYS`].
    pub(super) plain: [Option<Range<usize>>; 2],
    /// Values inside the embedded string, as raw file spans (`\"…\"`), per [`HASH_KEYS`].
    pub(super) inner: [Option<Range<usize>>; 2],
}

/// The spans of the hash values in `bytes`: the plain annotations and, mapped back to file
/// offsets, those inside the embedded annotation string.
pub(super) fn find_spans(bytes: &[u8]) -> Result<EditSpans, String> {
    let ann = jsonspan::root(bytes)
        .and_then(|root| root.object_field("annotations"))
        .map_err(|e| format!("config.json: {e}"))?
        .ok_or_else(|| "config.json has no annotations".to_string())?;
    let plain_value = |key: &str| -> Result<Option<Range<usize>>, String> {
        let m = ann
            .get_string(key)
            .map_err(|e| format!("annotations: {e}"))?;
        Ok(m.map(|m| m.value.clone()))
    };
    let plain = [plain_value(HASH_KEYS[0])?, plain_value(HASH_KEYS[1])?];
    let emb = plain_value(CRIO_ANNOTATIONS)?.ok_or_else(|| format!("no {CRIO_ANNOTATIONS}"))?;
    let decoded = jsonspan::decode_string(bytes, emb.start)
        .map_err(|e| format!("{CRIO_ANNOTATIONS}: {e}"))?;
    let inner_doc = jsonspan::root(decoded.text.as_bytes())
        .map_err(|e| format!("{CRIO_ANNOTATIONS} content: {}", decoded.raw_error(e)))?;
    let inner_value = |key: &str| -> Result<Option<Range<usize>>, String> {
        let m = inner_doc
            .get_string(key)
            .map_err(|e| format!("inside {CRIO_ANNOTATIONS}: {}", decoded.raw_error(e)))?;
        Ok(m.map(|m| decoded.raw_span(&m.value)))
    };
    let inner = [inner_value(HASH_KEYS[0])?, inner_value(HASH_KEYS[1])?];
    Ok(EditSpans { plain, inner })
}

/// Replaces the spans' values with `new_values` (per [`HASH_KEYS`]; `None` keeps a value).
pub(super) fn apply_edit(
    bytes: &[u8],
    spans: &EditSpans,
    new_values: &[Option<&str>; 2],
) -> Result<Vec<u8>, jsonspan::SpanError> {
    let mut edits = Vec::new();
    for (i, v) in new_values.iter().enumerate() {
        let Some(v) = v else { continue };
        if let Some(r) = &spans.plain[i] {
            edits.push(jsonspan::Edit::string(r.clone(), v)?);
        }
        if let Some(r) = &spans.inner[i] {
            edits.push(jsonspan::Edit::embedded_string(r.clone(), v)?);
        }
    }
    jsonspan::splice(bytes, edits)
}

/// Proves `new` is `original` with only the hash values changed: both the file and its embedded
/// annotation string parse, the embedded map equals the original's with the values set, and the
/// rest of the document is equal. Also re-classifies the new file and checks its identity.
pub(super) fn verify_edit(
    a: &Analysis,
    original: &[u8],
    new: &[u8],
    new_values: &[Option<&str>; 2],
    id: &str,
    location: &str,
) -> Result<(), StoreError> {
    let fail = |reason: String| StoreError::Verify {
        location: location.to_string(),
        reason,
    };
    let mut expected_doc = a
        .doc
        .clone()
        .ok_or_else(|| fail("no parsed original".into()))?;
    let mut expected_emb = a.embedded.clone();
    {
        let ann = expected_doc
            .get_mut("annotations")
            .and_then(Value::as_object_mut)
            .ok_or_else(|| fail("original has no annotations".into()))?;
        for (i, key) in HASH_KEYS.iter().enumerate() {
            let Some(v) = new_values[i] else { continue };
            if let Some(slot) = ann.get_mut(*key) {
                *slot = Value::String(v.to_string());
            }
            if let Some(slot) = expected_emb.get_mut(*key) {
                *slot = v.to_string();
            }
        }
        ann.insert(CRIO_ANNOTATIONS.into(), Value::Null);
    }
    let mut new_doc: Value = serde_json::from_slice(new)
        .map_err(|e| fail(format!("the rewritten file does not parse ({e})")))?;
    let new_ann = new_doc
        .get_mut("annotations")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| fail("the rewritten file has no annotations object".into()))?;
    let new_emb_str = new_ann
        .get(CRIO_ANNOTATIONS)
        .and_then(Value::as_str)
        .ok_or_else(|| {
            fail(format!(
                "the rewritten file has no {CRIO_ANNOTATIONS} string"
            ))
        })?;
    let new_emb: BTreeMap<String, String> = serde_json::from_str(new_emb_str).map_err(|e| {
        fail(format!(
            "the rewritten {CRIO_ANNOTATIONS} is not a JSON object of strings ({e})"
        ))
    })?;
    if new_emb != expected_emb {
        return Err(fail(format!(
            "the rewritten {CRIO_ANNOTATIONS} differs from the original in more than the hash values"
        )));
    }
    new_ann.insert(CRIO_ANNOTATIONS.into(), Value::Null);
    if new_doc != expected_doc {
        return Err(fail(
            "the rewritten document differs from the original in more than the hash values".into(),
        ));
    }
    let changed: usize = original.len().abs_diff(new.len());
    let again = analyse(id, location, new);
    let (o, n) = (&a.record, &again.record);
    if n.kind != RecordKind::Container
        || (
            n.namespace.as_ref(),
            n.pod.as_ref(),
            n.pod_uid.as_ref(),
            n.container.as_ref(),
        ) != (
            o.namespace.as_ref(),
            o.pod.as_ref(),
            o.pod_uid.as_ref(),
            o.container.as_ref(),
        )
        || n.hash.as_deref() != new_values[0]
    {
        return Err(fail(format!(
            "re-reading the rewritten file gives {:?} {:?} hash {:?} (length changed by {changed})",
            n.kind, n.container, n.hash
        )));
    }
    Ok(())
}
