//! Copy-on-write replacement of existing values, and the crash-safe commit (see the module
//! docs of [`super`] for the design and why it is safe).
//!
//! Use: build [`Edits`], call [`plan`] (pure: nothing is written; returns the new pages and
//! the new meta), check the planned tree through [`Plan::view`] (the caller should run
//! [`super::check::check`] and re-read its values there), then [`commit`] (or
//! [`commit_with`] through another [`Storage`]).

use super::check::CheckReport;
use super::storage::{FileStorage, Step, Storage};
use super::*;
use std::borrow::Cow;
use std::collections::BTreeMap;

/// Values to replace, by bucket path. Only existing, non-bucket keys can be replaced.
#[derive(Debug, Default, Clone)]
pub struct Edits {
    /// The edits of the root bucket.
    pub root: EditNode,
}

/// The edits of one bucket.
#[derive(Debug, Default, Clone)]
pub struct EditNode {
    /// New values of existing keys of this bucket.
    pub values: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Edits inside existing nested buckets, by key.
    pub buckets: BTreeMap<Vec<u8>, EditNode>,
}

impl EditNode {
    fn keys(&self) -> Vec<&[u8]> {
        let mut k: Vec<&[u8]> = self
            .values
            .keys()
            .chain(self.buckets.keys())
            .map(|k| k.as_slice())
            .collect();
        k.sort();
        k.dedup();
        k
    }
}

impl Edits {
    /// Replaces the value of `key` in the bucket at `bucket_path` (from the root bucket).
    pub fn put(&mut self, bucket_path: &[&[u8]], key: &[u8], value: Vec<u8>) {
        let mut n = &mut self.root;
        for b in bucket_path {
            n = n.buckets.entry(b.to_vec()).or_default();
        }
        n.values.insert(key.to_vec(), value);
    }

    /// No value to replace.
    pub fn is_empty(&self) -> bool {
        self.root.values.is_empty() && self.root.buckets.is_empty()
    }
}

/// A transaction ready to be written.
#[derive(Debug, Clone)]
pub struct Plan {
    /// New pages by page id (each buffer = its whole span).
    pub pages: BTreeMap<u64, Vec<u8>>,
    /// The meta the plan was made from (the file's current one).
    pub old_meta: Meta,
    /// The meta the commit writes (txid + 1, over the other meta page).
    pub new_meta: Meta,
    /// Page ids (spans expanded) this transaction replaced.
    pub freed: Vec<u64>,
    /// Pages taken from the free pages of the old tree.
    pub reused_pages: u64,
    /// Pages appended after the old high-water mark.
    pub appended_pages: u64,
}

impl Plan {
    /// The new tree: the file's bytes overlaid with the planned pages.
    pub fn view<'a>(&'a self, data: &'a [u8]) -> View<'a> {
        View {
            data,
            overlay: Some(&self.pages),
            page_size: self.new_meta.page_size as usize,
            hwm: self.new_meta.hwm,
            residency: None,
            file: None,
            read_budget: None,
        }
    }

    /// Bytes the commit writes: data pages plus the meta page.
    pub fn bytes_to_write(&self) -> u64 {
        self.pages.values().map(|p| p.len() as u64).sum::<u64>() + self.new_meta.page_size as u64
    }
}

struct Allocator {
    /// Free pages of the old tree not handed out yet (sorted).
    free: Vec<u64>,
    hwm: u64,
    reused: u64,
    appended: u64,
}

impl Allocator {
    /// bbolt's first fit over the free ids, else from the high-water mark.
    fn alloc(&mut self, n: u64) -> u64 {
        let mut run_start = 0usize;
        for i in 0..self.free.len() {
            if i == 0 || self.free[i] != self.free[i - 1] + 1 {
                run_start = i;
            }
            if (i - run_start + 1) as u64 == n {
                let id = self.free[run_start];
                self.free.drain(run_start..=i);
                self.reused += n;
                return id;
            }
        }
        let id = self.hwm;
        self.hwm += n;
        self.appended += n;
        id
    }
}

/// One element of a node being written: (flags, key, value); borrowed from the page it is
/// copied from or from the edits, owned where it is new (a child's page id, a bucket header).
type Elem<'x> = (u32, Cow<'x, [u8]>, Cow<'x, [u8]>);

struct Planner<'a, 'v> {
    view: &'v View<'a>,
    ps: usize,
    alloc: Allocator,
    pages: BTreeMap<u64, Vec<u8>>,
    freed: Vec<u64>,
}

