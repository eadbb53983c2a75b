//! A [`Storage`] that simulates a crash at a chosen step, in the test process, and tells what
//! a disk that obeys nothing but POSIX may hold afterwards (feature `test-support`).
//!
//! [`CrashSim`] performs every step on a real directory tree (`root`), so the writer reads
//! back what it wrote as on a real run, and keeps beside it a model of what is *durable*.
//! `fsync`, `syncfs` and directory fsyncs are not passed to the kernel: the model decides what
//! they made durable (which also keeps a sweep of hundreds of runs fast).
//!
//! # The model (conservative POSIX)
//!
//! * A file's **bytes** are durable once an `fsync` of that file, or a `syncfs`, ran after
//!   they were written. Bytes written since are volatile: after a crash the inode holds its
//!   last durable bytes (a file created since holds nothing: the empty file stands for every
//!   torn state), or, if the disk happened to write them out, its bytes at the crash.
//! * A **name change** (create, rename, unlink) is durable once an `fsync` of its directory
//!   or a `syncfs` ran after it. A volatile name change may or may not survive, each one
//!   independently of the others and of the data (POSIX orders neither): a rename may survive
//!   while the bytes of the file it moved are lost, the ext4 `auto_da_alloc` hazard.
//! * A rename itself is atomic: the target names the old inode or the new one.
//! * `syncfs` makes everything under `root` durable (the sim takes `root` for one file system).
//! * Paths are compared as given: the writer must be given canonical paths under `root`.
//! * Directories are taken as durable as soon as they exist (the writers create none in the
//!   store; a backup directory's own creation is made durable by the backup's `syncfs`), and
//!   modes and owners are not modelled (tests of the writers check them on the real files).
//!
//! The "crash" at step N: the step is not taken, and neither is any step after it (each
//! returns an error, so the writer unwinds as after a failed system call; whatever it does
//! without the storage, such as a buffered write flushed on drop, is volatile and ignored).
//! [`CrashSim::outcomes`] then lists what the disk may hold: the extremes (no volatile change
//! survived; every name change survived but no volatile byte; everything survived) and seeded
//! random mixes, each as path → bytes of every regular file under `root`.

use super::storage::{PosixStorage, Step, Storage};
use super::FileMeta;
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The bytes of a file, shared between the model's snapshots and outcomes.
pub type Bytes = Arc<[u8]>;

/// Regular files under a root: path → (inode, bytes).
type Tree = BTreeMap<PathBuf, (u64, Bytes)>;

/// What tells that a file did not change since it was last read: inode, size, mtime, ctime.
type Stamp = (u64, u64, i64, i64, i64, i64);

/// A volatile name change.
#[derive(Debug, Clone)]
enum NameChange {
    /// `path` now names the inode `ino` (a create, or the target side of a rename).
    Link { path: PathBuf, ino: u64 },
    /// `path` names nothing any more (an unlink, or the source side of a rename).
    Unlink { path: PathBuf },
}

impl NameChange {
    fn dir(&self) -> &Path {
        let p = match self {
            NameChange::Link { path, .. } | NameChange::Unlink { path } => path,
        };
        p.parent().unwrap_or(Path::new("."))
    }
}

/// A volatile rename is one change: both of its sides survive, or neither.
#[derive(Debug, Clone)]
struct Pending {
    changes: Vec<NameChange>,
}

#[derive(Debug, Default)]
struct State {
    /// Steps taken (or refused) so far.
    steps: usize,
    /// The step that crashes, 1-based; `None`: none does.
    crash_at: Option<usize>,
    /// Every step taken, in order.
    log: Vec<(Step, PathBuf)>,
    /// Durable names: path → inode.
    names: BTreeMap<PathBuf, u64>,
    /// Durable bytes of each inode.
    bytes: HashMap<u64, Bytes>,
    /// Name changes not yet durable, in the order they were made.
    pending: Vec<Pending>,
    /// The real tree at the crash: every volatile change as the kernel had it.
    at_crash: Option<Tree>,
    /// A descriptor of every inode the model names: an inode the writer frees (a target
    /// renamed over) is then never reused for a new file while the model may still name it.
    held: Vec<File>,
    /// The bytes last read of each file, by [`Stamp`]: a snapshot reads only what changed.
    read_cache: HashMap<Stamp, Bytes>,
}

