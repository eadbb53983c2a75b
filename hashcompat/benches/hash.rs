//! `cargo bench -p hashcompat`: the kubelet container hash on the golden corpus
//! (fixtures/golden/specs.jsonl, 300 specs), decode excluded.
//!
//! * `per_call/<form>`: mean time of `DecodedContainer::hashes` per (container, version) for
//!   each hash form (struct 1.14, JSON 1.22, JSON + withoutResources 1.30, name+image 1.31),
//!   single-threaded;
//! * the FNV floor: FNV-1a alone over the already materialised hashed text (`explain`) of the
//!   same calls — the serial-chain floor a streaming hasher cannot beat — timed inside the
//!   `per_call` loop, alternating with the hash, so both see the same machine load;
//! * `batch/<form>`: `hash_many` (8 FNV chains in interleaved lanes), again with the single-chain
//!   floor timed alongside; `batch/fnv_lanes/<form>`: FNV alone in lanes over the materialised
//!   texts, against the single chain (the floor of the batch);
//! * `all_versions/*`: every (container, version) of the corpus, hash only on one thread, with
//!   rayon, `hash_many` with rayon, and parse + decode + hash (`hash_versions`) with rayon.
//!
//! At the end a table prints ns per call, the ratios to the FNV floor, and the speed-up over the
//! real kubelet Go code (docs/research/perf-anchors.md §1, measured on an idle machine). The
//! ratios are the robust figures on a shared machine: absolute times scale with its load, which
//! the FNV ns/byte column shows (about 1.1 ns/byte when idle). Keep runs short, e.g.
//! `cargo bench -p hashcompat -- --warm-up-time 1 --measurement-time 2`.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use hashcompat::batch::fnv32a_many;
use hashcompat::sink::fnv32a;
use hashcompat::{decode, hash_many, hash_versions, parse_json, DecodedContainer, KubeletVersion};
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// (label, version, Go ns per call from docs/research/perf-anchors.md §1 (a)).
const FORMS: &[(&str, &str, f64)] = &[
    ("struct-1.14", "1.14", 19_500.0),
    ("json-1.22", "1.22", 45_700.0),
    ("json+wr-1.30", "1.30", 53_400.0),
    ("name+image-1.31", "1.31", 5_600.0),
];

fn corpus() -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/golden/specs.jsonl");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect()
}

fn decode_all(lines: &[String], v: KubeletVersion) -> Vec<DecodedContainer<'_>> {
    lines
        .iter()
        .map(|l| {
            let doc = parse_json(l.as_bytes()).expect("golden line parses");
            decode(doc.get("container").expect("container"), v).expect("golden spec decodes")
        })
        .collect()
}

