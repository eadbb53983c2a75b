//! Crash-safe file replacement, the way dockerd itself writes `config.v2.json`
//! (`ioutils.AtomicWriteFile`): write a temp file in the same directory, fsync it, rename it
//! over the original, fsync the directory. A crash at any instant leaves either the old bytes
//! or the new bytes under the name, never a mix, and never a missing file.

use crate::error::StoreError;
use crate::fault;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
pub use storage::Backend;

#[cfg(feature = "test-support")]
pub mod sim;
pub mod storage;

/// Mode and owner of a file, kept across a replace and recorded in backups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileMeta {
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
}

impl FileMeta {
    /// Mode 0600, owned by the effective user and group: the tool's own private files.
    pub fn private() -> Self {
        FileMeta {
            mode: 0o600,
            // SAFETY: geteuid/getegid cannot fail.
            uid: unsafe { libc::geteuid() },
            gid: unsafe { libc::getegid() },
        }
    }

    /// Mode and owner of `meta`.
    pub fn of(meta: &fs::Metadata) -> Self {
        FileMeta {
            mode: meta.mode() & 0o7777,
            uid: meta.uid(),
            gid: meta.gid(),
        }
    }
}

/// Reads a regular file without following a symlink at its last component, and returns its
/// bytes and metadata. A symlink, a directory or a device is an error naming the path.
///
/// Opened with `O_NOATIME` where allowed (our own files, or root): reading a store changes
/// nothing of it, not even its access times. Under `relatime` a file's first read after a
/// write updates its atime, a journalled inode write per file: on a node of thousands of
/// containers, the scan of a store dockerd just wrote and the read-back of the files the
/// patch just renamed each paid one per file.
pub fn read_regular_nofollow(path: &Path) -> Result<(Vec<u8>, FileMeta), StoreError> {
    let mut file = open_read_noatime(path, libc::O_NOFOLLOW).map_err(|e| {
        if e.raw_os_error() == Some(libc::ELOOP) {
            StoreError::Corrupt {
                location: path.display().to_string(),
                reason: "is a symbolic link; refusing to follow it".into(),
            }
        } else {
            StoreError::io(path, e)
        }
    })?;
    let meta = file.metadata().map_err(|e| StoreError::io(path, e))?;
    if !meta.file_type().is_file() {
        return Err(StoreError::Corrupt {
            location: path.display().to_string(),
            reason: "is not a regular file".into(),
        });
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.read_to_end(&mut bytes)
        .map_err(|e| StoreError::io(path, e))?;
    Ok((bytes, FileMeta::of(&meta)))
}

/// Opens `path` for reading with `flags` and `O_NOATIME`, or without `O_NOATIME` where the
/// kernel refuses it (`EPERM`: a file neither ours nor open to us as root).
///
/// Always `O_NONBLOCK`: opening a FIFO for reading blocks until a writer comes, so a FIFO put
/// in place of a store file (a `config.v2.json`, a CRI-O `config.json`) hung every reader,
/// forever, before the caller could look at what it had opened. Non-blocking, the open
/// returns at once and the caller's regular-file check refuses it; on a regular file the flag
/// changes nothing.
pub fn open_read_noatime(path: &Path, flags: i32) -> std::io::Result<File> {
    let flags = flags | libc::O_NONBLOCK;
    let open = |flags: i32| OpenOptions::new().read(true).custom_flags(flags).open(path);
    match open(flags | libc::O_NOATIME) {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => open(flags),
        r => r,
    }
}

/// [`std::fs::read`] through [`open_read_noatime`]: a store file read without touching its
/// access time.
pub fn read_noatime(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut f = open_read_noatime(path, 0)?;
    let meta = f.metadata()?;
    if !meta.file_type().is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file (a FIFO, device or socket is never read)",
        ));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    f.read_to_end(&mut bytes)?;
    Ok(bytes)
}

fn temp_path_for(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.rehash-tmp-{}", std::process::id()))
}

/// The pid in a temp file name made by [`temp_path_for`], if `name` is one.
fn temp_owner(name: &str) -> Option<u32> {
    let (_, pid) = name.strip_prefix('.')?.rsplit_once(".rehash-tmp-")?;
    pid.parse().ok()
}

