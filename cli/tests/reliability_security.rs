//! Security properties through the binary: `patch` and `rollback` never write outside the store
//! root and the backup dir, never follow a symlink planted in the store out of it, create
//! backups mode 0600 in a 0700 dir (whatever the umask), keep each store file's mode and owner,
//! and refuse a world-writable backup dir.

mod rel_common;
mod under_test;

use rel_common::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Every file and symlink under `dir` except the store (var/, run/) and `skip`: path → bytes
/// (or link target), mode.
fn outside_tree(dir: &Path, skip: &[&Path]) -> Vec<(PathBuf, Vec<u8>, u32)> {
    let mut out = Vec::new();
    let mut it = walkdir::WalkDir::new(dir).sort_by_file_name().into_iter();
    while let Some(e) = it.next() {
        let e = e.unwrap();
        let p = e.path();
        let rel = p.strip_prefix(dir).unwrap();
        if rel.starts_with("var") || rel.starts_with("run") || skip.iter().any(|s| p.starts_with(s))
        {
            if e.file_type().is_dir() {
                it.skip_current_dir();
            }
            continue;
        }
        let m = std::fs::symlink_metadata(p).unwrap();
        let content = if m.file_type().is_symlink() {
            std::fs::read_link(p)
                .unwrap()
                .into_os_string()
                .into_encoded_bytes()
        } else if m.is_file() {
            std::fs::read(p).unwrap()
        } else {
            Vec::new()
        };
        out.push((rel.to_path_buf(), content, m.mode()));
    }
    out
}

/// Plants `plant` (symlinks out of the store into `<node>/outside`), patches and rolls back;
/// nothing outside the store and the backup dir changes, and every planted symlink is still a
/// symlink to the same target with the same target bytes.
fn planted(name: &str, plant: &dyn Fn(&Node, &Path) -> Vec<PathBuf>) -> (Run, usize) {
    let node = small(name);
    let to = node.last_target();
    let outside = node.dir.join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("sentinel"), b"do not touch").unwrap();
    let links = plant(&node, &outside);
    let bk = node.dir.join("backup");
    let before = outside_tree(&node.dir, &[&bk]);
    let store_before = node.snapshot();
    let r = node.patch(&to, &bk);
    assert_eq!(r.signal, None);
    let after = outside_tree(&node.dir, &[&bk]);
    let differ: Vec<_> = after
        .iter()
        .filter(|e| !before.contains(e))
        .chain(before.iter().filter(|e| !after.contains(e)))
        .map(|e| e.0.display().to_string())
        .collect();
    assert!(
        differ.is_empty(),
        "{name}: patch changed something outside the store and the backup dir: {differ:?}"
    );
    for l in &links {
        assert!(
            std::fs::symlink_metadata(l)
                .unwrap()
                .file_type()
                .is_symlink(),
            "{name}: {} is still the planted symlink",
            l.display()
        );
    }
    let changed = node.snapshot().diff(&store_before).len();
    if bk.join("manifest.json").exists() {
        let rb = node.rollback(&bk, false);
        assert_eq!(rb.code, Some(0), "{name}: {rb:?}");
        assert_eq!(outside_tree(&node.dir, &[&bk]), before, "{name}: rollback");
        assert!(node.snapshot().diff(&store_before).is_empty());
    }
    (r, changed)
}

