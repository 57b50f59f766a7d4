//! Leasehold's core: the [`LockBackend`] contract, [`Lease`]s and their guard, the one [`Error`] type,
//! key and TTL validation, URL configuration, waiting, and (feature `conformance`) the suite every
//! backend must pass. No network or database dependencies live here (feature `tls` adds rustls, for
//! the one verifier of `tls_insecure=true` that the backends speaking rustls share).
//!
//! A lock is a lease: exclusive ownership of a key for a bounded time, proven by a random token and
//! ordered by a fence that strictly increases per key.

pub mod ask;
mod backend;
mod client;
pub mod clock;
pub mod config;
pub mod deadline;
pub mod doctor;
mod error;
pub mod fork;
pub mod gate;
pub mod interrupt;
mod keepalive;
mod key;
mod kind;
mod lease;
pub mod once;
pub mod pool;
mod raw_lease;
pub mod records;
mod request;
pub mod resolve;
pub mod retry;
pub mod secret;
pub mod session_watch;
pub mod stale_session;
pub mod stats;
pub mod threads;
#[cfg(feature = "tls")]
pub mod tls_insecure;
mod token;
mod ttl;
pub mod wait;

#[cfg(feature = "conformance")]
pub mod conformance;

pub use backend::{unsupported, KeyInfo, LockBackend};
pub use client::Client;
pub use config::{
    BackendConfig, Config, MysqlConfig, MysqlLockMode, PostgresConfig, PostgresLockMode,
    PostgresPooler, RedisServer,
};
pub use deadline::Deadline;
pub use error::{Error, ErrorKind, Result};
pub use key::{Key, MAX_KEY_LEN};
pub use kind::{LeaseKind, Permits, MAX_PERMITS};
pub use lease::{KeepAliveHook, Lease};
pub use raw_lease::RawLease;
pub use request::Request;
pub use secret::{Secret, Secrets};
pub use session_watch::SessionWatch;
pub use stats::{HistogramSnapshot, StatsSnapshot};
pub use token::Token;
pub use ttl::{check_wait, Ttl, MAX_TTL, MAX_WAIT};
