//! Batch hashing: many containers of one version through several FNV-1a chains at once.
//!
//! FNV-1a is a serial chain (`h = (h ^ byte) * prime`): one hash cannot go faster than the
//! latency of a multiply per byte, however cheap the text is to produce. Independent chains
//! can overlap, though. [`hash_many`] writes each container's text into a small per-lane
//! buffer (the compact JSON for the JSON forms, the go-spew text for the struct form) and
//! advances [`LANES`] chains in lockstep, so the multiplier works on several hashes per cycle.
//! For the JSON forms the go-spew spelling of each JSON byte (`" 123"`) is expanded on the fly
//! from a table, as four conditional steps, without materialising the spelled text.

use crate::gojson;
use crate::sink::Sink;
use crate::{ContainerHashes, DecodedContainer, Hash, HashForm, KubeletVersion};

/// Chains advanced together.
pub const LANES: usize = 8;

const PRIME: u32 = 0x0100_0193;
const OFFSET: u32 = 0x811c_9dc5;

#[inline(always)]
fn fnv_byte(h: u32, b: u8) -> u32 {
    (h ^ b as u32).wrapping_mul(PRIME)
}

const fn fnv_const(bytes: &[u8]) -> u32 {
    let mut h = OFFSET;
    let mut i = 0;
    while i < bytes.len() {
        h = (h ^ bytes[i] as u32).wrapping_mul(PRIME);
        i += 1;
    }
    h
}

/// The FNV state after go-spew's `([]uint8)[` prefix.
const SPEW_PREFIX_STATE: u32 = fnv_const(b"([]uint8)[");

/// For every byte value: `" N"` as go-spew separates `[]uint8` elements, packed little-endian
/// (space first), and its length 2..=4.
static SPELLED: [(u32, u32); 256] = {
    let mut t = [(0u32, 0u32); 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u32;
        t[i] = if b >= 100 {
            (
                0x20 | (0x30 + b / 100) << 8 | (0x30 + (b / 10) % 10) << 16 | (0x30 + b % 10) << 24,
                4,
            )
        } else if b >= 10 {
            (0x20 | (0x30 + b / 10) << 8 | (0x30 + b % 10) << 16, 3)
        } else {
            (0x20 | (0x30 + b) << 8, 2)
        };
        i += 1;
    }
    t
};

/// How one lane turns its buffer into a hash.
trait Chain {
    /// State after the text's fixed prefix and its first `consumed` buffer bytes.
    fn start(buf: &[u8]) -> (u32, usize);
    fn step(h: u32, b: u8) -> u32;
    fn finish(h: u32) -> u32;
}

/// The buffer is the hashed text itself (struct form).
struct Plain;

impl Chain for Plain {
    #[inline(always)]
    fn start(_: &[u8]) -> (u32, usize) {
        (OFFSET, 0)
    }
    #[inline(always)]
    fn step(h: u32, b: u8) -> u32 {
        fnv_byte(h, b)
    }
    #[inline(always)]
    fn finish(h: u32) -> u32 {
        h
    }
}

/// The buffer is JSON; the hashed text is go-spew's `([]uint8)[123 34 …]` of it.
struct Spelled;

impl Chain for Spelled {
    #[inline(always)]
    fn start(buf: &[u8]) -> (u32, usize) {
        match buf.first() {
            None => (SPEW_PREFIX_STATE, 0),
            Some(&b) => {
                // The first element has no leading space.
                let (d, len) = SPELLED[b as usize];
                let mut h = SPEW_PREFIX_STATE;
                for j in 1..len {
                    h = fnv_byte(h, (d >> (8 * j)) as u8);
                }
                (h, 1)
            }
        }
    }
    #[inline(always)]
    fn step(h: u32, b: u8) -> u32 {
        let (d, len) = SPELLED[b as usize];
        // Space and first digit always; the other two digits only if present. Selects, not
        // branches: the digit count of JSON bytes is not predictable.
        let h = fnv_byte(h, d as u8);
        let h = fnv_byte(h, (d >> 8) as u8);
        let h3 = fnv_byte(h, (d >> 16) as u8);
        let h = if len > 2 { h3 } else { h };
        let h4 = fnv_byte(h, (d >> 24) as u8);
        if len > 3 {
            h4
        } else {
            h
        }
    }
    #[inline(always)]
    fn finish(h: u32) -> u32 {
        fnv_byte(h, b']')
    }
}

