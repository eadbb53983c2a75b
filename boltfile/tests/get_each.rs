//! `View::get_each_copied` (many keys of one bucket in one descent) answers exactly what a
//! `View::get_copied` of each key does, on a bucket deep enough to have branch levels, and
//! reads each page on the way once.

use boltfile::build::{self, Item, Tree};
use boltfile::{bucket_root, Db, Root, View};
use std::sync::atomic::{AtomicU64, Ordering};

/// A bucket `big` of `n` keys (`k00000`, `k00002`, … every second number, so the odd ones fall
/// between), some values spanning overflow pages, one nested bucket among them; and a small
/// bucket `small` that the bulk load writes inline.
fn file(n: usize) -> Vec<u8> {
    let big = (0..n)
        .map(|i| {
            let key = format!("k{:05}", 2 * i).into_bytes();
            let item = if i == n / 2 {
                Item::Bucket {
                    sequence: 0,
                    tree: Tree {
                        items: vec![(b"x".to_vec(), Item::Value(b"y".to_vec()))],
                    },
                }
            } else {
                // every 7th value spans pages (9 KB)
                let len = if i % 7 == 0 { 9000 } else { 40 + i % 90 };
                Item::Value(vec![b'a' + (i % 26) as u8; len])
            };
            (key, item)
        })
        .collect();
    let small = Tree {
        items: vec![
            (b"a".to_vec(), Item::Value(b"1".to_vec())),
            (b"c".to_vec(), Item::Value(b"3".to_vec())),
        ],
    };
    let root = Tree {
        items: vec![
            (
                b"big".to_vec(),
                Item::Bucket {
                    sequence: 0,
                    tree: Tree { items: big },
                },
            ),
            (
                b"small".to_vec(),
                Item::Bucket {
                    sequence: 0,
                    tree: small,
                },
            ),
        ],
    };
    build::build(&root, 4096, 1.0, true)
}

/// What `get_copied` finds for `key`, as comparable data.
type Answer = Option<(Vec<u8>, u32, Vec<u8>)>;

fn one_by_one(view: &View<'_>, root: Root<'_>, keys: &[&[u8]]) -> Vec<Answer> {
    keys.iter()
        .map(|k| {
            view.get_copied(root, k)
                .unwrap()
                .map(|e| (e.key.clone(), e.flags, e.value.clone()))
        })
        .collect()
}

fn at_once(view: &View<'_>, root: Root<'_>, keys: &[&[u8]]) -> Vec<Answer> {
    let mut out = vec![None; keys.len()];
    let mut calls = Vec::new();
    view.get_each_copied(root, keys, &mut |i, e| {
        calls.push(i);
        out[i] = e.map(|e| (e.key.to_vec(), e.flags, e.value.to_vec()));
        Ok(())
    })
    .unwrap();
    assert_eq!(
        calls,
        (0..keys.len()).collect::<Vec<_>>(),
        "one call per key, in the keys' order"
    );
    out
}

#[test]
fn many_keys_at_once_are_each_key_looked_up() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("many.db");
    std::fs::write(&path, file(3000)).unwrap();
    let f = std::fs::File::open(&path).unwrap();
    let db = Db::map(&f).unwrap();
    let view = db.view();
    assert!(view.file.is_some(), "mapped: the pages are read with pread");
    let big = view
        .bucket_copied(db.root(), b"big", "big")
        .unwrap()
        .unwrap();
    let (big, _) = bucket_root(&big, "big").unwrap();
    let Root::Page(big_root) = big else {
        panic!("3,000 keys are not an inline bucket")
    };
    assert!(
        view.page(big_root).unwrap().is_branch(),
        "the bucket has branch levels to share"
    );
    let small = view
        .bucket_copied(db.root(), b"small", "small")
        .unwrap()
        .unwrap();
    let (small, _) = bucket_root(&small, "small").unwrap();
    assert!(matches!(small, Root::Inline(_)), "two keys: inline");

    let names: Vec<Vec<u8>> = (0..6002)
        .map(|i| format!("k{i:05}").into_bytes())
        .chain([b"".to_vec(), b"a".to_vec(), b"zzz".to_vec()])
        .collect();
    let all: Vec<&[u8]> = names.iter().map(Vec::as_slice).collect();
    // ascending; every one of them (present and absent, below the first key, above the
    // last); a descending run; a scrambled one with repeats
    let mut scrambled: Vec<&[u8]> = (0..2000).map(|i| all[(i * 7919) % all.len()]).collect();
    scrambled.extend_from_slice(&all[10..20]);
    let mut sorted = all.clone();
    sorted.sort();
    let descending: Vec<&[u8]> = sorted.iter().rev().take(500).copied().collect();
    for (what, keys) in [
        ("ascending", sorted.clone()),
        ("descending", descending),
        ("scrambled with repeats", scrambled),
        ("none", Vec::new()),
    ] {
        let want = one_by_one(&view, big, &keys);
        assert!(
            what == "none" || want.iter().any(Option::is_some) && want.iter().any(Option::is_none),
            "{what}: present and absent keys"
        );
        assert!(
            at_once(&view, big, &keys) == want,
            "{what}: the same elements as one lookup per key"
        );
    }
    let inline_keys: Vec<&[u8]> = vec![b"a", b"b", b"c", b"d"];
    assert!(
        at_once(&view, small, &inline_keys) == one_by_one(&view, small, &inline_keys),
        "an inline bucket too"
    );

    // Every key of the bucket in order reads each of its tree pages once: exactly the pages
    // a walk of the whole bucket reads.
    let pages_read = |f: &dyn Fn(&View<'_>)| {
        let budget = AtomicU64::new(u64::MAX);
        let counted = View {
            read_budget: Some(&budget),
            ..view
        };
        f(&counted);
        u64::MAX - budget.load(Ordering::Relaxed)
    };
    let walk = pages_read(&|v| v.for_each_copied(big, &mut |_| Ok(())).unwrap());
    let each = pages_read(&|v| {
        v.get_each_copied(big, &sorted, &mut |_, _| Ok(())).unwrap();
    });
    let singly = pages_read(&|v| {
        for k in &sorted {
            v.get_copied(big, k).unwrap();
        }
    });
    assert_eq!(each, walk, "each page of the bucket read once");
    assert!(
        singly > 3 * each,
        "one lookup per key reads the branch pages again ({singly} vs {each})"
    );
}
