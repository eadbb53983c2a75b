//! Proof on a real dockerd 20.10 (Debian 12 `docker.io`; install with scripts/setup-docker.sh),
//! 28.5.2 and 29's engine (built from the Go module proxy: scripts/setup-docker-module.sh):
//! a private dockerd with live-restore runs a dockershim-shaped pod (sandbox + two
//! containers); dockerd is stopped (the containers keep running), the hashes are rewritten
//! through the library, dockerd is started again and must report the new hashes for the same,
//! still running processes. Then rollback, restart, and the old hashes are back.
//!
//! Everything lives under one temp dir: data-root, exec-root, pidfile, socket. The guard's Drop
//! removes the containers, stops dockerd, kills what is left of our processes by pid (found by
//! that unique path), unmounts what dockerd mounted there and removes the dir, even when an
//! assertion fails. The harness (dockerd instance, image, guard) is shared with
//! cli/tests/e2e_live.rs: testtools::docker.

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::Path;
use std::time::Instant;
use storepatch::backup::{self, Backup, RollbackAction};
use storepatch::docker::{DockerOptions, DockerStore, HASH_LABEL};
use storepatch::{RecordKind, Rewrite, RuntimeStore, StoreError};
use testtools::docker::*;

const UID: &str = "7d0e8c1a-1111-4a4a-9b9b-000000000001";

fn container_labels(name: &str, hash: &str, sandbox: &str, logdir: &Path) -> Value {
    let mut l = json!({
        "annotation.io.kubernetes.container.hash": hash,
        "annotation.io.kubernetes.container.restartCount": "0",
        "annotation.io.kubernetes.container.terminationMessagePath": "/dev/termination-log",
        "annotation.io.kubernetes.container.terminationMessagePolicy": "File",
        "annotation.io.kubernetes.pod.terminationGracePeriod": "30",
        "io.kubernetes.container.logpath": format!("{}/{name}/0.log", logdir.display()),
        "io.kubernetes.container.name": name,
        "io.kubernetes.docker.type": "container",
        "io.kubernetes.pod.name": "web-0",
        "io.kubernetes.pod.namespace": "default",
        "io.kubernetes.pod.uid": UID,
        "io.kubernetes.sandbox.id": sandbox,
    });
    if name == "nginx" {
        l["annotation.io.kubernetes.container.ports"] =
            json!("[{\"name\":\"http\",\"containerPort\":8080,\"protocol\":\"TCP\"}]");
    } else {
        l["annotation.io.kubernetes.container.preStopHandler"] =
            json!("{\"exec\":{\"command\":[\"/bin/sh\",\"-c\",\"sleep 1 && echo bye\"]}}");
    }
    l
}

#[test]
fn rewrite_on_a_real_dockerd_keeps_containers_running() {
    rewrite_on(Daemon::new(), "20.10");
}

/// Docker 28.5.2, built from the Go module proxy (`github.com/docker/docker@v28.5.2+incompatible`,
/// scripts/setup-docker-module.sh): its `config.v2.json` carries fields 20.10 never wrote.
#[test]
fn rewrite_on_a_real_dockerd_28_5_keeps_containers_running() {
    rewrite_on(Daemon::with_dockerd(module_dockerd("28.5.2")), "28.5.2");
}

/// Docker 29's engine as the proxy serves it: `github.com/moby/moby/v2@v2.0.0-beta.24`
/// (`releases/versions.yaml`: 29.8), built by scripts/setup-docker-module.sh; no released 29.x
/// tag is on the proxy (403).
/// It asks runc for a time namespace, which Debian 12's runc 1.1.5 does not know: its default
/// runtime is runc 1.4.3, built from the proxy (scripts/setup-runc-module.sh).
#[test]
fn rewrite_on_a_real_dockerd_29_beta_keeps_containers_running() {
    let d = Daemon::with_dockerd(module_dockerd("v2.0.0-beta.24"));
    d.use_runc(&module_runc("1.4.3"));
    rewrite_on(d, "2.0.0-beta.24");
}

/// Every `config.v2.json` of the store, by container id.
fn configs(data_root: &Path) -> BTreeMap<String, String> {
    fs::read_dir(data_root.join("containers"))
        .unwrap()
        .flatten()
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                fs::read_to_string(e.path().join("config.v2.json")).unwrap(),
            )
        })
        .collect()
}

