//! A decoded `v1.Container` as Go holds it in memory, and the decoder that builds it the way
//! `encoding/json.Unmarshal` does, driven by one version's [`TypeTree`].
//!
//! Go semantics that decide bytes and are kept here: unknown keys dropped; exact key match
//! first, then the first case-insensitive one (with Go's K/ſ folding); duplicate keys decoded
//! in order into the same value (pointers and maps are reused, so objects merge); `null` leaves
//! non-pointer values alone and nils pointers, slices and maps; `[]` gives an empty non-nil
//! slice; quantities and IntOrString go through their own `UnmarshalJSON`. A type mismatch is an
//! error naming the field: such a spec cannot have come from an API server.

use crate::gojson::parse::{Node, NodeValue};
use crate::quantity::Quantity;
use crate::schema::{IntKind, Kind, Special, TypeId, TypeTree};
use std::borrow::Cow;
use std::fmt;

/// A Go value of the container tree. Nil and empty stay apart (`None` vs `Some(vec![])`)
/// because go-spew prints `<nil>` for one and `[]`/`map[]` for the other.
#[derive(Debug, Clone, PartialEq)]
pub enum GoValue<'a> {
    /// A string, or a named string type: borrowed from the parsed spec where its JSON
    /// string needed no decoding (a decode per version per container, on rayon's threads:
    /// an allocation per string field was most of the hashing's).
    Str(Cow<'a, str>),
    /// A bool.
    Bool(bool),
    /// A signed integer of any width.
    Int(i64),
    /// An unsigned integer of any width.
    Uint(u64),
    /// A pointer; `None` is nil.
    Ptr(Option<Box<GoValue<'a>>>),
    /// A slice; `None` is nil.
    Slice(Option<Vec<GoValue<'a>>>),
    /// Entries sorted by key bytes (Go map iteration order does not matter: both emitters
    /// sort keys).
    Map(Option<Vec<(Cow<'a, str>, GoValue<'a>)>>),
    /// Field values in declaration order.
    Struct(Vec<GoValue<'a>>),
    /// A `resource.Quantity`: the parsed value (for `MarshalJSON`) and its struct form as
    /// go-spew walks it.
    Quantity(Box<(Quantity, GoValue<'a>)>),
}

/// Why a container spec cannot be decoded by the kubelet of a version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct DecodeError {
    /// JSON path of the offending value, e.g. `resources.limits.cpu`.
    pub path: String,
    /// encoding/json's complaint about it.
    pub msg: String,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.msg)
        } else {
            write!(f, "field {}: {}", self.path, self.msg)
        }
    }
}

/// The zero value of a type.
pub fn zero(tree: &TypeTree, ty: TypeId) -> GoValue<'static> {
    let t = tree.ty(ty);
    if t.special == Special::Quantity {
        let q = Quantity::zero();
        let s = quantity_struct(tree, ty, &q);
        return GoValue::Quantity(Box::new((q, s)));
    }
    match &t.kind {
        Kind::String => GoValue::Str(Cow::Borrowed("")),
        Kind::Bool => GoValue::Bool(false),
        Kind::Int(IntKind::Signed(_)) => GoValue::Int(0),
        Kind::Int(IntKind::Unsigned(_)) => GoValue::Uint(0),
        Kind::Ptr(_) => GoValue::Ptr(None),
        Kind::Slice(_) => GoValue::Slice(None),
        Kind::Map { .. } => GoValue::Map(None),
        Kind::Struct(fields) => GoValue::Struct(fields.iter().map(|f| zero(tree, f.ty)).collect()),
    }
}

/// Decodes `node` into a fresh value of the tree's root type (`v1.Container`).
pub fn decode_container<'a>(tree: &TypeTree, node: &Node<'a>) -> Result<GoValue<'a>, DecodeError> {
    let mut v = zero(tree, tree.root);
    let mut path = Vec::new();
    decode_into(tree, tree.root, &mut v, node, &mut path)?;
    Ok(v)
}

/// One step of the JSON path to the value being decoded, kept for error messages only: a
/// borrowed name or an index, so the decode allocates nothing per field for it.
#[derive(Clone, Copy)]
enum PathStep<'p> {
    Name(&'p str),
    Index(usize),
}

