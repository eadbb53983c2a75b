//! The copy-on-write writer and the bulk builder: every transaction is compared with a model
//! of the edits (full dumps), passes our check and Go bbolt's, keeps the freelist layout; a
//! commit that fails at any durable step puts every byte back.

mod common;

use boltfile::build::{self, Item, Tree};
use boltfile::check::check;
use boltfile::storage::{FileStorage, Step, Storage};
use boltfile::testing::assert_bbolt_check;
use boltfile::write::{self, CommitError, CommitStats, Edits};
use boltfile::Db;
use common::*;
use std::fs::{self, File, OpenOptions};
use std::path::Path;

fn open_rw(p: &Path) -> File {
    OpenOptions::new().read(true).write(true).open(p).unwrap()
}

/// Plans `edits` on the file at `path` and commits them through `storage_for(file)`.
fn commit_via(
    path: &Path,
    edits: &Edits,
    storage_for: &dyn Fn(&File) -> Box<dyn Storage + '_>,
) -> Result<CommitStats, CommitError> {
    let db = Db::read_path(path).unwrap();
    let rep = check(&db.view(), &db.meta);
    let plan = write::plan(&db, &rep, edits).unwrap();
    let planned = check(&plan.view(&db.data), &plan.new_meta);
    assert!(planned.is_ok(), "planned tree: {}", planned.summary());
    let file = open_rw(path);
    let mut storage = storage_for(&file);
    write::commit_with(storage.as_mut(), &db.data, &plan)
}

fn plain(file: &File) -> Box<dyn Storage + '_> {
    Box::new(FileStorage::new(file))
}

/// Commits `edits` to `path`; asserts the result is exactly `before` with `model` applied,
/// passes both checks, is the next transaction on the other meta page, and keeps the layout.
fn apply_and_verify(path: &Path, edits: &Edits, model: &Kv) {
    let old = Db::read_path(path).unwrap().meta;
    commit_via(path, edits, &plain).unwrap();
    let bytes = fs::read(path).unwrap();
    let after = checked_kv(&bytes, &path.display().to_string());
    assert!(&after == model, "the file holds exactly the edited model");
    let new = Db::from_bytes(bytes).unwrap().meta;
    assert_eq!(new.txid, old.txid + 1);
    assert_eq!(new.page, 1 - old.page, "written over the older meta page");
    assert_eq!(new.freelist_synced(), old.freelist_synced(), "layout kept");
    assert_bbolt_check(path);
}

/// Every plain value whose key is `key` (anywhere), as (bucket path, key).
fn values_named(kv: &Kv, key: &[u8]) -> Vec<(Vec<Vec<u8>>, Vec<u8>)> {
    kv.iter()
        .filter(|((_, k), (v, _))| k == key && v.is_some())
        .map(|(k, _)| k.clone())
        .collect()
}

fn edit(edits: &mut Edits, model: &mut Kv, at: &(Vec<Vec<u8>>, Vec<u8>), value: Vec<u8>) {
    let path: Vec<&[u8]> = at.0.iter().map(Vec::as_slice).collect();
    edits.put(&path, &at.1, value.clone());
    model.get_mut(at).unwrap().0 = Some(value);
}

#[test]
fn replace_values_in_real_files_both_layouts() {
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in [
        ("store synced", store_before()),
        (
            "store nofreelist",
            fs::read(store_file("meta.db.nofreelist")).unwrap(),
        ),
        ("node 1.6", fs::read(node_db("1.6")).unwrap()),
        ("node 1.7", fs::read(node_db("1.7")).unwrap()),
    ] {
        let path = put(dir.path(), name, &bytes);
        let mut model = checked_kv(&bytes, name);
        let targets = values_named(&model, b"io.cri-containerd.container.metadata");
        assert!(targets.len() >= 6, "{name}: {} values", targets.len());
        // same length, shorter, longer, much longer (overflow pages), empty
        let mut edits = Edits::default();
        for (i, at) in targets.iter().enumerate() {
            let old = model[at].0.clone().unwrap();
            let new = match i % 5 {
                0 => old.iter().map(|b| b ^ 0x5a).collect(),
                1 => old[..old.len() / 2].to_vec(),
                2 => [old.as_slice(), b"0123456"].concat(),
                3 => vec![b'x'; 9000],
                _ => Vec::new(),
            };
            edit(&mut edits, &mut model, at, new);
        }
        apply_and_verify(&path, &edits, &model);
        // a second transaction on the result (reuses the pages the first one freed)
        let mut edits = Edits::default();
        let at = &targets[0];
        edit(&mut edits, &mut model, at, b"second".to_vec());
        apply_and_verify(&path, &edits, &model);
    }
}

