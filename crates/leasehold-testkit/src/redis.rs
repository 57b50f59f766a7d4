use crate::{free_port, wait_until, TempDir};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::ffi::OsStrExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` of our own on a free loopback port, without persistence (unless started with
/// [`RedisServer::start_with_aof`]), killed on drop.
/// `kill`/`start`/`pause`/`resume` let fault tests stop and bring it back on the same port.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    dir: TempDir,
    password: Option<String>,
    child: Option<Child>,
    /// Extra `redis-server` arguments (Cluster mode, replication, a Unix socket).
    extra: Vec<String>,
    /// Run as a Sentinel watching this master (service name, master port, down-after ms).
    sentinel: Option<(String, u16, u64)>,
    /// TLS only: `--port 0 --tls-port PORT` with these files.
    tls: Option<RedisTls>,
}

/// The PEM files of a TLS `redis-server` ([`RedisServer::start_tls`]), and whether it demands a
/// client certificate signed by `ca` (`--tls-auth-clients yes`).
#[derive(Debug, Clone)]
pub struct RedisTls {
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
    pub ca: std::path::PathBuf,
    pub auth_clients: bool,
}

impl RedisServer {
    pub fn start() -> RedisServer {
        Self::start_with(None)
    }

    /// With `requirepass`, for tests of AUTH and of password redaction.
    pub fn start_with_password(password: &str) -> RedisServer {
        Self::start_with(Some(password.to_owned()))
    }

    /// With a Unix socket too (see [`RedisServer::socket_path`]).
    pub fn start_with_unix_socket() -> RedisServer {
        Self::start_with_args(
            None,
            vec![
                "--unixsocket".into(),
                "@SOCKET@".into(),
                "--unixsocketperm".into(),
                "700".into(),
            ],
        )
    }

    /// With persistence as an operator who relies on it runs it: AOF on (`--appendonly yes`) with
    /// `appendfsync` set to `fsync` (`always` or `everysec`), in the server's own directory, which
    /// [`RedisServer::restart`] keeps: a server killed and restarted comes back with its data.
    pub fn start_with_aof(fsync: &str) -> RedisServer {
        Self::start_with_args(
            None,
            vec![
                "--appendonly".into(),
                "yes".into(),
                "--appendfsync".into(),
                fsync.into(),
            ],
        )
    }

    fn start_with(password: Option<String>) -> RedisServer {
        Self::start_with_args(password, Vec::new())
    }

    /// With extra `redis-server` arguments; `@DIR@` and `@SOCKET@` in them stand for the server's
    /// own directory and socket path.
    pub fn start_with_args(password: Option<String>, extra: Vec<String>) -> RedisServer {
        Self::launch(RedisServer {
            port: free_port(),
            dir: TempDir::new("redis"),
            password,
            child: None,
            extra,
            sentinel: None,
            tls: None,
        })
    }

    /// A TLS-only server (`--port 0 --tls-port PORT`): plain text gets nothing, so
    /// [`RedisServer::command`] goes through `redis-cli --tls`; [`RedisServer::url`] is `rediss://`.
    pub fn start_tls(tls: &RedisTls) -> RedisServer {
        Self::start_tls_with(None, tls, Vec::new())
    }

    /// [`RedisServer::start_tls`] with `requirepass` and extra `redis-server` arguments.
    pub fn start_tls_with(
        password: Option<&str>,
        tls: &RedisTls,
        extra: Vec<String>,
    ) -> RedisServer {
        Self::launch(RedisServer {
            port: free_port(),
            dir: TempDir::new("redis-tls"),
            password: password.map(str::to_owned),
            child: None,
            extra,
            sentinel: None,
            tls: Some(tls.clone()),
        })
    }

    /// A `redis-server --sentinel` watching the master on `master_port` as `service` (quorum 2),
    /// declaring it down after `down_after_ms`.
    pub fn start_sentinel(service: &str, master_port: u16, down_after_ms: u64) -> RedisServer {
        Self::launch(RedisServer {
            port: free_port(),
            dir: TempDir::new("sentinel"),
            password: None,
            child: None,
            extra: Vec::new(),
            sentinel: Some((service.to_owned(), master_port, down_after_ms)),
            tls: None,
        })
    }

    /// [`RedisServer::start_sentinel`], TLS only (`port 0`, `tls-port`), and talking TLS to the
    /// master, its replicas and the other Sentinels (`tls-replication yes`).
    pub fn start_sentinel_tls(
        service: &str,
        master_port: u16,
        down_after_ms: u64,
        tls: &RedisTls,
    ) -> RedisServer {
        Self::launch(RedisServer {
            port: free_port(),
            dir: TempDir::new("sentinel-tls"),
            password: None,
            child: None,
            extra: Vec::new(),
            sentinel: Some((service.to_owned(), master_port, down_after_ms)),
            tls: Some(tls.clone()),
        })
    }

    fn launch(mut server: RedisServer) -> RedisServer {
        // Another test binary may take the port between our check and the server's bind; then the
        // server exits at once and we try another port.
        for _ in 0..5 {
            if server.spawn() {
                return server;
            }
            server.port = free_port();
        }
        panic!("redis-server did not come up on any of 5 ports");
    }

    /// Whether this server runs in Cluster mode, so it also listens on its bus port.
    fn clustered(&self) -> bool {
        self.sentinel.is_none() && self.extra.iter().any(|a| a == "--cluster-enabled")
    }

    /// Starts the server on `self.port`; false if it exited (the port was taken), panics if it hangs.
    fn spawn(&mut self) -> bool {
        // A Cluster node also binds its bus port (port + 10000), which `free_port` did not check
        // and which another server or an outgoing connection may hold: the node would exit just
        // after its client port came up.
        let bus = self.clustered().then(|| self.port.checked_add(10_000));
        if let Some(bus) = bus {
            match bus {
                Some(bus) if TcpListener::bind(("127.0.0.1", bus)).is_ok() => {}
                _ => return false,
            }
        }
        let mut cmd = Command::new(binary());
        if let Some((service, master, down_after)) = &self.sentinel {
            // A Sentinel rewrites its configuration file: one of its own, written afresh on each
            // start (so a restart forgets what it learnt).
            let conf = self.dir.path().join("sentinel.conf");
            let listen = match &self.tls {
                None => format!("port {}\n", self.port),
                // `tls-replication` is what makes a Sentinel use TLS towards the servers it
                // watches and towards the other Sentinels (and announce its TLS port to them).
                Some(tls) => format!(
                    "port 0\ntls-port {}\ntls-cert-file \"{}\"\ntls-key-file \"{}\"\n\
                     tls-ca-cert-file \"{}\"\ntls-auth-clients {}\ntls-replication yes\n",
                    self.port,
                    tls.cert.display(),
                    tls.key.display(),
                    tls.ca.display(),
                    if tls.auth_clients { "yes" } else { "no" },
                ),
            };
            let text = format!(
                "{listen}bind 127.0.0.1\nprotected-mode no\ndir \"{}\"\n\
                 sentinel monitor {service} 127.0.0.1 {master} 2\n\
                 sentinel down-after-milliseconds {service} {down_after}\n\
                 sentinel failover-timeout {service} 3000\n\
                 sentinel parallel-syncs {service} 2\n",
                self.dir.path().display()
            );
            std::fs::write(&conf, text).expect("write sentinel.conf");
            cmd.arg(&conf).arg("--sentinel");
        } else {
            cmd.args(["--bind", "127.0.0.1", "--port"]);
            match &self.tls {
                None => cmd.arg(self.port.to_string()),
                Some(tls) => cmd
                    .args(["0", "--tls-port", &self.port.to_string()])
                    .arg("--tls-cert-file")
                    .arg(&tls.cert)
                    .arg("--tls-key-file")
                    .arg(&tls.key)
                    .arg("--tls-ca-cert-file")
                    .arg(&tls.ca)
                    .args([
                        "--tls-auth-clients",
                        if tls.auth_clients { "yes" } else { "no" },
                    ]),
            };
            cmd.args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                .args(["--maxmemory-policy", "noeviction", "--protected-mode", "no"])
                // A replica's first sync at once (the default waits 5 s for more replicas).
                .args(["--repl-diskless-sync-delay", "0"])
                .arg("--dir")
                .arg(self.dir.path());
        }
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
        if let Some(pw) = &self.password {
            cmd.args(["--requirepass", pw]);
        }
        if self.sentinel.is_none() {
            let dir = self.dir.path().display().to_string();
            let socket = self.socket_path().display().to_string();
            for arg in &self.extra {
                cmd.arg(arg.replace("@DIR@", &dir).replace("@SOCKET@", &socket));
            }
        }
        // Shared servers sit in statics that are never dropped: they must die with the process.
        let mut child = crate::spawn_for_process(cmd, libc::SIGKILL).unwrap_or_else(|e| {
            panic!("cannot start redis-server ({e}); the README's test command installs it")
        });
        let port = self.port;
        let password = self.password.clone();
        let tls = self.tls.is_some();
        let mut exited = false;
        let up = wait_until(Duration::from_secs(10), || {
            exited = matches!(child.try_wait(), Ok(Some(_)));
            // A TLS port takes no plain PING; redis-server listens only once its TLS context is
            // loaded, so an accepted connection means ready.
            exited
                || if tls {
                    TcpStream::connect(("127.0.0.1", port)).is_ok()
                } else {
                    ping(port, password.as_deref())
                }
        });
        let bus_up = match bus.flatten() {
            Some(bus) if up && !exited => wait_until(Duration::from_secs(10), || {
                exited = matches!(child.try_wait(), Ok(Some(_)));
                exited || TcpStream::connect(("127.0.0.1", bus)).is_ok()
            }),
            _ => up,
        };
        if exited || matches!(child.try_wait(), Ok(Some(_))) {
            return false;
        }
        self.child = Some(child);
        assert!(up && bus_up, "redis-server on port {port} did not come up");
        true
    }

    /// Starts a server that exited on its own again, on another port.
    fn start_elsewhere(&mut self) {
        self.child = None;
        for _ in 0..5 {
            self.port = free_port();
            if self.spawn() {
                return;
            }
        }
        panic!("redis-server did not come up again on any of 5 ports");
    }

    /// Whether the server started here has exited on its own.
    fn has_exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))))
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Where [`RedisServer::start_with_unix_socket`] listens.
    pub fn socket_path(&self) -> std::path::PathBuf {
        self.dir.path().join("redis.sock")
    }

    /// `redis://127.0.0.1:PORT` (`rediss://` for a TLS server; with the password, if any), plus
    /// `query` when not empty.
    pub fn url(&self) -> String {
        self.url_with("")
    }

    pub fn url_with(&self, query: &str) -> String {
        let auth = match &self.password {
            Some(pw) => format!(":{pw}@"),
            None => String::new(),
        };
        let q = if query.is_empty() {
            String::new()
        } else {
            format!("?{query}")
        };
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://{auth}127.0.0.1:{}{q}", self.port)
    }

    /// `host:port` for building multi-node URLs.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Kills the server (SIGKILL) and waits for it to be gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port: empty, or with what its AOF kept when started with
    /// [`RedisServer::start_with_aof`] (its directory outlives the process).
    pub fn restart(&mut self) {
        self.kill();
        for _ in 0..50 {
            if self.spawn() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("redis-server could not be restarted on port {}", self.port);
    }

    /// Starts it again on the same port, empty and a master (its `--replicaof` dropped): how a
    /// master killed after a Sentinel failover comes back, whether it was a master from the start
    /// or a replica promoted earlier (Sentinel rewrote its configuration then), until the
    /// Sentinels make it a replica.
    pub fn restart_as_master(&mut self) {
        if let Some(i) = self.extra.iter().position(|a| a == "--replicaof") {
            self.extra.drain(i..(i + 3).min(self.extra.len()));
        }
        self.restart();
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// SIGSTOP: the server keeps its sockets open but answers nothing, like a hung host.
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// SIGCONT after [`RedisServer::pause`].
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&self, sig: i32) {
        if let Some(child) = &self.child {
            // SAFETY: kill(2) on a child we spawned and have not reaped.
            unsafe {
                libc::kill(child.id() as i32, sig);
            }
        }
    }

    /// The CPU time the server process has used so far, user and system (`INFO cpu`), in µs: its
    /// commands and all around them (the event loop, reading and writing its sockets), which
    /// [`RedisServer::busy_usec`] leaves out.
    pub fn cpu_usec(&self) -> f64 {
        self.command(&[b"INFO", b"cpu"])
            .lines()
            .filter_map(|l| {
                l.strip_prefix("used_cpu_sys:")
                    .or_else(|| l.strip_prefix("used_cpu_user:"))
            })
            .filter_map(|v| v.trim().parse::<f64>().ok())
            .sum::<f64>()
            * 1e6
    }

    /// Sets the memory limit and the eviction policy of the running server (`CONFIG SET
    /// maxmemory … maxmemory-policy …`), as an operator or a managed service would: `"0"` and
    /// `"noeviction"` are what every server here starts with. Panics if the server refuses.
    pub fn set_eviction(&self, maxmemory: &str, policy: &str) {
        let reply = self.command(&[
            b"CONFIG",
            b"SET",
            b"maxmemory",
            maxmemory.as_bytes(),
            b"maxmemory-policy",
            policy.as_bytes(),
        ]);
        // RESP `+OK`, or `OK` from redis-cli on a TLS server.
        assert!(
            reply.trim_start_matches('+').starts_with("OK"),
            "CONFIG SET on {}: {reply}",
            self.port
        );
    }

    /// The number after `field` in the reply to `args`: an `INFO` field (`"used_memory:"`) or an
    /// integer reply (`":"`). Panics if there is none.
    pub fn number(&self, args: &[&[u8]], field: &str) -> f64 {
        let reply = self.command(args);
        reply
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {field} in {reply:?}"))
    }

    /// Zeroes the server's command statistics, which [`RedisServer::busy_usec`] reads.
    pub fn reset_stats(&self) {
        self.command(&[b"CONFIG", b"RESETSTAT"]);
    }

    /// The microseconds the server has spent running commands (scripts with what they call) since
    /// [`RedisServer::reset_stats`], from `INFO commandstats`; the `CONFIG` call that reset them aside.
    pub fn busy_usec(&self) -> f64 {
        self.command(&[b"INFO", b"commandstats"])
            .lines()
            .filter(|l| l.starts_with("cmdstat_") && !l.starts_with("cmdstat_config"))
            .filter_map(|l| {
                l.split(",usec=")
                    .nth(1)?
                    .split(',')
                    .next()?
                    .parse::<f64>()
                    .ok()
            })
            .sum()
    }

    /// Runs one command through a raw RESP connection (no client library), for test setup and checks,
    /// and returns the reply as RESP text. On a TLS server it goes through `redis-cli --tls` (the
    /// testkit has no TLS of its own), whose reply is its raw output instead: bulk strings as they
    /// are, without RESP framing — enough for `INFO` and `CLUSTER NODES`.
    pub fn command(&self, args: &[&[u8]]) -> String {
        if let Some(tls) = &self.tls {
            return self.command_tls(tls, args);
        }
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect to test redis");
        s.set_read_timeout(Some(Duration::from_secs(5))).ok();
        let mut req = Vec::new();
        if let Some(pw) = &self.password {
            req.extend(resp(&[b"AUTH", pw.as_bytes()]));
        }
        req.extend(resp(args));
        s.write_all(&req).expect("write to test redis");
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        let wanted_lines = if self.password.is_some() { 2 } else { 1 };
        loop {
            let n = s.read(&mut buf).unwrap_or(0);
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
            if complete(&out, wanted_lines) {
                break;
            }
        }
        let text = String::from_utf8_lossy(&out).into_owned();
        if self.password.is_some() {
            text.split_once("\r\n")
                .map(|x| x.1.to_owned())
                .unwrap_or(text)
        } else {
            text
        }
    }
}

