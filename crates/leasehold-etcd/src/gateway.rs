//! A small blocking client of etcd's HTTP/JSON gateway (`POST /v3/…`, JSON bodies with base64 keys
//! and values, 64-bit numbers as strings), over `ureq`.
//!
//! * Bounded: every request gets what is left of the call's [`Deadline`] as ureq's global timeout
//!   (and at most the connect timeout for its connect); names are resolved by core's bounded
//!   resolver ([`CoreResolver`]), so no lookup outlives the call either.
//! * Members: a request goes to the member that answered last; one that cannot be reached, times
//!   out or has no leader is passed over for the next. A request that may have been applied (sent,
//!   then no answer) is sent again only when the caller says it is safe ([`Resend::Safe`]: reads,
//!   lease renewals and revocations, and writes whose outcome a second try can tell).
//! * Fork: each process has its own agent (and so its own idle connections) through core's
//!   [`PerProcess`]: a child never writes on a socket its parent uses.
//! * Authentication: with a user, a token from `/v3/auth/authenticate` goes in the `Authorization`
//!   header; an expired token is replaced once and the request sent again (it was refused, not run).
//! * Watches: a waiter's watch is a stream that must be read in slices and closed at will, which a
//!   request through ureq cannot be (its timeout is fixed when it is sent), so [`HeldWatch`]
//!   speaks HTTP/1.0 on a socket of its own (through rustls for `etcds://`).

use base64::Engine;
use leasehold_core::config::{EtcdConfig, TlsOptions};
use leasehold_core::fork::PerProcess;
use leasehold_core::tls_insecure::NoVerification;
use leasehold_core::{Deadline, Error, Result, Secret};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use ureq::unversioned::resolver::{ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{DefaultConnector, NextTimeout};

/// Whether a request may be sent again after an answer that never came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resend {
    /// Running it twice does no harm, or the caller tells the second outcome apart.
    Safe,
    /// Sent again only when the first never reached a member (its connect failed).
    Once,
}

/// What etcd's gRPC status codes mean here.
const CODE_NOT_FOUND: i64 = 5;
const CODE_PERMISSION_DENIED: i64 = 7;
const CODE_UNAUTHENTICATED: i64 = 16;
const CODE_INVALID_ARGUMENT: i64 = 3;
const CODE_FAILED_PRECONDITION: i64 = 9;

pub(crate) struct Gateway {
    bases: Vec<String>,
    /// The members' hosts and ports, for the watches this module holds itself.
    endpoints: Vec<(String, u16)>,
    /// rustls's settings for those watches over TLS (`None`: plain text).
    watch_tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    /// The member the next request goes to first.
    next: AtomicUsize,
    config: ureq::config::Config,
    here: PerProcess<Here>,
    connect_timeout: Duration,
    user: Option<(String, Secret)>,
    secrets: Vec<String>,
}

/// One process's agent and authentication token.
struct Here {
    agent: ureq::Agent,
    token: Mutex<Option<String>>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("members", &self.bases)
            .finish_non_exhaustive()
    }
}

/// Why a request failed, before it is turned into the caller's error.
enum Failure {
    /// Never reached a member: safe to send elsewhere.
    NotSent(String),
    /// Sent, and no answer (a timeout, a broken connection): it may have been applied.
    Unknown(String),
    /// The member answered with an error.
    Answered { code: i64, message: String },
}

impl Gateway {
    pub(crate) fn new(
        etcd: &EtcdConfig,
        connect_timeout: Duration,
        pool_size: u32,
    ) -> Result<Gateway> {
        let scheme = if etcd.tls.is_some() { "https" } else { "http" };
        let bases = etcd
            .endpoints
            .iter()
            .map(|e| format!("{scheme}://{e}"))
            .collect();
        let mut builder = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_idle_connections(pool_size as usize)
            .max_idle_connections_per_host(pool_size as usize)
            .user_agent(concat!("leasehold/", env!("CARGO_PKG_VERSION")))
            .no_delay(true);
        if let Some(tls) = &etcd.tls {
            builder = builder.tls_config(tls_config(tls)?);
        }
        let user = match (&etcd.user, &etcd.password) {
            (Some(user), Some(password)) => Some((user.clone(), password.clone())),
            _ => None,
        };
        Ok(Gateway {
            bases,
            endpoints: etcd
                .endpoints
                .iter()
                .map(|e| (e.host.clone(), e.port))
                .collect(),
            watch_tls: etcd.tls.as_ref().map(rustls_config).transpose()?,
            next: AtomicUsize::new(0),
            config: builder.build(),
            here: PerProcess::new(),
            connect_timeout,
            user,
            secrets: etcd.secrets(),
        })
    }

