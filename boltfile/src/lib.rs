//! Read, check and rewrite bbolt files (go.etcd.io/bbolt, format version 2): a small engine,
//! enough to read containerd's `meta.db` and to replace existing values in one crash-safe
//! transaction.
//!
//! ```
//! use boltfile::{check, write, Db};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/stores/containerd-1.6.20/meta.db.before");
//! let db = Db::read_path(fixture.as_ref())?;
//! // The newest valid meta page; containerd 1.6 still syncs its freelist.
//! assert!(db.meta.freelist_synced());
//! let report = check::check(&db.view(), &db.meta);
//! assert!(report.is_ok(), "{}", report.summary());
//!
//! // Walk: containerd's schema bucket `v1` holds one bucket per namespace.
//! let view = db.view();
//! let v1 = view.bucket(db.root(), b"v1", "v1")?.expect("a containerd store");
//! let mut namespaces = Vec::new();
//! view.for_each(v1, &mut |e| {
//!     if e.is_bucket() {
//!         namespaces.push(String::from_utf8_lossy(e.key).into_owned());
//!     }
//!     Ok(())
//! })?;
//! assert_eq!(namespaces, ["k8s.io"]);
//!
//! // Dump: every key, depth first; buckets have no value.
//! let dump = db.dump()?;
//! let containers: Vec<_> = dump
//!     .iter()
//!     .filter(|e| e.value.is_none() && e.path.len() == 3 && e.path[2] == b"containers")
//!     .collect();
//! assert_eq!(containers.len(), 9, "6 containers and 3 pod sandboxes");
//!
//! // Rewrite one value in a copy: plan (nothing written), check the planned tree, commit.
//! let dir = tempfile::tempdir()?;
//! let copy = dir.path().join("meta.db");
//! std::fs::copy(fixture, &copy)?;
//! let version = dump.iter().find(|e| e.path == [b"v1".to_vec()] && e.key == b"version").unwrap();
//! let mut edits = write::Edits::default();
//! edits.put(&[b"v1"], b"version", vec![42]);
//! let plan = write::plan(&db, &report, &edits)?;
//! assert!(check::check(&plan.view(&db.data), &plan.new_meta).is_ok());
//! let file = std::fs::OpenOptions::new().read(true).write(true).open(&copy)?;
//! write::commit(&file, &db.data, &plan)?;
//! let after = Db::read_path(&copy)?;
//! assert_eq!(after.meta.txid, db.meta.txid + 1);
//! let v1 = after.view().bucket(after.root(), b"v1", "v1")?.unwrap();
//! assert_eq!(after.view().get(v1, b"version")?.unwrap().value, [42]);
//! assert_ne!(version.value.as_deref(), Some(&[42][..]));
//! # Ok(())
//! # }
//! ```
//!
//! # Why a crate of its own
//!
//! The engine knows nothing about containerd: it is a file format, used by storepatch's
//! containerd back-end, by the fuzz targets and by tests that build or damage bolt files. As a
//! crate it is tested on its own (its tests need no store, no backup, no daemon), it cannot
//! reach into the rest of the tool (its only side effects are the writes of
//! [`write::commit`], through [`storage::Storage`], which is how tests inject failures and
//! crash points), and `#![deny(missing_docs)]` holds it to documenting every on-disk field,
//! because a reader of this code has to check it against bbolt's Go source and needs to know
//! what each number means.
//!
//! # Why our own engine and not bbolt-rs
//!
//! bbolt-rs 1.3.10 (the only maintained Rust crate that reads Go bolt files, and only with its
//! `compat` feature) cannot open files whose freelist is not synced (meta `freelist =
//! 0xFFFF…`): read-only open returns an error and read-write open crashes the process. That is
//! the state every containerd ≥ 1.7 and 2.x leaves `meta.db` in (they open bolt with
//! `NoFreelistSync`). Its file lock also blocks forever. Converting the file first (rebuild a
//! freelist, or compact into a fresh copy) would rewrite the whole file for a change of a few
//! bytes per container. The operation this tool needs is narrow: *replace the values of
//! existing keys* in nested buckets. So we implement exactly the parts of bbolt it needs, with
//! bbolt's own on-disk rules:
//!
//! * **Read** ([`Db`], [`View`]): both meta pages (magic, version, FNV-1a checksum), the valid
//!   one with the highest txid, bounds-checked branch/leaf pages, inline and non-inline nested
//!   buckets. Native endianness, like Go.
//! * **Check** ([`check::check`]): the rules of Go's `tx.Check()` (every page reachable once,
//!   no reachable page freed, every page below the high-water mark reachable or free, only
//!   branch/leaf pages in trees, key order inside pages and against the parent branch keys),
//!   plus what Go's check assumes silently (page header ids, element bounds, cycles, depth).
//!   The tests also run Go bbolt's own check on every file the writer produces
//!   (`tools/bbolt-check`, feature `test-support`). A planned transaction is checked by its
//!   new pages alone ([`check::check_planned`]): the old tree's clean check
//!   ([`check::check_indexed`]) already covers every subtree the transaction keeps as it is.
//! * **Write** ([`write`](mod@write)): copy-on-write like `tx.Commit`: every page on the path from the
//!   root to a changed value is written to a *new* page (first-fit from pages that are free in
//!   the current tree, else appended after the high-water mark); the pages this transaction
//!   frees are never reused by it. The data pages are written and `fdatasync`ed, then the new
//!   meta (txid+1, written over the *older* meta page, checksum) is written and `fdatasync`ed.
//!   Until that last write is durable the previous meta is the newest valid one and its tree is
//!   intact, so a crash at any instant leaves the old database or the new one. Bytes written
//!   grow with the number of changed values (≈ one leaf and its ancestors per value), not
//!   with the file size.
//! * **Freelist**: the layout found is kept. A synced freelist (containerd ≤ 1.6) gets a new,
//!   correct freelist page (free pages of the old tree that were not reused, plus the pages
//!   this transaction replaced, plus the old freelist page); an unsynced one (1.7, 2.x) keeps
//!   `freelist = 0xFFFF…`, and containerd rebuilds it by walking the tree, as it always does.
//! * **Build** ([`build`]): a fresh file from a key/value tree (a bulk load), for benchmarks
//!   and tests.
//!
//! Limits, by design: keys are never added or removed, so branch separator keys never change;
//! a node that grows past one page keeps its keys and gets overflow pages instead of being
//! split (valid bolt; bbolt splits it the next time it writes that node). An inline bucket that
//! grows past bbolt's inline limit (pageSize/4) is moved to its own page, as bbolt would.

#![deny(missing_docs)]

pub mod build;
pub mod check;
pub mod storage;
#[cfg(feature = "test-support")]
pub mod testing;
pub mod write;

use std::fmt;
use std::fs::File;
use std::path::Path;