impl RedisServer {
    fn command_tls(&self, tls: &RedisTls, args: &[&[u8]]) -> String {
        let mut cmd = Command::new(cli_binary());
        cmd.args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(tls_cli_args(tls))
            .args(args.iter().map(|a| std::ffi::OsStr::from_bytes(a)));
        // Through the environment, not the command line (which `ps` shows).
        if let Some(pw) = &self.password {
            cmd.env("REDISCLI_AUTH", pw);
        }
        run_bounded(cmd, Duration::from_secs(5))
    }
}

/// `redis-cli`'s TLS options for a server with these files (its own certificate as the client
/// certificate when the server demands one).
fn tls_cli_args(tls: &RedisTls) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> =
        vec!["--tls".into(), "--cacert".into(), tls.ca.clone().into()];
    if tls.auth_clients {
        args.extend([
            "--cert".into(),
            tls.cert.clone().into(),
            "--key".into(),
            tls.key.clone().into(),
        ]);
    }
    args
}

/// Runs `cmd` and returns its standard output; killed after `limit` (redis-cli 7.0 has no timeout
/// of its own, and waits forever on a paused server), like the plain path's read timeout.
fn run_bounded(mut cmd: Command, limit: Duration) -> String {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().unwrap_or_else(|e| {
        panic!("cannot run redis-cli ({e}); the README's test command installs it")
    });
    let mut stdout = child.stdout.take().expect("piped stdout");
    // Read on another thread, so a large reply cannot fill the pipe and stall the child.
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = stdout.read_to_end(&mut out);
        out
    });
    let started = Instant::now();
    while matches!(child.try_wait(), Ok(None)) {
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let out = reader.join().unwrap_or_default();
    String::from_utf8_lossy(&out).into_owned()
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.resume();
        self.kill();
    }
}