/// Encodes a leaf or branch node into a fresh zeroed buffer of whole pages.
/// `elems` = (flags, key, value) for leaves, (0, key, pgid bytes) for branches.
fn node_size<K: AsRef<[u8]>, V: AsRef<[u8]>>(elems: &[(u32, K, V)], leaf: bool) -> usize {
    PAGE_HEADER
        + elems
            .iter()
            .map(|(_, k, v)| ELEM_SIZE + k.as_ref().len() + if leaf { v.as_ref().len() } else { 0 })
            .sum::<usize>()
}

/// Writes one branch or leaf node (header, element table, keys and values) into `buf`, the
/// way bbolt lays out a page; shared by the copy-on-write writer and the bulk builder.
pub(super) fn encode_node<K: AsRef<[u8]>, V: AsRef<[u8]>>(
    buf: &mut [u8],
    id: u64,
    leaf: bool,
    elems: &[(u32, K, V)],
    overflow: u32,
) {
    wr_u64(buf, 0, id);
    wr_u16(buf, 8, if leaf { FLAG_LEAF } else { FLAG_BRANCH });
    wr_u16(buf, 10, elems.len() as u16);
    wr_u32(buf, 12, overflow);
    let mut off = PAGE_HEADER + ELEM_SIZE * elems.len();
    for (i, (flags, k, v)) in elems.iter().enumerate() {
        let (k, v) = (k.as_ref(), v.as_ref());
        let e = PAGE_HEADER + i * ELEM_SIZE;
        let pos = (off - e) as u32;
        if leaf {
            wr_u32(buf, e, *flags);
            wr_u32(buf, e + 4, pos);
            wr_u32(buf, e + 8, k.len() as u32);
            wr_u32(buf, e + 12, v.len() as u32);
            buf[off..off + k.len()].copy_from_slice(k);
            off += k.len();
            buf[off..off + v.len()].copy_from_slice(v);
            off += v.len();
        } else {
            wr_u32(buf, e, pos);
            wr_u32(buf, e + 4, k.len() as u32);
            buf[e + 8..e + 16].copy_from_slice(&v[..8]);
            buf[off..off + k.len()].copy_from_slice(k);
            off += k.len();
        }
    }
}

impl<'a, 'v> Planner<'a, 'v> {
    fn free_span(&mut self, id: u64, overflow: u32) {
        for i in 0..=overflow as u64 {
            self.freed.push(id + i);
        }
    }

