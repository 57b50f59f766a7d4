//! `cargo bench -p leasehold-redis`: the uncontended lock cycle (try_acquire + release of a fresh key,
//! one thread) next to the floor it is compared with, measured in the same run against servers this
//! bench starts on free loopback ports (the goals in the README's performance section):
//!
//! - `redis/cycle` beside two raw PING round trips on one connection, and `redis/cycle_vs_set_del`
//!   beside a raw `SET NX PX` + a compare-and-`DEL` script (the least a lock can send), both on a raw
//!   socket (no client library);
//! - `redlock5/cycle` beside `SET NX PX` written to all five nodes before any answer is read, then `DEL`
//!   likewise, from one thread;
//! - `topology/{cluster,sentinel,replicas1}`: Cluster (3+3), Sentinel and `replicas=1` beside the cycle
//!   on one server (skipped with `LEASEHOLD_BENCH_TOPOLOGIES=0`).
//!
//! Each figure is timed in alternation with its floor (support/paired.rs): criterion's
//! `target/criterion/<group>/<bench>/new/estimates.json` is the figure, `paired.json` beside it the floor
//! and the ratio; `scripts/bench.sh` turns them into docs/perf/rust.md.

#[path = "support/paired.rs"]
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

fn single(c: &mut Criterion) {
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
    let set_del = || {
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
        set_del,
    );
    g.finish();
}

fn redlock5(c: &mut Criterion) {
    let servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let lock = redlock(&servers);
    let mut conns: Vec<Raw> = servers.iter().map(Raw::connect).collect();

    let prefix = unique_key("bench-redlock-floor");
    let mut i = 0u64;
    let pipelined = || {
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
        pipelined,
    );
    g.finish();
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

criterion_group! {
    name = benches;
    config = paired::config(SAMPLES);
    targets = single, redlock5, topologies
}
criterion_main!(benches);