/// A lane's text buffer. Emitters write many short pieces (type prefixes, labels, one-byte
/// punctuation): copying those inline is cheaper than a `memcpy` call each.
#[derive(Default)]
struct LaneBuf(Vec<u8>);

impl Sink for LaneBuf {
    #[inline(always)]
    fn put(&mut self, bytes: &[u8]) {
        if bytes.len() <= 16 {
            for &b in bytes {
                self.0.push(b);
            }
        } else {
            self.0.extend_from_slice(bytes);
        }
    }
}

/// Runs jobs `0..njobs` through [`LANES`] interleaved chains; `fill(job, buf)` writes a job's
/// buffer. Lanes that run dry take the next job; the last few jobs finish one chain at a time.
fn run_lanes<C: Chain>(njobs: usize, mut fill: impl FnMut(usize, &mut LaneBuf), sums: &mut [u32]) {
    const IDLE: usize = usize::MAX;
    let mut bufs: [LaneBuf; LANES] = Default::default();
    let mut job = [IDLE; LANES];
    let mut pos = [0usize; LANES];
    let mut h = [0u32; LANES];
    let mut next = 0;
    loop {
        for k in 0..LANES {
            while job[k] == IDLE || pos[k] == bufs[k].0.len() {
                if job[k] != IDLE {
                    sums[job[k]] = C::finish(h[k]);
                    job[k] = IDLE;
                }
                if next == njobs {
                    break;
                }
                bufs[k].0.clear();
                fill(next, &mut bufs[k]);
                job[k] = next;
                next += 1;
                let (h0, consumed) = C::start(&bufs[k].0);
                h[k] = h0;
                pos[k] = consumed;
            }
        }
        let active = job.iter().filter(|&&j| j != IDLE).count();
        if active < LANES {
            // Out of jobs: finish the stragglers one chain at a time.
            for k in 0..LANES {
                if job[k] != IDLE {
                    let mut x = h[k];
                    for &b in &bufs[k].0[pos[k]..] {
                        x = C::step(x, b);
                    }
                    sums[job[k]] = C::finish(x);
                }
            }
            return;
        }
        let m = (0..LANES)
            .map(|k| bufs[k].0.len() - pos[k])
            .min()
            .unwrap_or(0);
        let s: [&[u8]; LANES] = std::array::from_fn(|k| &bufs[k].0[pos[k]..pos[k] + m]);
        let mut x = h;
        // Byte i of every lane, then byte i + 1: the chains are independent, so their
        // multiplies overlap.
        #[allow(clippy::needless_range_loop)]
        for i in 0..m {
            for k in 0..LANES {
                x[k] = C::step(x[k], s[k][i]);
            }
        }
        h = x;
        for p in &mut pos {
            *p += m;
        }
    }
}

/// FNV-1a 32 of many byte strings, computed in interleaved lanes: the same values as
/// [`crate::sink::fnv32a`] of each, in order.
///
/// ```
/// use hashcompat::batch::fnv32a_many;
/// use hashcompat::sink::fnv32a;
/// let texts: [&[u8]; 3] = [b"a", b"ab", b"abc"];
/// assert_eq!(fnv32a_many(&texts), texts.map(fnv32a).to_vec());
/// ```
pub fn fnv32a_many(texts: &[&[u8]]) -> Vec<u32> {
    let mut sums = vec![0u32; texts.len()];
    run_lanes::<Plain>(
        texts.len(),
        |j, b| b.0.extend_from_slice(texts[j]),
        &mut sums,
    );
    sums
}

