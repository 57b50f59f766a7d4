//! Shared locks and semaphores across real OS processes, in both PostgreSQL modes, and the
//! cycle time of each kind. Workers are this test binary run again (see `child_worker`); they count
//! what they see in counters every process maps, and report on stdout.

#[path = "../../../tests/support/kinds_in_processes.rs"]
mod procs;

use leasehold_core::{Client, Config, ErrorKind};
use leasehold_postgres::PostgresBackend;
use leasehold_testkit::processes::{self, Worker};
use leasehold_testkit::{unique_key, PostgresServer};
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
    if let Some(mode) = processes::worker_mode() {
        procs::worker(&mode, &client_of(&processes::worker_url()));
    }
}

/// 8 processes x 200 cycles on a semaphore of 3, each permit held longer than an acquire's round
/// trip, so that all three permits are in use at times.
fn semaphore_in_processes(query: &str, procs: usize, cycles: u64) {
    let hold = Duration::from_micros(2000);
    procs::semaphore_in_processes(&url(query), client_of, procs, cycles, hold);
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
    procs::readers_and_writers(&url(query), 40, 100);
}

#[test]
fn advisory_readers_and_writers_in_processes_never_overlap_a_writer() {
    readers_and_writers(ADVISORY);
}

#[test]
fn table_readers_and_writers_in_processes_never_overlap_a_writer() {
    readers_and_writers(TABLE);
}

fn writer_under_reader_stream(query: &str) {
    procs::writer_under_reader_stream(&url(query), client_of);
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
