//! `check_planned`, the check of a planned transaction by its new pages alone, against the
//! whole-tree `check` it stands in for: on real containerd files and real plans the same
//! report (verdict, free pages, reachable pages) from far fewer pages read; on thousands of
//! broken plans (children redirected to shared, nested, free or absent pages, keys moved
//! past their bounds, random bytes) the same verdict every time.

mod common;

use boltfile::check::{check, check_indexed, check_planned, CheckReport};
use boltfile::write::{self, Edits, Plan};
use boltfile::{Db, Meta};
use common::*;
use std::collections::BTreeMap;
use std::fs;

const CRI: &[u8] = b"io.cri-containerd.container.metadata";
const PAGE_HEADER: usize = 16;
const FLAG_BRANCH: u16 = 0x01;
const FLAG_LEAF: u16 = 0x02;

/// The bolt files of the fixtures: both freelist layouts, small and node-sized, and Go's own
/// rewrites of the 1.7 node (compacted, so differently shaped trees).
fn files() -> Vec<(String, Vec<u8>)> {
    let mut out = vec![
        ("store synced".to_string(), store_before()),
        (
            "store nofreelist".to_string(),
            fs::read(store_file("meta.db.nofreelist")).unwrap(),
        ),
        ("node 1.6".to_string(), fs::read(node_db("1.6")).unwrap()),
        ("node 1.7".to_string(), fs::read(node_db("1.7")).unwrap()),
    ];
    for v in STEP4 {
        out.push((format!("step4 {v}"), step4(v)));
    }
    out
}

/// Every CRI container value of `db`, as (bucket path, key).
fn cri_values(db: &Db) -> Vec<(Vec<Vec<u8>>, Vec<u8>)> {
    kv_of(db)
        .into_iter()
        .filter(|((_, k), (v, _))| k == CRI && v.is_some())
        .map(|(k, _)| k)
        .collect()
}

/// Edits that rewrite the values `which` picks: the same length, longer, or past a page.
fn edits_of(db: &Db, which: &dyn Fn(usize) -> bool, grow: usize) -> Edits {
    let kv = kv_of(db);
    let mut edits = Edits::default();
    for (_, at) in cri_values(db).iter().enumerate().filter(|(i, _)| which(*i)) {
        let old = kv[at].0.clone().unwrap();
        let mut new: Vec<u8> = old.iter().map(|b| b ^ 0x11).collect();
        new.extend(std::iter::repeat_n(b'g', grow));
        let path: Vec<&[u8]> = at.0.iter().map(Vec::as_slice).collect();
        edits.put(&path, &at.1, new);
    }
    edits
}

