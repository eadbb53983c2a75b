//! Go bbolt's own consistency check, for the tests of this workspace (feature `test-support`).
//!
//! Our [`crate::check`] is a reimplementation of bbolt's rules; a test that only asks it
//! whether a file we wrote is valid asks the author of the bug. [`assert_bbolt_check`] runs
//! `tools/bbolt-check` (Go, built against Debian's bbolt 1.3.6 source by
//! `scripts/setup-bbolt-check.sh` into `.cache/bin/bbolt-check`), which opens the file with
//! bbolt itself, runs `tx.Check()`, walks every bucket through bbolt's cursors and prints a
//! digest of every key and value it read. The assertion is that bbolt finds no problem *and*
//! reads exactly the key/values, bucket sequences, txid and high-water mark our reader reads.
//!
//! Without the checker binary the assertion cannot be made: when the environment variable
//! `CI` is set that fails the test (CI can never skip it); otherwise it prints a loud note once
//! per process and returns, so a developer without Go can still run the tests.

use crate::{fnv1a64, Db, DumpEntry};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;
use std::time::{Duration, Instant};

/// Longest a checker run may take by default (Go checks a 40 MB file in well under a second).
const TIMEOUT: Duration = Duration::from_secs(60);

/// A fresh private directory for one run's output.
fn tempfile_dir() -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let d = std::env::temp_dir().join(format!(
        "bbolt-check-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Environment variable naming the checker binary (default: [`default_checker`]).
pub const CHECKER_ENV: &str = "BBOLT_CHECK";

/// `<workspace>/.cache/bin/bbolt-check`, where `scripts/setup-bbolt-check.sh` builds it.
pub fn default_checker() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../.cache/bin/bbolt-check")
}

/// The checker binary to run: `$BBOLT_CHECK`, else [`default_checker`].
pub fn checker() -> PathBuf {
    std::env::var_os(CHECKER_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(default_checker)
}

/// What Go bbolt said about one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoVerdict {
    /// The checker's exit code (`None`: killed by a signal). 0 = bbolt found no problem.
    pub code: Option<i32>,
    /// Its stdout and stderr (the `ok ...` line, or one `error ...` line per problem, or a
    /// Go panic when bbolt crashed on the file).
    pub output: String,
    /// From the `ok` line: txid, pages in use, keys (buckets included), buckets, digest.
    pub summary: Option<GoSummary>,
}

/// The figures of bbolt-check's `ok` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GoSummary {
    /// The transaction id bbolt opened.
    pub txid: u64,
    /// Its high-water mark (pages in use).
    pub pages: u64,
    /// Every key bbolt's cursors visited, nested bucket keys included.
    pub keys: u64,
    /// Nested buckets among them.
    pub buckets: u64,
    /// [`dump_digest`] of what bbolt read.
    pub digest: u64,
}

impl GoVerdict {
    /// bbolt opened the file, `tx.Check()` found nothing and the walk succeeded.
    pub fn passed(&self) -> bool {
        self.code == Some(0) && self.summary.is_some()
    }
}

/// Runs the checker on `path`; `None` when the checker binary does not exist.
pub fn run_bbolt_check(path: &Path) -> Option<GoVerdict> {
    run_bbolt_check_within(path, TIMEOUT)
}

/// [`run_bbolt_check`], killing the checker after `timeout` (a rejection). bbolt trusts the
/// page graph: on a damaged file it may recurse through a cycle until Go's stack limit, which
/// takes long, so tests that feed it random damage pass a short timeout.
pub fn run_bbolt_check_within(path: &Path, timeout: Duration) -> Option<GoVerdict> {
    let bin = checker();
    if !bin.exists() {
        return None;
    }
    let dir = tempfile_dir();
    let (out_path, err_path) = (dir.join("stdout"), dir.join("stderr"));
    let mut child = Command::new(&bin)
        .arg(path)
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let mut output = format!(
        "{}{}",
        String::from_utf8_lossy(&std::fs::read(&out_path).unwrap_or_default()),
        String::from_utf8_lossy(&std::fs::read(&err_path).unwrap_or_default())
    );
    let _ = std::fs::remove_dir_all(&dir);
    if status.is_none() {
        output.push_str(&format!("bbolt-check killed after {timeout:?}\n"));
    }
    let code = status.and_then(|s| s.code());
    let summary = output
        .lines()
        .find(|l| l.starts_with("ok "))
        .and_then(parse_ok_line);
    Some(GoVerdict {
        code,
        output,
        summary,
    })
}

