use crate::{free_port, wait_until, TempDir};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

/// A PostgreSQL server for tests: `initdb` into a temporary directory, `postgres` on a free loopback
/// port (no Unix socket, never the shared 5432), trust authentication for the `postgres` user, fsync
/// off. Stopped and removed on drop; if the test process dies first, the server still goes down with
/// it (it is told to on its parent's death).
///
/// When `LEASEHOLD_TEST_POSTGRES_URL` is set, [`PostgresServer::shared`] uses that server instead of
/// starting one. Tests that stop or restart the server always start their own.
///
/// Binaries come from `LEASEHOLD_TEST_PG_BIN` (a directory), else the newest
/// `/usr/lib/postgresql/*/bin`, else `PATH`. A missing PostgreSQL fails the test. As root, `initdb` and
/// `postgres` run as the `postgres` system user, because PostgreSQL refuses to run as root.
#[derive(Debug)]
pub struct PostgresServer {
    port: u16,
    /// Kept for its drop: the data directory lives inside.
    dir: Option<TempDir>,
    data: PathBuf,
    bin: PathBuf,
    child: Option<Child>,
    external: Option<String>,
    /// Extra `-c name=value` settings (TLS).
    settings: Vec<String>,
}

/// The server side of [`PostgresServer::start_tls`].
struct TlsServerFiles<'a> {
    cert: &'a Path,
    key: &'a Path,
    client_ca: Option<&'a Path>,
}

impl PostgresServer {
    /// Starts a server of our own (ignores `LEASEHOLD_TEST_POSTGRES_URL`).
    pub fn start() -> PostgresServer {
        PostgresServer::start_with(None)
    }

    /// Starts a server of our own with `ssl=on`, PEM files of its certificate and key and
    /// optionally of the CA that client certificates must be signed by (`ssl_ca_file`) (copied into the data
    /// directory, owned by the server's user, the key mode 0600), and `pg_hba.conf` made of
    /// `hba` lines after one that the testkit itself needs: `hostnossl all postgres 127.0.0.1/32
    /// trust` (so the readiness probe and admin sessions as `postgres` work in plain text). Use
    /// other roles for the TLS-only rules, e.g. `hostssl all alice 127.0.0.1/32 trust` or
    /// `hostssl all bob 127.0.0.1/32 cert`.
    pub fn start_tls(
        cert: &Path,
        key: &Path,
        client_ca: Option<&Path>,
        hba: &[&str],
    ) -> PostgresServer {
        let files = TlsServerFiles {
            cert,
            key,
            client_ca,
        };
        PostgresServer::start_with(Some((&files, hba)))
    }

    /// Starts a server of our own with extra `name=value` settings, given after the testkit's own
    /// (so they win): `fsync=on` and `full_page_writes=on` give a durable server, which the
    /// testkit's default (both off, for speed) is not.
    pub fn start_with_settings(settings: &[&str]) -> PostgresServer {
        let mut server = PostgresServer::start_with_parts(None, false);
        server
            .settings
            .extend(settings.iter().map(|s| (*s).to_owned()));
        server.spawn();
        server
    }