/// A plan of a test: its name, which values it rewrites (by index), bytes added to each.
type Case = (&'static str, fn(usize) -> bool, usize);

fn same_accounting(full: &CheckReport, inc: &CheckReport, what: &str) {
    assert_eq!(full.free, inc.free, "{what}: the same free pages");
    assert_eq!(
        full.reachable_pages, inc.reachable_pages,
        "{what}: the same reachable page count"
    );
    assert_eq!(full.hwm, inc.hwm, "{what}: the same high-water mark");
    assert_eq!(
        full.freelist_synced, inc.freelist_synced,
        "{what}: the same freelist layout"
    );
}

#[test]
fn a_real_plan_checks_the_same_by_its_new_pages_alone() {
    for (name, bytes) in files() {
        let db = Db::from_bytes(bytes).unwrap();
        let base = check_indexed(&db.view(), &db.meta);
        assert!(base.is_ok(), "{name}: {}", base.summary());
        assert!(
            base.index.is_some(),
            "{name}: a clean check keeps its index"
        );
        let plain = check(&db.view(), &db.meta);
        assert!(plain.index.is_none(), "{name}: check() keeps no index");
        same_accounting(&plain, &base, &format!("{name}: indexed check"));
        let n = cri_values(&db).len();
        assert!(n >= 6, "{name}: {n} container values");
        let cases: [Case; 4] = [
            ("every value", |_| true, 0),
            ("every third value", |i| i % 3 == 0, 7),
            ("one value past a page", |i| i == 1, 5000),
            ("half the values, grown", |i| i % 2 == 1, 600),
        ];
        for (case, which, grow) in cases {
            let what = format!("{name}, {case}");
            let plan = write::plan(&db, &base, &edits_of(&db, &which, grow)).unwrap();
            let view = plan.view(&db.data);
            let full = check(&view, &plan.new_meta);
            let inc = check_planned(&view, &plan.new_meta, &base);
            assert!(full.is_ok(), "{what}: {}", full.summary());
            assert!(inc.is_ok(), "{what}: {}", inc.summary());
            same_accounting(&full, &inc, &what);
            let new_tree_pages = new_pages(&plan, &[FLAG_BRANCH, FLAG_LEAF]).len() as u64;
            assert_eq!(
                inc.walked_pages, new_tree_pages,
                "{what}: the incremental check reads exactly the new tree pages"
            );
            assert!(
                inc.walked_pages < full.walked_pages,
                "{what}: {} pages read, the whole check {}",
                inc.walked_pages,
                full.walked_pages
            );
        }
    }
}

#[test]
fn without_a_clean_index_the_planned_check_is_the_whole_check() {
    let db = Db::read_path(&node_db("1.7")).unwrap();
    let base = check_indexed(&db.view(), &db.meta);
    let plan = write::plan(&db, &base, &edits_of(&db, &|_| true, 0)).unwrap();
    let view = plan.view(&db.data);
    let full = check(&view, &plan.new_meta);
    // a report without an index (check(), or a dirty check) walks everything
    let plain = check(&db.view(), &db.meta);
    let inc = check_planned(&view, &plan.new_meta, &plain);
    assert_eq!(inc.walked_pages, full.walked_pages, "no index: whole walk");
    // an index of other bytes (a file one page longer) is not used
    let mut longer = db.data.to_vec();
    longer.extend_from_slice(&[0; 4096]);
    let other = Db::from_bytes(longer).unwrap();
    let other_base = check_indexed(&other.view(), &other.meta);
    assert!(other_base.index.is_some());
    let inc = check_planned(&view, &plan.new_meta, &other_base);
    assert_eq!(
        inc.walked_pages, full.walked_pages,
        "an index of other bytes: whole walk"
    );
    // a new page on a page the old tree reached: whole walk
    let mut bad = plan.clone();
    let (&some_new, _) = bad.pages.iter().next().unwrap();
    let reached = (2..db.meta.hwm)
        .find(|p| !base.free.contains(p))
        .expect("a reachable page");
    let mut buf = bad.pages.remove(&some_new).unwrap();
    buf[..8].copy_from_slice(&reached.to_le_bytes());
    bad.pages.insert(reached, buf);
    let view = bad.view(&db.data);
    let full = check(&view, &bad.new_meta);
    let inc = check_planned(&view, &bad.new_meta, &base);
    assert_eq!(
        inc.walked_pages, full.walked_pages,
        "overlaid old page: whole walk"
    );
    assert_eq!(inc.is_ok(), full.is_ok());
}

/// New pages of `plan` with one of `flags`, by id.
fn new_pages(plan: &Plan, flags: &[u16]) -> Vec<u64> {
    plan.pages
        .iter()
        .filter(|(_, b)| flags.contains(&u16::from_le_bytes([b[8], b[9]])))
        .map(|(id, _)| *id)
        .collect()
}

/// A small deterministic generator (xorshift64*): the same broken plans on every run.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Every tree node of the old file (the pages its clean check reached that head a span).
fn old_nodes(db: &Db, base: &CheckReport) -> Vec<u64> {
    let ps = db.meta.page_size as usize;
    let mut out = Vec::new();
    let mut id = 2u64;
    while id < db.meta.hwm {
        let h = &db.data[id as usize * ps..];
        let flags = u16::from_le_bytes([h[8], h[9]]);
        let overflow = u32::from_le_bytes([h[12], h[13], h[14], h[15]]) as u64;
        if base.free.binary_search(&id).is_ok() {
            id += 1;
            continue;
        }
        if flags == FLAG_BRANCH || flags == FLAG_LEAF {
            out.push(id);
        }
        id += 1 + overflow;
    }
    out
}

/// One way of breaking a plan.
fn break_plan(
    rng: &mut Rng,
    plan: &mut Plan,
    meta: &Meta,
    olds: &[u64],
    free: &[u64],
) -> &'static str {
    let branches = new_pages(plan, &[FLAG_BRANCH]);
    let leaves = new_pages(plan, &[FLAG_LEAF]);
    let kind = rng.below(6);
    let pick_target = |rng: &mut Rng| -> u64 {
        match rng.below(8) {
            0 => free.get(rng.below(free.len().max(1))).copied().unwrap_or(2),
            1 => meta.hwm + rng.below(4) as u64,
            2 => rng.below(meta.hwm as usize) as u64,
            _ => olds[rng.below(olds.len())],
        }
    };
    match kind {
        // a branch child pointed at another page: a shared, nested, free, absent or
        // elsewhere-deep subtree
        0 | 1 if !branches.is_empty() => {
            let id = branches[rng.below(branches.len())];
            let buf = plan.pages.get_mut(&id).unwrap();
            let count = u16::from_le_bytes([buf[10], buf[11]]) as usize;
            let i = rng.below(count.max(1));
            let at = PAGE_HEADER + i * 16 + 8;
            let to = pick_target(rng);
            buf[at..at + 8].copy_from_slice(&to.to_le_bytes());
            "branch child redirected"
        }
        // a bucket value in a new leaf pointed at another page
        2 if !leaves.is_empty() => {
            let id = leaves[rng.below(leaves.len())];
            let buf = plan.pages.get_mut(&id).unwrap();
            let count = u16::from_le_bytes([buf[10], buf[11]]) as usize;
            let buckets: Vec<usize> = (0..count)
                .filter(|i| {
                    let e = PAGE_HEADER + i * 16;
                    u32::from_le_bytes(buf[e..e + 4].try_into().unwrap()) & 1 != 0
                })
                .collect();
            if buckets.is_empty() {
                return "no bucket to redirect";
            }
            let i = buckets[rng.below(buckets.len())];
            let e = PAGE_HEADER + i * 16;
            let pos = u32::from_le_bytes(buf[e + 4..e + 8].try_into().unwrap()) as usize;
            let ksize = u32::from_le_bytes(buf[e + 8..e + 12].try_into().unwrap()) as usize;
            let v = e + pos + ksize;
            let to = pick_target(rng);
            buf[v..v + 8].copy_from_slice(&to.to_le_bytes());
            "bucket root redirected"
        }
        // a key of a new branch moved: an old child's bounds change
        3 if !branches.is_empty() => {
            let id = branches[rng.below(branches.len())];
            let buf = plan.pages.get_mut(&id).unwrap();
            let count = u16::from_le_bytes([buf[10], buf[11]]) as usize;
            let i = rng.below(count.max(1));
            let e = PAGE_HEADER + i * 16;
            let pos = u32::from_le_bytes(buf[e..e + 4].try_into().unwrap()) as usize;
            let ksize = u32::from_le_bytes(buf[e + 4..e + 8].try_into().unwrap()) as usize;
            if ksize == 0 || e + pos + ksize > buf.len() {
                return "no key to move";
            }
            let k = e + pos + rng.below(ksize);
            buf[k] = match rng.below(3) {
                0 => buf[k].wrapping_add(1),
                1 => buf[k].wrapping_sub(1),
                _ => rng.next() as u8,
            };
            "branch key moved"
        }
        // two children of a new branch swapped (order and bounds)
        4 if !branches.is_empty() => {
            let id = branches[rng.below(branches.len())];
            let buf = plan.pages.get_mut(&id).unwrap();
            let count = u16::from_le_bytes([buf[10], buf[11]]) as usize;
            if count < 2 {
                return "no children to swap";
            }
            let (a, b) = (rng.below(count), rng.below(count));
            let (ea, eb) = (PAGE_HEADER + a * 16 + 8, PAGE_HEADER + b * 16 + 8);
            let (va, vb) = (buf[ea..ea + 8].to_vec(), buf[eb..eb + 8].to_vec());
            buf[ea..ea + 8].copy_from_slice(&vb);
            buf[eb..eb + 8].copy_from_slice(&va);
            "children swapped"
        }
        // any byte of any new page (past the page id, which names the overlay entry)
        _ => {
            let ids: Vec<u64> = plan.pages.keys().copied().collect();
            let id = ids[rng.below(ids.len())];
            let buf = plan.pages.get_mut(&id).unwrap();
            let upto = buf.len().min(512);
            let k = 8 + rng.below(upto - 8);
            buf[k] ^= 1 << rng.below(8);
            "random bit"
        }
    }
}

