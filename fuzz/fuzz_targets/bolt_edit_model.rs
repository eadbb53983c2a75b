//! Random batches of value edits through the copy-on-write writer, against a model.
//!
//! The input picks a base file (containerd 1.6.20's real meta.db with a synced freelist, the
//! same store with `NoFreelistSync`, or that store's tree rebuilt by the bulk builder at a fill
//! and freelist layout the input chooses) and then up to 4 transactions of up to 8 edits each.
//! An edit replaces the value of an existing key (the only change the writer supports) with a
//! value of a length the input picks (0, small, around the inline limit pageSize/4, past a
//! page, several pages, or the old length); a few edits aim at what the writer must refuse (a
//! bucket key, a key that does not exist), which must fail the whole transaction and leave the
//! file untouched. Each transaction is planned, checked, and committed through an in-memory
//! `Storage` (so no fsync per exec); then the file is reopened.
//!
//! Model: `BTreeMap<bucket path, BTreeMap<key, entry>>`, updated by the same edits. After each
//! transaction the file's full dump equals the model (every bucket, key, value and sequence),
//! the check passes, the new meta is txid + 1 on the other meta page, the freelist layout is
//! kept, and the pages in use fit in the file.
#![no_main]

use boltfile::build::{self, Tree};
use boltfile::check::check;
use boltfile::storage::{Step, Storage};
use boltfile::write::{self, Edits};
use boltfile::{Db, DumpEntry};
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;
use std::sync::OnceLock;

const STORE_SYNCED: &[u8] =
    include_bytes!("../../fixtures/stores/containerd-1.6.20/meta.db.before");
const STORE_UNSYNCED: &[u8] =
    include_bytes!("../../fixtures/stores/containerd-1.6.20/meta.db.nofreelist");

#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    Value(Vec<u8>),
    Bucket { sequence: u64 },
}

type Model = BTreeMap<Vec<Vec<u8>>, BTreeMap<Vec<u8>, Entry>>;

fn model_of(dump: &[DumpEntry]) -> Model {
    let mut m = Model::new();
    for e in dump {
        let entry = match &e.value {
            Some(v) => Entry::Value(v.clone()),
            None => Entry::Bucket {
                sequence: e.sequence,
            },
        };
        m.entry(e.path.clone())
            .or_default()
            .insert(e.key.clone(), entry);
        if e.value.is_none() {
            // an empty nested bucket still exists in the model
            let mut p = e.path.clone();
            p.push(e.key.clone());
            m.entry(p).or_default();
        }
    }
    m
}

/// A bolt file held in memory, written through the same trait the real file is.
struct MemStorage(Vec<u8>);

impl MemStorage {
    fn grow(&mut self, end: u64) {
        if self.0.len() < end as usize {
            self.0.resize(end as usize, 0);
        }
    }
}

impl Storage for MemStorage {
    fn file_len(&self) -> std::io::Result<u64> {
        Ok(self.0.len() as u64)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        let src = usize::try_from(offset)
            .ok()
            .and_then(|o| self.0.get(o..o.checked_add(buf.len())?))
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(src);
        Ok(())
    }
    fn allocate(&mut self, _: Step, offset: u64, len: u64) -> std::io::Result<()> {
        self.grow(offset + len);
        Ok(())
    }
    fn write(&mut self, _: Step, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.grow(offset + data.len() as u64);
        self.0[offset as usize..offset as usize + data.len()].copy_from_slice(data);
        Ok(())
    }
    fn sync_data(&mut self, _: Step) -> std::io::Result<()> {
        Ok(())
    }
    fn set_len(&mut self, _: Step, len: u64) -> std::io::Result<()> {
        self.0.resize(len as usize, 0);
        Ok(())
    }
}

/// Reads the input a byte at a time; zeros once it runs out.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

fn store_tree() -> &'static Tree {
    static TREE: OnceLock<Tree> = OnceLock::new();
    TREE.get_or_init(|| Tree::read(&Db::from_bytes(STORE_SYNCED.to_vec()).unwrap()).unwrap())
}