    /// Writes a node to newly allocated pages; returns its page id.
    fn write_node(&mut self, leaf: bool, elems: &[Elem<'_>], at: &str) -> Result<u64, BoltError> {
        if elems.len() > 0xFFFF {
            return Err(BoltError::new(at, "more than 65535 elements in one page"));
        }
        let size = node_size(elems, leaf);
        let npages = size.div_ceil(self.ps).max(1) as u64;
        let id = self.alloc.alloc(npages);
        let mut buf = vec![0u8; npages as usize * self.ps];
        encode_node(&mut buf, id, leaf, elems, (npages - 1) as u32);
        self.pages.insert(id, buf);
        Ok(id)
    }

    /// Rewrites the subtree at page `id` for the edits of `node` whose keys are `keys`;
    /// returns the new page id of the subtree root.
    fn rewrite_tree(
        &mut self,
        id: u64,
        node: &EditNode,
        keys: &[&[u8]],
        path: &str,
        depth: usize,
    ) -> Result<u64, BoltError> {
        if depth > MAX_DEPTH {
            return Err(BoltError::new(format!("page {id}"), "tree too deep"));
        }
        // (copied with pread: every element is copied into the new page anyway)
        let copy = self.view.page_copy(id)?;
        let p = copy.page();
        let at = || format!("page {id} (bucket {path})");
        if p.is_branch() {
            let elems = branch_elems(p.buf, p.count, &at)?;
            if elems.is_empty() {
                return Err(BoltError::new(at(), "empty branch page"));
            }
            let mut groups: BTreeMap<usize, Vec<&[u8]>> = BTreeMap::new();
            for k in keys {
                groups.entry(child_index(&elems, k)).or_default().push(k);
            }
            let mut out: Vec<Elem<'_>> = elems
                .iter()
                .map(|(k, c)| {
                    (
                        0u32,
                        Cow::Borrowed(*k),
                        Cow::Owned(c.to_ne_bytes().to_vec()),
                    )
                })
                .collect();
            for (i, ks) in groups {
                let new_child = self.rewrite_tree(elems[i].1, node, &ks, path, depth + 1)?;
                out[i].2 = Cow::Owned(new_child.to_ne_bytes().to_vec());
            }
            self.free_span(id, p.overflow);
            self.write_node(false, &out, &at())
        } else if p.is_leaf() {
            let elems = leaf_elems(p.buf, p.count, &at)?;
            // (borrowed from the page's copy; only the replaced values are new)
            let mut out: Vec<Elem<'_>> = elems
                .iter()
                .map(|e| (e.flags, Cow::Borrowed(e.key), Cow::Borrowed(e.value)))
                .collect();
            self.apply_in_leaf(&mut out, node, keys, path, depth)?;
            self.free_span(id, p.overflow);
            self.write_node(true, &out, &at())
        } else {
            Err(BoltError::new(
                at(),
                format!("not a branch or leaf page (flags {:#x})", p.flags),
            ))
        }
    }

    fn apply_in_leaf<'e>(
        &mut self,
        out: &mut [Elem<'e>],
        node: &'e EditNode,
        keys: &[&[u8]],
        path: &str,
        depth: usize,
    ) -> Result<(), BoltError> {
        for k in keys {
            let kname = String::from_utf8_lossy(k).into_owned();
            let i = out
                .binary_search_by(|(_, ek, _)| ek.as_ref().cmp(k))
                .map_err(|_| {
                    BoltError::new(
                        format!("bucket {path}"),
                        format!("key {kname:?} not found (only existing values can be replaced)"),
                    )
                })?;
            let is_bucket = out[i].0 & BUCKET_LEAF_FLAG != 0;
            if let Some(v) = node.values.get(*k) {
                if is_bucket {
                    return Err(BoltError::new(
                        format!("bucket {path}"),
                        format!("key {kname:?} is a bucket, not a value"),
                    ));
                }
                if node.buckets.contains_key(*k) {
                    return Err(BoltError::new(
                        format!("bucket {path}"),
                        format!("key {kname:?} edited both as value and bucket"),
                    ));
                }
                out[i].2 = Cow::Borrowed(v.as_slice());
            } else if let Some(child) = node.buckets.get(*k) {
                if !is_bucket {
                    return Err(BoltError::new(
                        format!("bucket {path}"),
                        format!("key {kname:?} is a value, not a bucket"),
                    ));
                }
                let cpath = format!("{path}/{kname}");
                let new = self.rewrite_bucket_value(&out[i].2, child, &cpath, depth + 1)?;
                out[i].2 = Cow::Owned(new);
            }
        }
        Ok(())
    }

    /// Returns the new value (bucket header + maybe inline page) of a nested bucket.
    fn rewrite_bucket_value(
        &mut self,
        value: &[u8],
        node: &EditNode,
        path: &str,
        depth: usize,
    ) -> Result<Vec<u8>, BoltError> {
        if depth > MAX_DEPTH {
            return Err(BoltError::new(
                format!("bucket {path}"),
                "buckets nested too deep",
            ));
        }
        let (root, seq) = bucket_root(value, &format!("bucket {path}"))?;
        let keys = node.keys();
        match root {
            Root::Page(id) => {
                let new_root = self.rewrite_tree(id, node, &keys, path, 0)?;
                let mut v = vec![0u8; BUCKET_HEADER];
                wr_u64(&mut v, 0, new_root);
                wr_u64(&mut v, 8, seq);
                Ok(v)
            }
            Root::Inline(page) => {
                let at = || format!("inline bucket {path}");
                let elems = inline_elems(page, &at)?;
                let mut out: Vec<Elem<'_>> = elems
                    .iter()
                    .map(|e| (e.flags, Cow::Borrowed(e.key), Cow::Borrowed(e.value)))
                    .collect();
                self.apply_in_leaf(&mut out, node, &keys, path, depth)?;
                let size = node_size(&out, true);
                let inlineable =
                    out.iter().all(|e| e.0 & BUCKET_LEAF_FLAG == 0) && size <= self.ps / 4;
                let mut v = vec![0u8; BUCKET_HEADER];
                wr_u64(&mut v, 8, seq);
                if inlineable {
                    let mut pg = vec![0u8; size];
                    encode_node(&mut pg, 0, true, &out, 0);
                    v.extend_from_slice(&pg);
                } else {
                    // bbolt moves a bucket out of line once it exceeds pageSize/4.
                    let id = self.write_node(true, &out, &at())?;
                    wr_u64(&mut v, 0, id);
                }
                Ok(v)
            }
        }
    }
}

/// Plans the transaction replacing `edits` in the tree of `db` (whose check is `report`; it
/// must be clean). Nothing is written.
pub fn plan(db: &Db, report: &CheckReport, edits: &Edits) -> Result<Plan, BoltError> {
    let meta = db.meta;
    if !report.is_ok() {
        return Err(BoltError::new(
            "consistency check",
            format!(
                "the file fails bbolt's consistency check, refusing to write: {}",
                report.summary()
            ),
        ));
    }
    let view = db.view();
    let mut pl = Planner {
        view: &view,
        ps: meta.page_size as usize,
        alloc: Allocator {
            free: report.free.clone(),
            hwm: meta.hwm,
            reused: 0,
            appended: 0,
        },
        pages: BTreeMap::new(),
        freed: Vec::new(),
    };
    let keys = edits.root.keys();
    let new_root = if keys.is_empty() {
        meta.root
    } else {
        pl.rewrite_tree(meta.root, &edits.root, &keys, "", 0)?
    };
    let mut new_meta = meta;
    new_meta.page = 1 - meta.page;
    new_meta.txid = meta.txid + 1;
    new_meta.root = new_root;
    if meta.freelist_synced() {
        // bbolt: free the old freelist page, allocate the new one (sized before allocating,
        // an upper bound), then write every free id: unused old free pages + pending ones.
        let old = view.page(meta.freelist)?;
        pl.free_span(old.id, old.overflow);
        let n = pl.alloc.free.len() + pl.freed.len();
        let bytes = PAGE_HEADER + 8 * n + if n >= 0xFFFF { 8 } else { 0 };
        let npages = (bytes / pl.ps + 1) as u64;
        let id = pl.alloc.alloc(npages);
        let mut ids: Vec<u64> = pl
            .alloc
            .free
            .iter()
            .chain(pl.freed.iter())
            .copied()
            .collect();
        ids.sort_unstable();
        let mut buf = vec![0u8; npages as usize * pl.ps];
        wr_u64(&mut buf, 0, id);
        wr_u16(&mut buf, 8, FLAG_FREELIST);
        wr_u32(&mut buf, 12, (npages - 1) as u32);
        let mut off = PAGE_HEADER;
        if ids.len() >= 0xFFFF {
            wr_u16(&mut buf, 10, 0xFFFF);
            wr_u64(&mut buf, off, ids.len() as u64);
            off += 8;
        } else {
            wr_u16(&mut buf, 10, ids.len() as u16);
        }
        for fid in ids {
            wr_u64(&mut buf, off, fid);
            off += 8;
        }
        pl.pages.insert(id, buf);
        new_meta.freelist = id;
    } else {
        new_meta.freelist = NO_FREELIST;
    }
    new_meta.hwm = pl.alloc.hwm;
    new_meta.checksum = 0; // computed by encode()
    let (reused, appended) = (pl.alloc.reused, pl.alloc.appended);
    Ok(Plan {
        pages: pl.pages,
        old_meta: meta,
        new_meta,
        freed: pl.freed,
        reused_pages: reused,
        appended_pages: appended,
    })
}

/// Why a commit failed, and whether the file was restored.
#[derive(Debug)]
pub struct CommitError {
    /// The step that failed, in words.
    pub step: &'static str,
    /// The I/O error of that step.
    pub source: std::io::Error,
    /// True when every byte written was put back (file identical to before).
    pub restored: bool,
    /// For a failed reservation: the bytes the commit needed allocated.
    pub needed: Option<u64>,
}

impl fmt::Display for CommitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: {}", self.step, self.source)?;
        if let Some(n) = self.needed {
            write!(
                f,
                " (the commit needs up to {n} bytes of free space for its new pages)"
            )?;
        }
        if self.restored {
            write!(f, " (the file was restored to its previous bytes)")
        } else {
            write!(f, " (the previous meta page stays the valid one; restore from the backup if in doubt)")
        }
    }
}

