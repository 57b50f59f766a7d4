//! The 0.3.0 release's `leasehold` CLI, built from its commit in this repository's history: the other
//! half of a deployment that is rolling from 0.3 to this version (tests/rolling_upgrade.rs).
//!
//! The source is `git archive`d into `<target>/upgrade/leasehold-0.3.0/` once and built there with
//! the build directory of the running test binary as cargo's `build-dir`, so every dependency of the
//! same version and features is reused (the workspace crates are what it compiles). The final
//! artifacts go to `<target>/upgrade/out/` instead of `<target>/debug/`: there, 0.3.0's `leasehold`
//! binary would replace today's, which the CLI's own tests run (`CARGO_BIN_EXE_leasehold`).
//!
//! A missing history (a shallow clone) or a failed build fails the test that asked: a rolling upgrade
//! no one checked must not pass as one that was.

#![allow(dead_code)]

use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The commit of this repository that is the 0.3.0 release.
pub const COMMIT: &str = "85c4336";
pub const VERSION: &str = "0.3.0";

/// The path of 0.3.0's `leasehold` binary, built on first use (once per process; other processes
/// wait on a file lock while one builds).
pub fn cli() -> &'static Path {
    static CLI: OnceLock<PathBuf> = OnceLock::new();
    CLI.get_or_init(build)
}

/// The directory holding `debug/deps/` of the running test binary: the workspace's target dir (or
/// its `build-dir`), wherever `CARGO_TARGET_DIR` put it.
fn build_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.ancestors()
        .nth(3)
        .expect("the test binary lives in <build-dir>/<profile>/deps/")
        .to_path_buf()
}

fn build() -> PathBuf {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let build_dir = build_dir();
    let base = build_dir.join("upgrade");
    fs::create_dir_all(&base).expect("create <target>/upgrade");
    // Two test commands at once (or the CLI's tests building beside us) must not extract into one
    // directory together; cargo itself serializes the builds.
    let lock = File::create(base.join(".lock")).expect("create the build lock");
    // SAFETY: flock on a descriptor we own; it is released when `lock` is closed.
    let locked = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(locked, 0, "flock: {}", std::io::Error::last_os_error());

    let src = base.join(format!("leasehold-{VERSION}"));
    let extracted = src.join(".extracted");
    if !extracted.exists() {
        extract(repo, &src);
        File::create(&extracted).expect("mark the extraction done");
    }

    let out = base.join("out");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .args(["build", "--locked", "-p", "leasehold-cli"])
        .current_dir(&src)
        .env("CARGO_BUILD_BUILD_DIR", &build_dir)
        .env("CARGO_TARGET_DIR", &out)
        .env_remove("CARGO_BUILD_TARGET_DIR")
        .stdin(Stdio::null());
    // What cargo set for this test binary's run is not the build's environment: dependencies that
    // read one of these variables (ring reads CARGO_MANIFEST_DIR) would be rebuilt here, and again
    // by the next `cargo test`, every time.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        let set_for_the_test = [
            "CARGO_MANIFEST_DIR",
            "CARGO_MANIFEST_PATH",
            "CARGO_CRATE_NAME",
            "CARGO_BIN_NAME",
            "CARGO_PRIMARY_PACKAGE",
            "CARGO_TARGET_TMPDIR",
            "CARGO_RUSTC_CURRENT_DIR",
            "OUT_DIR",
        ]
        .contains(&name.as_ref())
            || name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_BIN_EXE_");
        if set_for_the_test {
            command.env_remove(name.as_ref());
        }
    }
    let started = Instant::now();
    let output = command.output().expect("run cargo");
    assert!(
        output.status.success(),
        "building leasehold {VERSION} from {COMMIT} failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    eprintln!(
        "leasehold {VERSION}'s CLI built (or found fresh) in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let exe = out.join("debug").join("leasehold");
    let version = Command::new(&exe)
        .arg("--version")
        .output()
        .expect("run the 0.3.0 CLI");
    let version = String::from_utf8_lossy(&version.stdout);
    assert_eq!(version.trim(), format!("leasehold {VERSION}"), "{exe:?}");
    exe
}

