//! Running the `leasehold` binary against a real backend: a fresh lock directory, or a redis-server of
//! the test's own.

#![allow(dead_code)]

use leasehold_testkit::{RedisServer, TempDir};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Longest any one invocation may take before the test fails (a loaded 2-core CI machine).
pub const LIMIT: Duration = Duration::from_secs(60);

pub enum Backend {
    Local(TempDir),
    Redis(RedisServer),
}

impl Backend {
    pub fn local() -> Backend {
        Backend::Local(TempDir::new("cli-local"))
    }

    pub fn redis() -> Backend {
        Backend::Redis(RedisServer::start())
    }

    pub fn url(&self) -> String {
        match self {
            Backend::Local(dir) => dir.file_url(),
            Backend::Redis(server) => server.url(),
        }
    }

    pub fn client(&self) -> leasehold::Client {
        leasehold::connect(&self.url()).expect("connect")
    }

    /// Removes the lease record of `key` behind its holder's back, as an operator or a failover would.
    pub fn delete_key(&self, key: &str) {
        match self {
            Backend::Local(dir) => {
                // Each test has its own directory, so every record file in it is this test's; the
                // record names start with the key's readable part (see leasehold-local's `names`).
                let readable: String = key
                    .bytes()
                    .take(40)
                    .map(|b| {
                        if b.is_ascii_alphanumeric() || b"-_.".contains(&b) {
                            b as char
                        } else {
                            '_'
                        }
                    })
                    .collect();
                let mut removed = 0;
                for entry in std::fs::read_dir(dir.path()).expect("read lock dir") {
                    let entry = entry.expect("dir entry");
                    let name = entry.file_name().to_string_lossy().into_owned();
                    if name.starts_with(&format!("k-{readable}-")) && name.ends_with(".lock") {
                        std::fs::remove_file(entry.path()).expect("remove record");
                        removed += 1;
                    }
                }
                assert_eq!(
                    removed,
                    1,
                    "no record file for {key} in {}",
                    dir.path().display()
                );
            }
            Backend::Redis(server) => {
                // The lock key is `leasehold:{<16 hex digits of SHA-256(prefix ‖ key)>}l:<key>`
                // (leasehold-redis's keys.rs; the tag keeps a lease in one Cluster slot). This
                // crate has no SHA-256, so the server finds the one key of that shape; the glob
                // characters in the key are escaped.
                let mut pattern = b"leasehold:{????????????????}l:".to_vec();
                for b in key.bytes() {
                    if b"*?[]\\".contains(&b) {
                        pattern.push(b'\\');
                    }
                    pattern.push(b);
                }
                let reply = server.command(&[
                    b"EVAL",
                    b"local k = redis.call('KEYS', ARGV[1]) \
                      if #k ~= 1 then return -#k end return redis.call('DEL', k[1])",
                    b"0",
                    &pattern,
                ]);
                assert_eq!(reply, ":1\r\n", "DEL the lock key of {key:?}");
            }
        }
    }
}

pub fn bin() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_leasehold"));
    cmd.env_remove("LEASEHOLD_URL");
    cmd
}

/// `leasehold --url URL ARGS…`, run to completion (at most [`LIMIT`]).
pub fn leasehold(url: &str, args: &[&str]) -> Output {
    let mut cmd = bin();
    cmd.arg("--url").arg(url).args(args);
    output(cmd)
}

/// Runs `cmd` to completion with captured output; fails the test if it takes longer than [`LIMIT`].
pub fn output(mut cmd: Command) -> Output {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().expect("spawn leasehold");
    finish(child)
}

/// Waits (at most [`LIMIT`]) for a child spawned with piped output.
pub fn finish(child: Child) -> Output {
    let pid = child.id() as i32;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(LIMIT) {
        Ok(out) => out.expect("wait for leasehold"),
        Err(_) => {
            // SAFETY: kill(2) on our own child, which the waiting thread has not reaped yet.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("leasehold did not finish within {LIMIT:?}");
        }
    }
}

/// Starts `leasehold --url URL ARGS…` in the background with piped output.
pub fn spawn(url: &str, args: &[&str]) -> Child {
    let mut cmd = bin();
    cmd.arg("--url")
        .arg(url)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.spawn().expect("spawn leasehold")
}

pub fn code(out: &Output) -> i32 {
    out.status
        .code()
        .unwrap_or_else(|| panic!("killed by a signal: {out:?}"))
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Asserts stderr is exactly one line and returns it.
pub fn one_line_error(out: &Output) -> String {
    let err = stderr(out);
    assert_eq!(err.lines().count(), 1, "stderr is not one line: {err:?}");
    assert!(err.starts_with("leasehold: "), "{err:?}");
    err
}

/// Polls for `path` to exist.
pub fn wait_for_file(path: &Path) {
    assert!(
        leasehold_testkit::wait_until(LIMIT, || path.exists()),
        "{} never appeared",
        path.display()
    );
}

pub fn scratch() -> TempDir {
    TempDir::new("cli-scratch")
}

pub fn file(dir: &TempDir, name: &str) -> PathBuf {
    dir.path().join(name)
}

pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

pub fn elapsed_since(start: Instant) -> Duration {
    start.elapsed()
}
