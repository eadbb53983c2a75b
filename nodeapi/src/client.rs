//! The three questions, over one TLS connection, with timeouts and retries.

use std::time::Duration;

use base64::Engine as _;
use kube::config::AuthInfo;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::cert::format_time;
use crate::{Error, Kubeconfig};

/// Timeouts and retries.
#[derive(Debug, Clone)]
pub struct Options {
    /// TCP connect and TLS handshake, per attempt.
    pub connect_timeout: Duration,
    /// Reading one response.
    pub read_timeout: Duration,
    /// Attempts per request for failures that may pass (no connection, 429, 5xx).
    pub attempts: u32,
    /// The wait before the second attempt, doubled before each next one.
    pub first_backoff: Duration,
    /// Pods per page of the list.
    pub page_size: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            connect_timeout: Duration::from_secs(5),
            read_timeout: Duration::from_secs(30),
            attempts: 4,
            first_backoff: Duration::from_millis(500),
            page_size: 500,
        }
    }
}

/// The API server's `/version`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerVersion {
    /// `"1"`.
    pub major: String,
    /// `"37"` (some distributions add a `+`).
    pub minor: String,
    /// `v1.37.2`.
    pub git_version: String,
}

/// What the Node object says of its kubelet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    /// `metadata.name`.
    pub name: String,
    /// `status.nodeInfo.kubeletVersion` (`v1.36.3`); empty before the kubelet first reported.
    pub kubelet_version: String,
    /// `status.nodeInfo.containerRuntimeVersion` (`containerd://2.1.9`).
    pub runtime_version: String,
}

/// A connection to the API server as the kubeconfig's identity.
pub struct NodeApi {
    rt: tokio::runtime::Runtime,
    client: kube::Client,
    pub(crate) server: String,
    identity: String,
    /// `system:node:NAME`'s NAME, when the credential is a node's.
    pub(crate) own_node: Option<String>,
    /// Where the CA came from, for TLS errors.
    ca: String,
    options: Options,
}

impl std::fmt::Debug for NodeApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeApi")
            .field("server", &self.server)
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

/// One failed attempt: whether another one may succeed.
enum Attempt {
    Again(String),
    Final(Error),
}

