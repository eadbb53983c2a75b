//! Crash injection for the crash sweeps, compiled only with the cargo feature `crash-points`.
//!
//! Every durable step (write, fsync, rename, syncfs, and each step of a bolt commit) calls
//! [`point`]. With the feature on, when the environment variable `KUBELET_REHASH_CRASH_AT=N`
//! is set, the N-th such step (1-based, counted over the whole process) kills the process with
//! SIGKILL *before* doing the step, exactly like a power cut or the OOM killer would;
//! `KUBELET_REHASH_CRASH_LOG=1` prints every point to stderr, so a sweep first counts the
//! points of a run and then kills at each of them.
//!
//! # Tests kill at every durable step; production builds contain no crash path
//!
//! A tool that SIGKILLs itself when an environment variable says so must not ship: anything
//! that sets the variable (a stray export, a wrapper script) would kill a patch half-way. So:
//!
//! * With the feature off (the default), [`point`] is an empty `#[inline(always)]` function:
//!   no counter, no environment lookup, no `kill`; the variable's name is not even in the
//!   binary. `scripts/test.sh` proves it: it builds `cargo build --release -p kubelet-rehash`
//!   and fails if `KUBELET_REHASH_CRASH_AT` occurs in the binary.
//! * The tests turn it on through dev-dependencies: storepatch dev-depends on itself and
//!   kubelet-rehash (cli/) on storepatch, both with `features = ["crash-points"]`. Cargo
//!   unifies features per build, and dev-dependencies take part only when tests are built, so
//!   `cargo test` builds storepatch — and the `kubelet-rehash` binary the cli tests spawn —
//!   with the crash points, while `cargo build` does not.
//! * The bolt engine (the `boltfile` crate) has no crash code of its own: its commit does every
//!   durable step through a `boltfile::storage::Storage`. The one storepatch passes
//!   (`bolt_storage`) is the plain file, wrapped, with the feature on, in a storage that calls
//!   [`point`] (named after the step:
//!   `bolt-reserve`, `bolt-write-pages`, `bolt-fdatasync-pages`, `bolt-write-meta`,
//!   `bolt-fdatasync-meta`) before each step, so the sweeps count and kill exactly as before.
//!   Undoing a failed commit is not a point (a sweep never fails a step, it kills).
//!
//! So a binary that `cargo test` (or any build with `--tests`/`--all-targets`) left in
//! `target/release/` has the crash points: ship only what `cargo build --release -p
//! kubelet-rehash` builds.

use std::fs::File;

#[cfg(feature = "crash-points")]
mod points {
    use boltfile::storage::{Step, Storage};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;

    static COUNTER: AtomicU64 = AtomicU64::new(0);

    fn crash_at() -> Option<u64> {
        static AT: OnceLock<Option<u64>> = OnceLock::new();
        *AT.get_or_init(|| {
            std::env::var("KUBELET_REHASH_CRASH_AT")
                .ok()
                .and_then(|v| v.parse().ok())
        })
    }

    fn log_points() -> bool {
        static LOG: OnceLock<bool> = OnceLock::new();
        *LOG.get_or_init(|| std::env::var_os("KUBELET_REHASH_CRASH_LOG").is_some())
    }

    pub fn point(what: &str) {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst) + 1;
        if log_points() {
            eprintln!("kubelet-rehash fault point {n}: {what}");
        }
        if crash_at() == Some(n) {
            // SAFETY: plain syscalls; SIGKILL cannot be caught, so nothing runs after this.
            unsafe {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
            loop {
                std::thread::park();
            }
        }
    }

    pub fn points_passed() -> u64 {
        COUNTER.load(Ordering::SeqCst)
    }

    /// A storage that calls [`point`] before every durable step of the one it wraps.
    pub struct CrashPoints<S>(pub S);

    fn mark(step: Step) {
        if step != Step::Undo {
            point(step.name());
        }
    }

    impl<S: Storage> Storage for CrashPoints<S> {
        fn file_len(&self) -> std::io::Result<u64> {
            self.0.file_len()
        }
        fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
            self.0.read_at(offset, buf)
        }
        fn allocate(&mut self, step: Step, offset: u64, len: u64) -> std::io::Result<()> {
            mark(step);
            self.0.allocate(step, offset, len)
        }
        fn write(&mut self, step: Step, offset: u64, data: &[u8]) -> std::io::Result<()> {
            mark(step);
            self.0.write(step, offset, data)
        }
        fn write_parts(&mut self, step: Step, offset: u64, parts: &[&[u8]]) -> std::io::Result<()> {
            mark(step);
            self.0.write_parts(step, offset, parts)
        }
        fn sync_data(&mut self, step: Step) -> std::io::Result<()> {
            mark(step);
            self.0.sync_data(step)
        }
        fn set_len(&mut self, step: Step, len: u64) -> std::io::Result<()> {
            mark(step);
            self.0.set_len(step, len)
        }
    }
}

/// Marks a durable step named `what`; with `crash-points`, may not return (see the module
/// docs).
#[cfg(feature = "crash-points")]
pub fn point(what: &str) {
    points::point(what)
}

/// Marks a durable step named `what`: nothing at all without the `crash-points` feature.
#[cfg(not(feature = "crash-points"))]
#[inline(always)]
pub fn point(_what: &str) {}

/// How many points this process has passed (only with `crash-points`).
#[cfg(feature = "crash-points")]
pub fn points_passed() -> u64 {
    points::points_passed()
}

/// The storage storepatch's bolt commits write through: the plain file, with a [`point`]
/// before each durable step when `crash-points` is on.
pub fn bolt_storage(file: &File) -> impl boltfile::storage::Storage + '_ {
    let plain = boltfile::storage::FileStorage::new(file);
    #[cfg(feature = "crash-points")]
    let plain = points::CrashPoints(plain);
    plain
}
