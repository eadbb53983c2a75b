//! `--host-root` and layout discovery through the command: a node tree under a temp dir, laid
//! out as k3s, MicroK8s, a moved Docker data-root or CRI-O storage.conf lay it out, planned
//! with `--host-root` alone gives exactly the plan of `--root` given explicitly; what cannot be
//! decided or read is a usage error (exit 2) that names the candidates or the file.

mod under_test;

use std::path::Path;
use std::process::{Command, Output};
use under_test::bin;

use testtools::node_tree::{fixture, NodeTree as Node};

fn run(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(bin())
        .args(args)
        .env_remove("KUBELET_REHASH_HOST_ROOT")
        .output()
        .unwrap()
}

fn plan(pods: &Path, to: &str, extra: &[&std::ffi::OsStr]) -> Output {
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "plan".as_ref(),
        "--pods".as_ref(),
        pods.as_os_str(),
        "--to".as_ref(),
        to.as_ref(),
    ];
    args.extend_from_slice(extra);
    run(&args)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `plan --host-root` gives the same table (warnings included) and exit code as `plan --root
/// <the store>` with the node's other files (`explicit`: daemon.json, runroot) given too.
fn same_plan_as_explicit_root(
    n: &Node,
    scenario: &str,
    to: &str,
    store: &Path,
    explicit: &[&std::ffi::OsStr],
) {
    let pods = fixture(&format!("{scenario}/pods.json"));
    let by_host = plan(&pods, to, &["--host-root".as_ref(), n.root.as_os_str()]);
    let mut by_root_args: Vec<&std::ffi::OsStr> = vec!["--root".as_ref(), store.as_os_str()];
    by_root_args.extend_from_slice(explicit);
    let by_root = plan(&pods, to, &by_root_args);
    assert!(
        by_host.status.code() == Some(0) || by_host.status.code() == Some(4),
        "{scenario}: {}",
        text(&by_host.stderr)
    );
    assert_eq!(by_host.status.code(), by_root.status.code(), "{scenario}");
    assert_eq!(text(&by_host.stdout), text(&by_root.stdout), "{scenario}");
    assert!(
        text(&by_host.stdout).contains(&format!("at {}", store.display())),
        "{scenario}: the table names the store found: {}",
        text(&by_host.stdout)
    );
    // The environment variable stands for the flag (a Job sets it once).
    let by_env = Command::new(bin())
        .args(["plan", "--to", to, "--pods"])
        .arg(&pods)
        .env("KUBELET_REHASH_HOST_ROOT", &n.root)
        .output()
        .unwrap();
    assert_eq!(text(&by_env.stdout), text(&by_host.stdout), "{scenario}");
}

#[test]
fn k3s_node_plans_as_with_its_root_given() {
    let n = Node::new();
    let store = n.place(
        "containerd-1.7/var/lib/containerd",
        "/var/lib/rancher/k3s/agent/containerd",
    );
    n.write(
        "/var/lib/rancher/k3s/agent/etc/containerd/config.toml",
        "version = 2\nroot = \"/var/lib/rancher/k3s/agent/containerd\"\nstate = \"/run/k3s/containerd\"\n[grpc]\n  address = \"/run/k3s/containerd/containerd.sock\"\n",
    );
    same_plan_as_explicit_root(&n, "containerd-1.7", "1.31", &store, &[]);
}

#[test]
fn microk8s_node_plans_as_with_its_root_given() {
    let n = Node::new();
    let store = n.place(
        "containerd-1.6/var/lib/containerd",
        "/var/snap/microk8s/common/var/lib/containerd",
    );
    n.write(
        "/var/snap/microk8s/current/args/containerd-template.toml",
        "version = 2\noom_score = 0\n[grpc]\n  uid = 0\n",
    );
    same_plan_as_explicit_root(&n, "containerd-1.6", "1.25", &store, &[]);
}

