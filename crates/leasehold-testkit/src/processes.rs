//! Tests across real OS processes: workers (this test binary run again, or any other program, a C
//! or PHP one say), counters that every process sees, and the one check of the critical sections
//! that workers log.
//!
//! A test binary that runs itself as workers has a test named [`WORKER_TEST`] that does nothing
//! unless [`worker_mode`] says this process is a worker. Workers report to the test on stdout, in
//! lines starting with `@@ ` ([`Worker::report`]):
//!
//! ```ignore
//! #[test]
//! fn child_worker() {
//!     let Some(mode) = processes::worker_mode() else {
//!         return;
//!     };
//!     match mode.as_str() {
//!         "hold" => { /* take the key */ println!("@@ {fence}"); }
//!         other => panic!("unknown worker mode {other}"),
//!     }
//! }
//! ```

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

// Slots of [`Counters`].
/// Holders (or readers) inside now.
pub const INSIDE: usize = 0;
/// The most inside at once.
pub const MOST: usize = 1;
/// Cycles completed.
pub const CYCLES_DONE: usize = 2;
/// Readers inside now.
pub const READERS: usize = 3;
/// Writers inside now.
pub const WRITERS: usize = 4;
/// Times someone found itself inside beside a writer.
pub const OVERLAPS: usize = 5;
/// Set by the test: workers stop.
pub const STOP: usize = 6;
/// Times anyone got in.
pub const ENTERS: usize = 7;
const SLOTS: usize = 8;
const BYTES: usize = SLOTS * std::mem::size_of::<u64>();

/// A file of u64 counters mapped `MAP_SHARED` into every process that opens it, so what one
/// process counts the others see at once, whichever process it is in.
pub struct Counters {
    ptr: NonNull<AtomicU64>,
}

impl Counters {
    /// A new file of zeroed counters at `path` (replacing any), mapped into this process.
    pub fn create(path: &Path) -> Counters {
        std::fs::write(path, [0u8; BYTES])
            .unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
        Counters::open(path)
    }

    /// The counters [`Counters::create`] made at `path`.
    pub fn open(path: &Path) -> Counters {
        use std::os::fd::AsRawFd;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
        let len = file.metadata().expect("counter file size").len();
        assert_eq!(len, BYTES as u64, "{} is no counter file", path.display());
        // SAFETY: a fresh shared mapping of the whole file; it outlives the descriptor and is
        // unmapped only on drop.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED, "mmap {}", path.display());
        Counters {
            ptr: NonNull::new(ptr.cast()).expect("mmap gave a mapping"),
        }
    }

    pub fn at(&self, slot: usize) -> &AtomicU64 {
        assert!(slot < SLOTS, "no counter slot {slot}");
        // SAFETY: within the mapping, which lives as long as `self`; it is page-aligned, AtomicU64
        // has u64's layout, and the file is only ever accessed atomically.
        unsafe { &*self.ptr.as_ptr().add(slot) }
    }

    pub fn get(&self, slot: usize) -> u64 {
        self.at(slot).load(SeqCst)
    }

    /// Someone got in: one more [`INSIDE`], the most at once kept in [`MOST`], and one more
    /// [`ENTERS`].
    pub fn enter(&self) {
        let now = self.at(INSIDE).fetch_add(1, SeqCst) + 1;
        self.at(MOST).fetch_max(now, SeqCst);
        self.at(ENTERS).fetch_add(1, SeqCst);
    }

    /// Someone is leaving: one fewer [`INSIDE`].
    pub fn leave(&self) {
        self.at(INSIDE).fetch_sub(1, SeqCst);
    }
}

impl Drop for Counters {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `open`; no reference into it outlives `self`.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), BYTES) };
    }
}

/// The test a worker runs: every test binary that runs itself as workers has one of this name.
pub const WORKER_TEST: &str = "child_worker";
/// Names a worker's mode in its environment.
const MODE_VAR: &str = "LEASEHOLD_WORKER";
/// The URL a worker works on.
const URL_VAR: &str = "LEASEHOLD_WORKER_URL";

/// How long a worker may run. Longer than any worker's own waits (a minute or two for one
/// acquire), so only a worker that hangs runs into it, and then the test fails instead of hanging.
pub const WORKER_LIMIT: Duration = Duration::from_secs(300);

