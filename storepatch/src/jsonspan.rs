//! The JSON scanner behind every byte-preserving edit (Docker `config.v2.json`, CRI-O
//! `config.json`, containerd's CRI extension JSON).
//!
//! The runtimes write these files with Go's `encoding/json` (field order, `\u0026` escapes,
//! indentation, trailing newline). Serialising a document again from Rust would change bytes
//! the runtime and humans care about, so no back-end does: this scanner finds the byte span of
//! the one string value to change, and [`splice`] replaces only those spans. It builds no
//! document tree: [`root`] / [`object_at`] list the members of one object (decoded key, kind
//! and byte span of the raw value), nested values are only checked and skipped.
//! [`decode_string`] decodes a string literal and remembers where each decoded byte came from,
//! so a span found inside an *embedded* document (a JSON string whose content is JSON, as
//! CRI-O's `io.kubernetes.cri-o.Annotations`) maps back to a span of the file.
//!
//! # What a lookup finds: what Go reads
//!
//! The runtimes are Go programs, so a lookup answers what Go's `encoding/json` decodes, and
//! refuses where serde_json (which the back-ends use to read the values and to prove every
//! edit) would read something else:
//!
//! * Map keys ([`Object::get`], [`Object::get_string`]; labels and annotations are
//!   `map[string]string` in every runtime): matched exactly, and of duplicates **the last one
//!   wins**. Go stores each member into the map in document order, so the last overwrites the
//!   others; serde_json keeps the last as well. The span found is the last one, so the edit
//!   changes the value the runtime will read; earlier duplicates stay as they are, byte for
//!   byte (nobody reads them). [`Object::get_string`] also refuses a key where *any* duplicate is not
//!   a string: Go's decoder fails on that member even when a later one is a string.
//! * Struct fields ([`Object::field`], [`Object::object_field`], [`object_path`]; `Config`,
//!   `Metadata`, the OCI spec's `annotations`): Go matches a key to a field case-insensitively
//!   (Unicode simple folding: `ſ` reads as `s`, the Kelvin sign as `k`) and decodes a repeated
//!   object-valued field *into the same struct or map*, merging the members of all of them.
//!   serde_json matches exactly and keeps only the last. Where the two would differ, that is
//!   when more than one member folds to the field name, or the only one is spelled differently,
//!   the lookup is refused ([`Reason::AmbiguousField`], [`Reason::FieldCase`]).
//!
//! # Strictness
//!
//! The scanner checks the whole JSON grammar of what it walks (RFC 8259: whitespace is space,
//! tab, LF, CR only; strict numbers; valid escapes, surrogate pairs and UTF-8) and refuses
//! anything else with the byte offset and a [`Reason`], so a span is only ever taken from a
//! document it fully understood. Nesting deeper than [`MAX_DEPTH`] is refused.

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;

/// A byte range of the input.
pub type Span = Range<usize>;

/// Containers nested deeper than this are refused. serde_json, which every caller runs on
/// the same bytes first, refuses at its own limit of 128, so a document serde_json accepted
/// is never refused here for its depth.
pub const MAX_DEPTH: usize = 128;

/// Why a scan or an edit was refused, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpanError {
    /// Byte offset in the scanned input (for an edit: the start of the span it replaces).
    pub at: usize,
    /// What is wrong.
    pub reason: Reason,
}