/// Removes temp files a killed run left behind (`.<name>.rehash-tmp-<pid>` whose process is
/// gone) in the directories below `root`, at most `max_depth` levels down, without following
/// symlinks. They are harmless to the runtimes, but thousands of them after a crash are noise.
/// Returns how many were removed.
pub fn sweep_stale_temps(root: &Path, max_depth: usize) -> Result<usize, StoreError> {
    if !root.is_dir() {
        return Ok(0);
    }
    // A node's store has a directory per container: the directories are listed in parallel
    // (one `getdents` each, from the dentry cache: CPU work, so rayon's pool, not the I/O
    // threads, whose per-thread heaps would be touched before the write needs them).
    sweep_dir(root, max_depth, std::process::id())
}

/// [`sweep_stale_temps`] of `dir`, `depth` levels down (1: its own entries only).
fn sweep_dir(dir: &Path, depth: usize, me: u32) -> Result<usize, StoreError> {
    use rayon::prelude::*;
    if depth == 0 {
        return Ok(0);
    }
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        // (gone or unreadable since it was listed: nothing of ours to remove there, as a
        // walk that skips the entries it cannot read)
        Err(_) => return Ok(0),
    };
    let mut subdirs = Vec::new();
    let mut removed = 0;
    for entry in entries.filter_map(Result::ok) {
        // the entry's own type (`d_type`, or lstat): a symlink is never followed
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            if depth > 1 {
                subdirs.push(entry.path());
            }
            continue;
        }
        if !kind.is_file() {
            continue;
        }
        let Some(pid) = entry.file_name().to_str().and_then(temp_owner) else {
            continue;
        };
        // SAFETY: kill with signal 0 only checks whether the pid exists.
        let alive = pid == me || unsafe { libc::kill(pid as libc::pid_t, 0) } == 0;
        if !alive {
            match fs::remove_file(entry.path()) {
                Ok(()) => removed += 1,
                // another run sweeping the same directory removed it first (two runs on two
                // stores share the in-flight marker directory)
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(StoreError::io(entry.path(), e)),
            }
        }
    }
    let below: usize = subdirs
        .par_iter()
        .map(|d| sweep_dir(d, depth - 1, me))
        .collect::<Result<Vec<usize>, StoreError>>()?
        .into_iter()
        .sum();
    Ok(removed + below)
}

/// Creates `dir` and every missing parent with mode 0700, whatever the caller's umask
/// (directories it finds are left as they are). The tool's own files (backups, reports) name
/// containers and hold store bytes: a directory created group- or world-writable would let
/// another user swap them before a root process reads them back.
pub fn create_dir_all_private(dir: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::DirBuilderExt;
    let mut missing = Vec::new();
    let mut cur = dir;
    loop {
        match fs::symlink_metadata(cur) {
            Ok(_) => break,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                missing.push(cur);
                match cur.parent() {
                    Some(p) if !p.as_os_str().is_empty() => cur = p,
                    _ => break,
                }
            }
            Err(e) => return Err(StoreError::io(cur, e)),
        }
    }
    for d in missing.into_iter().rev() {
        match fs::DirBuilder::new().mode(0o700).create(d) {
            // The umask may have taken bits away from 0700; never more than 0700 either way.
            Ok(()) => fs::set_permissions(d, fs::Permissions::from_mode(0o700))
                .map_err(|e| StoreError::io(d, e))?,
            // Another process made it meanwhile: not ours to change.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(StoreError::io(d, e)),
        }
    }
    Ok(())
}

/// fsyncs a directory so a rename inside it is durable.
pub fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    sync_dir_on(dir, &Backend::posix())
}

/// [`sync_dir`] through `storage`.
pub fn sync_dir_on(dir: &Path, storage: &Backend) -> Result<(), StoreError> {
    fault::point("fsync-dir");
    storage.sync_dir(dir).map_err(|e| StoreError::io(dir, e))
}

/// Atomically replaces `path` with `bytes`, giving the new file `meta` (mode and owner).
/// On any error the original is untouched and the temp file is removed.
pub fn replace_file(path: &Path, bytes: &[u8], meta: FileMeta) -> Result<(), StoreError> {
    replace_file_inner(path, bytes, meta, true)
}

