//! Backups taken before the first write, and byte-exact rollback from them.
//!
//! A backup directory holds a copy of every file a patch is about to replace and
//! `manifest.json`: per file its absolute path, mode, owner, size, the sha256 of the original
//! bytes and (once known) of the new bytes. The manifest is written, and the copies made
//! durable, before the store is touched, so a crash at any point leaves a usable backup.
//!
//! Rollback trusts nothing: it checks every backup copy against its recorded sha256 and every
//! current file against the two sides of the manifest before it restores anything, and then
//! restores the files atomically (all staged and made durable before the first rename) with
//! their original mode and owner.

use crate::atomic::{self, FileMeta};
use crate::error::StoreError;
use crate::fault;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub const MANIFEST_NAME: &str = "manifest.json";
const FORMAT: u32 = 1;

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// One backed-up file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ManifestEntry {
    /// Absolute path of the file in the store.
    pub path: PathBuf,
    /// Name of the copy inside the backup directory.
    pub backup_file: String,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub sha256_original: String,
    /// sha256 of the bytes the patch writes; `None` until known (a bolt file's new bytes are
    /// only known after its transaction commits).
    pub sha256_new: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub tool_version: String,
    pub runtime: String,
    pub store_root: PathBuf,
    pub created_unix: u64,
    /// `prepared` before the store is written, `applied` after every write succeeded.
    pub state: String,
    pub entries: Vec<ManifestEntry>,
}

/// A backup being taken. Create it with [`Backup::create`], add files with [`Backup::save`],
/// then [`Backup::commit`] before writing the store and [`Backup::finish`] after.
#[derive(Debug)]
pub struct Backup {
    dir: PathBuf,
    /// The backup directory, opened at creation: [`Backup::commit`]'s `syncfs` on it reports
    /// every writeback error of the copies (syncfs(2) reports errors since the open).
    dir_fd: fs::File,
    manifest: Manifest,
}

/// One file for [`Backup::save_many`].
#[derive(Debug, Clone, Copy)]
pub struct SaveItem<'a> {
    /// Absolute path of the file in the store.
    pub path: &'a Path,
    /// Its current bytes, as the caller read them.
    pub original: &'a [u8],
    pub meta: FileMeta,
    /// The bytes that will replace it, when known (their sha256 goes into the manifest).
    pub new: Option<&'a [u8]>,
}

fn is_world_writable(meta: &fs::Metadata) -> bool {
    meta.permissions().mode() & 0o002 != 0
}

