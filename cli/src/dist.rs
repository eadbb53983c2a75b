//! What ships beside the binary, generated from the same clap definitions it parses with: the
//! `--version` text, shell completions and the man pages (`scripts/release.sh` packs them).

use hashcompat::KubeletVersion;
use std::io::Write;
use std::path::Path;
use std::sync::OnceLock;

/// One bundled real node of `fixtures/nodes/` (read by build.rs): the runtime that wrote its
/// store, and the kubelet upgrades the tests plan on it.
struct TestedNode {
    node: &'static str,
    runtime: &'static str,
    version: &'static str,
    from: &'static str,
    targets: &'static [&'static str],
}

const TESTED_NODES: &[TestedNode] = include!(concat!(env!("OUT_DIR"), "/tested_nodes.rs"));

/// `--version`: the tool, the kubelet range it hashes (hashcompat's embedded versions) and the
/// runtimes whose real stores the tests plan and patch (the bundled nodes).
pub fn long_version() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        let all = KubeletVersion::all();
        let mut s = format!(
            "{}\nkubelet versions: {}–{} ({} minor versions; `kubelet-rehash versions` lists them)\ntested against the real stores of (fixtures/nodes):",
            env!("CARGO_PKG_VERSION"),
            KubeletVersion::oldest(),
            KubeletVersion::newest(),
            all.len(),
        );
        for n in TESTED_NODES {
            s.push_str(&format!(
                "\n  {} {} (node {}: kubelet {} -> {})",
                n.runtime,
                n.version,
                n.node,
                n.from,
                n.targets.join(", ")
            ));
        }
        s
    })
}

/// The completion script for `shell`.
pub fn completions(
    shell: clap_complete::Shell,
    mut cmd: clap::Command,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let name = cmd.get_name().to_owned();
    // clap_complete panics on a failed write; a buffer cannot fail, and a closed stdout then
    // becomes an ordinary output error.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, name, &mut script);
    out.write_all(&script)
}

/// One man page per command into `dir` (`kubelet-rehash.1`, `kubelet-rehash-plan.1`, …, as
/// git and cargo ship theirs): a page per subcommand keeps each SYNOPSIS and OPTIONS readable.
pub fn man_pages(cmd: clap::Command, dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    // roff would run the multi-line `--version` text into one paragraph; the page's VERSION
    // section gets the plain version, and `--version` itself stays the full text.
    let cmd = cmd.long_version(None::<&'static str>);
    clap_mangen::generate_to(cmd, dir)
}
