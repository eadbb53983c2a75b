//! Pinning a static pod's UID: `metadata.uid: <the UID the kubelet uses now>` written into its
//! manifest, so a kubelet of another minor version keeps the pod instead of deriving a new UID
//! from its own Pod type ([`super`]).
//!
//! The manifest is the operator's (or kubeadm's) file: the edit inserts one line (one member in
//! JSON) and keeps every other byte — comments, key order, indentation, quoting, `---` markers,
//! line endings. It never reserializes: a form the insertion cannot handle safely is refused,
//! and every edit is checked by parsing both versions: the new one must be the old one with
//! `metadata.uid` set, nothing else.

use serde_yaml::Value;

/// A manifest with its UID pinned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedManifest {
    /// The new bytes: the original with `inserted` at `at`.
    pub bytes: Vec<u8>,
    /// Where the insertion starts in the original.
    pub at: usize,
    /// The inserted bytes.
    pub inserted: Vec<u8>,
}

/// Why a manifest is not pinned (nothing is written).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PinError(pub String);

fn refuse<T>(why: impl Into<String>) -> Result<T, PinError> {
    Err(PinError(why.into()))
}

/// What [`pin_uid`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pin {
    /// The manifest already sets this `metadata.uid`: nothing to write (a rerun).
    AlreadyPinned,
    /// The edit.
    Edit(PinnedManifest),
}