#[test]
fn rebuilt_file_reads_the_same() {
    let src = node_db("1.7");
    let db = Db::read_path(&src).unwrap();
    let tree = Tree::read(&db).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (fill, synced) in [(1.0, true), (0.5, false)] {
        let bytes = build::build(&tree, 4096, fill, synced);
        let built = Db::from_bytes(bytes.clone()).unwrap();
        assert_eq!(built.meta.freelist_synced(), synced);
        assert!(
            checked_kv(&bytes, "rebuilt") == kv_of(&db),
            "same key/values after a rebuild"
        );
        assert_bbolt_check(&put(dir.path(), &format!("rebuilt-{fill}"), &bytes));
    }
}

/// Packed pages (fill 1.0) whose values then grow: leaves get overflow pages, the tree stays
/// valid, and only the values change.
#[test]
fn growing_values_in_packed_pages() {
    let db = Db::read_path(&node_db("1.6")).unwrap();
    let bytes = build::build(&Tree::read(&db).unwrap(), 4096, 1.0, true);
    let dir = tempfile::tempdir().unwrap();
    let path = put(dir.path(), "packed", &bytes);
    let mut model = checked_kv(&bytes, "packed");
    let mut edits = Edits::default();
    for at in values_named(&model, b"io.cri-containerd.container.metadata") {
        let v = [model[&at].0.clone().unwrap(), vec![b'+'; 300]].concat();
        edit(&mut edits, &mut model, &at, v);
    }
    apply_and_verify(&path, &edits, &model);
    let after = Db::read_path(&path).unwrap();
    let overflowed = (2..after.meta.hwm).any(|id| {
        after
            .view()
            .page(id)
            .is_ok_and(|p| p.overflow > 0 && p.is_leaf())
    });
    assert!(overflowed, "some leaf grew past one page");
}

fn bucket(tree: Tree) -> Item {
    Item::Bucket { sequence: 7, tree }
}

/// An inline bucket (small enough to live inside its parent's leaf) stays inline while it
/// fits bbolt's limit (pageSize/4) and moves to its own page once it does not, as bbolt does.
#[test]
fn inline_bucket_moves_out_past_a_quarter_page() {
    let small = |v: &[u8]| Tree {
        items: vec![(b"k".to_vec(), Item::Value(v.to_vec()))],
    };
    let root = Tree {
        items: vec![(
            b"top".to_vec(),
            bucket(Tree {
                items: vec![
                    (b"stays".to_vec(), bucket(small(b"tiny"))),
                    (b"moves".to_vec(), bucket(small(b"small too"))),
                ],
            }),
        )],
    };
    let dir = tempfile::tempdir().unwrap();
    for synced in [true, false] {
        let path = put(
            dir.path(),
            &format!("inline-{synced}"),
            &build::build(&root, 4096, 0.5, synced),
        );
        let inline = |name: &[u8]| -> bool {
            let db = Db::read_path(&path).unwrap();
            let v = db.view();
            let top = v.bucket(db.root(), b"top", "top").unwrap().unwrap();
            v.get(top, name).unwrap().unwrap().value[..8] == [0; 8]
        };
        assert!(inline(b"stays") && inline(b"moves"), "both start inline");
        let mut model = checked_kv(&fs::read(&path).unwrap(), "inline");
        let mut edits = Edits::default();
        let at = |b: &[u8]| (vec![b"top".to_vec(), b.to_vec()], b"k".to_vec());
        edit(&mut edits, &mut model, &at(b"stays"), vec![b's'; 900]);
        edit(&mut edits, &mut model, &at(b"moves"), vec![b'm'; 1100]);
        apply_and_verify(&path, &edits, &model);
        assert!(inline(b"stays"), "a bucket within pageSize/4 stays inline");
        assert!(
            !inline(b"moves"),
            "a bucket over pageSize/4 gets its own page"
        );
        let now = checked_kv(&fs::read(&path).unwrap(), "moved");
        let seq = |b: &[u8]| now[&(vec![b"top".to_vec()], b.to_vec())].1;
        assert_eq!(
            (seq(b"stays"), seq(b"moves")),
            (7, 7),
            "bucket sequences kept"
        );
    }
}

