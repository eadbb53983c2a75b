//! Go bbolt's own check (tools/bbolt-check, see boltfile::testing) is a real second opinion:
//! it fails on damaged files, naming the same rule our check names; on random damage our
//! check never passes a file bbolt rejects, and where both pass, both readers read the same
//! key/values.

mod common;

use boltfile::check::check;
use boltfile::testing::{
    bbolt_rejects, compare_with_bbolt, dump_digest, run_bbolt_check, run_bbolt_check_within,
};
use boltfile::{Db, PAGE_HEADER};
use common::*;
use std::time::Duration;

/// `bytes` with the ids of its synced freelist page replaced by `f(ids)`.
fn with_freelist(bytes: &[u8], f: impl FnOnce(&mut Vec<u64>)) -> Vec<u8> {
    let db = Db::from_bytes(bytes.to_vec()).unwrap();
    assert!(db.meta.freelist_synced());
    let off = db.meta.freelist as usize * db.meta.page_size as usize;
    let count = u16::from_ne_bytes([bytes[off + 10], bytes[off + 11]]) as usize;
    assert!(count < 0xFFFF);
    let mut ids: Vec<u64> = (0..count)
        .map(|i| {
            let p = off + PAGE_HEADER + 8 * i;
            u64::from_ne_bytes(bytes[p..p + 8].try_into().unwrap())
        })
        .collect();
    f(&mut ids);
    let mut out = bytes.to_vec();
    out[off + 10..off + 12].copy_from_slice(&(ids.len() as u16).to_ne_bytes());
    for (i, id) in ids.iter().enumerate() {
        let p = off + PAGE_HEADER + 8 * i;
        out[p..p + 8].copy_from_slice(&id.to_ne_bytes());
    }
    out
}

/// Freelist damage that bbolt's `tx.Check` itself reports (its three freelist rules): bbolt
/// exits 1 naming the rule, and our check names the same rule.
#[test]
fn bbolt_check_fails_on_freelist_damage_and_agrees_with_ours() {
    let orig = store_before();
    let db = Db::from_bytes(orig.clone()).unwrap();
    let free = check(&db.view(), &db.meta).free;
    assert!(!free.is_empty(), "the fixture has free pages");
    let root = db.meta.root;
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "a free page left out of the freelist",
            with_freelist(&orig, |ids| ids.retain(|i| *i != free[0])),
            "unreachable unfreed",
        ),
        (
            "the root page on the freelist",
            with_freelist(&orig, |ids| ids.push(root)),
            "reachable freed",
        ),
        (
            "a page freed twice",
            with_freelist(&orig, |ids| ids.push(free[0])),
            "already freed",
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes, rule) in cases {
        let d = Db::from_bytes(bytes.clone()).unwrap();
        let ours = check(&d.view(), &d.meta);
        assert!(
            ours.structural.is_empty() && ours.freelist.iter().any(|e| e.contains(rule)),
            "{name}: our check reports {rule:?}: {:?}",
            ours.errors()
        );
        let path = put(dir.path(), "damaged", &bytes);
        let Some(go) = run_bbolt_check(&path) else {
            assert_eq!(bbolt_rejects(&path), None); // the CI rule: fails when CI is set
            return;
        };
        assert_eq!(
            go.code,
            Some(1),
            "{name}: bbolt-check exit 1: {}",
            go.output
        );
        assert!(
            go.output.contains(rule),
            "{name}: bbolt reports {rule:?}: {}",
            go.output
        );
        // and so does the comparison behind assert_bbolt_check, which every writing test calls
        let e = compare_with_bbolt(&path).unwrap().unwrap_err();
        assert!(e.contains(rule), "{name}: {e}");
    }
}

#[test]
fn bbolt_check_fails_on_files_bbolt_cannot_open() {
    let dir = tempfile::tempdir().unwrap();
    let mut truncated = store_before();
    truncated.truncate(3000);
    for (name, bytes) in [
        ("not a bolt file", b"{\"not\": \"bolt\"}\n".repeat(500)),
        ("3000 bytes of a bolt file", truncated),
    ] {
        let path = put(dir.path(), "x", &bytes);
        assert_ne!(bbolt_rejects(&path), Some(false), "{name}: bbolt opened it");
        assert!(Db::from_bytes(bytes).is_err(), "{name}: we opened it");
    }
}

/// Random byte damage to real files: whenever our check passes a file, bbolt's check passes it
/// too and bbolt's cursors read exactly our dump (digest of every key, value and sequence).
/// Our rules are stricter than bbolt 1.3.6's (key order, element bounds, exact page types,
/// header ids), so the converse does not hold and is only counted.
#[test]
fn our_check_never_passes_what_bbolt_rejects() {
    let files = [
        store_before(),
        std::fs::read(store_file("meta.db.nofreelist")).unwrap(),
    ];
    let dir = tempfile::tempdir().unwrap();
    let mut seed: u64 = 0x0b01_7c4e_c4ec_0001;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let (mut both, mut only_bbolt, mut neither) = (0, 0, 0);
    for round in 0..200 {
        let mut b = files[round % 2].clone();
        let hwm = Db::from_bytes(b.clone()).unwrap().meta.hwm;
        for _ in 0..1 + rnd() % 3 {
            // half anywhere in use, half in page headers and element tables
            let i = if round % 4 < 2 {
                rnd() % (hwm * 4096)
            } else {
                rnd() % hwm * 4096 + rnd() % 80
            };
            b[i as usize] = rnd() as u8;
        }
        let ours = Db::from_bytes(b.clone())
            .ok()
            .filter(|db| check(&db.view(), &db.meta).is_ok());
        let path = put(dir.path(), &format!("r{round}"), &b);
        // bbolt may recurse through a damaged page graph until Go's stack limit: a timeout
        // is a rejection like any crash
        let Some(go) = run_bbolt_check_within(&path, Duration::from_secs(2)) else {
            assert_eq!(bbolt_rejects(&path), None);
            return;
        };
        match (ours, go.passed()) {
            (Some(db), true) => {
                both += 1;
                let dump = db.dump().unwrap();
                assert_eq!(
                    go.summary.unwrap().digest,
                    dump_digest(&dump),
                    "round {round}: both checks pass but the readers read different data"
                );
            }
            (Some(_), false) => panic!(
                "round {round}: our check passes a file bbolt rejects: {}",
                go.output
            ),
            (None, true) => only_bbolt += 1,
            (None, false) => neither += 1,
        }
        std::fs::remove_file(&path).unwrap();
    }
    eprintln!(
        "random damage: {both} pass both (same content), {only_bbolt} only bbolt passes, {neither} neither"
    );
    assert!(
        both > 50 && neither > 5,
        "the damage exercised both outcomes"
    );
}
