//! Property tests over generated container specs:
//!
//! (a) nothing panics: arbitrary bytes, arbitrary JSON values, container-shaped objects with
//!     random types in random places, and byte-level mutations of those all give `Ok` or `Err`
//!     for every version;
//! (b) versions that share a type tree and a hash form hash every spec identically (and the
//!     published equivalence classes hold);
//! (c) `explain` is the hashed text: its FNV-1a is the returned hash, and for the JSON forms it
//!     is go-spew's `([]uint8)[…]` of the returned JSON;
//! (d) `hash_container(&Value)` equals `hash_container_bytes` of the same document.
//!
//! Container-shaped specs are written as JSON text by a generator that reads its decisions from a
//! tape of random numbers (`Vec<u32>`): proptest shrinks the tape, which shrinks the spec. The
//! generator walks one version's type tree (`hashcompat::schema`), so field names, nesting and
//! value types follow the real `v1.Container` of that version, with deliberate type errors,
//! unknown keys, case-folded and duplicate keys, nulls, huge numbers, invalid UTF-8 and lone
//! surrogates mixed in.

use hashcompat::schema::{self, IntKind, Kind, Special, TypeId, TypeTree};
use hashcompat::sink::fnv32a;
use hashcompat::{
    decode, hash_container, hash_container_bytes, hash_many, hash_versions, parse_json, versions,
    ContainerHashes, HashForm, KubeletVersion, SpecError,
};
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------------
// The tape-driven generator.

struct Tape<'a> {
    data: &'a [u32],
    pos: usize,
}

impl Tape<'_> {
    /// The next decision; an exhausted tape answers 0, the simplest choice everywhere.
    fn next(&mut self) -> u32 {
        let v = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        v
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() as usize) % n
    }
    /// True with probability `num/den`; false on an exhausted tape.
    fn chance(&mut self, num: usize, den: usize) -> bool {
        self.below(den) >= den - num
    }
    fn pick<'p, T>(&mut self, pool: &'p [T]) -> &'p T {
        &pool[self.below(pool.len())]
    }
}

/// How far generated specs stray from what an API server serves.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// Every value has its field's JSON type; no duplicate or case-folded keys, no invalid
    /// UTF-8: a document serde_json reads exactly as Go does.
    Clean,
    /// Mostly well-typed, but with wrong types, unknown/duplicate/case-folded keys, nulls,
    /// out-of-range numbers, invalid UTF-8 and lone surrogates.
    Messy,
}

/// String literal bodies (already JSON-escaped where needed).
const CLEAN_STRINGS: &[&str] = &[
    "",
    "app",
    "nginx:1.25",
    "registry.k8s.io/pause@sha256:7031c1b283388d2c2e09b57badb803c05ebed362dc88d84b480cc47f72a21097",
    "/bin/sh",
    "echo a b",
    "TCP",
    "IfNotPresent",
    "/dev/termination-log",
    "a<b>&c",
    "quote \\\" back \\\\ slash",
    "line\\nbreak\\ttab",
    "\\u0001\\u001f\\u007f",
    "caf\u{e9} \u{65e5}\u{672c}",
    "\\u00e9\\u65e5",
    "sep\u{2028}par\u{2029}",
    "\\ud83d\\ude00 pair",
    "\\/slash",
    "\u{fffd}",
];

/// Raw byte sequences for string bodies that are not valid UTF-8 / not valid UTF-16.
const MESSY_STRINGS: &[&[u8]] = &[
    b"\\ud800",
    b"lone \\udc00 low",
    b"\\ud800\\ud800",
    b"\\ud83d",
    b"\xff",
    b"bad \xc3\x28 pair",
    b"\xc0\xaf overlong",
    b"\xe2\x82 truncated",
    b"\xed\xa0\x80 surrogate",
    b"\xf4\x90\x80\x80 too big",
    b"\\u0000nul",
];

const NUMBERS: &[&str] = &[
    "0",
    "1",
    "-1",
    "42",
    "127",
    "128",
    "255",
    "256",
    "32767",
    "65536",
    "2147483647",
    "2147483648",
    "-2147483648",
    "-2147483649",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "-9223372036854775809",
    "18446744073709551615",
    "18446744073709551616",
    "123456789012345678901234567890",
    "1e3",
    "1E+2",
    "1.5",
    "-0",
    "0.0",
    "1e400",
    "-1e-400",
    "5e-324",
];

