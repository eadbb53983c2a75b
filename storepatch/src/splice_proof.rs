//! The proof of a hash edit at the byte level, instead of parsing the edited document again and
//! comparing trees: outside the spliced spans the new bytes are the old bytes, in order; each
//! spliced span of the new bytes is a JSON string of the hash form (lowercase hex, as the kubelet
//! prints a hash); each replaced span of the old bytes is a JSON string holding exactly the value
//! the parser read for that key. Together with the scanner that found the spans (which takes a
//! span only from a document it fully understood, see [`crate::jsonspan`]), that proves the new
//! document is the old one with only those values changed, at the cost of a byte compare.

use crate::jsonspan::Span;

/// One splice to prove: the span of the old string token, the value the parser read there, and
/// the value written instead.
#[derive(Debug, Clone)]
pub struct Spliced<'a> {
    /// The old token, quotes included.
    pub span: Span,
    /// What the parser decoded from it.
    pub old: &'a str,
    /// The value that replaces it (written as a plain JSON string).
    pub new: &'a str,
}

/// A kubelet hash as stored: `strconv.FormatUint(hash, 16)` of a 32- or 64-bit hash.
pub fn is_hash_form(v: &str) -> bool {
    (1..=16).contains(&v.len())
        && v.bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
}

/// Proves that `new` is `old` with exactly `splices` applied (see the module docs); the error
/// says what differs.
pub fn prove(old: &[u8], new: &[u8], splices: &[Spliced<'_>]) -> Result<(), String> {
    let mut sorted: Vec<&Spliced> = splices.iter().collect();
    sorted.sort_by_key(|s| s.span.start);
    let (mut at, mut nat) = (0usize, 0usize);
    for s in sorted {
        if s.span.start < at || s.span.end > old.len() || s.span.start >= s.span.end {
            return Err(format!("splice span {:?} overlaps or lies outside", s.span));
        }
        let keep = &old[at..s.span.start];
        if !new
            .get(nat..nat + keep.len())
            .is_some_and(|n| crate::bytes::equal(n, keep))
        {
            return Err(format!("the bytes before offset {} differ", s.span.start));
        }
        nat += keep.len();
        let was: String = serde_json::from_slice(&old[s.span.clone()]).map_err(|e| {
            format!(
                "the replaced bytes at {:?} are not a JSON string: {e}",
                s.span
            )
        })?;
        if was != s.old {
            return Err(format!(
                "the replaced string at {:?} is {was:?}, the parser read {:?}",
                s.span, s.old
            ));
        }
        if !is_hash_form(s.new) {
            return Err(format!("{:?} is not a hash", s.new));
        }
        let token_len = s.new.len() + 2;
        let token = new
            .get(nat..nat + token_len)
            .ok_or("the new bytes end inside a spliced value")?;
        if token[0] != b'"'
            || token[token_len - 1] != b'"'
            || &token[1..token_len - 1] != s.new.as_bytes()
        {
            return Err(format!(
                "the spliced value at {nat} is not the JSON string {:?}",
                s.new
            ));
        }
        nat += token_len;
        at = s.span.end;
    }
    if !new
        .get(nat..)
        .is_some_and(|n| crate::bytes::equal(n, &old[at..]))
    {
        return Err(format!("the bytes after offset {at} differ"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn splice(old: &str, key_value: &str, new: &str) -> (Vec<u8>, Spliced<'static>) {
        let start = old.find(key_value).unwrap();
        let span = start..start + key_value.len();
        let mut out = old.as_bytes()[..span.start].to_vec();
        out.extend_from_slice(format!("\"{new}\"").as_bytes());
        out.extend_from_slice(&old.as_bytes()[span.end..]);
        let old_v: &'static str = Box::leak(
            serde_json::from_str::<String>(key_value)
                .unwrap()
                .into_boxed_str(),
        );
        let new_v: &'static str = Box::leak(new.to_string().into_boxed_str());
        (
            out,
            Spliced {
                span,
                old: old_v,
                new: new_v,
            },
        )
    }

    const DOC: &str = r#"{"a":"x","hash":"1c7a8f33","z":[1,2]}"#;

    #[test]
    fn an_exact_splice_is_proven() {
        let (new, s) = splice(DOC, "\"1c7a8f33\"", "deadbeef");
        prove(DOC.as_bytes(), &new, &[s]).unwrap();
    }

    #[test]
    fn any_other_difference_is_refused() {
        let (mut new, s) = splice(DOC, "\"1c7a8f33\"", "deadbeef");
        let last = new.len() - 2;
        new[last] = b'3';
        assert!(prove(DOC.as_bytes(), &new, std::slice::from_ref(&s))
            .unwrap_err()
            .contains("after"));
        let (mut new, _) = splice(DOC, "\"1c7a8f33\"", "deadbeef");
        new[1] = b'b';
        assert!(prove(DOC.as_bytes(), &new, std::slice::from_ref(&s))
            .unwrap_err()
            .contains("before"));
        let (new, _) = splice(DOC, "\"1c7a8f33\"", "deadbeef");
        let mut wrong = s.clone();
        wrong.old = "other";
        assert!(prove(DOC.as_bytes(), &new, &[wrong])
            .unwrap_err()
            .contains("parser read"));
        let (new, s) = splice(DOC, "\"1c7a8f33\"", "DEADBEEF");
        assert!(prove(DOC.as_bytes(), &new, &[s])
            .unwrap_err()
            .contains("not a hash"));
        let (new, mut s) = splice(DOC, "\"1c7a8f33\"", "deadbeef");
        s.new = "deadbeee";
        assert!(prove(DOC.as_bytes(), &new, &[s]).is_err());
        let (new, mut s) = splice(DOC, "\"1c7a8f33\"", "deadbeef");
        s.span = 5..8;
        assert!(
            prove(DOC.as_bytes(), &new, &[s]).is_err(),
            "a span that is not a string token"
        );
    }
}