/// The hashes of many containers decoded for `version`, computed in interleaved lanes: the
/// same values as [`DecodedContainer::hashes`] for each, in order, at a higher throughput per
/// core. Every container must have been decoded for `version` (or a version with its type
/// tree).
///
/// ```
/// use hashcompat::{decode, hash_many, parse_json, KubeletVersion};
/// let v: KubeletVersion = "1.22".parse().unwrap();
/// let specs = [r#"{"name":"a","image":"nginx"}"#, r#"{"name":"b","image":"redis"}"#];
/// let docs: Vec<_> = specs.iter().map(|s| parse_json(s.as_bytes()).unwrap()).collect();
/// let decoded: Vec<_> = docs.iter().map(|d| decode(d, v).unwrap()).collect();
/// let refs: Vec<_> = decoded.iter().collect();
/// let batch = hash_many(&refs, v);
/// assert_eq!(batch[1], decoded[1].hashes(v));
/// ```
pub fn hash_many(
    containers: &[&DecodedContainer],
    version: KubeletVersion,
) -> Vec<ContainerHashes> {
    let form = version.hash_form();
    let per = if form == HashForm::JsonWithoutResources {
        2
    } else {
        1
    };
    let njobs = containers.len() * per;
    let mut sums = vec![0u32; njobs];
    let fill = |job: usize, buf: &mut LaneBuf| {
        let c = containers[job / per];
        debug_assert_eq!(version.tree_index(), c.tree, "decoded for another tree");
        let tree = c.tree();
        match form {
            HashForm::Struct => crate::spew::write_top(buf, tree, tree.root, &c.value),
            HashForm::Json => gojson::encode::write_value(buf, tree, tree.root, &c.value),
            HashForm::JsonWithoutResources if job % per == 1 => c.write_json_without_resources(buf),
            HashForm::JsonWithoutResources => {
                gojson::encode::write_value(buf, tree, tree.root, &c.value)
            }
            HashForm::NameImage => c.write_name_image_json(buf),
        }
    };
    match form {
        HashForm::Struct => run_lanes::<Plain>(njobs, fill, &mut sums),
        _ => run_lanes::<Spelled>(njobs, fill, &mut sums),
    }
    containers
        .iter()
        .enumerate()
        .map(|(i, _)| ContainerHashes {
            version,
            hash: Hash(sums[i * per]),
            hash_without_resources: (per == 2).then(|| Hash(sums[i * per + 1])),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::{fnv32a, SpewByteSlice};

    #[test]
    fn spelled_chain_equals_spew_of_bytes() {
        for json in [
            &b""[..],
            b"{",
            b"{\"a\":1}",
            &(0..=255).collect::<Vec<u8>>(),
        ] {
            let mut text = Vec::new();
            let mut s = SpewByteSlice::begin(&mut text);
            s.put(json);
            s.end();
            let (mut h, used) = Spelled::start(json);
            for &b in &json[used..] {
                h = Spelled::step(h, b);
            }
            assert_eq!(Spelled::finish(h), fnv32a(&text), "{json:?}");
        }
    }

    #[test]
    fn lanes_equal_single_chains_for_any_job_count_and_length() {
        for njobs in [0, 1, 2, LANES - 1, LANES, LANES + 1, 3 * LANES + 5] {
            let text =
                |j: usize| -> Vec<u8> { (0..(j * 37) % 101).map(|i| (i * j) as u8).collect() };
            let mut sums = vec![0; njobs];
            run_lanes::<Plain>(njobs, |j, b| b.0.extend(text(j)), &mut sums);
            for (j, s) in sums.iter().enumerate() {
                assert_eq!(*s, fnv32a(&text(j)), "plain job {j} of {njobs}");
            }
            run_lanes::<Spelled>(njobs, |j, b| b.0.extend(text(j)), &mut sums);
            for (j, s) in sums.iter().enumerate() {
                let mut t = Vec::new();
                let mut w = SpewByteSlice::begin(&mut t);
                w.put(&text(j));
                w.end();
                assert_eq!(*s, fnv32a(&t), "spelled job {j} of {njobs}");
            }
        }
    }
}
