//! Backups taken before the first write, and byte-exact rollback from them.
//!
//! A backup directory holds a copy of every file a patch is about to replace and
//! `manifest.json`: per file its absolute path, mode, owner, size, the sha256 of the original
//! bytes and (once known) of the new bytes, and where its copy lies. Many small files (Docker's
//! `config.v2.json`, CRI-O's `config.json`) are copied into one pack file, each at a recorded
//! offset:
//! creating thousands of copies in one directory costs more than the whole patch (every
//! create takes the directory's lock and allocates an inode), a pack is one sequential write.
//! The manifest is written, and the copies made durable, before the store is touched, so a
//! crash at any point leaves a usable backup.
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

pub mod chunk_digest;
mod pages;
pub use pages::{undo_ranges, FileBytes, Original, PageUndo, PageUndoPlan};

/// The manifest's name inside a backup directory.
pub const MANIFEST_NAME: &str = "manifest.json";
/// Written by this build: 2 (copies may share a pack file, `offset` set). Format 1 (one file
/// per copy) is read too.
const FORMAT: u32 = 2;
/// Format 3: a bolt file may be backed up by page ([`PageUndo`]); written only then.
const READABLE_FORMATS: [u32; 3] = [1, 2, 3];

/// Lowercase hex sha256 of `bytes`, as the manifest records it.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// One backed-up file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ManifestEntry {
    /// Absolute path of the file in the store.
    pub path: PathBuf,
    /// Name of the file inside the backup directory that holds the copy.
    pub backup_file: String,
    /// Where the copy starts in `backup_file` when that is a pack of several copies (`size`
    /// bytes from here); absent when the file holds just this copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// Permission bits the file had (and gets back).
    pub mode: u32,
    /// Owner it had.
    pub uid: u32,
    /// Group it had.
    pub gid: u32,
    /// Length of the original, in bytes.
    pub size: u64,
    /// sha256 of the original bytes: what rollback restores and checks.
    pub sha256_original: String,
    /// sha256 of the bytes the patch writes; `None` until known (a bolt file's new bytes are
    /// only known after its transaction commits).
    pub sha256_new: Option<String>,
    /// The patch removed this file instead of rewriting it (a kubelet checkpoint the target
    /// kubelet would reject, set aside on the operator's request): rollback recreates it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub set_aside: bool,
    /// A bolt file backed up by page: `backup_file` holds the original bytes of these ranges
    /// only, `sha256_original` / `sha256_new` are over them (see [`PageUndo`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pages: Option<PageUndo>,
    /// Where the patch was about to write a file whose new bytes it can only know after the
    /// write (a bolt file copied whole: its commit), recorded before the first write. With
    /// `sha256_new` still unrecorded (a crash before the commit finished), `rollback
    /// --accept-unrecorded` restores the file only when it differs from the original at
    /// nothing but these places; without an intent it never restores an unrecorded file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intent: Option<WriteIntent>,
}

/// What a patch was about to write into one file ([`ManifestEntry::intent`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct WriteIntent {
    /// `[offset, length]` of every byte range the write may change (ranges past the
    /// original length are the file's growth).
    pub ranges: Vec<[u64; 2]>,
    /// The file's length once the write is done (never shorter than the original).
    pub size_after: u64,
}

impl WriteIntent {
    /// Whether `current` is `original` changed at nothing but the intent's ranges, perhaps
    /// grown (with zeros or written ranges) up to `size_after`: what a write interrupted at
    /// any point leaves, and nothing an unrelated change leaves.
    pub fn allows(&self, original: &[u8], current: &[u8]) -> bool {
        let (olen, clen) = (original.len() as u64, current.len() as u64);
        if clen < olen || clen > self.size_after.max(olen) {
            return false;
        }
        let mut ranges: Vec<(u64, u64)> = self
            .ranges
            .iter()
            .map(|[o, l]| (*o, o.saturating_add(*l)))
            .collect();
        ranges.sort_unstable();
        let mut at = 0u64;
        let unchanged = |from: u64, to: u64| {
            let (f, t) = (from.min(clen) as usize, to.min(clen) as usize);
            let kept = (f.min(olen as usize), t.min(olen as usize));
            current[kept.0..kept.1] == original[kept.0..kept.1]
                && current[kept.1.max(f)..t].iter().all(|b| *b == 0)
        };
        for (start, end) in ranges {
            if start > at && !unchanged(at, start) {
                return false;
            }
            at = at.max(end);
        }
        at >= clen || unchanged(at, clen)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
/// `manifest.json`: what a backup holds and how to check it before restoring.
pub struct Manifest {
    /// Manifest format (2 packs small copies; 1 is still read).
    pub format: u32,
    /// The kubelet-rehash version that wrote it.
    pub tool_version: String,
    /// The runtime whose store was backed up (`docker`, `containerd`, `crio`).
    pub runtime: String,
    /// The store root.
    pub store_root: PathBuf,
    /// Other directories of the same store whose files the backup holds (CRI-O's runroot):
    /// rollback restores files inside `store_root` or one of these, nowhere else.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_roots: Vec<PathBuf>,
    /// When the backup was made (seconds since the epoch).
    pub created_unix: u64,
    /// `prepared` before the store is written, `applied` after every write succeeded.
    pub state: String,
    /// One entry per backed-up file.
    pub entries: Vec<ManifestEntry>,
}

/// A backup being taken. Create it with [`Backup::create`], add files with [`Backup::save`],
/// then [`Backup::commit`] before writing the store and [`Backup::finish`] after.
#[derive(Debug)]
pub struct Backup {
    dir: PathBuf,
    /// The directories [`Backup::create`] made (deepest last) and the files written into the
    /// backup: removed again when the backup is dropped before its manifest was committed
    /// (a failed patch leaves no partial backup without a manifest behind).
    created_dirs: Vec<PathBuf>,
    created_files: Vec<PathBuf>,
    committed: bool,
    /// The backup directory, opened at creation: [`Backup::commit`]'s `syncfs` on it reports
    /// every writeback error of the copies (syncfs(2) reports errors since the open).
    dir_fd: fs::File,
    manifest: Manifest,
    bolt_full_copy: bool,
    /// What the backup's files are created, flushed and renamed through.
    storage: atomic::Backend,
}

/// One file for [`Backup::save_many`].
#[derive(Debug, Clone, Copy)]
pub struct SaveItem<'a> {
    /// Absolute path of the file in the store.
    pub path: &'a Path,
    /// Its current bytes, as the caller read them.
    pub original: &'a [u8],
    /// Its mode and owner.
    pub meta: FileMeta,
    /// The bytes that will replace it, when known (their sha256 goes into the manifest).
    pub new: Option<&'a [u8]>,
}

/// A pack file of a [`Backup`] being written ([`Backup::pack`]).
#[derive(Debug)]
pub struct Pack<'b> {
    backup: &'b mut Backup,
    name: String,
    out: Option<std::io::BufWriter<fs::File>>,
    offset: u64,
}

