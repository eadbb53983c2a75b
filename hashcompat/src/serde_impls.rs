//! Reading hashes and versions back from JSON reports. Writing is `Display`; reading is
//! strict about hashes (what the kubelet writes, `strconv.FormatUint(h, 16)`: 1–8 lowercase
//! hex digits), because a report is our own output and anything else in it is damage.

use crate::{Hash, KubeletVersion};
use serde::de::{Deserializer, Error};
use serde::Deserialize;

impl Hash {
    /// Parses the exact text a kubelet writes (1–8 lowercase hex digits, no leading zero
    /// unless the hash is 0), unlike [`str::parse`], which also reads the looser spellings a
    /// damaged or foreign store may hold.
    pub fn parse_canonical(s: &str) -> Option<Hash> {
        let ok = !s.is_empty()
            && s.len() <= 8
            && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
            && (s == "0" || !s.starts_with('0'));
        ok.then(|| Hash(u32::from_str_radix(s, 16).expect("checked hex")))
    }
}

impl<'de> Deserialize<'de> for Hash {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Hash::parse_canonical(&s).ok_or_else(|| {
            D::Error::custom(format!(
                "{s:?} is not a kubelet hash (1-8 lowercase hex digits)"
            ))
        })
    }
}

impl<'de> Deserialize<'de> for KubeletVersion {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_hashes_round_trip_and_others_are_refused() {
        for h in [0u32, 7, 0x3a1f6c2e, u32::MAX] {
            let text = serde_json::to_string(&Hash(h)).unwrap();
            assert_eq!(
                serde_json::from_str::<Hash>(&text).unwrap(),
                Hash(h),
                "{text}"
            );
        }
        for bad in ["", "00", "0a", "3A1F", "123456789", "+1", "x", " 1"] {
            assert!(
                Hash::parse_canonical(bad).is_none(),
                "{bad:?} is not what a kubelet writes"
            );
        }
        let v: KubeletVersion = serde_json::from_str("\"1.31\"").unwrap();
        assert_eq!(v.to_string(), "1.31");
        assert!(serde_json::from_str::<KubeletVersion>("\"1.99\"").is_err());
    }
}
