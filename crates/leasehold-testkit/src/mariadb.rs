use crate::{free_port, wait_until, TempDir};
use std::io::Read;
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

/// The account the test server creates (with a password, so authentication is exercised).
pub const MARIADB_USER: &str = "leasehold";
pub const MARIADB_PASSWORD: &str = "lh-test-pw";
pub const MARIADB_DATABASE: &str = "leasehold";

/// A MariaDB server for tests: `mariadb-install-db` into a temporary directory, `mariadbd` on a free
/// loopback port (never 3306, never the system service), with its Unix socket inside that directory.
/// The account `leasehold` (password [`MARIADB_PASSWORD`]) and the database `leasehold` are created
/// by an init file at every start. Stopped and removed on drop; if the test process dies first,
/// the server goes down with it.
///
/// When `LEASEHOLD_TEST_MYSQL_URL` is set, [`MariaDbServer::shared`] uses that server instead.
/// Tests that stop or restart the server always start their own.
///
/// As root, the server runs as root (`--user=root`): the data directory belongs to nobody else.
#[derive(Debug)]
pub struct MariaDbServer {
    port: u16,
    dir: Option<TempDir>,
    child: Option<Child>,
    external: Option<String>,
    /// Extra server options (TLS).
    args: Vec<String>,
}

/// An account that [`MariaDbServer::start_tls`] creates beside the default one: it must come over
/// TLS with a client certificate signed by the server's `ssl-ca` (`REQUIRE X509`).
pub const MARIADB_X509_USER: &str = "leasehold_x509";

impl MariaDbServer {
    /// Starts a server of our own (ignores `LEASEHOLD_TEST_MYSQL_URL`).
    pub fn start() -> MariaDbServer {
        MariaDbServer::start_with(Vec::new(), "")
    }

    /// Starts a server of our own with TLS: PEM files of its certificate and key, and of the CA that
    /// client certificates must be signed by. Besides the default account (which may connect in
    /// plain text or over TLS), it has [`MARIADB_X509_USER`] (same password), which must present a
    /// client certificate.
    pub fn start_tls(
        cert: &std::path::Path,
        key: &std::path::Path,
        ca: &std::path::Path,
    ) -> MariaDbServer {
        let args = vec![
            format!("--ssl-cert={}", cert.display()),
            format!("--ssl-key={}", key.display()),
            format!("--ssl-ca={}", ca.display()),
        ];
        let sql = format!(
            "CREATE USER IF NOT EXISTS '{MARIADB_X509_USER}'@'127.0.0.1' IDENTIFIED BY \
               '{MARIADB_PASSWORD}' REQUIRE X509;\n\
             GRANT ALL ON {MARIADB_DATABASE}.* TO '{MARIADB_X509_USER}'@'127.0.0.1';\n"
        );
        MariaDbServer::start_with(args, &sql)
    }

    /// Starts a server of our own with extra `mariadbd` options, given after the testkit's own (so
    /// they win): `--innodb-flush-log-at-trx-commit=1` and `--innodb-doublewrite=1` give a durable
    /// server, which the testkit's default (2 and 0, for speed) is not.
    pub fn start_with_options(options: &[&str]) -> MariaDbServer {
        MariaDbServer::start_with(options.iter().map(|o| (*o).to_owned()).collect(), "")
    }

