//! deploy/system-upgrade-controller/plan.yaml against system-upgrade-controller's own Plan CRD
//! (fixtures/suc/, copied unchanged from rancher/system-upgrade-controller; its README names the
//! commit), the way the API server would take it, plus the choices the CRD cannot express
//! (no drain, a deadline that fits the budget, the pods from the API server with the node's
//! own identity, so the Job's own pod among them, and no RBAC grant) and the
//! `upgrade` flags the Plan passes, checked against the binary's own `upgrade --help`.
//!
//! The API server validates a custom resource with the CRD's `openAPIV3Schema` and, since
//! Kubernetes 1.27, `kubectl apply` asks it for strict field validation (an unknown field is
//! an error, not silently pruned). [`api_server_schema`] turns the structural schema into the
//! JSON Schema that behaves that way; every broken Plan below must be refused by it.

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn yaml_docs(path: &Path) -> Vec<Value> {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| {
            let v: serde_yaml::Value = serde::Deserialize::deserialize(d)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            serde_json::to_value(v).unwrap()
        })
        .filter(|v| !v.is_null())
        .collect()
}

const CRD: &str = "fixtures/suc/upgrade.cattle.io_plans.yaml";
const PLAN: &str = "deploy/system-upgrade-controller/plan.yaml";

/// The CRD document and its served v1 schema.
fn crd() -> (Value, Value) {
    let path = workspace().join(CRD);
    let bytes = fs::read(&path).unwrap();
    let readme = fs::read_to_string(workspace().join("fixtures/suc/README.md")).unwrap();
    let sum = hex::encode(Sha256::digest(&bytes));
    assert!(
        readme.contains(&sum),
        "{CRD} (sha256 {sum}) is not the file fixtures/suc/README.md describes: replace it from \
         the commit the README names, or update the README's source and sum"
    );
    let docs = yaml_docs(&path);
    assert_eq!(docs.len(), 1, "{CRD}: one CRD");
    let crd = docs.into_iter().next().unwrap();
    assert_eq!(crd["kind"], "CustomResourceDefinition");
    assert_eq!(crd["spec"]["names"]["kind"], "Plan");
    let v1 = crd["spec"]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "v1" && v["served"] == true)
        .expect("a served v1")
        .clone();
    let schema = v1["schema"]["openAPIV3Schema"].clone();
    assert!(schema.is_object(), "v1 has an openAPIV3Schema");
    (crd, schema)
}

