//! The CRI plugin's container/sandbox extension: a protobuf `Any` whose value is the JSON of
//! `containerstore.Metadata` / `sandboxstore.Metadata` (see docs/research/stores.md §2).
//!
//! Reading mirrors what the CRI plugin needs to load a container on restart (exact type_url,
//! `Version == "v1"`, `Metadata` object, string-valued `annotations`/`labels` maps). Writing
//! is surgical: only the bytes of the chosen annotation *values* change, plus the varint
//! length of the `Any`'s value field when the JSON length changes; every other byte stays.

use crate::jsonspan;
use serde_json::Value;
use std::ops::Range;

mod streaming;

/// The extension key under which the CRI plugin stores a container's metadata.
pub const CONTAINER_EXT: &str = "io.cri-containerd.container.metadata";
/// The extension key of a sandbox's metadata.
pub const SANDBOX_EXT: &str = "io.cri-containerd.sandbox.metadata";
/// The `Any` type URL the CRI plugin gives container metadata (and only loads).
pub const CONTAINER_TYPE_URL: &str = "github.com/containerd/cri/pkg/store/container/Metadata";
/// The `Any` type URL of sandbox metadata.
pub const SANDBOX_TYPE_URL: &str = "github.com/containerd/cri/pkg/store/sandbox/Metadata";

/// `google.protobuf.Any`, as containerd's typeurl writes it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Any {
    #[prost(string, tag = "1")]
    /// The `Any`'s type URL.
    pub type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    /// The `Any`'s value bytes (JSON for the CRI plugin).
    pub value: Vec<u8>,
}

/// Where the parts of an encoded `Any` are.
#[derive(Debug, Clone)]
pub struct AnyLayout {
    /// The `Any`'s type URL.
    pub type_url: String,
    /// The varint length prefix of field 2.
    pub len_prefix: Range<usize>,
    /// The value bytes (the JSON).
    pub value: Range<usize>,
}

fn varint(b: &[u8], i: &mut usize) -> Result<u64, String> {
    let mut v: u64 = 0;
    for shift in (0..70).step_by(7) {
        let byte = *b.get(*i).ok_or("truncated varint")?;
        *i += 1;
        if shift == 63 && byte > 1 {
            return Err("varint overflows 64 bits".into());
        }
        v |= ((byte & 0x7f) as u64) << shift;
        if byte & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err("varint too long".into())
}

/// Appends `v` as a protobuf varint.
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Parses the wire format of an `Any` and cross-checks it with prost.
pub fn any_layout(raw: &[u8]) -> Result<AnyLayout, String> {
    let mut i = 0;
    let mut type_url: Option<String> = None;
    let mut value: Option<(Range<usize>, Range<usize>)> = None;
    while i < raw.len() {
        let tag = varint(raw, &mut i)?;
        let (field, wt) = (tag >> 3, tag & 7);
        match wt {
            0 => {
                varint(raw, &mut i)?;
            }
            1 => i += 8,
            5 => i += 4,
            2 => {
                let pstart = i;
                let len = varint(raw, &mut i)? as usize;
                let pend = i;
                let end = i
                    .checked_add(len)
                    .filter(|e| *e <= raw.len())
                    .ok_or("length-delimited field runs past the end")?;
                match field {
                    1 if type_url.is_some() => return Err("type_url field repeated".into()),
                    1 => {
                        type_url = Some(
                            String::from_utf8(raw[i..end].to_vec())
                                .map_err(|_| "type_url is not UTF-8")?,
                        )
                    }
                    2 if value.is_some() => return Err("value field repeated".into()),
                    2 => value = Some((pstart..pend, i..end)),
                    _ => {}
                }
                i = end;
            }
            _ => return Err(format!("unsupported protobuf wire type {wt}")),
        }
        if i > raw.len() {
            return Err("field runs past the end".into());
        }
        if (field == 1 || field == 2) && wt != 2 {
            return Err(format!("field {field} has wire type {wt}, expected 2"));
        }
    }
    let any =
        <Any as prost::Message>::decode(raw).map_err(|e| format!("not a protobuf Any: {e}"))?;
    let type_url = type_url.unwrap_or_default();
    let (len_prefix, value) = value.unwrap_or((raw.len()..raw.len(), raw.len()..raw.len()));
    if any.type_url != type_url || !crate::bytes::equal(&any.value, &raw[value.clone()]) {
        return Err("protobuf decoders disagree on this Any".into());
    }
    Ok(AnyLayout {
        type_url,
        len_prefix,
        value,
    })
}

/// What the scan needs from a container's (or sandbox's) metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decoded {
    /// `Metadata.ID`.
    pub id: Option<String>,
    /// `Metadata.Name`.
    pub name: Option<String>,
    /// `Metadata.SandboxID`.
    pub sandbox_id: Option<String>,
    /// `Config.metadata.name`: the container name.
    pub meta_name: Option<String>,
    /// `Config.metadata.attempt`.
    pub attempt: Option<u32>,
    /// Pod namespace (sandbox metadata).
    pub meta_namespace: Option<String>,
    /// Pod uid (sandbox metadata).
    pub meta_uid: Option<String>,
    /// `Config.labels`.
    pub labels: std::collections::BTreeMap<String, String>,
    /// `Config.annotations`, the kubelet's hashes among them.
    pub annotations: std::collections::BTreeMap<String, String>,
    /// `Config.image.image`.
    pub config_image: Option<String>,
}

