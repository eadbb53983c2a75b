//! bbolt's consistency rules (`tx.Check()` of bbolt 1.3.7+), on a [`View`].
//!
//! Structural rules (a file breaking them cannot be read safely): every tree page is inside
//! the high-water mark and the file, carries its own id in its header, is a branch or leaf
//! page, is referenced exactly once (this also catches cycles), has its elements inside its
//! span; keys are strictly ascending inside a page and lie in the range the parent branch
//! gives them; inline buckets are well-formed leaves.
//!
//! Freelist rules (only meaningful for a synced freelist): no page freed twice, no reachable
//! page freed, every page below the high-water mark reachable or free. For an unsynced
//! freelist (`NoFreelistSync`) the free pages are, as in Go's `freepages()`, exactly the
//! unreachable pages below the high-water mark.

use super::*;

const MAX_ERRORS: usize = 50;

/// What [`check()`] found.
#[derive(Debug, Clone, Default)]
pub struct CheckReport {
    /// Problems that make the tree unsafe to read (bad pages, references, key order).
    pub structural: Vec<String>,
    /// Problems of the synced freelist against the tree (double or wrong frees, leaks).
    pub freelist: Vec<String>,
    /// Pages below the high-water mark not reachable from the meta (sorted): the pages a
    /// writer may reuse.
    pub free: Vec<u64>,
    /// Pages reachable from the meta (metas, freelist, trees), overflow pages included.
    pub reachable_pages: u64,
    /// Whether the checked meta keeps a freelist page.
    pub freelist_synced: bool,
    /// The checked meta's high-water mark.
    pub hwm: u64,
    /// What [`check_indexed`] learnt of every tree page, kept when the check found nothing
    /// wrong: what lets [`check_planned`] check a transaction's tree by its new pages alone.
    pub index: Option<std::sync::Arc<TreeIndex>>,
    /// Tree pages (branches and leaves, a span counted once) the walk read: every one for
    /// [`check()`], the new ones and those it could not take as checked for [`check_planned`].
    pub walked_pages: u64,
}

impl CheckReport {
    /// No problem of either kind.
    pub fn is_ok(&self) -> bool {
        self.structural.is_empty() && self.freelist.is_empty()
    }
    /// Every problem, structural first.
    pub fn errors(&self) -> Vec<String> {
        self.structural
            .iter()
            .chain(self.freelist.iter())
            .cloned()
            .collect()
    }
    /// The first few problems, one line, for error messages.
    pub fn summary(&self) -> String {
        let all = self.errors();
        let mut s = all.iter().take(5).cloned().collect::<Vec<_>>().join("; ");
        if all.len() > 5 {
            s.push_str(&format!("; … {} problems in all", all.len()));
        }
        s
    }
}

/// What a clean check of one tree knows of each of its pages, so that a transaction that
/// shares most of them can be checked by its new pages alone ([`check_planned`]).
///
/// The walk numbers every page it marks in the order it marks them (`pre`): the pages of a
/// node's subtree (its overflow pages, its children, the buckets nested in it and their
/// pages) are then exactly the numbers `start..end` of that node. For each node it keeps the
/// depths it was met at and the keys a parent's bounds are checked against, copied out (a
/// later check reads them without touching the file).
pub struct TreeIndex {
    hwm: u64,
    page_size: usize,
    /// length of the bytes checked (a view of other bytes is not this tree)
    data_len: usize,
    /// how many pages the walk marked (the end of the numbers)
    marks: u32,
    /// mark number of each page below `hwm` (`NONE`: not reachable, or a meta page)
    pre: Vec<u32>,
    /// per page id: the node starting there (`None`: no tree node starts there)
    nodes: Vec<Option<NodeInfo>>,
    /// the keys of `NodeInfo`, end to end
    keys: Vec<u8>,
}

impl std::fmt::Debug for TreeIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TreeIndex")
            .field("hwm", &self.hwm)
            .field("nodes", &self.nodes.iter().filter(|n| n.is_some()).count())
            .field("key_bytes", &self.keys.len())
            .finish()
    }
}

const NONE: u32 = u32::MAX;

/// A key copied into [`TreeIndex::keys`]: offset and length.
#[derive(Clone, Copy, Debug)]
struct KeyRef(u32, u32);

