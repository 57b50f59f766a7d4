//! Numbers, printed, never asserted: acquire+release cycle time in both modes, and handoff latency
//! (holder's release → next holder's acquire) with 8 waiting threads, next to a waiter that polls every
//! 100 ms (Symfony Lock's default) as the baseline. Run with
//! `cargo test -p leasehold-postgres --release --test bench -- --ignored --nocapture`.

use leasehold_core::{Client, Config, ErrorKind};
use leasehold_postgres::PostgresBackend;
use leasehold_testkit::{unique_key, PostgresServer};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);

fn client(query: &str) -> Client {
    let url = PostgresServer::shared().url_with(query);
    let config = Config::parse(&url).expect("test URL");
    Client::new(PostgresBackend::connect(&config).expect("connect to the test PostgreSQL"))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

fn cycles(query: &str) {
    let c = client(query);
    let key = unique_key("bench-cycle");
    for _ in 0..200 {
        c.try_acquire(&key, LONG).unwrap().release().unwrap();
    }
    let n = 3000;
    let mut times = Vec::with_capacity(n);
    let start = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        c.try_acquire(&key, LONG).unwrap().release().unwrap();
        times.push(t.elapsed());
    }
    let total = start.elapsed();
    times.sort();
    println!(
        "{query}: acquire+release cycle p50 {:?} p99 {:?}, {:.0} cycles/s on one thread",
        percentile(&times, 0.5),
        percentile(&times, 0.99),
        n as f64 / total.as_secs_f64()
    );
}

/// 8 threads contend for one key for `run`; each holds it ~1 ms. `poll` = None waits natively, Some(d)
/// polls `try_acquire` every d.
fn handoff(query: &str, poll: Option<Duration>, run: Duration) {
    let c = client(&format!("{query}&pool_size=32"));
    let key = unique_key("bench-handoff");
    let last_release: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let handoffs: Arc<Mutex<Vec<Duration>>> = Arc::new(Mutex::new(Vec::new()));
    let waits: Arc<Mutex<Vec<Duration>>> = Arc::new(Mutex::new(Vec::new()));
    let deadline = Instant::now() + run;
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (c, key) = (c.clone(), key.clone());
            let (last_release, handoffs, waits) =
                (last_release.clone(), handoffs.clone(), waits.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while Instant::now() < deadline {
                    let asked = Instant::now();
                    let lease = match poll {
                        None => c.acquire(&key, LONG, Duration::from_secs(30)).unwrap(),
                        Some(every) => loop {
                            match c.try_acquire(&key, LONG) {
                                Ok(lease) => break lease,
                                Err(e) if e.kind() == ErrorKind::NotAcquired => {
                                    std::thread::sleep(every)
                                }
                                Err(e) => panic!("{e}"),
                            }
                        },
                    };
                    let got = Instant::now();
                    waits.lock().unwrap().push(got - asked);
                    if let Some(released) = last_release.lock().unwrap().take() {
                        handoffs
                            .lock()
                            .unwrap()
                            .push(got.saturating_duration_since(released));
                    }
                    std::thread::sleep(Duration::from_millis(1));
                    *last_release.lock().unwrap() = Some(Instant::now());
                    lease.release().unwrap();
                    n += 1;
                }
                n
            })
        })
        .collect();
    let per_thread: Vec<u64> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let total: u64 = per_thread.iter().sum();
    let mut h = handoffs.lock().unwrap().clone();
    h.sort();
    let mut w = waits.lock().unwrap().clone();
    w.sort();
    let label = match poll {
        None => "native wait".to_owned(),
        Some(d) => format!("polling every {d:?}"),
    };
    println!(
        "{query}, {label}, 8 threads: handoff p50 {:?} p99 {:?}; {:.0} cycles/s; wait median {:?} max {:?}; \
         per thread {per_thread:?}",
        percentile(&h, 0.5),
        percentile(&h, 0.99),
        total as f64 / run.as_secs_f64(),
        percentile(&w, 0.5),
        w.last().copied().unwrap_or_default(),
    );
}

#[test]
#[ignore = "benchmark: prints numbers, run on demand"]
fn bench_postgres() {
    for query in ["lock=advisory", "lock=table&table=bench_locks"] {
        cycles(query);
    }
    for query in ["lock=advisory", "lock=table&table=bench_locks"] {
        handoff(query, None, Duration::from_secs(5));
        handoff(
            query,
            Some(Duration::from_millis(100)),
            Duration::from_secs(5),
        );
    }
}
