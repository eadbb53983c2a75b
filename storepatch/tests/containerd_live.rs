//! The containerd back-end against REAL containerd, driven through the CRI like the kubelet:
//! 1.6.20 (Debian 12, synced freelist), 1.7.24 (Debian trixie) and 2.1.9 (Debian sid), and
//! 2.2.9, 2.3.7 and 2.4.2 built from the Go module proxy (scripts/setup-containerd-module.sh);
//! every line from 1.7 opens meta.db with `NoFreelistSync`. Each rewrite must leave every CRI
//! extension as containerd wrote it but for the hash values, byte for byte (2.4 writes fields
//! our decoder does not know).
//!
//! Flow per line: run host-network pods with kubelet-shaped configs, stop containerd (SIGTERM;
//! shims and containers keep running), rewrite every container's hash through
//! `ContainerdStore`, start containerd, and check through the CRI that every rewritten
//! annotation is reported, every container is RUNNING with the same pid and none is missing;
//! then roll back and check the old values come back with the same pids.
//!
//! Needs root and the runtimes that `scripts/setup-containerd.sh` and
//! `scripts/setup-containerd-module.sh` put under `.cache/runtimes/`. The lines run one after another (a process-wide lock),
//! each with its own root, state, socket and cgroup parent under a fresh temporary directory. A
//! Drop guard stops pods, containerd and shims and unmounts everything even when a check fails. The
//! harness (images, configs, the containerd instance and its guard) is shared with
//! cli/tests/e2e_live.rs: testtools::containerd.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::Write;
use std::time::Instant;

use storepatch::backup::{self, Backup};
use storepatch::containerd::{ContainerdOptions, ContainerdStore};
use storepatch::live::cri::{CriClient, CriContainer};
use storepatch::{RecordKind, Rewrite, RuntimeStore, StoreError};
use testtools::containerd::*;
use testtools::cri::CriTestCalls;

/// Extra pods whose containers are created but not started.
const BULK_PODS: usize = 4;
const BULK_CONTAINERS: usize = 6;

/// A pod container as the test created it.
#[derive(Debug, Clone)]
struct Created {
    id: String,
    sandbox: String,
    name: String,
    hash: String,
    hash_wr: Option<String>,
    running: bool,
}

// ---------------------------------------------------------------------------------------------
// checks
// ---------------------------------------------------------------------------------------------