impl Backup {
    /// Creates (mode 0700) or adopts an empty backup directory. Refuses a directory that
    /// already holds anything (a previous backup must never be overwritten), one that is
    /// world-writable, and a symlink.
    pub fn create(dir: &Path, runtime: &str, store_root: &Path) -> Result<Backup, StoreError> {
        match fs::symlink_metadata(dir) {
            Ok(meta) => {
                if meta.file_type().is_symlink() {
                    return Err(StoreError::Backup(format!(
                        "{} is a symbolic link; give a real directory",
                        dir.display()
                    )));
                }
                if !meta.is_dir() {
                    return Err(StoreError::Backup(format!(
                        "{} exists and is not a directory",
                        dir.display()
                    )));
                }
                if is_world_writable(&meta) {
                    return Err(StoreError::Backup(format!(
                        "{} is world-writable; anyone could swap the originals before a rollback",
                        dir.display()
                    )));
                }
                let mut entries = fs::read_dir(dir).map_err(|e| StoreError::io(dir, e))?;
                if entries.next().is_some() {
                    let what = if dir.join(MANIFEST_NAME).exists() {
                        "already holds a backup"
                    } else {
                        "is not empty"
                    };
                    return Err(StoreError::Backup(format!(
                        "{} {what}; give a new directory (backups are never overwritten)",
                        dir.display()
                    )));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                fs::create_dir_all(dir).map_err(|e| StoreError::io(dir, e))?;
            }
            Err(e) => return Err(StoreError::io(dir, e)),
        }
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .map_err(|e| StoreError::io(dir, e))?;
        let dir_fd = fs::File::open(dir).map_err(|e| StoreError::io(dir, e))?;
        let created_unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        Ok(Backup {
            dir: dir.to_path_buf(),
            dir_fd,
            manifest: Manifest {
                format: FORMAT,
                tool_version: env!("CARGO_PKG_VERSION").to_string(),
                runtime: runtime.to_string(),
                store_root: store_root.to_path_buf(),
                created_unix,
                state: "prepared".into(),
                entries: Vec::new(),
            },
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn entries(&self) -> &[ManifestEntry] {
        &self.manifest.entries
    }

    /// Copies `original` (the current bytes of `path`, as the caller read them) into the
    /// backup, mode 0600. `new_sha256` is the sha256 of the bytes that will replace it, when
    /// known. The copy is made durable by [`Backup::commit`].
    pub fn save(
        &mut self,
        path: &Path,
        original: &[u8],
        meta: FileMeta,
        new_sha256: Option<String>,
    ) -> Result<(), StoreError> {
        let index = self.manifest.entries.len();
        let entry = write_copy(&self.dir, index, path, original, meta, new_sha256)?;
        self.manifest.entries.push(entry);
        Ok(())
    }

    /// [`Backup::save`] for many files at once: the copies are written, and the sha256s of
    /// the originals and of the new bytes computed, on several threads. The manifest gets
    /// the same entries, in the same order (`items`' order), as one `save` per item would
    /// give. On an error no entry is added (copies already written stay in the directory,
    /// which is never committed then). The copies are made durable by [`Backup::commit`].
    pub fn save_many(&mut self, items: &[SaveItem<'_>]) -> Result<(), StoreError> {
        let start = self.manifest.entries.len();
        let dir = &self.dir;
        let entries: Vec<ManifestEntry> = atomic::on_io_threads(|| {
            items
                .par_iter()
                .enumerate()
                .map(|(i, it)| {
                    let new_sha = it.new.map(sha256_hex);
                    write_copy(dir, start + i, it.path, it.original, it.meta, new_sha)
                })
                .collect::<Result<_, _>>()
        })?;
        self.manifest.entries.extend(entries);
        Ok(())
    }

    /// Records the sha256 of what was written to `path`.
    pub fn set_new_sha256(&mut self, path: &Path, sha: String) {
        for e in &mut self.manifest.entries {
            if e.path == path {
                e.sha256_new = Some(sha.clone());
            }
        }
    }

    /// Makes every copy durable, then writes the manifest (state `prepared`) atomically.
    /// Call before the first write to the store.
    pub fn commit(&mut self) -> Result<(), StoreError> {
        syncfs(&self.dir_fd, &self.dir)?;
        self.write_manifest()
    }

    /// Marks the backup `applied` after every store write succeeded.
    pub fn finish(&mut self) -> Result<(), StoreError> {
        self.manifest.state = "applied".into();
        self.write_manifest()
    }

    /// Writes an extra file (e.g. the patch report) into the backup directory, mode 0600.
    pub fn attach(&self, name: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let path = self.dir.join(name);
        atomic::replace_file(
            &path,
            bytes,
            FileMeta {
                mode: 0o600,
                uid: unsafe { libc::geteuid() },
                gid: unsafe { libc::getegid() },
            },
        )
    }

    fn write_manifest(&self) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec_pretty(&self.manifest)
            .map_err(|e| StoreError::Backup(format!("cannot encode manifest: {e}")))?;
        atomic::replace_file(
            &self.dir.join(MANIFEST_NAME),
            &bytes,
            FileMeta {
                mode: 0o600,
                uid: unsafe { libc::geteuid() },
                gid: unsafe { libc::getegid() },
            },
        )
    }
}

/// Writes the backup copy number `index` of `path` into `dir` (mode 0600, never over an
/// existing file) and returns its manifest entry.
fn write_copy(
    dir: &Path,
    index: usize,
    path: &Path,
    original: &[u8],
    meta: FileMeta,
    new_sha256: Option<String>,
) -> Result<ManifestEntry, StoreError> {
    let base = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".into());
    let backup_file = format!("{index:06}-{base}");
    let copy = dir.join(&backup_file);
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&copy)
        .map_err(|e| StoreError::io(&copy, e))?;
    fault::point("backup-write");
    // A large file (containerd's meta.db, tens of MB) is hashed while it is being written.
    let (written, sha256_original) = if original.len() >= 1 << 20 {
        rayon::join(|| f.write_all(original), || sha256_hex(original))
    } else {
        (f.write_all(original), sha256_hex(original))
    };
    written.map_err(|e| StoreError::io(&copy, e))?;
    Ok(ManifestEntry {
        path: path.to_path_buf(),
        backup_file,
        mode: meta.mode,
        uid: meta.uid,
        gid: meta.gid,
        size: original.len() as u64,
        sha256_original,
        sha256_new: new_sha256,
    })
}

fn syncfs(d: &fs::File, dir: &Path) -> Result<(), StoreError> {
    use std::os::fd::AsRawFd;
    fault::point("backup-syncfs");
    // SAFETY: a valid fd for the duration of the call.
    let rc = unsafe { libc::syncfs(d.as_raw_fd()) };
    if rc != 0 {
        return Err(StoreError::io(dir, std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Reads and checks a backup directory's manifest.
pub fn read_manifest(dir: &Path) -> Result<Manifest, StoreError> {
    let path = dir.join(MANIFEST_NAME);
    let (bytes, _) = atomic::read_regular_nofollow(&path).map_err(|e| match e {
        StoreError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            StoreError::Backup(format!(
                "{} holds no {MANIFEST_NAME}: not a kubelet-rehash backup",
                dir.display()
            ))
        }
        other => other,
    })?;
    let manifest: Manifest = serde_json::from_slice(&bytes).map_err(|e| {
        StoreError::Backup(format!("{}: not a valid manifest: {e}", path.display()))
    })?;
    if manifest.format != FORMAT {
        return Err(StoreError::Backup(format!(
            "{}: manifest format {} is not supported (this build reads {FORMAT})",
            path.display(),
            manifest.format
        )));
    }
    Ok(manifest)
}

/// What one file's rollback did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RollbackAction {
    /// The file held the patched bytes and now holds the original again.
    Restored,
    /// The file already held the original bytes (nothing written).
    AlreadyOriginal,
}

#[derive(Debug, Clone, Serialize)]
pub struct RollbackReport {
    pub files: Vec<(PathBuf, RollbackAction)>,
}

/// Checks one manifest entry against its backup copy and the current file; returns the copy
/// and what to do.
fn check_entry(
    dir: &Path,
    entry: &ManifestEntry,
    accept_unknown_new: bool,
) -> Result<(Vec<u8>, RollbackAction), StoreError> {
    let copy_path = dir.join(&entry.backup_file);
    let (copy, _) = atomic::read_regular_nofollow(&copy_path)?;
    if sha256_hex(&copy) != entry.sha256_original {
        return Err(StoreError::Backup(format!(
            "backup copy {} does not match its recorded sha256: the backup is damaged; nothing was restored",
            copy_path.display()
        )));
    }
    let current = match atomic::read_regular_nofollow(&entry.path) {
        Ok((bytes, _)) => Some(sha256_hex(&bytes)),
        Err(StoreError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    let action = match (&current, &entry.sha256_new) {
        (Some(cur), _) if *cur == entry.sha256_original => RollbackAction::AlreadyOriginal,
        (Some(cur), Some(new)) if cur == new => RollbackAction::Restored,
        (Some(_), None) if accept_unknown_new => RollbackAction::Restored,
        (Some(cur), new) => {
            return Err(StoreError::RollbackConflict {
                path: entry.path.clone(),
                reason: format!(
                    "its sha256 is {cur}, the original was {}, the patch wrote {}",
                    entry.sha256_original,
                    new.as_deref().unwrap_or("(not recorded)")
                ),
            })
        }
        (None, _) => {
            return Err(StoreError::RollbackConflict {
                path: entry.path.clone(),
                reason: "the file no longer exists (was the container removed?)".into(),
            })
        }
    };
    Ok((copy, action))
}

/// Restores every file of the backup in `dir` byte for byte. Checks everything first and
/// restores nothing if any file matches neither side of the manifest (named in the error).
/// `accept_unknown_new`: restore a file whose new sha256 was never recorded (a crash between
/// a bolt commit and the manifest update) when it differs from the original.
///
/// The restore itself is one [`atomic::replace_many`]: every original is staged beside its
/// file, made durable by one `syncfs` per file system, and only then renamed back, so a crash
/// at any instant leaves each file holding its original or its patched bytes, and running
/// the rollback again finishes it.
pub fn rollback(dir: &Path, accept_unknown_new: bool) -> Result<RollbackReport, StoreError> {
    let manifest = read_manifest(dir)?;
    // Check every entry (in parallel: thousands of files are read and hashed), then report
    // the first problem in manifest order, as a one-by-one check would.
    let checked: Vec<Result<(Vec<u8>, RollbackAction), StoreError>> = atomic::on_io_threads(|| {
        manifest
            .entries
            .par_iter()
            .map(|entry| check_entry(dir, entry, accept_unknown_new))
            .collect()
    });
    let mut plan = Vec::with_capacity(checked.len());
    for (entry, c) in manifest.entries.iter().zip(checked) {
        let (copy, action) = c?;
        plan.push((entry, copy, action));
    }
    // One file listed twice must name the same original (the restore writes each path once).
    let mut restore: std::collections::HashMap<&Path, &ManifestEntry> = Default::default();
    for (entry, _, action) in &plan {
        if *action != RollbackAction::Restored {
            continue;
        }
        if let Some(prev) = restore.insert(&entry.path, entry) {
            if (prev.sha256_original.as_str(), prev.mode, prev.uid, prev.gid)
                != (
                    entry.sha256_original.as_str(),
                    entry.mode,
                    entry.uid,
                    entry.gid,
                )
            {
                return Err(StoreError::Backup(format!(
                    "{} lists {} twice with different originals ({} and {}); nothing was restored",
                    dir.join(MANIFEST_NAME).display(),
                    entry.path.display(),
                    prev.backup_file,
                    entry.backup_file
                )));
            }
        }
    }
    let mut seen = std::collections::HashSet::new();
    let reps: Vec<atomic::Replacement> = plan
        .iter()
        .filter(|(entry, _, action)| {
            *action == RollbackAction::Restored && seen.insert(entry.path.as_path())
        })
        .map(|(entry, copy, _)| atomic::Replacement {
            path: &entry.path,
            bytes: copy,
            meta: FileMeta {
                mode: entry.mode,
                uid: entry.uid,
                gid: entry.gid,
            },
        })
        .collect();
    atomic::replace_many(&reps)?;
    Ok(RollbackReport {
        files: plan
            .into_iter()
            .map(|(entry, _, action)| (entry.path.clone(), action))
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn meta_of(p: &Path) -> FileMeta {
        FileMeta::of(&fs::metadata(p).unwrap())
    }

    #[test]
    fn backup_then_rollback_restores_bytes_and_mode() {
        let store = tempfile::tempdir().unwrap();
        let f = store.path().join("a.json");
        fs::write(&f, b"original").unwrap();
        fs::set_permissions(&f, fs::Permissions::from_mode(0o640)).unwrap();
        let bdir = tempfile::tempdir().unwrap();
        let bpath = bdir.path().join("b");
        let mut b = Backup::create(&bpath, "docker", store.path()).unwrap();
        b.save(&f, b"original", meta_of(&f), Some(sha256_hex(b"patched")))
            .unwrap();
        b.commit().unwrap();
        assert_eq!(
            fs::metadata(&bpath).unwrap().mode() & 0o777,
            0o700,
            "backup dir is 0700"
        );
        let copy = bpath.join(&b.entries()[0].backup_file);
        assert_eq!(
            fs::metadata(&copy).unwrap().mode() & 0o777,
            0o600,
            "copy is 0600"
        );
        atomic::replace_file(&f, b"patched", meta_of(&f)).unwrap();
        b.finish().unwrap();

        let r = rollback(&bpath, false).unwrap();
        assert_eq!(r.files[0].1, RollbackAction::Restored);
        assert_eq!(fs::read(&f).unwrap(), b"original");
        assert_eq!(fs::metadata(&f).unwrap().mode() & 0o7777, 0o640);
        let again = rollback(&bpath, false).unwrap();
        assert_eq!(
            again.files[0].1,
            RollbackAction::AlreadyOriginal,
            "rollback is idempotent"
        );
    }

    #[test]
    fn rollback_refuses_a_file_changed_since() {
        let store = tempfile::tempdir().unwrap();
        let f = store.path().join("a.json");
        fs::write(&f, b"original").unwrap();
        let bpath = store.path().join("backup");
        let mut b = Backup::create(&bpath, "docker", store.path()).unwrap();
        b.save(&f, b"original", meta_of(&f), Some(sha256_hex(b"patched")))
            .unwrap();
        b.commit().unwrap();
        fs::write(&f, b"someone else").unwrap();
        let err = rollback(&bpath, false).unwrap_err();
        assert!(
            matches!(&err, StoreError::RollbackConflict { path, .. } if path == &f),
            "{err}"
        );
        assert_eq!(fs::read(&f).unwrap(), b"someone else", "nothing restored");
    }

    #[test]
    fn create_refuses_non_empty_and_world_writable_dirs() {
        let d = tempfile::tempdir().unwrap();
        fs::write(d.path().join("x"), b"").unwrap();
        let e = Backup::create(d.path(), "docker", Path::new("/")).unwrap_err();
        assert!(e.to_string().contains("not empty"), "{e}");
        let w = tempfile::tempdir().unwrap();
        fs::set_permissions(w.path(), fs::Permissions::from_mode(0o777)).unwrap();
        let e = Backup::create(w.path(), "docker", Path::new("/")).unwrap_err();
        assert!(e.to_string().contains("world-writable"), "{e}");
    }
}
