//! Page-level undo backups of a bolt file (containerd's meta.db), manifest format 3.
//!
//! A bbolt transaction never changes a page that the tree it started from still uses: it
//! appends pages after the high-water mark, reuses free pages and writes one of the two meta
//! pages. So the original file is its current bytes with the pages the transaction
//! overwrote put back and the appended tail cut off. Copying those pages (a few hundred KB
//! for 2,000 rewritten containers) instead of the whole file (tens of MB) is the default;
//! the whole-file copy stays available ([`Backup::set_bolt_full_copy`]).
//!
//! The undo file holds the original bytes of every overwritten range, one after the other;
//! its manifest entry carries the ranges ([`PageUndo`]), the original length (`size`), the
//! sha256 of the undo file (`sha256_original`) and, once the commit is durable, the sha256 of
//! the same ranges as the patch left them (`sha256_new`) and the length after. Both meta pages
//! are always among the ranges: every bbolt commit (containerd's too) writes a meta page, so
//! "the ranges hold the patch's bytes" also proves nobody committed after the patch.
//!
//! Rollback rebuilds the original file in memory from the current one and the undo bytes and
//! puts it in place with the same atomic replace as every other restored file, so a crash
//! during the rollback leaves the patched or the original file and a rerun finishes it.

use super::{ensure_trusted, sha256_hex, Backup, CheckedEntry, ManifestEntry, RollbackAction};
use crate::atomic::{self, FileMeta};
use crate::error::StoreError;
use crate::fault;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::Path;

/// The manifest format a backup with page undo entries is written in (older builds must
/// refuse it rather than take the undo file for a whole copy).
pub(super) const PAGES_FORMAT: u32 = 3;

/// How a bolt file was backed up by page: what its manifest entry adds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PageUndo {
    /// Page size of the bolt file.
    pub page_size: u64,
    /// `[offset, length]` of every byte range of the file the transaction overwrites, in
    /// file order, not overlapping, all inside the original length; the first one is the two
    /// meta pages. The undo file holds their original bytes in this order.
    pub ranges: Vec<[u64; 2]>,
    /// Ranges it overwrites whose original bytes are all zero (typically the pages between
    /// the high-water mark and the end of a file bbolt grew in chunks): not in the undo file,
    /// rollback writes zeros there. Never overlapping `ranges`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zero_ranges: Vec<[u64; 2]>,
    /// Offset of the meta page the transaction writes (the other one it leaves alone).
    pub new_meta_offset: u64,
    /// sha256 of the meta page the transaction writes there: with it, a rollback after a
    /// crash mid-commit can tell the patch's own writes from a later commit by someone else.
    pub new_meta_sha256: String,
    /// File length after the commit, recorded with the entry's `sha256_new`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_after: Option<u64>,
    /// sha256 of the whole file after the commit. The undo ranges only cover what the patch
    /// wrote: a containerd that ran since may have written pages outside them without
    /// committing (seen on a real containerd 1.6.20: a freelist page over a page the patch had
    /// freed, which the original tree still uses), and writing the ranges back over such a
    /// file gives a broken tree. With this recorded, the byte rollback of a finished patch
    /// applies only to exactly the file the patch left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256_after_file: Option<String>,
    /// The same fingerprint of the whole file after the commit, as a
    /// [`chunk_digest`](super::chunk_digest) (what patches record since; a backup has this
    /// or `sha256_after_file`, and rollback checks whichever it has).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest_after_file: Option<String>,
}

/// The ranges a transaction overwrites in a file of `file_len` bytes: both meta pages and
/// every `(offset, length)` write, clipped to the file (bytes appended past its end are cut
/// off by the rollback instead), merged where they touch.
pub fn undo_ranges(
    file_len: u64,
    page_size: u64,
    writes: impl IntoIterator<Item = (u64, u64)>,
) -> Vec<[u64; 2]> {
    let mut spans: Vec<(u64, u64)> = std::iter::once((0, 2 * page_size))
        .chain(writes)
        .filter_map(|(off, len)| {
            let end = off.saturating_add(len).min(file_len);
            (off < end).then_some((off, end))
        })
        .collect();
    spans.sort_unstable();
    let meta_end = (2 * page_size).min(file_len);
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(spans.len());
    for (s, e) in spans {
        match merged.last_mut() {
            // The meta pages stay a range of their own (the undo checks that shape): a write
            // of page 2, right after them, starts the next range instead of widening this one.
            Some((0, le)) if *le == meta_end && s >= meta_end => merged.push((s, e)),
            Some((_, le)) if s <= *le => *le = (*le).max(e),
            _ => merged.push((s, e)),
        }
    }
    merged.into_iter().map(|(s, e)| [s, e - s]).collect()
}

