//! `verify --live`: after the runtime restarted, ask it (CRI, or the Docker Engine API) whether
//! every rewritten container reports the target hash, still runs, and kept its pid.

use crate::exit;
use crate::workflow::{Failure, VerifyArgs};
use std::collections::HashMap;
use std::io::Write;
use storepatch::live::cri::CriClient;
use storepatch::live::docker::DockerClient;
use storepatch::{HASH_ANNOTATION, HASH_WITHOUT_RESOURCES_ANNOTATION};

/// What the runtime says about one container now.
struct Live {
    hash: Option<String>,
    hash_without_resources: Option<String>,
    running: bool,
    pid: Option<u32>,
}

fn live_containers(runtime: &str, endpoint: &str) -> Result<HashMap<String, Live>, Failure> {
    let fail = |e: String| {
        Failure::new(
            exit::FAILURE,
            format!("cannot ask the runtime at {endpoint}: {e}"),
        )
    };
    if runtime == "docker" {
        let socket = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
        let mut client = DockerClient::new(socket);
        client.negotiate().map_err(|e| fail(e.to_string()))?;
        let all = client.inspect_all().map_err(|e| fail(e.to_string()))?;
        return Ok(all
            .into_iter()
            .map(|c| {
                let get = |k: &str| c.labels.get(&format!("annotation.{k}")).cloned();
                (
                    c.id.clone(),
                    Live {
                        hash: get(HASH_ANNOTATION),
                        hash_without_resources: get(HASH_WITHOUT_RESOURCES_ANNOTATION),
                        running: c.running,
                        pid: (c.pid != 0).then_some(c.pid),
                    },
                )
            })
            .collect());
    }
    let client = CriClient::connect(endpoint).map_err(|e| fail(e.to_string()))?;
    let all = client.list_containers().map_err(|e| fail(e.to_string()))?;
    Ok(all
        .into_iter()
        .map(|c| {
            (
                c.id.clone(),
                Live {
                    hash: c.annotations.get(HASH_ANNOTATION).cloned(),
                    hash_without_resources: c
                        .annotations
                        .get(HASH_WITHOUT_RESOURCES_ANNOTATION)
                        .cloned(),
                    running: c.state == "CONTAINER_RUNNING",
                    pid: c.pid.filter(|p| *p != 0),
                },
            )
        })
        .collect())
}

pub fn verify_live(args: &VerifyArgs, out: &mut dyn Write) -> Result<u8, Failure> {
    let report_path = args.report.as_ref().ok_or_else(|| {
        Failure::new(
            exit::USAGE,
            "verify --live needs --report FILE: the report `patch` wrote (also in the backup dir as report.json)",
        )
    })?;
    let bytes = std::fs::read(report_path).map_err(|e| {
        Failure::new(
            exit::USAGE,
            format!("cannot read report {}: {e}", report_path.display()),
        )
    })?;
    let report: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| {
        Failure::new(
            exit::USAGE,
            format!(
                "{} is not a kubelet-rehash report: {e}",
                report_path.display()
            ),
        )
    })?;
    let runtime = report["runtime"].as_str().unwrap_or("").to_string();
    let endpoint = match &args.endpoint {
        Some(e) => e.clone(),
        None => match runtime.as_str() {
            "docker" => "unix:///var/run/docker.sock".into(),
            "crio" => "unix:///var/run/crio/crio.sock".into(),
            _ => "unix:///run/containerd/containerd.sock".into(),
        },
    };
    let live = live_containers(&runtime, &endpoint)?;
    let mut problems = Vec::new();
    let mut checked = 0;
    let records = report["records"].as_array().cloned().unwrap_or_default();
    for r in records.iter().filter(|r| r["action"] == "rewrite") {
        checked += 1;
        let id = r["id"].as_str().unwrap_or("");
        let Some(l) = live.get(id) else {
            problems.push(format!("{id}: the runtime no longer lists this container"));
            continue;
        };
        let target = r["target_hash"].as_str();
        if l.hash.as_deref() != target {
            problems.push(format!(
                "{id}: the runtime reports hash {} instead of {}",
                l.hash.as_deref().unwrap_or("(none)"),
                target.unwrap_or("?")
            ));
        }
        if let Some(t) = r["target_hash_without_resources"].as_str() {
            if l.hash_without_resources.as_deref() != Some(t) {
                problems.push(format!(
                    "{id}: the runtime reports hashWithoutResources {} instead of {t}",
                    l.hash_without_resources.as_deref().unwrap_or("(none)")
                ));
            }
        }
        let was_running = r["state"] == "running" || (r["state"].is_null() && r["pid"].is_u64());
        if was_running && !l.running {
            problems.push(format!(
                "{id}: was running before the upgrade and is not running now"
            ));
        }
        if let (true, Some(before)) = (was_running, r["pid"].as_u64()) {
            if l.pid.map(u64::from) != Some(before) {
                problems.push(format!(
                    "{id}: pid changed from {before} to {} (the container was recreated or restarted)",
                    l.pid.map(|p| p.to_string()).unwrap_or_else(|| "none".into())
                ));
            }
        }
    }
    let w = |out: &mut dyn Write, s: String| {
        writeln!(out, "{s}").map_err(|e| Failure::new(exit::FAILURE, e.to_string()))
    };
    for p in &problems {
        w(out, format!("FAIL {p}"))?;
    }
    if problems.is_empty() {
        w(out, format!("verified live: {checked} rewritten container(s) report their target hash, run, and kept their pid"))?;
        Ok(exit::OK)
    } else {
        w(
            out,
            format!(
                "{} problem(s) over {checked} rewritten container(s)",
                problems.len()
            ),
        )?;
        Ok(exit::INCOMPLETE)
    }
}
