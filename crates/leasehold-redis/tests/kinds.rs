//! Shared locks and semaphores across real OS processes, on one Redis server and on
//! Redlock over 3: workers are this test binary run again (see `child_worker`); they count who is
//! inside in counters every process maps, so a 4th permit holder or a writer beside anyone is seen
//! whichever process it is in.

mod common;

use leasehold_core::{Client, Config, ErrorKind};
use leasehold_redis::RedlockBackend;
use leasehold_testkit::processes::{
    self, num, var, Counters, Worker, CYCLES_DONE, MOST, OVERLAPS, READERS, WRITERS,
};
use leasehold_testkit::{unique_key, RedisServer, TempDir};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(30);

fn client(url: &str) -> Client {
    let config = Config::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
    if url.starts_with("redlock://") {
        Client::new(RedlockBackend::connect(&config).expect("connect"))
    } else {
        common::client(url)
    }
}

/// Not a test of its own: the body of every worker process.
#[test]
fn child_worker() {
    let Some(mode) = processes::worker_mode() else {
        return;
    };
    let c = client(&processes::worker_url());
    let key = var("KEY");
    match mode.as_str() {
        "permits" => {
            let shared = Counters::open(var("COUNTERS").as_ref());
            let permits = num("PERMITS") as u32;
            for _ in 0..num("CYCLES") {
                let p = c
                    .acquire_permit(&key, permits, LONG, Duration::from_secs(60))
                    .expect("a permit");
                shared.enter();
                std::thread::sleep(Duration::from_micros(200));
                shared.leave();
                p.release().expect("release");
                shared.at(CYCLES_DONE).fetch_add(1, Ordering::SeqCst);
            }
            println!("@@ done");
        }
        "reader" | "writer" => {
            let shared = Counters::open(var("COUNTERS").as_ref());
            for _ in 0..num("CYCLES") {
                let wait = Duration::from_secs(60);
                if mode == "reader" {
                    let r = c.acquire_shared(&key, LONG, wait).expect("a share");
                    shared.at(READERS).fetch_add(1, Ordering::SeqCst);
                    if shared.at(WRITERS).load(Ordering::SeqCst) != 0 {
                        shared.at(OVERLAPS).fetch_add(1, Ordering::SeqCst);
                    }
                    std::thread::sleep(Duration::from_micros(300));
                    shared.at(READERS).fetch_sub(1, Ordering::SeqCst);
                    r.release().expect("release");
                } else {
                    let w = c.acquire(&key, LONG, wait).expect("the key");
                    let writers = shared.at(WRITERS).fetch_add(1, Ordering::SeqCst) + 1;
                    if writers != 1 || shared.at(READERS).load(Ordering::SeqCst) != 0 {
                        shared.at(OVERLAPS).fetch_add(1, Ordering::SeqCst);
                    }
                    std::thread::sleep(Duration::from_micros(300));
                    shared.at(WRITERS).fetch_sub(1, Ordering::SeqCst);
                    w.release().expect("release");
                }
                shared.at(CYCLES_DONE).fetch_add(1, Ordering::SeqCst);
            }
            println!("@@ done");
        }
        // Readers one after another, overlapping, until told to stop (by being killed).
        "stream" => {
            println!("@@ reading");
            loop {
                let r = c.acquire_shared(&key, LONG, LONG).expect("a share");
                std::thread::sleep(Duration::from_millis(20));
                r.release().expect("release");
            }
        }
        "hold-permit" => {
            let ttl = Duration::from_millis(num("TTL_MS"));
            let p = c.try_acquire_permit(&key, 1, ttl).expect("the permit");
            println!("@@ {}", p.fence());
            std::thread::sleep(Duration::from_secs(60));
        }
        other => panic!("unknown child mode {other}"),
    }
}

fn redlock_url(nodes: &[RedisServer]) -> String {
    let hosts: Vec<String> = nodes.iter().map(RedisServer::addr).collect();
    format!("redlock://{}", hosts.join(","))
}

fn permits_never_exceeded(url: &str, name: &str, processes: usize, cycles: u64) {
    let dir = TempDir::new("kinds-permits");
    let path = dir.path().join("counters");
    let shared = Counters::create(&path);
    let key = unique_key("procs-permits");
    let start = Instant::now();
    let workers: Vec<_> = (0..processes)
        .map(|_| {
            Worker::spawn(
                "permits",
                url,
                &[
                    ("KEY", key.clone()),
                    ("COUNTERS", path.display().to_string()),
                    ("PERMITS", "3".into()),
                    ("CYCLES", cycles.to_string()),
                ],
            )
        })
        .collect();
    for mut worker in workers {
        assert_eq!(worker.report(), "done");
        worker.finish();
    }
    let most = shared.get(MOST);
    let done = shared.get(CYCLES_DONE);
    eprintln!(
        "{name}: {processes} processes x {cycles} cycles on 3 permits in {:?}, at most {most} inside",
        start.elapsed()
    );
    assert!(most <= 3, "{name}: {most} holders of a semaphore of 3");
    assert_eq!(most, 3, "{name}: the permits were contended");
    assert_eq!(done, processes as u64 * cycles, "{name}: a cycle was lost");
}