#[test]
fn symlinks_out_of_the_store_are_never_followed_for_writing() {
    // Docker: a container's config.v2.json, a container dir, containers/ itself
    let (r, n) = planted("docker-20.10", &|node, out| {
        let c = node.store_root().join("containers");
        let ids: Vec<PathBuf> = std::fs::read_dir(&c)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.join("config.v2.json").is_file())
            .collect();
        let file = ids[0].join("config.v2.json");
        std::fs::rename(&file, out.join("config.v2.json")).unwrap();
        std::os::unix::fs::symlink(out.join("config.v2.json"), &file).unwrap();
        let dir = out.join("ctr");
        std::fs::rename(&ids[1], &dir).unwrap();
        std::os::unix::fs::symlink(&dir, &ids[1]).unwrap();
        vec![file, ids[1].clone()]
    });
    assert!(r.ok(), "docker: the other containers are patched: {r:?}");
    assert!(n > 0);
    let (r, _) = planted("docker-20.10", &|node, out| {
        let c = node.store_root().join("containers");
        std::fs::rename(&c, out.join("containers")).unwrap();
        std::os::unix::fs::symlink(out.join("containers"), &c).unwrap();
        vec![c]
    });
    assert_eq!(
        r.code,
        Some(1),
        "docker: containers/ out of the root: {r:?}"
    );
    assert!(r.stderr.contains("outside the data-root"), "{}", r.stderr);

    // containerd: meta.db, and the directory holding it
    let (r, _) = planted("containerd-1.7", &|node, out| {
        let db = node.meta_db();
        std::fs::rename(&db, out.join("meta.db")).unwrap();
        std::os::unix::fs::symlink(out.join("meta.db"), &db).unwrap();
        vec![db]
    });
    assert_eq!(r.code, Some(1), "containerd: meta.db a symlink: {r:?}");
    assert!(
        r.stderr.contains("meta.db")
            && (r.stderr.contains("symbolic link") || r.stderr.contains("not a regular file")),
        "{}",
        r.stderr
    );
    let (r, _) = planted("containerd-1.7", &|node, out| {
        let dir = node.meta_db().parent().unwrap().to_path_buf();
        std::fs::rename(&dir, out.join("bolt")).unwrap();
        std::os::unix::fs::symlink(out.join("bolt"), &dir).unwrap();
        vec![dir]
    });
    assert_eq!(
        r.code,
        Some(1),
        "containerd: the bolt dir a symlink out of the root: {r:?}"
    );
    assert!(
        r.stderr.contains("outside the containerd root"),
        "{}",
        r.stderr
    );

    // CRI-O: a container's config.json, and a container dir
    let (r, n) = planted("crio-1.30", &|node, out| {
        let c = node.store_root().join("overlay-containers");
        let ids: Vec<PathBuf> = std::fs::read_dir(&c)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.join("userdata/config.json").is_file())
            .collect();
        let file = ids[0].join("userdata/config.json");
        std::fs::rename(&file, out.join("config.json")).unwrap();
        std::os::unix::fs::symlink(out.join("config.json"), &file).unwrap();
        let dir = out.join("ctr");
        std::fs::rename(&ids[1], &dir).unwrap();
        std::os::unix::fs::symlink(&dir, &ids[1]).unwrap();
        vec![file, ids[1].clone()]
    });
    eprintln!(
        "crio with planted symlinks: exit {:?}, {n} files patched: {}",
        r.code,
        r.stderr.trim()
    );
    assert!(r.ok() || r.code == Some(1), "crio: {r:?}");
}

fn modes_under(dir: &Path) -> Vec<(PathBuf, bool, u32)> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .map(|e| {
            let e = e.unwrap();
            let m = std::fs::symlink_metadata(e.path()).unwrap();
            (e.path().to_path_buf(), m.is_dir(), m.mode() & 0o7777)
        })
        .collect()
}