/// Like [`replace_file`] but leaves the directory fsync to the caller, who batches many files
/// of one directory tree and calls [`sync_dir`] once per directory afterwards.
pub fn replace_file_nodirsync(path: &Path, bytes: &[u8], meta: FileMeta) -> Result<(), StoreError> {
    replace_file_inner(path, bytes, meta, false)
}

/// [`replace_file`] of the bytes `write` produces, streamed to the temp file through a buffer
/// instead of built in memory first: for the reports, megabytes on a large node, that would
/// otherwise be the process's largest allocation at its end.
pub fn replace_file_with(
    path: &Path,
    meta: FileMeta,
    write: &mut dyn FnMut(&mut dyn Write) -> std::io::Result<()>,
) -> Result<(), StoreError> {
    replace_file_with_on(path, meta, write, &Backend::posix())
}

/// [`replace_file_with`] through `storage`.
pub fn replace_file_with_on(
    path: &Path,
    meta: FileMeta,
    write: &mut dyn FnMut(&mut dyn Write) -> std::io::Result<()>,
    storage: &Backend,
) -> Result<(), StoreError> {
    stage_file_with(path, meta, true, write, storage)?.commit()?;
    sync_dir_on(path.parent().unwrap_or(Path::new(".")), storage)
}

/// [`stage_file_nosync`] of the bytes `write` streams: for a file that one [`syncfs`] made
/// durable together with others (a backup's manifest and its copies) before its
/// [`StagedFile::commit`] and [`sync_dir`].
pub fn stage_file_with_nosync(
    path: &Path,
    meta: FileMeta,
    write: &mut dyn FnMut(&mut dyn Write) -> std::io::Result<()>,
) -> Result<StagedFile, StoreError> {
    stage_file_with_nosync_on(path, meta, write, &Backend::posix())
}

/// [`stage_file_with_nosync`] through `storage` (the staged file commits through it too).
pub fn stage_file_with_nosync_on(
    path: &Path,
    meta: FileMeta,
    write: &mut dyn FnMut(&mut dyn Write) -> std::io::Result<()>,
    storage: &Backend,
) -> Result<StagedFile, StoreError> {
    stage_file_with(path, meta, false, write, storage)
}

fn replace_file_inner(
    path: &Path,
    bytes: &[u8],
    meta: FileMeta,
    dir_sync: bool,
) -> Result<(), StoreError> {
    stage_file_inner(path, bytes, meta, true, &Backend::posix())?.commit()?;
    if dir_sync {
        sync_dir(path.parent().unwrap_or(Path::new(".")))?;
    }
    Ok(())
}

/// A new file content written durably next to its target but not yet renamed over it
/// (two-phase replace of several files: stage them all, and only when every stage succeeded,
/// [`StagedFile::commit`] each; a full disk then changes no file at all). Dropping a staged
/// file without committing removes its temp file.
#[derive(Debug)]
pub struct StagedFile {
    path: PathBuf,
    tmp: Option<PathBuf>,
    /// `st_dev` of the temp file: the filesystem whose [`syncfs`] makes it durable.
    dev: u64,
    /// What commits (renames) or removes the temp file.
    storage: Backend,
}

/// Writes `bytes` to a temp file beside `path` with `meta`, fsynced, without touching `path`.
pub fn stage_file(path: &Path, bytes: &[u8], meta: FileMeta) -> Result<StagedFile, StoreError> {
    stage_file_inner(path, bytes, meta, true, &Backend::posix())
}

/// Like [`stage_file`] but without the per-file fsync: for batches of many files, the caller
/// makes every staged file durable with one [`syncfs`] of the store's filesystem before it
/// commits any of them, and calls [`syncfs`] again after the renames (instead of one
/// [`sync_dir`] per directory). Same crash guarantee, two flushes instead of two per file.
pub fn stage_file_nosync(
    path: &Path,
    bytes: &[u8],
    meta: FileMeta,
) -> Result<StagedFile, StoreError> {
    stage_file_inner(path, bytes, meta, false, &Backend::posix())
}

/// `syncfs(2)` of the filesystem holding `path`: every dirty page and metadata change of that
/// filesystem (ours: staged files, renames) is on disk when it returns `Ok`, and a writeback
/// error since the file was opened is reported.
pub fn syncfs(path: &Path) -> Result<(), StoreError> {
    use std::os::fd::AsRawFd;
    fault::point("syncfs");
    let f = File::open(path).map_err(|e| StoreError::io(path, e))?;
    // SAFETY: a valid fd for the duration of the call.
    if unsafe { libc::syncfs(f.as_raw_fd()) } != 0 {
        return Err(StoreError::io(path, std::io::Error::last_os_error()));
    }
    Ok(())
}

