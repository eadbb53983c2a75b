//! CRI-O back-end speed on large synthetic nodes (not a timed test; run with
//! `cargo bench -p storepatch --bench crio`). Each node is synthesised by cloning the real
//! kubelet containers of fixtures/nodes/crio-1.30 (graphroot `config.json` + `state.json`,
//! runroot `config.json`) under fresh ids, so a node of N containers has 2N files to rewrite.
//! The reference is `cp -r` of the same node tree followed by `sync`, in the same run.
//!
//! Per node size it measures, RUNS times each (medians printed): scan, apply with backup,
//! rollback; and the backup step alone on the same files, one [`Backup::save`] per file
//! against [`Backup::save_many`] (each followed by `commit`, i.e. made durable).
//!
//! Environment: `STOREPATCH_BENCH_N` (comma-separated container counts, default
//! `2000,10000`), `RUNS` (default 3), `STOREPATCH_BENCH_DIR` (default /tmp).

use sha2::{Digest, Sha256};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use storepatch::atomic::{self, FileMeta};
use storepatch::backup::{self, Backup};
use storepatch::crio::{CrioOptions, CrioStore};
use storepatch::{RecordKind, Rewrite, RuntimeStore};

const GRAPH: &str = "var/lib/containers/storage";
const RUN: &str = "run/containers/storage";

