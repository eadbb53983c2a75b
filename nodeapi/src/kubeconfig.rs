//! The kubelet's kubeconfig: its server, CA and client credential, with every file it names
//! read through the host's root (a Job sees the node's `/etc/kubernetes/kubelet.conf` as
//! `/host/etc/...`, and that file's `client-certificate: /var/lib/kubelet/pki/...` as
//! `/host/var/...`).

use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::Deserialize;

use crate::cert::Certificate;
use crate::Error;

/// Where the kubelet's kubeconfig lives, by distribution (paths on the node), in the order
/// they are tried when no `--kubeconfig` is given.
pub const KUBELET_KUBECONFIGS: &[(&str, &str)] = &[
    ("kubeadm", "/etc/kubernetes/kubelet.conf"),
    ("k3s", "/var/lib/rancher/k3s/agent/kubelet.kubeconfig"),
    ("RKE2", "/var/lib/rancher/rke2/agent/kubelet.kubeconfig"),
    (
        "MicroK8s",
        "/var/snap/microk8s/current/credentials/kubelet.config",
    ),
];

#[derive(Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
struct File {
    #[serde(default)]
    clusters: Vec<Named<ClusterEntry>>,
    #[serde(default)]
    users: Vec<Named<UserEntry>>,
    #[serde(default)]
    contexts: Vec<Named<ContextEntry>>,
    #[serde(default)]
    current_context: String,
}

#[derive(Deserialize)]
struct Named<T> {
    name: String,
    #[serde(alias = "cluster", alias = "user", alias = "context")]
    value: Option<T>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
struct ClusterEntry {
    #[serde(default)]
    server: String,
    certificate_authority: Option<String>,
    certificate_authority_data: Option<String>,
    tls_server_name: Option<String>,
    #[serde(default)]
    insecure_skip_tls_verify: bool,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
struct UserEntry {
    client_certificate: Option<String>,
    client_certificate_data: Option<String>,
    client_key: Option<String>,
    client_key_data: Option<String>,
    token: Option<String>,
    token_file: Option<String>,
}

#[derive(Deserialize, Default)]
struct ContextEntry {
    #[serde(default)]
    cluster: String,
    #[serde(default)]
    user: String,
}

/// The node's `/` as seen from here (`--host-root`), for a kubeconfig of the node.
pub struct NodeRoot<'a> {
    /// The directory the node's `/` is mounted at, canonical (no symbolic link in it).
    pub dir: &'a Path,
    /// Resolves one of the node's absolute paths inside `dir` as `chroot(dir)` would: an
    /// absolute link target restarts at `dir`, `..` stops there (storepatch's
    /// `HostRoot::resolve`). An error (a link loop) refuses the name.
    pub resolve: &'a dyn Fn(&Path) -> std::io::Result<PathBuf>,
}

impl NodeRoot<'_> {
    /// The node's path of `path` when it lies under the root (`/host/etc/x` → `/etc/x`):
    /// by its name, or by its directory's real place (a root given through a link).
    fn node_path(&self, path: &Path) -> Option<PathBuf> {
        let abs = std::path::absolute(path).ok()?;
        let inside = |p: &Path| {
            p.strip_prefix(self.dir)
                .ok()
                .map(|r| Path::new("/").join(r))
        };
        inside(&abs).or_else(|| {
            let parent = std::fs::canonicalize(abs.parent()?).ok()?;
            Some(inside(&parent)?.join(abs.file_name()?))
        })
    }
}

/// A kubeconfig's current context, every credential read.
#[derive(Clone)]
pub struct Kubeconfig {
    /// The file, as given.
    pub path: PathBuf,
    /// The API server URL.
    pub server: String,
    /// The CA bundle (PEM) and where it came from; `None`: the system's roots.
    pub ca: Option<(Vec<u8>, String)>,
    /// The TLS server name to check instead of the URL's host.
    pub tls_server_name: Option<String>,
    /// Client certificate and key (PEM) and where the certificate came from.
    pub client_cert: Option<(Vec<u8>, Vec<u8>, String)>,
    /// A bearer token (MicroK8s' kubelet config uses one).
    pub token: Option<String>,
    /// The kubeconfig's user entry name.
    pub user: String,
}

impl std::fmt::Debug for Kubeconfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // no key or token in logs
        f.debug_struct("Kubeconfig")
            .field("path", &self.path)
            .field("server", &crate::client::redact_url(&self.server))
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

