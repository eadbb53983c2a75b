//! The harnesses reap every container process they started, also one whose shim died and
//! that init inherited (issue 35: `sh -c 'while true; do sleep …'` processes with parent 1
//! were left after failed runs). What they all rely on is [`rmdir_tree`]: whatever is still
//! in a harness's own cgroup tree is killed before the tree is removed.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use testtools::containerd::{cgroup_tree_pids, rmdir_tree};

fn parent_of(pid: u32) -> Option<u32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 2..].split(' ').nth(1)?.parse().ok()
}

#[test]
fn an_orphaned_container_loop_in_a_harness_cgroup_is_killed_and_the_cgroup_removed() {
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "creating cgroups needs root (CI runs as root)"
    );
    let top = format!("kubelet-rehash-reap-test-{}", std::process::id());
    let pids_top = Path::new("/sys/fs/cgroup/pids").join(&top);
    let pod = pids_top.join("pod-1");
    fs::create_dir_all(&pod).unwrap();
    // A container's loop whose parent exits at once: init inherits it, as when a shim dies.
    let t = tempfile::tempdir().unwrap();
    let pidfile = t.path().join("loop.pid");
    let script = format!(
        "sh -c 'echo $$ > {pod}/cgroup.procs; while true; do sleep 1; done' >/dev/null 2>&1 & echo $! > {pf}",
        pod = pod.display(),
        pf = pidfile.display()
    );
    assert!(Command::new("sh")
        .arg("-c")
        .arg(&script)
        .status()
        .unwrap()
        .success());
    let looping: u32 = fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cgroup_tree_pids(&pids_top).contains(&looping) {
        assert!(
            Instant::now() < deadline,
            "the loop never joined its cgroup"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_ne!(
        parent_of(looping),
        Some(std::process::id()),
        "the loop is an orphan, not the test's child"
    );

    rmdir_tree(&pids_top);

    let deadline = Instant::now() + Duration::from_secs(10);
    while Path::new(&format!("/proc/{looping}")).exists()
        && !fs::read_to_string(format!("/proc/{looping}/stat")).is_ok_and(|s| s.contains(") Z"))
    {
        assert!(
            Instant::now() < deadline,
            "the orphaned loop {looping} still runs after its harness cgroup was removed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !pids_top.exists(),
        "the harness cgroup tree is removed once its processes are gone"
    );
}
