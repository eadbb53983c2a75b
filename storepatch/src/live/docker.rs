//! A tiny Docker Engine API client: plain HTTP/1.1 over dockerd's unix socket, no async, no
//! HTTP library. Enough to read back what dockerd reports after a restart (labels, state,
//! pid); [`DockerClient::request`] and [`DockerClient::call`] take any method and body, which
//! is all the test harnesses (crate `testtools`) need to drive dockerd.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The newest API version we speak; dockerd 20.10 serves exactly this one, newer daemons
/// still accept it.
pub const API_VERSION: &str = "1.41";

#[derive(Debug, thiserror::Error)]
/// Errors of the Engine API client.
pub enum ApiError {
    #[error("docker socket {socket}: {source}")]
    /// The socket could not be used.
    Io {
        /// The socket.
        socket: PathBuf,
        #[source]
        /// What the system said.
        source: std::io::Error,
    },
    #[error("docker API {method} {path}: HTTP {status}: {message}")]
    /// dockerd answered with an HTTP error.
    Http {
        /// The HTTP method.
        method: String,
        /// The request path.
        path: String,
        /// The HTTP status.
        status: u16,
        /// dockerd's message.
        message: String,
    },
    #[error("docker API {what}: cannot decode the answer: {reason}")]
    /// The answer is not what the API documents.
    Decode {
        /// What was asked.
        what: String,
        /// What went wrong.
        reason: String,
    },
}

/// One HTTP answer.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    /// HTTP status code.
    pub status: u16,
    /// Header names and values, in order.
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked.
    pub body: Vec<u8>,
}

/// A row of `GET /containers/json?all=1`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct ContainerSummary {
    #[serde(rename = "Id")]
    /// Container id.
    pub id: String,
    #[serde(rename = "Names", default)]
    /// Names (`/k8s_…` for the kubelet's).
    pub names: Vec<String>,
    #[serde(rename = "Image", default)]
    /// Image reference.
    pub image: String,
    #[serde(rename = "Labels", default)]
    /// Labels, the kubelet's hashes among them.
    pub labels: Option<BTreeMap<String, String>>,
    /// `created`, `running`, `exited`, …
    #[serde(rename = "State", default)]
    pub state: String,
    #[serde(rename = "Status", default)]
    /// Human status text.
    pub status: String,
}

/// What `GET /containers/<id>/json` says about one container (the fields we use).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerInspect {
    /// Container id.
    pub id: String,
    /// Name.
    pub name: String,
    /// `Config.Labels`.
    pub labels: BTreeMap<String, String>,
    /// `State.Running`.
    pub running: bool,
    /// `running`, `exited`, …
    pub status: String,
    /// 0 when not running.
    pub pid: u32,
    /// `State.StartedAt`: tells a restart even when pids are reused.
    pub started_at: String,
    /// `Config.Image` as created, and the image id.
    pub image: String,
    /// `Image`: the image id.
    pub image_id: String,
}

#[derive(Deserialize)]
struct RawInspect {
    #[serde(rename = "Id")]
    id: String,
    #[serde(rename = "Name", default)]
    name: String,
    #[serde(rename = "Image", default)]
    image_id: String,
    #[serde(rename = "State")]
    state: RawState,
    #[serde(rename = "Config")]
    config: RawConfig,
}

#[derive(Deserialize)]
struct RawState {
    #[serde(rename = "Status", default)]
    status: String,
    #[serde(rename = "Running", default)]
    running: bool,
    #[serde(rename = "Pid", default)]
    pid: i64,
    #[serde(rename = "StartedAt", default)]
    started_at: String,
}

#[derive(Deserialize)]
struct RawConfig {
    #[serde(rename = "Labels", default)]
    labels: Option<BTreeMap<String, String>>,
    #[serde(rename = "Image", default)]
    image: String,
}

/// A client for one dockerd socket. Every call opens its own connection.
#[derive(Debug, Clone)]
pub struct DockerClient {
    socket: PathBuf,
    version: String,
    timeout: Duration,
}

impl DockerClient {
    /// A client speaking API [`API_VERSION`]; see [`DockerClient::negotiate`].
    pub fn new(socket: impl AsRef<Path>) -> Self {
        DockerClient {
            socket: socket.as_ref().to_path_buf(),
            version: API_VERSION.to_string(),
            timeout: Duration::from_secs(120),
        }
    }

