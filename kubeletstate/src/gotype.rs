//! Go types as data, decoded from JSON the way `encoding/json` decodes into them, and printed
//! the way go-spew's `%#v` formatter prints them (the text the kubelet's checkpoint checksums
//! hash).
//!
//! A layout (one file in `data/`) names each Go type by the string go-spew prints for it
//! (`reflect.Type.String()`: `state.ClaimInfoStateList`, `map[string][]string`, `*T`), gives
//! its kind and, for structs, its fields in declaration order with their JSON names. Its
//! `initial` value is what the kubelet's constructor sets before `json.Unmarshal` runs: it
//! matters, because members absent from the file keep it (an empty map prints `map[]`, a nil
//! one `<nil>`).
//!
//! Decoding follows `encoding/json` for the kinds these checkpoints use: members match fields
//! by exact name, else case-insensitively ([`go_equal_fold`]); unknown members are dropped; `null` sets
//! maps, slices and pointers to nil and leaves other kinds alone; a value of the wrong JSON
//! kind, an integer out of range or with a fraction, an invalid base64 `[]byte` or an
//! unparsable map key is an error (Go keeps decoding after a type error, but `Unmarshal`
//! still fails, and that is all a kubelet looks at). Decoding goes into the existing value as
//! Go does: structs keep unmentioned fields, maps gain entries, slices are replaced.
//!
//! Printing follows go-spew 1.1.1 `format.go` with `%#v`: a value carries its `(type)` prefix
//! except as a slice element, map key or map value; a pointer prints `(*T)`, or `<*>` where
//! the prefix is suppressed, and then its pointee without a prefix, or `<nil>`; nil maps and
//! slices print `<nil>`; maps print `map[k:v ...]` with keys sorted (`SortKeys`); structs
//! `{Name:value ...}`; strings raw; `[]byte` as decimal elements.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use hashcompat::quantity::Quantity;
use hashcompat::{Node, NodeValue};
use serde::Deserialize;

/// One Go type of a layout.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum GoType {
    /// A string kind (`string`, `types.UID`, `v1.PodResizeStatus`).
    String,
    /// A signed integer kind of `bits` bits.
    Int {
        /// 8, 16, 32 or 64.
        bits: u32,
    },
    /// An unsigned integer kind of `bits` bits (`checksum.Checksum` is a `uint64`).
    Uint {
        /// 8, 16, 32 or 64.
        bits: u32,
    },
    /// `[]byte`: base64 in JSON.
    Bytes,
    /// A slice of `elem`.
    Slice {
        /// The element type's name.
        elem: String,
    },
    /// A map from `key` (a string kind or `int64`) to `elem`.
    Map {
        /// The key type's name: a type of kind string or int.
        key: String,
        /// The element type's name.
        elem: String,
    },
    /// A pointer to `elem`.
    Ptr {
        /// The pointee type's name.
        elem: String,
    },
    /// A struct; fields in declaration order (go-spew prints them all, in that order).
    Struct {
        /// The fields.
        fields: Vec<Field>,
    },
    /// `resource.Quantity`, decoded by its own `UnmarshalJSON` and printed from its internal
    /// fields (hashcompat's model of apimachinery's Quantity).
    Quantity,
    /// `cpuset.CPUSet` (k8s.io/utils) as `PodEntry.UnmarshalJSON` of the CPU manager (v1.36+)
    /// fills it: a JSON string in `cpuset.Parse` syntax ("0-3,8"), `null` or absent meaning the
    /// empty set; printed from its one unexported field, `elems map[int]struct{}`. Its zero
    /// value is the empty, non-nil set, because the only struct holding one always runs the
    /// parser (an absent member parses as "").
    Cpuset,
    /// A type whose fields the data does not carry: any value but `null` makes the checksum
    /// undeterminable, and the verdict says so instead of guessing.
    Opaque,
}

