//! Crash sweeps through the real binary: `kubelet-rehash patch` and `kubelet-rehash rollback`
//! run as child processes on the real nodes of fixtures/nodes and the 2,000-container nodes of
//! fixtures/nodes-large, and are SIGKILLed at chosen durable steps (`KUBELET_REHASH_CRASH_AT=N`,
//! see storepatch::fault) and, as a second net, at random moments. After every kill:
//!
//! * every store file holds exactly its original bytes or exactly the bytes of an uninterrupted
//!   run (meta.db: old bytes, new bytes, or — killed between the data pages and the meta page —
//!   other bytes that bbolt reads as exactly the old database, with a clean `tx.Check`);
//!   no other file appeared but the killed run's temp files;
//! * `plan` opens the store, and every record holds its old or its new hash (containerd: all
//!   old or all new, one transaction);
//! * the next `patch` either goes on (the killed run cannot have written: its backup has no
//!   manifest) or refuses with exit 3 naming one command; the test runs exactly that command
//!   (with the flags that name the node, as every command of the test gets), which must leave
//!   every original byte and mode back, no temp file and no in-flight marker — without
//!   `--accept-unrecorded`, which no message mentions any more;
//! * a patch after that completes with the result of an uninterrupted run.
//!
//! The rollback chain kills `rollback` the same way (of a finished patch, and of a patch killed
//! between its bolt commit and the manifest update) and runs the command the next `patch`
//! names; two patches to different targets racing on one store leave it all-old or all-new,
//! the loser refusing with exit 3 naming the holder's pid. `RELIABILITY_TIMED_KILLS=N` makes
//! the random-kill sweep over Docker, containerd and CRI-O patch and rollback N kills per
//! node and command (the long sweep; CI runs the small default).
//!
//! Counts go to stderr (`cargo test --release --test reliability_crash -- --nocapture`).

mod rel_common;
mod under_test;

