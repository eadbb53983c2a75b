//! The I/O layer of the atomic writer. Every durable step [`crate::atomic`] takes to replace a
//! file (create the temp file, write it, give it its owner and mode, fsync it, rename it over
//! the target, fsync the directory, `syncfs` the file system, and the removal of a temp file
//! that is not committed) is one call of a [`Storage`]. The default, [`PosixStorage`], is the
//! plain system calls.
//!
//! Why a layer (the same reason as `boltfile::storage`): the writers' crash safety is a claim
//! about what the disk holds when the machine dies before any one of these steps, and the only
//! way to test that claim at every step, in the test process, is to stand between the writer
//! and the disk. `atomic::sim` (feature `test-support`) is such a storage: it performs the
//! steps on a real directory so the writer reads back what it wrote, keeps a model of what is
//! durable, and "kills" the writer at a chosen step. The subprocess SIGKILL sweeps
//! ([`crate::fault`]) stay: they prove the same on the real kernel.
//!
//! A [`Backend`] names the storage a writer uses. [`Backend::default`] is the plain system
//! calls with no indirection (no allocation, no virtual call: one `None` test per step), so
//! the real path costs what it cost before the layer existed.

use super::FileMeta;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;

/// One durable step of the atomic writer, in the order a replace takes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// Creating a new file (a temp file beside its target, or a backup's pack or copy):
    /// `O_CREAT | O_EXCL | O_NOFOLLOW`, mode 0600.
    Create,
    /// Writing a staged file's bytes.
    Write,
    /// `fchown` then `fchmod` of a staged file to the target's owner and mode.
    SetOwnerAndMode,
    /// `fsync` of one file.
    SyncFile,
    /// `rename` of a staged file over its target.
    Rename,
    /// Removing a temp file that is not committed (an error, or a dropped stage).
    Remove,
    /// `fsync` of a directory, which makes the renames and creates inside it durable.
    SyncDir,
    /// `syncfs` of a whole file system: every byte and name change on it becomes durable.
    SyncFs,
}

/// What the atomic writer does to the disk, one durable step per call. An implementation
/// that wraps another must pass every call through (or fail it). Reads are not steps: the
/// writer reads the store directly.
pub trait Storage: Send + Sync + std::fmt::Debug {
    /// Creates `path`, which must not exist, with mode 0600 and without following a symlink
    /// at its last component, open for writing ([`Step::Create`]).
    fn create_new(&self, path: &Path) -> io::Result<File>;
    /// Writes into `file` (created at `path`) the bytes `write` produces, through a 64 KiB
    /// buffer ([`Step::Write`]).
    fn write(
        &self,
        file: &mut File,
        path: &Path,
        write: &mut dyn FnMut(&mut dyn Write) -> io::Result<()>,
    ) -> io::Result<()>;
    /// Gives `file` the owner and then the mode of `meta` ([`Step::SetOwnerAndMode`]).
    fn set_owner_and_mode(&self, file: &File, path: &Path, meta: FileMeta) -> io::Result<()>;
    /// `fsync` of `file`, created at `path` ([`Step::SyncFile`]).
    fn sync_file(&self, file: &File, path: &Path) -> io::Result<()>;
    /// Renames `from` over `to` ([`Step::Rename`]).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes the file `path` ([`Step::Remove`]).
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// `fsync` of the directory `dir` ([`Step::SyncDir`]).
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// `syncfs` of the file system `fs`, a directory opened at `dir` ([`Step::SyncFs`]).
    fn syncfs(&self, fs: &File, dir: &Path) -> io::Result<()>;
}

/// The plain system calls.
#[derive(Debug, Clone, Copy, Default)]
pub struct PosixStorage;

impl Storage for PosixStorage {
    #[inline]
    fn create_new(&self, path: &Path) -> io::Result<File> {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
    }

    #[inline]
    fn write(
        &self,
        file: &mut File,
        _path: &Path,
        write: &mut dyn FnMut(&mut dyn Write) -> io::Result<()>,
    ) -> io::Result<()> {
        let mut buffered = io::BufWriter::with_capacity(64 * 1024, file);
        write(&mut buffered)?;
        buffered.flush()
    }

    #[inline]
    fn set_owner_and_mode(&self, file: &File, _path: &Path, meta: FileMeta) -> io::Result<()> {
        // Owner first: chown clears set-id bits, chmod then sets the final mode.
        std::os::unix::fs::fchown(file, Some(meta.uid), Some(meta.gid))?;
        file.set_permissions(fs::Permissions::from_mode(meta.mode))
    }

    #[inline]
    fn sync_file(&self, file: &File, _path: &Path) -> io::Result<()> {
        file.sync_all()
    }

    #[inline]
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    #[inline]
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    #[inline]
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir).and_then(|d| d.sync_all())
    }

    #[inline]
    fn syncfs(&self, fs: &File, _dir: &Path) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        // SAFETY: a valid fd for the duration of the call.
        if unsafe { libc::syncfs(fs.as_raw_fd()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// The storage a writer goes through: [`PosixStorage`] by default, called directly, or any
/// other [`Storage`] (a test's). Cheap to clone.
#[derive(Clone, Default)]
pub struct Backend {
    custom: Option<Arc<dyn Storage>>,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.custom {
            None => f.write_str("Backend(posix)"),
            Some(s) => write!(f, "Backend({s:?})"),
        }
    }
}

/// Runs `$call` on the custom storage, else on [`PosixStorage`] (statically).
macro_rules! dispatch {
    ($self:ident . $method:ident ( $($arg:expr),* )) => {
        match &$self.custom {
            None => PosixStorage.$method($($arg),*),
            Some(s) => s.$method($($arg),*),
        }
    };
}

impl Backend {
    /// The plain system calls (the default).
    pub fn posix() -> Self {
        Backend::default()
    }

    /// Every step goes through `storage`.
    pub fn custom(storage: Arc<dyn Storage>) -> Self {
        Backend {
            custom: Some(storage),
        }
    }

    /// Whether this is the plain system calls.
    pub fn is_posix(&self) -> bool {
        self.custom.is_none()
    }

    /// [`Storage::create_new`].
    #[inline]
    pub fn create_new(&self, path: &Path) -> io::Result<File> {
        dispatch!(self.create_new(path))
    }

    /// [`Storage::write`].
    #[inline]
    pub fn write(
        &self,
        file: &mut File,
        path: &Path,
        write: &mut dyn FnMut(&mut dyn Write) -> io::Result<()>,
    ) -> io::Result<()> {
        dispatch!(self.write(file, path, write))
    }

    /// [`Storage::set_owner_and_mode`].
    #[inline]
    pub fn set_owner_and_mode(&self, file: &File, path: &Path, meta: FileMeta) -> io::Result<()> {
        dispatch!(self.set_owner_and_mode(file, path, meta))
    }

    /// [`Storage::sync_file`].
    #[inline]
    pub fn sync_file(&self, file: &File, path: &Path) -> io::Result<()> {
        dispatch!(self.sync_file(file, path))
    }

    /// [`Storage::rename`].
    #[inline]
    pub fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        dispatch!(self.rename(from, to))
    }

    /// [`Storage::remove_file`].
    #[inline]
    pub fn remove_file(&self, path: &Path) -> io::Result<()> {
        dispatch!(self.remove_file(path))
    }

    /// [`Storage::sync_dir`].
    #[inline]
    pub fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        dispatch!(self.sync_dir(dir))
    }

    /// [`Storage::syncfs`].
    #[inline]
    pub fn syncfs(&self, fs: &File, dir: &Path) -> io::Result<()> {
        dispatch!(self.syncfs(fs, dir))
    }
}