/// The crash-simulating storage (see the module docs). Share it as an `Arc` between the
/// [`super::Backend`] the writer gets and the test that reads [`CrashSim::outcomes`].
#[derive(Debug)]
pub struct CrashSim {
    root: PathBuf,
    state: Mutex<State>,
}

/// The error every step at or after the crash returns.
fn crashed() -> io::Error {
    io::Error::other("simulated crash: the process is dead")
}

/// Every regular file under `root` as the kernel has it now. A file whose [`Stamp`] is in
/// `cache` is not read again. (Only the writer changes the tree while a sim runs, and every
/// change it makes to a file's bytes changes its size or its times, or is made to a new
/// inode; the few-ms granularity of the times is why the size is in the stamp too.)
fn snapshot(root: &Path, cache: &mut HashMap<Stamp, Bytes>) -> Tree {
    fn walk(dir: &Path, out: &mut Tree, cache: &mut HashMap<Stamp, Bytes>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            let Ok(m) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if m.is_dir() {
                walk(&p, out, cache);
            } else if m.is_file() {
                let stamp = (
                    m.ino(),
                    m.size(),
                    m.mtime(),
                    m.mtime_nsec(),
                    m.ctime(),
                    m.ctime_nsec(),
                );
                let bytes = match cache.get(&stamp) {
                    Some(b) => b.clone(),
                    None => match std::fs::read(&p) {
                        Ok(b) => {
                            let b: Bytes = b.into();
                            cache.insert(stamp, b.clone());
                            b
                        }
                        Err(_) => continue,
                    },
                };
                out.insert(p, (m.ino(), bytes));
            }
        }
    }
    let mut out = Tree::new();
    walk(root, &mut out, cache);
    out
}

/// What the disk may hold after the crash: path → bytes of every regular file under the root.
pub type Disk = BTreeMap<PathBuf, Bytes>;

/// One outcome of a crash ([`CrashSim::outcomes`]).
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Which volatile changes survived, for messages.
    pub name: String,
    /// The files.
    pub disk: Disk,
}

/// A small deterministic generator (splitmix64) for the random mixes.
struct Mix(u64);

impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

