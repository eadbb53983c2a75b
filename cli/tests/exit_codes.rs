//! Every exit code of the README's table ("Exit codes (fixed)"), per subcommand, through the
//! binary: one row per (subcommand, code) path, each on a fresh copy of a bundled node, the
//! message fragment that says why, and the store's bytes unchanged by every run that does not
//! exit 0 or 4. A path the table does not list must not exist, and one it lists must have a row
//! here (checked at the end).
//!
//! 0 done / verified · 1 unexpected failure (an I/O error, a store file that is not what the
//! runtime writes) · 2 usage (flags, versions, pods file, store root, a `--runtime` the root
//! contradicts) · 3 refused (runtime running, untrusted or foreign backup, no proof) · 4
//! finished with unproven containers / verification failed / restarts not accepted.
//! `upgrade`'s 0 needs real daemons: `upgrade_live.rs`; its other codes are here.

mod rel_common;
mod under_test;

use rel_common::*;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The node's flags with `--runtime` replaced by `runtime`.
fn with_runtime(node: &Node, runtime: &str) -> Vec<String> {
    let mut f = node.store_flags();
    let i = f.iter().position(|a| a == "--runtime").unwrap();
    f[i + 1] = runtime.into();
    f
}

/// Both meta pages zeroed: no valid meta page, not a bolt file containerd wrote.
fn damage_meta_db(node: &Node) {
    let p = node.meta_db();
    let mut b = std::fs::read(&p).unwrap();
    b[..8192].fill(0);
    std::fs::write(&p, b).unwrap();
}

/// The node without the pod of its one container whose spec really changed (its container
/// becomes an orphan, which the kubelet removes, not restarts): its plans exit 0.
fn without_changed_pod(node: Node) -> Node {
    let p = node.pods();
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    let items = v["items"].as_array_mut().unwrap();
    let n = items.len();
    items.retain(|p| p["metadata"]["name"] != "apache");
    assert_eq!(items.len(), n - 1, "the fixture has pod default/apache");
    std::fs::write(&p, serde_json::to_vec(&v).unwrap()).unwrap();
    node
}

/// Something accepts connections on the node's runtime socket (the runtime "runs").
fn listen(node: &Node) -> std::os::unix::net::UnixListener {
    let sock = node.socket();
    std::fs::create_dir_all(sock.parent().unwrap()).unwrap();
    std::os::unix::net::UnixListener::bind(&sock).unwrap()
}

fn run(mut c: Command) -> Run {
    Run::from(
        c.env_remove("KUBELET_REHASH_CRASH_AT")
            .env_remove("KUBELET_REHASH_HOST_ROOT")
            .output()
            .unwrap(),
    )
}

fn verify_cmd(node: &Node, to: &str) -> Command {
    let mut c = node.cmd("verify");
    c.args(["--to", to]);
    c
}

fn rollback_cmd(bk: &Path, flags: Vec<String>) -> Command {
    let mut c = Command::new(bin());
    c.arg("rollback").arg("--backup-dir").arg(bk).args(flags);
    c
}

/// A fresh copy of `name` patched to its last target, with the backup in `<tmp>/bk`.
fn patched(name: &str) -> (Node, PathBuf) {
    let node = small(name);
    let bk = node.dir.parent().unwrap().join("bk");
    let r = node.patch(&node.last_target(), &bk);
    assert!(r.ok(), "{name}: patch: {r:?}");
    (node, bk)
}

struct Row {
    sub: &'static str,
    code: i32,
    what: &'static str,
    want: &'static str,
}

/// Runs one row's command against `node`: the code and message must be the row's, and the
/// store unchanged unless the row is a plan or verify (never write) or its code is 0 or 4.
fn check_row(row: &Row, node: &Node, cmd: Command) {
    let before = node.snapshot();
    let r = run(cmd);
    let case = format!("{} exit {} ({})", row.sub, row.code, row.what);
    assert_eq!(r.signal, None, "{case}: killed by a signal: {r:?}");
    assert_eq!(r.code, Some(row.code), "{case}: {r:?}");
    let text = format!("{}{}", r.stdout, r.stderr);
    assert!(
        text.contains(row.want),
        "{case}: want {:?} in the output: {r:?}",
        row.want
    );
    if !matches!(row.code, 0 | 4) || row.sub == "plan" || row.sub == "verify" {
        assert!(
            node.snapshot().diff(&before).is_empty(),
            "{case}: the store changed"
        );
    }
    eprintln!("{case}: ok");
}