use rel_common::*;
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

    /// After a kill that left the store in `state`: runs the next `patch`, which goes on when
    /// no run is in flight (none was killed after its marker and before its end) or the killed
    /// run cannot have written (its backup `bk` has no manifest), and otherwise refuses naming
    /// one command; runs exactly that command and checks that every original byte and mode is
    /// back, with no temp file and no marker left; then patches to completion.
    fn recover(&mut self, bk: &Path, state: State, at: &str) {
        let name = self.node.name.clone();
        let next = self.node.dir.join("bk-next");
        let before = self.node.snapshot();
        let in_flight = storepatch::inflight::marker_file(&self.node.store_root())
            .unwrap()
            .exists();
        let r = self.node.patch(&self.to, &next);
        if !in_flight || !bk.join("manifest.json").exists() {
            assert_ne!(
                state,
                State::Partial,
                "{name} {at}: a half-written store always has its run's marker"
            );
            assert!(
                r.ok(),
                "{name} {at}: no run in flight that may have written (marker {in_flight}), so the next patch goes on: {r:?}"
            );
            self.check_reference(at);
            std::fs::remove_dir_all(&next).ok();
            self.count("next patch went on (nothing in flight had written)");
            if bk.exists() && !bk.join("manifest.json").exists() {
                // and its directory is still no backup to roll back
                let r = self.node.rollback(bk, false);
                assert_eq!(
                    r.code,
                    Some(3),
                    "{name} {at}: rollback without manifest: {r:?}"
                );
                assert!(r.stderr.contains("not a kubelet-rehash backup"), "{r:?}");
            }
            return;
        }
        assert_eq!(
            r.code,
            Some(3),
            "{name} {at}: the next patch refuses while a killed run's store may be half-written: {r:?}"
        );
        assert!(
            !next.exists(),
            "{name} {at}: the refused patch made no backup"
        );
        assert_eq!(
            self.node.snapshot(),
            before,
            "{name} {at}: the refused patch wrote nothing"
        );
        let cmd = named_command(&r.stderr)
            .unwrap_or_else(|| panic!("{name} {at}: the refusal names one command: {r:?}"));
        assert_eq!(
            cmd[..2],
            ["rollback", "--backup-dir"],
            "{name} {at}: the named command is the rollback: {r:?}"
        );
        assert_eq!(
            std::fs::canonicalize(&cmd[2]).unwrap(),
            std::fs::canonicalize(bk).unwrap(),
            "{name} {at}: of the killed run's backup"
        );
        assert!(
            !r.stderr.contains("--accept-unrecorded"),
            "{name} {at}: no flag beyond the named command: {r:?}"
        );
        let done = self.node.run_named(&cmd);
        assert_eq!(
            done.code,
            Some(0),
            "{name} {at}: the named command `{}` finishes: {done:?}",
            cmd.join(" ")
        );
        self.check_original(at);
        self.count("named rollback restored every byte");
        self.rerun(at);
    }

    /// Every original byte and mode back, no temp file in the store, no marker of it.
    fn check_original(&mut self, at: &str) {
        let name = self.node.name.clone();
        let snap = self.node.snapshot();
        let diff = snap.diff(&self.old);
        let lost: u64 = diff
            .iter()
            .map(|p| self.pristine.get(p).map_or(0, |b| b.len() as u64))
            .sum();
        *self.counts.entry("bytes lost".into()).or_insert(0) += lost;
        assert!(
            diff.is_empty(),
            "{name} {at}: every original byte and mode is back ({lost} bytes lost); differ: {diff:?}"
        );
        assert!(
            snap.temps.is_empty(),
            "{name} {at}: no temp file left: {:?}",
            snap.temps
        );
        self.no_marker(at);
    }

    fn no_marker(&self, at: &str) {
        let m = storepatch::inflight::marker_file(&self.node.store_root()).unwrap();
        assert!(
            !m.exists(),
            "{} {at}: the finished run removed its in-flight marker {}",
            self.node.name,
            m.display()
        );
    }

    /// The store is exactly what an uninterrupted patch gives.
    fn check_reference(&mut self, at: &str) {
        let name = self.node.name.clone();
        let snap = self.node.snapshot();
        let mut diff = snap.diff(&self.new);
        if self.node.kind == Kind::Containerd && diff == [self.meta_rel()] {
            let kv = bolt_kv(&self.node.meta_db()).unwrap();
            assert!(
                Some(&kv) == self.new_kv.as_ref(),
                "{name} {at}: meta.db reads as the reference result"
            );
            self.count("reruns: meta.db other bytes, same database");
            diff.clear();
        }
        assert!(
            diff.is_empty(),
            "{name} {at}: the patch gives the reference result; differ: {diff:?}"
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
            "{name} {at}: the killed run's temp files are removed: {leftovers:?}"
        );
        self.no_marker(at);
    }

    /// Before the manifest exists no store file may have changed. Staged temp files may lie
    /// beside them (Docker and CRI-O stage their new files before the backup commits, so that
    /// one flush makes both durable); the runtimes never read them, and the recovery and
    /// rerun that follow must leave none (checked by `check_reference`).
    fn no_manifest_no_write(&self, bk: &Path, state: State, at: &str) {
        if !bk.join("manifest.json").exists() {
            assert_eq!(
                state,
                State::Untouched,
                "{} {at}: no backup manifest yet, but the store changed",
                self.node.name
            );
        }
    }

    /// Runs `patch` with a new backup dir on whatever the store holds (after a recovery) and
    /// checks it ends as an uninterrupted run does.
    fn rerun(&mut self, at: &str) {
        let name = self.node.name.clone();
        let bk = self.node.dir.join("bk-rerun");
        let r = self.node.patch(&self.to, &bk);
        assert!(r.ok(), "{name} {at}: rerun of patch: {r:?}");
        self.check_reference(at);
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

    /// Kill at fault point `n`; check; recover by the named command; (`rekill`: kill again
    /// at `n` on the pristine store and recover again, which must give the same outcome);
    /// back to pristine.
    fn at_point(&mut self, n: u64, rekill: bool) {
        let step = self.points[n as usize - 1].clone();
        let at = format!("point {n} ({step})");
        let bk = self.node.dir.join("bk-crash");
        self.kill_at(n, &bk);
        self.count("kills at fault points");
        let state = self.examine(&at);
        self.no_manifest_no_write(&bk, state, &at);
        self.recover(&bk, state, &at);
        if rekill {
            self.reset();
            // Kill again at the same point and check again. (Not necessarily the same bytes:
            // renames may run on several threads, which go on for a moment after the one at
            // point n sent the SIGKILL.)
            self.kill_at(n, &bk);
            let state = self.examine_tally(&at, false);
            self.recover(&bk, state, &at);
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
        self.recover(&bk, state, &at);
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
        // the undo file of the default page backup is written, then made durable by the
        // backup's syncfs, before the first write to meta.db
        let at = |name: &str| s.points.iter().position(|p| p == name);
        let (written, first_write) = (at("backup-pages-write"), at("bolt-write-pages"));
        assert!(
            written.is_some()
                && first_write.is_some()
                && s.points[written.unwrap()..first_write.unwrap()]
                    .iter()
                    .any(|p| p == "backup-syncfs"),
            "the page backup is durable before meta.db is written: {:?}",
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

/// Docker 28.5.2's store (the real kubelet's pods in cri-dockerd's shape): every point.
#[test]
fn crash_sweep_docker_28_5_every_point() {
    sweep(small("docker-28.5"), u64::MAX, true, 3);
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
fn crash_sweep_containerd_2_4_every_point() {
    sweep(small("containerd-2.4"), u64::MAX, true, 3);
}

#[test]
fn crash_sweep_containerd_2_3_lts_every_point() {
    sweep(small("containerd-2.3"), u64::MAX, true, 3);
}

#[test]
fn crash_sweep_crio_1_30_sampled() {
    sweep(small("crio-1.30"), 30, true, 2);
}

/// The node the real kubelet made on CRI-O 1.36.3 (18 config.json pairs): every point.
#[test]
fn crash_sweep_crio_1_36_every_point() {
    sweep(small("crio-1.36"), u64::MAX, true, 2);
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
            p.starts_with("bolt-") || p.starts_with("backup-pages-") || p == "backup-syncfs"
        })
        .collect();
    assert!(
        chosen
            .iter()
            .any(|n| s.points[*n as usize - 1] == "backup-pages-write"),
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

/// Chooses the fault point of a patch (from the step names of an uninterrupted run).
type ChoosePoint = fn(&[String]) -> u64;

/// The rollback chain on one node: a store at the start of a rollback (after a finished patch,
/// or after a patch killed at a chosen point), and the rollback's fault points.
struct Chain {
    s: Sweep,
    /// The backup the rollback restores (not named `bk-*`: `reset` keeps it).
    bk: PathBuf,
    /// The store's bytes (temp files left out) and modes when the rollback starts.
    start: BTreeMap<PathBuf, Vec<u8>>,
    start_snap: Snapshot,
    /// The killed patch's in-flight marker, put back before every rollback.
    marker: Option<Vec<u8>>,
    points: Vec<String>,
    run_time: Duration,
}

impl Chain {
    /// `patch_killed_at`: the fault point of the patch whose interrupted run the rollback
    /// undoes; `None`: a finished patch.
    fn new(node: Node, patch_killed_at: Option<ChoosePoint>) -> Chain {
        let mut s = Sweep::new(node, None);
        let bk = s.node.dir.join("chain-backup");
        match patch_killed_at {
            None => {
                let r = s.node.patch(&s.to, &bk);
                assert!(r.ok(), "{}: patch: {r:?}", s.node.name);
                // this run's bytes are the "new" side (a bolt file's may differ from the
                // reference run's, reading as the same database)
                s.new = s.node.snapshot();
                s.new_kv =
                    (s.node.kind == Kind::Containerd).then(|| bolt_kv(&s.node.meta_db()).unwrap());
            }
            Some(choose) => {
                let n = choose(&s.points);
                s.kill_at(n, &bk);
                s.examine_tally(&format!("patch killed at {n}"), false);
            }
        }
        let mut start = s.node.capture();
        start.retain(|p, _| !p.to_string_lossy().contains(".rehash-tmp-"));
        let start_snap = s.node.snapshot();
        let marker_path = storepatch::inflight::marker_file(&s.node.store_root()).unwrap();
        let marker = std::fs::read(&marker_path).ok();
        assert_eq!(
            marker.is_some(),
            patch_killed_at.is_some(),
            "{}: a killed patch leaves its marker, a finished one none",
            s.node.name
        );
        let t = Instant::now();
        let r = Run::from(
            s.rollback_cmd(&bk)
                .env("KUBELET_REHASH_CRASH_LOG", "1")
                .output()
                .unwrap(),
        );
        let run_time = t.elapsed();
        assert_eq!(
            r.code,
            Some(0),
            "{}: uninterrupted rollback: {r:?}",
            s.node.name
        );
        s.check_original("uninterrupted rollback");
        let points = fault_points(&r.stderr);
        eprintln!(
            "{}: rollback ({}): {} fault points, uninterrupted run {:.2}s",
            s.node.name,
            if marker.is_some() {
                "of a killed patch"
            } else {
                "of a finished patch"
            },
            points.len(),
            run_time.as_secs_f64()
        );
        Chain {
            s,
            bk,
            start,
            start_snap,
            marker,
            points,
            run_time,
        }
    }

    /// Back to the store (and marker) the rollback starts from.
    fn to_start(&self) {
        self.s.reset();
        self.s.node.restore(&self.start, &self.start_snap);
        let m = storepatch::inflight::marker_file(&self.s.node.store_root()).unwrap();
        match &self.marker {
            Some(bytes) => {
                std::fs::create_dir_all(m.parent().unwrap()).unwrap();
                std::fs::write(&m, bytes).unwrap();
            }
            None => {
                let _ = std::fs::remove_file(&m);
            }
        }
    }

    /// Kill the rollback at its fault point `n`, check, recover by the named command.
    fn at_point(&mut self, n: u64) {
        let at = format!("rollback point {n} ({})", self.points[n as usize - 1]);
        self.to_start();
        let r = Run::from(
            self.s
                .rollback_cmd(&self.bk)
                .env("KUBELET_REHASH_CRASH_AT", n.to_string())
                .output()
                .unwrap(),
        );
        assert_eq!(
            r.signal,
            Some(SIGKILL),
            "{} {at}: not killed: {r:?}",
            self.s.node.name
        );
        self.s.count("rollback kills at fault points");
        let state = self.s.examine(&at);
        let bk = self.bk.clone();
        self.s.recover(&bk, state, &at);
    }

    /// As [`Sweep::calibrate`], for the rollback.
    fn calibrate(&mut self, n: u32) {
        for _ in 0..n {
            self.to_start();
            let t = Instant::now();
            let r = Run::from(self.s.rollback_cmd(&self.bk).output().unwrap());
            self.run_time = self.run_time.min(t.elapsed());
            assert_eq!(
                r.code,
                Some(0),
                "{}: calibration rollback: {r:?}",
                self.s.node.name
            );
        }
    }

    /// Kill the rollback after a random delay in [0, 1.1 × its uninterrupted run time].
    fn at_random_time(&mut self, rng: &mut Rng) {
        let max = (self.run_time.as_micros() as u64 * 11 / 10).max(1);
        let delay = Duration::from_micros(rng.below(max));
        let at = format!("rollback timed kill after {:.3}s", delay.as_secs_f64());
        self.to_start();
        let mut child = self
            .s
            .rollback_cmd(&self.bk)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(delay);
        let _ = child.kill();
        let st = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        if st.signal() == Some(SIGKILL) {
            self.s.count("rollback timed kills landed");
        } else {
            assert_eq!(st.code(), Some(0), "{} {at}: {st:?}", self.s.node.name);
            self.s.count("rollback timed kills too late (run finished)");
        }
        let state = self.s.examine(&at);
        let bk = self.bk.clone();
        self.s.recover(&bk, state, &at);
    }
}

impl Sweep {
    /// The run time random kills are drawn against: the fastest of `n` more uninterrupted
    /// runs (the first one, logging its fault points on cold caches, is slower than the runs
    /// the kills hit, so most kills would come after the end).
    fn calibrate(&mut self, n: u32) {
        for _ in 0..n {
            let bk = self.node.dir.join("bk-calibrate");
            let t = Instant::now();
            let r = self.node.patch(&self.to, &bk);
            self.run_time = self.run_time.min(t.elapsed());
            assert!(r.ok(), "{}: calibration patch: {r:?}", self.node.name);
            self.reset();
        }
    }

    fn rollback_cmd(&self, bk: &Path) -> std::process::Command {
        let mut c = std::process::Command::new(bin());
        c.arg("rollback")
            .arg("--backup-dir")
            .arg(bk)
            .args(self.node.store_flags())
            .env_remove("KUBELET_REHASH_CRASH_AT")
            .env_remove("KUBELET_REHASH_CRASH_LOG");
        c
    }
}

/// Kills `rollback` at `limit` of its fault points (spread evenly), then runs the command the
/// next patch names, which must finish the undo.
fn rollback_chain(node: Node, patch_killed_at: Option<ChoosePoint>, limit: u64) {
    let mut c = Chain::new(node, patch_killed_at);
    let t = Instant::now();
    let chosen = spread(c.points.len() as u64, limit);
    for &n in &chosen {
        c.at_point(n);
    }
    c.s.report("rollback chain");
    assert_eq!(
        c.s.counts["rollback kills at fault points"],
        chosen.len() as u64
    );
    assert!(
        c.s.counts
            .contains_key("named rollback restored every byte"),
        "{}: some kill left a rollback in flight, finished by the named command",
        c.s.node.name
    );
    assert_eq!(
        c.s.counts.get("bytes lost").copied().unwrap_or(0),
        0,
        "{}: no byte lost",
        c.s.node.name
    );
    eprintln!(
        "{}: rollback chain, {} kills in {:.1}s",
        c.s.node.name,
        chosen.len(),
        t.elapsed().as_secs_f64()
    );
}

/// The patch's last point before the manifest records meta.db's new bytes (just after the bolt
/// commit is durable), or the middle of a one-file-per-container run: a store the rollback
/// must undo without `--accept-unrecorded`.
fn mid_patch(points: &[String]) -> u64 {
    match points.iter().position(|p| p == "bolt-fdatasync-meta") {
        Some(i) => i as u64 + 2,
        None => points.len() as u64 * 2 / 3,
    }
}

#[test]
fn rollback_chain_docker_20_10() {
    rollback_chain(small("docker-20.10"), None, 40);
    rollback_chain(small("docker-20.10"), Some(mid_patch), 20);
}

#[test]
fn rollback_chain_containerd_1_7() {
    rollback_chain(small("containerd-1.7"), None, 40);
    rollback_chain(small("containerd-1.7"), Some(mid_patch), 40);
}

#[test]
fn rollback_chain_crio_1_30() {
    rollback_chain(small("crio-1.30"), None, 20);
    rollback_chain(small("crio-1.30"), Some(mid_patch), 10);
}

/// Two patches to different targets started at once on one store, `rounds` times: the loser
/// refuses with exit 3 naming the winner's pid (or, started after the winner finished, patches
/// the winner's result), and the store is all at one target, byte for byte what a lone patch
/// to it gives (meta.db: the same database), with no temp file and no marker.
fn race(name: &str, rounds: u32) {
    let node = small(name);
    let targets: Vec<String> = node.expected()["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect();
    let pristine = node.capture();
    let old = node.snapshot();
    let reference = |to: &str| {
        let bk = node.dir.join("bk-ref");
        assert!(node.patch(to, &bk).ok());
        let r = (
            node.snapshot(),
            node.stored_hashes(to),
            (node.kind == Kind::Containerd).then(|| bolt_kv(&node.meta_db()).unwrap()),
        );
        node.restore(&pristine, &old);
        std::fs::remove_dir_all(&bk).ok();
        r
    };
    // the newest target, and the oldest whose hashes differ from it (on containerd-1.6 that
    // is one the store already holds: its run rewrites nothing, or back to it after the other)
    let b = targets.last().unwrap().clone();
    let ref_b = reference(&b);
    let (a, ref_a) = targets
        .iter()
        .map(|t| (t.clone(), reference(t)))
        .find(|(_, r)| r.1 != ref_b.1)
        .unwrap_or_else(|| panic!("{name}: two targets that give different hashes"));
    let refs = [ref_a, ref_b];
    let mut refused = 0;
    for round in 0..rounds {
        let at = format!("{name} round {round}");
        let spawn = |to: &str, bk: &str| {
            node.patch_cmd(to, &node.dir.join(bk))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        };
        // alternate who starts first
        let (first, second) = if round % 2 == 0 { (&a, &b) } else { (&b, &a) };
        let p1 = spawn(first, "bk-1");
        let p2 = spawn(second, "bk-2");
        let (id1, id2) = (p1.id(), p2.id());
        let r1 = Run::from(p1.wait_with_output().unwrap());
        let r2 = Run::from(p2.wait_with_output().unwrap());
        for (r, other) in [(&r1, id2), (&r2, id1)] {
            if r.code == Some(3) {
                assert!(
                    r.stderr.contains(&format!("pid {other}")),
                    "{at}: the loser names the holder's pid {other}: {r:?}"
                );
                refused += 1;
            } else {
                assert!(r.ok(), "{at}: a run either wins or refuses: {r:?}");
            }
        }
        assert!(r1.ok() || r2.ok(), "{at}: one of them wins: {r1:?} {r2:?}");
        let snap = node.snapshot();
        assert!(
            snap.temps.is_empty(),
            "{at}: no temp file: {:?}",
            snap.temps
        );
        let hashes = node.stored_hashes(&a);
        let which = refs
            .iter()
            .position(|r| r.1 == hashes)
            .unwrap_or_else(|| panic!("{at}: every record at one target (all-old or all-new)"));
        let (ref_snap, _, ref_kv) = &refs[which];
        let mut diff = snap.diff(ref_snap);
        if node.kind == Kind::Containerd {
            diff.retain(|p| !p.ends_with(storepatch::containerd::META_DB));
            assert_eq!(
                bolt_kv(&node.meta_db()).ok().as_ref(),
                ref_kv.as_ref(),
                "{at}: meta.db reads as a lone patch's"
            );
        }
        assert!(
            diff.is_empty(),
            "{at}: byte for byte a lone patch's result: {diff:?}"
        );
        assert!(
            !storepatch::inflight::marker_file(&node.store_root())
                .unwrap()
                .exists(),
            "{at}: no marker left"
        );
        node.restore(&pristine, &old);
        for bk in ["bk-1", "bk-2"] {
            std::fs::remove_dir_all(node.dir.join(bk)).ok();
        }
    }
    eprintln!("{name}: {rounds} races, {refused} refused with the holder's pid");
    assert!(refused > 0, "{name}: the runs overlapped at least once");
}

#[test]
fn concurrent_patches_docker_20_10() {
    race("docker-20.10", 6);
}

#[test]
fn concurrent_patches_containerd_1_6() {
    // (containerd-1.7's targets 1.31–1.36 all give the same hashes; 1.6's span 1.26–1.36)
    race("containerd-1.6", 6);
}

/// Random kills of `patch` and of `rollback` (of a finished patch) on a Docker, a containerd
/// and a CRI-O node, each followed by the command the next patch names: `RELIABILITY_TIMED_KILLS`
/// per node and command (the long sweep), 3 by default (CI). Prints the figures.
#[test]
fn timed_kills_patch_and_rollback() {
    let per: u32 = std::env::var("RELIABILITY_TIMED_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let seed = seed();
    eprintln!("timed kills with RELIABILITY_SEED={seed}, {per} per node and command");
    let mut rng = Rng(seed);
    let t = Instant::now();
    let mut totals: BTreeMap<String, u64> = BTreeMap::new();
    for name in ["docker-20.10", "containerd-1.7", "crio-1.30"] {
        let mut s = Sweep::new(small(name), None);
        s.calibrate(3);
        for _ in 0..per {
            s.at_random_time(&mut rng);
        }
        s.report("timed patch kills");
        let mut c = Chain::new(small(name), None);
        c.calibrate(3);
        eprintln!(
            "{name}: kills drawn over [0, 1.1 x] patch {:.3}s, rollback {:.3}s",
            s.run_time.as_secs_f64(),
            c.run_time.as_secs_f64()
        );
        for _ in 0..per {
            c.at_random_time(&mut rng);
        }
        c.s.report("timed rollback kills");
        for (k, v) in s.counts.iter().chain(&c.s.counts) {
            *totals.entry(k.clone()).or_insert(0) += v;
        }
    }
    let landed = totals.get("timed kills landed").copied().unwrap_or(0)
        + totals
            .get("rollback timed kills landed")
            .copied()
            .unwrap_or(0);
    // every recovery asserted a consistent store (all-old byte-exact or all-new); reaching
    // here means none was inconsistent
    eprintln!(
        "timed kill sweep: {landed} kills landed of {} runs, bytes lost {}, inconsistent stores 0, {:.1}s; {totals:#?}",
        per as u64 * 6,
        totals.get("bytes lost").copied().unwrap_or(0),
        t.elapsed().as_secs_f64()
    );
    assert_eq!(
        totals.get("bytes lost").copied().unwrap_or(0),
        0,
        "no byte lost"
    );
    assert!(landed > 0, "some kills landed before the run finished");
}

/// A patch killed half-way on a store that an earlier, finished patch had changed: the
/// rollback of that earlier backup refuses (it would restore under a half-written store),
/// naming the killed run's rollback; that command, then the earlier rollback, give back
/// every original byte.
#[test]
fn rollback_of_an_older_backup_names_the_interrupted_run_first() {
    let node = small("docker-20.10");
    let pristine = node.snapshot();
    let targets = node.expected()["targets"].clone();
    let (first, last) = (targets[0].as_str().unwrap().to_string(), node.last_target());
    let older = node.dir.join("bk-older");
    assert!(node.patch(&first, &older).ok(), "the earlier patch");
    let at_first = node.snapshot();
    let log = Run::from(
        node.patch_cmd(&last, &node.dir.join("bk-count"))
            .env("KUBELET_REHASH_CRASH_LOG", "1")
            .output()
            .unwrap(),
    );
    let points = fault_points(&log.stderr);
    // back to the earlier patch's result, then kill the second patch among its renames
    let undo = node.rollback(&node.dir.join("bk-count"), false);
    assert_eq!(undo.code, Some(0), "{undo:?}");
    assert_eq!(node.snapshot(), at_first);
    let killed = node.dir.join("bk-killed");
    // the middle rename of the run (its store files' renames outnumber all others)
    let renames: Vec<usize> = (0..points.len())
        .filter(|&i| points[i] == "rename")
        .collect();
    let n = renames[renames.len() / 2] as u64 + 1;
    let r = Run::from(
        node.patch_cmd(&last, &killed)
            .env("KUBELET_REHASH_CRASH_AT", n.to_string())
            .output()
            .unwrap(),
    );
    assert_eq!(r.signal, Some(SIGKILL), "{r:?}");
    let r = node.rollback(&older, false);
    assert_eq!(r.code, Some(3), "the older rollback refuses: {r:?}");
    let cmd = named_command(&r.stderr).expect("names one command");
    assert_eq!(
        std::fs::canonicalize(&cmd[2]).unwrap(),
        std::fs::canonicalize(&killed).unwrap(),
        "the killed run's rollback: {r:?}"
    );
    assert_eq!(node.run_named(&cmd).code, Some(0));
    assert_eq!(
        node.snapshot(),
        at_first,
        "the killed run undone: the earlier patch's bytes"
    );
    assert_eq!(node.rollback(&older, false).code, Some(0));
    assert_eq!(node.snapshot(), pristine, "every original byte back");
}
