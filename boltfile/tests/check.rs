//! The reader and the consistency check on real bbolt files (containerd 1.6/1.7, Go bbolt's
//! own rewrites) and on damaged ones: every damage is found and named, and Go bbolt's check
//! agrees with ours on the real files.

mod common;

use boltfile::testing::{assert_bbolt_check, bbolt_rejects, value_offset as offset_of};
use boltfile::{check::check, fnv1a64, Db, Meta};
use common::*;

#[test]
fn check_passes_on_every_bundled_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for f in [
        "meta.db.before",
        "meta.db.after-bboltrs",
        "meta.db.after-restart",
        "meta.db.nofreelist",
    ] {
        files.push(store_file(f));
    }
    for v in ["1.6", "1.7"] {
        files.push(node_db(v));
    }
    for v in STEP4 {
        files.push(put(dir.path(), v, &step4(v)));
    }
    files.push(put(
        dir.path(),
        "bulk-2000",
        &gunzip(&store_file("meta-bulk-2000.db.gz")),
    ));
    for f in &files {
        let bytes = std::fs::read(f).unwrap();
        let kv = checked_kv(&bytes, &f.display().to_string());
        assert!(!kv.is_empty());
        assert_bbolt_check(f);
    }
    assert_eq!(files.len(), 11);
}

#[test]
fn meta_checksum_is_bbolts_fnv1a() {
    // recompute the stored checksums of real Go-written meta pages
    for f in ["meta.db.before", "meta.db.nofreelist"] {
        let b = std::fs::read(store_file(f)).unwrap();
        for p in 0..2 {
            let page = &b[p * 4096..p * 4096 + 4096];
            let m = Meta::parse(page, p as u64);
            assert_eq!(m.checksum, fnv1a64(&page[16..72]));
            assert_eq!(
                &m.encode()[..80],
                &page[..80],
                "encode reproduces Go's meta page"
            );
        }
    }
}

/// `bytes` fails to open, with a message containing `want`; Go bbolt refuses it too.
fn assert_open_fails(bytes: Vec<u8>, want: &str) {
    let e = match Db::from_bytes(bytes.clone()) {
        Ok(_) => panic!("opened a damaged file (expected {want:?})"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains(want), "{e:?} should mention {want:?}");
    let dir = tempfile::tempdir().unwrap();
    let p = put(dir.path(), "meta.db", &bytes);
    assert_ne!(
        bbolt_rejects(&p),
        Some(false),
        "Go bbolt opened it ({want})"
    );
}

/// `bytes` opens but fails the check, naming `want`.
fn assert_check_fails(bytes: &[u8], want: &str) -> String {
    let db = Db::from_bytes(bytes.to_vec()).unwrap();
    let rep = check(&db.view(), &db.meta);
    assert!(!rep.is_ok(), "the check passed a damaged file ({want})");
    assert!(
        rep.summary().contains(want),
        "{:?} should mention {want:?}",
        rep.summary()
    );
    rep.summary()
}

#[test]
fn bad_not_a_bolt_file() {
    assert_open_fails(
        b"{\"hello\": \"this is not a bolt database\"}\n".repeat(300),
        "not a bolt file",
    );
    assert_open_fails(Vec::new(), "not a bolt file");
}

#[test]
fn bad_truncated() {
    for len in [100_000, 5000] {
        let mut b = store_before();
        b.truncate(len);
        assert_open_fails(b, "truncated");
    }
}

#[test]
fn bad_checksum_on_both_metas() {
    let mut b = store_before();
    b[16 + 56] ^= 0xff;
    b[4096 + 16 + 56] ^= 0xff;
    assert_open_fails(b, "both meta pages are invalid");
    // one bad meta: bbolt falls back to the other one (the older transaction), and so do we
    let good = Db::from_bytes(store_before()).unwrap().meta;
    assert_eq!((good.page, good.txid), (1, 99));
    let mut one = store_before();
    one[4096 + 16 + 56] ^= 0xff;
    let db = Db::from_bytes(one.clone()).unwrap();
    assert_eq!((db.meta.page, db.meta.txid), (0, 98));
    let kv = checked_kv(&one, "meta 1 damaged");
    assert!(kv.len() > 300, "the older transaction's tree reads whole");
    let dir = tempfile::tempdir().unwrap();
    assert_bbolt_check(&put(dir.path(), "one-bad-meta", &one));
}

#[test]
fn bad_page_id_beyond_file() {
    let mut b = store_before();
    let off = offset_of(&b, is_paged_bucket);
    b[off..off + 8].copy_from_slice(&1_000_000u64.to_ne_bytes());
    assert_check_fails(&b, "beyond the high-water mark");
}

#[test]
fn bad_page_graph_cycle() {
    let mut b = store_before();
    // point an extensions bucket at the root page of the database: a cycle back to the top
    let root = Db::from_bytes(b.clone()).unwrap().meta.root;
    let off = offset_of(&b, is_paged_bucket);
    b[off..off + 8].copy_from_slice(&root.to_ne_bytes());
    assert_check_fails(&b, "multiple references");
    // the readers stop too instead of looping
    let db = Db::from_bytes(b).unwrap();
    assert!(
        db.dump().is_err(),
        "the dump of a cyclic file ends in an error"
    );
}

/// bbolt's cursor reads a page with both type bits as a leaf, its page walk (and `tx.Check`)
/// as a branch; a byte flip that makes such a page once let our check pass a tree our reader
/// saw differently. Both bits set is corruption, named with the page's flags.
#[test]
fn bad_tree_page_with_both_type_flags() {
    let mut tried = 0;
    for (name, bytes) in [
        ("store fixture", store_before()),
        ("1.7 node", std::fs::read(node_db("1.7")).unwrap()),
    ] {
        let (branch, leaf) = first_live_tree_pages(&bytes);
        for page in [branch, leaf].into_iter().flatten() {
            let mut b = bytes.clone();
            b[page * 4096 + 8] = 0x03;
            let summary = assert_check_fails(&b, "flags 0x0003");
            assert!(
                summary.contains(&format!("page {page}")),
                "{name}: names page {page}: {summary}"
            );
            tried += 1;
        }
    }
    assert!(
        tried >= 3,
        "a branch page and leaf pages were damaged ({tried})"
    );
}