/// The reason of a [`SpanError`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// The input ends inside a value (a truncated file).
    Truncated,
    /// Another byte was expected here (`expected` names it).
    Expected(&'static str),
    /// A raw control character (below U+0020) inside a string.
    ControlCharacter,
    /// A backslash escape JSON does not have, or a `\u` without four hex digits.
    BadEscape,
    /// A `\u` surrogate escape without its other half.
    LoneSurrogate,
    /// A string whose bytes are not UTF-8.
    NotUtf8,
    /// A malformed number.
    BadNumber,
    /// Containers nested deeper than [`MAX_DEPTH`].
    TooDeep,
    /// Bytes other than whitespace after the document.
    TrailingData,
    /// An object was required here.
    NotAnObject,
    /// More than one member Go would decode into struct field `field` (it folds case and merges
    /// repeated objects; serde_json would read only the last).
    AmbiguousField {
        /// The Go struct field.
        field: String,
        /// How many members would decode into it.
        members: usize,
    },
    /// The one member for struct field `field` is spelled `key`: Go reads it, serde_json not.
    FieldCase {
        /// The Go struct field.
        field: String,
        /// The member as spelled.
        key: String,
    },
    /// The value of `key` is not a JSON string (`value` says what it is).
    NotAString {
        /// The member as spelled.
        key: String,
        /// What the value is.
        value: Kind,
    },
    /// The value of struct field `field` is neither an object nor null.
    FieldNotAnObject {
        /// The Go struct field.
        field: String,
        /// What the value is.
        value: Kind,
    },
    /// A new string value needs escaping; refused because the exact escape form depends on the
    /// Go version that wrote the file (Go 1.22 changed `\b`, `\f`), and every value written is
    /// a kubelet hash (lowercase hex).
    NeedsEscaping(String),
    /// Two edits of one [`splice`] overlap, or one runs past the end of the input.
    EditSpan,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Truncated => write!(f, "unexpected end of data (truncated?)"),
            Reason::Expected(what) => write!(f, "expected {what}"),
            Reason::ControlCharacter => write!(f, "control character in a string"),
            Reason::BadEscape => write!(f, "bad escape in a string"),
            Reason::LoneSurrogate => write!(f, "lone surrogate in a \\u escape"),
            Reason::NotUtf8 => write!(f, "string is not valid UTF-8"),
            Reason::BadNumber => write!(f, "bad number"),
            Reason::TooDeep => write!(f, "nesting deeper than {MAX_DEPTH}"),
            Reason::TrailingData => write!(f, "unexpected data after the JSON document"),
            Reason::NotAnObject => write!(f, "not a JSON object"),
            Reason::AmbiguousField { field, members } => write!(
                f,
                "field {field:?} appears {members} times (case-insensitively; Go merges them, \
                 serde_json keeps the last)"
            ),
            Reason::FieldCase { field, key } => {
                write!(f, "field {key:?} where {field:?} is expected")
            }
            Reason::NotAString { key, value } => {
                write!(f, "the value of {key:?} is {}, not a string", value.name())
            }
            Reason::FieldNotAnObject { field, value } => {
                write!(f, "field {field:?} is {}, not an object", value.name())
            }
            Reason::NeedsEscaping(v) => write!(f, "new value {v:?} would need JSON escaping"),
            Reason::EditSpan => write!(f, "overlapping or out-of-range edit"),
        }
    }
}

impl fmt::Display for SpanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at byte {}", self.reason, self.at)
    }
}

impl std::error::Error for SpanError {}

fn fail<T>(at: usize, reason: Reason) -> Result<T, SpanError> {
    Err(SpanError { at, reason })
}

/// The kind of a JSON value, from its first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `{…}`
    Object,
    /// `[…]`
    Array,
    /// `"…"`
    String,
    /// A number.
    Number,
    /// `true` or `false`.
    Bool,
    /// `null`.
    Null,
}

impl Kind {
    /// "an object", "a string", …, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Object => "an object",
            Kind::Array => "an array",
            Kind::String => "a string",
            Kind::Number => "a number",
            Kind::Bool => "a boolean",
            Kind::Null => "null",
        }
    }
}

/// One member of an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member<'a> {
    /// The key, escapes decoded (borrowed from the input when it has none).
    pub key: Cow<'a, str>,
    /// Offset of the key's opening quote.
    pub key_at: usize,
    /// The raw value (for a string: opening quote to closing quote, both included).
    pub value: Span,
    /// What the value is.
    pub kind: Kind,
}

/// The members of one object, in document order, duplicates included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object<'a> {
    /// The input the spans refer to.
    bytes: &'a [u8],
    /// The object itself, braces included.
    pub span: Span,
    /// Every member, in document order, duplicates included.
    pub members: Vec<Member<'a>>,
}

