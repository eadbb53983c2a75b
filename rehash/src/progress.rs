//! Progress of long work, as events a caller renders (a spinner, log lines, metrics): the
//! library never prints.

/// One step of the workflow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Temp files of an interrupted earlier run were removed.
    SweptStaleTemps(usize),
    /// Every proven container already holds its target: nothing is written.
    NothingToRewrite,
    /// Backing up and rewriting starts.
    RewriteStarted {
        /// How many records will be rewritten.
        rewrites: usize,
    },
    /// The rewrite committed.
    RewriteFinished {
        /// Records whose values changed.
        changed: usize,
        /// Records that already held them.
        already: usize,
    },
    /// Reading the store back starts.
    ReadBackStarted,
    /// Kubelet checkpoint files the target rejects were moved into the backup.
    CheckpointsSetAside(usize),
    /// dockershim's sandbox checkpoints were copied into cri-dockerd's root.
    CriDockerdCheckpointsCopied(usize),
    /// Static pod manifests got their kubelet's UID pinned (`metadata.uid`).
    StaticPodUidsPinned(usize),
}

/// Receives [`Event`]s. Called from the thread that runs the workflow.
pub trait Progress {
    /// One event.
    fn event(&self, event: Event);
}

/// Ignores every event.
#[derive(Debug, Clone, Copy, Default)]
pub struct Silent;

impl Progress for Silent {
    fn event(&self, _: Event) {}
}

impl<F: Fn(Event)> Progress for F {
    fn event(&self, event: Event) {
        self(event)
    }
}
