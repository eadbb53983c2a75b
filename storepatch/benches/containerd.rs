//! containerd back-end benchmark: scan + rewrite every container hash in ONE bolt
//! transaction, on (a) the real 2,000-container meta.db (containerd 1.6.20) and (b) that file
//! grown to 10,000 CRI containers (every pod, sandbox and containers, cloned 4 times under new
//! ids by testtools::grow, bulk-loaded into a fresh bolt file at 70 % page fill, in both freelist
//! layouts).
//!
//! Reference (issue 4): Go bbolt doing the same rewrite of the 2,000-container real file, one
//! transaction with fsync: median 0.30 s; the file grew from 42 MB to 78 MB.
//!
//! Run: `cargo bench -p storepatch --bench containerd` (files go to a temp dir; RUNS=n to
//! change the number of runs, default 3).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use storepatch::backup::Backup;
use storepatch::containerd::{ApplyStats, ContainerdOptions, ContainerdStore, META_DB};
use storepatch::{RecordKind, Rewrite, RuntimeStore};

fn fixture(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures")
        .join(p)
}

use testtools::gunzip;

/// The real file grown by cloning every pod (sandbox and containers, under new ids, pod uids
/// and names) `copies` times, bulk-written in the given freelist layout: the node grower of
/// scripts/bench-node.sh's scaling runs (testtools::grow), on meta.db alone.
fn grow(db_bytes: Vec<u8>, copies: usize, synced: bool) -> Vec<u8> {
    testtools::grow::grow_meta_db(db_bytes, copies, synced)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn cpu() -> Duration {
    // SAFETY: getrusage fills the struct.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// `only`: rewrite just that many containers (to show bytes written follow the change).
fn run(label: &str, bytes: &[u8], runs: usize, only: Option<usize>) {
    let mut scans = Vec::new();
    let mut txs = Vec::new();
    let mut totals = Vec::new();
    let mut cpus = Vec::new();
    let mut last: Option<ApplyStats> = None;
    let mut n_ctr = 0;
    for _ in 0..runs {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("containerd");
        let db = root.join(META_DB);
        std::fs::create_dir_all(db.parent().unwrap()).unwrap();
        std::fs::write(&db, bytes).unwrap();
        std::fs::File::open(&db).unwrap().sync_all().unwrap();
        let store = ContainerdStore::with_options(
            &root,
            ContainerdOptions {
                socket: Some(root.join("none.sock")),
            },
        )
        .unwrap();
        let t = Instant::now();
        let scan = store.scan().unwrap();
        let t_scan = t.elapsed();
        let rewrites: Vec<Rewrite> = scan
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
            .take(only.unwrap_or(usize::MAX))
            .collect();
        n_ctr = rewrites.len();
        let mut backup = Backup::create(&dir.path().join("backup"), "containerd", &root).unwrap();
        let t = Instant::now();
        let c = cpu();
        let (out, st) = store.apply_detailed(&rewrites, &mut backup).unwrap();
        let total = t.elapsed();
        cpus.push(cpu() - c);
        assert_eq!(out.changed.len(), rewrites.len());
        let rep = store.check_file().unwrap();
        assert!(rep.is_ok(), "{:?}", rep.errors());
        scans.push(t_scan);
        txs.push(st.t_read + st.t_plan + st.t_verify + st.t_commit);
        totals.push(total);
        last = Some(st);
    }
    let st = last.unwrap();
    println!(
        "== {label}: {n_ctr} CRI containers, freelist {}",
        if st.freelist_synced {
            "synced"
        } else {
            "not synced (NoFreelistSync)"
        }
    );
    println!(
        "  scan (check + decode every record):          median {}",
        ms(median(scans))
    );
    println!(
        "  rewrite, one transaction (read+check, plan+verify JSON, check planned tree, commit with 2 fdatasync): median {}",
        ms(median(txs))
    );
    println!(
        "  whole apply incl. backup copy + syncfs + sha256 + manifest: median {}",
        ms(median(totals))
    );
    println!(
        "  last run phases: read {} | plan {} (JSON {}) | verify {} | backup {} | commit {} | after {}",
        ms(st.t_read),
        ms(st.t_plan),
        ms(st.t_json),
        ms(st.t_verify),
        ms(st.t_backup),
        ms(st.t_commit),
        ms(st.t_after)
    );
    println!(
        "  bytes written to meta.db: {} ({} pages: {} reused free pages, {} appended) = {:.1}% of the file",
        st.bytes_written,
        st.pages_written,
        st.pages_reused,
        st.pages_appended,
        100.0 * st.bytes_written as f64 / st.file_len_before as f64
    );
    println!(
        "  file: {} -> {} bytes ({:+.1} MB), high-water mark {} -> {} pages, txid {} -> {}",
        st.file_len_before,
        st.file_len_after,
        (st.file_len_after as f64 - st.file_len_before as f64) / 1e6,
        st.hwm_before,
        st.hwm_after,
        st.txid_before,
        st.txid_after
    );
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let runs: usize = std::env::var("RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let real = gunzip(&fixture("stores/containerd-1.6.20/meta-bulk-2000.db.gz"));
    println!("Go bbolt reference (issue 4): 2,000 containers, one transaction with fsync: 0.30 s, file 42 MB -> 78 MB");
    run(
        "real containerd 1.6.20 meta.db, 2,000 containers",
        &real,
        runs,
        None,
    );
    let t = Instant::now();
    let big = grow(real.clone(), 4, true);
    let big_nfl = grow(real, 4, false);
    println!(
        "(grew to 10,000 containers in {}, {} bytes)",
        ms(t.elapsed()),
        big.len()
    );
    run(
        "grown meta.db, 10,000 containers, synced freelist (1.6 layout)",
        &big,
        runs,
        None,
    );
    run(
        "grown meta.db, 10,000 containers, NoFreelistSync (1.7/2.x layout)",
        &big_nfl,
        runs,
        None,
    );
    run(
        "grown meta.db, 10,000 containers, NoFreelistSync, only 10 of them changed",
        &big_nfl,
        runs,
        Some(10),
    );
}