fn binary() -> String {
    std::env::var("LEASEHOLD_TEST_REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_owned())
}

fn resp(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Whether `out` holds `replies` whole simple replies (enough for the commands tests send).
fn complete(out: &[u8], replies: usize) -> bool {
    let text = String::from_utf8_lossy(out);
    let mut rest: &str = &text;
    for _ in 0..replies {
        let Some((line, after)) = rest.split_once("\r\n") else {
            return false;
        };
        rest = after;
        if let Some(len) = line.strip_prefix('$') {
            let Ok(len) = len.parse::<i64>() else {
                return false;
            };
            if len >= 0 {
                let need = len as usize + 2;
                if rest.len() < need {
                    return false;
                }
                rest = &rest[need..];
            }
        }
    }
    true
}

fn ping(port: u16, password: Option<&str>) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    s.set_read_timeout(Some(Duration::from_millis(500))).ok();
    let mut req = Vec::new();
    if let Some(pw) = password {
        req.extend(resp(&[b"AUTH", pw.as_bytes()]));
    }
    req.extend(resp(&[b"PING"]));
    if s.write_all(&req).is_err() {
        return false;
    }
    let mut buf = [0u8; 64];
    let mut got = Vec::new();
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
        if String::from_utf8_lossy(&got).contains("PONG") {
            return true;
        }
    }
    false
}

