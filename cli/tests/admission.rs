//! `plan --node FILE` (issue 52): the target kubelet's admission of the node's pods, predicted
//! against a Node object, through the binary. A pod whose nodeSelector the Node's labels no
//! longer match is named by a block hazard and its running containers are planned to restart;
//! `patch` refuses it (exit 3) and goes on with `--accept-restarts`; a pod that still fits is
//! never flagged.

mod rel_common;
mod under_test;

use rel_common::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

const REJECTED: &str = "kubelet-rejects-pod-at-admission";

fn json_of(run: &Run) -> Value {
    serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("-o json prints a report ({e}): {}", run.stderr))
}

/// `kubectl get node NAME -o json` for the pods' node, with `labels`, room for every pod.
fn write_node(dir: &Path, pods: &Value, labels: Value) -> PathBuf {
    let name = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|p| p["spec"]["nodeName"].as_str())
        .unwrap_or("node");
    let node = json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "250", "ephemeral-storage": "1Ti"}}
    });
    let p = dir.join("node.json");
    std::fs::write(&p, serde_json::to_vec(&node).unwrap()).unwrap();
    p
}

fn plan_with_node(n: &Node, to: &str, node: &Path, extra: &[&str]) -> Run {
    Run::from(
        n.cmd("plan")
            .args(["--to", to, "-o", "json", "--node"])
            .arg(node)
            .args(extra)
            .output()
            .unwrap(),
    )
}

fn hazards(report: &Value, code: &str) -> Vec<Value> {
    report["hazards"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["code"] == code)
        .cloned()
        .collect()
}

#[test]
fn plan_with_a_node_names_the_pod_the_target_kubelet_rejects_and_patch_needs_accept_restarts() {
    let n = small("containerd-1.7");
    let to = n.last_target();
    let blind = n.plan(&to);
    assert!(blind.ok(), "the plan without a Node runs: {}", blind.stderr);
    let blind = json_of(&blind);
    assert!(
        !hazards(&blind, "admission-not-predicted").is_empty(),
        "without --node the plan says admission was not predicted"
    );
    // a running container the plan keeps by its rewrite, and its pod
    let kept = blind["records"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| {
            r["action"] == "rewrite"
                && r["would_restart_without_rewrite"] == true
                && r["would_restart_after_rewrite"] == false
        })
        .expect("a container kept by its rewrite")
        .clone();
    let uid = kept["pod_uid"].as_str().unwrap().to_string();
    let mut pods: Value = serde_json::from_slice(&std::fs::read(n.pods()).unwrap()).unwrap();
    let pod = pods["items"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|p| p["metadata"]["uid"] == uid.as_str())
        .expect("the container's pod");
    pod["spec"]["nodeSelector"] = json!({"disktype": "ssd"});
    let name = format!(
        "{}/{}",
        pod["metadata"]["namespace"].as_str().unwrap(),
        pod["metadata"]["name"].as_str().unwrap()
    );
    std::fs::write(n.pods(), serde_json::to_vec(&pods).unwrap()).unwrap();

    // the label is there: nothing rejected, the same fates as without a Node
    let node = write_node(&n.dir, &pods, json!({"disktype": "ssd"}));
    let fits = plan_with_node(&n, &to, &node, &[]);
    assert_eq!(
        fits.code,
        blind_code(&n, &to),
        "a Node every pod fits changes no exit code: {}",
        fits.stderr
    );
    let fits = json_of(&fits);
    assert!(
        hazards(&fits, REJECTED).is_empty(),
        "a pod that still fits is never flagged: {:?}",
        hazards(&fits, REJECTED)
    );
    assert!(
        hazards(&fits, "admission-not-predicted").is_empty(),
        "with --node admission is predicted"
    );
    assert_eq!(
        fits["summary"]["would_restart_after_rewrite"],
        blind["summary"]["would_restart_after_rewrite"],
        "the same restarts"
    );

    // the label is gone: that pod alone is rejected, its containers restart, exit 4
    let node = write_node(&n.dir, &pods, json!({}));
    let run = plan_with_node(&n, &to, &node, &[]);
    assert_eq!(
        run.code,
        Some(4),
        "some containers restart: exit 4: {}",
        run.stderr
    );
    let report = json_of(&run);
    let rejected = hazards(&report, REJECTED);
    assert_eq!(rejected.len(), 1, "one pod is rejected: {rejected:?}");
    assert_eq!(rejected[0]["severity"], "block", "a rejection blocks");
    let msg = rejected[0]["message"].as_str().unwrap();
    assert!(
        msg.contains(&format!("pod {name}:")) && msg.contains("node affinity/selector"),
        "the hazard names the pod and the kubelet's reason: {msg}"
    );
    let record = report["records"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == kept["id"])
        .unwrap();
    assert_eq!(
        record["would_restart_after_rewrite"], true,
        "the rejected pod's running container restarts"
    );

    // patch refuses (exit 3, nothing written), and goes on with --accept-restarts
    let before = n.capture();
    let bk = n.dir.join("bk-refused");
    let refused = Run::from(
        n.patch_cmd(&to, &bk)
            .arg("--node")
            .arg(&node)
            .output()
            .unwrap(),
    );
    assert_eq!(
        refused.code,
        Some(3),
        "a rejected pod refuses the patch: {}",
        refused.stderr
    );
    assert!(
        refused.stderr.contains(REJECTED),
        "the refusal names the hazard: {}",
        refused.stderr
    );
    assert!(n.capture() == before, "a refused patch changed nothing");
    let bk = n.dir.join("bk");
    let done = Run::from(
        n.patch_cmd(&to, &bk)
            .arg("--node")
            .arg(&node)
            .arg("--accept-restarts")
            .output()
            .unwrap(),
    );
    assert_eq!(
        done.code,
        Some(4),
        "--accept-restarts patches and says restarts remain: {}",
        done.stderr
    );
}

