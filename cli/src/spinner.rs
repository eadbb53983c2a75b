//! How the workflow's progress reaches an operator: one line on stderr per event that matters,
//! and a spinner for long rewrites when stderr is a terminal.

use rehash::{Event, Progress};
use std::cell::RefCell;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Below this many rewrites the work takes well under a second: no spinner.
const LONG_WORK: usize = 500;

struct Running {
    done: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
    started: Instant,
}

/// The CLI's [`Progress`]: notes on stderr, a spinner while a long rewrite runs.
#[derive(Default)]
pub struct Stderr {
    spinner: RefCell<Option<Running>>,
}

impl Stderr {
    /// Stops the spinner, if one runs; returns when it started.
    fn halt(&self) -> Option<Instant> {
        let r = self.spinner.borrow_mut().take()?;
        r.done.store(true, Ordering::Relaxed);
        let _ = r.thread.join();
        Some(r.started)
    }
}

impl Progress for Stderr {
    fn event(&self, event: Event) {
        match event {
            Event::SweptStaleTemps(n) => eprintln!(
                "kubelet-rehash: removed {n} temp file(s) an interrupted earlier run left behind"
            ),
            Event::NothingToRewrite => eprintln!(
                "kubelet-rehash: nothing to rewrite: every proven container already holds its target hash"
            ),
            Event::RewriteStarted { rewrites } => {
                if rewrites >= LONG_WORK && std::io::stderr().is_terminal() {
                    let done = Arc::new(AtomicBool::new(false));
                    let started = Instant::now();
                    let d = done.clone();
                    let thread = std::thread::spawn(move || {
                        let frames = ['|', '/', '-', '\\'];
                        let mut i = 0;
                        while !d.load(Ordering::Relaxed) {
                            eprint!(
                                "\r{} backing up and rewriting {rewrites} containers… {:.1}s",
                                frames[i % 4],
                                started.elapsed().as_secs_f64()
                            );
                            i += 1;
                            std::thread::sleep(Duration::from_millis(100));
                        }
                    });
                    *self.spinner.borrow_mut() = Some(Running {
                        done,
                        thread,
                        started,
                    });
                }
            }
            Event::RewriteFinished { changed, .. } => {
                if let Some(started) = self.halt() {
                    eprintln!(
                        "\r✓ rewrote {changed} containers in {:.2}s                    ",
                        started.elapsed().as_secs_f64()
                    );
                }
            }
            Event::CriDockerdCheckpointsCopied(n) => eprintln!(
                "kubelet-rehash: copied {n} sandbox checkpoint(s) from dockershim into cri-dockerd's root"
            ),
            Event::StaticPodUidsPinned(n) => eprintln!(
                "kubelet-rehash: pinned metadata.uid in {n} static pod manifest(s) (the UID the kubelet uses now; the originals are in the backup)"
            ),
            Event::ReadBackStarted | Event::CheckpointsSetAside(_) => {}
        }
    }
}

impl Drop for Stderr {
    fn drop(&mut self) {
        // A failed apply never sends RewriteFinished: the spinner still stops.
        if self.halt().is_some() {
            eprintln!();
        }
    }
}