impl Pack<'_> {
    /// Appends the originals of `items` to the pack and their manifest entries (in `items`'
    /// order) to the backup; returns the sha256 of each item's new bytes, as the manifest
    /// records it (`None` where `new` is). On an error no entry of `items` is added.
    pub fn add(&mut self, items: &[SaveItem<'_>]) -> Result<Vec<Option<String>>, StoreError> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let path = self.backup.dir.join(&self.name);
        if self.out.is_none() {
            let f = create_private(&path, &self.backup.storage)?;
            self.backup.created_files.push(path.clone());
            fault::point("backup-write");
            self.out = Some(std::io::BufWriter::with_capacity(1 << 20, f));
        }
        let out = self.out.as_mut().expect("opened above");
        let (written, shas) = rayon::join(
            || -> Result<(), StoreError> {
                for it in items {
                    out.write_all(it.original)
                        .map_err(|e| StoreError::io(&path, e))?;
                }
                Ok(())
            },
            || -> Vec<(String, Option<String>)> {
                items
                    .par_iter()
                    .map(|it| (sha256_hex(it.original), it.new.map(sha256_hex)))
                    .collect()
            },
        );
        written?;
        let mut news = Vec::with_capacity(items.len());
        for (it, (sha256_original, sha256_new)) in items.iter().zip(shas) {
            self.backup.manifest.entries.push(ManifestEntry {
                path: it.path.to_path_buf(),
                backup_file: self.name.clone(),
                offset: Some(self.offset),
                mode: it.meta.mode,
                uid: it.meta.uid,
                gid: it.meta.gid,
                size: it.original.len() as u64,
                sha256_original,
                sha256_new: sha256_new.clone(),
                set_aside: false,
                pages: None,
                intent: None,
            });
            self.offset += it.original.len() as u64;
            news.push(sha256_new);
        }
        Ok(news)
    }

    /// Writes out what is buffered. The copies are made durable by [`Backup::commit`].
    pub fn close(mut self) -> Result<(), StoreError> {
        if let Some(mut out) = self.out.take() {
            let path = self.backup.dir.join(&self.name);
            out.flush().map_err(|e| StoreError::io(&path, e))?;
        }
        Ok(())
    }
}

fn is_world_writable(meta: &fs::Metadata) -> bool {
    meta.permissions().mode() & 0o002 != 0
}

impl Backup {
    /// Creates (mode 0700) or adopts an empty backup directory. Refuses a directory that
    /// already holds anything (a previous backup must never be overwritten), one that is
    /// world-writable, and a symlink.
    pub fn create(dir: &Path, runtime: &str, store_root: &Path) -> Result<Backup, StoreError> {
        let mut created_dirs = Vec::new();
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
                let mut missing: Vec<PathBuf> = dir
                    .ancestors()
                    .take_while(|d| !d.as_os_str().is_empty() && fs::symlink_metadata(d).is_err())
                    .map(Path::to_path_buf)
                    .collect();
                missing.reverse();
                atomic::create_dir_all_private(dir)?;
                created_dirs = missing;
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
            created_dirs,
            created_files: Vec::new(),
            committed: false,
            dir_fd,
            manifest: Manifest {
                format: FORMAT,
                tool_version: env!("CARGO_PKG_VERSION").to_string(),
                runtime: runtime.to_string(),
                store_root: store_root.to_path_buf(),
                other_roots: Vec::new(),
                created_unix,
                state: "prepared".into(),
                entries: Vec::new(),
            },
            bolt_full_copy: false,
            storage: atomic::Backend::posix(),
        })
    }

    /// The backup with its files written through `storage` (a test's crash simulation,
    /// `atomic::sim`) instead of the plain system calls.
    pub fn with_storage(mut self, storage: atomic::Backend) -> Backup {
        self.storage = storage;
        self
    }

    /// The backup directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The files backed up so far.
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
        let entry = self.write_copy(path, original, meta, new_sha256)?;
        self.manifest.entries.push(entry);
        Ok(())
    }

    /// [`Backup::save`] for many files at once: the copies go, one after the other, into one
    /// new pack file (mode 0600), while the sha256s of the originals and of the new bytes are
    /// computed on other threads. The manifest gets one entry per item, in `items`' order.
    /// On an error no entry is added (a partial pack stays in the directory, which is never
    /// committed then). The pack is made durable by [`Backup::commit`].
    pub fn save_many(&mut self, items: &[SaveItem<'_>]) -> Result<(), StoreError> {
        let mut pack = self.pack();
        pack.add(items)?;
        pack.close()
    }

    /// A pack file to fill a slice of files at a time ([`Pack::add`]): [`Backup::save_many`]
    /// for a caller that reads and edits thousands of files in waves and must not hold every
    /// original at once. The file is created by the first non-empty [`Pack::add`].
    pub fn pack(&mut self) -> Pack<'_> {
        Pack {
            name: format!("{:06}-originals.pack", self.manifest.entries.len()),
            backup: self,
            out: None,
            offset: 0,
        }
    }

    /// Copies a file the patch will remove (not rewrite) into the backup: rollback recreates
    /// it. Made durable by [`Backup::commit`], like every copy.
    pub fn save_set_aside(
        &mut self,
        path: &Path,
        original: &[u8],
        meta: FileMeta,
    ) -> Result<(), StoreError> {
        let mut entry = self.write_copy(path, original, meta, None)?;
        entry.set_aside = true;
        self.manifest.entries.push(entry);
        Ok(())
    }

    /// Records another directory of the store (CRI-O's runroot) whose files this backup
    /// holds, so rollback may restore them; call before saving them.
    pub fn add_root(&mut self, root: &Path) {
        if !self.manifest.other_roots.iter().any(|r| r == root) {
            self.manifest.other_roots.push(root.to_path_buf());
        }
    }

    /// Records the sha256 of what was written to `path`.
    pub fn set_new_sha256(&mut self, path: &Path, sha: String) {
        for e in &mut self.manifest.entries {
            if e.path == path {
                e.sha256_new = Some(sha.clone());
            }
        }
    }

    /// Records, before the write, where the patch will write `path` (backed up whole) when
    /// its new bytes are only known afterwards ([`ManifestEntry::intent`]).
    pub fn set_write_intent(&mut self, path: &Path, intent: WriteIntent) {
        for e in &mut self.manifest.entries {
            if e.path == path && e.pages.is_none() {
                e.intent = Some(intent.clone());
            }
        }
    }

    /// Makes every copy durable, then writes the manifest (state `prepared`) atomically.
    /// Call before the first write to the store.
    pub fn commit(&mut self) -> Result<(), StoreError> {
        // The manifest is staged before the flush: one syncfs makes the copies and it durable
        // together, and its rename needs only the directory's fsync after (one journal
        // commit fewer than a manifest written and fsynced on its own, inside the window).
        let staged = atomic::stage_file_with_nosync_on(
            &self.dir.join(MANIFEST_NAME),
            FileMeta::private(),
            &mut |w| self.write_manifest_to(w),
            &self.storage,
        )?;
        syncfs(&self.dir_fd, &self.dir, &self.storage)?;
        staged.commit()?;
        atomic::sync_dir_on(&self.dir, &self.storage)?;
        self.committed = true;
        Ok(())
    }

    /// Marks the backup `applied` after every store write succeeded.
    pub fn finish(&mut self) -> Result<(), StoreError> {
        self.manifest.state = "applied".into();
        self.write_manifest()
    }

    /// Writes an extra file (e.g. the patch report) into the backup directory, mode 0600.
    pub fn attach(&self, name: &str, bytes: &[u8]) -> Result<(), StoreError> {
        self.attach_with(name, &mut |w| w.write_all(bytes))
    }

    /// [`Backup::attach`] of the bytes `write` streams (a report of megabytes is not built in
    /// memory first).
    pub fn attach_with(
        &self,
        name: &str,
        write: &mut dyn FnMut(&mut dyn std::io::Write) -> std::io::Result<()>,
    ) -> Result<(), StoreError> {
        let path = self.dir.join(name);
        atomic::replace_file_with_on(&path, FileMeta::private(), write, &self.storage)
    }

    fn write_manifest(&self) -> Result<(), StoreError> {
        // Streamed: on a node of thousands of files the manifest is a megabyte, written twice.
        atomic::replace_file_with_on(
            &self.dir.join(MANIFEST_NAME),
            FileMeta::private(),
            &mut |w| self.write_manifest_to(w),
            &self.storage,
        )
    }

    /// The manifest's JSON, streamed to `w`.
    fn write_manifest_to(&self, w: &mut dyn std::io::Write) -> std::io::Result<()> {
        serde_json::to_writer_pretty(w, &self.manifest).map_err(std::io::Error::from)
    }
}

