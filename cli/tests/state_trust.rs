//! An `upgrade` state file is believed like a backup (issue 35, defect 1): `rollback --state`
//! and `upgrade --state` run as root and write where it says, so a state file another user
//! wrote or could have swapped, a symbolic link, or one naming copies outside its own backup
//! directory is refused (exit 3) with the reason, and nothing is written: the audit's
//! reproduction (nobody's state file in a shared directory naming a root-owned file as the
//! kubelet and nobody's file as its backup) left that root file a hard link to nobody's. A
//! state path that is a directory or a FIFO is bad input (exit 2), read without hanging.

mod rel_common;
mod under_test;

use rel_common::require_root;
use serde_json::Value;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use under_test::bin;

struct Out {
    code: i32,
    stderr: String,
}

/// Runs the binary, ended after 60 s (a read that hangs, on a FIFO, is a failure: exit 124).
fn run(args: &[&str]) -> Out {
    let o = Command::new("timeout")
        .args(["-s", "KILL", "60", bin()])
        .args(args)
        .output()
        .unwrap();
    Out {
        code: o.status.code().unwrap_or(-1),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// [`run`] with every service command of `upgrade`/`rollback --state` touching a `ran-<what>`
/// marker in `dir`, so a test sees whether any ran.
fn run_serviced(dir: &Path, args: &[&str]) -> Out {
    let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    for what in [
        "stop-kubelet",
        "start-kubelet",
        "stop-runtime",
        "start-runtime",
    ] {
        all.push(format!("--{what}"));
        all.push(format!("touch {}/ran-{what}", dir.display()));
    }
    run(&all.iter().map(String::as_str).collect::<Vec<_>>())
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// A node copy, and a genuine state file of it: the one a refused preflight writes.
struct Lab {
    t: tempfile::TempDir,
    node: PathBuf,
    template: Value,
}

impl Lab {
    fn new() -> Lab {
        let t = tempfile::tempdir().unwrap();
        std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let src = testtools::fixtures_dir().join("nodes/containerd-1.7");
        assert!(Command::new("cp")
            .arg("-a")
            .arg(&src)
            .arg(t.path())
            .status()
            .unwrap()
            .success());
        let node = t.path().join("containerd-1.7");
        let home = t.path().join("genuine");
        std::fs::create_dir(&home).unwrap();
        std::fs::create_dir(t.path().join("none")).unwrap();
        let state = home.join("state.json");
        let o = run_serviced(
            t.path(),
            &[
                "upgrade",
                "--pods",
                &s(&node.join("pods.json")),
                "--to",
                "1.31",
                "--root",
                &s(&node.join("var/lib/containerd")),
                "--runtime-socket",
                &s(&t.path().join("none.sock")),
                "--kubelet-dir",
                &s(&t.path().join("none")),
                "--manifests",
                &s(&t.path().join("none")),
                "--kubelet-path",
                &s(&t.path().join("kubelet")),
                "--state",
                &s(&state),
                "--backup-dir",
                &s(&home.join("backup")),
                "--accept-restarts",
            ],
        );
        // the copied node's containers do not run here: a refused preflight
        assert_eq!(o.code, 3, "the template run: {}", o.stderr);
        let template = serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
        Lab { t, node, template }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.t.path().join(rel)
    }

    /// A state that, believed, reinstalls `backup` as the kubelet at `victim`: a killed run
    /// in the window that had begun installing the new kubelet.
    fn forged(&self, backup_dir: &Path, victim: &Path, backup: &Path) -> Vec<u8> {
        let mut v = self.template.clone();
        v["phase"] = "window".into();
        v["failure"] = Value::Null;
        v["backup_dir"] = s(backup_dir).into();
        v["kubelet_path"] = s(victim).into();
        v["kubelet_backup"] = format!("file:{}", s(backup)).into();
        v["done"]["binary_install_started"] = true.into();
        serde_json::to_vec_pretty(&v).unwrap()
    }

    /// A shared directory (1777) holding nobody's file `evil` and nobody's state file naming
    /// `evil` as the kubelet backup of `victim`: (the directory, evil, the state file).
    fn nobodys_state(&self, victim: &Victim) -> (PathBuf, PathBuf, PathBuf) {
        let shared = self.path("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let evil = shared.join("evil");
        as_nobody(&format!("echo 'nobody ALL=(ALL) ALL' > {}", evil.display()));
        let staged = self.path("forged.json");
        std::fs::write(
            &staged,
            self.forged(&shared.join("bk"), &victim.path, &evil),
        )
        .unwrap();
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o644)).unwrap();
        let state = shared.join("state.json");
        as_nobody(&format!("cat {} > {}", staged.display(), state.display()));
        (shared, evil, state)
    }

    fn no_service_ran(&self, case: &str) {
        for e in std::fs::read_dir(self.t.path()).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            assert!(
                !name.starts_with("ran-"),
                "{case}: a service command ran for a refused state: {name}"
            );
        }
    }

    fn rollback_state(&self, state: &Path) -> Out {
        run_serviced(
            self.t.path(),
            &[
                "rollback",
                "--state",
                &s(state),
                "--root",
                &s(&self.node.join("var/lib/containerd")),
                "--runtime-socket",
                &s(&self.path("none.sock")),
                "--kubelet-healthz",
                "http://127.0.0.1:1/healthz",
            ],
        )
    }
}

fn as_nobody(script: &str) {
    let o = Command::new("runuser")
        .args(["-u", "nobody", "--", "sh", "-c", script])
        .output()
        .unwrap();
    assert!(o.status.success(), "as nobody: {script}: {o:?}");
}

/// The root-owned file a forged state names as the kubelet: its bytes, mode, owner and inode
/// must not move.
struct Victim {
    path: PathBuf,
    seen: (Vec<u8>, u32, u32, u64),
}

impl Victim {
    fn new(path: PathBuf) -> Victim {
        std::fs::write(&path, b"root:x:0:0:root:/root:/bin/sh\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let seen = Self::look(&path);
        Victim { path, seen }
    }
    fn look(p: &Path) -> (Vec<u8>, u32, u32, u64) {
        let m = std::fs::symlink_metadata(p).unwrap();
        (std::fs::read(p).unwrap(), m.mode(), m.uid(), m.ino())
    }
    fn untouched(&self, case: &str) {
        assert_eq!(
            Self::look(&self.path),
            self.seen,
            "{case}: the root-owned file a forged state named as the kubelet kept its bytes, mode, owner and inode"
        );
    }
}

fn refused(lab: &Lab, victim: &Victim, case: &str, out: &Out, want: &str) {
    assert_eq!(
        out.code, 3,
        "{case}: a forged state is refused: {}",
        out.stderr
    );
    assert!(
        out.stderr.contains(want),
        "{case}: the refusal names why ({want:?}): {}",
        out.stderr
    );
    victim.untouched(case);
    lab.no_service_ran(case);
}

#[test]
fn a_state_file_another_user_wrote_is_refused_and_writes_nothing() {
    require_root("runuser and chown");
    let lab = Lab::new();
    let victim = Victim::new(lab.path("sudoers"));
    // the audit's reproduction: a shared directory (1777), nobody's state and nobody's "backup"
    let (shared, evil, state) = lab.nobodys_state(&victim);
    let forged = std::fs::read(&state).unwrap();
    let out = lab.rollback_state(&state);
    refused(
        &lab,
        &victim,
        "nobody's state file",
        &out,
        "owned by uid 65534",
    );

    // the same state, root's, but writable by group
    let home = lab.path("home");
    std::fs::create_dir(&home).unwrap();
    let state = home.join("state.json");
    let own = |bytes: &[u8], mode: u32| {
        let _ = std::fs::remove_file(&state);
        std::fs::write(&state, bytes).unwrap();
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    own(&forged, 0o620);
    let out = lab.rollback_state(&state);
    refused(
        &lab,
        &victim,
        "group-writable state",
        &out,
        "writable by group or others",
    );

    // root's, private, but in a directory others may write without the sticky bit
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = lab.rollback_state(&state);
    refused(
        &lab,
        &victim,
        "state in an open directory",
        &out,
        "without the sticky bit",
    );
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o755)).unwrap();

    // a symbolic link to a state file is never followed
    let link = home.join("link.json");
    std::os::unix::fs::symlink(&state, &link).unwrap();
    let out = lab.rollback_state(&link);
    refused(&lab, &victim, "a symlinked state", &out, "symbolic link");

    // root's and private, in a trusted directory: its paths must be what a run records
    let bk = home.join("bk");
    std::fs::create_dir(&bk).unwrap();
    std::fs::set_permissions(&bk, std::fs::Permissions::from_mode(0o700)).unwrap();
    own(&lab.forged(&bk, &victim.path, &evil), 0o600);
    let out = lab.rollback_state(&state);
    refused(
        &lab,
        &victim,
        "a kubelet backup outside the backup dir",
        &out,
        "is not inside its backup directory",
    );
    own(&lab.forged(&shared.join("bk"), &victim.path, &evil), 0o600);
    let out = lab.rollback_state(&state);
    refused(
        &lab,
        &victim,
        "a backup dir outside the state's directory",
        &out,
        "neither inside the state file's directory",
    );
    // a backup directory (where the kubelet copy must be) that nobody owns
    let nobody_bk = home.join("nbk");
    std::fs::create_dir(&nobody_bk).unwrap();
    std::os::unix::fs::chown(&nobody_bk, Some(65534), Some(65534)).unwrap();
    own(
        &lab.forged(&nobody_bk, &victim.path, &nobody_bk.join("kubelet/kubelet")),
        0o600,
    );
    let out = lab.rollback_state(&state);
    refused(
        &lab,
        &victim,
        "a backup dir nobody owns",
        &out,
        "owned by uid 65534",
    );
}

#[test]
fn upgrade_believes_a_state_file_no_more_than_rollback_does() {
    require_root("runuser");
    let lab = Lab::new();
    let victim = Victim::new(lab.path("sudoers"));
    let (shared, _, state) = lab.nobodys_state(&victim);
    let out = run_serviced(
        lab.t.path(),
        &[
            "upgrade",
            "--pods",
            &s(&lab.node.join("pods.json")),
            "--to",
            "1.31",
            "--root",
            &s(&lab.node.join("var/lib/containerd")),
            "--runtime-socket",
            &s(&lab.path("none.sock")),
            "--kubelet-path",
            &s(&victim.path),
            "--state",
            &s(&state),
            "--backup-dir",
            &s(&shared.join("bk")),
            "--accept-restarts",
        ],
    );
    refused(
        &lab,
        &victim,
        "upgrade --state of nobody's file",
        &out,
        "owned by uid 65534",
    );
}

#[test]
fn a_state_path_that_is_a_directory_or_a_fifo_is_bad_input_and_never_hangs() {
    let lab = Lab::new();
    let dir = lab.path("a-dir");
    std::fs::create_dir(&dir).unwrap();
    let out = lab.rollback_state(&dir);
    assert_eq!(out.code, 2, "a directory as --state: {}", out.stderr);
    assert!(out.stderr.contains("is a directory"), "{}", out.stderr);
    assert!(
        !out.stderr.contains("report:") && !out.stderr.contains("Some("),
        "the message is the state file's own, not a report's: {}",
        out.stderr
    );
    let fifo = lab.path("fifo.json");
    let c = std::ffi::CString::new(s(&fifo)).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    // no writer ever opens it: a reader that opens it blocks forever
    let out = lab.rollback_state(&fifo);
    assert_eq!(out.code, 2, "a FIFO as --state: {}", out.stderr);
    assert!(out.stderr.contains("not a regular file"), "{}", out.stderr);
    // a state of another format: the format number, plainly
    let other = lab.path("other.json");
    std::fs::write(&other, br#"{"format": 2}"#).unwrap();
    let out = lab.rollback_state(&other);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("upgrade state format 2;") && !out.stderr.contains("Some("),
        "{}",
        out.stderr
    );
    lab.no_service_ran("bad state paths");
}

/// Issue 35, defect 6: the in-flight marker directory was checked at its last level only, so
/// root's marker directory under a directory another user owns was accepted, and that user
/// could move markers away (dropping "undo the interrupted run first"). Every parent is
/// checked now, as for backups: the patch is refused (exit 3) before anything is written.
#[test]
fn a_marker_directory_under_another_users_directory_is_refused() {
    require_root("chown");
    let lab = Lab::new();
    let theirs = lab.path("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    let markers = theirs.join("inflight");
    std::fs::create_dir(&markers).unwrap();
    std::fs::set_permissions(&markers, std::fs::Permissions::from_mode(0o700)).unwrap();
    let db = lab
        .node
        .join("var/lib/containerd/io.containerd.metadata.v1.bolt/meta.db");
    let before = std::fs::read(&db).unwrap();
    let o = Command::new(bin())
        .env("KUBELET_REHASH_STATE_DIR", &markers)
        .args(["patch", "--pods"])
        .arg(lab.node.join("pods.json"))
        .args(["--to", "1.31", "--root"])
        .arg(lab.node.join("var/lib/containerd"))
        .arg("--runtime-socket")
        .arg(lab.path("none.sock"))
        .arg("--backup-dir")
        .arg(lab.path("backup-marker"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        o.status.code(),
        Some(3),
        "a marker directory under nobody's: {stderr}"
    );
    assert!(
        stderr.contains("owned by uid 65534") && stderr.contains("in-flight marker"),
        "the refusal names the directory's owner: {stderr}"
    );
    assert_eq!(
        std::fs::read(&db).unwrap(),
        before,
        "the store is unchanged"
    );
    assert_eq!(
        std::fs::read_dir(&markers).unwrap().count(),
        0,
        "no marker was written there"
    );
}

/// Issue 35, smaller items: what sits at the in-flight marker's place and is no marker file
/// (a symbolic link, a directory) or a marker directory that is a file was exit 1 (an I/O
/// error); it is a refusal (exit 3) naming what is there, before anything is written.
#[test]
fn a_marker_that_is_no_file_or_a_marker_directory_that_is_a_file_is_refused() {
    let lab = Lab::new();
    let root = lab.node.join("var/lib/containerd");
    let db = root.join("io.containerd.metadata.v1.bolt/meta.db");
    let before = std::fs::read(&db).unwrap();
    let key = storepatch::backup::sha256_hex(
        std::fs::canonicalize(&root)
            .unwrap()
            .as_os_str()
            .as_encoded_bytes(),
    );
    let marker_name = format!("{}.json", &key[..32]);
    let patch = |state_dir: &Path, case: &str| {
        let o = Command::new(bin())
            .env("KUBELET_REHASH_STATE_DIR", state_dir)
            .args(["patch", "--pods"])
            .arg(lab.node.join("pods.json"))
            .args(["--to", "1.31", "--root"])
            .arg(&root)
            .arg("--runtime-socket")
            .arg(lab.path("none.sock"))
            .arg("--backup-dir")
            .arg(lab.path(&format!("backup-{case}")))
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    for (case, want) in [
        ("symlink", "a symbolic link"),
        ("directory", "a directory"),
        ("dir-is-a-file", "is not a directory"),
    ] {
        let markers = lab.path(&format!("markers-{case}"));
        match case {
            "dir-is-a-file" => std::fs::write(&markers, b"").unwrap(),
            _ => {
                std::fs::create_dir(&markers).unwrap();
                std::fs::set_permissions(&markers, std::fs::Permissions::from_mode(0o700)).unwrap();
                let at = markers.join(&marker_name);
                if case == "symlink" {
                    std::os::unix::fs::symlink(lab.path("elsewhere.json"), &at).unwrap();
                } else {
                    std::fs::create_dir(&at).unwrap();
                }
            }
        }
        let (code, stderr) = patch(&markers, case);
        assert_eq!(code, Some(3), "{case}: a refusal: {stderr}");
        assert!(
            stderr.contains(want),
            "{case}: names what is there ({want}): {stderr}"
        );
        assert_eq!(
            std::fs::read(&db).unwrap(),
            before,
            "{case}: the store is unchanged"
        );
        assert!(
            !lab.path(&format!("backup-{case}/manifest.json")).exists(),
            "{case}: no backup was written"
        );
    }
}
