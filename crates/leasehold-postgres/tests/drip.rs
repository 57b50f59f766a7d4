//! A server (or proxy) that answers one byte at a time must not stretch a call past connect + I/O
//! timeout. Each round trip runs under one client-side timeout for all of its reads (and a call's
//! round trips draw on one deadline), so a reply that trickles in is cut off like one that never
//! comes.

use leasehold_core::{Client, Config, ErrorKind};
use leasehold_postgres::PostgresBackend;
use leasehold_testkit::{unique_key, Fault, FaultProxy, PostgresServer};
use std::time::{Duration, Instant};

const CONNECT: Duration = Duration::from_millis(500);
const IO: Duration = Duration::from_millis(500);
/// Scheduling on a busy 2-core machine.
const SLACK: Duration = Duration::from_millis(300);
const DRIP: Duration = Duration::from_millis(200);
const LONG: Duration = Duration::from_secs(60);

fn server() -> &'static PostgresServer {
    PostgresServer::shared()
}

/// The URL of `mode` through `proxy`.
fn url_through(proxy: &FaultProxy, mode: &str) -> String {
    let url = server()
        .url_with(&format!(
            "{mode}&connect_timeout_ms={}&io_timeout_ms={}",
            CONNECT.as_millis(),
            IO.as_millis()
        ))
        .replace(
            &format!(":{}/", server().port()),
            &format!(":{}/", proxy.port()),
        );
    assert!(url.contains(&proxy.port().to_string()), "{url}");
    url
}

fn connect(url: &str) -> leasehold_core::Result<Client> {
    Ok(Client::new(PostgresBackend::connect(&Config::parse(url)?)?))
}

/// Times `f`, which must fail with `Unavailable` within connect + I/O timeout.
fn bounded<T: std::fmt::Debug>(what: &str, f: impl FnOnce() -> leasehold_core::Result<T>) {
    let start = Instant::now();
    let result = f();
    let took = start.elapsed();
    eprintln!("{what}: {took:?} {result:?}");
    match result {
        Err(e) => assert_eq!(e.kind(), ErrorKind::Unavailable, "{what}: {e}"),
        Ok(v) => panic!("{what} succeeded through a drip: {v:?}"),
    }
    let bound = CONNECT + IO + SLACK;
    assert!(took < bound, "{what} took {took:?}, bound {bound:?}");
}

#[test]
fn calls_through_a_dripping_proxy_end_within_connect_plus_io() {
    for mode in ["lock=advisory", "lock=table&table=drip_locks"] {
        let proxy = FaultProxy::start(("127.0.0.1", server().port()));
        let url = url_through(&proxy, mode);
        let client = connect(&url).expect("healthy connect");
        let key = unique_key("pg-drip");
        let mut lease = client.try_acquire(&key, LONG).expect("healthy acquire");
        let mut other = client
            .try_acquire(unique_key("pg-drip-other"), LONG)
            .expect("healthy acquire");
        // Idle pooled sessions too, made while healthy.
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| client.inspect(&key).expect("healthy inspect"));
            }
        });
        proxy.set(Fault::SlowDripReplies(DRIP));
        bounded(&format!("{mode} try_acquire"), || {
            client.try_acquire(unique_key("pg-drip-new"), LONG)
        });
        bounded(&format!("{mode} inspect"), || client.inspect(&key));
        bounded(&format!("{mode} extend"), || lease.extend(LONG));
        bounded(&format!("{mode} release"), || other.release_in_place());
        bounded(&format!("{mode} connect"), || connect(&url));
        proxy.heal();
        drop((lease, other));
    }
}