/// A struct field.
#[derive(Debug, Clone, Deserialize)]
pub struct Field {
    /// The Go field name (what go-spew prints).
    pub name: String,
    /// The JSON member name from the field's tag; the Go name when the tag has none.
    #[serde(default)]
    pub json: Option<String>,
    /// The field type's name.
    #[serde(rename = "type")]
    pub ty: String,
}

impl Field {
    fn json_name(&self) -> &str {
        self.json.as_deref().unwrap_or(&self.name)
    }
}

/// A layout: the Go types one kubelet version decodes one checkpoint file into.
#[derive(Debug, Clone, Deserialize)]
pub struct Layout {
    /// Where the definitions come from (tag and path).
    pub source: String,
    /// The root struct type's name.
    pub root: String,
    /// The constructor's value, as JSON decoded onto the zero value.
    #[serde(default)]
    pub initial: Option<serde_json::Value>,
    /// Every type reachable from the root, by name.
    pub types: BTreeMap<String, GoType>,
}

/// A decoded Go value.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    /// A string kind.
    Str(String),
    /// A signed integer kind.
    Int(i64),
    /// An unsigned integer kind.
    Uint(u64),
    /// `[]byte` (`None` = nil).
    Bytes(Option<Vec<u8>>),
    /// A slice (`None` = nil).
    Slice(Option<Vec<Val>>),
    /// A map (`None` = nil); keys in go-spew's sorted order.
    Map(Option<BTreeMap<Key, Val>>),
    /// A pointer (`None` = nil).
    Ptr(Option<Box<Val>>),
    /// A struct's field values in declaration order.
    Struct(Vec<Val>),
    /// A `resource.Quantity`.
    Quantity(Box<Quantity>),
    /// An opaque type's zero value.
    Opaque,
}

/// A map key; one map only ever holds one of the two kinds.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Key {
    /// A string-kind key (sorted bytewise, as Go compares strings).
    Str(String),
    /// An int64 key (sorted numerically).
    Int(i64),
}

/// Why a file does not decode into a layout.
#[derive(Debug, Clone, PartialEq)]
pub enum DecodeError {
    /// What `json.Unmarshal` fails with (message in Go's words where it matters).
    Json(String),
    /// The file sets a value of a type the data does not carry (see [`GoType::Opaque`]).
    Opaque(String),
}

impl Layout {
    /// Parses a layout from its JSON text and checks that every named type is defined.
    pub fn from_json(text: &str) -> Result<Layout, String> {
        let layout: Layout = serde_json::from_str(text).map_err(|e| e.to_string())?;
        layout.check(&layout.root)?;
        for (name, ty) in &layout.types {
            // An opaque type's zero value has a text this data cannot give: only a nil pointer
            // to one can be printed.
            let opaque = |t: &String| matches!(layout.types.get(t), Some(GoType::Opaque));
            let direct_opaque = match ty {
                GoType::Slice { elem } => opaque(elem),
                GoType::Map { elem, .. } => opaque(elem),
                GoType::Struct { fields } => fields.iter().any(|f| opaque(&f.ty)),
                _ => false,
            };
            if direct_opaque || opaque(&layout.root) {
                return Err(format!("{name}: an opaque type may only be pointed to"));
            }
            let refs: Vec<&String> = match ty {
                GoType::Slice { elem } | GoType::Ptr { elem } => vec![elem],
                GoType::Map { key, elem } => vec![key, elem],
                GoType::Struct { fields } => fields.iter().map(|f| &f.ty).collect(),
                _ => vec![],
            };
            for r in refs {
                layout.check(r)?;
            }
        }
        Ok(layout)
    }

    fn check(&self, name: &str) -> Result<(), String> {
        if self.types.contains_key(name) {
            Ok(())
        } else {
            Err(format!("type {name} is not defined"))
        }
    }

    fn ty(&self, name: &str) -> &GoType {
        &self.types[name]
    }

