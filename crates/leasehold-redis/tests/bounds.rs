//! The bounds of `docs/semantics.md` §4 under a hung server: `acquire` within wait + connect + I/O, the rest
//! within connect + I/O, because every step of an operation draws on one deadline.

mod common;

use leasehold_core::{Client, Config, Key};
use leasehold_redis::keys::RedisKeys;
use leasehold_redis::RedlockBackend;
use leasehold_testkit::{unique_key, RedisServer};
use std::time::{Duration, Instant};

const CONNECT: Duration = Duration::from_millis(200);
const IO: Duration = Duration::from_millis(500);
/// Scheduling on a loaded 2-core machine (the fan-out listens 20 ms past its calls' deadline).
const SLACK: Duration = Duration::from_millis(300);
const LONG: Duration = Duration::from_secs(30);

fn query() -> String {
    format!(
        "connect_timeout_ms={}&io_timeout_ms={}",
        CONNECT.as_millis(),
        IO.as_millis()
    )
}

#[test]
fn redlock_with_split_votes_and_a_hung_node_returns_within_its_bound() {
    let nodes: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let hosts: Vec<String> = nodes.iter().map(RedisServer::addr).collect();
    let url = format!("redlock://{}?{}", hosts.join(","), query());
    let client = Client::new(RedlockBackend::connect(&Config::parse(&url).unwrap()).unwrap());
    let key = unique_key("split");
    // Pooled connections everywhere, so the hung node swallows requests on open sockets.
    client.try_acquire(&key, LONG).unwrap().release().unwrap();
    // Two nodes held by someone else, two free, one hung: no round is decided before its deadline.
    for node in &nodes[3..5] {
        node.command(&[
            b"SET",
            &RedisKeys::new("leasehold:", &Key::new(key.as_bytes()).unwrap()).lock,
            b"someone-else",
            b"PX",
            b"60000",
        ]);
    }
    // Node 0 is the one a call makes on its own thread while healthy: the worst case.
    nodes[0].pause();
    let wait = Duration::from_millis(300);
    let started = Instant::now();
    let result = client.acquire(&key, LONG, wait);
    let took = started.elapsed();
    nodes[0].resume();
    let bound = wait + CONNECT + IO;
    eprintln!(
        "split votes, one node hung: {:?} after {took:?} (bound {bound:?})",
        result.as_ref().map(|l| l.fence())
    );
    assert!(result.is_err(), "no quorum is possible");
    assert!(took < bound + SLACK, "took {took:?}, bound {bound:?}");
}

#[test]
fn calls_on_pooled_connections_to_a_paused_server_return_within_connect_plus_io() {
    let server = RedisServer::start();
    let client = common::client(&server.url_with(&query()));
    let key = unique_key("paused-bound");
    let mut lease = client.try_acquire(&key, LONG).unwrap();
    // Several pooled connections.
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| client.inspect(&key).unwrap());
        }
    });
    server.pause();
    let bound = CONNECT + IO + SLACK;
    let mut times = Vec::new();
    let t = Instant::now();
    assert!(client.try_acquire(unique_key("p"), LONG).is_err());
    times.push(("try_acquire", t.elapsed()));
    let t = Instant::now();
    assert!(client.inspect(&key).is_err());
    times.push(("inspect", t.elapsed()));
    let t = Instant::now();
    assert!(lease.extend(LONG).is_err());
    times.push(("extend", t.elapsed()));
    let wait = Duration::from_millis(300);
    let t = Instant::now();
    let r = client.acquire(&key, LONG, wait);
    eprintln!("acquire: {:?}", r.as_ref().err());
    assert!(r.is_err());
    times.push(("acquire", t.elapsed()));
    server.resume();
    eprintln!("against a paused server: {times:?}");
    for (what, took) in &times {
        let limit = if *what == "acquire" {
            bound + wait
        } else {
            bound
        };
        assert!(took < &limit, "{what} took {took:?}, bound {limit:?}");
    }
    lease.release().expect("intact after resume");
}

#[test]
fn host_names_are_resolved_under_the_deadline() {
    let server = RedisServer::start();
    let url = format!("redis://localhost:{}?{}", server.port(), query());
    let client = common::client(&url);
    client
        .try_acquire(unique_key("named"), LONG)
        .expect("a name resolves")
        .release()
        .unwrap();
}
