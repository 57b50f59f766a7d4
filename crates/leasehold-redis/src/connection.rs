//! Opening connections to one Redis server for a connection pool: connect timeout, read and write
//! timeouts, bounded name lookup, AUTH (user and password, for ACLs), the db number, TLS for the
//! TLS schemes (`tls_ca_file`, a client certificate, `tls_insecure`), and a record of which
//! connections are known to be broken so the pool drops them instead of handing them out again.

use crate::wire::Wire;
use leasehold_core::config::{Config, RedisServer, TlsOptions};
use leasehold_core::tls_insecure::NoVerification;
use leasehold_core::{Deadline, Error};
use redis::io::tcp::TcpSettings;
use redis::{
    ClientTlsConfig, ConnectionAddr, ConnectionInfo, ConnectionLike, IntoConnectionInfo,
    RedisConnectionInfo, RedisError, RedisResult, TlsCertificates,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How to reach one server and how long each step may take.
#[derive(Debug, Clone)]
pub struct ConnectSettings {
    pub connect_timeout: Duration,
    pub io_timeout: Duration,
    /// `None`: plain text.
    pub tls: Option<Tls>,
    /// `allow_eviction=true`: a server that may evict keys is used anyway (see `eviction.rs`).
    pub allow_eviction: bool,
}

impl ConnectSettings {
    /// The timeouts and TLS settings of a Redis configuration; the TLS files are read (and checked)
    /// here, once, so a missing or malformed file is an `InvalidArgument` at connect rather than a
    /// failure on every connection.
    pub fn from_config(config: &Config) -> leasehold_core::Result<ConnectSettings> {
        let tls = match &config.redis.tls {
            Some(options) => Some(Tls::load(options)?),
            None => None,
        };
        Ok(ConnectSettings {
            connect_timeout: config.connect_timeout,
            io_timeout: config.io_timeout,
            tls,
            allow_eviction: config.redis.allow_eviction,
        })
    }
}

/// The TLS settings of a backend, with the PEM files already read.
#[derive(Clone, Default)]
pub struct Tls {
    ca_file: Option<PathBuf>,
    client_certificate: bool,
    insecure: bool,
    /// What redis-rs is handed; `None`: the system trust store, no client certificate.
    certificates: Option<TlsCertificates>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Paths and flags only: never the key.
        f.debug_struct("Tls")
            .field("ca_file", &self.ca_file)
            .field("client_certificate", &self.client_certificate)
            .field("insecure", &self.insecure)
            .finish()
    }
}

impl Tls {
    pub fn load(options: &TlsOptions) -> leasehold_core::Result<Tls> {
        let read = |what: &str, path: &Path| {
            std::fs::read(path)
                .map_err(|e| Error::invalid(format!("{what} {}: {e}", path.display())))
        };
        let root_cert = match &options.ca_file {
            Some(path) => {
                let pem = read("tls_ca_file", path)?;
                let certs = CertificateDer::pem_slice_iter(&pem)
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(|e| {
                        Error::invalid(format!("tls_ca_file {}: not PEM ({e})", path.display()))
                    })?;
                if certs.is_empty() {
                    return Err(Error::invalid(format!(
                        "tls_ca_file {}: holds no PEM certificate",
                        path.display()
                    )));
                }
                Some(pem)
            }
            None => None,
        };
        let client_tls = match (&options.cert_file, &options.key_file) {
            (Some(cert), Some(key)) => {
                let client_cert = read("tls_cert_file", cert)?;
                let n = CertificateDer::pem_slice_iter(&client_cert)
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map(|c| c.len())
                    .unwrap_or(0);
                if n == 0 {
                    return Err(Error::invalid(format!(
                        "tls_cert_file {}: holds no PEM certificate",
                        cert.display()
                    )));
                }
                let client_key = read("tls_key_file", key)?;
                // The key's own parse error could quote key material: only the path is named.
                if PrivateKeyDer::from_pem_slice(&client_key).is_err() {
                    return Err(Error::invalid(format!(
                        "tls_key_file {}: holds no PEM private key",
                        key.display()
                    )));
                }
                Some(ClientTlsConfig {
                    client_cert,
                    client_key,
                })
            }
            // Core refuses one without the other; a lone one here is ignored rather than half-used.
            _ => None,
        };
        let client_certificate = client_tls.is_some();
        let certificates =
            (root_cert.is_some() || client_tls.is_some()).then_some(TlsCertificates {
                client_tls,
                root_cert,
            });
        Ok(Tls {
            ca_file: options.ca_file.clone(),
            client_certificate,
            insecure: options.insecure,
            certificates,
        })
    }