impl Backup {
    /// Creates the file of the next copy (number: the manifest's next entry) of `path`, named
    /// `<number>-<path's name><suffix>`, in the backup directory (mode 0600, never over an
    /// existing file; removed again if the backup is dropped uncommitted): its name, path and
    /// open file.
    pub(super) fn new_copy_file(
        &mut self,
        path: &Path,
        suffix: &str,
    ) -> Result<(String, PathBuf, fs::File), StoreError> {
        let index = self.manifest.entries.len();
        let base = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "file".into());
        let backup_file = format!("{index:06}-{base}{suffix}");
        let copy = self.dir.join(&backup_file);
        let f = create_private(&copy, &self.storage)?;
        self.created_files.push(copy.clone());
        Ok((backup_file, copy, f))
    }

    /// Writes the next backup copy (number: the manifest's next entry) of `path` into the
    /// backup directory (mode 0600, never over an existing file) and returns its manifest entry.
    fn write_copy(
        &mut self,
        path: &Path,
        original: &[u8],
        meta: FileMeta,
        new_sha256: Option<String>,
    ) -> Result<ManifestEntry, StoreError> {
        let (backup_file, copy, mut f) = self.new_copy_file(path, "")?;
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
            offset: None,
            mode: meta.mode,
            uid: meta.uid,
            gid: meta.gid,
            size: original.len() as u64,
            sha256_original,
            sha256_new: new_sha256,
            set_aside: false,
            pages: None,
            intent: None,
        })
    }
}

impl Drop for Backup {
    /// A backup whose manifest was never committed restores nothing (rollback refuses a
    /// directory without one) and its store was never written: its files, and the
    /// directories [`Backup::create`] made for it, are removed, so a failed patch (a full
    /// disk, a refusal after the copies) leaves no partial backup behind. Best effort: what
    /// cannot be removed stays, still without a manifest.
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        for f in &self.created_files {
            let _ = fs::remove_file(f);
        }
        for d in self.created_dirs.iter().rev() {
            if fs::remove_dir(d).is_err() {
                break;
            }
        }
    }
}

/// A new file for backup bytes: mode 0600, never over an existing file or through a symlink
/// ([`atomic::storage::Storage::create_new`]).
fn create_private(path: &Path, storage: &atomic::Backend) -> Result<fs::File, StoreError> {
    storage
        .create_new(path)
        .map_err(|e| StoreError::io(path, e))
}

fn syncfs(d: &fs::File, dir: &Path, storage: &atomic::Backend) -> Result<(), StoreError> {
    fault::point("backup-syncfs");
    storage.syncfs(d, dir).map_err(|e| StoreError::io(dir, e))
}

/// A backup is a trust boundary: rollback runs as root and writes what it says. Only a file
/// or directory that no one but its owner can write, owned by the invoking user or root, is
/// believed; anything else may have been swapped by another user ([`crate::trust`]).
fn ensure_trusted(path: &Path, uid: u32, mode: u32) -> Result<(), StoreError> {
    crate::trust::owner_and_mode(path, uid, mode)
        .map_err(|why| StoreError::Backup(format!("{why}; nothing was restored")))
}

/// Every directory above a backup directory must keep others from swapping it
/// ([`crate::trust::parents`]).
fn ensure_parents_trusted(dir: &Path) -> Result<(), StoreError> {
    crate::trust::parents(dir).map_err(|why| {
        StoreError::Backup(format!(
            "{why} (the backup directory {}); nothing was restored",
            dir.display()
        ))
    })
}

