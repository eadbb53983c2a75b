//! `kubelet-rehash guard`: the status guard (crate `statusguard`) run from the operator's side
//! for the nodes in a window: it serves the webhook, registers it with the operator's
//! kubeconfig, and removes it when its time is up, at SIGINT/SIGTERM, or with `--remove` after
//! a run that was killed.

use crate::{exit, Done, Failure};
use clap::Args;
use nodeapi::{Kubeconfig, NodeApi, Options};
use serde_json::{json, Value};
use statusguard::server::{certificates, Server};
use statusguard::webhook::{valid_node_name, Registration, DEFAULT_NAME, MANAGED_BY};
use statusguard::{Action, Guard};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

#[derive(Args)]
pub(crate) struct GuardFlags {
    /// An administrator's kubeconfig: registering a webhook takes the operator's rights (a
    /// node's own identity cannot).
    #[arg(long)]
    kubeconfig: PathBuf,
    /// A node whose kubelet restarts while the guard runs (repeatable); updates from any other
    /// identity pass untouched.
    #[arg(long = "node", value_name = "NAME", required_unless_present = "remove")]
    nodes: Vec<String>,
    /// Where the guard listens; the API server must reach it there.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:0")]
    listen: String,
    /// The URL the API server calls (default: https://<the address listened on>/mutate).
    #[arg(long)]
    url: Option<String>,
    /// How long the guard stays armed (600, 600s, 10m); then it removes its configuration and
    /// exits. SIGINT and SIGTERM end it earlier the same way.
    #[arg(long = "for", value_name = "DURATION", default_value = "10m")]
    duration: String,
    /// The MutatingWebhookConfiguration's name.
    #[arg(long, default_value = DEFAULT_NAME)]
    name: String,
    /// Remove the guard's configuration of that name (what a killed run left) and exit.
    #[arg(long)]
    remove: bool,
    /// Keep every AdmissionReview that changes readiness (held or not) in DIR, one JSON file
    /// each with what the guard did: an audit of a run, and the statusguard crate's baselines
    /// (scripts/guard-baseline.sh).
    #[arg(long, value_name = "DIR")]
    record: Option<PathBuf>,
    /// How a pod's reset readiness is held back: `amend` the update to what the API had, or
    /// `reject` it (the kubelet sends it again at its next status sync; docs/upgrade.md
    /// compares them). The node's Ready is always amended.
    #[arg(long, value_enum, default_value_t = HoldPodsBy::Amend)]
    hold_pods_by: HoldPodsBy,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum HoldPodsBy {
    Amend,
    Reject,
}

/// `600`, `600s`, `10m`, `1h`.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("--for {text:?}: not a duration (600, 600s, 10m, 1h)"))?;
    let secs = match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => return Err(format!("--for {text:?}: the unit is s, m or h")),
    };
    if secs == 0 || secs > 24 * 3600 {
        return Err(format!("--for {text:?}: between 1 s and 24 h"));
    }
    Ok(Duration::from_secs(secs))
}

/// The host of an `https://HOST:PORT/...` URL (brackets of an IPv6 address removed).
fn url_host(url: &str) -> Result<String, String> {
    let rest = url
        .strip_prefix("https://")
        .ok_or_else(|| format!("--url {url}: the API server calls webhooks over https only"))?;
    let authority = rest.split('/').next().unwrap_or("");
    let host = if let Some(v6) = authority.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        authority.rsplit_once(':').map_or(authority, |(h, _)| h)
    };
    if host.is_empty() {
        return Err(format!("--url {url}: no host"));
    }
    Ok(host.to_string())
}

fn rfc3339(t: SystemTime) -> String {
    nodeapi::heartbeat::micro_time(t)
}

/// One JSON line of the guard's log. Written by the main thread only: the caller's writer
/// holds the process's stdout lock, which the server's threads would wait on for ever.
fn line(out: &mut dyn Write, value: Value) {
    let _ = writeln!(out, "{value}");
    let _ = out.flush();
}

fn config_path(collection: &str, name: &str) -> String {
    format!("{collection}/{name}")
}

fn connect(flags: &GuardFlags) -> Result<(NodeApi, u32), Failure> {
    let kc = Kubeconfig::load(&flags.kubeconfig, None)?;
    let api = NodeApi::connect(&kc, Options::default())?;
    let version = api.version()?;
    let minor = version.minor_number().ok_or_else(|| Failure {
        code: crate::api_pods::API,
        msg: format!(
            "the API server's version {:?} has no minor number",
            version.git_version
        ),
    })?;
    Ok((api, minor))
}