/// bbolt's magic number, in both meta pages.
pub const MAGIC: u32 = 0xED0C_DAED;
/// The file format version bbolt 1.x writes and this engine reads.
pub const VERSION: u32 = 2;
/// Bytes of a page header: id u64, flags u16, count u16, overflow u32.
pub const PAGE_HEADER: usize = 16;
/// Bytes of one branch or leaf element in a page's element table.
pub const ELEM_SIZE: usize = 16;
/// Bytes of a bucket value's header: root page id u64 (0 = inline), sequence u64.
pub const BUCKET_HEADER: usize = 16;
/// Bytes of the meta struct after a meta page's header.
pub const META_SIZE: usize = 64;
/// Page flag of a branch page.
pub const FLAG_BRANCH: u16 = 0x01;
/// Page flag of a leaf page.
pub const FLAG_LEAF: u16 = 0x02;
/// Page flag of a meta page (pages 0 and 1).
pub const FLAG_META: u16 = 0x04;
/// Page flag of the freelist page.
pub const FLAG_FREELIST: u16 = 0x10;
/// Leaf element flag: the value is a nested bucket.
pub const BUCKET_LEAF_FLAG: u32 = 0x01;
/// `meta.freelist` of a file written with `NoFreelistSync`.
pub const NO_FREELIST: u64 = u64::MAX;
/// Deepest tree / bucket nesting we follow (bbolt trees of real files are < 10 deep).
pub const MAX_DEPTH: usize = 64;

/// A structural problem of a bolt file, located.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoltError {
    /// Where: a page, a bucket path, the meta pages, the file.
    pub at: String,
    /// What is wrong there.
    pub reason: String,
}

impl BoltError {
    /// An error at `at` (a page, bucket or file) because of `reason`.
    pub fn new(at: impl Into<String>, reason: impl Into<String>) -> Self {
        BoltError {
            at: at.into(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for BoltError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.at, self.reason)
    }
}

impl std::error::Error for BoltError {}

pub(crate) fn rd_u16(b: &[u8], off: usize) -> u16 {
    u16::from_ne_bytes(b[off..off + 2].try_into().unwrap())
}
pub(crate) fn rd_u32(b: &[u8], off: usize) -> u32 {
    u32::from_ne_bytes(b[off..off + 4].try_into().unwrap())
}
pub(crate) fn rd_u64(b: &[u8], off: usize) -> u64 {
    u64::from_ne_bytes(b[off..off + 8].try_into().unwrap())
}
pub(crate) fn wr_u16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_ne_bytes());
}
pub(crate) fn wr_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_ne_bytes());
}
pub(crate) fn wr_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_ne_bytes());
}

/// FNV-1a 64, bbolt's meta checksum (`meta.sum64`).
pub fn fnv1a64(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// One meta page's content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// Which meta page (0 or 1) it was read from / is written to.
    pub page: u64,
    /// [`MAGIC`] in a bolt file.
    pub magic: u32,
    /// Format version ([`VERSION`]).
    pub version: u32,
    /// Page size the file was created with (bbolt: the OS page size, usually 4096).
    pub page_size: u32,
    /// Unused by bbolt (0).
    pub flags: u32,
    /// Page id of the root bucket's tree.
    pub root: u64,
    /// The root bucket's sequence (unused by containerd).
    pub sequence: u64,
    /// Page id of the freelist page, or [`NO_FREELIST`] when the freelist is not synced.
    pub freelist: u64,
    /// High-water mark: number of pages in use.
    pub hwm: u64,
    /// Transaction id of the commit that wrote this meta; the higher valid one wins.
    pub txid: u64,
    /// FNV-1a 64 of the 56 bytes before it ([`fnv1a64`]); 0 is accepted, as in Go.
    pub checksum: u64,
}

impl Meta {
    /// Parses the meta struct of a page whose bytes start at `buf[0]` (needs 80 bytes).
    pub fn parse(buf: &[u8], page: u64) -> Meta {
        let m = PAGE_HEADER;
        Meta {
            page,
            magic: rd_u32(buf, m),
            version: rd_u32(buf, m + 4),
            page_size: rd_u32(buf, m + 8),
            flags: rd_u32(buf, m + 12),
            root: rd_u64(buf, m + 16),
            sequence: rd_u64(buf, m + 24),
            freelist: rd_u64(buf, m + 32),
            hwm: rd_u64(buf, m + 40),
            txid: rd_u64(buf, m + 48),
            checksum: rd_u64(buf, m + 56),
        }
    }

    /// bbolt's `meta.validate`: magic, version, checksum (0 is accepted, as in Go).
    pub fn validate(&self, buf: &[u8]) -> Result<(), String> {
        if self.magic != MAGIC {
            return Err(format!(
                "bad magic {:#010x} (a bolt file has {MAGIC:#010x})",
                self.magic
            ));
        }
        if self.version != VERSION {
            return Err(format!(
                "bolt format version {} is not supported (expected {VERSION})",
                self.version
            ));
        }
        let sum = fnv1a64(&buf[PAGE_HEADER..PAGE_HEADER + 56]);
        if self.checksum != 0 && self.checksum != sum {
            return Err(format!(
                "checksum mismatch (stored {:#018x}, computed {sum:#018x})",
                self.checksum
            ));
        }
        Ok(())
    }

    /// The full meta page (`page_size` bytes, header id = `self.page`), checksum computed.
    pub fn encode(&self) -> Vec<u8> {
        let mut p = vec![0u8; self.page_size as usize];
        wr_u64(&mut p, 0, self.page);
        wr_u16(&mut p, 8, FLAG_META);
        let m = PAGE_HEADER;
        wr_u32(&mut p, m, self.magic);
        wr_u32(&mut p, m + 4, self.version);
        wr_u32(&mut p, m + 8, self.page_size);
        wr_u32(&mut p, m + 12, self.flags);
        wr_u64(&mut p, m + 16, self.root);
        wr_u64(&mut p, m + 24, self.sequence);
        wr_u64(&mut p, m + 32, self.freelist);
        wr_u64(&mut p, m + 40, self.hwm);
        wr_u64(&mut p, m + 48, self.txid);
        let sum = fnv1a64(&p[m..m + 56]);
        wr_u64(&mut p, m + 56, sum);
        p
    }

    /// Whether the file keeps a freelist page (containerd ≤ 1.6) rather than `NoFreelistSync`.
    pub fn freelist_synced(&self) -> bool {
        self.freelist != NO_FREELIST
    }
}