const QUANTITY_STRINGS: &[&str] = &[
    "0",
    "1",
    "100m",
    "250m",
    "1.5",
    "0.1",
    "1Gi",
    "512Mi",
    "1Ki",
    "1k",
    "1M",
    "2000000k",
    "1e3",
    "1E3",
    "12e2",
    "100e-3",
    "+1.5",
    "-1",
    "-0",
    "1n",
    "1u",
    "1Ei",
    "8Ei",
    "9Ei",
    "1e-20",
    "0.000000001",
    "1.0000000001",
    "9223372036854775807",
    "9223372036854775808",
    "123456789012345678901234567890",
    "123456789012345678901234567890Ei",
    "1e1000",
    " 1",
    "1 ",
    "",
    "abc",
    "1.2.3",
    "1ki",
    "1 Gi",
    "1e",
    ".5",
    "5.",
    "0x10",
];

const QUANTITY_NUMBERS: &[&str] = &[
    "0",
    "1",
    "0.5",
    "1e3",
    "-1",
    "2.5e-3",
    "123456789012345678901234567890",
    "9223372036854775808",
];

const RESOURCE_NAMES: &[&str] = &[
    "cpu",
    "memory",
    "ephemeral-storage",
    "nvidia.com/gpu",
    "hugepages-2Mi",
    "example.com/huge",
    "",
    "a<b",
];

const INT_OR_STRING: &[&str] = &[
    "8080",
    "0",
    "-1",
    "2147483648",
    "1.5",
    "\"http\"",
    "\"8080\"",
    "\"25%\"",
    "\"\"",
    "null",
];

struct Gen<'t, 'a> {
    tree: &'t TypeTree,
    tape: Tape<'a>,
    mode: Mode,
    /// Every JSON field name of the tree (for unknown-but-plausible keys).
    names: Vec<&'t str>,
    out: Vec<u8>,
}

