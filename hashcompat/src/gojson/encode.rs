//! Go `encoding/json.Marshal` of a decoded container, streamed into a [`Sink`].
//!
//! Field order is struct declaration order (embedded structs flattened in place);
//! `omitempty` drops "", 0, false, nil pointers and nil *or empty* slices and maps, never
//! structs; nil pointers, slices and maps without `omitempty` are `null`; map keys are sorted
//! byte-wise; strings are escaped as `json.Marshal` does (HTML-safe: `<`, `>`, `&` as
//! `\u003c` …, U+2028/U+2029 escaped). `resource.Quantity` and `intstr.IntOrString` use their
//! own `MarshalJSON`.

use crate::schema::{Kind, Special, TypeId, TypeTree};
use crate::sink::Sink;
use crate::value::GoValue;

const HEX: &[u8; 16] = b"0123456789abcdef";

/// `true` for ASCII bytes `encodeState.string` writes as they are (Go's `htmlSafeSet`).
static HTML_SAFE: [bool; 128] = {
    let mut t = [false; 128];
    let mut i = 0x20;
    while i < 128 {
        t[i] = !matches!(i as u8, b'"' | b'\\' | b'<' | b'>' | b'&');
        i += 1;
    }
    t
};

/// Writes `s` as a JSON string literal with Go's escaping (escapeHTML on).
pub fn write_string<S: Sink + ?Sized>(out: &mut S, s: &str) {
    let b = s.as_bytes();
    out.put(b"\"");
    let mut start = 0;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c < 0x80 {
            if HTML_SAFE[c as usize] {
                i += 1;
                continue;
            }
            out.put(&b[start..i]);
            match c {
                b'\\' | b'"' => out.put(&[b'\\', c]),
                b'\n' => out.put(b"\\n"),
                b'\r' => out.put(b"\\r"),
                b'\t' => out.put(b"\\t"),
                _ => out.put(&[
                    b'\\',
                    b'u',
                    b'0',
                    b'0',
                    HEX[(c >> 4) as usize],
                    HEX[(c & 0xf) as usize],
                ]),
            }
            i += 1;
            start = i;
            continue;
        }
        // U+2028 and U+2029 (E2 80 A8 / E2 80 A9) are escaped for JSONP safety.
        if c == 0xE2
            && i + 2 < b.len()
            && b[i + 1] == 0x80
            && (b[i + 2] == 0xA8 || b[i + 2] == 0xA9)
        {
            out.put(&b[start..i]);
            out.put(if b[i + 2] == 0xA8 {
                b"\\u2028"
            } else {
                b"\\u2029"
            });
            i += 3;
            start = i;
            continue;
        }
        // Other non-ASCII is written raw; Rust strings are valid UTF-8, as Go's decoded ones are.
        i += 1;
    }
    out.put(&b[start..]);
    out.put(b"\"");
}

fn write_int<S: Sink + ?Sized>(out: &mut S, n: i64) {
    let mut buf = itoa_buf();
    out.put(fmt_i64(&mut buf, n));
}

fn write_uint<S: Sink + ?Sized>(out: &mut S, n: u64) {
    let mut buf = itoa_buf();
    out.put(fmt_u64(&mut buf, n));
}

pub(crate) fn itoa_buf() -> [u8; 20] {
    [0u8; 20]
}

pub(crate) fn fmt_u64(buf: &mut [u8; 20], mut n: u64) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[i..]
}

pub(crate) fn fmt_i64(buf: &mut [u8; 20], n: i64) -> &[u8] {
    if n >= 0 {
        return fmt_u64(buf, n as u64);
    }
    // i64::MIN's magnitude needs 19 digits plus the sign: 20 bytes.
    let digits = fmt_u64(buf, n.unsigned_abs()).len();
    let start = buf.len() - digits - 1;
    buf[start] = b'-';
    &buf[start..]
}

fn is_empty(v: &GoValue) -> bool {
    match v {
        GoValue::Str(s) => s.is_empty(),
        GoValue::Bool(b) => !b,
        GoValue::Int(n) => *n == 0,
        GoValue::Uint(n) => *n == 0,
        GoValue::Ptr(p) => p.is_none(),
        GoValue::Slice(s) => s.as_ref().is_none_or(|s| s.is_empty()),
        GoValue::Map(m) => m.as_ref().is_none_or(|m| m.is_empty()),
        GoValue::Struct(_) | GoValue::Quantity(_) => false,
    }
}

