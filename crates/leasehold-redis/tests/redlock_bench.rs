//! Numbers, not assertions: run with `cargo test -p leasehold-redis --release --test redlock_bench
//! -- --ignored --nocapture`. Prints, in one run, the acquire+release cycle time on one Redis node,
//! on Redlock(3) and on Redlock(5) (all on loopback), with the ratio to the single node (the goal is
//! at most 1.5×), and what the two ways of fanning out to N nodes cost by themselves (a scoped
//! thread per node per call, against handing jobs to parked worker threads, which Redlock uses).

use leasehold_core::{Client, Config};
use leasehold_redis::{RedisBackend, RedlockBackend};
use leasehold_testkit::{unique_key, RedisServer};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const WARMUP: usize = 500;
const CYCLES: usize = 5000;

struct Figures {
    mean: Duration,
    p50: Duration,
    p99: Duration,
}

fn cycles(client: &Client, threads: usize) -> Figures {
    let per_thread: Vec<Vec<Duration>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let key = unique_key("bench-redlock");
                    let ttl = Duration::from_secs(10);
                    for _ in 0..WARMUP {
                        client.try_acquire(&key, ttl).unwrap().release().unwrap();
                    }
                    (0..CYCLES)
                        .map(|_| {
                            let t = Instant::now();
                            client.try_acquire(&key, ttl).unwrap().release().unwrap();
                            t.elapsed()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut all: Vec<Duration> = per_thread.into_iter().flatten().collect();
    all.sort_unstable();
    let total: Duration = all.iter().sum();
    let at = |q: f64| all[((all.len() - 1) as f64 * q).round() as usize];
    Figures {
        mean: total / all.len() as u32,
        p50: at(0.5),
        p99: at(0.99),
    }
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn redlock(servers: &[RedisServer]) -> Client {
    let hosts: Vec<String> = servers.iter().map(RedisServer::addr).collect();
    let config = Config::parse(&format!("redlock://{}", hosts.join(","))).unwrap();
    Client::new(RedlockBackend::connect(&config).unwrap())
}

#[test]
#[ignore = "benchmark: run with --release -- --ignored --nocapture"]
fn redlock_versus_single_node() {
    let servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let single =
        Client::new(RedisBackend::connect(&Config::parse(&servers[0].url()).unwrap()).unwrap());
    let three = redlock(&servers[..3]);
    let five = redlock(&servers);
    for threads in [1, 4] {
        eprintln!(
            "acquire+release, {threads} thread(s) on distinct keys, {CYCLES} cycles each (after {WARMUP} warm-up):"
        );
        let base = cycles(&single, threads);
        eprintln!(
            "  redis (1 node)  mean {}  p50 {}  p99 {}",
            us(base.mean),
            us(base.p50),
            us(base.p99)
        );
        for (name, client) in [("redlock(3)     ", &three), ("redlock(5)     ", &five)] {
            let f = cycles(client, threads);
            eprintln!(
                "  {name} mean {}  p50 {}  p99 {}  = {:.2}× the single node (mean), {:.2}× (p50)",
                us(f.mean),
                us(f.p50),
                us(f.p99),
                f.mean.as_secs_f64() / base.mean.as_secs_f64(),
                f.p50.as_secs_f64() / base.p50.as_secs_f64(),
            );
        }
    }
    fan_out_mechanisms();
}

/// The cost of reaching N workers and collecting their answers, with no I/O at all.
fn fan_out_mechanisms() {
    const CALLS: u32 = 20_000;
    eprintln!("fan-out alone (no I/O), per call:");
    for jobs in [3usize, 5] {
        let start = Instant::now();
        for i in 0..CALLS as usize {
            std::thread::scope(|s| {
                let handles: Vec<_> = (0..jobs).map(|j| s.spawn(move || i + j)).collect();
                for h in handles {
                    h.join().unwrap();
                }
            });
        }
        let scoped = start.elapsed() / CALLS;
        type Job = Box<dyn FnOnce() + Send>;
        let queues: Vec<mpsc::Sender<Job>> = (0..jobs)
            .map(|_| {
                let (tx, rx) = mpsc::channel::<Job>();
                std::thread::spawn(move || {
                    while let Ok(job) = rx.recv() {
                        job();
                    }
                });
                tx
            })
            .collect();
        let start = Instant::now();
        for i in 0..CALLS as usize {
            let (tx, rx) = mpsc::channel();
            for (j, q) in queues.iter().enumerate() {
                let tx = tx.clone();
                q.send(Box::new(move || {
                    let _ = tx.send(i + j);
                }))
                .unwrap();
            }
            drop(tx);
            let _: Vec<usize> = rx.iter().collect();
        }
        let parked = start.elapsed() / CALLS;
        eprintln!(
            "  {jobs} nodes: scoped threads {}, parked workers {}",
            us(scoped),
            us(parked)
        );
    }
}
