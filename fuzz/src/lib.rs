//! Reference models shared by the fuzz targets.

/// The spans `(start, end)` of the JSON string tokens of `json` (quotes included), scanning
/// from a position outside any string; an unterminated last token is left out.
pub fn string_tokens(json: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < json.len() {
        if json[i] != b'"' {
            i += 1;
            continue;
        }
        let start = i;
        i += 1;
        loop {
            match json.get(i) {
                None => return out,
                Some(b'"') => break,
                Some(b'\\') => i += 2,
                Some(_) => i += 1,
            }
        }
        i += 1;
        out.push((start, i));
    }
    out
}

/// The reference model of a byte-preserving value edit: `new` must equal `old` with, for
/// each `(old_value, new_value)` of `changes` (in any order of position), one JSON string
/// token of `old` that decodes to `old_value` replaced by the token `"new_value"`; every other
/// byte identical. `new_value`s never need escaping (kubelet hashes are lowercase hex).
pub fn is_token_replacement(old: &[u8], new: &[u8], changes: &[(String, String)]) -> bool {
    if changes.is_empty() {
        return old == new;
    }
    // The first replaced token starts at or before the first byte where the two differ.
    let p = old.iter().zip(new).take_while(|(a, b)| a == b).count();
    for (s, end) in string_tokens(old) {
        if s > p {
            break;
        }
        let raw = &old[s + 1..end - 1];
        let old_value: String = if raw.contains(&b'\\') {
            match serde_json::from_slice::<String>(&old[s..end]) {
                Ok(v) => v,
                Err(_) => continue,
            }
        } else {
            match std::str::from_utf8(raw) {
                Ok(v) => v.to_string(),
                Err(_) => continue,
            }
        };
        for (i, (ov, nv)) in changes.iter().enumerate() {
            if *ov != old_value {
                continue;
            }
            let tok = format!("\"{nv}\"");
            if new.len() >= s + tok.len() && &new[s..s + tok.len()] == tok.as_bytes() {
                let rest: Vec<(String, String)> = changes
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != i)
                    .map(|(_, c)| c.clone())
                    .collect();
                // the remaining edits lie after this one
                if is_token_replacement(&old[end..], &new[s + tok.len()..], &rest) {
                    return true;
                }
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(a: &str, b: &str) -> (String, String) {
        (a.to_string(), b.to_string())
    }

    #[test]
    fn token_replacement_model() {
        let old = br#"{"a":"x1","b":{"h":"abc","w":"abd"}}"#;
        let new = br#"{"a":"x1","b":{"h":"ff","w":"abd"}}"#;
        assert!(is_token_replacement(old, new, &[c("abc", "ff")]));
        assert!(!is_token_replacement(old, new, &[c("abd", "ff")]));
        let new2 = br#"{"a":"x1","b":{"h":"ff","w":"0"}}"#;
        assert!(is_token_replacement(
            old,
            new2,
            &[c("abd", "0"), c("abc", "ff")]
        ));
        assert!(!is_token_replacement(old, new2, &[c("abc", "ff")]));
        // same bytes but an extra change elsewhere
        let new3 = br#"{"a":"x2","b":{"h":"ff","w":"abd"}}"#;
        assert!(!is_token_replacement(old, new3, &[c("abc", "ff")]));
        // escaped old value
        let old4 = br#"{"h":"a\u0062c"}"#;
        assert!(is_token_replacement(
            old4,
            br#"{"h":"ff"}"#,
            &[c("abc", "ff")]
        ));
        // value equal to the new one: no byte changes
        assert!(is_token_replacement(old, old, &[c("abc", "abc")]));
    }
}
