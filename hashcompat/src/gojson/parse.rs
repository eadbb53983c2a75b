//! A JSON reader that sees input the way Go's `encoding/json` decoder does.
//!
//! serde_json cannot be used for the decoding side: it rejects invalid UTF-8 and lone surrogate
//! escapes (Go replaces both with U+FFFD), it keeps one of two duplicate keys (Go decodes both,
//! in order), and it forgets the literal text of numbers and strings (`Quantity.UnmarshalJSON`
//! receives the raw token, escapes unprocessed). So the tree here keeps keys in order,
//! duplicates included, and every value's raw byte span.

use std::borrow::Cow;
use std::fmt;

/// A syntax error, with the byte offset Go would report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    /// Byte offset into the input where Go's scanner stops.
    pub offset: usize,
    /// What is wrong there.
    pub msg: String,
}

impl fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid JSON at byte {}: {}", self.offset, self.msg)
    }
}

impl std::error::Error for SyntaxError {}

/// One JSON value. `raw` is the exact input span of the value.
#[derive(Debug, Clone, PartialEq)]
pub struct Node<'a> {
    /// The exact input bytes of this value: what Go hands to an `UnmarshalJSON` method
    /// (`resource.Quantity`, `intstr.IntOrString`).
    pub raw: &'a [u8],
    /// The value itself.
    pub value: NodeValue<'a>,
}

/// The kinds of JSON value, with what Go's decoder keeps of each.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeValue<'a> {
    /// `null`: Go leaves the target unchanged, sets a pointer, slice or map to nil, and hands
    /// it to a type's own `UnmarshalJSON` as is.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// The number literal as written.
    Number(&'a str),
    /// The decoded string (escapes processed, invalid UTF-8 replaced as Go does): borrowed
    /// from the input when it needed no decoding (most strings of a pod spec: a node's
    /// pods file is parsed whole, and an allocation per string was most of the run's).
    String(Cow<'a, str>),
    /// Elements in input order.
    Array(Vec<Node<'a>>),
    /// Members in input order; duplicate keys kept.
    Object(Vec<(Cow<'a, str>, Node<'a>)>),
}

impl<'a> Node<'a> {
    /// The JSON kind as Go's decoder names it in its errors ("string", "object", ...).
    pub fn kind_name(&self) -> &'static str {
        match self.value {
            NodeValue::Null => "null",
            NodeValue::Bool(_) => "bool",
            NodeValue::Number(_) => "number",
            NodeValue::String(_) => "string",
            NodeValue::Array(_) => "array",
            NodeValue::Object(_) => "object",
        }
    }

    /// The last member named exactly `key` (Go's map semantics for a plain lookup).
    pub fn get(&self, key: &str) -> Option<&Node<'a>> {
        match &self.value {
            NodeValue::Object(members) => {
                members.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v)
            }
            _ => None,
        }
    }

    /// The decoded text of a string value; `None` for every other kind.
    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            NodeValue::String(s) => Some(s),
            _ => None,
        }
    }
}

/// Parses one complete JSON document (surrounding whitespace allowed, nothing else).
pub fn parse(input: &[u8]) -> Result<Node<'_>, SyntaxError> {
    let mut p = Parser {
        s: input,
        i: 0,
        depth: 0,
    };
    p.ws();
    let node = p.value()?;
    p.ws();
    if p.i != input.len() {
        return Err(p.err("invalid character after top-level value"));
    }
    Ok(node)
}

/// What [`parse_streaming`] kept of a document.
#[derive(Debug)]
pub struct Streamed<'a> {
    /// The document, with the streamed array member's value an empty array whose `raw` is
    /// still the array's whole span.
    pub doc: Node<'a>,
    /// Whether the member was found as an array at the top level and its elements streamed.
    pub streamed: bool,
}

