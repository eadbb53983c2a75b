//! Giving freed heap memory back to the system between the phases of a patch.
//!
//! glibc's allocator keeps what a process frees in its arenas for reuse and returns it to the
//! kernel only from the top of a heap, so the thousands of small buffers a large patch frees
//! (the planned bolt pages, the records' copies) would keep counting in its resident set while
//! the next phase maps the file again; peak RSS is what an operator's node budget sees.
//! musl's allocator unmaps emptied groups itself, and other targets have nothing to do here.

/// Returns the heap's free memory to the kernel where the allocator keeps it (glibc).
pub fn return_freed() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory of the allocator's own arenas.
    unsafe {
        libc::malloc_trim(0);
    }
}
