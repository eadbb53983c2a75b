//! Writes a fresh bolt file from a key/value tree (a bulk load, like `bbolt compact`).
//! Used to synthesise large containerd stores for the benchmark and tests; the tool itself
//! never replaces meta.db this way.

use super::*;

/// A bucket's content, keys in any order (sorted when written).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tree {
    /// The bucket's keys and what each holds.
    pub items: Vec<(Vec<u8>, Item)>,
}

/// What one key of a [`Tree`] holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// A plain value.
    Value(Vec<u8>),
    /// A nested bucket.
    Bucket {
        /// The bucket's sequence (`NextSequence` counter).
        sequence: u64,
        /// Its content.
        tree: Tree,
    },
}

impl Tree {
    /// Reads the whole tree of `db`.
    pub fn read(db: &Db) -> Result<Tree, BoltError> {
        read_tree(&db.view(), db.root(), 0)
    }

    /// What `key` holds in this bucket.
    pub fn get_mut(&mut self, key: &[u8]) -> Option<&mut Item> {
        self.items
            .iter_mut()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    /// The nested bucket at `path`.
    pub fn bucket_mut(&mut self, path: &[&[u8]]) -> Option<&mut Tree> {
        let mut t = self;
        for p in path {
            match t.get_mut(p)? {
                Item::Bucket { tree, .. } => t = tree,
                Item::Value(_) => return None,
            }
        }
        Some(t)
    }
}

fn read_tree<'a>(view: &View<'a>, root: Root<'a>, depth: usize) -> Result<Tree, BoltError> {
    if depth > MAX_DEPTH {
        return Err(BoltError::new("bucket", "nested too deep"));
    }
    let mut elems = Vec::new();
    view.for_each(root, &mut |e| {
        elems.push(e);
        Ok(())
    })?;
    let mut t = Tree::default();
    for e in elems {
        let item = if e.is_bucket() {
            let (r, sequence) = bucket_root(e.value, "bucket")?;
            Item::Bucket {
                sequence,
                tree: read_tree(view, r, depth + 1)?,
            }
        } else {
            Item::Value(e.value.to_vec())
        };
        t.items.push((e.key.to_vec(), item));
    }
    Ok(t)
}

struct Builder {
    ps: usize,
    fill: usize,
    out: Vec<u8>,
}

type Elem = (u32, Vec<u8>, Vec<u8>);

impl Builder {
    fn next_id(&self) -> u64 {
        (self.out.len() / self.ps) as u64
    }

    fn page(&mut self, leaf: bool, elems: &[Elem]) -> u64 {
        let size = PAGE_HEADER
            + elems
                .iter()
                .map(|(_, k, v)| ELEM_SIZE + k.len() + if leaf { v.len() } else { 0 })
                .sum::<usize>();
        let n = size.div_ceil(self.ps).max(1);
        let id = self.next_id();
        let mut buf = vec![0u8; n * self.ps];
        super::write::encode_node(&mut buf, id, leaf, elems, (n - 1) as u32);
        self.out.extend_from_slice(&buf);
        id
    }

    /// Writes `elems` (sorted) as a B+tree; returns its root page.
    fn tree(&mut self, elems: Vec<Elem>, leaf: bool) -> u64 {
        let mut chunks: Vec<Vec<Elem>> = vec![Vec::new()];
        let mut size = PAGE_HEADER;
        for e in elems {
            let esz = ELEM_SIZE + e.1.len() + if leaf { e.2.len() } else { 0 };
            let cur = chunks.last_mut().unwrap();
            if cur.len() >= 2 && size + esz > self.fill {
                chunks.push(Vec::new());
                size = PAGE_HEADER;
            }
            size += esz;
            chunks.last_mut().unwrap().push(e);
        }
        let parents: Vec<Elem> = chunks
            .into_iter()
            .map(|c| {
                let key = c.first().map(|e| e.1.clone()).unwrap_or_default();
                let id = self.page(leaf, &c);
                (0, key, id.to_ne_bytes().to_vec())
            })
            .collect();
        if parents.len() == 1 {
            u64::from_ne_bytes(parents[0].2[..8].try_into().unwrap())
        } else {
            self.tree(parents, false)
        }
    }

    fn elems(&mut self, t: &Tree) -> Vec<Elem> {
        let mut items: Vec<&(Vec<u8>, Item)> = t.items.iter().collect();
        items.sort_by(|a, b| a.0.cmp(&b.0));
        items
            .into_iter()
            .map(|(k, item)| match item {
                Item::Value(v) => (0, k.clone(), v.clone()),
                Item::Bucket { sequence, tree } => {
                    (BUCKET_LEAF_FLAG, k.clone(), self.bucket(tree, *sequence))
                }
            })
            .collect()
    }

    fn bucket(&mut self, t: &Tree, seq: u64) -> Vec<u8> {
        let elems = self.elems(t);
        let size = PAGE_HEADER
            + elems
                .iter()
                .map(|(_, k, v)| ELEM_SIZE + k.len() + v.len())
                .sum::<usize>();
        let mut v = vec![0u8; BUCKET_HEADER];
        wr_u64(&mut v, 8, seq);
        if elems.iter().all(|e| e.0 & BUCKET_LEAF_FLAG == 0) && size <= self.ps / 4 {
            let mut pg = vec![0u8; size];
            super::write::encode_node(&mut pg, 0, true, &elems, 0);
            v.extend_from_slice(&pg);
        } else {
            let root = self.tree(elems, true);
            wr_u64(&mut v, 0, root);
        }
        v
    }
}

/// A fresh bolt file holding `root` (the root bucket's content). `fill` (0.1–1.0) is how
/// full pages are packed, like bbolt's FillPercent; `synced_freelist` writes an empty
/// freelist page, else meta.freelist = 0xFFFF… (NoFreelistSync).
pub fn build(root: &Tree, page_size: usize, fill: f64, synced_freelist: bool) -> Vec<u8> {
    let mut b = Builder {
        ps: page_size,
        fill: ((page_size as f64) * fill.clamp(0.1, 1.0)) as usize,
        out: vec![0u8; 2 * page_size],
    };
    let elems = b.elems(root);
    let root_pg = b.tree(elems, true);
    let freelist = if synced_freelist {
        let id = b.next_id();
        let mut p = vec![0u8; page_size];
        wr_u64(&mut p, 0, id);
        wr_u16(&mut p, 8, FLAG_FREELIST);
        b.out.extend_from_slice(&p);
        id
    } else {
        NO_FREELIST
    };
    let hwm = b.next_id();
    for (page, txid) in [(0u64, 1u64), (1, 2)] {
        let m = Meta {
            page,
            magic: MAGIC,
            version: VERSION,
            page_size: page_size as u32,
            flags: 0,
            root: root_pg,
            sequence: 0,
            freelist,
            hwm,
            txid,
            checksum: 0,
        };
        let off = page as usize * page_size;
        b.out[off..off + page_size].copy_from_slice(&m.encode());
    }
    b.out
}
