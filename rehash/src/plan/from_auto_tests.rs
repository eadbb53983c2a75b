//! `--from auto` against a simple reference model. The vote hashes most specs only for the
//! versions the first container's hash names (and the target), and every version only where
//! that could decide anything; the model hashes every spec for every version and applies the
//! rule as written: a container's set is the versions its stored hash matches; containers
//! that hold the target hash vote only when all do; the source is the oldest version every
//! voter agrees on, and containers that cannot agree are named with their whole set.
//!
//! The stored hashes are set per scenario on the scans of two real bundled nodes, as kubelets
//! of chosen versions (or nothing a kubelet writes) would have left them: the node at one
//! version, part of it patched already, the first container patched or unreadable, one or
//! several at another version, none readable, versions near one another, random mixes.

use super::*;
use crate::pods::PodIndex;
use std::path::Path;
use testtools::Rng;

/// Every version's hashes of each container record (by index into the scan), from its spec.
fn full_rows(pods: &PodIndex<'_>, scan: &ScanReport) -> BTreeMap<usize, Hashes> {
    let all = KubeletVersion::all();
    scan.records
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            let spec = spec_of(pods, r)?;
            let node = hashcompat::parse_json(spec.spec).unwrap();
            let row = hashcompat::hash_versions(&node, &all)
                .into_iter()
                .map(Some)
                .collect();
            Some((i, row))
        })
        .collect()
}

fn version_hashes(row: &Hashes, v: KubeletVersion) -> Option<ContainerHashes> {
    let i = KubeletVersion::all().iter().position(|w| *w == v).unwrap();
    row[i].clone().unwrap().ok()
}

/// The rule as written, on every version of every container.
fn reference(
    scan: &ScanReport,
    rows: &BTreeMap<usize, Hashes>,
    to: KubeletVersion,
) -> Result<(KubeletVersion, Vec<KubeletVersion>), String> {
    let matches = |r: &StoreRecord, h: &ContainerHashes| {
        r.hash.as_deref().and_then(|s| s.parse::<Hash>().ok()) == Some(h.hash)
            && match (&r.hash_without_resources, h.hash_without_resources) {
                (Some(s), Some(w)) => s.parse::<Hash>().ok() == Some(w),
                _ => true,
            }
    };
    let sets: Vec<(&StoreRecord, BTreeSet<KubeletVersion>)> = rows
        .iter()
        .map(|(i, row)| {
            let r = &scan.records[*i];
            let set = row
                .iter()
                .flatten()
                .filter_map(|h| h.as_ref().ok())
                .filter(|h| matches(r, h))
                .map(|h| h.version)
                .collect();
            (r, set)
        })
        .filter(|(_, set): &(_, BTreeSet<_>)| !set.is_empty())
        .collect();
    let all_hold_target = sets.iter().all(|(_, set)| set.contains(&to));
    let voters: Vec<_> = sets
        .into_iter()
        .filter(|(_, set)| all_hold_target || !set.contains(&to))
        .collect();
    if voters.is_empty() {
        return Err(Error::NothingProven.to_string());
    }
    let mut agreed = voters[0].1.clone();
    let mut named = Vec::new();
    for (r, set) in &voters {
        let next: BTreeSet<_> = agreed.intersection(set).copied().collect();
        if next.is_empty() {
            named.push(disagreement(r, set));
        } else {
            agreed = next;
        }
    }
    if !named.is_empty() {
        return Err(Error::FromDisagreement {
            agreed: ranges(&agreed),
            disagreeing: named.join("; "),
        }
        .to_string());
    }
    let agreed: Vec<_> = agreed.into_iter().collect();
    Ok((agreed[0], agreed))
}

/// What the `n`th container holds, in a scenario.
type Scenario<'a> = Box<dyn Fn(usize, &mut Rng) -> Stored + 'a>;

/// What a container's store record holds.
#[derive(Clone, Copy)]
enum Stored {
    /// What the kubelet of this version wrote.
    At(KubeletVersion),
    /// No hash any kubelet computes for it.
    Unreadable,
}

fn store(r: &mut StoreRecord, row: &Hashes, what: Stored) {
    match what {
        Stored::At(v) => {
            let h = version_hashes(row, v);
            r.hash = h.map(|h| h.hash.to_string());
            r.hash_without_resources = h
                .and_then(|h| h.hash_without_resources)
                .map(|w| w.to_string());
        }
        Stored::Unreadable => {
            r.hash = Some("not a hash".into());
            r.hash_without_resources = None;
        }
    }
}

