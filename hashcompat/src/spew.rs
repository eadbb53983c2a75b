//! go-spew's `%#v` formatter (ConfigState with `DisableMethods`, `SortKeys`), as the kubelet's
//! `DeepHashObject` prints a `v1.Container` value in 1.8–1.15.
//!
//! The rules, from go-spew `format.go`: a value carries its `(type)` prefix unless it is a slice
//! element, a map key or a map value; a pointer always prints `(*T)` and then its pointee
//! without a second prefix, or `<nil>`; a struct is `{Name:value Name:value}` in declaration
//! order, unexported fields included; slices `[a b]`, nil slices and maps `<nil>`, maps
//! `map[k:v]` with sorted keys; strings raw, with no quotes or escaping.

use crate::gojson::encode::{fmt_i64, fmt_u64, itoa_buf};
use crate::schema::{Kind, TypeId, TypeTree};
use crate::sink::Sink;
use crate::value::GoValue;

/// Writes `%#v` of a top-level value (with its type prefix).
pub fn write_top<S: Sink + ?Sized>(out: &mut S, tree: &TypeTree, ty: TypeId, v: &GoValue) {
    write(out, tree, ty, v, true);
}

fn write<S: Sink + ?Sized>(out: &mut S, tree: &TypeTree, ty: TypeId, v: &GoValue, prefix: bool) {
    let t = tree.ty(ty);
    if let (Kind::Ptr(elem), GoValue::Ptr(p)) = (&t.kind, v) {
        // formatPtr prints the pointer type even where a plain value's prefix is suppressed.
        out.put(&t.spew_prefix);
        match p {
            None => out.put(b"<nil>"),
            Some(inner) => write(out, tree, *elem, inner, false),
        }
        return;
    }
    if prefix {
        out.put(&t.spew_prefix);
    }
    match (&t.kind, v) {
        (_, GoValue::Str(s)) => out.put(s.as_bytes()),
        (_, GoValue::Bool(b)) => out.put(if *b { b"true" } else { b"false" }),
        (_, GoValue::Int(n)) => {
            let mut buf = itoa_buf();
            out.put(fmt_i64(&mut buf, *n));
        }
        (_, GoValue::Uint(n)) => {
            let mut buf = itoa_buf();
            out.put(fmt_u64(&mut buf, *n));
        }
        (Kind::Slice(_), GoValue::Slice(None)) | (Kind::Map { .. }, GoValue::Map(None)) => {
            out.put(b"<nil>")
        }
        (Kind::Slice(elem), GoValue::Slice(Some(items))) => {
            out.put(b"[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.put(b" ");
                }
                write(out, tree, *elem, item, false);
            }
            out.put(b"]");
        }
        (Kind::Map { elem, .. }, GoValue::Map(Some(entries))) => {
            out.put(b"map[");
            for (i, (k, item)) in entries.iter().enumerate() {
                if i > 0 {
                    out.put(b" ");
                }
                // Keys are string kinds (checked when decoding): printed raw, no prefix.
                out.put(k.as_bytes());
                out.put(b":");
                write(out, tree, *elem, item, false);
            }
            out.put(b"]");
        }
        (Kind::Struct(fields), GoValue::Struct(vals)) => write_struct(out, tree, fields, vals),
        (Kind::Struct(fields), GoValue::Quantity(q)) => {
            let GoValue::Struct(vals) = &q.1 else {
                unreachable!("a quantity's struct form is a struct")
            };
            write_struct(out, tree, fields, vals)
        }
        _ => unreachable!("decoded values always match their type"),
    }
}

fn write_struct<S: Sink + ?Sized>(
    out: &mut S,
    tree: &TypeTree,
    fields: &[crate::schema::Field],
    vals: &[GoValue],
) {
    out.put(b"{");
    for (i, (f, fv)) in fields.iter().zip(vals).enumerate() {
        if i > 0 {
            out.put(b" ");
        }
        out.put(&f.spew_label);
        write(out, tree, f.ty, fv, true);
    }
    out.put(b"}");
}
