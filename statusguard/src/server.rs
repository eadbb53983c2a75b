//! The guard's HTTPS endpoint: a certificate authority and a serving certificate made for the
//! run (in memory only: the API server learns the CA from the webhook configuration's
//! `caBundle`), HTTP/1.1 over rustls, one thread per connection.
//!
//! Why no HTTP framework: the API server sends one kind of request (`POST` of an
//! AdmissionReview) and keeps its connections alive; a small reader bounds every request's
//! size and time, which is all a webhook on the path of every kubelet's status needs.

use crate::review::{Decision, Guard};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// The largest AdmissionReview read (a Pod and its old self; the API server's own limit for an
/// object is 3 MiB).
const MAX_BODY: usize = 16 << 20;

/// How long a connection may sit idle or send one request.
const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// The run's certificates: the CA's PEM (for `caBundle`), the serving certificate and key.
pub struct Certificates {
    /// The CA certificate, PEM.
    pub ca_pem: String,
    cert_der: Vec<u8>,
    key_der: Vec<u8>,
}

/// The civil date (year, month, day) of a day count since 1970-01-01 (H. Hinnant's algorithm).
fn civil(days: i64) -> (i32, u8, u8) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u8;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u8;
    let y = (yoe + era * 400 + i64::from(m <= 2)) as i32;
    (y, m, d)
}

/// Makes a CA and a certificate for `hosts` (IP addresses or DNS names: what the webhook's URL
/// names), valid from yesterday for `days` days: a run's certificate never outlives it by much.
pub fn certificates(hosts: &[String], days: u32) -> Result<Certificates, String> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let today = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_err(|e| e.to_string())?
        .as_secs() as i64
        / 86_400;
    let at = |d: i64| {
        let (y, m, day) = civil(d);
        rcgen::date_time_ymd(y, m, day)
    };
    let e = |e: rcgen::Error| format!("cannot make the guard's certificate: {e}");
    let ca_key = KeyPair::generate().map_err(e)?;
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(e)?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.distinguished_name
        .push(DnType::CommonName, "kubelet-rehash status guard CA");
    ca.not_before = at(today - 1);
    ca.not_after = at(today + i64::from(days));
    let ca = ca.self_signed(&ca_key).map_err(e)?;
    let key = KeyPair::generate().map_err(e)?;
    let mut params = CertificateParams::new(hosts.to_vec()).map_err(e)?;
    params
        .distinguished_name
        .push(DnType::CommonName, "kubelet-rehash status guard");
    params.not_before = at(today - 1);
    params.not_after = at(today + i64::from(days));
    let cert = params.signed_by(&key, &ca, &ca_key).map_err(e)?;
    Ok(Certificates {
        ca_pem: ca.pem(),
        cert_der: cert.der().to_vec(),
        key_der: key.serialize_der(),
    })
}

/// What the server tells its owner of each request it answered: the decision and the
/// AdmissionReview it answered.
pub type Report = Arc<dyn Fn(&Decision, &[u8]) + Send + Sync>;

/// The running endpoint; stopped on drop.
pub struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl Server {
    /// Listens on `listen` (`127.0.0.1:0` picks a port) and answers every AdmissionReview with
    /// `guard`, telling `report` what it did.
    pub fn start(
        listen: &str,
        certs: &Certificates,
        guard: Arc<Guard>,
        report: Report,
    ) -> Result<Server, String> {
        // ring, the provider the rest of the tool's TLS (kube's client) is built with: aws-lc
        // is not in the tree
        #[allow(deprecated)]
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(
                vec![certs.cert_der.clone().into()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(certs.key_der.clone().into()),
            )
            .map_err(|e| format!("the guard's certificate: {e}"))?;
        let config = Arc::new(config);
        let listener =
            TcpListener::bind(listen).map_err(|e| format!("cannot listen on {listen}: {e}"))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if flag.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (config, guard, report) = (config.clone(), guard.clone(), report.clone());
                std::thread::spawn(move || serve(conn, config, &guard, &report));
            }
        });
        Ok(Server { addr, stop })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // wakes the accept loop so it sees the flag
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
    }
}

fn serve(conn: TcpStream, config: Arc<rustls::ServerConfig>, guard: &Guard, report: &Report) {
    let _ = conn.set_read_timeout(Some(IO_TIMEOUT));
    let _ = conn.set_write_timeout(Some(IO_TIMEOUT));
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
        let mut length = 0usize;
        let mut close = false;
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
                let (n, v) = (n.trim().to_ascii_lowercase(), v.trim());
                match n.as_str() {
                    "content-length" => length = v.parse().unwrap_or(usize::MAX),
                    "connection" => close = v.eq_ignore_ascii_case("close"),
                    // a chunked body is not what the API server sends: refused below
                    "transfer-encoding" => length = usize::MAX,
                    _ => {}
                }
            }
        }
        let (code, body) = if length > MAX_BODY {
            close = true;
            (413, b"request too large or not sized".to_vec())
        } else {
            let mut body = vec![0; length];
            if stream.read_exact(&mut body).is_err() {
                return;
            }
            match (method.as_str(), path.as_str()) {
                ("GET", "/healthz") => (200, b"ok".to_vec()),
                ("POST", _) => match guard.review(&body, Instant::now()) {
                    Ok((answer, decision)) => {
                        report(&decision, &body);
                        (200, answer)
                    }
                    Err(e) => (400, e.into_bytes()),
                },
                _ => (405, b"POST an AdmissionReview".to_vec()),
            }
        };
        let head = format!(
            "HTTP/1.1 {code} {}\r\ncontent-type: {}\r\ncontent-length: {}\r\n{}\r\n",
            if code == 200 { "OK" } else { "Error" },
            if code == 200 && method == "POST" {
                "application/json"
            } else {
                "text/plain"
            },
            body.len(),
            if close { "connection: close\r\n" } else { "" }
        );
        let out = stream.get_mut();
        if out.write_all(head.as_bytes()).is_err()
            || out.write_all(&body).is_err()
            || out.flush().is_err()
            || close
        {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::civil;

    #[test]
    fn civil_dates_match_the_calendar() {
        assert_eq!(civil(0), (1970, 1, 1), "day 0 is 1970-01-01");
        assert_eq!(civil(20_794), (2026, 12, 7), "a recent day");
        assert_eq!(civil(11_016), (2000, 2, 29), "a leap day");
    }
}
