//! The three questions, over one TLS connection, with timeouts and retries.

use std::time::{Duration, Instant};

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
    /// The most bytes one response may have: a server that sends more (an endless body) is
    /// cut off there, not buffered until memory runs out.
    pub max_response_bytes: usize,
    /// The most bytes the pods of one listing may have, all pages together.
    pub max_list_bytes: usize,
    /// The most pages one listing may have: more than a node can fill is a server that pages
    /// forever.
    pub max_pages: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            connect_timeout: Duration::from_secs(5),
            read_timeout: Duration::from_secs(30),
            attempts: 4,
            first_backoff: Duration::from_millis(500),
            page_size: 500,
            // A real node's pods: at most a few hundred (110 by default, the kubelet's
            // maxPods), tens of kB each with their managedFields: a few MB. These bounds are
            // far above that and far below what hurts a node.
            max_response_bytes: 64 << 20,
            max_list_bytes: 256 << 20,
            // 64 pages of 500: 32,000 pods, far more than any node runs
            max_pages: 64,
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

impl ServerVersion {
    /// The minor as a number (`"37+"` → 37); `None` when it is not one.
    pub fn minor_number(&self) -> Option<u32> {
        self.minor.trim_end_matches('+').parse().ok()
    }
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
    /// The Node object as served: its labels, taints and allocatable are what the kubelet
    /// admits pods against when it starts again.
    pub raw: Vec<u8>,
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
        let uri: http::Uri = kc.server.parse().map_err(|e| {
            kerr(format!(
                "server {:?} is not a URL: {e}",
                redact_url(&kc.server)
            ))
        })?;
        if uri.scheme_str() != Some("https") {
            return Err(kerr(format!(
                "server {} is not https: the credential would travel in clear and the API server's identity would not be checked (as with insecure-skip-tls-verify); give its https URL and CA",
                redact_url(&kc.server)
            )));
        }
        let mut config = kube::Config::new(uri);
        // The attempts are this client's own (Options::attempts, each bounded in time): kube's
        // retry layer inside each of them (up to 15 retries, honouring Retry-After) would
        // multiply them and outlast every bound.
        config.default_retry = false;
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
            server: redact_url(&kc.server),
            identity: kc.identity(),
            own_node,
            ca: match &kc.ca {
                Some((_, from)) => from.clone(),
                None => "(none: the system's roots)".into(),
            },
            options,
        })
    }

    /// The API server URL (without a password it may carry).
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
        let v: ServerVersion = serde_json::from_str(&text)
            .map_err(|e| self.unexpected("/version", format!("not a version: {e}")))?;
        // printed and recorded: the server's text, escaped
        Ok(ServerVersion {
            major: escape(&v.major),
            minor: escape(&v.minor),
            git_version: escape(&v.git_version),
        })
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
        let s = |p: &str| escape(v.pointer(p).and_then(|x| x.as_str()).unwrap_or(""));
        Ok(NodeInfo {
            name: s("/metadata/name"),
            kubelet_version: s("/status/nodeInfo/kubeletVersion"),
            runtime_version: s("/status/nodeInfo/containerRuntimeVersion"),
            raw: text.into_bytes(),
        })
    }

    /// Every pod bound to `node`, in all namespaces (mirror pods included), as one `PodList`
    /// whose items are the served JSON byte for byte; listed in pages of
    /// [`Options::page_size`], `on_page(pods so far)` after each. A continue token that expired
    /// during the listing (410) starts it over once. Refused: an item bound to another node
    /// ([`Error::OtherNodesPod`]: the plan would rewrite this node's store after another
    /// node's pods), a continue token served twice, more than [`Options::max_pages`] pages or
    /// [`Options::max_list_bytes`] in all.
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
        /// What an item says of where it runs; the rest stays raw.
        #[derive(Deserialize, Default)]
        #[serde(default)]
        struct Item {
            metadata: ItemMeta,
            spec: ItemSpec,
        }
        #[derive(Deserialize, Default)]
        #[serde(default)]
        struct ItemMeta {
            namespace: String,
            name: String,
        }
        #[derive(Deserialize, Default)]
        #[serde(default, rename_all = "camelCase")]
        struct ItemSpec {
            node_name: String,
        }
        let selector = percent(&format!("spec.nodeName={node}"));
        'listing: for _ in 0..2 {
            let mut items = Vec::new();
            let mut count = 0usize;
            let mut cont = String::new();
            let mut seen = std::collections::HashSet::new();
            let mut rv = None;
            for page_number in 1.. {
                if page_number > self.options.max_pages {
                    return Err(self.unexpected(
                        "/api/v1/pods",
                        format!(
                            "the listing of node {node}'s pods goes on past {} pages of {} ({count} pods so far): more than a node can have, refused",
                            self.options.max_pages, self.options.page_size
                        ),
                    ));
                }
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
                    let it: Item = serde_json::from_str(item.get()).unwrap_or_default();
                    if it.spec.node_name != node {
                        return Err(Error::OtherNodesPod {
                            server: self.server.clone(),
                            node: node.to_string(),
                            pod: escape(&format!("{}/{}", it.metadata.namespace, it.metadata.name)),
                            other: escape(&it.spec.node_name),
                        });
                    }
                    if items.len() + item.get().len() + 1 > self.options.max_list_bytes {
                        return Err(Error::TooLarge {
                            server: self.server.clone(),
                            what: format!("the pods of node {node} ({count} so far)"),
                            limit: self.options.max_list_bytes,
                        });
                    }
                    if count > 0 {
                        items.push(b',');
                    }
                    items.extend_from_slice(item.get().as_bytes());
                    count += 1;
                }
                on_page(count);
                if page.metadata.cont.is_empty() {
                    break;
                }
                // a token served again would page forever
                if !seen.insert(page.metadata.cont.clone()) {
                    return Err(self.unexpected(
                        &path,
                        format!(
                            "the listing's continue token came back again on page {page_number}: the server pages in a loop, refused"
                        ),
                    ));
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
        self.send(Call::get(path), verb, what, None)
    }

    /// One request with retries for failures that may pass (no connection, 429, 5xx).
    /// `guard`, when given, is asked before every attempt and every 100 ms while one runs:
    /// its `Err` stops the request at once ([`Error::Stopped`]: no attempt is sent, one in
    /// flight is abandoned), its `Ok` bounds what the attempt may still take.
    pub(crate) fn send(
        &self,
        call: Call<'_>,
        verb: &'static str,
        what: &str,
        guard: Option<Guard<'_>>,
    ) -> Result<String, Error> {
        let stopped = |why: String| Error::Stopped {
            server: self.server.clone(),
            why,
        };
        let ask = || guard.map(|g| g().map_err(stopped)).transpose();
        let attempts = self.options.attempts.max(1);
        let mut backoff = self.options.first_backoff;
        let mut last = String::new();
        for attempt in 1..=attempts {
            let left = ask()?;
            match self.attempt(&call, verb, what, guard, left) {
                Ok(text) => return Ok(text),
                Err(Attempt::Final(e)) => return Err(e),
                Err(Attempt::Again(cause)) => last = cause,
            }
            if attempt < attempts {
                // in steps, so a guard that fails meanwhile stops the wait too
                let until = Instant::now() + backoff.min(ask()?.unwrap_or(backoff));
                while Instant::now() < until {
                    std::thread::sleep(
                        until
                            .saturating_duration_since(Instant::now())
                            .min(GUARD_STEP),
                    );
                    ask()?;
                }
                backoff *= 2;
            }
        }
        Err(Error::Unreachable {
            server: self.server.clone(),
            attempts,
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

    /// One request and its whole answer, at most [`Options::max_response_bytes`] of it.
    async fn exchange(&self, request: http::Request<Vec<u8>>) -> Result<(u16, Vec<u8>), Failed> {
        use http_body_util::BodyExt as _;
        let response = self
            .client
            .send(request.map(kube::client::Body::from))
            .await
            .map_err(Failed::Client)?;
        let code = response.status().as_u16();
        let mut body = response.into_body();
        let mut out = Vec::new();
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame.map_err(Failed::Client)?.into_data() {
                if out.len() + data.len() > self.options.max_response_bytes {
                    return Err(Failed::TooLarge);
                }
                out.extend_from_slice(&data);
            }
        }
        Ok((code, out))
    }

    fn attempt(
        &self,
        call: &Call<'_>,
        verb: &'static str,
        what: &str,
        guard: Option<Guard<'_>>,
        left: Option<Duration>,
    ) -> Result<String, Attempt> {
        let mut request = http::Request::builder().method(call.method).uri(call.path);
        if let Some(ct) = call.content_type {
            request = request.header(http::header::CONTENT_TYPE, ct);
        }
        let request = request
            .body(call.body.to_vec())
            .map_err(|e| Attempt::Final(self.unexpected_call(call, e.to_string())))?;
        let own = self.options.connect_timeout + self.options.read_timeout;
        let limit = left.map_or(own, |l| l.min(own));
        let deadline = Instant::now() + limit;
        let result = self.rt.block_on(async {
            let mut exchange = std::pin::pin!(self.exchange(request));
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(None);
                }
                let step = if guard.is_some() { GUARD_STEP } else { left };
                match tokio::time::timeout(step.min(left), &mut exchange).await {
                    Ok(r) => return Ok(r),
                    Err(_) => {
                        if let Some(Err(why)) = guard.map(|g| g()) {
                            return Err(Some(why));
                        }
                    }
                }
            }
        });
        let (code, body) = match result {
            Ok(Ok(answer)) => answer,
            Ok(Err(Failed::TooLarge)) => {
                return Err(Attempt::Final(Error::TooLarge {
                    server: self.server.clone(),
                    what: format!("the answer to {} {}", call.method, call.path),
                    limit: self.options.max_response_bytes,
                }))
            }
            Ok(Err(Failed::Client(e))) => {
                let chain = escape(&chain(&e));
                return if is_tls(&chain) {
                    Err(Attempt::Final(Error::Tls {
                        server: self.server.clone(),
                        ca: self.ca.clone(),
                        cause: chain,
                    }))
                } else {
                    Err(Attempt::Again(chain))
                };
            }
            Err(Some(why)) => {
                return Err(Attempt::Final(Error::Stopped {
                    server: self.server.clone(),
                    why,
                }))
            }
            Err(None) => return Err(Attempt::Again(format!("no answer within {limit:?}"))),
        };
        if (200..300).contains(&code) {
            return String::from_utf8(body).map_err(|e| {
                Attempt::Final(self.unexpected_call(call, format!("{code}: not UTF-8: {e}")))
            });
        }
        let message = server_message(&body);
        match code {
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
            429 | 500 | 502 | 503 | 504 => Err(Attempt::Again(format!("{code} {message}"))),
            code => Err(Attempt::Final(
                self.unexpected_call(call, format!("{code} {message}")),
            )),
        }
    }
}