impl std::error::Error for CommitError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// What a commit wrote.
#[derive(Debug, Clone, Default)]
pub struct CommitStats {
    /// Pages written, overflow pages and the meta page included.
    pub pages_written: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// The file's length before the commit.
    pub file_len_before: u64,
    /// The file's length after it.
    pub file_len_after: u64,
}

/// Writes `plan` to `file` (opened read-write, holding the flock; `data` = its current bytes):
/// [`commit_with`] on the plain file.
pub fn commit(file: &File, data: &[u8], plan: &Plan) -> Result<CommitStats, CommitError> {
    commit_with(&mut FileStorage::new(file), data, plan)
}

/// The most bytes of contiguous pages [`commit_with`] joins into one write.
pub const WRITE_RUN_MAX: usize = 1 << 20;

/// The planned pages as contiguous runs `(first page id, the pages' buffers)`, in page order:
/// a page joins the run before it when it follows it directly and the run stays within
/// [`WRITE_RUN_MAX`] bytes. Nothing is copied: each run is written with one
/// [`Storage::write_parts`].
pub fn write_runs(
    pages: &BTreeMap<u64, Vec<u8>>,
    ps: u64,
) -> impl Iterator<Item = (u64, Vec<&[u8]>)> {
    let mut it = pages.iter().peekable();
    std::iter::from_fn(move || {
        let (id, first) = it.next()?;
        let mut len = first.len();
        let mut run = vec![first.as_slice()];
        while let Some((next, buf)) = it.peek() {
            let follows = *id * ps + len as u64 == **next * ps;
            if !follows || len + buf.len() > WRITE_RUN_MAX {
                break;
            }
            len += buf.len();
            run.push(buf.as_slice());
            it.next();
        }
        Some((*id, run))
    })
}

