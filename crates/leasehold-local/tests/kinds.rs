//! Shared locks and semaphores across real OS processes, and the local backend's own limits.
//! Children are this test binary run again with `LEASEHOLD_KINDS_CHILD` naming what to do (see
//! `child_worker`); they count what they see in a page of shared memory (a file mapped
//! `MAP_SHARED` by every process), and report on stdout in lines starting with `@@ `.

mod common;

use common::{temp_dir, FileUrl};
use leasehold_core::{Client, Config, ErrorKind, MAX_PERMITS};
use leasehold_local::{LocalBackend, MAX_HOLDERS};
use std::io::{BufRead, BufReader};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(30);

fn client(url: &str) -> Client {
    Client::new(LocalBackend::open(&Config::parse(url).expect("url")).expect("open"))
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
        .env("LEASEHOLD_KINDS_CHILD", mode)
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
    let now = shared.at(INSIDE).fetch_add(1, SeqCst) + 1;
    shared.at(MOST).fetch_max(now, SeqCst);
    shared.at(ENTERS).fetch_add(1, SeqCst);
}

/// Not a test of its own: the body of every child process. Without `LEASEHOLD_KINDS_CHILD` it does
/// nothing.
#[test]
fn child_worker() {
    let Ok(mode) = std::env::var("LEASEHOLD_KINDS_CHILD") else {
        return;
    };
    let c = client(&env("LEASEHOLD_KINDS_URL"));
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

/// 8 processes x 200 cycles on a semaphore of 3: never a 4th holder, no cycle lost, and the
/// permits really are shared (3 inside at once at some point).
#[test]
fn eight_processes_on_a_semaphore_of_3_never_see_a_4th_holder() {
    let dir = temp_dir("kinds-semaphore");
    let url = dir.file_url();
    let counters = dir.path().join("counters");
    let shared = Shared::map(&counters);
    let args = [
        ("KEY", "sem:procs".to_owned()),
        ("SHARED", counters.display().to_string()),
        ("PERMITS", "3".to_owned()),
        ("CYCLES", "200".to_owned()),
        ("HOLD_US", "200".to_owned()),
    ];
    let started = Instant::now();
    let mut kids: Vec<_> = (0..8).map(|_| spawn("permit", &url, &args)).collect();
    for (kid, out) in &mut kids {
        assert_eq!(report(out), "done");
        assert!(kid.succeeded());
    }
    let (most, cycles) = (shared.get(MOST), shared.get(CYCLES));
    eprintln!(
        "8 processes x 200 permits of 3: {:?}, at most {most} inside",
        started.elapsed()
    );
    assert!(most <= 3, "{most} holders at once on a semaphore of 3");
    assert_eq!(most, 3, "the three permits were never all in use at once");
    assert_eq!(cycles, 1600, "cycles lost");
    assert_eq!(shared.get(INSIDE), 0);
    let c = client(&url);
    assert!(!c.inspect_semaphore("sem:procs").unwrap().held);
}

/// 4 reader and 2 writer processes: readers share the key, nobody is ever inside beside a
/// writer, and every cycle completes.
#[test]
fn readers_and_writers_in_processes_never_overlap_a_writer() {
    let dir = temp_dir("kinds-rw");
    let url = dir.file_url();
    let counters = dir.path().join("counters");
    let shared = Shared::map(&counters);
    let common = |writer: bool| {
        vec![
            ("KEY", "rw:procs".to_owned()),
            ("SHARED", counters.display().to_string()),
            ("WRITER", if writer { "1" } else { "0" }.to_owned()),
            ("CYCLES", if writer { "60" } else { "150" }.to_owned()),
            ("HOLD_US", "300".to_owned()),
        ]
    };
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
    assert_eq!(shared.get(CYCLES), 2 * 60 + 4 * 150, "cycles lost");
    assert!(
        shared.get(MOST) >= 2,
        "readers never shared the key (at most {} at once)",
        shared.get(MOST)
    );
}

/// Readers in 4 processes keep the key shared without a gap (each holds 30 ms, back to back, so
/// with readers preferred a writer would wait for ever); a writer still gets in within a bounded
/// time, because readers that come after it wait behind it.
#[test]
fn a_writer_gets_in_under_a_continuous_stream_of_readers() {
    let dir = temp_dir("kinds-stream");
    let url = dir.file_url();
    let counters = dir.path().join("counters");
    let shared = Shared::map(&counters);
    let args = [
        ("KEY", "stream:procs".to_owned()),
        ("SHARED", counters.display().to_string()),
        ("HOLD_MS", "30".to_owned()),
    ];
    let mut kids: Vec<_> = (0..4)
        .map(|_| spawn("reader-stream", &url, &args))
        .collect();
    for (_, out) in &mut kids {
        assert_eq!(report(out), "reading");
    }
    let c = client(&url);
    // Let the stream run until readers overlap.
    let start = Instant::now();
    while shared.get(MOST) < 2 && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(shared.get(MOST) >= 2, "the readers never overlapped");
    assert_eq!(
        c.try_acquire("stream:procs", LONG).unwrap_err().kind(),
        ErrorKind::NotAcquired,
        "the readers hold the key"
    );
    let asked = Instant::now();
    let w = c
        .acquire("stream:procs", LONG, Duration::from_secs(10))
        .expect("the writer gets in under the stream");
    let waited = asked.elapsed();
    let readers_inside = shared.get(INSIDE);
    // Entries, not completed cycles: a reader counts its cycle after its release, which may come
    // after the writer got in (that reader was out before the writer, not beside it).
    let enters_before = shared.get(ENTERS);
    std::thread::sleep(Duration::from_millis(50));
    let enters_while_held = shared.get(ENTERS) - enters_before;
    w.release().unwrap();
    shared.at(STOP).store(1, SeqCst);
    for (kid, out) in &mut kids {
        assert_eq!(report(out), "done");
        assert!(kid.succeeded());
    }
    eprintln!("writer waited {waited:?} under 4 reader processes");
    assert_eq!(readers_inside, 0, "a reader was inside with the writer");
    assert_eq!(
        enters_while_held, 0,
        "a reader got in while the writer held"
    );
    // Each reader holds 30 ms and none may start after the writer queued: the writer waits for
    // the readers inside at most, plus scheduling.
    assert!(
        waited < Duration::from_secs(3),
        "the writer waited {waited:?}"
    );
}

/// A SIGKILLed process's permit still counts until its TTL runs out (the backend cannot tell a
/// dead holder from a slow one), then comes back; the other permit is untouched.
#[test]
fn a_killed_permit_holders_permit_comes_back_after_its_ttl() {
    let dir = temp_dir("kinds-kill");
    let url = dir.file_url();
    let counters = dir.path().join("counters");
    let _shared = Shared::map(&counters);
    let (mut kid, mut out) = spawn(
        "hold-permit",
        &url,
        &[
            ("KEY", "sem:kill".to_owned()),
            ("SHARED", counters.display().to_string()),
            ("PERMITS", "2".to_owned()),
            ("TTL_MS", "600".to_owned()),
        ],
    );
    let child_fence: u64 = report(&mut out).parse().unwrap();
    let taken = Instant::now();
    let c = client(&url);
    let mine = c.try_acquire_permit("sem:kill", 2, LONG).unwrap();
    assert!(mine.fence() > child_fence);
    // SAFETY: a plain syscall on our own child's pid.
    unsafe { libc::kill(kid.0.id() as libc::pid_t, libc::SIGKILL) };
    let _ = kid.0.wait();
    assert_eq!(
        c.try_acquire_permit("sem:kill", 2, LONG)
            .unwrap_err()
            .kind(),
        ErrorKind::NotAcquired,
        "the dead holder's permit counts until its TTL"
    );
    let back = c
        .acquire_permit("sem:kill", 2, LONG, Duration::from_secs(5))
        .expect("the permit comes back");
    let after = taken.elapsed();
    assert!(
        after >= Duration::from_millis(450) && after < Duration::from_millis(2500),
        "came back after {after:?} (TTL 600 ms)"
    );
    assert!(back.fence() > mine.fence());
    let info = c.inspect_semaphore("sem:kill").unwrap();
    assert_eq!(info.holders, Some(2));
    back.release().unwrap();
    mine.release().unwrap();
}

/// `inspect` and `inspect_semaphore` count holders; the namespaces stay apart.
#[test]
fn inspect_counts_holders_of_each_kind() {
    let dir = temp_dir("kinds-inspect");
    let c = client(&dir.file_url());
    let free = c.inspect("ins").unwrap();
    assert!(!free.held && free.holders == Some(0));
    let r1 = c.try_acquire_shared("ins", LONG).unwrap();
    let r2 = c.try_acquire_shared("ins", LONG).unwrap();
    let info = c.inspect("ins").unwrap();
    assert!(info.held);
    assert_eq!((info.holders, info.shared), (Some(2), Some(true)));
    assert_eq!(info.fence, Some(r2.fence()));
    assert!(
        !c.inspect_semaphore("ins").unwrap().held,
        "another namespace"
    );
    r1.release().unwrap();
    r2.release().unwrap();
    let w = c.try_acquire("ins", LONG).unwrap();
    let info = c.inspect("ins").unwrap();
    assert_eq!((info.holders, info.shared), (Some(1), Some(false)));
    let p: Vec<_> = (0..2)
        .map(|_| c.try_acquire_permit("ins", 5, LONG).unwrap())
        .collect();
    let info = c.inspect_semaphore("ins").unwrap();
    assert!(info.held);
    assert_eq!((info.holders, info.shared), (Some(2), Some(false)));
    assert!(info.remaining.unwrap() > Duration::from_secs(20));
    w.release().unwrap();
    for p in p {
        p.release().unwrap();
    }
    assert_eq!(c.inspect_semaphore("ins").unwrap().holders, Some(0));
}

/// Restore picks up a shared lease as shared, with its own fence; force-release frees every
/// reader.
#[test]
fn restore_and_force_release_of_shared_leases() {
    let dir = temp_dir("kinds-restore");
    let (a, b) = (client(&dir.file_url()), client(&dir.file_url()));
    let r1 = a.try_acquire_shared("rs", LONG).unwrap();
    let r2 = a.try_acquire_shared("rs", LONG).unwrap();
    let restored = b.restore("rs", r1.token().as_str()).unwrap();
    assert_eq!(restored.kind(), leasehold_core::LeaseKind::Shared);
    assert_eq!(
        restored.fence(),
        r1.fence(),
        "its own fence, not the key's last"
    );
    assert!(restored.fence() < r2.fence());
    restored.release().unwrap();
    assert_eq!(r1.release().unwrap_err().kind(), ErrorKind::Lost);
    let r3 = a.try_acquire_shared("rs", LONG).unwrap();
    let r3_fence = r3.fence();
    assert!(b.force_release("rs").unwrap());
    assert_eq!(b.inspect("rs").unwrap().holders, Some(0));
    assert_eq!(r2.release().unwrap_err().kind(), ErrorKind::Lost);
    assert_eq!(r3.release().unwrap_err().kind(), ErrorKind::Lost);
    let w = b.try_acquire("rs", LONG).unwrap();
    assert!(w.fence() > r3_fence, "fences keep rising");
    w.release().unwrap();
    // A permit is not restorable here: its token names no lock.
    let p = a.try_acquire_permit("rs-sem", 2, LONG).unwrap();
    assert_eq!(
        b.restore("rs-sem", p.token().as_str()).unwrap_err().kind(),
        ErrorKind::Lost
    );
    p.release().unwrap();
}

/// A record keeps at most MAX_HOLDERS leases: a semaphore of more permits (up to the API's
/// 65535) works up to that many holders, and the next request is refused with an error naming the
/// limit, never granted beyond what the record can keep.
#[test]
fn a_key_keeps_at_most_max_holders_leases() {
    let dir = temp_dir("kinds-limit");
    let c = client(&dir.file_url());
    let mut held: Vec<_> = (0..MAX_HOLDERS)
        .map(|_| c.try_acquire_permit("big", MAX_PERMITS, LONG).unwrap())
        .collect();
    for err in [
        c.try_acquire_permit("big", MAX_PERMITS, LONG).unwrap_err(),
        c.acquire_permit("big", MAX_PERMITS, LONG, Duration::from_millis(50))
            .unwrap_err(),
    ] {
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
        assert!(err.to_string().contains("at most 64"), "{err}");
    }
    held.pop().unwrap().release().unwrap();
    held.push(c.try_acquire_permit("big", MAX_PERMITS, LONG).unwrap());
    // A semaphore of 64 (its own key: one size per semaphore) is simply full.
    held.extend((0..MAX_HOLDERS).map(|_| {
        c.try_acquire_permit("full", MAX_HOLDERS as u32, LONG)
            .unwrap()
    }));
    assert_eq!(
        c.try_acquire_permit("full", MAX_HOLDERS as u32, LONG)
            .unwrap_err()
            .kind(),
        ErrorKind::NotAcquired,
        "a semaphore of 64 is simply full"
    );
    let readers: Vec<_> = (0..MAX_HOLDERS)
        .map(|_| c.try_acquire_shared("many", LONG).unwrap())
        .collect();
    let err = c.try_acquire_shared("many", LONG).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(err.to_string().contains("at most 64"), "{err}");
    for l in held.into_iter().chain(readers) {
        l.release().unwrap();
    }
}

/// Promote and demote flip the holder's one entry in the record: inspect and restore see the new
/// kind (and the promote's new fence), a release of either kind frees the key, and a release by a
/// handle that missed the flip (an outcome the caller never learnt) still leaves no entry behind.
#[test]
fn promote_and_demote_rewrite_the_one_entry() {
    use leasehold_core::{Key, LeaseKind, LockBackend, Ttl};
    let dir = temp_dir("kinds-promote");
    let (a, b) = (client(&dir.file_url()), client(&dir.file_url()));
    let mut r = a.try_acquire_shared("pd", LONG).unwrap();
    let shared_fence = r.fence();
    r.promote(Duration::ZERO).unwrap();
    let info = b.inspect("pd").unwrap();
    assert_eq!((info.holders, info.shared), (Some(1), Some(false)));
    assert_eq!(info.fence, Some(r.fence()));
    let restored = b.restore("pd", r.token().as_str()).unwrap();
    assert_eq!(restored.kind(), LeaseKind::Exclusive);
    assert_eq!(restored.fence(), r.fence());
    assert!(r.fence() > shared_fence);
    restored.forget();
    r.demote().unwrap();
    let info = b.inspect("pd").unwrap();
    assert_eq!((info.holders, info.shared), (Some(1), Some(true)));
    let reader = b.try_acquire_shared("pd", LONG).unwrap();
    assert_eq!(b.inspect("pd").unwrap().holders, Some(2));
    r.release().unwrap();
    reader.release().unwrap();
    assert_eq!(b.inspect("pd").unwrap().holders, Some(0));
    b.try_acquire("pd", LONG).unwrap().release().unwrap();

    // At the backend: a second handle of the same token still says shared after the promote.
    let backend = LocalBackend::open(&Config::parse(&dir.file_url()).unwrap()).unwrap();
    let (key, ttl) = (Key::new("pd-raw").unwrap(), Ttl::new(LONG).unwrap());
    let mut promoted = backend
        .try_acquire_as(&key, LeaseKind::Shared, ttl)
        .unwrap();
    let mut stale = backend.restore(&key, promoted.token()).unwrap();
    backend.try_promote(&mut promoted, ttl).unwrap();
    assert_eq!(promoted.kind(), LeaseKind::Exclusive);
    assert_eq!(
        backend.extend(&mut stale, ttl).unwrap_err().kind(),
        ErrorKind::InvalidArgument,
        "no renewal under the wrong kind"
    );
    assert_eq!(
        backend.demote(&mut stale, ttl).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    backend.release(&mut stale).unwrap();
    assert_eq!(backend.inspect(&key).unwrap().holders, Some(0));
    assert_eq!(
        backend.release(&mut promoted).unwrap_err().kind(),
        ErrorKind::Lost
    );
    assert_eq!(
        backend.demote(&mut promoted, ttl).unwrap_err().kind(),
        ErrorKind::Lost
    );
}