#[derive(Clone, Copy, Debug)]
struct NodeInfo {
    /// mark numbers of the subtree: `start..end`
    start: u32,
    end: u32,
    tree_depth: u32,
    bucket_depth: u32,
    /// the node's first key (the one checked against a parent's lower bound)
    first: Option<KeyRef>,
    /// the greatest key of the whole subtree (every key a parent's upper bound reaches)
    max_all: Option<KeyRef>,
    /// what the walk returned for the node (the parent's running key after it)
    ret: Option<KeyRef>,
}

impl TreeIndex {
    fn key(&self, k: Option<KeyRef>) -> Option<&[u8]> {
        k.map(|KeyRef(o, l)| &self.keys[o as usize..(o + l) as usize])
    }
}

/// The index a walk builds as it goes ([`check_indexed`]).
struct Recorder {
    counter: u32,
    pre: Vec<u32>,
    nodes: Vec<Option<NodeInfo>>,
    keys: Vec<u8>,
    /// too many pages for u32 numbers: no index
    overflowed: bool,
}

impl Recorder {
    fn key(&mut self, k: Option<&[u8]>) -> Option<KeyRef> {
        let k = k?;
        let off = u32::try_from(self.keys.len()).ok()?;
        let len = u32::try_from(k.len()).ok()?;
        if off.checked_add(len).is_none() {
            self.overflowed = true;
            return None;
        }
        self.keys.extend_from_slice(k);
        Some(KeyRef(off, len))
    }
}

/// The walk of [`check_planned`]: the clean tree it starts from, and the subtrees of it the
/// new tree takes as they are.
struct Base<'a> {
    index: &'a TreeIndex,
    /// `start..end` of every old subtree taken, with the page id of its node
    taken: Vec<(u32, u32, u64)>,
}

struct Walker<'a, 'v> {
    view: &'v View<'a>,
    reachable: Vec<bool>,
    errs: Vec<String>,
    record: Option<Recorder>,
    base: Option<Base<'a>>,
    walked: u64,
}

impl<'a, 'v> Walker<'a, 'v> {
    fn err(&mut self, e: String) {
        if self.errs.len() < MAX_ERRORS {
            self.errs.push(e);
        } else if self.errs.len() == MAX_ERRORS {
            self.errs.push("… more problems not listed".into());
        }
    }

    /// Marks the span of page `p`; false when any of it was already reachable.
    fn mark(&mut self, id: u64, overflow: u32) -> bool {
        let mut fresh = true;
        for i in 0..=overflow as u64 {
            let pid = id + i;
            let slot = &mut self.reachable[pid as usize];
            if *slot {
                fresh = false;
                self.err(format!(
                    "page {pid}: multiple references (cycle or shared page)"
                ));
                break;
            }
            *slot = true;
            if let Some(r) = &mut self.record {
                if let Some(p) = r.pre.get_mut(pid as usize) {
                    *p = r.counter;
                }
                r.counter = r.counter.checked_add(1).unwrap_or_else(|| {
                    r.overflowed = true;
                    0
                });
            }
        }
        fresh
    }

    fn check_bucket(&mut self, root: Root<'_>, path: &str, depth: usize) {
        if depth > MAX_DEPTH {
            self.err(format!(
                "bucket {path}: buckets nested deeper than {MAX_DEPTH}"
            ));
            return;
        }
        match root {
            Root::Page(id) => {
                self.check_tree(id, None, None, path, depth, 0);
            }
            Root::Inline(page) => match inline_elems(page, &|| format!("inline bucket {path}")) {
                Err(e) => self.err(e.to_string()),
                Ok(elems) => {
                    let mut prev: Option<&[u8]> = None;
                    for (i, e) in elems.iter().enumerate() {
                        if let Some(p) = prev {
                            if p >= e.key {
                                self.err(format!(
                                        "inline bucket {path}: key {i} is not greater than the previous key"
                                    ));
                            }
                        }
                        prev = Some(e.key);
                    }
                    self.children(&elems, path, depth);
                }
            },
        }
    }