    fn start_with(args: Vec<String>, extra_sql: &str) -> MariaDbServer {
        let base = data_base();
        remove_stale_dirs(&base, "mariadb");
        let dir = TempDir::new_in(&base, "mariadb");
        let data = dir.path().join("data");
        let bootstrap = || {
            Command::new(tool("mariadb-install-db"))
                .arg("--no-defaults")
                .arg(format!("--datadir={}", data.display()))
                .args(user_args())
                .args([
                    "--auth-root-authentication-method=normal",
                    "--skip-test-db",
                    "--skip-name-resolve",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .output()
                .unwrap_or_else(|e| {
                    panic!(
                        "cannot run mariadb-install-db ({e}); install mariadb-server (the README's \
                         test command does)"
                    )
                })
        };
        let mut out = bootstrap();
        // Bootstrapping beside other tests once failed on a temporary file in the shared /tmp
        // ("Error on delete of '/tmp/#sql-temptable-…'"). (A tmpdir of the server's own cannot be
        // given: the test directories' names hold ':', which MariaDB reads as a list of tmpdirs.)
        // A second bootstrap on a clean data directory is cheap.
        for _ in 0..2 {
            if out.status.success() {
                break;
            }
            let _ = std::fs::remove_dir_all(&data);
            out = bootstrap();
        }
        assert!(
            out.status.success(),
            "mariadb-install-db failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let init = format!(
            "CREATE DATABASE IF NOT EXISTS {MARIADB_DATABASE};\n\
             CREATE USER IF NOT EXISTS '{MARIADB_USER}'@'127.0.0.1' IDENTIFIED BY '{MARIADB_PASSWORD}';\n\
             GRANT ALL ON {MARIADB_DATABASE}.* TO '{MARIADB_USER}'@'127.0.0.1';\n{extra_sql}"
        );
        std::fs::write(dir.path().join("init.sql"), init).expect("write the init file");
        let mut server = MariaDbServer {
            port: free_port(),
            dir: Some(dir),
            child: None,
            external: None,
            args,
        };
        server.spawn();
        server
    }

    /// One server for the whole test binary: `LEASEHOLD_TEST_MYSQL_URL` when set, else one of our
    /// own, started on first use. Tests sharing it must use keys (and tables) of their own.
    pub fn shared() -> &'static MariaDbServer {
        static SHARED: OnceLock<MariaDbServer> = OnceLock::new();
        SHARED.get_or_init(|| match std::env::var("LEASEHOLD_TEST_MYSQL_URL") {
            Ok(url) if !url.is_empty() => MariaDbServer {
                port: 0,
                dir: None,
                child: None,
                external: Some(url),
                args: Vec::new(),
            },
            _ => MariaDbServer::start(),
        })
    }

    fn spawn(&mut self) {
        let dir = self.dir.as_ref().expect("a server of our own").path();
        let mut cmd = Command::new(server_binary());
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", dir.join("data").display()))
            .arg(format!("--socket={}", dir.join("mariadb.sock").display()))
            .arg(format!("--pid-file={}", dir.join("mariadb.pid").display()))
            .arg(format!("--init-file={}", dir.join("init.sql").display()))
            .arg(format!("--log-error={}", self.log_path().display()))
            .arg(format!("--port={}", self.port))
            .args(user_args())
            .args([
                "--bind-address=127.0.0.1",
                "--skip-name-resolve",
                "--skip-log-bin",
                "--max-connections=300",
                "--innodb-buffer-pool-size=32M",
                "--innodb-log-file-size=16M",
                // A crash of the server process (kill -9) keeps what the OS has: enough for
                // the restart tests, and much faster than a sync per commit.
                "--innodb-flush-log-at-trx-commit=2",
                "--innodb-doublewrite=0",
                "--performance-schema=OFF",
            ])
            // After the defaults above, so a test's own options win.
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // The shared server sits in a static that is never dropped: it must die with us.
        let child = crate::spawn_for_process(cmd, libc::SIGKILL)
            .unwrap_or_else(|e| panic!("cannot start mariadbd ({e})"));
        self.child = Some(child);
        let port = self.port;
        let up = wait_until(Duration::from_secs(60), || ready(port));
        assert!(
            up,
            "mariadbd on port {port} did not come up: {}",
            std::fs::read_to_string(self.log_path()).unwrap_or_default()
        );
    }

    fn log_path(&self) -> PathBuf {
        self.dir
            .as_ref()
            .map(|d| d.path().join("mariadb.err"))
            .unwrap_or_default()
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's error log so far (`None` for an external server).
    pub fn log(&self) -> Option<String> {
        if self.external.is_some() {
            return None;
        }
        std::fs::read_to_string(self.log_path()).ok()
    }

    pub fn is_external(&self) -> bool {
        self.external.is_some()
    }

    /// `mysql://leasehold:…@127.0.0.1:PORT/leasehold`, plus `query` when not empty.
    pub fn url(&self) -> String {
        self.url_with("")
    }

    pub fn url_with(&self, query: &str) -> String {
        let base = match &self.external {
            Some(url) => url.clone(),
            None => format!(
                "mysql://{MARIADB_USER}:{MARIADB_PASSWORD}@127.0.0.1:{}/{MARIADB_DATABASE}",
                self.port
            ),
        };
        if query.is_empty() {
            base
        } else if base.contains('?') {
            format!("{base}&{query}")
        } else {
            format!("{base}?{query}")
        }
    }

    /// A crash: SIGKILL, waiting until the process is gone. InnoDB recovers on the next start.
    pub fn kill(&mut self) {
        self.signal_and_wait(libc::SIGKILL);
    }

    /// A clean shutdown (SIGTERM), waiting until the process is gone.
    pub fn stop(&mut self) {
        self.signal_and_wait(libc::SIGTERM);
    }

    fn signal_and_wait(&mut self, sig: i32) {
        assert!(self.external.is_none(), "cannot stop an external server");
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on a child we spawned and have not reaped.
            unsafe {
                libc::kill(child.id() as i32, libc::SIGCONT);
                libc::kill(child.id() as i32, sig);
            }
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port and data directory after [`MariaDbServer::kill`] or
    /// [`MariaDbServer::stop`].
    pub fn start_again(&mut self) {
        assert!(self.external.is_none(), "cannot start an external server");
        if self.child.is_none() {
            self.spawn();
        }
    }

    /// SIGSTOP: the kernel still accepts connections and ACKs data, so only a client-side timeout
    /// notices. MariaDB is one process, so this stops every session.
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
        // kill(2) returns before every thread of mariadbd has stopped: one still running could answer
        // a query sent right after the pause. Wait (bounded) until /proc shows each thread stopped.
        if let Some(child) = &self.child {
            let tasks = format!("/proc/{}/task", child.id());
            let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while std::time::Instant::now() < until && !all_stopped(&tasks) {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        }
    }

    /// Continues a server stopped by [`MariaDbServer::pause`].
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&self, sig: i32) {
        assert!(self.external.is_none(), "cannot signal an external server");
        if let Some(child) = &self.child {
            // SAFETY: kill(2) on our own child, not yet reaped.
            unsafe {
                libc::kill(child.id() as i32, sig);
            }
        }
    }

    pub fn is_running(&self) -> bool {
        self.external.is_some() || self.child.is_some()
    }
}

impl Drop for MariaDbServer {
    fn drop(&mut self) {
        if self.external.is_none() {
            self.signal_and_wait(libc::SIGKILL);
        }
    }
}

/// Whether the server sends its handshake (protocol version 10) on a new connection.
fn ready(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(200),
    ) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let mut head = [0u8; 5];
    stream.read_exact(&mut head).is_ok() && head[4] == 10
}

/// `--user=root` when we are root: mariadbd refuses to run as root without it.
fn user_args() -> Vec<String> {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } == 0 {
        vec!["--user=root".to_owned()]
    } else {
        vec![]
    }
}