impl CrashSim {
    /// A storage over the tree at `root` (canonicalised), everything in it taken as durable,
    /// that crashes before step `crash_at` (1-based; `None`: never, to count a run's steps).
    pub fn new(root: &Path, crash_at: Option<usize>) -> io::Result<CrashSim> {
        let root = std::fs::canonicalize(root)?;
        let mut state = State {
            crash_at,
            ..State::default()
        };
        let tree = snapshot(&root, &mut state.read_cache);
        for (p, (ino, b)) in tree {
            state.held.push(File::open(&p)?);
            state.names.insert(p, ino);
            state.bytes.insert(ino, b);
        }
        Ok(CrashSim {
            root,
            state: Mutex::new(state),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts a step: `Err` when it is the crash or comes after it (then it must not be
    /// taken). The state stays locked while the caller takes the step, so steps of parallel
    /// threads are taken one at a time, in the order counted.
    fn step(&self, step: Step, path: &Path) -> io::Result<std::sync::MutexGuard<'_, State>> {
        let mut s = self.lock();
        if s.at_crash.is_some() {
            return Err(crashed());
        }
        s.steps += 1;
        if s.crash_at == Some(s.steps) {
            let tree = snapshot(&self.root, &mut s.read_cache);
            s.at_crash = Some(tree);
            return Err(crashed());
        }
        s.log.push((step, path.to_path_buf()));
        Ok(s)
    }

    /// The steps taken, in order (for a clean run: every durable step of the writer).
    pub fn steps(&self) -> Vec<(Step, PathBuf)> {
        self.lock().log.clone()
    }

    /// Whether the crash happened (a run that took fewer steps than `crash_at` did not crash).
    pub fn crashed(&self) -> bool {
        self.lock().at_crash.is_some()
    }

    /// The canonical root the sim models.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// What the disk may hold now (after the crash, or at the end of a run that did not
    /// crash): the three extremes, then `random` seeded mixes of surviving name changes and
    /// bytes (see the module docs).
    pub fn outcomes(&self, random: usize, seed: u64) -> Vec<Outcome> {
        let mut s = self.lock();
        let now = match &s.at_crash {
            Some(t) => t.clone(),
            None => snapshot(&self.root, &mut s.read_cache),
        };
        let current: HashMap<u64, &Bytes> = now.values().map(|(i, b)| (*i, b)).collect();
        let build = |name: String, keep: &dyn Fn(usize) -> bool, data: &dyn Fn(u64) -> bool| {
            let mut names = s.names.clone();
            for (i, p) in s.pending.iter().enumerate() {
                if !keep(i) {
                    continue;
                }
                for c in &p.changes {
                    match c {
                        NameChange::Link { path, ino } => {
                            names.insert(path.clone(), *ino);
                        }
                        NameChange::Unlink { path } => {
                            names.remove(path);
                        }
                    }
                }
            }
            let disk = names
                .into_iter()
                .map(|(p, ino)| {
                    let durable = s.bytes.get(&ino);
                    let b = match current.get(&ino) {
                        Some(c) if data(ino) => (*c).clone(),
                        _ => durable.cloned().unwrap_or_else(|| Bytes::from(&[][..])),
                    };
                    (p, b)
                })
                .collect();
            Outcome { name, disk }
        };
        let mut out = vec![
            build("no volatile change survived".into(), &|_| false, &|_| false),
            build(
                "every name change survived, no volatile byte".into(),
                &|_| true,
                &|_| false,
            ),
            build("everything survived".into(), &|_| true, &|_| true),
        ];
        let mut mix = Mix(seed);
        for r in 0..random {
            let ops: Vec<bool> = (0..s.pending.len()).map(|_| mix.next() & 1 == 1).collect();
            let salt = mix.next();
            out.push(build(
                format!("random mix {r} (seed {seed})"),
                &|i| ops[i],
                &|ino| Mix(salt ^ ino).next() & 1 == 1,
            ));
        }
        out
    }

    /// `path`'s inode on the real tree.
    fn ino(path: &Path) -> io::Result<u64> {
        Ok(std::fs::symlink_metadata(path)?.ino())
    }

    /// Makes the name changes in `dir` durable (an fsync of it).
    fn settle_dir(s: &mut State, dir: &Path) {
        let pending = std::mem::take(&mut s.pending);
        for p in pending {
            if p.changes.iter().all(|c| c.dir() == dir) {
                for c in p.changes {
                    match c {
                        NameChange::Link { path, ino } => {
                            s.names.insert(path, ino);
                        }
                        NameChange::Unlink { path } => {
                            s.names.remove(&path);
                        }
                    }
                }
            } else {
                s.pending.push(p);
            }
        }
    }
}

impl Storage for CrashSim {
    fn create_new(&self, path: &Path) -> io::Result<File> {
        let mut s = self.step(Step::Create, path)?;
        let f = PosixStorage.create_new(path)?;
        let ino = f.metadata()?.ino();
        s.held.push(f.try_clone()?);
        s.pending.push(Pending {
            changes: vec![NameChange::Link {
                path: path.to_path_buf(),
                ino,
            }],
        });
        Ok(f)
    }

    fn write(
        &self,
        file: &mut File,
        path: &Path,
        write: &mut dyn FnMut(&mut dyn Write) -> io::Result<()>,
    ) -> io::Result<()> {
        let _s = self.step(Step::Write, path)?;
        PosixStorage.write(file, path, write)
    }

    fn set_owner_and_mode(&self, file: &File, path: &Path, meta: FileMeta) -> io::Result<()> {
        let _s = self.step(Step::SetOwnerAndMode, path)?;
        PosixStorage.set_owner_and_mode(file, path, meta)
    }

    fn sync_file(&self, file: &File, path: &Path) -> io::Result<()> {
        let mut s = self.step(Step::SyncFile, path)?;
        let ino = file.metadata()?.ino();
        if Self::ino(path)? != ino {
            return Err(io::Error::other(format!(
                "sim: {} no longer names the file being synced",
                path.display()
            )));
        }
        let bytes = std::fs::read(path)?;
        s.bytes.insert(ino, bytes.into());
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut s = self.step(Step::Rename, to)?;
        let ino = Self::ino(from)?;
        PosixStorage.rename(from, to)?;
        s.pending.push(Pending {
            changes: vec![
                NameChange::Unlink {
                    path: from.to_path_buf(),
                },
                NameChange::Link {
                    path: to.to_path_buf(),
                    ino,
                },
            ],
        });
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut s = self.step(Step::Remove, path)?;
        PosixStorage.remove_file(path)?;
        s.pending.push(Pending {
            changes: vec![NameChange::Unlink {
                path: path.to_path_buf(),
            }],
        });
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut s = self.step(Step::SyncDir, dir)?;
        let dir = std::fs::canonicalize(dir)?;
        Self::settle_dir(&mut s, &dir);
        Ok(())
    }

    fn syncfs(&self, _fs: &File, dir: &Path) -> io::Result<()> {
        let mut s = self.step(Step::SyncFs, dir)?;
        s.pending.clear();
        s.names.clear();
        s.bytes.clear();
        let tree = snapshot(&self.root, &mut s.read_cache);
        for (p, (ino, b)) in tree {
            s.names.insert(p, ino);
            s.bytes.insert(ino, b);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::atomic::{self, Backend};

    /// What `f` may hold (`None`: missing), per outcome.
    type Holds = Vec<Option<Bytes>>;

    /// Runs `write` on a fresh directory holding `f` = "old", to its end and then crashing
    /// before each step in turn; returns what `f` may hold after the run and after each crash.
    fn sweep(write: impl Fn(&Path, &Backend)) -> (Holds, Vec<Holds>) {
        let count = |crash_at: Option<usize>| -> (usize, Vec<Option<Bytes>>) {
            let dir = tempfile::tempdir().unwrap();
            let f = dir.path().join("f");
            std::fs::write(&f, b"old").unwrap();
            let sim = Arc::new(CrashSim::new(dir.path(), crash_at).unwrap());
            let f = sim.root().join("f");
            write(&f, &Backend::custom(sim.clone()));
            let outcomes = sim.outcomes(8, 1);
            (
                sim.steps().len(),
                outcomes
                    .into_iter()
                    .map(|o| o.disk.get(&f).cloned())
                    .collect(),
            )
        };
        let (n, clean) = count(None);
        (clean, (1..=n).map(|k| count(Some(k)).1).collect())
    }

    fn old_or_new(b: &Option<Bytes>) -> bool {
        matches!(b.as_deref(), Some(b"old") | Some(b"new"))
    }

    /// The full protocol (temp, fsync, rename, directory fsync) leaves old or new bytes.
    #[test]
    fn replace_file_is_old_or_new_after_a_crash_at_every_step() {
        let (clean, crashes) = sweep(|f, s| {
            let _ = atomic::replace_file_with_on(
                f,
                FileMeta::private(),
                &mut |w| w.write_all(b"new"),
                s,
            );
        });
        assert!(
            clean.iter().all(|b| b.as_deref() == Some(&b"new"[..])),
            "{clean:?}"
        );
        assert_eq!(
            crashes.len(),
            6,
            "create, write, chmod, fsync, rename, fsync dir"
        );
        for (k, outcomes) in crashes.iter().enumerate() {
            assert!(
                outcomes.iter().all(old_or_new),
                "crash at {}: {outcomes:?}",
                k + 1
            );
        }
    }

    /// The model is not vacuous: a rename whose data was never flushed may leave an empty
    /// file under the name after a crash (the ext4 zero-length-file hazard), and a rename
    /// without a directory fsync may be lost: the model shows both.
    #[test]
    fn a_rename_without_a_flush_may_leave_an_empty_file() {
        let (_, crashes) = sweep(|f, s| {
            // staged without fsync and renamed at once: no flush before or after
            let staged = atomic::stage_file_with_nosync_on(
                f,
                FileMeta::private(),
                &mut |w| w.write_all(b"new"),
                s,
            );
            if let Ok(staged) = staged {
                let _ = staged.commit();
            }
            // a later step, so that a crash can come after the rename
            let _ = atomic::sync_dir_on(Path::new("/nonexistent-dir-of-the-sim-test"), s);
        });
        let after_rename = crashes.last().unwrap();
        assert!(
            after_rename.iter().any(|b| b.as_deref() == Some(&b""[..])),
            "the renamed file may be empty: {after_rename:?}"
        );
        assert!(
            after_rename
                .iter()
                .any(|b| b.as_deref() == Some(&b"old"[..])),
            "the rename may be lost: {after_rename:?}"
        );
    }
}
