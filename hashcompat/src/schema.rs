//! Versioned `v1.Container` type trees, loaded from the embedded `schemas/<version>.json` files
//! (the real trees as Go reflection sees them: field order, Go type names, json tags).
//!
//! Everything the emitters print about a type comes from here: spew's `(type)` prefixes and
//! `Field:` labels, encoding/json's field names, order, `omitempty` and promotion of embedded
//! structs. Versions whose trees are identical share one [`TypeTree`].

use serde::Deserialize;
use std::collections::HashMap;
use std::sync::OnceLock;

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/schemas.rs"));
}

/// Index of a type in [`TypeTree::types`].
pub type TypeId = usize;

/// A Go integer type by signedness and width: encoding/json refuses a number outside the
/// field's range, and that refusal decides whether a kubelet could decode a spec at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntKind {
    /// `int8` … `int64` (`int` is 64 bits on the platforms kubelets run on).
    Signed(u8),
    /// `uint8` … `uint64`.
    Unsigned(u8),
}

/// Types whose JSON (un)marshalling is custom code in apimachinery, not reflection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Special {
    /// Reflection decides the JSON form.
    None,
    /// `resource.Quantity`: `UnmarshalJSON` parses the raw token, `MarshalJSON` writes a string.
    Quantity,
    /// `intstr.IntOrString`: a JSON number or string, kept apart by its `Type` field.
    IntOrString,
}

/// A Go type's kind, the part of `reflect.Kind` the container tree uses.
#[derive(Debug, Clone)]
pub enum Kind {
    /// `string` or a named string type (`v1.Protocol`, `resource.Format`, ...).
    String,
    /// `bool`.
    Bool,
    /// Any integer type.
    Int(IntKind),
    /// Pointer to the type.
    Ptr(TypeId),
    /// Slice of the type.
    Slice(TypeId),
    /// Map from `key` to `elem`.
    Map {
        /// The key type.
        key: TypeId,
        /// The element type.
        elem: TypeId,
    },
    /// Struct fields in declaration order, unexported ones included: go-spew prints them all.
    Struct(Vec<Field>),
}

/// One struct field as declared.
#[derive(Debug, Clone)]
pub struct Field {
    /// The Go field name.
    pub name: String,
    /// The field's type.
    pub ty: TypeId,
    /// `Name:` as go-spew prints it before the value.
    pub spew_label: Vec<u8>,
}

/// A field as encoding/json sees it, after promotion of embedded structs.
#[derive(Debug, Clone)]
pub struct JsonField {
    /// Field indexes from the struct down through embedded structs.
    pub path: Vec<usize>,
    /// The JSON key (from the tag, else the Go name).
    pub name: String,
    /// `"name":` with Go's escaping, ready to write.
    pub encoded_key: Vec<u8>,
    /// The tag's `omitempty`: an empty value is left out, which is what keeps JSON-era hashes
    /// stable when a version adds a field.
    pub omitempty: bool,
    /// The field's type.
    pub ty: TypeId,
}

/// One Go type of a version's tree.
#[derive(Debug, Clone)]
pub struct GoType {
    /// The Go type string, e.g. `v1.Container`, `*bool`, `[]string`, `v1.ResourceList`.
    pub name: String,
    /// What kind of type it is.
    pub kind: Kind,
    /// Whether apimachinery's own JSON code handles it.
    pub special: Special,
    /// `(name)` as go-spew prints it.
    pub spew_prefix: Vec<u8>,
    /// For structs: the encoding/json field list.
    pub json_fields: Vec<JsonField>,
}

/// One version's whole type tree.
#[derive(Debug)]
pub struct TypeTree {
    /// Every type reachable from the root, indexed by [`TypeId`].
    pub types: Vec<GoType>,
    /// `v1.Container`.
    pub root: TypeId,
    by_name: HashMap<String, TypeId>,
}

impl TypeTree {
    /// The type with id `id`.
    pub fn ty(&self, id: TypeId) -> &GoType {
        &self.types[id]
    }

    /// The type whose Go type string is `name` (e.g. `resource.Quantity`), if this version has it.
    pub fn lookup(&self, name: &str) -> Option<TypeId> {
        self.by_name.get(name).copied()
    }

    /// Index of the struct field called `name` in struct type `id`.
    pub fn field_index(&self, id: TypeId, name: &str) -> Option<usize> {
        match &self.types[id].kind {
            Kind::Struct(fields) => fields.iter().position(|f| f.name == name),
            _ => None,
        }
    }
}

#[derive(Deserialize, PartialEq)]
struct RawSchema {
    root: String,
    types_in_walk_order: Vec<RawType>,
}

#[derive(Deserialize, PartialEq)]
struct RawType {
    #[serde(rename = "type")]
    ty: String,
    kind: String,
    #[serde(default)]
    elem: Option<String>,
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    fields: Vec<RawField>,
}

#[derive(Deserialize, PartialEq)]
struct RawField {
    name: String,
    #[serde(rename = "type")]
    ty: String,
    json_tag: String,
    embedded: bool,
    exported: bool,
}