    pub fn insecure(&self) -> bool {
        self.insecure
    }

    /// rustls's configuration: the CA file's certificates (else the system's trust store), the
    /// client certificate if one is set, and no checks at all with `tls_insecure`.
    fn client_config(&self) -> Result<Arc<rustls::ClientConfig>, RedisError> {
        let invalid = |what: &str, e: &dyn std::fmt::Display| {
            RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "TLS configuration",
                format!("{what}: {e}"),
            ))
        };
        let certificates = self.certificates.as_ref();
        let mut roots = rustls::RootCertStore::empty();
        match certificates.and_then(|c| c.root_cert.as_ref()) {
            Some(pem) => {
                for cert in CertificateDer::pem_slice_iter(pem) {
                    let cert = cert.map_err(|e| invalid("tls_ca_file", &e))?;
                    roots.add(cert).map_err(|e| invalid("tls_ca_file", &e))?;
                }
            }
            None => {
                let mut found = rustls_native_certs::load_native_certs();
                if let Some(e) = found.errors.pop() {
                    return Err(invalid("the system trust store", &e));
                }
                for cert in found.certs {
                    roots
                        .add(cert)
                        .map_err(|e| invalid("the system trust store", &e))?;
                }
            }
        }
        let builder = rustls::ClientConfig::builder().with_root_certificates(roots);
        let mut config = match certificates.and_then(|c| c.client_tls.as_ref()) {
            Some(client) => {
                let chain = CertificateDer::pem_slice_iter(&client.client_cert)
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(|e| invalid("tls_cert_file", &e))?;
                let key = PrivateKeyDer::from_pem_slice(&client.client_key)
                    .map_err(|_| invalid("tls_key_file", &"holds no PEM private key"))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| invalid("tls_cert_file and tls_key_file", &e))?
            }
            None => builder.with_no_client_auth(),
        };
        if self.insecure {
            // As redis-rs does for its insecure mode: no SNI, no certificate check.
            config.enable_sni = false;
            let supported = rustls::crypto::CryptoProvider::get_default()
                .map(|p| p.signature_verification_algorithms)
                .ok_or_else(|| invalid("TLS", &"no crypto provider"))?;
            config
                .dangerous()
                .set_certificate_verifier(Arc::new(NoVerification::new(supported)));
        }
        Ok(Arc::new(config))
    }

    /// Where the server's certificate must chain to, for messages.
    fn roots(&self) -> String {
        match &self.ca_file {
            Some(path) => format!("tls_ca_file {}", path.display()),
            None => "the system trust store".to_owned(),
        }
    }
}

/// A pooled connection and what we know about its health.
pub struct Conn {
    pub(crate) inner: Wire,
    /// Set after an error that may have left the socket mid-response: the pool must drop it.
    pub(crate) broken: bool,
    /// The pool generation this connection was made in (see [`Manager::generation`]).
    pub(crate) generation: u64,
    /// When the connection was made, so a failure on one that sat idle in the pool (and may have
    /// gone stale there) can be told from a failure on one made for this very call.
    pub(crate) made: Instant,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("broken", &self.broken)
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

/// The pool's connection manager for one server.
#[derive(Debug)]
pub struct Manager {
    host: String,
    port: u16,
    redis: RedisConnectionInfo,
    settings: ConnectSettings,
    /// rustls's configuration for the TLS schemes, built once.
    tls_config: Option<Arc<rustls::ClientConfig>>,
    /// Bumped when a connection finds the server gone (it restarted, say): every connection made
    /// before that moment is presumed dead too and is dropped at its next checkout, so a restart
    /// costs one failed call, not one per pooled connection.
    generation: Arc<AtomicU64>,
}

impl Manager {
    pub fn new(server: &RedisServer, settings: ConnectSettings) -> Result<Manager, RedisError> {
        install_tls_provider();
        // No `CLIENT SETINFO` at connect: redis-rs reads its two replies one by one, each with the
        // whole remaining timeout, so a hung server could hold a connect for twice its budget
        // (and it would cost a round trip per connection).
        let mut redis = RedisConnectionInfo::default()
            .set_db(server.db)
            .set_skip_set_lib_name();
        if let Some(user) = &server.username {
            redis = redis.set_username(user);
        }
        if let Some(password) = &server.password {
            redis = redis.set_password(password.expose());
        }
        let tls_config = settings.tls.as_ref().map(Tls::client_config).transpose()?;
        let manager = Manager {
            host: server.host.clone(),
            port: server.port,
            redis,
            tls_config,
            settings,
            generation: Arc::new(AtomicU64::new(0)),
        };
        // A malformed address is reported now rather than at the first connect.
        manager.client(manager.addr(&server.host))?;
        Ok(manager)
    }