    fn here(&self) -> &Here {
        self.here
            .get(|| Here {
                agent: ureq::Agent::with_parts(
                    self.config.clone(),
                    DefaultConnector::default(),
                    CoreResolver,
                ),
                token: Mutex::new(None),
            })
            .0
    }

    /// The members, the one the next request goes to first marked with `*`.
    pub(crate) fn members(&self) -> String {
        let next = self.next.load(Ordering::Relaxed) % self.bases.len();
        self.bases
            .iter()
            .enumerate()
            .map(|(i, base)| {
                let host = base.split("://").nth(1).unwrap_or(base);
                if i == next {
                    format!("{host}*")
                } else {
                    host.to_owned()
                }
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Each member as the URL names it (`host:port`), for questions asked of every member
    /// ([`Gateway::ask_member`]).
    pub(crate) fn member_names(&self) -> Vec<String> {
        self.bases
            .iter()
            .map(|base| base.split("://").nth(1).unwrap_or(base).to_owned())
            .collect()
    }

    /// `POST path` with `body` to member `member` alone, within `deadline` (no failover: the
    /// question is about that member), its error as a message with every secret masked.
    pub(crate) fn ask_member(
        &self,
        member: usize,
        path: &str,
        body: &Value,
        deadline: Deadline,
    ) -> std::result::Result<Value, String> {
        let failed = |message: String| leasehold_core::secret::redact(&message, &self.secrets);
        match self.send(member, path, &body.to_string(), deadline) {
            Ok(response) => read_json(response, deadline, &self.secrets).map_err(|e| e.to_string()),
            Err(Failure::NotSent(m) | Failure::Unknown(m)) => Err(failed(m)),
            Err(Failure::Answered { message, .. }) => Err(failed(message)),
        }
    }

    /// `POST path` with `body`, within `deadline`: the answer's JSON.
    pub(crate) fn call(
        &self,
        path: &str,
        body: &Value,
        retry: Resend,
        deadline: Deadline,
    ) -> Result<Value> {
        let body = body.to_string();
        let members = self.bases.len();
        let mut tried = 0;
        let mut reauthenticated = false;
        loop {
            let member = self.next.load(Ordering::Relaxed) % members;
            let failure = match self.send(member, path, &body, deadline) {
                Ok(response) => return read_json(response, deadline, &self.secrets),
                Err(failure) => failure,
            };
            let (message, again) = match failure {
                Failure::NotSent(message) => (message, true),
                Failure::Unknown(message) => (message, retry == Resend::Safe),
                Failure::Answered { code, message } if code == CODE_UNAUTHENTICATED => {
                    if self.user.is_some() && !reauthenticated {
                        // An expired token is refused before anything runs: log in again once.
                        reauthenticated = true;
                        *lock(&self.here().token) = None;
                        continue;
                    }
                    return Err(
                        Error::invalid(format!("etcd refused the credentials: {message}"))
                            .redacted(&self.secrets),
                    );
                }
                Failure::Answered { code, message } => {
                    return Err(answered(code, message).redacted(&self.secrets))
                }
            };
            // This member could not serve it: the next request goes to the next member.
            let _ = self.next.compare_exchange(
                member,
                (member + 1) % members,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            tried += 1;
            if !again || tried >= members || deadline.is_past() {
                return Err(Error::unavailable(
                    format!(
                        "etcd at {}: {message}",
                        self.bases[member].split("://").nth(1).unwrap_or_default()
                    ),
                    &self.secrets,
                ));
            }
        }
    }

    fn send(
        &self,
        member: usize,
        path: &str,
        body: &str,
        deadline: Deadline,
    ) -> Result<ureq::http::Response<ureq::Body>, Failure> {
        let token = self.token(member, deadline)?;
        self.post(member, path, body, token.as_deref(), deadline)
    }

    /// The request itself, with the header that makes a member cut off from its leader refuse
    /// (streams, watches above all, would otherwise wait on it for ever).
    fn post(
        &self,
        member: usize,
        path: &str,
        body: &str,
        token: Option<&str>,
        deadline: Deadline,
    ) -> Result<ureq::http::Response<ureq::Body>, Failure> {
        let left = deadline.remaining();
        if left.is_zero() {
            return Err(Failure::NotSent(
                "out of time (the call's connect + I/O timeout is used up)".into(),
            ));
        }
        let url = format!("{}{path}", self.bases[member]);
        let mut request = self
            .here()
            .agent
            .post(&url)
            .config()
            .timeout_global(Some(left))
            .timeout_connect(Some(self.connect_timeout.min(left)))
            .build()
            .header("Content-Type", "application/json")
            .header("Grpc-Metadata-hasleader", "true");
        if let Some(token) = token {
            request = request.header("Authorization", token);
        }
        let response = request.send(body).map_err(|e| failure_of(&e))?;
        let status = response.status().as_u16();
        if status == 200 {
            return Ok(response);
        }
        let text = response
            .into_body()
            .with_config()
            .limit(64 * 1024)
            .read_to_string()
            .unwrap_or_default();
        let parsed: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let code = number(&parsed["code"]).unwrap_or(-1);
        let message = parsed["error"]
            .as_str()
            .or(parsed["message"].as_str())
            .map(str::to_owned)
            .unwrap_or_else(|| format!("HTTP {status}"));
        // "No leader" and a timed-out proposal: this member cannot serve now, another may.
        if code == 14 || message.contains("no leader") || status == 503 {
            return Err(Failure::Unknown(message));
        }
        Err(Failure::Answered { code, message })
    }

    /// This process's token, logging in first when there is a user and no token yet.
    fn token(&self, member: usize, deadline: Deadline) -> Result<Option<String>, Failure> {
        let Some((user, password)) = &self.user else {
            return Ok(None);
        };
        if let Some(token) = lock(&self.here().token).clone() {
            return Ok(Some(token));
        }
        let body = json!({"name": user, "password": password.expose()}).to_string();
        // A refused login (etcd says "invalid argument" for a wrong password) is the
        // credentials' fault, whatever the code.
        let response = self
            .post(member, "/v3/auth/authenticate", &body, None, deadline)
            .map_err(|failure| match failure {
                Failure::Answered { message, .. } => Failure::Answered {
                    code: CODE_UNAUTHENTICATED,
                    message,
                },
                other => other,
            })?;
        let answer = read_json(response, deadline, &self.secrets)
            .map_err(|e| Failure::Unknown(e.to_string()))?;
        let token = answer["token"]
            .as_str()
            .ok_or_else(|| Failure::Answered {
                code: CODE_UNAUTHENTICATED,
                message: "etcd gave no token (is authentication enabled?)".into(),
            })?
            .to_owned();
        *lock(&self.here().token) = Some(token.clone());
        Ok(Some(token))
    }
}

/// A watch on a connection of the waiter's own, kept open across the slices of a wait: once etcd
/// has caught the watch up with the store, a deletion reaches the waiter at once, where a watch
/// opened anew for each slice would wait for etcd's catch-up pass (every 100 ms). HTTP/1.0, so the
/// stream comes unchunked, one JSON message a line, until either side closes; each read is bounded
/// by the socket's timeout, set to what is left of the slice.
pub(crate) struct HeldWatch {
    stream: WatchStream,
    pending: Vec<u8>,
}

enum WatchStream {
    Plain(std::net::TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream>>),
}

impl WatchStream {
    fn socket(&self) -> &std::net::TcpStream {
        match self {
            WatchStream::Plain(s) => s,
            WatchStream::Tls(s) => &s.sock,
        }
    }
}

impl std::io::Read for WatchStream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            WatchStream::Plain(s) => s.read(buf),
            WatchStream::Tls(s) => s.read(buf),
        }
    }
}

impl std::io::Write for WatchStream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            WatchStream::Plain(s) => s.write(buf),
            WatchStream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            WatchStream::Plain(s) => s.flush(),
            WatchStream::Tls(s) => s.flush(),
        }
    }
}

