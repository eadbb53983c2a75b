//! Helpers shared by the reliability tests (`reliability_*.rs`): real nodes copied or unpacked
//! into temp dirs, the binary run against them, byte snapshots of every store file, a fast
//! in-process restore to the pristine bytes, a logical view of a bolt file, and a tmpfs guard.

#![allow(dead_code)]

use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub use crate::under_test::bin;
pub use testtools::fixtures_dir;

pub fn sha(bytes: &[u8]) -> String {
    storepatch::backup::sha256_hex(bytes)
}

/// Fails with a clear message unless the tests run as root (they mount tmpfs, bind mounts).
pub fn require_root(what: &str) {
    use std::os::unix::fs::MetadataExt;
    let uid = std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(1);
    assert_eq!(
        uid, 0,
        "{what} needs root (CI runs `scripts/test.sh` as root)"
    );
}

/// The in-flight markers of this test process (`KUBELET_REHASH_STATE_DIR`, inherited by every
/// run of the binary): one private directory per test binary, set before its first node is
/// made, so no test reads or leaves a marker in the machine's `/var/lib/kubelet-rehash` (and
/// markers of killed runs go with the directory). Markers are keyed by the store's canonical
/// path, so the tests of one binary never see each other's.
pub fn state_dir() -> &'static Path {
    testtools::private_state_dir()
}

