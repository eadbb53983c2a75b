//! The I/O layer of a commit. Every durable step [`crate::write::commit_with`] takes (reserve
//! space, write a run of pages, fdatasync, write the meta page, fdatasync, and the writes that
//! undo a failed commit) is one call of a [`Storage`], labelled with its [`Step`]. The default,
//! [`FileStorage`], is the plain file.
//!
//! Why a layer: the writer's crash safety is a claim about what the file holds when any one of
//! these steps fails or never happens, and the only way to test that claim at every step is to
//! stand between the writer and the file. A storage that fails step N with an error proves that
//! a failed commit puts every byte back; a storage that kills the process before step N (what
//! storepatch's `crash-points` feature passes in its tests) proves that a crash leaves the old
//! or the new database. Neither needs a hook inside this crate, and a production build, which
//! passes [`FileStorage`], contains neither. (redb's `StorageBackend` is the model.)

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

/// One durable step of a commit, in the order a commit takes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// Reserving the pages past the old high-water mark, so that a full disk fails before any
    /// byte of the file changed. Taken once per commit, also when nothing is appended (then
    /// with length 0).
    Reserve,
    /// Writing one contiguous run of new data pages.
    WritePages,
    /// `fdatasync` of the data pages.
    SyncPages,
    /// Writing the new meta page over the older one.
    WriteMeta,
    /// `fdatasync` of the meta page: once it returns, the transaction is committed.
    SyncMeta,
    /// Putting back the bytes and length of a commit that failed before [`Step::SyncMeta`].
    Undo,
}

impl Step {
    /// A stable name, for logs and crash-point counting (`bolt-write-pages`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Step::Reserve => "bolt-reserve",
            Step::WritePages => "bolt-write-pages",
            Step::SyncPages => "bolt-fdatasync-pages",
            Step::WriteMeta => "bolt-write-meta",
            Step::SyncMeta => "bolt-fdatasync-meta",
            Step::Undo => "bolt-undo",
        }
    }
}

/// What a commit does to the file, one durable step per call. Implementations that wrap
/// another storage must pass every call through (or fail it); `step` tells which step of the
/// commit a call is.
pub trait Storage {
    /// The file's current length in bytes.
    fn file_len(&self) -> io::Result<u64>;
    /// Makes `len` bytes from `offset` allocated on disk (`posix_fallocate`); `len` may be 0.
    fn allocate(&mut self, step: Step, offset: u64, len: u64) -> io::Result<()>;
    /// Writes all of `data` at `offset`.
    fn write(&mut self, step: Step, offset: u64, data: &[u8]) -> io::Result<()>;
    /// Makes the written data, and the length needed to read it back, durable (`fdatasync`).
    fn sync_data(&mut self, step: Step) -> io::Result<()>;
    /// Truncates or extends the file to `len` bytes.
    fn set_len(&mut self, step: Step, len: u64) -> io::Result<()>;
}

/// The plain file (opened read-write; the caller holds whatever lock keeps others out).
#[derive(Debug, Clone, Copy)]
pub struct FileStorage<'f> {
    file: &'f File,
}

impl<'f> FileStorage<'f> {
    /// Writes go straight to `file`.
    pub fn new(file: &'f File) -> Self {
        FileStorage { file }
    }
}

impl Storage for FileStorage<'_> {
    fn file_len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn allocate(&mut self, _step: Step, offset: u64, len: u64) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        // SAFETY: plain syscall on a valid fd.
        let rc = unsafe {
            libc::posix_fallocate(
                self.file.as_raw_fd(),
                offset as libc::off_t,
                len as libc::off_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        Ok(())
    }

    fn write(&mut self, _step: Step, offset: u64, data: &[u8]) -> io::Result<()> {
        self.file.write_all_at(data, offset)
    }

    fn sync_data(&mut self, _step: Step) -> io::Result<()> {
        self.file.sync_data()
    }

    fn set_len(&mut self, _step: Step, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }
}