/// A UID the edit writes: the kubelet's derived UIDs are 32 hex digits, API-server UIDs are
/// RFC 4122 text; anything else (quotes, spaces, a newline) could change more than the uid.
fn plain_uid(uid: &str) -> bool {
    !uid.is_empty()
        && uid.len() <= 128
        && uid.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// Pins `uid` in the manifest `bytes` (YAML or JSON, one Pod): the bytes with one inserted
/// line (a member in JSON) and nothing else changed, or why that cannot be done safely.
pub fn pin_uid(bytes: &[u8], uid: &str) -> Result<Pin, PinError> {
    if !plain_uid(uid) {
        return refuse(format!(
            "the UID {uid:?} is not one the kubelet writes (letters, digits, '-')"
        ));
    }
    let text = std::str::from_utf8(bytes).map_err(|_| PinError("not UTF-8 text".into()))?;
    let before: Value = serde_yaml::from_str(text)
        .map_err(|e| PinError(format!("does not parse as YAML or JSON: {e}")))?;
    match before
        .get("metadata")
        .and_then(|m| m.get("uid"))
        .map(|u| u.as_str())
    {
        None => {}
        Some(Some(u)) if u == uid => return Ok(Pin::AlreadyPinned),
        Some(Some(u)) => {
            return refuse(format!(
                "it already sets metadata.uid {u:?}, not the kubelet's {uid}"
            ))
        }
        Some(None) => return refuse("its metadata.uid is not a string"),
    }
    let is_json = serde_json::from_str::<serde_json::Value>(text).is_ok();
    let (at, inserted) = if is_json {
        json_insertion(text, uid)?
    } else {
        yaml_insertion(text, uid)?
    };
    let mut out = Vec::with_capacity(bytes.len() + inserted.len());
    out.extend_from_slice(&bytes[..at]);
    out.extend_from_slice(inserted.as_bytes());
    out.extend_from_slice(&bytes[at..]);
    check(&before, &out, uid, is_json)?;
    Ok(Pin::Edit(PinnedManifest {
        bytes: out,
        at,
        inserted: inserted.into_bytes(),
    }))
}

/// The proof of an edit: the new bytes parse (as YAML, as the kubelet's decoder reads a
/// manifest, and as JSON when the original was JSON) to the original Pod with `metadata.uid`
/// set and nothing else changed.
fn check(before: &Value, after: &[u8], uid: &str, is_json: bool) -> Result<(), PinError> {
    let mut want = before.clone();
    let Value::Mapping(top) = &mut want else {
        return refuse("the document is not a mapping");
    };
    let meta = top
        .entry(Value::from("metadata"))
        .or_insert_with(|| Value::Mapping(Default::default()));
    let Value::Mapping(meta) = meta else {
        return refuse("metadata is not a mapping");
    };
    meta.insert(Value::from("uid"), Value::from(uid));
    let got: Value = serde_yaml::from_slice(after).map_err(|e| {
        PinError(format!(
            "the edited manifest would not parse ({e}): the edit is refused"
        ))
    })?;
    if got != want {
        return refuse(
            "the edited manifest would differ in more than metadata.uid: the edit is refused",
        );
    }
    if is_json {
        let new: serde_json::Value = serde_json::from_slice(after).map_err(|e| {
            PinError(format!(
                "the edited manifest would not be JSON ({e}): the edit is refused"
            ))
        })?;
        if new.pointer("/metadata/uid").and_then(|u| u.as_str()) != Some(uid) {
            return refuse("the edited JSON would not hold metadata.uid: the edit is refused");
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// YAML

/// One line of the text: where it starts, its content without the line break, and the break.
struct Line<'t> {
    start: usize,
    text: &'t str,
    eol: &'t str,
}

fn lines(text: &str) -> Vec<Line<'_>> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < text.len() {
        let rest = &text[start..];
        let (content, eol) = match rest.find('\n') {
            Some(i) if i > 0 && rest.as_bytes()[i - 1] == b'\r' => (&rest[..i - 1], "\r\n"),
            Some(i) => (&rest[..i], "\n"),
            None => (rest, ""),
        };
        out.push(Line {
            start,
            text: content,
            eol,
        });
        start += content.len() + eol.len();
    }
    out
}

fn indent(s: &str) -> usize {
    s.len() - s.trim_start_matches(' ').len()
}

/// Blank or a comment only: says nothing about the structure.
fn is_filler(s: &str) -> bool {
    let t = s.trim_start_matches(' ');
    t.is_empty() || t.starts_with('#')
}

/// `key:` followed by nothing but a comment (a block value on the next lines): `Some(true)`;
/// `key: value` on the line: `Some(false)`; not this key: `None`.
fn key_line(s: &str, key: &str) -> Option<bool> {
    let rest = s.trim_start_matches(' ').strip_prefix(key)?;
    let rest = rest.trim_start_matches(' ').strip_prefix(':')?;
    if rest.is_empty() {
        return Some(true);
    }
    if !rest.starts_with(' ') && !rest.starts_with('\t') {
        return None;
    }
    let v = rest.trim_start_matches([' ', '\t']);
    Some(v.is_empty() || v.starts_with('#'))
}

fn yaml_insertion(text: &str, uid: &str) -> Result<(usize, String), PinError> {
    if text.contains('\t') {
        // a tab in the indentation would make our column arithmetic wrong
        return refuse("the YAML holds tab characters: not edited by hand-free insertion");
    }
    let ls = lines(text);
    // The document's lines: after a `---` line, before a `...` line.
    let mut first = 0;
    if let Some(i) = ls.iter().position(|l| !is_filler(l.text)) {
        let t = ls[i].text;
        if t == "---" || t.starts_with("--- #") || t.starts_with("---  #") {
            first = i + 1;
        } else if t.starts_with("---") || t.starts_with('%') {
            return refuse(
                "the document starts with a directive or content on its `---` line: not a form the minimal edit handles",
            );
        }
    }
    let end = ls[first..]
        .iter()
        .position(|l| l.text == "..." || l.text == "---")
        .map_or(ls.len(), |i| first + i);
    let doc = &ls[first..end];
    let Some(top) = doc.iter().find(|l| !is_filler(l.text)) else {
        return refuse("the document is empty");
    };
    let top_indent = indent(top.text);
    let body = top.text.trim_start_matches(' ');
    if body.starts_with('{')
        || body.starts_with('[')
        || body.starts_with('"')
        || body.starts_with('\'')
    {
        return refuse("the document is in flow style (or its keys are quoted): not a form the minimal edit handles");
    }
    let eol = top.eol.to_string();
    let eol = if eol.is_empty() {
        "\n".to_string()
    } else {
        eol
    };
    // the indentation step children use in this file (the first deeper line after a key)
    let step = doc
        .iter()
        .filter(|l| !is_filler(l.text) && indent(l.text) > top_indent)
        .map(|l| indent(l.text) - top_indent)
        .min()
        .unwrap_or(2);
    let meta_lines: Vec<usize> = doc
        .iter()
        .enumerate()
        .filter(|(_, l)| indent(l.text) == top_indent && key_line(l.text, "metadata").is_some())
        .map(|(i, _)| i)
        .collect();
    let quoted_meta = doc.iter().any(|l| {
        indent(l.text) == top_indent && {
            let b = l.text.trim_start_matches(' ');
            b.starts_with("\"metadata\"") || b.starts_with("'metadata'")
        }
    });
    if quoted_meta || meta_lines.len() > 1 {
        return refuse("metadata is written quoted or twice: not a form the minimal edit handles");
    }
    let pad = |n: usize| " ".repeat(n);
    let uid_value = format!("\"{uid}\"");
    let Some(&mi) = meta_lines.first() else {
        // No metadata at all: a new mapping, before the first key of the document.
        let at = top.start;
        return Ok((
            at,
            format!(
                "{}metadata:{eol}{}uid: {uid_value}{eol}",
                pad(top_indent),
                pad(top_indent + step)
            ),
        ));
    };
    let meta = &doc[mi];
    if key_line(meta.text, "metadata") == Some(false) {
        // `metadata: {name: x, ...}` on one line: the member goes first in the flow mapping
        let body = meta.text.trim_start_matches(' ');
        let after_key = body["metadata".len()..].trim_start_matches(' ');
        let value = after_key[1..].trim_start_matches(' ');
        if !value.starts_with('{') {
            return refuse(
                "metadata is not a mapping the minimal edit handles (an alias, a tag or a scalar)",
            );
        }
        let brace = meta.start + meta.text.len() - meta.text.trim_start_matches(' ').len()
            + (body.len() - value.len());
        let inner = value[1..].trim_start_matches(' ');
        let sep = if inner.starts_with('}') { "" } else { ", " };
        return Ok((brace + 1, format!("uid: {uid_value}{sep}")));
    }
    // A block mapping: its children are the lines below, deeper than `metadata:`.
    let children: Vec<&Line<'_>> = doc[mi + 1..]
        .iter()
        .take_while(|l| is_filler(l.text) || indent(l.text) > top_indent)
        .collect();
    let Some(first_child) = children.iter().find(|l| !is_filler(l.text)) else {
        return refuse("metadata is empty: not a form the minimal edit handles");
    };
    let child_indent = indent(first_child.text);
    let body = first_child.text.trim_start_matches(' ');
    if body.starts_with('{') || body.starts_with('-') || body.starts_with('?') {
        return refuse(
            "metadata's value is not a block mapping: not a form the minimal edit handles",
        );
    }
    let name_at = children
        .iter()
        .position(|l| indent(l.text) == child_indent && key_line(l.text, "name").is_some());
    let line = format!("{}uid: {uid_value}{eol}", pad(child_indent));
    let Some(ni) = name_at else {
        // no name (the kubelet would refuse it, but the edit is the same): first child
        return Ok((first_child.start, line));
    };
    let name = children[ni];
    // After the name line when its value ends on it (the next line with content is not
    // deeper); before it otherwise (a folded or multi-line name).
    let ends_on_line = key_line(name.text, "name") == Some(false)
        && children[ni + 1..]
            .iter()
            .copied()
            .chain(doc[mi + 1 + children.len()..].iter())
            .find(|l| !is_filler(l.text))
            .is_none_or(|l| indent(l.text) <= child_indent);
    if ends_on_line {
        if name.eol.is_empty() {
            // the last line of the file, without a line break: the uid goes after one
            return Ok((
                name.start + name.text.len(),
                format!("{eol}{}uid: {uid_value}", pad(child_indent)),
            ));
        }
        Ok((name.start + name.text.len() + name.eol.len(), line))
    } else {
        Ok((name.start, line))
    }
}

// ---------------------------------------------------------------------------------------
// JSON

/// A member of a JSON object, as byte offsets into the text.
#[derive(Debug, Clone, Copy)]
struct Member {
    key_start: usize,
    key_end: usize,
    value_start: usize,
    value_end: usize,
}

struct Scan<'t> {
    b: &'t [u8],
}