impl Kubeconfig {
    /// Reads the kubeconfig at `path` (a path on this machine) and every file its current
    /// context names. Without a node root, a relative name is taken from the kubeconfig's
    /// directory and an absolute one as given, as kubectl resolves them. Under a node root
    /// (`--host-root`), every name resolves inside it (absolute names are the node's paths;
    /// relative ones too when the kubeconfig itself lies under the root, from its directory on
    /// the node): a name that cannot be resolved there is refused, never read on this
    /// machine instead, for the file would go to the server that kubeconfig names.
    pub fn load(path: &Path, root: Option<&NodeRoot<'_>>) -> Result<Kubeconfig, Error> {
        let err = |what: String| Error::Kubeconfig {
            path: path.to_path_buf(),
            what,
        };
        // Under the root, the kubeconfig is read as the node sees it too: a symbolic link
        // planted in its place restarts at the root, as everything it names will.
        let on_node = root.and_then(|r| r.node_path(path).map(|node| (r, node)));
        let local = match &on_node {
            Some((r, node)) => (r.resolve)(node).map_err(|e| {
                err(format!(
                    "cannot be resolved inside the host root {}: {e}",
                    r.dir.display()
                ))
            })?,
            None => path.to_path_buf(),
        };
        let text = read_regular(&local).map_err(err)?;
        let file: File =
            serde_yaml::from_slice(&text).map_err(|e| err(format!("not a kubeconfig: {e}")))?;
        let context_name = if file.current_context.is_empty() {
            match file.contexts.as_slice() {
                [only] => only.name.clone(),
                _ => return Err(err("no current-context, and not exactly one context".into())),
            }
        } else {
            file.current_context.clone()
        };
        let context = file
            .contexts
            .iter()
            .find(|c| c.name == context_name)
            .and_then(|c| c.value.as_ref())
            .ok_or_else(|| err(format!("current-context {context_name:?} is not defined")))?;
        let cluster = file
            .clusters
            .iter()
            .find(|c| c.name == context.cluster)
            .and_then(|c| c.value.as_ref())
            .ok_or_else(|| err(format!("cluster {:?} is not defined", context.cluster)))?;
        let user = file
            .users
            .iter()
            .find(|u| u.name == context.user)
            .and_then(|u| u.value.as_ref())
            .ok_or_else(|| err(format!("user {:?} is not defined", context.user)))?;
        if cluster.server.is_empty() {
            return Err(err(format!("cluster {:?} has no server", context.cluster)));
        }
        if cluster.insecure_skip_tls_verify {
            return Err(err(
                "insecure-skip-tls-verify is set: the API server's identity would not be checked; give its CA"
                    .into(),
            ));
        }
        let dir = local.parent().unwrap_or(Path::new("/")).to_path_buf();
        let resolve = |p: &str| -> Result<PathBuf, String> {
            let p = Path::new(p);
            let refused = |r: &NodeRoot<'_>, e: std::io::Error| {
                format!(
                    "cannot be resolved inside the host root {} ({e}): it is not read on this machine instead",
                    r.dir.display()
                )
            };
            match (&on_node, root) {
                (Some((r, node)), _) => {
                    let node_dir = node.parent().unwrap_or(Path::new("/"));
                    (r.resolve)(&node_dir.join(p)).map_err(|e| refused(r, e))
                }
                (None, Some(r)) if p.is_absolute() => (r.resolve)(p).map_err(|e| refused(r, e)),
                _ => Ok(dir.join(p)),
            }
        };
        let credential = |field: &'static str, file: &Option<String>, data: &Option<String>| match (
            data, file,
        ) {
            (Some(d), _) => base64::engine::general_purpose::STANDARD
                .decode(d.trim())
                .map(|b| Some((b, format!("{field}-data of {}", path.display()))))
                .map_err(|e| Error::Credential {
                    kubeconfig: path.to_path_buf(),
                    field,
                    path: path.to_path_buf(),
                    what: format!("{field}-data is not base64: {e}"),
                }),
            (None, Some(f)) => resolve(f)
                .and_then(|local_file| read_regular(&local_file))
                .map(|b| Some((b, f.clone())))
                .map_err(|what| Error::Credential {
                    kubeconfig: path.to_path_buf(),
                    field,
                    path: PathBuf::from(f),
                    what,
                }),
            (None, None) => Ok(None),
        };
        let ca = credential(
            "certificate-authority",
            &cluster.certificate_authority,
            &cluster.certificate_authority_data,
        )?;
        let cert = credential(
            "client-certificate",
            &user.client_certificate,
            &user.client_certificate_data,
        )?;
        let key = credential("client-key", &user.client_key, &user.client_key_data)?;
        let client_cert = match (cert, key) {
            (Some((c, from)), Some((k, _))) => Some((c, k, from)),
            (None, None) => None,
            _ => {
                return Err(err(format!(
                    "user {:?} has a client certificate without its key, or a key without its certificate",
                    context.user
                )))
            }
        };
        let token = match (&user.token, &user.token_file) {
            (Some(t), _) => Some(t.trim().to_string()),
            (None, Some(f)) => {
                let b = resolve(f).and_then(|l| read_regular(&l)).map_err(|what| {
                    Error::Credential {
                        kubeconfig: path.to_path_buf(),
                        field: "token-file",
                        path: PathBuf::from(f),
                        what,
                    }
                })?;
                Some(String::from_utf8_lossy(&b).trim().to_string())
            }
            (None, None) => None,
        };
        if client_cert.is_none() && token.is_none() {
            return Err(err(format!(
                "user {:?} has no client certificate and no token (exec and auth-provider plugins are not run)",
                context.user
            )));
        }
        Ok(Kubeconfig {
            path: path.to_path_buf(),
            server: cluster.server.clone(),
            ca,
            tls_server_name: cluster.tls_server_name.clone(),
            client_cert,
            token,
            user: context.user.clone(),
        })
    }

    /// The client certificate's identity and validity, when the credential is one.
    pub fn certificate(&self) -> Option<Result<Certificate, String>> {
        self.client_cert
            .as_ref()
            .map(|(pem, _, _)| Certificate::from_pem(pem))
    }

    /// Who the API server will see: the certificate's subject, else the kubeconfig user.
    pub fn identity(&self) -> String {
        match self.certificate() {
            Some(Ok(c)) => c.identity(),
            _ => format!("kubeconfig user {}", self.user),
        }
    }
}

/// Reads a regular file (following symlinks: kubeadm's `kubelet-client-current.pem` is one),
/// refusing FIFOs and devices, which would block or lie.
fn read_regular(path: &Path) -> Result<Vec<u8>, String> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => std::fs::read(path).map_err(|e| format!("cannot read: {e}")),
        Ok(_) => Err(format!("{} is not a regular file", path.display())),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}
