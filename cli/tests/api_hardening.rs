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
/// `--host-root` (the node's directory).
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
        .env_remove("KUBELET_REHASH_HOST_ROOT");
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