/// Reads and checks a backup directory's manifest: the directory and the manifest must be
/// trusted (owned by the caller or root, not writable by group or others, not a symbolic
/// link), so must every directory above it (none owned by another user, none writable by
/// others without the sticky bit), and every copy must be a plain name inside the directory.
pub fn read_manifest(dir: &Path) -> Result<Manifest, StoreError> {
    use std::os::unix::fs::MetadataExt;
    let dmeta = fs::symlink_metadata(dir).map_err(|e| StoreError::io(dir, e))?;
    if !dmeta.is_dir() {
        return Err(StoreError::Backup(format!(
            "{} is not a directory (a symbolic link is not followed)",
            dir.display()
        )));
    }
    ensure_trusted(dir, dmeta.uid(), dmeta.mode())?;
    ensure_parents_trusted(dir)?;
    let path = dir.join(MANIFEST_NAME);
    let (bytes, mmeta) = atomic::read_regular_nofollow(&path).map_err(|e| match e {
        StoreError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            StoreError::Backup(format!(
                "{} holds no {MANIFEST_NAME}: not a kubelet-rehash backup",
                dir.display()
            ))
        }
        other => other,
    })?;
    ensure_trusted(&path, mmeta.uid, mmeta.mode)?;
    let manifest: Manifest = serde_json::from_slice(&bytes).map_err(|e| {
        StoreError::Backup(format!("{}: not a valid manifest: {e}", path.display()))
    })?;
    if !READABLE_FORMATS.contains(&manifest.format) {
        return Err(StoreError::Backup(format!(
            "{}: manifest format {} is not supported (this build reads {READABLE_FORMATS:?})",
            path.display(),
            manifest.format
        )));
    }
    for e in &manifest.entries {
        // A copy's name is a plain name inside the backup directory, nothing else.
        let plain = !e.backup_file.is_empty()
            && !e.backup_file.contains('/')
            && e.backup_file != "."
            && e.backup_file != "..";
        if !plain {
            return Err(StoreError::Backup(format!(
                "{}: backup file name {:?} is not a plain name in the backup directory",
                path.display(),
                e.backup_file
            )));
        }
        if manifest.format < pages::PAGES_FORMAT && e.pages.is_some() {
            return Err(StoreError::Backup(format!(
                "{}: a format {} manifest cannot hold page backups",
                path.display(),
                manifest.format
            )));
        }
        if manifest.format == 1 && e.offset.is_some() {
            return Err(StoreError::Backup(format!(
                "{}: a format 1 manifest cannot place copies at offsets",
                path.display()
            )));
        }
    }
    Ok(manifest)
}

/// The pack files of a backup, opened once (regular files, never through a symlink), read
/// at the offsets the manifest gives.
struct Packs {
    files: std::collections::HashMap<String, (PathBuf, fs::File, u64)>,
}

impl Packs {
    fn open(dir: &Path, manifest: &Manifest) -> Result<Packs, StoreError> {
        let mut files = std::collections::HashMap::new();
        for e in manifest.entries.iter().filter(|e| e.offset.is_some()) {
            if files.contains_key(&e.backup_file) {
                continue;
            }
            let path = dir.join(&e.backup_file);
            let file = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&path)
                .map_err(|err| {
                    if err.raw_os_error() == Some(libc::ELOOP) {
                        StoreError::Backup(format!(
                            "{} is a symbolic link; the backup is damaged; nothing was restored",
                            path.display()
                        ))
                    } else {
                        StoreError::io(&path, err)
                    }
                })?;
            let meta = file.metadata().map_err(|err| StoreError::io(&path, err))?;
            if !meta.is_file() {
                return Err(StoreError::Backup(format!(
                    "{} is not a regular file; the backup is damaged; nothing was restored",
                    path.display()
                )));
            }
            {
                use std::os::unix::fs::MetadataExt;
                ensure_trusted(&path, meta.uid(), meta.mode())?;
            }
            files.insert(e.backup_file.clone(), (path, file, meta.len()));
        }
        Ok(Packs { files })
    }

    fn read(&self, name: &str, offset: u64, size: u64) -> Result<Vec<u8>, StoreError> {
        use std::os::unix::fs::FileExt;
        let (path, file, len) = &self.files[name];
        if offset.checked_add(size).is_none_or(|end| end > *len) {
            return Err(StoreError::Backup(format!(
                "{} holds {len} bytes, the manifest places a copy at {offset}..{offset}+{size}: the backup is damaged; nothing was restored",
                path.display()
            )));
        }
        let mut buf = vec![0u8; size as usize];
        file.read_exact_at(&mut buf, offset)
            .map_err(|e| StoreError::io(path, e))?;
        Ok(buf)
    }
}

/// What one file's rollback did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RollbackAction {
    /// The file held the patched bytes and now holds the original again.
    Restored,
    /// The file already held the original bytes (nothing written).
    AlreadyOriginal,
    /// A file the patch set aside (a kubelet checkpoint the target kubelet rejects) was back
    /// with other bytes: the kubelet started since wrote its own. Those bytes were kept in
    /// the backup at `kept` (durably, before anything was restored) and the original came
    /// back: the kubelet the rollback returns to reads its own checkpoint, not the newer
    /// kubelet's, and nothing is lost.
    RestoredOverNewer {
        /// Where the bytes the newer kubelet wrote are kept: `<backup>/written-since/<sha256>-<name>`.
        kept: PathBuf,
    },
}

/// The backup's subdirectory holding what a newer kubelet wrote in place of a set-aside file
/// ([`RollbackAction::RestoredOverNewer`]).
pub const WRITTEN_SINCE_DIR: &str = "written-since";

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
/// What [`rollback`] did, file by file.
pub struct RollbackReport {
    /// Every file of the manifest and what happened to it.
    pub files: Vec<(PathBuf, RollbackAction)>,
}

/// A manifest entry's checked backup copy, what to do with it, and the mode and owner it gets.
type CheckedEntry = (Vec<u8>, RollbackAction, FileMeta);

