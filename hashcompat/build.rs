//! Embeds every `schemas/<major>.<minor>.json` type tree. Supporting a new kubelet version
//! means adding its schema file (and golden lines), not code.

use std::fmt::Write;
use std::path::Path;

fn main() {
    let dir = manifest_dir().join("schemas");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut versions: Vec<(u32, u32, String)> = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("hashcompat/schemas must exist") {
        let path = entry.expect("readable schemas dir").path();
        println!("cargo:rerun-if-changed={}", path.display());
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let mut parts = stem.split('.');
        let (Some(maj), Some(min), None) = (parts.next(), parts.next(), parts.next()) else {
            panic!("schema file name {stem} is not <major>.<minor>.json");
        };
        versions.push((
            maj.parse().expect("major"),
            min.parse().expect("minor"),
            path.file_name()
                .expect("a file")
                .to_string_lossy()
                .into_owned(),
        ));
    }
    versions.sort();
    let mut out = String::from("/// (major, minor, schema JSON), ascending.\npub static SCHEMAS: &[(u32, u32, &str)] = &[\n");
    // Named from the crate's own directory when it compiles, so the text embedded is always
    // this checkout's, even where cargo reuses this script's output from another checkout.
    for (maj, min, file) in &versions {
        writeln!(
            out,
            "    ({maj}, {min}, include_str!(concat!(env!(\"CARGO_MANIFEST_DIR\"), \"/schemas/{file}\"))),"
        )
        .unwrap();
    }
    out.push_str("];\n");
    let dest = Path::new(&std::env::var("OUT_DIR").unwrap()).join("schemas.rs");
    std::fs::write(dest, out).unwrap();
}

/// The package's directory, read when the script runs, never when it was compiled: cargo may
/// reuse this script's binary, compiled for another checkout, when two checkouts share a target
/// directory (`CARGO_TARGET_DIR`), and `env!` would then read that other (perhaps deleted)
/// checkout's files.
fn manifest_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .expect("cargo sets CARGO_MANIFEST_DIR for build scripts")
        .into()
}