fn blind_code(n: &Node, to: &str) -> Option<i32> {
    n.plan(to).code
}

#[test]
fn a_node_file_that_is_not_a_node_is_a_usage_error() {
    let n = small("containerd-1.7");
    let bad = n.dir.join("node.json");
    std::fs::write(&bad, br#"{"kind":"Pod","metadata":{"name":"x"}}"#).unwrap();
    let run = plan_with_node(&n, &n.last_target(), &bad, &[]);
    assert_eq!(run.code, Some(2), "exit 2: {}", run.stderr);
    assert!(
        run.stderr.contains("not a Node"),
        "says why: {}",
        run.stderr
    );
}

/// A Node with capacity (what the target kubelet's allocatable is recomputed from) whose
/// allocatable is its capacity.
fn write_node_with_capacity(dir: &Path, pods: &Value) -> PathBuf {
    let p = write_node(dir, pods, json!({}));
    let mut node: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    let room = json!({"cpu": "64", "memory": "256Gi", "pods": "250", "ephemeral-storage": "1Ti"});
    node["status"] = json!({"capacity": room, "allocatable": room});
    std::fs::write(&p, serde_json::to_vec(&node).unwrap()).unwrap();
    p
}

#[test]
fn a_kubelet_configuration_that_shrinks_allocatable_is_what_the_plan_admits_against() {
    let n = small("containerd-1.7");
    let to = n.last_target();
    let pods: Value = serde_json::from_slice(&std::fs::read(n.pods()).unwrap()).unwrap();
    let node = write_node_with_capacity(&n.dir, &pods);
    let config = &n.dir.join("kubelet-config.yaml");
    let with_config = |text: &str| {
        std::fs::write(config.as_path(), text).unwrap();
        let run = plan_with_node(
            &n,
            &to,
            &node,
            &["--kubelet-config", config.to_str().unwrap()],
        );
        json_of(&run)
    };
    let head = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

    // the configuration that made the Node's allocatable: nothing changes, nothing is said
    let same = with_config(&format!("{head}maxPods: 250\nevictionHard: {{}}\n"));
    assert!(
        hazards(&same, "allocatable-changes").is_empty() && hazards(&same, REJECTED).is_empty(),
        "a configuration giving the Node's own allocatable says nothing: {:#}",
        same["hazards"]
    );

    // maxPods 1: the kubelet admits the oldest pod and rejects every other for the pod count
    let shrunk = with_config(&format!("{head}maxPods: 1\nevictionHard: {{}}\n"));
    let changes = hazards(&shrunk, "allocatable-changes");
    assert_eq!(
        changes.len(),
        1,
        "the allocatable change is said once: {:#}",
        shrunk["hazards"]
    );
    let message = changes[0]["message"].as_str().unwrap();
    assert!(
        message.contains("pods 250 → 1") && changes[0]["severity"] == "warn",
        "the change names the resource, from and to, as a warn: {:#}",
        changes[0]
    );
    let running_pods = pods["items"].as_array().unwrap().len();
    let rejected = hazards(&shrunk, REJECTED);
    // (the first admitted fits; a critical pod, static or system-critical, preempts others
    // instead of being rejected)
    assert!(
        !rejected.is_empty() && rejected.len() < running_pods,
        "pods beyond the first admitted are rejected for the pod count ({} of {running_pods}): {:#}",
        rejected.len(),
        shrunk["hazards"]
    );
    assert!(
        rejected
            .iter()
            .all(|h| h["message"].as_str().unwrap().contains("OutOfpods")),
        "each for the pod count, in the kubelet's words: {rejected:#?}"
    );

    // a file that is no kubelet configuration: said, and the Node's allocatable used
    let unread = with_config("kind: Pod\n");
    assert_eq!(
        hazards(&unread, "allocatable-not-recomputed").len(),
        1,
        "an unusable configuration is said: {:#}",
        unread["hazards"]
    );
    assert!(
        hazards(&unread, REJECTED).is_empty(),
        "and admission goes by the Node's allocatable"
    );
}

#[test]
fn a_feature_gate_turned_off_in_the_new_configuration_rejects_the_pods_that_need_the_feature() {
    let n = small("containerd-1.7");
    let mut pods: Value = serde_json::from_slice(&std::fs::read(n.pods()).unwrap()).unwrap();
    // the first pod's first container gets a RestartAllContainers rule: the pod needs the node
    // feature RestartAllContainersOnContainerExits
    let first = &mut pods["items"][0];
    let name = format!(
        "{}/{}",
        first["metadata"]["namespace"].as_str().unwrap(),
        first["metadata"]["name"].as_str().unwrap()
    );
    first["spec"]["containers"][0]["restartPolicy"] = json!("Never");
    first["spec"]["containers"][0]["restartPolicyRules"] = json!([{"action": "RestartAllContainers",
        "exitCodes": {"operator": "In", "values": [42]}}]);
    std::fs::write(n.pods(), serde_json::to_vec(&pods).unwrap()).unwrap();
    let node = write_node_with_capacity(&n.dir, &pods);
    let config = n.dir.join("kubelet-config.yaml");
    let head = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 250\nevictionHard: {}\n";
    let rejected = |to: &str, gates: &str| {
        std::fs::write(&config, format!("{head}{gates}")).unwrap();
        let run = plan_with_node(
            &n,
            to,
            &node,
            &["--kubelet-config", config.to_str().unwrap()],
        );
        hazards(&json_of(&run), REJECTED)
    };
    let off = "featureGates:\n  RestartAllContainersOnContainerExits: false\n";
    let named = rejected("1.37", off);
    assert_eq!(
        named.len(),
        1,
        "one pod needs the feature whose gate is off: {named:#?}"
    );
    let message = named[0]["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!("pod {name}: "))
            && message.contains("(PodFeatureUnsupported: Pod requires node features that are not available: RestartAllContainersOnContainerExits)"),
        "the hazard names the pod and the kubelet's reason and message: {message}"
    );
    assert!(
        rejected("1.37", "").is_empty(),
        "with the gate at its default (on from 1.36) the pod is kept"
    );
    assert!(
        rejected("1.35", off).is_empty(),
        "a 1.35 kubelet has no declared-features admit handler (its gate alpha, off)"
    );
}
