//! One decode per record and run on containerd: the rewritten extension value is proven at the
//! byte level ([`crate::splice_proof`]) instead of being decoded again and compared as a tree,
//! and the patch's read-back reads only the rewritten containers' annotations with the byte
//! scanner instead of decoding every record of meta.db again.

use super::{collect, corrupt, cri, ContainerdStore};
use crate::error::StoreError;
use crate::splice_proof::{self, Spliced};
use crate::{
    jsonspan, RecordKind, StoreRecord, HASH_ANNOTATION, HASH_WITHOUT_RESOURCES_ANNOTATION,
};
use std::collections::{BTreeMap, HashMap};

/// The extension value `raw` (of layout `l`, whose decoded annotations are `annotations`) with
/// the annotation values `changes` spliced in, proven: the JSON outside the spliced values is
/// byte-identical, each new value is a JSON string of the hash form, each replaced one held
/// what the decoder read, and the `Any` around it keeps its type URL with only the length
/// prefix changed. The JSON of `raw` must be bytes serde_json parsed without an error (the
/// apply decodes a value with serde_json unless the scan decoded the same bytes, same sha256,
/// with [`cri::decode_json`]), so its field scan does not check every byte again.
pub(super) fn rewrite_proven(
    raw: &[u8],
    l: &cri::AnyLayout,
    annotations: &BTreeMap<String, String>,
    changes: &[(&str, &str)],
) -> Result<Vec<u8>, String> {
    let json = &raw[l.value.clone()];
    let ann =
        cri::annotations_of_valid(json)?.ok_or("no Metadata.Config.annotations in the metadata")?;
    let mut edits = Vec::with_capacity(changes.len());
    let mut splices = Vec::with_capacity(changes.len());
    for (k, v) in changes {
        let m = ann
            .get_string(k)
            .map_err(|e| format!("JSON: {e}"))?
            .ok_or_else(|| format!("annotation {k:?} is not present"))?;
        let old = annotations
            .get(*k)
            .ok_or_else(|| format!("the decoder did not read annotation {k:?}"))?;
        splices.push(Spliced {
            span: m.value.clone(),
            old,
            new: v,
        });
        edits.push(jsonspan::Edit::string(m.value.clone(), v).map_err(|e| e.to_string())?);
    }
    let new_json = jsonspan::splice(json, edits).map_err(|e| e.to_string())?;
    splice_proof::prove(json, &new_json, &splices).map_err(|e| {
        format!(
            "rewritten JSON differs from the original in more than the rewritten annotations: {e}"
        )
    })?;
    let mut out = Vec::with_capacity(raw.len() + 16);
    out.extend_from_slice(&raw[..l.len_prefix.start]);
    cri::put_varint(&mut out, new_json.len() as u64);
    out.extend_from_slice(&new_json);
    out.extend_from_slice(&raw[l.value.end..]);
    let nl = cri::any_layout(&out).map_err(|e| format!("rewritten value: {e}"))?;
    if nl.type_url != l.type_url
        || !crate::bytes::equal(&out[nl.value.clone()], &new_json)
        || !crate::bytes::equal(&out[..l.len_prefix.start], &raw[..l.len_prefix.start])
        || !crate::bytes::equal(&out[nl.value.end..], &raw[l.value.end..])
    {
        return Err("the rewritten Any differs in more than its value".into());
    }
    Ok(out)
}

/// The hash annotations of a container extension value, read with the byte scanner (what
/// containerd's Go decoder reads).
fn hashes_of(raw: &[u8]) -> Result<(Option<String>, Option<String>), String> {
    let l = cri::any_layout(raw)?;
    if l.type_url != cri::CONTAINER_TYPE_URL {
        return Err(format!("type_url is {:?}", l.type_url));
    }
    let json = &raw[l.value];
    let Some(ann) = cri::annotations(json)? else {
        return Ok((None, None));
    };
    let value = |k: &str| -> Result<Option<String>, String> {
        match ann.get_string(k).map_err(|e| format!("JSON: {e}"))? {
            Some(m) => Ok(Some(
                jsonspan::decode_string(json, m.value.start)
                    .map_err(|e| format!("JSON: {e}"))?
                    .text,
            )),
            None => Ok(None),
        }
    };
    Ok((
        value(HASH_ANNOTATION)?,
        value(HASH_WITHOUT_RESOURCES_ANNOTATION)?,
    ))
}

