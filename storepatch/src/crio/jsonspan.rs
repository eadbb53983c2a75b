//! A small strict JSON scanner that reports byte spans, so a value can be replaced in place
//! while every other byte of the document stays as the runtime wrote it.
//!
//! It does not build a document: [`object_members`] lists the members of one object (decoded
//! key, byte span of the raw value), and [`decode_string`] decodes a string literal while
//! remembering, for every decoded byte, where its escape sequence started in the raw text. That
//! map turns a span found inside an *embedded* JSON document (a JSON string whose content is
//! itself JSON, as CRI-O's `io.kubernetes.cri-o.Annotations`) back into a span of the file.
//!
//! Validation of the whole document is left to `serde_json`; this scanner only has to be right
//! on the documents `serde_json` accepts, and it refuses (with an offset) anything it does not
//! understand.

use std::ops::Range;

/// Deeper nesting than this is refused (serde_json's own limit is 128).
const MAX_DEPTH: usize = 256;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpanError {
    pub offset: usize,
    pub reason: &'static str,
}

impl std::fmt::Display for SpanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at byte {}", self.reason, self.offset)
    }
}

fn err<T>(offset: usize, reason: &'static str) -> Result<T, SpanError> {
    Err(SpanError { offset, reason })
}

/// One member of an object.
#[derive(Debug, Clone)]
pub struct Member {
    pub key: String,
    /// Byte span of the raw value (for a string: from the opening to after the closing quote).
    pub value: Range<usize>,
    /// First byte of the raw value: `"`, `{`, `[`, `t`, `f`, `n`, or a number.
    pub first: u8,
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\r') {
        i += 1;
    }
    i
}

/// A decoded string: its UTF-8 bytes and, for each decoded byte index `k` (and for
/// `k == bytes.len()`), the raw offset where the character holding byte `k` starts.
#[derive(Debug, Clone)]
pub struct Decoded {
    pub text: String,
    pub raw_at: Vec<usize>,
    /// Raw span of the whole literal, quotes included.
    pub span: Range<usize>,
}

fn hex4(b: &[u8], i: usize) -> Result<u32, SpanError> {
    if i + 4 > b.len() {
        return err(i, "truncated \\u escape");
    }
    let mut v = 0u32;
    for &c in &b[i..i + 4] {
        let d = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            b'A'..=b'F' => c - b'A' + 10,
            _ => return err(i, "bad hex digit in \\u escape"),
        };
        v = v * 16 + d as u32;
    }
    Ok(v)
}

/// Decodes the string literal starting at `b[start] == b'"'`.
pub fn decode_string(b: &[u8], start: usize) -> Result<Decoded, SpanError> {
    if b.get(start) != Some(&b'"') {
        return err(start, "expected a string");
    }
    let mut out: Vec<u8> = Vec::new();
    let mut raw_at: Vec<usize> = Vec::new();
    let mut i = start + 1;
    loop {
        let Some(&c) = b.get(i) else {
            return err(i, "unterminated string");
        };
        match c {
            b'"' => {
                raw_at.push(i);
                let text = String::from_utf8(out).map_err(|_| SpanError {
                    offset: start,
                    reason: "string is not valid UTF-8",
                })?;
                return Ok(Decoded {
                    text,
                    raw_at,
                    span: start..i + 1,
                });
            }
            b'\\' => {
                let esc_start = i;
                let Some(&e) = b.get(i + 1) else {
                    return err(i, "unterminated escape");
                };
                let ch: char = match e {
                    b'"' => '"',
                    b'\\' => '\\',
                    b'/' => '/',
                    b'b' => '\u{8}',
                    b'f' => '\u{c}',
                    b'n' => '\n',
                    b'r' => '\r',
                    b't' => '\t',
                    b'u' => {
                        let hi = hex4(b, i + 2)?;
                        if (0xD800..0xDC00).contains(&hi) {
                            if b.get(i + 6) != Some(&b'\\') || b.get(i + 7) != Some(&b'u') {
                                return err(i, "lone surrogate in \\u escape");
                            }
                            let lo = hex4(b, i + 8)?;
                            if !(0xDC00..0xE000).contains(&lo) {
                                return err(i, "bad surrogate pair in \\u escape");
                            }
                            i += 6;
                            char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)).ok_or(
                                SpanError {
                                    offset: esc_start,
                                    reason: "bad \\u escape",
                                },
                            )?
                        } else if (0xDC00..0xE000).contains(&hi) {
                            return err(i, "lone surrogate in \\u escape");
                        } else {
                            char::from_u32(hi).ok_or(SpanError {
                                offset: esc_start,
                                reason: "bad \\u escape",
                            })?
                        }
                    }
                    _ => return err(i, "unknown escape"),
                };
                i += if e == b'u' { 6 } else { 2 };
                let mut buf = [0u8; 4];
                for &x in ch.encode_utf8(&mut buf).as_bytes() {
                    out.push(x);
                    raw_at.push(esc_start);
                }
            }
            0x00..=0x1f => return err(i, "control character in string"),
            _ => {
                out.push(c);
                raw_at.push(i);
                i += 1;
            }
        }
    }
}