impl Scan<'_> {
    fn ws(&self, mut i: usize) -> usize {
        while i < self.b.len() && matches!(self.b[i], b' ' | b'\t' | b'\n' | b'\r') {
            i += 1;
        }
        i
    }

    fn string_end(&self, mut i: usize) -> Result<usize, PinError> {
        // at the opening quote
        i += 1;
        while i < self.b.len() {
            match self.b[i] {
                b'\\' => i += 2,
                b'"' => return Ok(i + 1),
                _ => i += 1,
            }
        }
        refuse("unterminated JSON string")
    }

    fn value_end(&self, i: usize) -> Result<usize, PinError> {
        match self.b.get(i) {
            Some(b'"') => self.string_end(i),
            Some(b'{') | Some(b'[') => {
                let mut depth = 0usize;
                let mut j = i;
                while j < self.b.len() {
                    match self.b[j] {
                        b'"' => {
                            j = self.string_end(j)?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                return Ok(j + 1);
                            }
                        }
                        _ => {}
                    }
                    j += 1;
                }
                refuse("unterminated JSON value")
            }
            Some(_) => {
                let mut j = i;
                while j < self.b.len()
                    && !matches!(self.b[j], b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
                {
                    j += 1;
                }
                Ok(j)
            }
            None => refuse("truncated JSON"),
        }
    }

    /// The members of the object whose `{` is at `open`, and where its `}` is.
    fn members(&self, open: usize) -> Result<(Vec<Member>, usize), PinError> {
        let mut out = Vec::new();
        let mut i = self.ws(open + 1);
        if self.b.get(i) == Some(&b'}') {
            return Ok((out, i));
        }
        loop {
            if self.b.get(i) != Some(&b'"') {
                return refuse("malformed JSON object");
            }
            let key_end = self.string_end(i)?;
            let colon = self.ws(key_end);
            if self.b.get(colon) != Some(&b':') {
                return refuse("malformed JSON object");
            }
            let value_start = self.ws(colon + 1);
            let value_end = self.value_end(value_start)?;
            out.push(Member {
                key_start: i,
                key_end,
                value_start,
                value_end,
            });
            let j = self.ws(value_end);
            match self.b.get(j) {
                Some(b',') => i = self.ws(j + 1),
                Some(b'}') => return Ok((out, j)),
                _ => return refuse("malformed JSON object"),
            }
        }
    }

    fn key(&self, m: &Member) -> Option<String> {
        serde_json::from_slice::<String>(&self.b[m.key_start..m.key_end]).ok()
    }
}