impl<'a> Object<'a> {
    /// The member Go stores for map key `key`: the last one named exactly `key`.
    pub fn get(&self, key: &str) -> Option<&Member<'a>> {
        self.members.iter().rev().find(|m| m.key == key)
    }

    /// [`Object::get`] for a `map[string]string` entry: the last member named `key`, which must
    /// be a string. Refused as well when an earlier member of that name is neither a string nor
    /// null: Go's decoder fails on it although a later one overwrites it.
    pub fn get_string(&self, key: &str) -> Result<Option<&Member<'a>>, SpanError> {
        let mut last = None;
        for m in self.members.iter().filter(|m| m.key == key) {
            if m.kind != Kind::Null {
                not_a_string(m)?;
            }
            last = Some(m);
        }
        if let Some(m) = last {
            not_a_string(m)?;
        }
        Ok(last)
    }

    /// Refuses an object Go cannot decode into a `map[string]string`: one with a member that is
    /// neither a string nor null (duplicates included).
    pub fn check_string_map(&self) -> Result<(), SpanError> {
        for m in &self.members {
            if m.kind != Kind::Null {
                not_a_string(m)?;
            }
        }
        Ok(())
    }

    /// The member Go decodes into struct field `name`, when serde_json reads the same one;
    /// refused otherwise (see the module docs).
    pub fn field(&self, name: &str) -> Result<Option<&Member<'a>>, SpanError> {
        let mut hits = self.members.iter().filter(|m| go_fold_eq(&m.key, name));
        let Some(first) = hits.next() else {
            return Ok(None);
        };
        let more = hits.count();
        if more > 0 {
            return fail(
                first.key_at,
                Reason::AmbiguousField {
                    field: name.to_string(),
                    members: more + 1,
                },
            );
        }
        if first.key != name {
            return fail(
                first.key_at,
                Reason::FieldCase {
                    field: name.to_string(),
                    key: first.key.to_string(),
                },
            );
        }
        Ok(Some(first))
    }

    /// The object in struct field `name`; `None` when the field is absent or `null` (Go leaves
    /// the field empty for both).
    pub fn object_field(&self, name: &str) -> Result<Option<Object<'a>>, SpanError> {
        let Some(m) = self.field(name)? else {
            return Ok(None);
        };
        match m.kind {
            // The scan that found this object checked every byte of it, values included:
            // descending only needs to find the members again, not check their bytes a second
            // time (each level of a path would otherwise re-check everything below it).
            Kind::Object => {
                let mut c = Cursor {
                    b: self.bytes,
                    i: m.value.start,
                    trusted: true,
                };
                c.object().map(Some)
            }
            Kind::Null => Ok(None),
            other => fail(
                m.value.start,
                Reason::FieldNotAnObject {
                    field: name.to_string(),
                    value: other,
                },
            ),
        }
    }

    /// The object reached from this one through struct fields `path`; `None` when a field on
    /// the way is absent or `null`.
    pub fn path(self, path: &[&str]) -> Result<Option<Object<'a>>, SpanError> {
        let mut obj = self;
        for name in path {
            match obj.object_field(name)? {
                Some(next) => obj = next,
                None => return Ok(None),
            }
        }
        Ok(Some(obj))
    }
}

fn not_a_string(m: &Member) -> Result<(), SpanError> {
    if m.kind == Kind::String {
        return Ok(());
    }
    fail(
        m.value.start,
        Reason::NotAString {
            key: m.key.to_string(),
            value: m.kind,
        },
    )
}

/// The object reached from the document's root through struct fields `path`; `None` when a
/// field on the way is absent or `null`.
pub fn object_path<'a>(bytes: &'a [u8], path: &[&str]) -> Result<Option<Object<'a>>, SpanError> {
    root(bytes)?.path(path)
}

/// The members of a document that must be one object, with only whitespace around it.
pub fn root(bytes: &[u8]) -> Result<Object<'_>, SpanError> {
    root_with(bytes, false)
}

/// [`root`] of bytes serde_json parsed into a `serde_json::Value` (or another type that reads
/// every string) without an error: the caller's guarantee, and it says where the parse ran.
/// Not after `serde::de::IgnoredAny`: that skips strings without checking their UTF-8 or
/// `\u` surrogates. serde_json's parse checks the grammar this scanner checks (RFC 8259 whitespace,
/// numbers, escapes, surrogates, UTF-8, nothing after the value; its depth limit is
/// [`MAX_DEPTH`]), so checking every byte a second time finds nothing and only costs: on a
/// 2,000-container containerd node the second check, in the scan and again in the apply, was
/// an eighth of a whole `patch`'s CPU. The members are found as [`root`] finds them, values
/// skipped by finding their end, and every lookup rule (field case, ambiguous fields, string
/// maps) applies unchanged.
pub fn root_of_valid(bytes: &[u8]) -> Result<Object<'_>, SpanError> {
    root_with(bytes, true)
}

