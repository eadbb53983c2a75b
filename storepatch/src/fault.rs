//! Fault injection for crash sweeps.
//!
//! Every durable step (write, fsync, rename, bolt commit) calls [`point`]. When the environment
//! variable `KUBELET_REHASH_CRASH_AT=N` is set, the N-th such step (1-based, counted over the
//! whole process) kills the process with SIGKILL *before* doing the step, exactly like a power
//! cut or the OOM killer would. `KUBELET_REHASH_CRASH_LOG=1` prints every point to stderr, so a
//! sweep can first count the points of a run and then kill at each of them.

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

/// Marks a durable step named `what`; may not return (see the module docs).
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

/// How many points this process has passed.
pub fn points_passed() -> u64 {
    COUNTER.load(Ordering::SeqCst)
}
