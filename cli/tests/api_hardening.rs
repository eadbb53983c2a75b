//! Issue 51 through the binary: what the API client refuses (a node kubeconfig naming files
//! outside the host root, ...) exits with its code, says why, and writes nothing: the store,
//! the backup directory and the node's tree stay as they were.

mod rel_common;
mod under_test;

use rel_common::*;
use std::collections::BTreeMap;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};
use testtools::apiserver::{chunk, status, FakeApi, Reply, Request};

/// Every file, directory and link under `dir`: path → bytes (link: its target).
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    for e in walkdir::WalkDir::new(dir).sort_by_file_name() {
        let e = e.unwrap();
        let p = e.path();
        let bytes = if e.path_is_symlink() {
            std::fs::read_link(p)
                .unwrap()
                .into_os_string()
                .into_encoded_bytes()
        } else if e.file_type().is_file() {
            std::fs::read(p).unwrap()
        } else {
            b"<dir>".to_vec()
        };
        out.insert(p.strip_prefix(dir).unwrap().to_path_buf(), bytes);
    }
    out
}

/// `patch` of `node` with its pods from the API server, the kubeconfig found under
/// `--host-root` (the node's directory). A proxy that does not exist is set in the
/// environment: the client connects directly, as docs/fleet.md says, and the success case
/// proves it.
fn patch_from_api(node: &Node, backup: &Path, extra: &[&str]) -> Run {
    let mut c = Command::new(bin());
    c.args(["patch", "--to", &node.last_target(), "-o", "json"])
        .arg("--backup-dir")
        .arg(backup)
        .arg("--host-root")
        .arg(&node.dir)
        .args(["--node-name", "node-1"])
        .args(extra)
        .args(node.store_flags())
        .env_remove("KUBELET_REHASH_CRASH_AT")
        .env_remove("KUBELET_REHASH_CRASH_LOG")
        .env_remove("KUBELET_REHASH_HOST_ROOT")
        .env_remove("NO_PROXY")
        .env_remove("no_proxy");
    for proxy in ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "ALL_PROXY"] {
        c.env(proxy, "http://127.0.0.1:1");
    }
    Run::from(c.output().unwrap())
}

/// Runs `patch` and checks it was refused with `code`, saying `says`, and that nothing was
/// written: no backup directory, the store and every file under the node unchanged.
fn refused_and_nothing_written(node: &Node, extra: &[&str], code: i32, says: &str, what: &str) {
    let bk = node.dir.parent().unwrap().join("backup");
    let before = tree(&node.dir);
    let store = node.snapshot();
    let r = patch_from_api(node, &bk, extra);
    assert_eq!(
        r.code,
        Some(code),
        "{what}: refused with exit {code}: {r:?}"
    );
    assert!(
        r.stderr.contains(says),
        "{what}: the refusal says {says:?}: {}",
        r.stderr
    );
    assert!(!bk.exists(), "{what}: no backup directory is made");
    assert!(
        store.diff(&node.snapshot()).is_empty(),
        "{what}: the store is unchanged"
    );
    assert!(
        tree(&node.dir) == before,
        "{what}: nothing under the node changed"
    );
}

/// A kubeconfig at the node's /etc/kubernetes/kubelet.conf (the kubeadm default) with
/// `server` and the user `user_yaml`.
fn node_kubeconfig(node: &Node, server: &str, cluster_yaml: &str, user_yaml: &str) {
    let dir = node.dir.join("etc/kubernetes");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("kubelet.conf"),
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n{cluster_yaml}contexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\nusers:\n- name: u\n  user:\n{user_yaml}"
        ),
    )
    .unwrap();
}

