//! The `kubelet-rehash` workflow, as a library so tests can drive it without a shell: the
//! binary (`main.rs`) only parses flags and maps results to exit codes.

pub mod hash_cmd;
pub mod live;
pub mod plan;
pub mod pods;
pub mod progress;
pub mod workflow;

/// Exit codes, fixed from 0.1 on (documented in `--help` and the README).
pub mod exit {
    /// Done / verified.
    pub const OK: u8 = 0;
    /// Unexpected failure.
    pub const FAILURE: u8 = 1;
    /// Usage: bad flags, unknown or backwards versions, unreadable pods file.
    pub const USAGE: u8 = 2;
    /// Refused: runtime running, pre-check failed, store changed since the backup.
    pub const REFUSED: u8 = 3;
    /// Finished, but some containers are unproven and will restart (plan/patch), or
    /// verification failed (verify).
    pub const INCOMPLETE: u8 = 4;
}