    /// The Go zero value of a type.
    pub fn zero(&self, name: &str) -> Val {
        match self.ty(name) {
            GoType::String => Val::Str(String::new()),
            GoType::Int { .. } => Val::Int(0),
            GoType::Uint { .. } => Val::Uint(0),
            GoType::Bytes => Val::Bytes(None),
            GoType::Slice { .. } => Val::Slice(None),
            GoType::Map { .. } => Val::Map(None),
            GoType::Ptr { .. } => Val::Ptr(None),
            GoType::Struct { fields } => {
                Val::Struct(fields.iter().map(|f| self.zero(&f.ty)).collect())
            }
            GoType::Quantity => Val::Quantity(Box::new(Quantity::zero())),
            GoType::Cpuset => Val::Map(Some(BTreeMap::new())),
            GoType::Opaque => Val::Opaque,
        }
    }

    /// The constructor's value of the root struct.
    pub fn initial(&self) -> Val {
        let mut v = self.zero(&self.root);
        if let Some(init) = &self.initial {
            let text = serde_json::to_vec(init).expect("a JSON value serializes");
            let node = hashcompat::parse_json(&text).expect("serde_json writes valid JSON");
            self.decode_into(&mut v, &self.root, &node, &self.root)
                .unwrap_or_else(|e| panic!("layout {}: bad initial value: {e:?}", self.root));
        }
        v
    }

    /// `json.Unmarshal(file, &root)` starting from [`Layout::initial`].
    pub fn decode(&self, node: &Node<'_>) -> Result<Val, DecodeError> {
        let mut v = self.initial();
        self.decode_into(&mut v, &self.root, node, &self.root)?;
        Ok(v)
    }

    /// Index of a root field by Go name.
    pub fn field_index(&self, name: &str) -> usize {
        match self.ty(&self.root) {
            GoType::Struct { fields } => fields
                .iter()
                .position(|f| f.name == name)
                .unwrap_or_else(|| panic!("{} has no field {name}", self.root)),
            _ => panic!("{} is not a struct", self.root),
        }
    }

    /// The type name of a root field.
    pub fn field_type(&self, name: &str) -> &str {
        match self.ty(&self.root) {
            GoType::Struct { fields } => &fields[self.field_index(name)].ty,
            _ => unreachable!("checked by field_index"),
        }
    }

