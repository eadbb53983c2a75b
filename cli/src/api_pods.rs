//! Where the pods come from: a pods file (`--pods`), or the API server asked with the node's
//! own identity (`--kubeconfig`, by default the kubelet's kubeconfig of the node's layout).

use std::path::{Path, PathBuf};

use clap::Args;
use nodeapi::{
    ErrorClass as ApiClass, Kubeconfig, NodeApi, NodeRoot, Options, KUBELET_KUBECONFIGS,
};
use storepatch::layout::HostRoot;

use crate::{exit, read_source, Failure};

/// The pods to plan with.
#[derive(Args, Clone, Default)]
pub struct PodsFlags {
    /// `kubectl get pods -A --field-selector spec.nodeName=NODE -o json` (PodList, List or
    /// Pod), taken after the control plane was upgraded; `-` for stdin. Without it the pods
    /// are listed from the API server (--kubeconfig).
    #[arg(long, conflicts_with = "kubeconfig")]
    pub pods: Option<PathBuf>,
    /// List the node's pods from the API server with this kubeconfig (normally the kubelet's
    /// own: its client certificate may read exactly the pods bound to the node); `upgrade`
    /// also renews the node's heartbeat with it. Default: the kubelet kubeconfig of the
    /// node's layout (with --pods: for the heartbeat only), under --host-root
    /// (kubeadm /etc/kubernetes/kubelet.conf, k3s and RKE2
    /// /var/lib/rancher/{k3s,rke2}/agent/kubelet.kubeconfig, MicroK8s
    /// /var/snap/microk8s/current/credentials/kubelet.config).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The node's name as the API server knows it. Default: the kubelet's --hostname-override
    /// (kubeadm-flags.env), else the node name in its client certificate
    /// (system:node:NAME), else the host name.
    #[arg(long)]
    pub node_name: Option<String>,
}

/// The pods and, when the API server gave them, what it said.
pub struct Pods {
    pub bytes: Vec<u8>,
    pub api: Option<rehash::ApiFacts>,
    /// The Node object the API server served with the pods (`None` with a pods file).
    pub node: Option<Vec<u8>>,
}

/// A connection to the API server with the node's identity, and the node's name.
pub struct Connected {
    pub api: NodeApi,
    pub node: String,
    /// Where the name came from.
    pub how: &'static str,
}

/// Exit code 5: the API server could not be asked (documented in the README).
pub const API: u8 = 5;

impl std::convert::From<nodeapi::Error> for Failure {
    fn from(e: nodeapi::Error) -> Self {
        Failure {
            code: match e.class() {
                ApiClass::Usage => exit::USAGE,
                ApiClass::Refused => exit::REFUSED,
                ApiClass::Api => API,
            },
            msg: e.to_string(),
        }
    }
}

impl PodsFlags {
    /// Reads the pods file, or lists the pods from the API server.
    pub fn read(&self, host_root: Option<&Path>, quiet: bool) -> Result<Pods, Failure> {
        if let Some(p) = &self.pods {
            let bytes =
                read_source(Some(p), "pods file ", "pods from stdin").map_err(Failure::usage)?;
            return Ok(Pods {
                bytes,
                api: None,
                node: None,
            });
        }
        let Connected { api, node, how } = self
            .connect(host_root, true)?
            .expect("a kubeconfig is required");
        let version = api.version()?;
        let info = api.node(&node)?;
        let say = |msg: String| {
            if !quiet {
                eprintln!("kubelet-rehash: {msg}");
            }
        };
        say(format!(
            "listing the pods of node {node} ({how}) from {} {} as {}",
            api.server(),
            version.git_version,
            api.identity()
        ));
        let mut last = 0;
        let bytes = api.pods_of_node(&node, &mut |n| last = n)?;
        say(format!("{last} pods of node {node} listed"));
        Ok(Pods {
            bytes,
            api: Some(rehash::ApiFacts {
                server: api.server().to_string(),
                identity: api.identity().to_string(),
                server_version: version.git_version,
                node,
                node_kubelet_version: info.kubelet_version,
            }),
            node: Some(info.raw),
        })
    }