fn cli_binary() -> String {
    std::env::var("LEASEHOLD_TEST_REDIS_CLI").unwrap_or_else(|_| "redis-cli".to_owned())
}

/// One line of `CLUSTER NODES`, as the tests need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterNode {
    pub port: u16,
    pub master: bool,
    pub failed: bool,
    /// `start-end` ranges this master serves.
    pub slots: Vec<(u16, u16)>,
}

/// A Redis Cluster of our own: `masters` masters with one replica each (`redis-server
/// --cluster-enabled yes` per node, then `redis-cli --cluster create … --cluster-replicas 1`), on
/// free loopback ports, without persistence, every node killed on drop. `node_timeout_ms` is
/// `cluster-node-timeout`: how soon a dead master's replica takes over.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    /// Replicas per master.
    replicas: usize,
    tls: Option<RedisTls>,
}

impl RedisCluster {
    pub fn start(masters: usize, node_timeout_ms: u64) -> RedisCluster {
        Self::launch(masters, 1, node_timeout_ms, None)
    }

    /// A TLS-only cluster: every node `--port 0 --tls-port P`, the cluster bus and replication over
    /// TLS too (`--tls-cluster yes --tls-replication yes`), so nothing is ever sent in plain text;
    /// `replicas` per master (0 starts fastest). [`RedisCluster::url`] is `rediss+cluster://`.
    pub fn start_tls(
        masters: usize,
        replicas: usize,
        node_timeout_ms: u64,
        tls: &RedisTls,
    ) -> RedisCluster {
        Self::launch(masters, replicas, node_timeout_ms, Some(tls))
    }