/// In a worker started by [`Worker::spawn`], its mode; elsewhere (the test run itself) None.
pub fn worker_mode() -> Option<String> {
    std::env::var(MODE_VAR).ok()
}

/// In a worker, the URL it was given.
pub fn worker_url() -> String {
    var(URL_VAR)
}

/// A variable of the worker's environment, empty if it is not set.
pub fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_default()
}

/// A number from the worker's environment.
pub fn num(name: &str) -> u64 {
    var(name)
        .parse()
        .unwrap_or_else(|_| panic!("{name} is not a number: {:?}", var(name)))
}

/// A child process that is killed when dropped (a failing test never leaves one behind), and
/// never waited for past its limit ([`WORKER_LIMIT`] unless set): then it is killed and the test
/// fails with what it printed.
pub struct Worker {
    name: String,
    child: Child,
    started: Instant,
    limit: Duration,
    stdout: Receiver<String>,
    /// All it printed, on stdout and stderr, for the message of a failure.
    output: Arc<Mutex<String>>,
    readers: Vec<JoinHandle<()>>,
}

impl Worker {
    /// This test binary run again as a worker in `mode` on `url`, with `vars` added to its
    /// environment; only its [`WORKER_TEST`] runs.
    pub fn spawn(mode: &str, url: &str, vars: &[(&str, String)]) -> Worker {
        let exe = std::env::current_exe().expect("the test binary's path");
        let mut cmd = Command::new(exe);
        cmd.args(["--exact", WORKER_TEST, "--nocapture", "--test-threads=1"])
            .env(MODE_VAR, mode)
            .env(URL_VAR, url);
        for (name, value) in vars {
            cmd.env(name, value);
        }
        Worker::start(mode, cmd)
    }

    /// Any program as a worker, `name` in messages about it.
    pub fn start(name: &str, mut cmd: Command) -> Worker {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start worker {name} ({cmd:?}): {e}"));
        let output = Arc::new(Mutex::new(String::new()));
        let (lines, stdout) = mpsc::channel();
        let readers = vec![
            collect(child.stdout.take().expect("piped"), &output, Some(lines)),
            collect(child.stderr.take().expect("piped"), &output, None),
        ];
        Worker {
            name: name.to_owned(),
            child,
            started: Instant::now(),
            limit: WORKER_LIMIT,
            stdout,
            output,
            readers,
        }
    }

    /// How long the worker may run from its start.
    pub fn limit(mut self, limit: Duration) -> Worker {
        self.limit = limit;
        self
    }

    /// The next `@@ ` line the worker prints, without the `@@ `.
    pub fn report(&mut self) -> String {
        loop {
            let left = self.limit.saturating_sub(self.started.elapsed());
            match self.stdout.recv_timeout(left) {
                // libtest prints `test child_worker ... ` without a newline before the output.
                Ok(line) => {
                    if let Some(at) = line.find("@@ ") {
                        return line[at + 3..].trim().to_owned();
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.fail(&format!("reported nothing within {:?}", self.limit))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let status = self.wait();
                    self.fail(&format!("ended ({status}) without reporting"))
                }
            }
        }
    }

    /// Writes `line` to the worker's stdin.
    pub fn say(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut().expect("the worker's stdin");
        writeln!(stdin, "{line}")
            .and_then(|()| stdin.flush())
            .unwrap_or_else(|e| panic!("tell worker {}: {e}", self.name));
    }

    /// How the worker ended, once it has.
    pub fn wait(&mut self) -> ExitStatus {
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for a worker") {
                return status;
            }
            if self.started.elapsed() >= self.limit {
                self.fail(&format!("still ran after {:?}", self.limit));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for the worker, and fails unless it exited 0.
    pub fn finish(&mut self) {
        let status = self.wait();
        if !status.success() {
            self.fail(&format!("failed ({status})"));
        }
    }

    /// SIGKILL, and waits for it to be gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) on our own child's pid; only a worker not yet waited for is signalled.
        unsafe { libc::kill(self.pid(), signal) };
    }

    pub fn pid(&self) -> libc::pid_t {
        self.child.id() as libc::pid_t
    }

    /// Kills the worker and fails the test with `what` and all the worker printed.
    fn fail(&mut self, what: &str) -> ! {
        self.kill();
        // The pipes close with the worker: let the readers take in its last words.
        let until = Instant::now() + Duration::from_secs(1);
        while self.readers.iter().any(|r| !r.is_finished()) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        let output = self.output.lock().unwrap_or_else(|p| p.into_inner());
        panic!("worker {} {what}; it printed:\n{output}", self.name);
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.kill();
        }
    }
}