    /// The API server as the kubeconfig's identity: `--kubeconfig`, else the kubelet's of the
    /// node's layout. Without either: an error when `required`, else `None`.
    pub fn connect(
        &self,
        host_root: Option<&Path>,
        required: bool,
    ) -> Result<Option<Connected>, Failure> {
        let host = match host_root {
            Some(dir) => HostRoot::new(dir).map_err(|e| Failure::usage(e.to_string()))?,
            None => HostRoot::none(),
        };
        // A node path that cannot be resolved inside the host root (a link loop) is not
        // there: falling back to the same path on this machine would read this machine's file.
        let on_host = |p: &Path| host.resolve(p).ok();
        let found = || {
            KUBELET_KUBECONFIGS
                .iter()
                .filter_map(|(_, p)| on_host(Path::new(p)))
                .find(|p| p.is_file())
        };
        let path = match &self.kubeconfig {
            Some(p) => p.clone(),
            None if !required => match found() {
                Some(p) => p,
                None => return Ok(None),
            },
            None => found().ok_or_else(|| {
                Failure::usage(format!(
                    "no --pods and no --kubeconfig, and no kubelet kubeconfig on this node ({}): give one of them",
                    KUBELET_KUBECONFIGS
                        .iter()
                        .map(|(d, p)| format!("{d} {p}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?,
        };
        let resolve = |p: &Path| host.resolve(p);
        let root = host.dir().map(|dir| NodeRoot {
            dir,
            resolve: &resolve,
        });
        let kc = Kubeconfig::load(&path, root.as_ref())?;
        let (node, how) = self.node_name(&kc, &on_host);
        let api = NodeApi::connect(&kc, Options::default())?;
        Ok(Some(Connected { api, node, how }))
    }

    /// The node's name and where it came from.
    fn node_name(
        &self,
        kc: &Kubeconfig,
        on_host: &dyn Fn(&Path) -> Option<PathBuf>,
    ) -> (String, &'static str) {
        if let Some(n) = &self.node_name {
            return (n.clone(), "--node-name");
        }
        for flags in rehash::cri_dockerd::KUBELET_FLAG_FILES {
            if let Some(text) =
                on_host(Path::new(flags)).and_then(|p| std::fs::read_to_string(p).ok())
            {
                if let Some(n) = hostname_override(&text) {
                    return (n, "the kubelet's --hostname-override");
                }
            }
        }
        if let Some(Ok(cert)) = kc.certificate() {
            if let Some(n) = cert.common_name.strip_prefix("system:node:") {
                return (n.to_string(), "the kubelet's client certificate");
            }
        }
        let hostname = on_host(Path::new("/etc/hostname"))
            .and_then(|p| std::fs::read_to_string(p).ok())
            .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
            .unwrap_or_default();
        (
            hostname.lines().next().unwrap_or("").trim().to_lowercase(),
            "the host name",
        )
    }
}

/// `--hostname-override=NAME` or `--hostname-override NAME` in a kubelet flags file.
fn hostname_override(text: &str) -> Option<String> {
    let words: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || c == '"' || c == '\'')
        .filter(|w| !w.is_empty())
        .collect();
    for (i, w) in words.iter().enumerate() {
        let w = w
            .trim_start_matches("KUBELET_KUBEADM_ARGS=")
            .trim_start_matches("KUBELET_EXTRA_ARGS=");
        if let Some(v) = w.strip_prefix("--hostname-override=") {
            return Some(v.to_lowercase()).filter(|v| !v.is_empty());
        }
        if w == "--hostname-override" {
            return words.get(i + 1).map(|v| v.to_lowercase());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::hostname_override;

    #[test]
    fn the_hostname_override_is_found_in_kubelet_flag_files() {
        assert_eq!(
            hostname_override("KUBELET_KUBEADM_ARGS=\"--container-runtime-endpoint=unix:///run/containerd/containerd.sock --hostname-override=Worker-1\"\n"),
            Some("worker-1".into())
        );
        assert_eq!(
            hostname_override("KUBELET_EXTRA_ARGS=--hostname-override node-b --v=2"),
            Some("node-b".into())
        );
        assert_eq!(hostname_override("KUBELET_EXTRA_ARGS=--v=2"), None);
    }
}