impl<'t> Gen<'t, '_> {
    fn put(&mut self, s: &[u8]) {
        self.out.extend_from_slice(s);
    }

    fn ws(&mut self) {
        if self.mode == Mode::Messy && self.tape.chance(1, 10) {
            let w = *self.tape.pick(&[" ", "\n", "\t", "\r\n  "]);
            self.put(w.as_bytes());
        }
    }

    fn string(&mut self) {
        self.put(b"\"");
        if self.mode == Mode::Messy && self.tape.chance(1, 6) {
            let s = *self.tape.pick(MESSY_STRINGS);
            self.put(s);
        } else if self.tape.chance(1, 3) {
            // A short random identifier.
            let n = self.tape.below(12);
            for _ in 0..n {
                let c = *self.tape.pick(b"abcxyzAZ09-_./:%@ ");
                self.out.push(c);
            }
        } else {
            let s = *self.tape.pick(CLEAN_STRINGS);
            self.put(s.as_bytes());
        }
        self.put(b"\"");
    }

    fn number(&mut self) {
        let n = *self.tape.pick(NUMBERS);
        self.put(n.as_bytes());
    }

    fn key(&mut self, name: &str) {
        let mut k = name.to_string();
        if self.mode == Mode::Messy && self.tape.chance(1, 12) {
            // Go matches keys case-insensitively (with K/ſ folding) when no exact match exists.
            k = match self.tape.below(4) {
                0 => k.to_uppercase(),
                1 => k.replacen('s', "\u{17f}", 1),
                2 => k.replacen('k', "\u{212a}", 1),
                _ => {
                    let mut c = k.chars();
                    c.next()
                        .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
                        .unwrap_or_default()
                }
            };
        }
        self.put(b"\"");
        self.put(k.as_bytes());
        self.put(b"\"");
        self.ws();
        self.put(b":");
        self.ws();
    }

    /// Any JSON value, ignoring the type tree.
    fn any(&mut self, depth: usize) {
        let kinds = if depth > 3 { 4 } else { 6 };
        match self.tape.below(kinds) {
            0 => self.put(b"null"),
            1 => {
                let b = if self.tape.chance(1, 2) {
                    &b"true"[..]
                } else {
                    b"false"
                };
                self.put(b)
            }
            2 => self.number(),
            3 => self.string(),
            4 => {
                self.put(b"[");
                let n = self.tape.below(4);
                for i in 0..n {
                    if i > 0 {
                        self.put(b",");
                    }
                    self.any(depth + 1);
                }
                self.put(b"]");
            }
            _ => {
                self.put(b"{");
                let n = self.tape.below(4);
                for i in 0..n {
                    if i > 0 {
                        self.put(b",");
                    }
                    let k = if self.tape.chance(2, 3) {
                        self.names[self.tape.below(self.names.len())].to_string()
                    } else {
                        "x-unknown".to_string()
                    };
                    self.key(&k);
                    self.any(depth + 1);
                }
                self.put(b"}");
            }
        }
    }

    /// A value for type `ty`, usually of the right JSON type.
    fn value(&mut self, ty: TypeId, depth: usize) {
        if self.mode == Mode::Messy && self.tape.chance(1, 20) {
            return self.any(depth);
        }
        let tree = self.tree;
        let t = tree.ty(ty);
        match t.special {
            Special::Quantity => {
                if self.mode == Mode::Messy && self.tape.chance(1, 8) {
                    self.put(b"null");
                } else if self.tape.chance(1, 5) {
                    let n = *self.tape.pick(QUANTITY_NUMBERS);
                    self.put(n.as_bytes());
                } else if self.tape.chance(1, 4) {
                    // Random digits, fraction, exponent and suffix.
                    let mut s = String::new();
                    if self.tape.chance(1, 6) {
                        s.push('-');
                    }
                    for _ in 0..1 + self.tape.below(25) {
                        s.push((b'0' + self.tape.below(10) as u8) as char);
                    }
                    if self.tape.chance(1, 3) {
                        s.push('.');
                        for _ in 0..1 + self.tape.below(12) {
                            s.push((b'0' + self.tape.below(10) as u8) as char);
                        }
                    }
                    let suffixes = [
                        "", "", "m", "u", "n", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi",
                        "Ti", "Pi", "Ei", "e3", "e-7", "E18", "e-30",
                    ];
                    let suffix = *self.tape.pick(&suffixes[..]);
                    s.push_str(suffix);
                    self.put(b"\"");
                    self.put(s.as_bytes());
                    self.put(b"\"");
                } else {
                    let q = *self.tape.pick(QUANTITY_STRINGS);
                    self.put(b"\"");
                    self.put(q.as_bytes());
                    self.put(b"\"");
                }
            }
            Special::IntOrString => {
                let v = *self.tape.pick(INT_OR_STRING);
                self.put(v.as_bytes());
            }
            Special::None => match &t.kind {
                Kind::String => self.string(),
                Kind::Bool => {
                    let b = if self.tape.chance(1, 2) {
                        &b"true"[..]
                    } else {
                        b"false"
                    };
                    self.put(b)
                }
                Kind::Int(k) => {
                    if self.tape.chance(1, 2) {
                        // In range for the type.
                        let v = match k {
                            IntKind::Signed(_) => (self.tape.next() % 2000) as i64 - 500,
                            IntKind::Unsigned(_) => (self.tape.next() % 2000) as i64,
                        };
                        self.put(v.to_string().as_bytes());
                    } else {
                        self.number();
                    }
                }
                Kind::Ptr(elem) => {
                    if depth > 6 || self.tape.chance(1, 6) {
                        self.put(b"null");
                    } else {
                        self.value(*elem, depth);
                    }
                }
                Kind::Slice(elem) => {
                    let r = self.tape.below(8);
                    if r == 7 && self.mode == Mode::Messy {
                        self.put(b"null");
                        return;
                    }
                    self.put(b"[");
                    let n = if depth > 5 || r == 6 {
                        0
                    } else {
                        1 + self.tape.below(3)
                    };
                    for i in 0..n {
                        if i > 0 {
                            self.put(b",");
                            self.ws();
                        }
                        self.value(*elem, depth + 1);
                    }
                    self.put(b"]");
                }
                Kind::Map { elem, .. } => {
                    if self.mode == Mode::Messy && self.tape.chance(1, 10) {
                        self.put(b"null");
                        return;
                    }
                    self.put(b"{");
                    let n = self.tape.below(4);
                    let mut used = Vec::new();
                    for _ in 0..n {
                        let k = *self.tape.pick(RESOURCE_NAMES);
                        if self.mode == Mode::Clean && used.contains(&k) {
                            continue;
                        }
                        if !used.is_empty() {
                            self.put(b",");
                        }
                        used.push(k);
                        self.put(b"\"");
                        self.put(k.as_bytes());
                        self.put(b"\":");
                        self.value(*elem, depth + 1);
                    }
                    self.put(b"}");
                }
                Kind::Struct(_) => self.object(ty, depth),
            },
        }
    }

    fn object(&mut self, ty: TypeId, depth: usize) {
        let tree = self.tree;
        let fields = &tree.ty(ty).json_fields;
        self.put(b"{");
        self.ws();
        let mut chosen: Vec<usize> = (0..fields.len())
            .filter(|&i| {
                let root_basic = depth == 0 && matches!(fields[i].name.as_str(), "name" | "image");
                depth <= 4 && (root_basic || self.tape.chance(1, 3))
            })
            .collect();
        // Random order: Go decodes members in input order.
        for i in (1..chosen.len()).rev() {
            let j = self.tape.below(i + 1);
            chosen.swap(i, j);
        }
        let mut first = true;
        for i in chosen {
            let reps = if self.mode == Mode::Messy && self.tape.chance(1, 15) {
                2
            } else {
                1
            };
            for _ in 0..reps {
                if !first {
                    self.put(b",");
                    self.ws();
                }
                first = false;
                let name = fields[i].name.clone();
                self.key(&name);
                self.value(fields[i].ty, depth + 1);
            }
        }
        if self.mode == Mode::Messy && self.tape.chance(1, 6) {
            if !first {
                self.put(b",");
            }
            self.key("x-unknown-field");
            self.any(depth + 1);
        }
        self.ws();
        self.put(b"}");
    }
}

