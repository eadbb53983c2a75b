//! A FIFO, socket or device in place of a store file is refused at once, never opened for a
//! blocking read (issue 35, defect 3): a FIFO as a Docker `config.v2.json` or a CRI-O
//! `config.json` hung `plan`, `patch` and the `upgrade` preflight forever, with no message,
//! since opening a FIFO for reading waits for a writer.

mod rel_common;
mod under_test;

use rel_common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

fn first_named(dir: &Path, name: &str) -> PathBuf {
    walkdir::WalkDir::new(dir)
        .sort_by_file_name()
        .into_iter()
        .filter_map(Result::ok)
        .find(|e| e.file_name() == name && e.file_type().is_file())
        .unwrap_or_else(|| panic!("no {name} under {}", dir.display()))
        .into_path()
}

fn mkfifo(p: &Path) {
    std::fs::remove_file(p).unwrap();
    let c = std::ffi::CString::new(p.display().to_string()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(
        unsafe { libc::mkfifo(c.as_ptr(), 0o600) },
        0,
        "mkfifo {}",
        p.display()
    );
}

/// `kubelet-rehash <verb>` on the node, killed after 60 s (a hang is exit 137 then).
fn within_a_minute(node: &Node, verb: &str, extra: &[String]) -> Run {
    Run::from(
        Command::new("timeout")
            .args(["-s", "KILL", "60", bin(), verb, "--pods"])
            .arg(node.pods())
            .args(node.store_flags())
            .args(["--to", &node.last_target()])
            .args(extra)
            .output()
            .unwrap(),
    )
}

/// The FIFO is a record that cannot be read: named with why, never opened for a blocking
/// read, never touched (the project's rule for undecodable records: plan and patch go on with
/// the others and exit 4, since the runtime may drop that record).
fn fifo_is_refused(fixture: &str, file: &str) {
    use std::os::unix::fs::FileTypeExt;
    let node = small(fixture);
    let victim = first_named(&node.store_root(), file);
    mkfifo(&victim);
    let before = node.snapshot();
    for verb in ["plan", "patch"] {
        let backup = node.dir.join(format!("backup-{verb}"));
        let extra = if verb == "patch" {
            vec!["--backup-dir".to_string(), backup.display().to_string()]
        } else {
            vec![]
        };
        let r = within_a_minute(&node, verb, &extra);
        assert_ne!(
            r.code, None,
            "{fixture}: {verb} with a FIFO as {file} hung (killed): {r:?}"
        );
        assert_eq!(
            r.code,
            Some(4),
            "{fixture}: {verb}: an unreadable record is reported: {r:?}"
        );
        let said = format!("{}{}", r.stdout, r.stderr);
        assert!(
            said.contains(&format!("{}: is not a regular file", victim.display()))
                && said.contains("never touched"),
            "{fixture}: {verb}: the plan names the file and why: {said}"
        );
        assert!(
            std::fs::symlink_metadata(&victim)
                .unwrap()
                .file_type()
                .is_fifo(),
            "{fixture}: {verb}: the FIFO is left as it is"
        );
        if verb == "plan" {
            assert!(
                node.snapshot().diff(&before).is_empty(),
                "{fixture}: plan changed the store"
            );
        }
    }
}

#[test]
fn a_fifo_as_a_docker_config_v2_json_is_refused_at_once() {
    fifo_is_refused("docker-20.10", "config.v2.json");
}

#[test]
fn a_fifo_as_a_crio_config_json_is_refused_at_once() {
    fifo_is_refused("crio-1.30", "config.json");
}
