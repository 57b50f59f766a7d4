//! `cargo bench -p leasehold-redis`: the uncontended lock cycle (try_acquire + release of a fresh key,
//! one thread) next to the floor it is compared with, measured in the same run against servers this
//! bench starts on free loopback ports (the goals in the README's performance section):
//!
//! - `redis/cycle` beside two raw PING round trips on one connection, and `redis/cycle_vs_set_del`
//!   beside a raw `SET NX PX` + a compare-and-`DEL` script (the least a lock can send), both on a raw
//!   socket (no client library); then `redis/cycle/profile.json`, what the cycle costs beside its
//!   floor and where: the server's time (`INFO commandstats`) and this thread's CPU per cycle and per
//!   pair of PINGs;
//! - `redis/fresh_keys/memory.json`: what 20,000 fresh keys taken and released leave on the
//!   server, per key (`DBSIZE` and `INFO memory`'s `used_memory`, before and after);
//! - `redlock5/cycle` beside `SET NX PX` written to all five nodes before any answer is read, then `DEL`
//!   likewise, from one thread; then `redlock5/cycle/profile.json`: the five servers' process CPU and
//!   this process's, per cycle and per floor operation;
//! - `topology/{cluster,sentinel,replicas1}`: Cluster (3+3), Sentinel and `replicas=1` beside the cycle
//!   on one server (skipped with `LEASEHOLD_BENCH_TOPOLOGIES=0`).
//! - `growth/keys_100k`: the cycle on a server holding 100,000 other leases beside the same cycle on
//!   an empty server; `growth/permits_65535` and `growth/redlock_permits_65535`: a permit cycle on a
//!   semaphore of 65,535 permits with 1,000 held, beside one on a semaphore of 2 with 1 held (one
//!   server, and Redlock over 3), so a cost that grows with the work shows as a ratio above 1;
//!   `growth/leases_10k/memory.json`: this process's resident memory before and after it holds
//!   10,000 leases (skipped, all four, with `LEASEHOLD_BENCH_GROWTH=0`).
//!
//! Each figure is timed in alternation with its floor (`tests/support/paired.rs`,
//! the benches' shared support): criterion's `target/criterion/<group>/<bench>/new/estimates.json` is
//! the figure, `paired.json` beside it the floor and the ratio; `scripts/bench.sh` turns them into
//! docs/perf/rust.md.

#[path = "../../../tests/support/paired.rs"]
mod paired;

use criterion::{criterion_group, criterion_main, Criterion};
use leasehold_core::{Client, Config};
use leasehold_redis::{RedisBackend, RedlockBackend};
use leasehold_testkit::{unique_key, RedisCluster, RedisSentinel, RedisServer};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

const TTL: Duration = Duration::from_secs(10);
const SAMPLES: usize = 20;

/// The compare-and-delete every lock library sends on release, as a script loaded once.
const COMPARE_DEL: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

fn client(url: &str) -> Client {
    let config = Config::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
    Client::new(RedisBackend::connect(&config).unwrap_or_else(|e| panic!("connect {url}: {e}")))
}

fn redlock(servers: &[RedisServer]) -> Client {
    let hosts: Vec<String> = servers.iter().map(RedisServer::addr).collect();
    let url = format!("redlock://{}", hosts.join(","));
    let config = Config::parse(&url).unwrap_or_else(|e| panic!("{url}: {e}"));
    Client::new(RedlockBackend::connect(&config).unwrap_or_else(|e| panic!("connect {url}: {e}")))
}

/// A connection with no client library: the request is RESP bytes, the reply is checked byte for byte
/// (every reply here has a known, fixed form), so nothing but the round trip is measured.
struct Raw(TcpStream);

impl Raw {
    fn connect(server: &RedisServer) -> Raw {
        let s = TcpStream::connect(("127.0.0.1", server.port()))
            .unwrap_or_else(|e| panic!("raw connection to {}: {e}", server.addr()));
        s.set_nodelay(true).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        Raw(s)
    }

