//! Shared locks and semaphores across real OS processes, in both PostgreSQL modes, and the
//! cycle time of each kind. Workers are this test binary run again (see `child_worker`); they count
//! what they see in counters every process maps, and report on stdout.

use leasehold_core::{Client, Config, ErrorKind};
use leasehold_postgres::PostgresBackend;
use leasehold_testkit::processes::{
    self, num, spin, var, Counters, Worker, CYCLES_DONE, ENTERS, INSIDE, MOST, OVERLAPS, STOP,
    WRITERS,
};
use leasehold_testkit::{unique_key, PostgresServer, TempDir};
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

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

/// Not a test of its own: the body of every worker process. Outside a worker it does nothing.
#[test]
fn child_worker() {
    let Some(mode) = processes::worker_mode() else {
        return;
    };
    let c = client_of(&processes::worker_url());
    let key = var("KEY");
    match mode.as_str() {
        // CYCLES permits of a semaphore of PERMITS, each held HOLD_US
        "permit" => {
            let shared = Counters::open(var("SHARED").as_ref());
            let permits = num("PERMITS") as u32;
            for _ in 0..num("CYCLES") {
                let p = c
                    .acquire_permit(&key, permits, LONG, Duration::from_secs(60))
                    .expect("a permit within the wait");
                shared.enter();
                spin(Duration::from_micros(num("HOLD_US")));
                shared.leave();
                p.release().expect("release the permit");
                shared.at(CYCLES_DONE).fetch_add(1, SeqCst);
            }
            println!("@@ done");
        }
        // CYCLES shared or exclusive leases (WRITER=1), each checking nobody overlaps a writer
        "rw" => {
            let shared = Counters::open(var("SHARED").as_ref());
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
                    spin(Duration::from_micros(num("HOLD_US")));
                    shared.at(WRITERS).fetch_sub(1, SeqCst);
                    w.release().expect("writer release");
                } else {
                    let r = c
                        .acquire_shared(&key, LONG, Duration::from_secs(60))
                        .expect("reader");
                    shared.enter();
                    if shared.get(WRITERS) != 0 {
                        shared.at(OVERLAPS).fetch_add(1, SeqCst);
                    }
                    spin(Duration::from_micros(num("HOLD_US")));
                    shared.leave();
                    r.release().expect("reader release");
                }
                shared.at(CYCLES_DONE).fetch_add(1, SeqCst);
            }
            println!("@@ done");
        }
        // shared leases held HOLD_MS each, back to back, until the parent sets STOP
        "reader-stream" => {
            let shared = Counters::open(var("SHARED").as_ref());
            println!("@@ reading");
            while shared.get(STOP) == 0 {
                let r = c
                    .acquire_shared(&key, LONG, Duration::from_secs(20))
                    .expect("reader");
                shared.enter();
                std::thread::sleep(Duration::from_millis(num("HOLD_MS")));
                shared.leave();
                r.release().expect("reader release");
                shared.at(CYCLES_DONE).fetch_add(1, SeqCst);
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
    let dir = TempDir::new("pg-kinds-semaphore");
    let counters = dir.path().join("counters");
    let shared = Counters::create(&counters);
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
    let mut workers: Vec<_> = (0..procs)
        .map(|_| Worker::spawn("permit", &url, &args))
        .collect();
    for worker in &mut workers {
        assert_eq!(worker.report(), "done");
        worker.finish();
    }
    let (most, done) = (shared.get(MOST), shared.get(CYCLES_DONE));
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
    let dir = TempDir::new("pg-kinds-rw");
    let counters = dir.path().join("counters");
    let shared = Counters::create(&counters);
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
    let mut workers: Vec<_> = (0..6)
        .map(|i| Worker::spawn("rw", &url, &common(i % 3 == 0)))
        .collect();
    for worker in &mut workers {
        assert_eq!(worker.report(), "done");
        worker.finish();
    }
    assert_eq!(
        shared.get(OVERLAPS),
        0,
        "someone was inside beside a writer"
    );
    assert_eq!(shared.get(CYCLES_DONE), 2 * 40 + 4 * 100, "cycles lost");
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
    let dir = TempDir::new("pg-kinds-stream");
    let counters = dir.path().join("counters");
    let shared = Counters::create(&counters);
    let key = unique_key("stream-procs");
    let args = [
        ("KEY", key.clone()),
        ("SHARED", counters.display().to_string()),
        ("HOLD_MS", "30".to_owned()),
    ];
    let url = url(query);
    let mut workers: Vec<_> = (0..4)
        .map(|_| Worker::spawn("reader-stream", &url, &args))
        .collect();
    for worker in &mut workers {
        assert_eq!(worker.report(), "reading");
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
    for worker in &mut workers {
        assert_eq!(worker.report(), "done");
        worker.finish();
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
    let key = unique_key("sem-kill");
    let url = url(query);
    let mut worker = Worker::spawn(
        "hold-permit",
        &url,
        &[
            ("KEY", key.clone()),
            ("PERMITS", "2".to_owned()),
            ("TTL_MS", "1500".to_owned()),
        ],
    );
    let child_fence: u64 = worker.report().parse().unwrap();
    let taken = Instant::now();
    let c = client_of(&url);
    let mine = c.try_acquire_permit(&key, 2, LONG).unwrap();
    assert!(mine.fence() > child_fence);
    worker.kill(); // SIGKILL: it releases nothing
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
