//! The Docker and CRI-O writers crashed in-process at every durable step, against a model.
//!
//! Each sweep runs the real `apply` of a real node's store (fixtures/nodes/docker-20.10 for
//! the 1.16 targets, fixtures/nodes/crio-1.30 for the 1.31 targets: the step4 runs whose
//! rewritten bytes the runtimes accepted), with its backup, through `atomic::sim::CrashSim`:
//! once to count its durable steps, then once per step, crashing before it. After each
//! crash, every outcome the sim's conservative POSIX model allows (see `atomic::sim`) must
//! satisfy the reference model:
//!
//! * every store file the patch rewrites holds, byte for byte, its original bytes (the
//!   fixture) or its new bytes (step4's rewritten file), never a mix, never missing;
//! * every other store file is unchanged; nothing new appears in the store but our temp files
//!   (which the next run sweeps);
//! * a manifest, when there is one, is whole and describes every rewritten file (its paths,
//!   the sha256 of both sides, and a copy of the original bytes), and there is one in every
//!   outcome once any store file holds its new bytes, and once the crash comes after the
//!   backup's commit.
//!
//! The subprocess SIGKILL sweeps (tests/crio.rs, cli/tests/reliability*.rs) prove the same on
//! the real kernel; this one runs in the test process, in seconds, and also covers the disk
//! losing what was not flushed, which a SIGKILL never does.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use storepatch::atomic::sim::{CrashSim, Disk, Outcome};
use storepatch::atomic::storage::Step;
use storepatch::atomic::Backend;
use storepatch::backup::{self, Backup, Manifest};
use storepatch::crio::CrioStore;
use storepatch::docker::{DockerOptions, DockerStore};
use storepatch::{ApplyOutcome, Rewrite, RuntimeStore, StoreError};

/// Random mixes checked per crash, besides the three extremes.
const RANDOM_OUTCOMES: usize = 4;

/// Every regular file under `root` with its bytes.
fn files(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    walkdir::WalkDir::new(root)
        .into_iter()
        .map(Result::unwrap)
        .filter(|e| e.file_type().is_file())
        .map(|e| (e.path().to_path_buf(), fs::read(e.path()).unwrap()))
        .collect()
}

/// The files a patch rewrites: path → (original bytes, new bytes).
type Targets = BTreeMap<PathBuf, (Vec<u8>, Vec<u8>)>;

/// One writer and its node: how to lay the store out, and how to patch it.
struct Writer {
    name: &'static str,
    /// Copies the store into the (canonical) directory and returns every rewritten file:
    /// path → (original bytes, new bytes).
    setup: fn(&Path) -> Targets,
    /// Patches the store copied into the directory, store and backup through `storage`; the
    /// backup goes to `<dir>/backup`.
    apply: fn(&Path, Backend) -> Result<ApplyOutcome, StoreError>,
}

// ------------------------------------------------------------------------------- Docker

const DOCKER_NODE: &str = "nodes/docker-20.10";

fn docker_root(dir: &Path) -> PathBuf {
    dir.join("docker")
}

fn docker_rewrites() -> Vec<Rewrite> {
    let map: serde_json::Value = serde_json::from_slice(
        &fs::read(
            testtools::fixtures_dir()
                .join(DOCKER_NODE)
                .join("step4/map-1.16.json"),
        )
        .unwrap(),
    )
    .unwrap();
    map.as_object()
        .unwrap()
        .iter()
        .map(|(id, v)| Rewrite {
            id: id.clone(),
            hash: v["new"].as_str().unwrap().parse().unwrap(),
            hash_without_resources: None,
        })
        .collect()
}