    fn decode_into(
        &self,
        v: &mut Val,
        name: &str,
        node: &Node<'_>,
        path: &str,
    ) -> Result<(), DecodeError> {
        let mismatch = || {
            DecodeError::Json(format!(
                "json: cannot unmarshal {} into Go value {path} of type {name}",
                node.kind_name()
            ))
        };
        let is_null = matches!(node.value, NodeValue::Null);
        match self.ty(name) {
            GoType::Quantity => {
                let Val::Quantity(q) = v else { unreachable!() };
                return q
                    .unmarshal_json_into(node.raw)
                    .map_err(|e| DecodeError::Json(e.go_message()));
            }
            GoType::Cpuset => {
                let Val::Map(Some(set)) = v else {
                    unreachable!("a cpuset's value is a non-nil map")
                };
                set.clear();
                return match &node.value {
                    NodeValue::Null => Ok(()),
                    NodeValue::String(s) => parse_cpuset(s, set, path),
                    _ => Err(mismatch()),
                };
            }
            GoType::Opaque => {
                return if is_null {
                    Ok(())
                } else {
                    Err(DecodeError::Opaque(format!("{path} ({name}) is set")))
                };
            }
            _ if is_null => {
                match v {
                    Val::Bytes(b) => *b = None,
                    Val::Slice(s) => *s = None,
                    Val::Map(m) => *m = None,
                    Val::Ptr(p) => *p = None,
                    _ => {}
                }
                return Ok(());
            }
            _ => {}
        }
        match (self.ty(name), &node.value, v) {
            (GoType::String, NodeValue::String(s), Val::Str(out)) => *out = s.to_string(),
            (GoType::Int { bits }, NodeValue::Number(n), Val::Int(out)) => {
                *out = parse_int(n, *bits).ok_or_else(|| number_error(n, path, name))?
            }
            (GoType::Uint { bits }, NodeValue::Number(n), Val::Uint(out)) => {
                *out = parse_uint(n, *bits).ok_or_else(|| number_error(n, path, name))?
            }
            (GoType::Bytes, NodeValue::String(s), Val::Bytes(out)) => {
                *out =
                    Some(base64_std(s).ok_or_else(|| {
                        DecodeError::Json(format!("illegal base64 data in {path}"))
                    })?)
            }
            (GoType::Bytes, NodeValue::Array(items), Val::Bytes(out)) => {
                let mut bytes = Vec::with_capacity(items.len());
                for item in items {
                    match &item.value {
                        NodeValue::Number(n) => bytes.push(
                            parse_uint(n, 8).ok_or_else(|| number_error(n, path, "uint8"))? as u8,
                        ),
                        _ => return Err(mismatch()),
                    }
                }
                *out = Some(bytes);
            }
            (GoType::Slice { elem }, NodeValue::Array(items), Val::Slice(out)) => {
                let mut vals = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    let mut e = self.zero(elem);
                    self.decode_into(&mut e, elem, item, &format!("{path}[{i}]"))?;
                    vals.push(e);
                }
                *out = Some(vals);
            }
            (GoType::Map { key, elem }, NodeValue::Object(members), Val::Map(out)) => {
                let map = out.get_or_insert_with(BTreeMap::new);
                for (k, item) in members {
                    let key = match self.ty(key) {
                        GoType::String => Key::Str(k.to_string()),
                        GoType::Int { bits } => Key::Int(parse_int(k, *bits).ok_or_else(|| {
                            DecodeError::Json(format!(
                                "json: cannot unmarshal number {k} into Go value {path} of type {key}"
                            ))
                        })?),
                        _ => unreachable!("map keys are string or int kinds in the data"),
                    };
                    let mut e = self.zero(elem);
                    self.decode_into(&mut e, elem, item, &format!("{path}[{k}]"))?;
                    map.insert(key, e);
                }
            }
            (GoType::Ptr { elem }, _, Val::Ptr(out)) => {
                let inner = out.get_or_insert_with(|| Box::new(self.zero(elem)));
                self.decode_into(inner, elem, node, path)?;
            }
            (GoType::Struct { fields }, NodeValue::Object(members), Val::Struct(vals)) => {
                for (k, item) in members {
                    let found = fields
                        .iter()
                        .position(|f| f.json_name() == k)
                        .or_else(|| fields.iter().position(|f| go_equal_fold(f.json_name(), k)));
                    if let Some(i) = found {
                        let f = &fields[i];
                        self.decode_into(&mut vals[i], &f.ty, item, &format!("{path}.{}", f.name))?;
                    }
                }
            }
            _ => return Err(mismatch()),
        }
        Ok(())
    }

    /// go-spew `%#v` of `v` (of type `name`), with its type prefix.
    pub fn spew(&self, name: &str, v: &Val) -> String {
        let mut out = String::new();
        self.write(&mut out, name, v, true);
        out
    }

    /// go-spew `%#v` of a pointer to `v` (what `checksum.New(cp)` hashes for a `*T`).
    pub fn spew_ptr(&self, name: &str, v: &Val) -> String {
        let mut out = format!("(*{name})");
        self.write(&mut out, name, v, false);
        out
    }

    fn write(&self, out: &mut String, name: &str, v: &Val, prefix: bool) {
        if let (GoType::Ptr { elem }, Val::Ptr(p)) = (self.ty(name), v) {
            match p {
                None if !prefix => out.push_str("<nil>"),
                None => {
                    let _ = write!(out, "({name})<nil>");
                }
                Some(inner) => {
                    // formatPtr: the type when shown, else the indirection count in angles.
                    if prefix {
                        let _ = write!(out, "({name})");
                    } else {
                        out.push_str("<*>");
                    }
                    self.write(out, elem, inner, false);
                }
            }
            return;
        }
        if prefix {
            let _ = write!(out, "({name})");
        }
        match (self.ty(name), v) {
            (_, Val::Str(s)) => out.push_str(s),
            (_, Val::Int(n)) => {
                let _ = write!(out, "{n}");
            }
            (_, Val::Uint(n)) => {
                let _ = write!(out, "{n}");
            }
            (_, Val::Bytes(None) | Val::Slice(None) | Val::Map(None)) => out.push_str("<nil>"),
            (_, Val::Bytes(Some(b))) => {
                out.push('[');
                for (i, byte) in b.iter().enumerate() {
                    if i > 0 {
                        out.push(' ');
                    }
                    let _ = write!(out, "{byte}");
                }
                out.push(']');
            }
            (GoType::Slice { elem }, Val::Slice(Some(items))) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(' ');
                    }
                    self.write(out, elem, item, false);
                }
                out.push(']');
            }
            (GoType::Map { elem, .. }, Val::Map(Some(map))) => {
                out.push_str("map[");
                for (i, (k, item)) in map.iter().enumerate() {
                    if i > 0 {
                        out.push(' ');
                    }
                    match k {
                        Key::Str(s) => out.push_str(s),
                        Key::Int(n) => {
                            let _ = write!(out, "{n}");
                        }
                    }
                    out.push(':');
                    self.write(out, elem, item, false);
                }
                out.push(']');
            }
            (GoType::Struct { fields }, Val::Struct(vals)) => {
                out.push('{');
                for (i, (f, val)) in fields.iter().zip(vals).enumerate() {
                    if i > 0 {
                        out.push(' ');
                    }
                    out.push_str(&f.name);
                    out.push(':');
                    self.write(out, &f.ty, val, true);
                }
                out.push('}');
            }
            (GoType::Quantity, Val::Quantity(q)) => out.push_str(&q.go_spew()),
            (GoType::Cpuset, Val::Map(Some(set))) => {
                out.push_str("{elems:(map[int]struct {})map[");
                for (i, k) in set.keys().enumerate() {
                    if i > 0 {
                        out.push(' ');
                    }
                    if let Key::Int(n) = k {
                        let _ = write!(out, "{n}:{{}}");
                    }
                }
                out.push_str("]}");
            }
            _ => unreachable!(
                "decoded values match their types; opaque values sit behind nil pointers"
            ),
        }
    }
}