    fn launch(
        masters: usize,
        replicas: usize,
        node_timeout_ms: u64,
        tls: Option<&RedisTls>,
    ) -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..masters * (1 + replicas))
            .map(|_| {
                let mut args: Vec<String> = vec![
                    "--cluster-enabled".into(),
                    "yes".into(),
                    "--cluster-config-file".into(),
                    "@DIR@/nodes.conf".into(),
                    "--cluster-node-timeout".into(),
                    node_timeout_ms.to_string(),
                    // A replica may take over however long it was cut off (tests kill masters
                    // on purpose).
                    "--cluster-replica-validity-factor".into(),
                    "0".into(),
                ];
                match tls {
                    None => RedisServer::start_with_args(None, args),
                    Some(tls) => {
                        args.extend(
                            ["--tls-cluster", "yes", "--tls-replication", "yes"].map(String::from),
                        );
                        RedisServer::start_tls_with(None, tls, args)
                    }
                }
            })
            .collect();
        // `--cluster create` checks every node first and changes nothing when one is not ready
        // yet (seen once in a full test run, on a TLS node just started) or has exited (seen on
        // a loaded machine): tried again a moment later, a node that exited started anew on
        // another port, up to three times, with redis-cli's own words in the failure.
        let mut nodes = nodes;
        let mut tries = 0;
        loop {
            tries += 1;
            for node in &mut nodes {
                if node.has_exited() {
                    node.start_elsewhere();
                }
            }
            let mut cmd = Command::new(cli_binary());
            if let Some(tls) = tls {
                cmd.args(tls_cli_args(tls));
            }
            cmd.arg("--cluster").arg("create");
            for node in &nodes {
                cmd.arg(node.addr());
            }
            cmd.args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"]);
            let out = cmd.output().unwrap_or_else(|e| {
                panic!("cannot run redis-cli ({e}); the README's test command installs it")
            });
            if out.status.success() {
                break;
            }
            assert!(
                tries < 3,
                "redis-cli --cluster create failed {tries} times ({}): {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            std::thread::sleep(Duration::from_millis(500));
        }
        let cluster = RedisCluster {
            nodes,
            replicas,
            tls: tls.cloned(),
        };
        assert!(
            cluster.wait_healthy(Duration::from_secs(30)),
            "the cluster did not become healthy: {:?}",
            cluster.topology()
        );
        assert!(
            cluster.wait_replicas_online(Duration::from_secs(30)),
            "the replicas did not finish their first sync"
        );
        // A node learns the others' roles by gossip: until then it may list a replica as a
        // master without slots, and a test counting masters would count it (seen in CI).
        assert!(
            wait_until(Duration::from_secs(30), || {
                cluster.topology().iter().filter(|n| n.master).count() == masters
            }),
            "the nodes did not agree on {masters} masters: {:?}",
            cluster.topology()
        );
        cluster
    }

    /// `redis+cluster://` (`rediss+cluster://` for a TLS cluster) naming every node as a seed, plus
    /// `query` when not empty.
    pub fn url_with(&self, query: &str) -> String {
        let seeds: Vec<String> = self.nodes.iter().map(RedisServer::addr).collect();
        let q = if query.is_empty() {
            String::new()
        } else {
            format!("?{query}")
        };
        let scheme = if self.tls.is_some() {
            "rediss+cluster"
        } else {
            "redis+cluster"
        };
        format!("{scheme}://{}{q}", seeds.join(","))
    }

    pub fn url(&self) -> String {
        self.url_with("")
    }

    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    pub fn node_mut(&mut self, port: u16) -> &mut RedisServer {
        self.nodes
            .iter_mut()
            .find(|n| n.port() == port)
            .expect("no such cluster node")
    }

    pub fn node(&self, port: u16) -> &RedisServer {
        self.nodes
            .iter()
            .find(|n| n.port() == port)
            .expect("no such cluster node")
    }

    /// `CLUSTER NODES` as seen by the first running node that answers.
    pub fn topology(&self) -> Vec<ClusterNode> {
        for node in self.nodes.iter().filter(|n| n.is_running()) {
            let text = node.command(&[b"CLUSTER", b"NODES"]);
            let parsed = parse_cluster_nodes(&text);
            if !parsed.is_empty() {
                return parsed;
            }
        }
        Vec::new()
    }

    /// The port of the master serving `slot`, as the cluster says now.
    pub fn master_of(&self, slot: u16) -> Option<u16> {
        self.topology()
            .into_iter()
            .find(|n| n.master && !n.failed && n.slots.iter().any(|&(a, b)| a <= slot && slot <= b))
            .map(|n| n.port)
    }

    /// Until every running master has a replica that finished its sync (at once for a cluster
    /// started without replicas).
    pub fn wait_replicas_online(&self, limit: Duration) -> bool {
        if self.replicas == 0 {
            return true;
        }
        wait_until(limit, || {
            self.topology()
                .iter()
                .filter(|n| n.master && !n.failed && !n.slots.is_empty())
                .all(|n| {
                    self.node(n.port)
                        .command(&[b"INFO", b"replication"])
                        .contains("state=online")
                })
        })
    }

    /// Until every running node says `cluster_state:ok` and every slot has a live master.
    pub fn wait_healthy(&self, limit: Duration) -> bool {
        wait_until(limit, || {
            let all_ok = self.nodes.iter().filter(|n| n.is_running()).all(|n| {
                n.command(&[b"CLUSTER", b"INFO"])
                    .contains("cluster_state:ok")
            });
            let covered: u32 = self
                .topology()
                .iter()
                .filter(|n| n.master && !n.failed)
                .flat_map(|n| n.slots.iter())
                .map(|&(a, b)| u32::from(b) - u32::from(a) + 1)
                .sum();
            all_ok && covered == 16384
        })
    }
}