/// Reads both meta pages of `data` (a whole bolt file) and returns the one bbolt would use:
/// the valid one with the higher txid. Also checks what the chosen meta promises about the
/// file (page size, high-water mark inside the file, root and freelist below it).
pub fn read_meta(data: &[u8]) -> Result<Meta, BoltError> {
    let at = "meta pages";
    if data.len() < PAGE_HEADER + META_SIZE {
        return Err(BoltError::new(
            at,
            format!(
                "not a bolt file: only {} bytes (even one meta page needs {})",
                data.len(),
                PAGE_HEADER + META_SIZE
            ),
        ));
    }
    let m0 = Meta::parse(data, 0);
    let r0 = m0.validate(data);
    // bbolt takes the page size from meta 0 when it validates; otherwise we look for meta 1
    // at every page size bbolt can have been created with.
    let mut candidates: Vec<usize> = Vec::new();
    if r0.is_ok() {
        candidates.push(m0.page_size as usize);
    } else {
        candidates.extend([4096usize, 8192, 16384, 32768, 65536, 1024, 2048]);
    }
    let mut m1: Option<(Meta, Result<(), String>)> = None;
    for ps in candidates {
        if data.len() >= ps + PAGE_HEADER + META_SIZE {
            let m = Meta::parse(&data[ps..], 1);
            let r = m.validate(&data[ps..]);
            let ok = r.is_ok();
            if ok || m1.is_none() {
                m1 = Some((m, r));
            }
            if ok {
                break;
            }
        }
    }
    let chosen = match (&r0, &m1) {
        (Ok(()), Some((m1v, Ok(())))) => {
            if m1v.page_size != m0.page_size {
                return Err(BoltError::new(
                    at,
                    format!(
                        "the two meta pages disagree on the page size ({} vs {})",
                        m0.page_size, m1v.page_size
                    ),
                ));
            }
            if m1v.txid > m0.txid {
                *m1v
            } else {
                m0
            }
        }
        (Ok(()), _) => m0,
        (Err(_), Some((m1v, Ok(())))) => *m1v,
        (Err(e0), other) => {
            let e1 = match other {
                Some((_, Err(e))) => e.clone(),
                _ => "missing (file too short)".to_string(),
            };
            let not_bolt = m0.magic != MAGIC && !matches!(other, Some((m, _)) if m.magic == MAGIC);
            let reason = if not_bolt {
                format!("not a bolt file (no bolt magic on either meta page; meta 0: {e0})")
            } else {
                format!("both meta pages are invalid (meta 0: {e0}; meta 1: {e1})")
            };
            return Err(BoltError::new(at, reason));
        }
    };
    let ps = chosen.page_size as usize;
    if !(512..=1 << 20).contains(&ps) || !ps.is_power_of_two() {
        return Err(BoltError::new(
            format!("meta page {}", chosen.page),
            format!("implausible page size {ps}"),
        ));
    }
    if data.len() < 2 * ps {
        return Err(BoltError::new(
            at,
            format!(
                "file truncated: {} bytes, less than two {ps}-byte meta pages",
                data.len()
            ),
        ));
    }
    let at_m = format!("meta page {} (txid {})", chosen.page, chosen.txid);
    let pages_in_file = (data.len() / ps) as u64;
    if chosen.hwm < 3 || chosen.hwm > pages_in_file {
        return Err(BoltError::new(
            at_m,
            format!(
                "file truncated or damaged: the meta says {} pages are in use but the file holds {pages_in_file} pages of {ps} bytes",
                chosen.hwm
            ),
        ));
    }
    if chosen.root < 2 || chosen.root >= chosen.hwm {
        return Err(BoltError::new(
            at_m,
            format!("root page {} outside 2..{}", chosen.root, chosen.hwm),
        ));
    }
    if chosen.freelist != NO_FREELIST && (chosen.freelist < 2 || chosen.freelist >= chosen.hwm) {
        return Err(BoltError::new(
            at_m,
            format!(
                "freelist page {} outside 2..{}",
                chosen.freelist, chosen.hwm
            ),
        ));
    }
    Ok(chosen)
}

/// A page (its whole span, overflow included).
#[derive(Debug, Clone, Copy)]
pub struct Page<'a> {
    /// The page id (checked against its header).
    pub id: u64,
    /// The header's type flags ([`FLAG_BRANCH`], [`FLAG_LEAF`], ...).
    pub flags: u16,
    /// Elements in the page (freelist: ids, or 0xFFFF when the count is in the first u64).
    pub count: usize,
    /// Pages after this one that belong to it.
    pub overflow: u32,
    /// The whole span: `(overflow + 1) * page_size` bytes, header included.
    pub buf: &'a [u8],
}

// Tree pages must carry exactly one type flag. bbolt only ever writes 0x01 or 0x02 (pages are
// zeroed before reuse), but reads a damaged mix inconsistently: its cursor tests the leaf bit
// first, its page walk (and so `tx.Check`) the branch bit. Accepting a mix would let our check
// and our reader see two different trees; exact flags make it corruption, plainly reported.
impl<'a> Page<'a> {
    /// A leaf page (exactly [`FLAG_LEAF`]).
    pub fn is_leaf(&self) -> bool {
        self.flags == FLAG_LEAF
    }
    /// A branch page (exactly [`FLAG_BRANCH`]).
    pub fn is_branch(&self) -> bool {
        self.flags == FLAG_BRANCH
    }
}

/// A page read into a buffer of its own, or borrowed where it already is in memory
/// ([`View::page_copy`]).
#[derive(Debug, Clone)]
pub struct PageCopy<'a> {
    id: u64,
    flags: u16,
    count: usize,
    overflow: u32,
    buf: std::borrow::Cow<'a, [u8]>,
}

impl<'a> PageCopy<'a> {
    fn borrowed(p: Page<'a>) -> Self {
        PageCopy {
            id: p.id,
            flags: p.flags,
            count: p.count,
            overflow: p.overflow,
            buf: std::borrow::Cow::Borrowed(p.buf),
        }
    }

    /// The page with the lifetime of the bytes it borrows, when it borrows them (read
    /// through the map, from bytes in memory or from an overlay); `None` for a page read
    /// into a buffer of its own.
    fn borrowed_page(&self) -> Option<Page<'a>> {
        match self.buf {
            std::borrow::Cow::Borrowed(buf) => Some(Page {
                id: self.id,
                flags: self.flags,
                count: self.count,
                overflow: self.overflow,
                buf,
            }),
            std::borrow::Cow::Owned(_) => None,
        }
    }

    /// The page, borrowing this copy.
    pub fn page(&self) -> Page<'_> {
        Page {
            id: self.id,
            flags: self.flags,
            count: self.count,
            overflow: self.overflow,
            buf: &self.buf,
        }
    }
}

/// One key/value of a leaf page (value of a bucket = its bucket header, maybe with an inline page).
#[derive(Debug, Clone, Copy)]
pub struct LeafElem<'a> {
    /// Element flags: [`BUCKET_LEAF_FLAG`] for a nested bucket, else 0.
    pub flags: u32,
    /// The key.
    pub key: &'a [u8],
    /// The value; for a nested bucket its bucket header, maybe followed by an inline page.
    pub value: &'a [u8],
}

impl<'a> LeafElem<'a> {
    /// Whether the value is a nested bucket.
    pub fn is_bucket(&self) -> bool {
        self.flags & BUCKET_LEAF_FLAG != 0
    }
}

/// A leaf element copied out of its page ([`View::get_copied`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElemCopy {
    /// Element flags: [`BUCKET_LEAF_FLAG`] for a nested bucket, else 0.
    pub flags: u32,
    /// The key.
    pub key: Vec<u8>,
    /// The value; for a nested bucket its bucket header, maybe followed by an inline page.
    pub value: Vec<u8>,
}

impl ElemCopy {
    fn of(e: LeafElem<'_>) -> Self {
        ElemCopy {
            flags: e.flags,
            key: e.key.to_vec(),
            value: e.value.to_vec(),
        }
    }

    /// Whether the value is a nested bucket.
    pub fn is_bucket(&self) -> bool {
        self.flags & BUCKET_LEAF_FLAG != 0
    }
}

/// Where a bucket's tree lives.
#[derive(Debug, Clone, Copy)]
pub enum Root<'a> {
    /// A tree whose root page has this id.
    Page(u64),
    /// An inline bucket: the bytes of its fake leaf page (header included).
    Inline(&'a [u8]),
}

/// Decodes a bucket value (header + maybe inline page) into its root and its sequence; `at`
/// names it in errors.
pub fn bucket_root<'a>(value: &'a [u8], at: &str) -> Result<(Root<'a>, u64), BoltError> {
    if value.len() < BUCKET_HEADER {
        return Err(BoltError::new(
            at,
            format!(
                "bucket value of {} bytes is shorter than a bucket header",
                value.len()
            ),
        ));
    }
    let root = rd_u64(value, 0);
    let seq = rd_u64(value, 8);
    if root == 0 {
        let page = &value[BUCKET_HEADER..];
        if page.len() < PAGE_HEADER {
            return Err(BoltError::new(at, "inline bucket without its page header"));
        }
        Ok((Root::Inline(page), seq))
    } else {
        Ok((Root::Page(root), seq))
    }
}

