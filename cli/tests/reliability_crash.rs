//! Crash sweeps through the real binary: `kubelet-rehash patch` runs as a child process on the
//! real nodes of fixtures/nodes and the 2,000-container nodes of fixtures/nodes-large, and is
//! SIGKILLed at chosen durable steps (`KUBELET_REHASH_CRASH_AT=N`, see storepatch::fault) and,
//! as a second net, at random moments. After every kill:
//!
//! * every store file holds exactly its original bytes or exactly the bytes of an uninterrupted
//!   run (meta.db: old bytes, new bytes, or — killed between the data pages and the meta page —
//!   other bytes that bbolt reads as exactly the old database, with a clean `tx.Check`);
//!   no other file appeared but the killed run's temp files;
//! * `plan` opens the store, and every record holds its old or its new hash (containerd: all
//!   old or all new, one transaction);
//! * when the backup manifest exists, `rollback --backup-dir` restores every original byte and
//!   mode; when it does not, the store is untouched and `rollback` refuses that directory;
//! * a rerun of `patch` (new backup dir) on the crashed store completes with the result of an
//!   uninterrupted run.
//!
//! Counts go to stderr (`cargo test --release --test reliability_crash -- --nocapture`).

mod rel_common;

use rel_common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const SIGKILL: i32 = 9;

/// A node prepared for crash tests: its pristine bytes and the result of an uninterrupted run.
struct Sweep {
    node: Node,
    to: String,
    pristine: BTreeMap<PathBuf, Vec<u8>>,
    old: Snapshot,
    new: Snapshot,
    old_hashes: BTreeMap<String, Option<String>>,
    new_hashes: BTreeMap<String, Option<String>>,
    old_kv: Option<Kv>,
    new_kv: Option<Kv>,
    /// The step name of every fault point of an uninterrupted run.
    points: Vec<String>,
    run_time: Duration,
    counts: BTreeMap<String, u64>,
}

/// What a kill left behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Every store file holds its original bytes.
    Untouched,
    /// meta.db holds other bytes that read as exactly the old database (pages written, the
    /// meta page not yet).
    OldUncommittedPages,
    /// Some files new, the others old (Docker, CRI-O: one file per container).
    Partial,
    /// Every file holds the new bytes.
    New,
}

impl Sweep {
    fn new(node: Node, to: Option<&str>) -> Sweep {
        let to = to.map(str::to_string).unwrap_or_else(|| node.last_target());
        let pristine = node.capture();
        let old = node.snapshot();
        assert!(old.temps.is_empty());
        let old_hashes = node.stored_hashes(&to);
        let old_kv = (node.kind == Kind::Containerd)
            .then(|| bolt_kv(&node.meta_db()).expect("pristine meta.db"));
        let bk = node.dir.join("bk-reference");
        let t = Instant::now();
        let r = Run::from(
            node.patch_cmd(&to, &bk)
                .env("KUBELET_REHASH_CRASH_LOG", "1")
                .output()
                .unwrap(),
        );
        let run_time = t.elapsed();
        assert!(r.ok(), "{}: uninterrupted patch: {r:?}", node.name);
        let points = fault_points(&r.stderr);
        let new = node.snapshot();
        assert!(
            new.temps.is_empty(),
            "an uninterrupted run leaves no temp file"
        );
        assert!(
            !old.diff(&new).is_empty(),
            "{}: the patch changes something",
            node.name
        );
        let new_hashes = node.stored_hashes(&to);
        assert_ne!(old_hashes, new_hashes);
        let new_kv = (node.kind == Kind::Containerd)
            .then(|| bolt_kv(&node.meta_db()).expect("patched meta.db"));
        node.restore(&pristine, &old);
        std::fs::remove_dir_all(&bk).unwrap();
        assert_eq!(node.snapshot(), old, "restore gives the pristine store");
        eprintln!(
            "{}: patch --to {to}: {} fault points, {} store files changed, uninterrupted run {:.2}s",
            node.name,
            points.len(),
            old.diff(&new).len(),
            run_time.as_secs_f64()
        );
        Sweep {
            node,
            to,
            pristine,
            old,
            new,
            old_hashes,
            new_hashes,
            old_kv,
            new_kv,
            points,
            run_time,
            counts: BTreeMap::new(),
        }
    }

