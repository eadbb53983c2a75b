//! A fake Kubernetes API server in the test process, for what the real one cannot do on
//! purpose: answer endlessly, repeat a continue token, never answer, serve pods of another
//! node, put escape sequences in its messages (issue 51). HTTPS on 127.0.0.1 only, with a CA,
//! a server certificate and a node's client certificate of its own, so the client under test
//! runs exactly as against a real server; every request is recorded.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One request as received.
#[derive(Debug, Clone)]
pub struct Request {
    /// `GET`, `PUT`, ...
    pub method: String,
    /// The path with its query.
    pub path: String,
    /// Header names (lower case) and values.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
    /// When it arrived.
    pub at: Instant,
}

impl Request {
    /// The value of header `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What the server does with a request.
pub enum Reply {
    /// A status and a JSON body.
    Json(u16, String),
    /// A status, extra headers and a JSON body.
    WithHeaders(u16, Vec<(String, String)>, String),
    /// A 200 whose chunked body the function writes (an endless one: until the write fails).
    Stream(Writer),
    /// No answer for that long, then the connection is closed.
    Silent(Duration),
}

/// Writes a streamed body.
pub type Writer = Box<dyn FnOnce(&mut dyn Write) + Send>;

type Handler = dyn Fn(&Request) -> Reply + Send + Sync;

/// The server; stops accepting when dropped.
pub struct FakeApi {
    /// `https://127.0.0.1:PORT`.
    pub url: String,
    /// The CA that signed the server's and the client's certificates (PEM).
    pub ca_pem: String,
    /// The client certificate (`system:node:NODE`, group `system:nodes`) and its key (PEM).
    pub client: (String, String),
    requests: Arc<Mutex<Vec<Request>>>,
    stop: Arc<AtomicBool>,
    port: u16,
}

/// A Kubernetes `Status` body.
pub fn status(code: u16, message: &str) -> String {
    serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "code": code}).to_string()
}

impl FakeApi {
    /// Starts the server for node `node`'s client certificate; `handler` answers every
    /// request.
    pub fn start(
        node: &str,
        handler: impl Fn(&Request) -> Reply + Send + Sync + 'static,
    ) -> FakeApi {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "fake-api-ca");
        let ca = ca.self_signed(&ca_key).unwrap();
        let server_key = KeyPair::generate().unwrap();
        let server = CertificateParams::new(vec!["127.0.0.1".to_string()])
            .unwrap()
            .signed_by(&server_key, &ca, &ca_key)
            .unwrap();
        let client_key = KeyPair::generate().unwrap();
        let mut client = CertificateParams::new(Vec::<String>::new()).unwrap();
        client
            .distinguished_name
            .push(DnType::CommonName, format!("system:node:{node}"));
        client
            .distinguished_name
            .push(DnType::OrganizationName, "system:nodes");
        let client = client.signed_by(&client_key, &ca, &ca_key).unwrap();

        // ring, the provider kube's client is built with here: aws-lc is not in the tree
        #[allow(deprecated)]
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![server.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(server_key.serialize_der().into()),
            )
            .unwrap();
        let config = Arc::new(config);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let handler: Arc<Handler> = Arc::new(handler);
        {
            let (requests, stop) = (requests.clone(), stop.clone());
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(conn) = conn else { continue };
                    let (config, requests, handler) =
                        (config.clone(), requests.clone(), handler.clone());
                    std::thread::spawn(move || serve(conn, config, requests, handler));
                }
            });
        }
        FakeApi {
            url: format!("https://127.0.0.1:{port}"),
            ca_pem: ca.pem(),
            client: (client.pem(), client_key.serialize_pem()),
            requests,
            stop,
            port,
        }
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }

    /// Writes `kubelet.conf` (and its CA, certificate and key files beside it) into `dir`:
    /// the node's client certificate, or `token` instead; `server` instead of the fake's URL.
    pub fn kubeconfig(&self, dir: &Path, token: Option<&str>, server: Option<&str>) -> PathBuf {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("ca.crt"), &self.ca_pem).unwrap();
        let user = match token {
            Some(t) => format!("    token: {t}\n"),
            None => {
                std::fs::write(dir.join("client.crt"), &self.client.0).unwrap();
                std::fs::write(dir.join("client.key"), &self.client.1).unwrap();
                "    client-certificate: client.crt\n    client-key: client.key\n".to_string()
            }
        };
        let path = dir.join("kubelet.conf");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority: ca.crt\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\nusers:\n- name: u\n  user:\n{user}",
                server.unwrap_or(&self.url)
            ),
        )
        .unwrap();
        path
    }
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // wakes the accept loop up so it sees the flag
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn serve(
    conn: TcpStream,
    config: Arc<rustls::ServerConfig>,
    requests: Arc<Mutex<Vec<Request>>>,
    handler: Arc<Handler>,
) {
    let Ok(tls) = rustls::ServerConnection::new(config) else {
        return;
    };
    let mut stream = BufReader::new(rustls::StreamOwned::new(tls, conn));
    loop {
        let mut line = String::new();
        if stream.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let (method, path) = (
            parts.next().unwrap_or("").to_string(),
            parts.next().unwrap_or("").to_string(),
        );
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if stream.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((n, v)) = h.split_once(':') {
                headers.push((n.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        let len: usize = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; len];
        if stream.read_exact(&mut body).is_err() {
            return;
        }
        let request = Request {
            method,
            path,
            headers,
            body,
            at: Instant::now(),
        };
        requests.lock().unwrap().push(request.clone());
        let out = stream.get_mut();
        let ok = match handler(&request) {
            Reply::Json(code, body) => respond(out, code, &[], &body),
            Reply::WithHeaders(code, extra, body) => respond(out, code, &extra, &body),
            Reply::Stream(write) => {
                let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
                if out.write_all(head.as_bytes()).is_err() {
                    return;
                }
                write(out);
                return;
            }
            Reply::Silent(d) => {
                std::thread::sleep(d);
                return;
            }
        };
        if !ok {
            return;
        }
    }
}

fn respond(out: &mut dyn Write, code: u16, extra: &[(String, String)], body: &str) -> bool {
    let mut head = format!(
        "HTTP/1.1 {code} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (n, v) in extra {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str("\r\n");
    out.write_all(head.as_bytes()).is_ok()
        && out.write_all(body.as_bytes()).is_ok()
        && out.flush().is_ok()
}

/// Writes one HTTP chunk; false once the client is gone.
pub fn chunk(out: &mut dyn Write, bytes: &[u8]) -> bool {
    out.write_all(format!("{:x}\r\n", bytes.len()).as_bytes())
        .is_ok()
        && out.write_all(bytes).is_ok()
        && out.write_all(b"\r\n").is_ok()
        && out.flush().is_ok()
}