#[test]
fn moved_docker_data_root_plans_as_with_its_root_given() {
    let n = Node::new();
    let store = n.place("docker-20.10/var/lib/docker", "/data/docker");
    let daemon_json = n.write(
        "/etc/docker/daemon.json",
        r#"{"data-root": "/data/docker", "live-restore": true}"#,
    );
    same_plan_as_explicit_root(
        &n,
        "docker-20.10",
        "1.16",
        &store,
        &["--daemon-json".as_ref(), daemon_json.as_os_str()],
    );
    // The node's daemon.json said live-restore is on: no warning that it may be off.
    let pods = fixture("docker-20.10/pods.json");
    let out = plan(&pods, "1.16", &["--host-root".as_ref(), n.root.as_os_str()]);
    assert!(
        !text(&out.stdout).contains("live-restore"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn crio_storage_conf_runroot_plans_as_with_it_given() {
    let n = Node::new();
    let store = n.place(
        "crio-1.30/var/lib/containers/storage",
        "/var/lib/containers/storage",
    );
    let runroot = n.place("crio-1.30/run/containers/storage", "/run/cstorage");
    n.place("crio-1.30/run/crio", "/var/run/crio");
    n.write(
        "/etc/containers/storage.conf",
        "[storage]\ndriver = \"overlay\"\nrunroot = \"/run/cstorage\"\n",
    );
    same_plan_as_explicit_root(
        &n,
        "crio-1.30",
        "1.31",
        &store,
        &["--runroot".as_ref(), runroot.as_os_str()],
    );
    // Without it, the runroot copies would be missed: the plan says so.
    let pods = fixture("crio-1.30/pods.json");
    let out = plan(&pods, "1.31", &["--root".as_ref(), store.as_os_str()]);
    assert!(
        text(&out.stdout).contains("no CRI-O runroot found"),
        "{}",
        text(&out.stdout)
    );
    let out = plan(&pods, "1.31", &["--host-root".as_ref(), n.root.as_os_str()]);
    assert!(
        !text(&out.stdout).contains("runroot"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn patch_with_a_host_root_backs_up_on_the_node_and_rolls_back_there() {
    let n = Node::new();
    let store = n.place(
        "containerd-1.7/var/lib/containerd",
        "/var/lib/rancher/rke2/agent/containerd",
    );
    let meta = store.join("io.containerd.metadata.v1.bolt/meta.db");
    let before = std::fs::read(&meta).unwrap();
    let pods = fixture("containerd-1.7/pods.json");
    let out = run(&[
        "patch".as_ref(),
        "--pods".as_ref(),
        pods.as_os_str(),
        "--to".as_ref(),
        "1.31".as_ref(),
        "--host-root".as_ref(),
        n.root.as_os_str(),
    ]);
    // 4: one container's spec really changed (the bundled node's drift), as without a host root.
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    assert_ne!(
        std::fs::read(&meta).unwrap(),
        before,
        "the store was patched"
    );
    let backups = n.at("/var/lib/kubelet-rehash/backups");
    let dirs: Vec<_> = std::fs::read_dir(&backups)
        .unwrap_or_else(|e| panic!("the default backup dir is on the node ({e})"))
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    assert!(dirs[0].join("manifest.json").is_file());
    let out = run(&[
        "rollback".as_ref(),
        "--backup-dir".as_ref(),
        dirs[0].as_os_str(),
        "--host-root".as_ref(),
        n.root.as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read(&meta).unwrap(),
        before,
        "rolled back byte for byte"
    );
}

#[test]
fn ambiguous_node_is_a_usage_error_naming_the_candidates() {
    let n = Node::new();
    let docker = n.place("docker-20.10/var/lib/docker", "/var/lib/docker");
    let containerd = n.place("containerd-1.7/var/lib/containerd", "/var/lib/containerd");
    let pods = fixture("docker-20.10/pods.json");
    let out = plan(&pods, "1.16", &["--host-root".as_ref(), n.root.as_os_str()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    for root in [&docker, &containerd] {
        assert!(err.contains(&root.display().to_string()), "{err}");
    }
    assert!(err.contains("more than one runtime store"), "{err}");
    // The operator picks one: the runtime is enough here.
    let out = plan(
        &pods,
        "1.16",
        &[
            "--host-root".as_ref(),
            n.root.as_os_str(),
            "--runtime".as_ref(),
            "docker".as_ref(),
        ],
    );
    assert!(
        matches!(out.status.code(), Some(0 | 4)),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn broken_runtime_config_is_a_usage_error_naming_the_file() {
    for (file, body) in [
        ("/etc/docker/daemon.json", "{\"data-root\": "),
        ("/etc/containerd/config.toml", "version = 2\nroot = [\n"),
        ("/etc/containers/storage.conf", "[storage]\ngraphroot = 7\n"),
    ] {
        let n = Node::new();
        n.place("containerd-1.7/var/lib/containerd", "/var/lib/containerd");
        let path = n.write(file, body);
        let pods = fixture("containerd-1.7/pods.json");
        let out = plan(&pods, "1.31", &["--host-root".as_ref(), n.root.as_os_str()]);
        assert_eq!(out.status.code(), Some(2), "{file}: {}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains(&path.display().to_string()),
            "{file}: {}",
            text(&out.stderr)
        );
        assert!(out.stdout.is_empty(), "no plan of the stock root instead");
    }
}

#[test]
fn host_root_that_is_not_a_directory_is_explained() {
    let n = Node::new();
    let file = n.write("/etc/hostname", "node-1\n");
    let pods = fixture("containerd-1.7/pods.json");
    let out = plan(&pods, "1.31", &["--host-root".as_ref(), file.as_os_str()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("is not a directory"),
        "{}",
        text(&out.stderr)
    );
    let gone = n.at("/nope");
    let out = plan(&pods, "1.31", &["--host-root".as_ref(), gone.as_os_str()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("no such directory"),
        "{}",
        text(&out.stderr)
    );
    // `/` is this machine itself: the same plan as without the option.
    let store = fixture("containerd-1.7/var/lib/containerd");
    let with = plan(
        &pods,
        "1.31",
        &[
            "--host-root".as_ref(),
            "/".as_ref(),
            "--root".as_ref(),
            store.as_os_str(),
        ],
    );
    let without = plan(&pods, "1.31", &["--root".as_ref(), store.as_os_str()]);
    assert_eq!(with.status.code(), without.status.code());
    assert_eq!(with.stdout, without.stdout);
}