fn stage_file_inner(
    path: &Path,
    bytes: &[u8],
    meta: FileMeta,
    fsync: bool,
    storage: &Backend,
) -> Result<StagedFile, StoreError> {
    stage_file_with(path, meta, fsync, &mut |w| w.write_all(bytes), storage)
}

/// [`stage_file_inner`] of the bytes `write` produces (through a 64 KiB buffer when it writes
/// in pieces).
fn stage_file_with(
    path: &Path,
    meta: FileMeta,
    fsync: bool,
    write: &mut dyn FnMut(&mut dyn Write) -> std::io::Result<()>,
    storage: &Backend,
) -> Result<StagedFile, StoreError> {
    let tmp = temp_path_for(path);
    let result = (|| {
        let mut f = storage
            .create_new(&tmp)
            .map_err(|e| StoreError::io(&tmp, e))?;
        fault::point("write");
        storage
            .write(&mut f, &tmp, write)
            .map_err(|e| StoreError::io(&tmp, e))?;
        storage
            .set_owner_and_mode(&f, &tmp, meta)
            .map_err(|e| StoreError::io(&tmp, e))?;
        let dev = f.metadata().map_err(|e| StoreError::io(&tmp, e))?.dev();
        if fsync {
            fault::point("fsync");
            storage
                .sync_file(&f, &tmp)
                .map_err(|e| StoreError::io(&tmp, e))?;
        }
        Ok(dev)
    })();
    match result {
        Ok(dev) => Ok(StagedFile {
            path: path.to_path_buf(),
            tmp: Some(tmp),
            dev,
            storage: storage.clone(),
        }),
        Err(e) => {
            let _ = storage.remove_file(&tmp);
            Err(e)
        }
    }
}

impl StagedFile {
    /// The store file this temp file will replace.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `st_dev` of the filesystem the staged file (and so its target) lives on.
    pub fn dev(&self) -> u64 {
        self.dev
    }

    /// Renames the staged temp file over its target. The caller fsyncs the directory
    /// ([`sync_dir`]) afterwards.
    pub fn commit(mut self) -> Result<(), StoreError> {
        let tmp = self.tmp.take().expect("a staged file is committed once");
        fault::point("rename");
        self.storage.rename(&tmp, &self.path).map_err(|e| {
            let _ = self.storage.remove_file(&tmp);
            StoreError::io(&self.path, e)
        })
    }
}

impl Drop for StagedFile {
    fn drop(&mut self) {
        if let Some(tmp) = self.tmp.take() {
            let _ = self.storage.remove_file(&tmp);
        }
    }
}

/// How many threads stage and rename files at once in [`replace_many`]. Replacing a file frees
/// the old file's blocks, which costs a few ms of device latency per rename on some
/// filesystems (ext4 with discard); overlapping them is what makes thousands of files take
/// a fraction of a second instead of a minute. The threads mostly wait on the device, so
/// more of them than cores helps.
pub const IO_THREADS: usize = 16;

/// Runs `f` on a process-wide pool of [`IO_THREADS`] threads (rayon's global pool if that
/// pool cannot be started), so the `par_iter`s inside it overlap blocking file system calls.
pub fn on_io_threads<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    let pool = POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(IO_THREADS)
            .thread_name(|i| format!("rehash-io-{i}"))
            .build()
            .ok()
    });
    match pool {
        Some(p) => p.install(f),
        None => f(),
    }
}

/// One file for [`replace_many`]: its path, its new bytes, and the mode and owner it gets.
#[derive(Debug, Clone, Copy)]
pub struct Replacement<'a> {
    /// The file to replace.
    pub path: &'a Path,
    /// Its new bytes.
    pub bytes: &'a [u8],
    /// The mode and owner it keeps.
    pub meta: FileMeta,
}

/// A file system the files of a [`replace_many`] live on, opened before anything is written
/// so that its [`syncfs`] reports every writeback error of the batch (`syncfs(2)` reports the
/// errors that happened since the descriptor was opened).
#[derive(Debug)]
struct FsHandle {
    dev: u64,
    dir: PathBuf,
    fd: File,
}