impl Gateway {
    /// Opens a [`HeldWatch`] of `key` (or the range to `range_end`) from revision `from`,
    /// deletions only, within `deadline`.
    pub(crate) fn open_watch(
        &self,
        key: &[u8],
        range_end: Option<&[u8]>,
        from: i64,
        deadline: Deadline,
    ) -> Result<HeldWatch> {
        use std::io::Write;
        let member = self.next.load(Ordering::Relaxed) % self.endpoints.len();
        let (host, port) = &self.endpoints[member];
        let fail = |what: String| {
            let _ = self.next.compare_exchange(
                member,
                (member + 1) % self.endpoints.len(),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            Error::unavailable(
                format!("etcd watch at {host}:{port}: {what}"),
                &self.secrets,
            )
        };
        let token = match self.token(member, deadline) {
            Ok(token) => token,
            Err(Failure::Answered { code, message }) => {
                return Err(answered(code, message).redacted(&self.secrets))
            }
            Err(Failure::NotSent(m) | Failure::Unknown(m)) => return Err(fail(m)),
        };
        let addrs = leasehold_core::resolve::resolve(host, *port, deadline)?;
        let mut last = String::from("no address");
        let mut stream = None;
        for addr in addrs {
            let left = deadline.cap(self.connect_timeout);
            if left.is_zero() {
                break;
            }
            match std::net::TcpStream::connect_timeout(&addr, left) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = e.to_string(),
            }
        }
        let socket = stream.ok_or_else(|| fail(last))?;
        let _ = socket.set_nodelay(true);
        let left = deadline.remaining().max(Duration::from_millis(1));
        let _ = socket.set_write_timeout(Some(left));
        let _ = socket.set_read_timeout(Some(left));
        let mut stream = match &self.watch_tls {
            None => WatchStream::Plain(socket),
            Some(config) => {
                let name = rustls::pki_types::ServerName::try_from(host.clone())
                    .map_err(|e| fail(format!("not a TLS server name: {e}")))?;
                let conn = rustls::ClientConnection::new(config.clone(), name)
                    .map_err(|e| fail(format!("TLS: {e}")))?;
                WatchStream::Tls(Box::new(rustls::StreamOwned::new(conn, socket)))
            }
        };
        let mut request = json!({
            "key": b64(key),
            "start_revision": from.to_string(),
            "filters": ["NOPUT"],
        });
        if let Some(end) = range_end {
            request["range_end"] = json!(b64(end));
        }
        let body = json!({ "create_request": request }).to_string();
        let auth = token
            .map(|t| format!("Authorization: {t}\r\n"))
            .unwrap_or_default();
        let head = format!(
            "POST /v3/watch HTTP/1.0\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n\
             Grpc-Metadata-hasleader: true\r\n{auth}Content-Length: {}\r\n\r\n",
            body.len()
        );
        stream
            .write_all(head.as_bytes())
            .and_then(|()| stream.write_all(body.as_bytes()))
            .map_err(|e| fail(e.to_string()))?;
        let mut watch = HeldWatch {
            stream,
            pending: Vec::new(),
        };
        // The status line and headers, up to the blank line.
        loop {
            if let Some(end) = find(&watch.pending, b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&watch.pending[..end]).into_owned();
                watch.pending.drain(..end + 4);
                let status = head.lines().next().unwrap_or_default();
                if !status.contains(" 200 ") {
                    return Err(fail(format!("answered {status}")));
                }
                return Ok(watch);
            }
            match watch.fill(deadline) {
                Ok(true) => {}
                Ok(false) => return Err(fail("no answer in time".into())),
                Err(e) => return Err(fail(e)),
            }
        }
    }

    /// Waits on `watch` until `until`: `Ok(true)` when it reports a deletion (or that the history
    /// it started from was compacted, or that it ended: look again), `Ok(false)` when the time
    /// ran out quietly. An error leaves the watch unusable.
    pub(crate) fn wait_deletion(&self, watch: &mut HeldWatch, until: Deadline) -> Result<bool> {
        loop {
            while let Some(end) = watch.pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = watch.pending.drain(..=end).collect();
                let message: Value = serde_json::from_slice(&line).unwrap_or(Value::Null);
                if let Some(error) = message.get("error") {
                    return Err(Error::unavailable(
                        format!(
                            "etcd watch: {}",
                            error["message"].as_str().unwrap_or("failed")
                        ),
                        &self.secrets,
                    ));
                }
                let result = &message["result"];
                let compacted = number(&result["compact_revision"]).unwrap_or(0) > 0;
                let events = result["events"].as_array().is_some_and(|e| !e.is_empty());
                if compacted || events || result["canceled"].as_bool() == Some(true) {
                    return Ok(true);
                }
            }
            match watch.fill(until) {
                Ok(true) => {}
                Ok(false) => return Ok(false),
                Err(e) => {
                    return Err(Error::unavailable(
                        format!("etcd watch: {e}"),
                        &self.secrets,
                    ))
                }
            }
        }
    }
}

