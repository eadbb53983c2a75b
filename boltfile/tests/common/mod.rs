//! Fixtures shared by the bolt engine's tests: real bbolt files written by containerd (and by
//! Go bbolt itself) under the workspace's fixtures/.
#![allow(dead_code)] // each test binary uses its own part

use boltfile::{check::check, Db};
use std::path::{Path, PathBuf};

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

/// containerd 1.6.20's small store (62 pages): `meta.db.before` (synced freelist, six
/// containers and three sandboxes), `.nofreelist` (the same content, NoFreelistSync),
/// `.after-restart`, `.after-bboltrs`.
pub fn store_file(name: &str) -> PathBuf {
    fixtures().join("stores/containerd-1.6.20").join(name)
}

pub fn store_before() -> Vec<u8> {
    std::fs::read(store_file("meta.db.before")).unwrap()
}

/// meta.db of a bundled real node, `1.6` (synced freelist) or `1.7` (NoFreelistSync).
pub fn node_db(v: &str) -> PathBuf {
    fixtures().join(format!(
        "nodes/containerd-{v}/var/lib/containerd/io.containerd.metadata.v1.bolt/meta.db"
    ))
}

pub fn gunzip(p: &Path) -> Vec<u8> {
    let out = std::process::Command::new("gzip")
        .arg("-dc")
        .arg(p)
        .output()
        .expect("run gzip");
    assert!(out.status.success(), "gzip -dc {}", p.display());
    out.stdout
}

/// Go bbolt's rewrites of the 1.7 node (step 4 of the research): synced, compacted,
/// compacted then rewritten, NoFreelistSync.
pub const STEP4: [&str; 4] = [
    "V1-synced",
    "V2-compact",
    "V3-compact-rewritten",
    "V4-nofreelistsync",
];

pub fn step4(v: &str) -> Vec<u8> {
    gunzip(&fixtures().join(format!("nodes/containerd-1.7/step4/{v}.meta.db.gz")))
}

pub use boltfile::testing::Kv;

pub fn kv_of(db: &Db) -> Kv {
    boltfile::testing::kv_of(db).unwrap()
}

/// Opens `bytes`, asserts our check passes, returns the content.
pub fn checked_kv(bytes: &[u8], what: &str) -> Kv {
    let db = Db::from_bytes(bytes.to_vec()).unwrap_or_else(|e| panic!("{what}: {e}"));
    let r = check(&db.view(), &db.meta);
    assert!(r.is_ok(), "{what}: bbolt check: {:?}", r.errors());
    kv_of(&db)
}

/// A containerd `extensions` bucket that lives in its own page (not inline).
pub fn is_paged_bucket(key: &[u8], v: &[u8]) -> bool {
    key == b"extensions" && v.len() == 16 && v[..8] != [0; 8]
}

/// First live (reachable, not free) page of each tree type in `bytes`: (branch, leaf).
pub fn first_live_tree_pages(bytes: &[u8]) -> (Option<usize>, Option<usize>) {
    let db = Db::from_bytes(bytes.to_vec()).unwrap();
    let rep = check(&db.view(), &db.meta);
    assert!(rep.is_ok(), "{}", rep.summary());
    let free: std::collections::HashSet<u64> = rep.free.iter().copied().collect();
    let (mut branch, mut leaf) = (None, None);
    let mut id = 2usize;
    while (id as u64) < rep.hwm {
        let h = &bytes[id * 4096..];
        let flags = u16::from_le_bytes([h[8], h[9]]);
        let overflow = u32::from_le_bytes([h[12], h[13], h[14], h[15]]) as usize;
        if free.contains(&(id as u64)) {
            id += 1;
            continue;
        }
        match flags {
            0x01 => branch = branch.or(Some(id)),
            0x02 => leaf = leaf.or(Some(id)),
            _ => {}
        }
        id += 1 + overflow;
    }
    (branch, leaf)
}

/// Writes `bytes` to a fresh file in `dir` named `name`; returns its path.
pub fn put(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}