fn parse_ok_line(line: &str) -> Option<GoSummary> {
    let field = |name: &str| -> Option<&str> {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(name)?.strip_prefix('='))
    };
    Some(GoSummary {
        txid: field("txid")?.parse().ok()?,
        pages: field("pages")?.parse().ok()?,
        keys: field("keys")?.parse().ok()?,
        buckets: field("buckets")?.parse().ok()?,
        digest: u64::from_str_radix(field("digest")?, 16).ok()?,
    })
}

/// FNV-1a 64 of a canonical encoding of a dump, the one bbolt-check computes over what bbolt
/// reads: per entry, in dump order, the bucket path (u32 count, then u32 length + bytes per
/// key), the key (u32 length + bytes), then `b` + u64 sequence for a bucket or `v` + u32
/// length + bytes for a value; integers little-endian.
pub fn dump_digest(dump: &[DumpEntry]) -> u64 {
    let mut enc = Vec::new();
    let put = |enc: &mut Vec<u8>, b: &[u8]| {
        enc.extend_from_slice(&(b.len() as u32).to_le_bytes());
        enc.extend_from_slice(b);
    };
    for e in dump {
        enc.extend_from_slice(&(e.path.len() as u32).to_le_bytes());
        for p in &e.path {
            put(&mut enc, p);
        }
        put(&mut enc, &e.key);
        match &e.value {
            None => {
                enc.push(b'b');
                enc.extend_from_slice(&e.sequence.to_le_bytes());
            }
            Some(v) => {
                enc.push(b'v');
                put(&mut enc, v);
            }
        }
    }
    fnv1a64(&enc)
}

fn checker_missing() {
    let bin = checker();
    if std::env::var_os("CI").is_some() {
        panic!(
            "Go bbolt's check is required in CI but {} does not exist: run scripts/setup-bbolt-check.sh",
            bin.display()
        );
    }
    static NOTE: Once = Once::new();
    NOTE.call_once(|| {
        eprintln!(
            "\n!!!!!!!! NOTE: {} is missing: the files these tests write are NOT checked by Go \
             bbolt's tx.Check (only by our own check). Run scripts/setup-bbolt-check.sh; CI \
             fails without it. !!!!!!!!\n",
            bin.display()
        );
    });
}

/// Runs Go bbolt on the file at `path` and compares with our reader: `Ok` with bbolt's
/// figures when bbolt accepts the file (open, `tx.Check()`, a cursor walk of every bucket) and
/// reads exactly what [`Db::dump`] reads there (same txid, high-water mark, keys, bucket
/// sequences and values); `Err` saying why not; `None` without the checker binary.
pub fn compare_with_bbolt(path: &Path) -> Option<Result<GoSummary, String>> {
    let v = run_bbolt_check(path)?;
    Some(compare(path, v))
}

fn compare(path: &Path, v: GoVerdict) -> Result<GoSummary, String> {
    let at = path.display();
    if !v.passed() {
        return Err(format!(
            "{at}: Go bbolt's check fails (exit {:?}):\n{}",
            v.code, v.output
        ));
    }
    let go = v.summary.unwrap();
    let db = Db::read_path(path).map_err(|e| format!("{at}: bbolt opens it, we do not: {e}"))?;
    let dump = db
        .dump()
        .map_err(|e| format!("{at}: bbolt walks it, our dump does not: {e}"))?;
    let ours = GoSummary {
        txid: db.meta.txid,
        pages: db.meta.hwm,
        keys: dump.len() as u64,
        buckets: dump.iter().filter(|e| e.value.is_none()).count() as u64,
        digest: dump_digest(&dump),
    };
    if go != ours {
        return Err(format!(
            "{at}: Go bbolt and our reader read different databases: bbolt {go:?}, ours {ours:?}"
        ));
    }
    Ok(go)
}

