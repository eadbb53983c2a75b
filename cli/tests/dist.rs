//! What ships beside the binary: `--version` names the kubelet range and the runtimes of the
//! bundled nodes, `completions SHELL` and the hidden `man DIR` work. Runs on release artifacts
//! too (scripts/test-release.sh, through `under_test`).

mod under_test;

use testtools::fixtures_dir;
use under_test::kubelet_rehash;

fn stdout_of(args: &[&str]) -> String {
    let out = kubelet_rehash()
        .args(args)
        .output()
        .expect("the binary runs");
    assert!(
        out.status.success(),
        "{args:?} exits 0: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// Every bundled node's directory name and the runtime and version it recorded, read here
/// independently of build.rs (CRI `Version` fields, or the Docker Engine component).
fn bundled_runtimes() -> Vec<(String, String, String)> {
    let mut nodes = Vec::new();
    for e in std::fs::read_dir(fixtures_dir().join("nodes")).unwrap() {
        let dir = e.unwrap().path();
        let Ok(text) = std::fs::read_to_string(dir.join("expected.json")) else {
            continue;
        };
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let r = &v["runtime"];
        let (name, version) = match r["runtime_name"].as_str() {
            Some(name) => (
                name.to_owned(),
                r["runtime_version"].as_str().unwrap().to_owned(),
            ),
            None => (
                "docker".to_owned(),
                r["Version"].as_str().unwrap().to_owned(),
            ),
        };
        let node = dir.file_name().unwrap().to_str().unwrap().to_owned();
        nodes.push((node, name, version));
    }
    nodes.sort();
    nodes
}

#[test]
fn version_names_the_kubelet_range_and_every_bundled_runtime() {
    let text = stdout_of(&["--version"]);
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some(format!("kubelet-rehash {}", env!("CARGO_PKG_VERSION")).as_str())
    );
    let rows: Vec<serde_json::Value> =
        serde_json::from_str(&stdout_of(&["versions", "-o", "json"])).unwrap();
    let (first, last) = (&rows[0]["version"], &rows[rows.len() - 1]["version"]);
    let range = format!(
        "kubelet versions: {}–{} ({} minor versions;",
        first.as_str().unwrap(),
        last.as_str().unwrap(),
        rows.len()
    );
    assert!(text.contains(&range), "{range:?} in {text}");
    let nodes = bundled_runtimes();
    assert!(
        nodes.len() >= 4,
        "the four bundled nodes at least: {nodes:?}"
    );
    let runtime_lines: Vec<&str> = text.lines().filter(|l| l.starts_with("  ")).collect();
    assert_eq!(
        runtime_lines.len(),
        nodes.len(),
        "one line per node: {text}"
    );
    for (node, runtime, version) in &nodes {
        let want = format!("  {runtime} {version} (node {node}: kubelet ");
        assert!(
            runtime_lines.iter().any(|l| l.starts_with(&want)),
            "{want:?} in {text}"
        );
    }
}

#[test]
fn completions_for_bash_zsh_and_fish_name_every_subcommand() {
    for shell in ["bash", "zsh", "fish"] {
        let script = stdout_of(&["completions", shell]);
        for sub in [
            "plan", "patch", "verify", "rollback", "upgrade", "guard", "hash", "versions",
        ] {
            assert!(script.contains(sub), "{shell} completions name {sub}");
        }
        assert!(
            script.contains("backup-dir") && script.contains("kubelet-version"),
            "{shell} completions name the subcommands' flags"
        );
    }
    let out = kubelet_rehash()
        .args(["completions", "cmd.exe"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
}

#[test]
fn man_writes_one_page_per_visible_command_and_stays_out_of_help() {
    let dir = tempfile::tempdir().unwrap();
    let out = kubelet_rehash()
        .arg("man")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut pages: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    pages.sort();
    let want: Vec<&str> = vec![
        "kubelet-rehash-completions.1",
        "kubelet-rehash-guard.1",
        "kubelet-rehash-hash.1",
        "kubelet-rehash-patch.1",
        "kubelet-rehash-plan.1",
        "kubelet-rehash-pods.1",
        "kubelet-rehash-rollback.1",
        "kubelet-rehash-upgrade.1",
        "kubelet-rehash-verify.1",
        "kubelet-rehash-versions.1",
        "kubelet-rehash.1",
    ];
    assert_eq!(pages, want);
    let main = std::fs::read_to_string(dir.path().join("kubelet-rehash.1")).unwrap();
    assert!(
        main.contains(".TH kubelet-rehash 1"),
        "a section-1 page: {main}"
    );
    assert!(
        main.contains("Exit codes"),
        "the exit codes are in the page"
    );
    let plan = std::fs::read_to_string(dir.path().join("kubelet-rehash-plan.1")).unwrap();
    assert!(
        plan.contains("\\-\\-pods") || plan.contains("--pods"),
        "{plan}"
    );
    let help = stdout_of(&["--help"]);
    assert!(
        !help.contains("  man "),
        "man is for packagers, not in --help: {help}"
    );
}
