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
    /// Fills `buf` with the file's bytes from `offset` (not a step: it changes nothing). The
    /// commit reads what it will overwrite this way rather than through a mapping of the
    /// file, whose pages would then stay resident in the process.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Makes `len` bytes from `offset` allocated on disk (`posix_fallocate`); `len` may be 0.
    fn allocate(&mut self, step: Step, offset: u64, len: u64) -> io::Result<()>;
    /// Writes all of `data` at `offset`.
    fn write(&mut self, step: Step, offset: u64, data: &[u8]) -> io::Result<()>;
    /// Writes `parts`, one after the other, from `offset`: one step, as [`Storage::write`] of
    /// their concatenation (which is what this default does; a file can take them as they are
    /// with one `pwritev`, without the copy).
    fn write_parts(&mut self, step: Step, offset: u64, parts: &[&[u8]]) -> io::Result<()> {
        self.write(step, offset, &parts.concat())
    }
    /// Makes the written data, and the length needed to read it back, durable (`fdatasync`).
    fn sync_data(&mut self, step: Step) -> io::Result<()>;
    /// Truncates or extends the file to `len` bytes.
    fn set_len(&mut self, step: Step, len: u64) -> io::Result<()>;
}

/// At most this many parts per `pwritev` (Linux's `IOV_MAX`).
const IOV_MAX: usize = 1024;

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

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
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

    fn write_parts(&mut self, _step: Step, offset: u64, parts: &[&[u8]]) -> io::Result<()> {
        // `pwritev` until every byte is written: a short write resumes inside the part it
        // stopped in.
        let mut parts: Vec<&[u8]> = parts.iter().copied().filter(|p| !p.is_empty()).collect();
        let mut at = offset;
        let mut first = 0;
        while first < parts.len() {
            let iov: Vec<libc::iovec> = parts[first..]
                .iter()
                .take(IOV_MAX)
                .map(|p| libc::iovec {
                    iov_base: p.as_ptr() as *mut libc::c_void,
                    iov_len: p.len(),
                })
                .collect();
            // SAFETY: every iovec points into a live slice of `parts` of its length; the fd is
            // valid for the borrow of `self.file`.
            let n = unsafe {
                libc::pwritev(
                    self.file.as_raw_fd(),
                    iov.as_ptr(),
                    iov.len() as libc::c_int,
                    at as libc::off_t,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "pwritev wrote nothing",
                ));
            }
            let mut n = n as usize;
            at += n as u64;
            while n > 0 {
                let len = parts[first].len();
                if n >= len {
                    n -= len;
                    first += 1;
                } else {
                    parts[first] = &parts[first][n..];
                    n = 0;
                }
            }
        }
        Ok(())
    }

    fn sync_data(&mut self, _step: Step) -> io::Result<()> {
        self.file.sync_data()
    }

    fn set_len(&mut self, _step: Step, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `write_parts` on a file writes exactly the parts' concatenation at the offset, past
    /// `IOV_MAX` parts and with empty parts among them, and leaves the bytes around it alone.
    #[test]
    fn file_write_parts_writes_the_concatenation_at_the_offset() {
        let file = tempfile::tempfile().unwrap();
        file.write_all_at(&[0xAA; 64], 0).unwrap();
        let bufs: Vec<Vec<u8>> = (0..2500u32)
            .map(|i| vec![(i % 251) as u8; (i % 7) as usize])
            .collect();
        let parts: Vec<&[u8]> = bufs.iter().map(Vec::as_slice).collect();
        let mut storage = FileStorage::new(&file);
        storage.write_parts(Step::WritePages, 10, &parts).unwrap();
        let want = parts.concat();
        let mut got = vec![0u8; 10 + want.len()];
        file.read_exact_at(&mut got, 0).unwrap();
        assert_eq!(
            &got[..10],
            &[0xAA; 10],
            "the bytes before the offset are untouched"
        );
        assert!(
            got[10..] == want[..],
            "the parts, in order, from the offset"
        );
        let mut tail = [0u8; 1];
        let len = file.metadata().unwrap().len();
        assert_eq!(
            len,
            (10 + want.len()).max(64) as u64,
            "nothing written past them"
        );
        if len > (10 + want.len()) as u64 {
            file.read_exact_at(&mut tail, 10 + want.len() as u64)
                .unwrap();
            assert_eq!(tail, [0xAA], "the bytes after them are untouched");
        }
    }
}