/// Whether a JSON member name matches an ASCII field name the way `encoding/json` matches
/// names that differ from the exact one: case-insensitively, where U+212A KELVIN SIGN folds
/// to `k` and U+017F LATIN SMALL LETTER LONG S to `s` (the two non-ASCII runes whose simple
/// case folding reaches an ASCII letter).
pub fn go_equal_fold(name: &str, key: &str) -> bool {
    let mut key_chars = key.chars();
    for n in name.chars() {
        let Some(k) = key_chars.next() else {
            return false;
        };
        let k = match k {
            '\u{212A}' => 'k',
            '\u{17F}' => 's',
            k => k.to_ascii_lowercase(),
        };
        if n.to_ascii_lowercase() != k {
            return false;
        }
    }
    key_chars.next().is_none()
}

/// The most CPUs one cpuset may name here: `cpuset.Parse` adds every element of a range one by
/// one, so a range wider than any machine is work (and memory) the kubelet would spend too, and
/// the verdict for such a file is left undetermined rather than computed.
const CPUSET_MAX_ELEMS: i64 = 1 << 16;

/// `cpuset.Parse` (k8s.io/utils/cpuset) into `set`: comma-separated elements or `a-b` ranges,
/// each number as `strconv.Atoi` reads it; "" is the empty set.
fn parse_cpuset(s: &str, set: &mut BTreeMap<Key, Val>, path: &str) -> Result<(), DecodeError> {
    if s.is_empty() {
        return Ok(());
    }
    // strconv.Atoi: an optional sign, then decimal digits (no underscores in base 10)
    let atoi = |t: &str| {
        let unsigned = t.strip_prefix(['+', '-']).unwrap_or(t);
        let ok = !unsigned.is_empty() && unsigned.bytes().all(|b| b.is_ascii_digit());
        ok.then(|| t.strip_prefix('+').unwrap_or(t).parse::<i64>().ok())
            .flatten()
            .ok_or_else(|| {
                DecodeError::Json(format!(
                    "{path}: failed to parse cpuset: strconv.Atoi: parsing {t:?}: invalid syntax"
                ))
            })
    };
    for r in s.split(',') {
        let (start, end) = match r.split_once('-') {
            None => {
                let e = atoi(r)?;
                (e, e)
            }
            Some((a, b)) => (atoi(a)?, atoi(b)?),
        };
        if start > end {
            return Err(DecodeError::Json(format!(
                "{path}: failed to parse cpuset: invalid range {r:?} ({start} > {end})"
            )));
        }
        if end - start >= CPUSET_MAX_ELEMS || set.len() as i64 + (end - start) >= CPUSET_MAX_ELEMS {
            return Err(DecodeError::Opaque(format!(
                "{path}: a cpuset of more than {CPUSET_MAX_ELEMS} CPUs"
            )));
        }
        for e in start..=end {
            set.insert(Key::Int(e), Val::Struct(Vec::new()));
        }
    }
    Ok(())
}