impl HeldWatch {
    /// Reads what has come, waiting until `until` at most: `Ok(false)` when nothing came in time.
    fn fill(&mut self, until: Deadline) -> Result<bool, String> {
        use std::io::Read;
        let left = until.remaining();
        if left.is_zero() {
            return Ok(false);
        }
        self.stream
            .socket()
            .set_read_timeout(Some(left))
            .map_err(|e| e.to_string())?;
        let mut buf = [0u8; 8192];
        match self.stream.read(&mut buf) {
            Ok(0) => Err("the member closed the watch".into()),
            Ok(n) => {
                self.pending.extend_from_slice(&buf[..n]);
                Ok(true)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                Ok(false)
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Ok(true),
            Err(e) => Err(e.to_string()),
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The JSON of a 200 answer, read within the deadline.
fn read_json(
    response: ureq::http::Response<ureq::Body>,
    deadline: Deadline,
    secrets: &[String],
) -> Result<Value> {
    let _ = deadline; // the request's global timeout covers reading its body
    let text = response
        .into_body()
        .with_config()
        .limit(16 * 1024 * 1024)
        .read_to_string()
        .map_err(|e| Error::unavailable(format!("etcd answer: {e}"), secrets))?;
    serde_json::from_str(&text)
        .map_err(|e| Error::unavailable(format!("etcd answered something not JSON: {e}"), secrets))
}

/// The error of an answer etcd gave.
fn answered(code: i64, message: String) -> Error {
    match code {
        CODE_NOT_FOUND if message.contains("lease not found") => {
            Error::Lost(format!("its etcd lease has ended ({message})"))
        }
        CODE_PERMISSION_DENIED | CODE_UNAUTHENTICATED | CODE_FAILED_PRECONDITION => {
            Error::invalid(format!("etcd refused: {message}"))
        }
        // etcd answers a request without credentials, on a cluster that wants them, with
        // "invalid argument: user name is empty".
        CODE_INVALID_ARGUMENT if message.contains("user name") || message.contains("auth") => {
            Error::invalid(format!(
                "etcd refused: {message} (give user:password@ in the URL)"
            ))
        }
        CODE_INVALID_ARGUMENT => Error::Internal(format!("etcd refused a request: {message}")),
        _ => Error::Unavailable(format!("etcd: {message}")),
    }
}

fn failure_of(error: &ureq::Error) -> Failure {
    use ureq::Timeout;
    let text = error.to_string();
    match error {
        ureq::Error::ConnectionFailed | ureq::Error::HostNotFound => Failure::NotSent(text),
        ureq::Error::Timeout(Timeout::Resolve | Timeout::Connect) => Failure::NotSent(text),
        ureq::Error::Io(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            Failure::NotSent(text)
        }
        ureq::Error::Tls(_) | ureq::Error::Pem(_) | ureq::Error::Rustls(_) => Failure::Answered {
            code: CODE_FAILED_PRECONDITION,
            message: format!("TLS: {text}"),
        },
        _ => Failure::Unknown(text),
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// ureq's TLS settings from the URL's files.
fn tls_config(tls: &TlsOptions) -> Result<ureq::tls::TlsConfig> {
    use ureq::tls::{parse_pem, Certificate, ClientCert, PemItem, PrivateKey, RootCerts};
    let read = |path: &std::path::Path, what: &str| {
        std::fs::read(path).map_err(|e| {
            Error::invalid(format!(
                "cannot read {what} {}: {}",
                path.display(),
                e.kind()
            ))
        })
    };
    let mut builder = ureq::tls::TlsConfig::builder().disable_verification(tls.insecure);
    if let Some(ca) = &tls.ca_file {
        let pem = read(ca, "tls_ca_file")?;
        let certs: Vec<Certificate<'static>> = parse_pem(&pem)
            .filter_map(|item| match item {
                Ok(PemItem::Certificate(c)) => Some(c),
                _ => None,
            })
            .collect();
        if certs.is_empty() {
            return Err(Error::invalid(format!(
                "tls_ca_file {} holds no PEM certificate",
                ca.display()
            )));
        }
        builder = builder.root_certs(RootCerts::new_with_certs(&certs));
    }
    if let (Some(cert), Some(key_file)) = (&tls.cert_file, &tls.key_file) {
        let pem = read(cert, "tls_cert_file")?;
        let chain: Vec<Certificate<'static>> = parse_pem(&pem)
            .filter_map(|item| match item {
                Ok(PemItem::Certificate(c)) => Some(c),
                _ => None,
            })
            .collect();
        let pem = read(key_file, "tls_key_file")?;
        let key: Option<PrivateKey<'static>> = parse_pem(&pem).find_map(|item| match item {
            Ok(PemItem::PrivateKey(k)) => Some(k),
            _ => None,
        });
        let key = key.ok_or_else(|| {
            Error::invalid(format!(
                "tls_key_file {} holds no PEM private key",
                key_file.display()
            ))
        })?;
        if chain.is_empty() {
            return Err(Error::invalid(format!(
                "tls_cert_file {} holds no PEM certificate",
                cert.display()
            )));
        }
        builder = builder.client_cert(Some(ClientCert::new_with_certs(&chain, key)));
    }
    if tls.insecure {
        tracing::warn!(
            "etcds:// with tls_insecure=true: the members' certificates are not verified"
        );
    }
    Ok(builder.build())
}

/// rustls's settings for the held watches, from the URL's files: the same trust as ureq's (the
/// CA file's certificates, else Mozilla's roots), the client certificate, or no checks at all with
/// `tls_insecure`.
fn rustls_config(tls: &TlsOptions) -> Result<std::sync::Arc<rustls::ClientConfig>> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let invalid = |what: &str, e: &dyn std::fmt::Display| Error::invalid(format!("{what}: {e}"));
    let read = |path: &std::path::Path, what: &str| {
        std::fs::read(path).map_err(|e| invalid(what, &e.kind()))
    };
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid("TLS", &e))?;
    let builder = if tls.insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(std::sync::Arc::new(NoVerification::new(
                provider.signature_verification_algorithms,
            )))
    } else {
        let mut roots = rustls::RootCertStore::empty();
        match &tls.ca_file {
            Some(ca) => {
                for cert in CertificateDer::pem_slice_iter(&read(ca, "tls_ca_file")?) {
                    let cert = cert.map_err(|e| invalid("tls_ca_file", &e))?;
                    roots.add(cert).map_err(|e| invalid("tls_ca_file", &e))?;
                }
            }
            None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        }
        builder.with_root_certificates(roots)
    };
    let config = match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => {
            let chain = CertificateDer::pem_slice_iter(&read(cert, "tls_cert_file")?)
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| invalid("tls_cert_file", &e))?;
            let key = PrivateKeyDer::from_pem_slice(&read(key, "tls_key_file")?)
                .map_err(|_| invalid("tls_key_file", &"holds no PEM private key"))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| invalid("tls_cert_file and tls_key_file", &e))?
        }
        _ => builder.with_no_client_auth(),
    };
    Ok(std::sync::Arc::new(config))
}

