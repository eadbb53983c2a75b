//! `kubelet-rehash hash`: container specs in, the kubelet's hashes out, as JSON Lines shaped
//! like `fixtures/golden/hashes.jsonl`.

use hashcompat::{hash_versions, parse_json, KubeletVersion, Node, NodeValue};
use rayon::prelude::*;
use std::io::Write;

/// One container to hash, with the id it is reported under.
pub struct Item<'a> {
    pub id: Result<String, usize>,
    pub container: Result<Node<'a>, String>,
}

/// Containers of a Pod object: containers, init containers, ephemeral containers.
pub fn pod_containers<'a>(pod: &Node<'a>, out: &mut Vec<Item<'a>>) {
    let meta = pod.get("metadata");
    let ns = meta
        .and_then(|m| m.get("namespace"))
        .and_then(|n| n.as_str())
        .unwrap_or("default")
        .to_string();
    let name = meta
        .and_then(|m| m.get("name"))
        .and_then(|n| n.as_str())
        .unwrap_or("")
        .to_string();
    let Some(spec) = pod.get("spec") else { return };
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        if let Some(Node {
            value: NodeValue::Array(cs),
            ..
        }) = spec.get(list)
        {
            for c in cs {
                let cname = c.get("name").and_then(|n| n.as_str()).unwrap_or("");
                out.push(Item {
                    id: Ok(format!("{ns}/{name}/{cname}")),
                    container: Ok(c.clone()),
                });
            }
        }
    }
}

/// Splits the input into items: a single Pod, PodList/List, `{"id","container"}` object or
/// bare container; otherwise JSON Lines of those.
pub fn items(input: &[u8]) -> Vec<Item<'_>> {
    let mut out = Vec::new();
    if let Ok(doc) = parse_json(input) {
        if doc_items(&doc, &mut out, None) {
            return out;
        }
    }
    for (n, line) in input.split(|&b| b == b'\n').enumerate() {
        let line_no = n + 1;
        let trimmed = line.trim_ascii();
        if trimmed.is_empty() {
            continue;
        }
        match parse_json(trimmed) {
            Ok(doc) => {
                if !doc_items(&doc, &mut out, Some(line_no)) {
                    out.push(Item {
                        id: Err(line_no),
                        container: Err(
                            "not a container spec, {\"id\",\"container\"} object, Pod or PodList"
                                .into(),
                        ),
                    });
                }
            }
            Err(e) => out.push(Item {
                id: Err(line_no),
                container: Err(e.to_string()),
            }),
        }
    }
    out
}

fn doc_items<'a>(doc: &Node<'a>, out: &mut Vec<Item<'a>>, line: Option<usize>) -> bool {
    if !matches!(doc.value, NodeValue::Object(_)) {
        return false;
    }
    if let Some(c) = doc.get("container") {
        let id = match doc.get("id") {
            Some(Node {
                value: NodeValue::String(s),
                ..
            }) => Ok(s.to_string()),
            Some(Node {
                value: NodeValue::Number(n),
                ..
            }) => Ok(n.to_string()),
            _ => line.map(Err).unwrap_or_else(|| Ok(String::new())),
        };
        out.push(Item {
            id,
            container: Ok(c.clone()),
        });
        return true;
    }
    match doc.get("kind").and_then(|k| k.as_str()) {
        Some("Pod") => {
            pod_containers(doc, out);
            true
        }
        Some("PodList") | Some("List") => {
            if let Some(Node {
                value: NodeValue::Array(items),
                ..
            }) = doc.get("items")
            {
                for p in items {
                    pod_containers(p, out);
                }
            }
            true
        }
        Some(_) => false,
        None if doc.get("name").is_some() => {
            let name = doc.get("name").and_then(|n| n.as_str()).unwrap_or("");
            out.push(Item {
                id: Ok(name.to_string()),
                container: Ok(doc.clone()),
            });
            true
        }
        None => false,
    }
}

fn id_field(id: &Result<String, usize>) -> String {
    match id {
        Ok(s) => format!("\"id\": {}", serde_json::to_string(s).expect("string")),
        Err(line) => format!("\"line\": {line}"),
    }
}

/// Runs the command; returns whether every item hashed.
pub fn run(
    input: &[u8],
    versions: &[KubeletVersion],
    out: &mut dyn Write,
) -> std::io::Result<bool> {
    let items = items(input);
    let rendered: Vec<(String, bool)> = items
        .par_iter()
        .map(|item| {
            let idf = id_field(&item.id);
            let container = match &item.container {
                Ok(c) => c,
                Err(e) => {
                    let msg = serde_json::to_string(e).expect("string");
                    return (format!("{{{idf}, \"error\": {msg}}}\n"), false);
                }
            };
            let mut text = String::new();
            let mut ok = true;
            for r in hash_versions(container, versions) {
                match r {
                    Ok(h) => {
                        text.push_str(&format!(
                            "{{{idf}, \"version\": \"{}\", \"hash\": \"{}\"",
                            h.version, h.hash
                        ));
                        if let Some(wr) = h.hash_without_resources {
                            text.push_str(&format!(", \"hash_without_resources\": \"{wr}\""));
                        }
                        text.push_str("}\n");
                    }
                    Err(e) => {
                        ok = false;
                        let version = match &e {
                            hashcompat::SpecError::Decode { version, .. } => {
                                format!(", \"version\": \"{version}\"")
                            }
                            _ => String::new(),
                        };
                        let msg = serde_json::to_string(&e.to_string()).expect("string");
                        text.push_str(&format!("{{{idf}{version}, \"error\": {msg}}}\n"));
                        if !matches!(e, hashcompat::SpecError::Decode { .. }) {
                            break;
                        }
                    }
                }
            }
            (text, ok)
        })
        .collect();
    let mut all_ok = true;
    for (text, ok) in rendered {
        out.write_all(text.as_bytes())?;
        all_ok &= ok;
    }
    Ok(all_ok)
}

/// `--explain`: the hashed text (and JSON) of every item for one version.
pub fn explain(
    input: &[u8],
    version: KubeletVersion,
    out: &mut dyn Write,
) -> std::io::Result<bool> {
    let mut all_ok = true;
    for item in items(input) {
        let id = match &item.id {
            Ok(s) => s.clone(),
            Err(l) => format!("line {l}"),
        };
        let result = item
            .container
            .map_err(|e| e.to_string())
            .and_then(|c| hashcompat::decode(&c, version).map_err(|e| e.to_string()));
        match result {
            Ok(d) => {
                let ex = d.explain(version);
                writeln!(out, "# {id} — kubelet {version}: {}", ex.form.description())?;
                let mut part =
                    |label: &str, p: &hashcompat::ExplainedText| -> std::io::Result<()> {
                        if let Some(j) = &p.json {
                            writeln!(out, "{label} json: {}", String::from_utf8_lossy(j))?;
                        }
                        writeln!(
                            out,
                            "{label} hashed text: {}",
                            String::from_utf8_lossy(&p.text)
                        )?;
                        writeln!(out, "{label}: {}", p.hash)
                    };
                part("hash", &ex.hash)?;
                if let Some(wr) = &ex.without_resources {
                    part("hash_without_resources", wr)?;
                }
            }
            Err(e) => {
                all_ok = false;
                writeln!(out, "# {id} — error: {e}")?;
            }
        }
    }
    Ok(all_ok)
}