fn number_error(n: &str, path: &str, name: &str) -> DecodeError {
    DecodeError::Json(format!(
        "json: cannot unmarshal number {n} into Go value {path} of type {name}"
    ))
}

/// `strconv.ParseInt(s, 10, bits)` as `encoding/json` applies it to a number literal.
fn parse_int(s: &str, bits: u32) -> Option<i64> {
    let digits = s.strip_prefix('-').unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: i64 = s.parse().ok()?;
    let (min, max) = if bits == 64 {
        (i64::MIN, i64::MAX)
    } else {
        (-(1i64 << (bits - 1)), (1i64 << (bits - 1)) - 1)
    };
    (min..=max).contains(&n).then_some(n)
}

/// `strconv.ParseUint(s, 10, bits)`.
fn parse_uint(s: &str, bits: u32) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = s.parse().ok()?;
    (bits == 64 || n < (1u64 << bits)).then_some(n)
}

/// `base64.StdEncoding.Decode` as `encoding/json` uses it for `[]byte` (padding required;
/// `\r` and `\n` skipped).
fn base64_std(s: &str) -> Option<Vec<u8>> {
    let clean: Vec<u8> = s.bytes().filter(|&b| b != b'\r' && b != b'\n').collect();
    if !clean.len().is_multiple_of(4) {
        return None;
    }
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => (c - b'A') as u32,
            b'a'..=b'z' => (c - b'a' + 26) as u32,
            b'0'..=b'9' => (c - b'0' + 52) as u32,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        })
    };
    let mut out = Vec::with_capacity(clean.len() / 4 * 3);
    let chunks = clean.chunks(4).count();
    for (i, chunk) in clean.chunks(4).enumerate() {
        let pad = chunk.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && i + 1 != chunks) {
            return None;
        }
        let mut n = 0u32;
        for &c in &chunk[..4 - pad] {
            n = (n << 6) | val(c)?;
        }
        n <<= 6 * pad as u32;
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        // StdEncoding is not Strict: bits left over in a padded group are dropped.
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    Some(out)
}