fn skip_number(b: &[u8], mut i: usize) -> Result<usize, SpanError> {
    let start = i;
    if b.get(i) == Some(&b'-') {
        i += 1;
    }
    let digits = |b: &[u8], mut i: usize| {
        let s = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        (i, i - s)
    };
    let (j, n) = digits(b, i);
    if n == 0 {
        return err(start, "bad number");
    }
    i = j;
    if b.get(i) == Some(&b'.') {
        let (j, n) = digits(b, i + 1);
        if n == 0 {
            return err(start, "bad number");
        }
        i = j;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let (j, n) = digits(b, i);
        if n == 0 {
            return err(start, "bad number");
        }
        i = j;
    }
    Ok(i)
}

/// Skips the value starting at `b[i]` (no leading whitespace); returns the offset after it.
pub fn skip_value(b: &[u8], i: usize) -> Result<usize, SpanError> {
    skip_value_depth(b, i, 0)
}

fn skip_value_depth(b: &[u8], i: usize, depth: usize) -> Result<usize, SpanError> {
    if depth > MAX_DEPTH {
        return err(i, "nesting too deep");
    }
    match b.get(i) {
        None => err(i, "unexpected end of input"),
        Some(b'"') => Ok(decode_string(b, i)?.span.end),
        Some(b'{') => {
            let mut j = skip_ws(b, i + 1);
            if b.get(j) == Some(&b'}') {
                return Ok(j + 1);
            }
            loop {
                j = decode_string(b, j)?.span.end;
                j = skip_ws(b, j);
                if b.get(j) != Some(&b':') {
                    return err(j, "expected ':'");
                }
                j = skip_ws(b, j + 1);
                j = skip_value_depth(b, j, depth + 1)?;
                j = skip_ws(b, j);
                match b.get(j) {
                    Some(b',') => j = skip_ws(b, j + 1),
                    Some(b'}') => return Ok(j + 1),
                    _ => return err(j, "expected ',' or '}'"),
                }
            }
        }
        Some(b'[') => {
            let mut j = skip_ws(b, i + 1);
            if b.get(j) == Some(&b']') {
                return Ok(j + 1);
            }
            loop {
                j = skip_value_depth(b, j, depth + 1)?;
                j = skip_ws(b, j);
                match b.get(j) {
                    Some(b',') => j = skip_ws(b, j + 1),
                    Some(b']') => return Ok(j + 1),
                    _ => return err(j, "expected ',' or ']'"),
                }
            }
        }
        Some(b't') if b[i..].starts_with(b"true") => Ok(i + 4),
        Some(b'f') if b[i..].starts_with(b"false") => Ok(i + 5),
        Some(b'n') if b[i..].starts_with(b"null") => Ok(i + 4),
        Some(b'-' | b'0'..=b'9') => skip_number(b, i),
        Some(_) => err(i, "unexpected character"),
    }
}