/// 8 processes × 200 cycles on a semaphore of 3 permits never see a 4th holder and lose
/// no cycle.
#[test]
fn eight_processes_share_three_permits() {
    let server = RedisServer::start();
    permits_never_exceeded(&server.url(), "redis", 8, 200);
}

/// The same over Redlock(3) (its permit waits poll).
#[test]
fn eight_processes_share_three_permits_on_redlock() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    permits_never_exceeded(&redlock_url(&nodes), "redlock(3)", 8, 200);
}

fn readers_and_writers(url: &str, name: &str) {
    let dir = TempDir::new("kinds-rw");
    let path = dir.path().join("counters");
    let shared = Counters::create(&path);
    let key = unique_key("procs-rw");
    let cycles = 100u64;
    let workers: Vec<_> = ["reader", "reader", "reader", "reader", "writer", "writer"]
        .iter()
        .map(|mode| {
            Worker::spawn(
                mode,
                url,
                &[
                    ("KEY", key.clone()),
                    ("COUNTERS", path.display().to_string()),
                    ("CYCLES", cycles.to_string()),
                ],
            )
        })
        .collect();
    for mut worker in workers {
        assert_eq!(worker.report(), "done");
        worker.finish();
    }
    assert_eq!(
        shared.get(OVERLAPS),
        0,
        "{name}: a writer overlapped someone"
    );
    assert_eq!(shared.get(CYCLES_DONE), 6 * cycles);
}

/// Readers and writers on one shared lock never overlap a writer with anyone.
#[test]
fn readers_and_writers_never_overlap_a_writer() {
    let server = RedisServer::start();
    readers_and_writers(&server.url(), "redis");
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    readers_and_writers(&redlock_url(&nodes), "redlock(3)");
}

fn writer_beats_a_stream_of_readers(url: &str, name: &str) {
    let key = unique_key("procs-stream");
    let mut workers: Vec<_> = (0..4)
        .map(|_| Worker::spawn("stream", url, &[("KEY", key.clone())]))
        .collect();
    for worker in &mut workers {
        assert_eq!(worker.report(), "reading");
    }
    // Let the readers overlap so that the key is never free of them.
    std::thread::sleep(Duration::from_millis(300));
    let c = client(url);
    let info = c.inspect(&key).unwrap();
    assert!(info.held, "{name}: readers hold it: {info:?}");
    let start = Instant::now();
    let w = c
        .acquire(&key, LONG, Duration::from_secs(10))
        .expect("the writer gets in");
    let took = start.elapsed();
    w.release().unwrap();
    eprintln!("{name}: a writer got in past 4 streaming reader processes in {took:?}");
    // Without writer preference the readers would keep it past the 10 s wait; 5 s is slack for a
    // loaded machine.
    assert!(
        took < Duration::from_secs(5),
        "{name}: the writer waited {took:?}"
    );
    for worker in &mut workers {
        worker.kill();
    }
}

/// An exclusive waiter gets in within a bounded time under a continuous stream of
/// readers (writer preference).
#[test]
fn a_writer_gets_past_streaming_readers() {
    let server = RedisServer::start();
    writer_beats_a_stream_of_readers(&server.url(), "redis");
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    writer_beats_a_stream_of_readers(&redlock_url(&nodes), "redlock(3)");
}

fn killed_holders_permit_comes_back(url: &str, name: &str) {
    let key = unique_key("procs-killed");
    let ttl = Duration::from_millis(600);
    let mut worker = Worker::spawn(
        "hold-permit",
        url,
        &[
            ("KEY", key.clone()),
            ("TTL_MS", ttl.as_millis().to_string()),
        ],
    );
    let fence: u64 = worker.report().parse().unwrap();
    worker.kill(); // SIGKILL: it releases nothing
    let killed = Instant::now();
    let c = client(url);
    assert_eq!(
        c.try_acquire_permit(&key, 1, LONG)
            .map(|_| ())
            .unwrap_err()
            .kind(),
        ErrorKind::NotAcquired,
        "{name}: the dead holder's permit holds until its TTL"
    );
    let p = c
        .acquire_permit(&key, 1, LONG, Duration::from_secs(5))
        .expect("the permit comes back");
    let after = killed.elapsed();
    eprintln!("{name}: a SIGKILLed holder's permit (TTL {ttl:?}) came back after {after:?}");
    assert!(p.fence() > fence);
    // Back at its TTL, well inside the 5 s wait; the slack is for a loaded machine.
    assert!(
        after < ttl + Duration::from_millis(1500),
        "{name}: {after:?}"
    );
    p.release().unwrap();
}

