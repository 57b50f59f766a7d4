//! PgBouncer in front of a test PostgreSQL, in the pool mode a test asks for.

use crate::postgres::{chown, ready, remove_stale, run_as};
use crate::{free_port, wait_until, PostgresServer, TempDir};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Where Debian installs it (`apt-get install pgbouncer`); `LEASEHOLD_TEST_PGBOUNCER` overrides.
const DEFAULT_BINARY: &str = "/usr/sbin/pgbouncer";

/// PgBouncer's `pool_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolMode {
    Session,
    Transaction,
}

impl PoolMode {
    pub fn name(self) -> &'static str {
        match self {
            PoolMode::Session => "session",
            PoolMode::Transaction => "transaction",
        }
    }
}

/// A `pgbouncer` process on a free loopback port (never 6432, no Unix socket) in front of a
/// [`PostgresServer`], with its own configuration, auth file and log in a temporary directory: every
/// database of the server, the `postgres` user trusted (as the test server trusts it). Its pools are
/// larger than any test's sessions, so a client never queues for a server connection; after a
/// failed server login it tries again within a second (not the default 15 s, which would keep a
/// bouncer in front of a restarted server refusing clients for most of a torture run). Stopped on
/// drop, and with the test process if that dies first.
#[derive(Debug)]
pub struct PgBouncer {
    port: u16,
    mode: PoolMode,
    /// Kept for its drop: the configuration and log live inside.
    dir: TempDir,
    child: Option<Child>,
}

impl PgBouncer {
    /// Starts PgBouncer in `mode` in front of `server` (which must be one the testkit started).
    pub fn start(server: &PostgresServer, mode: PoolMode) -> PgBouncer {
        assert!(
            !server.is_external(),
            "PgBouncer is put in front of a server the testkit started"
        );
        // A bouncer in a static is never dropped: its directory goes once its process has.
        remove_stale("pgbouncer");
        let dir = TempDir::new("pgbouncer");
        let port = free_port();
        let auth = dir.path().join("users.txt");
        std::fs::write(&auth, "\"postgres\" \"\"\n").expect("write the PgBouncer auth file");
        let config = dir.path().join("pgbouncer.ini");
        let log = dir.path().join("pgbouncer.log");
        std::fs::write(
            &config,
            format!(
                "[databases]\n\
                 * = host=127.0.0.1 port={pg}\n\
                 [pgbouncer]\n\
                 listen_addr = 127.0.0.1\n\
                 listen_port = {port}\n\
                 unix_socket_dir =\n\
                 auth_type = trust\n\
                 auth_file = {auth}\n\
                 pool_mode = {mode}\n\
                 max_client_conn = 2000\n\
                 default_pool_size = 150\n\
                 max_db_connections = 150\n\
                 logfile = {log}\n\
                 log_connections = 0\n\
                 log_disconnections = 0\n\
                 admin_users = postgres\n\
                 server_login_retry = 1\n",
                pg = server.port(),
                auth = auth.display(),
                mode = mode.name(),
                log = log.display(),
            ),
        )
        .expect("write pgbouncer.ini");
        if let Some((uid, gid)) = run_as() {
            // PgBouncer refuses to run as root: it runs as the user PostgreSQL runs as.
            for path in [dir.path(), &auth, &config] {
                chown(path, uid, gid);
            }
        }
        let mut bouncer = PgBouncer {
            port,
            mode,
            dir,
            child: None,
        };
        bouncer.spawn();
        bouncer
    }

    /// Runs `pgbouncer` on this bouncer's configuration and waits until it answers.
    fn spawn(&mut self) {
        let mut cmd = Command::new(binary());
        cmd.arg(self.dir.path().join("pgbouncer.ini"))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some((uid, gid)) = run_as() {
            cmd.uid(uid).gid(gid);
        }
        let child = crate::spawn_for_process(cmd, libc::SIGTERM).unwrap_or_else(|e| {
            panic!(
                "cannot start {} ({e}); install PgBouncer (the README's test command does)",
                binary().display()
            )
        });
        self.child = Some(child);
        let up = wait_until(Duration::from_secs(30), || ready(self.port));
        if !up {
            let log = self.log();
            self.stop();
            panic!("pgbouncer on port {} did not come up: {log}", self.port);
        }
    }

    /// Stops it ([`PgBouncer::stop`]) and starts it again on the same port and configuration.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn mode(&self) -> PoolMode {
        self.mode
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres` through the bouncer, plus `query` when not
    /// empty.
    pub fn url_with(&self, query: &str) -> String {
        let base = format!("postgres://postgres@127.0.0.1:{}/postgres", self.port);
        if query.is_empty() {
            base
        } else {
            format!("{base}?{query}")
        }
    }

    /// PgBouncer's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("pgbouncer.log")).unwrap_or_default()
    }

    /// Stops it (SIGTERM: PgBouncer's immediate shutdown, closing every connection), waiting until
    /// it is gone.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on a child we spawned and have not reaped.
            unsafe {
                libc::kill(child.id() as i32, libc::SIGTERM);
            }
            let _ = child.wait();
        }
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn binary() -> PathBuf {
    match std::env::var_os("LEASEHOLD_TEST_PGBOUNCER") {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => PathBuf::from(DEFAULT_BINARY),
    }
}