/// Checks one manifest entry against its backup copy and the current file; returns the copy
/// and what to do.
fn check_entry(
    dir: &Path,
    packs: &Packs,
    entry: &ManifestEntry,
    accept_unknown_new: bool,
) -> Result<CheckedEntry, StoreError> {
    if let Some(p) = &entry.pages {
        return pages::check_entry(dir, entry, p, accept_unknown_new);
    }
    let copy_path = dir.join(&entry.backup_file);
    let (copy, what) = match entry.offset {
        None => {
            let (bytes, meta) = atomic::read_regular_nofollow(&copy_path)?;
            ensure_trusted(&copy_path, meta.uid, meta.mode)?;
            (bytes, format!("backup copy {}", copy_path.display()))
        }
        Some(offset) => (
            packs.read(&entry.backup_file, offset, entry.size)?,
            format!(
                "backup copy of {} in {} at offset {offset}",
                entry.path.display(),
                copy_path.display()
            ),
        ),
    };
    if copy.len() as u64 != entry.size || sha256_hex(&copy) != entry.sha256_original {
        return Err(StoreError::Backup(format!(
            "{what} does not match its recorded size and sha256: the backup is damaged; nothing was restored"
        )));
    }
    let (current_bytes, current_meta) = match atomic::read_regular_nofollow(&entry.path) {
        Ok((bytes, meta)) => (Some(bytes), Some(meta)),
        Err(StoreError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            (None, None)
        }
        Err(e) => return Err(e),
    };
    let current = current_bytes.as_deref().map(sha256_hex);
    // `--accept-unrecorded` restores an unrecorded file only when it holds what the patch was
    // about to write (its intent) over the original: never a file someone else changed.
    let intended = || {
        !entry.set_aside
            && entry
                .intent
                .as_ref()
                .zip(current_bytes.as_deref())
                .is_some_and(|(i, cur)| i.allows(&copy, cur))
    };
    let action = match (&current, &entry.sha256_new) {
        (Some(cur), _) if *cur == entry.sha256_original => RollbackAction::AlreadyOriginal,
        // A file the patch removed and something wrote since (the new kubelet's own
        // checkpoint): kept in the backup, then ours comes back (restore() keeps it first).
        (Some(cur), _) if entry.set_aside => RollbackAction::RestoredOverNewer {
            kept: kept_path(dir, &entry.path, cur),
        },
        (Some(cur), Some(new)) if cur == new => RollbackAction::Restored,
        (Some(_), None) if accept_unknown_new && intended() => RollbackAction::Restored,
        (Some(cur), new) => {
            return Err(StoreError::RollbackConflict {
                path: entry.path.clone(),
                reason: format!(
                    "its sha256 is {cur}, the original was {}, the patch wrote {}{}",
                    entry.sha256_original,
                    new.as_deref().unwrap_or("(not recorded)"),
                    match (new, accept_unknown_new, &entry.intent) {
                        (None, true, None) => "; the backup records no write the patch was about to make there, so --accept-unrecorded cannot restore it",
                        (None, true, Some(_)) => "; it differs from the original outside the places the patch was about to write, so it is not what that patch left and --accept-unrecorded does not restore it",
                        _ => "",
                    }
                ),
            })
        }
        // A file the patch set aside comes back.
        (None, _) if entry.set_aside => RollbackAction::Restored,
        (None, _) => {
            return Err(StoreError::RollbackConflict {
                path: entry.path.clone(),
                reason: "the file no longer exists (was the container removed?)".into(),
            })
        }
    };
    Ok((copy, action, restored_meta(entry, current_meta)))
}

/// The mode and owner a restored file gets. The manifest's only when the file is still owned
/// by the owner the manifest records (a forged manifest cannot hand a file to another user),
/// and never with setuid/setgid (a forged one cannot make a set-id binary); otherwise the
/// file keeps its current mode and owner. A file that is gone (a set-aside checkpoint) comes
/// back owned by the invoking user, with the manifest's permission bits.
fn restored_meta(entry: &ManifestEntry, current: Option<FileMeta>) -> FileMeta {
    const NO_SET_ID: u32 = !0o6000;
    match current {
        Some(cur) if cur.uid == entry.uid => FileMeta {
            mode: entry.mode & NO_SET_ID,
            uid: entry.uid,
            gid: entry.gid,
        },
        Some(cur) => FileMeta {
            mode: cur.mode & NO_SET_ID,
            ..cur
        },
        None => {
            let me = FileMeta::private();
            FileMeta {
                mode: entry.mode & 0o777,
                gid: if entry.uid == me.uid {
                    entry.gid
                } else {
                    me.gid
                },
                ..me
            }
        }
    }
}

/// A path of the manifest, for the checks below: absolute, and nothing but plain names.
fn plain_absolute(p: &Path) -> bool {
    use std::path::Component;
    let mut c = p.components();
    c.next() == Some(Component::RootDir) && c.all(|c| matches!(c, Component::Normal(_)))
}

/// Refuses a directory symlink (or a non-directory) anywhere from `base` (exclusive) down to
/// the parent of `file`: a restore must not be redirected out of where the manifest says.
fn no_symlink_below(base: &Path, file: &Path) -> Result<(), StoreError> {
    let Ok(rel) = file.strip_prefix(base) else {
        return Ok(());
    };
    let mut cur = base.to_path_buf();
    let comps: Vec<_> = rel.components().collect();
    for c in comps.iter().take(comps.len().saturating_sub(1)) {
        cur.push(c);
        match fs::symlink_metadata(&cur) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(StoreError::Backup(format!(
                    "{} is on the way to {} and is a symbolic link or not a directory; nothing was restored",
                    cur.display(),
                    file.display()
                )))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(StoreError::io(&cur, e)),
        }
    }
    Ok(())
}