#[test]
fn plan_refuses_what_the_writer_cannot_do() {
    let db = Db::from_bytes(store_before()).unwrap();
    let rep = check(&db.view(), &db.meta);
    let refuse = |path: &[&[u8]], key: &[u8], want: &str| {
        let mut e = Edits::default();
        e.put(path, key, b"x".to_vec());
        let err = write::plan(&db, &rep, &e).unwrap_err().to_string();
        assert!(err.contains(want), "{err:?} should mention {want:?}");
    };
    refuse(&[b"v1"], b"no-such-key", "not found");
    refuse(&[b"v1"], b"k8s.io", "is a bucket, not a value");
    refuse(&[b"v1", b"version"], b"k", "is a value, not a bucket");
    // a damaged file is never written to
    let mut b = store_before();
    let (_, leaf) = first_live_tree_pages(&b);
    b[leaf.unwrap() * 4096 + 8] = 0x03;
    let bad = Db::from_bytes(b).unwrap();
    let bad_rep = check(&bad.view(), &bad.meta);
    let mut e = Edits::default();
    e.put(&[b"v1"], b"version", vec![1]);
    let err = write::plan(&bad, &bad_rep, &e).unwrap_err().to_string();
    assert!(err.contains("consistency check"), "{err}");
}

/// A storage that records the durable steps of a commit and fails the `fail_at`-th one with
/// ENOSPC (and, with `fail_undo`, every undo call with EIO).
struct Failing<'f> {
    inner: FileStorage<'f>,
    calls: Vec<Step>,
    fail_at: Option<usize>,
    fail_undo: bool,
}

impl<'f> Failing<'f> {
    fn new(file: &'f File, fail_at: Option<usize>, fail_undo: bool) -> Self {
        Failing {
            inner: FileStorage::new(file),
            calls: Vec::new(),
            fail_at,
            fail_undo,
        }
    }

    fn step(&mut self, step: Step) -> std::io::Result<()> {
        if step == Step::Undo {
            if self.fail_undo {
                return Err(std::io::Error::from_raw_os_error(libc::EIO));
            }
            return Ok(());
        }
        self.calls.push(step);
        if self.fail_at == Some(self.calls.len()) {
            return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
        }
        Ok(())
    }
}

impl Storage for Failing<'_> {
    fn file_len(&self) -> std::io::Result<u64> {
        self.inner.file_len()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.inner.read_at(offset, buf)
    }
    fn allocate(&mut self, step: Step, offset: u64, len: u64) -> std::io::Result<()> {
        self.step(step)?;
        self.inner.allocate(step, offset, len)
    }
    fn write(&mut self, step: Step, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.step(step)?;
        self.inner.write(step, offset, data)
    }
    fn write_parts(&mut self, step: Step, offset: u64, parts: &[&[u8]]) -> std::io::Result<()> {
        self.step(step)?;
        self.inner.write_parts(step, offset, parts)
    }
    fn sync_data(&mut self, step: Step) -> std::io::Result<()> {
        self.step(step)?;
        self.inner.sync_data(step)
    }
    fn set_len(&mut self, step: Step, len: u64) -> std::io::Result<()> {
        self.step(step)?;
        self.inner.set_len(step, len)
    }
}