fn syncfs_fd(h: &FsHandle, storage: &Backend) -> Result<(), StoreError> {
    fault::point("syncfs");
    storage
        .syncfs(&h.fd, &h.dir)
        .map_err(|e| StoreError::io(&h.dir, e))
}

/// Opens one directory per file system holding the parent directories of `paths`.
fn open_filesystems(paths: &[&Path]) -> Result<Vec<FsHandle>, StoreError> {
    let mut dirs: Vec<&Path> = paths
        .iter()
        .map(|p| p.parent().unwrap_or(Path::new(".")))
        .collect();
    dirs.sort_unstable();
    dirs.dedup();
    use rayon::prelude::*;
    let devs: Vec<(u64, &Path)> = dirs
        .par_iter()
        .map(|d| {
            fs::metadata(d)
                .map(|m| (m.dev(), *d))
                .map_err(|e| StoreError::io(*d, e))
        })
        .collect::<Result<_, _>>()?;
    let mut out: Vec<FsHandle> = Vec::new();
    for (dev, dir) in devs {
        if out.iter().any(|h| h.dev == dev) {
            continue;
        }
        let fd = File::open(dir).map_err(|e| StoreError::io(dir, e))?;
        out.push(FsHandle {
            dev,
            dir: dir.to_path_buf(),
            fd,
        });
    }
    Ok(out)
}

