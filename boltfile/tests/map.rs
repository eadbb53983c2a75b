//! `Db::map` never maps a byte the file system would have to allocate on a read fault (the
//! SIGBUS of a full tmpfs): a file with holes is read into memory, a file without is mapped
//! over exactly its length, and both give the same database.

use boltfile::{Data, Db};
use std::fs::{self, OpenOptions};
use std::path::Path;

fn fixture() -> Vec<u8> {
    fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures/stores/containerd-1.6.20/meta.db.before"),
    )
    .unwrap()
}

#[test]
fn a_sparse_file_is_read_and_a_dense_one_mapped() {
    let dir = tempfile::tempdir().unwrap();
    let dense = dir.path().join("dense.db");
    fs::write(&dense, fixture()).unwrap();
    let db = Db::map(&fs::File::open(&dense).unwrap()).unwrap();
    assert!(matches!(db.data, Data::Map(_)), "no holes: mapped");
    assert_eq!(db.data.len(), fixture().len());
    let dump = db.dump().unwrap();

    // bbolt grows its file with ftruncate: the tail is a hole
    let sparse = dir.path().join("sparse.db");
    fs::write(&sparse, fixture()).unwrap();
    let grown = fixture().len() as u64 + (1 << 20);
    OpenOptions::new()
        .write(true)
        .open(&sparse)
        .unwrap()
        .set_len(grown)
        .unwrap();
    let db = Db::map(&fs::File::open(&sparse).unwrap()).unwrap();
    assert!(
        matches!(db.data, Data::Owned(_)),
        "a file with a hole is read, not mapped"
    );
    assert_eq!(db.data.len() as u64, grown);
    assert!(db.data[fixture().len()..].iter().all(|b| *b == 0));
    assert_eq!(db.dump().unwrap(), dump, "the same database either way");
}

/// `View::page_copy` (pread from the mapped file) gives every page exactly as `View::page`
/// (through the map) does: the same header fields and span bytes, or the same error; with
/// damaged headers (a wrong id, an overflow past the high-water mark or the file's end) too.
#[test]
fn a_page_read_with_pread_is_the_page_read_through_the_map() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = fixture();
    let ps = 4096;
    let db = Db::from_bytes(bytes.clone()).unwrap();
    let hwm = db.meta.hwm as usize;
    // damage three pages below the high-water mark: a stale id, an overflow past the
    // high-water mark, an overflow past the end of the file
    let (stale, past_hwm, past_end) = (hwm - 1, hwm - 2, hwm - 3);
    bytes[stale * ps..stale * ps + 8].copy_from_slice(&7u64.to_le_bytes());
    bytes[past_hwm * ps + 12..past_hwm * ps + 16].copy_from_slice(&5u32.to_le_bytes());
    let beyond = (bytes.len() / ps - past_end) as u32;
    bytes[past_end * ps + 12..past_end * ps + 16].copy_from_slice(&beyond.to_le_bytes());
    let path = dir.path().join("damaged.db");
    fs::write(&path, &bytes).unwrap();
    let file = fs::File::open(&path).unwrap();
    let db = Db::map(&file).unwrap();
    assert!(
        matches!(db.data, Data::Map(_)),
        "mapped, so page_copy reads with pread"
    );
    let mut view = db.view();
    assert!(view.file.is_some(), "a mapped Db's view has the file");
    let mut compared = (0, 0);
    let mut errors = std::collections::BTreeSet::new();
    for round in 0..2 {
        if round == 1 {
            // the same file seen with a high-water mark past its end
            view.hwm = (bytes.len() / ps + 4) as u64;
        }
        for id in 0..view.hwm + 3 {
            match (view.page(id), view.page_copy(id)) {
                (Ok(a), Ok(b)) => {
                    let b = b.page();
                    assert_eq!(
                        (a.id, a.flags, a.count, a.overflow),
                        (b.id, b.flags, b.count, b.overflow),
                        "page {id}: the same header"
                    );
                    assert!(a.buf == b.buf, "page {id}: the same bytes");
                    compared.0 += 1;
                }
                (Err(a), Err(b)) => {
                    assert_eq!(a.to_string(), b.to_string(), "page {id}: the same error");
                    errors.insert(a.to_string().split(": ").nth(1).unwrap_or("").to_string());
                    compared.1 += 1;
                }
                (a, b) => panic!("page {id}: through the map {a:?}, with pread {b:?}"),
            }
        }
    }
    assert!(compared.0 > 50 && compared.1 >= 8, "{compared:?}");
    for want in [
        "page header says",
        "past the high-water mark",
        "past the end of the file",
        "beyond the end of the file",
        "beyond the high-water mark",
    ] {
        assert!(
            errors.iter().any(|e| e.contains(want)),
            "an error {want:?} compared; seen {errors:?}"
        );
    }
}

/// The check of a mapped file (its pages read with pread) reports exactly what the check of
/// the same bytes in memory does, on a clean file and on damaged copies of it.
#[test]
fn the_check_of_a_mapped_file_is_the_check_of_its_bytes() {
    use boltfile::check::{check, check_indexed};
    let dir = tempfile::tempdir().unwrap();
    let clean = fixture();
    let hwm = Db::from_bytes(clean.clone()).unwrap().meta.hwm as usize;
    let mut cases = vec![clean.clone()];
    // damaged: one byte of each of a spread of pages' headers and element tables
    let mut seed = 0x2545_f491u64;
    for _ in 0..40 {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let page = 2 + (seed >> 33) as usize % (hwm - 2);
        let at = page * 4096 + (seed >> 13) as usize % 64;
        let mut b = clean.clone();
        b[at] ^= 1 << ((seed >> 7) % 8);
        cases.push(b);
    }
    let mut damaged = 0;
    for (i, bytes) in cases.iter().enumerate() {
        let path = dir.path().join(format!("case{i}.db"));
        fs::write(&path, bytes).unwrap();
        let Ok(owned) = Db::from_bytes(bytes.clone()) else {
            continue;
        };
        let mapped = Db::map(&fs::File::open(&path).unwrap()).unwrap();
        assert!(matches!(mapped.data, Data::Map(_)));
        for indexed in [false, true] {
            let run = |db: &Db| {
                if indexed {
                    check_indexed(&db.view(), &db.meta)
                } else {
                    check(&db.view(), &db.meta)
                }
            };
            let (a, b) = (run(&owned), run(&mapped));
            assert_eq!(a.errors(), b.errors(), "case {i}: the same problems");
            assert_eq!(a.free, b.free, "case {i}: the same free pages");
            assert_eq!(a.reachable_pages, b.reachable_pages, "case {i}");
            assert_eq!(a.walked_pages, b.walked_pages, "case {i}");
            assert_eq!(a.index.is_some(), b.index.is_some(), "case {i}");
            damaged += usize::from(!a.is_ok() && !indexed);
        }
    }
    assert!(damaged >= 10, "{damaged} damaged cases compared");
}