fn rewrite_on(mut d: Daemon, version: &str) {
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "the live Docker test needs root (CI runs as root); {SETUP}"
    );
    d.start();
    let mut c = d.client();
    let api = c.negotiate().unwrap();
    eprintln!("dockerd API {api}");
    let reported =
        String::from_utf8_lossy(&c.request("GET", "/version", None).unwrap().body).into_owned();
    assert!(
        reported.contains(&format!("\"Version\":\"{version}")),
        "the dockerd under test is {version}: {reported}"
    );

    // Image: imported from a tar built now from /bin/busybox.
    let image_id = import_busybox_image(&c, "docker.io/library/storetest", "1.0");

    // The pod, shaped like dockershim's.
    let logdir = d.path(&format!("kubelet/log/pods/default_web-0_{UID}"));
    fs::create_dir_all(&logdir).unwrap();
    let sandbox = create(
        &c,
        &format!("k8s_POD_web-0_default_{UID}_0"),
        json!({
            "Image": "docker.io/library/storetest:1.0",
            "Hostname": "",
            "Entrypoint": ["/bin/sh", "-c", LOOP],
            "Env": ["PATH=/bin"],
            "Labels": {
                "annotation.kubernetes.io/config.seen": "2024-05-01T10:00:00.000000000Z",
                "annotation.kubernetes.io/config.source": "api",
                "app": "web",
                "io.kubernetes.container.name": "POD",
                "io.kubernetes.docker.type": "podsandbox",
                "io.kubernetes.pod.name": "web-0",
                "io.kubernetes.pod.namespace": "default",
                "io.kubernetes.pod.uid": UID,
            },
            "HostConfig": {"NetworkMode": "host", "IpcMode": "shareable", "SecurityOpt": ["seccomp=unconfined"]},
        }),
    );
    d.container_ids.push(sandbox.clone());
    c.call::<Value>("POST", &format!("/containers/{sandbox}/start"), None)
        .unwrap();
    let mut old_hash = BTreeMap::new();
    let mut ids = BTreeMap::new();
    for (name, hash) in [("nginx", "3a1f6c2e"), ("sidecar", "5b20d7f1")] {
        let id = create(
            &c,
            &format!("k8s_{name}_web-0_default_{UID}_0"),
            json!({
                "Image": image_id,
                "Entrypoint": ["/bin/sh", "-c"],
                "Cmd": [format!("echo started; {LOOP}")],
                "Env": ["KUBERNETES_SERVICE_HOST=10.96.0.1", "PATH=/bin"],
                "Healthcheck": {"Test": ["NONE"]},
                "Labels": container_labels(name, hash, &sandbox, &logdir),
                "HostConfig": {
                    "NetworkMode": format!("container:{sandbox}"),
                    "IpcMode": format!("container:{sandbox}"),
                    "UTSMode": "host",
                    "RestartPolicy": {"Name": "no"},
                    "SecurityOpt": ["seccomp=unconfined"],
                },
            }),
        );
        d.container_ids.push(id.clone());
        c.call::<Value>("POST", &format!("/containers/{id}/start"), None)
            .unwrap();
        old_hash.insert(id.clone(), hash.to_string());
        ids.insert(name, id);
    }
    let mut pids = BTreeMap::new();
    for id in &d.container_ids.clone() {
        let i = c.inspect(id).unwrap();
        assert!(i.running && i.pid > 0, "{id} not running: {i:?}");
        pids.insert(id.clone(), i.pid);
        d.container_pids.push(i.pid);
    }

    // While dockerd runs: the store refuses to write, live-restore is read from its command line.
    let store_opts = DockerOptions {
        pidfile: d.pidfile(),
        socket: d.socket(),
        daemon_json: d.path("daemon.json"),
        live_restore: None,
        ..DockerOptions::default()
    };
    let store = DockerStore::with_options(&d.data_root(), store_opts).unwrap();
    let lr = store.live_restore();
    assert!(lr.is_on(), "{lr:?}");
    let e = store.ensure_stopped().unwrap_err();
    assert!(matches!(e, StoreError::RuntimeRunning { .. }), "{e}");
    let new_hash: BTreeMap<String, String> = [
        (ids["nginx"].clone(), "e1f2a3b4".to_string()),
        (ids["sidecar"].clone(), "badf00d".to_string()),
    ]
    .into();
    let rewrites: Vec<Rewrite> = new_hash
        .iter()
        .map(|(id, h)| Rewrite {
            id: id.clone(),
            hash: h.parse().unwrap(),
            hash_without_resources: None,
        })
        .collect();
    let mut refused = Backup::create(&d.path("backup-refused"), "docker", &d.data_root()).unwrap();
    assert!(matches!(
        store.apply(&rewrites, &mut refused),
        Err(StoreError::RuntimeRunning { .. })
    ));

    // Stop dockerd: the containers keep running.
    d.stop();
    for (id, &pid) in &pids {
        assert!(
            pid_alive(pid),
            "container {id} pid {pid} died when dockerd stopped"
        );
    }
    store.ensure_stopped().unwrap();
    let report = store.scan().unwrap();
    assert_eq!(report.records.len(), 3);
    for r in &report.records {
        let want_kind = if r.id == sandbox {
            RecordKind::Sandbox
        } else {
            RecordKind::Container
        };
        assert_eq!(r.kind, want_kind);
        assert_eq!(r.pod_uid.as_deref(), Some(UID));
        assert_eq!(r.pid, Some(pids[&r.id]), "recorded pid of {}", r.id);
        assert_eq!(r.hash.as_ref(), old_hash.get(&r.id));
        if r.kind == RecordKind::Container {
            assert_eq!(r.attempt, Some(0));
        }
    }

    // Rewrite through the library.
    let configs_before = configs(&d.data_root());
    let bdir = d.path("backup");
    let mut b = Backup::create(&bdir, "docker", &d.data_root()).unwrap();
    let t0 = Instant::now();
    let out = store.apply(&rewrites, &mut b).unwrap();
    eprintln!(
        "apply of {} files took {:?}",
        out.files_written,
        t0.elapsed()
    );
    assert_eq!(out.changed.len(), 2);
    // every field dockerd wrote, known to us or not, is kept byte for byte and in place
    for (id, after) in configs(&d.data_root()) {
        let before = &configs_before[&id];
        let want = match (old_hash.get(&id), new_hash.get(&id)) {
            (Some(o), Some(n)) => before.replace(
                &format!("\"annotation.io.kubernetes.container.hash\":\"{o}\""),
                &format!("\"annotation.io.kubernetes.container.hash\":\"{n}\""),
            ),
            _ => before.clone(),
        };
        assert_eq!(
            after, want,
            "Docker {version} {id}: config.v2.json is the old one with the hash replaced"
        );
    }

    // Start dockerd: the new hashes, same processes, still running.
    d.start();
    let c = d.client();
    for (id, &pid) in &pids {
        let i = c.inspect(id).unwrap();
        assert!(i.running, "{id} not running after restart: {i:?}");
        assert_eq!(i.pid, pid, "{id} pid changed");
        assert_eq!(
            i.labels.get(HASH_LABEL),
            new_hash.get(id).or(old_hash.get(id)),
            "{id}"
        );
    }
    let listed = c.list_containers().unwrap();
    assert_eq!(listed.len(), 3);
    for l in &listed {
        assert_eq!(l.state, "running");
        let labels = l.labels.clone().unwrap_or_default();
        assert_eq!(
            labels.get(HASH_LABEL),
            new_hash.get(&l.id).or(old_hash.get(&l.id))
        );
    }
    // dockerd re-serialised every config.v2.json at restore: ours came back byte-identical,
    // which is what lets rollback recognise them.
    let manifest = backup::read_manifest(&bdir).unwrap();
    for e in &manifest.entries {
        let now = backup::sha256_hex(&fs::read(&e.path).unwrap());
        assert_eq!(
            Some(now),
            e.sha256_new,
            "{} after dockerd's restore",
            e.path.display()
        );
    }

    // Rollback: stop, restore, start; the old hashes are back, same processes.
    d.stop();
    for (id, &pid) in &pids {
        assert!(
            pid_alive(pid),
            "container {id} pid {pid} died at the second stop"
        );
    }
    let rb = backup::rollback(&bdir, false).unwrap();
    assert!(
        rb.files.iter().all(|(_, a)| *a == RollbackAction::Restored),
        "{rb:?}"
    );
    assert_eq!(rb.files.len(), 2);
    d.start();
    let c = d.client();
    for (id, &pid) in &pids {
        let i = c.inspect(id).unwrap();
        assert!(i.running, "{id} not running after rollback: {i:?}");
        assert_eq!(i.pid, pid, "{id} pid changed after rollback");
        assert_eq!(i.labels.get(HASH_LABEL), old_hash.get(id), "{id}");
    }
    let _ = std::io::stderr().flush();
    // Orderly teardown; the guard does the rest.
    for id in d.container_ids.clone().iter().rev() {
        c.request("DELETE", &format!("/containers/{id}?force=1"), None)
            .unwrap();
    }
    let left = c.list_containers().unwrap();
    assert!(left.is_empty(), "containers left: {left:?}");
    d.container_ids.clear();
    d.stop();
}
