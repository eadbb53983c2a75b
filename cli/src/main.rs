//! `kubelet-rehash`: upgrade a node's kubelet across minor versions without restarting its
//! containers. A thin layer over `hashcompat` (the kubelet's hash, per version) and
//! `storepatch` (the runtimes' stores).

mod hash_cmd;

use clap::{Parser, Subcommand};
use hashcompat::KubeletVersion;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

/// Exit codes, fixed: see `--help`.
pub mod exit {
    pub const OK: u8 = 0;
    pub const FAILURE: u8 = 1;
    pub const USAGE: u8 = 2;
    pub const REFUSED: u8 = 3;
    pub const INCOMPLETE: u8 = 4;
}

const EXIT_CODES_HELP: &str = "Exit codes:
  0  done / verified
  1  unexpected failure (or, for `hash`, some input could not be hashed)
  2  usage error (bad flags, unknown or backwards versions, unreadable pods file)
  3  refused: runtime running, pre-check failed, store changed since the backup
  4  finished, but some containers are unproven and will restart (plan/patch),
     or verification failed (verify)";

#[derive(Parser)]
#[command(
    name = "kubelet-rehash",
    version,
    about = "Upgrade a node's kubelet across minor versions (1.8–1.36) without restarting its containers",
    long_about = "Upgrade a node's kubelet across minor versions (1.8–1.36) without restarting its containers.\n\nThe kubelet stores a hash of every container's spec in the container runtime, and restarts any container whose hash it computes differently. A newer kubelet computes different hashes, so an upgrade restarts every container of the node. kubelet-rehash computes each container's hash exactly as the target kubelet will, proves that the stored hash is what the current kubelet computed, and rewrites it in the stopped runtime's store, with backups and byte-exact rollback.",
    after_help = EXIT_CODES_HELP
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compute the kubelet's container hash for specs (JSON Lines of {"id","container"}, a Pod,
    /// a PodList/List or a bare container) and write JSON Lines {"id","version","hash"}.
    #[command(after_help = EXIT_CODES_HELP)]
    Hash {
        /// Kubelet version (1.14, v1.14.3, 1.14.3-eks-abc), repeatable, or `all`.
        #[arg(long = "kubelet-version", short = 'k', required = true)]
        kubelet_version: Vec<String>,
        /// Print the exact hashed text (and JSON) instead, for one version.
        #[arg(long)]
        explain: bool,
        /// Input file; standard input when absent or `-`.
        file: Option<PathBuf>,
    },
    /// List the supported kubelet versions and their hash algorithms.
    Versions {
        /// Output format.
        #[arg(short = 'o', long, default_value = "table")]
        output: String,
    },
}

fn read_input(file: &Option<PathBuf>) -> Result<Vec<u8>, String> {
    match file {
        Some(p) if p.as_os_str() != "-" => {
            std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()))
        }
        _ => {
            let mut buf = Vec::new();
            std::io::stdin()
                .read_to_end(&mut buf)
                .map_err(|e| format!("cannot read standard input: {e}"))?;
            Ok(buf)
        }
    }
}

fn parse_versions(args: &[String]) -> Result<Vec<KubeletVersion>, String> {
    let mut out = Vec::new();
    for a in args {
        for part in a.split(',') {
            if part.trim() == "all" {
                out.extend(KubeletVersion::all());
            } else {
                out.push(part.parse::<KubeletVersion>().map_err(|e| e.to_string())?);
            }
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

fn usage_error(msg: &str) -> ExitCode {
    eprintln!("kubelet-rehash: {msg}");
    ExitCode::from(exit::USAGE)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let code = match cli.command {
        Command::Hash {
            kubelet_version,
            explain,
            file,
        } => {
            let versions = match parse_versions(&kubelet_version) {
                Ok(v) => v,
                Err(e) => return usage_error(&e),
            };
            let input = match read_input(&file) {
                Ok(i) => i,
                Err(e) => return usage_error(&e),
            };
            let result = if explain {
                if versions.len() != 1 {
                    return usage_error("--explain takes exactly one --kubelet-version");
                }
                hash_cmd::explain(&input, versions[0], &mut out)
            } else {
                hash_cmd::run(&input, &versions, &mut out)
            };
            match result {
                Ok(true) => exit::OK,
                Ok(false) => exit::FAILURE,
                Err(e) => {
                    eprintln!("kubelet-rehash: cannot write output: {e}");
                    exit::FAILURE
                }
            }
        }
        Command::Versions { output } => {
            let rows = hashcompat::versions();
            let r = if output == "json" {
                serde_json::to_writer_pretty(&mut out, &rows)
                    .map_err(std::io::Error::other)
                    .and_then(|_| writeln!(out))
            } else {
                (|| {
                    writeln!(
                        out,
                        "{:<8} {:<24} {:<6} ALGORITHM",
                        "VERSION", "FORM", "CLASS"
                    )?;
                    for r in &rows {
                        writeln!(
                            out,
                            "{:<8} {:<24} {:<6} {}",
                            r.version.to_string(),
                            format!("{:?}", r.form),
                            r.equivalence_class,
                            r.description
                        )?;
                    }
                    Ok(())
                })()
            };
            if r.is_err() {
                exit::FAILURE
            } else {
                exit::OK
            }
        }
    };
    let _ = out.flush();
    ExitCode::from(code)
}