    /// The same client with another timeout per request.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The socket it talks to.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The API version it speaks (after [`DockerClient::negotiate`]).
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Asks the daemon for its API version and speaks the older of it and [`API_VERSION`].
    pub fn negotiate(&mut self) -> Result<String, ApiError> {
        let r = self.raw("GET", "/version", None)?;
        let v: serde_json::Value = decode("GET /version", &r.body)?;
        let server = v
            .get("ApiVersion")
            .and_then(|x| x.as_str())
            .ok_or_else(|| ApiError::Decode {
                what: "GET /version".into(),
                reason: "no ApiVersion".into(),
            })?
            .to_string();
        self.version = if version_lt(&server, API_VERSION) {
            server
        } else {
            API_VERSION.to_string()
        };
        Ok(self.version.clone())
    }

    /// `GET /_ping`: `Ok` when the daemon answers `OK`.
    pub fn ping(&self) -> Result<(), ApiError> {
        let r = self.raw("GET", "/_ping", None)?;
        if r.status == 200 {
            Ok(())
        } else {
            Err(http_error("GET", "/_ping", &r))
        }
    }

    /// Sends `method` to `/v<version><path>` with an optional `(content type, body)` and
    /// returns the answer whatever its status.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<(&str, &[u8])>,
    ) -> Result<HttpResponse, ApiError> {
        self.raw(method, &format!("/v{}{path}", self.version), body)
    }

    /// Like [`DockerClient::request`], but a non-2xx status is an error, and the body is
    /// decoded as JSON into `T`.
    pub fn call<T: serde::de::DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: Option<(&str, &[u8])>,
    ) -> Result<T, ApiError> {
        let r = self.request(method, path, body)?;
        if !(200..300).contains(&r.status) {
            return Err(http_error(method, path, &r));
        }
        let body = if r.body.is_empty() {
            &b"null"[..]
        } else {
            &r.body
        };
        decode(&format!("{method} {path}"), body)
    }

    /// Every container, running or not, with its labels and state.
    pub fn list_containers(&self) -> Result<Vec<ContainerSummary>, ApiError> {
        self.call("GET", "/containers/json?all=1", None)
    }

    /// One container's labels, state, pid and start time.
    pub fn inspect(&self, id: &str) -> Result<ContainerInspect, ApiError> {
        let raw: RawInspect = self.call("GET", &format!("/containers/{id}/json"), None)?;
        Ok(ContainerInspect {
            id: raw.id,
            name: raw.name,
            labels: raw.config.labels.unwrap_or_default(),
            running: raw.state.running,
            status: raw.state.status,
            pid: u32::try_from(raw.state.pid).unwrap_or(0),
            started_at: raw.state.started_at,
            image: raw.config.image,
            image_id: raw.image_id,
        })
    }

    /// [`DockerClient::list_containers`] followed by [`DockerClient::inspect`] of each.
    pub fn inspect_all(&self) -> Result<Vec<ContainerInspect>, ApiError> {
        self.list_containers()?
            .iter()
            .map(|c| self.inspect(&c.id))
            .collect()
    }

    fn raw(
        &self,
        method: &str,
        path: &str,
        body: Option<(&str, &[u8])>,
    ) -> Result<HttpResponse, ApiError> {
        let io = |source| ApiError::Io {
            socket: self.socket.clone(),
            source,
        };
        let mut s = UnixStream::connect(&self.socket).map_err(io)?;
        s.set_read_timeout(Some(self.timeout)).map_err(io)?;
        s.set_write_timeout(Some(self.timeout)).map_err(io)?;
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: docker\r\nUser-Agent: kubelet-rehash\r\nConnection: close\r\n"
        );
        match body {
            Some((ctype, b)) => {
                head.push_str(&format!(
                    "Content-Type: {ctype}\r\nContent-Length: {}\r\n",
                    b.len()
                ));
            }
            None if method != "GET" => head.push_str("Content-Length: 0\r\n"),
            None => {}
        }
        head.push_str("\r\n");
        s.write_all(head.as_bytes()).map_err(io)?;
        if let Some((_, b)) = body {
            s.write_all(b).map_err(io)?;
        }
        s.flush().map_err(io)?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).map_err(io)?;
        parse_response(&raw).map_err(|reason| ApiError::Decode {
            what: format!("{method} {path}"),
            reason,
        })
    }
}