impl NodeApi {
    /// Builds the client (no request yet). A client certificate outside its validity period
    /// is refused here, by name, rather than sent for a bare 401.
    pub fn connect(kc: &Kubeconfig, options: Options) -> Result<NodeApi, Error> {
        let kerr = |what: String| Error::Kubeconfig {
            path: kc.path.clone(),
            what,
        };
        if let Some(cert) = kc.certificate() {
            let cert = cert.map_err(|e| Error::Credential {
                kubeconfig: kc.path.clone(),
                field: "client-certificate",
                path: kc
                    .client_cert
                    .as_ref()
                    .map(|(_, _, from)| from.into())
                    .unwrap_or_default(),
                what: e,
            })?;
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0);
            let from = kc
                .client_cert
                .as_ref()
                .map(|c| c.2.clone())
                .unwrap_or_default();
            if now > cert.not_after {
                return Err(Error::CertificateNotValid {
                    identity: cert.identity(),
                    path: from,
                    when: format!("expired at {}", format_time(cert.not_after)),
                });
            }
            if now < cert.not_before {
                return Err(Error::CertificateNotValid {
                    identity: cert.identity(),
                    path: from,
                    when: format!("is not valid before {}", format_time(cert.not_before)),
                });
            }
        }
        let uri: http::Uri = kc
            .server
            .parse()
            .map_err(|e| kerr(format!("server {:?} is not a URL: {e}", kc.server)))?;
        let mut config = kube::Config::new(uri);
        config.connect_timeout = Some(options.connect_timeout);
        config.read_timeout = Some(options.read_timeout);
        config.write_timeout = Some(options.read_timeout);
        config.tls_server_name = kc.tls_server_name.clone();
        if let Some((pem_text, from)) = &kc.ca {
            let certs = pem::parse_many(pem_text)
                .map_err(|e| kerr(format!("certificate-authority {from}: not PEM: {e}")))?;
            let der: Vec<Vec<u8>> = certs
                .into_iter()
                .filter(|b| b.tag() == "CERTIFICATE")
                .map(|b| b.into_contents())
                .collect();
            if der.is_empty() {
                return Err(kerr(format!(
                    "certificate-authority {from}: no CERTIFICATE block"
                )));
            }
            config.root_cert = Some(der);
        }
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let mut auth = AuthInfo::default();
        if let Some((cert, key, _)) = &kc.client_cert {
            auth.client_certificate_data = Some(b64(cert));
            auth.client_key_data = Some(b64(key).into());
        }
        if let Some(t) = &kc.token {
            auth.token = Some(t.clone().into());
        }
        config.auth_info = auth;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| kerr(format!("cannot start the client's runtime: {e}")))?;
        let client = {
            let _guard = rt.enter();
            kube::Client::try_from(config)
                .map_err(|e| kerr(format!("client certificate or key unusable: {e}")))?
        };
        let own_node = match kc.certificate() {
            Some(Ok(c)) => c
                .common_name
                .strip_prefix("system:node:")
                .map(str::to_string),
            _ => None,
        };
        Ok(NodeApi {
            rt,
            client,
            server: kc.server.clone(),
            identity: kc.identity(),
            own_node,
            ca: match &kc.ca {
                Some((_, from)) => from.clone(),
                None => "(none: the system's roots)".into(),
            },
            options,
        })
    }

    /// The API server URL.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Who the API server sees.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// `GET /version`.
    pub fn version(&self) -> Result<ServerVersion, Error> {
        let text = self.get("/version", "get", "the server version")?;
        serde_json::from_str(&text)
            .map_err(|e| self.unexpected("/version", format!("not a version: {e}")))
    }

    /// `GET /api/v1/nodes/NAME`. A node's own credential (`system:node:OWN`) is refused for
    /// any other name before asking: some API servers (before the Node authorizer checks
    /// selectors) let one node read another's pods, and the plan must never be made from
    /// another node's pods.
    pub fn node(&self, name: &str) -> Result<NodeInfo, Error> {
        if let Some(own) = self.own_node.as_deref().filter(|o| *o != name) {
            return Err(Error::NotThisNode {
                server: self.server.clone(),
                name: name.to_string(),
                own: own.to_string(),
            });
        }
        let path = format!("/api/v1/nodes/{}", percent(name));
        let text = self
            .get(&path, "get", &format!("node {name}"))
            .map_err(|e| match e {
                Error::Unexpected { ref what, .. } if what.starts_with("404") => {
                    Error::NodeNotFound {
                        server: self.server.clone(),
                        name: name.to_string(),
                    }
                }
                other => other,
            })?;
        let v: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| self.unexpected(&path, format!("not JSON: {e}")))?;
        let s = |p: &str| {
            v.pointer(p)
                .and_then(|x| x.as_str())
                .unwrap_or("")
                .to_string()
        };
        Ok(NodeInfo {
            name: s("/metadata/name"),
            kubelet_version: s("/status/nodeInfo/kubeletVersion"),
            runtime_version: s("/status/nodeInfo/containerRuntimeVersion"),
        })
    }

    /// Every pod bound to `node`, in all namespaces (mirror pods included), as one `PodList`
    /// whose items are the served JSON byte for byte; listed in pages of
    /// [`Options::page_size`], `on_page(pods so far)` after each. A continue token that expired
    /// during the listing (410) starts it over once.
    pub fn pods_of_node(
        &self,
        node: &str,
        on_page: &mut dyn FnMut(usize),
    ) -> Result<Vec<u8>, Error> {
        #[derive(Deserialize)]
        struct Page<'a> {
            #[serde(borrow, default)]
            items: Vec<&'a RawValue>,
            #[serde(default)]
            metadata: Meta,
        }
        #[derive(Deserialize, Default)]
        struct Meta {
            #[serde(default, rename = "continue")]
            cont: String,
            #[serde(default, rename = "resourceVersion")]
            resource_version: String,
        }
        let selector = percent(&format!("spec.nodeName={node}"));
        'listing: for _ in 0..2 {
            let mut items = Vec::new();
            let mut count = 0usize;
            let mut cont = String::new();
            let mut rv = None;
            loop {
                let mut path = format!(
                    "/api/v1/pods?fieldSelector={selector}&limit={}",
                    self.options.page_size
                );
                if !cont.is_empty() {
                    path.push_str("&continue=");
                    path.push_str(&percent(&cont));
                }
                let text = match self.get(&path, "list", &format!("the pods of node {node}")) {
                    Err(Error::Unexpected { what, .. })
                        if what.starts_with("410") && !cont.is_empty() =>
                    {
                        continue 'listing;
                    }
                    other => other?,
                };
                let page: Page = serde_json::from_str(&text)
                    .map_err(|e| self.unexpected(&path, format!("not a pod list: {e}")))?;
                rv.get_or_insert(page.metadata.resource_version.clone());
                for item in page.items {
                    if count > 0 || !items.is_empty() {
                        items.push(b',');
                    }
                    items.extend_from_slice(item.get().as_bytes());
                    count += 1;
                }
                on_page(count);
                if page.metadata.cont.is_empty() {
                    break;
                }
                cont = page.metadata.cont;
            }
            let out = pod_list(&rv.unwrap_or_default(), &items);
            return Ok(out);
        }
        Err(self.unexpected(
            "/api/v1/pods",
            "the listing's continue token expired twice (410 Gone)".into(),
        ))
    }

    pub(crate) fn unexpected(&self, path: &str, what: String) -> Error {
        self.unexpected_call(&Call::get(path), what)
    }

    /// One GET with retries; `verb` and `what` name the request in a 403.
    fn get(&self, path: &str, verb: &'static str, what: &str) -> Result<String, Error> {
        self.send(Call::get(path), verb, what)
    }

    /// One request with retries for failures that may pass (no connection, 429, 5xx).
    pub(crate) fn send(
        &self,
        call: Call<'_>,
        verb: &'static str,
        what: &str,
    ) -> Result<String, Error> {
        let mut backoff = self.options.first_backoff;
        let mut last = String::new();
        for attempt in 1..=self.options.attempts.max(1) {
            match self.attempt(&call, verb, what) {
                Ok(text) => return Ok(text),
                Err(Attempt::Final(e)) => return Err(e),
                Err(Attempt::Again(cause)) => last = cause,
            }
            if attempt < self.options.attempts {
                std::thread::sleep(backoff);
                backoff *= 2;
            }
        }
        Err(Error::Unreachable {
            server: self.server.clone(),
            attempts: self.options.attempts.max(1),
            cause: last,
        })
    }

    pub(crate) fn unexpected_call(&self, call: &Call<'_>, what: String) -> Error {
        Error::Unexpected {
            server: self.server.clone(),
            method: call.method,
            path: call.path.to_string(),
            what,
        }
    }

    fn attempt(&self, call: &Call<'_>, verb: &'static str, what: &str) -> Result<String, Attempt> {
        let mut request = http::Request::builder().method(call.method).uri(call.path);
        if let Some(ct) = call.content_type {
            request = request.header(http::header::CONTENT_TYPE, ct);
        }
        let request = request
            .body(call.body.to_vec())
            .map_err(|e| Attempt::Final(self.unexpected_call(call, e.to_string())))?;
        let deadline = self.options.connect_timeout + self.options.read_timeout;
        let result = self.rt.block_on(async {
            tokio::time::timeout(deadline, self.client.request_text(request)).await
        });
        let err = match result {
            Ok(Ok(text)) => return Ok(text),
            Ok(Err(e)) => e,
            Err(_) => return Err(Attempt::Again(format!("no answer within {deadline:?}"))),
        };
        match err {
            kube::Error::Api(status) => {
                let message = status.message.clone();
                match status.code {
                    401 => Err(Attempt::Final(Error::Unauthorized {
                        server: self.server.clone(),
                        identity: self.identity.clone(),
                        message,
                    })),
                    403 => Err(Attempt::Final(Error::Forbidden {
                        server: self.server.clone(),
                        identity: self.identity.clone(),
                        verb,
                        resource: what.to_string(),
                        message,
                    })),
                    429 | 500 | 502 | 503 | 504 => {
                        Err(Attempt::Again(format!("{} {}", status.code, message)))
                    }
                    code => Err(Attempt::Final(
                        self.unexpected_call(call, format!("{code} {message}")),
                    )),
                }
            }
            other => {
                let chain = chain(&other);
                if is_tls(&chain) {
                    Err(Attempt::Final(Error::Tls {
                        server: self.server.clone(),
                        ca: self.ca.clone(),
                        cause: chain,
                    }))
                } else {
                    Err(Attempt::Again(chain))
                }
            }
        }
    }
}