fn docker_setup(dir: &Path) -> Targets {
    let node = testtools::fixtures_dir().join(DOCKER_NODE);
    let containers = docker_root(dir).join("containers");
    testtools::tree::copy(&node.join("var/lib/docker/containers"), &containers);
    let rewritten = node.join("step4/rewritten/var/lib/docker/containers");
    docker_rewrites()
        .iter()
        .map(|rw| {
            let path = containers.join(&rw.id).join("config.v2.json");
            // as dockerd writes it
            fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
            let new = fs::read(rewritten.join(&rw.id).join("config.v2.json")).unwrap();
            (path.clone(), (fs::read(&path).unwrap(), new))
        })
        .collect()
}

fn docker_apply(dir: &Path, storage: Backend) -> Result<ApplyOutcome, StoreError> {
    let root = docker_root(dir);
    let opts = DockerOptions {
        pidfile: dir.join("no-docker.pid"),
        socket: dir.join("no-docker.sock"),
        daemon_json: dir.join("no-daemon.json"),
        ..DockerOptions::default()
    };
    let store = DockerStore::with_options(&root, opts)?.with_storage(storage.clone());
    let mut b = Backup::create(&dir.join("backup"), "docker", &root)?.with_storage(storage);
    store.apply(&docker_rewrites(), &mut b)
}

const DOCKER: Writer = Writer {
    name: "docker 20.10",
    setup: docker_setup,
    apply: docker_apply,
};

// ------------------------------------------------------------------------------- CRI-O

const CRIO_NODE: &str = "nodes/crio-1.30";

fn crio_rewrites() -> Vec<Rewrite> {
    let expected: serde_json::Value = serde_json::from_slice(
        &fs::read(
            testtools::fixtures_dir()
                .join(CRIO_NODE)
                .join("expected.json"),
        )
        .unwrap(),
    )
    .unwrap();
    expected["containers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| {
            let t = c["targets"]["1.31"].as_object()?;
            Some(Rewrite {
                id: c["id"].as_str().unwrap().to_string(),
                hash: t["hash"].as_str().unwrap().parse().unwrap(),
                hash_without_resources: t
                    .get("hash_without_resources")
                    .and_then(serde_json::Value::as_str)
                    .map(|h| h.parse().unwrap()),
            })
        })
        .collect()
}

fn crio_setup(dir: &Path) -> Targets {
    let fx = testtools::fixtures_dir().join(CRIO_NODE);
    let node = dir.join("node");
    testtools::tree::copy(&fx.join("var"), &node.join("var"));
    testtools::tree::copy(&fx.join("run"), &node.join("run"));
    // step4/rewritten holds every config.json the 1.31 patch writes, as CRI-O accepted it
    let rewritten = fx.join("step4/rewritten");
    files(&rewritten)
        .into_iter()
        .filter(|(p, _)| p.file_name().unwrap() == "config.json")
        .map(|(p, new)| {
            let path = node.join(p.strip_prefix(&rewritten).unwrap());
            (path.clone(), (fs::read(&path).unwrap(), new))
        })
        .collect()
}

fn crio_apply(dir: &Path, storage: Backend) -> Result<ApplyOutcome, StoreError> {
    let graphroot = dir.join("node/var/lib/containers/storage");
    let store = CrioStore::open(&graphroot)?.with_storage(storage.clone());
    let mut b = Backup::create(&dir.join("backup"), "crio", &graphroot)?.with_storage(storage);
    store.apply(&crio_rewrites(), &mut b)
}

const CRIO: Writer = Writer {
    name: "cri-o 1.30",
    setup: crio_setup,
    apply: crio_apply,
};

// ------------------------------------------------------------------------------- the model

/// A canonical directory with the writer's store in it.
struct Run {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    /// Every file of the store before the patch.
    before: BTreeMap<PathBuf, Vec<u8>>,
    /// The rewritten files: path → (old, new).
    targets: Targets,
    /// Their sha256s (old, new), as a manifest records them (computed once: a debug build
    /// hashes slowly, and every outcome's manifest is checked).
    shas: BTreeMap<PathBuf, (String, String)>,
}