/// Asked before every attempt of a request and while it runs (see [`NodeApi`]'s heartbeat
/// calls): how long the request may still take, or why it must not be made or go on.
pub type Guard<'a> = &'a dyn Fn() -> Result<Duration, String>;

/// How often a running attempt asks its guard.
const GUARD_STEP: Duration = Duration::from_millis(100);

/// Why an exchange has no answer.
enum Failed {
    Client(kube::Error),
    TooLarge,
}

/// The message of an error answer (a `Status`' message, else the body), escaped and cut to a
/// length a terminal line can show.
fn server_message(body: &[u8]) -> String {
    #[derive(Deserialize)]
    struct Status {
        #[serde(default)]
        message: String,
    }
    let text = match serde_json::from_slice::<Status>(body) {
        Ok(s) if !s.message.is_empty() => s.message,
        _ => String::from_utf8_lossy(body).trim().to_string(),
    };
    let mut out = escape(&text);
    if out.chars().count() > 1000 {
        out = out.chars().take(1000).collect::<String>() + "…";
    }
    out
}

/// `s` with every control character (escape sequences, carriage returns, newlines) and every
/// bidirectional override written as `\u{..}`: what the server says cannot clear a terminal or
/// forge a line of the tool's output.
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control()
            || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// The URL without the password it may carry (`https://***@host`): URLs are printed and
/// recorded in reports.
pub(crate) fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return escape(url);
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let authority = match authority.rsplit_once('@') {
        // the user part may be a secret too (a token as the user name)
        Some((_, host)) => format!("***@{host}"),
        None => authority.to_string(),
    };
    escape(&format!("{scheme}://{authority}{tail}"))
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
    fn the_server_minor_is_read_with_a_distributions_plus() {
        let v = |minor: &str| super::ServerVersion {
            major: "1".into(),
            minor: minor.into(),
            git_version: "v1.x".into(),
        };
        assert_eq!(v("37").minor_number(), Some(37));
        assert_eq!(v("30+").minor_number(), Some(30));
        assert_eq!(v("").minor_number(), None);
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(percent("spec.nodeName=node-1"), "spec.nodeName%3Dnode-1");
        assert_eq!(percent("a b/c"), "a%20b%2Fc");
    }
}