#[test]
fn a_broken_plan_gets_the_same_verdict_from_both_checks() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut totals: BTreeMap<&str, (usize, usize, usize)> = BTreeMap::new();
    for (name, bytes) in files() {
        let db = Db::from_bytes(bytes).unwrap();
        let base = check_indexed(&db.view(), &db.meta);
        let olds = old_nodes(&db, &base);
        let plan = write::plan(&db, &base, &edits_of(&db, &|i| i % 2 == 0, 0)).unwrap();
        let rounds = if db.meta.hwm > 1000 { 300 } else { 600 };
        for round in 0..rounds {
            let mut broken = plan.clone();
            let mut kinds = Vec::new();
            for _ in 0..1 + rng.below(2) {
                kinds.push(break_plan(
                    &mut rng,
                    &mut broken,
                    &db.meta,
                    &olds,
                    &base.free,
                ));
            }
            let view = broken.view(&db.data);
            let full = check(&view, &broken.new_meta);
            let inc = check_planned(&view, &broken.new_meta, &base);
            assert_eq!(
                full.is_ok(),
                inc.is_ok(),
                "{name}, round {round} ({kinds:?}): the whole check says {:?}, the planned one {:?}",
                full.summary(),
                inc.summary()
            );
            if full.is_ok() {
                same_accounting(&full, &inc, &format!("{name}, round {round} ({kinds:?})"));
            }
            let t = totals.entry(kinds[0]).or_default();
            t.0 += 1;
            t.1 += usize::from(!full.is_ok());
            t.2 += usize::from(inc.walked_pages < full.walked_pages);
        }
    }
    // the generator must reach both verdicts and the incremental path, or this proves nothing
    for (kind, (n, refused, incremental)) in &totals {
        eprintln!("{kind}: {n} plans, {refused} refused, {incremental} checked incrementally");
    }
    let (n, refused, incremental) = totals
        .values()
        .fold((0, 0, 0), |a, t| (a.0 + t.0, a.1 + t.1, a.2 + t.2));
    assert!(refused > n / 4, "{refused} of {n} broken plans refused");
    assert!(
        n - refused > n / 20,
        "{} of {n} plans still pass",
        n - refused
    );
    assert!(
        incremental > n / 2,
        "{incremental} of {n} checked incrementally"
    );
    for kind in [
        "branch child redirected",
        "bucket root redirected",
        "branch key moved",
    ] {
        let (n, refused, _) = totals.get(kind).copied().unwrap_or_default();
        assert!(n > 0 && refused > 0, "{kind}: {n} plans, {refused} refused");
    }
}