fn root_with(bytes: &[u8], trusted: bool) -> Result<Object<'_>, SpanError> {
    let mut c = Cursor {
        b: bytes,
        i: 0,
        trusted,
    };
    c.ws();
    if c.peek() != Some(b'{') {
        return fail(
            c.i,
            if c.i == bytes.len() {
                Reason::Truncated
            } else {
                Reason::NotAnObject
            },
        );
    }
    let obj = c.object()?;
    c.ws();
    if c.i != bytes.len() {
        return fail(c.i, Reason::TrailingData);
    }
    Ok(obj)
}

/// The members of the object starting at `bytes[at]` (its `{`).
pub fn object_at(bytes: &[u8], at: usize) -> Result<Object<'_>, SpanError> {
    let mut c = Cursor {
        b: bytes,
        i: at,
        trusted: false,
    };
    if c.peek() != Some(b'{') {
        return fail(at, Reason::NotAnObject);
    }
    c.object()
}

/// A decoded string literal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// The decoded text.
    pub text: String,
    /// The literal, quotes included.
    pub span: Span,
    /// For each byte index `k` of `text`, and for `k == text.len()`, the input offset where the
    /// character holding byte `k` starts (its escape sequence, when it was escaped).
    raw_at: Vec<usize>,
}

impl Decoded {
    /// The input span that decoded to `text[inner]`: a span found by scanning `text` (an
    /// embedded document) as a span of the outer input.
    pub fn raw_span(&self, inner: &Span) -> Span {
        self.raw_at[inner.start]..self.raw_at[inner.end]
    }

    /// An error found while scanning `text`, with its offset moved into the outer input.
    pub fn raw_error(&self, e: SpanError) -> SpanError {
        SpanError {
            at: self.raw_at[e.at.min(self.text.len())],
            reason: e.reason,
        }
    }
}

/// Decodes the string literal starting at `bytes[at]` (its opening quote).
pub fn decode_string(bytes: &[u8], at: usize) -> Result<Decoded, SpanError> {
    let mut c = Cursor {
        b: bytes,
        i: at,
        trusted: false,
    };
    let end = c.string()?;
    let mut text = Vec::with_capacity(end - at);
    let mut raw_at = Vec::with_capacity(end - at);
    let mut i = at + 1;
    while i < end - 1 {
        if bytes[i] == b'\\' {
            let (ch, len) = escape(bytes, i)?;
            let mut buf = [0u8; 4];
            for &x in ch.encode_utf8(&mut buf).as_bytes() {
                text.push(x);
                raw_at.push(i);
            }
            i += len;
        } else {
            text.push(bytes[i]);
            raw_at.push(i);
            i += 1;
        }
    }
    raw_at.push(end - 1);
    // Cursor::string checked the UTF-8 of the raw bytes, and escapes encode whole characters.
    let text = String::from_utf8(text).expect("checked by Cursor::string");
    Ok(Decoded {
        text,
        span: at..end,
        raw_at,
    })
}

/// Go's struct-field name matching (`encoding/json` folds ASCII to upper case and any other
/// character `c` to `ToUpper(ToLower(c))`, so `ſ` matches `s` and the Kelvin sign `k`).
fn go_fold_eq(a: &str, b: &str) -> bool {
    fn fold(c: char) -> char {
        if c.is_ascii() {
            return c.to_ascii_uppercase();
        }
        // Go's unicode.ToLower/ToUpper are single-character mappings: take the first
        // character of Rust's full mapping (`İ` lowers to "i\u{307}", Go's simple mapping "i").
        let lower = c.to_lowercase().next().unwrap_or(c);
        lower.to_uppercase().next().unwrap_or(lower)
    }
    let (mut x, mut y) = (a.chars(), b.chars());
    loop {
        match (x.next(), y.next()) {
            (None, None) => return true,
            (Some(p), Some(q)) if p == q || fold(p) == fold(q) => {}
            _ => return false,
        }
    }
}