    fn send(&mut self, args: &[&[u8]]) {
        let mut req = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            req.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            req.extend_from_slice(a);
            req.extend_from_slice(b"\r\n");
        }
        self.0.write_all(&req).unwrap();
    }

    fn expect(&mut self, reply: &[u8]) {
        let mut got = vec![0; reply.len()];
        self.0.read_exact(&mut got).unwrap();
        assert_eq!(got, reply, "unexpected reply");
    }

    /// A bulk-string reply of unknown content (`SCRIPT LOAD`'s sha).
    fn bulk(&mut self) -> String {
        let mut reader = BufReader::new(&self.0);
        let mut header = String::new();
        reader.read_line(&mut header).unwrap();
        let len: usize = header.trim_start_matches('$').trim().parse().unwrap();
        let mut body = vec![0; len + 2];
        reader.read_exact(&mut body).unwrap();
        body.truncate(len);
        String::from_utf8(body).unwrap()
    }
}

/// Fresh keys taken and released for the `redis/fresh_keys` row: enough that state kept per key
/// ever taken dwarfs what is kept per server.
const FRESH_KEYS: u32 = 20_000;

/// What a released fresh key leaves on the server: `DBSIZE` and `INFO memory`'s `used_memory`
/// before and after [`FRESH_KEYS`] fresh cycles on a server of their own, per key.
fn fresh_keys_left() {
    let server = RedisServer::start();
    let lock = client(&server.url());
    // One cycle first, so the connection pool and the loaded scripts are in the "before".
    paired::fresh_cycle(&lock, "bench-fresh-warm", TTL)();
    let measure = || {
        (
            server.number(&[b"DBSIZE"], ":"),
            server.number(&[b"INFO", b"memory"], "used_memory:"),
        )
    };
    let (keys_before, bytes_before) = measure();
    let mut cycle = paired::fresh_cycle(&lock, "bench-fresh", TTL);
    for _ in 0..FRESH_KEYS {
        cycle();
    }
    let (keys_after, bytes_after) = measure();
    let n = f64::from(FRESH_KEYS);
    let (keys, bytes) = (
        (keys_after - keys_before) / n,
        (bytes_after - bytes_before) / n,
    );
    let json = format!(
        "{{\"fresh_keys\": {FRESH_KEYS}, \"keys_left_per_key\": {keys:.4}, \
         \"bytes_left_per_key\": {bytes:.2}, \"dbsize_after\": {keys_after}}}\n"
    );
    paired::save("redis/fresh_keys", "memory.json", &json);
    println!(
        "redis/fresh_keys: {FRESH_KEYS} fresh keys taken and released leave {keys:.4} keys and \
         {bytes:.1} B each (DBSIZE {keys_before} -> {keys_after})"
    );
}

