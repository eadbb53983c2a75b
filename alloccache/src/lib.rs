//! A bounded per-thread cache of freed blocks in front of the C library's allocator
//! ([`std::alloc::System`]), for the `kubelet-rehash` binary.
//!
//! # Why
//! The binaries we ship are static musl executables (they run on every node OS without a
//! loader or a glibc of the right age). musl's malloc (mallocng) serialises every `malloc` and
//! `free` of the process on one lock, and gives the memory of a freed medium block (a bolt
//! page copy, a `config.v2.json` being edited: 1–64 KiB) back to the kernel at once, to map it
//! again for the next one. A patch allocates about a million times, most of it on rayon's
//! threads, so on the 2,000-container containerd node the musl binary made 24,000 `futex`
//! calls (the lock's waits) and 9,000 `mmap`/`munmap` pairs where the glibc build made 64
//! `futex` calls, and took twice the glibc build's time.
//!
//! Most of those calls free a block the same thread asks for again moments later. This cache
//! keeps such blocks per thread, by size class, and hands them back without a lock or a system
//! call; everything else goes to the C library's allocator as before. With it the same patch
//! makes about 1,000 `futex` calls and 1,600 `mmap`s (README, "Cost").
//!
//! # Why not another allocator
//! mimalloc or jemalloc would need a C compiler for every target, arm64's cross compiler
//! included, where the release builds now need none (`scripts/release.sh`); the pure-Rust
//! `dlmalloc` still takes a lock per call (measured: a quarter of its CPU in the lock) and
//! raised peak memory by 40 %. The cache is a few dozen lines that take no lock at all, and
//! the allocator underneath stays the C library's, whose memory use we measured and keep.
//!
//! # The rules that keep it safe
//! * A block is cached only if its layout has a size class: size 1..=64 KiB, alignment at most
//!   16. Such a block is always allocated from the system with its class's layout (size
//!   rounded up to the class, alignment 16), so any block of a class fits any request of that
//!   class, and a block freed on another thread than the one that allocated it is as good as
//!   any (the C allocator does not care which thread frees).
//! * `dealloc` and `realloc` receive the layout the block was allocated with (the
//!   [`GlobalAlloc`] contract), so they find the same class as the allocation did.
//! * A cached block's first 8 bytes hold the next block of its list; a class block is at
//!   least 16 bytes.
//! * Each thread keeps at most [`SMALL_DEPTH`] blocks of each small class and
//!   [`LARGE_DEPTH`] of each large one: at most about 1.5 MiB a thread, and far less in
//!   practice. The lists live in a `thread_local!` of a type without `Drop`, initialised at
//!   compile time, so using them never allocates or registers a destructor (which would
//!   re-enter the allocator). The price: a thread that ends leaves its cached blocks
//!   allocated until the process ends. The binary's threads are rayon's pool, which lives as
//!   long as the process, and a few helpers started once per command.
//! * Nothing is cached across `fork`: a child that runs Rust code inherits its parent's lists
//!   as a copy of its own memory, which is still consistent.
#![deny(missing_docs)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::ptr;

/// Size step of the small classes, and the alignment every class block has.
pub const GRANULE: usize = 16;
/// Small classes: 16, 32, …, 512 bytes.
const SMALL_CLASSES: usize = 32;
/// Largest small block.
const SMALL_MAX: usize = GRANULE * SMALL_CLASSES;
/// log2 of the smallest large class (1 KiB).
const FIRST_LARGE_SHIFT: u32 = 10;
/// Large classes: 1, 2, 4, …, 64 KiB (powers of two: such blocks are buffers, few and
/// short-lived, and a power-of-two class wastes at most half of one).
const LARGE_CLASSES: usize = 7;
/// Every class.
const CLASSES: usize = SMALL_CLASSES + LARGE_CLASSES;
/// The largest block the cache handles; larger ones always go to the system.
pub const LARGEST_CACHED: usize = 1 << (FIRST_LARGE_SHIFT as usize + LARGE_CLASSES - 1);
/// Blocks a thread keeps of each small class.
pub const SMALL_DEPTH: u16 = 64;
/// Blocks a thread keeps of each large class.
pub const LARGE_DEPTH: u16 = 8;

/// One thread's lists: the first cached block of each class (null: none) and their lengths.
struct Lists {
    head: [*mut u8; CLASSES],
    len: [u16; CLASSES],
}

thread_local! {
    static LISTS: UnsafeCell<Lists> = const {
        UnsafeCell::new(Lists { head: [ptr::null_mut(); CLASSES], len: [0; CLASSES] })
    };
}

/// The cache, as a global allocator:
///
/// ```
/// #[global_allocator]
/// static ALLOCATOR: alloccache::ThreadCache = alloccache::ThreadCache;
///
/// fn main() {
///     let v: Vec<u32> = (0..1000).collect();
///     assert_eq!(v.iter().sum::<u32>(), 499_500);
/// }
/// ```
pub struct ThreadCache;