/// Writes one container spec (JSON text) from `tape`, shaped by one of the embedded trees.
fn container_spec(tape: &[u32], mode: Mode) -> Vec<u8> {
    let all = schema::all();
    let mut tape = Tape { data: tape, pos: 0 };
    let tree = &all.trees[tape.below(all.trees.len())];
    let mut names: Vec<&str> = tree
        .types
        .iter()
        .flat_map(|t| t.json_fields.iter().map(|f| f.name.as_str()))
        .collect();
    names.sort_unstable();
    names.dedup();
    let mut g = Gen {
        tree,
        tape,
        mode,
        names,
        out: Vec::new(),
    };
    g.object(tree.root, 0);
    g.out
}

fn tape() -> impl Strategy<Value = Vec<u32>> {
    prop::collection::vec(any::<u32>(), 0..600)
}

fn all_versions() -> Vec<KubeletVersion> {
    KubeletVersion::all()
}

/// What a result says, for comparing results of different versions (a decode error names the
/// version it was for).
fn outcome(r: &Result<ContainerHashes, SpecError>) -> Result<(u32, Option<u32>), String> {
    match r {
        Ok(h) => Ok((h.hash.0, h.hash_without_resources.map(|x| x.0))),
        Err(SpecError::Decode { error, .. }) => Err(error.to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// Every version gives Ok or Err (a panic fails the property), a result that fits the version,
/// and the batched `hash_versions` agrees with the one-version call.
fn check_every_version(bytes: &[u8]) -> Result<(), TestCaseError> {
    let versions = all_versions();
    let singles: Vec<_> = versions
        .iter()
        .map(|&v| hash_container_bytes(bytes, v))
        .collect();
    for (&v, r) in versions.iter().zip(&singles) {
        match r {
            Ok(h) => {
                prop_assert_eq!(h.version, v);
                prop_assert_eq!(
                    h.hash_without_resources.is_some(),
                    v.has_hash_without_resources()
                );
            }
            Err(SpecError::Decode { version, error }) => {
                prop_assert_eq!(*version, v);
                prop_assert!(!error.msg.is_empty());
            }
            Err(_) => {}
        }
    }
    if let Ok(node) = parse_json(bytes) {
        let batch = hash_versions(&node, &versions);
        for ((v, a), b) in versions.iter().zip(&singles).zip(&batch) {
            prop_assert_eq!(
                a,
                b,
                "hash_versions differs from hash_container_bytes at {}",
                v
            );
        }
    } else {
        for r in &singles {
            prop_assert!(matches!(r, Err(SpecError::Syntax(_))), "{:?}", r);
        }
    }
    Ok(())
}

/// Arbitrary `serde_json::Value`s, objects with keys from the container vocabulary.
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let names: Vec<String> = {
        let mut n: Vec<String> = schema::all()
            .trees
            .iter()
            .flat_map(|t| t.types.iter())
            .flat_map(|t| t.json_fields.iter().map(|f| f.name.clone()))
            .collect();
        n.sort();
        n.dedup();
        n.push("x-unknown".into());
        n
    };
    let number = prop_oneof![
        any::<i64>().prop_map(serde_json::Value::from),
        any::<u64>().prop_map(serde_json::Value::from),
        any::<f64>().prop_map(|f| serde_json::Number::from_f64(f)
            .map(serde_json::Value::Number)
            .unwrap_or(serde_json::Value::Null)),
        prop::sample::select(NUMBERS)
            .prop_map(|n| serde_json::Value::Number(n.parse().expect("pool numbers parse"))),
    ];
    let string = prop_oneof![
        any::<String>(),
        prop::sample::select(QUANTITY_STRINGS).prop_map(str::to_string),
        "[a-zA-Z0-9<>&\"\\\\ \u{2028}\u{e9}\u{fffd}]{0,12}",
    ]
    .prop_map(serde_json::Value::String);
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::Bool),
        number,
        string,
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(serde_json::Value::Array),
            prop::collection::vec((prop::sample::select(names.clone()), inner), 0..6)
                .prop_map(|kv| serde_json::Value::Object(kv.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::default())]

    /// (a) Arbitrary bytes.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        check_every_version(&bytes)?;
    }

    /// (a) Arbitrary JSON values through the `serde_json::Value` entry point.
    #[test]
    fn arbitrary_json_values_never_panic(v in json_value()) {
        let versions = all_versions();
        for &ver in &versions {
            let r = hash_container(&v, ver);
            if !v.is_object() {
                prop_assert!(matches!(r, Err(SpecError::NotAnObject(_))), "{:?}", r);
            }
        }
        check_every_version(&serde_json::to_vec(&v).unwrap())?;
    }

    /// (a) Container-shaped objects with random types in random places.
    #[test]
    fn messy_container_specs_never_panic(t in tape()) {
        let spec = container_spec(&t, Mode::Messy);
        check_every_version(&spec)?;
    }

    /// (a) Byte-level mutations of container-shaped specs: truncations, flips, insertions.
    #[test]
    fn mutated_container_specs_never_panic(
        t in tape(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), 0u8..4, any::<u8>()), 1..6),
    ) {
        let mut spec = container_spec(&t, Mode::Messy);
        for (at, op, byte) in edits {
            if spec.is_empty() {
                break;
            }
            let i = at.index(spec.len());
            match op {
                0 => spec.truncate(i),
                1 => spec[i] = byte,
                2 => spec.insert(i, byte),
                _ => {
                    spec.remove(i);
                }
            }
        }
        check_every_version(&spec)?;
    }

    /// (b) Consecutive versions with the same type tree and hash form hash alike, and so do
    /// versions of one published equivalence class (whenever both decode).
    #[test]
    fn equal_type_trees_give_equal_hashes(t in tape(), messy in any::<bool>()) {
        let spec = container_spec(&t, if messy { Mode::Messy } else { Mode::Clean });
        let trees = &schema::all().versions;
        let all = all_versions();
        let results: Vec<_> = all.iter().map(|&v| hash_container_bytes(&spec, v)).collect();
        let mut shared = 0;
        for i in 1..all.len() {
            let (a, b) = (all[i - 1], all[i]);
            if trees[i - 1].2 == trees[i].2 && a.hash_form() == b.hash_form() {
                shared += 1;
                prop_assert_eq!(outcome(&results[i - 1]), outcome(&results[i]), "{} vs {}", a, b);
            }
        }
        prop_assert!(shared > 0, "the embedded versions share trees");
        let info = versions();
        for i in 1..info.len() {
            if info[i - 1].equivalence_class == info[i].equivalence_class {
                if let (Ok(x), Ok(y)) = (&results[i - 1], &results[i]) {
                    prop_assert_eq!(x.hash, y.hash, "{} vs {}", info[i - 1].version, info[i].version);
                    prop_assert_eq!(x.hash_without_resources, y.hash_without_resources);
                }
            }
        }
        // That most generated specs decode (so this is not vacuous) is checked by
        // `generator_covers_success_and_error_paths`.
    }

    /// (c) The explained text is what is hashed.
    #[test]
    fn explain_text_hashes_to_the_returned_value(t in tape(), messy in any::<bool>()) {
        let spec = container_spec(&t, if messy { Mode::Messy } else { Mode::Clean });
        let Ok(node) = parse_json(&spec) else {
            return Ok(());
        };
        for v in all_versions() {
            let Ok(d) = decode(&node, v) else { continue };
            let h = d.hashes(v);
            let ex = d.explain(v);
            prop_assert_eq!(ex.version, v);
            prop_assert_eq!(ex.form, v.hash_form());
            prop_assert_eq!(fnv32a(&ex.hash.text), h.hash.0, "{}", v);
            prop_assert_eq!(ex.hash.hash, h.hash);
            match (&ex.without_resources, h.hash_without_resources) {
                (Some(w), Some(hw)) => {
                    prop_assert_eq!(fnv32a(&w.text), hw.0);
                    prop_assert_eq!(w.hash, hw);
                }
                (None, None) => {}
                (w, hw) => prop_assert!(false, "{}: explain {:?} vs hashes {:?}", v, w.is_some(), hw),
            }
            for part in std::iter::once(&ex.hash).chain(ex.without_resources.as_ref()) {
                match v.hash_form() {
                    HashForm::Struct => {
                        prop_assert!(part.json.is_none());
                        prop_assert!(part.text.starts_with(b"(v1.Container){"), "{}: struct text prefix", v);
                    }
                    form => {
                        let json = part.json.as_ref().expect("JSON forms explain their JSON");
                        let spelled = format!(
                            "([]uint8)[{}]",
                            json.iter().map(|b| b.to_string()).collect::<Vec<_>>().join(" ")
                        );
                        prop_assert_eq!(&part.text, &spelled.into_bytes(), "{}", v);
                        let parsed: serde_json::Value = serde_json::from_slice(json)
                            .map_err(|e| TestCaseError::fail(format!("{v}: JSON does not parse: {e}")))?;
                        let obj = parsed.as_object().expect("a container encodes as an object");
                        if form == HashForm::NameImage {
                            let keys: Vec<&String> = obj.keys().collect();
                            prop_assert_eq!(keys, vec!["image", "name"]);
                        }
                    }
                }
            }
        }
    }

    /// The batch API (interleaved FNV lanes) returns what one-by-one hashing returns, in
    /// order, for any mix of generated specs.
    #[test]
    fn hash_many_equals_hashes(tapes in prop::collection::vec(tape(), 1..12), messy in any::<bool>()) {
        let specs: Vec<Vec<u8>> = tapes
            .iter()
            .map(|t| container_spec(t, if messy { Mode::Messy } else { Mode::Clean }))
            .collect();
        let nodes: Vec<_> = specs.iter().filter_map(|s| parse_json(s).ok()).collect();
        for v in all_versions() {
            let decoded: Vec<_> = nodes.iter().filter_map(|n| decode(n, v).ok()).collect();
            let refs: Vec<_> = decoded.iter().collect();
            let one_by_one: Vec<_> = decoded.iter().map(|d| d.hashes(v)).collect();
            prop_assert_eq!(hash_many(&refs, v), one_by_one, "{}", v);
        }
    }

    /// (d) The `serde_json::Value` entry point equals the bytes entry point on the same
    /// document: the value's own serialisation (compact or pretty), and the original text
    /// whenever serde_json kept its number literals (see `serde_json_respells_exponents`).
    #[test]
    fn value_and_bytes_entry_points_agree(t in tape(), pretty in any::<bool>()) {
        let spec = container_spec(&t, Mode::Clean);
        let value: serde_json::Value = serde_json::from_slice(&spec)
            .map_err(|e| TestCaseError::fail(format!("clean spec is JSON: {e}: {}", String::from_utf8_lossy(&spec))))?;
        let reprinted = if pretty {
            serde_json::to_vec_pretty(&value).unwrap()
        } else {
            serde_json::to_vec(&value).unwrap()
        };
        let literals_kept = !has_exponent(&parse_json(&spec).expect("clean spec parses"));
        // A `Value` keeps object members sorted by key (no `preserve_order`), so when a spec
        // has several type errors the first one reported may differ; that it fails, and every
        // hash, may not.
        let ok = |r: Result<ContainerHashes, SpecError>| r.ok().map(|h| (h.hash, h.hash_without_resources));
        for v in all_versions() {
            let from_value = ok(hash_container(&value, v));
            prop_assert_eq!(from_value, ok(hash_container_bytes(&reprinted, v)), "{} reprinted", v);
            if literals_kept {
                prop_assert_eq!(from_value, ok(hash_container_bytes(&spec, v)), "{} original bytes {}", v, String::from_utf8_lossy(&spec));
            }
        }
    }
}