    fn count(&mut self, what: impl Into<String>) {
        *self.counts.entry(what.into()).or_insert(0) += 1;
    }

    fn meta_rel(&self) -> PathBuf {
        self.node
            .meta_db()
            .strip_prefix(&self.node.dir)
            .unwrap()
            .to_path_buf()
    }

    /// Checks the store after a kill and says what state it is in.
    fn examine(&mut self, at: &str) -> State {
        self.examine_tally(at, true)
    }

    fn examine_tally(&mut self, at: &str, tally: bool) -> State {
        let name = self.node.name.clone();
        let snap = self.node.snapshot();
        let (mut n_old, mut n_new, mut uncommitted) = (0, 0, false);
        for (p, (sha_old, mode)) in &self.old.files {
            let (cur, cur_mode) = snap
                .files
                .get(p)
                .unwrap_or_else(|| panic!("{name} {at}: {} vanished", p.display()));
            assert_eq!(
                cur_mode,
                mode,
                "{name} {at}: mode of {} changed",
                p.display()
            );
            let sha_new = &self.new.files[p].0;
            if sha_old == sha_new {
                assert_eq!(
                    cur,
                    sha_old,
                    "{name} {at}: {} changed, but the patch does not write it",
                    p.display()
                );
            } else if cur == sha_old {
                n_old += 1;
            } else if cur == sha_new {
                n_new += 1;
            } else if *p == self.meta_rel() {
                let kv = bolt_kv(&self.node.meta_db())
                    .unwrap_or_else(|e| panic!("{name} {at}: meta.db does not open: {e}"));
                assert!(
                    Some(&kv) == self.old_kv.as_ref(),
                    "{name} {at}: meta.db holds neither the old nor the new bytes and does not read as the old database"
                );
                uncommitted = true;
            } else {
                panic!(
                    "{name} {at}: {} holds neither its old nor its new bytes",
                    p.display()
                );
            }
        }
        let extra: Vec<_> = snap
            .files
            .keys()
            .filter(|p| !self.old.files.contains_key(*p))
            .collect();
        assert!(
            extra.is_empty(),
            "{name} {at}: new files in the store: {extra:?}"
        );
        if tally && !snap.temps.is_empty() {
            self.count("kills leaving temp files");
            *self.counts.entry("temp files left".into()).or_insert(0) += snap.temps.len() as u64;
        }
        // The store opens, and every record holds its old or its new hash.
        let hashes = self.node.stored_hashes(&self.to);
        assert_eq!(
            hashes.keys().collect::<Vec<_>>(),
            self.old_hashes.keys().collect::<Vec<_>>(),
            "{name} {at}: the same records"
        );
        let (mut h_old, mut h_new) = (0, 0);
        for (id, h) in &hashes {
            if *h == self.old_hashes[id] {
                h_old += 1;
            }
            if *h == self.new_hashes[id] {
                h_new += 1;
            } else if *h != self.old_hashes[id] {
                panic!("{name} {at}: record {id} holds {h:?}, neither old nor new");
            }
        }
        let changed = self
            .old_hashes
            .iter()
            .filter(|(id, h)| self.new_hashes[*id] != **h)
            .count();
        if self.node.kind == Kind::Containerd {
            assert!(
                h_new == hashes.len() || h_old == hashes.len(),
                "{name} {at}: one transaction: all old or all new hashes ({h_old} old, {h_new} new)"
            );
        }
        let state = if uncommitted {
            assert_eq!(n_new, 0);
            State::OldUncommittedPages
        } else if n_new == 0 {
            State::Untouched
        } else if n_old == 0 {
            State::New
        } else {
            State::Partial
        };
        if state == State::New {
            assert_eq!(h_new, hashes.len(), "{name} {at}: new bytes, new hashes");
        }
        if matches!(state, State::Untouched | State::OldUncommittedPages) {
            assert_eq!(h_old, hashes.len(), "{name} {at}: old bytes, old hashes");
            assert!(changed > 0);
        }
        if tally {
            self.count(format!("state {state:?}"));
        }
        state
    }