/// Total (elapsed, calls) per (form, measurement), accumulated over criterion's warm-up and
/// samples.
type Totals = BTreeMap<(String, &'static str), (Duration, u64)>;
static TOTALS: Mutex<Totals> = Mutex::new(BTreeMap::new());

fn record(form: &str, what: &'static str, d: Duration, calls: u64) {
    let mut t = TOTALS.lock().unwrap();
    let e = t.entry((form.to_string(), what)).or_default();
    e.0 += d;
    e.1 += calls;
}

fn ns_per_call(form: &str, what: &'static str) -> Option<f64> {
    let t = TOTALS.lock().unwrap();
    t.get(&(form.to_string(), what))
        .map(|(d, n)| d.as_nanos() as f64 / *n as f64)
}

fn per_form(c: &mut Criterion) {
    let lines = corpus();
    let mut text_bytes = BTreeMap::new();
    for &(label, ver, _) in FORMS {
        let v: KubeletVersion = ver.parse().unwrap();
        let decoded = decode_all(&lines, v);
        let n = decoded.len() as u64;
        // The hashed texts of the same calls: one per hash, two for 1.27–1.30.
        let texts: Vec<Vec<Vec<u8>>> = decoded
            .iter()
            .map(|d| {
                let ex = d.explain(v);
                std::iter::once(ex.hash.text)
                    .chain(ex.without_resources.map(|w| w.text))
                    .collect()
            })
            .collect();
        let total: usize = texts.iter().flatten().map(Vec::len).sum();
        text_bytes.insert(label, total as f64 / n as f64);
        // Same answers from all three paths before timing anything.
        let refs: Vec<&DecodedContainer> = decoded.iter().collect();
        let batch = hash_many(&refs, v);
        for ((d, t), b) in decoded.iter().zip(&texts).zip(&batch) {
            let h = d.hashes(v);
            assert_eq!(h.hash.0, fnv32a(&t[0]));
            assert_eq!(h, *b, "hash_many agrees with hashes");
        }

        // The FNV floor is timed in the same loop, alternating with the hash, so that both see
        // the same machine load (this machine is shared); criterion reports the hash time.
        let mut g = c.benchmark_group("per_call");
        g.throughput(Throughput::Elements(n));
        g.bench_function(BenchmarkId::from_parameter(label), |b| {
            b.iter_custom(|iters| {
                let mut hash_time = Duration::ZERO;
                let mut fnv_time = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    for d in &decoded {
                        black_box(d.hashes(black_box(v)));
                    }
                    let mid = Instant::now();
                    for t in &texts {
                        for part in t {
                            black_box(fnv32a(black_box(part)));
                        }
                    }
                    hash_time += mid - start;
                    fnv_time += mid.elapsed();
                }
                record(label, "hash", hash_time, iters * n);
                record(label, "fnv", fnv_time, iters * n);
                hash_time
            })
        });
        g.finish();

        let mut g = c.benchmark_group("batch");
        g.throughput(Throughput::Elements(n));
        g.bench_function(BenchmarkId::from_parameter(label), |b| {
            b.iter_custom(|iters| {
                let mut batch_time = Duration::ZERO;
                let mut fnv_time = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    black_box(hash_many(black_box(&refs), v));
                    let mid = Instant::now();
                    for t in &texts {
                        for part in t {
                            black_box(fnv32a(black_box(part)));
                        }
                    }
                    batch_time += mid - start;
                    fnv_time += mid.elapsed();
                }
                record(label, "batch", batch_time, iters * n);
                record(label, "batch_fnv", fnv_time, iters * n);
                batch_time
            })
        });
        // FNV alone in lanes over the materialised texts: the floor of the batch, as the
        // single chain is the floor of a call.
        let parts: Vec<&[u8]> = texts.iter().flatten().map(Vec::as_slice).collect();
        g.bench_function(BenchmarkId::new("fnv_lanes", label), |b| {
            b.iter_custom(|iters| {
                let mut lanes_time = Duration::ZERO;
                let mut fnv_time = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    black_box(fnv32a_many(black_box(&parts)));
                    let mid = Instant::now();
                    for part in &parts {
                        black_box(fnv32a(black_box(part)));
                    }
                    lanes_time += mid - start;
                    fnv_time += mid.elapsed();
                }
                record(label, "lanes", lanes_time, iters * n);
                record(label, "lanes_fnv", fnv_time, iters * n);
                lanes_time
            })
        });
        g.finish();
    }

    println!();
    println!(
        "{:<16} {:>7} {:>8} {:>8} {:>6} {:>8} {:>9} {:>6} {:>7} {:>7} {:>6}",
        "form",
        "text B",
        "hash ns",
        "FNV ns",
        "ratio",
        "FNV ns/B",
        "batch ns",
        "ratio",
        "lanes",
        "Go ns",
        "vs Go"
    );
    for &(label, _, go) in FORMS {
        let (Some(h), Some(f)) = (ns_per_call(label, "hash"), ns_per_call(label, "fnv")) else {
            continue; // filtered out on the command line
        };
        let bytes = text_bytes[label];
        // The batch ratio is against the FNV floor timed alongside the batch runs.
        let (batch, batch_ratio) =
            match (ns_per_call(label, "batch"), ns_per_call(label, "batch_fnv")) {
                (Some(b), Some(bf)) => (b, b / bf),
                _ => (f64::NAN, f64::NAN),
            };
        let lanes = match (ns_per_call(label, "lanes"), ns_per_call(label, "lanes_fnv")) {
            (Some(l), Some(lf)) => l / lf,
            _ => f64::NAN,
        };
        println!(
            "{label:<16} {bytes:>7.0} {h:>8.0} {f:>8.0} {:>5.2}x {:>8.3} {batch:>9.0} {batch_ratio:>5.2}x {lanes:>6.2}x {go:>7.0} {:>5.1}x",
            h / f,
            f / bytes,
            go / h
        );
    }
    println!(
        "(ratio = time / FNV-1a of the same calls' hashed texts, timed alternately in the same loop; \
         target <= 1.5x per call, < 1x for the batch; lanes = FNV alone in 8 lanes / single chain; \
         vs Go = Go ns / hash ns)"
    );
}