/// The elements of an inline bucket's page (`page` = the bytes after the bucket header),
/// which must be a leaf; `at` names it in errors.
pub fn inline_elems<'a>(
    page: &'a [u8],
    at: &dyn Fn() -> String,
) -> Result<Vec<LeafElem<'a>>, BoltError> {
    let flags = rd_u16(page, 8);
    if flags != FLAG_LEAF {
        return Err(BoltError::new(
            at(),
            format!("its page is not a leaf (flags {flags:#06x})"),
        ));
    }
    leaf_elems(page, rd_u16(page, 10) as usize, at)
}

/// Parses the `count` elements of a leaf page image (`buf` = the page span or an inline
/// page), bounds-checked; `at` names the page in errors.
pub fn leaf_elems<'a>(
    buf: &'a [u8],
    count: usize,
    at: &dyn Fn() -> String,
) -> Result<Vec<LeafElem<'a>>, BoltError> {
    let end = PAGE_HEADER + count * ELEM_SIZE;
    if end > buf.len() {
        return Err(BoltError::new(
            at(),
            format!("{count} leaf elements do not fit in {} bytes", buf.len()),
        ));
    }
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let e = PAGE_HEADER + i * ELEM_SIZE;
        let flags = rd_u32(buf, e);
        let pos = rd_u32(buf, e + 4) as usize;
        let ksize = rd_u32(buf, e + 8) as usize;
        let vsize = rd_u32(buf, e + 12) as usize;
        let kstart = e + pos;
        let vend = kstart.checked_add(ksize).and_then(|x| x.checked_add(vsize));
        match vend {
            Some(vend) if vend <= buf.len() => out.push(LeafElem {
                flags,
                key: &buf[kstart..kstart + ksize],
                value: &buf[kstart + ksize..vend],
            }),
            _ => {
                return Err(BoltError::new(
                    at(),
                    format!("leaf element {i} points outside its page"),
                ))
            }
        }
    }
    Ok(out)
}

/// Parses the elements of a branch page: (key, child page id).
pub fn branch_elems<'a>(
    buf: &'a [u8],
    count: usize,
    at: &dyn Fn() -> String,
) -> Result<Vec<(&'a [u8], u64)>, BoltError> {
    let end = PAGE_HEADER + count * ELEM_SIZE;
    if end > buf.len() {
        return Err(BoltError::new(
            at(),
            format!("{count} branch elements do not fit in {} bytes", buf.len()),
        ));
    }
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let e = PAGE_HEADER + i * ELEM_SIZE;
        let pos = rd_u32(buf, e) as usize;
        let ksize = rd_u32(buf, e + 4) as usize;
        let pgid = rd_u64(buf, e + 8);
        let kstart = e + pos;
        match kstart.checked_add(ksize) {
            Some(kend) if kend <= buf.len() => out.push((&buf[kstart..kend], pgid)),
            _ => {
                return Err(BoltError::new(
                    at(),
                    format!("branch element {i} points outside its page"),
                ))
            }
        }
    }
    Ok(out)
}

/// Read access to the pages of one transaction's tree: the file's bytes, optionally overlaid
/// with pages a transaction is about to write (so it can be checked before anything is written).
#[derive(Clone, Copy)]
pub struct View<'a> {
    /// The whole file.
    pub data: &'a [u8],
    /// Pages (by id, whole spans) that replace the file's bytes in this view.
    pub overlay: Option<&'a std::collections::BTreeMap<u64, Vec<u8>>>,
    /// The file's page size.
    pub page_size: usize,
    /// High-water mark of the transaction viewed: pages at or above it do not exist.
    pub hwm: u64,
    /// The mapping's residency budget ([`Db::residency`]): file pages this view reads are
    /// counted against it, and our process's residency of the mapping is dropped each time
    /// the budget is used up. `None` for bytes we own.
    pub residency: Option<&'a Residency>,
    /// The mapped file itself ([`Db::view`] of a mapped file): [`View::page_copy`] reads its
    /// pages with `pread` instead of through the mapping.
    pub file: Option<&'a File>,
    /// Pages [`View::page_copy`] may still read (`None`: no bound). A walk that may run on a
    /// tree nobody has checked yet (one that runs beside the check) bounds its work with it:
    /// a page shared or in a cycle would otherwise be read over and over.
    pub read_budget: Option<&'a std::sync::atomic::AtomicU64>,
}

impl<'a> View<'a> {
    /// The tree of `meta` in the file `data`.
    pub fn new(data: &'a [u8], meta: &Meta) -> Self {
        View {
            data,
            overlay: None,
            page_size: meta.page_size as usize,
            hwm: meta.hwm,
            residency: None,
            file: None,
            read_budget: None,
        }
    }

    /// This view with its file page reads counted against `residency` (the budget of the
    /// mapping `data` is part of, [`Db::residency`]).
    pub fn with_residency(self, residency: Option<&'a Residency>) -> Self {
        View { residency, ..self }
    }

