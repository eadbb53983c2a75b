//! Bytes as a containerd `meta.db` (bolt file) → our bolt engine: open (meta pages), bbolt's
//! consistency check, a full walk of every bucket, the containerd back-end's scan of the CRI
//! buckets (through a real store root in a private temp directory), and, for a file that
//! passes the check, a copy-on-write plan replacing a few values.
//!
//! Invariants: no panic and no endless walk (cycles and shared pages are errors; run with
//! `-timeout`); a file the check passes walks and dumps without error; the scan refuses every file the check finds structurally damaged; a planned
//! transaction passes the check itself and holds exactly the old tree with the chosen values
//! replaced (txid + 1, written to the other meta page). Errors are fine.
#![no_main]

use boltfile::{self as bolt, check, write, Db, Root, View};
use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;
use std::sync::OnceLock;
use storepatch::containerd::{ContainerdStore, META_DB};
use storepatch::RuntimeStore;

type Entry = (Vec<Vec<u8>>, Vec<u8>, Option<Vec<u8>>);

/// Every key of the tree under `root`, depth first: (bucket path, key, value or None for a
/// bucket). Independent of `Db::dump`, and usable on a planned (overlay) view.
fn walk<'a>(
    view: &View<'a>,
    root: Root<'a>,
    path: &mut Vec<Vec<u8>>,
    out: &mut Vec<Entry>,
    depth: usize,
) -> Result<(), bolt::BoltError> {
    if depth > 64 {
        return Err(bolt::BoltError::new("walk", "too deep"));
    }
    let mut elems = Vec::new();
    view.for_each(root, &mut |e| {
        elems.push(e);
        Ok(())
    })?;
    for e in elems {
        if e.is_bucket() {
            out.push((path.clone(), e.key.to_vec(), None));
            let (r, _) = bolt::bucket_root(e.value, "walk")?;
            path.push(e.key.to_vec());
            walk(view, r, path, out, depth + 1)?;
            path.pop();
        } else {
            out.push((path.clone(), e.key.to_vec(), Some(e.value.to_vec())));
        }
    }
    Ok(())
}

/// A private containerd root (one per fuzzing process) whose meta.db each input overwrites.
fn store_root() -> &'static PathBuf {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        let root =
            std::env::temp_dir().join(format!("kubelet-rehash-fuzz-bolt-{}", std::process::id()));
        std::fs::create_dir_all(root.join(META_DB).parent().unwrap()).unwrap();
        root
    })
}

fn new_value(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add(i as u8)).collect()
}

fuzz_target!(|data: &[u8]| {
    let Ok(db) = Db::from_bytes(data.to_vec()) else {
        return;
    };
    let view = db.view();
    let report = check::check_indexed(&view, &db.meta);
    assert_eq!(
        report.is_ok(),
        check::check(&view, &db.meta).is_ok(),
        "the indexed check and the plain one agree"
    );
    // Walks trust the structure the check proves (each page referenced once): on a file with
    // shared pages a walk may visit a page exponentially often, so, like the back-end, walk
    // only what passes the structural check.
    let walked = if report.structural.is_empty() {
        let mut out = Vec::new();
        let w = walk(&view, db.root(), &mut Vec::new(), &mut out, 0).map(|_| out);
        let d = db.dump();
        if let (Ok(w), Ok(d)) = (&w, &d) {
            assert_eq!(w.len(), d.len(), "the two walks disagree");
        }
        // What the check passes, every reader reads: a file the check accepts but a walk
        // cannot read means the check and the reader see two different trees.
        if report.is_ok() {
            if let Err(e) = &w {
                panic!("the check passed but the walk fails: {e}");
            }
            if let Err(e) = &d {
                panic!("the check passed but the dump fails: {e}");
            }
        }
        Some(w)
    } else {
        None
    };

    // The back-end's scan, on a real store root.
    let root = store_root();
    std::fs::write(root.join(META_DB), data).unwrap();
    let store = ContainerdStore::open(root).unwrap();
    let scanned = store.scan();
    if !report.structural.is_empty() {
        assert!(
            scanned.is_err(),
            "scan accepted a structurally damaged file"
        );
    }

    // A copy-on-write plan replacing up to three values, on a file that passes the check.
    if !report.is_ok() {
        return;
    }
    let Some(Ok(entries)) = walked else {
        return;
    };
    let values: Vec<&Entry> = entries.iter().filter(|e| e.2.is_some()).collect();
    if values.is_empty() {
        return;
    }
    let ps = db.meta.page_size as usize;
    let sizes = [0, 1, 16, 100, ps / 4 + 1, ps - 40, 2 * ps + 3];
    let mut seed = bolt::fnv1a64(&data[data.len().saturating_sub(64)..]);
    let mut edits = write::Edits::default();
    let mut expected = entries.clone();
    for _ in 0..1 + (seed % 3) as usize {
        let idx = (seed as usize / 3) % values.len();
        let (path, key, _) = values[idx];
        let old_len = values[idx].2.as_ref().unwrap().len();
        let pick = (seed >> 16) as usize % (sizes.len() + 1);
        let len = if pick == sizes.len() {
            old_len
        } else {
            sizes[pick]
        };
        let v = new_value(len, (seed >> 24) as u8);
        let p: Vec<&[u8]> = path.iter().map(Vec::as_slice).collect();
        edits.put(&p, key, v.clone());
        for e in expected.iter_mut() {
            if &e.0 == path && &e.1 == key {
                e.2 = Some(v.clone());
            }
        }
        seed = seed.wrapping_mul(0x0000_0100_0000_01b3).wrapping_add(1);
    }
    let Ok(plan) = write::plan(&db, &report, &edits) else {
        return;
    };
    assert_eq!(plan.new_meta.txid, db.meta.txid + 1);
    assert_eq!(plan.new_meta.page, 1 - db.meta.page);
    assert_eq!(plan.new_meta.freelist_synced(), db.meta.freelist_synced());
    let planned = plan.view(&db.data);
    let rep2 = check::check(&planned, &plan.new_meta);
    assert!(
        rep2.is_ok(),
        "the planned transaction fails the check: {}",
        rep2.summary()
    );
    // the check by the new pages alone (what the containerd apply runs) gives the same report
    let inc = check::check_planned(&planned, &plan.new_meta, &report);
    assert!(inc.is_ok(), "the planned check refuses: {}", inc.summary());
    assert_eq!(inc.free, rep2.free, "the planned check's free pages");
    assert_eq!(inc.reachable_pages, rep2.reachable_pages);
    let mut after = Vec::new();
    walk(
        &planned,
        Root::Page(plan.new_meta.root),
        &mut Vec::new(),
        &mut after,
        0,
    )
    .expect("the planned tree walks");
    assert!(
        after == expected,
        "the planned tree differs from the old tree with the edits"
    );
    // the planned pages never overwrite a page the old tree still uses
    let old_free: std::collections::BTreeSet<u64> = report.free.iter().copied().collect();
    for (&id, buf) in &plan.pages {
        let span = (buf.len() / ps) as u64;
        for p in id..id + span {
            assert!(
                p >= db.meta.hwm || old_free.contains(&p),
                "planned page {p} overwrites a page of the current tree"
            );
        }
    }
});