    fn start_with(tls: Option<(&TlsServerFiles<'_>, &[&str])>) -> PostgresServer {
        PostgresServer::start_with_parts(tls, true)
    }

    /// Makes the data directory; `spawn`: start the server too.
    fn start_with_parts(
        tls: Option<(&TlsServerFiles<'_>, &[&str])>,
        spawn: bool,
    ) -> PostgresServer {
        remove_stale_dirs();
        let bin = bin_dir();
        let dir = TempDir::new("postgres");
        let data = dir.path().join("data");
        std::fs::create_dir(&data).expect("create the PostgreSQL data directory");
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700))
            .expect("chmod the data directory");
        let owner = run_as();
        if let Some((uid, gid)) = owner {
            chown(dir.path(), uid, gid);
            chown(&data, uid, gid);
        }
        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .args([
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-sync",
                "-D",
            ])
            .arg(&data)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some((uid, gid)) = owner {
            initdb.uid(uid).gid(gid);
        }
        let out = initdb.output().unwrap_or_else(|e| {
            panic!(
                "cannot run {} ({e}); install PostgreSQL (the README's test command does)",
                bin.join("initdb").display()
            )
        });
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut settings = Vec::new();
        if let Some((files, hba)) = tls {
            let mut copy = |from: &Path, name: &str, setting: &str| {
                let to = data.join(name);
                std::fs::copy(from, &to)
                    .unwrap_or_else(|e| panic!("copy {} for the server: {e}", from.display()));
                std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o600))
                    .expect("chmod a TLS file");
                if let Some((uid, gid)) = owner {
                    chown(&to, uid, gid);
                }
                settings.push(format!("{setting}={}", to.display()));
            };
            copy(files.cert, "server.crt", "ssl_cert_file");
            copy(files.key, "server.key", "ssl_key_file");
            if let Some(ca) = files.client_ca {
                copy(ca, "client_ca.crt", "ssl_ca_file");
            }
            settings.push("ssl=on".to_owned());
            let mut conf = String::from("hostnossl all postgres 127.0.0.1/32 trust\n");
            for line in hba {
                conf.push_str(line);
                conf.push('\n');
            }
            std::fs::write(data.join("pg_hba.conf"), conf).expect("write pg_hba.conf");
        }
        let mut server = PostgresServer {
            port: free_port(),
            dir: Some(dir),
            data,
            bin,
            child: None,
            external: None,
            settings,
        };
        if spawn {
            server.spawn();
        }
        server
    }

    /// One server for the whole test binary: `LEASEHOLD_TEST_POSTGRES_URL` when set, else one of our
    /// own, started on first use. Tests sharing it must use keys (and tables) of their own.
    pub fn shared() -> &'static PostgresServer {
        static SHARED: OnceLock<PostgresServer> = OnceLock::new();
        SHARED.get_or_init(|| match std::env::var("LEASEHOLD_TEST_POSTGRES_URL") {
            Ok(url) if !url.is_empty() => PostgresServer {
                port: 0,
                dir: None,
                data: PathBuf::new(),
                bin: PathBuf::new(),
                child: None,
                external: Some(url),
                settings: Vec::new(),
            },
            _ => PostgresServer::start(),
        })
    }

    fn spawn(&mut self) {
        let mut cmd = Command::new(self.bin.join("postgres"));
        cmd.arg("-D")
            .arg(&self.data)
            .args(["-p", &self.port.to_string()])
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "unix_socket_directories=",
            ])
            .args(["-c", "fsync=off", "-c", "full_page_writes=off"])
            .args(["-c", "max_connections=300", "-c", "shared_buffers=64MB"])
            .args(self.settings.iter().flat_map(|s| ["-c", s.as_str()]))
            .args([
                "-c",
                "log_min_messages=warning",
                "-c",
                "logging_collector=off",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(self.log_path()).expect("create the PostgreSQL log file"),
            ));
        if let Some((uid, gid)) = run_as() {
            cmd.uid(uid).gid(gid);
        }
        // The server must not outlive the test process: the shared server sits in a static that is
        // never dropped. SIGQUIT is PostgreSQL's immediate shutdown.
        let child = crate::spawn_for_process(cmd, libc::SIGQUIT)
            .unwrap_or_else(|e| panic!("cannot start postgres ({e})"));
        self.child = Some(child);
        let port = self.port;
        let up = wait_until(Duration::from_secs(30), || ready(port));
        assert!(
            up,
            "postgres on port {port} did not come up: {}",
            std::fs::read_to_string(self.log_path()).unwrap_or_default()
        );
    }

    fn log_path(&self) -> PathBuf {
        self.dir
            .as_ref()
            .map(|d| d.path().join("postgres.log"))
            .unwrap_or_default()
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's log so far (`None` for an external server), for tests that check what it logged.
    pub fn log(&self) -> Option<String> {
        if self.external.is_some() {
            return None;
        }
        std::fs::read_to_string(self.log_path()).ok()
    }

    /// Whether this is the server named by `LEASEHOLD_TEST_POSTGRES_URL` (which tests cannot stop).
    pub fn is_external(&self) -> bool {
        self.external.is_some()
    }

    /// A program of the PostgreSQL installation the servers run from (`pgbench`, `psql`, …).
    pub fn program(name: &str) -> PathBuf {
        bin_dir().join(name)
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres`, plus `query` when not empty.
    pub fn url(&self) -> String {
        self.url_with("")
    }

    pub fn url_with(&self, query: &str) -> String {
        let base = match &self.external {
            Some(url) => url.clone(),
            None => format!("postgres://postgres@127.0.0.1:{}/postgres", self.port),
        };
        if query.is_empty() {
            base
        } else if base.contains('?') {
            format!("{base}&{query}")
        } else {
            format!("{base}?{query}")
        }
    }

    /// Fast shutdown (SIGINT: sessions are terminated), waiting until the server is gone.
    pub fn stop(&mut self) {
        self.signal_and_wait(libc::SIGINT);
    }

    /// Immediate shutdown (SIGQUIT), like a crash: no checkpoint, recovery on the next start.
    pub fn kill(&mut self) {
        self.signal_and_wait(libc::SIGQUIT);
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

    /// Starts it again on the same port and data directory after [`PostgresServer::stop`].
    pub fn start_again(&mut self) {
        assert!(self.external.is_none(), "cannot start an external server");
        if self.child.is_none() {
            self.spawn();
        }
    }

    pub fn restart(&mut self) {
        self.stop();
        self.start_again();
    }

    /// Stops the server with SIGSTOP: the postmaster and every backend process (found through
    /// /proc as its descendants). The kernel still accepts connections and ACKs data and keepalives,
    /// so only a client-side timeout notices: the "paused server" fault.
    pub fn pause(&self) {
        self.signal_tree(libc::SIGSTOP);
    }

    /// Continues a server stopped by [`PostgresServer::pause`].
    pub fn resume(&self) {
        self.signal_tree(libc::SIGCONT);
    }

    fn signal_tree(&self, sig: i32) {
        assert!(self.external.is_none(), "cannot pause an external server");
        let Some(child) = &self.child else {
            return;
        };
        let root = child.id() as i32;
        // SAFETY: kill(2) on our own child, not yet reaped.
        unsafe {
            libc::kill(root, sig);
        }
        // Backends forked while we walk would escape; walk until a pass finds no new process.
        let mut done = vec![root];
        loop {
            let fresh: Vec<i32> = descendants(root)
                .into_iter()
                .filter(|p| !done.contains(p))
                .collect();
            if fresh.is_empty() {
                break;
            }
            for pid in fresh {
                // SAFETY: kill(2) on a descendant of our child; a pid reused meanwhile is a
                // vanishingly small risk within one test.
                unsafe {
                    libc::kill(pid, sig);
                }
                done.push(pid);
            }
        }
    }

    pub fn is_running(&self) -> bool {
        self.external.is_some() || self.child.is_some()
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        if self.external.is_none() {
            self.signal_and_wait(libc::SIGQUIT);
        }
    }
}

/// Every process below `root`, from each /proc/PID/stat's parent field.
fn descendants(root: i32) -> Vec<i32> {
    let mut parents: Vec<(i32, i32)> = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // "pid (comm) state ppid …": comm may hold spaces and parentheses, so split after the last ')'.
        let Some(ppid) = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        parents.push((pid, ppid));
    }
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(
            parents
                .iter()
                .filter(|(_, pp)| *pp == parent)
                .map(|(p, _)| *p),
        );
        i += 1;
    }
    found.remove(0);
    found
}

/// Whether the server accepts a session now: a startup packet answered by ReadyForQuery, not by an
/// error such as "the database system is starting up".
pub(crate) fn ready(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    s.set_read_timeout(Some(Duration::from_secs(2))).ok();
    let mut body = Vec::new();
    body.extend_from_slice(&196_608u32.to_be_bytes()); // protocol 3.0
    for (k, v) in [("user", "postgres"), ("database", "postgres")] {
        body.extend_from_slice(k.as_bytes());
        body.push(0);
        body.extend_from_slice(v.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut msg = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    msg.extend(body);
    if s.write_all(&msg).is_err() {
        return false;
    }
    // Walk the messages: type byte, length, body; 'Z' is ReadyForQuery, 'E' an error.
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let mut at = 0;
        while buf.len() >= at + 5 {
            let kind = buf[at];
            let len = u32::from_be_bytes([buf[at + 1], buf[at + 2], buf[at + 3], buf[at + 4]]);
            match kind {
                b'Z' => {
                    let _ = s.write_all(&[b'X', 0, 0, 0, 4]);
                    return true;
                }
                b'E' => return false,
                _ => at += 1 + len as usize,
            }
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

fn bin_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("LEASEHOLD_TEST_PG_BIN") {
        return PathBuf::from(dir);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").exists().then_some((v, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return bin;
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .find(|d| d.join("initdb").exists() && d.join("postgres").exists())
        .unwrap_or_else(|| {
            panic!(
                "PostgreSQL is not installed (no initdb/postgres in /usr/lib/postgresql/*/bin or PATH); \
                 the README's test command installs it"
            )
        })
}

/// The `postgres` user's ids when we are root, since PostgreSQL refuses to run as root.
pub(crate) fn run_as() -> Option<(u32, u32)> {
    // SAFETY: getuid has no preconditions; getpwnam's result is read at once, before any other call
    // that could reuse its static buffer.
    unsafe {
        if libc::getuid() != 0 {
            return None;
        }
        let pw = libc::getpwnam(c"postgres".as_ptr());
        assert!(
            !pw.is_null(),
            "running as root and there is no `postgres` user to run PostgreSQL as"
        );
        Some(((*pw).pw_uid, (*pw).pw_gid))
    }
}

pub(crate) fn chown(path: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).expect("chown for the postgres user");
}

/// Data directories of test processes that died without cleaning up (the shared server's directory
/// is never dropped): `leasehold-test-postgres:PID:…` whose PID is gone.
fn remove_stale_dirs() {
    remove_stale("postgres");
}

/// Directories `leasehold-test-LABEL:PID:…` of test processes that are gone.
pub(crate) fn remove_stale(label: &str) {
    let prefix = format!("leasehold-test-{label}:");
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(prefix.as_str())) else {
            continue;
        };
        let Some(pid) = rest.split(':').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        // SAFETY: kill with signal 0 only checks that the process exists.
        let alive = unsafe { libc::kill(pid, 0) == 0 };
        if !alive {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}
