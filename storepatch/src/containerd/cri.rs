//! The CRI plugin's container/sandbox extension: a protobuf `Any` whose value is the JSON of
//! `containerstore.Metadata` / `sandboxstore.Metadata` (see research/stores.md §2).
//!
//! Reading mirrors what the CRI plugin needs to load a container on restart (exact type_url,
//! `Version == "v1"`, `Metadata` object, string-valued `annotations`/`labels` maps). Writing
//! is surgical: only the bytes of the chosen annotation *values* change, plus the varint
//! length of the `Any`'s value field when the JSON length changes; every other byte stays.

use serde_json::Value;
use std::ops::Range;

pub const CONTAINER_EXT: &str = "io.cri-containerd.container.metadata";
pub const SANDBOX_EXT: &str = "io.cri-containerd.sandbox.metadata";
pub const CONTAINER_TYPE_URL: &str = "github.com/containerd/cri/pkg/store/container/Metadata";
pub const SANDBOX_TYPE_URL: &str = "github.com/containerd/cri/pkg/store/sandbox/Metadata";

/// `google.protobuf.Any`, as containerd's typeurl writes it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Any {
    #[prost(string, tag = "1")]
    pub type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
}

/// Where the parts of an encoded `Any` are.
#[derive(Debug, Clone)]
pub struct AnyLayout {
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
    if any.type_url != type_url || any.value != raw[value.clone()] {
        return Err("protobuf decoders disagree on this Any".into());
    }
    Ok(AnyLayout {
        type_url,
        len_prefix,
        value,
    })
}