/// Writes the JSON encoding of `v` (of type `ty`).
pub fn write_value<S: Sink + ?Sized>(out: &mut S, tree: &TypeTree, ty: TypeId, v: &GoValue) {
    let t = tree.ty(ty);
    match t.special {
        Special::Quantity => {
            if let GoValue::Quantity(q) = v {
                write_string(out, &q.0.marshal_json_text());
                return;
            }
        }
        Special::IntOrString => {
            if let GoValue::Struct(fields) = v {
                let get = |n: &str| tree.field_index(ty, n).map(|i| &fields[i]);
                match get("Type") {
                    Some(GoValue::Int(1)) => {
                        if let Some(GoValue::Str(s)) = get("StrVal") {
                            write_string(out, s);
                        }
                    }
                    _ => {
                        if let Some(GoValue::Int(n)) = get("IntVal") {
                            write_int(out, *n);
                        }
                    }
                }
                return;
            }
        }
        Special::None => {}
    }
    match (&t.kind, v) {
        (_, GoValue::Str(s)) => write_string(out, s),
        (_, GoValue::Bool(b)) => out.put(if *b { b"true" } else { b"false" }),
        (_, GoValue::Int(n)) => write_int(out, *n),
        (_, GoValue::Uint(n)) => write_uint(out, *n),
        (Kind::Ptr(_), GoValue::Ptr(None))
        | (Kind::Slice(_), GoValue::Slice(None))
        | (Kind::Map { .. }, GoValue::Map(None)) => out.put(b"null"),
        (Kind::Ptr(elem), GoValue::Ptr(Some(inner))) => write_value(out, tree, *elem, inner),
        (Kind::Slice(elem), GoValue::Slice(Some(items))) => {
            out.put(b"[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.put(b",");
                }
                write_value(out, tree, *elem, item);
            }
            out.put(b"]");
        }
        (Kind::Map { elem, .. }, GoValue::Map(Some(entries))) => {
            out.put(b"{");
            for (i, (k, item)) in entries.iter().enumerate() {
                if i > 0 {
                    out.put(b",");
                }
                write_string(out, k);
                out.put(b":");
                write_value(out, tree, *elem, item);
            }
            out.put(b"}");
        }
        (Kind::Struct(_), GoValue::Struct(_)) => write_struct(out, tree, ty, v, None),
        _ => unreachable!("decoded values always match their type"),
    }
}

/// Writes the JSON encoding of the struct `v` (of struct type `ty`) as if its field number
/// `field` held `replacement`, without copying `v`. This is how `HashContainerWithoutResources`
/// (1.27–1.30) is hashed: the container with `Resources` emptied.
pub fn write_struct_replacing<S: Sink + ?Sized>(
    out: &mut S,
    tree: &TypeTree,
    ty: TypeId,
    v: &GoValue,
    field: usize,
    replacement: &GoValue,
) {
    write_struct(out, tree, ty, v, Some((field, replacement)))
}

fn write_struct<S: Sink + ?Sized>(
    out: &mut S,
    tree: &TypeTree,
    ty: TypeId,
    v: &GoValue,
    replace: Option<(usize, &GoValue)>,
) {
    let GoValue::Struct(top) = v else {
        unreachable!("decoded values always match their type")
    };
    out.put(b"{");
    let mut first = true;
    for f in &tree.ty(ty).json_fields {
        let (&head, rest) = f
            .path
            .split_first()
            .expect("a json field path is never empty");
        let mut fv = match replace {
            Some((i, r)) if i == head => r,
            _ => &top[head],
        };
        for &i in rest {
            let GoValue::Struct(fs) = fv else {
                unreachable!("json field paths run through structs only")
            };
            fv = &fs[i];
        }
        if f.omitempty && is_empty(fv) {
            continue;
        }
        if !first {
            out.put(b",");
        }
        first = false;
        out.put(&f.encoded_key);
        write_value(out, tree, f.ty, fv);
    }
    out.put(b"}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(s: &str) -> String {
        let mut v = Vec::new();
        write_string(&mut v, s);
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn escapes_like_go() {
        assert_eq!(enc("a<b>&c"), r#""a\u003cb\u003e\u0026c""#);
        assert_eq!(enc("q\"\\"), r#""q\"\\""#);
        assert_eq!(
            enc("\n\r\t\u{1}\u{8}\u{c}"),
            r#""\n\r\t\u0001\u0008\u000c""#
        );
        assert_eq!(enc("\u{7f}é\u{2028}\u{2029}"), "\"\u{7f}é\\u2028\\u2029\"");
    }

    #[test]
    fn integers() {
        let mut b = itoa_buf();
        assert_eq!(fmt_i64(&mut b, i64::MIN), b"-9223372036854775808");
        let mut b = itoa_buf();
        assert_eq!(fmt_i64(&mut b, -7), b"-7");
        let mut b = itoa_buf();
        assert_eq!(fmt_u64(&mut b, u64::MAX), b"18446744073709551615");
    }
}