fn single(c: &mut Criterion) {
    fresh_keys_left();
    let server = RedisServer::start();
    let lock = client(&server.url());
    let mut conn = Raw::connect(&server);
    conn.send(&[b"SCRIPT", b"LOAD", COMPARE_DEL.as_bytes()]);
    let sha = conn.bulk();
    let mut other = Raw::connect(&server);

    let two_pings = || {
        for _ in 0..2 {
            conn.send(&[b"PING"]);
            conn.expect(b"+PONG\r\n");
        }
    };
    let prefix = unique_key("bench-floor");
    let mut i = 0u64;
    let mut set_del = || {
        i += 1;
        let key = format!("{prefix}:{i}");
        other.send(&[b"SET", key.as_bytes(), b"token", b"NX", b"PX", b"10000"]);
        other.expect(b"+OK\r\n");
        other.send(&[b"EVALSHA", sha.as_bytes(), b"1", key.as_bytes(), b"token"]);
        other.expect(b":1\r\n");
    };

    let mut g = c.benchmark_group("redis");
    paired::bench(
        &mut g,
        "redis",
        "cycle",
        SAMPLES,
        paired::fresh_cycle(&lock, "bench-cycle", TTL),
        two_pings,
    );
    paired::bench(
        &mut g,
        "redis",
        "cycle_vs_set_del",
        SAMPLES,
        paired::fresh_cycle(&lock, "bench-cycle", TTL),
        &mut set_del,
    );
    g.finish();

    // Why the cycle is where it is beside its floor: the server's own time (Redis counts the
    // microseconds each command ran, scripts with what they call) and this thread's CPU, per cycle
    // and per pair of PINGs, over the same number of each.
    let per_cycle = profile_top(
        &server,
        &["evalsha"],
        paired::fresh_cycle(&lock, "bench-profile", TTL),
    );
    let per_pair = profile(&server, || {
        for _ in 0..2 {
            conn.send(&[b"PING"]);
            conn.expect(b"+PONG\r\n");
        }
    });
    // The plain lock's server time, over as many fresh keys: the floor of the server's share.
    let per_plain = profile_top(&server, &["set", "evalsha"], set_del);
    let json = format!(
        "{{\"server_us_per_cycle\": {:.2}, \"client_cpu_us_per_cycle\": {:.2}, \
         \"server_us_per_ping_pair\": {:.2}, \"client_cpu_us_per_ping_pair\": {:.2}, \
         \"server_us_per_set_del\": {:.2}, \"top_level_us_per_cycle\": {:.2}, \
         \"top_level_us_per_set_del\": {:.2}}}\n",
        per_cycle.0, per_cycle.1, per_pair.0, per_pair.1, per_plain.0, per_cycle.2, per_plain.2
    );
    paired::save("redis/cycle", "profile.json", &json);
    println!(
        "redis/cycle profile: server {:.1} µs and client CPU {:.1} µs per cycle; \
         server {:.1} µs and client CPU {:.1} µs per 2 PINGs; server {:.1} µs per plain \
         SET NX PX + compare-and-delete ({:.2}× the plain lock's server time); counting a \
         script's calls once (top-level commands only): {:.1} µs per cycle, {:.1} µs per plain \
         lock ({:.2}×)",
        per_cycle.0,
        per_cycle.1,
        per_pair.0,
        per_pair.1,
        per_plain.0,
        per_cycle.0 / per_plain.0,
        per_cycle.2,
        per_plain.2,
        per_cycle.2 / per_plain.2
    );
}

/// Operations `op` runs for [`profile`].
const PROFILED: u32 = 5_000;

/// The server's time (`RedisServer::busy_usec`, reset first) and this thread's CPU
/// time, in µs per run of `op`, over [`PROFILED`] runs.
fn profile(server: &RedisServer, op: impl FnMut()) -> (f64, f64) {
    let (busy, cpu, _) = profile_top(server, &[], op);
    (busy, cpu)
}

