//! `kubelet-rehash`: upgrade a node's kubelet across minor versions without restarting its
//! containers. A thin layer over `hashcompat` (the kubelet's hash, per version) and
//! `storepatch` (the runtimes' stores).

use clap::{Args, Parser, Subcommand};
use hashcompat::KubeletVersion;
use kubelet_rehash::workflow::{self, Failure, PatchArgs, PlanArgs, StoreArgs, VerifyArgs};
use kubelet_rehash::{exit, hash_cmd};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

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
    /// Show, for every container of the node, what the target kubelet will compute and what
    /// patch would do. Never writes.
    #[command(after_help = EXIT_CODES_HELP)]
    Plan {
        #[command(flatten)]
        plan: PlanFlags,
        /// Output format: table or json.
        #[arg(short = 'o', long, default_value = "table", value_parser = ["table", "json"])]
        output: String,
    },
    /// Plan, refuse while the runtime runs, back up, rewrite every proven hash, verify what was
    /// written, and write the report. Safe to run twice.
    #[command(after_help = EXIT_CODES_HELP)]
    Patch {
        #[command(flatten)]
        plan: PlanFlags,
        /// Where the backup and report go (must not exist or be empty; created 0700).
        /// Default: /var/lib/kubelet-rehash/backups/<runtime>-<unix time>.
        #[arg(long)]
        backup_dir: Option<PathBuf>,
        /// Also write the JSON report here.
        #[arg(long)]
        report: Option<PathBuf>,
        /// Plan only; same as `plan`.
        #[arg(long)]
        dry_run: bool,
        #[arg(short = 'o', long, default_value = "table", value_parser = ["table", "json"])]
        output: String,
    },
    /// Check the result. Offline: every proven container's stored hash equals the target.
    /// With --live: ask the restarted runtime for every rewritten container's hash, state and pid.
    #[command(after_help = EXIT_CODES_HELP)]
    Verify {
        #[command(flatten)]
        plan: PlanFlags,
        /// Ask the running runtime instead of reading its store (needs --report).
        #[arg(long)]
        live: bool,
        /// Runtime API endpoint for --live (unix:///run/containerd/containerd.sock,
        /// unix:///var/run/docker.sock, unix:///var/run/crio/crio.sock).
        #[arg(long)]
        endpoint: Option<String>,
        /// The report `patch` wrote (for --live).
        #[arg(long)]
        report: Option<PathBuf>,
        #[arg(short = 'o', long, default_value = "table", value_parser = ["table", "json"])]
        output: String,
    },
    /// Restore every file of a backup byte for byte (refuses, naming the file, when the store
    /// changed since the patch).
    #[command(after_help = EXIT_CODES_HELP)]
    Rollback {
        #[arg(long)]
        backup_dir: PathBuf,
        #[command(flatten)]
        store: StoreFlags,
        /// Restore a file whose patched sha256 was never recorded (a crash mid-patch) even though
        /// it differs from the original.
        #[arg(long)]
        accept_unrecorded: bool,
        /// Instead of restoring bytes, write the previous hash values back (from the report in
        /// the backup dir), after checking every rewritten container still holds what the patch
        /// wrote. For a store the runtime has written to since (containerd commits to meta.db
        /// at every start).
        #[arg(long)]
        values: bool,
    },
    /// List the supported kubelet versions and their hash algorithms.
    Versions {
        /// Output format.
        #[arg(short = 'o', long, default_value = "table", value_parser = ["table", "json"])]
        output: String,
    },
}

#[derive(Args, Clone)]
struct StoreFlags {
    /// docker, containerd or crio; detected from --root (or the node's default roots) when absent.
    #[arg(long)]
    runtime: Option<String>,
    /// The runtime's root: Docker data-root, containerd root (holding
    /// io.containerd.metadata.v1.bolt/meta.db), or CRI-O graphroot.
    #[arg(long)]
    root: Option<PathBuf>,
    /// The runtime's API socket, for the running check (default: the runtime's usual path).
    #[arg(long)]
    runtime_socket: Option<PathBuf>,
    /// dockerd's (or crio's) pid file, for the running check.
    #[arg(long)]
    runtime_pidfile: Option<PathBuf>,
    /// Docker: whether dockerd runs with --live-restore (overrides daemon.json).
    #[arg(long)]
    live_restore: Option<bool>,
    /// Docker: daemon.json to read live-restore from (default /etc/docker/daemon.json).
    #[arg(long)]
    daemon_json: Option<PathBuf>,
    /// CRI-O: the containers/storage runroot (discovered when absent).
    #[arg(long)]
    runroot: Option<PathBuf>,
}

impl StoreFlags {
    fn args(&self) -> StoreArgs {
        StoreArgs {
            runtime: self.runtime.clone(),
            root: self.root.clone(),
            runtime_socket: self.runtime_socket.clone(),
            runtime_pidfile: self.runtime_pidfile.clone(),
            live_restore: self.live_restore,
            daemon_json: self.daemon_json.clone(),
            runroot: self.runroot.clone(),
        }
    }
}

#[derive(Args, Clone)]
struct PlanFlags {
    /// `kubectl get pods -A --field-selector spec.nodeName=NODE -o json` (PodList, List or Pod),
    /// taken after the control plane was upgraded; `-` for stdin.
    #[arg(long)]
    pods: PathBuf,
    /// The kubelet version the node is upgraded to.
    #[arg(long)]
    to: String,
    /// The node's current kubelet version, or `auto`: found from the stored hashes.
    #[arg(long, default_value = "auto")]
    from: String,
    #[command(flatten)]
    store: StoreFlags,
}

impl PlanFlags {
    fn args(&self) -> PlanArgs {
        PlanArgs {
            pods: self.pods.clone(),
            to: self.to.clone(),
            from: self.from.clone(),
            store: self.store.args(),
        }
    }
}

fn finish(r: Result<u8, Failure>) -> u8 {
    match r {
        Ok(code) => code,
        Err(f) => {
            eprintln!("kubelet-rehash: {}", f.msg);
            f.code
        }
    }
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
        Command::Plan { plan, output } => {
            finish(workflow::cmd_plan(&plan.args(), &output, &mut out))
        }
        Command::Patch {
            plan,
            backup_dir,
            report,
            dry_run,
            output,
        } => finish(workflow::cmd_patch(
            &PatchArgs {
                plan: plan.args(),
                backup_dir,
                report,
                dry_run,
            },
            &output,
            &mut out,
        )),
        Command::Verify {
            plan,
            live,
            endpoint,
            report,
            output,
        } => finish(workflow::cmd_verify(
            &VerifyArgs {
                plan: plan.args(),
                live,
                endpoint,
                report,
            },
            &output,
            &mut out,
        )),
        Command::Rollback {
            backup_dir,
            store,
            accept_unrecorded,
            values,
        } => finish(workflow::cmd_rollback(
            &backup_dir,
            &store.args(),
            accept_unrecorded,
            values,
            &mut out,
        )),
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