impl Run {
    fn new(w: &Writer) -> Run {
        // In memory where there is a tmpfs: the sim keeps its own model of the disk, and ext4
        // makes hundreds of runs of creates and unlinks in the same directories slow (its
        // inode allocator skips recently deleted inodes).
        let tmp = tempfile::Builder::new()
            .prefix("crash-model-")
            .tempdir_in("/dev/shm")
            .or_else(|_| tempfile::tempdir())
            .unwrap();
        let dir = fs::canonicalize(tmp.path()).unwrap();
        let targets = (w.setup)(&dir);
        let before = files(&dir);
        assert!(targets.keys().all(|p| before.contains_key(p)));
        assert!(targets.values().all(|(old, new)| old != new));
        let shas = targets
            .iter()
            .map(|(p, (old, new))| {
                (
                    p.clone(),
                    (backup::sha256_hex(old), backup::sha256_hex(new)),
                )
            })
            .collect();
        Run {
            _tmp: tmp,
            dir,
            before,
            targets,
            shas,
        }
    }

    fn backup_dir(&self) -> PathBuf {
        self.dir.join("backup")
    }

    /// Puts the store back as it was before the patch: the originals in place (with their
    /// modes, which the patch keeps), no temp file, no backup. Cheaper than a new copy of the
    /// node for every crash.
    fn reset(&self) {
        match fs::remove_dir_all(self.backup_dir()) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => panic!("{e}"),
            _ => {}
        }
        for e in walkdir::WalkDir::new(&self.dir) {
            let e = e.unwrap();
            if e.file_type().is_file() && is_temp(e.path()) {
                fs::remove_file(e.path()).unwrap();
            }
        }
        for (p, (old, _)) in &self.targets {
            fs::write(p, old).unwrap();
        }
    }
}

fn is_temp(p: &Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with('.') && n.contains(".rehash-tmp-"))
}

/// Checks one outcome against the reference model; `Err` says what is wrong. `committed`:
/// the crash came after the backup's commit returned.
fn check_outcome(run: &Run, o: &Outcome, committed: bool) -> Result<(), String> {
    let disk = &o.disk;
    let backup_dir = run.backup_dir();
    let mut any_new = false;
    for (path, bytes) in &run.before {
        let Some(now) = disk.get(path) else {
            return Err(format!("{} is missing", path.display()));
        };
        let now = &now[..];
        match run.targets.get(path) {
            Some((old, new)) => {
                if now == &new[..] {
                    any_new = true;
                } else if now != &old[..] {
                    return Err(format!(
                        "{} holds neither its old nor its new bytes ({} bytes)",
                        path.display(),
                        now.len()
                    ));
                }
            }
            None if now != &bytes[..] => return Err(format!("{} changed", path.display())),
            None => {}
        }
    }
    for path in disk.keys() {
        if !run.before.contains_key(path) && !path.starts_with(&backup_dir) && !is_temp(path) {
            return Err(format!("{} appeared in the store", path.display()));
        }
    }
    let manifest = disk.get(&backup_dir.join(backup::MANIFEST_NAME));
    match manifest {
        None if any_new => Err("a store file holds its new bytes but no manifest exists".into()),
        None if committed => Err("the backup was committed but has no manifest".into()),
        None => Ok(()),
        Some(m) => check_manifest(run, disk, m),
    }
}

