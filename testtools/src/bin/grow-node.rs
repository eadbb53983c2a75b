//! Grows (or shrinks) a real node to N containers for the scaling runs of
//! scripts/bench-node.sh; see testtools::grow for what a clone changes.
//!
//!   grow-node SRC OUT N [--rebuild]
//!
//! SRC: a scenario directory (pods.json + var/…) or a fixtures/nodes-large archive (.tar.gz);
//! OUT: a new directory; N: containers in the result. `--rebuild`: with N equal to the node's
//! count, still bulk-write the store as a grown one is written. Prints the report's counts.

use std::path::Path;
use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rebuild = args.iter().any(|a| a == "--rebuild");
    let pos: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let (Some(src), Some(out), Some(n), None) = (pos.first(), pos.get(1), pos.get(2), pos.get(3))
    else {
        eprintln!("usage: grow-node SRC OUT N [--rebuild]");
        return ExitCode::from(2);
    };
    let Ok(n) = n.parse::<usize>() else {
        eprintln!("grow-node: N must be a number of containers, not {n:?}");
        return ExitCode::from(2);
    };
    let tmp;
    let src = if src.ends_with(".tar.gz") {
        tmp = tempfile::tempdir().expect("a temp dir");
        let st = Command::new("tar")
            .arg("-xzf")
            .arg(src)
            .arg("-C")
            .arg(tmp.path())
            .status()
            .expect("tar");
        if !st.success() {
            eprintln!("grow-node: tar -xzf {src} failed");
            return ExitCode::FAILURE;
        }
        tmp.path().to_path_buf()
    } else {
        Path::new(src).to_path_buf()
    };
    let t = std::time::Instant::now();
    match testtools::grow::grow_node(&src, Path::new(out), n, rebuild) {
        Ok(r) => {
            println!(
                "grew {} containers to {} ({} sandboxes, {} pods in pods.json; {} pods cloned, {} dropped) in {:.1} s",
                r.containers_before,
                r.containers,
                r.sandboxes,
                r.pods,
                r.clones.len(),
                r.dropped_pods,
                t.elapsed().as_secs_f64()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("grow-node: {e}");
            ExitCode::FAILURE
        }
    }
}
