//! The fingerprint of a whole file that a page backup records after its commit
//! ([`super::PageUndo::digest_after_file`]): sha256 over the file's length and the sha256 of
//! each [`CHUNK`] of it.
//!
//! Why not one sha256 of the file: a sha256 is one sequential pass, so it could only start
//! once the commit had written, and on a 2,000-container node it was 85.7 MB hashed inside the
//! kubelet's window. Chunk by chunk, the chunks the commit does not write can be hashed from
//! the file while the commit is planned, checked and made durable (its reads and the
//! fsyncs overlap), and only the written chunks after it. It is as strong a fingerprint: a
//! change anywhere changes that chunk's sha256 and with it the digest.

use sha2::{Digest, Sha256};
use std::fs::File;
use std::os::unix::fs::FileExt;

/// Bytes per chunk.
pub const CHUNK: u64 = 4 << 20;

/// What the digest string starts with (the scheme, so another can follow).
const SCHEME: &str = "sha256-chunks-4MiB:";

/// The sha256 of one chunk.
pub type ChunkSha = [u8; 32];

/// Number of chunks of a file of `len` bytes.
pub fn chunks(len: u64) -> u64 {
    len.div_ceil(CHUNK)
}

/// The byte range of chunk `i` of a file of `len` bytes.
fn span(i: u64, len: u64) -> (u64, u64) {
    let off = i * CHUNK;
    (off, CHUNK.min(len - off))
}

/// The digest of a file of `len` bytes from the sha256 of each of its chunks, in order.
pub fn combine(len: u64, shas: &[ChunkSha]) -> String {
    debug_assert_eq!(shas.len() as u64, chunks(len));
    let mut h = Sha256::new();
    h.update(len.to_le_bytes());
    for s in shas {
        h.update(s);
    }
    format!("{SCHEME}{}", hex::encode(h.finalize()))
}

/// The digest of `bytes` (what rollback compares with the recorded one).
pub fn of_bytes(bytes: &[u8]) -> String {
    let len = bytes.len() as u64;
    let shas: Vec<ChunkSha> = (0..chunks(len))
        .map(|i| {
            let (off, n) = span(i, len);
            Sha256::digest(&bytes[off as usize..(off + n) as usize]).into()
        })
        .collect();
    combine(len, &shas)
}

/// The sha256 of chunk `i` of `file` (`len` bytes long), read with pread 256 KiB at a
/// time into `buf`: through the page cache, not a mapping, so the bytes hashed add nothing to
/// the process's resident memory but the buffer.
pub fn chunk_of_file(
    file: &File,
    i: u64,
    len: u64,
    buf: &mut Vec<u8>,
) -> std::io::Result<ChunkSha> {
    let (off, n) = span(i, len);
    buf.resize(READ, 0);
    let mut h = Sha256::new();
    let mut at = off;
    while at < off + n {
        let want = READ.min((off + n - at) as usize);
        file.read_exact_at(&mut buf[..want], at).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("reading bytes {at}..{} to hash them: {e}", at + want as u64),
            )
        })?;
        h.update(&buf[..want]);
        at += want as u64;
    }
    Ok(h.finalize().into())
}

/// Bytes read at a time by [`chunk_of_file`].
const READ: usize = 256 << 10;

/// Which chunks of a file of `len` bytes the writes `(offset, length)` touch.
pub fn touched(len: u64, writes: impl IntoIterator<Item = (u64, u64)>) -> Vec<bool> {
    let mut t = vec![false; chunks(len) as usize];
    for (off, n) in writes {
        if n == 0 || off >= len {
            continue;
        }
        let last = (off + n).min(len) - 1;
        for c in off / CHUNK..=last / CHUNK {
            t[c as usize] = true;
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_of_a_file_is_the_same_from_its_bytes_and_from_its_chunks() {
        for len in [0u64, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 12345] {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 7 + i / 4096) as u8).collect();
            let dir = tempfile::tempdir().unwrap();
            let p = dir.path().join("f");
            std::fs::write(&p, &bytes).unwrap();
            let f = File::open(&p).unwrap();
            let mut buf = Vec::new();
            let shas: Vec<ChunkSha> = (0..chunks(len))
                .map(|i| chunk_of_file(&f, i, len, &mut buf).unwrap())
                .collect();
            assert_eq!(
                combine(len, &shas),
                of_bytes(&bytes),
                "{len} bytes: chunked from the file = from the bytes"
            );
            assert!(of_bytes(&bytes).starts_with(SCHEME));
        }
    }

    #[test]
    fn any_changed_byte_or_length_changes_the_digest() {
        let bytes: Vec<u8> = (0..(2 * CHUNK + 100)).map(|i| (i % 251) as u8).collect();
        let d = of_bytes(&bytes);
        for at in [0, 4095, CHUNK as usize, 2 * CHUNK as usize + 99] {
            let mut b = bytes.clone();
            b[at] ^= 1;
            assert_ne!(of_bytes(&b), d, "a flipped byte at {at} changes the digest");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_ne!(of_bytes(&longer), d, "a byte appended changes the digest");
        // a zero chunk appended and a file that ends a chunk earlier differ by length alone
        let short = vec![0u8; CHUNK as usize];
        let long = vec![0u8; 2 * CHUNK as usize];
        assert_ne!(of_bytes(&short), of_bytes(&long));
    }

    #[test]
    fn touched_chunks_are_those_a_write_lands_in() {
        let len = 3 * CHUNK + 10;
        assert_eq!(
            touched(len, [(0, 8192), (CHUNK - 1, 2), (3 * CHUNK + 9, 100)]),
            vec![true, true, false, true]
        );
        assert_eq!(touched(len, [(len, 4096), (5, 0)]), vec![false; 4]);
    }
}