fn parse_cluster_nodes(reply: &str) -> Vec<ClusterNode> {
    // A bulk string: `$len\r\n` then one line per node.
    reply
        .lines()
        .filter(|l| !l.starts_with('$') && !l.trim().is_empty())
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let addr = fields.get(1)?;
            let port: u16 = addr.split('@').next()?.rsplit(':').next()?.parse().ok()?;
            let flags = fields.get(2)?;
            let slots = fields
                .iter()
                .skip(8)
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => s.parse().ok().map(|x| (x, x)),
                })
                .collect();
            Some(ClusterNode {
                port,
                master: flags.contains("master"),
                failed: flags.contains("fail"),
                slots,
            })
        })
        .collect()
}

/// A master, `replicas` replicas and `sentinels` Sentinels watching it as `service` (quorum 2), on
/// free loopback ports, killed on drop. `down_after_ms` is how soon the Sentinels call a silent
/// master down.
#[derive(Debug)]
pub struct RedisSentinel {
    service: String,
    servers: Vec<RedisServer>,
    sentinels: Vec<RedisServer>,
    tls: bool,
}

impl RedisSentinel {
    pub fn start(replicas: usize, sentinels: usize, down_after_ms: u64) -> RedisSentinel {
        Self::launch(replicas, sentinels, down_after_ms, None)
    }