/// `git archive COMMIT | tar -x -C src`, into a fresh directory.
fn extract(repo: &Path, src: &Path) {
    match fs::remove_dir_all(src) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => panic!("remove the partial extraction {src:?}: {e}"),
    }
    fs::create_dir_all(src).expect("create the source directory");
    let mut git = Command::new("git")
        .args(["archive", "--format=tar", COMMIT])
        .current_dir(repo)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run git (the test needs git and the repository's history)");
    let tar = Command::new("tar")
        .arg("-x")
        .arg("-C")
        .arg(src)
        .stdin(git.stdout.take().expect("git's stdout"))
        .status()
        .expect("run tar");
    let mut git_err = String::new();
    git.stderr
        .take()
        .expect("git's stderr")
        .read_to_string(&mut git_err)
        .ok();
    let git_status = git.wait().expect("wait for git");
    assert!(
        git_status.success() && tar.success(),
        "extracting {VERSION} ({COMMIT}) failed: git {git_status}, tar {tar}: {git_err}\n\
         (a shallow clone lacks the commit: fetch the history, e.g. `git fetch --unshallow`)"
    );
    let manifest = fs::read_to_string(src.join("Cargo.toml")).expect("the release's Cargo.toml");
    assert!(
        manifest.contains(&format!("version = \"{VERSION}\"")),
        "{COMMIT} is not version {VERSION}"
    );
}

/// A 0.3.0 client: the CLI pointed at one backend URL.
pub struct OldCli {
    pub url: String,
}

/// What a 0.3.0 `run` did.
#[derive(Debug)]
pub struct Ran {
    pub status: ExitStatus,
    /// The fence the command was given (`LEASEHOLD_FENCE`), if it ran.
    pub fence: Option<u64>,
    pub stderr: String,
}

impl Ran {
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }
}

/// The exit status of 0.3.0's `run` when the key is held by someone else.
pub const HELD_ELSEWHERE: i32 = 75;

impl OldCli {
    pub fn new(url: &str) -> OldCli {
        OldCli {
            url: url.to_owned(),
        }
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(cli());
        cmd.arg("--url").arg(&self.url).stdin(Stdio::null());
        cmd
    }

    /// `leasehold run --wait WAIT KEY -- sh -c 'echo $LEASEHOLD_FENCE'`: one acquisition, held only
    /// for as long as the echo takes.
    pub fn run_once(&self, key: &str, wait: Duration) -> Ran {
        self.run_once_as(key, &[], wait)
    }