#[test]
fn from_auto_finds_what_the_rule_finds_on_every_version_of_every_container() {
    let all = KubeletVersion::all();
    let mut rng = Rng(0x5eed_f00d);
    let mut outcomes: BTreeMap<&str, usize> = BTreeMap::new();
    for (node, runtime, root) in [
        ("docker-20.10", RuntimeKind::Docker, "var/lib/docker"),
        (
            "containerd-1.7",
            RuntimeKind::Containerd,
            "var/lib/containerd",
        ),
    ] {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures/nodes")
            .join(node);
        let bytes = std::fs::read(dir.join("pods.json")).unwrap();
        let pods = PodIndex::parse(&bytes).unwrap();
        let real = crate::StoreLocation::new(runtime, dir.join(root))
            .open()
            .unwrap()
            .scan()
            .unwrap();
        let rows = full_rows(&pods, &real);
        let containers: Vec<usize> = rows.keys().copied().collect();
        assert!(
            containers.len() >= 4,
            "{node}: {} containers",
            containers.len()
        );
        let pick = |rng: &mut Rng| all[rng.below(all.len() as u64) as usize];
        for round in 0..100 {
            let to = pick(&mut rng);
            let a = pick(&mut rng);
            let b = pick(&mut rng);
            // (versions a few minors from `a`: where specs' classes of equal hashes overlap)
            let near = |rng: &mut Rng| {
                let i = all.iter().position(|v| *v == a).unwrap() as u64;
                all[(i + rng.below(7))
                    .saturating_sub(3)
                    .min(all.len() as u64 - 1) as usize]
            };
            let scenario: Scenario<'_> = match round % 10 {
                0 => Box::new(|_, _| Stored::At(a)),
                1 => Box::new(|_, rng| Stored::At(if rng.below(3) == 0 { to } else { a })),
                2 => Box::new(|_, _| Stored::At(to)),
                3 => Box::new(|n, _| Stored::At(if n == 0 { to } else { a })),
                4 => Box::new(|n, _| {
                    if n == 0 {
                        Stored::Unreadable
                    } else {
                        Stored::At(a)
                    }
                }),
                5 => Box::new(|n, _| Stored::At(if n == containers.len() / 2 { b } else { a })),
                6 => Box::new(|_, rng| match rng.below(4) {
                    0 => Stored::Unreadable,
                    1 => Stored::At(b),
                    _ => Stored::At(a),
                }),
                7 => Box::new(|_, _| Stored::Unreadable),
                8 => Box::new(|n, rng| Stored::At(if n == 0 { a } else { near(rng) })),
                _ => Box::new(|_, rng| Stored::At(pick(rng))),
            };
            let mut scan = ScanReport {
                records: real.records.clone(),
                warnings: Vec::new(),
            };
            for (n, i) in containers.iter().enumerate() {
                let what = scenario(n, &mut rng);
                store(&mut scan.records[*i], &rows[i], what);
            }
            let what = format!("{node}, round {round} (to {to}, a {a}, b {b})");
            let expected = reference(&scan, &rows, to);
            let got = make_plan(&PlanInput {
                pods: &pods,
                scan: &scan,
                runtime,
                root: String::new(),
                from: From::Auto,
                to,
                manifests: None,
                pin_uids: false,
            });
            match (&expected, got) {
                (Ok((from, candidates)), Ok(plan)) => {
                    *outcomes.entry("agreed").or_default() += 1;
                    assert_eq!(plan.from, Some(*from), "{what}: the source version");
                    assert_eq!(&plan.from_candidates, candidates, "{what}: the candidates");
                    for (i, p) in scan
                        .records
                        .iter()
                        .enumerate()
                        .map(|(i, _)| i)
                        .zip(&plan.records)
                    {
                        let Some(row) = rows.get(&i) else { continue };
                        if p.action == Action::Orphan {
                            continue;
                        }
                        assert_eq!(
                            p.target_hash,
                            version_hashes(row, to).map(|h| h.hash),
                            "{what}: {} has the target's hash",
                            p.id
                        );
                        if let Some(f) = p.from_hash {
                            assert_eq!(
                                Some(f),
                                version_hashes(row, *from).map(|h| h.hash),
                                "{what}: {} has the source's hash",
                                p.id
                            );
                        }
                    }
                }
                (Err(message), Err(e)) => {
                    *outcomes
                        .entry(if message.contains("do not agree") {
                            "disagree"
                        } else {
                            "nothing proven"
                        })
                        .or_default() += 1;
                    assert_eq!(&e.to_string(), message, "{what}: the same refusal");
                }
                (expected, got) => panic!(
                    "{what}: expected {expected:?}, got {:?}",
                    got.map(|p| (p.from, p.from_candidates))
                ),
            }
        }
    }
    for outcome in ["agreed", "disagree", "nothing proven"] {
        assert!(
            outcomes.get(outcome).is_some_and(|n| *n >= 3),
            "the scenarios reach '{outcome}' often enough: {outcomes:?}"
        );
    }
}