#[test]
fn backups_are_private_whatever_the_umask() {
    require_root("chown of a store file");
    for name in ["docker-20.10", "containerd-1.7", "crio-1.30"] {
        let node = small(name);
        let to = node.last_target();
        // a store file with an unusual mode and owner keeps both through patch and rollback
        let victim = node
            .capture()
            .into_keys()
            .find(|p| {
                p.ends_with("config.v2.json")
                    || p.ends_with("meta.db")
                    || p.ends_with("userdata/config.json")
            })
            .unwrap();
        let victim = node.dir.join(victim);
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o640)).unwrap();
        std::os::unix::fs::chown(&victim, Some(1234), Some(5678)).unwrap();
        let before = node.snapshot();
        for (i, pre) in [None, Some(0o755u32)].into_iter().enumerate() {
            let bk = node.dir.join(format!("backup-{i}"));
            if let Some(m) = pre {
                std::fs::create_dir(&bk).unwrap();
                std::fs::set_permissions(&bk, std::fs::Permissions::from_mode(m)).unwrap();
            }
            // umask 000: nothing may rely on the caller's umask
            let mut cmd = Command::new("sh");
            cmd.arg("-c")
                .arg("umask 000; exec \"$@\"")
                .arg("sh")
                .arg(bin())
                .args(["patch", "--pods"])
                .arg(node.pods())
                .args(node.store_flags())
                .args(["--to", &to, "--backup-dir"])
                .arg(&bk);
            let r = Run::from(cmd.output().unwrap());
            assert!(r.ok(), "{name}: {r:?}");
            let entries = modes_under(&bk);
            assert!(
                entries.len() >= 3,
                "{name}: copies, manifest, report: {entries:?}"
            );
            for (p, is_dir, mode) in &entries {
                let want = if *is_dir { 0o700 } else { 0o600 };
                assert_eq!(*mode, want, "{name}: {} mode {mode:o}", p.display());
            }
            let m = std::fs::metadata(&victim).unwrap();
            assert_eq!(
                (m.mode() & 0o7777, m.uid(), m.gid()),
                (0o640, 1234, 5678),
                "{name}: the patched file keeps its mode and owner"
            );
            let rb = node.rollback(&bk, false);
            assert_eq!(rb.code, Some(0), "{rb:?}");
            assert!(
                node.snapshot().diff(&before).is_empty(),
                "{name}: rollback exact"
            );
            let m = std::fs::metadata(&victim).unwrap();
            assert_eq!((m.mode() & 0o7777, m.uid(), m.gid()), (0o640, 1234, 5678));
        }
    }
}

#[test]
fn world_writable_backup_dir_is_refused() {
    let node = small("docker-20.10");
    let to = node.last_target();
    let before = node.snapshot();
    for mode in [0o777u32, 0o1777, 0o702] {
        let bk = node.dir.join(format!("bk-{mode:o}"));
        std::fs::create_dir(&bk).unwrap();
        std::fs::set_permissions(&bk, std::fs::Permissions::from_mode(mode)).unwrap();
        let r = node.patch(&to, &bk);
        assert_eq!(r.code, Some(3), "mode {mode:o}: {r:?}");
        assert!(r.stderr.contains("world-writable"), "{}", r.stderr);
        assert_eq!(
            std::fs::read_dir(&bk).unwrap().count(),
            0,
            "nothing written into it"
        );
        assert_eq!(
            std::fs::metadata(&bk).unwrap().mode() & 0o7777,
            mode,
            "its mode is left alone"
        );
        assert!(node.snapshot().diff(&before).is_empty());
    }
}

