//! Equality of large byte strings without the C library's `memcmp`.
//!
//! Why: the static musl binaries we ship link musl's `memcmp`, a loop of one byte per
//! iteration. A patch compares many large equal byte strings: each record's protobuf value
//! with prost's copy of it, each edited document outside its splices, each container spec
//! with the identical specs of the other replicas of its pod template. On the
//! 2,000-container containerd node that was about 150 MB compared a byte at a time (a perf
//! probe on `memcmp`: 17,000 calls of 4 to 16 KB), some 50 ms of CPU inside the kubelet's
//! window, where glibc's vectorised `memcmp` takes a few. [`equal`] compares 32 bytes a step
//! with plain integer operations that the compiler vectorises itself, on every target.

use std::hash::{Hash, Hasher};

/// Whether `a` and `b` hold the same bytes.
pub fn equal(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let (mut xs, mut ys) = (a.chunks_exact(BLOCK), b.chunks_exact(BLOCK));
    for (x, y) in (&mut xs).zip(&mut ys) {
        // (the differences of the block or'ed together: no early exit inside a block, so no
        // chain of comparisons the compiler could turn back into a memcmp call)
        let mut diff = 0u64;
        for i in (0..BLOCK).step_by(8) {
            diff |= word(x, i) ^ word(y, i);
        }
        if diff != 0 {
            return false;
        }
    }
    xs.remainder()
        .iter()
        .zip(ys.remainder())
        .fold(0u8, |d, (x, y)| d | (x ^ y))
        == 0
}

/// Bytes compared a step by [`equal`].
const BLOCK: usize = 32;

fn word(b: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// A byte string as a hash-map key that hashes and compares by content cheaply: its hash
/// feeds the map's hasher one word per 8 bytes folded into a single `u64` (not every byte),
/// its equality is [`equal`]. For keys of kilobytes (a container spec) looked up thousands
/// of times.
#[derive(Debug, Clone, Copy)]
pub struct ByContent<'a>(pub &'a [u8]);

impl PartialEq for ByContent<'_> {
    fn eq(&self, other: &Self) -> bool {
        equal(self.0, other.0)
    }
}

impl Eq for ByContent<'_> {}

impl Hash for ByContent<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // A multiply-rotate fold (FxHash's step) of every 8-byte word and the tail: equal
        // strings fold equally; the map's own hasher then mixes the one word and the length.
        const K: u64 = 0x51_7c_c1_b7_27_22_0a_95;
        let mut h = 0u64;
        let mut words = self.0.chunks_exact(8);
        for w in &mut words {
            h = (h.rotate_left(5) ^ u64::from_ne_bytes(w.try_into().expect("8 bytes")))
                .wrapping_mul(K);
        }
        for &b in words.remainder() {
            h = (h.rotate_left(5) ^ u64::from(b)).wrapping_mul(K);
        }
        state.write_u64(h);
        state.write_usize(self.0.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// `equal` is `==` of the slices for every length around the block size and a difference
    /// at every position (first, inside a block, in the tail), and for different lengths.
    #[test]
    fn equal_is_slice_equality() {
        for len in [0, 1, 7, 8, 31, 32, 33, 63, 64, 65, 100, 4267] {
            let a: Vec<u8> = (0..len).map(|i| (i * 31 + 7) as u8).collect();
            assert!(equal(&a, &a.clone()), "len {len}: the same bytes");
            for at in 0..len {
                let mut b = a.clone();
                b[at] ^= 0x80;
                assert!(!equal(&a, &b), "len {len}: a difference at {at}");
            }
            assert!(!equal(&a, &a[..len.saturating_sub(1)]) || len == 0);
            let mut longer = a.clone();
            longer.push(0);
            assert!(!equal(&a, &longer), "len {len}: a longer string");
        }
    }

    /// As map keys, equal contents at different addresses are one key, different contents
    /// (also one byte apart, or a prefix) are different keys.
    #[test]
    fn keys_by_content_meet_at_equal_bytes_only() {
        let spec = br#"{"name":"app","image":"nginx:1.27","env":[{"name":"A","value":"1"}]}"#;
        let copy = spec.to_vec();
        let mut other = spec.to_vec();
        *other.last_mut().unwrap() = b' ';
        let mut m: HashMap<ByContent<'_>, usize> = HashMap::new();
        *m.entry(ByContent(spec)).or_default() += 1;
        *m.entry(ByContent(&copy)).or_default() += 1;
        *m.entry(ByContent(&other)).or_default() += 1;
        *m.entry(ByContent(&spec[..spec.len() - 1])).or_default() += 1;
        assert_eq!(m.len(), 3, "{m:?}");
        assert_eq!(m[&ByContent(spec)], 2, "a copy is the same key");
    }
}
