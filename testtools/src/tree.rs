//! What is on disk under a directory, captured so a test can say "no byte changed": the store
//! trees the file-level tests patch, roll back and refuse to touch. Symbolic links are never
//! followed (a link that points out of the tree is the tree's entry, not the target's files),
//! and an unreadable directory panics rather than being skipped, so a snapshot is never
//! vacuously equal.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Every entry below `dir` (directories, files, symbolic links; not `dir` itself), each
/// directory before what it holds.
pub fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let rd = fs::read_dir(dir).unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()));
    for e in rd {
        let p = e.unwrap().path();
        out.push(p.clone());
        if fs::symlink_metadata(&p).unwrap().is_dir() {
            out.extend(walk(&p));
        }
    }
    out
}

/// Every regular file below `dir` (full path) with its bytes.
pub fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    walk(dir)
        .into_iter()
        .filter(|p| fs::symlink_metadata(p).unwrap().is_file())
        .map(|p| {
            let b = fs::read(&p).unwrap();
            (p, b)
        })
        .collect()
}

/// Every regular file below `dir` (full path) with its bytes, mode and inode: the inode tells
/// a file rewritten (a new inode renamed over it) from one left alone even when the bytes
/// are the same.
pub fn snapshot_with_inodes(dir: &Path) -> BTreeMap<PathBuf, (Vec<u8>, u32, u64)> {
    walk(dir)
        .into_iter()
        .filter_map(|p| {
            let m = fs::symlink_metadata(&p).unwrap();
            m.is_file().then(|| {
                let b = fs::read(&p).unwrap();
                (p, (b, m.mode(), m.ino()))
            })
        })
        .collect()
}

/// Every entry of the tree `root` (`root` itself as the empty path, then every entry below
/// it), by path relative to `root`, with its mode and its content: a file's bytes, a
/// symbolic link's target, nothing for a directory. Directories and links count, so a
/// directory created, a link retargeted or a mode changed all show.
pub fn snapshot_entries(root: &Path) -> BTreeMap<PathBuf, (u32, Vec<u8>)> {
    std::iter::once(root.to_path_buf())
        .chain(walk(root))
        .map(|p| {
            let m = fs::symlink_metadata(&p).unwrap();
            let content = if m.file_type().is_symlink() {
                fs::read_link(&p)
                    .unwrap()
                    .into_os_string()
                    .into_encoded_bytes()
            } else if m.is_file() {
                fs::read(&p).unwrap()
            } else {
                Vec::new()
            };
            let rel = p.strip_prefix(root).unwrap().to_path_buf();
            (rel, (m.mode(), content))
        })
        .collect()
}

/// Recursively copies `from` into `to`, keeping every mode (a fixture store's file modes are
/// part of what a rewrite must keep). The fixtures hold no symbolic links; one would be copied
/// as the file it points to.
pub fn copy(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap_or_else(|e| panic!("mkdir {}: {e}", to.display()));
    for e in fs::read_dir(from).unwrap_or_else(|e| panic!("read_dir {}: {e}", from.display())) {
        let e = e.unwrap();
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let meta = fs::symlink_metadata(&src).unwrap();
        if meta.is_dir() {
            copy(&src, &dst);
        } else {
            fs::copy(&src, &dst).unwrap_or_else(|e| panic!("copy {}: {e}", src.display()));
        }
        fs::set_permissions(&dst, fs::Permissions::from_mode(meta.mode() & 0o7777)).unwrap();
    }
}