fn path_string(path: &[PathStep<'_>]) -> String {
    let mut out = String::new();
    for (i, step) in path.iter().enumerate() {
        if i > 0 {
            out.push('.');
        }
        match step {
            PathStep::Name(n) => out.push_str(n),
            PathStep::Index(n) => out.push_str(&n.to_string()),
        }
    }
    out
}

fn type_err(path: &[PathStep<'_>], node: &Node<'_>, go_type: &str) -> DecodeError {
    DecodeError {
        path: path_string(path),
        msg: format!(
            "cannot unmarshal {} into Go value of type {go_type}",
            node.kind_name()
        ),
    }
}

/// Go's case-insensitive field-name match (`foldFunc` of encoding/json): ASCII letters match
/// either case, `k` also matches U+212A KELVIN SIGN and `s` U+017F LATIN SMALL LETTER LONG S;
/// everything else must be equal.
fn fold_eq(name: &str, key: &str) -> bool {
    let mut kc = key.chars();
    for nb in name.bytes() {
        let Some(c) = kc.next() else { return false };
        let ok = if nb.is_ascii_alphabetic() {
            (c.is_ascii() && (c as u8).eq_ignore_ascii_case(&nb))
                || (nb.eq_ignore_ascii_case(&b'k') && c == '\u{212A}')
                || (nb.eq_ignore_ascii_case(&b's') && c == '\u{017F}')
        } else {
            c as u32 == nb as u32
        };
        if !ok {
            return false;
        }
    }
    kc.next().is_none()
}

fn parse_go_int(lit: &str, bits: u8) -> Option<i64> {
    // strconv.ParseInt(s, 10, 64) accepts only an optional sign and digits.
    let v: i64 = lit.parse().ok()?;
    if lit.contains(['.', 'e', 'E']) {
        return None;
    }
    let (min, max) = match bits {
        8 => (i8::MIN as i64, i8::MAX as i64),
        16 => (i16::MIN as i64, i16::MAX as i64),
        32 => (i32::MIN as i64, i32::MAX as i64),
        _ => (i64::MIN, i64::MAX),
    };
    (min..=max).contains(&v).then_some(v)
}

fn parse_go_uint(lit: &str, bits: u8) -> Option<u64> {
    if lit.starts_with(['-', '+']) || lit.contains(['.', 'e', 'E']) {
        return None;
    }
    let v: u64 = lit.parse().ok()?;
    let max = if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    (v <= max).then_some(v)
}

fn decode_into<'a, 'p>(
    tree: &'p TypeTree,
    ty: TypeId,
    v: &mut GoValue<'a>,
    node: &'p Node<'a>,
    path: &mut Vec<PathStep<'p>>,
) -> Result<(), DecodeError> {
    let t = tree.ty(ty);
    match t.special {
        Special::Quantity => return decode_quantity(tree, ty, v, node, path),
        Special::IntOrString => return decode_int_or_string(tree, ty, v, node, path),
        Special::None => {}
    }
    match (&t.kind, &node.value) {
        // A literal null is a no-op for values and sets pointers, slices and maps to nil.
        (Kind::Ptr(_), NodeValue::Null) => *v = GoValue::Ptr(None),
        (Kind::Slice(_), NodeValue::Null) => *v = GoValue::Slice(None),
        (Kind::Map { .. }, NodeValue::Null) => *v = GoValue::Map(None),
        (_, NodeValue::Null) => {}
        (Kind::Ptr(elem), _) => {
            if !matches!(v, GoValue::Ptr(Some(_))) {
                *v = GoValue::Ptr(Some(Box::new(zero(tree, *elem))));
            }
            if let GoValue::Ptr(Some(inner)) = v {
                decode_into(tree, *elem, inner, node, path)?;
            }
        }
        (Kind::String, NodeValue::String(s)) => *v = GoValue::Str(s.clone()),
        (Kind::Bool, NodeValue::Bool(b)) => *v = GoValue::Bool(*b),
        (Kind::Int(IntKind::Signed(bits)), NodeValue::Number(lit)) => {
            let n = parse_go_int(lit, *bits).ok_or_else(|| DecodeError {
                path: path_string(path),
                msg: format!(
                    "cannot unmarshal number {lit} into Go value of type {}",
                    t.name
                ),
            })?;
            *v = GoValue::Int(n);
        }
        (Kind::Int(IntKind::Unsigned(bits)), NodeValue::Number(lit)) => {
            let n = parse_go_uint(lit, *bits).ok_or_else(|| DecodeError {
                path: path_string(path),
                msg: format!(
                    "cannot unmarshal number {lit} into Go value of type {}",
                    t.name
                ),
            })?;
            *v = GoValue::Uint(n);
        }
        (Kind::Slice(elem), NodeValue::Array(items)) => {
            // Go reuses the elements it already has (duplicate keys) and truncates the rest.
            let mut old = match std::mem::replace(v, GoValue::Slice(None)) {
                GoValue::Slice(Some(old)) => old,
                _ => Vec::new(),
            };
            old.truncate(items.len());
            let mut out = Vec::with_capacity(items.len());
            let mut old_iter = old.into_iter();
            for (i, item) in items.iter().enumerate() {
                let mut e = old_iter.next().unwrap_or_else(|| zero(tree, *elem));
                path.push(PathStep::Index(i));
                let r = decode_into(tree, *elem, &mut e, item, path);
                path.pop();
                r?;
                out.push(e);
            }
            *v = GoValue::Slice(Some(out));
        }
        (Kind::Map { key, elem }, NodeValue::Object(members)) => {
            if !matches!(tree.ty(*key).kind, Kind::String) {
                return Err(DecodeError {
                    path: path_string(path),
                    msg: format!("map key type {} is not supported", tree.ty(*key).name),
                });
            }
            let mut map = match std::mem::replace(v, GoValue::Map(None)) {
                GoValue::Map(Some(m)) => m,
                _ => Vec::new(),
            };
            for (k, item) in members {
                // Each entry is decoded into a fresh zero element, then stored (replacing).
                let mut e = zero(tree, *elem);
                path.push(PathStep::Name(k));
                let r = decode_into(tree, *elem, &mut e, item, path);
                path.pop();
                r?;
                match map.binary_search_by(|(mk, _)| mk.as_ref().cmp(k.as_ref())) {
                    Ok(i) => map[i].1 = e,
                    Err(i) => map.insert(i, (k.clone(), e)),
                }
            }
            *v = GoValue::Map(Some(map));
        }
        (Kind::Struct(_), NodeValue::Object(members)) => {
            for (k, item) in members {
                let fields = &t.json_fields;
                let found = fields
                    .iter()
                    .find(|f| f.name == *k)
                    .or_else(|| fields.iter().find(|f| fold_eq(&f.name, k)));
                let Some(f) = found else { continue };
                let mut slot = &mut *v;
                for &i in &f.path {
                    let GoValue::Struct(fs) = slot else {
                        unreachable!("json field paths run through structs only")
                    };
                    slot = &mut fs[i];
                }
                path.push(PathStep::Name(&f.name));
                let r = decode_into(tree, f.ty, slot, item, path);
                path.pop();
                r?;
            }
        }
        _ => return Err(type_err(path, node, &t.name)),
    }
    Ok(())
}

fn decode_quantity<'a>(
    tree: &TypeTree,
    ty: TypeId,
    v: &mut GoValue<'a>,
    node: &Node<'a>,
    path: &[PathStep<'_>],
) -> Result<(), DecodeError> {
    let q = if matches!(node.value, NodeValue::Null) {
        // UnmarshalJSON("null") zeroes the amounts but leaves the cached string and Format.
        let mut q = match v {
            GoValue::Quantity(b) => b.0.clone(),
            _ => Quantity::zero(),
        };
        let z = Quantity::zero();
        q.i_value = z.i_value;
        q.i_scale = z.i_scale;
        q.d = None;
        q
    } else {
        Quantity::from_json_token(node.raw).map_err(|e| DecodeError {
            path: path_string(path),
            msg: format!(
                "quantity {} does not parse: {e}",
                String::from_utf8_lossy(node.raw)
            ),
        })?
    };
    let s = quantity_struct(tree, ty, &q);
    *v = GoValue::Quantity(Box::new((q, s)));
    Ok(())
}

fn decode_int_or_string<'a>(
    tree: &TypeTree,
    ty: TypeId,
    v: &mut GoValue<'a>,
    node: &Node<'a>,
    path: &[PathStep<'_>],
) -> Result<(), DecodeError> {
    let ti = tree
        .field_index(ty, "Type")
        .expect("checked at schema load");
    let ii = tree
        .field_index(ty, "IntVal")
        .expect("checked at schema load");
    let si = tree
        .field_index(ty, "StrVal")
        .expect("checked at schema load");
    let GoValue::Struct(fields) = v else {
        unreachable!("IntOrString is a struct")
    };
    // UnmarshalJSON: a leading quote means String, anything else is json.Unmarshal into IntVal.
    if node.raw.first() == Some(&b'"') {
        fields[ti] = GoValue::Int(1);
        if let NodeValue::String(s) = &node.value {
            fields[si] = GoValue::Str(s.clone());
        }
        return Ok(());
    }
    fields[ti] = GoValue::Int(0);
    match &node.value {
        NodeValue::Null => Ok(()),
        NodeValue::Number(lit) => {
            let n = parse_go_int(lit, 32).ok_or_else(|| DecodeError {
                path: path_string(path),
                msg: format!("cannot unmarshal number {lit} into Go value of type int32"),
            })?;
            fields[ii] = GoValue::Int(n);
            Ok(())
        }
        _ => Err(DecodeError {
            path: path_string(path),
            msg: format!(
                "cannot unmarshal {} into Go value of type int32",
                node.kind_name()
            ),
        }),
    }
}

/// The struct form of a quantity as go-spew walks it: `{i:{value scale} d:{Dec:*inf.Dec} s
/// Format}` with `inf.Dec{unscaled:big.Int{neg abs} scale}`. Fields are matched by name
/// against the schema (checked at load), so the printed layout always follows the schema.
fn quantity_struct(tree: &TypeTree, ty: TypeId, q: &Quantity) -> GoValue<'static> {
    let Kind::Struct(fields) = &tree.ty(ty).kind else {
        unreachable!("resource.Quantity is a struct")
    };
    let vals = fields
        .iter()
        .map(|f| match f.name.as_str() {
            "i" => by_names(
                tree,
                f.ty,
                &[
                    ("value", GoValue::Int(q.i_value)),
                    ("scale", GoValue::Int(q.i_scale as i64)),
                ],
            ),
            "d" => {
                let dec_field = match &tree.ty(f.ty).kind {
                    Kind::Struct(df) => df.first().map(|d| d.ty),
                    _ => None,
                };
                let ptr = match (&q.d, dec_field) {
                    (Some(d), Some(pty)) => {
                        let Kind::Ptr(dec_ty) = tree.ty(pty).kind else {
                            unreachable!("infDecAmount.Dec is *inf.Dec")
                        };
                        let int_ty = match &tree.ty(dec_ty).kind {
                            Kind::Struct(fs) => {
                                fs.iter().find(|x| x.name == "unscaled").map(|x| x.ty)
                            }
                            _ => None,
                        };
                        let unscaled = int_ty.map(|it| {
                            by_names(
                                tree,
                                it,
                                &[
                                    ("neg", GoValue::Bool(d.neg)),
                                    (
                                        "abs",
                                        GoValue::Slice(if d.abs.is_empty() {
                                            None
                                        } else {
                                            Some(d.abs.iter().map(|w| GoValue::Uint(*w)).collect())
                                        }),
                                    ),
                                ],
                            )
                        });
                        let mut dec =
                            by_names(tree, dec_ty, &[("scale", GoValue::Int(d.scale as i64))]);
                        if let (Some(u), GoValue::Struct(fs), Some(i)) =
                            (unscaled, &mut dec, tree.field_index(dec_ty, "unscaled"))
                        {
                            fs[i] = u;
                        }
                        GoValue::Ptr(Some(Box::new(dec)))
                    }
                    _ => GoValue::Ptr(None),
                };
                by_names(tree, f.ty, &[("Dec", ptr)])
            }
            "s" => GoValue::Str(Cow::Owned(q.s.clone())),
            "Format" => GoValue::Str(Cow::Borrowed(q.format.as_go_str())),
            _ => zero(tree, f.ty),
        })
        .collect();
    GoValue::Struct(vals)
}

/// A struct value of type `ty` with the named fields set and the others zero.
fn by_names(tree: &TypeTree, ty: TypeId, vals: &[(&str, GoValue<'static>)]) -> GoValue<'static> {
    let mut v = zero(tree, ty);
    if let GoValue::Struct(fs) = &mut v {
        for (name, val) in vals {
            if let Some(i) = tree.field_index(ty, name) {
                fs[i] = val.clone();
            }
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decode_error_names_the_json_path_of_the_value() {
        let v: crate::KubeletVersion = "1.31".parse().unwrap();
        let error_of =
            |json: &str| match crate::decode(&crate::parse_json(json.as_bytes()).unwrap(), v) {
                Err(crate::SpecError::Decode { error, .. }) => error,
                other => panic!("{json}: expected a decode error, got {other:?}"),
            };
        assert_eq!(
            error_of(r#"{"name":"a","ports":[{"containerPort":80},{"containerPort":"x"}]}"#).path,
            "ports.1.containerPort",
            "array elements are named by their index"
        );
        assert_eq!(
            error_of(r#"{"name":"a","resources":{"limits":{"cpu":true}}}"#).path,
            "resources.limits.cpu",
            "map entries are named by their key"
        );
        assert_eq!(
            error_of(r#"{"NAME":7}"#).to_string(),
            "field name: cannot unmarshal number into Go value of type string",
            "a field matched case-insensitively is named as the type declares it"
        );
    }

    #[test]
    fn fold_matches_go() {
        assert!(fold_eq("name", "NAME"));
        assert!(fold_eq("stdinOnce", "STDINONCE"));
        assert!(
            fold_eq("stdinOnce", "\u{017F}tdinOnce"),
            "long s folds to s"
        );
        assert!(
            fold_eq("workingDir", "wor\u{212A}ingDir"),
            "Kelvin sign folds to k"
        );
        assert!(!fold_eq("name", "nam"));
        assert!(!fold_eq("name", "namé"));
    }
}