fn bytes_at(data: &[u8], [off, len]: [u64; 2]) -> Option<&[u8]> {
    data.get(usize::try_from(off).ok()?..usize::try_from(off.checked_add(len)?).ok()?)
}

/// The current bytes of a file [`Backup::save_pages`] backs up pages of.
pub trait Original {
    /// Its length.
    fn size(&self) -> u64;
    /// Fills `buf` with its bytes at `off` (inside [`Original::size`]).
    fn read(&self, off: u64, buf: &mut [u8]) -> std::io::Result<()>;
}

impl Original for Vec<u8> {
    fn size(&self) -> u64 {
        self.len() as u64
    }
    fn read(&self, off: u64, buf: &mut [u8]) -> std::io::Result<()> {
        let off = off as usize;
        buf.copy_from_slice(&self[off..off + buf.len()]);
        Ok(())
    }
}

/// The first `len` bytes of an open file, read with `pread`.
pub struct FileBytes<'a> {
    /// The file.
    pub file: &'a std::fs::File,
    /// How much of it.
    pub len: u64,
}

impl Original for FileBytes<'_> {
    fn size(&self) -> u64 {
        self.len
    }
    fn read(&self, off: u64, buf: &mut [u8]) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        self.file.read_exact_at(buf, off)
    }
}

/// sha256 of the bytes of `data` at `ranges`, one after the other; `None` when a range lies
/// beyond `data`.
fn ranges_sha256<'r>(
    data: &[u8],
    ranges: impl IntoIterator<Item = &'r [u64; 2]>,
) -> Option<String> {
    let mut h = Sha256::new();
    for [off, len] in ranges {
        let end = off.checked_add(*len)?;
        h.update(data.get(*off as usize..usize::try_from(end).ok()?)?);
    }
    Some(hex::encode(h.finalize()))
}

impl Backup {
    /// Whole-file copies of bolt files instead of page undo (`--backup full`).
    pub fn set_bolt_full_copy(&mut self, full: bool) {
        self.bolt_full_copy = full;
    }

    /// Whether bolt files are copied whole ([`Backup::set_bolt_full_copy`]).
    pub fn bolt_full_copy(&self) -> bool {
        self.bolt_full_copy
    }

