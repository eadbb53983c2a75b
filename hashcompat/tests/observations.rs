//! Hashes observed on real nodes that are not part of the golden set, checked against the
//! container spec reconstructed from the upstream manifests (fixtures/observations/).

use hashcompat::{decode, hash_node, parse_json, HashForm, KubeletVersion};
use std::path::Path;

struct Observation {
    bytes: Vec<u8>,
}

fn load(name: &str) -> Observation {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/observations")
        .join(name);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Observation { bytes }
}

/// kubernetes/kubernetes#75238: `crictl inspect` of kubeadm's kube-proxy v1.13.4 on a 1.13 node
/// shows `io.kubernetes.container.hash: 8ed4978`. Struct era (go-spew of the `v1.Container`
/// value): every field of the 1.13 tree, including `SecurityContext.ProcMount`, is in the text.
#[test]
fn kube_proxy_1_13_4_struct_form() {
    let obs = load("kube-proxy-1.13.4.json");
    let doc = parse_json(&obs.bytes).expect("fixture parses");
    let container = doc.get("container").expect("fixture has a container");
    let observed = doc.get("observed").expect("fixture has the observation");
    let version: KubeletVersion = observed
        .get("version")
        .and_then(|v| v.as_str())
        .expect("observed.version")
        .parse()
        .unwrap();
    let want = observed
        .get("hash")
        .and_then(|v| v.as_str())
        .expect("observed.hash");
    assert_eq!(version.hash_form(), HashForm::Struct);
    assert_eq!(want, "8ed4978", "the value printed in issue #75238");

    let got = hash_node(container, version).unwrap();
    assert_eq!(got.hash.to_string(), want, "kubelet {version}");
    assert_eq!(got.hash_without_resources, None);

    // The hashed text is the struct form of this very container.
    let ex = decode(container, version).unwrap().explain(version);
    assert_eq!(ex.hash.hash, got.hash);
    let text = String::from_utf8(ex.hash.text).unwrap();
    assert!(
        text.starts_with(
            "(v1.Container){Name:(string)kube-proxy Image:(string)k8s.gcr.io/kube-proxy:v1.13.4 "
        ),
        "{text}"
    );
    assert!(
        text.contains("ProcMount:(*v1.ProcMountType)Default"),
        "{text}"
    );

    // 1.12 has the same type tree and algorithm: same hash. 1.11 lacks ProcMount, 1.14 adds
    // VolumeMount.SubPathExpr: both print other text.
    let at = |v: &str| {
        hash_node(container, v.parse().unwrap())
            .unwrap()
            .hash
            .to_string()
    };
    assert_eq!(at("1.12"), want);
    assert_ne!(at("1.11"), want);
    assert_ne!(at("1.14"), want);
}

/// The observation pins the API-server defaulting of `procMount: Default` (1.12/1.13): without it
/// the 1.13 kubelet prints `ProcMount:(*v1.ProcMountType)<nil>` and hashes differently. A spec
/// that only differs by a JSON-level default the struct form cannot see (`readOnly: false`)
/// hashes the same.
#[test]
fn kube_proxy_1_13_4_depends_on_defaulting_only_where_go_does() {
    let obs = load("kube-proxy-1.13.4.json");
    let v: serde_json::Value = serde_json::from_slice(&obs.bytes).unwrap();
    let want = v["observed"]["hash"].as_str().unwrap().to_string();
    let version: KubeletVersion = "1.13".parse().unwrap();
    let hash = |c: &serde_json::Value| {
        hashcompat::hash_container(c, version)
            .unwrap()
            .hash
            .to_string()
    };
    let c = v["container"].clone();
    assert_eq!(hash(&c), want);

    let mut no_proc_mount = c.clone();
    no_proc_mount["securityContext"]
        .as_object_mut()
        .unwrap()
        .remove("procMount");
    assert_ne!(hash(&no_proc_mount), want);

    let mut explicit_false = c.clone();
    explicit_false["volumeMounts"][1]["readOnly"] = serde_json::Value::Bool(false);
    assert_eq!(hash(&explicit_false), want);

    let mut other_token = c;
    other_token["volumeMounts"][3]["name"] = "kube-proxy-token-cggx8".into();
    assert_ne!(hash(&other_token), want);
}