/// Every path a rollback writes must be a file inside the store root the manifest records
/// (no `..`, no symlink below the root), or, for a file the patch set aside, end in one of
/// `set_aside_paths` (relative paths the caller knows, e.g. the kubelet's checkpoint files).
fn check_restore_path(
    manifest: &Manifest,
    entry: &ManifestEntry,
    set_aside_paths: &[&str],
) -> Result<(), StoreError> {
    // A root given relative (`--root ./var/lib/docker`) is recorded, with its files, as given.
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let root = &abs(&manifest.store_root);
    let others: Vec<PathBuf> = manifest.other_roots.iter().map(|r| abs(r)).collect();
    let path = abs(&entry.path);
    let refuse = |why: &str| {
        Err(StoreError::Backup(format!(
            "the manifest names {} ({why}): the backup is not trusted; nothing was restored",
            entry.path.display()
        )))
    };
    if !plain_absolute(root) {
        return Err(StoreError::Backup(format!(
            "the manifest's store root {} is not an absolute path of plain names; nothing was restored",
            root.display()
        )));
    }
    if !plain_absolute(&path) {
        return refuse("not an absolute path of plain names");
    }
    for root in std::iter::once(root).chain(&others) {
        if !plain_absolute(root) {
            return Err(StoreError::Backup(format!(
                "the manifest's store directory {} is not an absolute path of plain names; nothing was restored",
                root.display()
            )));
        }
        if path.starts_with(root) && path != *root {
            return no_symlink_below(root, &path);
        }
    }
    if entry.set_aside {
        if let Some(rel) = set_aside_paths
            .iter()
            .find(|rel| path.ends_with(Path::new(rel)))
        {
            let base: PathBuf = {
                let n = Path::new(rel).components().count();
                let all: Vec<_> = path.components().collect();
                all[..all.len() - n].iter().collect()
            };
            return no_symlink_below(&base, &path);
        }
        return refuse("a set-aside file that is none of the files a patch sets aside");
    }
    refuse(&format!("outside the store root {}", root.display()))
}

/// Where [`restore`] keeps the bytes (sha256 `sha`) a newer kubelet wrote at a set-aside
/// `path`: named by content, so a rerun finds the same name.
fn kept_path(dir: &Path, path: &Path, sha: &str) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    dir.join(WRITTEN_SINCE_DIR).join(format!("{sha}-{name}"))
}

