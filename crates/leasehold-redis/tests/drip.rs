//! A peer that answers one byte at a time (a slow proxy, a server under a swap storm; the fault
//! proxy's `SlowDripReplies`) must not stretch a call past its bound: every call should end within
//! connect + I/O timeout, however the bytes trickle in.
//!
//! redis-rs's synchronous connection set the socket's timeout once per call, but reads a reply with as
//! many `read`s as it takes, each of which got that whole timeout anew: a reply that trickled in kept
//! the call going (measured before the fix, with 500 ms + 500 ms timeouts: try_acquire 5.2 s, a
//! Redlock try_acquire 6.0 s, a new client's connect 303 s).

mod common;

use leasehold_core::{Client, Config, ErrorKind};
use leasehold_redis::RedlockBackend;
use leasehold_testkit::{unique_key, Fault, FaultProxy, RedisServer, RedisTls, TempDir};
use std::time::{Duration, Instant};

const CONNECT: Duration = Duration::from_millis(500);
const IO: Duration = Duration::from_millis(500);
/// Scheduling on a busy 2-core machine; far below the seconds a drip used to take.
const SLACK: Duration = Duration::from_millis(300);
const DRIP: Duration = Duration::from_millis(200);
const LONG: Duration = Duration::from_secs(60);

fn query() -> String {
    format!(
        "connect_timeout_ms={}&io_timeout_ms={}",
        CONNECT.as_millis(),
        IO.as_millis()
    )
}

/// Times `f`, which must fail with `Unavailable`.
fn unavailable<T: std::fmt::Debug>(
    what: &'static str,
    times: &mut Vec<(&'static str, Duration)>,
    f: impl FnOnce() -> leasehold_core::Result<T>,
) {
    let start = Instant::now();
    let result = f();
    let took = start.elapsed();
    eprintln!("{what}: {took:?} {result:?}");
    match result {
        Err(e) => assert_eq!(e.kind(), ErrorKind::Unavailable, "{what}: {e}"),
        Ok(v) => panic!("{what} succeeded through a drip: {v:?}"),
    }
    times.push((what, took));
}

fn assert_bounded(times: &[(&'static str, Duration)]) {
    let bound = CONNECT + IO + SLACK;
    for (what, took) in times {
        assert!(*took < bound, "{what} took {took:?}, bound {bound:?}");
    }
}

/// Every operation through a dripping proxy: on pooled connections made while the proxy was
/// healthy (the reads trickle), and on connections made during the drip.
fn every_call_is_bounded(client: &Client, proxy: &FaultProxy) {
    let key = unique_key("drip");
    let mut lease = client.try_acquire(&key, LONG).expect("healthy acquire");
    let mut other = client
        .try_acquire(unique_key("drip-other"), LONG)
        .expect("healthy acquire");
    // Several pooled connections, made while healthy.
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| client.inspect(&key).expect("healthy inspect"));
        }
    });
    proxy.set(Fault::SlowDripReplies(DRIP));
    let mut times = Vec::new();
    unavailable("try_acquire", &mut times, || {
        client.try_acquire(unique_key("drip-new"), LONG)
    });
    unavailable("inspect", &mut times, || client.inspect(&key));
    unavailable("extend", &mut times, || lease.extend(LONG));
    unavailable("release", &mut times, || other.release_in_place());
    unavailable("acquire (wait 0)", &mut times, || {
        client.acquire(unique_key("drip-new"), LONG, Duration::ZERO)
    });
    proxy.heal();
    eprintln!("through a {DRIP:?} drip: {times:?}");
    assert_bounded(&times);
    drop((lease, other));
}

#[test]
fn redis_calls_through_a_dripping_proxy_end_within_connect_plus_io() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let url = format!("redis://{}?{}", proxy.host_port(), query());
    let client = common::client(&url);
    every_call_is_bounded(&client, &proxy);
}

#[test]
fn connecting_through_a_dripping_proxy_ends_within_connect_plus_io() {
    // A new client (what `leasehold status` makes) checks the server and loads its scripts first.
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let url = format!("redis://{}?{}", proxy.host_port(), query());
    proxy.set(Fault::SlowDripReplies(DRIP));
    let mut times = Vec::new();
    unavailable("connect", &mut times, || common::connect(&url));
    assert_bounded(&times);
}

#[test]
fn redlock_calls_through_dripping_proxies_end_within_connect_plus_io() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let proxies: Vec<FaultProxy> = servers
        .iter()
        .map(|s| FaultProxy::start(s.addr()))
        .collect();
    let hosts: Vec<String> = proxies.iter().map(FaultProxy::host_port).collect();
    let url = format!("redlock://{}?{}", hosts.join(","), query());
    let client = Client::new(RedlockBackend::connect(&Config::parse(&url).unwrap()).unwrap());
    let key = unique_key("drip-redlock");
    let mut lease = client.try_acquire(&key, LONG).expect("healthy acquire");
    let mut other = client
        .try_acquire(unique_key("drip-redlock-other"), LONG)
        .expect("healthy acquire");
    for p in &proxies {
        p.set(Fault::SlowDripReplies(DRIP));
    }
    let mut times = Vec::new();
    unavailable("redlock try_acquire", &mut times, || {
        client.try_acquire(unique_key("drip-redlock-new"), LONG)
    });
    unavailable("redlock extend", &mut times, || lease.extend(LONG));
    unavailable("redlock release", &mut times, || other.release_in_place());
    unavailable("redlock inspect", &mut times, || client.inspect(&key));
    for p in &proxies {
        p.heal();
    }
    eprintln!("redlock through {DRIP:?} drips: {times:?}");
    assert_bounded(&times);
    drop((lease, other));
}

#[test]
fn tls_calls_through_a_dripping_proxy_end_within_connect_plus_io() {
    // A self-signed certificate, accepted with tls_insecure: the bound does not depend on checks.
    let dir = TempDir::new("drip-tls");
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let made = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-subj", "/CN=127.0.0.1", "-days", "2", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("run openssl (the README's test command installs it)");
    assert!(made.status.success(), "{made:?}");
    let tls = RedisTls {
        cert: cert.clone(),
        key,
        ca: cert,
        auth_clients: false,
    };
    let server = RedisServer::start_tls(&tls);
    let proxy = FaultProxy::start(("127.0.0.1", server.port()));
    let url = format!(
        "rediss://{}?tls_insecure=true&{}",
        proxy.host_port(),
        query()
    );
    let client = common::client(&url);
    every_call_is_bounded(&client, &proxy);
    proxy.set(Fault::SlowDripReplies(DRIP));
    let mut times = Vec::new();
    unavailable("tls connect", &mut times, || common::connect(&url));
    proxy.heal();
    assert_bounded(&times);
}
