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

/// Mode and owner of a file, kept across a replace and recorded in backups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileMeta {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

impl FileMeta {
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
pub fn read_regular_nofollow(path: &Path) -> Result<(Vec<u8>, FileMeta), StoreError> {
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| {
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

fn temp_path_for(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.rehash-tmp-{}", std::process::id()))
}

/// fsyncs a directory so a rename inside it is durable.
pub fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    fault::point("fsync-dir");
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StoreError::io(dir, e))
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

fn replace_file_inner(
    path: &Path,
    bytes: &[u8],
    meta: FileMeta,
    dir_sync: bool,
) -> Result<(), StoreError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = temp_path_for(path);
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .map_err(|e| StoreError::io(&tmp, e))?;
        fault::point("write");
        f.write_all(bytes).map_err(|e| StoreError::io(&tmp, e))?;
        // Owner first: chown clears set-id bits, chmod then sets the final mode.
        std::os::unix::fs::fchown(&f, Some(meta.uid), Some(meta.gid))
            .map_err(|e| StoreError::io(&tmp, e))?;
        f.set_permissions(fs::Permissions::from_mode(meta.mode))
            .map_err(|e| StoreError::io(&tmp, e))?;
        fault::point("fsync");
        f.sync_all().map_err(|e| StoreError::io(&tmp, e))?;
        drop(f);
        fault::point("rename");
        fs::rename(&tmp, path).map_err(|e| StoreError::io(path, e))?;
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
        return result;
    }
    if dir_sync {
        sync_dir(dir)?;
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
}

/// Writes `bytes` to a temp file beside `path` with `meta`, fsynced, without touching `path`.
pub fn stage_file(path: &Path, bytes: &[u8], meta: FileMeta) -> Result<StagedFile, StoreError> {
    stage_file_inner(path, bytes, meta, true)
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
    stage_file_inner(path, bytes, meta, false)
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
) -> Result<StagedFile, StoreError> {
    let tmp = temp_path_for(path);
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .map_err(|e| StoreError::io(&tmp, e))?;
        fault::point("write");
        f.write_all(bytes).map_err(|e| StoreError::io(&tmp, e))?;
        std::os::unix::fs::fchown(&f, Some(meta.uid), Some(meta.gid))
            .map_err(|e| StoreError::io(&tmp, e))?;
        f.set_permissions(fs::Permissions::from_mode(meta.mode))
            .map_err(|e| StoreError::io(&tmp, e))?;
        if !fsync {
            return Ok(());
        }
        fault::point("fsync");
        f.sync_all().map_err(|e| StoreError::io(&tmp, e))
    })();
    match result {
        Ok(()) => Ok(StagedFile {
            path: path.to_path_buf(),
            tmp: Some(tmp),
        }),
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            Err(e)
        }
    }
}

impl StagedFile {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Renames the staged temp file over its target. The caller fsyncs the directory
    /// ([`sync_dir`]) afterwards.
    pub fn commit(mut self) -> Result<(), StoreError> {
        let tmp = self.tmp.take().expect("a staged file is committed once");
        fault::point("rename");
        fs::rename(&tmp, &self.path).map_err(|e| {
            let _ = fs::remove_file(&tmp);
            StoreError::io(&self.path, e)
        })
    }
}

impl Drop for StagedFile {
    fn drop(&mut self) {
        if let Some(tmp) = self.tmp.take() {
            let _ = fs::remove_file(tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