/// One request: method, path (with its query), body.
pub(crate) struct Call<'a> {
    pub(crate) method: &'static str,
    pub(crate) path: &'a str,
    pub(crate) body: &'a [u8],
    pub(crate) content_type: Option<&'static str>,
}

impl<'a> Call<'a> {
    pub(crate) fn get(path: &'a str) -> Self {
        Call {
            method: "GET",
            path,
            body: &[],
            content_type: None,
        }
    }
}

/// One `PodList` of the served items (`items`: their JSON texts joined by commas, untouched)
/// and the first page's resourceVersion (a JSON string, escaped: the value is the server's).
fn pod_list(resource_version: &str, items: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(items.len() + 96);
    out.extend_from_slice(
        b"{\"apiVersion\":\"v1\",\"kind\":\"PodList\",\"metadata\":{\"resourceVersion\":",
    );
    out.extend_from_slice(
        serde_json::to_string(resource_version)
            .expect("a string serializes")
            .as_bytes(),
    );
    out.extend_from_slice(b"},\"items\":[");
    out.extend_from_slice(items);
    out.extend_from_slice(b"]}");
    out
}

/// The error and its sources, joined: where hyper's "client error (Connect)" hides the cause.
fn chain(e: &dyn std::error::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(s) = cur {
        let t = s.to_string();
        if !parts.iter().any(|p| p.contains(&t)) {
            parts.push(t);
        }
        cur = s.source();
    }
    parts.join(": ")
}