impl ContainerdStore {
    /// [`crate::RuntimeStore::read_back`] for containerd: meta.db opened again and walked as
    /// containerd walks it, only the records `ids` decoded. (The consistency check ran on the
    /// planned tree before the commit, and the commit re-read every value it wrote.)
    pub(super) fn read_back_hashes(&self, ids: &[&str]) -> Result<Vec<StoreRecord>, StoreError> {
        let (db, _warning, _lock) = self.read_db()?;
        let view = db.view();
        let applied = std::mem::take(&mut self.decode_cache().applied);
        if !ids.is_empty() && ids.iter().all(|id| applied.contains_key(*id)) {
            // Each value the apply left, found where containerd looks it up: byte-equal to it,
            // it holds the hashes the apply put there; anything else is decoded.
            // (each lookup reads its pages with pread: on rayon's threads, in request order)
            use rayon::prelude::*;
            let read: Vec<Result<Option<StoreRecord>, StoreError>> = ids
                .par_iter()
                .map(|id| {
                    let h = &applied[*id];
                    let location =
                        format!("{}:v1/{}/containers/{id}", self.db_path.display(), h.ns);
                    let mut r = StoreRecord::new(id.to_string(), RecordKind::Container, location);
                    let path: [&[u8]; 5] = [
                        b"v1",
                        h.ns.as_bytes(),
                        b"containers",
                        id.as_bytes(),
                        b"extensions",
                    ];
                    let raw = match super::lookup(&view, db.root(), &path, cri::CONTAINER_EXT)
                        .map_err(|e| corrupt(&self.db_path, e))?
                    {
                        super::Lookup::Value(raw) => raw,
                        // the container itself is gone: not read back (as the full walk does)
                        super::Lookup::NoBucket(depth) if depth < 4 => return Ok(None),
                        _ => {
                            r.kind = RecordKind::Undecodable;
                            r.problem = Some("no CRI container extension".into());
                            return Ok(Some(r));
                        }
                    };
                    if Some(super::sha256(raw)) == h.sha256 {
                        r.hash = h.hash.clone();
                        r.hash_without_resources = h.hash_without_resources.clone();
                    } else {
                        read_hashes(&mut r, raw);
                    }
                    Ok(Some(r))
                })
                .collect();
            let mut out = Vec::with_capacity(ids.len());
            for r in read {
                out.extend(r?);
            }
            return Ok(out);
        }
        let found = collect(&view, db.root()).map_err(|e| corrupt(&self.db_path, e))?;
        let by_id: HashMap<&str, _> = found.iter().map(|f| (f.id.as_str(), f)).collect();
        Ok(ids
            .iter()
            .filter_map(|id| by_id.get(id))
            .map(|f| {
                let location =
                    format!("{}:v1/{}/containers/{}", self.db_path.display(), f.ns, f.id);
                let mut r = StoreRecord::new(f.id.clone(), RecordKind::Container, location);
                match f.ext() {
                    Some((cri::CONTAINER_EXT, raw)) => read_hashes(&mut r, raw),
                    _ => {
                        r.kind = RecordKind::Undecodable;
                        r.problem = Some("no CRI container extension".into());
                    }
                }
                r
            })
            .collect())
    }
}

/// The read-back's record of one CRI container extension `raw`: its hash annotations, or why
/// they cannot be read.
fn read_hashes(r: &mut StoreRecord, raw: &[u8]) {
    r.set_hashes_read(hashes_of(raw));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn any(json: &str) -> Vec<u8> {
        let mut raw = vec![0x0a];
        cri::put_varint(&mut raw, cri::CONTAINER_TYPE_URL.len() as u64);
        raw.extend_from_slice(cri::CONTAINER_TYPE_URL.as_bytes());
        raw.push(0x12);
        cri::put_varint(&mut raw, json.len() as u64);
        raw.extend_from_slice(json.as_bytes());
        raw
    }

    #[test]
    fn a_proven_rewrite_changes_only_the_values_and_reads_back() {
        let json = r#"{"Version":"v1","Metadata":{"ID":"c","Config":{"annotations":{"io.kubernetes.container.hash":"831c4aaa","x":"\u0026"}}}}"#;
        let raw = any(json);
        let l = cri::any_layout(&raw).unwrap();
        let ann: BTreeMap<String, String> =
            [(HASH_ANNOTATION.to_string(), "831c4aaa".to_string())].into();
        let out = rewrite_proven(&raw, &l, &ann, &[(HASH_ANNOTATION, "708c31de")]).unwrap();
        assert_eq!(out, any(&json.replace("831c4aaa", "708c31de")));
        assert_eq!(hashes_of(&out).unwrap(), (Some("708c31de".into()), None));
        let wrong: BTreeMap<String, String> =
            [(HASH_ANNOTATION.to_string(), "00000000".to_string())].into();
        let e = rewrite_proven(&raw, &l, &wrong, &[(HASH_ANNOTATION, "708c31de")]).unwrap_err();
        assert!(e.contains("parser read"), "{e}");
        let e = rewrite_proven(&raw, &l, &ann, &[(HASH_ANNOTATION, "not-hex")]).unwrap_err();
        assert!(e.contains("not a hash"), "{e}");
    }
}
