//! The container image (scripts/image.sh: FROM scratch around the static release binary) under
//! a real dockerd, the way a privileged Job runs it: a copy of each bundled node mounted
//! read-only at /host, and the plan it prints must be the host binary's plan of the same copy,
//! byte for byte (the table) and value for value (the JSON report, timings aside).
//!
//! A Rust test rather than a script: the testtools harness owns the private dockerd's whole
//! life (private paths, and a Drop guard that stops it and unmounts and removes everything even
//! when an assertion fails). It needs the static binary, which the test build does not make, so
//! it is built only with the `release-artifacts` feature, which scripts/test-release.sh turns
//! on after scripts/release.sh
//! (`KUBELET_REHASH_BIN` names the release binary).

mod under_test;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use testtools::docker::Daemon;
use under_test::NODES;

const TAG: &str = "kubelet-rehash:image-test";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn docker(d: &Daemon, args: &[&str]) -> Output {
    Command::new("docker")
        .env("DOCKER_HOST", format!("unix://{}", d.socket().display()))
        .args(args)
        .output()
        .expect("the docker CLI runs (scripts/setup-docker.sh)")
}

/// The flags of a plan of the node mounted at `root` (`/host` in the image): the one place
/// that says how the image is pointed at the host. `--host-root` resolves every default path
/// (store root, runroot, sockets, pid files) inside the node copy, as a privileged Job does
/// with the node's `/`; only the pods file is named, and the store flags that are not paths.
fn plan_args(root: &str, to: &str, store: &[&str], json: bool) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "plan".into(),
        "--host-root".into(),
        root.into(),
        "--pods".into(),
        format!("{root}/pods.json"),
    ];
    a.extend(["--to".into(), to.into()]);
    let mut flags = store.iter();
    while let Some(flag) = flags.next() {
        let value = flags.next().expect("a value after each flag");
        if !matches!(*flag, "--root" | "--runroot") {
            a.extend([flag.to_string(), value.to_string()]);
        }
    }
    if json {
        a.extend(["-o".into(), "json".into()]);
    }
    a
}

fn text(out: &Output) -> (i32, String, String) {
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout.clone()).expect("stdout is UTF-8"),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn without_timings(json: &str) -> serde_json::Value {
    let mut v: serde_json::Value = serde_json::from_str(json).expect("the report is JSON");
    let timings = v["timings"]
        .as_object_mut()
        .expect("the report has timings");
    for t in timings.values_mut() {
        *t = serde_json::Value::Null;
    }
    v
}

#[test]
fn the_image_plans_every_mounted_node_copy_as_the_host_binary_does() {
    let release_bin = std::env::var("KUBELET_REHASH_BIN")
        .expect("KUBELET_REHASH_BIN names the static release binary");
    let mut d = Daemon::new();
    d.start();
    let built = Command::new(repo().join("scripts/image.sh"))
        .arg(TAG)
        .env("DOCKER_HOST", format!("unix://{}", d.socket().display()))
        .env("KUBELET_REHASH_BIN", &release_bin)
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "scripts/image.sh: {}{}",
        String::from_utf8_lossy(&built.stdout),
        String::from_utf8_lossy(&built.stderr)
    );
    let inspect = text(&docker(
        &d,
        &[
            "image",
            "inspect",
            "-f",
            "{{len .RootFS.Layers}} {{json .Config.Entrypoint}}",
            TAG,
        ],
    ));
    assert_eq!(
        inspect.1.trim(),
        "1 [\"/kubelet-rehash\"]",
        "one layer (scratch adds none), the binary as entrypoint: {}",
        inspect.2
    );

    let copies = tempfile::tempdir().unwrap();
    for (node, to, store) in NODES {
        let st = Command::new("cp")
            .arg("-a")
            .arg(repo().join("fixtures/nodes").join(node))
            .arg(copies.path())
            .status()
            .unwrap();
        assert!(st.success());
        let copy = copies.path().join(node);
        let copy_s = copy.to_str().unwrap();
        let mount = format!("{copy_s}:/host:ro");
        for json in [false, true] {
            let mut run = vec!["run", "--rm", "--network", "none", "-v", &mount, TAG];
            let args = plan_args("/host", to, store, json);
            run.extend(args.iter().map(String::as_str));
            let (code, image_out, image_err) = text(&docker(&d, &run));
            let host = Command::new(env!("CARGO_BIN_EXE_kubelet-rehash"))
                .args(plan_args(copy_s, to, store, json))
                .output()
                .unwrap();
            let (host_code, host_out, host_err) = text(&host);
            assert!(
                host_code == 0 || host_code == 4,
                "{node}: the host plan exits 0 or 4: {host_err}"
            );
            assert_eq!(
                code, host_code,
                "{node}: exit code in the image: {image_err}"
            );
            assert!(
                host_out.contains(copy_s),
                "{node}: the host output names its root"
            );
            // The same plan, seen from inside: the copy's path reads /host there.
            let host_as_seen_inside = host_out.replace(copy_s, "/host");
            if json {
                assert_eq!(
                    without_timings(&image_out),
                    without_timings(&host_as_seen_inside),
                    "{node}: the JSON report in the image"
                );
            } else {
                assert!(
                    image_out == host_as_seen_inside,
                    "{node}: the plan table in the image differs:\n{image_out}\n--- host:\n{host_as_seen_inside}"
                );
            }
        }
        eprintln!("{node}: the image's plan of /host is the host binary's");
    }
    let _ = docker(&d, &["image", "rm", TAG]);
}
