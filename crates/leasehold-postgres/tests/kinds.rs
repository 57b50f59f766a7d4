//! Shared locks and semaphores across real OS processes, in both PostgreSQL modes, and the
//! cycle time of each kind. Children are this test binary run again with `LEASEHOLD_PG_KINDS_CHILD`
//! naming what to do (see `child_worker`); they count what they see in a page of shared memory (a
//! file mapped `MAP_SHARED` by every process) and report on stdout in lines starting with `@@ `.

use leasehold_core::{Client, Config, ErrorKind};
use leasehold_postgres::PostgresBackend;
use leasehold_testkit::{unique_key, PostgresServer};
use std::io::{BufRead, BufReader};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};
use tempfile::TempDir;

const LONG: Duration = Duration::from_secs(30);
const ADVISORY: &str = "lock=advisory";
const TABLE: &str = "lock=table&table=kinds_procs_locks";

fn client_of(url: &str) -> Client {
    Client::new(PostgresBackend::connect(&Config::parse(url).expect("url")).expect("connect"))
}

/// These tests prove who gets in and when, not call bounds (hang.rs and faults.rs do): several
/// processes share two cores and one server here, and a `pg_locks` scan once took over the default
/// 1 s I/O timeout in CI, so calls get 5 s.
fn url(query: &str) -> String {
    PostgresServer::shared().url_with(&format!("{query}&io_timeout_ms=5000"))
}

/// Counters shared by every process that maps the same file.
struct Shared {
    ptr: *mut AtomicU64,
}

/// Slots of [`Shared`].
const INSIDE: usize = 0; // holders (or readers) inside now
const MOST: usize = 1; // most inside at once
const CYCLES: usize = 2; // cycles completed
const WRITERS: usize = 3; // writers inside now
const OVERLAPS: usize = 4; // times someone found a writer beside it
const STOP: usize = 5; // set by the parent: readers stop
const ENTERS: usize = 6; // times anyone got in

impl Shared {
    fn map(path: &Path) -> Shared {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .expect("shared counter file");
        file.set_len(4096).expect("size the counter file");
        // SAFETY: a fresh shared mapping of a 4096-byte file we keep open for the call; the mapping
        // outlives the descriptor and is never unmapped (the process ends first).
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED, "mmap");
        Shared { ptr: ptr.cast() }
    }

    fn at(&self, i: usize) -> &AtomicU64 {
        assert!(i < 512);
        // SAFETY: within the page mapped above, 8-byte aligned (page-aligned base); AtomicU64 has
        // the layout of u64 and the page is only ever accessed atomically.
        unsafe { &*self.ptr.add(i) }
    }

    fn get(&self, i: usize) -> u64 {
        self.at(i).load(SeqCst)
    }
}

/// A child process that is killed if the test ends early.
struct Kid(Child);

