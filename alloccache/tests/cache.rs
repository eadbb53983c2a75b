//! The cache's rules, called directly (this test binary keeps the default global allocator,
//! so nothing else uses the lists of the threads these tests start).

use alloccache::{
    class_of, class_size, ThreadCache, GRANULE, LARGEST_CACHED, LARGE_DEPTH, SMALL_DEPTH,
};
use std::alloc::{GlobalAlloc, Layout};

fn layout(size: usize) -> Layout {
    Layout::from_size_align(size, 1).unwrap()
}

/// Runs `f` on a thread of its own: its lists start empty.
fn on_fresh_thread(f: impl FnOnce() + Send) {
    std::thread::scope(|s| s.spawn(f).join().unwrap());
}

#[test]
fn every_cached_size_has_a_class_that_holds_it_without_much_waste() {
    let mut previous = 0;
    for size in 1..=LARGEST_CACHED {
        let class = class_of(layout(size)).unwrap_or_else(|| panic!("size {size} has no class"));
        assert!(class >= previous, "classes grow with size ({size})");
        previous = class;
        let held = class_size(class);
        assert!(held >= size, "the class of {size} holds it (holds {held})");
        assert!(
            held < size + GRANULE || held < 2 * size,
            "the class of {size} wastes less than a granule or half ({held})"
        );
        assert_eq!(held % GRANULE, 0, "class blocks keep the 16-byte alignment");
    }
    assert_eq!(
        class_of(layout(LARGEST_CACHED + 1)),
        None,
        "larger blocks are the system's"
    );
    assert_eq!(
        class_of(layout(0)),
        None,
        "zero-sized layouts are not cached"
    );
    for align in [32, 64, 4096] {
        assert_eq!(
            class_of(Layout::from_size_align(64, align).unwrap()),
            None,
            "alignment {align} is more than a class block has"
        );
    }
}

#[test]
fn a_freed_block_is_handed_back_to_its_thread_for_any_size_of_its_class() {
    on_fresh_thread(|| unsafe {
        let a = ThreadCache.alloc(layout(100));
        ThreadCache.dealloc(a, layout(100));
        let b = ThreadCache.alloc(layout(97));
        assert_eq!(a, b, "the block of class 97..=112 is reused");
        ThreadCache.dealloc(b, layout(97));
        let c = ThreadCache.alloc(Layout::from_size_align(112, 16).unwrap());
        assert_eq!(a, c, "an alignment up to 16 is met by a class block");
        ThreadCache.dealloc(c, Layout::from_size_align(112, 16).unwrap());
        let other = ThreadCache.alloc(layout(113));
        assert_ne!(a, other, "a larger class does not take it");
        ThreadCache.dealloc(other, layout(113));
    });
}

#[test]
fn a_thread_keeps_at_most_its_depth_of_each_class() {
    for (size, depth) in [(48, SMALL_DEPTH), (3000, LARGE_DEPTH)] {
        on_fresh_thread(move || unsafe {
            let n = depth as usize + 8;
            let blocks: Vec<*mut u8> = (0..n).map(|_| ThreadCache.alloc(layout(size))).collect();
            for &b in &blocks {
                ThreadCache.dealloc(b, layout(size));
            }
            // The first `depth` frees were kept (the rest went to the system), and come back
            // last-in first-out: had a later free been kept, it would come back first.
            for i in (0..depth as usize).rev() {
                let again = ThreadCache.alloc(layout(size));
                assert_eq!(
                    again, blocks[i],
                    "size {size}: cached block {i} comes back in LIFO order"
                );
            }
            for &b in &blocks[..depth as usize] {
                ThreadCache.dealloc(b, layout(size));
            }
        });
    }
}

#[test]
fn realloc_keeps_the_bytes_across_every_kind_of_move() {
    let sizes = [
        1, 15, 16, 17, 512, 513, 1024, 1025, 4096, 65_536, 65_537, 200_000,
    ];
    on_fresh_thread(move || unsafe {
        for &from in &sizes {
            for &to in &sizes {
                let a = ThreadCache.alloc(layout(from));
                for i in 0..from {
                    *a.add(i) = (i % 251) as u8;
                }
                let b = ThreadCache.realloc(a, layout(from), to);
                assert!(!b.is_null());
                for i in 0..from.min(to) {
                    assert_eq!(
                        *b.add(i),
                        (i % 251) as u8,
                        "byte {i} kept from {from} to {to}"
                    );
                }
                // The whole new size is usable.
                std::ptr::write_bytes(b, 0xAB, to);
                ThreadCache.dealloc(b, layout(to));
            }
        }
    });
}

#[test]
fn a_zeroed_block_is_zero_even_when_it_is_a_reused_one() {
    on_fresh_thread(|| unsafe {
        let a = ThreadCache.alloc(layout(200));
        std::ptr::write_bytes(a, 0xFF, 200);
        ThreadCache.dealloc(a, layout(200));
        let b = ThreadCache.alloc_zeroed(layout(200));
        assert_eq!(a, b, "the dirty block is the one reused");
        assert!((0..200).all(|i| *b.add(i) == 0), "and it is zeroed");
        ThreadCache.dealloc(b, layout(200));
    });
}

#[test]
fn blocks_freed_on_another_thread_serve_that_thread() {
    let blocks: Vec<usize> = std::thread::spawn(|| unsafe {
        (0..10)
            .map(|_| ThreadCache.alloc(layout(64)) as usize)
            .collect()
    })
    .join()
    .unwrap();
    on_fresh_thread(move || unsafe {
        for &b in &blocks {
            ThreadCache.dealloc(b as *mut u8, layout(64));
        }
        for &b in blocks.iter().rev() {
            assert_eq!(
                ThreadCache.alloc(layout(64)) as usize,
                b,
                "reused by the freeing thread"
            );
        }
        for &b in &blocks {
            ThreadCache.dealloc(b as *mut u8, layout(64));
        }
    });
}

#[test]
fn over_aligned_and_huge_blocks_are_the_systems_and_aligned() {
    on_fresh_thread(|| unsafe {
        for (size, align) in [
            (64, 64),
            (100, 4096),
            (1 << 20, 16),
            (LARGEST_CACHED + 1, 8),
        ] {
            let l = Layout::from_size_align(size, align).unwrap();
            let p = ThreadCache.alloc(l);
            assert!(!p.is_null());
            assert_eq!(p as usize % align, 0, "size {size} aligned to {align}");
            std::ptr::write_bytes(p, 1, size);
            ThreadCache.dealloc(p, l);
        }
    });
}