    /// Every server and Sentinel TLS only (`port 0`, `tls-port`), replication and the Sentinels'
    /// own links over TLS too (`tls-replication yes`). [`RedisSentinel::url`] is
    /// `rediss+sentinel://`.
    pub fn start_tls(
        replicas: usize,
        sentinels: usize,
        down_after_ms: u64,
        tls: &RedisTls,
    ) -> RedisSentinel {
        Self::launch(replicas, sentinels, down_after_ms, Some(tls))
    }

    fn launch(
        replicas: usize,
        sentinels: usize,
        down_after_ms: u64,
        tls: Option<&RedisTls>,
    ) -> RedisSentinel {
        let service = "leasehold-test".to_owned();
        let server = |mut args: Vec<String>| match tls {
            None => RedisServer::start_with_args(None, args),
            Some(tls) => {
                args.extend(["--tls-replication", "yes"].map(String::from));
                RedisServer::start_tls_with(None, tls, args)
            }
        };
        let master = server(Vec::new());
        let master_port = master.port();
        let mut servers = vec![master];
        for _ in 0..replicas {
            servers.push(server(vec![
                "--replicaof".into(),
                "127.0.0.1".into(),
                master_port.to_string(),
                // A fast election once the master is gone.
                "--repl-ping-replica-period".into(),
                "1".into(),
            ]));
        }
        let sentinels = (0..sentinels)
            .map(|_| match tls {
                None => RedisServer::start_sentinel(&service, master_port, down_after_ms),
                Some(tls) => {
                    RedisServer::start_sentinel_tls(&service, master_port, down_after_ms, tls)
                }
            })
            .collect();
        let online = wait_until(Duration::from_secs(30), || {
            let info = servers[0].command(&[b"INFO", b"replication"]);
            info.matches("state=online").count() == replicas
        });
        assert!(online, "the replicas did not finish their first sync");
        let group = RedisSentinel {
            service,
            servers,
            sentinels,
            tls: tls.is_some(),
        };
        assert!(
            group.wait_settled(replicas, Duration::from_secs(30)),
            "the Sentinels did not find every replica and each other"
        );
        group
    }