/// TLS failures do not pass by retrying: rustls' certificate and alert errors.
fn is_tls(chain: &str) -> bool {
    [
        "invalid peer certificate",
        "received fatal alert",
        "UnknownIssuer",
        "certificate",
        "tls handshake",
        "InvalidCertificate",
    ]
    .iter()
    .any(|m| chain.contains(m))
}

/// Percent-encodes a query value or path segment (RFC 3986 unreserved kept).
pub(crate) fn percent(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{percent, pod_list};

    #[test]
    fn the_joined_list_is_json_with_the_items_untouched() {
        let items = br#"{"metadata":{"uid":"a"},"spec":{"x":1.50}},{"metadata":{"uid":"b"}}"#;
        let out = pod_list("12\"3", items);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["metadata"]["resourceVersion"], "12\"3");
        assert_eq!(v["items"].as_array().unwrap().len(), 2);
        // byte for byte: `1.50` is not re-printed as `1.5`
        assert!(out.windows(items.len()).any(|w| w == items));
        let empty: serde_json::Value = serde_json::from_slice(&pod_list("", b"")).unwrap();
        assert_eq!(empty["items"].as_array().unwrap().len(), 0);
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(percent("spec.nodeName=node-1"), "spec.nodeName%3Dnode-1");
        assert_eq!(percent("a b/c"), "a%20b%2Fc");
    }
}