    /// The page `id` with its whole span, bounds-checked against the high-water mark and the file.
    pub fn page(&self, id: u64) -> Result<Page<'a>, BoltError> {
        let at = || format!("page {id}");
        if id >= self.hwm {
            return Err(BoltError::new(
                at(),
                format!(
                    "page id beyond the high-water mark ({} pages in use)",
                    self.hwm
                ),
            ));
        }
        let ps = self.page_size;
        let buf: &'a [u8] = match self.overlay.and_then(|o| o.get(&id)) {
            Some(b) => b.as_slice(),
            None => {
                let off = (id as usize)
                    .checked_mul(ps)
                    .filter(|o| o + ps <= self.data.len());
                match off {
                    Some(off) => {
                        if let Some(r) = self.residency {
                            // the header says how many overflow pages follow; they are
                            // counted below
                            r.touch(off, ps);
                        }
                        &self.data[off..]
                    }
                    None => {
                        return Err(BoltError::new(
                            at(),
                            format!(
                                "page lies beyond the end of the file ({} bytes)",
                                self.data.len()
                            ),
                        ))
                    }
                }
            }
        };
        let (flags, count, overflow, span) = self.header(id, buf)?;
        if let (Some(r), true) = (self.residency, overflow > 0 && buf.len() >= span) {
            if !self.overlay.is_some_and(|o| o.contains_key(&id)) {
                r.touch(id as usize * ps, span);
            }
        }
        if buf.len() < span {
            return Err(BoltError::new(
                at(),
                format!("page with {overflow} overflow pages runs past the end of the file"),
            ));
        }
        Ok(Page {
            id,
            flags,
            count,
            overflow,
            buf: &buf[..span],
        })
    }

    /// Page `id` read with `pread` from [`View::file`] into a buffer of its own when the view
    /// has the file and the page is not one of its overlay (else [`View::page`]), with the
    /// same checks and errors as [`View::page`].
    ///
    /// Why: a walk that copies what it reads anyway (the writer's planner copies every
    /// element of every page it rewrites) gains nothing from the mapping but its faults, and
    /// under [`Residency`]'s budget the pages of a tree spread over the whole file map and
    /// drop the same granules over and over; the page cache serves `pread` without mapping
    /// anything into the process.
    pub fn page_copy(&self, id: u64) -> Result<PageCopy<'a>, BoltError> {
        if let Some(budget) = self.read_budget {
            use std::sync::atomic::Ordering::Relaxed;
            if budget
                .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1))
                .is_err()
            {
                return Err(BoltError::new(
                    format!("page {id}"),
                    "read more often than a tree of this file's pages needs (shared or cyclic pages)",
                ));
            }
        }
        let ps = self.page_size;
        let off = (id as usize)
            .checked_mul(ps)
            .filter(|o| o + ps <= self.data.len());
        let (file, off) = match (self.file, off) {
            (Some(f), Some(off))
                if id < self.hwm && !self.overlay.is_some_and(|o| o.contains_key(&id)) =>
            {
                (f, off)
            }
            // (the same errors, or the page where it already is in memory)
            _ => return self.page(id).map(PageCopy::borrowed),
        };
        let at = || format!("page {id}");
        let read = |buf: &mut [u8], at_off: usize| {
            use std::os::unix::fs::FileExt;
            file.read_exact_at(buf, at_off as u64)
                .map_err(|e| BoltError::new(at(), format!("cannot read: {e}")))
        };
        let mut buf = vec![0u8; ps];
        read(&mut buf, off)?;
        let (flags, count, overflow, span) = self.header(id, &buf)?;
        if off + span > self.data.len() {
            return Err(BoltError::new(
                at(),
                format!("page with {overflow} overflow pages runs past the end of the file"),
            ));
        }
        if span > ps {
            buf.resize(span, 0);
            read(&mut buf[ps..], off + ps)?;
        }
        Ok(PageCopy {
            id,
            flags,
            count,
            overflow,
            buf: std::borrow::Cow::Owned(buf),
        })
    }

    /// The checks of a page's header (`buf` starts at page `id`): its id, and its span
    /// inside the high-water mark. Returns (flags, count, overflow, span in bytes).
    fn header(&self, id: u64, buf: &[u8]) -> Result<(u16, usize, u32, usize), BoltError> {
        let at = || format!("page {id}");
        if buf.len() < PAGE_HEADER {
            return Err(BoltError::new(at(), "page shorter than its header"));
        }
        let hid = rd_u64(buf, 0);
        let flags = rd_u16(buf, 8);
        let count = rd_u16(buf, 10) as usize;
        let overflow = rd_u32(buf, 12);
        if hid != id {
            return Err(BoltError::new(
                at(),
                format!("page header says it is page {hid} (stale or misplaced page)"),
            ));
        }
        let span_pages = overflow as u64 + 1;
        if id + span_pages > self.hwm {
            return Err(BoltError::new(
                at(),
                format!(
                    "page with {overflow} overflow pages runs past the high-water mark ({})",
                    self.hwm
                ),
            ));
        }
        Ok((flags, count, overflow, span_pages as usize * self.page_size))
    }

    fn tree_page(&self, id: u64) -> Result<Page<'a>, BoltError> {
        tree_only(self.page(id)?)
    }

    fn tree_page_copy(&self, id: u64) -> Result<PageCopy<'a>, BoltError> {
        let c = self.page_copy(id)?;
        tree_only(c.page())?;
        Ok(c)
    }

    /// A tree page, as the walks below read it through the map (or the bytes in memory).
    fn tree_page_here(&self, id: u64) -> Result<PageCopy<'a>, BoltError> {
        self.tree_page(id).map(PageCopy::borrowed)
    }

    /// Calls `leaf` for every leaf page of the tree under page `id`, in key order, each read
    /// with `fetch` (through the map, or with `pread`: the walk is the same).
    fn for_each_leaf(
        &self,
        id: u64,
        depth: usize,
        fetch: &dyn Fn(u64) -> Result<PageCopy<'a>, BoltError>,
        leaf: &mut dyn FnMut(&PageCopy<'a>) -> Result<(), BoltError>,
    ) -> Result<(), BoltError> {
        if depth > MAX_DEPTH {
            return Err(BoltError::new(
                format!("page {id}"),
                "tree deeper than 64 levels (cycle in the page graph?)",
            ));
        }
        let c = fetch(id)?;
        let p = c.page();
        if p.is_leaf() {
            return leaf(&c);
        }
        for (_, child) in branch_elems(p.buf, p.count, &|| format!("page {id}"))? {
            self.for_each_leaf(child, depth + 1, fetch, leaf)?;
        }
        Ok(())
    }

    /// bbolt's search for `key` in the tree under page `id`: the leaf page where it would be
    /// (`None`: an empty branch on the way), each page read with `fetch`.
    fn leaf_for(
        &self,
        mut id: u64,
        key: &[u8],
        fetch: &dyn Fn(u64) -> Result<PageCopy<'a>, BoltError>,
    ) -> Result<Option<PageCopy<'a>>, BoltError> {
        let mut depth = 0usize;
        loop {
            if depth > MAX_DEPTH {
                return Err(BoltError::new(
                    format!("page {id}"),
                    "tree deeper than 64 levels",
                ));
            }
            let c = fetch(id)?;
            let p = c.page();
            if p.is_leaf() {
                return Ok(Some(c));
            }
            let elems = branch_elems(p.buf, p.count, &|| format!("page {id}"))?;
            if elems.is_empty() {
                return Ok(None);
            }
            id = elems[child_index(&elems, key)].1;
            depth += 1;
        }
    }

    /// Calls `f` for every key/value of the bucket, in key order.
    pub fn for_each(
        &self,
        root: Root<'a>,
        f: &mut dyn FnMut(LeafElem<'a>) -> Result<(), BoltError>,
    ) -> Result<(), BoltError> {
        match root {
            Root::Inline(page) => {
                for e in inline_elems(page, &|| "inline bucket".to_string())? {
                    f(e)?;
                }
                Ok(())
            }
            Root::Page(id) => self.for_each_leaf(id, 0, &|id| self.tree_page_here(id), &mut |c| {
                let p = c.borrowed_page().expect("read where the bytes are");
                for e in leaf_elems(p.buf, p.count, &|| format!("page {}", p.id))? {
                    f(e)?;
                }
                Ok(())
            }),
        }
    }

    /// The element with exactly `key` in the bucket, if any.
    pub fn get(&self, root: Root<'a>, key: &[u8]) -> Result<Option<LeafElem<'a>>, BoltError> {
        let id = match root {
            Root::Inline(page) => {
                let elems = inline_elems(page, &|| "inline bucket".to_string())?;
                return Ok(elems.into_iter().find(|e| e.key == key));
            }
            Root::Page(id) => id,
        };
        let Some(c) = self.leaf_for(id, key, &|id| self.tree_page_here(id))? else {
            return Ok(None);
        };
        let p = c.borrowed_page().expect("read where the bytes are");
        let elems = leaf_elems(p.buf, p.count, &|| format!("page {}", p.id))?;
        Ok(find_key(&elems, key))
    }

    /// [`View::for_each`] reading the pages with [`View::page_copy`]: the elements live only
    /// as long as each call of `f` (copy what you keep), the same elements in the same order,
    /// the same errors.
    pub fn for_each_copied(
        &self,
        root: Root<'_>,
        f: &mut dyn FnMut(LeafElem<'_>) -> Result<(), BoltError>,
    ) -> Result<(), BoltError> {
        match root {
            Root::Inline(page) => {
                for e in inline_elems(page, &|| "inline bucket".to_string())? {
                    f(e)?;
                }
                Ok(())
            }
            Root::Page(id) => self.for_each_leaf(id, 0, &|id| self.tree_page_copy(id), &mut |c| {
                let p = c.page();
                for e in leaf_elems(p.buf, p.count, &|| format!("page {}", p.id))? {
                    f(e)?;
                }
                Ok(())
            }),
        }
    }

    /// [`View::get`] reading the pages with [`View::page_copy`]: the element found, copied.
    pub fn get_copied(&self, root: Root<'_>, key: &[u8]) -> Result<Option<ElemCopy>, BoltError> {
        let id = match root {
            Root::Inline(page) => {
                let elems = inline_elems(page, &|| "inline bucket".to_string())?;
                return Ok(elems.into_iter().find(|e| e.key == key).map(ElemCopy::of));
            }
            Root::Page(id) => id,
        };
        let Some(c) = self.leaf_for(id, key, &|id| self.tree_page_copy(id))? else {
            return Ok(None);
        };
        let p = c.page();
        let elems = leaf_elems(p.buf, p.count, &|| format!("page {}", p.id))?;
        Ok(find_key(&elems, key).map(ElemCopy::of))
    }

    /// [`View::get_copied`] of many keys of one bucket in one descent: every page on the way
    /// to them is read once, not once per key. Calls `found(i, element)` for each `keys[i]`,
    /// in order, with its element (borrowed from the page's copy for the call) or `None`.
    ///
    /// Why: a read-back of thousands of values of one bucket (a node's containers) looked
    /// each up from the bucket's root, reading its branch pages again for every value. Any
    /// order of `keys` gives the same answers; ascending keys share the most pages.
    pub fn get_each_copied(
        &self,
        root: Root<'_>,
        keys: &[&[u8]],
        found: &mut FoundEach<'_>,
    ) -> Result<(), BoltError> {
        match root {
            Root::Inline(page) => {
                let elems = inline_elems(page, &|| "inline bucket".to_string())?;
                for (i, k) in keys.iter().enumerate() {
                    found(i, elems.iter().find(|e| e.key == *k).copied())?;
                }
                Ok(())
            }
            Root::Page(id) => self.get_each_under(id, keys, 0, 0, found),
        }
    }

    /// [`View::get_each_copied`] in the tree under page `id`; `keys[j]` is the caller's key
    /// `first + j`.
    fn get_each_under(
        &self,
        id: u64,
        keys: &[&[u8]],
        first: usize,
        depth: usize,
        found: &mut FoundEach<'_>,
    ) -> Result<(), BoltError> {
        if depth > MAX_DEPTH {
            return Err(BoltError::new(
                format!("page {id}"),
                "tree deeper than 64 levels",
            ));
        }
        let c = self.tree_page_copy(id)?;
        let p = c.page();
        if p.is_leaf() {
            let elems = leaf_elems(p.buf, p.count, &|| format!("page {id}"))?;
            for (j, k) in keys.iter().enumerate() {
                found(first + j, find_key(&elems, k))?;
            }
            return Ok(());
        }
        let elems = branch_elems(p.buf, p.count, &|| format!("page {id}"))?;
        if elems.is_empty() {
            // (as `leaf_for`: an empty branch holds none of them)
            for j in 0..keys.len() {
                found(first + j, None)?;
            }
            return Ok(());
        }
        // each run of consecutive keys that fall in the same child, in one descent
        let mut start = 0;
        while start < keys.len() {
            let child = child_index(&elems, keys[start]);
            let end = start
                + 1
                + keys[start + 1..]
                    .iter()
                    .take_while(|k| child_index(&elems, k) == child)
                    .count();
            self.get_each_under(
                elems[child].1,
                &keys[start..end],
                first + start,
                depth + 1,
                found,
            )?;
            start = end;
        }
        Ok(())
    }

    /// [`View::bucket`] reading the pages with [`View::page_copy`]: the nested bucket's value
    /// (its header, maybe with an inline page), for [`bucket_root`].
    pub fn bucket_copied(
        &self,
        root: Root<'_>,
        key: &[u8],
        at: &str,
    ) -> Result<Option<Vec<u8>>, BoltError> {
        match self.get_copied(root, key)? {
            None => Ok(None),
            Some(e) if e.is_bucket() => Ok(Some(e.value)),
            Some(_) => Err(BoltError::new(at, "is a value, expected a bucket")),
        }
    }

    /// The nested bucket `key` of `root`; `Ok(None)` when absent, an error when `key` is a value.
    pub fn bucket(
        &self,
        root: Root<'a>,
        key: &[u8],
        at: &str,
    ) -> Result<Option<Root<'a>>, BoltError> {
        match self.get(root, key)? {
            None => Ok(None),
            Some(e) if e.is_bucket() => Ok(Some(bucket_root(e.value, at)?.0)),
            Some(_) => Err(BoltError::new(at, "is a value, expected a bucket")),
        }
    }
}

/// What [`View::get_each_copied`] calls for each key: its index and its element, if any.
pub type FoundEach<'f> = dyn FnMut(usize, Option<LeafElem<'_>>) -> Result<(), BoltError> + 'f;