/// The structural schema as the API server applies it to a create with strict field
/// validation: an object whose `properties` are listed takes no other field unless the schema
/// says `additionalProperties` or `x-kubernetes-preserve-unknown-fields`; `nullable` admits
/// null; `format: int32`/`int64` bound the integer. `metadata` (plain `type: object` here) is
/// ObjectMeta, which the server checks itself: name and namespace are checked by the caller.
fn api_server_schema(s: &Value) -> Value {
    let mut out = s.clone();
    let Some(o) = out.as_object_mut() else {
        return out;
    };
    if let Some(props) = o.get("properties").and_then(Value::as_object).cloned() {
        let converted: serde_json::Map<String, Value> = props
            .iter()
            .map(|(k, v)| (k.clone(), api_server_schema(v)))
            .collect();
        o.insert("properties".into(), Value::Object(converted));
        let preserve = o
            .get("x-kubernetes-preserve-unknown-fields")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        if !preserve && !o.contains_key("additionalProperties") {
            o.insert("additionalProperties".into(), json!(false));
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(sub) = o.get(key).filter(|v| v.is_object()).cloned() {
            o.insert(key.into(), api_server_schema(&sub));
        }
    }
    for key in ["anyOf", "allOf", "oneOf"] {
        if let Some(list) = o.get(key).and_then(Value::as_array).cloned() {
            o.insert(
                key.into(),
                Value::Array(list.iter().map(api_server_schema).collect()),
            );
        }
    }
    if o.get("nullable").and_then(Value::as_bool) == Some(true) {
        if let Some(t) = o.get("type").and_then(Value::as_str).map(String::from) {
            o.insert("type".into(), json!([t, "null"]));
        }
    }
    match o.get("format").and_then(Value::as_str) {
        Some("int32") => {
            o.insert("minimum".into(), json!(i32::MIN));
            o.insert("maximum".into(), json!(i32::MAX));
        }
        Some("int64") => {
            o.insert("minimum".into(), json!(i64::MIN));
            o.insert("maximum".into(), json!(i64::MAX));
        }
        _ => {}
    }
    out
}

/// Every way `plan` breaks the CRD's schema, as "path: message" lines.
fn schema_errors(validator: &jsonschema::Validator, plan: &Value) -> Vec<String> {
    validator
        .iter_errors(plan)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

fn validator() -> (Value, jsonschema::Validator) {
    let (crd, schema) = crd();
    let v = jsonschema::draft4::new(&api_server_schema(&schema))
        .expect("the CRD's schema compiles as JSON Schema");
    (crd, v)
}

fn plans() -> Vec<Value> {
    let docs = yaml_docs(&workspace().join(PLAN));
    let plans: Vec<Value> = docs.into_iter().filter(|d| d["kind"] == "Plan").collect();
    assert_eq!(plans.len(), 1, "{PLAN}: one Plan");
    plans
}

#[test]
fn the_plan_validates_against_the_controllers_crd() {
    let (crd, validator) = validator();
    let group = crd["spec"]["group"].as_str().unwrap();
    for plan in plans() {
        assert_eq!(plan["apiVersion"], format!("{group}/v1"));
        let name = plan["metadata"]["name"].as_str().expect("metadata.name");
        assert!(
            !name.is_empty()
                && name.len() <= 63
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
            "metadata.name {name:?} is not a DNS label (the Job names derive from it)"
        );
        assert_eq!(crd["spec"]["scope"], "Namespaced");
        assert!(plan["metadata"]["namespace"].is_string(), "a namespace");
        let errors = schema_errors(&validator, &plan);
        assert!(
            errors.is_empty(),
            "{PLAN} breaks the CRD:\n{}",
            errors.join("\n")
        );
    }
}

/// Each edit breaks the schema in one way the API server refuses; the validator must name it.
#[test]
fn a_broken_plan_is_refused() {
    let (_, validator) = validator();
    let plan = plans().remove(0);
    type Edit = fn(&mut Value);
    let cases: [(&str, &str, Edit); 7] = [
        ("a misspelt field", "/spec", |p| {
            p["spec"]["concurency"] = json!(1)
        }),
        ("a string where an integer goes", "/spec/concurrency", |p| {
            p["spec"]["concurrency"] = json!("1")
        }),
        ("no upgrade image (required)", "/spec/upgrade", |p| {
            p["spec"]["upgrade"]
                .as_object_mut()
                .unwrap()
                .remove("image");
        }),
        (
            "a day the window does not know",
            "/spec/window/days/0",
            |p| p["spec"]["window"]["days"][0] = json!("someday"),
        ),
        (
            "an empty list of days (minItems 1)",
            "/spec/window/days",
            |p| p["spec"]["window"]["days"] = json!([]),
        ),
        (
            "an unknown field deep down",
            "/spec/upgrade/securityContext",
            |p| p["spec"]["upgrade"]["securityContext"] = json!({"runAsUserr": 0}),
        ),
        ("args that are not strings", "/spec/upgrade/args/0", |p| {
            p["spec"]["upgrade"]["args"][0] = json!(3)
        }),
    ];
    for (what, path, edit) in cases {
        let mut broken = plan.clone();
        edit(&mut broken);
        let errors = schema_errors(&validator, &broken);
        assert!(
            errors.iter().any(|e| e.starts_with(&format!("{path}:"))),
            "{what}: expected an error at {path}, got {errors:?}"
        );
    }
    // the schema as the controller generated it, without strict field validation, prunes
    // unknown fields instead: the misspelling would pass, which is why the strict form is used
    let (_, raw) = crd();
    let lax = jsonschema::draft4::new(&raw).unwrap();
    let mut typo = plan.clone();
    typo["spec"]["concurency"] = json!(1);
    assert!(lax.is_valid(&typo));
}

fn arg(args: &[String], flag: &str) -> Option<String> {
    args.iter()
        .find_map(|a| a.strip_prefix(&format!("{flag}=")).map(String::from))
}

/// What the CRD cannot say: the Plan keeps every pod running, fits its deadline, lists its own
/// pod, runs the image scripts/image.sh names, and passes flags `upgrade` has.
#[test]
fn the_plan_keeps_pods_running_and_fits_its_deadline() {
    let plan = plans().remove(0);
    let spec = &plan["spec"];
    assert!(spec.get("drain").is_none(), "no drain: the pods must stay");
    assert_ne!(spec["cordon"], true, "no cordon");
    let concurrency = spec["concurrency"].as_i64().expect("concurrency");
    assert!(concurrency >= 1);
    assert!(spec["window"]["startTime"].is_string() && spec["window"]["endTime"].is_string());
    let deadline = spec["jobActiveDeadlineSecs"].as_i64().expect("a deadline");
    let args: Vec<String> = spec["upgrade"]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    assert_eq!(args[0], "upgrade");
    assert_eq!(arg(&args, "--host-root").as_deref(), Some("/host"));
    let budget: i64 = arg(&args, "--budget").unwrap().parse().unwrap();
    // image pulls, the pods listing, preflight, the window and verification: the window is
    // the budget, everything else is bounded well under a minute on a 2,000-container node
    assert!(
        (budget + 120..600).contains(&deadline),
        "jobActiveDeadlineSecs {deadline} must leave 2 minutes beyond the {budget} s budget and \
         stay under the controller's 600 s default"
    );
    for flag in ["--stop-kubelet", "--stop-runtime", "--kubelet-path"] {
        assert!(
            arg(&args, flag).is_none(),
            "{flag}: under --host-root the node's own systemd and /usr/bin/kubelet are the \
             defaults (and the runtime unit's KillMode is checked only without --stop-runtime)"
        );
    }
    assert!(
        !args.iter().any(|a| a == "--accept-restarts"),
        "a node on which some container would restart stops the rollout (exit 4)"
    );

    // The pods: listed by `upgrade` itself from the API server, inside the Job's own pod (so
    // that pod is among them), with the node's kubeconfig under --host-root: no pods file, no
    // prepare step, no credential of the Job's, and the node's name as the controller knows it.
    assert!(arg(&args, "--pods").is_none(), "no pods file");
    assert!(
        arg(&args, "--kubeconfig").is_none(),
        "the kubelet's own kubeconfig"
    );
    assert!(spec.get("prepare").is_none(), "no prepare step");
    assert_eq!(
        arg(&args, "--node-name").as_deref(),
        Some("$(SYSTEM_UPGRADE_NODE_NAME)"),
        "the node the controller scheduled the Job on"
    );
    let rbac = yaml_docs(&workspace().join("deploy/system-upgrade-controller/rbac.yaml"));
    assert!(
        rbac.iter().all(|d| d["kind"] == "ServiceAccount"),
        "no role is granted: the node's identity reads its pods"
    );
    for flag in ["--state", "--report"] {
        assert!(
            arg(&args, flag).unwrap().starts_with("/host/"),
            "{flag} on the node's disk, so a rerun (backoffLimit) finds it"
        );
    }

    // The binary comes from the image scripts/image.sh tags kubelet-rehash:<version>.
    let dockerfile = fs::read_to_string(
        workspace().join("deploy/system-upgrade-controller/Dockerfile.upgrader"),
    )
    .unwrap();
    let version = env!("CARGO_PKG_VERSION");
    assert!(
        dockerfile.contains(&format!("ARG REHASH_IMAGE=kubelet-rehash:{version}\n")),
        "Dockerfile.upgrader takes the binary from kubelet-rehash:{version}"
    );
    let image_sh = fs::read_to_string(workspace().join("scripts/image.sh")).unwrap();
    assert!(image_sh.contains("tag=${1:-kubelet-rehash:$version}"));
    let image = spec["upgrade"]["image"].as_str().unwrap();
    assert!(
        !image.rsplit('/').next().unwrap().contains(':'),
        "untagged: the controller tags it with the Plan's version ({})",
        spec["version"]
    );
}

#[test]
fn the_plan_passes_only_flags_upgrade_has() {
    let plan = plans().remove(0);
    let help = Command::new(env!("CARGO_BIN_EXE_kubelet-rehash"))
        .args(["upgrade", "--help"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(help.status.success(), "upgrade --help: {help:?}");
    for a in plan["spec"]["upgrade"]["args"].as_array().unwrap() {
        let a = a.as_str().unwrap();
        if let Some(flag) = a.strip_prefix("--").map(|f| f.split('=').next().unwrap()) {
            assert!(
                text.contains(&format!("--{flag}")),
                "the Plan passes --{flag}, which `upgrade --help` does not list:\n{text}"
            );
        }
    }
}
