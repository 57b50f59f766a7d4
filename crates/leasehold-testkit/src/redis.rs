use crate::{free_port, wait_until, TempDir};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A `redis-server` of our own on a free loopback port, without persistence, killed on drop.
/// `kill`/`start`/`pause`/`resume` let fault tests stop and bring it back on the same port.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    dir: TempDir,
    password: Option<String>,
    child: Option<Child>,
}

impl RedisServer {
    pub fn start() -> RedisServer {
        Self::start_with(None)
    }

    /// With `requirepass`, for tests of AUTH and of password redaction.
    pub fn start_with_password(password: &str) -> RedisServer {
        Self::start_with(Some(password.to_owned()))
    }

    fn start_with(password: Option<String>) -> RedisServer {
        let mut server = RedisServer {
            port: free_port(),
            dir: TempDir::new("redis"),
            password,
            child: None,
        };
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

    /// Starts the server on `self.port`; false if it exited (the port was taken), panics if it hangs.
    fn spawn(&mut self) -> bool {
        let mut cmd = Command::new(binary());
        cmd.args(["--bind", "127.0.0.1", "--port"])
            .arg(self.port.to_string())
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(["--maxmemory-policy", "noeviction", "--protected-mode", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(pw) = &self.password {
            cmd.args(["--requirepass", pw]);
        }
        let mut child = cmd.spawn().unwrap_or_else(|e| {
            panic!("cannot start redis-server ({e}); the README's test command installs it")
        });
        let port = self.port;
        let password = self.password.clone();
        let mut exited = false;
        let up = wait_until(Duration::from_secs(10), || {
            exited = matches!(child.try_wait(), Ok(Some(_)));
            exited || ping(port, password.as_deref())
        });
        if exited {
            return false;
        }
        self.child = Some(child);
        assert!(up, "redis-server on port {port} did not come up");
        true
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT` (with the password, if any), plus `query` when not empty.
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
        format!("redis://{auth}127.0.0.1:{}{q}", self.port)
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

    /// Starts it again on the same port, empty (it keeps nothing on disk).
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

    /// Runs one command through a raw RESP connection (no client library), for test setup and checks.
    pub fn command(&self, args: &[&[u8]]) -> String {
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