/// `p` when it is a tree page (exactly a branch or a leaf).
fn tree_only(p: Page<'_>) -> Result<Page<'_>, BoltError> {
    if !p.is_leaf() && !p.is_branch() {
        return Err(BoltError::new(
            format!("page {}", p.id),
            format!(
                "expected a branch or leaf page, found flags {:#06x}",
                p.flags
            ),
        ));
    }
    Ok(p)
}

/// The element of a leaf with exactly `key` (a leaf's keys are sorted).
fn find_key<'e>(elems: &[LeafElem<'e>], key: &[u8]) -> Option<LeafElem<'e>> {
    elems
        .binary_search_by(|e| e.key.cmp(key))
        .ok()
        .map(|i| elems[i])
}

/// bbolt's branch search: the last element whose key is <= `key` (or the first).
pub fn child_index(elems: &[(&[u8], u64)], key: &[u8]) -> usize {
    match elems.binary_search_by(|(k, _)| (*k).cmp(key)) {
        Ok(i) => i,
        Err(0) => 0,
        Err(i) => i - 1,
    }
}

/// The bytes of an open bolt file: a read-only shared mapping, or a private copy.
pub enum Data {
    /// A read-only shared mapping of the file.
    Map(memmap2::Mmap),
    /// The file's bytes in memory.
    Owned(Vec<u8>),
}

impl std::ops::Deref for Data {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Data::Map(m) => m,
            Data::Owned(v) => v,
        }
    }
}

/// How many bytes of a mapped file may be resident in our process ([`Residency`]) by
/// default: four granules. This is the budget of a writer, which holds its planned pages
/// while it checks them (on the 2,000-container containerd node, 67 MB meta.db, 24 MiB here
/// put the patch's peak RSS 14 MB above 8 MiB); a read-only walk may take more
/// ([`Db::map_with_budget`]): every dropped granule it reads again is mapped again, which
/// with 8 MiB cost that node's scan about 0.1 s.
pub const RESIDENCY_BUDGET: usize = 8 << 20;