#[test]
fn report_is_private_atomic_and_never_follows_a_symlink() {
    let node = small("docker-20.10");
    let to = node.last_target();
    let before = node.snapshot();
    // a symlink as --report: refused (exit 2) before anything is read or written
    let target = node.dir.join("not-a-report");
    std::fs::write(&target, b"precious").unwrap();
    let link = node.dir.join("report-link.json");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let bk = node.dir.join("bk-link");
    let r = Run::from(
        node.patch_cmd(&to, &bk)
            .arg("--report")
            .arg(&link)
            .output()
            .unwrap(),
    );
    assert_eq!(r.code, Some(2), "{r:?}");
    assert!(r.stderr.contains("symbolic link"), "{}", r.stderr);
    assert_eq!(std::fs::read(&target).unwrap(), b"precious");
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(!bk.exists(), "refused before the patch");
    assert!(node.snapshot().diff(&before).is_empty());

    // umask 000, parents missing: parents 0700, report 0600, no temp file left beside it
    let report = node.dir.join("reports/a/b/report.json");
    let bk = node.dir.join("bk-umask");
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg("umask 000; exec \"$@\"")
        .arg("sh")
        .arg(bin())
        .args(["patch", "--pods"])
        .arg(node.pods())
        .args(node.store_flags())
        .args(["--to", &to, "--backup-dir"])
        .arg(&bk)
        .arg("--report")
        .arg(&report);
    let r = Run::from(cmd.output().unwrap());
    assert!(r.ok(), "{r:?}");
    for d in ["reports", "reports/a", "reports/a/b"] {
        let m = std::fs::metadata(node.dir.join(d)).unwrap().mode() & 0o7777;
        assert_eq!(m, 0o700, "{d} mode {m:o}");
    }
    let m = std::fs::symlink_metadata(&report).unwrap();
    assert!(m.is_file());
    assert_eq!(m.mode() & 0o7777, 0o600, "report mode {:o}", m.mode());
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert!(v["records"].is_array(), "a whole report: {v}");
    let names: Vec<String> = std::fs::read_dir(report.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["report.json"], "no temp file left");

    // an existing world-readable report is replaced by a 0600 one (rename, not rewrite in place)
    std::fs::set_permissions(&report, std::fs::Permissions::from_mode(0o666)).unwrap();
    let ino = std::fs::metadata(&report).unwrap().ino();
    let r = Run::from(
        node.patch_cmd(&to, &node.dir.join("bk-again"))
            .arg("--report")
            .arg(&report)
            .output()
            .unwrap(),
    );
    assert!(r.ok(), "{r:?}");
    let m = std::fs::metadata(&report).unwrap();
    assert_eq!(m.mode() & 0o7777, 0o600);
    assert_ne!(m.ino(), ino, "a new file renamed over the old one");
}

fn as_nobody(script: &str) -> std::process::Output {
    Command::new("runuser")
        .args(["-u", "nobody", "--", "sh", "-c", script])
        .output()
        .unwrap()
}