    /// Records the original bytes of `ranges` of the bolt file `path` (`original` = its
    /// current bytes, read where they are: [`FileBytes`] reads a file with `pread`, so the
    /// pages backed up are never mapped into the process) in a new undo file (mode 0600,
    /// fsync-ed). `new_meta` is the meta page the transaction will write at
    /// `new_meta_offset`. Committed by [`Backup::commit`].
    pub fn save_pages(
        &mut self,
        path: &Path,
        original: &dyn Original,
        meta: FileMeta,
        undo: PageUndoPlan<'_>,
    ) -> Result<(), StoreError> {
        let PageUndoPlan {
            page_size,
            ranges,
            new_meta_offset,
            new_meta,
        } = undo;
        let size = original.size();
        if ranges
            .iter()
            .any(|[off, len]| off.checked_add(*len).is_none_or(|end| end > size))
        {
            return Err(StoreError::Backup(format!(
                "a page range to back up lies beyond the end of {}",
                path.display()
            )));
        }
        let (backup_file, copy, mut f) = self.new_copy_file(path, ".pages")?;
        fault::point("backup-pages-write");
        // One pass over the ranges, a page at a time: the all-zero pages after the meta pages
        // are only listed, the others written and hashed in file order.
        let (mut stored, mut zero): (Vec<[u64; 2]>, Vec<[u64; 2]>) = (Vec::new(), Vec::new());
        // (the two meta pages stay a range of their own, as the undo checks: a page 2 that
        // follows them starts the next range)
        let metas = 2 * page_size;
        let push = |v: &mut Vec<[u64; 2]>, off: u64, len: u64| match v.last_mut() {
            Some([o, l]) if *o + *l == off && !(*o == 0 && *l == metas) => *l += len,
            _ => v.push([off, len]),
        };
        let mut h = Sha256::new();
        {
            let mut w = std::io::BufWriter::with_capacity(1 << 20, &mut f);
            let mut buf = vec![0u8; page_size.max(1) as usize];
            for (i, [off, len]) in ranges.iter().enumerate() {
                let mut at = *off;
                while at < off + len {
                    let n = page_size.min(off + len - at);
                    let chunk = &mut buf[..n as usize];
                    original
                        .read(at, chunk)
                        .map_err(|e| StoreError::io(path, e))?;
                    // (the first range, the two meta pages, is always stored)
                    if i > 0 && chunk.iter().all(|b| *b == 0) {
                        push(&mut zero, at, n);
                    } else {
                        push(&mut stored, at, n);
                        h.update(&*chunk);
                        w.write_all(chunk).map_err(|e| StoreError::io(&copy, e))?;
                    }
                    at += n;
                }
            }
            w.flush().map_err(|e| StoreError::io(&copy, e))?;
        }
        let (ranges, zero_ranges) = (stored, zero);
        let sha256_original = hex::encode(h.finalize());
        // Not fsynced on its own: [`Backup::commit`]'s syncfs of the backup's file system,
        // which must come before any write to the store, makes it durable with the manifest
        // (and reports its writeback errors). One journal commit fewer inside the window.
        self.manifest.format = PAGES_FORMAT;
        self.manifest.entries.push(ManifestEntry {
            path: path.to_path_buf(),
            backup_file,
            offset: None,
            mode: meta.mode,
            uid: meta.uid,
            gid: meta.gid,
            size,
            sha256_original,
            sha256_new: None,
            set_aside: false,
            pages: Some(PageUndo {
                page_size,
                ranges,
                zero_ranges,
                new_meta_offset,
                new_meta_sha256: sha256_hex(new_meta),
                size_after: None,
                sha256_after_file: None,
                digest_after_file: None,
            }),
            intent: None,
        });
        Ok(())
    }

    /// Records what the commit left in the page-backed file `path` (`after` = its bytes,
    /// `after_digest` = their [`chunk_digest`](super::chunk_digest), which the caller computes
    /// so that it can bound the memory a mapped file takes meanwhile and hash what the commit
    /// does not write before it): the sha256 of its undo ranges, its length and the digest
    /// of the whole file.
    pub fn set_pages_after(&mut self, path: &Path, after: &[u8], after_digest: String) {
        for e in &mut self.manifest.entries {
            if e.path != path {
                continue;
            }
            if let Some(p) = &mut e.pages {
                e.sha256_new = ranges_sha256(after, p.ranges.iter().chain(&p.zero_ranges));
                p.size_after = Some(after.len() as u64);
                p.digest_after_file = Some(after_digest.clone());
            }
        }
    }
}

/// What [`Backup::save_pages`] records, besides the file.
#[derive(Debug, Clone)]
pub struct PageUndoPlan<'a> {
    /// Page size of the bolt file.
    pub page_size: u64,
    /// The ranges the transaction overwrites ([`undo_ranges`]).
    pub ranges: Vec<[u64; 2]>,
    /// Where the transaction writes its meta page.
    pub new_meta_offset: u64,
    /// The meta page it writes there.
    pub new_meta: &'a [u8],
}