/// One escape sequence at `b[i] == b'\\'`: the character and the length of the sequence (a
/// surrogate pair is one 12-byte sequence).
fn escape(b: &[u8], i: usize) -> Result<(char, usize), SpanError> {
    let simple = match b.get(i + 1) {
        Some(b'"') => '"',
        Some(b'\\') => '\\',
        Some(b'/') => '/',
        Some(b'b') => '\u{8}',
        Some(b'f') => '\u{c}',
        Some(b'n') => '\n',
        Some(b'r') => '\r',
        Some(b't') => '\t',
        Some(b'u') => {
            let hi = hex4(b, i + 2).ok_or(SpanError {
                at: i,
                reason: Reason::BadEscape,
            })?;
            if (0xDC00..0xE000).contains(&hi) {
                return fail(i, Reason::LoneSurrogate);
            }
            if !(0xD800..0xDC00).contains(&hi) {
                let ch = char::from_u32(hi).expect("not a surrogate");
                return Ok((ch, 6));
            }
            let lo = match (b.get(i + 6), b.get(i + 7)) {
                (Some(b'\\'), Some(b'u')) => hex4(b, i + 8),
                _ => None,
            };
            return match lo {
                Some(lo) if (0xDC00..0xE000).contains(&lo) => {
                    let c = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
                    Ok((char::from_u32(c).expect("a valid pair"), 12))
                }
                _ => fail(i, Reason::LoneSurrogate),
            };
        }
        _ => return fail(i, Reason::BadEscape),
    };
    Ok((simple, 2))
}

fn hex4(b: &[u8], i: usize) -> Option<u32> {
    let digits = b.get(i..i + 4)?;
    let mut v = 0;
    for &c in digits {
        v = v * 16 + (c as char).to_digit(16)?;
    }
    Some(v)
}

struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
    /// The bytes ahead were already checked by an enclosing scan: values are skipped by
    /// finding their end only.
    trusted: bool,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    /// Consumes `c`, or fails naming `what` was expected.
    fn expect(&mut self, c: u8, what: &'static str) -> Result<(), SpanError> {
        match self.peek() {
            Some(x) if x == c => {
                self.i += 1;
                Ok(())
            }
            Some(_) => fail(self.i, Reason::Expected(what)),
            None => fail(self.i, Reason::Truncated),
        }
    }

    /// Moves past an already checked string literal; returns its end.
    fn skip_string(&mut self) -> usize {
        self.i += 1;
        loop {
            let rest = &self.b[self.i..];
            // (memchr's vector search: the skip over a metadata document's long strings was
            // most of a field scan of bytes serde_json had already checked)
            match memchr::memchr2(b'"', b'\\', rest) {
                Some(n) if rest[n] == b'"' => {
                    self.i += n + 1;
                    return self.i;
                }
                // `\u` is followed by hex digits only: skipping the escaped byte suffices.
                Some(n) => self.i += n + 2,
                None => unreachable!("a checked string is closed"),
            }
        }
    }

    /// Moves past an already checked value.
    fn skip_value(&mut self) {
        match self.b[self.i] {
            b'"' => {
                self.skip_string();
            }
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match self.b[self.i] {
                        b'"' => {
                            self.skip_string();
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                self.i += 1;
                                return;
                            }
                        }
                        _ => {}
                    }
                    self.i += 1;
                }
            }
            _ => {
                while !matches!(
                    self.peek(),
                    None | Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
                ) {
                    self.i += 1;
                }
            }
        }
    }

    /// Checks the string literal at the cursor and moves past it; returns its end.
    fn string(&mut self) -> Result<usize, SpanError> {
        if self.trusted {
            return Ok(self.skip_string());
        }
        self.expect(b'"', "a string")?;
        let mut plain_from = self.i;
        loop {
            match self.peek() {
                None => return fail(self.i, Reason::Truncated),
                Some(b'"') => {
                    check_utf8(self.b, plain_from..self.i)?;
                    self.i += 1;
                    return Ok(self.i);
                }
                Some(b'\\') => {
                    check_utf8(self.b, plain_from..self.i)?;
                    let short = match self.b.get(self.i + 1) {
                        None => true,
                        Some(b'u') => self.i + 6 > self.b.len(),
                        Some(_) => false,
                    };
                    if short {
                        return fail(self.i, Reason::Truncated);
                    }
                    let (_, len) = escape(self.b, self.i)?;
                    self.i += len;
                    plain_from = self.i;
                }
                Some(c) if c < 0x20 => return fail(self.i, Reason::ControlCharacter),
                Some(_) => {
                    // Skip the plain run in one pass: most of a metadata document is string
                    // bytes, and a per-byte `peek` here cost a fifth of a 10,000-container
                    // containerd rewrite.
                    let rest = &self.b[self.i..];
                    self.i += rest
                        .iter()
                        .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
                        .unwrap_or(rest.len());
                }
            }
        }
    }

    /// The key of a member at the cursor, decoded.
    fn key(&mut self) -> Result<Cow<'a, str>, SpanError> {
        let start = self.i;
        let end = self.string()?;
        let raw = &self.b[start + 1..end - 1];
        if !raw.contains(&b'\\') {
            return Ok(Cow::Borrowed(
                std::str::from_utf8(raw).expect("checked by Cursor::string"),
            ));
        }
        Ok(Cow::Owned(decode_string(self.b, start)?.text))
    }

    fn kind(&self) -> Result<Kind, SpanError> {
        Ok(match self.peek() {
            Some(b'{') => Kind::Object,
            Some(b'[') => Kind::Array,
            Some(b'"') => Kind::String,
            Some(b'-' | b'0'..=b'9') => Kind::Number,
            Some(b't' | b'f') => Kind::Bool,
            Some(b'n') => Kind::Null,
            Some(_) => return fail(self.i, Reason::Expected("a value")),
            None => return fail(self.i, Reason::Truncated),
        })
    }

    /// Checks the value at the cursor (no leading whitespace) and moves past it.
    fn value(&mut self, depth: usize) -> Result<Kind, SpanError> {
        let kind = self.kind()?;
        if self.trusted {
            self.skip_value();
            return Ok(kind);
        }
        match kind {
            Kind::Object | Kind::Array => {
                if depth >= MAX_DEPTH {
                    return fail(self.i, Reason::TooDeep);
                }
                let close = if kind == Kind::Object { b'}' } else { b']' };
                self.i += 1;
                self.ws();
                if self.peek() == Some(close) {
                    self.i += 1;
                    return Ok(kind);
                }
                loop {
                    if kind == Kind::Object {
                        self.string()?;
                        self.colon()?;
                    }
                    self.value(depth + 1)?;
                    if self.next_or_close(close)? {
                        return Ok(kind);
                    }
                }
            }
            Kind::String => self.string().map(|_| kind),
            Kind::Number => self.number().map(|_| kind),
            Kind::Bool | Kind::Null => {
                let lit: &[u8] = match self.b[self.i] {
                    b't' => b"true",
                    b'f' => b"false",
                    _ => b"null",
                };
                let have = &self.b[self.i..self.b.len().min(self.i + lit.len())];
                if have == lit {
                    self.i += lit.len();
                    Ok(kind)
                } else if lit.starts_with(have) {
                    fail(self.b.len(), Reason::Truncated)
                } else {
                    fail(self.i, Reason::Expected("a value"))
                }
            }
        }
    }

    /// Whitespace, `:`, whitespace.
    fn colon(&mut self) -> Result<(), SpanError> {
        self.ws();
        self.expect(b':', "':'")?;
        self.ws();
        Ok(())
    }

    /// After a member or element: `true` at the closing bracket (consumed), `false` after a
    /// `,` (consumed, with the whitespace after it).
    fn next_or_close(&mut self, close: u8) -> Result<bool, SpanError> {
        self.ws();
        match self.peek() {
            Some(b',') => {
                self.i += 1;
                self.ws();
                Ok(false)
            }
            Some(c) if c == close => {
                self.i += 1;
                Ok(true)
            }
            Some(_) => fail(
                self.i,
                Reason::Expected(if close == b'}' {
                    "',' or '}'"
                } else {
                    "',' or ']'"
                }),
            ),
            None => fail(self.i, Reason::Truncated),
        }
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
    fn number(&mut self) -> Result<(), SpanError> {
        let start = self.i;
        let bad = |c: &Cursor| {
            fail(
                if c.i == c.b.len() { c.i } else { start },
                if c.i == c.b.len() {
                    Reason::Truncated
                } else {
                    Reason::BadNumber
                },
            )
        };
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek() {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return bad(self),
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return bad(self);
            }
            self.digits();
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return bad(self);
            }
            self.digits();
        }
        // `01`, `1x`: the token goes on where JSON does not allow it.
        if matches!(
            self.peek(),
            Some(b'0'..=b'9' | b'a'..=b'z' | b'A'..=b'Z' | b'.')
        ) {
            return fail(start, Reason::BadNumber);
        }
        Ok(())
    }

    fn digits(&mut self) {
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.i += 1;
        }
    }

    /// The object at the cursor (its `{`): members with decoded keys, values skipped.
    fn object(&mut self) -> Result<Object<'a>, SpanError> {
        let start = self.i;
        self.i += 1;
        self.ws();
        let mut members = Vec::new();
        if self.peek() == Some(b'}') {
            self.i += 1;
        } else {
            loop {
                let key_at = self.i;
                let key = self.key()?;
                self.colon()?;
                let value_at = self.i;
                let kind = self.value(1)?;
                members.push(Member {
                    key,
                    key_at,
                    value: value_at..self.i,
                    kind,
                });
                if self.next_or_close(b'}')? {
                    break;
                }
            }
        }
        Ok(Object {
            bytes: self.b,
            span: start..self.i,
            members,
        })
    }
}