fn base_file(input: &mut Input) -> Vec<u8> {
    let pick = input.byte();
    match pick % 4 {
        0 => STORE_SYNCED.to_vec(),
        1 => STORE_UNSYNCED.to_vec(),
        _ => {
            let fill = [0.1, 0.5, 0.9, 1.0][(pick as usize >> 2) % 4];
            build::build(store_tree(), 4096, fill, pick & 0x40 != 0)
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let mut db = Db::from_bytes(base_file(&mut input)).expect("base opens");
    let mut model = model_of(&db.dump().expect("base dumps"));
    // every plain value and every nested bucket, as (bucket path, key)
    let values: Vec<(Vec<Vec<u8>>, Vec<u8>)> = model
        .iter()
        .flat_map(|(p, keys)| {
            keys.iter()
                .filter(|(_, e)| matches!(e, Entry::Value(_)))
                .map(move |(k, _)| (p.clone(), k.clone()))
        })
        .collect();
    let buckets: Vec<(Vec<Vec<u8>>, Vec<u8>)> = model
        .iter()
        .flat_map(|(p, keys)| {
            keys.iter()
                .filter(|(_, e)| matches!(e, Entry::Bucket { .. }))
                .map(move |(k, _)| (p.clone(), k.clone()))
        })
        .collect();
    let synced = db.meta.freelist_synced();
    let ps = db.meta.page_size as usize;
    let lengths = [
        0,
        1,
        7,
        64,
        ps / 4 - 40,
        ps / 4 + 1,
        ps - 40,
        ps + 1,
        3 * ps + 5,
    ];
    let mut report = check(&db.view(), &db.meta);
    assert!(report.is_ok(), "base fails the check: {}", report.summary());

    for _tx in 0..1 + input.byte() % 4 {
        if input.is_empty() {
            break;
        }
        let mut edits = Edits::default();
        let mut next = model.clone();
        let mut must_fail = false;
        for _ in 0..1 + input.byte() % 8 {
            let kind = input.byte();
            let idx = input.u16() as usize;
            let len_pick = input.byte();
            let fill = input.byte();
            let (path, key) = match kind % 16 {
                0 => {
                    // a bucket key: the writer replaces values only
                    must_fail = true;
                    buckets[idx % buckets.len()].clone()
                }
                1 => {
                    // a key that does not exist next to an existing value
                    must_fail = true;
                    let (p, mut k) = values[idx % values.len()].clone();
                    k.push(0xff);
                    while next[&p].contains_key(&k) {
                        k.push(0xff);
                    }
                    (p, k)
                }
                _ => values[idx % values.len()].clone(),
            };
            let old_len = match next.get(&path).and_then(|b| b.get(&key)) {
                Some(Entry::Value(v)) => v.len(),
                _ => 3,
            };
            let len = lengths
                .get(len_pick as usize % (lengths.len() + 1))
                .copied()
                .unwrap_or(old_len);
            let value: Vec<u8> = (0..len).map(|i| fill.wrapping_add(i as u8)).collect();
            let p: Vec<&[u8]> = path.iter().map(Vec::as_slice).collect();
            edits.put(&p, &key, value.clone());
            if let Some(Entry::Value(v)) = next.get_mut(&path).and_then(|b| b.get_mut(&key)) {
                *v = value;
            }
        }
        let plan = match write::plan(&db, &report, &edits) {
            Ok(plan) => plan,
            Err(e) => {
                assert!(must_fail, "the writer refused a valid batch: {e}");
                continue; // nothing written, the model stays
            }
        };
        assert!(!must_fail, "the writer accepted an edit it cannot do");
        let planned = check(&plan.view(&db.data), &plan.new_meta);
        assert!(
            planned.is_ok(),
            "planned tree fails the check: {}",
            planned.summary()
        );
        let mut storage = MemStorage(db.data.to_vec());
        write::commit_with(&mut storage, &db.data, &plan).expect("in-memory commit");
        let old_meta = db.meta;
        let file_len = storage.0.len();

        let after = Db::from_bytes(storage.0).expect("committed file opens");
        assert_eq!(after.meta.txid, old_meta.txid + 1);
        assert_eq!(after.meta.page, 1 - old_meta.page);
        assert_eq!(after.meta.freelist_synced(), synced, "freelist layout kept");
        assert!(
            after.meta.hwm as usize * ps <= file_len,
            "pages in use fit the file"
        );
        let rep = check(&after.view(), &after.meta);
        assert!(
            rep.is_ok(),
            "committed file fails the check: {}",
            rep.summary()
        );
        let dump = after.dump().expect("committed file dumps");
        assert!(model_of(&dump) == next, "the file differs from the model");
        model = next;
        db = after;
        report = rep;
    }
});