/// The manifest's ranges are what [`undo_ranges`] makes: sorted, apart, inside the original
/// length, the first one both meta pages, and the written meta page one of them.
fn check_shape(entry: &ManifestEntry, p: &PageUndo) -> Result<(), String> {
    let ps = p.page_size;
    if !(512..=1 << 20).contains(&ps) || !ps.is_power_of_two() {
        return Err(format!("page size {ps} is not a bolt page size"));
    }
    // Backups made before the meta range was kept apart merged a write of page 2 into it:
    // such a first range still starts at 0 and covers both meta pages, and restores the same.
    match p.ranges.first() {
        Some(&[0, len]) if len == 2 * ps || (len > 2 * ps && len % ps == 0) => {}
        _ => return Err("the first range is not the two meta pages".into()),
    }
    if p.new_meta_offset != 0 && p.new_meta_offset != ps {
        return Err(format!(
            "the written meta page at {} is not a meta page",
            p.new_meta_offset
        ));
    }
    let mut all: Vec<[u64; 2]> = p.ranges.iter().chain(&p.zero_ranges).copied().collect();
    all.sort_unstable();
    let mut prev_end = 0u64;
    for (i, [off, len]) in all.iter().enumerate() {
        let end = off.checked_add(*len).ok_or("a range overflows")?;
        if *len == 0 || (i > 0 && *off < prev_end) || end > entry.size {
            return Err(format!(
                "range {off}+{len} is empty, out of order or beyond the original length {}",
                entry.size
            ));
        }
        prev_end = end;
    }
    Ok(())
}

/// The page-undo counterpart of a whole copy's check: returns the rebuilt original (when it
/// is to be restored) and what to do. Trusts nothing: the undo file must be trusted and match
/// its sha256, and the current file must hold, at the recorded ranges, the original bytes
/// (with the original length) or the patch's ones (with the length after) — or, with
/// `accept_unknown_new` when the patch never recorded them (killed mid-commit), original bytes
/// on the meta page the patch does not write and, on the one it writes, the original bytes
/// or the patch's meta.
pub(super) fn check_entry(
    dir: &Path,
    entry: &ManifestEntry,
    p: &PageUndo,
    accept_unknown_new: bool,
) -> Result<CheckedEntry, StoreError> {
    let copy_path = dir.join(&entry.backup_file);
    let damaged = |why: String| {
        StoreError::Backup(format!(
            "page backup {} of {}: {why}: the backup is damaged; nothing was restored",
            copy_path.display(),
            entry.path.display()
        ))
    };
    check_shape(entry, p).map_err(damaged)?;
    let (undo, umeta) = atomic::read_regular_nofollow(&copy_path)?;
    ensure_trusted(&copy_path, umeta.uid, umeta.mode)?;
    let total: u64 = p.ranges.iter().map(|r| r[1]).sum();
    if undo.len() as u64 != total || sha256_hex(&undo) != entry.sha256_original {
        return Err(damaged(
            "it does not match its recorded size and sha256".into(),
        ));
    }
    let (current, current_meta) = match atomic::read_regular_nofollow(&entry.path) {
        Ok(found) => found,
        Err(StoreError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Err(StoreError::RollbackConflict {
                path: entry.path.clone(),
                reason: "the file no longer exists (was the store removed?)".into(),
            })
        }
        Err(e) => return Err(e),
    };
    let len = current.len() as u64;
    let cur_stored = ranges_sha256(&current, &p.ranges);
    let cur = ranges_sha256(&current, p.ranges.iter().chain(&p.zero_ranges));
    let zeros_original = p
        .zero_ranges
        .iter()
        .all(|r| bytes_at(&current, *r).is_some_and(|b| b.iter().all(|x| *x == 0)));
    let meta = super::restored_meta(entry, Some(current_meta));
    if len == entry.size
        && zeros_original
        && cur_stored.as_deref() == Some(entry.sha256_original.as_str())
    {
        return Ok((Vec::new(), RollbackAction::AlreadyOriginal, meta));
    }
    let patched = match (&entry.sha256_new, p.size_after) {
        (Some(new), Some(after)) => {
            len == after
                && cur.as_ref() == Some(new)
                && p.sha256_after_file
                    .as_ref()
                    .is_none_or(|whole| *whole == sha256_hex(&current))
                && p.digest_after_file
                    .as_ref()
                    .is_none_or(|whole| *whole == super::chunk_digest::of_bytes(&current))
        }
        (None, _) if accept_unknown_new => {
            len >= entry.size && only_our_meta_written(&current, &undo, p)
        }
        _ => false,
    };
    if !patched {
        return Err(StoreError::RollbackConflict {
            path: entry.path.clone(),
            reason: format!(
                "its bytes at the {} page ranges the patch wrote have sha256 {} and it is {len} bytes long; the original was {} ({} bytes), the patch wrote {}{}",
                p.ranges.len() + p.zero_ranges.len(),
                cur.as_deref().unwrap_or("(the file is shorter than the ranges)"),
                entry.sha256_original,
                entry.size,
                entry.sha256_new.as_deref().unwrap_or("(not recorded)"),
                match (&entry.sha256_new, accept_unknown_new) {
                    (None, true) => "; and its meta pages are not the original ones and the patch's: another program committed since",
                    _ => "",
                }
            ),
        });
    }
    let mut original = current;
    original.truncate(entry.size as usize);
    let mut at = 0usize;
    for [off, len] in &p.ranges {
        let (off, len) = (*off as usize, *len as usize);
        original[off..off + len].copy_from_slice(&undo[at..at + len]);
        at += len;
    }
    for [off, len] in &p.zero_ranges {
        original[*off as usize..(*off + *len) as usize].fill(0);
    }
    Ok((original, RollbackAction::Restored, meta))
}