    /// Where to connect: `host` is what the socket connects to (an address once resolved), while
    /// TLS always verifies the configured name.
    fn addr(&self, host: &str) -> ConnectionAddr {
        if let Some(path) = self.unix_path() {
            ConnectionAddr::Unix(path.into())
        } else if let Some(tls) = &self.settings.tls {
            ConnectionAddr::TcpTls {
                host: host.to_owned(),
                port: self.port,
                insecure: tls.insecure,
                tls_params: None,
            }
        } else {
            ConnectionAddr::Tcp(host.to_owned(), self.port)
        }
    }

    fn client(&self, addr: ConnectionAddr) -> Result<redis::Client, RedisError> {
        // Every call is one small request and one small reply: never let Nagle hold a request back.
        let info: ConnectionInfo = addr
            .into_connection_info()?
            .set_redis_settings(self.redis.clone())
            .set_tcp_settings(TcpSettings::default().set_nodelay(true));
        match self
            .settings
            .tls
            .as_ref()
            .and_then(|t| t.certificates.clone())
        {
            Some(certificates) => redis::Client::build_with_tls(info, certificates),
            None => redis::Client::open(info),
        }
    }

    /// A server on this host, reached over its Unix socket: `redis+unix://` puts the socket's
    /// absolute path where a host name would be (no host name starts with `/`).
    fn unix_path(&self) -> Option<&str> {
        self.host.starts_with('/').then_some(self.host.as_str())
    }

    /// A handle on the generation counter, shared by every pool of the same server.
    pub fn generation(&self) -> Arc<AtomicU64> {
        self.generation.clone()
    }

    pub fn with_generation(mut self, generation: Arc<AtomicU64>) -> Manager {
        self.generation = generation;
        self
    }

    /// A connection within `budget` in all: name lookup, TCP connect (each address gets only what
    /// is left, not a timeout of its own), TLS and AUTH.
    ///
    /// redis-rs would resolve a host name itself, with no bound (getaddrinfo has no timeout), so
    /// plain TCP resolves under the deadline first and connects to the address. TLS must hand
    /// redis-rs the name, which it verifies the certificate against, and its handshake reads each
    /// get the whole remaining timeout (a server sending slowly could stretch them): the whole TLS
    /// connect runs on a short-lived thread that the caller stops waiting for at the deadline.
    fn open(&self, budget: Duration) -> Result<Wire, RedisError> {
        let deadline = Deadline::after(budget);
        if let Some(path) = self.unix_path() {
            // A local socket needs no lookup; AUTH and SELECT are bounded by what is left.
            return Wire::unix(path, &self.redis, deadline.instant());
        }
        let addrs = leasehold_core::resolve::resolve(&self.host, self.port, deadline)
            .map_err(|e| io_error(std::io::ErrorKind::NotFound, e.message()))?;
        // rustls takes an IPv6 literal without its brackets.
        let name = self.host.trim_start_matches('[').trim_end_matches(']');
        let mut last = None;
        for addr in addrs {
            if deadline.is_past() {
                break;
            }
            let wire = match &self.tls_config {
                Some(config) => {
                    Wire::tls(addr, name, config.clone(), &self.redis, deadline.instant())
                }
                None => Wire::tcp(addr, &self.redis, deadline.instant()),
            };
            match wire {
                Ok(wire) => return Ok(wire),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            io_error(
                std::io::ErrorKind::TimedOut,
                &format!("connect to {}:{} timed out", self.host, self.port),
            )
        }))
    }