/// Replaces many files crash-safely with two flushes for the whole batch instead of two per
/// file; see [`replace_many_in_waves`].
pub fn replace_many(files: &[Replacement<'_>]) -> Result<(), StoreError> {
    replace_many_in_waves(&[files])
}

/// Replaces many files so that a crash at any instant leaves each of them holding either its
/// old or its new bytes (never a mix, never missing), as [`replace_file`] does for one file:
///
/// 1. every new file is staged as a temp file beside its target (no per-file fsync), on
///    [`IO_THREADS`] threads. Any error here (a full disk) removes the temp files already made
///    and changes no target;
/// 2. one [`syncfs`] per file system involved makes every staged byte, mode and owner durable
///    (an error here also changes no target);
/// 3. the temp files are renamed over their targets, in parallel, wave after wave: every
///    rename of `waves[0]` is done before the first of `waves[1]` starts (for stores where
///    one copy must be the last to change). After a rename error the later waves are not
///    started (their temp files are removed);
/// 4. a second `syncfs` per file system makes the renames durable (what one fsync per
///    directory does, for thousands of directories at once). It runs even after a rename
///    error, so what was renamed is durable when the error is returned.
///
/// Every new byte is durable before the first rename: a power cut after any rename finds
/// complete new files. The file systems are opened before the first write so their `syncfs`
/// reports every writeback error of the batch. Each step passes a [`fault`] point: "write"
/// per file, "syncfs" per file system, "rename" per file, "syncfs" per file system.
pub fn replace_many_in_waves(waves: &[&[Replacement<'_>]]) -> Result<(), StoreError> {
    let paths: Vec<&Path> = waves
        .iter()
        .flat_map(|w| w.iter().map(|r| r.path))
        .collect();
    if paths.is_empty() {
        return Ok(());
    }
    let mut batch = StagedBatch::open(&paths)?;
    for w in waves {
        batch.stage(w)?;
        batch.end_wave();
    }
    batch.commit()
}

/// [`replace_many_in_waves`] in steps, for a caller that produces the new bytes a slice at a
/// time and must not hold them all (Docker's thousands of `config.v2.json`): open it with every
/// target path, [`StagedBatch::stage`] slice after slice (each staged file only keeps its
/// paths), then [`StagedBatch::sync`] and [`StagedBatch::commit`]. Steps 1–4 and the crash
/// guarantee are [`replace_many_in_waves`]'s; dropping the batch before its commit removes
/// every temp file and changes no target.
#[derive(Debug)]
pub struct StagedBatch {
    filesystems: Vec<FsHandle>,
    /// Staged files, wave after wave (a new wave renames only after the previous one).
    waves: Vec<Vec<StagedFile>>,
    synced: bool,
    /// What every step of the batch goes through.
    storage: Backend,
}

impl StagedBatch {
    /// Opens the file systems of every target in `paths` (all targets [`StagedBatch::stage`]
    /// will be given must be among them).
    pub fn open(paths: &[&Path]) -> Result<StagedBatch, StoreError> {
        StagedBatch::open_on(paths, Backend::posix())
    }

    /// [`StagedBatch::open`] of a batch whose every step goes through `storage`.
    pub fn open_on(paths: &[&Path], storage: Backend) -> Result<StagedBatch, StoreError> {
        Ok(StagedBatch {
            filesystems: open_filesystems(paths)?,
            waves: vec![Vec::new()],
            synced: false,
            storage,
        })
    }

    /// Stages `files` as temp files beside their targets, without fsync, on the I/O threads.
    /// On an error the files of this call are removed (earlier ones stay staged until the
    /// batch is dropped).
    pub fn stage(&mut self, files: &[Replacement<'_>]) -> Result<(), StoreError> {
        let last = self.waves.len() - 1;
        self.stage_in_wave(last, files)
    }

    /// [`StagedBatch::stage`] into rename wave `wave` (0 first; waves up to it are created):
    /// for a caller that produces the files of several waves together.
    pub fn stage_in_wave(
        &mut self,
        wave: usize,
        files: &[Replacement<'_>],
    ) -> Result<(), StoreError> {
        use rayon::prelude::*;
        let staged = on_io_threads(|| {
            files
                .par_iter()
                .map(|r| stage_file_inner(r.path, r.bytes, r.meta, false, &self.storage))
                .collect::<Result<Vec<_>, _>>()
        })?;
        // A target whose directory is not on a file system opened at the start (its directory
        // was swapped for a mount point since) would escape the flush: refuse before any rename.
        if let Some(s) = staged
            .iter()
            .find(|s| !self.filesystems.iter().any(|h| h.dev == s.dev))
        {
            return Err(StoreError::Refused(format!(
                "{}: its directory moved to another file system while it was being written; nothing was replaced",
                s.path().display()
            )));
        }
        if self.waves.len() <= wave {
            self.waves.resize_with(wave + 1, Vec::new);
        }
        self.waves[wave].extend(staged);
        self.synced = false;
        Ok(())
    }

    /// Files staged from now on are renamed only after every file staged before.
    pub fn end_wave(&mut self) {
        if self.waves.last().is_some_and(|w| !w.is_empty()) {
            self.waves.push(Vec::new());
        }
    }

    /// How many files are staged.
    pub fn len(&self) -> usize {
        self.waves.iter().map(Vec::len).sum()
    }

    /// Whether nothing is staged.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Step 2: one `syncfs` per file system makes every staged byte, mode and owner durable.
    /// Changes no target. A caller that has other files to make durable on the same file
    /// systems first (a backup) calls it after writing those: one flush for both.
    pub fn sync(&mut self) -> Result<(), StoreError> {
        for h in &self.filesystems {
            syncfs_fd(h, &self.storage)?;
        }
        self.synced = true;
        Ok(())
    }

    /// Steps 2 (unless [`StagedBatch::sync`] ran since the last stage) to 4: the renames, wave
    /// after wave, then one `syncfs` per file system, which runs even after a rename error so
    /// that what was renamed is durable when the error is returned.
    pub fn commit(mut self) -> Result<(), StoreError> {
        use rayon::prelude::*;
        if !self.synced {
            self.sync()?;
        }
        let mut first_err = None;
        for wave in std::mem::take(&mut self.waves) {
            if first_err.is_some() {
                break; // dropping the staged files removes their temp files
            }
            let results: Vec<Result<(), StoreError>> =
                on_io_threads(|| wave.into_par_iter().map(StagedFile::commit).collect());
            first_err = results.into_iter().find_map(Result::err);
        }
        for h in &self.filesystems {
            if let Err(e) = syncfs_fd(h, &self.storage) {
                first_err.get_or_insert(e);
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sets the access time of `p` to an hour before its modification time: the state in
    /// which `relatime` updates the atime on the next read.
    fn atime_before_mtime(p: &Path) -> i64 {
        use std::os::unix::ffi::OsStrExt;
        let mtime = fs::metadata(p).unwrap().mtime();
        let times = [
            libc::timespec {
                tv_sec: mtime - 3600,
                tv_nsec: 0,
            },
            libc::timespec {
                tv_sec: 0,
                tv_nsec: libc::UTIME_OMIT,
            },
        ];
        let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid path and two timespecs.
        let rc = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), 0) };
        assert_eq!(rc, 0, "utimensat: {}", std::io::Error::last_os_error());
        mtime - 3600
    }

    #[test]
    fn reading_a_store_file_leaves_its_access_time() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.v2.json");
        fs::write(&p, b"{}").unwrap();
        let atime = atime_before_mtime(&p);
        let (bytes, _) = read_regular_nofollow(&p).unwrap();
        assert_eq!(bytes, b"{}");
        assert_eq!(read_noatime(&p).unwrap(), b"{}");
        assert_eq!(
            fs::metadata(&p).unwrap().atime(),
            atime,
            "read_regular_nofollow and read_noatime leave the atime (O_NOATIME)"
        );
        // (the control: a plain read on this file system does update it, or the test proves
        // nothing; a mount with noatime is the one place where it cannot tell)
        let _ = fs::read(&p).unwrap();
        let after_plain = fs::metadata(&p).unwrap().atime();
        let noatime_mount = {
            use std::os::unix::ffi::OsStrExt;
            let c = std::ffi::CString::new(dir.path().as_os_str().as_bytes()).unwrap();
            // SAFETY: a valid path and a zeroed statvfs to fill.
            let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
            assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
            st.f_flag & libc::ST_NOATIME != 0
        };
        assert!(
            after_plain != atime || noatime_mount,
            "a plain read updates the atime here (relatime), so the check above can fail"
        );
    }

    #[test]
    fn staged_file_commits_or_vanishes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.json");
        fs::write(&p, b"old").unwrap();
        let (_, meta) = read_regular_nofollow(&p).unwrap();
        let s = stage_file(&p, b"new", meta).unwrap();
        assert_eq!(
            fs::read(&p).unwrap(),
            b"old",
            "staging does not touch the target"
        );
        drop(s);
        assert_eq!(
            fs::read_dir(dir.path()).unwrap().count(),
            1,
            "dropped stage removed"
        );
        stage_file(&p, b"new", meta).unwrap().commit().unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"new");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn replace_keeps_mode_and_removes_temp() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.v2.json");
        fs::write(&p, b"old").unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o640)).unwrap();
        let (_, meta) = read_regular_nofollow(&p).unwrap();
        replace_file(&p, b"new bytes", meta).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"new bytes");
        assert_eq!(
            fs::metadata(&p).unwrap().mode() & 0o7777,
            0o640,
            "mode kept"
        );
        let leftovers: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temp file left behind");
    }

    fn listing(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn replace_many_replaces_every_file_with_its_mode() {
        let dir = tempfile::tempdir().unwrap();
        let mut paths = Vec::new();
        for i in 0..50 {
            let sub = dir.path().join(format!("c{i}"));
            fs::create_dir(&sub).unwrap();
            let p = sub.join("config.json");
            fs::write(&p, format!("old {i}")).unwrap();
            fs::set_permissions(
                &p,
                fs::Permissions::from_mode(0o600 + (i as u32 % 2) * 0o44),
            )
            .unwrap();
            paths.push(p);
        }
        let new: Vec<Vec<u8>> = (0..50).map(|i| format!("new {i}").into_bytes()).collect();
        let metas: Vec<FileMeta> = paths
            .iter()
            .map(|p| FileMeta::of(&fs::metadata(p).unwrap()))
            .collect();
        let reps: Vec<Replacement> = (0..50)
            .map(|i| Replacement {
                path: &paths[i],
                bytes: &new[i],
                meta: metas[i],
            })
            .collect();
        replace_many_in_waves(&[&reps[..10], &reps[10..]]).unwrap();
        for (i, p) in paths.iter().enumerate() {
            assert_eq!(fs::read(p).unwrap(), new[i]);
            assert_eq!(FileMeta::of(&fs::metadata(p).unwrap()), metas[i]);
            assert_eq!(
                listing(p.parent().unwrap()),
                ["config.json"],
                "no temp left"
            );
        }
        replace_many(&[]).unwrap();
    }

    #[test]
    fn replace_many_changes_nothing_when_a_stage_fails() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("a.json");
        fs::write(&good, b"old").unwrap();
        // The parent of this target is a regular file: staging it fails (ENOTDIR).
        let blocker = dir.path().join("notadir");
        fs::write(&blocker, b"").unwrap();
        let bad = blocker.join("b.json");
        let meta = FileMeta::of(&fs::metadata(&good).unwrap());
        let reps = [
            Replacement {
                path: &good,
                bytes: b"new",
                meta,
            },
            Replacement {
                path: &bad,
                bytes: b"new",
                meta,
            },
        ];
        let e = replace_many(&reps).unwrap_err();
        assert!(e.to_string().contains("notadir"), "{e}");
        assert_eq!(fs::read(&good).unwrap(), b"old");
        assert_eq!(listing(dir.path()), ["a.json", "notadir"], "temps removed");
    }

    #[test]
    fn replace_many_stops_after_a_wave_whose_rename_fails() {
        let dir = tempfile::tempdir().unwrap();
        // A non-empty directory as the target: the rename over it fails (EISDIR).
        let target_dir = dir.path().join("d");
        fs::create_dir(&target_dir).unwrap();
        fs::write(target_dir.join("x"), b"").unwrap();
        let later = dir.path().join("later.json");
        fs::write(&later, b"old").unwrap();
        let meta = FileMeta::of(&fs::metadata(&later).unwrap());
        let first = [Replacement {
            path: &target_dir,
            bytes: b"new",
            meta,
        }];
        let second = [Replacement {
            path: &later,
            bytes: b"new",
            meta,
        }];
        let e = replace_many_in_waves(&[&first, &second]).unwrap_err();
        assert!(
            e.to_string().contains(&*target_dir.to_string_lossy()),
            "{e}"
        );
        assert_eq!(fs::read(&later).unwrap(), b"old", "the next wave never ran");
        assert_eq!(listing(dir.path()), ["d", "later.json"], "temps removed");
    }

    #[test]
    fn sweep_removes_only_dead_runs_temps() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("containers/abc");
        fs::create_dir_all(&sub).unwrap();
        // pid 0x7fff_fff0 does not exist; our own pid does.
        let dead = sub.join(".config.v2.json.rehash-tmp-2147483632");
        let ours = sub.join(format!(".config.v2.json.rehash-tmp-{}", std::process::id()));
        let other = sub.join("config.v2.json");
        for p in [&dead, &ours, &other] {
            fs::write(p, b"x").unwrap();
        }
        assert_eq!(sweep_stale_temps(dir.path(), 3).unwrap(), 1);
        assert!(!dead.exists(), "a dead run's temp file is removed");
        assert!(ours.exists() && other.exists(), "nothing else is touched");
    }

    #[test]
    fn sweep_keeps_to_its_depth_and_never_follows_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let dead = ".config.v2.json.rehash-tmp-2147483632";
        let mut inside = Vec::new();
        for i in 0..300 {
            let sub = dir.path().join(format!("c{i}"));
            fs::create_dir(&sub).unwrap();
            fs::write(sub.join(dead), b"x").unwrap();
            inside.push(sub.join(dead));
        }
        fs::write(dir.path().join(dead), b"x").unwrap();
        let deep = dir.path().join("c0/mounts/shm");
        fs::create_dir_all(&deep).unwrap();
        fs::write(deep.join(dead), b"x").unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        fs::write(elsewhere.path().join(dead), b"x").unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), dir.path().join("link")).unwrap();
        assert_eq!(
            sweep_stale_temps(dir.path(), 2).unwrap(),
            301,
            "the root's and each container directory's dead temp file"
        );
        assert!(
            inside.iter().all(|p| !p.exists()),
            "every directory at depth 1 is swept"
        );
        assert!(
            deep.join(dead).exists(),
            "a temp file below the sweep's depth is left alone"
        );
        assert!(
            elsewhere.path().join(dead).exists(),
            "a symlinked directory is not followed"
        );
        assert_eq!(sweep_stale_temps(dir.path(), 3).unwrap(), 0);
        assert!(deep.join(dead).exists(), "c0/mounts/shm is at depth 4");
        assert_eq!(sweep_stale_temps(dir.path(), 4).unwrap(), 1);
    }

    #[test]
    fn read_refuses_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("t");
        fs::write(&target, b"x").unwrap();
        let link = dir.path().join("l");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let err = read_regular_nofollow(&link).unwrap_err().to_string();
        assert!(err.contains("symbolic link"), "{err}");
    }
}