/// A schema file that cannot drive the emitters. Only reachable when a schema file is edited
/// by hand; the embedded ones are checked by the test suite.
#[derive(Debug, Clone, thiserror::Error)]
#[error("schema {version}: {msg}")]
pub struct SchemaError {
    /// The version whose schema file is at fault.
    pub version: String,
    /// What is wrong with it.
    pub msg: String,
}

fn build(version: &str, raw: &RawSchema) -> Result<TypeTree, SchemaError> {
    let err = |msg: String| SchemaError {
        version: version.to_string(),
        msg,
    };
    let mut by_name = HashMap::new();
    for (i, t) in raw.types_in_walk_order.iter().enumerate() {
        if by_name.insert(t.ty.clone(), i).is_some() {
            return Err(err(format!("type {} listed twice", t.ty)));
        }
    }
    let id = |name: &Option<String>, of: &str| -> Result<TypeId, SchemaError> {
        let n = name
            .as_ref()
            .ok_or_else(|| err(format!("{of} lacks its element type")))?;
        by_name
            .get(n)
            .copied()
            .ok_or_else(|| err(format!("{of} refers to unknown type {n}")))
    };
    let mut types = Vec::with_capacity(raw.types_in_walk_order.len());
    for t in &raw.types_in_walk_order {
        let kind = match t.kind.as_str() {
            "string" => Kind::String,
            "bool" => Kind::Bool,
            "int" | "int64" => Kind::Int(IntKind::Signed(64)),
            "int32" => Kind::Int(IntKind::Signed(32)),
            "int16" => Kind::Int(IntKind::Signed(16)),
            "int8" => Kind::Int(IntKind::Signed(8)),
            "uint" | "uint64" | "uintptr" => Kind::Int(IntKind::Unsigned(64)),
            "uint32" => Kind::Int(IntKind::Unsigned(32)),
            "uint16" => Kind::Int(IntKind::Unsigned(16)),
            "uint8" => Kind::Int(IntKind::Unsigned(8)),
            "ptr" => Kind::Ptr(id(&t.elem, &t.ty)?),
            "slice" => Kind::Slice(id(&t.elem, &t.ty)?),
            "map" => Kind::Map {
                key: id(&t.key, &t.ty)?,
                elem: id(&t.elem, &t.ty)?,
            },
            "struct" => {
                let mut fields = Vec::new();
                for f in &t.fields {
                    let fty = by_name.get(&f.ty).copied().ok_or_else(|| {
                        err(format!("{}.{} has unknown type {}", t.ty, f.name, f.ty))
                    })?;
                    fields.push(Field {
                        name: f.name.clone(),
                        ty: fty,
                        spew_label: format!("{}:", f.name).into_bytes(),
                    });
                }
                Kind::Struct(fields)
            }
            other => return Err(err(format!("{}: kind {other} is not supported", t.ty))),
        };
        let special = match t.ty.as_str() {
            "resource.Quantity" => Special::Quantity,
            "intstr.IntOrString" => Special::IntOrString,
            _ => Special::None,
        };
        types.push(GoType {
            name: t.ty.clone(),
            kind,
            special,
            spew_prefix: format!("({})", t.ty).into_bytes(),
            json_fields: Vec::new(),
        });
    }
    // encoding/json field lists, for the structs JSON reaches from the root. Custom
    // (un)marshalled types are not descended into: their internals (an embedded *inf.Dec in
    // Quantity) never meet reflection-based JSON.
    let root_id = *by_name
        .get(&raw.root)
        .ok_or_else(|| err(format!("root type {} not listed", raw.root)))?;
    let mut seen = vec![false; types.len()];
    let mut stack = vec![root_id];
    while let Some(id) = stack.pop() {
        if std::mem::replace(&mut seen[id], true) || types[id].special != Special::None {
            continue;
        }
        match &types[id].kind {
            Kind::Ptr(e) | Kind::Slice(e) => stack.push(*e),
            Kind::Map { key, elem } => stack.extend([*key, *elem]),
            Kind::Struct(_) => {
                let jf = json_fields(raw, &by_name, id, version)?;
                stack.extend(jf.iter().map(|f| f.ty));
                types[id].json_fields = jf;
            }
            _ => {}
        }
    }
    let tree = TypeTree {
        types,
        root: root_id,
        by_name,
    };
    check_specials(&tree).map_err(err)?;
    Ok(tree)
}

/// The custom (un)marshallers and the Quantity printer address fields by name; make sure the
/// schema has them, so a changed internal layout fails loudly here instead of hashing wrong.
fn check_specials(tree: &TypeTree) -> Result<(), String> {
    for (id, t) in tree.types.iter().enumerate() {
        let need: &[&str] = match t.special {
            Special::Quantity => &["i", "d", "s", "Format"],
            Special::IntOrString => &["Type", "IntVal", "StrVal"],
            Special::None => &[],
        };
        for n in need {
            if tree.field_index(id, n).is_none() {
                return Err(format!("{} lacks field {n}", t.name));
            }
        }
    }
    Ok(())
}