/// Edits the backup's manifest (as root, keeping its mode and owner).
fn edit_manifest(bk: &Path, f: impl Fn(&mut serde_json::Value)) {
    let p = bk.join("manifest.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(&p, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

/// The forged-backup chain of issue 13: backups and the parents the tool creates are 0700
/// whatever the umask (an unprivileged user cannot even reach them); a backup dir or manifest
/// another user owns, or that others may write, is refused (exit 3); a manifest naming a file
/// outside the store (directly, through `..`, through a symlink, or as a set-aside file that
/// is no kubelet checkpoint) is refused and nothing outside is written; set-id bits are never
/// restored, and a file whose owner changed since keeps its owner.
#[test]
fn rollback_refuses_forged_backups_and_writes_nothing_outside_the_store() {
    require_root("runuser and chown");
    let node = small("docker-20.10");
    let to = node.last_target();
    let base = tempfile::tempdir().unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bk = base.path().join("p/q/bk");
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg("umask 000; exec \"$@\"")
        .arg("sh")
        .arg(bin())
        .args(["patch", "--pods"])
        .arg(node.pods())
        .args(node.store_flags())
        .args(["--to", &to, "--backup-dir"])
        .arg(&bk);
    let r = Run::from(cmd.output().unwrap());
    assert!(r.ok(), "{r:?}");
    for d in ["p", "p/q", "p/q/bk"] {
        let m = std::fs::metadata(base.path().join(d)).unwrap().mode() & 0o7777;
        assert_eq!(m, 0o700, "{d}: mode {m:o} under umask 000");
    }
    let out = as_nobody(&format!("echo forged > {}/manifest.json", bk.display()));
    assert!(!out.status.success(), "nobody must not reach the backup");
    let patched = node.snapshot();
    let manifest = std::fs::read(bk.join("manifest.json")).unwrap();
    let refused = |case: &str, want: &str| {
        let r = node.rollback(&bk, false);
        assert_eq!(r.code, Some(3), "{case}: {r:?}");
        assert!(
            r.stderr.contains(want),
            "{case}: want {want:?}: {}",
            r.stderr
        );
        assert!(node.snapshot().diff(&patched).is_empty(), "{case}: store");
    };

    // a backup dir another user owns
    std::os::unix::fs::chown(&bk, Some(65534), Some(65534)).unwrap();
    refused("dir owned by nobody", "owned by uid 65534");
    std::os::unix::fs::chown(&bk, Some(0), Some(0)).unwrap();
    // nobody swaps the manifest in a dir others may write
    for d in ["p", "p/q"] {
        std::fs::set_permissions(base.path().join(d), std::fs::Permissions::from_mode(0o755))
            .unwrap();
    }
    std::fs::set_permissions(&bk, std::fs::Permissions::from_mode(0o777)).unwrap();
    refused("dir writable by others", "writable by group or others");
    let b = bk.display();
    let out = as_nobody(&format!(
        "cat {b}/report.json > {b}/m 2>/dev/null; cp /dev/null {b}/m && mv -f {b}/m {b}/manifest.json"
    ));
    assert!(out.status.success(), "{out:?}");
    std::fs::set_permissions(&bk, std::fs::Permissions::from_mode(0o700)).unwrap();
    refused("manifest swapped by nobody", "owned by uid 65534");
    std::fs::remove_file(bk.join("manifest.json")).unwrap();
    std::fs::write(bk.join("manifest.json"), &manifest).unwrap();
    std::fs::set_permissions(
        bk.join("manifest.json"),
        std::fs::Permissions::from_mode(0o620),
    )
    .unwrap();
    refused("manifest group-writable", "writable by group or others");
    std::fs::set_permissions(
        bk.join("manifest.json"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();

    // paths outside the store: a victim holding exactly the patched bytes of entry 0, so only
    // the path check stands between it and the original bytes
    let v: serde_json::Value = serde_json::from_slice(&manifest).unwrap();
    let first = PathBuf::from(v["entries"][0]["path"].as_str().unwrap());
    let outside = node.dir.join("outside");
    std::fs::create_dir(&outside).unwrap();
    let victim = outside.join("config.v2.json");
    let patched_bytes = std::fs::read(&first).unwrap();
    std::fs::write(&victim, &patched_bytes).unwrap();
    let root = node.store_root();
    std::os::unix::fs::symlink(&outside, root.join("evil")).unwrap();
    let patched = node.snapshot();
    let dotdot = root.join("../../../outside/config.v2.json");
    let cases: Vec<(&str, PathBuf, bool, &str)> = vec![
        (
            "outside the root",
            victim.clone(),
            false,
            "outside the store root",
        ),
        ("through ..", dotdot, false, "plain names"),
        (
            "through a symlink",
            root.join("evil/config.v2.json"),
            false,
            "symbolic link",
        ),
        (
            "set aside, not a checkpoint",
            victim.clone(),
            true,
            "none of the files",
        ),
    ];
    for (case, path, set_aside, want) in cases {
        let p = path.display().to_string();
        edit_manifest(&bk, |m| {
            m["entries"][0]["path"] = p.clone().into();
            if set_aside {
                m["entries"][0]["set_aside"] = true.into();
            }
        });
        let r = node.rollback(&bk, false);
        assert_eq!(r.code, Some(3), "{case}: {r:?}");
        assert!(
            r.stderr.contains(want),
            "{case}: want {want:?}: {}",
            r.stderr
        );
        assert_eq!(
            std::fs::read(&victim).unwrap(),
            patched_bytes,
            "{case}: victim"
        );
        assert!(node.snapshot().diff(&patched).is_empty(), "{case}: store");
        std::fs::write(bk.join("manifest.json"), &manifest).unwrap();
    }
    std::fs::remove_file(root.join("evil")).unwrap();

    // `--accept-unrecorded` with a forged `sha256_new: null`: a file whose bytes are neither
    // the original nor what the patch recorded it was about to write is never overwritten,
    // be it the entry's own file (holding the patched bytes) or another file of the store.
    let unrelated = first.with_file_name("hostconfig.json");
    assert!(unrelated.is_file(), "{}", unrelated.display());
    for (case, path) in [
        ("its own file", &first),
        ("an unrelated store file", &unrelated),
    ] {
        let p = path.display().to_string();
        edit_manifest(&bk, |m| {
            m["entries"][0]["path"] = p.clone().into();
            m["entries"][0]["sha256_new"] = serde_json::Value::Null;
        });
        let before = std::fs::read(path).unwrap();
        let r = node.rollback(&bk, true);
        assert_eq!(r.code, Some(3), "accept-unrecorded, {case}: {r:?}");
        assert!(
            r.stderr.contains(&p) && r.stderr.contains("--accept-unrecorded cannot restore it"),
            "accept-unrecorded, {case}: names the file and why: {}",
            r.stderr
        );
        assert_eq!(
            std::fs::read(path).unwrap(),
            before,
            "accept-unrecorded, {case}: not overwritten"
        );
        assert!(
            node.snapshot().diff(&patched).is_empty(),
            "accept-unrecorded, {case}: store"
        );
        std::fs::write(bk.join("manifest.json"), &manifest).unwrap();
    }

    // set-id bits never come back; a file whose owner changed since keeps its owner
    let second = PathBuf::from(v["entries"][1]["path"].as_str().unwrap());
    std::os::unix::fs::chown(&second, Some(1234), Some(1234)).unwrap();
    std::fs::set_permissions(&second, std::fs::Permissions::from_mode(0o640)).unwrap();
    edit_manifest(&bk, |m| {
        m["entries"][0]["mode"] = 0o6755.into();
        m["entries"][1]["mode"] = 0o4777.into();
    });
    let r = node.rollback(&bk, false);
    assert_eq!(r.code, Some(0), "{r:?}");
    let m = std::fs::metadata(&first).unwrap();
    assert_eq!((m.mode() & 0o7777, m.uid()), (0o755, 0), "no set-id bits");
    let m = std::fs::metadata(&second).unwrap();
    assert_eq!(
        (m.mode() & 0o7777, m.uid(), m.gid()),
        (0o640, 1234, 1234),
        "owner changed since: mode and owner kept"
    );
    let pristine = small("docker-20.10").capture();
    for p in [&first, &second] {
        let rel = p.strip_prefix(&node.dir).unwrap();
        assert_eq!(&std::fs::read(p).unwrap(), &pristine[rel], "bytes restored");
    }
}

/// An unprivileged run (the demo, an operator's copy of a store) cannot create
/// `/run/kubelet-rehash` or `/var/lib/kubelet-rehash`: it keeps its lock files and in-flight
/// markers in directories of its own user's instead (`/tmp/kubelet-rehash-<uid>/locks` and
/// `…/inflight` without `$XDG_RUNTIME_DIR` / `$XDG_STATE_HOME`), private, and patches.
#[test]
fn an_unprivileged_patch_locks_in_its_own_users_directory() {
    require_root("runuser and chown");
    let node = small("docker-20.10");
    let to = node.last_target();
    let base = node.dir.parent().unwrap().to_path_buf();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
    // the test binary's own directory need not be reachable by nobody: run a copy
    let exe = base.join("kubelet-rehash");
    std::fs::copy(bin(), &exe).unwrap();
    std::fs::create_dir_all(node.dir.join("var/lib/kubelet")).unwrap();
    let st = Command::new("chown")
        .args(["-R", "nobody:nogroup"])
        .arg(&node.dir)
        .status()
        .unwrap();
    assert!(st.success(), "chown -R nobody {}", node.dir.display());
    let locks = Path::new("/tmp/kubelet-rehash-65534");
    let _ = std::fs::remove_dir_all(locks);
    let out = Command::new("runuser")
        .args(["-u", "nobody", "--", "env", "-u", "XDG_RUNTIME_DIR", "-u"])
        .arg(storepatch::lock::LOCK_DIR_ENV)
        .args(["-u", "XDG_STATE_HOME", "-u"])
        .arg(storepatch::inflight::STATE_DIR_ENV)
        .arg(&exe)
        .args(["patch", "--pods"])
        .arg(node.pods())
        .args(node.store_flags())
        // its own kubelet directory: the host's /var/lib/kubelet holds whatever a real-node
        // lab's kubelet wrote there (device-plugins/kubelet_internal_checkpoint, root's 0600)
        .arg("--kubelet-dir")
        .arg(node.dir.join("var/lib/kubelet"))
        .args(["--to", &to, "--backup-dir"])
        .arg(node.dir.join("bk"))
        .output()
        .unwrap();
    let r = Run::from(out);
    assert!(r.ok(), "an unprivileged patch of its own copy: {r:?}");
    let dir = locks.join("locks");
    let m = std::fs::metadata(&dir).expect("the per-user lock directory exists");
    assert_eq!(
        (m.uid(), m.mode() & 0o7777),
        (65534, 0o700),
        "the per-user lock directory is nobody's and private"
    );
    let files: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(files.len(), 1, "one lock file, for the one store");
    // its in-flight marker went beside the locks, and went away when the patch finished
    let state = locks.join("inflight");
    let m = std::fs::metadata(&state).expect("the per-user state directory exists");
    assert_eq!(
        (m.uid(), m.mode() & 0o7777),
        (65534, 0o700),
        "the per-user state directory is nobody's and private"
    );
    let left: Vec<_> = std::fs::read_dir(&state).unwrap().collect();
    assert!(
        left.is_empty(),
        "the finished patch removed its marker: {left:?}"
    );
    std::fs::remove_dir_all(locks).unwrap();
}

/// A backup is only as safe as the directories above it: one that others may write without
/// the sticky bit lets them rename the backup directory away and put another in its place
/// (nobody does it here). `rollback` refuses such a backup (exit 3, naming the directory),
/// whichever ancestor it is, and restores nothing; with the sticky bit (as /tmp has) nobody
/// can no longer rename it, and the rollback works.
#[test]
fn rollback_refuses_a_backup_below_a_directory_others_may_write() {
    require_root("runuser");
    let node = small("docker-20.10");
    let to = node.last_target();
    let base = tempfile::tempdir().unwrap();
    let set_mode =
        |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    set_mode(base.path(), 0o755);
    let (p, q) = (base.path().join("p"), base.path().join("p/q"));
    let bk = q.join("bk");
    let r = node.patch(&to, &bk);
    assert!(r.ok(), "{r:?}");
    let patched = node.snapshot();
    for (open, what) in [(&p, "two levels up"), (&q, "the parent")] {
        set_mode(&p, 0o755);
        set_mode(&q, 0o755);
        set_mode(open, 0o777);
        // what makes it untrusted: nobody can move the backup directory away
        let moved = q.join("moved");
        let out = as_nobody(&format!(
            "mv {} {}",
            q.join("bk").display(),
            moved.display()
        ));
        if open == &q {
            assert!(
                out.status.success(),
                "nobody renames in a 0777 dir: {out:?}"
            );
            std::fs::rename(&moved, &bk).unwrap();
        }
        let r = node.rollback(&bk, false);
        assert_eq!(r.code, Some(3), "{what} writable by others: {r:?}");
        assert!(
            r.stderr.contains(&open.display().to_string())
                && r.stderr
                    .contains("writable by others without the sticky bit"),
            "{what}: names the directory: {}",
            r.stderr
        );
        assert!(node.snapshot().diff(&patched).is_empty(), "{what}: store");
    }
    // sticky, like /tmp: nobody cannot rename root's backup, and the rollback works
    set_mode(&p, 0o755);
    set_mode(&q, 0o1777);
    let out = as_nobody(&format!(
        "mv {} {}",
        bk.display(),
        q.join("moved").display()
    ));
    assert!(
        !out.status.success(),
        "the sticky bit stops nobody: {out:?}"
    );
    let r = node.rollback(&bk, false);
    assert_eq!(r.code, Some(0), "a sticky parent is trusted: {r:?}");
    let pristine = small("docker-20.10").snapshot();
    assert!(node.snapshot().diff(&pristine).is_empty(), "restored");
}