fn json_insertion(text: &str, uid: &str) -> Result<(usize, String), PinError> {
    let s = Scan { b: text.as_bytes() };
    let open = s.ws(0);
    if s.b.get(open) != Some(&b'{') {
        return refuse("the JSON document is not an object");
    }
    let (top, _) = s.members(open)?;
    let metas: Vec<&Member> = top
        .iter()
        .filter(|m| s.key(m).as_deref() == Some("metadata"))
        .collect();
    if metas.len() > 1 {
        return refuse("metadata appears twice: not a form the minimal edit handles");
    }
    // How a member is written here: what stands between a key and its value, and between
    // one member and the next.
    let colon_of = |m: &Member| text[m.key_end..m.value_start].to_string();
    let member = |colon: &str| format!("\"uid\"{colon}\"{uid}\"");
    let Some(meta) = metas.first() else {
        // A new metadata object, first in the Pod, written like the first member.
        let first = top
            .first()
            .ok_or(PinError("the Pod object is empty".into()))?;
        let lead = &text[open + 1..first.key_start];
        let colon = colon_of(first);
        return Ok((
            open + 1,
            format!("{lead}\"metadata\"{colon}{{{}}},", member(&colon)),
        ));
    };
    if s.b.get(meta.value_start) != Some(&b'{') {
        return refuse("metadata is not an object");
    }
    let (inner, _) = s.members(meta.value_start)?;
    let names: Vec<usize> = inner
        .iter()
        .enumerate()
        .filter(|(_, m)| s.key(m).as_deref() == Some("name"))
        .map(|(i, _)| i)
        .collect();
    if names.len() > 1 {
        return refuse("metadata.name appears twice: not a form the minimal edit handles");
    }
    match (names.first(), inner.len()) {
        (_, 0) => {
            // `"metadata": {}`: the only member, inside the braces as they are
            let colon = colon_of(meta);
            Ok((meta.value_start + 1, member(&colon)))
        }
        (Some(&ni), n) => {
            let name = &inner[ni];
            let colon = colon_of(name);
            // the separator this object uses: from the end of one member's value to the
            // next key (`,` and the line break and indentation, or `, `, or `,`)
            let sep = if ni + 1 < n {
                text[name.value_end..inner[ni + 1].key_start].to_string()
            } else if ni > 0 {
                text[inner[ni - 1].value_end..name.key_start].to_string()
            } else {
                format!(",{}", &text[meta.value_start + 1..name.key_start])
            };
            Ok((name.value_end, format!("{sep}{}", member(&colon))))
        }
        (None, n) => {
            // no name: first member, followed by the separator the object uses
            let first = &inner[0];
            let colon = colon_of(first);
            let sep = if n > 1 {
                text[first.value_end..inner[1].key_start].to_string()
            } else {
                format!(",{}", &text[meta.value_start + 1..first.key_start])
            };
            Ok((first.key_start, format!("{}{sep}", member(&colon))))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "0123456789abcdef0123456789abcdef";

    /// Manifests of every shape the edit takes: kubeadm's, commented, CRLF, document markers,
    /// flow-style metadata, no metadata, a name that is last, folded or absent, JSON pretty and
    /// compact.
    const EDITABLE: &[&str] = &[
        // kubeadm's etcd, abridged
        "apiVersion: v1\nkind: Pod\nmetadata:\n  annotations:\n    kubeadm.kubernetes.io/etcd.advertise-client-urls: https://10.0.0.1:2379\n  creationTimestamp: null\n  labels:\n    component: etcd\n    tier: control-plane\n  name: etcd\n  namespace: kube-system\nspec:\n  containers:\n  - command:\n    - etcd\n    image: registry.k8s.io/etcd:3.5.15-0\n    name: etcd\n  hostNetwork: true\nstatus: {}\n",
        // comments everywhere, four-space indentation, name first
        "# managed by hand\n---\napiVersion: v1   # the core group\nkind: Pod\nmetadata:\n    # the pod's name\n    name: web   # kept\n    namespace: default\nspec:\n    containers:\n        - name: c\n          image: busybox\n...\n",
        // CRLF line endings
        "apiVersion: v1\r\nkind: Pod\r\nmetadata:\r\n  name: crlf\r\n  labels:\r\n    a: b\r\nspec:\r\n  containers: []\r\n",
        // the name is the last line of the file, without a line break
        "apiVersion: v1\nkind: Pod\nspec:\n  containers: []\nmetadata:\n  namespace: x\n  name: last",
        // a name folded over two lines: the uid goes before it
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: >-\n    folded-name\n  namespace: kube-system\nspec: {}\n",
        // flow-style metadata
        "apiVersion: v1\nkind: Pod\nmetadata: {name: flow, namespace: kube-system}\nspec:\n  containers: []\n",
        "apiVersion: v1\nkind: Pod\nmetadata: {}\nspec: {}\n",
        // no metadata at all
        "apiVersion: v1\nkind: Pod\nspec:\n  containers: []\n",
        // no name in metadata
        "kind: Pod\nmetadata:\n  labels:\n    a: b\nspec: {}\n",
        // a quoted name, and a nested metadata in the spec that must stay untouched
        "kind: Pod\nmetadata:\n  name: \"quoted\"\nspec:\n  template:\n    metadata:\n      name: inner\n",
        // JSON, pretty
        "{\n  \"apiVersion\": \"v1\",\n  \"kind\": \"Pod\",\n  \"metadata\": {\n    \"name\": \"j\",\n    \"namespace\": \"kube-system\"\n  },\n  \"spec\": {}\n}\n",
        // JSON, compact, name last
        r#"{"apiVersion":"v1","kind":"Pod","metadata":{"namespace":"n","name":"j"},"spec":{"containers":[{"name":"c","image":"i"}]}}"#,
        // JSON, name only, odd spacing
        "{ \"kind\" : \"Pod\" , \"metadata\" : { \"name\" : \"j\" } }",
        // JSON without metadata, and with an empty one, and without a name
        "{\n    \"kind\": \"Pod\",\n    \"spec\": {}\n}",
        r#"{"kind":"Pod","metadata":{},"spec":{}}"#,
        r#"{"kind":"Pod","metadata":{"labels":{"name":"not-this"}},"spec":{}}"#,
        // JSON whose strings hold braces and escaped quotes
        r#"{"kind":"Pod","metadata":{"annotations":{"x":"{\"}\"]"},"name":"esc"},"spec":{}}"#,
    ];

    fn parsed_with_uid(bytes: &[u8], uid: &str) -> Value {
        let mut v: Value = serde_yaml::from_slice(bytes).unwrap();
        let top = v.as_mapping_mut().unwrap();
        let meta = top
            .entry(Value::from("metadata"))
            .or_insert_with(|| Value::Mapping(Default::default()));
        meta.as_mapping_mut()
            .unwrap()
            .insert(Value::from("uid"), Value::from(uid));
        v
    }

    #[test]
    fn pinning_equals_parsing_then_setting_the_uid_and_keeps_every_other_byte() {
        for src in EDITABLE {
            let Pin::Edit(e) = pin_uid(src.as_bytes(), UID)
                .unwrap_or_else(|e| panic!("every editable shape is pinned: {e}\n{src}"))
            else {
                panic!("an unpinned manifest is edited:\n{src}");
            };
            let after: Value = serde_yaml::from_slice(&e.bytes).unwrap();
            assert_eq!(
                after,
                parsed_with_uid(src.as_bytes(), UID),
                "pinning then parsing equals parsing then setting metadata.uid:\n{}",
                String::from_utf8_lossy(&e.bytes)
            );
            assert_eq!(
                [&e.bytes[..e.at], &e.bytes[e.at + e.inserted.len()..]].concat(),
                src.as_bytes(),
                "the bytes outside the insertion are the original's:\n{}",
                String::from_utf8_lossy(&e.bytes)
            );
            assert_eq!(
                &e.bytes[e.at..e.at + e.inserted.len()],
                &e.inserted[..],
                "the insertion is where it says"
            );
            if serde_json::from_str::<serde_json::Value>(src).is_ok() {
                let j: serde_json::Value = serde_json::from_slice(&e.bytes)
                    .unwrap_or_else(|err| panic!("a JSON manifest stays JSON: {err}"));
                assert_eq!(
                    j.pointer("/metadata/uid").and_then(|u| u.as_str()),
                    Some(UID),
                    "the JSON holds the uid"
                );
            } else {
                let ins = String::from_utf8(e.inserted.clone()).unwrap();
                assert_eq!(
                    ins.matches("uid:").count(),
                    1,
                    "one uid line (and in a manifest without metadata, its mapping): {ins:?}"
                );
            }
            assert_eq!(
                pin_uid(&e.bytes, UID),
                Ok(Pin::AlreadyPinned),
                "a pinned manifest is already pinned: a rerun writes nothing"
            );
        }
    }

    #[test]
    fn the_uid_line_follows_name_with_its_indentation_and_line_ending() {
        let Pin::Edit(e) = pin_uid(EDITABLE[1].as_bytes(), UID).unwrap() else {
            panic!("edited")
        };
        assert!(
            String::from_utf8(e.bytes)
                .unwrap()
                .contains(&format!("    name: web   # kept\n    uid: \"{UID}\"\n")),
            "after name:, with the metadata's four spaces"
        );
        let Pin::Edit(e) = pin_uid(EDITABLE[2].as_bytes(), UID).unwrap() else {
            panic!("edited")
        };
        assert_eq!(
            e.inserted,
            format!("  uid: \"{UID}\"\r\n").into_bytes(),
            "a CRLF file gets a CRLF line"
        );
        let Pin::Edit(e) = pin_uid(EDITABLE[10].as_bytes(), UID).unwrap() else {
            panic!("edited")
        };
        assert_eq!(
            e.inserted,
            format!(",\n    \"uid\": \"{UID}\"").into_bytes(),
            "a pretty JSON member after name, written like its neighbours"
        );
    }

    #[test]
    fn forms_the_minimal_edit_cannot_handle_are_refused() {
        let refused = [
            // a flow-style document
            "{apiVersion: v1, kind: Pod, metadata: {name: x}}\n",
            // tabs
            "kind: Pod\nmetadata:\n\tname: x\n",
            // a quoted metadata key
            "kind: Pod\n\"metadata\":\n  name: x\n",
            // an alias
            "kind: Pod\nx: &m {name: x}\nmetadata: *m\n",
            // content on the --- line
            "--- !!map\nkind: Pod\nmetadata:\n  name: x\n",
            // already pinned to another UID
            "kind: Pod\nmetadata:\n  name: x\n  uid: other\n",
            // not a manifest
            "kind: Pod\nmetadata: [\n",
        ];
        for src in refused {
            assert!(
                pin_uid(src.as_bytes(), UID).is_err(),
                "refused, never reserialized:\n{src}"
            );
        }
        assert!(
            pin_uid(EDITABLE[0].as_bytes(), "a\"b").is_err(),
            "a UID that is not the kubelet's form is refused"
        );
        assert!(
            pin_uid(EDITABLE[0].as_bytes(), "12e34").is_ok_and(|p| matches!(&p, Pin::Edit(e) if String::from_utf8_lossy(&e.inserted).contains("\"12e34\""))),
            "a UID YAML would read as a number is quoted"
        );
    }
}
