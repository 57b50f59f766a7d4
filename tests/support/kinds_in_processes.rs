//! Shared locks and semaphores across real OS processes: the same workers and scenarios for every
//! backend that runs them. A backend's `tests/kinds.rs` includes this file by path (the test kit
//! does not depend on core, and these need a `Client`), runs [`worker`] from its `child_worker`
//! test, and calls the scenarios with its URL and a way to make a client.
//!
//! Workers count what they see in [`Counters`] that every process maps, so a 4th permit holder or
//! a reader beside a writer is seen whichever process it is in.

#![allow(dead_code)]

use leasehold_core::{Client, ErrorKind};
use leasehold_testkit::processes::{
    num, spin, var, Counters, Worker, CYCLES_DONE, ENTERS, INSIDE, MOST, OVERLAPS, STOP, WRITERS,
};
use leasehold_testkit::{unique_key, TempDir};
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(30);

/// The body of a worker process in `mode`, on `c`, with its arguments in the environment.
pub fn worker(mode: &str, c: &Client) {
    let key = var("KEY");
    match mode {
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

/// Every worker reports `report`, then exits successfully.
fn all_report(workers: &mut [Worker], report: &str) {
    for worker in workers {
        assert_eq!(worker.report(), report);
        worker.finish();
    }
}

/// `procs` processes × `cycles` permits of a semaphore of 3, each held `hold`: never a 4th
/// holder, no cycle lost, and the permits really are shared (3 inside at once at some point).
pub fn semaphore_in_processes(
    url: &str,
    client: fn(&str) -> Client,
    procs: usize,
    cycles: u64,
    hold: Duration,
) {
    let dir = TempDir::new("kinds-semaphore");
    let counters = dir.path().join("counters");
    let shared = Counters::create(&counters);
    let key = unique_key("sem-procs");
    let args = [
        ("KEY", key.clone()),
        ("SHARED", counters.display().to_string()),
        ("PERMITS", "3".to_owned()),
        ("CYCLES", cycles.to_string()),
        ("HOLD_US", hold.as_micros().to_string()),
    ];
    let started = Instant::now();
    let mut workers: Vec<_> = (0..procs)
        .map(|_| Worker::spawn("permit", url, &args))
        .collect();
    all_report(&mut workers, "done");
    let (most, done) = (shared.get(MOST), shared.get(CYCLES_DONE));
    eprintln!(
        "{url}: {procs} processes x {cycles} permits of 3: {:?}, at most {most} inside",
        started.elapsed()
    );
    assert!(most <= 3, "{most} holders at once on a semaphore of 3");
    assert_eq!(most, 3, "the three permits were never all in use at once");
    assert_eq!(done, procs as u64 * cycles, "cycles lost");
    assert_eq!(shared.get(INSIDE), 0);
    assert!(!client(url).inspect_semaphore(&key).unwrap().held);
}

/// 4 reader and 2 writer processes (`writer_cycles` and `reader_cycles` each): readers share the
/// key, nobody is ever inside beside a writer, and every cycle completes.
pub fn readers_and_writers(url: &str, writer_cycles: u64, reader_cycles: u64) {
    let dir = TempDir::new("kinds-rw");
    let counters = dir.path().join("counters");
    let shared = Counters::create(&counters);
    let key = unique_key("rw-procs");
    let common = |writer: bool| {
        let cycles = if writer { writer_cycles } else { reader_cycles };
        vec![
            ("KEY", key.clone()),
            ("SHARED", counters.display().to_string()),
            ("WRITER", if writer { "1" } else { "0" }.to_owned()),
            ("CYCLES", cycles.to_string()),
            ("HOLD_US", "300".to_owned()),
        ]
    };
    let mut workers: Vec<_> = (0..6)
        .map(|i| Worker::spawn("rw", url, &common(i % 3 == 0)))
        .collect();
    all_report(&mut workers, "done");
    assert_eq!(
        shared.get(OVERLAPS),
        0,
        "someone was inside beside a writer"
    );
    assert_eq!(
        shared.get(CYCLES_DONE),
        2 * writer_cycles + 4 * reader_cycles,
        "cycles lost"
    );
    assert!(
        shared.get(MOST) >= 2,
        "readers never shared the key (at most {} at once)",
        shared.get(MOST)
    );
}

/// Readers in 4 processes keep the key shared without a gap (each holds 30 ms, back to back, so
/// with readers preferred a writer would wait for ever); a writer still gets in within a bounded
/// time, because readers that come after it wait behind it.
pub fn writer_under_reader_stream(url: &str, client: fn(&str) -> Client) {
    let dir = TempDir::new("kinds-stream");
    let counters = dir.path().join("counters");
    let shared = Counters::create(&counters);
    let key = unique_key("stream-procs");
    let args = [
        ("KEY", key.clone()),
        ("SHARED", counters.display().to_string()),
        ("HOLD_MS", "30".to_owned()),
    ];
    let mut workers: Vec<_> = (0..4)
        .map(|_| Worker::spawn("reader-stream", url, &args))
        .collect();
    for worker in &mut workers {
        assert_eq!(worker.report(), "reading");
    }
    let c = client(url);
    // Let the stream run until readers overlap.
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
    // Entries, not completed cycles: a reader counts its cycle after its release, which may come
    // after the writer got in (that reader was out before the writer, not beside it).
    let enters_before = shared.get(ENTERS);
    std::thread::sleep(Duration::from_millis(50));
    let enters_while_held = shared.get(ENTERS) - enters_before;
    w.release().unwrap();
    shared.at(STOP).store(1, SeqCst);
    all_report(&mut workers, "done");
    eprintln!("{url}: writer waited {waited:?} under 4 reader processes");
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