    /// `err`, met while connecting or on a connection's first commands, with what it most likely
    /// means said in words: which certificate check failed, that the server wants a client
    /// certificate, or that a plain-text connection met a TLS-only port. Never quotes a secret:
    /// only rustls's and the OS's own words and our settings' file names are added.
    pub(crate) fn explain(&self, err: RedisError) -> RedisError {
        let Some(tls) = &self.settings.tls else {
            if crate::errors::is_dropped(&err) && self.unix_path().is_none() {
                return io_error(
                    std::io::ErrorKind::ConnectionReset,
                    &format!(
                        "the server closed the connection at once ({err}): if {}:{} accepts only \
                         TLS, use a TLS scheme (rediss://, redlocks://, …)",
                        self.host, self.port
                    ),
                );
            }
            return err;
        };
        let Some(rustls_error) = find_rustls_error(&err) else {
            return err;
        };
        use rustls::{AlertDescription as Alert, CertificateError as Cert};
        let what = match rustls_error {
            rustls::Error::InvalidCertificate(cert) => match cert {
                Cert::UnknownIssuer | Cert::BadSignature | Cert::UnknownRevocationStatus => {
                    format!(
                        "the server's certificate is not signed by a CA of {} ({cert:?})",
                        tls.roots()
                    )
                }
                Cert::Expired | Cert::ExpiredContext { .. } => {
                    "the server's certificate has expired".to_owned()
                }
                Cert::NotValidYet | Cert::NotValidYetContext { .. } => {
                    "the server's certificate is not valid yet".to_owned()
                }
                Cert::NotValidForName | Cert::NotValidForNameContext { .. } => format!(
                    "the server's certificate is not valid for the host name {} ({cert:?})",
                    self.host
                ),
                // A self-signed certificate is its own CA: webpki says so rather than
                // "unknown issuer".
                other if format!("{other:?}").contains("CaUsedAsEndEntity") => format!(
                    "the server's certificate is a CA's (self-signed?), not signed by a CA of {}",
                    tls.roots()
                ),
                other => format!("the server's certificate was refused ({other:?})"),
            },
            rustls::Error::AlertReceived(
                alert @ (Alert::CertificateRequired
                | Alert::HandshakeFailure
                | Alert::BadCertificate
                | Alert::UnknownCA
                | Alert::CertificateUnknown
                | Alert::AccessDenied),
            ) => {
                if tls.client_certificate {
                    format!("the server refused our client certificate (tls_cert_file): alert {alert:?}")
                } else {
                    format!(
                        "the server requires a client certificate: set tls_cert_file and \
                         tls_key_file (alert {alert:?})"
                    )
                }
            }
            other => format!("TLS failed: {other}"),
        };
        io_error(
            std::io::ErrorKind::InvalidData,
            &format!("TLS with {}:{}: {what}", self.host, self.port),
        )
    }
}

/// The rustls error under a redis-rs error, if any: an I/O error of the TLS stream wraps it, or
/// redis-rs holds it itself (behind an `Arc`, whose `source` would skip it).
fn find_rustls_error(err: &RedisError) -> Option<&rustls::Error> {
    type Shared = Arc<dyn std::error::Error + Send + Sync>;
    let inner = std::error::Error::source(err)?;
    let inner: &(dyn std::error::Error + 'static) = match inner.downcast_ref::<Shared>() {
        Some(shared) => shared.as_ref(),
        None => inner,
    };
    inner.downcast_ref::<rustls::Error>().or_else(|| {
        inner
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            .and_then(|e| e.downcast_ref::<rustls::Error>())
    })
}

fn io_error(kind: std::io::ErrorKind, message: &str) -> RedisError {
    RedisError::from(std::io::Error::new(kind, message.to_owned()))
}

impl leasehold_core::pool::ManageConnection for Manager {
    type Connection = Conn;
    type Error = RedisError;

    fn connect(&self, budget: Duration) -> Result<Conn, RedisError> {
        let generation = self.generation.load(Ordering::Acquire);
        if self.settings.tls.as_ref().is_some_and(Tls::insecure) {
            tracing::warn!(
                server = %format_args!("{}:{}", self.host, self.port),
                "tls_insecure=true: TLS without any certificate check; anyone on the path can \
                 read and change this connection, passwords and locks included"
            );
        }
        let mut inner = self
            .open(budget.min(self.settings.connect_timeout))
            .map_err(|e| self.explain(e))?;
        // Every call sets its own budget first (`Conn::bound_io`); until then, one I/O timeout.
        inner.set_budget(self.settings.io_timeout)?;
        Ok(Conn {
            inner,
            broken: false,
            generation,
            made: Instant::now(),
        })
    }

    fn is_permanent(&self, err: &RedisError) -> bool {
        crate::errors::is_permanent_connect(err)
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        conn.broken
            || !conn.inner.is_open()
            || conn.generation < self.generation.load(Ordering::Acquire)
    }
}

impl Conn {
    /// Bounds the call about to be made to `io` from now, or less when the operation's deadline is
    /// nearer, so a command never outlives the operation: every read and write of the call draws
    /// on that one budget, however slowly the reply comes (see `wire`).
    pub(crate) fn bound_io(&mut self, io: Duration, deadline: Deadline) -> RedisResult<()> {
        let want = deadline.cap(io).max(Duration::from_millis(1));
        self.inner.set_budget(want)
    }
}

/// rustls needs one process-wide crypto provider. Installing ring explicitly (rather than relying
/// on crate features) keeps TLS working even if another crate in the process enables a second
/// provider; if someone installed one already, theirs is used.
fn install_tls_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
