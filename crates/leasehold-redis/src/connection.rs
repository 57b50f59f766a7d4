//! Opening connections to one Redis server for a connection pool: connect timeout, read and write
//! timeouts, AUTH (user and password, for ACLs), the db number, TLS for `rediss://`, and a record
//! of which connections are known to be broken so the pool drops them instead of handing them out
//! again.

use leasehold_core::config::RedisServer;
use redis::io::tcp::TcpSettings;
use redis::{
    ConnectionAddr, ConnectionInfo, ConnectionLike, IntoConnectionInfo, RedisConnectionInfo,
    RedisError,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How to reach one server and how long each step may take.
#[derive(Debug, Clone)]
pub struct ConnectSettings {
    pub connect_timeout: Duration,
    pub io_timeout: Duration,
    pub tls: bool,
}

/// A pooled connection and what we know about its health.
pub struct Conn {
    pub(crate) inner: redis::Connection,
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
    client: redis::Client,
    settings: ConnectSettings,
    /// Bumped when a connection finds the server gone (it restarted, say): every connection made
    /// before that moment is presumed dead too and is dropped at its next checkout, so a restart
    /// costs one failed call, not one per pooled connection.
    generation: Arc<AtomicU64>,
}

impl Manager {
    pub fn new(server: &RedisServer, settings: ConnectSettings) -> Result<Manager, RedisError> {
        install_tls_provider();
        let addr = if settings.tls {
            ConnectionAddr::TcpTls {
                host: server.host.clone(),
                port: server.port,
                insecure: false,
                tls_params: None,
            }
        } else {
            ConnectionAddr::Tcp(server.host.clone(), server.port)
        };
        let mut redis = RedisConnectionInfo::default().set_db(server.db);
        if let Some(user) = &server.username {
            redis = redis.set_username(user);
        }
        if let Some(password) = &server.password {
            redis = redis.set_password(password.expose());
        }
        // Every call is one small request and one small reply: never let Nagle hold a request back.
        let info: ConnectionInfo = addr
            .into_connection_info()?
            .set_redis_settings(redis)
            .set_tcp_settings(TcpSettings::default().set_nodelay(true));
        Ok(Manager {
            client: redis::Client::open(info)?,
            settings,
            generation: Arc::new(AtomicU64::new(0)),
        })
    }

    /// A handle on the generation counter, shared by every pool of the same server.
    pub fn generation(&self) -> Arc<AtomicU64> {
        self.generation.clone()
    }

    pub fn with_generation(mut self, generation: Arc<AtomicU64>) -> Manager {
        self.generation = generation;
        self
    }
}

impl leasehold_core::pool::ManageConnection for Manager {
    type Connection = Conn;
    type Error = RedisError;

    fn connect(&self) -> Result<Conn, RedisError> {
        let generation = self.generation.load(Ordering::Acquire);
        let inner = self
            .client
            .get_connection_with_timeout(self.settings.connect_timeout)?;
        inner.set_read_timeout(Some(self.settings.io_timeout))?;
        inner.set_write_timeout(Some(self.settings.io_timeout))?;
        Ok(Conn {
            inner,
            broken: false,
            generation,
            made: Instant::now(),
        })
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        conn.broken
            || !conn.inner.is_open()
            || conn.generation < self.generation.load(Ordering::Acquire)
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