/// What the CRI reports for each of `created`, keyed by id; fails on anything missing, not
/// RUNNING, with another pid than `pids`, or with other hash annotations than `want`.
fn check_cri(
    h: &Harness,
    cri: &CriClient,
    created: &[Created],
    pids: &BTreeMap<String, (u32, u64)>,
    want: &HashMap<String, (String, Option<String>)>,
    phase: &str,
) {
    let v = h.line.version;
    let listed = cri.list_containers().expect("ListContainers");
    let by_id: HashMap<&str, &CriContainer> = listed.iter().map(|c| (c.id.as_str(), c)).collect();
    assert_eq!(
        listed.len(),
        created.len(),
        "containerd {v} {phase}: CRI lists {} containers, the test created {}: {:?}",
        listed.len(),
        created.len(),
        listed.iter().map(|c| &c.id).collect::<Vec<_>>()
    );
    for c in created {
        let got = by_id.get(c.id.as_str()).unwrap_or_else(|| {
            panic!(
                "containerd {v} {phase}: container {} ({}) is missing from ListContainers",
                c.id, c.name
            )
        });
        assert_eq!(
            got.pod_sandbox_id, c.sandbox,
            "containerd {v} {phase}: sandbox of {}",
            c.name
        );
        let (want_hash, want_wr) = &want[&c.id];
        assert_eq!(
            got.annotations.get(HASH),
            Some(want_hash),
            "containerd {v} {phase}: ListContainers hash of {}",
            c.name
        );
        assert_eq!(
            got.annotations.get(HASH_WR),
            want_wr.as_ref(),
            "containerd {v} {phase}: ListContainers hashWithoutResources of {}",
            c.name
        );
        if !c.running {
            assert_eq!(
                (got.state.as_str(), got.pid),
                ("CONTAINER_CREATED", None),
                "containerd {v} {phase}: {} was only created",
                c.name
            );
        } else {
            assert_eq!(
                got.state, "CONTAINER_RUNNING",
                "containerd {v} {phase}: {} is not running",
                c.name
            );
            let (pid, start) = pids[&c.id];
            assert_eq!(
                got.pid,
                Some(pid),
                "containerd {v} {phase}: pid of {} changed",
                c.name
            );
            assert_eq!(
                proc_stat(pid).map(|s| s.1),
                Some(start),
                "containerd {v} {phase}: process {pid} of {} is not the same process",
                c.name
            );
        }
        // ContainerStatus reads the same metadata: it must agree
        let st = cri
            .container_status(&c.id, false)
            .expect("ContainerStatus")
            .status
            .expect("ContainerStatus.status");
        assert_eq!(
            st.annotations.get(HASH),
            Some(want_hash),
            "containerd {v} {phase}: ContainerStatus hash of {}",
            c.name
        );
        assert_eq!(
            st.annotations.get(HASH_WR),
            want_wr.as_ref(),
            "containerd {v} {phase}: ContainerStatus hashWithoutResources of {}",
            c.name
        );
    }
    let sandboxes = cri.list_pod_sandbox().expect("ListPodSandbox");
    let ready = sandboxes.iter().filter(|s| s.state == 0).count();
    assert_eq!(
        ready,
        h.sandboxes.len(),
        "containerd {v} {phase}: {ready} sandboxes READY, expected {}",
        h.sandboxes.len()
    );
}

fn rewrites_to(
    created: &[Created],
    values: &HashMap<String, (String, Option<String>)>,
) -> Vec<Rewrite> {
    created
        .iter()
        .map(|c| Rewrite {
            id: c.id.clone(),
            hash: values[&c.id].0.parse().unwrap(),
            hash_without_resources: values[&c.id].1.as_ref().map(|h| h.parse().unwrap()),
        })
        .collect()
}

fn sorted(v: &[String]) -> Vec<String> {
    let mut v = v.to_vec();
    v.sort();
    v
}

fn sorted_ids(created: &[Created]) -> Vec<String> {
    sorted(&created.iter().map(|c| c.id.clone()).collect::<Vec<_>>())
}

/// Every container process alive as the same process, and the same shims.
fn check_processes(h: &Harness, pids: &BTreeMap<String, (u32, u64)>, shims: &[u32], phase: &str) {
    let v = h.line.version;
    for (id, (pid, start)) in pids {
        assert_eq!(
            proc_stat(*pid).map(|s| s.1),
            Some(*start),
            "containerd {v} {phase}: container {id} (pid {pid}) is gone"
        );
    }
    assert_eq!(
        h.shim_pids(),
        shims,
        "containerd {v} {phase}: shims changed"
    );
}

/// bbolt's consistency rules on the current meta.db: ours, and Go bbolt's own (containerd is
/// stopped whenever this runs, so bbolt's shared flock does not wait).
fn assert_check_ok(h: &Harness, store: &ContainerdStore, phase: &str) {
    let r = store.check_file().expect("check_file");
    assert!(
        r.is_ok(),
        "containerd {} {phase}: meta.db fails the bolt check: {}",
        h.line.version,
        r.summary()
    );
    storepatch::containerd::bolt::testing::assert_bbolt_check(&h.meta_db());
}