fn server_binary() -> PathBuf {
    ["/usr/sbin/mariadbd", "/usr/sbin/mysqld"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("mariadbd"))
}

fn tool(name: &str) -> PathBuf {
    let usr = PathBuf::from("/usr/bin").join(name);
    if usr.exists() {
        usr
    } else {
        PathBuf::from(name)
    }
}

/// Where data directories go: a RAM file system when there is one (`/dev/shm`), since DDL and
/// commits sync files and the tests' timings should not depend on a disk shared with other work;
/// the system temp dir otherwise. A `kill -9` of the server keeps what it wrote either way.
pub(crate) fn data_base() -> PathBuf {
    let shm = PathBuf::from("/dev/shm");
    if std::fs::metadata(&shm).is_ok_and(|m| m.is_dir()) {
        shm
    } else {
        std::env::temp_dir()
    }
}

/// Data directories of test processes that died without cleaning up (the shared server's is never
/// dropped): `leasehold-test-<label>:PID:…` whose PID is gone.
pub(crate) fn remove_stale_dirs(base: &std::path::Path, label: &str) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name
            .to_str()
            .and_then(|n| n.strip_prefix(&format!("leasehold-test-{label}:")))
        else {
            continue;
        };
        let Some(pid) = rest.split(':').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        // SAFETY: kill with signal 0 only checks that the process exists.
        if unsafe { libc::kill(pid, 0) } != 0 {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Whether every thread listed under `/proc/<pid>/task` is stopped (state `T` or `t`).
fn all_stopped(tasks: &str) -> bool {
    let Ok(entries) = std::fs::read_dir(tasks) else {
        return true; // gone: nothing left to answer
    };
    entries.flatten().all(|task| {
        std::fs::read_to_string(task.path().join("stat"))
            .ok()
            .and_then(|stat| {
                // The state follows the parenthesised command name, which may itself hold spaces.
                let after = stat.rsplit_once(')')?.1;
                after
                    .split_whitespace()
                    .next()
                    .map(|s| s == "T" || s == "t")
            })
            .unwrap_or(true)
    })
}
