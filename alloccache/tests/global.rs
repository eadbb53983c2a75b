//! The cache as this test binary's global allocator, against a simple reference model: many
//! threads allocate, grow, shrink, hand to other threads and free buffers of every size, each
//! filled with a pattern of its own, and every byte is checked before each free. A block
//! handed out twice, or a list corrupted, shows as a wrong byte.

use std::sync::mpsc;
use testtools::Rng;

#[global_allocator]
static ALLOCATOR: alloccache::ThreadCache = alloccache::ThreadCache;

/// A buffer and the seed of its pattern.
struct Owned {
    bytes: Vec<u8>,
    seed: u8,
}

impl Owned {
    fn new(len: usize, seed: u8) -> Owned {
        Owned {
            bytes: (0..len).map(|i| pattern(seed, i)).collect(),
            seed,
        }
    }
    fn check(&self, what: &str) {
        for (i, &b) in self.bytes.iter().enumerate() {
            assert_eq!(
                b,
                pattern(self.seed, i),
                "{what}: byte {i} of {} changed",
                self.bytes.len()
            );
        }
    }
}

fn pattern(seed: u8, i: usize) -> u8 {
    seed.wrapping_add((i % 253) as u8)
}

fn size(rng: &mut Rng) -> usize {
    match rng.below(10) {
        0..=5 => 1 + rng.below(512) as usize,
        6..=8 => 513 + rng.below(65_536) as usize,
        _ => 65_537 + rng.below(200_000) as usize,
    }
}

#[test]
fn buffers_of_every_size_across_threads_keep_their_bytes() {
    const THREADS: usize = 4;
    const STEPS: usize = 20_000;
    let (senders, receivers): (Vec<_>, Vec<_>) =
        (0..THREADS).map(|_| mpsc::channel::<Owned>()).unzip();
    std::thread::scope(|s| {
        for (t, inbox) in receivers.into_iter().enumerate() {
            let outboxes = senders.clone();
            s.spawn(move || {
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (t as u64 + 1));
                let mut live: Vec<Owned> = Vec::new();
                for step in 0..STEPS {
                    while let Ok(received) = inbox.try_recv() {
                        received.check("a buffer from another thread");
                        live.push(received);
                    }
                    match rng.below(6) {
                        0 | 1 => live.push(Owned::new(size(&mut rng), rng.next_u64() as u8)),
                        2 if !live.is_empty() => {
                            let i = rng.below(live.len() as u64) as usize;
                            let o = live.swap_remove(i);
                            o.check("before its free");
                        }
                        3 if !live.is_empty() => {
                            // grow or shrink in place of realloc, then check and refill
                            let i = rng.below(live.len() as u64) as usize;
                            let o = &mut live[i];
                            o.check("before a resize");
                            let new_len = size(&mut rng);
                            let old_len = o.bytes.len();
                            if new_len > old_len {
                                o.bytes
                                    .extend((old_len..new_len).map(|j| pattern(o.seed, j)));
                            } else {
                                o.bytes.truncate(new_len);
                                o.bytes.shrink_to_fit();
                            }
                            o.check("after a resize");
                        }
                        4 if !live.is_empty() => {
                            let i = rng.below(live.len() as u64) as usize;
                            let to = rng.below(THREADS as u64) as usize;
                            let _ = outboxes[to].send(live.swap_remove(i));
                        }
                        _ => {}
                    }
                    if live.len() > 300 || step % 5000 == 4999 {
                        for o in live.drain(..) {
                            o.check("in a sweep");
                        }
                    }
                }
                for o in live {
                    o.check("at the end");
                }
            });
        }
        drop(senders);
    });
}