/// Name resolution through core's resolver, bounded by the request's own timeout.
#[derive(Debug)]
struct CoreResolver;

impl Resolver for CoreResolver {
    fn resolve(
        &self,
        uri: &ureq::http::Uri,
        _config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let host = uri.host().ok_or(ureq::Error::HostNotFound)?;
        let port = uri.port_u16().unwrap_or(match uri.scheme_str() {
            Some("https") => 443,
            _ => 80,
        });
        let deadline = Deadline::after(*timeout.after);
        let addrs = leasehold_core::resolve::resolve(host, port, deadline)
            .map_err(|_| ureq::Error::HostNotFound)?;
        let mut resolved = self.empty();
        for addr in addrs.into_iter().take(16) {
            resolved.push(addr);
        }
        Ok(resolved)
    }
}

pub(crate) fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub(crate) fn unb64(value: &Value) -> Vec<u8> {
    value
        .as_str()
        .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
        .unwrap_or_default()
}

/// A 64-bit number as the gateway writes it (a string), or a plain JSON number.
pub(crate) fn number(value: &Value) -> Option<i64> {
    match value {
        Value::String(s) => s.parse().ok(),
        Value::Number(n) => n.as_i64(),
        _ => None,
    }
}

/// The revision in an answer's header.
pub(crate) fn revision(answer: &Value) -> Option<i64> {
    number(&answer["header"]["revision"])
}