/// The in-flight marker files in [`state_dir`] (none once every run finished or was undone).
pub fn markers() -> Vec<PathBuf> {
    std::fs::read_dir(state_dir())
        .map(|rd| rd.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Docker,
    Containerd,
    Crio,
}

/// A node scenario in a private temp dir; patches never touch the fixtures.
pub struct Node {
    pub _tmp: tempfile::TempDir,
    /// The scenario directory (pods.json, expected.json, var/, run/).
    pub dir: PathBuf,
    pub name: String,
    pub kind: Kind,
}

fn kind_of(name: &str) -> Kind {
    if name.starts_with("docker") {
        Kind::Docker
    } else if name.starts_with("containerd") {
        Kind::Containerd
    } else {
        Kind::Crio
    }
}

/// Copies fixtures/nodes/<name> (modes kept).
pub fn small(name: &str) -> Node {
    state_dir();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join(name);
    let st = Command::new("cp")
        .arg("-a")
        .arg(fixtures_dir().join("nodes").join(name))
        .arg(&dir)
        .status()
        .unwrap();
    assert!(st.success(), "cp -a {name}");
    Node {
        _tmp: tmp,
        dir,
        name: name.to_string(),
        kind: kind_of(name),
    }
}

/// Copies fixtures/nodes/<name> into `parent` (e.g. a tmpfs mount) instead of a temp dir.
pub fn small_in(name: &str, parent: &Path) -> Node {
    state_dir();
    let dir = parent.join(name);
    let st = Command::new("cp")
        .arg("-a")
        .arg(fixtures_dir().join("nodes").join(name))
        .arg(&dir)
        .status()
        .unwrap();
    assert!(st.success(), "cp -a {name} {}", parent.display());
    Node {
        _tmp: tempfile::tempdir().unwrap(),
        dir,
        name: name.to_string(),
        kind: kind_of(name),
    }
}

/// Unpacks fixtures/nodes-large/<name>.tar.gz.
pub fn large(name: &str) -> Node {
    state_dir();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join(name);
    std::fs::create_dir(&dir).unwrap();
    let st = Command::new("tar")
        .arg("-xzf")
        .arg(
            fixtures_dir()
                .join("nodes-large")
                .join(format!("{name}.tar.gz")),
        )
        .arg("-C")
        .arg(&dir)
        .status()
        .unwrap();
    assert!(st.success(), "tar -xzf {name}.tar.gz");
    Node {
        _tmp: tmp,
        dir,
        name: name.to_string(),
        kind: kind_of(name),
    }
}

/// What a run of the binary gave.
#[derive(Debug)]
pub struct Run {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn from(out: Output) -> Run {
        use std::os::unix::process::ExitStatusExt;
        Run {
            code: out.status.code(),
            signal: out.status.signal(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
    /// `plan`/`patch` success: 0, or 4 when some containers stay unproven.
    pub fn ok(&self) -> bool {
        matches!(self.code, Some(0) | Some(4))
    }
}

impl Node {
    pub fn store_root(&self) -> PathBuf {
        match self.kind {
            Kind::Docker => self.dir.join("var/lib/docker"),
            Kind::Containerd => self.dir.join("var/lib/containerd"),
            Kind::Crio => self.dir.join("var/lib/containers/storage"),
        }
    }

    pub fn meta_db(&self) -> PathBuf {
        self.store_root().join(storepatch::containerd::META_DB)
    }

    pub fn runtime_name(&self) -> &'static str {
        match self.kind {
            Kind::Docker => "docker",
            Kind::Containerd => "containerd",
            Kind::Crio => "crio",
        }
    }

    /// The socket path the running check looks at (nothing listens there unless a test binds it).
    pub fn socket(&self) -> PathBuf {
        self.dir.join("no-such-runtime/sock")
    }

    pub fn store_flags_at(&self, root: &Path) -> Vec<String> {
        let none = self.dir.join("no-such-runtime");
        let mut f = vec![
            "--runtime-socket".to_string(),
            self.socket().display().to_string(),
            "--runtime-pidfile".into(),
            none.join("pid").display().to_string(),
            "--runtime".into(),
            self.runtime_name().into(),
            "--root".into(),
            root.display().to_string(),
        ];
        match self.kind {
            Kind::Docker => f.extend(["--live-restore".into(), "true".into()]),
            Kind::Containerd => {}
            Kind::Crio => {
                f.push("--runroot".into());
                f.push(
                    self.dir
                        .join("run/containers/storage")
                        .display()
                        .to_string(),
                );
            }
        }
        f
    }

    pub fn store_flags(&self) -> Vec<String> {
        self.store_flags_at(&self.store_root())
    }

    pub fn pods(&self) -> PathBuf {
        self.dir.join("pods.json")
    }

    pub fn expected(&self) -> Value {
        serde_json::from_slice(&std::fs::read(self.dir.join("expected.json")).unwrap()).unwrap()
    }

    /// The newest target of expected.json.
    pub fn last_target(&self) -> String {
        self.expected()["targets"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .as_str()
            .unwrap()
            .to_string()
    }

    /// `kubelet-rehash <sub> --pods <pods.json> <store flags>`; add the rest.
    pub fn cmd(&self, sub: &str) -> Command {
        let mut c = Command::new(bin());
        c.arg(sub)
            .arg("--pods")
            .arg(self.pods())
            .args(self.store_flags())
            .env_remove("KUBELET_REHASH_CRASH_AT")
            .env_remove("KUBELET_REHASH_CRASH_LOG");
        c
    }

    pub fn patch_cmd(&self, to: &str, backup: &Path) -> Command {
        let mut c = self.cmd("patch");
        c.args(["--to", to, "-o", "json", "--backup-dir"])
            .arg(backup);
        c
    }

    pub fn patch(&self, to: &str, backup: &Path) -> Run {
        Run::from(self.patch_cmd(to, backup).output().unwrap())
    }

    pub fn plan(&self, to: &str) -> Run {
        Run::from(
            self.cmd("plan")
                .args(["--to", to, "-o", "json"])
                .output()
                .unwrap(),
        )
    }

    /// id → stored hash of every record, from `plan -o json` (which must succeed).
    pub fn stored_hashes(&self, to: &str) -> BTreeMap<String, Option<String>> {
        let r = self.plan(to);
        assert!(r.ok(), "{}: plan --to {to}: {r:?}", self.name);
        let plan: Value = serde_json::from_str(&r.stdout).unwrap();
        plan["records"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["id"].as_str().unwrap().to_string(),
                    r["stored_hash"].as_str().map(str::to_string),
                )
            })
            .collect()
    }

    pub fn rollback(&self, backup: &Path, accept_unrecorded: bool) -> Run {
        let mut c = Command::new(bin());
        c.arg("rollback")
            .arg("--backup-dir")
            .arg(backup)
            .args(self.store_flags())
            .env_remove("KUBELET_REHASH_CRASH_AT")
            .env_remove("KUBELET_REHASH_CRASH_LOG");
        if accept_unrecorded {
            c.arg("--accept-unrecorded");
        }
        Run::from(c.output().unwrap())
    }

    /// Runs a command a message named (`kubelet-rehash` and its arguments, without the program
    /// name) with the flags that name this node (its socket, pid file and root), as every
    /// command of the tests gets.
    pub fn run_named(&self, args: &[String]) -> Run {
        Run::from(
            Command::new(bin())
                .args(args)
                .args(self.store_flags())
                .env_remove("KUBELET_REHASH_CRASH_AT")
                .env_remove("KUBELET_REHASH_CRASH_LOG")
                .output()
                .unwrap(),
        )
    }

    fn tops(&self) -> Vec<PathBuf> {
        ["var", "run"]
            .iter()
            .map(|t| self.dir.join(t))
            .filter(|p| p.exists())
            .collect()
    }

    /// Every regular file under var/ and run/ (relative path → bytes), temp files included.
    pub fn capture(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        let mut out = BTreeMap::new();
        for top in self.tops() {
            for e in walkdir::WalkDir::new(&top) {
                let e = e.unwrap();
                if e.file_type().is_file() {
                    out.insert(
                        e.path().strip_prefix(&self.dir).unwrap().to_path_buf(),
                        std::fs::read(e.path()).unwrap(),
                    );
                }
            }
        }
        out
    }

    /// sha256 and mode of every file under var/ and run/, without the temp files a killed
    /// patch may leave (`.<name>.rehash-tmp-<pid>`), which are returned apart.
    pub fn snapshot(&self) -> Snapshot {
        let mut files = BTreeMap::new();
        let mut temps = Vec::new();
        for top in self.tops() {
            for e in walkdir::WalkDir::new(&top) {
                let e = e.unwrap();
                if !e.file_type().is_file() {
                    continue;
                }
                let rel = e.path().strip_prefix(&self.dir).unwrap().to_path_buf();
                if e.file_name().to_string_lossy().contains(".rehash-tmp-") {
                    temps.push(rel);
                    continue;
                }
                let mode = e.metadata().unwrap().permissions().mode() & 0o7777;
                files.insert(rel, (sha(&std::fs::read(e.path()).unwrap()), mode));
            }
        }
        Snapshot { files, temps }
    }

    /// Puts the pristine bytes back (only the files that differ) and removes anything else.
    pub fn restore(&self, pristine: &BTreeMap<PathBuf, Vec<u8>>, modes: &Snapshot) {
        for top in self.tops() {
            for e in walkdir::WalkDir::new(&top) {
                let e = e.unwrap();
                if e.file_type().is_file() {
                    let rel = e.path().strip_prefix(&self.dir).unwrap();
                    if !pristine.contains_key(rel) {
                        std::fs::remove_file(e.path()).unwrap();
                    }
                }
            }
        }
        for (rel, bytes) in pristine {
            let p = self.dir.join(rel);
            if std::fs::read(&p).ok().as_deref() != Some(bytes.as_slice()) {
                std::fs::write(&p, bytes).unwrap();
            }
            let mode = modes.files[rel].1;
            let cur = std::fs::metadata(&p).unwrap().permissions().mode() & 0o7777;
            if cur != mode {
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            }
        }
    }
}

/// Store files by relative path: (sha256, mode).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub files: BTreeMap<PathBuf, (String, u32)>,
    pub temps: Vec<PathBuf>,
}

impl Snapshot {
    /// Paths whose sha256 or mode differ from `other` (or exist on one side only).
    pub fn diff(&self, other: &Snapshot) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for (p, v) in &self.files {
            if other.files.get(p) != Some(v) {
                out.push(p.clone());
            }
        }
        for p in other.files.keys() {
            if !self.files.contains_key(p) {
                out.push(p.clone());
            }
        }
        out
    }
}