    /// Rolls back the backup a killed run left (if its manifest exists) and checks every
    /// original byte is back; without a manifest the store must be untouched and `rollback`
    /// must refuse the directory.
    fn rollback_crashed(&mut self, bk: &Path, state: Option<State>, at: &str) {
        let name = self.node.name.clone();
        if !bk.join("manifest.json").exists() {
            let before = self.node.snapshot();
            if let Some(s) = state {
                assert_eq!(s, State::Untouched, "{name} {at}: no manifest, so no write");
            }
            if bk.exists() {
                let r = self.node.rollback(bk, false);
                assert_eq!(
                    r.code,
                    Some(3),
                    "{name} {at}: rollback without manifest: {r:?}"
                );
                assert!(r.stderr.contains("not a kubelet-rehash backup"), "{r:?}");
                assert_eq!(
                    self.node.snapshot(),
                    before,
                    "{name} {at}: a refused rollback writes nothing"
                );
            }
            self.count("no manifest yet");
            return;
        }
        let manifest: Value =
            serde_json::from_slice(&std::fs::read(bk.join("manifest.json")).unwrap()).unwrap();
        let unrecorded = manifest["entries"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["sha256_new"].is_null());
        let mut r = self.node.rollback(bk, false);
        if r.code == Some(3) && unrecorded {
            // meta.db differs from the original and its new sha256 was never recorded: the
            // documented refusal, then the documented override.
            assert!(
                r.stderr.contains("not recorded") && r.stderr.contains("meta.db"),
                "{name} {at}: {r:?}"
            );
            assert!(
                r.stderr
                    .contains("rollback --accept-unrecorded --backup-dir"),
                "{name} {at}: the refusal names the one command that finishes the undo: {r:?}"
            );
            self.count("rollback needed --accept-unrecorded");
            r = self.node.rollback(bk, true);
        }
        assert_eq!(r.code, Some(0), "{name} {at}: rollback: {r:?}");
        let snap = self.node.snapshot();
        let diff = snap.diff(&self.old);
        assert!(
            diff.is_empty(),
            "{name} {at}: rollback restores every byte and mode; differ: {diff:?}"
        );
        self.count("rollbacks exact");
    }

    /// Before the manifest exists nothing may have been written to the store.
    fn no_manifest_no_write(&self, bk: &Path, state: State, at: &str) {
        if !bk.join("manifest.json").exists() {
            assert_eq!(
                state,
                State::Untouched,
                "{} {at}: no backup manifest yet, but the store changed",
                self.node.name
            );
            assert!(self.node.snapshot().temps.is_empty());
        }
    }