/// The unit [`Residency`] counts and drops in: a read fault of a file mapping may map the
/// whole page-cache folio it hits (ext4 has large folios since Linux 6.16: up to 2 MiB, the
/// PMD size on x86-64) and, around it, the cached pages of the aligned `fault_around_bytes`
/// window (64 KiB); so a read anywhere in a granule may make all of it resident.
pub const RESIDENCY_GRANULE: usize = 2 << 20;

/// A bound on how much of a mapped bolt file stays resident in our process. Every page of a
/// shared file mapping we read stays mapped (and counted in our RSS) until it is unmapped, so
/// one walk over a 67 MB meta.db would make it all resident. Instead every
/// [`RESIDENCY_GRANULE`] a read may have made resident is counted, and when more than the
/// budget is, `madvise(MADV_DONTNEED)` drops our mapping of the granules not read for the
/// longest (a clock: a granule read since it was last passed gets a second chance, so the
/// upper levels of the tree a walk keeps coming back to stay mapped). The pages stay in the
/// page cache and the next read maps them again, with the same bytes (the mapping is shared
/// and read-only: there are no private copies to lose). Only a [`Data::Map`] has one; bytes
/// we own are never advised.
pub struct Residency {
    base: *const u8,
    len: usize,
    budget: usize,
    /// granules counted as resident
    resident: Vec<std::sync::atomic::AtomicU64>,
    /// granules read since the clock last passed them
    referenced: Vec<std::sync::atomic::AtomicU64>,
    /// the resident granules, oldest first
    clock: std::sync::Mutex<std::collections::VecDeque<usize>>,
    drops: std::sync::atomic::AtomicUsize,
}

// SAFETY: the pointer is only passed to madvise, never dereferenced; the rest is atomic or
// behind a mutex.
unsafe impl Send for Residency {}
// SAFETY: as above.
unsafe impl Sync for Residency {}

impl Residency {
    fn new(base: *const u8, len: usize, budget: usize) -> Self {
        let words = || {
            (0..len.div_ceil(RESIDENCY_GRANULE).div_ceil(64))
                .map(|_| 0.into())
                .collect()
        };
        Residency {
            base,
            len,
            budget: budget.max(RESIDENCY_GRANULE),
            resident: words(),
            referenced: words(),
            clock: Default::default(),
            drops: 0.into(),
        }
    }

    /// Counts a read of `len` bytes at `off` of the mapping (every granule it may have made
    /// resident); drops the longest unread granules when more than the budget is resident.
    pub fn touch(&self, off: usize, len: usize) {
        use std::sync::atomic::Ordering::Relaxed;
        if self.len == 0 {
            return;
        }
        let lo = off.min(self.len - 1) / RESIDENCY_GRANULE;
        let hi = off.saturating_add(len.max(1) - 1).min(self.len - 1) / RESIDENCY_GRANULE;
        for g in lo..=hi {
            let bit = 1u64 << (g % 64);
            self.referenced[g / 64].fetch_or(bit, Relaxed);
            if self.resident[g / 64].fetch_or(bit, Relaxed) & bit != 0 {
                continue;
            }
            let mut clock = self.clock.lock().unwrap_or_else(|e| e.into_inner());
            clock.push_back(g);
            let max = self.budget / RESIDENCY_GRANULE;
            // Never the granule being read (it would be mapped again uncounted); every other
            // one loses its second chance when passed, so this ends within two rounds.
            while clock.len() > max {
                let Some(h) = clock.pop_front() else { break };
                let hbit = 1u64 << (h % 64);
                if h == g || self.referenced[h / 64].fetch_and(!hbit, Relaxed) & hbit != 0 {
                    clock.push_back(h);
                    continue;
                }
                self.resident[h / 64].fetch_and(!hbit, Relaxed);
                self.advise(h * RESIDENCY_GRANULE, RESIDENCY_GRANULE);
            }
        }
    }

    fn advise(&self, off: usize, len: usize) {
        let len = len.min(self.len.saturating_sub(off));
        if len == 0 {
            return;
        }
        // SAFETY: `off..off + len` lies inside a live read-only shared file mapping (owned by
        // the Db this belongs to), `off` is a multiple of the granule and so page-aligned;
        // MADV_DONTNEED only unmaps pages, which the next read maps again from the page
        // cache with the file's bytes.
        let rc = unsafe {
            libc::madvise(
                self.base.add(off) as *mut libc::c_void,
                len,
                libc::MADV_DONTNEED,
            )
        };
        if rc == 0 {
            self.drops
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Drops our process's residency of the whole mapping now (the page cache keeps it).
    pub fn release(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        let mut clock = self.clock.lock().unwrap_or_else(|e| e.into_inner());
        clock.clear();
        for w in self.resident.iter().chain(&self.referenced) {
            w.store(0, Relaxed);
        }
        self.advise(0, self.len);
    }

    /// How many granules (or whole-mapping releases) were dropped (for tests and figures).
    pub fn drops(&self) -> usize {
        self.drops.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// A bolt file opened for reading: its bytes and the meta bbolt would use.
pub struct Db {
    /// The file's bytes.
    pub data: Data,
    /// The meta bbolt would use ([`read_meta`]).
    pub meta: Meta,
    residency: Option<Residency>,
    /// A duplicate of the mapped file's descriptor (only for a map): [`View::page_copy`]
    /// reads through it.
    file: Option<File>,
}

impl Db {
    /// Opens `file` for reading: a read-only map when every byte of it is allocated on
    /// disk, otherwise its bytes read into memory. The caller must keep others from
    /// truncating it meanwhile (we hold its flock; containerd respects it and bolt files only
    /// ever grow).
    ///
    /// Why not always a map: a page of a map that the file system cannot back kills the
    /// process with SIGBUS instead of returning an error. bbolt grows its file with
    /// `ftruncate`, so a real meta.db has holes past its high-water mark, and on tmpfs (and
    /// any file system that allocates on a read fault) touching a hole through a map when the
    /// file system is full is exactly that. `pread` of a hole returns zeros without
    /// allocating anything, and any error is an error. A file without holes (SEEK_HOLE finds
    /// none before its end) is mapped over exactly the length it has, which keeps a large
    /// compacted or copied file cheap to open.
    pub fn map(file: &File) -> Result<Db, BoltError> {
        Self::map_with_budget(file, RESIDENCY_BUDGET)
    }

    /// [`Db::map`] with another residency budget than [`RESIDENCY_BUDGET`]: a read-only walk
    /// that holds little else can afford more of the file resident, and every granule it
    /// keeps is one it need not map again.
    pub fn map_with_budget(file: &File, budget: usize) -> Result<Db, BoltError> {
        let len = file
            .metadata()
            .map_err(|e| BoltError::new("file", e.to_string()))?
            .len();
        let data = if len == 0 {
            Data::Owned(Vec::new())
        } else if has_holes(file, len) {
            Data::Owned(read_all_at(file, len).map_err(|e| BoltError::new("file", e))?)
        } else {
            // SAFETY: read-only shared mapping of a regular file without holes, over exactly
            // its length; see the method docs.
            Data::Map(
                unsafe { memmap2::MmapOptions::new().len(len as usize).map(file) }
                    .map_err(|e| BoltError::new("file", format!("cannot map: {e}")))?,
            )
        };
        let mapped = matches!(data, Data::Map(_));
        let mut db = Db::from_data_with_budget(data, budget)?;
        if mapped {
            // (without it, page_copy reads through the map: slower, never wrong)
            db.file = file.try_clone().ok();
        }
        Ok(db)
    }

    /// Opens the bolt file held in `data` (validates the meta pages only).
    pub fn from_data(data: Data) -> Result<Db, BoltError> {
        Self::from_data_with_budget(data, RESIDENCY_BUDGET)
    }

    fn from_data_with_budget(data: Data, budget: usize) -> Result<Db, BoltError> {
        let meta = read_meta(&data)?;
        let residency = match &data {
            Data::Map(m) if !m.is_empty() => Some(Residency::new(m.as_ptr(), m.len(), budget)),
            _ => None,
        };
        Ok(Db {
            data,
            meta,
            residency,
            file: None,
        })
    }

    /// The residency bound of a mapped file (`None` for bytes in memory): views from
    /// [`Db::view`] count against it; pass it to a plan's view with [`View::with_residency`].
    pub fn residency(&self) -> Option<&Residency> {
        self.residency.as_ref()
    }

    /// Drops our residency of a mapped file now (after reading it other than through a
    /// view, e.g. hashing byte ranges). No-op for bytes in memory.
    pub fn release(&self) {
        if let Some(r) = &self.residency {
            r.release();
        }
    }

    /// Opens the bolt file held in `bytes`.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Db, BoltError> {
        Db::from_data(Data::Owned(bytes))
    }

    /// Reads the file at `path` into memory (no lock taken).
    pub fn read_path(path: &Path) -> Result<Db, BoltError> {
        let bytes = std::fs::read(path)
            .map_err(|e| BoltError::new(path.display().to_string(), e.to_string()))?;
        Db::from_bytes(bytes)
    }

    /// The current transaction's tree.
    pub fn view(&self) -> View<'_> {
        View {
            file: self.file.as_ref(),
            ..View::new(&self.data, &self.meta).with_residency(self.residency())
        }
    }

    /// The root bucket of the current transaction.
    pub fn root(&self) -> Root<'_> {
        Root::Page(self.meta.root)
    }

    /// Every key/value of the database, depth first, in key order: `(bucket path, key, value)`
    /// for plain values, and `(bucket path, key, None)` for nested buckets (with their
    /// sequence in the value slot as 8 bytes). For tests and diffs.
    pub fn dump(&self) -> Result<Vec<DumpEntry>, BoltError> {
        let mut out = Vec::new();
        dump_bucket(&self.view(), self.root(), &mut Vec::new(), &mut out, 0)?;
        Ok(out)
    }
}

/// Whether `file` (of `len` bytes) may have a hole: SEEK_HOLE finds one before its end, or
/// cannot tell (an error counts as a hole: the caller then reads instead of mapping).
fn has_holes(file: &File, len: u64) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: plain syscall on a valid fd; the offset it moves is reset below, and every
    // read of this crate is positional anyway.
    let hole = unsafe { libc::lseek(file.as_raw_fd(), 0, libc::SEEK_HOLE) };
    // SAFETY: as above.
    unsafe { libc::lseek(file.as_raw_fd(), 0, libc::SEEK_SET) };
    hole < 0 || (hole as u64) < len
}