/// The manifest is whole and describes every rewritten file, with a good copy of each.
fn check_manifest(run: &Run, disk: &Disk, m: &[u8]) -> Result<(), String> {
    let m: Manifest = serde_json::from_slice(m)
        .map_err(|e| format!("the manifest does not parse ({e}): {} bytes", m.len()))?;
    if m.state != "prepared" && m.state != "applied" {
        return Err(format!("manifest state {}", m.state));
    }
    if m.entries.len() != run.targets.len() {
        return Err(format!(
            "the manifest names {} files, the patch rewrites {}",
            m.entries.len(),
            run.targets.len()
        ));
    }
    for e in &m.entries {
        let (Some((old, _)), Some((old_sha, new_sha))) =
            (run.targets.get(&e.path), run.shas.get(&e.path))
        else {
            return Err(format!("the manifest names {}", e.path.display()));
        };
        if e.sha256_original != *old_sha || e.sha256_new.as_ref() != Some(new_sha) {
            return Err(format!("wrong sha256s for {}", e.path.display()));
        }
        let Some(copy) = disk.get(&run.backup_dir().join(&e.backup_file)) else {
            return Err(format!("the copy of {} is missing", e.path.display()));
        };
        let at = e.offset.unwrap_or(0) as usize;
        if copy.get(at..at + e.size as usize) != Some(&old[..]) {
            return Err(format!(
                "the copy of {} is not its original",
                e.path.display()
            ));
        }
    }
    Ok(())
}

/// Counts the steps of a clean run, checks its result, then crashes the writer before each
/// step in turn and checks every outcome.
fn sweep(w: &Writer) {
    let started = std::time::Instant::now();
    // The clean run: every durable step of the writer, and the patched store.
    let run = Run::new(w);
    let sim = Arc::new(CrashSim::new(&run.dir, None).unwrap());
    let out = (w.apply)(&run.dir, Backend::custom(sim.clone())).unwrap();
    assert_eq!(out.files_written, run.targets.len(), "{}", w.name);
    let steps = sim.steps();
    for o in sim.outcomes(0, 0) {
        check_outcome(&run, &o, true)
            .unwrap_or_else(|e| panic!("{} clean run, {}: {e}", w.name, o.name));
    }
    for (p, (_, new)) in &run.targets {
        assert!(fs::read(p).unwrap() == *new, "{}: {}", w.name, p.display());
    }
    // The backup is committed (its manifest renamed and its directory synced) before the
    // first store file is renamed: steps before that commit leave no manifest to require.
    let backup_dir = run.backup_dir();
    let committed_after = steps
        .iter()
        .position(|(s, p)| *s == Step::SyncDir && *p == backup_dir)
        .expect("the backup's commit syncs its directory")
        + 1;
    let first_store_rename = steps
        .iter()
        .position(|(s, p)| *s == Step::Rename && run.targets.contains_key(p))
        .expect("the store is renamed into");
    assert!(
        committed_after <= first_store_rename,
        "{}: store file renamed at step {} of {}, before the backup's commit (step {committed_after})",
        w.name,
        first_store_rename + 1,
        steps.len()
    );
    let n = steps.len();
    assert!(n > 3 * run.targets.len(), "{}: {n} steps", w.name);

    let mut outcomes = 0;
    for crash_at in 1..=n {
        run.reset();
        let sim = Arc::new(CrashSim::new(&run.dir, Some(crash_at)).unwrap());
        let r = (w.apply)(&run.dir, Backend::custom(sim.clone()));
        assert!(
            sim.crashed(),
            "{}: step {crash_at} of {n} never came",
            w.name
        );
        assert!(
            r.is_err(),
            "{}: a crash at step {crash_at} is an error",
            w.name
        );
        let committed = crash_at > committed_after;
        for o in sim.outcomes(RANDOM_OUTCOMES, crash_at as u64) {
            outcomes += 1;
            check_outcome(&run, &o, committed).unwrap_or_else(|e| {
                panic!(
                    "{}: crash before step {crash_at} of {n} ({:?} {}), outcome \"{}\": {e}",
                    w.name,
                    steps[crash_at - 1].0,
                    steps[crash_at - 1].1.display(),
                    o.name
                )
            });
        }
    }
    eprintln!(
        "{}: {} files, {n} durable steps, a crash before each: {outcomes} outcomes checked in {:?}",
        w.name,
        run.targets.len(),
        started.elapsed()
    );
}

#[test]
fn docker_writer_survives_a_crash_at_every_step() {
    sweep(&DOCKER);
}

#[test]
fn crio_writer_survives_a_crash_at_every_step() {
    sweep(&CRIO);
}