    pub fn service(&self) -> &str {
        &self.service
    }

    /// `redis+sentinel://s1,s2,s3/service` (`rediss+sentinel://` when TLS), plus `query` when not
    /// empty.
    pub fn url_with(&self, query: &str) -> String {
        let hosts: Vec<String> = self.sentinels.iter().map(RedisServer::addr).collect();
        let q = if query.is_empty() {
            String::new()
        } else {
            format!("?{query}")
        };
        let scheme = if self.tls {
            "rediss+sentinel"
        } else {
            "redis+sentinel"
        };
        format!("{scheme}://{}/{}{q}", hosts.join(","), self.service)
    }

    pub fn url(&self) -> String {
        self.url_with("")
    }

    /// The data servers (the first one is the master at start).
    pub fn servers(&self) -> &[RedisServer] {
        &self.servers
    }

    pub fn server_mut(&mut self, port: u16) -> &mut RedisServer {
        self.servers
            .iter_mut()
            .find(|s| s.port() == port)
            .expect("no such server")
    }

    pub fn sentinels(&self) -> &[RedisServer] {
        &self.sentinels
    }

    pub fn sentinels_mut(&mut self) -> &mut [RedisServer] {
        &mut self.sentinels
    }

    /// The master's port as the first running Sentinel that answers says.
    pub fn master_port(&self) -> Option<u16> {
        self.sentinels
            .iter()
            .filter(|s| s.is_running())
            .find_map(|s| sentinel_info(s).map(|(port, _, _)| port))
    }

    /// The master every running Sentinel names, once the failover is carried through: it is not
    /// `down` (a server killed), it says it is a master, and every other server but `down`
    /// follows it with its link up. `None` until then.
    pub fn settled_master(&self, down: Option<u16>) -> Option<u16> {
        let p = self.master_port().filter(|p| Some(*p) != down)?;
        let named = self
            .sentinels
            .iter()
            .filter(|s| s.is_running())
            .all(|s| sentinel_info(s).is_some_and(|(named, _, _)| named == p));
        let master = self.servers.iter().find(|s| s.port() == p)?;
        let follows = format!("master_port:{p}");
        let others_follow = self
            .servers
            .iter()
            .filter(|s| s.port() != p && Some(s.port()) != down)
            .all(|s| {
                let info = s.command(&[b"INFO", b"replication"]);
                info.contains(&follows) && info.contains("master_link_status:up")
            });
        (named && others_follow && master.command(&[b"ROLE"]).contains("master")).then_some(p)
    }

    /// Until every Sentinel names `port` as the master (after a failover).
    pub fn wait_master(&self, port: u16, limit: Duration) -> bool {
        wait_until(limit, || {
            self.sentinels
                .iter()
                .filter(|s| s.is_running())
                .all(|s| sentinel_info(s).is_some_and(|(p, _, _)| p == port))
        })
    }

    /// Until every Sentinel sees `replicas` replicas and the other Sentinels.
    fn wait_settled(&self, replicas: usize, limit: Duration) -> bool {
        let others = self.sentinels.len();
        wait_until(limit, || {
            self.sentinels
                .iter()
                .all(|s| sentinel_info(s).is_some_and(|(_, r, n)| r == replicas && n == others))
        })
    }
}

/// `INFO sentinel`'s `master0:…,address=127.0.0.1:PORT,slaves=R,sentinels=N`.
fn sentinel_info(sentinel: &RedisServer) -> Option<(u16, usize, usize)> {
    let text = sentinel.command(&[b"INFO", b"sentinel"]);
    let line = text.lines().find(|l| l.starts_with("master0:"))?;
    let field = |name: &str| {
        line.split(',')
            .find_map(|f| f.strip_prefix(name).map(str::to_owned))
    };
    let port = field("address=")?.rsplit(':').next()?.parse().ok()?;
    let slaves = field("slaves=")?.parse().ok()?;
    let sentinels = field("sentinels=")?.parse().ok()?;
    Some((port, slaves, sentinels))
}