/// The first `len` bytes of `file`, by `pread`; an error when it is shorter now.
fn read_all_at(file: &File, len: u64) -> Result<Vec<u8>, String> {
    use std::os::unix::fs::FileExt;
    let len = usize::try_from(len).map_err(|_| format!("{len} bytes do not fit in memory"))?;
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, 0)
        .map_err(|e| format!("cannot read {len} bytes: {e}"))?;
    Ok(buf)
}

/// One line of [`Db::dump`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpEntry {
    /// The bucket holding the key, as the keys from the root bucket down (empty: the root).
    pub path: Vec<Vec<u8>>,
    /// The key.
    pub key: Vec<u8>,
    /// `None` for a nested bucket.
    pub value: Option<Vec<u8>>,
    /// The bucket's sequence for nested buckets, 0 otherwise.
    pub sequence: u64,
}

fn dump_bucket<'a>(
    view: &View<'a>,
    root: Root<'a>,
    path: &mut Vec<Vec<u8>>,
    out: &mut Vec<DumpEntry>,
    depth: usize,
) -> Result<(), BoltError> {
    if depth > MAX_DEPTH {
        return Err(BoltError::new("bucket", "buckets nested deeper than 64"));
    }
    let mut elems = Vec::new();
    view.for_each(root, &mut |e| {
        elems.push(e);
        Ok(())
    })?;
    for e in elems {
        if e.is_bucket() {
            let (r, seq) = bucket_root(e.value, "bucket")?;
            out.push(DumpEntry {
                path: path.clone(),
                key: e.key.to_vec(),
                value: None,
                sequence: seq,
            });
            path.push(e.key.to_vec());
            dump_bucket(view, r, path, out, depth + 1)?;
            path.pop();
        } else {
            out.push(DumpEntry {
                path: path.clone(),
                key: e.key.to_vec(),
                value: Some(e.value.to_vec()),
                sequence: 0,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod residency_tests {
    use super::*;
    use std::io::Write;

    /// Our resident bytes of the mapping starting at `base` (its `Rss:` in /proc/self/smaps).
    fn resident(base: *const u8) -> usize {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let start = format!("{:x}-", base as usize);
        let mut lines = smaps.lines().skip_while(|l| !l.starts_with(&start));
        assert!(lines.next().is_some(), "mapping not found in smaps");
        let rss = lines.find(|l| l.starts_with("Rss:")).unwrap();
        rss.split_whitespace()
            .nth(1)
            .unwrap()
            .parse::<usize>()
            .unwrap()
            * 1024
    }

    #[test]
    fn reading_a_mapped_file_keeps_at_most_the_budget_resident_and_the_same_bytes() {
        let mut f = tempfile::tempfile().unwrap();
        let len = 8 * RESIDENCY_GRANULE;
        let bytes: Vec<u8> = (0..len).map(|i| (i * 7 + i / 4096) as u8).collect();
        f.write_all(&bytes).unwrap();
        f.sync_all().unwrap();
        // SAFETY: a private temp file nobody else writes.
        let map = unsafe { memmap2::MmapOptions::new().len(len).map(&f) }.unwrap();
        let budget = 2 * RESIDENCY_GRANULE;
        let r = Residency::new(map.as_ptr(), map.len(), budget);
        let mut peak = 0;
        let mut sum = 0u64;
        for off in (0..len).step_by(4096) {
            r.touch(off, 4096);
            sum += map[off..off + 4096].iter().map(|b| *b as u64).sum::<u64>();
            if off % (64 << 10) == 0 {
                peak = peak.max(resident(map.as_ptr()));
            }
        }
        assert_eq!(
            sum,
            bytes.iter().map(|b| *b as u64).sum::<u64>(),
            "same bytes after drops"
        );
        assert!(r.drops() >= 6, "dropped {} granules", r.drops());
        assert!(
            peak <= budget,
            "{peak} bytes of the mapping resident, budget {budget}"
        );
        r.release();
        assert_eq!(resident(map.as_ptr()), 0, "release drops all of it");
        assert_eq!(
            &map[..],
            &bytes[..],
            "the file's bytes, read again through the map"
        );
    }

    #[test]
    fn bytes_in_memory_have_no_residency_bound() {
        let db = Db::from_bytes(vec![0; 4096 * 4]);
        // not a bolt file: no Db; an owned Data never gets a Residency either way
        assert!(db.is_err() || db.unwrap().residency().is_none());
    }
}