/// Copies the file at `path` to `kept` (private, synced, atomic) after checking it still has
/// the sha256 `kept`'s name records (nothing may change it between the check and the copy:
/// the kubelet is stopped).
fn keep_newer(path: &Path, kept: &Path) -> Result<(), StoreError> {
    let (bytes, _) = atomic::read_regular_nofollow(path)?;
    let sha = sha256_hex(&bytes);
    let named = kept
        .file_name()
        .map(|n| n.to_string_lossy().starts_with(&format!("{sha}-")))
        .unwrap_or(false);
    if !named {
        return Err(StoreError::Backup(format!(
            "{} changed while the rollback ran (is the kubelet running?); nothing was restored",
            path.display()
        )));
    }
    let parent = kept.parent().expect("kept_path has a parent");
    if !parent.is_dir() {
        atomic::create_dir_all_private(parent)?;
        if let Some(backup) = parent.parent() {
            atomic::sync_dir(backup)?;
        }
    }
    atomic::replace_file(kept, &bytes, FileMeta::private())
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
///
/// Only files inside the manifest's store root are restored (a set-aside file outside it
/// only through [`rollback_allowing`]); mode and owner come back only when the current
/// file's owner is the recorded one, and setuid/setgid bits never.
pub fn rollback(dir: &Path, accept_unknown_new: bool) -> Result<RollbackReport, StoreError> {
    rollback_allowing(dir, accept_unknown_new, &[])
}

/// [`rollback`], also restoring the set-aside files outside the store root whose paths end in
/// one of `set_aside_paths` (the caller's list of files a patch may set aside).
pub fn rollback_allowing(
    dir: &Path,
    accept_unknown_new: bool,
    set_aside_paths: &[&str],
) -> Result<RollbackReport, StoreError> {
    restore(dir, accept_unknown_new, |_| true, set_aside_paths)
}

/// [`rollback`] of only the files the patch set aside (for a value rollback, which undoes the
/// store's values itself but must still give the set-aside files back), as far as their paths
/// end in one of `set_aside_paths`.
pub fn restore_set_aside(
    dir: &Path,
    set_aside_paths: &[&str],
) -> Result<RollbackReport, StoreError> {
    restore(dir, false, |e| e.set_aside, set_aside_paths)
}

/// [`rollback`] of only the files at `paths` (files a patch rewrote beside the store, such as
/// the static pod manifests it pinned, which a value rollback must still give back byte for
/// byte). The files must lie inside the manifest's roots, as for every restore.
pub fn restore_paths(dir: &Path, paths: &[PathBuf]) -> Result<RollbackReport, StoreError> {
    restore(dir, false, |e| paths.contains(&e.path), &[])
}

/// Whether every file of the backup in `dir` still holds its original bytes (a patch that
/// failed before its first write changed nothing); `false` when any differs, is gone or
/// cannot be checked.
pub fn all_original(dir: &Path) -> Result<bool, StoreError> {
    let manifest = read_manifest(dir)?;
    let packs = Packs::open(dir, &manifest)?;
    Ok(manifest.entries.iter().all(|entry| {
        matches!(
            check_entry(dir, &packs, entry, true),
            Ok((_, RollbackAction::AlreadyOriginal, _))
        )
    }))
}

fn restore(
    dir: &Path,
    accept_unknown_new: bool,
    wanted: impl Fn(&ManifestEntry) -> bool,
    set_aside_paths: &[&str],
) -> Result<RollbackReport, StoreError> {
    let mut manifest = read_manifest(dir)?;
    manifest.entries.retain(|e| wanted(e));
    for entry in &manifest.entries {
        check_restore_path(&manifest, entry, set_aside_paths)?;
    }
    let packs = Packs::open(dir, &manifest)?;
    // Check every entry (in parallel: thousands of files are read and hashed), then report
    // the first problem in manifest order, as a one-by-one check would.
    let checked: Vec<Result<CheckedEntry, StoreError>> = atomic::on_io_threads(|| {
        manifest
            .entries
            .par_iter()
            .map(|entry| check_entry(dir, &packs, entry, accept_unknown_new))
            .collect()
    });
    let mut plan = Vec::with_capacity(checked.len());
    for (entry, c) in manifest.entries.iter().zip(checked) {
        let (copy, action, meta) = c?;
        plan.push((entry, copy, action, meta));
    }
    // One file listed twice must name the same original (the restore writes each path once).
    let mut restore: std::collections::HashMap<&Path, &ManifestEntry> = Default::default();
    for (entry, _, action, _) in &plan {
        if *action == RollbackAction::AlreadyOriginal {
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
    // What a newer kubelet wrote in place of a set-aside file is kept, durably, before the
    // original replaces it: a crash in between leaves it in both places, and a rerun keeps
    // it again under the same name (its sha256).
    for (entry, _, action, _) in &plan {
        if let RollbackAction::RestoredOverNewer { kept } = action {
            keep_newer(&entry.path, kept)?;
        }
    }
    let mut seen = std::collections::HashSet::new();
    let reps: Vec<atomic::Replacement> = plan
        .iter()
        .filter(|(entry, _, action, _)| {
            matches!(
                action,
                RollbackAction::Restored | RollbackAction::RestoredOverNewer { .. }
            ) && seen.insert(entry.path.as_path())
        })
        .map(|(entry, copy, _, meta)| atomic::Replacement {
            path: &entry.path,
            bytes: copy,
            meta: *meta,
        })
        .collect();
    atomic::replace_many(&reps)?;
    Ok(RollbackReport {
        files: plan
            .into_iter()
            .map(|(entry, _, action, _)| (entry.path.clone(), action))
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

    /// A store of one file `a.json` ("original", `mode`), backed up with `save` into
    /// `<store>/backup` and committed: (store, file, backup dir, backup).
    fn single(mode: u32) -> (tempfile::TempDir, PathBuf, PathBuf, Backup) {
        let store = tempfile::tempdir().unwrap();
        let f = store.path().join("a.json");
        fs::write(&f, b"original").unwrap();
        fs::set_permissions(&f, fs::Permissions::from_mode(mode)).unwrap();
        let bpath = store.path().join("backup");
        let mut b = Backup::create(&bpath, "docker", store.path()).unwrap();
        b.save(&f, b"original", meta_of(&f), Some(sha256_hex(b"patched")))
            .unwrap();
        b.commit().unwrap();
        (store, f, bpath, b)
    }

    #[test]
    fn backup_then_rollback_restores_bytes_and_mode() {
        let (_store, f, bpath, mut b) = single(0o640);
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
        let (_store, f, bpath, _b) = single(0o644);
        fs::write(&f, b"someone else").unwrap();
        let err = rollback(&bpath, false).unwrap_err();
        assert!(
            matches!(&err, StoreError::RollbackConflict { path, .. } if path == &f),
            "{err}"
        );
        assert_eq!(fs::read(&f).unwrap(), b"someone else", "nothing restored");
    }

    /// (path, original bytes, patched bytes)
    type StoreFile = (PathBuf, Vec<u8>, Vec<u8>);

    /// A store of `n` small files, backed up with `save_many` and then patched.
    fn packed(n: usize) -> (tempfile::TempDir, PathBuf, Vec<StoreFile>) {
        let store = tempfile::tempdir().unwrap();
        let files: Vec<StoreFile> = (0..n)
            .map(|i| {
                let f = store.path().join(format!("c{i}.json"));
                // sizes 0.. so that empty copies and neighbours sharing bytes are covered
                let original = format!("{{\"i\":{i}}}").repeat(i % 5).into_bytes();
                fs::write(&f, &original).unwrap();
                (f, original, format!("patched {i}").into_bytes())
            })
            .collect();
        let bpath = store.path().join("backup");
        let mut b = Backup::create(&bpath, "docker", store.path()).unwrap();
        let metas: Vec<FileMeta> = files.iter().map(|(f, ..)| meta_of(f)).collect();
        let items: Vec<SaveItem> = files
            .iter()
            .zip(&metas)
            .map(|((f, o, n), m)| SaveItem {
                path: f,
                original: o,
                meta: *m,
                new: Some(n),
            })
            .collect();
        b.save_many(&items).unwrap();
        b.commit().unwrap();
        for (f, _, new) in &files {
            atomic::replace_file(f, new, meta_of(f)).unwrap();
        }
        b.finish().unwrap();
        (store, bpath, files)
    }

    fn pack_of(bpath: &Path) -> PathBuf {
        let m = read_manifest(bpath).unwrap();
        assert!(m.entries.iter().all(|e| e.offset.is_some()));
        bpath.join(&m.entries[0].backup_file)
    }

    #[test]
    fn many_copies_share_one_pack_and_restore_exactly() {
        let (_s, bpath, files) = packed(50);
        let names: Vec<String> = fs::read_dir(&bpath)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 2, "one pack and the manifest: {names:?}");
        let pack = pack_of(&bpath);
        assert_eq!(
            fs::metadata(&pack).unwrap().mode() & 0o777,
            0o600,
            "pack is 0600"
        );
        let total: usize = files.iter().map(|f| f.1.len()).sum();
        assert_eq!(fs::metadata(&pack).unwrap().len() as usize, total);
        let r = rollback(&bpath, false).unwrap();
        assert!(r.files.iter().all(|f| f.1 == RollbackAction::Restored));
        for (f, original, _) in &files {
            assert_eq!(&fs::read(f).unwrap(), original, "{} restored", f.display());
        }
        let again = rollback(&bpath, false).unwrap();
        assert!(
            again
                .files
                .iter()
                .all(|f| f.1 == RollbackAction::AlreadyOriginal),
            "rollback is idempotent"
        );
    }

    fn assert_refused_untouched(bpath: &Path, files: &[(PathBuf, Vec<u8>, Vec<u8>)], want: &str) {
        let e = rollback(bpath, false).unwrap_err().to_string();
        assert!(e.contains(want), "error {e:?} should say {want:?}");
        for (f, _, new) in files {
            assert_eq!(&fs::read(f).unwrap(), new, "nothing restored: {e}");
        }
    }

    #[test]
    fn damaged_truncated_or_symlinked_pack_restores_nothing() {
        let (_s, bpath, files) = packed(20);
        let pack = pack_of(&bpath);
        let good = fs::read(&pack).unwrap();

        let mut flipped = good.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 0x20;
        fs::write(&pack, &flipped).unwrap();
        assert_refused_untouched(&bpath, &files, "the backup is damaged");

        fs::write(&pack, &good[..good.len() - 1]).unwrap();
        assert_refused_untouched(&bpath, &files, "the backup is damaged");

        let elsewhere = bpath.parent().unwrap().join("elsewhere.pack");
        fs::write(&elsewhere, &good).unwrap();
        fs::remove_file(&pack).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &pack).unwrap();
        assert_refused_untouched(&bpath, &files, "symbolic link");

        fs::remove_file(&pack).unwrap();
        fs::write(&pack, &good).unwrap();
        assert_eq!(rollback(&bpath, false).unwrap().files.len(), files.len());
    }

    #[test]
    fn manifest_naming_a_file_outside_the_backup_is_refused() {
        let (_s, bpath, files) = packed(3);
        let mpath = bpath.join(MANIFEST_NAME);
        let mut m: serde_json::Value = serde_json::from_slice(&fs::read(&mpath).unwrap()).unwrap();
        m["entries"][1]["backup_file"] = "../elsewhere.pack".into();
        fs::write(&mpath, serde_json::to_vec(&m).unwrap()).unwrap();
        assert_refused_untouched(&bpath, &files, "not a plain name");
    }

    #[test]
    fn format_1_backups_one_file_per_copy_still_roll_back() {
        let (_store, f, bpath, mut b) = single(0o644);
        atomic::replace_file(&f, b"patched", meta_of(&f)).unwrap();
        b.finish().unwrap();
        let mpath = bpath.join(MANIFEST_NAME);
        let mut m: serde_json::Value = serde_json::from_slice(&fs::read(&mpath).unwrap()).unwrap();
        assert_eq!(m["format"], 2);
        assert!(
            m["entries"][0].get("offset").is_none(),
            "a single copy has no offset"
        );
        m["format"] = 1.into();
        fs::write(&mpath, serde_json::to_vec(&m).unwrap()).unwrap();
        rollback(&bpath, false).unwrap();
        assert_eq!(fs::read(&f).unwrap(), b"original");

        m["entries"][0]["offset"] = 0.into();
        fs::write(&mpath, serde_json::to_vec(&m).unwrap()).unwrap();
        let e = rollback(&bpath, false).unwrap_err().to_string();
        assert!(e.contains("format 1"), "{e}");
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

    #[test]
    fn a_write_intent_allows_only_changes_at_its_ranges() {
        let original = vec![7u8; 100];
        let i = WriteIntent {
            ranges: vec![[10, 10], [90, 30]],
            size_after: 120,
        };
        let mut cur = original.clone();
        assert!(i.allows(&original, &cur), "untouched");
        cur[12] = 1;
        cur[95] = 2;
        assert!(i.allows(&original, &cur), "changed inside the ranges");
        cur.resize(110, 0);
        assert!(i.allows(&original, &cur), "grown with zeros");
        cur[105] = 3;
        assert!(i.allows(&original, &cur), "grown with written bytes");
        let mut out = cur.clone();
        out[50] = 9;
        assert!(
            !i.allows(&original, &out),
            "a byte outside every range changed"
        );
        let mut long = cur.clone();
        long.resize(121, 0);
        assert!(!i.allows(&original, &long), "longer than the intent says");
        assert!(
            !i.allows(&original, &original[..99]),
            "shorter than the original"
        );
        let gap = WriteIntent {
            ranges: vec![[0, 10]],
            size_after: 120,
        };
        let mut grown = original.clone();
        grown.resize(110, 0);
        assert!(gap.allows(&original, &grown), "zeros past the end");
        grown[105] = 1;
        assert!(
            !gap.allows(&original, &grown),
            "a written byte past the end, outside"
        );
    }

    /// `accept_unknown_new` restores an unrecorded file only when the backup recorded what
    /// the patch was about to write there and the file differs from the original only there.
    #[test]
    fn accept_unrecorded_needs_an_intent_and_a_file_it_explains() {
        let store = tempfile::tempdir().unwrap();
        let f = store.path().join("meta.db");
        let original = vec![1u8; 64];
        fs::write(&f, &original).unwrap();
        let bpath = store.path().join("backup");
        let mut b = Backup::create(&bpath, "containerd", store.path()).unwrap();
        b.save(&f, &original, meta_of(&f), None).unwrap();
        b.commit().unwrap();
        let mut inside = original.clone();
        inside[40..48].fill(9);
        fs::write(&f, &inside).unwrap();
        let err = rollback(&bpath, true).unwrap_err();
        assert!(
            err.to_string().contains("records no write"),
            "no intent: never restored: {err}"
        );
        assert_eq!(fs::read(&f).unwrap(), inside);
        b.set_write_intent(
            &f,
            WriteIntent {
                ranges: vec![[32, 64]],
                size_after: 96,
            },
        );
        b.commit().unwrap();
        let mut outside = inside.clone();
        outside[0] = 0;
        fs::write(&f, &outside).unwrap();
        let err = rollback(&bpath, true).unwrap_err();
        assert!(
            matches!(&err, StoreError::RollbackConflict { .. })
                && err.to_string().contains("outside the places"),
            "changed outside the intent: {err}"
        );
        assert_eq!(fs::read(&f).unwrap(), outside, "nothing restored");
        assert!(
            rollback(&bpath, false).is_err(),
            "without the flag: refused"
        );
        let mut grown = inside.clone();
        grown.extend_from_slice(&[5u8; 32]);
        fs::write(&f, &grown).unwrap();
        let r = rollback(&bpath, true).unwrap();
        assert_eq!(r.files[0].1, RollbackAction::Restored);
        assert_eq!(
            fs::read(&f).unwrap(),
            original,
            "the intended writes undone"
        );
    }

    /// A backup dropped before its manifest was committed (a failed patch) leaves nothing:
    /// not its copies, not the directories it created; one committed stays whole.
    #[test]
    fn an_uncommitted_backup_removes_what_it_created() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("a.json");
        fs::write(&f, b"x").unwrap();
        let bpath = d.path().join("made/for/it");
        let mut b = Backup::create(&bpath, "docker", d.path()).unwrap();
        b.save(&f, b"x", meta_of(&f), None).unwrap();
        b.save_many(&[SaveItem {
            path: &f,
            original: b"x",
            meta: meta_of(&f),
            new: None,
        }])
        .unwrap();
        assert_eq!(fs::read_dir(&bpath).unwrap().count(), 2);
        drop(b);
        assert!(!d.path().join("made").exists(), "every created dir removed");
        // an operator's empty dir is adopted, emptied again, kept
        let own = d.path().join("own");
        fs::create_dir(&own).unwrap();
        let mut b = Backup::create(&own, "docker", d.path()).unwrap();
        b.save(&f, b"x", meta_of(&f), None).unwrap();
        drop(b);
        assert_eq!(fs::read_dir(&own).unwrap().count(), 0, "emptied, kept");
        let mut b = Backup::create(&own, "docker", d.path()).unwrap();
        b.save(&f, b"x", meta_of(&f), None).unwrap();
        b.commit().unwrap();
        drop(b);
        assert!(
            own.join(MANIFEST_NAME).is_file(),
            "a committed backup stays"
        );
        assert_eq!(fs::read_dir(&own).unwrap().count(), 2);
    }
}