/// Issue 51 item 1: the three routes out of the host root are each refused (exit 2) before
/// anything is asked or written, and this machine's file is never read.
#[test]
fn credential_names_leaving_the_host_root_are_refused_and_nothing_is_written() {
    let node = small("docker-20.10");
    let outside = node.dir.parent().unwrap().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("token"), "this-machines-own-secret").unwrap();
    let outside = std::fs::canonicalize(&outside).unwrap();
    // nothing listens there: the old code read the token and failed only to connect (exit 5)
    let server = "https://127.0.0.1:1";

    // 1. a relative name climbing out: host/etc/kubernetes/../../../outside/token
    node_kubeconfig(
        &node,
        server,
        "",
        "    token-file: ../../../outside/token\n",
    );
    refused_and_nothing_written(
        &node,
        &[],
        2,
        "token-file ../../../outside/token",
        "relative token-file climbing out of the host root",
    );

    // 2. a relative name that, on the node, is a link to an absolute path
    let link = node.dir.join("etc/kubernetes/token");
    symlink(outside.join("token"), &link).unwrap();
    node_kubeconfig(&node, server, "", "    token-file: token\n");
    refused_and_nothing_written(
        &node,
        &[],
        2,
        "token-file token",
        "relative token-file that is a link to an absolute path",
    );
    std::fs::remove_file(&link).unwrap();

    // 3. an absolute name whose lookup inside the host root fails (a link loop at its first
    // component): the old code then read the same path on this machine
    let first = Path::new("/").join(outside.components().nth(1).unwrap());
    let loop_link = node.dir.join(first.strip_prefix("/").unwrap());
    assert!(
        !loop_link.exists(),
        "the fixture node has no {}",
        first.display()
    );
    symlink(&first, &loop_link).unwrap();
    for (cluster, user, field) in [
        (
            String::new(),
            format!("    token-file: {}\n", outside.join("token").display()),
            "token-file",
        ),
        (
            String::new(),
            format!(
                "    client-certificate: {0}\n    client-key: {0}\n",
                outside.join("token").display()
            ),
            "client-certificate",
        ),
        (
            format!(
                "    certificate-authority: {}\n",
                outside.join("token").display()
            ),
            "    token: t\n".to_string(),
            "certificate-authority",
        ),
    ] {
        node_kubeconfig(&node, server, &cluster, &user);
        refused_and_nothing_written(
            &node,
            &[],
            2,
            "inside the host root",
            &format!("absolute {field} whose lookup in the host root loops"),
        );
    }
}

/// How the fake answers a pod listing.
type PodsReply = Box<dyn Fn(&Request) -> Reply + Send + Sync>;

/// The fixture node's pods as its API server would serve them, with the Node and /version;
/// `pods` answers the pod listing instead, when given.
fn serve_node(node: &Node, pods: Option<PodsReply>) -> FakeApi {
    let list: Value = serde_json::from_slice(&std::fs::read(node.pods()).unwrap()).unwrap();
    let items = list["items"].clone();
    FakeApi::start("node-1", move |r: &Request| {
        let path = r.path.as_str();
        if path == "/version" {
            Reply::Json(
                200,
                json!({"major": "1", "minor": "36", "gitVersion": "v1.36.0"}).to_string(),
            )
        } else if path.starts_with("/api/v1/nodes/node-1") {
            Reply::Json(
                200,
                json!({"kind": "Node", "metadata": {"name": "node-1"}, "status": {"nodeInfo": {"kubeletVersion": "", "containerRuntimeVersion": "docker://20.10.0"}}}).to_string(),
            )
        } else if path.starts_with("/api/v1/pods") {
            match &pods {
                Some(f) => f(r),
                None => Reply::Json(
                    200,
                    json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": items}).to_string(),
                ),
            }
        } else {
            Reply::Json(404, status(404, "not found"))
        }
    })
}

/// The kubeconfig of `api` in a directory of its own beside the node (outside the host root).
fn fake_kubeconfig(
    node: &Node,
    api: &FakeApi,
    token: Option<&str>,
    server: Option<&str>,
) -> String {
    let dir = node.dir.parent().unwrap().join("kubeconfig");
    api.kubeconfig(&dir, token, server).display().to_string()
}

/// The harness itself: with the fake server answering as a real one, `patch` lists the pods
/// from it and patches; and a password in the server's URL appears nowhere it writes or says.
#[test]
fn the_fake_api_server_drives_a_patch_and_no_password_is_shown() {
    let node = small("docker-20.10");
    let api = serve_node(&node, None);
    let url = api.url.replace("https://", "https://admin:PASSWORD-XYZ@");
    let kc = fake_kubeconfig(&node, &api, None, Some(&url));
    let bk = node.dir.parent().unwrap().join("backup");
    let r = patch_from_api(&node, &bk, &["--kubeconfig", &kc]);
    assert!(
        r.ok(),
        "patch with the pods from the fake API server: {r:?}"
    );
    assert!(
        api.requests()
            .iter()
            .any(|q| q.path.starts_with("/api/v1/pods")),
        "the pods were listed from the fake server"
    );
    let said = format!("{}{}", r.stdout, r.stderr);
    assert!(
        !said.contains("PASSWORD-XYZ") && said.contains("***@127.0.0.1"),
        "the server's URL is shown without its password: {said}"
    );
    for (path, bytes) in tree(&bk) {
        assert!(
            !String::from_utf8_lossy(&bytes).contains("PASSWORD-XYZ"),
            "the backup's {} has no password",
            path.display()
        );
    }
}