/// Every container's CRI extension (`v1/k8s.io/containers/<id>/extensions/
/// io.cri-containerd.container.metadata`) as the bytes containerd wrote, read with boltfile.
fn cri_extensions(data: &[u8]) -> BTreeMap<String, Vec<u8>> {
    let meta = boltfile::read_meta(data).expect("meta.db's meta page");
    let view = boltfile::View::new(data, &meta);
    fn sub<'a>(
        view: &boltfile::View<'a>,
        root: boltfile::Root<'a>,
        key: &[u8],
    ) -> Option<boltfile::Root<'a>> {
        let e = view.get(root, key).expect("meta.db reads")?;
        Some(
            boltfile::bucket_root(e.value, "bucket")
                .expect("a bucket")
                .0,
        )
    }
    let bucket = |root, key: &[u8]| sub(&view, root, key);
    let mut out = BTreeMap::new();
    let Some(containers) = bucket(boltfile::Root::Page(meta.root), b"v1")
        .and_then(|v1| bucket(v1, b"k8s.io"))
        .and_then(|ns| bucket(ns, b"containers"))
    else {
        return out;
    };
    let mut ids = Vec::new();
    view.for_each(containers, &mut |e| {
        ids.push(e.key.to_vec());
        Ok(())
    })
    .expect("meta.db reads");
    for id in ids {
        let Some(ext) = bucket(containers, &id).and_then(|c| bucket(c, b"extensions")) else {
            continue;
        };
        if let Some(e) = view
            .get(ext, b"io.cri-containerd.container.metadata")
            .expect("meta.db reads")
        {
            out.insert(String::from_utf8(id).unwrap(), e.value.to_vec());
        }
    }
    out
}

/// The rewrite changed nothing in a container's CRI extension but its hash values: every
/// field, known to us or not (containerd 2.4's `ImageDigest`/`ImageName` came without a
/// version bump), is kept byte for byte and in its place.
fn only_the_hashes_changed(
    v: &str,
    before: &BTreeMap<String, Vec<u8>>,
    after: &BTreeMap<String, Vec<u8>>,
    old: &HashMap<String, (String, Option<String>)>,
    new: &HashMap<String, (String, Option<String>)>,
) {
    assert!(
        !before.is_empty(),
        "containerd {v}: meta.db holds the containers' CRI extensions"
    );
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "containerd {v}: the rewrite keeps every container's CRI extension"
    );
    for (id, b) in before {
        let (Some((oh, owr)), Some((nh, nwr))) = (old.get(id), new.get(id)) else {
            assert_eq!(
                b, &after[id],
                "containerd {v}: an extension not rewritten is untouched"
            );
            continue;
        };
        // (a protobuf Any around the JSON: the values keep their length here, so does it)
        let mut want = b.clone();
        let key = "io.kubernetes.container.hash";
        let key_wr = "io.kubernetes.container.hashWithoutResources";
        let mut pairs = vec![(key, oh, nh)];
        if let (Some(o), Some(n)) = (owr, nwr) {
            pairs.push((key_wr, o, n));
        }
        for (k, o, n) in pairs {
            let (o, n) = (format!("\"{k}\":\"{o}\""), format!("\"{k}\":\"{n}\""));
            assert_eq!(o.len(), n.len(), "the test's new values keep the length");
            let mut at = 0;
            while let Some(i) = want[at..].windows(o.len()).position(|w| w == o.as_bytes()) {
                want[at + i..at + i + o.len()].copy_from_slice(n.as_bytes());
                at += i + o.len();
            }
        }
        assert!(
            after[id] == want,
            "containerd {v}: {id}'s CRI extension changed in its hash values only, every other byte in place:\n  want {}\n  have {}",
            String::from_utf8_lossy(&want),
            String::from_utf8_lossy(&after[id])
        );
    }
}