fn sh(cmd: &str) -> Duration {
    let t = Instant::now();
    let st = Command::new("sh").arg("-c").arg(cmd).status().unwrap();
    assert!(st.success(), "{cmd}");
    t.elapsed()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn secs(v: &[Duration]) -> String {
    v.iter()
        .map(|d| format!("{:.3}", d.as_secs_f64()))
        .collect::<Vec<_>>()
        .join(" ")
}

fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

struct Template {
    id: String,
    graph_cfg: String,
    state: String,
    run_cfg: String,
}

fn store_at(node: &Path, scratch: &Path) -> CrioStore {
    CrioStore::with_options(
        &node.join(GRAPH),
        CrioOptions {
            socket: Some(scratch.join("none.sock")),
            ..Default::default()
        },
    )
    .unwrap()
}

/// The kubelet containers of the fixture that have a runroot copy.
fn templates(scratch: &Path) -> Vec<Template> {
    let node = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/nodes/crio-1.30");
    let report = store_at(&node, scratch).scan().unwrap();
    let mut out = Vec::new();
    for r in &report.records {
        if r.kind != RecordKind::Container {
            continue;
        }
        let rel = |base: &str, f: &str| {
            node.join(base)
                .join("overlay-containers")
                .join(&r.id)
                .join("userdata")
                .join(f)
        };
        let Ok(run_cfg) = fs::read_to_string(rel(RUN, "config.json")) else {
            continue;
        };
        out.push(Template {
            id: r.id.clone(),
            graph_cfg: fs::read_to_string(rel(GRAPH, "config.json")).unwrap(),
            state: fs::read_to_string(rel(GRAPH, "state.json")).unwrap(),
            run_cfg,
        });
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    assert!(!out.is_empty(), "no kubelet container in the fixture");
    out
}

/// Writes a node of `n` containers under `node`; returns the bytes written.
fn synthesise(node: &Path, n: usize, templates: &[Template]) -> u64 {
    let mut bytes = 0u64;
    for i in 0..n {
        let t = &templates[i % templates.len()];
        let id = hex::encode(Sha256::digest(format!("crio-bench-{i}")));
        let write = |base: &str, name: &str, body: &str| {
            let dir = node
                .join(base)
                .join("overlay-containers")
                .join(&id)
                .join("userdata");
            fs::create_dir_all(&dir).unwrap();
            let p = dir.join(name);
            fs::write(&p, body.replace(t.id.as_str(), &id)).unwrap();
            fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap();
            body.len() as u64
        };
        bytes += write(GRAPH, "config.json", &t.graph_cfg);
        bytes += write(GRAPH, "state.json", &t.state);
        bytes += write(RUN, "config.json", &t.run_cfg);
    }
    bytes
}

fn bench(n: usize, runs: usize, scratch: &Path, templates: &[Template]) {
    let node = scratch.join(format!("node-{n}"));
    let t0 = Instant::now();
    let bytes = synthesise(&node, n, templates);
    sh("sync");
    eprintln!(
        "synthesised {n} containers ({:.1} MB) in {:.1?}",
        bytes as f64 / 1e6,
        t0.elapsed()
    );
    let store = store_at(&node, scratch);

    let (mut copy, mut scan, mut apply, mut rollback) = (vec![], vec![], vec![], vec![]);
    let (mut save_one, mut save_many) = (vec![], vec![]);
    let mut files = 0;
    for run in 0..runs {
        let dst = scratch.join(format!("copy-{n}-{run}"));
        copy.push(sh(&format!(
            "cp -r '{}' '{}' && sync",
            node.display(),
            dst.display()
        )));
        fs::remove_dir_all(&dst).unwrap();

        let t = Instant::now();
        let report = store.scan().unwrap();
        scan.push(t.elapsed());
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
        assert_eq!(rewrites.len(), n);

        let bdir = scratch.join(format!("backup-{n}-{run}"));
        let t = Instant::now();
        let mut b = Backup::create(&bdir, "crio", store.graphroot()).unwrap();
        let out = store.apply(&rewrites, &mut b).unwrap();
        apply.push(t.elapsed());
        assert_eq!(out.changed.len(), n);
        files = out.files_written;

        let t = Instant::now();
        let rb = backup::rollback(&bdir, false).unwrap();
        rollback.push(t.elapsed());
        assert_eq!(rb.files.len(), files);
        fs::remove_dir_all(&bdir).unwrap();

        // The backup step alone, on the files apply backs up (read beforehand, as apply
        // has them in memory).
        let mut originals: Vec<(PathBuf, Vec<u8>, FileMeta)> = Vec::new();
        for base in [RUN, GRAPH] {
            let dir = node.join(base).join("overlay-containers");
            for e in fs::read_dir(&dir).unwrap() {
                let p = e.unwrap().path().join("userdata/config.json");
                let (bytes, meta) = atomic::read_regular_nofollow(&p).unwrap();
                originals.push((p, bytes, meta));
            }
        }
        let fake_new: Vec<Vec<u8>> = originals.iter().map(|o| o.1.clone()).collect();
        let bdir = scratch.join(format!("bk-one-{n}-{run}"));
        let t = Instant::now();
        let mut b = Backup::create(&bdir, "crio", store.graphroot()).unwrap();
        for ((p, bytes, meta), new) in originals.iter().zip(&fake_new) {
            b.save(p, bytes, *meta, Some(backup::sha256_hex(new)))
                .unwrap();
        }
        b.commit().unwrap();
        save_one.push(t.elapsed());
        fs::remove_dir_all(&bdir).unwrap();
        let bdir = scratch.join(format!("bk-many-{n}-{run}"));
        let t = Instant::now();
        let mut b = Backup::create(&bdir, "crio", store.graphroot()).unwrap();
        let items: Vec<backup::SaveItem> = originals
            .iter()
            .zip(&fake_new)
            .map(|((p, bytes, meta), new)| backup::SaveItem {
                path: p,
                original: bytes,
                meta: *meta,
                new: Some(new),
            })
            .collect();
        b.save_many(&items).unwrap();
        b.commit().unwrap();
        save_many.push(t.elapsed());
        fs::remove_dir_all(&bdir).unwrap();
    }
    let c = median(copy.clone()).as_secs_f64();
    let line = |what: &str, v: &[Duration]| {
        let m = median(v.to_vec());
        println!(
            "  {what:<26} {:>8.3} s  ({:.2}x copy)   runs: {}",
            m.as_secs_f64(),
            m.as_secs_f64() / c,
            secs(v)
        );
    };
    println!(
        "crio store, {n} containers, {files} files rewritten, {runs} runs, load {}:",
        loadavg()
    );
    line("cp -r + sync", &copy);
    line("scan", &scan);
    line("apply with backup", &apply);
    line("rollback", &rollback);
    line("backup: save x files", &save_one);
    line("backup: save_many", &save_many);
    fs::remove_dir_all(&node).unwrap();
}

fn main() {
    let ns: Vec<usize> = std::env::var("STOREPATCH_BENCH_N")
        .unwrap_or_else(|_| "2000,10000".into())
        .split(',')
        .map(|s| s.trim().parse().expect("STOREPATCH_BENCH_N: counts"))
        .collect();
    let runs: usize = std::env::var("RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let t = tempfile::Builder::new()
        .prefix("sp-bench-crio-")
        .tempdir_in(std::env::var("STOREPATCH_BENCH_DIR").unwrap_or_else(|_| "/tmp".into()))
        .unwrap();
    let templates = templates(t.path());
    for n in ns {
        bench(n, runs, t.path(), &templates);
    }
}