    fn children(&mut self, elems: &[LeafElem<'_>], path: &str, depth: usize) {
        for e in elems.iter().filter(|e| e.is_bucket()) {
            let child = format!("{path}/{}", String::from_utf8_lossy(e.key));
            match bucket_root(e.value, &format!("bucket {child}")) {
                Ok((r, _)) => self.check_bucket(r, &child, depth + 1),
                Err(err) => self.err(err.to_string()),
            }
        }
    }

    /// Checks the tree under page `id`; returns the greatest key in it (a copy: the pages
    /// are read into buffers of their own, [`View::page_copy`], which end with each call).
    fn check_tree(
        &mut self,
        id: u64,
        min_closed: Option<&[u8]>,
        max_open: Option<&[u8]>,
        path: &str,
        bucket_depth: usize,
        tree_depth: usize,
    ) -> Option<Vec<u8>> {
        if let Some(r) = self.taken(id, min_closed, max_open, path, bucket_depth, tree_depth) {
            return r;
        }
        self.check_node(id, min_closed, max_open, path, bucket_depth, tree_depth)
    }

    /// In [`check_planned`]: when `id` is a node of the clean tree the new tree takes as it
    /// is (not rewritten, met at the same depths), checks only what the new tree changes for
    /// it (its parent's bounds) and notes its pages as taken; `None` when the node must be
    /// walked.
    fn taken(
        &mut self,
        id: u64,
        min_closed: Option<&[u8]>,
        max_open: Option<&[u8]>,
        path: &str,
        bucket_depth: usize,
        tree_depth: usize,
    ) -> Option<Option<Vec<u8>>> {
        let base = self.base.as_mut()?;
        if self.view.overlay.is_some_and(|o| o.contains_key(&id)) {
            return None;
        }
        let info = (*base.index.nodes.get(usize::try_from(id).ok()?)?)?;
        if info.tree_depth as usize != tree_depth || info.bucket_depth as usize != bucket_depth {
            return None;
        }
        base.taken.push((info.start, info.end, id));
        let index: &'a TreeIndex = base.index;
        // The old walk checked every key of the subtree against the keys around it; of the
        // new parent's bounds, the lower one reaches only the node's first key and the upper
        // one every key up to the subtree's greatest (all others are below a key of this
        // node that it reaches), as in `check_node`. (The upper one is also caught by the
        // parent, which compares its next key with the greatest key returned, except where
        // the subtree's last leaf is empty: checked here so the verdict never depends on it.)
        if let (Some(min), Some(first)) = (min_closed, index.key(info.first)) {
            if min > first {
                self.err(format!(
                    "page {id} (bucket {path}): first key is below the key of its parent branch"
                ));
            }
        }
        if let (Some(max), Some(greatest)) = (max_open, index.key(info.max_all)) {
            if greatest >= max {
                self.err(format!(
                    "page {id} (bucket {path}): a key is not below the next key of its parent branch"
                ));
            }
        }
        Some(index.key(info.ret).map(<[u8]>::to_vec))
    }

    /// Checks the node at page `id` and what is under it; returns the greatest key in it.
    fn check_node(
        &mut self,
        id: u64,
        min_closed: Option<&[u8]>,
        max_open: Option<&[u8]>,
        path: &str,
        bucket_depth: usize,
        tree_depth: usize,
    ) -> Option<Vec<u8>> {
        if tree_depth > MAX_DEPTH {
            self.err(format!(
                "page {id} (bucket {path}): tree deeper than {MAX_DEPTH} levels"
            ));
            return None;
        }
        let copy = match self.view.page_copy(id) {
            Ok(p) => p,
            Err(e) => {
                self.err(format!("{e} (bucket {path})"));
                return None;
            }
        };
        let p = copy.page();
        self.walked += 1;
        let start = self.record.as_ref().map(|r| r.counter);
        if !self.mark(id, p.overflow) {
            return None;
        }
        let at = || format!("page {id} (bucket {path})");
        let verify = |w: &mut Self, i: usize, key: &[u8], prev: Option<&[u8]>| {
            if let Some(prev) = prev {
                if i == 0 && prev > key {
                    w.err(format!(
                        "{}: first key is below the key of its parent branch",
                        at()
                    ));
                }
                if i > 0 && prev >= key {
                    w.err(format!(
                        "{}: key {i} is not greater than the previous key",
                        at()
                    ));
                }
            }
            if let Some(max) = max_open {
                if key >= max {
                    w.err(format!(
                        "{}: key {i} is not below the next key of its parent branch",
                        at()
                    ));
                }
            }
        };
        // (first key, last key, last child) of the node, for the index
        let (ret, first, last, last_child) = if p.is_branch() {
            let elems = match branch_elems(p.buf, p.count, &at) {
                Ok(e) => e,
                Err(e) => {
                    self.err(e.to_string());
                    return None;
                }
            };
            let mut running = min_closed;
            let mut max_in: Option<Vec<u8>> = None;
            for (i, (key, child)) in elems.iter().enumerate() {
                verify(self, i, key, running);
                let max = elems.get(i + 1).map(|(k, _)| *k).or(max_open);
                max_in =
                    self.check_tree(*child, Some(key), max, path, bucket_depth, tree_depth + 1);
                running = max_in.as_deref().or(Some(key));
            }
            let (first, last) = (elems.first().map(|e| e.0), elems.last().map(|e| e.0));
            (max_in, first, last, elems.last().map(|e| e.1))
        } else if p.is_leaf() {
            let elems = match leaf_elems(p.buf, p.count, &at) {
                Ok(e) => e,
                Err(e) => {
                    self.err(e.to_string());
                    return None;
                }
            };
            let mut running = min_closed;
            for (i, e) in elems.iter().enumerate() {
                verify(self, i, e.key, running);
                running = Some(e.key);
            }
            self.children(&elems, path, bucket_depth);
            let (first, last) = (elems.first().map(|e| e.key), elems.last().map(|e| e.key));
            (last.map(<[u8]>::to_vec), first, last, None)
        } else {
            self.err(format!(
                "{}: invalid page type (flags {:#06x}) in a tree",
                at(),
                p.flags
            ));
            return None;
        };
        if let (Some(start), Some(r)) = (start, self.record.as_mut()) {
            // Only a clean walk keeps its index, so the keys are in order: the greatest key
            // of the subtree is its last child's greatest (a branch), else its last key.
            let last_child_max = last_child
                .and_then(|c| r.nodes.get(c as usize).copied()?)
                .and_then(|n| n.max_all);
            let first = r.key(first);
            let max_all = match last_child_max {
                Some(k) => Some(k),
                None => r.key(last),
            };
            let ret = r.key(ret.as_deref());
            let info = NodeInfo {
                start,
                end: r.counter,
                tree_depth: tree_depth as u32,
                bucket_depth: bucket_depth as u32,
                first,
                max_all,
                ret,
            };
            if let Some(slot) = r.nodes.get_mut(id as usize) {
                *slot = Some(info);
            }
        }
        ret
    }
}

/// Runs every rule on the tree of `meta` as seen through `view`.
pub fn check(view: &View<'_>, meta: &Meta) -> CheckReport {
    walk(view, meta, false, None)
}

/// [`check()`], keeping in the report what [`check_planned`] needs to check a transaction
/// on this tree by its new pages alone ([`CheckReport::index`]; kept only when nothing is
/// wrong). It costs one pass's bookkeeping and a copy of about three keys per tree page.
pub fn check_indexed(view: &View<'_>, meta: &Meta) -> CheckReport {
    walk(view, meta, true, None)
}

/// The same verdict as [`check()`] on the tree of a planned transaction (`view` overlays the
/// new pages on the bytes `base` was checked on; `meta` is the new meta), walking only the
/// new pages when `base` is a clean [`check_indexed`] report of those bytes.
///
/// Why that is the same: a writer puts its new pages only on pages the old tree did not
/// reach (free ones, or past its high-water mark), so every old node the new tree refers to
/// heads the very subtree the old check passed, byte for byte. What the new tree can change
/// for such a subtree is checked here: the bounds its new parent puts on its keys (the lower
/// one reaches only its first key, the upper one everything up to its greatest key), that it
/// is met at the depths it was checked at (else it is walked), and that it is referenced once
/// and shares no page with another (its pages are the old walk's numbers `start..end`, so
/// two subtrees overlap exactly when their ranges do). Its pages then count as reachable,
/// and the free pages and the freelist are checked over the whole file as [`check()`] does.
/// When a new page lies on a page the old tree reached, or `base` has no index, this is
/// [`check()`]. Only the verdict and the page accounting are the same: a problem inside a
/// shared subtree may be reported at its head rather than at the page where it lies.
pub fn check_planned(view: &View<'_>, meta: &Meta, base: &CheckReport) -> CheckReport {
    match base.index.as_deref() {
        Some(index) if base.is_ok() && shares_only_old_pages(view, index) => {
            walk(view, meta, false, Some(index))
        }
        _ => check(view, meta),
    }
}

/// Whether the new pages of `view` lie only where `index`'s tree reached no page, on the
/// same bytes and page size, and the tree does not shrink.
fn shares_only_old_pages(view: &View<'_>, index: &TreeIndex) -> bool {
    if view.page_size != index.page_size
        || view.hwm < index.hwm
        || view.data.len() != index.data_len
    {
        return false;
    }
    let ps = view.page_size;
    view.overlay.is_none_or(|o| {
        o.iter().all(|(&id, buf)| {
            let span = buf.len().div_ceil(ps).max(1) as u64;
            (id..id.saturating_add(span))
                .all(|p| p >= 2 && index.pre.get(p as usize).is_none_or(|&q| q == NONE))
        })
    })
}

fn walk(view: &View<'_>, meta: &Meta, record: bool, base: Option<&TreeIndex>) -> CheckReport {
    let hwm = meta.hwm;
    let view = *view;
    let mut w = Walker {
        view: &view,
        reachable: vec![false; hwm as usize],
        errs: Vec::new(),
        record: record.then(|| Recorder {
            counter: 0,
            pre: vec![NONE; hwm as usize],
            nodes: vec![None; hwm as usize],
            keys: Vec::new(),
            overflowed: false,
        }),
        base: base.map(|index| Base {
            index,
            taken: Vec::new(),
        }),
        walked: 0,
    };
    w.reachable[0] = true;
    w.reachable[1] = true;
    let mut report = CheckReport {
        freelist_synced: meta.freelist_synced(),
        hwm,
        ..Default::default()
    };
    let mut freed = vec![false; hwm as usize];
    let mut free_errs = Vec::new();
    if meta.freelist_synced() {
        match view.page(meta.freelist) {
            Err(e) => w.err(format!("freelist: {e}")),
            Ok(p) if p.flags & FLAG_FREELIST == 0 => w.err(format!(
                "freelist page {}: not a freelist page (flags {:#06x})",
                p.id, p.flags
            )),
            Ok(p) => {
                w.mark(p.id, p.overflow);
                let (count, start) = if p.count == 0xFFFF {
                    (rd_u64(p.buf, PAGE_HEADER) as usize, PAGE_HEADER + 8)
                } else {
                    (p.count, PAGE_HEADER)
                };
                let end = count.checked_mul(8).and_then(|n| n.checked_add(start));
                if !matches!(end, Some(end) if end <= p.buf.len()) {
                    w.err(format!(
                        "freelist page {}: {count} ids do not fit in the page",
                        p.id
                    ));
                } else {
                    for i in 0..count {
                        let id = rd_u64(p.buf, start + i * 8);
                        if id < 2 || id >= hwm {
                            free_errs.push(format!("freelist: page id {id} outside 2..{hwm}"));
                        } else if freed[id as usize] {
                            free_errs.push(format!("page {id}: already freed"));
                        } else {
                            freed[id as usize] = true;
                        }
                    }
                }
            }
        }
    }
    w.check_bucket(Root::Page(meta.root), "", 0);
    if let Some(base) = w.base.take() {
        w.take_subtrees(base);
    }
    #[allow(clippy::needless_range_loop)]
    for i in 2..hwm as usize {
        let r = w.reachable[i];
        if r && freed[i] {
            free_errs.push(format!("page {i}: reachable freed"));
        } else if !r {
            if meta.freelist_synced() && !freed[i] {
                free_errs.push(format!("page {i}: unreachable unfreed"));
            }
            report.free.push(i as u64);
        }
    }
    free_errs.truncate(MAX_ERRORS);
    report.reachable_pages = w.reachable.iter().filter(|r| **r).count() as u64;
    report.structural = w.errs;
    report.freelist = free_errs;
    report.walked_pages = w.walked;
    if let Some(r) = w.record.take() {
        if report.is_ok() && !r.overflowed {
            report.index = Some(std::sync::Arc::new(TreeIndex {
                hwm,
                page_size: view.page_size,
                data_len: view.data.len(),
                marks: r.counter,
                pre: r.pre,
                nodes: r.nodes,
                keys: r.keys,
            }));
        }
    }
    report
}

impl Walker<'_, '_> {
    /// Marks the pages of every old subtree the new tree took as reachable, after checking
    /// that no two of them overlap (which would be a page referenced twice).
    fn take_subtrees(&mut self, base: Base<'_>) {
        let Base { index, mut taken } = base;
        taken.sort_unstable();
        let mut covered = vec![false; index.marks as usize];
        let mut end = 0u32;
        for &(start, stop, id) in &taken {
            if start < end {
                self.err(format!(
                    "page {id}: multiple references (cycle or shared page)"
                ));
            }
            end = end.max(stop);
            for c in &mut covered[start as usize..stop as usize] {
                *c = true;
            }
        }
        for (p, &q) in index.pre.iter().enumerate() {
            if q == NONE || !covered[q as usize] {
                continue;
            }
            if self.reachable[p] {
                self.err(format!(
                    "page {p}: multiple references (cycle or shared page)"
                ));
            } else {
                self.reachable[p] = true;
            }
        }
    }
}
