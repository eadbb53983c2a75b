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

struct Walker<'a, 'v> {
    view: &'v View<'a>,
    reachable: Vec<bool>,
    errs: Vec<String>,
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
        }
        fresh
    }

    fn check_bucket(&mut self, root: Root<'a>, path: &str, depth: usize) {
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

    fn children(&mut self, elems: &[LeafElem<'a>], path: &str, depth: usize) {
        for e in elems.iter().filter(|e| e.is_bucket()) {
            let child = format!("{path}/{}", String::from_utf8_lossy(e.key));
            match bucket_root(e.value, &format!("bucket {child}")) {
                Ok((r, _)) => self.check_bucket(r, &child, depth + 1),
                Err(err) => self.err(err.to_string()),
            }
        }
    }

    /// Checks the tree under page `id`; returns the greatest key in it.
    fn check_tree(
        &mut self,
        id: u64,
        min_closed: Option<&'a [u8]>,
        max_open: Option<&'a [u8]>,
        path: &str,
        bucket_depth: usize,
        tree_depth: usize,
    ) -> Option<&'a [u8]> {
        if tree_depth > MAX_DEPTH {
            self.err(format!(
                "page {id} (bucket {path}): tree deeper than {MAX_DEPTH} levels"
            ));
            return None;
        }
        let p = match self.view.page(id) {
            Ok(p) => p,
            Err(e) => {
                self.err(format!("{e} (bucket {path})"));
                return None;
            }
        };
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
        if p.is_branch() {
            let elems = match branch_elems(p.buf, p.count, &at) {
                Ok(e) => e,
                Err(e) => {
                    self.err(e.to_string());
                    return None;
                }
            };
            let mut running = min_closed;
            let mut max_in = None;
            for (i, (key, child)) in elems.iter().enumerate() {
                verify(self, i, key, running);
                let max = elems.get(i + 1).map(|(k, _)| *k).or(max_open);
                max_in =
                    self.check_tree(*child, Some(key), max, path, bucket_depth, tree_depth + 1);
                running = max_in.or(Some(key));
            }
            max_in
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
            elems.last().map(|e| e.key)
        } else {
            self.err(format!(
                "{}: invalid page type (flags {:#06x}) in a tree",
                at(),
                p.flags
            ));
            None
        }
    }
}

/// Runs every rule on the tree of `meta` as seen through `view`.
pub fn check(view: &View<'_>, meta: &Meta) -> CheckReport {
    let hwm = meta.hwm;
    let mut w = Walker {
        view,
        reachable: vec![false; hwm as usize],
        errs: Vec::new(),
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
    report
}