    /// Reruns `patch` with a new backup dir on whatever the store holds and checks it ends as
    /// an uninterrupted run does.
    fn rerun(&mut self, at: &str) {
        let name = self.node.name.clone();
        let bk = self.node.dir.join("bk-rerun");
        let r = self.node.patch(&self.to, &bk);
        assert!(r.ok(), "{name} {at}: rerun of patch: {r:?}");
        let snap = self.node.snapshot();
        let mut diff = snap.diff(&self.new);
        if self.node.kind == Kind::Containerd && diff == [self.meta_rel()] {
            let kv = bolt_kv(&self.node.meta_db()).unwrap();
            assert!(
                Some(&kv) == self.new_kv.as_ref(),
                "{name} {at}: the rerun's meta.db reads as the reference result"
            );
            self.count("reruns: meta.db other bytes, same database");
            diff.clear();
        }
        assert!(
            diff.is_empty(),
            "{name} {at}: the rerun gives the reference result; differ: {diff:?}"
        );
        assert_eq!(self.node.stored_hashes(&self.to), self.new_hashes);
        // In the store (var/, and the CRI-O runroot under run/); a killed run's backup dir may
        // keep its half-written manifest temp, which rollback never reads.
        let leftovers: Vec<_> = ["var", "run"]
            .iter()
            .flat_map(|d| walkdir::WalkDir::new(self.node.dir.join(d)))
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().contains(".rehash-tmp-"))
            .map(|e| e.path().display().to_string())
            .collect();
        assert!(
            leftovers.is_empty(),
            "{name} {at}: the rerun removes the killed run's temp files: {leftovers:?}"
        );
        std::fs::remove_dir_all(&bk).ok();
        self.count("reruns complete");
    }

    fn reset(&self) {
        self.node.restore(&self.pristine, &self.old);
        for e in std::fs::read_dir(&self.node.dir).unwrap() {
            let e = e.unwrap();
            if e.file_name().to_string_lossy().starts_with("bk-") {
                std::fs::remove_dir_all(e.path()).unwrap();
            }
        }
    }

    fn kill_at(&self, n: u64, bk: &Path) -> Run {
        let r = Run::from(
            self.node
                .patch_cmd(&self.to, bk)
                .env("KUBELET_REHASH_CRASH_AT", n.to_string())
                .output()
                .unwrap(),
        );
        assert_eq!(
            r.signal,
            Some(SIGKILL),
            "{}: patch with KUBELET_REHASH_CRASH_AT={n} was not killed: {r:?}",
            self.node.name
        );
        r
    }

    /// Kill at fault point `n`; check; roll back; (`rekill`: kill again at `n`, which must
    /// leave the same bytes); rerun; back to pristine.
    fn at_point(&mut self, n: u64, rekill: bool) {
        let step = self.points[n as usize - 1].clone();
        let at = format!("point {n} ({step})");
        let bk = self.node.dir.join("bk-crash");
        self.kill_at(n, &bk);
        self.count("kills at fault points");
        let state = self.examine(&at);
        self.no_manifest_no_write(&bk, state, &at);
        if rekill {
            self.rollback_crashed(&bk, Some(state), &at);
            std::fs::remove_dir_all(&bk).ok();
            // Kill again at the same point and check again, then rerun on that. (Not
            // necessarily the same bytes: renames may run on several threads, which go on
            // for a moment after the one at point n sent the SIGKILL.)
            self.kill_at(n, &bk);
            self.examine_tally(&at, false);
            self.rerun(&at);
        } else {
            // Rerun on the crashed store, then roll back the crashed run's backup over the result.
            self.rerun(&at);
            self.rollback_crashed(&bk, None, &at);
        }
        self.reset();
    }

    /// SIGKILL after a random delay in [0, 1.1 × the uninterrupted run time].
    fn at_random_time(&mut self, rng: &mut Rng) {
        let max = (self.run_time.as_micros() as u64 * 11 / 10).max(1);
        let delay = Duration::from_micros(rng.below(max));
        let at = format!("timed kill after {:.3}s", delay.as_secs_f64());
        let bk = self.node.dir.join("bk-crash");
        let mut child = self
            .node
            .patch_cmd(&self.to, &bk)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(delay);
        let _ = child.kill();
        let st = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        if st.signal() == Some(SIGKILL) {
            self.count("timed kills landed");
        } else {
            assert!(
                matches!(st.code(), Some(0) | Some(4)),
                "{} {at}: {st:?}",
                self.node.name
            );
            self.count("timed kills too late (run finished)");
        }
        let state = self.examine(&at);
        self.no_manifest_no_write(&bk, state, &at);
        self.rerun(&at);
        self.rollback_crashed(&bk, None, &at);
        self.reset();
    }

    fn report(&self, kind: &str) -> u64 {
        let kills = self
            .counts
            .get("kills at fault points")
            .copied()
            .unwrap_or(0);
        eprintln!(
            "{} [{kind}]: {} fault points in a run; outcomes {:#?}",
            self.node.name,
            self.points.len(),
            self.counts
        );
        kills
    }
}

