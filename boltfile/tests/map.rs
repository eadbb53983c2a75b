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