pub use storepatch::containerd::bolt::testing::Kv;

/// Opens a bolt file as bbolt would, runs bbolt's tx.Check rules (ours, then Go bbolt's own,
/// which must read the same key/values), and returns its key/values.
pub fn bolt_kv(path: &Path) -> Result<Kv, String> {
    use storepatch::containerd::bolt::{check::check, testing, Db};
    let db = Db::read_path(path).map_err(|e| e.to_string())?;
    let r = check(&db.view(), &db.meta);
    if !r.is_ok() {
        return Err(format!("bbolt check: {}", r.summary()));
    }
    testing::assert_bbolt_check(path);
    testing::kv_of(&db).map_err(|e| e.to_string())
}

/// A tmpfs (or any mount) unmounted when dropped.
pub struct Mount(pub PathBuf);

impl Mount {
    pub fn tmpfs(at: &Path, size: &str) -> Mount {
        require_root("mounting a tmpfs");
        std::fs::create_dir_all(at).unwrap();
        let st = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0755"),
                "tmpfs",
            ])
            .arg(at)
            .status()
            .unwrap();
        assert!(st.success(), "mount -t tmpfs on {}", at.display());
        Mount(at.to_path_buf())
    }

    /// A read-only bind mount of `src` at `at`.
    pub fn ro_bind(src: &Path, at: &Path) -> Mount {
        require_root("a read-only bind mount");
        std::fs::create_dir_all(at).unwrap();
        let st = Command::new("mount")
            .arg("--bind")
            .arg(src)
            .arg(at)
            .status()
            .unwrap();
        assert!(
            st.success(),
            "mount --bind {} {}",
            src.display(),
            at.display()
        );
        let m = Mount(at.to_path_buf());
        let st = Command::new("mount")
            .args(["-o", "remount,bind,ro"])
            .arg(at)
            .status()
            .unwrap();
        assert!(st.success(), "remount ro {}", at.display());
        m
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Fills the file system holding `dir` to the last byte (a file named `filler`).
pub fn fill_up(dir: &Path) -> PathBuf {
    use std::io::Write;
    let p = dir.join("filler");
    let mut f = std::fs::File::create(&p).unwrap();
    let chunk = vec![0u8; 64 * 1024];
    while f.write_all(&chunk).is_ok() {}
    let small = vec![0u8; 512];
    while f.write_all(&small).is_ok() {}
    let one = [0u8; 1];
    while f.write_all(&one).is_ok() {}
    let _ = f.sync_all();
    p
}

/// Deterministic pseudo-random numbers, seeded and printed by the caller.
#[allow(unused_imports)] // (not every test that includes this module draws numbers)
pub use testtools::Rng;

pub fn seed() -> u64 {
    std::env::var("RELIABILITY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        })
}

/// `n` points spread evenly over 1..=total (all of them when total ≤ n), first and last kept.
pub fn spread(total: u64, n: u64) -> Vec<u64> {
    if total <= n {
        return (1..=total).collect();
    }
    let mut v: Vec<u64> = (0..n).map(|i| 1 + i * (total - 1) / (n - 1)).collect();
    v.dedup();
    v
}

/// Count of `kubelet-rehash fault point` lines and the step names by point number.
pub fn fault_points(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("kubelet-rehash fault point "))
        .map(|l| l.split_once(": ").map(|x| x.1).unwrap_or("").to_string())
        .collect()
}

pub type Counts = HashMap<&'static str, u64>;

/// The one command a message names: the text between backticks that starts with
/// `kubelet-rehash `, split into its arguments (without the program name). `None` when the
/// message names no command, or more than one.
pub fn named_command(message: &str) -> Option<Vec<String>> {
    let cmds: Vec<&str> = message
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|c| c.starts_with("kubelet-rehash "))
        .collect();
    match cmds.as_slice() {
        [one] => Some(one.split_whitespace().skip(1).map(str::to_string).collect()),
        _ => None,
    }
}