/// Parses one complete JSON document like [`parse`], but hands each element of the top-level
/// object's array member `key` to `each` as soon as it is parsed, instead of keeping it in the
/// tree. A node's pods file is megabytes of JSON whose tree is several times its size; callers
/// that keep only a little of each element (the pods' container specs as raw spans) then hold
/// one element's tree at a time. Syntax is checked exactly as [`parse`] checks it: the same
/// documents are accepted and rejected, with the same offsets.
///
/// Elements reach `each` in input order; a document whose top level is not an object, or whose
/// `key` member is not an array, is returned whole with `streamed` false (each member named
/// `key` of the top-level object is streamed, and `each` is told which of them, counting from
/// 0: Go's decoder keeps only the last, and so must a caller that means to decode as Go does).
pub fn parse_streaming<'a>(
    input: &'a [u8],
    key: &str,
    mut each: impl FnMut(usize, Node<'a>),
) -> Result<Streamed<'a>, SyntaxError> {
    let mut p = Parser {
        s: input,
        i: 0,
        depth: 0,
    };
    p.ws();
    let mut members_streamed = 0;
    let doc = if p.s.get(p.i) == Some(&b'{') {
        let start = p.i;
        let value = p.object_streaming(key, &mut each, &mut members_streamed)?;
        Node {
            raw: &p.s[start..p.i],
            value,
        }
    } else {
        p.value()?
    };
    p.ws();
    if p.i != input.len() {
        return Err(p.err("invalid character after top-level value"));
    }
    Ok(Streamed {
        doc,
        streamed: members_streamed > 0,
    })
}

/// Go's `maxNestingDepth`.
const MAX_DEPTH: usize = 10000;

/// [`Parser::object_with`]'s hook: given the parser at a member's value and the member's key,
/// the value it parsed itself, or `None`.
type ValueHook<'h, 'a> =
    &'h mut dyn FnMut(&mut Parser<'a>, &str) -> Result<Option<Node<'a>>, SyntaxError>;

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
    depth: usize,
}

impl<'a> Parser<'a> {
    fn err(&self, msg: &str) -> SyntaxError {
        SyntaxError {
            offset: self.i,
            msg: msg.to_string(),
        }
    }