/// The size class of a layout, if the cache handles it.
#[inline]
pub fn class_of(layout: Layout) -> Option<usize> {
    let size = layout.size();
    if layout.align() > GRANULE || size == 0 || size > LARGEST_CACHED {
        return None;
    }
    if size <= SMALL_MAX {
        return Some((size - 1) / GRANULE);
    }
    let shift = size.next_power_of_two().trailing_zeros();
    Some(SMALL_CLASSES + (shift - FIRST_LARGE_SHIFT) as usize)
}

/// The size every block of a class has.
#[inline]
pub fn class_size(class: usize) -> usize {
    if class < SMALL_CLASSES {
        (class + 1) * GRANULE
    } else {
        1 << (FIRST_LARGE_SHIFT as usize + class - SMALL_CLASSES)
    }
}

/// How many blocks of a class a thread keeps.
#[inline]
fn depth(class: usize) -> u16 {
    if class < SMALL_CLASSES {
        SMALL_DEPTH
    } else {
        LARGE_DEPTH
    }
}

/// The layout every block of a class is allocated from the system with.
#[inline]
fn class_layout(class: usize) -> Layout {
    // A multiple of 16 up to 64 KiB with alignment 16: always a valid layout.
    Layout::from_size_align(class_size(class), GRANULE).expect("class layouts are valid")
}

/// Takes a cached block of `class` from this thread's list, or null.
#[inline]
fn pop(class: usize) -> *mut u8 {
    LISTS.with(|lists| {
        // SAFETY: the lists are this thread's alone, and nothing here re-enters the allocator.
        let lists = unsafe { &mut *lists.get() };
        let block = lists.head[class];
        if !block.is_null() {
            // SAFETY: a cached block is a live class block (>= 16 bytes, 16-aligned) whose
            // first word push wrote.
            lists.head[class] = unsafe { block.cast::<*mut u8>().read() };
            lists.len[class] -= 1;
        }
        block
    })
}

/// Keeps `block` of `class` in this thread's list; false if the list is full.
#[inline]
fn push(class: usize, block: *mut u8) -> bool {
    LISTS.with(|lists| {
        // SAFETY: as in pop.
        let lists = unsafe { &mut *lists.get() };
        if lists.len[class] >= depth(class) {
            return false;
        }
        // SAFETY: the caller gives up a class block (>= 16 bytes, 16-aligned).
        unsafe { block.cast::<*mut u8>().write(lists.head[class]) };
        lists.head[class] = block;
        lists.len[class] += 1;
        true
    })
}

// SAFETY: every block handed out is either the system's for the caller's own layout (no
// class) or a class block: allocated from the system with the class's layout, so at least as
// large as any layout of the class and aligned to 16 (>= the class's alignments), and owned by
// exactly one of the caller or one list (a block is pushed only when the caller frees it and
// popped only to be handed out).
unsafe impl GlobalAlloc for ThreadCache {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some(class) = class_of(layout) else {
            // SAFETY: the caller's layout, as given.
            return unsafe { System.alloc(layout) };
        };
        let block = pop(class);
        if block.is_null() {
            // SAFETY: a valid non-zero layout.
            unsafe { System.alloc(class_layout(class)) }
        } else {
            block
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if class_of(layout).is_none() {
            // SAFETY: as in alloc (and the system's zeroed path may skip zeroing fresh pages).
            return unsafe { System.alloc_zeroed(layout) };
        }
        // SAFETY: as in alloc; the block holds at least layout.size() bytes.
        unsafe {
            let block = self.alloc(layout);
            if !block.is_null() {
                ptr::write_bytes(block, 0, layout.size());
            }
            block
        }
    }

    #[inline]
    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        let Some(class) = class_of(layout) else {
            // SAFETY: a system block of this layout (the caller's contract).
            return unsafe { System.dealloc(block, layout) };
        };
        if !push(class, block) {
            // SAFETY: a class block, allocated with the class's layout.
            unsafe { System.dealloc(block, class_layout(class)) }
        }
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees new_size, rounded up to the alignment, fits an isize.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (class_of(layout), class_of(new_layout)) {
            // SAFETY: a system block of `layout`, resized by the system.
            (None, None) => unsafe { System.realloc(block, layout, new_size) },
            // The class block already holds new_size bytes.
            (Some(old), Some(new)) if old == new => block,
            _ => {
                // SAFETY: new_layout is non-zero (realloc's contract) and valid (above); both
                // blocks hold at least the bytes copied and are distinct; the old block is
                // freed with the layout it was allocated with.
                unsafe {
                    let moved = self.alloc(new_layout);
                    if !moved.is_null() {
                        ptr::copy_nonoverlapping(block, moved, layout.size().min(new_size));
                        self.dealloc(block, layout);
                    }
                    moved
                }
            }
        }
    }
}
