//! A minimal progress line on stderr for long rewrites, only when stderr is a terminal.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct Progress {
    done: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    started: Instant,
    active: bool,
}

/// Below this many rewrites the work takes well under a second: no progress line.
const LONG_WORK: usize = 500;

impl Progress {
    pub fn start(total: usize) -> Progress {
        let done = Arc::new(AtomicBool::new(false));
        let active = total >= LONG_WORK && std::io::stderr().is_terminal();
        let started = Instant::now();
        let thread = active.then(|| {
            let done = done.clone();
            std::thread::spawn(move || {
                let frames = ['|', '/', '-', '\\'];
                let mut i = 0;
                while !done.load(Ordering::Relaxed) {
                    eprint!(
                        "\r{} backing up and rewriting {total} containers… {:.1}s",
                        frames[i % 4],
                        started.elapsed().as_secs_f64()
                    );
                    i += 1;
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
        });
        Progress {
            done,
            thread,
            started,
            active,
        }
    }

    pub fn finish(mut self, changed: usize) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if self.active {
            eprintln!(
                "\r✓ rewrote {changed} containers in {:.2}s                    ",
                self.started.elapsed().as_secs_f64()
            );
        }
    }
}
