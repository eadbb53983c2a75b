//! Byte-preserving edit of one label value in a `config.v2.json`.
//!
//! dockerd writes `config.v2.json` with Go's `encoding/json` (struct field order, sorted map
//! keys, `&` as `\u0026`, one trailing newline). Re-serialising the document from Rust would
//! change bytes dockerd and humans care about, so we never do: a small scanner walks the raw
//! bytes to find the exact span of the string token `Config.Labels[<key>]`, and only that
//! span is replaced. The caller then re-parses the result and compares it with the original
//! document with that one value changed.

use std::ops::Range;

/// Where the value token of one label sits: the byte range of the JSON string token,
/// quotes included.
pub type Span = Range<usize>;

/// Finds the value token of `Config.Labels[key]` for every key of `keys` (in that order).
/// `None` when the label is absent. An error (a plain reason) when the document is not
/// well-formed where we walk, when `Config`, `Labels` or a wanted key appears twice (Go's
/// decoder would silently take the last one; we refuse an ambiguous file), or when the value
/// of a wanted key is not a string.
pub fn find_label_values(bytes: &[u8], keys: &[&str]) -> Result<Vec<Option<Span>>, String> {
    let mut s = Scanner {
        b: bytes,
        i: 0,
        keys,
        found: vec![None; keys.len()],
        seen_config: false,
        seen_labels: false,
    };
    s.ws();
    s.value(Level::Top, 0)?;
    s.ws();
    if s.i != bytes.len() {
        return Err(format!(
            "unexpected data after the JSON document at byte {}",
            s.i
        ));
    }
    Ok(s.found)
}

/// Replaces each `(span, new_token)` (non-overlapping) in `bytes`, keeping every other byte.
pub fn splice(bytes: &[u8], edits: &mut [(Span, Vec<u8>)]) -> Vec<u8> {
    edits.sort_by_key(|(span, _)| span.start);
    let extra: usize = edits.iter().map(|(_, t)| t.len()).sum();
    let mut out = Vec::with_capacity(bytes.len() + extra);
    let mut at = 0;
    for (span, token) in edits.iter() {
        out.extend_from_slice(&bytes[at..span.start]);
        out.extend_from_slice(token);
        at = span.end;
    }
    out.extend_from_slice(&bytes[at..]);
    out
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    /// The top-level object.
    Top,
    /// The object under top-level `Config`.
    Config,
    /// The object under `Config.Labels`.
    Labels,
    /// Anything else: only skipped.
    Other,
}

const MAX_DEPTH: usize = 128;

struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
    keys: &'a [&'a str],
    found: Vec<Option<Span>>,
    seen_config: bool,
    seen_labels: bool,
}

