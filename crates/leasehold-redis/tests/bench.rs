//! Numbers, not assertions: run with `cargo test -p leasehold-redis --release --test bench --
//! --ignored --nocapture`. Prints the acquire+release cycle time on loopback, and the handoff
//! latency (holder's release → acquire by a thread that was already waiting) with 8 contending
//! threads, for native waiting and for two polling baselines: core's capped backoff (1 → 32 ms) and
//! a fixed 100 ms poll (the Symfony Lock default).

mod common;

use leasehold_core::interrupt::Watch;
use leasehold_core::wait;
use leasehold_core::{Client, Error, Key, LeaseKind, LockBackend, RawLease, Request, Ttl};
use leasehold_testkit::{unique_key, RedisServer};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

#[derive(Clone, Copy, Debug)]
enum Waiting {
    Native,
    CoreBackoff,
    Fixed100ms,
}

fn acquire(backend: &dyn LockBackend, key: &Key, ttl: Ttl, how: Waiting) -> RawLease {
    let once = Request::from_parts(key.clone(), LeaseKind::Exclusive, ttl);
    let waiting = once.clone().waiting(Duration::from_secs(60)).unwrap();
    let result = match how {
        Waiting::Native => wait::acquire_request(backend, &waiting, &Watch::none()),
        Waiting::CoreBackoff => wait::poll_acquire(backend, &waiting),
        Waiting::Fixed100ms => loop {
            match backend.try_acquire(&once) {
                Err(Error::NotAcquired(_)) => std::thread::sleep(Duration::from_millis(100)),
                other => break other,
            }
        },
    };
    result.expect("acquire")
}

fn contention(client: &Client, how: Waiting, threads: usize, run_for: Duration) {
    let backend = client.backend().clone();
    let key = Key::new(unique_key("bench-handoff")).unwrap();
    let ttl = Ttl::new(Duration::from_secs(30)).unwrap();
    let start = Instant::now();
    // (nanoseconds since start of the last release, releasing thread)
    let last_release = Arc::new(Mutex::new((0u64, usize::MAX)));
    let stop = Arc::new(AtomicBool::new(false));
    let cycles = Arc::new(AtomicU64::new(0));
    let handoffs = Arc::new(Mutex::new(Vec::new()));
    let waits = Arc::new(Mutex::new(Vec::new()));
    let handles: Vec<_> = (0..threads)
        .map(|me| {
            let (backend, key, last_release, stop, cycles, handoffs, waits) = (
                backend.clone(),
                key.clone(),
                last_release.clone(),
                stop.clone(),
                cycles.clone(),
                handoffs.clone(),
                waits.clone(),
            );
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let asked = Instant::now();
                    let asked_ns = start.elapsed().as_nanos() as u64;
                    let mut lease = acquire(&*backend, &key, ttl, how);
                    let now = start.elapsed().as_nanos() as u64;
                    waits.lock().unwrap().push(asked.elapsed());
                    let (released_at, by) = *last_release.lock().unwrap();
                    // A handoff: this thread was already waiting when the previous holder let go.
                    if by != me && by != usize::MAX && asked_ns < released_at {
                        handoffs
                            .lock()
                            .unwrap()
                            .push(Duration::from_nanos(now.saturating_sub(released_at)));
                    }
                    std::thread::sleep(Duration::from_micros(200)); // the critical section
                    *last_release.lock().unwrap() = (start.elapsed().as_nanos() as u64, me);
                    backend.release(&mut lease).expect("release");
                    cycles.fetch_add(1, Ordering::Relaxed);
                    // Think time, so the releaser does not always win the race for its own key.
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
        })
        .collect();
    std::thread::sleep(run_for);
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().unwrap();
    }
    let elapsed = start.elapsed();
    let mut handoffs = handoffs.lock().unwrap().clone();
    handoffs.sort();
    let mut waits = waits.lock().unwrap().clone();
    waits.sort();
    let n = cycles.load(Ordering::Relaxed);
    println!(
        "{how:?}: {threads} threads, {n} cycles in {elapsed:.2?} = {:.0} cycles/s; handoff p50 {:?} \
         p99 {:?} (n={}); wait p50 {:?} max {:?}",
        n as f64 / elapsed.as_secs_f64(),
        percentile(&handoffs, 0.5),
        percentile(&handoffs, 0.99),
        handoffs.len(),
        percentile(&waits, 0.5),
        waits.last().copied().unwrap_or_default(),
    );
}

#[test]
#[ignore = "benchmark: prints numbers"]
fn report_cycle_time_and_handoff_latency() {
    let server = RedisServer::start();
    let client = common::client(&server.url());

    let key = unique_key("bench-cycle");
    for _ in 0..200 {
        client
            .try_acquire(&key, Duration::from_secs(30))
            .unwrap()
            .release()
            .unwrap();
    }
    let n = 5000;
    let mut cycle = Vec::with_capacity(n);
    let total = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        let lease = client.try_acquire(&key, Duration::from_secs(30)).unwrap();
        lease.release().unwrap();
        cycle.push(t.elapsed());
    }
    let total = total.elapsed();
    cycle.sort();
    println!(
        "acquire+release cycle, 1 thread, loopback: {n} cycles in {total:.2?} = {:.0}/s; p50 {:?} \
         p99 {:?}",
        n as f64 / total.as_secs_f64(),
        percentile(&cycle, 0.5),
        percentile(&cycle, 0.99)
    );

    for how in [Waiting::Native, Waiting::CoreBackoff, Waiting::Fixed100ms] {
        contention(&client, how, 8, Duration::from_secs(4));
    }
}