/// A SIGKILLed holder's permit comes back after its TTL.
#[test]
fn a_killed_holders_permit_comes_back() {
    let server = RedisServer::start();
    killed_holders_permit_comes_back(&server.url(), "redis");
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    killed_holders_permit_comes_back(&redlock_url(&nodes), "redlock(3)");
}

fn p50(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

/// What each kind costs: try_acquire + release of each kind, uncontended, one client,
/// µs p50. Printed, never asserted: a time measured in a test fails on a loaded machine (a permit
/// cycle took 10× a lock's under two busy loops); the round trips each kind costs are asserted in
/// `one_round_trip_each_and_bounded_state`.
fn cycle_times(url: &str, name: &str) {
    let c = client(url);
    let cycles = 1000;
    let mut lines = Vec::new();
    for kind in ["exclusive", "shared", "permit"] {
        let key = unique_key("bench-kinds");
        let mut times = Vec::with_capacity(cycles);
        for i in 0..cycles + 50 {
            let start = Instant::now();
            let lease = match kind {
                "exclusive" => c.try_acquire(&key, LONG),
                "shared" => c.try_acquire_shared(&key, LONG),
                _ => c.try_acquire_permit(&key, 3, LONG),
            }
            .expect("uncontended");
            lease.release().expect("release");
            if i >= 50 {
                times.push(start.elapsed());
            }
        }
        lines.push(format!("{kind} {} µs", p50(times).as_micros()));
    }
    eprintln!("{name}: try_acquire+release p50: {}", lines.join(", "));
}

#[test]
fn cycle_time_per_kind() {
    let server = RedisServer::start();
    cycle_times(&server.url(), "redis");
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    cycle_times(&redlock_url(&nodes), "redlock(3)");
}

/// When the longest share leaves, the lock key's expiry shrinks to the longest share left and
/// the queue's head is woken: a writer behind a crashed short reader gets in at that reader's
/// expiry, not at the released reader's, nor a heartbeat later.
#[test]
fn a_writer_gets_in_when_the_last_live_share_expires() {
    let server = RedisServer::start();
    let url = server.url();
    let a = common::client(&url);
    let key = unique_key("shares-shrink");
    let long = a.try_acquire_shared(&key, LONG).unwrap();
    let short = a
        .try_acquire_shared(&key, Duration::from_millis(600))
        .unwrap();
    let short_taken = Instant::now();
    let writer = {
        let (url, key) = (url.clone(), key.clone());
        std::thread::spawn(move || {
            let c = common::client_with_heartbeat(&url, Duration::from_secs(5));
            let lease = c.acquire(&key, LONG, Duration::from_secs(10)).unwrap();
            (Instant::now(), lease)
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    long.release().unwrap();
    short.forget(); // a reader that crashed: it only expires
    let (got, lease) = writer.join().unwrap();
    let at = got.saturating_duration_since(short_taken);
    eprintln!("the writer got in {at:?} after the short share (TTL 600 ms) was taken");
    // At the short share's expiry, well before the writer's 5 s heartbeat or the long share's 30 s.
    assert!(
        at >= Duration::from_millis(550) && at < Duration::from_millis(2500),
        "{at:?}"
    );
    lease.release().unwrap();
}

/// One script call per operation on the uncontended path, and nothing left behind but the
/// server's fence high-water once the last lease is gone.
#[test]
fn one_round_trip_each_and_bounded_state() {
    let server = RedisServer::start();
    let c = common::client(&server.url());
    let key = unique_key("kinds-trips");
    let before = common::calls(&server, "evalsha");
    for _ in 0..10 {
        c.try_acquire_shared(&key, LONG).unwrap().release().unwrap();
        let mut p = c.try_acquire_permit(&key, 2, LONG).unwrap();
        p.extend(LONG).unwrap();
        p.release().unwrap();
    }
    assert_eq!(common::calls(&server, "evalsha") - before, 50);
    let r = c.try_acquire_shared(&key, LONG).unwrap();
    let p = c.try_acquire_permit(&key, 2, LONG).unwrap();
    r.release().unwrap();
    p.release().unwrap();
    assert_eq!(
        common::dbsize(&server),
        1,
        "only the server's fence high-water remains"
    );
}