fn check_utf8(b: &[u8], r: Span) -> Result<(), SpanError> {
    std::str::from_utf8(&b[r.clone()])
        .map(|_| ())
        .map_err(|e| SpanError {
            at: r.start + e.valid_up_to(),
            reason: Reason::NotUtf8,
        })
}

/// How the replaced value is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// A string token of the document: `"v"`.
    Plain,
    /// A string token of a document embedded in a string of the file: `\"v\"`.
    Embedded,
}

/// One replacement of a string value: the span of its token and the new value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    span: Span,
    token: Vec<u8>,
}

impl Edit {
    /// Replaces the string token at `span` (a [`Member::value`]) with the string `value`.
    pub fn string(span: Span, value: &str) -> Result<Edit, SpanError> {
        Self::new(span, value, Form::Plain)
    }

    /// Replaces a string token of an embedded document, at `span` of the outer input (from
    /// [`Decoded::raw_span`]), with the string `value`: the token is escaped once more, as the
    /// content of the outer string.
    pub fn embedded_string(span: Span, value: &str) -> Result<Edit, SpanError> {
        Self::new(span, value, Form::Embedded)
    }

    fn new(span: Span, value: &str, form: Form) -> Result<Edit, SpanError> {
        if value
            .bytes()
            .any(|c| !(0x20..0x7f).contains(&c) || matches!(c, b'"' | b'\\' | b'<' | b'>' | b'&'))
        {
            return fail(span.start, Reason::NeedsEscaping(value.to_string()));
        }
        let quote: &[u8] = match form {
            Form::Plain => b"\"",
            Form::Embedded => b"\\\"",
        };
        let mut token = Vec::with_capacity(value.len() + 2 * quote.len());
        token.extend_from_slice(quote);
        token.extend_from_slice(value.as_bytes());
        token.extend_from_slice(quote);
        Ok(Edit { span, token })
    }
}

/// `bytes` with each edit's span replaced by its token; every other byte kept. The edits may
/// come in any order but must not overlap.
pub fn splice(bytes: &[u8], mut edits: Vec<Edit>) -> Result<Vec<u8>, SpanError> {
    edits.sort_by_key(|e| e.span.start);
    let extra: usize = edits.iter().map(|e| e.token.len()).sum();
    let mut out = Vec::with_capacity(bytes.len() + extra);
    let mut at = 0;
    for e in &edits {
        if e.span.start < at || e.span.end > bytes.len() || e.span.start > e.span.end {
            return fail(e.span.start, Reason::EditSpan);
        }
        out.extend_from_slice(&bytes[at..e.span.start]);
        out.extend_from_slice(&e.token);
        at = e.span.end;
    }
    out.extend_from_slice(&bytes[at..]);
    Ok(out)
}

#[cfg(test)]
mod tests;