#[test]
fn every_exit_code_path_of_every_subcommand() {
    let mut covered = BTreeSet::new();
    let mut row = |sub: &'static str,
                   code: i32,
                   what: &'static str,
                   want: &'static str,
                   node: &Node,
                   cmd: Command| {
        let r = Row {
            sub,
            code,
            what,
            want,
        };
        check_row(&r, node, cmd);
        covered.insert((sub, code));
    };

    // ---- plan -------------------------------------------------------------------------
    let n = without_changed_pod(small("containerd-1.6"));
    let mut c = n.cmd("plan");
    c.args(["--to", "1.31"]);
    row("plan", 0, "every container proven", "rewrite", &n, c);
    let n = small("containerd-1.7");
    let mut c = n.cmd("plan");
    c.args(["--to", "1.31"]);
    damage_meta_db(&n);
    row("plan", 1, "meta.db is no bolt file", "meta.db", &n, c);
    let n = small("containerd-1.7");
    let mut c = n.cmd("plan");
    c.args(["--to", "9.99"]);
    row("plan", 2, "unknown version", "9.99", &n, c);
    let n = small("containerd-1.7");
    let mut c = Command::new(bin());
    c.args(["plan", "--to", "1.31", "--pods"])
        .arg(fixtures_dir().join("nodes/docker-20.10/pods.json"))
        .args(n.store_flags());
    row(
        "plan",
        3,
        "another node's pods file",
        "another node's pods file",
        &n,
        c,
    );
    let n = small("containerd-1.7");
    let mut c = n.cmd("plan");
    c.args(["--to", "1.31"]);
    row(
        "plan",
        4,
        "a container that really changed",
        "unproven",
        &n,
        c,
    );

    // ---- patch ------------------------------------------------------------------------
    let n = without_changed_pod(small("containerd-1.6"));
    let c = n.patch_cmd("1.31", &n.dir.join("bk"));
    row(
        "patch",
        0,
        "every proven container rewritten",
        "rewrote",
        &n,
        c,
    );
    let n = small("docker-20.10");
    let file = n.dir.join("a-file");
    std::fs::write(&file, b"").unwrap();
    let c = n.patch_cmd(&n.last_target(), &file.join("bk"));
    row(
        "patch",
        1,
        "backup dir below a file (ENOTDIR)",
        "Not a directory",
        &n,
        c,
    );
    let n = small("docker-20.10");
    let mut c = Command::new(bin());
    c.args(["patch", "--pods"])
        .arg(n.pods())
        .args(with_runtime(&n, "containerd"))
        .args(["--to", &n.last_target(), "--backup-dir"])
        .arg(n.dir.join("bk"));
    row(
        "patch",
        2,
        "--runtime the root contradicts",
        "does not match",
        &n,
        c,
    );
    let n = small("docker-20.10");
    let _l = listen(&n);
    let c = n.patch_cmd(&n.last_target(), &n.dir.join("bk"));
    row("patch", 3, "runtime running", "is running", &n, c);
    drop(_l);
    let n = small("containerd-1.7");
    let c = n.patch_cmd("1.31", &n.dir.join("bk"));
    row(
        "patch",
        4,
        "a container that really changed",
        "unproven",
        &n,
        c,
    );

    // ---- verify -----------------------------------------------------------------------
    let (n, _) = patched("containerd-1.7");
    let c = verify_cmd(&n, &n.last_target());
    row("verify", 0, "after the patch", "verified", &n, c);
    let n = small("containerd-1.7");
    damage_meta_db(&n);
    let c = verify_cmd(&n, "1.31");
    row("verify", 1, "meta.db is no bolt file", "meta.db", &n, c);
    for rt in ["docker", "crio"] {
        let n = small("containerd-1.7");
        let mut c = Command::new(bin());
        c.args(["verify", "--to", "1.31", "--pods"])
            .arg(n.pods())
            .args(with_runtime(&n, rt));
        row(
            "verify",
            2,
            "--runtime the root contradicts",
            "does not match",
            &n,
            c,
        );
    }
    let n = small("containerd-1.7");
    let mut c = Command::new(bin());
    c.args(["verify", "--to", "1.31", "--pods"])
        .arg(fixtures_dir().join("nodes/docker-20.10/pods.json"))
        .args(n.store_flags());
    row(
        "verify",
        3,
        "another node's pods file",
        "another node's pods file",
        &n,
        c,
    );
    let n = small("containerd-1.7");
    let c = verify_cmd(&n, "1.31");
    row("verify", 4, "before the patch", "do not hold", &n, c);

    // ---- rollback ---------------------------------------------------------------------
    let (n, bk) = patched("docker-20.10");
    let c = rollback_cmd(&bk, n.store_flags());
    row("rollback", 0, "after a patch", "restored", &n, c);
    let (n, bk) = patched("docker-20.10");
    let c = rollback_cmd(&bk.join("manifest.json").join("x"), n.store_flags());
    row(
        "rollback",
        1,
        "backup dir below a file (ENOTDIR)",
        "Not a directory",
        &n,
        c,
    );
    let (n, bk) = patched("docker-20.10");
    let c = rollback_cmd(&n.dir.join("no-such-backup"), n.store_flags());
    row(
        "rollback",
        2,
        "no such backup dir",
        "no such directory",
        &n,
        c,
    );
    drop(bk);
    let (n, bk) = patched("docker-20.10");
    let c = rollback_cmd(&bk, with_runtime(&n, "containerd"));
    // the manifest names the store: flags naming another are a refusal (README: exit 3)
    row(
        "rollback",
        3,
        "--runtime of another store than the backup's",
        "does not match the backup's runtime docker",
        &n,
        c,
    );
    let (n, bk) = patched("docker-20.10");
    let _l = listen(&n);
    let c = rollback_cmd(&bk, n.store_flags());
    row("rollback", 3, "runtime running", "is running", &n, c);
    drop(_l);

    // ---- upgrade (0 and 4 need containers that run: upgrade_live.rs) ------------------
    let n = small("containerd-1.7");
    let t = n.dir.parent().unwrap().to_path_buf();
    for d in ["no-kubelet-dir", "no-manifests"] {
        std::fs::create_dir_all(t.join(d)).unwrap();
    }
    let upgrade = |n: &Node, to: &str, extra: &[&str]| {
        let mut c = n.cmd("upgrade");
        c.args(["--to", to, "--kubelet-path"])
            .arg(t.join("kubelet"))
            .arg("--state")
            .arg(t.join("state.json"))
            .arg("--backup-dir")
            .arg(t.join("ubk"))
            .arg("--kubelet-dir")
            .arg(t.join("no-kubelet-dir"))
            .arg("--manifests")
            .arg(t.join("no-manifests"));
        for what in [
            "stop-kubelet",
            "start-kubelet",
            "stop-runtime",
            "start-runtime",
        ] {
            c.arg(format!("--{what}"))
                .arg(format!("touch {}/ran-{what}", t.display()));
        }
        c.args(extra);
        c
    };
    let c = upgrade(&n, "9.99", &["--accept-restarts"]);
    row("upgrade", 2, "unknown version", "9.99", &n, c);
    let c = upgrade(&n, "1.31", &["--accept-restarts"]);
    row(
        "upgrade",
        3,
        "preflight refusal",
        "refused, nothing stopped",
        &n,
        c,
    );
    for e in std::fs::read_dir(&t).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        assert!(
            !name.starts_with("ran-"),
            "upgrade ran a service command: {name}"
        );
    }

    // ---- hash, versions ---------------------------------------------------------------
    let spec = fixtures_dir().join("golden/specs.jsonl");
    let first = std::fs::read_to_string(&spec).unwrap();
    let line = first.lines().next().unwrap();
    let container: serde_json::Value = serde_json::from_str(line).unwrap();
    let one = n.dir.join("container.json");
    std::fs::write(&one, container["container"].to_string()).unwrap();
    let mut c = Command::new(bin());
    c.args(["hash", "-k", "1.31"]).arg(&one);
    row("hash", 0, "a container spec", "\"hash\"", &n, c);
    std::fs::write(&one, b"{\"name\": 5}").unwrap();
    let mut c = Command::new(bin());
    c.args(["hash", "-k", "1.31"]).arg(&one);
    row(
        "hash",
        1,
        "a spec that cannot be hashed",
        "cannot decode",
        &n,
        c,
    );
    let mut c = Command::new(bin());
    c.args(["hash", "-k", "0.1"]).arg(&one);
    row("hash", 2, "unknown version", "0.1", &n, c);
    let mut c = Command::new(bin());
    c.arg("versions");
    row("versions", 0, "the version table", "1.31", &n, c);
    let mut c = Command::new(bin());
    c.arg("no-such-subcommand");
    row("cli", 2, "unknown subcommand", "no-such-subcommand", &n, c);

    let want: BTreeSet<(&str, i32)> = [
        ("plan", [0, 1, 2, 3, 4].as_slice()),
        ("patch", &[0, 1, 2, 3, 4]),
        ("verify", &[0, 1, 2, 3, 4]),
        ("rollback", &[0, 1, 2, 3]),
        ("upgrade", &[2, 3]),
        ("hash", &[0, 1, 2]),
        ("versions", &[0]),
        ("cli", &[2]),
    ]
    .into_iter()
    .flat_map(|(s, codes)| codes.iter().map(move |c| (s, *c)))
    .collect();
    assert_eq!(covered, want, "every exit code path has a row");
}
