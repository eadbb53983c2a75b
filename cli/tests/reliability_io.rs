//! Disk full and read-only file systems through the binary (needs root: tmpfs and bind mounts,
//! unmounted by a drop guard).
//!
//! Exit codes, as `--help` documents them: an I/O error the tool did not choose (ENOSPC, EROFS)
//! is an **unexpected failure, exit 1**; exit 3 stays for refusals (runtime running, pre-check
//! failed, backup dir unusable by policy, store changed since the backup). In every case the
//! message names the file and the OS error, and the store keeps its original bytes.

mod rel_common;
mod under_test;

use rel_common::*;
use std::path::Path;

fn assert_untouched(node: &Node, before: &Snapshot, what: &str) {
    let now = node.snapshot();
    assert!(
        now.diff(before).is_empty(),
        "{what}: the store changed: {:?}",
        now.diff(before)
    );
    assert!(
        now.temps.is_empty(),
        "{what}: temp files left behind: {:?}",
        now.temps
    );
}

fn shrink(filler: &Path, free_bytes: u64) {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(filler)
        .unwrap();
    let len = f.metadata().unwrap().len();
    f.set_len(len.saturating_sub(free_bytes)).unwrap();
}

/// The store's file system fills up while `patch` stages the new files: exit 1, ENOSPC named,
/// nothing changed, the prepared backup rolls back as "already original", and once space is
/// freed a rerun completes.
fn store_fills_up(name: &str, free_bytes: u64) {
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("mnt");
    let _m = Mount::tmpfs(&mnt, "16m");
    let node = small_in(name, &mnt);
    let to = node.last_target();
    if node.kind == Kind::Containerd {
        // only the pages in use, as a compacted file: a rewrite must grow it
        let db = std::fs::read(node.meta_db()).unwrap();
        let hwm = storepatch::containerd::bolt::Db::from_bytes(db.clone())
            .unwrap()
            .meta
            .hwm as usize;
        std::fs::write(node.meta_db(), &db[..hwm * 4096]).unwrap();
    }
    let before = node.snapshot();
    let filler = fill_up(&mnt);
    shrink(&filler, free_bytes);
    let bk = tmp.path().join("backup");
    let r = node.patch(&to, &bk);
    assert_eq!(r.code, Some(1), "{name}: patch on a full disk: {r:?}");
    assert!(
        r.stderr.contains("No space left on device"),
        "{name}: {}",
        r.stderr
    );
    assert!(
        r.stderr.contains(&mnt.display().to_string()),
        "{name}: the message names the file: {}",
        r.stderr
    );
    assert_untouched(&node, &before, name);
    let msg = r.stderr.trim().to_string();
    if node.kind == Kind::Containerd {
        bolt_kv(&node.meta_db()).expect("meta.db still opens and checks clean");
    }
    // the plan still works on the full disk
    assert!(node.plan(&to).ok());
    if bk.join("manifest.json").exists() {
        let r = node.rollback(&bk, false);
        assert_eq!(r.code, Some(0), "{name}: {r:?}");
        assert!(r.stdout.contains("already original"), "{}", r.stdout);
        assert!(!r.stdout.contains("restored"), "{}", r.stdout);
        assert_untouched(&node, &before, name);
    }
    std::fs::remove_file(&filler).unwrap();
    let r = node.patch(&to, &tmp.path().join("backup2"));
    assert!(r.ok(), "{name}: rerun once space is free: {r:?}");
    assert!(!node.snapshot().diff(&before).is_empty());
    eprintln!("{name}: full store file system: exit 1, {msg}");
}

#[test]
fn disk_full_store_docker() {
    // ~ a third of the staged files fit
    store_fills_up("docker-20.10", 32 * 1024);
}

#[test]
fn disk_full_store_crio() {
    store_fills_up("crio-1.30", 64 * 1024);
}

#[test]
fn disk_full_store_containerd() {
    store_fills_up("containerd-1.7", 0);
}

/// containerd's meta.db as bbolt leaves it, grown with `ftruncate` (a hole past the
/// high-water mark), on a full tmpfs: a read fault on a hole through a memory map needs a page
/// tmpfs cannot give, which killed the process with SIGBUS (exit 135 from a shell, no
/// message). The file is read instead of mapped: exit 1, ENOSPC, naming meta.db and the space
/// the commit needs, the store unchanged; once space is freed a rerun completes.
#[test]
fn disk_full_sparse_meta_db_is_no_sigbus() {
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("mnt");
    let _m = Mount::tmpfs(&mnt, "16m");
    let node = small_in("containerd-1.7", &mnt);
    let to = node.last_target();
    let db = std::fs::read(node.meta_db()).unwrap();
    let hwm = storepatch::containerd::bolt::Db::from_bytes(db.clone())
        .unwrap()
        .meta
        .hwm as usize;
    std::fs::write(node.meta_db(), &db[..hwm * 4096]).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(node.meta_db())
        .unwrap()
        .set_len((hwm * 4096 + (4 << 20)) as u64)
        .unwrap();
    let before = node.snapshot();
    let filler = fill_up(&mnt);
    let bk = tmp.path().join("backup");
    let r = node.patch(&to, &bk);
    assert_eq!(r.signal, None, "killed by a signal (SIGBUS is 7): {r:?}");
    assert_ne!(r.code, Some(135), "{r:?}");
    assert_eq!(r.code, Some(1), "patch on a full disk: {r:?}");
    let db_path = node.meta_db().display().to_string();
    assert!(
        r.stderr.contains("No space left on device")
            && r.stderr.contains(&db_path)
            && r.stderr.contains("bytes of free space"),
        "the message names the file and the space needed: {}",
        r.stderr
    );
    assert_untouched(&node, &before, "sparse meta.db, full disk");
    let msg = r.stderr.trim().to_string();
    // the backup (on another file system) was committed before the commit failed: whole,
    // with its manifest, and it finds every file original
    assert!(
        bk.join("manifest.json").is_file(),
        "a backup is whole or gone"
    );
    let rb = node.rollback(&bk, false);
    assert_eq!(rb.code, Some(0), "{rb:?}");
    assert!(rb.stdout.contains("already original"), "{}", rb.stdout);
    assert_untouched(&node, &before, "sparse meta.db, rollback");
    bolt_kv(&node.meta_db()).expect("meta.db still opens and checks clean");
    assert!(
        node.plan(&to).ok(),
        "the plan reads the sparse file on the full disk"
    );
    std::fs::remove_file(&filler).unwrap();
    let r = node.patch(&to, &tmp.path().join("backup2"));
    assert!(r.ok(), "rerun once space is free: {r:?}");
    eprintln!("sparse meta.db, full tmpfs: exit 1, {msg}");
}

