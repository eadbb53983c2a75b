//! `Quantity::parse_bytes` / `Quantity::from_json_token` on arbitrary bytes.
//!
//! Invariants: no panic; the canonical string of a parsed value re-parses (to the same value,
//! except where Go itself loses it: DecimalSI ≥ 10^21 drops its suffix, and int32 scale
//! wrap-around near ±2^31); the text `MarshalJSON` writes parses again, quoted, as JSON.
#![no_main]

use hashcompat::quantity::{Format, Quantity, QuantityError};
use libfuzzer_sys::fuzz_target;
use std::cmp::Ordering;

/// Whether `text` has an exponent with more than 8 digits (int32 scale arithmetic can wrap).
fn huge_exponent(text: &[u8]) -> bool {
    let Some(e) = text.iter().position(|&c| c == b'e' || c == b'E') else {
        return false;
    };
    text[e + 1..]
        .iter()
        .skip_while(|c| matches!(c, b'+' | b'-'))
        .skip_while(|c| **c == b'0')
        .take_while(|c| c.is_ascii_digit())
        .count()
        > 8
}

fn check(input: &[u8], q: &Quantity) {
    let _ = q.go_spew();
    assert_eq!(
        q.is_zero(),
        q.cmp_value(&Quantity::zero()) == Ordering::Equal,
        "IsZero disagrees with Cmp(0) for {input:?}"
    );
    let canonical = q.canonical_string();
    let lost_suffix = q.format == Format::DecimalSI && {
        let big = Quantity::parse("1e21").unwrap();
        let neg = Quantity::parse("-1e21").unwrap();
        q.cmp_value(&big) != Ordering::Less || q.cmp_value(&neg) != Ordering::Greater
    };
    let wraps = huge_exponent(input) || huge_exponent(canonical.as_bytes());
    match Quantity::parse(&canonical) {
        Ok(back) => {
            if !lost_suffix && !wraps {
                assert_eq!(
                    back.cmp_value(q),
                    Ordering::Equal,
                    "{:?} -> canonical {canonical:?} -> {back:?}",
                    String::from_utf8_lossy(input)
                );
            }
        }
        // a 25-digit int64 amount re-parses on the inf.Dec path, which may be too large to build
        Err(QuantityError::TooLarge { .. }) => {}
        Err(e) => panic!(
            "{:?} -> canonical {canonical:?} does not re-parse: {e}",
            String::from_utf8_lossy(input)
        ),
    }
    let text = q.marshal_json_text();
    let quoted = format!("\"{text}\"");
    match Quantity::from_json_token(quoted.as_bytes()) {
        Ok(back) => {
            if !lost_suffix && !wraps {
                assert_eq!(back.cmp_value(q), Ordering::Equal, "marshal text {text:?}");
            }
        }
        Err(QuantityError::TooLarge { .. }) => {}
        Err(e) => panic!(
            "{:?} -> marshal text {text:?} does not parse: {e}",
            String::from_utf8_lossy(input)
        ),
    }
    // a cached string is the (trimmed) input, and parses to exactly this value
    if !q.s.is_empty() {
        assert_eq!(Quantity::parse(&q.s).as_ref(), Ok(q), "cached {:?}", q.s);
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(q) = Quantity::parse_bytes(data) {
        check(data, &q);
    }
    if let Ok(q) = Quantity::from_json_token(data) {
        if data != b"null" {
            check(data, &q);
        }
    }
});