impl Scanner<'_> {
    fn ws(&mut self) {
        while self.i < self.b.len() && matches!(self.b[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn eof(&self, what: &str) -> String {
        format!("unexpected end of data (truncated?) while reading {what}")
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn expect(&mut self, c: u8) -> Result<(), String> {
        match self.peek() {
            Some(x) if x == c => {
                self.i += 1;
                Ok(())
            }
            Some(x) => Err(format!(
                "expected '{}' at byte {}, found '{}'",
                c as char,
                self.i,
                (x as char).escape_default()
            )),
            None => Err(self.eof("an object or array")),
        }
    }

    /// Skips a string token; returns its span (quotes included).
    fn string(&mut self) -> Result<Span, String> {
        let start = self.i;
        self.expect(b'"')?;
        loop {
            match self.peek() {
                None => return Err(self.eof("a string")),
                Some(b'"') => {
                    self.i += 1;
                    return Ok(start..self.i);
                }
                Some(b'\\') => self.i += 2,
                Some(c) if c < 0x20 => {
                    return Err(format!("control character in a string at byte {}", self.i))
                }
                Some(_) => self.i += 1,
            }
        }
    }

    fn string_equals(&self, span: &Span, want: &str) -> Result<bool, String> {
        let raw = &self.b[span.start + 1..span.end - 1];
        if !raw.contains(&b'\\') {
            return Ok(raw == want.as_bytes());
        }
        let decoded: String = serde_json::from_slice(&self.b[span.clone()])
            .map_err(|e| format!("bad string at byte {}: {e}", span.start))?;
        Ok(decoded == want)
    }

    fn value(&mut self, level: Level, depth: usize) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err("nesting too deep".into());
        }
        match self.peek() {
            None => Err(self.eof("a value")),
            Some(b'{') => self.object(level, depth),
            Some(b'[') => {
                self.i += 1;
                self.ws();
                if self.peek() == Some(b']') {
                    self.i += 1;
                    return Ok(());
                }
                loop {
                    self.ws();
                    self.value(Level::Other, depth + 1)?;
                    self.ws();
                    match self.peek() {
                        Some(b',') => self.i += 1,
                        Some(b']') => {
                            self.i += 1;
                            return Ok(());
                        }
                        Some(c) => {
                            return Err(format!(
                                "expected ',' or ']' at byte {}, found '{}'",
                                self.i,
                                (c as char).escape_default()
                            ))
                        }
                        None => return Err(self.eof("an array")),
                    }
                }
            }
            Some(b'"') => self.string().map(|_| ()),
            Some(c) if c == b'-' || c.is_ascii_alphanumeric() => {
                let start = self.i;
                while self.i < self.b.len()
                    && matches!(self.b[self.i], b'-' | b'+' | b'.' | b'0'..=b'9' | b'a'..=b'z' | b'A'..=b'Z')
                {
                    self.i += 1;
                }
                let tok = &self.b[start..self.i];
                let ok = matches!(tok, b"true" | b"false" | b"null")
                    || (tok[0] == b'-' || tok[0].is_ascii_digit());
                if ok {
                    Ok(())
                } else {
                    Err(format!("invalid literal at byte {start}"))
                }
            }
            Some(c) => Err(format!(
                "unexpected '{}' at byte {}",
                (c as char).escape_default(),
                self.i
            )),
        }
    }

    fn object(&mut self, level: Level, depth: usize) -> Result<(), String> {
        self.expect(b'{')?;
        self.ws();
        if self.peek() == Some(b'}') {
            self.i += 1;
            return Ok(());
        }
        loop {
            self.ws();
            let key = self.string()?;
            self.ws();
            self.expect(b':')?;
            self.ws();
            let child = match level {
                Level::Top if self.string_equals(&key, "Config")? => {
                    if std::mem::replace(&mut self.seen_config, true) {
                        return Err("the key Config appears twice".into());
                    }
                    Level::Config
                }
                Level::Config if self.string_equals(&key, "Labels")? => {
                    if std::mem::replace(&mut self.seen_labels, true) {
                        return Err("the key Config.Labels appears twice".into());
                    }
                    Level::Labels
                }
                _ => Level::Other,
            };
            let mut wanted = None;
            if level == Level::Labels {
                for (n, k) in self.keys.iter().enumerate() {
                    if self.string_equals(&key, k)? {
                        wanted = Some(n);
                    }
                }
            }
            match wanted {
                Some(n) => {
                    if self.peek() != Some(b'"') {
                        return Err(format!(
                            "label {} is not a string (at byte {})",
                            self.keys[n], self.i
                        ));
                    }
                    let span = self.string()?;
                    if self.found[n].replace(span).is_some() {
                        return Err(format!("label {} appears twice", self.keys[n]));
                    }
                }
                None => self.value(child, depth + 1)?,
            }
            self.ws();
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    return Ok(());
                }
                Some(c) => {
                    return Err(format!(
                        "expected ',' or '}}' at byte {}, found '{}'",
                        self.i,
                        (c as char).escape_default()
                    ))
                }
                None => return Err(self.eof("an object")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: &str = "annotation.io.kubernetes.container.hash";

    #[test]
    fn finds_only_config_labels() {
        let doc = br#"{"Labels":{"annotation.io.kubernetes.container.hash":"no"},"Config":{"X":{"Labels":{"annotation.io.kubernetes.container.hash":"no2"}},"Labels":{"a":"b","annotation.io.kubernetes.container.hash":"3a1f6c2e"}},"Z":[1,-2.5e3,true,null,{"Config":1}]}"#;
        let found = find_label_values(doc, &[K, "missing"]).unwrap();
        let span = found[0].clone().unwrap();
        assert_eq!(&doc[span], br#""3a1f6c2e""#);
        assert!(found[1].is_none());
    }

    #[test]
    fn escaped_key_matches() {
        let doc = br#"{"Config":{"Labels":{"annotation.io.kubernetes.container.\u0068ash":"ab"}}}"#;
        let span = find_label_values(doc, &[K]).unwrap()[0].clone().unwrap();
        assert_eq!(&doc[span], br#""ab""#);
    }

    #[test]
    fn refuses_duplicates_wrong_types_and_truncation() {
        let dup = br#"{"Config":{"Labels":{"annotation.io.kubernetes.container.hash":"a","annotation.io.kubernetes.container.hash":"b"}}}"#;
        assert!(find_label_values(dup, &[K]).unwrap_err().contains("twice"));
        let num = br#"{"Config":{"Labels":{"annotation.io.kubernetes.container.hash":5}}}"#;
        assert!(find_label_values(num, &[K])
            .unwrap_err()
            .contains("not a string"));
        let cut = br#"{"Config":{"Labels":{"annotation.io.kubernetes.container.hash":"ab"#;
        assert!(find_label_values(cut, &[K])
            .unwrap_err()
            .contains("truncated"));
        let two = br#"{"Config":{},"Config":{}}"#;
        assert!(find_label_values(two, &[K]).unwrap_err().contains("twice"));
    }

    #[test]
    fn splice_keeps_other_bytes() {
        let doc = b"aaXXbbYYcc";
        let mut edits = vec![(6..8, b"zzz".to_vec()), (2..4, b"".to_vec())];
        assert_eq!(splice(doc, &mut edits), b"aabbzzzcc");
    }
}