/// The backup dir's file system fills up while the originals are copied: exit 1, ENOSPC named,
/// the store untouched; the half-made backup (no manifest) is removed again.
/// `extra`: more `patch` flags (`--backup full`).
fn backup_fills_up(name: &str, size: &str, extra: &[&str]) {
    let tmp = tempfile::tempdir().unwrap();
    let node = small(name);
    let to = node.last_target();
    let before = node.snapshot();
    let mnt = tmp.path().join("bmnt");
    let _m = Mount::tmpfs(&mnt, size);
    let bk = mnt.join("backup");
    let r = Run::from(node.patch_cmd(&to, &bk).args(extra).output().unwrap());
    assert_eq!(
        r.code,
        Some(1),
        "{name} {extra:?}: backup on a full disk: {r:?}"
    );
    assert!(
        r.stderr.contains("No space left on device")
            && r.stderr.contains(&bk.display().to_string()),
        "{name}: {}",
        r.stderr
    );
    assert_untouched(&node, &before, name);
    assert!(
        !bk.exists(),
        "{name}: the partial backup (no manifest) is removed: {:?}",
        std::fs::read_dir(&bk).map(|d| d.count())
    );
    let r = node.rollback(&bk, false);
    assert_ne!(r.code, Some(0), "{r:?}");
    assert_untouched(&node, &before, name);
    let r = node.patch(&to, &tmp.path().join("backup2"));
    assert!(
        r.ok(),
        "{name}: a patch with room for the backup works: {r:?}"
    );
}

#[test]
fn disk_full_backup_docker() {
    // 24 files of ~4 KiB: two thirds fit
    backup_fills_up("docker-20.10", "64k", &[]);
}

#[test]
fn disk_full_backup_containerd() {
    // the page undo of this patch is 44 KiB
    backup_fills_up("containerd-1.7", "32k", &[]);
}

#[test]
fn disk_full_backup_containerd_full_copy() {
    // meta.db is ~2 MiB
    backup_fills_up("containerd-1.7", "1m", &["--backup", "full"]);
}

/// The store on a read-only file system: `plan` works, `patch` fails (exit 1, EROFS named)
/// without a change; `rollback` onto a read-only store fails the same way and leaves the
/// patched bytes; writable again, rollback restores everything.
fn read_only_store(name: &str) {
    let node = small(name);
    let to = node.last_target();
    let before = node.snapshot();
    let var = node.dir.join("var");
    let tmp = tempfile::tempdir().unwrap();
    {
        let _ro = Mount::ro_bind(&var, &var);
        assert!(node.plan(&to).ok(), "{name}: plan reads a read-only store");
        let r = node.patch(&to, &tmp.path().join("b1"));
        assert_eq!(r.code, Some(1), "{name}: patch on a read-only store: {r:?}");
        assert!(
            r.stderr.contains("Read-only file system"),
            "{name}: {}",
            r.stderr
        );
        assert_untouched(&node, &before, name);
    }
    let bk = tmp.path().join("b2");
    let r = node.patch(&to, &bk);
    assert!(r.ok(), "{r:?}");
    let patched = node.snapshot();
    {
        let _ro = Mount::ro_bind(&var, &var);
        let r = node.rollback(&bk, false);
        assert_eq!(
            r.code,
            Some(1),
            "{name}: rollback onto a read-only store: {r:?}"
        );
        assert!(
            r.stderr.contains("Read-only file system"),
            "{name}: {}",
            r.stderr
        );
        assert_untouched(&node, &patched, name);
    }
    let r = node.rollback(&bk, false);
    assert_eq!(r.code, Some(0), "{r:?}");
    assert_untouched(&node, &before, name);
}

#[test]
fn read_only_store_docker() {
    read_only_store("docker-20.10");
}

#[test]
fn read_only_store_containerd() {
    read_only_store("containerd-1.7");
}

#[test]
fn read_only_store_crio() {
    read_only_store("crio-1.30");
}

/// The backup dir on a read-only file system: exit 1 naming it, store untouched.
#[test]
fn read_only_backup_dir() {
    let node = small("docker-20.10");
    let to = node.last_target();
    let before = node.snapshot();
    let tmp = tempfile::tempdir().unwrap();
    let ro = tmp.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    let _m = Mount::ro_bind(&ro, &ro);
    let bk = ro.join("backup");
    let r = node.patch(&to, &bk);
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(
        r.stderr.contains("Read-only file system") && r.stderr.contains(&bk.display().to_string()),
        "{}",
        r.stderr
    );
    assert_untouched(&node, &before, "read-only backup dir");
}
