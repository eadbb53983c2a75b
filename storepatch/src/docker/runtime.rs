//! Docker's place in [`crate::runtime`]: a data-root holds `containers/`; the Engine API
//! answers `verify --live`.

use super::{DockerOptions, DockerStore};
use crate::contract::{ContainersOutlive, LiveContainer, LiveRestoreAnswer, Runtime, StoreOptions};
use crate::live::docker::DockerClient;
use crate::{RuntimeKind, RuntimeStore, StoreError};
use crate::{HASH_ANNOTATION, HASH_WITHOUT_RESOURCES_ANNOTATION};
use std::path::Path;

/// Docker (dockershim or cri-dockerd: both keep the kubelet's hash in the same labels).
pub struct Docker;

/// The Docker descriptor.
pub static DOCKER: Docker = Docker;

impl Runtime for Docker {
    fn kind(&self) -> RuntimeKind {
        RuntimeKind::Docker
    }
    fn default_root(&self) -> &'static Path {
        Path::new("/var/lib/docker")
    }
    fn default_endpoint(&self) -> String {
        crate::contract::unix_endpoint(&DockerOptions::default().socket)
    }
    fn looks_like(&self, root: &Path) -> bool {
        root.join("containers").is_dir()
    }
    fn layout_hint(&self) -> String {
        "a Docker data-root (no containers/)".into()
    }
    fn open(
        &self,
        root: &Path,
        options: &StoreOptions,
    ) -> Result<Box<dyn RuntimeStore>, StoreError> {
        let mut o = DockerOptions::default();
        if let Some(p) = &options.pidfile {
            o.pidfile = p.clone();
        }
        if let Some(s) = &options.socket {
            o.socket = s.clone();
        }
        if let Some(d) = &options.daemon_json {
            o.daemon_json = d.clone();
        }
        o.live_restore = options.live_restore;
        if options.host.dir().is_some() {
            let proc = Path::new("/proc");
            o.proc = options
                .host
                .resolve(proc)
                .map_err(|e| StoreError::io(proc, e))?;
            o.host = options.host.clone();
        }
        Ok(Box::new(DockerStore::with_options(root, o)?))
    }
    fn service_unit(&self) -> &'static str {
        "docker"
    }
    fn containers_outlive_the_daemon(&self) -> ContainersOutlive {
        ContainersOutlive::WithLiveRestore
    }
    fn behind_dockershim(&self) -> bool {
        true
    }
    fn ask_live_restore(&self, endpoint: &str) -> LiveRestoreAnswer {
        // Whatever stops dockerd, only live-restore keeps the containers.
        let socket = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
        let c = DockerClient::new(socket).with_timeout(std::time::Duration::from_secs(10));
        let info: serde_json::Value = match c.call("GET", "/info", None) {
            Ok(info) => info,
            Err(e) => {
                return LiveRestoreAnswer::Unknown(format!(
                    "cannot ask dockerd at {endpoint} whether live-restore is on: {e}"
                ))
            }
        };
        match info.get("LiveRestoreEnabled").and_then(|v| v.as_bool()) {
            Some(true) => LiveRestoreAnswer::On("dockerd reports LiveRestoreEnabled".into()),
            _ => LiveRestoreAnswer::Off("dockerd runs without live-restore: stopping it kills every container (set \"live-restore\": true in daemon.json and reload dockerd first)".into()),
        }
    }
    fn live_containers(&self, endpoint: &str) -> Result<Vec<LiveContainer>, StoreError> {
        let socket = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
        let live = |e: String| StoreError::Live(format!("cannot ask dockerd at {endpoint}: {e}"));
        let mut client = DockerClient::new(socket);
        client.negotiate().map_err(|e| live(e.to_string()))?;
        let all = client.inspect_all().map_err(|e| live(e.to_string()))?;
        Ok(all
            .into_iter()
            .map(|c| {
                let get = |k: &str| c.labels.get(&format!("annotation.{k}")).cloned();
                LiveContainer {
                    hash: get(HASH_ANNOTATION),
                    hash_without_resources: get(HASH_WITHOUT_RESOURCES_ANNOTATION),
                    running: c.running,
                    pid: (c.pid != 0).then_some(c.pid),
                    id: c.id,
                }
            })
            .collect())
    }
}
