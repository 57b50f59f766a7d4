//! Real servers for tests: each test binary starts its own `redis-server` (and PostgreSQL, MariaDB, a
//! three-member etcd cluster) on free loopback ports in a temporary directory, never the shared
//! default ports, so runs cannot disturb each other. A missing server binary is a test failure, not a
//! skip: CI must really run these tests.
//!
//! The fault harness: [`FaultProxy`] between a client and a server, a [`History`] of every operation
//! and a [`check`]er of what a lock service must never do (see [`checker`]).
//!
//! Tests across processes: [`processes`] (workers in Rust, C or PHP, counters they share, and the
//! check of the critical sections they log), with the C library and C programs from [`ffi`].

pub mod checker;
mod etcd;
pub mod ffi;
mod fork;
pub mod generator;
pub mod history;
mod mariadb;
mod pgbouncer;
mod port;
mod postgres;
pub mod processes;
mod proxy;
mod redis;
pub mod stall;
mod store;
mod tempdir;

pub use checker::{check, CheckConfig, FencedStore, Report};
pub use etcd::{EtcdCluster, EtcdMember, EtcdStatus, EtcdTls};
pub use fork::in_child;
pub use generator::{Catalogue, Generator, Schedule};
pub use history::{Belief, History, Mode, Op, OpKind, Outcome, Snapshot, Stall};
pub use mariadb::{
    MariaDbServer, MARIADB_DATABASE, MARIADB_PASSWORD, MARIADB_USER, MARIADB_X509_USER,
};
pub use pgbouncer::{PgBouncer, PoolMode};
pub use port::free_port;
pub use postgres::PostgresServer;
pub use proxy::{Fault, FaultCycler, FaultProxy};
pub use redis::{ClusterNode, RedisCluster, RedisSentinel, RedisServer, RedisTls};
pub use tempdir::TempDir;

use std::time::{Duration, Instant};

/// Polls `ready` every 10 ms until it holds or `limit` passes.
pub fn wait_until(limit: Duration, mut ready: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if ready() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    ready()
}

/// A key unique to this call, so tests sharing a server never contend by accident.
pub fn unique_key(label: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{label}:{}:{nanos}:{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Starts `cmd` so that it dies with this process (`PR_SET_PDEATHSIG`), also when the server object
/// sits in a static that is never dropped, or the test binary is killed. The death signal fires when
/// the spawning *thread* ends, and test threads are short-lived, so every server is spawned from one
/// thread that lives as long as the process.
pub fn spawn_for_process(
    mut cmd: std::process::Command,
    signal: libc::c_int,
) -> std::io::Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    use std::sync::mpsc;
    use std::sync::{Mutex, OnceLock};
    type Request = (
        std::process::Command,
        mpsc::Sender<std::io::Result<std::process::Child>>,
    );
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Request>>> = OnceLock::new();
    // SAFETY: prctl is async-signal-safe, as pre_exec requires.
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, signal);
            Ok(())
        });
    }
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("testkit-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
                // The senders live in a static: this loop only ends with the process.
            })
            .expect("start the testkit's spawner thread");
        Mutex::new(tx)
    });
    let (reply, answer) = mpsc::channel();
    spawner
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .send((cmd, reply))
        .map_err(|_| std::io::Error::other("the testkit's spawner thread is gone"))?;
    answer
        .recv()
        .map_err(|_| std::io::Error::other("the testkit's spawner thread is gone"))?
}