fn string_map(
    v: Option<&Value>,
    what: &str,
) -> Result<std::collections::BTreeMap<String, String>, String> {
    let mut out = std::collections::BTreeMap::new();
    match v {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) => {
            for (k, v) in m {
                match v {
                    Value::String(s) => {
                        out.insert(k.clone(), s.clone());
                    }
                    Value::Null => {}
                    _ => return Err(format!("{what}[{k:?}] is not a string")),
                }
            }
        }
        Some(_) => return Err(format!("{what} is not an object")),
    }
    Ok(out)
}

fn opt_str(v: Option<&Value>, what: &str) -> Result<Option<String>, String> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("{what} is not a string")),
    }
}

/// Decodes an extension value the way the CRI plugin loads it; `Err` = the CRI would drop it.
pub fn decode(raw: &[u8], type_url: &str) -> Result<Decoded, String> {
    let l = any_layout(raw)?;
    if l.type_url != type_url {
        return Err(format!(
            "type_url is {:?}, the CRI plugin only loads {type_url:?}",
            l.type_url
        ));
    }
    decode_json(&raw[l.value])
}

/// Decodes the JSON of a CRI metadata value, refusing what Go would read differently.
pub fn decode_json(json: &[u8]) -> Result<Decoded, String> {
    if let Some(decoded) = streaming::decode(json) {
        // (serde_json parsed these bytes just above)
        annotations_of_valid(json)?;
        return Ok(decoded);
    }
    // The errors in the reference's order: syntax, then the field scan, then the fields.
    let doc: Value =
        serde_json::from_slice(json).map_err(|e| format!("JSON does not decode: {e}"))?;
    annotations_of_valid(json)?;
    decode_doc(doc).map(|(d, _)| d)
}

/// [`decode_json`] without the field scan (for a caller that scans the same bytes anyway, as
/// [`rewrite_json`] does). The streaming decoder answers for the documents containerd writes;
/// anything it is unsure of goes to the tree decoder, which words the errors.
pub fn decode_json_unscanned(json: &[u8]) -> Result<Decoded, String> {
    match streaming::decode(json) {
        Some(d) => Ok(d),
        None => decode_json_tree(json).map(|(d, _)| d),
    }
}

/// The streaming decoder alone: `None` where it leaves the document to the reference
/// ([`decode_json_tree`]); public for the fuzz target that holds the two to agreement.
pub fn decode_json_streaming(json: &[u8]) -> Option<Decoded> {
    streaming::decode(json)
}

/// The reference decoder: the whole document as a `serde_json::Value`, then the fields read
/// from the tree (no field scan). Slower than [`decode_json_unscanned`] and equal to it
/// wherever that one answers (the fuzz target `cri_extension_edit` checks it); returns the tree
/// too, for the proof of [`rewrite_extension`].
pub fn decode_json_tree(json: &[u8]) -> Result<(Decoded, Value), String> {
    let doc: Value =
        serde_json::from_slice(json).map_err(|e| format!("JSON does not decode: {e}"))?;
    decode_doc(doc)
}

fn decode_doc(doc: Value) -> Result<(Decoded, Value), String> {
    let top = doc.as_object().ok_or("JSON is not an object")?;
    match top.get("Version") {
        Some(Value::String(v)) if v == "v1" => {}
        other => {
            return Err(format!(
                "unsupported metadata Version {other:?} (the CRI plugin only loads \"v1\")"
            ))
        }
    }
    let m = match top.get("Metadata") {
        Some(Value::Object(m)) => m,
        _ => return Err("no Metadata object".into()),
    };
    let mut d = Decoded {
        id: opt_str(m.get("ID"), "Metadata.ID")?,
        name: opt_str(m.get("Name"), "Metadata.Name")?,
        sandbox_id: opt_str(m.get("SandboxID"), "Metadata.SandboxID")?,
        ..Default::default()
    };
    match m.get("Config") {
        None | Some(Value::Null) => {}
        Some(Value::Object(c)) => {
            d.labels = string_map(c.get("labels"), "Config.labels")?;
            d.annotations = string_map(c.get("annotations"), "Config.annotations")?;
            match c.get("metadata") {
                None | Some(Value::Null) => {}
                Some(Value::Object(md)) => {
                    d.meta_name = opt_str(md.get("name"), "Config.metadata.name")?;
                    d.meta_namespace = opt_str(md.get("namespace"), "Config.metadata.namespace")?;
                    d.meta_uid = opt_str(md.get("uid"), "Config.metadata.uid")?;
                    d.attempt = match md.get("attempt") {
                        None | Some(Value::Null) => Some(0),
                        Some(v) => Some(
                            v.as_u64()
                                .and_then(|a| u32::try_from(a).ok())
                                .ok_or("Config.metadata.attempt is not a uint32")?,
                        ),
                    };
                }
                Some(_) => return Err("Config.metadata is not an object".into()),
            }
            if let Some(Value::Object(img)) = c.get("image") {
                d.config_image = opt_str(img.get("image"), "Config.image.image")?;
            }
        }
        Some(_) => return Err("Metadata.Config is not an object".into()),
    }
    Ok((d, doc))
}