fn has_exponent(n: &hashcompat::Node<'_>) -> bool {
    match &n.value {
        hashcompat::NodeValue::Number(lit) => lit.contains(['e', 'E']),
        hashcompat::NodeValue::Array(items) => items.iter().any(has_exponent),
        hashcompat::NodeValue::Object(members) => members.iter().any(|(_, m)| has_exponent(m)),
        _ => false,
    }
}

/// Where the `Value` entry point cannot equal the bytes: serde_json (arbitrary_precision)
/// respells an exponent (`1E3` becomes `1e+3`), and a quantity given as a bare JSON number in
/// canonical-enough form caches its literal (`Quantity.s`), which the struct form prints and
/// `MarshalJSON` writes, so the hash follows the respelling. The API server always serves
/// quantities as strings, where nothing is respelled.
#[test]
fn serde_json_respells_exponents() {
    let doc = br#"{"name":"a","image":"b","resources":{"limits":{"cpu":1E3}}}"#;
    let value: serde_json::Value = serde_json::from_slice(doc).unwrap();
    assert_eq!(value["resources"]["limits"]["cpu"].to_string(), "1e+3");
    let v = "1.8".parse::<KubeletVersion>().unwrap();
    let as_value = hash_container(&value, v).unwrap().hash;
    let as_bytes = hash_container_bytes(doc, v).unwrap().hash;
    let respelled = hash_container_bytes(&serde_json::to_vec(&value).unwrap(), v)
        .unwrap()
        .hash;
    assert_eq!(as_value, respelled);
    assert_ne!(
        as_value, as_bytes,
        "the cached string s is 1E3 in one and 1e+3 in the other"
    );
    // MarshalJSON writes the cached string too, so the JSON forms differ as well; only the
    // name+image form (1.31+) cannot see it.
    let at = |v: &str| {
        let v = v.parse::<KubeletVersion>().unwrap();
        (
            hash_container(&value, v).unwrap().hash,
            hash_container_bytes(doc, v).unwrap().hash,
        )
    };
    let (a, b) = at("1.22");
    assert_ne!(a, b);
    let (a, b) = at("1.31");
    assert_eq!(a, b);
    // A string quantity is passed through untouched.
    let doc = br#"{"name":"a","image":"b","resources":{"limits":{"cpu":"1E3"}}}"#;
    let value: serde_json::Value = serde_json::from_slice(doc).unwrap();
    let v = "1.8".parse::<KubeletVersion>().unwrap();
    assert_eq!(
        hash_container(&value, v).unwrap().hash,
        hash_container_bytes(doc, v).unwrap().hash
    );
}