fn run_line(line: Line) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let v = line.version;
    let total = Instant::now();
    let mut h = Harness::new(line);

    // images
    let t0 = Instant::now();
    let pause_tar = build_image(&h.p.t, PAUSE_IMAGE, "pause");
    let app_tar = build_image(&h.p.t, APP_IMAGE, "app");
    let cri = h.start();
    h.ctr_import(&pause_tar, PAUSE_IMAGE);
    h.ctr_import(&app_tar, APP_IMAGE);
    // the CRI learns about imported images from containerd's events (2.x: asynchronously)
    let app_id = wait_image(&cri, APP_IMAGE, v);
    wait_image(&cri, PAUSE_IMAGE, v);
    h.notes.push(format!(
        "images built + imported in {:.2}s",
        t0.elapsed().as_secs_f64()
    ));

    // pods, as the kubelet creates them
    let t0 = Instant::now();
    let mut app = spec("app", "3a1f6c2e", Some("9b2d4e61"), true);
    app.ports = Some(r#"[{"name":"http","containerPort":8080,"protocol":"TCP"}]"#);
    let mut pods: Vec<(String, String, String, Vec<Spec>)> = vec![
        (
            "shop".into(),
            "web-5d8f7c9b6-x2k4p".into(),
            "7d0e8c1a-3b2f-4c6d-9e8f-000000000001".into(),
            vec![app, spec("istio-proxy", "c0ffee01", None, true)],
        ),
        (
            "kube-system".into(),
            "kube-proxy-8xk2q".into(),
            "7d0e8c1a-3b2f-4c6d-9e8f-000000000002".into(),
            // hash and hashWithoutResources may be equal: both must be found and rewritten
            vec![spec("kube-proxy", "5e7a9c13", Some("5e7a9c13"), true)],
        ),
    ];
    // more pods whose containers are only created: more extension buckets (about 2 KB each,
    // their own leaf pages) so the rewrite spans many pages of a bigger file
    for p in 0..BULK_PODS {
        let specs = (0..BULK_CONTAINERS)
            .map(|c| {
                let hash = format!("{:08x}", 0x6000_0000u32 + (p * 16 + c) as u32);
                let wr =
                    (c % 2 == 0).then(|| format!("{:08x}", 0x7000_0000u32 + (p * 16 + c) as u32));
                spec(&format!("worker-{c}"), &hash, wr.as_deref(), false)
            })
            .collect();
        pods.push((
            "jobs".into(),
            format!("batch-{p}-7c9d"),
            format!("7d0e8c1a-3b2f-4c6d-9e8f-1000000000{p:02}"),
            specs,
        ));
    }
    let mut created = Vec::new();
    for (ns, name, uid, specs) in &pods {
        let (ns, name, uid) = (ns.as_str(), name.as_str(), uid.as_str());
        let pc = pod_config(&h, ns, name, uid);
        let sb = cri
            .run_pod_sandbox(&pc)
            .unwrap_or_else(|e| panic!("containerd {v}: RunPodSandbox {ns}/{name}: {e}"));
        h.sandboxes.push(sb.clone());
        for s in specs {
            let cc = container_config(&h, &pc, &app_id, s);
            let id = cri
                .create_container(&sb, &cc, &pc)
                .unwrap_or_else(|e| panic!("containerd {v}: CreateContainer {}: {e}", s.name));
            if s.start {
                cri.start_container(&id)
                    .unwrap_or_else(|e| panic!("containerd {v}: StartContainer {}: {e}", s.name));
            }
            created.push(Created {
                id,
                sandbox: sb.clone(),
                name: format!("{name}/{}", s.name),
                hash: s.hash.clone(),
                hash_wr: s.hash_wr.clone(),
                running: s.start,
            });
        }
    }
    h.notes.push(format!(
        "{} pods / {} containers ({} started) created in {:.2}s",
        h.sandboxes.len(),
        created.len(),
        created.iter().filter(|c| c.running).count(),
        t0.elapsed().as_secs_f64()
    ));
    let before = cri.list_containers().expect("ListContainers");
    let mut pids = BTreeMap::new();
    for c in before.iter().filter(|c| c.state == "CONTAINER_RUNNING") {
        let pid = c
            .pid
            .unwrap_or_else(|| panic!("containerd {v}: no pid for running {}", c.name));
        let (_, start) = proc_stat(pid).expect("container process");
        pids.insert(c.id.clone(), (pid, start));
    }
    let mut old: HashMap<String, (String, Option<String>)> = created
        .iter()
        .map(|c| (c.id.clone(), (c.hash.clone(), c.hash_wr.clone())))
        .collect();
    check_cri(&h, &cri, &created, &pids, &old, "after creation");
    let shims_before = h.shim_pids();

    // while containerd runs, the library refuses (containerd holds meta.db's flock)
    let store = ContainerdStore::with_options(
        &h.p.root,
        ContainerdOptions {
            socket: Some(h.p.sock.clone()),
        },
    )
    .expect("ContainerdStore::open");
    let db = h.meta_db();
    match store.ensure_stopped() {
        Err(StoreError::RuntimeRunning { evidence, .. }) => h.notes.push(format!(
            "running check while containerd runs: refused ({evidence})"
        )),
        other => panic!("containerd {v}: ensure_stopped while containerd runs gave {other:?}"),
    }
    let probe_rw: Vec<Rewrite> = created
        .iter()
        .map(|c| Rewrite {
            id: c.id.clone(),
            hash: "0badc0de".parse().unwrap(),
            hash_without_resources: None,
        })
        .collect();
    // containerd commits on its own (its garbage collection after a removed sandbox runs
    // whenever it likes), so between two reads of meta.db the running daemon may change it:
    // it is frozen (SIGSTOP) for the probe. Frozen, it keeps meta.db's flock and the apply
    // must still be refused for it, and any byte that changes is the apply's.
    let daemon = h.daemon.as_ref().expect("containerd runs").id() as i32;
    struct Thaw(i32);
    impl Drop for Thaw {
        fn drop(&mut self) {
            // SAFETY: a signal to our own daemon's pid.
            unsafe { libc::kill(self.0, libc::SIGCONT) };
        }
    }
    // SAFETY: as above.
    assert_eq!(
        unsafe { libc::kill(daemon, libc::SIGSTOP) },
        0,
        "freeze containerd"
    );
    let thaw = Thaw(daemon);
    // kill(2) returns before the daemon has stopped: a commit of containerd's own may still be
    // landing (a CI run read meta.db, then saw containerd's next txid in it). Stopped is every
    // thread in state T, none in a syscall any more.
    let all_stopped = || {
        fs::read_dir(format!("/proc/{daemon}/task"))
            .map(|tasks| {
                tasks.flatten().all(|t| {
                    fs::read_to_string(t.path().join("stat")).is_ok_and(|st| {
                        st.rfind(')')
                            .is_some_and(|i| st[i + 1..].trim_start().starts_with(['T', 't']))
                    })
                })
            })
            .unwrap_or(false)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !all_stopped() {
        assert!(
            std::time::Instant::now() < deadline,
            "containerd {v}: every thread stopped within 10 s of SIGSTOP"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let before_refusal = fs::read(&db).unwrap();
    let e = store
        .apply(
            &probe_rw,
            &mut Backup::create(&h.p.t.join("backup-refused"), "containerd", &h.p.root).unwrap(),
        )
        .expect_err("apply while containerd runs must be refused");
    assert!(
        matches!(e, StoreError::RuntimeRunning { .. }),
        "containerd {v}: apply while running: {e}"
    );
    assert_eq!(
        fs::read(&db).unwrap(),
        before_refusal,
        "refused apply wrote meta.db"
    );
    drop(thaw);
    drop(cri);

    // stop containerd: shims and containers keep running
    h.stop();
    check_processes(&h, &pids, &shims_before, "after SIGTERM to containerd");
    let (txid, freelist) = meta_page(&db);
    h.notes.push(format!(
        "meta.db written by containerd: {} bytes, txid {txid}, freelist {}",
        fs::metadata(&db).unwrap().len(),
        freelist_name(freelist)
    ));
    if v != "1.6.20" {
        assert_eq!(
            freelist,
            u64::MAX,
            "containerd {v} is expected to open meta.db with NoFreelistSync"
        );
    } else {
        assert_ne!(freelist, u64::MAX, "containerd 1.6 syncs its freelist");
    }
    let original_db = fs::read(&db).unwrap();

    // scan through the library
    store.ensure_stopped().expect("containerd is stopped");
    let report = store.scan().expect("scan");
    for c in &created {
        let r = report
            .records
            .iter()
            .find(|r| r.id == c.id)
            .unwrap_or_else(|| panic!("containerd {v}: scan misses container {}", c.name));
        assert_eq!(r.kind, RecordKind::Container, "{}", c.name);
        assert_eq!(
            r.hash.as_deref(),
            Some(c.hash.as_str()),
            "scan hash of {}",
            c.name
        );
        assert_eq!(
            r.hash_without_resources, c.hash_wr,
            "scan hashWithoutResources of {}",
            c.name
        );
        let (pod, ctr) = c.name.split_once('/').unwrap();
        assert_eq!(r.container.as_deref(), Some(ctr), "scan container name");
        assert_eq!(r.pod.as_deref(), Some(pod), "scan pod name of {}", c.name);
        if c.running {
            assert_eq!(
                r.pid,
                Some(pids[&c.id].0),
                "scan pid (CRI status file) of {}",
                c.name
            );
        }
    }
    for sb in &h.sandboxes {
        assert!(
            report
                .records
                .iter()
                .any(|r| &r.id == sb && r.kind == RecordKind::Sandbox),
            "containerd {v}: scan does not list sandbox {sb} as a sandbox"
        );
    }

    // 1. rewrite every container, new distinct values
    let mut new: HashMap<String, (String, Option<String>)> = created
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let hash = format!("{:08x}", 0xd1ce_0000u32 + i as u32);
            let wr = c
                .hash_wr
                .as_ref()
                .map(|_| format!("{:08x}", 0xfeed_0000u32 + i as u32));
            (c.id.clone(), (hash, wr))
        })
        .collect();
    let to_new = rewrites_to(&created, &new);
    let bdir = h.p.t.join("backup-1");
    let mut bk = Backup::create(&bdir, "containerd", &h.p.root).expect("backup");
    let extensions_before = cri_extensions(&fs::read(&db).unwrap());
    // containerd 2.4 writes fields our decoder does not know (ImageDigest, ImageName, with no
    // version bump): the byte-for-byte check below covers them
    let (major, minor) = v
        .split_once('.')
        .map(|(a, b)| (a, b.split('.').next().unwrap()))
        .unwrap();
    if (major.parse::<u32>().unwrap(), minor.parse::<u32>().unwrap()) >= (2, 4) {
        for field in [&b"\"ImageDigest\""[..], b"\"ImageName\""] {
            assert!(
                extensions_before
                    .values()
                    .all(|e| e.windows(field.len()).any(|w| w == field)),
                "containerd {v}: every CRI extension carries {}",
                String::from_utf8_lossy(field)
            );
        }
    }
    let t0 = Instant::now();
    let (outcome, stats) = store.apply_detailed(&to_new, &mut bk).expect("apply");
    let apply_s = t0.elapsed().as_secs_f64();
    assert_eq!(
        sorted(&outcome.changed),
        sorted_ids(&created),
        "containerd {v}: apply changed"
    );
    only_the_hashes_changed(
        v,
        &extensions_before,
        &cri_extensions(&fs::read(&db).unwrap()),
        &old,
        &new,
    );
    let (txid2, freelist2) = meta_page(&db);
    assert_eq!(
        freelist2 == u64::MAX,
        freelist == u64::MAX,
        "containerd {v}: apply changed the freelist layout"
    );
    h.notes.push(format!(
        "apply: {} containers in {apply_s:.3}s (commit {:.1} ms), {} pages / {} bytes written, \
         meta.db {} -> {} bytes, txid {txid} -> {txid2}, freelist {}",
        outcome.changed.len(),
        stats.t_commit.as_secs_f64() * 1e3,
        stats.pages_written,
        outcome.bytes_written,
        original_db.len(),
        fs::metadata(&db).unwrap().len(),
        freelist_name(freelist2)
    ));
    assert_check_ok(&h, &store, "after apply");
    // idempotent: a second run changes nothing and writes nothing
    let after_apply = fs::read(&db).unwrap();
    let again = store
        .apply(
            &to_new,
            &mut Backup::create(&h.p.t.join("backup-1b"), "containerd", &h.p.root).unwrap(),
        )
        .expect("second apply");
    assert!(
        again.changed.is_empty(),
        "containerd {v}: second apply changed {:?}",
        again.changed
    );
    assert_eq!(sorted(&again.already), sorted_ids(&created));
    assert_eq!(
        fs::read(&db).unwrap(),
        after_apply,
        "idempotent apply rewrote meta.db"
    );

    // start containerd on the rewritten file: new values, same processes
    let cri = h.start();
    let mut all = created.clone();
    check_cri(&h, &cri, &all, &pids, &new, "after rewrite + restart");
    assert_eq!(h.shim_pids(), shims_before, "containerd {v}: shims changed");
    // containerd writes on top of our transaction: the kubelet creates and starts one more
    // container in the first pod; it must survive every later step
    let (ns0, pod0, uid0) = (&pods[0].0, &pods[0].1, &pods[0].2);
    let pc0 = pod_config(&h, ns0, pod0, uid0);
    let late = spec("late", "1a7e0001", Some("1a7e0002"), true);
    let cc = container_config(&h, &pc0, &app_id, &late);
    let late_id = cri
        .create_container(&h.sandboxes[0], &cc, &pc0)
        .unwrap_or_else(|e| panic!("containerd {v}: CreateContainer late after the rewrite: {e}"));
    cri.start_container(&late_id)
        .unwrap_or_else(|e| panic!("containerd {v}: StartContainer late after the rewrite: {e}"));
    let late_pid = cri
        .container_status(&late_id, true)
        .ok()
        .and_then(|r| storepatch::live::cri::pid_from_info(&r.info))
        .unwrap_or_else(|| panic!("containerd {v}: no pid for the late container"));
    pids.insert(late_id.clone(), (late_pid, proc_stat(late_pid).unwrap().1));
    let late_values = (late.hash.clone(), late.hash_wr.clone());
    new.insert(late_id.clone(), late_values.clone());
    old.insert(late_id.clone(), late_values);
    all.push(Created {
        id: late_id,
        sandbox: h.sandboxes[0].clone(),
        name: format!("{pod0}/late"),
        hash: late.hash,
        hash_wr: late.hash_wr,
        running: true,
    });
    check_cri(
        &h,
        &cri,
        &all,
        &pids,
        &new,
        "after a container was added on the rewritten file",
    );
    drop(cri);
    h.stop();
    check_processes(&h, &pids, &shims_before, "after the second stop");
    let (txid3, freelist3) = meta_page(&db);
    assert_check_ok(&h, &store, "after containerd ran on the rewritten file");
    h.notes.push(format!(
        "containerd ran on the rewritten file and committed its own transaction(s): txid {txid2} -> {txid3}, freelist {}",
        freelist_name(freelist3)
    ));

    // 2. byte rollback once containerd has written the file: refused, nothing restored
    //    (restoring would silently drop whatever containerd wrote since the patch)
    let ran = fs::read(&db).unwrap();
    match backup::rollback(&bdir, false) {
        Err(StoreError::RollbackConflict { path, .. }) => {
            assert_eq!(path, db, "containerd {v}: the conflict names meta.db");
            h.notes.push(
                "rollback after containerd wrote meta.db: refused (RollbackConflict), nothing restored"
                    .into(),
            );
        }
        Ok(r) => {
            assert_eq!(fs::read(&db).unwrap(), original_db);
            h.notes.push(format!(
                "rollback after containerd ran: restored {:?}",
                r.files
            ));
        }
        Err(e) => panic!("containerd {v}: rollback after containerd ran: {e}"),
    }
    if fs::read(&db).unwrap() == ran {
        // the operator's way back then: rewrite the old values (with a new backup)
        let to_old = rewrites_to(&created, &old);
        let mut bk2 = Backup::create(&h.p.t.join("backup-2"), "containerd", &h.p.root).unwrap();
        let o = store
            .apply(&to_old, &mut bk2)
            .expect("rewrite back to the old values");
        assert_eq!(sorted(&o.changed), sorted_ids(&created));
        assert_check_ok(&h, &store, "after rewriting the old values back");
        let cri = h.start();
        check_cri(
            &h,
            &cri,
            &all,
            &pids,
            &old,
            "after rewriting back + restart",
        );
        drop(cri);
        h.stop();
        check_processes(&h, &pids, &shims_before, "after the third stop");

        // 3. rewrite again, then roll back from that backup before containerd runs
        let pre = fs::read(&db).unwrap();
        let bdir3 = h.p.t.join("backup-3");
        let mut bk3 = Backup::create(&bdir3, "containerd", &h.p.root).unwrap();
        let o = store
            .apply(&to_new, &mut bk3)
            .expect("apply before rollback");
        assert_eq!(sorted(&o.changed), sorted_ids(&created));
        let t0 = Instant::now();
        let r = backup::rollback(&bdir3, false).expect("rollback");
        h.notes.push(format!(
            "rollback of an unstarted patch: {:?} in {:.3}s",
            r.files,
            t0.elapsed().as_secs_f64()
        ));
        assert_eq!(
            fs::read(&db).unwrap(),
            pre,
            "containerd {v}: rollback did not restore meta.db byte for byte"
        );
    }
    drop(store);
    let cri = h.start();
    check_cri(&h, &cri, &all, &pids, &old, "after rollback + restart");
    assert_eq!(h.shim_pids(), shims_before, "containerd {v}: shims changed");
    drop(cri);

    for n in &h.notes {
        eprintln!("containerd {v}: {n}");
    }
    let errors = h.log_errors();
    for e in &errors {
        eprintln!("containerd {v}: log error: {e}");
    }
    // the CRI plugin logs and SKIPS a container whose extension it cannot load
    assert!(
        !errors.iter().any(|e| {
            let l = e.to_lowercase();
            l.contains("failed to load container")
                || l.contains("failed to load sandbox")
                || l.contains("failed to recover")
        }),
        "containerd {v}: the CRI plugin failed to load a container or sandbox"
    );
    eprintln!(
        "containerd {v}: whole flow {:.1}s",
        total.elapsed().as_secs_f64()
    );
    // the guard stops pods, containerd and shims
    drop(h);
    let _ = std::io::stderr().flush();
}

#[test]
fn containerd_1_6_20_live_rewrite_and_rollback() {
    run_line(Line {
        version: "1.6.20",
        config_v3: false,
    });
}

#[test]
fn containerd_1_7_24_live_rewrite_and_rollback() {
    run_line(Line {
        version: "1.7.24",
        config_v3: false,
    });
}

#[test]
fn containerd_2_1_9_live_rewrite_and_rollback() {
    run_line(Line {
        version: "2.1.9",
        config_v3: true,
    });
}

// containerd releases Debian does not package, built from the Go module proxy by
// scripts/setup-containerd-module.sh (issue 39): 2.2, 2.3 (the first LTS: the sandbox
// extension `updated-resources`, the sandbox `Container` field gone) and 2.4 (the container
// Metadata's `ImageDigest` and `ImageName`, with no version bump: kept byte for byte).

#[test]
fn containerd_2_2_9_live_rewrite_and_rollback() {
    run_line(Line {
        version: "2.2.9",
        config_v3: true,
    });
}

#[test]
fn containerd_2_3_7_live_rewrite_and_rollback() {
    run_line(Line {
        version: "2.3.7",
        config_v3: true,
    });
}

#[test]
fn containerd_2_4_2_live_rewrite_and_rollback() {
    run_line(Line {
        version: "2.4.2",
        config_v3: true,
    });
}