/// Item 7: a pod of another node among node-1's is refused (exit 3), named with its node.
#[test]
fn a_pod_of_another_node_is_refused_by_name_and_nothing_is_written() {
    let node = small("docker-20.10");
    let list: Value = serde_json::from_slice(&std::fs::read(node.pods()).unwrap()).unwrap();
    let mut items = list["items"].as_array().unwrap().clone();
    items[0]["spec"]["nodeName"] = json!("other-node");
    let stranger = format!(
        "{}/{}",
        items[0]["metadata"]["namespace"].as_str().unwrap(),
        items[0]["metadata"]["name"].as_str().unwrap()
    );
    let api = serve_node(
        &node,
        Some(Box::new(move |_r: &Request| {
            Reply::Json(
                200,
                json!({"kind": "PodList", "metadata": {}, "items": items}).to_string(),
            )
        })),
    );
    let kc = fake_kubeconfig(&node, &api, None, None);
    refused_and_nothing_written(
        &node,
        &["--kubeconfig", &kc],
        3,
        &stranger,
        "a pod of another node in the listing",
    );
    refused_and_nothing_written(
        &node,
        &["--kubeconfig", &kc],
        3,
        "other-node",
        "a pod of another node in the listing (its node named)",
    );
}

/// Item 6: an http:// server with a token is refused as insecure-skip-tls-verify is (exit 2).
#[test]
fn an_http_server_with_a_token_is_refused_and_nothing_is_sent_or_written() {
    let node = small("docker-20.10");
    let api = serve_node(&node, None);
    let http = api.url.replace("https://", "http://");
    let kc = fake_kubeconfig(&node, &api, Some("secret-token"), Some(&http));
    refused_and_nothing_written(
        &node,
        &["--kubeconfig", &kc],
        2,
        "is not https",
        "http:// with a token",
    );
    assert!(
        api.requests().is_empty(),
        "nothing is sent to an http:// server"
    );
}

/// Item 2: an endless pod list is cut off at the stated bound (exit 5).
#[test]
fn an_endless_pod_list_is_refused_at_its_bound_and_nothing_is_written() {
    let node = small("docker-20.10");
    let api = serve_node(
        &node,
        Some(Box::new(|_r: &Request| {
            Reply::Stream(Box::new(|out| {
                if !chunk(out, br#"{"kind":"PodList","metadata":{},"items":["#) {
                    return;
                }
                let one = format!("{{\"x\":\"{}\"}},", "x".repeat(60_000));
                while chunk(out, one.as_bytes()) {}
            }))
        })),
    );
    let kc = fake_kubeconfig(&node, &api, None, None);
    refused_and_nothing_written(
        &node,
        &["--kubeconfig", &kc],
        5,
        "exceeds 67108864 bytes",
        "an endless pod list",
    );
}

/// Item 3: the same continue token on every page ends the listing (exit 5).
#[test]
fn a_repeated_continue_token_is_refused_and_nothing_is_written() {
    let node = small("docker-20.10");
    let api = serve_node(
        &node,
        Some(Box::new(|_r: &Request| {
            Reply::Json(
                200,
                json!({"kind": "PodList", "metadata": {"continue": "again"}, "items": []})
                    .to_string(),
            )
        })),
    );
    let kc = fake_kubeconfig(&node, &api, None, None);
    refused_and_nothing_written(
        &node,
        &["--kubeconfig", &kc],
        5,
        "continue token came back",
        "a repeated continue token",
    );
}

/// Items 8 and 9: a 403 whose text is escape sequences, from a URL with a password: the text
/// is shown escaped, the password not at all (exit 5).
#[test]
fn server_text_is_escaped_and_the_url_password_hidden_in_a_refusal() {
    let node = small("docker-20.10");
    let forged = "\u{1b}[2J\u{1b}[Hkubelet-rehash: 13 containers rewritten\r\n";
    let api = FakeApi::start("node-1", move |_r: &Request| {
        Reply::Json(403, status(403, forged))
    });
    let url = api.url.replace("https://", "https://admin:PASSWORD-XYZ@");
    let kc = fake_kubeconfig(&node, &api, None, Some(&url));
    let bk = node.dir.parent().unwrap().join("backup");
    refused_and_nothing_written(
        &node,
        &["--kubeconfig", &kc],
        5,
        "\\u{1b}[2J",
        "a 403 with escape sequences",
    );
    let r = patch_from_api(&node, &bk, &["--kubeconfig", &kc]);
    assert!(
        !r.stderr.contains('\u{1b}') && !r.stderr.contains('\r'),
        "no raw control character of the server's text reaches the terminal: {:?}",
        r.stderr
    );
    assert!(
        !r.stderr.contains("PASSWORD-XYZ"),
        "the server's password is not shown: {}",
        r.stderr
    );
}
