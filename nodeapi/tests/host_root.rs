//! Issue 51, item 1: every file a kubeconfig of the node (under `--host-root`) names is read
//! inside the host root, or refused; never this machine's file of the same name, which would
//! go to the server that kubeconfig names as `Authorization: Bearer …`.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use nodeapi::{Error, Kubeconfig, NodeRoot};

const OUTSIDE_TOKEN: &str = "this-machines-own-secret";

/// A temp dir with `host/` (the node's `/`, with `etc/kubernetes/`) and `outside/token`, a
/// file of this machine that no kubeconfig of the node may reach.
struct Layout {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
}

fn layout() -> Layout {
    let tmp = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(tmp.path()).unwrap();
    let root = base.join("host");
    std::fs::create_dir_all(root.join("etc/kubernetes")).unwrap();
    let outside = base.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("token"), OUTSIDE_TOKEN).unwrap();
    Layout {
        _tmp: tmp,
        root,
        outside,
    }
}

/// A kubeconfig at the node's /etc/kubernetes/kubelet.conf whose user is `user_yaml`.
fn kubeconfig(l: &Layout, user_yaml: &str) -> PathBuf {
    let path = l.root.join("etc/kubernetes/kubelet.conf");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\nusers:\n- name: u\n  user:\n{user_yaml}"
        ),
    )
    .unwrap();
    path
}

fn load(l: &Layout, path: &Path) -> Result<Kubeconfig, Error> {
    let root = l.root.clone();
    let resolve = move |p: &Path| storepatch::node::resolve_in_root(&root, p);
    Kubeconfig::load(
        path,
        Some(&NodeRoot {
            dir: &l.root,
            resolve: &resolve,
        }),
    )
}

/// The load never carries this machine's token: it fails (naming the field) or reads a file
/// inside the root.
fn assert_outside_not_read(r: Result<Kubeconfig, Error>, what: &str) -> Error {
    match r {
        Ok(kc) => panic!(
            "{what}: the node's kubeconfig was loaded with token {:?}: a file outside the host root was read",
            kc.token
        ),
        Err(e) => {
            assert!(
                !e.to_string().contains(OUTSIDE_TOKEN),
                "{what}: the refusal does not show the outside file: {e}"
            );
            e
        }
    }
}

#[test]
fn a_relative_token_file_climbing_out_of_the_host_root_is_not_read() {
    let l = layout();
    // host/etc/kubernetes/../../../outside/token is <tmp>/outside/token on this machine
    let kc = kubeconfig(&l, "    token-file: ../../../outside/token\n");
    let e = assert_outside_not_read(load(&l, &kc), "token-file ../../../outside/token");
    assert!(
        matches!(
            e,
            Error::Credential {
                field: "token-file",
                ..
            }
        ),
        "the refusal names the token-file: {e}"
    );
    // `..` stops at the root, as on the node: the node's /outside/token is read
    std::fs::create_dir_all(l.root.join("outside")).unwrap();
    std::fs::write(l.root.join("outside/token"), "node-token").unwrap();
    let kc = load(&l, &kc).expect("the node's own /outside/token is readable");
    assert_eq!(
        kc.token.as_deref(),
        Some("node-token"),
        "`..` above the host root stays at the host root"
    );
}

#[test]
fn a_relative_name_that_is_a_link_to_an_absolute_path_resolves_inside_the_host_root() {
    let l = layout();
    symlink(l.outside.join("token"), l.root.join("etc/kubernetes/token")).unwrap();
    let kc = kubeconfig(&l, "    token-file: token\n");
    assert_outside_not_read(load(&l, &kc), "token-file token -> /<tmp>/outside/token");
    // the link's absolute target, read inside the root
    let inside = l.root.join(l.outside.strip_prefix("/").unwrap());
    std::fs::create_dir_all(&inside).unwrap();
    std::fs::write(inside.join("token"), "node-token").unwrap();
    assert_eq!(
        load(&l, &kc).unwrap().token.as_deref(),
        Some("node-token"),
        "an absolute link target restarts at the host root"
    );
}

#[test]
fn an_absolute_name_whose_lookup_in_the_host_root_fails_is_refused_not_read_here() {
    let l = layout();
    // the node's first component of the outside path is a link to itself: resolving it inside
    // the root loops, and the old code then read the same absolute path on this machine
    let first = l
        .outside
        .components()
        .nth(1)
        .unwrap()
        .as_os_str()
        .to_owned();
    let first = l.root.join(first);
    std::fs::remove_dir_all(&first).ok();
    symlink(Path::new("/").join(first.file_name().unwrap()), &first).unwrap();
    for field in [
        "token-file",
        "client-certificate",
        "client-key",
        "certificate-authority",
    ] {
        let user = match field {
            "token-file" => format!("    token-file: {}\n", l.outside.join("token").display()),
            "certificate-authority" => "    token: t\n".to_string(),
            _ => format!(
                "    client-certificate: {0}\n    client-key: {0}\n",
                l.outside.join("token").display()
            ),
        };
        let kc = kubeconfig(&l, &user);
        if field == "certificate-authority" {
            let text = std::fs::read_to_string(&kc).unwrap().replace(
                "    server: https://127.0.0.1:1\n",
                &format!(
                    "    server: https://127.0.0.1:1\n    certificate-authority: {}\n",
                    l.outside.join("token").display()
                ),
            );
            std::fs::write(&kc, text).unwrap();
        }
        let e = assert_outside_not_read(load(&l, &kc), field);
        assert!(
            e.to_string().contains("inside the host root"),
            "{field}: the refusal says the name does not resolve inside the host root: {e}"
        );
    }
}

#[test]
fn a_kubeconfig_planted_as_a_link_out_of_the_host_root_is_read_inside_it() {
    let l = layout();
    std::fs::write(
        l.outside.join("kubelet.conf"),
        "clusters: []\nusers: []\ncontexts: []\n",
    )
    .unwrap();
    let kc = l.root.join("etc/kubernetes/kubelet.conf");
    symlink(l.outside.join("kubelet.conf"), &kc).unwrap();
    let e = load(&l, &kc).expect_err("the link's target inside the root does not exist");
    assert!(
        matches!(e, Error::Kubeconfig { ref what, .. } if what.contains("cannot read")),
        "the kubeconfig link is followed inside the host root, not to this machine's file: {e}"
    );
}

#[test]
fn without_a_host_root_names_are_this_machines() {
    let l = layout();
    let kc = kubeconfig(&l, "    token-file: ../../../outside/token\n");
    let kc = Kubeconfig::load(&kc, None).expect("no host root: the kubeconfig is this machine's");
    assert_eq!(
        kc.token.as_deref(),
        Some(OUTSIDE_TOKEN),
        "without --host-root a relative name is taken from the kubeconfig's directory"
    );
}