/// [`profile`], and the time of the commands `top` only (`INFO commandstats`' usec of each), in µs
/// per run: the commands `op` sends itself. Redis 7 lists a command a script calls under its own
/// name too, and a script's usec includes its calls, so `busy_usec` counts a script's calls
/// twice; the top-level commands' time counts them once.
fn profile_top(server: &RedisServer, top: &[&str], mut op: impl FnMut()) -> (f64, f64, f64) {
    server.reset_stats();
    let cpu_before = thread_cpu();
    for _ in 0..PROFILED {
        op();
    }
    let cpu = thread_cpu() - cpu_before;
    let usec = server.busy_usec();
    let stats = server.command(&[b"INFO", b"commandstats"]);
    let top_usec: f64 = top
        .iter()
        .filter_map(|name| {
            let line = stats
                .lines()
                .find_map(|l| l.strip_prefix(&format!("cmdstat_{name}:")))?;
            line.split("usec=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<f64>()
                .ok()
        })
        .sum();
    let n = f64::from(PROFILED);
    (usec / n, cpu.as_secs_f64() * 1e6 / n, top_usec / n)
}

/// The CPU time this thread has used.
fn thread_cpu() -> Duration {
    cpu_clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// The CPU time this process has used, all its threads.
fn process_cpu() -> Duration {
    cpu_clock(libc::CLOCK_PROCESS_CPUTIME_ID)
}

fn cpu_clock(id: libc::clockid_t) -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a pointer to a timespec on this stack frame.
    assert_eq!(unsafe { libc::clock_gettime(id, &mut t) }, 0);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

fn redlock5(c: &mut Criterion) {
    let servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let lock = redlock(&servers);
    let mut conns: Vec<Raw> = servers.iter().map(Raw::connect).collect();

    let prefix = unique_key("bench-redlock-floor");
    let mut i = 0u64;
    let mut pipelined = || {
        i += 1;
        let key = format!("{prefix}:{i}");
        let key = key.as_bytes();
        for c in conns.iter_mut() {
            c.send(&[b"SET", key, b"token", b"NX", b"PX", b"10000"]);
        }
        for c in conns.iter_mut() {
            c.expect(b"+OK\r\n");
        }
        for c in conns.iter_mut() {
            c.send(&[b"DEL", key]);
        }
        for c in conns.iter_mut() {
            c.expect(b":1\r\n");
        }
    };
    let mut g = c.benchmark_group("redlock5");
    paired::bench(
        &mut g,
        "redlock5",
        "cycle",
        SAMPLES,
        paired::fresh_cycle(&lock, "bench-redlock", TTL),
        &mut pipelined,
    );
    g.finish();

    // Where the cycle's time goes beside its floor's: the five servers' process CPU and this
    // process's (the calling thread and the fan-out's workers), per cycle. With everything pinned
    // to one CPU, as bench.sh does, a cycle takes about the sum of the two.
    let per_cycle = process_profile(&servers, paired::fresh_cycle(&lock, "bench-profile", TTL));
    let per_floor = process_profile(&servers, &mut pipelined);
    let json = format!(
        "{{\"servers_cpu_us_per_cycle\": {:.2}, \"client_cpu_us_per_cycle\": {:.2}, \
         \"servers_cpu_us_per_floor\": {:.2}, \"client_cpu_us_per_floor\": {:.2}}}\n",
        per_cycle.0, per_cycle.1, per_floor.0, per_floor.1
    );
    paired::save("redlock5/cycle", "profile.json", &json);
    println!(
        "redlock5/cycle profile: 5 servers {:.1} µs and client {:.1} µs of CPU per cycle; \
         {:.1} µs and {:.1} µs per floor operation",
        per_cycle.0, per_cycle.1, per_floor.0, per_floor.1
    );
}

/// The servers' process CPU (`RedisServer::cpu_usec`, summed) and this process's CPU, in µs per
/// run of `op`, over [`PROFILED`] runs.
fn process_profile(servers: &[RedisServer], mut op: impl FnMut()) -> (f64, f64) {
    let servers_cpu = || servers.iter().map(RedisServer::cpu_usec).sum::<f64>();
    let (servers_before, own_before) = (servers_cpu(), process_cpu());
    for _ in 0..PROFILED {
        op();
    }
    let own = process_cpu() - own_before;
    let n = f64::from(PROFILED);
    (
        (servers_cpu() - servers_before) / n,
        own.as_secs_f64() * 1e6 / n,
    )
}

fn topologies(c: &mut Criterion) {
    if std::env::var("LEASEHOLD_BENCH_TOPOLOGIES").as_deref() == Ok("0") {
        return;
    }
    let cluster = RedisCluster::start(3, 5000);
    let group = RedisSentinel::start(1, 3, 5000);
    let master = format!("redis://{}", group.servers()[0].addr());
    // One server beside each, so every row has a baseline measured with it.
    let single = RedisServer::start();
    let one = client(&single.url());
    let rows = [
        ("cluster", client(&cluster.url())),
        ("sentinel", client(&group.url())),
        ("replicas1", client(&format!("{master}?replicas=1"))),
    ];
    let mut g = c.benchmark_group("topology");
    for (name, lock) in &rows {
        paired::bench(
            &mut g,
            "topology",
            name,
            SAMPLES,
            paired::fresh_cycle(lock, "bench-topology", TTL),
            paired::fresh_cycle(&one, "bench-topology-single", TTL),
        );
    }
    g.finish();
}

/// Holders of a big semaphore in the growth rows: enough that a cost per holder shows, few enough
/// that filling it stays within seconds on Redlock.
const HELD_PERMITS: usize = 1_000;

/// This process's resident set size, from `/proc/self/status` (Linux), in KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// A permit acquire + release on the semaphore `key` of `permits`, which others hold already.
fn permit_cycle<'a>(client: &'a Client, key: &'a str, permits: u32) -> impl FnMut() + 'a {
    move || {
        client
            .try_acquire_permit(key, permits, TTL)
            .unwrap()
            .release()
            .unwrap();
    }
}

fn growth(c: &mut Criterion) {
    if std::env::var("LEASEHOLD_BENCH_GROWTH").as_deref() == Ok("0") {
        return;
    }
    let long = Duration::from_secs(600);
    let (empty, full) = (RedisServer::start(), RedisServer::start());
    let (on_empty, on_full) = (client(&empty.url()), client(&full.url()));
    // 100,000 leases taken the ordinary way would take a minute; a script writes the same keys (a
    // lock key with its TTL and a fence counter per lease) in well under a second.
    let mut fill = Raw::connect(&full);
    let script = b"for i = 1, tonumber(ARGV[1]) do         redis.call('SET', 'leasehold:{growth-' .. i .. '}l:held', 'token', 'PX', 600000)         redis.call('SET', 'leasehold:{growth-' .. i .. '}f:held', i, 'PX', 600000) end return 1";
    fill.send(&[b"EVAL", script, b"0", b"100000"]);
    fill.expect(b":1\r\n");

    let (big, small) = (
        unique_key("bench-growth-big"),
        unique_key("bench-growth-small"),
    );
    let big_held: Vec<_> = (0..HELD_PERMITS)
        .map(|_| on_empty.try_acquire_permit(&big, 65_535, long).unwrap())
        .collect();
    let small_held = on_empty.try_acquire_permit(&small, 2, long).unwrap();

    let mut g = c.benchmark_group("growth");
    paired::bench(
        &mut g,
        "growth",
        "keys_100k",
        SAMPLES,
        paired::fresh_cycle(&on_full, "bench-growth", TTL),
        paired::fresh_cycle(&on_empty, "bench-growth", TTL),
    );
    paired::bench(
        &mut g,
        "growth",
        "permits_65535",
        SAMPLES,
        permit_cycle(&on_empty, &big, 65_535),
        permit_cycle(&on_empty, &small, 2),
    );
    drop((big_held, small_held));

    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let quorum = redlock(&nodes);
    let big_held: Vec<_> = (0..HELD_PERMITS)
        .map(|_| quorum.try_acquire_permit(&big, 65_535, long).unwrap())
        .collect();
    let small_held = quorum.try_acquire_permit(&small, 2, long).unwrap();
    paired::bench(
        &mut g,
        "growth",
        "redlock_permits_65535",
        SAMPLES,
        permit_cycle(&quorum, &big, 65_535),
        permit_cycle(&quorum, &small, 2),
    );
    drop((big_held, small_held));
    g.finish();

    // Memory: what holding many leases costs the process that holds them (a lease is a token, a
    // key and a deadline; the connection pool is shared).
    let before = rss_kib();
    let held: Vec<_> = (0..10_000)
        .map(|i| {
            on_empty
                .try_acquire(format!("bench-growth-lease:{i}"), long)
                .unwrap()
        })
        .collect();
    let after = rss_kib();
    drop(held);
    let json = format!(
        "{{\"leases\": 10000, \"rss_before_kib\": {before}, \"rss_after_kib\": {after}}}\n"
    );
    paired::save("growth/leases_10k", "memory.json", &json);
    println!(
        "growth/leases_10k: resident memory {before} KiB before, {after} KiB while holding 10,000 leases (+{} KiB)",
        after.saturating_sub(before)
    );
}

criterion_group! {
    name = benches;
    config = paired::config(SAMPLES);
    targets = single, redlock5, topologies, growth
}
criterion_main!(benches);