/// Asserts [`compare_with_bbolt`]: Go bbolt accepts the file at `path` and reads what we read.
/// Every test that writes a bolt file calls it on the result. See the module docs for a
/// missing checker.
pub fn assert_bbolt_check(path: &Path) {
    match compare_with_bbolt(path) {
        None => checker_missing(),
        Some(Err(e)) => panic!("{e}"),
        Some(Ok(go)) => log_checked(path, &go),
    }
}

/// With `BBOLT_CHECK_LOG=<file>`, one line per file [`assert_bbolt_check`] passed is appended
/// there (to count them over a whole test run).
fn log_checked(path: &Path, go: &GoSummary) {
    use std::io::Write;
    let Some(log) = std::env::var_os("BBOLT_CHECK_LOG") else {
        return;
    };
    let line = format!(
        "{} txid={} pages={} keys={} digest={:016x}\n",
        path.display(),
        go.txid,
        go.pages,
        go.keys,
        go.digest
    );
    // one write of one short line to an O_APPEND file: lines of parallel tests do not mix
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
    {
        let _ = f.write_all(line.as_bytes());
    }
}

/// Whether Go bbolt rejects the file at `path` (any non-zero exit, a crash of bbolt on the
/// file included); `None` without the checker (after the same CI rule as
/// [`assert_bbolt_check`]).
pub fn bbolt_rejects(path: &Path) -> Option<bool> {
    match run_bbolt_check(path) {
        Some(v) => Some(!v.passed()),
        None => {
            checker_missing();
            None
        }
    }
}

/// Offset in `bytes` of the value of the first element (depth first) for which `find(key,
/// value)` holds, among values stored in the file itself (not copies): where a test damages
/// a file on purpose. Panics when there is none.
pub fn value_offset(bytes: &[u8], find: impl Fn(&[u8], &[u8]) -> bool) -> usize {
    use crate::{bucket_root, Root, View};
    let db = Db::from_bytes(bytes.to_vec()).unwrap();
    let view = db.view();
    let mut found = None;
    fn walk<'a>(
        view: &View<'a>,
        root: Root<'a>,
        found: &mut Option<usize>,
        base: usize,
        find: &dyn Fn(&[u8], &[u8]) -> bool,
    ) {
        let mut elems = Vec::new();
        view.for_each(root, &mut |e| {
            elems.push(e);
            Ok(())
        })
        .unwrap();
        for e in elems {
            if found.is_some() {
                return;
            }
            if find(e.key, e.value) && e.value.as_ptr() as usize >= base {
                *found = Some(e.value.as_ptr() as usize - base);
                return;
            }
            if e.is_bucket() {
                let (r, _) = bucket_root(e.value, "t").unwrap();
                walk(view, r, found, base, find);
            }
        }
    }
    walk(
        &view,
        db.root(),
        &mut found,
        db.data.as_ptr() as usize,
        &find,
    );
    found.expect("no such element")
}

/// A bolt file's logical content: (bucket path, key) → (value, or `None` for a bucket; the
/// bucket's sequence). Two files with equal `Kv`s hold the same data whatever their layout.
pub type Kv = std::collections::BTreeMap<(Vec<Vec<u8>>, Vec<u8>), (Option<Vec<u8>>, u64)>;

/// The content of `db` as a [`Kv`].
pub fn kv_of(db: &Db) -> Result<Kv, crate::BoltError> {
    Ok(db
        .dump()?
        .into_iter()
        .map(
            |DumpEntry {
                 path,
                 key,
                 value,
                 sequence,
             }| ((path, key), (value, sequence)),
        )
        .collect())
}
