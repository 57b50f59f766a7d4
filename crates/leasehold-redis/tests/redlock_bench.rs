//! Numbers, not assertions: run with `cargo test -p leasehold-redis --release --test redlock_bench
//! -- --ignored --nocapture`. Prints, in one run, the acquire+release cycle time on one Redis node,
//! on Redlock(3) and on Redlock(5) (all on loopback), with the ratio to the single node (the goal
//! is at most 1.5×), and what the two ways of fanning out to N nodes cost by themselves (a scoped
//! thread per node per call, against handing jobs to parked worker threads, which Redlock uses),
//! and a floor: plain `SET NX PX` + `DEL` sent to every node from one thread before reading any
//! answer (no Lua, no threads, no pool), which shows what N servers cost on this machine's cores
//! whatever the client does.

use leasehold_core::{Client, Config};
use leasehold_redis::{RedisBackend, RedlockBackend};
use leasehold_testkit::{unique_key, RedisServer};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const WARMUP: usize = 500;
const CYCLES: usize = 5000;
const ROUNDS: usize = 10;

struct Figures {
    mean: Duration,
    p50: Duration,
    p99: Duration,
}

/// `CYCLES / ROUNDS` timed cycles per thread on `client`, after a warm-up.
fn block(client: &Client, threads: usize, cycles: usize, warmup: usize) -> Vec<Duration> {
    let per_thread: Vec<Vec<Duration>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let key = unique_key("bench-redlock");
                    let ttl = Duration::from_secs(10);
                    for _ in 0..warmup {
                        client.try_acquire(&key, ttl).unwrap().release().unwrap();
                    }
                    (0..cycles)
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
    per_thread.into_iter().flatten().collect()
}

fn figures(mut all: Vec<Duration>) -> Figures {
    all.sort_unstable();
    let total: Duration = all.iter().sum();
    let at = |q: f64| all[((all.len() - 1) as f64 * q).round() as usize];
    Figures {
        mean: total / all.len() as u32,
        p50: at(0.5),
        p99: at(0.99),
    }
}

/// The machine is shared and its load drifts: the clients take turns in `ROUNDS` short blocks, so
/// a busy spell hits them all alike.
fn compare(clients: &[&Client], threads: usize) -> Vec<Figures> {
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); clients.len()];
    for round in 0..ROUNDS {
        for (i, client) in clients.iter().enumerate() {
            let warmup = if round == 0 { WARMUP } else { 20 };
            samples[i].extend(block(client, threads, CYCLES / ROUNDS, warmup));
        }
    }
    samples.into_iter().map(figures).collect()
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
            "acquire+release, {threads} thread(s) on distinct keys, {CYCLES} cycles each (after {WARMUP} warm-up, interleaved in {ROUNDS} rounds):"
        );
        let f = compare(&[&single, &three, &five], threads);
        let base = &f[0];
        let names = ["redis (1 node)", "redlock(3)    ", "redlock(5)    "];
        for (name, f) in names.iter().zip(&f) {
            eprintln!(
                "  {name} mean {}  p50 {}  p99 {}  = {:.2}× the single node (p50), {:.2}× (mean)",
                us(f.mean),
                us(f.p50),
                us(f.p99),
                f.p50.as_secs_f64() / base.p50.as_secs_f64(),
                f.mean.as_secs_f64() / base.mean.as_secs_f64(),
            );
        }
    }
    floor(&servers);
    fan_out_mechanisms();
}

/// The cheapest possible N-node cycle: write every node's request, then read every answer.
fn floor(servers: &[RedisServer]) {
    let mut conns: Vec<redis::Connection> = servers
        .iter()
        .map(|s| {
            redis::Client::open(s.url())
                .unwrap()
                .get_connection()
                .unwrap()
        })
        .collect();
    let key = unique_key("bench-floor");
    let set = redis::cmd("SET")
        .arg(&key)
        .arg("x")
        .arg("NX")
        .arg("PX")
        .arg(10_000)
        .get_packed_command();
    let del = redis::cmd("DEL").arg(&key).get_packed_command();
    eprintln!("floor: SET NX PX + DEL sent to all nodes at once from one thread, per cycle:");
    let mut base = Duration::ZERO;
    for n in [1usize, 3, 5] {
        let start = Instant::now();
        for _ in 0..CYCLES {
            for packed in [&set, &del] {
                for c in conns[..n].iter_mut() {
                    c.send_packed_command(packed).unwrap();
                }
                for c in conns[..n].iter_mut() {
                    c.recv_response().unwrap();
                }
            }
        }
        let per = start.elapsed() / CYCLES as u32;
        if n == 1 {
            base = per;
        }
        eprintln!(
            "  {n} node(s): {}  = {:.2}× one node",
            us(per),
            per.as_secs_f64() / base.as_secs_f64()
        );
    }
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
