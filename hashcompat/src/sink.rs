//! Where emitted text goes: straight into the FNV-1a hasher on the hot path, into a buffer
//! only for `explain`.

/// A byte consumer. Emitters write their text into one of these piece by piece.
pub trait Sink {
    /// Appends `bytes` to the text.
    fn put(&mut self, bytes: &[u8]);
}

impl Sink for Vec<u8> {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

const FNV32_OFFSET: u32 = 0x811c_9dc5;
const FNV32_PRIME: u32 = 0x0100_0193;

/// Go's `hash/fnv.New32a`.
#[derive(Debug, Clone, Copy)]
pub struct Fnv32a(pub u32);

impl Default for Fnv32a {
    fn default() -> Self {
        Fnv32a(FNV32_OFFSET)
    }
}

impl Fnv32a {
    /// A fresh hasher (the FNV-1a 32 offset basis), like `fnv.New32a()`.
    pub fn new() -> Self {
        Self::default()
    }
    /// `Sum32()`: the hash of everything put so far.
    pub fn sum32(&self) -> u32 {
        self.0
    }
}

impl Sink for Fnv32a {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        let mut h = self.0;
        for &b in bytes {
            h = (h ^ b as u32).wrapping_mul(FNV32_PRIME);
        }
        self.0 = h;
    }
}

/// FNV-1a 32 of a whole buffer.
pub fn fnv32a(bytes: &[u8]) -> u32 {
    let mut h = Fnv32a::new();
    h.put(bytes);
    h.sum32()
}

/// " N" for every byte value N: go-spew separates `[]uint8` elements by one space, so each
/// element but the first is emitted with its separator in one lookup.
static SPACE_DEC: [([u8; 4], u8); 256] = {
    let mut t = [([0u8; 4], 0u8); 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        t[i] = if b >= 100 {
            (
                [b' ', b'0' + b / 100, b'0' + (b / 10) % 10, b'0' + b % 10],
                4,
            )
        } else if b >= 10 {
            ([b' ', b'0' + b / 10, b'0' + b % 10, 0], 3)
        } else {
            ([b' ', b'0' + b, 0, 0], 2)
        };
        i += 1;
    }
    t
};

/// Wraps a sink so that bytes written into it arrive as go-spew's `%#v` of a `[]uint8`:
/// `([]uint8)[123 34 ...]`. This is how the kubelet hashes the JSON forms (1.16+).
pub struct SpewByteSlice<'s, S: Sink> {
    inner: &'s mut S,
    any: bool,
}

impl<'s, S: Sink> SpewByteSlice<'s, S> {
    /// Writes the `([]uint8)[` opening; the bytes put afterwards are spelled as decimals.
    pub fn begin(inner: &'s mut S) -> Self {
        inner.put(b"([]uint8)[");
        SpewByteSlice { inner, any: false }
    }

    /// Writes the closing `]`. Takes the wrapper by value, so no byte can join the slice after.
    pub fn end(self) {
        self.inner.put(b"]");
    }
}

impl<S: Sink> Sink for SpewByteSlice<'_, S> {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        let mut rest = bytes;
        if !self.any {
            let Some((&first, tail)) = rest.split_first() else {
                return;
            };
            let (buf, len) = &SPACE_DEC[first as usize];
            self.inner.put(&buf[1..*len as usize]);
            self.any = true;
            rest = tail;
        }
        for &b in rest {
            let (buf, len) = &SPACE_DEC[b as usize];
            self.inner.put(&buf[..*len as usize]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_matches_go_reference_values() {
        // hash/fnv test vectors for New32a.
        assert_eq!(fnv32a(b""), 0x811c9dc5);
        assert_eq!(fnv32a(b"a"), 0xe40c292c);
        assert_eq!(fnv32a(b"ab"), 0x4d2505ca);
        assert_eq!(fnv32a(b"abc"), 0x1a47e90b);
    }

    #[test]
    fn spew_byte_slice_text() {
        let mut out = Vec::new();
        let mut s = SpewByteSlice::begin(&mut out);
        s.put(b"{\"a");
        s.put(&[0, 255, 9]);
        s.end();
        assert_eq!(out, b"([]uint8)[123 34 97 0 255 9]");
    }
}