/// FNV-32a, the checkpoint checksum's hash.
pub fn fnv32a(data: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for &b in data {
        h ^= b as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// CRC-32 (IEEE), what the DRA checkpoint envelope of v1.31+ uses.
pub fn crc32_ieee(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_match_their_reference_vectors() {
        assert_eq!(fnv32a(b""), 0x811c_9dc5);
        assert_eq!(fnv32a(b"a"), 0xe40c_292c);
        assert_eq!(crc32_ieee(b"123456789"), 0xcbf4_3926);
        assert_eq!(crc32_ieee(b""), 0);
    }

    #[test]
    fn integers_parse_as_strconv_does() {
        assert_eq!(parse_uint("4294967295", 32), Some(u32::MAX as u64));
        assert_eq!(parse_uint("4294967296", 32), None);
        assert_eq!(parse_uint("-1", 64), None);
        assert_eq!(parse_uint("1.0", 64), None);
        assert_eq!(parse_uint("1e3", 64), None);
        assert_eq!(parse_int("-9223372036854775808", 64), Some(i64::MIN));
        assert_eq!(parse_int("9223372036854775808", 64), None);
        assert_eq!(parse_int("-", 64), None);
    }

    #[test]
    fn base64_is_std_with_padding_and_line_breaks_skipped() {
        assert_eq!(base64_std("aGk=").as_deref(), Some(&b"hi"[..]));
        assert_eq!(base64_std("aG\r\nk=").as_deref(), Some(&b"hi"[..]));
        assert_eq!(base64_std("aGk"), None);
        assert_eq!(base64_std("a=Gk"), None);
        assert_eq!(base64_std("aGk=aGk="), None);
        assert_eq!(base64_std("aG-="), None);
        assert_eq!(base64_std("").as_deref(), Some(&b""[..]));
    }

    #[test]
    fn member_names_fold_like_encoding_json() {
        assert!(go_equal_fold("checksum", "CHECKSUM"));
        assert!(go_equal_fold("checksum", "chec\u{212A}sum"));
        assert!(go_equal_fold("checksum", "check\u{17F}um"));
        assert!(!go_equal_fold("checksum", "checksums"));
        assert!(!go_equal_fold("checksum", "chec\u{212B}sum"));
    }

    #[test]
    fn layouts_refuse_undefined_and_printable_opaque_types() {
        let undefined = r#"{"source": "", "root": "T", "types": {"T": {"kind": "struct", "fields": [{"name": "A", "type": "U"}]}}}"#;
        assert!(Layout::from_json(undefined)
            .unwrap_err()
            .contains("U is not defined"));
        let opaque = r#"{"source": "", "root": "T", "types": {"T": {"kind": "struct", "fields": [{"name": "A", "type": "O"}]}, "O": {"kind": "opaque"}}}"#;
        assert!(Layout::from_json(opaque).unwrap_err().contains("opaque"));
    }

    #[test]
    fn spew_prints_pointers_by_position() {
        let layout = Layout::from_json(
            r#"{"source": "", "root": "T", "types": {
                "T": {"kind": "struct", "fields": [{"name": "P", "type": "*S"}, {"name": "L", "type": "[]*S"}]},
                "*S": {"kind": "ptr", "elem": "S"},
                "[]*S": {"kind": "slice", "elem": "*S"},
                "S": {"kind": "struct", "fields": [{"name": "N", "type": "int"}]},
                "int": {"kind": "int", "bits": 64}}}"#,
        )
        .unwrap();
        let node = hashcompat::parse_json(br#"{"P": {"N": 1}, "L": [{"N": 2}, null]}"#).unwrap();
        let v = layout.decode(&node).unwrap();
        assert_eq!(
            layout.spew_ptr("T", &v),
            "(*T){P:(*S){N:(int)1} L:([]*S)[<*>{N:(int)2} <nil>]}"
        );
        let node = hashcompat::parse_json(br#"{}"#).unwrap();
        let v = layout.decode(&node).unwrap();
        assert_eq!(layout.spew_ptr("T", &v), "(*T){P:(*S)<nil> L:([]*S)<nil>}");
    }
}