/// The commit's durable steps come in bbolt's order, and a failure at any one of them before
/// the meta page is durable leaves the file byte for byte as it was (length included); a
/// failed final fdatasync reports that the file was not restored, and so does a commit whose
/// undo fails.
#[test]
fn failed_commit_at_every_step_restores_every_byte() {
    let dir = tempfile::tempdir().unwrap();
    // the 1.7 node's meta.db cut to its in-use pages, so the commit appends and extends it
    let node = fs::read(node_db("1.7")).unwrap();
    let hwm = Db::from_bytes(node.clone()).unwrap().meta.hwm as usize;
    // and that cut file with a tail past its high-water mark, as files that were once longer
    // have (holes, or stale pages), where the commit appends: mostly zeros, one page not
    let mut tail = node[..hwm * 4096].to_vec();
    tail.extend(vec![0u8; 8 * 4096]);
    tail.extend(vec![0xa5u8; 4096]);
    tail.extend(vec![0u8; 7 * 4096]);
    for (name, orig) in [
        ("store synced", store_before()),
        ("node 1.7 trimmed", node[..hwm * 4096].to_vec()),
        ("node 1.7 with a tail past its high-water mark", tail),
    ] {
        let path = put(dir.path(), name, &orig);
        let mut model = checked_kv(&orig, name);
        let mut edits = Edits::default();
        for at in values_named(&model, b"io.cri-containerd.container.metadata") {
            edit(&mut edits, &mut model, &at, vec![b'v'; 5000]);
        }
        let db = Db::from_bytes(orig.clone()).unwrap();
        let plan = write::plan(&db, &check(&db.view(), &db.meta), &edits).unwrap();
        let commit = |fail_at: Option<usize>, fail_undo: bool| {
            fs::write(&path, &orig).unwrap();
            let file = open_rw(&path);
            let mut storage = Failing::new(&file, fail_at, fail_undo);
            let r = write::commit_with(&mut storage, &db.data, &plan);
            (r, storage.calls)
        };
        // a clean run: bbolt's order of steps, and the edited model
        let (r, steps) = commit(None, false);
        r.unwrap();
        assert!(checked_kv(&fs::read(&path).unwrap(), name) == model);
        assert_bbolt_check(&path);
        assert!(
            fs::metadata(&path).unwrap().len() > orig.len() as u64,
            "{name}: the commit appended pages"
        );
        let n = steps.len();
        assert!(n >= 5, "{steps:?}");
        assert_eq!(steps[0], Step::Reserve, "{name}: {steps:?}");
        assert_eq!(
            steps[n - 3..],
            [Step::SyncPages, Step::WriteMeta, Step::SyncMeta]
        );
        assert!(steps[1..n - 3].iter().all(|s| *s == Step::WritePages));
        for fail_at in 1..=n {
            for fail_undo in [false, true] {
                let (r, _) = commit(Some(fail_at), fail_undo);
                let e = r.unwrap_err();
                assert_eq!(e.source.raw_os_error(), Some(libc::ENOSPC), "{e}");
                let now = fs::read(&path).unwrap();
                if fail_at == n {
                    assert!(!e.restored, "{name} step {fail_at}: {e}");
                    assert!(e.to_string().contains("syncing the meta page"), "{e}");
                    // the meta was written, only not made durable: the new database
                    assert!(checked_kv(&now, name) == model);
                    assert_bbolt_check(&path);
                } else if fail_undo {
                    assert!(
                        !e.restored,
                        "{name} step {fail_at}: a failed undo is reported"
                    );
                } else {
                    assert!(e.restored, "{name} step {fail_at}: {e}");
                    assert!(now == orig, "{name} step {fail_at}: every byte put back");
                }
            }
        }
        eprintln!("{name}: {n} durable steps, a failure at each one handled");
    }
}