fn decode<T: serde::de::DeserializeOwned>(what: &str, body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::Decode {
        what: what.to_string(),
        reason: e.to_string(),
    })
}

fn http_error(method: &str, path: &str, r: &HttpResponse) -> ApiError {
    let message = serde_json::from_slice::<serde_json::Value>(&r.body)
        .ok()
        .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(String::from))
        .unwrap_or_else(|| String::from_utf8_lossy(&r.body).trim().to_string());
    ApiError::Http {
        method: method.to_string(),
        path: path.to_string(),
        status: r.status,
        message,
    }
}

/// `a < b` for dotted API versions like `1.41`.
fn version_lt(a: &str, b: &str) -> bool {
    let parse = |v: &str| -> Vec<u32> { v.split('.').map(|p| p.parse().unwrap_or(0)).collect() };
    parse(a) < parse(b)
}

/// Parses a complete HTTP/1.1 response (the connection was closed after it).
pub fn parse_response(raw: &[u8]) -> Result<HttpResponse, String> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no end of headers")?;
    let head = std::str::from_utf8(&raw[..end]).map_err(|_| "headers are not UTF-8")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().ok_or("empty response")?;
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let header = |k: &str| {
        headers
            .iter()
            .find(|(h, _)| h == k)
            .map(|(_, v)| v.as_str())
    };
    let rest = &raw[end + 4..];
    let body = if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        dechunk(rest)?
    } else if let Some(len) = header("content-length") {
        let len: usize = len.parse().map_err(|_| "bad Content-Length")?;
        if rest.len() < len {
            return Err(format!("body truncated: {} of {len} bytes", rest.len()));
        }
        rest[..len].to_vec()
    } else {
        rest.to_vec()
    };
    Ok(HttpResponse {
        status,
        headers,
        body,
    })
}

fn dechunk(mut data: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let nl = data
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("chunk size line not terminated")?;
        let line = std::str::from_utf8(&data[..nl]).map_err(|_| "bad chunk size")?;
        let size_hex = line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_hex, 16)
            .map_err(|_| format!("bad chunk size {size_hex:?}"))?;
        data = &data[nl + 2..];
        if size == 0 {
            return Ok(out);
        }
        if data.len() < size + 2 {
            return Err("chunk truncated".into());
        }
        out.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_chunked_and_sized_bodies() {
        let r = parse_response(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n[1,2\r\n2\r\n,3\r\n1\r\n]\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.body, b"[1,2,3]");
        let r =
            parse_response(b"HTTP/1.1 404 Not Found\r\nContent-Length: 5\r\n\r\nhello").unwrap();
        assert_eq!((r.status, &r.body[..]), (404, &b"hello"[..]));
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort").is_err());
        assert!(version_lt("1.40", "1.41") && !version_lt("1.51", "1.41"));
    }

    #[test]
    fn talks_http_over_a_unix_socket() {
        use std::os::unix::net::UnixListener;
        let d = tempfile::tempdir().unwrap();
        let sock = d.path().join("d.sock");
        let l = UnixListener::bind(&sock).unwrap();
        let server = std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let mut buf = [0u8; 4096];
            let n = c.read(&mut buf).unwrap();
            let req = String::from_utf8_lossy(&buf[..n]).into_owned();
            let body = r#"{"Id":"abc","Name":"/k8s_x","Image":"sha256:1","State":{"Status":"running","Running":true,"Pid":42,"StartedAt":"t"},"Config":{"Image":"img","Labels":{"annotation.io.kubernetes.container.hash":"3a1f6c2e"}}}"#;
            write!(
                c,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
            req
        });
        let got = DockerClient::new(&sock).inspect("abc").unwrap();
        let req = server.join().unwrap();
        assert!(
            req.starts_with("GET /v1.41/containers/abc/json HTTP/1.1\r\n"),
            "{req}"
        );
        assert_eq!(got.pid, 42);
        assert!(got.running);
        assert_eq!(
            got.labels["annotation.io.kubernetes.container.hash"],
            "3a1f6c2e"
        );
    }
}