/// Members of the object starting at `b[start] == b'{'`, in document order.
pub fn object_members(b: &[u8], start: usize) -> Result<Vec<Member>, SpanError> {
    if b.get(start) != Some(&b'{') {
        return err(start, "expected an object");
    }
    let mut out = Vec::new();
    let mut j = skip_ws(b, start + 1);
    if b.get(j) == Some(&b'}') {
        return Ok(out);
    }
    loop {
        let key = decode_string(b, j)?;
        j = skip_ws(b, key.span.end);
        if b.get(j) != Some(&b':') {
            return err(j, "expected ':'");
        }
        j = skip_ws(b, j + 1);
        let vstart = j;
        j = skip_value_depth(b, j, 1)?;
        out.push(Member {
            key: key.text,
            value: vstart..j,
            first: b[vstart],
        });
        j = skip_ws(b, j);
        match b.get(j) {
            Some(b',') => j = skip_ws(b, j + 1),
            Some(b'}') => return Ok(out),
            _ => return err(j, "expected ',' or '}'"),
        }
    }
}

/// The members of a whole document that must be one object (surrounded by whitespace only).
pub fn root_members(b: &[u8]) -> Result<Vec<Member>, SpanError> {
    let start = skip_ws(b, 0);
    if b.get(start) != Some(&b'{') {
        return err(start, "the document is not a JSON object");
    }
    let members = object_members(b, start)?;
    let end = skip_value(b, start)?;
    let rest = skip_ws(b, end);
    if rest != b.len() {
        return err(rest, "trailing data after the JSON object");
    }
    Ok(members)
}

/// The one member named `key`; an error if it occurs more than once.
pub fn find_unique<'a>(members: &'a [Member], key: &str) -> Result<Option<&'a Member>, String> {
    let mut found = None;
    for m in members {
        if m.key == key {
            if found.is_some() {
                return Err(format!("key {key:?} occurs more than once"));
            }
            found = Some(m);
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_and_spans() {
        let doc = br#" {"a": 1, "b" : {"c": [1, 2, {"d": null}]}, "e": "x\"y"} "#;
        let m = root_members(doc).unwrap();
        let keys: Vec<_> = m.iter().map(|m| m.key.as_str()).collect();
        assert_eq!(keys, ["a", "b", "e"]);
        assert_eq!(&doc[m[0].value.clone()], b"1");
        assert_eq!(&doc[m[2].value.clone()], br#""x\"y""#);
        assert_eq!(&doc[m[1].value.clone()], br#"{"c": [1, 2, {"d": null}]}"#);
    }

    #[test]
    fn decode_maps_back_to_raw() {
        let raw = br#""{\"k\":\"v\u00e9\",\"h\":\"ab\"}""#;
        let d = decode_string(raw, 0).unwrap();
        assert_eq!(d.text, "{\"k\":\"v\u{e9}\",\"h\":\"ab\"}");
        let inner = root_members(d.text.as_bytes()).unwrap();
        let h = &inner[1];
        let raw_span = d.raw_at[h.value.start]..d.raw_at[h.value.end];
        assert_eq!(&raw[raw_span], br#"\"ab\""#);
        let k = &inner[0];
        let raw_span = d.raw_at[k.value.start]..d.raw_at[k.value.end];
        assert_eq!(&raw[raw_span], br#"\"v\u00e9\""#);
    }

    #[test]
    fn refuses_bad_input() {
        assert!(root_members(b"{\"a\":1").is_err());
        assert!(root_members(b"{\"a\":1} x").is_err());
        assert!(root_members(b"[1]").is_err());
        assert!(root_members(b"{\"a\":tru}").is_err());
        assert!(decode_string(br#""\ud800""#, 0).is_err());
        assert!(decode_string(b"\"a\nb\"", 0).is_err());
        let deep = "[".repeat(1000);
        assert!(skip_value(deep.as_bytes(), 0).is_err());
    }
}
