//! Docker back-end speed on 10,000 containers (not a timed test; run with
//! `cargo bench -p storepatch --bench docker`). The store is synthesised by cloning the real
//! config.v2.json/hostconfig.json files of fixtures/nodes/docker-20.10 under fresh ids; the
//! reference is `cp -r` of the same containers/ tree followed by `sync`, in the same run.
//! `STOREPATCH_BENCH_N` changes the count.

use sha2::{Digest, Sha256};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use storepatch::backup::Backup;
use storepatch::docker::{DockerOptions, DockerStore};
use storepatch::{RecordKind, Rewrite, RuntimeStore};

fn sh(cmd: &str) -> Duration {
    let t = Instant::now();
    let st = Command::new("sh").arg("-c").arg(cmd).status().unwrap();
    assert!(st.success(), "{cmd}");
    t.elapsed()
}

fn main() {
    let n: usize = std::env::var("STOREPATCH_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/nodes/docker-20.10/var/lib/docker/containers");
    let mut templates = Vec::new();
    for e in fs::read_dir(&src).unwrap() {
        let e = e.unwrap();
        let id = e.file_name().into_string().unwrap();
        let cfg = fs::read_to_string(e.path().join("config.v2.json")).unwrap();
        let host = fs::read_to_string(e.path().join("hostconfig.json")).unwrap();
        templates.push((id, cfg, host));
    }
    templates.sort();
    let t = tempfile::Builder::new()
        .prefix("sp-bench-docker-")
        .tempdir_in(std::env::var("STOREPATCH_BENCH_DIR").unwrap_or_else(|_| "/tmp".into()))
        .unwrap();
    let root = t.path().join("docker");
    let containers = root.join("containers");
    fs::create_dir_all(&containers).unwrap();
    let t0 = Instant::now();
    let mut bytes = 0u64;
    for i in 0..n {
        let (old_id, cfg, host) = &templates[i % templates.len()];
        let id = hex::encode(Sha256::digest(format!("bench-{i}")));
        let dir = containers.join(&id);
        fs::create_dir(&dir).unwrap();
        let cfg = cfg.replace(old_id.as_str(), &id);
        bytes += cfg.len() as u64 + host.len() as u64;
        fs::write(dir.join("config.v2.json"), cfg).unwrap();
        fs::set_permissions(
            dir.join("config.v2.json"),
            fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        fs::write(dir.join("hostconfig.json"), host).unwrap();
    }
    sh("sync");
    eprintln!(
        "synthesised {n} containers ({:.1} MB) in {:?}",
        bytes as f64 / 1e6,
        t0.elapsed()
    );

    let copy = sh(&format!(
        "cp -r '{}' '{}' && sync",
        containers.display(),
        t.path().join("copy").display()
    ));

    let store = DockerStore::with_options(
        &root,
        DockerOptions {
            pidfile: t.path().join("none.pid"),
            socket: t.path().join("none.sock"),
            daemon_json: t.path().join("none.json"),
            live_restore: Some(true),
            ..DockerOptions::default()
        },
    )
    .unwrap();
    let t1 = Instant::now();
    let report = store.scan().unwrap();
    let scan = t1.elapsed();
    let rewrites: Vec<Rewrite> = report
        .records
        .iter()
        .filter(|r| r.kind == RecordKind::Container)
        .map(|r| Rewrite {
            id: r.id.clone(),
            hash: storepatch::Hash(
                u32::from_str_radix(r.hash.as_deref().unwrap(), 16).unwrap() ^ 0xffff_ffff,
            ),
            hash_without_resources: None,
        })
        .collect();
    let t2 = Instant::now();
    let mut b = Backup::create(&t.path().join("backup"), "docker", &root).unwrap();
    let out = store.apply(&rewrites, &mut b).unwrap();
    let apply = t2.elapsed();
    assert_eq!(out.changed.len(), rewrites.len());

    let ratio = |d: Duration| d.as_secs_f64() / copy.as_secs_f64();
    println!(
        "docker store, {n} containers ({} records, {} rewritten):",
        report.records.len(),
        rewrites.len()
    );
    println!("  cp -r + sync          {:>9.3} s", copy.as_secs_f64());
    println!(
        "  scan                  {:>9.3} s  ({:.2}x copy)",
        scan.as_secs_f64(),
        ratio(scan)
    );
    println!(
        "  apply with backup     {:>9.3} s  ({:.2}x copy)",
        apply.as_secs_f64(),
        ratio(apply)
    );
    println!(
        "  scan + apply          {:>9.3} s  ({:.2}x copy; target <= 2x)",
        (scan + apply).as_secs_f64(),
        ratio(scan + apply)
    );
}