/// The generator reaches the places it is meant to: over a fixed set of tapes, clean specs
/// mostly hash, messy ones hit decode errors and syntax errors, and the invalid-UTF-8 /
/// lone-surrogate strings really occur.
#[test]
fn generator_covers_success_and_error_paths() {
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng as u32
    };
    let v = "1.22".parse::<KubeletVersion>().unwrap();
    let (mut clean_ok, mut messy_decode_err, mut messy_ok, mut invalid_utf8) = (0, 0, 0, 0);
    for _ in 0..300 {
        let t: Vec<u32> = (0..600).map(|_| next()).collect();
        if hash_container_bytes(&container_spec(&t, Mode::Clean), v).is_ok() {
            clean_ok += 1;
        }
        let messy = container_spec(&t, Mode::Messy);
        if std::str::from_utf8(&messy).is_err() || messy.windows(6).any(|w| w == b"\\ud800") {
            invalid_utf8 += 1;
        }
        match hash_container_bytes(&messy, v) {
            Ok(_) => messy_ok += 1,
            Err(SpecError::Decode { .. }) => messy_decode_err += 1,
            Err(_) => {}
        }
    }
    eprintln!("STATS clean_ok {clean_ok} messy_ok {messy_ok} decode_err {messy_decode_err} bad {invalid_utf8}");
    assert!(clean_ok > 150, "clean specs that hash: {clean_ok}/300");
    assert!(messy_ok > 20, "messy specs that hash: {messy_ok}/300");
    assert!(
        messy_decode_err > 20,
        "messy specs rejected: {messy_decode_err}/300"
    );
    assert!(
        invalid_utf8 > 20,
        "messy specs with bad strings: {invalid_utf8}/300"
    );
}