fn all_versions(c: &mut Criterion) {
    let lines = corpus();
    let versions = KubeletVersion::all();
    // decoded[version][spec]
    let decoded: Vec<Vec<DecodedContainer>> =
        versions.iter().map(|&v| decode_all(&lines, v)).collect();
    let calls = (versions.len() * lines.len()) as u64;
    let threads = rayon::current_num_threads();

    let mut g = c.benchmark_group("all_versions");
    g.throughput(Throughput::Elements(calls));
    g.bench_function("hash_only_1_thread", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                for (vi, &v) in versions.iter().enumerate() {
                    for d in &decoded[vi] {
                        black_box(d.hashes(v));
                    }
                }
            }
            let el = start.elapsed();
            record("all", "serial", el, iters * calls);
            el
        })
    });
    g.bench_function(format!("hash_only_rayon_{threads}_threads"), |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                let s: u64 = (0..lines.len())
                    .into_par_iter()
                    .map(|s| {
                        versions
                            .iter()
                            .enumerate()
                            .map(|(vi, &v)| decoded[vi][s].hashes(v).hash.0 as u64)
                            .sum::<u64>()
                    })
                    .sum();
                black_box(s);
            }
            let el = start.elapsed();
            record("all", "rayon", el, iters * calls);
            el
        })
    });
    g.bench_function(format!("hash_many_rayon_{threads}_threads"), |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                let s: usize = (0..versions.len())
                    .into_par_iter()
                    .flat_map_iter(|vi| {
                        decoded[vi]
                            .chunks(64)
                            .map(move |ch| (vi, ch.iter().collect::<Vec<_>>()))
                    })
                    .map(|(vi, refs)| hash_many(&refs, versions[vi]).len())
                    .sum();
                black_box(s);
            }
            let el = start.elapsed();
            record("all", "rayon_batch", el, iters * calls);
            el
        })
    });
    g.bench_function(format!("parse_decode_hash_rayon_{threads}_threads"), |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                let s: usize = lines
                    .par_iter()
                    .map(|l| {
                        let doc = parse_json(l.as_bytes()).unwrap();
                        hash_versions(doc.get("container").unwrap(), &versions)
                            .iter()
                            .filter(|r| r.is_ok())
                            .count()
                    })
                    .sum();
                black_box(s);
            }
            let el = start.elapsed();
            record("all", "rayon_e2e", el, iters * calls);
            el
        })
    });
    g.finish();

    println!();
    println!(
        "all versions ({} specs x {} versions = {calls} calls, {threads} rayon threads):",
        lines.len(),
        versions.len()
    );
    for (what, desc) in [
        ("serial", "hash only, 1 thread"),
        ("rayon", "hash only, rayon"),
        ("rayon_batch", "hash_many, rayon"),
        ("rayon_e2e", "parse + decode + hash, rayon"),
    ] {
        if let Some(ns) = ns_per_call("all", what) {
            println!(
                "  {desc:<30} {:>8.0} ns/call  {:>12.0} calls/s",
                ns,
                1e9 / ns
            );
        }
    }
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .without_plots()
        .configure_from_args()
}

criterion_group! {
    name = benches;
    config = config();
    targets = per_form, all_versions
}
criterion_main!(benches);