/// Reads `stream` to its end on a thread of its own (a worker never blocks on a full pipe), adding
/// every line to `output` and sending it to `lines`.
fn collect(
    stream: impl Read + Send + 'static,
    output: &Arc<Mutex<String>>,
    lines: Option<mpsc::Sender<String>>,
) -> JoinHandle<()> {
    let output = Arc::clone(output);
    std::thread::spawn(move || {
        let mut stream = BufReader::new(stream);
        let mut bytes = Vec::new();
        while matches!(stream.read_until(b'\n', &mut bytes), Ok(n) if n > 0) {
            let line = String::from_utf8_lossy(&bytes).trim_end().to_owned();
            bytes.clear();
            let mut all = output.lock().unwrap_or_else(|p| p.into_inner());
            all.push_str(&line);
            all.push('\n');
            drop(all);
            if let Some(lines) = &lines {
                let _ = lines.send(line);
            }
        }
    })
}

/// Busy for `time`: the holder stays inside, on the CPU, so an overlap would show.
pub fn spin(time: Duration) {
    let end = Instant::now() + time;
    while Instant::now() < end {
        std::hint::spin_loop();
    }
}

/// CLOCK_MONOTONIC in nanoseconds: one clock for every process on the host (C's clock_gettime
/// and PHP's hrtime read it too), so times from different processes compare.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to write into.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One critical section as a worker logged it, on a line `enter_ns exit_ns fence`: when it got in
/// and when it began to leave, by [`monotonic_ns`], and the fence it held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    pub enter: u64,
    pub exit: u64,
    pub fence: u64,
    /// Who logged it.
    pub who: String,
}

impl Section {
    /// A logged line; None if it is not `enter_ns exit_ns fence`.
    pub fn parse(line: &str, who: &str) -> Option<Section> {
        let mut fields = line.split_whitespace().map(|f| f.parse::<u64>().ok());
        let (Some(Some(enter)), Some(Some(exit)), Some(Some(fence)), None) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return None;
        };
        Some(Section {
            enter,
            exit,
            fence,
            who: who.to_owned(),
        })
    }
}

/// The sections logged in the file at `path`, one a line, `who` logged them.
pub fn read_sections(path: &Path, who: &str) -> Vec<Section> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("read {} ({who}'s log): {e}", path.display()));
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            Section::parse(line, who).unwrap_or_else(|| {
                panic!("{} ({who}'s log): not a section: {line:?}", path.display())
            })
        })
        .collect()
}

/// What [`check_sections`] found.
#[derive(Debug, Default)]
pub struct SectionCheck {
    pub sections: usize,
    /// Sections that began before one that began earlier had ended: two holders at once.
    pub overlaps: usize,
    /// Sections whose fence is not above the one before them: a fence that did not strictly
    /// increase in the order the sections ran.
    pub fence_out_of_order: usize,
    /// Times the key passed from one `who` to another.
    pub handoffs: usize,
    /// The first overlap or fence out of order, for the message of a failure.
    pub first_problem: Option<String>,
}

/// Orders the sections of an exclusive lock by when they began and counts what a lock must never
/// do: an overlap, a fence out of order.
pub fn check_sections(sections: &[Section]) -> SectionCheck {
    let mut order: Vec<&Section> = sections.iter().collect();
    order.sort_by_key(|s| (s.enter, s.exit));
    let mut check = SectionCheck {
        sections: order.len(),
        ..SectionCheck::default()
    };
    let Some((&first, rest)) = order.split_first() else {
        return check;
    };
    // `latest` ends last of all so far: a section that begins before it ends overlaps it, even
    // when the section just before ended in time.
    let (mut before, mut latest) = (first, first);
    for &next in rest {
        if next.enter < latest.exit {
            check.overlaps += 1;
            check
                .first_problem
                .get_or_insert_with(|| format!("{next:?} began before {latest:?} ended"));
        }
        if next.fence <= before.fence {
            check.fence_out_of_order += 1;
            check
                .first_problem
                .get_or_insert_with(|| format!("{next:?} came after {before:?}"));
        }
        if next.who != before.who {
            check.handoffs += 1;
        }
        if next.exit > latest.exit {
            latest = next;
        }
        before = next;
    }
    check
}