/// What the scan needs from a container's (or sandbox's) metadata.
#[derive(Debug, Clone, Default)]
pub struct Decoded {
    pub id: Option<String>,
    pub name: Option<String>,
    pub sandbox_id: Option<String>,
    pub meta_name: Option<String>,
    pub attempt: Option<u32>,
    pub meta_namespace: Option<String>,
    pub meta_uid: Option<String>,
    pub labels: std::collections::BTreeMap<String, String>,
    pub annotations: std::collections::BTreeMap<String, String>,
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
pub fn decode(raw: &[u8], type_url: &str) -> Result<(Decoded, Value), String> {
    let l = any_layout(raw)?;
    if l.type_url != type_url {
        return Err(format!(
            "type_url is {:?}, the CRI plugin only loads {type_url:?}",
            l.type_url
        ));
    }
    decode_json(&raw[l.value])
}

pub fn decode_json(json: &[u8]) -> Result<(Decoded, Value), String> {
    // Go matches struct fields case-insensitively; a document with near-duplicate field names
    // would not mean what we read, so refuse it.
    let doc: Value =
        serde_json::from_slice(json).map_err(|e| format!("JSON does not decode: {e}"))?;
    spans(json, &[])?;
    decode_doc(doc)
}

/// [`decode_json`] without the duplicate-field scan (for a caller that runs [`spans`] on the
/// same bytes anyway, as [`rewrite_json`] does).
pub fn decode_json_unscanned(json: &[u8]) -> Result<(Decoded, Value), String> {
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

// ---- a minimal JSON scanner that reports byte spans ----

struct Scan<'a> {
    b: &'a [u8],
    i: usize,
    depth: usize,
}

impl<'a> Scan<'a> {
    fn ws(&mut self) {
        while self.i < self.b.len() && matches!(self.b[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }
    fn err<T>(&self, what: &str) -> Result<T, String> {
        Err(format!("JSON: {what} at byte {}", self.i))
    }
    fn skip_string(&mut self) -> Result<(), String> {
        if self.b.get(self.i) != Some(&b'"') {
            return self.err("expected a string");
        }
        self.i += 1;
        while self.i < self.b.len() {
            match self.b[self.i] {
                b'"' => {
                    self.i += 1;
                    return Ok(());
                }
                b'\\' => self.i += 2,
                _ => self.i += 1,
            }
        }
        self.err("unterminated string")
    }
    fn string(&mut self) -> Result<String, String> {
        let start = self.i;
        self.skip_string()?;
        let raw = &self.b[start + 1..self.i - 1];
        if !raw.contains(&b'\\') {
            if let Ok(s) = std::str::from_utf8(raw) {
                return Ok(s.to_string());
            }
        }
        serde_json::from_slice::<String>(&self.b[start..self.i])
            .map_err(|e| format!("JSON: bad string at byte {start}: {e}"))
    }
    fn value(&mut self) -> Result<Range<usize>, String> {
        self.ws();
        let start = self.i;
        match self.b.get(self.i) {
            Some(b'"') => {
                self.skip_string()?;
            }
            Some(b'{') | Some(b'[') => {
                self.depth += 1;
                if self.depth > 512 {
                    return self.err("nesting too deep");
                }
                let close = if self.b[self.i] == b'{' { b'}' } else { b']' };
                let obj = close == b'}';
                self.i += 1;
                self.ws();
                if self.b.get(self.i) == Some(&close) {
                    self.i += 1;
                } else {
                    loop {
                        if obj {
                            self.ws();
                            self.skip_string()?;
                            self.ws();
                            if self.b.get(self.i) != Some(&b':') {
                                return self.err("expected ':'");
                            }
                            self.i += 1;
                        }
                        self.value()?;
                        self.ws();
                        match self.b.get(self.i) {
                            Some(b',') => self.i += 1,
                            Some(c) if *c == close => {
                                self.i += 1;
                                break;
                            }
                            _ => return self.err("expected ',' or a closing bracket"),
                        }
                    }
                }
                self.depth -= 1;
            }
            Some(_) => {
                while self.i < self.b.len()
                    && !matches!(
                        self.b[self.i],
                        b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'
                    )
                {
                    self.i += 1;
                }
                if self.i == start {
                    return self.err("expected a value");
                }
            }
            None => return self.err("unexpected end"),
        }
        Ok(start..self.i)
    }
    /// Members of the object at the cursor: (key, key span, value span).
    fn members(&mut self) -> Result<Vec<(String, Range<usize>)>, String> {
        self.ws();
        if self.b.get(self.i) != Some(&b'{') {
            return self.err("expected an object");
        }
        self.i += 1;
        let mut out = Vec::new();
        self.ws();
        if self.b.get(self.i) == Some(&b'}') {
            self.i += 1;
            return Ok(out);
        }
        loop {
            self.ws();
            let k = self.string()?;
            self.ws();
            if self.b.get(self.i) != Some(&b':') {
                return self.err("expected ':'");
            }
            self.i += 1;
            let v = self.value()?;
            out.push((k, v));
            self.ws();
            match self.b.get(self.i) {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    return Ok(out);
                }
                _ => return self.err("expected ',' or '}'"),
            }
        }
    }
}

/// Members of a JSON object: (decoded key, byte span of the value).
pub type Members = Vec<(String, Range<usize>)>;

const STRUCT_PATH: [&str; 3] = ["Metadata", "Config", "annotations"];

/// Walks `Metadata` → `Config` → `annotations` and returns, for the annotations object, each
/// member's (key, value span). Refuses duplicate keys on the way (exact, and case-insensitive
/// for the struct fields Go matches that way). `want` = annotation keys whose values must be
/// strings. Returns `Ok(None)` when the path is absent.
pub fn spans(json: &[u8], want: &[&str]) -> Result<Option<Members>, String> {
    let mut range = 0..json.len();
    for (level, name) in STRUCT_PATH.iter().enumerate() {
        let mut s = Scan {
            b: json,
            i: range.start,
            depth: 0,
        };
        let members = s.members()?;
        if level == 0 {
            s.ws();
            if s.i != json.len() {
                return s.err("trailing bytes after the document");
            }
        }
        let hits: Vec<&(String, Range<usize>)> = members
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .collect();
        let struct_dups = |keys: &[&str]| -> Result<(), String> {
            for key in keys {
                let n = members
                    .iter()
                    .filter(|(k, _)| k.eq_ignore_ascii_case(key))
                    .count();
                if n > 1 {
                    return Err(format!(
                        "JSON: field {key:?} appears {n} times (case-insensitively)"
                    ));
                }
            }
            Ok(())
        };
        struct_dups(&[name, if level == 0 { "Version" } else { name }])?;
        match hits.as_slice() {
            [] => return Ok(None),
            [(k, r)] => {
                if k != name {
                    return Err(format!("JSON: field {k:?} where {name:?} is expected"));
                }
                if json[r.start] == b'n' {
                    return Ok(None);
                }
                range = r.clone();
            }
            _ => unreachable!("duplicates refused above"),
        }
    }
    let mut s = Scan {
        b: json,
        i: range.start,
        depth: 0,
    };
    let members = s.members()?;
    let mut seen = std::collections::BTreeSet::new();
    for (k, r) in &members {
        if !seen.insert(k.as_str()) {
            return Err(format!("JSON: annotation {k:?} appears twice"));
        }
        if want.contains(&k.as_str()) && json[r.start] != b'"' {
            return Err(format!("JSON: annotation {k:?} is not a string"));
        }
    }
    Ok(Some(members))
}

/// Replaces the values of the annotations in `changes` (key → new value; each must already
/// exist) inside the JSON, byte-surgically. New values must not need JSON escaping.
pub fn rewrite_json(json: &[u8], changes: &[(&str, &str)]) -> Result<Vec<u8>, String> {
    let keys: Vec<&str> = changes.iter().map(|(k, _)| *k).collect();
    let members = spans(json, &keys)?.ok_or("no Metadata.Config.annotations in the metadata")?;
    let mut edits: Vec<(Range<usize>, &str)> = Vec::new();
    for (k, v) in changes {
        if v.bytes().any(|c| {
            c < 0x20 || c == b'"' || c == b'\\' || c >= 0x7f || c == b'<' || c == b'>' || c == b'&'
        }) {
            return Err(format!("new value {v:?} would need JSON escaping"));
        }
        let r = members
            .iter()
            .find(|(mk, _)| mk == k)
            .map(|(_, r)| r.clone())
            .ok_or_else(|| format!("annotation {k:?} is not present"))?;
        edits.push((r, v));
    }
    edits.sort_by_key(|(r, _)| r.start);
    let mut out = Vec::with_capacity(json.len() + 32);
    let mut pos = 0;
    for (r, v) in edits {
        out.extend_from_slice(&json[pos..r.start]);
        out.push(b'"');
        out.extend_from_slice(v.as_bytes());
        out.push(b'"');
        pos = r.end;
    }
    out.extend_from_slice(&json[pos..]);
    Ok(out)
}

/// Rewrites annotation values inside an encoded container extension and proves the result:
/// the new `Any` decodes (prost and our wire parser agree), has the same type_url, and its
/// JSON equals the original document with exactly those annotation values changed.
pub fn rewrite_extension(raw: &[u8], changes: &[(&str, &str)]) -> Result<Vec<u8>, String> {
    let l = any_layout(raw)?;
    let (_, old_doc) = decode_json(&raw[l.value.clone()])?;
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
    let (dec, new_doc) = decode(&out, CONTAINER_TYPE_URL)
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