/// After a crash mid-commit: the meta page the patch does not write holds its original bytes
/// and the one it writes holds the original or the patch's meta, so no other commit happened
/// (every bolt commit writes a meta page) and every other change is the patch's own, inside
/// the ranges or past the original end.
fn only_our_meta_written(current: &[u8], undo: &[u8], p: &PageUndo) -> bool {
    let ps = p.page_size as usize;
    let written = p.new_meta_offset as usize;
    let kept = ps - written;
    // The first range is the two meta pages, so they open the undo file.
    let page = |d: &'_ [u8], off: usize| d.get(off..off + ps).map(<[u8]>::to_vec);
    let (Some(cur_kept), Some(cur_written)) = (page(current, kept), page(current, written)) else {
        return false;
    };
    cur_kept == undo[kept..kept + ps]
        && (cur_written == undo[written..written + ps]
            || sha256_hex(&cur_written) == p.new_meta_sha256)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::{read_manifest, rollback, MANIFEST_NAME};
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn ranges_include_both_metas_clip_to_the_file_and_merge() {
        let r = undo_ranges(
            10 * 4096,
            4096,
            [(8192, 4096), (12288, 8192), (36864, 8192)],
        );
        // page 2, right after the metas, and pages 3-4 merge into a range of their own: the
        // metas stay [0, 2 pages] (a merged first range made the undo refuse the backup as
        // damaged, seen on a real containerd 1.7.24 store whose commit rewrote page 2)
        assert_eq!(r, vec![[0, 2 * 4096], [8192, 3 * 4096], [36864, 4096]]);
        assert_eq!(undo_ranges(40960, 4096, [(40960, 4096)]), vec![[0, 8192]]);
    }

    /// A fake bolt file of 8 pages, "patched" the way a transaction writes it: page 5 reused,
    /// meta page 1 written, two pages appended. (dir, file, original, patched, backup dir)
    fn patched_file(
        record_after: bool,
    ) -> (
        tempfile::TempDir,
        std::path::PathBuf,
        Vec<u8>,
        Vec<u8>,
        std::path::PathBuf,
    ) {
        patched_file_at(record_after, 5)
    }

    /// [`patched_file`] with the two reused pages starting at `page` instead of 5.
    fn patched_file_at(
        record_after: bool,
        page: usize,
    ) -> (
        tempfile::TempDir,
        std::path::PathBuf,
        Vec<u8>,
        Vec<u8>,
        std::path::PathBuf,
    ) {
        let ps = 4096usize;
        let store = tempfile::tempdir().unwrap();
        let path = store.path().join("meta.db");
        // page 6 zero, as the pages past bbolt's high-water mark are
        let original: Vec<u8> = (0..8 * ps)
            .map(|i| {
                if i / ps == 6 {
                    0
                } else {
                    (i / ps * 7 + i % 251) as u8
                }
            })
            .collect();
        fs::write(&path, &original).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        let mut patched = original.clone();
        patched[page * ps..(page + 2) * ps].fill(0xAB);
        let new_meta = vec![0xCD; ps];
        patched[ps..2 * ps].copy_from_slice(&new_meta);
        patched.extend(std::iter::repeat_n(0xEF, 2 * ps));
        let bk = store.path().join("backup");
        let mut b = Backup::create(&bk, "containerd", store.path()).unwrap();
        let ranges = undo_ranges(
            original.len() as u64,
            ps as u64,
            [((page * ps) as u64, 2 * ps as u64)],
        );
        b.save_pages(
            &path,
            &original,
            FileMeta::of(&fs::metadata(&path).unwrap()),
            PageUndoPlan {
                page_size: ps as u64,
                ranges,
                new_meta_offset: ps as u64,
                new_meta: &new_meta,
            },
        )
        .unwrap();
        b.commit().unwrap();
        fs::write(&path, &patched).unwrap();
        if record_after {
            b.set_pages_after(
                &path,
                &patched,
                crate::backup::chunk_digest::of_bytes(&patched),
            );
            b.finish().unwrap();
        }
        (store, path, original, patched, bk)
    }

    /// A commit that rewrites pages 2-3, right after the metas (bbolt reuses freed pages
    /// from the low end): found on a real containerd 1.7.24 store, where the merged first
    /// range made the undo call its own backup damaged and restore nothing.
    #[test]
    fn page_undo_of_a_commit_that_rewrote_page_2_restores_the_original() {
        let (_s, path, original, _patched, bk) = patched_file_at(true, 2);
        let m = read_manifest(&bk).unwrap();
        assert_eq!(
            m.entries[0].pages.as_ref().unwrap().ranges,
            vec![[0, 2 * 4096], [2 * 4096, 2 * 4096]],
            "the meta pages stay a range of their own"
        );
        let r = rollback(&bk, false).unwrap();
        assert_eq!(r.files[0].1, RollbackAction::Restored);
        assert_eq!(fs::read(&path).unwrap(), original);
    }

    #[test]
    fn page_undo_restores_the_original_bytes_and_is_idempotent() {
        let (_s, path, original, _patched, bk) = patched_file(true);
        let m = read_manifest(&bk).unwrap();
        assert_eq!(m.format, PAGES_FORMAT);
        let undo_len = fs::metadata(bk.join(&m.entries[0].backup_file))
            .unwrap()
            .len();
        assert_eq!(undo_len, 3 * 4096, "two meta pages and the reused one");
        assert_eq!(
            m.entries[0].pages.as_ref().unwrap().zero_ranges,
            vec![[6 * 4096, 4096]],
            "the zero page is recorded, not copied"
        );
        let r = rollback(&bk, false).unwrap();
        assert_eq!(r.files[0].1, RollbackAction::Restored);
        assert_eq!(fs::read(&path).unwrap(), original);
        assert_eq!(
            rollback(&bk, false).unwrap().files[0].1,
            RollbackAction::AlreadyOriginal
        );
    }

    #[test]
    fn page_undo_refuses_a_write_outside_its_ranges_since_the_patch() {
        let (_s, path, _original, patched, bk) = patched_file(true);
        // A runtime wrote a page the patch did not (page 3, live in the original tree)
        // without committing: the meta pages and the undo ranges are still the patch's.
        let mut later = patched.clone();
        later[3 * 4096..4 * 4096].fill(0x10);
        fs::write(&path, &later).unwrap();
        let e = rollback(&bk, false).unwrap_err();
        assert!(
            matches!(e, StoreError::RollbackConflict { .. }),
            "a page written outside the undo ranges since the patch is refused: {e}"
        );
        assert_eq!(fs::read(&path).unwrap(), later, "nothing restored");
        fs::write(&path, &patched).unwrap();
        assert_eq!(
            rollback(&bk, false).unwrap().files[0].1,
            RollbackAction::Restored,
            "the file exactly as the patch left it is restored"
        );
    }

    #[test]
    fn a_backup_with_the_older_whole_file_sha256_rolls_back_the_same_way() {
        let (_s, path, _original, patched, bk) = patched_file(true);
        let mpath = bk.join(MANIFEST_NAME);
        let mut m: serde_json::Value = serde_json::from_slice(&fs::read(&mpath).unwrap()).unwrap();
        let pages = &mut m["entries"][0]["pages"];
        assert!(
            pages["digest_after_file"].is_string(),
            "a patch records the chunk digest"
        );
        assert!(
            pages.get("sha256_after_file").is_none(),
            "and not the old field"
        );
        // what patches before the chunk digest recorded
        pages.as_object_mut().unwrap().remove("digest_after_file");
        pages["sha256_after_file"] = sha256_hex(&patched).into();
        fs::write(&mpath, serde_json::to_vec(&m).unwrap()).unwrap();
        let mut later = patched.clone();
        later[3 * 4096] ^= 1;
        fs::write(&path, &later).unwrap();
        let e = rollback(&bk, false).unwrap_err();
        assert!(
            matches!(e, StoreError::RollbackConflict { .. }),
            "the older fingerprint still refuses a byte changed outside the ranges: {e}"
        );
        fs::write(&path, &patched).unwrap();
        assert_eq!(
            rollback(&bk, false).unwrap().files[0].1,
            RollbackAction::Restored,
            "and restores the file the patch left"
        );
    }

    #[test]
    fn page_undo_refuses_a_later_commit_and_a_damaged_undo_file() {
        let (_s, path, _original, patched, bk) = patched_file(true);
        // Another commit writes the other meta page.
        let mut later = patched.clone();
        later[0..4096].fill(0x11);
        fs::write(&path, &later).unwrap();
        let e = rollback(&bk, false).unwrap_err();
        assert!(matches!(e, StoreError::RollbackConflict { .. }), "{e}");
        assert_eq!(fs::read(&path).unwrap(), later, "nothing restored");

        fs::write(&path, &patched).unwrap();
        let m = read_manifest(&bk).unwrap();
        let undo = bk.join(&m.entries[0].backup_file);
        let mut bytes = fs::read(&undo).unwrap();
        bytes[100] ^= 1;
        fs::write(&undo, &bytes).unwrap();
        let e = rollback(&bk, false).unwrap_err().to_string();
        assert!(e.contains("the backup is damaged"), "{e}");
        assert_eq!(fs::read(&path).unwrap(), patched, "nothing restored");
    }

    #[test]
    fn unrecorded_commit_needs_the_override_and_never_undoes_a_foreign_commit() {
        let (_s, path, original, patched, bk) = patched_file(false);
        let e = rollback(&bk, false).unwrap_err().to_string();
        assert!(e.contains("not recorded"), "{e}");
        // Killed after the data pages, before the meta page: the old meta is still there.
        let mut half = patched.clone();
        half[4096..8192].copy_from_slice(&original[4096..8192]);
        fs::write(&path, &half).unwrap();
        rollback(&bk, true).unwrap();
        assert_eq!(fs::read(&path).unwrap(), original);

        // A containerd commit after the crash wrote the meta page the patch meant to write.
        let mut foreign = half.clone();
        foreign[4096..8192].fill(0x22);
        fs::write(&path, &foreign).unwrap();
        let e = rollback(&bk, true).unwrap_err().to_string();
        assert!(e.contains("another program committed"), "{e}");
        assert_eq!(fs::read(&path).unwrap(), foreign);
    }

    #[test]
    fn a_page_entry_in_an_older_format_or_with_bent_ranges_is_refused() {
        let (_s, path, _original, patched, bk) = patched_file(true);
        let mpath = bk.join(MANIFEST_NAME);
        let good: serde_json::Value = serde_json::from_slice(&fs::read(&mpath).unwrap()).unwrap();
        let mut m = good.clone();
        m["format"] = 2.into();
        fs::write(&mpath, serde_json::to_vec(&m).unwrap()).unwrap();
        let e = rollback(&bk, false).unwrap_err().to_string();
        assert!(e.contains("format"), "{e}");
        let mut m = good.clone();
        m["entries"][0]["pages"]["ranges"][1] = serde_json::json!([20480, 40960]);
        fs::write(&mpath, serde_json::to_vec(&m).unwrap()).unwrap();
        let e = rollback(&bk, false).unwrap_err().to_string();
        assert!(e.contains("beyond the original length"), "{e}");
        assert_eq!(fs::read(&path).unwrap(), patched, "nothing restored");
    }
}