/// Removes the configuration `name` if it is a guard's; `run`, when given, only if it is that
/// run's. Whether one was removed.
fn remove(api: &NodeApi, collection: &str, name: &str, run: Option<&str>) -> Result<bool, Failure> {
    let path = config_path(collection, name);
    let what = format!("mutatingwebhookconfiguration {name}");
    let Some(text) = api.get_object(&path, &what)? else {
        return Ok(false);
    };
    let found: Value = serde_json::from_str(&text).unwrap_or_default();
    let meta = &found["metadata"];
    if meta["labels"][MANAGED_BY.0] != MANAGED_BY.1 {
        return Err(Failure {
            code: exit::REFUSED,
            msg: format!(
                "{what} is not a kubelet-rehash guard's (no label {}={}): left alone",
                MANAGED_BY.0, MANAGED_BY.1
            ),
        });
    }
    if let Some(run) = run {
        if meta["annotations"]["kubelet-rehash.io/run"] != run {
            return Ok(false);
        }
    }
    Ok(api.delete_object(&path, &what)?)
}

pub(crate) fn cmd_guard(flags: &GuardFlags, out: &mut dyn Write) -> Done {
    if flags.remove {
        let (api, minor) = connect(flags)?;
        let collection = Registration::collection_for(minor);
        let removed = remove(&api, collection, &flags.name, None)?;
        line(
            out,
            json!({"event": "removed", "name": flags.name, "found": removed}),
        );
        return Ok(exit::OK);
    }
    let armed_for = parse_duration(&flags.duration).map_err(Failure::usage)?;
    if let Some(bad) = flags.nodes.iter().find(|n| !valid_node_name(n)) {
        return Err(Failure::usage(format!(
            "--node {bad:?}: not a node name (a DNS subdomain)"
        )));
    }
    let listen_host = flags
        .listen
        .rsplit_once(':')
        .map(|(h, _)| h.trim_matches(['[', ']']).to_string())
        .ok_or_else(|| Failure::usage(format!("--listen {}: HOST:PORT", flags.listen)))?;
    let host = match &flags.url {
        Some(u) => url_host(u).map_err(Failure::usage)?,
        None if listen_host == "0.0.0.0" || listen_host == "::" => {
            return Err(Failure::usage(
                "--listen on every address: give --url, the address the API server calls",
            ))
        }
        None => listen_host,
    };
    let (api, minor) = connect(flags)?;
    if minor < 9 {
        return Err(Failure {
            code: exit::REFUSED,
            msg: format!("the API server is 1.{minor}: mutating webhooks need 1.9 or later"),
        });
    }
    let certs = certificates(&[host], 2).map_err(|m| Failure {
        code: exit::FAILURE,
        msg: m,
    })?;
    let until = Instant::now() + armed_for;
    let guard = Arc::new(
        Guard::new(flags.nodes.iter().cloned(), until).holding_pods_by(match flags.hold_pods_by {
            HoldPodsBy::Amend => statusguard::HoldBy::Amend,
            HoldPodsBy::Reject => statusguard::HoldBy::Reject,
        }),
    );
    let (answered, held) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    if let Some(dir) = &flags.record {
        std::fs::create_dir_all(dir).map_err(|e| Failure {
            code: exit::USAGE,
            msg: format!("--record {}: {e}", dir.display()),
        })?;
    }
    let report = {
        let (tx, answered, held) = (Mutex::new(tx), answered.clone(), held.clone());
        let record = flags.record.clone();
        Arc::new(move |d: &statusguard::Decision, body: &[u8]| {
            let n = answered.fetch_add(1, Ordering::SeqCst);
            if let (Some(dir), true) = (&record, d.changes_readiness) {
                let review: Value = serde_json::from_slice(body).unwrap_or_default();
                let file = dir.join(format!(
                    "{n:05}-{}-{}.json",
                    d.action.name(),
                    d.object.replace('/', "_")
                ));
                let text = serde_json::to_vec_pretty(
                    &json!({"action": d.action.name(), "detail": d.detail, "review": review}),
                )
                .expect("a JSON value serializes");
                if let Err(e) = std::fs::write(&file, text) {
                    eprintln!("kubelet-rehash guard: --record {}: {e}", file.display());
                }
            }
            if d.action == Action::Passed {
                return;
            }
            if matches!(
                d.action,
                Action::HeldNodeNotReady | Action::HeldPodReadiness
            ) {
                held.fetch_add(1, Ordering::SeqCst);
            }
            let _ = tx.lock().unwrap_or_else(|p| p.into_inner()).send(
                {
                    let now = SystemTime::now();
                    let unix_ms = now
                        .duration_since(SystemTime::UNIX_EPOCH)
                        .map_or(0, |d| d.as_millis() as u64);
                    json!({"event": d.action.name(), "at": rfc3339(now), "unix_ms": unix_ms, "node": d.node, "object": d.object, "detail": d.detail})
                },
            );
        })
    };
    let server = Server::start(&flags.listen, &certs, guard, report).map_err(|m| Failure {
        code: exit::FAILURE,
        msg: m,
    })?;
    let url = flags
        .url
        .clone()
        .unwrap_or_else(|| format!("https://{}/mutate", server.addr()));
    let run = format!(
        "{}/{}",
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .unwrap_or_default()
            .trim(),
        std::process::id()
    );
    let reg = Registration {
        name: flags.name.clone(),
        url: url.clone(),
        ca_pem: certs.ca_pem.clone(),
        nodes: flags.nodes.clone(),
        expires: rfc3339(SystemTime::now() + armed_for),
        run: run.clone(),
        server_minor: minor,
    };
    let path = config_path(reg.collection(), &reg.name);
    let what = format!("mutatingwebhookconfiguration {}", reg.name);
    if let Some(text) = api.get_object(&path, &what)? {
        let found: Value = serde_json::from_str(&text).unwrap_or_default();
        let a = &found["metadata"]["annotations"];
        return Err(Failure {
            code: exit::REFUSED,
            msg: format!(
                "{what} exists already (run {}, nodes {}, until {}): another guard runs, or a killed one left it (`kubelet-rehash guard --remove --kubeconfig ...`)",
                a["kubelet-rehash.io/run"], a["kubelet-rehash.io/nodes"], a["kubelet-rehash.io/expires"]
            ),
        });
    }
    crate::upgrade_cmd::catch_signals();
    let body = serde_json::to_vec(&reg.object()).expect("a JSON value serializes");
    api.create_object(reg.collection(), &body, &what)?;
    line(
        out,
        json!({"event": "armed", "name": reg.name, "url": url, "nodes": reg.nodes, "until": reg.expires, "apiVersion": reg.object()["apiVersion"]}),
    );
    eprintln!(
        "kubelet-rehash guard: armed for {} until {} ({url}); SIGINT or SIGTERM removes it",
        reg.nodes.join(", "),
        reg.expires
    );
    while Instant::now() < until && !crate::upgrade_cmd::interrupted() {
        if let Ok(v) = rx.recv_timeout(Duration::from_millis(100)) {
            line(out, v);
        }
    }
    // removed before the server stops: the API server must not call a guard that is gone
    // (it would pass, failurePolicy Ignore, but pay a failed call per update)
    let removed = remove(&api, reg.collection(), &reg.name, Some(&run));
    drop(server);
    while let Ok(v) = rx.try_recv() {
        line(out, v);
    }
    let (answered, held) = (answered.load(Ordering::SeqCst), held.load(Ordering::SeqCst));
    match removed {
        Ok(found) => {
            line(
                out,
                json!({"event": "removed", "name": reg.name, "found": found, "answered": answered, "held": held}),
            );
            Ok(exit::OK)
        }
        Err(f) => Err(Failure {
            code: f.code,
            msg: format!(
                "{} (remove it with `kubelet-rehash guard --remove --kubeconfig ...`: with failurePolicy Ignore it blocks nothing meanwhile)",
                f.msg
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_urls_are_read_strictly() {
        assert_eq!(parse_duration("600"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        for bad in ["", "0", "10x", "m", "25h", "-1"] {
            assert!(parse_duration(bad).is_err(), "--for {bad:?} is refused");
        }
        assert_eq!(
            url_host("https://10.0.0.1:9443/mutate").unwrap(),
            "10.0.0.1"
        );
        assert_eq!(
            url_host("https://guard.example:9443").unwrap(),
            "guard.example"
        );
        assert_eq!(url_host("https://[::1]:9443/x").unwrap(), "::1");
        assert!(url_host("http://10.0.0.1:9443").is_err(), "http is refused");
    }
}