impl Kid {
    fn succeeded(&mut self) -> bool {
        self.0.wait().map(|s| s.success()).unwrap_or(false)
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn spawn(mode: &str, url: &str, args: &[(&str, String)]) -> (Kid, BufReader<ChildStdout>) {
    let mut cmd = Command::new(std::env::current_exe().expect("own path"));
    cmd.args(["--exact", "child_worker", "--nocapture", "--test-threads=1"])
        .env("LEASEHOLD_PG_KINDS_CHILD", mode)
        .env("LEASEHOLD_KINDS_URL", url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    for (k, v) in args {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn child");
    let out = BufReader::new(child.stdout.take().expect("child stdout"));
    (Kid(child), out)
}

/// The next `@@ ` line a child prints.
fn report(out: &mut BufReader<ChildStdout>) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        let n = out.read_line(&mut line).expect("read child output");
        assert!(n > 0, "child ended without reporting");
        if let Some(at) = line.find("@@ ") {
            return line[at + 3..].trim().to_owned();
        }
    }
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_default()
}

fn num(name: &str) -> u64 {
    env(name).parse().unwrap_or_else(|_| panic!("{name}"))
}

/// Busy for `us` microseconds: the holder stays inside, on the CPU, so overlaps would show.
fn spin(us: u64) {
    let end = Instant::now() + Duration::from_micros(us);
    while Instant::now() < end {
        std::hint::spin_loop();
    }
}

fn enter(shared: &Shared) {
    shared.at(ENTERS).fetch_add(1, SeqCst);
    let now = shared.at(INSIDE).fetch_add(1, SeqCst) + 1;
    shared.at(MOST).fetch_max(now, SeqCst);
}

/// Not a test of its own: the body of every child process. Without `LEASEHOLD_PG_KINDS_CHILD` it does
/// nothing.
#[test]
fn child_worker() {
    let Ok(mode) = std::env::var("LEASEHOLD_PG_KINDS_CHILD") else {
        return;
    };
    let c = client_of(&env("LEASEHOLD_KINDS_URL"));
    let key = env("KEY");
    let shared = Shared::map(Path::new(&env("SHARED")));
    match mode.as_str() {
        // CYCLES permits of a semaphore of PERMITS, each held HOLD_US
        "permit" => {
            let permits = num("PERMITS") as u32;
            for _ in 0..num("CYCLES") {
                let p = c
                    .acquire_permit(&key, permits, LONG, Duration::from_secs(60))
                    .expect("a permit within the wait");
                enter(&shared);
                spin(num("HOLD_US"));
                shared.at(INSIDE).fetch_sub(1, SeqCst);
                p.release().expect("release the permit");
                shared.at(CYCLES).fetch_add(1, SeqCst);
            }
            println!("@@ done");
        }
        // CYCLES shared or exclusive leases (WRITER=1), each checking nobody overlaps a writer
        "rw" => {
            let writer = num("WRITER") == 1;
            for _ in 0..num("CYCLES") {
                if writer {
                    let w = c
                        .acquire(&key, LONG, Duration::from_secs(60))
                        .expect("writer");
                    let others = shared.at(WRITERS).fetch_add(1, SeqCst);
                    if others != 0 || shared.get(INSIDE) != 0 {
                        shared.at(OVERLAPS).fetch_add(1, SeqCst);
                    }
                    spin(num("HOLD_US"));
                    shared.at(WRITERS).fetch_sub(1, SeqCst);
                    w.release().expect("writer release");
                } else {
                    let r = c
                        .acquire_shared(&key, LONG, Duration::from_secs(60))
                        .expect("reader");
                    enter(&shared);
                    if shared.get(WRITERS) != 0 {
                        shared.at(OVERLAPS).fetch_add(1, SeqCst);
                    }
                    spin(num("HOLD_US"));
                    shared.at(INSIDE).fetch_sub(1, SeqCst);
                    r.release().expect("reader release");
                }
                shared.at(CYCLES).fetch_add(1, SeqCst);
            }
            println!("@@ done");
        }
        // shared leases held HOLD_MS each, back to back, until the parent sets STOP
        "reader-stream" => {
            println!("@@ reading");
            while shared.get(STOP) == 0 {
                let r = c
                    .acquire_shared(&key, LONG, Duration::from_secs(20))
                    .expect("reader");
                enter(&shared);
                std::thread::sleep(Duration::from_millis(num("HOLD_MS")));
                shared.at(INSIDE).fetch_sub(1, SeqCst);
                r.release().expect("reader release");
                shared.at(CYCLES).fetch_add(1, SeqCst);
            }
            println!("@@ done");
        }
        // take a permit, report, then wait to be killed
        "hold-permit" => {
            let ttl = Duration::from_millis(num("TTL_MS"));
            let p = c
                .try_acquire_permit(&key, num("PERMITS") as u32, ttl)
                .expect("child takes a permit");
            println!("@@ {}", p.fence());
            std::thread::sleep(Duration::from_secs(60));
        }
        other => panic!("unknown child mode {other}"),
    }
}

/// PROCS processes x CYCLES cycles on a semaphore of 3: never a 4th holder, no cycle lost, and
/// the permits really are shared (3 inside at once at some point).
fn semaphore_in_processes(query: &str, procs: usize, cycles: u64) {
    let dir = temp_dir("pg-kinds-semaphore");
    let counters = dir.path().join("counters");
    let shared = Shared::map(&counters);
    let key = unique_key("sem-procs");
    let args = [
        ("KEY", key.clone()),
        ("SHARED", counters.display().to_string()),
        ("PERMITS", "3".to_owned()),
        ("CYCLES", cycles.to_string()),
        // Longer than an acquire's round trip, so that all three permits are in use at times.
        ("HOLD_US", "2000".to_owned()),
    ];
    let url = url(query);
    let started = Instant::now();
    let mut kids: Vec<_> = (0..procs).map(|_| spawn("permit", &url, &args)).collect();
    for (kid, out) in &mut kids {
        assert_eq!(report(out), "done");
        assert!(kid.succeeded());
    }
    let (most, done) = (shared.get(MOST), shared.get(CYCLES));
    eprintln!(
        "{query}: {procs} processes x {cycles} permits of 3: {:?}, at most {most} inside",
        started.elapsed()
    );
    assert!(most <= 3, "{most} holders at once on a semaphore of 3");
    assert_eq!(most, 3, "the three permits were never all in use at once");
    assert_eq!(done, procs as u64 * cycles, "cycles lost");
    assert_eq!(shared.get(INSIDE), 0);
    assert!(!client_of(&url).inspect_semaphore(&key).unwrap().held);
}

#[test]
fn advisory_eight_processes_on_a_semaphore_of_3_never_see_a_4th_holder() {
    semaphore_in_processes(ADVISORY, 8, 200);
}

#[test]
fn table_eight_processes_on_a_semaphore_of_3_never_see_a_4th_holder() {
    semaphore_in_processes(TABLE, 8, 200);
}

/// 4 reader and 2 writer processes: readers share the key, nobody is ever inside beside a
/// writer, and every cycle completes.
fn readers_and_writers(query: &str) {
    let dir = temp_dir("pg-kinds-rw");
    let counters = dir.path().join("counters");
    let shared = Shared::map(&counters);
    let key = unique_key("rw-procs");
    let common = |writer: bool| {
        vec![
            ("KEY", key.clone()),
            ("SHARED", counters.display().to_string()),
            ("WRITER", if writer { "1" } else { "0" }.to_owned()),
            ("CYCLES", if writer { "40" } else { "100" }.to_owned()),
            ("HOLD_US", "300".to_owned()),
        ]
    };
    let url = url(query);
    let mut kids: Vec<_> = (0..6)
        .map(|i| spawn("rw", &url, &common(i % 3 == 0)))
        .collect();
    for (kid, out) in &mut kids {
        assert_eq!(report(out), "done");
        assert!(kid.succeeded());
    }
    assert_eq!(
        shared.get(OVERLAPS),
        0,
        "someone was inside beside a writer"
    );
    assert_eq!(shared.get(CYCLES), 2 * 40 + 4 * 100, "cycles lost");
    assert!(
        shared.get(MOST) >= 2,
        "readers never shared the key (at most {} at once)",
        shared.get(MOST)
    );
}

#[test]
fn advisory_readers_and_writers_in_processes_never_overlap_a_writer() {
    readers_and_writers(ADVISORY);
}

#[test]
fn table_readers_and_writers_in_processes_never_overlap_a_writer() {
    readers_and_writers(TABLE);
}

/// Readers in 4 processes keep the key shared without a gap (each holds 30 ms, back to back); a
/// writer still gets in within a bounded time, because readers that come after it wait behind it.
fn writer_under_reader_stream(query: &str) {
    let dir = temp_dir("pg-kinds-stream");
    let counters = dir.path().join("counters");
    let shared = Shared::map(&counters);
    let key = unique_key("stream-procs");
    let args = [
        ("KEY", key.clone()),
        ("SHARED", counters.display().to_string()),
        ("HOLD_MS", "30".to_owned()),
    ];
    let url = url(query);
    let mut kids: Vec<_> = (0..4)
        .map(|_| spawn("reader-stream", &url, &args))
        .collect();
    for (_, out) in &mut kids {
        assert_eq!(report(out), "reading");
    }
    let c = client_of(&url);
    let start = Instant::now();
    while shared.get(MOST) < 2 && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(shared.get(MOST) >= 2, "the readers never overlapped");
    assert_eq!(
        c.try_acquire(&key, LONG).unwrap_err().kind(),
        ErrorKind::NotAcquired,
        "the readers hold the key"
    );
    let asked = Instant::now();
    let w = c
        .acquire(&key, LONG, Duration::from_secs(10))
        .expect("the writer gets in under the stream");
    let waited = asked.elapsed();
    let readers_inside = shared.get(INSIDE);
    // Entries, not completed cycles: a reader that left just before the writer got in may count
    // its cycle a moment later.
    let cycles_before = shared.get(ENTERS);
    std::thread::sleep(Duration::from_millis(50));
    let cycles_while_held = shared.get(ENTERS) - cycles_before;
    w.release().unwrap();
    shared.at(STOP).store(1, SeqCst);
    for (kid, out) in &mut kids {
        assert_eq!(report(out), "done");
        assert!(kid.succeeded());
    }
    eprintln!("{query}: writer waited {waited:?} under 4 reader processes");
    assert_eq!(readers_inside, 0, "a reader was inside with the writer");
    assert_eq!(
        cycles_while_held, 0,
        "a reader got in while the writer held"
    );
    assert!(
        waited < Duration::from_secs(3),
        "the writer waited {waited:?}"
    );
}

#[test]
fn advisory_a_writer_gets_in_under_a_continuous_stream_of_readers() {
    writer_under_reader_stream(ADVISORY);
}

#[test]
fn table_a_writer_gets_in_under_a_continuous_stream_of_readers() {
    writer_under_reader_stream(TABLE);
}

/// A SIGKILLed process's permit comes back: in table mode after its TTL (the row counts until
/// then), in advisory mode as soon as the server sees the connection close (sooner than the TTL).
fn killed_permit_holder(query: &str, table: bool) {
    let dir = temp_dir("pg-kinds-kill");
    let counters = dir.path().join("counters");
    let _shared = Shared::map(&counters);
    let key = unique_key("sem-kill");
    let url = url(query);
    let (mut kid, mut out) = spawn(
        "hold-permit",
        &url,
        &[
            ("KEY", key.clone()),
            ("SHARED", counters.display().to_string()),
            ("PERMITS", "2".to_owned()),
            ("TTL_MS", "1500".to_owned()),
        ],
    );
    let child_fence: u64 = report(&mut out).parse().unwrap();
    let taken = Instant::now();
    let c = client_of(&url);
    let mine = c.try_acquire_permit(&key, 2, LONG).unwrap();
    assert!(mine.fence() > child_fence);
    // SAFETY: a plain syscall on our own child's pid.
    unsafe { libc::kill(kid.0.id() as libc::pid_t, libc::SIGKILL) };
    let _ = kid.0.wait();
    if table {
        assert_eq!(
            c.try_acquire_permit(&key, 2, LONG).unwrap_err().kind(),
            ErrorKind::NotAcquired,
            "the dead holder's permit counts until its TTL"
        );
    }
    let back = c
        .acquire_permit(&key, 2, LONG, Duration::from_secs(5))
        .expect("the permit comes back");
    let after = taken.elapsed();
    eprintln!("{query}: a killed holder's permit (TTL 1500 ms) came back after {after:?}");
    if table {
        assert!(
            after >= Duration::from_millis(1200) && after < Duration::from_millis(2500),
            "came back after {after:?} (TTL 1500 ms)"
        );
    } else {
        assert!(
            after < Duration::from_millis(1200),
            "came back after {after:?}"
        );
    }
    assert!(back.fence() > mine.fence());
    let info = c.inspect_semaphore(&key).unwrap();
    assert_eq!(info.holders, Some(2));
    back.release().unwrap();
    mine.release().unwrap();
}

#[test]
fn advisory_a_killed_permit_holders_permit_comes_back() {
    killed_permit_holder(ADVISORY, false);
}

#[test]
fn table_a_killed_permit_holders_permit_comes_back_after_its_ttl() {
    killed_permit_holder(TABLE, true);
}

fn p50(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// try_acquire + release of each kind, one thread, uncontended: printed, not asserted.
#[test]
fn cycle_times_per_kind() {
    for query in [ADVISORY, TABLE] {
        let c = client_of(&url(query));
        let key = unique_key("cycle");
        let n = 300;
        let mut line = format!("{query}:");
        for kind in ["exclusive", "shared", "permit"] {
            let mut times = Vec::with_capacity(n);
            for i in 0..n + 30 {
                let t = Instant::now();
                let lease = match kind {
                    "exclusive" => c.try_acquire(&key, LONG),
                    "shared" => c.try_acquire_shared(&key, LONG),
                    _ => c.try_acquire_permit(&key, 3, LONG),
                }
                .unwrap();
                lease.release().unwrap();
                if i >= 30 {
                    times.push(t.elapsed());
                }
            }
            line.push_str(&format!(" {kind} p50 {:?};", p50(times)));
        }
        eprintln!("cycle (try_acquire+release) {line}");
    }
}

/// A private directory under the system temp dir, removed on drop.
fn temp_dir(label: &str) -> TempDir {
    tempfile::Builder::new()
        .prefix(&format!("leasehold-test-{label}-"))
        .tempdir()
        .expect("create a temp dir")
}