/// The original bytes of a range a commit overwrites (what it writes back if it fails).
enum Saved {
    Bytes(Vec<u8>),
    /// All zero: only the length is kept.
    Zeros(usize),
}

/// Writes `plan` through `storage` (`data` = the file's current bytes) in bbolt's order:
/// reserve space, data pages, fdatasync, new meta page, fdatasync, one [`Storage`] call per
/// durable step. On a failure before the meta is durable, every byte written is put back and
/// the file length restored ([`Step::Undo`]).
pub fn commit_with(
    storage: &mut dyn Storage,
    data: &[u8],
    plan: &Plan,
) -> Result<CommitStats, CommitError> {
    let ps = plan.new_meta.page_size as u64;
    let len_before = data.len() as u64;
    let need = plan.new_meta.hwm * ps;
    let mut stats = CommitStats {
        file_len_before: len_before,
        ..Default::default()
    };
    // Originals of every page we overwrite inside the current file, to undo a failed write,
    // read through `storage` (pread), not from the mapped `data`: reading them from the map
    // made them resident in our process, and those inside the old length but past the old
    // high-water mark (holes of a file that once was longer, where a commit appends) are
    // most of them: on the 2,000-container node ~6 MB, counted twice (the copy and the
    // mapping) at the patch's peak. An all-zero range is kept as its length.
    let mut ranges: Vec<(u64, usize)> = plan
        .pages
        .iter()
        .map(|(id, buf)| (id * ps, buf.len() as u64))
        .filter(|&(off, _)| off < len_before)
        .map(|(off, len)| (off, ((off + len).min(len_before) - off) as usize))
        .collect();
    let meta_off = plan.new_meta.page * ps;
    ranges.push((meta_off, ps as usize));
    let mut saved: Vec<(u64, Saved)> = Vec::with_capacity(ranges.len());
    for (off, len) in ranges {
        let mut bytes = vec![0u8; len];
        if let Err(e) = storage.read_at(off, &mut bytes) {
            return Err(CommitError {
                step: "reading the pages it overwrites",
                source: e,
                restored: true,
                needed: None,
            });
        }
        saved.push((
            off,
            if bytes.iter().all(|&b| b == 0) {
                Saved::Zeros(len)
            } else {
                Saved::Bytes(bytes)
            },
        ));
    }
    // `wrote`: whether a page may have been written. A failed reservation wrote none, and
    // writing the saved bytes back would need the very space that is missing (the pages past
    // the high-water mark may be holes): only the length is put back then.
    let undo = |storage: &mut dyn Storage,
                step: &'static str,
                source: std::io::Error,
                wrote: bool|
     -> CommitError {
        let mut ok = true;
        for (off, original) in saved.iter().filter(|_| wrote) {
            let zeros;
            let bytes = match original {
                Saved::Bytes(b) => b.as_slice(),
                Saved::Zeros(len) => {
                    zeros = vec![0u8; *len];
                    zeros.as_slice()
                }
            };
            ok &= storage.write(Step::Undo, *off, bytes).is_ok();
        }
        if storage.file_len().unwrap_or(0) != len_before {
            ok &= storage.set_len(Step::Undo, len_before).is_ok();
        }
        ok &= storage.sync_data(Step::Undo).is_ok();
        CommitError {
            step,
            source,
            restored: ok,
            needed: None,
        }
    };

    // Reserve the pages after the old high-water mark first, so a full disk fails here,
    // before any byte of the file changed (they may be holes in a sparse file).
    let old_end = plan.old_meta.hwm * ps;
    let reserve = need.saturating_sub(old_end);
    if let Err(e) = storage.allocate(Step::Reserve, old_end, reserve) {
        // Say how much room the commit needs, so the operator knows what to free.
        let mut err = undo(storage, "reserving space for the new pages", e, false);
        err.needed = Some(reserve);
        return Err(err);
    }
    // Data pages, in page order, one write per contiguous run of at most WRITE_RUN_MAX
    // bytes, straight from the plan's buffers (copying them into runs was a tenth of a
    // 2,000-container patch's CPU: every run a fresh buffer the kernel had to zero).
    for (id, parts) in write_runs(&plan.pages, ps) {
        if let Err(e) = storage.write_parts(Step::WritePages, id * ps, &parts) {
            return Err(undo(storage, "writing data pages", e, true));
        }
        let len: u64 = parts.iter().map(|p| p.len() as u64).sum();
        stats.pages_written += len / ps;
        stats.bytes_written += len;
    }
    if let Err(e) = storage.sync_data(Step::SyncPages) {
        return Err(undo(storage, "syncing data pages", e, true));
    }
    // The new meta goes over the older meta page; until it is durable the current meta
    // (and its untouched tree) is the newest valid one.
    let meta_page = plan.new_meta.encode();
    if let Err(e) = storage.write(Step::WriteMeta, meta_off, &meta_page) {
        return Err(undo(storage, "writing the meta page", e, true));
    }
    stats.bytes_written += meta_page.len() as u64;
    stats.pages_written += 1;
    if let Err(e) = storage.sync_data(Step::SyncMeta) {
        return Err(CommitError {
            step: "syncing the meta page",
            source: e,
            restored: false,
            needed: None,
        });
    }
    stats.file_len_after = storage.file_len().unwrap_or(0);
    Ok(stats)
}