    fn ws(&mut self) {
        while let Some(&b) = self.s.get(self.i) {
            if matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
                self.i += 1;
            } else {
                break;
            }
        }
    }

    fn value(&mut self) -> Result<Node<'a>, SyntaxError> {
        let start = self.i;
        let Some(&b) = self.s.get(self.i) else {
            return Err(self.err("unexpected end of JSON input"));
        };
        let value = match b {
            b'{' => self.object()?,
            b'[' => self.array()?,
            b'"' => NodeValue::String(self.string()?),
            b't' => self.literal(b"true", NodeValue::Bool(true))?,
            b'f' => self.literal(b"false", NodeValue::Bool(false))?,
            b'n' => self.literal(b"null", NodeValue::Null)?,
            b'-' | b'0'..=b'9' => self.number()?,
            _ => return Err(self.err("invalid character looking for beginning of value")),
        };
        Ok(Node {
            raw: &self.s[start..self.i],
            value,
        })
    }

    fn literal(&mut self, word: &[u8], v: NodeValue<'a>) -> Result<NodeValue<'a>, SyntaxError> {
        if self.s[self.i..].starts_with(word) {
            self.i += word.len();
            Ok(v)
        } else {
            Err(self.err("invalid literal"))
        }
    }

    fn digits(&mut self) -> usize {
        let st = self.i;
        while matches!(self.s.get(self.i), Some(b'0'..=b'9')) {
            self.i += 1;
        }
        self.i - st
    }

    fn number(&mut self) -> Result<NodeValue<'a>, SyntaxError> {
        let start = self.i;
        if self.s[self.i] == b'-' {
            self.i += 1;
        }
        match self.s.get(self.i) {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(self.err("invalid character in numeric literal")),
        }
        if self.s.get(self.i) == Some(&b'.') {
            self.i += 1;
            if self.digits() == 0 {
                return Err(self.err("invalid character after decimal point in numeric literal"));
            }
        }
        if matches!(self.s.get(self.i), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.s.get(self.i), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if self.digits() == 0 {
                return Err(self.err("invalid character in exponent of numeric literal"));
            }
        }
        // The literal is ASCII by construction.
        Ok(NodeValue::Number(
            std::str::from_utf8(&self.s[start..self.i]).unwrap_or("0"),
        ))
    }

    fn enter(&mut self) -> Result<(), SyntaxError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.err("exceeded max depth"));
        }
        Ok(())
    }

    fn array(&mut self) -> Result<NodeValue<'a>, SyntaxError> {
        let mut items = Vec::new();
        self.array_each(&mut |n| items.push(n))?;
        Ok(NodeValue::Array(items))
    }

    /// An array's elements, each handed to `each` as soon as it is parsed.
    fn array_each(&mut self, each: &mut dyn FnMut(Node<'a>)) -> Result<(), SyntaxError> {
        self.enter()?;
        self.i += 1;
        self.ws();
        if self.s.get(self.i) == Some(&b']') {
            self.i += 1;
            self.depth -= 1;
            return Ok(());
        }
        loop {
            self.ws();
            each(self.value()?);
            self.ws();
            match self.s.get(self.i) {
                Some(b',') => self.i += 1,
                Some(b']') => {
                    self.i += 1;
                    break;
                }
                None => return Err(self.err("unexpected end of JSON input")),
                _ => return Err(self.err("invalid character after array element")),
            }
        }
        self.depth -= 1;
        Ok(())
    }

    fn object(&mut self) -> Result<NodeValue<'a>, SyntaxError> {
        self.object_with(&mut |_, _| Ok(None))
    }

    /// An object's members; `value_of(self, key)` may parse a member's value itself (at the
    /// value's first byte) and return it, or return `None` to have it parsed as usual.
    fn object_with(&mut self, value_of: ValueHook<'_, 'a>) -> Result<NodeValue<'a>, SyntaxError> {
        self.enter()?;
        self.i += 1;
        let mut members = Vec::new();
        self.ws();
        if self.s.get(self.i) == Some(&b'}') {
            self.i += 1;
            self.depth -= 1;
            return Ok(NodeValue::Object(members));
        }
        loop {
            self.ws();
            if self.s.get(self.i) != Some(&b'"') {
                return Err(
                    self.err("invalid character looking for beginning of object key string")
                );
            }
            let key = self.string()?;
            self.ws();
            if self.s.get(self.i) != Some(&b':') {
                return Err(self.err("invalid character after object key"));
            }
            self.i += 1;
            self.ws();
            let v = match value_of(self, &key)? {
                Some(v) => v,
                None => self.value()?,
            };
            members.push((key, v));
            self.ws();
            match self.s.get(self.i) {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    break;
                }
                None => return Err(self.err("unexpected end of JSON input")),
                _ => return Err(self.err("invalid character after object key:value pair")),
            }
        }
        self.depth -= 1;
        Ok(NodeValue::Object(members))
    }

    /// [`Parser::object`] for the top level of [`parse_streaming`]: members named `key` whose
    /// value is an array have their elements handed to `each` one by one.
    fn object_streaming(
        &mut self,
        key: &str,
        each: &mut dyn FnMut(usize, Node<'a>),
        members_streamed: &mut usize,
    ) -> Result<NodeValue<'a>, SyntaxError> {
        self.object_with(&mut |p, name| {
            if name != key || p.s.get(p.i) != Some(&b'[') {
                return Ok(None);
            }
            let start = p.i;
            let occurrence = *members_streamed;
            *members_streamed += 1;
            p.array_each(&mut |n| each(occurrence, n))?;
            Ok(Some(Node {
                raw: &p.s[start..p.i],
                value: NodeValue::Array(Vec::new()),
            }))
        })
    }

    /// Scans a string starting at the opening quote; returns it decoded like Go's `unquote`.
    fn string(&mut self) -> Result<Cow<'a, str>, SyntaxError> {
        self.i += 1;
        let start = self.i;
        // Fast path: plain printable ASCII without escapes.
        while let Some(&b) = self.s.get(self.i) {
            if b == b'"' {
                let s = std::str::from_utf8(&self.s[start..self.i]).unwrap_or_default();
                self.i += 1;
                return Ok(Cow::Borrowed(s));
            }
            if b == b'\\' || !(0x20..0x80).contains(&b) {
                break;
            }
            self.i += 1;
        }
        let mut out: Vec<u8> = self.s[start..self.i].to_vec();
        loop {
            let Some(&b) = self.s.get(self.i) else {
                return Err(self.err("unexpected end of JSON input"));
            };
            match b {
                b'"' => {
                    self.i += 1;
                    break;
                }
                b'\\' => {
                    self.i += 1;
                    let Some(&e) = self.s.get(self.i) else {
                        return Err(self.err("unexpected end of JSON input"));
                    };
                    self.i += 1;
                    match e {
                        b'"' | b'\\' | b'/' => out.push(e),
                        b'b' => out.push(0x08),
                        b'f' => out.push(0x0c),
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'u' => {
                            let r = self.hex4()?;
                            let c = if (0xD800..0xE000).contains(&r) {
                                // Go: try to pair with a following \uXXXX; otherwise U+FFFD and
                                // leave the next escape to be decoded on its own.
                                let save = self.i;
                                let mut paired = None;
                                if self.s.get(self.i) == Some(&b'\\')
                                    && self.s.get(self.i + 1) == Some(&b'u')
                                {
                                    self.i += 2;
                                    if let Ok(r2) = self.hex4() {
                                        if (0xD800..0xDC00).contains(&r)
                                            && (0xDC00..0xE000).contains(&r2)
                                        {
                                            let cp = 0x10000 + ((r - 0xD800) << 10) + (r2 - 0xDC00);
                                            paired = char::from_u32(cp);
                                        }
                                    }
                                }
                                match paired {
                                    Some(c) => c,
                                    None => {
                                        self.i = save;
                                        '\u{FFFD}'
                                    }
                                }
                            } else {
                                char::from_u32(r).unwrap_or('\u{FFFD}')
                            };
                            let mut buf = [0u8; 4];
                            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                        }
                        _ => {
                            self.i -= 1;
                            return Err(self.err("invalid character in string escape code"));
                        }
                    }
                }
                0..=0x1f => return Err(self.err("invalid character in string literal")),
                0x20..=0x7f => {
                    out.push(b);
                    self.i += 1;
                }
                _ => {
                    // Go decodes rune by rune; an invalid sequence yields one U+FFFD per byte.
                    let w = match b {
                        0xC2..=0xDF => 2,
                        0xE0..=0xEF => 3,
                        0xF0..=0xF4 => 4,
                        _ => 0,
                    };
                    let end = self.i + w;
                    if w > 0
                        && end <= self.s.len()
                        && std::str::from_utf8(&self.s[self.i..end]).is_ok()
                    {
                        out.extend_from_slice(&self.s[self.i..end]);
                        self.i = end;
                    } else {
                        out.extend_from_slice("\u{FFFD}".as_bytes());
                        self.i += 1;
                    }
                }
            }
        }
        // Every push above keeps `out` valid UTF-8.
        Ok(Cow::Owned(String::from_utf8(out).unwrap_or_default()))
    }

    fn hex4(&mut self) -> Result<u32, SyntaxError> {
        let mut v = 0u32;
        for _ in 0..4 {
            let Some(&h) = self.s.get(self.i) else {
                return Err(self.err("unexpected end of JSON input"));
            };
            let d = match h {
                b'0'..=b'9' => h - b'0',
                b'a'..=b'f' => h - b'a' + 10,
                b'A'..=b'F' => h - b'A' + 10,
                _ => return Err(self.err("invalid character in \\u hexadecimal character escape")),
            };
            v = v * 16 + d as u32;
            self.i += 1;
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(input: &str) -> String {
        match parse(input.as_bytes()).unwrap().value {
            NodeValue::String(s) => s.into_owned(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn strings_that_need_no_decoding_borrow_the_input() {
        let doc = parse(br#"{"name":"nginx","args":["a\tb","caf\u00e9"]}"#).unwrap();
        let NodeValue::Object(members) = &doc.value else {
            panic!("{doc:?}")
        };
        assert!(
            matches!(members[0].0, Cow::Borrowed("name")),
            "a plain key borrows the input (no allocation per key)"
        );
        assert!(
            matches!(
                doc.get("name").unwrap().value,
                NodeValue::String(Cow::Borrowed("nginx"))
            ),
            "a plain string value borrows the input"
        );
        let args: Vec<_> = match &doc.get("args").unwrap().value {
            NodeValue::Array(a) => a.iter().map(|n| n.value.clone()).collect(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            args,
            [
                NodeValue::String(Cow::Owned("a\tb".to_string())),
                NodeValue::String(Cow::Owned("café".to_string()))
            ],
            "escaped strings are decoded into owned text"
        );
        assert!(
            args.iter()
                .all(|v| matches!(v, NodeValue::String(Cow::Owned(_)))),
            "a string with escapes cannot borrow"
        );
    }

    #[test]
    fn surrogates_follow_go() {
        assert_eq!(s(r#""\ud83d\ude00""#), "😀", "a valid pair is combined");
        assert_eq!(
            s(r#""\ud800x""#),
            "\u{FFFD}x",
            "a lone high surrogate becomes U+FFFD"
        );
        assert_eq!(
            s(r#""\udc00""#),
            "\u{FFFD}",
            "a lone low surrogate becomes U+FFFD"
        );
        assert_eq!(
            s(r#""\ud800\u0041""#),
            "\u{FFFD}A",
            "the escape after a bad surrogate is decoded on its own"
        );
    }

    #[test]
    fn invalid_utf8_is_replaced_per_byte_like_go() {
        let n = parse(b"\"a\xe2\x82x\xff\"").unwrap();
        assert_eq!(n.as_str().unwrap(), "a\u{FFFD}\u{FFFD}x\u{FFFD}");
    }

    #[test]
    fn streaming_sees_the_elements_parse_would_keep_and_the_same_errors() {
        let docs: &[&[u8]] = &[
            br#"{"apiVersion":"v1","items":[{"a":1},[2,"x"],"s",null],"kind":"List"}"#,
            br#" { "items" : [ ] , "items": [1, {"b": [true]}] } "#,
            br#"{"items":{"not":"an array"},"kind":"Pod"}"#,
            br#"[{"items":[1]}]"#,
            br#"{"items":[1,2,}"#,
            br#"{"items":[1,2]"#,
            br#"{"items":[1 2]}"#,
            br#"{"items":[1],"kind":"List"} x"#,
            br#"{"items":[{"a":"\ud800"}]}"#,
            b"{\"items\":[\"\xff\"]}",
        ];
        for doc in docs {
            let doc: &[u8] = doc;
            let whole = parse(doc);
            let mut seen = Vec::new();
            let mut occurrences = Vec::new();
            let streamed = parse_streaming(doc, "items", |o, n| {
                occurrences.push(o);
                seen.push(n)
            });
            assert!(
                occurrences.windows(2).all(|w| w[0] <= w[1]),
                "member occurrences count up in input order, for {doc:?}"
            );
            match (&whole, &streamed) {
                (Err(a), Err(b)) => assert_eq!(a, b, "the same syntax error for {doc:?}"),
                (Ok(w), Ok(s)) => {
                    let kept: Vec<&Node> = match &w.value {
                        NodeValue::Object(m) => m
                            .iter()
                            .filter(|(k, v)| k == "items" && matches!(v.value, NodeValue::Array(_)))
                            .flat_map(|(_, v)| match &v.value {
                                NodeValue::Array(items) => items.iter().collect::<Vec<_>>(),
                                _ => unreachable!(),
                            })
                            .collect(),
                        _ => Vec::new(),
                    };
                    assert_eq!(
                        seen.iter().collect::<Vec<_>>(),
                        kept,
                        "the streamed elements are the ones parse keeps, in order, for {doc:?}"
                    );
                    let has_array = matches!(&w.value, NodeValue::Object(m)
                        if m.iter().any(|(k, v)| k == "items" && matches!(v.value, NodeValue::Array(_))));
                    assert_eq!(
                        s.streamed, has_array,
                        "streamed is set iff a top-level items array was streamed, for {doc:?}"
                    );
                    assert_eq!(s.doc.raw, w.raw, "the document's span for {doc:?}");
                }
                _ => panic!(
                    "parse and parse_streaming disagree on {doc:?}: {whole:?} vs {streamed:?}"
                ),
            }
        }
    }

    #[test]
    fn keeps_duplicates_and_raw_spans() {
        let n = parse(br#" {"a": 1.50, "a": "x\ty"} "#).unwrap();
        let NodeValue::Object(m) = &n.value else {
            panic!()
        };
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].1.raw, b"1.50");
        assert_eq!(m[1].1.raw, br#""x\ty""#);
    }

    #[test]
    fn rejects_what_go_rejects() {
        for bad in [
            "",
            "{",
            "[1,]",
            "01",
            "1.",
            "-",
            "\"\u{1}\"",
            "{} x",
            "tru",
            "\"\\x\"",
        ] {
            assert!(
                parse(bad.as_bytes()).is_err(),
                "{bad:?} must be a syntax error"
            );
        }
    }
}