/// Every point of a small node's run (or `limit` of them, spread evenly), plus `timed` random kills.
fn sweep(node: Node, limit: u64, rekill: bool, timed: u32) {
    let mut s = Sweep::new(node, None);
    if s.node.kind == Kind::Containerd {
        // the undo file of the default page backup is written and fsync-ed before the manifest
        let at = |name: &str| s.points.iter().position(|p| p == name);
        assert!(
            at("backup-pages-write") < at("backup-pages-fsync")
                && at("backup-pages-fsync").is_some()
                && at("backup-pages-fsync") < at("bolt-write-pages"),
            "{:?}",
            s.points
        );
    }
    let t = Instant::now();
    let chosen = spread(s.points.len() as u64, limit);
    for &n in &chosen {
        s.at_point(n, rekill);
    }
    let seed = seed();
    eprintln!("{}: timed kills with RELIABILITY_SEED={seed}", s.node.name);
    let mut rng = Rng(seed);
    for _ in 0..timed {
        s.at_random_time(&mut rng);
    }
    let kills = s.report("sweep");
    assert_eq!(kills, chosen.len() as u64);
    let states: Vec<_> = s.counts.keys().filter(|k| k.starts_with("state")).collect();
    assert!(
        s.counts.contains_key("state Untouched") && s.counts.contains_key("state New"),
        "{}: the sweep saw both ends: {states:?}",
        s.node.name
    );
    eprintln!(
        "{}: {} kills at fault points + {timed} timed kills in {:.1}s",
        s.node.name,
        kills,
        t.elapsed().as_secs_f64()
    );
}

#[test]
fn crash_sweep_docker_20_10_every_point() {
    sweep(small("docker-20.10"), u64::MAX, true, 4);
}

#[test]
fn crash_sweep_containerd_1_6_every_point() {
    sweep(small("containerd-1.6"), u64::MAX, true, 3);
}

#[test]
fn crash_sweep_containerd_1_7_every_point() {
    sweep(small("containerd-1.7"), u64::MAX, true, 3);
}

#[test]
fn crash_sweep_crio_1_30_sampled() {
    sweep(small("crio-1.30"), 30, true, 2);
}

#[test]
fn crash_sweep_large_containerd_1_7() {
    let mut s = Sweep::new(large("containerd-1.7-large"), None);
    let t = Instant::now();
    // every step of the page backup and of the bolt transaction, and a spread of the others
    // (manifest, report)
    let mut chosen: Vec<u64> = (1..=s.points.len() as u64)
        .filter(|n| {
            let p = &s.points[*n as usize - 1];
            p.starts_with("bolt-") || p.starts_with("backup-pages-")
        })
        .collect();
    assert!(
        chosen
            .iter()
            .any(|n| s.points[*n as usize - 1] == "backup-pages-fsync"),
        "the default backup of meta.db is by page: {:?}",
        s.points
    );
    chosen.extend(spread(s.points.len() as u64, 4));
    chosen.sort();
    chosen.dedup();
    for &n in &chosen {
        s.at_point(n, false);
    }
    let seed = seed();
    eprintln!("{}: timed kills with RELIABILITY_SEED={seed}", s.node.name);
    let mut rng = Rng(seed);
    for _ in 0..2 {
        s.at_random_time(&mut rng);
    }
    s.report("large");
    assert!(
        s.counts.contains_key("state OldUncommittedPages")
            || s.counts.contains_key("state Untouched")
    );
    assert!(s.counts.contains_key("state New"));
    eprintln!(
        "{}: {} kills at fault points + 2 timed in {:.1}s",
        s.node.name,
        chosen.len(),
        t.elapsed().as_secs_f64()
    );
}

#[test]
fn crash_sweep_large_docker_20_10() {
    let mut s = Sweep::new(large("docker-20.10-large"), None);
    let t = Instant::now();
    // thousands of points (a backup write, a staged write and a rename per container): sample
    // evenly over the whole run, so every phase is hit
    let chosen = spread(s.points.len() as u64, 8);
    let steps: Vec<_> = chosen
        .iter()
        .map(|n| s.points[*n as usize - 1].clone())
        .collect();
    eprintln!("{}: killing at {chosen:?} = {steps:?}", s.node.name);
    for &n in &chosen {
        s.at_point(n, false);
    }
    let seed = seed();
    eprintln!("{}: timed kills with RELIABILITY_SEED={seed}", s.node.name);
    let mut rng = Rng(seed);
    s.at_random_time(&mut rng);
    s.report("large");
    assert!(
        s.counts.contains_key("state Partial"),
        "a kill among the renames leaves some files new"
    );
    eprintln!(
        "{}: {} kills at fault points + 1 timed in {:.1}s",
        s.node.name,
        chosen.len(),
        t.elapsed().as_secs_f64()
    );
}