#[cfg(test)]
mod run_tests {
    use super::*;

    /// The commit writes every planned byte at its offset, in runs of at most WRITE_RUN_MAX
    /// bytes made of the plan's own buffers (nothing copied).
    #[test]
    fn write_runs_cover_every_page_once_in_bounded_contiguous_runs() {
        let ps = 4096u64;
        let mut pages = BTreeMap::new();
        let mut id = 2u64;
        for (i, span) in [1u64, 3, 1, 300, 1, 1].iter().enumerate() {
            pages.insert(id, vec![i as u8 + 1; (span * ps) as usize]);
            // a gap after the third span
            id += span + u64::from(i == 2);
        }
        pages.insert(1000, vec![9; ps as usize]);
        let runs: Vec<_> = write_runs(&pages, ps).collect();
        let mut expect = Vec::new();
        for (id, buf) in &pages {
            expect.extend(
                buf.iter()
                    .enumerate()
                    .map(|(j, b)| (id * ps + j as u64, *b)),
            );
        }
        let got: Vec<(u64, u8)> = runs
            .iter()
            .flat_map(|(id, parts)| {
                parts
                    .iter()
                    .flat_map(|p| p.iter())
                    .enumerate()
                    .map(move |(j, b)| (id * ps + j as u64, *b))
            })
            .collect();
        assert_eq!(
            got, expect,
            "every planned byte once, at its offset, in order"
        );
        let planned: Vec<*const u8> = pages.values().map(|b| b.as_ptr()).collect();
        for (_, parts) in &runs {
            let len: usize = parts.iter().map(|p| p.len()).sum();
            assert!(
                len <= WRITE_RUN_MAX || parts.len() == 1,
                "a run of {len} bytes in {} parts",
                parts.len()
            );
            for p in parts {
                assert!(
                    planned.contains(&p.as_ptr()),
                    "a part is a planned buffer, not a copy"
                );
            }
        }
        assert!(runs.len() < pages.len(), "neighbouring pages share a write");
    }
}