    /// [`OldCli::run_once`] with `kind` among `run`'s options (`--shared`, `--permits N`).
    pub fn run_once_as(&self, key: &str, kind: &[&str], wait: Duration) -> Ran {
        let output = self
            .command()
            .args(["run", "--ttl", "30s", "--wait"])
            .arg(format!("{}ms", wait.as_millis()))
            .args(kind)
            .arg(key)
            .args(["--", "sh", "-c", "echo \"$LEASEHOLD_FENCE\""])
            .output()
            .expect("run the 0.3.0 CLI");
        let stdout = String::from_utf8_lossy(&output.stdout);
        Ran {
            status: output.status,
            fence: stdout.trim().parse().ok(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// `leasehold run KEY -- sh -c SCRIPT` with `env` in the command's environment, waiting up to
    /// `wait` for the key.
    pub fn run_script(
        &self,
        key: &str,
        wait: Duration,
        script: &str,
        env: &[(&str, &Path)],
    ) -> Ran {
        let mut cmd = self.command();
        cmd.args(["run", "--ttl", "30s", "--wait"])
            .arg(format!("{}ms", wait.as_millis()))
            .arg(key)
            .args(["--", "sh", "-c", script]);
        for (name, value) in env {
            cmd.env(name, value);
        }
        let output = cmd.output().expect("run the 0.3.0 CLI");
        Ran {
            status: output.status,
            fence: None,
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// `leasehold once KEY -- sh -c SCRIPT` (records kept an hour), and its standard output: the
    /// command's, or the one recorded by an earlier call.
    pub fn once(&self, key: &str, script: &str) -> (Ran, String) {
        let output = self
            .command()
            .args(["once", "--ttl", "30s", "--wait", "0s", "--keep-for", "1h"])
            .arg(key)
            .args(["--", "sh", "-c", script])
            .output()
            .expect("run the 0.3.0 CLI");
        let ran = Ran {
            status: output.status,
            fence: None,
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        };
        (ran, String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// `leasehold status --json KEY`: what 0.3 tells an operator about the key.
    pub fn status(&self, key: &str) -> String {
        let output = self
            .command()
            .args(["status", "--json"])
            .arg(key)
            .output()
            .expect("run the 0.3.0 CLI");
        assert!(
            output.status.success(),
            "0.3.0's status of {key}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Starts `leasehold run KEY` holding the key until [`Holder::finish`]; returns once the
    /// command runs (the lease is ours), with the fence it was given.
    pub fn hold(&self, key: &str, work: &Path) -> Holder {
        self.hold_as(key, &[], work)
    }

    /// [`OldCli::hold`] with `kind` among `run`'s options (`--shared`, `--permits N`).
    pub fn hold_as(&self, key: &str, kind: &[&str], work: &Path) -> Holder {
        let fence_file = work.join(format!("fence-{}", leasehold_testkit::unique_key("h")));
        let go = work.join(format!("go-{}", leasehold_testkit::unique_key("h")));
        // The fence is written under a temporary name and renamed, so it is never read half-written.
        let script = "echo \"$LEASEHOLD_FENCE\" > \"$FENCE.tmp\" && mv \"$FENCE.tmp\" \"$FENCE\"; \
                      while [ ! -e \"$GO\" ]; do sleep 0.01; done";
        let child = self
            .command()
            .args(["run", "--ttl", "30s", "--wait", "0s"])
            .args(kind)
            .arg(key)
            .args(["--", "sh", "-c", script])
            .env("FENCE", &fence_file)
            .env("GO", &go)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the 0.3.0 CLI");
        let mut holder = Holder {
            child: Some(child),
            go,
            fence: 0,
        };
        let mut exited = None;
        let up = leasehold_testkit::wait_until(Duration::from_secs(60), || {
            if fence_file.exists() {
                return true;
            }
            if let Ok(Some(status)) = holder.child.as_mut().expect("child").try_wait() {
                exited = Some(status);
                return true;
            }
            false
        });
        if let Some(status) = exited.filter(|_| !fence_file.exists()) {
            let mut stderr = String::new();
            if let Some(mut err) = holder.child.as_mut().and_then(|c| c.stderr.take()) {
                err.read_to_string(&mut stderr).ok();
            }
            holder.child = None;
            panic!("0.3.0's run on {key} exited ({status}) before holding it: {stderr}");
        }
        assert!(up, "0.3.0's run on {key} did not start its command");
        let text = fs::read_to_string(&fence_file).expect("read the holder's fence");
        holder.fence = text.trim().parse().expect("a numeric fence");
        holder
    }
}

/// A 0.3.0 `run` holding a key.
pub struct Holder {
    child: Option<Child>,
    go: PathBuf,
    pub fence: u64,
}

impl Holder {
    /// Ends the command and waits for `run` to release the lease and exit; panics unless it exits 0
    /// (79 would say the lease was lost while held).
    pub fn finish(mut self) {
        File::create(&self.go)
            .and_then(|mut f| f.flush())
            .expect("tell the holder to end");
        let child = self.child.take().expect("a running holder");
        let output = child.wait_with_output().expect("wait for the 0.3.0 holder");
        assert!(
            output.status.success(),
            "0.3.0's holder exited {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        // A failed assertion while it holds: end it rather than leave it to its 30 s lease.
        if let Some(mut child) = self.child.take() {
            let _ = File::create(&self.go);
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