/// The `Metadata.Config.annotations` object of a metadata document; `Ok(None)` when a field on
/// that path is absent or null. Refuses a document whose path (or `Version`) Go would read
/// differently from serde_json (the CRI plugin matches struct fields case-insensitively and
/// merges repeated objects, see [`crate::jsonspan`]), and annotations the CRI plugin cannot
/// decode (a member that is not a string, duplicates included).
pub(crate) fn annotations(json: &[u8]) -> Result<Option<jsonspan::Object<'_>>, String> {
    annotations_scan(jsonspan::root(json))
}

/// [`annotations`] of bytes serde_json parsed without an error ([`jsonspan::root_of_valid`]).
pub(crate) fn annotations_of_valid(json: &[u8]) -> Result<Option<jsonspan::Object<'_>>, String> {
    annotations_scan(jsonspan::root_of_valid(json))
}

/// [`annotations`] from the document's root object as a scan found it.
fn annotations_scan(
    root: Result<jsonspan::Object<'_>, jsonspan::SpanError>,
) -> Result<Option<jsonspan::Object<'_>>, String> {
    let scan = || {
        let root = root?;
        root.field("Version")?;
        let ann = root.path(&["Metadata", "Config", "annotations"])?;
        if let Some(ann) = &ann {
            ann.check_string_map()?;
        }
        Ok(ann)
    };
    scan().map_err(|e: jsonspan::SpanError| format!("JSON: {e}"))
}

/// Replaces the values of the annotations in `changes` (key → new value; each must already
/// exist) inside the JSON, byte-surgically. New values must not need JSON escaping.
pub fn rewrite_json(json: &[u8], changes: &[(&str, &str)]) -> Result<Vec<u8>, String> {
    let ann = annotations(json)?.ok_or("no Metadata.Config.annotations in the metadata")?;
    let mut edits = Vec::with_capacity(changes.len());
    for (k, v) in changes {
        let m = ann
            .get_string(k)
            .map_err(|e| format!("JSON: {e}"))?
            .ok_or_else(|| format!("annotation {k:?} is not present"))?;
        edits.push(jsonspan::Edit::string(m.value.clone(), v).map_err(|e| e.to_string())?);
    }
    jsonspan::splice(json, edits).map_err(|e| e.to_string())
}

/// Rewrites annotation values inside an encoded container extension and proves the result:
/// the new `Any` decodes (prost and our wire parser agree), has the same type_url, and its
/// JSON equals the original document with exactly those annotation values changed.
pub fn rewrite_extension(raw: &[u8], changes: &[(&str, &str)]) -> Result<Vec<u8>, String> {
    let l = any_layout(raw)?;
    let json = &raw[l.value.clone()];
    let (_, old_doc) = decode_json_tree(json)?;
    annotations_of_valid(json)?;
    rewrite_extension_with(raw, &l, old_doc, changes)
}

/// [`rewrite_extension`] for a value already decoded: `l` = its layout, `old_doc` = its JSON.
pub fn rewrite_extension_with(
    raw: &[u8],
    l: &AnyLayout,
    old_doc: Value,
    changes: &[(&str, &str)],
) -> Result<Vec<u8>, String> {
    if l.type_url != CONTAINER_TYPE_URL {
        return Err(format!(
            "type_url is {:?}, expected {CONTAINER_TYPE_URL:?}",
            l.type_url
        ));
    }
    let json = &raw[l.value.clone()];
    let new_json = rewrite_json(json, changes)?;
    let mut out = Vec::with_capacity(raw.len() + 16);
    out.extend_from_slice(&raw[..l.len_prefix.start]);
    put_varint(&mut out, new_json.len() as u64);
    out.extend_from_slice(&new_json);
    out.extend_from_slice(&raw[l.value.end..]);
    // Verify before anyone writes it.
    let mut expect = old_doc;
    for (k, v) in changes {
        expect["Metadata"]["Config"]["annotations"][*k] = Value::String((*v).to_string());
    }
    let new_layout =
        any_layout(&out).map_err(|e| format!("rewritten value does not decode: {e}"))?;
    if new_layout.type_url != CONTAINER_TYPE_URL {
        return Err("rewritten value changed its type_url".into());
    }
    let new_json = &out[new_layout.value];
    let (dec, new_doc) = decode_json_tree(new_json)
        .and_then(|d| annotations_of_valid(new_json).map(|_| d))
        .map_err(|e| format!("rewritten value does not decode: {e}"))?;
    if new_doc != expect {
        return Err(
            "rewritten JSON differs from the original in more than the rewritten annotations"
                .into(),
        );
    }
    for (k, v) in changes {
        if dec.annotations.get(*k).map(String::as_str) != Some(*v) {
            return Err(format!("rewritten value does not carry {k}={v}"));
        }
    }
    Ok(out)
}