fn parse_tag(tag: &str) -> (&str, bool) {
    let mut parts = tag.split(',');
    let name = parts.next().unwrap_or("");
    let omitempty = parts.any(|o| o == "omitempty");
    (name, omitempty)
}

/// Go's `typeFields`: exported fields in index order, embedded untagged structs promoted,
/// `-` skipped, the shallowest of equally named fields kept (ties: the tagged one, or neither).
fn json_fields(
    raw: &RawSchema,
    by_name: &HashMap<String, TypeId>,
    struct_id: TypeId,
    version: &str,
) -> Result<Vec<JsonField>, SchemaError> {
    struct Cand {
        f: JsonField,
        depth: usize,
        tagged: bool,
    }
    fn walk(
        raw: &RawSchema,
        by_name: &HashMap<String, TypeId>,
        sid: TypeId,
        prefix: &mut Vec<usize>,
        out: &mut Vec<Cand>,
        version: &str,
    ) -> Result<(), SchemaError> {
        let t = &raw.types_in_walk_order[sid];
        for (i, f) in t.fields.iter().enumerate() {
            let (name, omitempty) = parse_tag(&f.json_tag);
            if f.json_tag == "-" {
                continue;
            }
            let fty = by_name[&f.ty];
            let ft = &raw.types_in_walk_order[fty];
            if f.embedded && name.is_empty() {
                if ft.kind == "struct" {
                    prefix.push(i);
                    walk(raw, by_name, fty, prefix, out, version)?;
                    prefix.pop();
                    continue;
                }
                if ft.kind == "ptr" {
                    return Err(SchemaError {
                        version: version.into(),
                        msg: format!(
                            "{}.{}: an embedded pointer is not supported by the decoder",
                            t.ty, f.name
                        ),
                    });
                }
            }
            if !f.exported {
                continue;
            }
            let jname = if name.is_empty() {
                f.name.clone()
            } else {
                name.to_string()
            };
            let mut encoded_key = Vec::new();
            crate::gojson::encode::write_string(&mut encoded_key, &jname);
            encoded_key.push(b':');
            let mut path = prefix.clone();
            path.push(i);
            out.push(Cand {
                depth: path.len(),
                tagged: !name.is_empty(),
                f: JsonField {
                    path,
                    name: jname,
                    encoded_key,
                    omitempty,
                    ty: fty,
                },
            });
        }
        Ok(())
    }
    let mut cands = Vec::new();
    walk(
        raw,
        by_name,
        struct_id,
        &mut Vec::new(),
        &mut cands,
        version,
    )?;
    let mut keep = Vec::new();
    for (i, c) in cands.iter().enumerate() {
        let rivals: Vec<&Cand> = cands.iter().filter(|o| o.f.name == c.f.name).collect();
        let min_depth = rivals.iter().map(|o| o.depth).min().unwrap_or(c.depth);
        let dominant: Vec<&&Cand> = rivals.iter().filter(|o| o.depth == min_depth).collect();
        let winner = if dominant.len() == 1 {
            Some(dominant[0])
        } else {
            let tagged: Vec<_> = dominant.iter().filter(|o| o.tagged).collect();
            if tagged.len() == 1 {
                Some(*tagged[0])
            } else {
                None
            }
        };
        if let Some(w) = winner {
            if std::ptr::eq(*w, &cands[i]) {
                keep.push(c.f.clone());
            }
        }
    }
    Ok(keep)
}

/// A supported kubelet minor version's tree, with the trees of equal versions shared.
pub struct VersionTrees {
    /// (major, minor, index into `trees`), ascending.
    pub versions: Vec<(u32, u32, usize)>,
    /// The distinct trees, one per run of versions whose schema files are identical.
    pub trees: Vec<TypeTree>,
}

/// Every embedded version, ascending: known without parsing a schema (a command line's version
/// is checked before any tree is needed, and the trees take milliseconds to build).
pub fn embedded_versions() -> impl Iterator<Item = (u32, u32)> {
    embedded::SCHEMAS
        .iter()
        .map(|&(major, minor, _)| (major, minor))
}

/// All embedded trees, parsed once.
pub fn all() -> &'static VersionTrees {
    static ALL: OnceLock<VersionTrees> = OnceLock::new();
    ALL.get_or_init(|| {
        let mut raws: Vec<RawSchema> = Vec::new();
        let mut trees = Vec::new();
        let mut versions = Vec::new();
        for (maj, min, text) in embedded::SCHEMAS {
            let version = format!("{maj}.{min}");
            let raw: RawSchema = serde_json::from_str(text)
                .unwrap_or_else(|e| panic!("embedded schema {version} is not valid: {e}"));
            let idx = match raws.iter().position(|r| *r == raw) {
                Some(i) => i,
                None => {
                    let tree = build(&version, &raw)
                        .unwrap_or_else(|e| panic!("embedded schema is unusable: {e}"));
                    raws.push(raw);
                    trees.push(tree);
                    trees.len() - 1
                }
            };
            versions.push((*maj, *min, idx));
        }
        VersionTrees { versions, trees }
    })
}
