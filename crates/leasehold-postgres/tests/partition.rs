//! A network partition between an advisory lock's holder and the server. The lock lives as long as
//! the holder's session, and either side ends a session that stays silent too long (TCP keepalives
//! and user timeouts), which frees the lock. So the holder must neither lose the lock to an outage
//! shorter than the server would tolerate (its own socket must not give up first: that reset
//! reaches the server once the network is back) nor believe it holds the key after the server may
//! have ended its session.
//!
//! Each test runs in a private network namespace (`unshare -n`, which needs root) with a server of
//! its own, where taking the loopback down cuts every connection without a reset.

use leasehold_core::{Client, Config, ErrorKind};
use leasehold_postgres::PostgresBackend;
use leasehold_testkit::{unique_key, PostgresServer};
use std::process::Command;
use std::time::{Duration, Instant};

const INSIDE: &str = "LEASEHOLD_TEST_IN_NETNS";
const TTL: Duration = Duration::from_secs(60);

/// Runs `test` again in a private network namespace and checks that it passed there: `true` when
/// this is that run (the loopback is up), `false` in the outer one.
fn in_private_network(test: &str) -> bool {
    if std::env::var_os(INSIDE).is_some() {
        loopback(true);
        return true;
    }
    let exe = std::env::current_exe().expect("the test binary");
    let status = Command::new("unshare")
        .arg("-n")
        .arg(exe)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(INSIDE, "1")
        .status()
        .expect("unshare -n (util-linux) runs");
    assert!(status.success(), "{test} failed in its network namespace");
    false
}

fn loopback(up: bool) {
    let state = if up { "up" } else { "down" };
    let status = Command::new("ip")
        .args(["link", "set", "lo", state])
        .status()
        .expect("ip (iproute2) runs");
    assert!(status.success(), "ip link set lo {state}");
}

fn client(server: &PostgresServer) -> Client {
    let url = server.url_with("lock=advisory&connect_timeout_ms=500&io_timeout_ms=500");
    Client::new(PostgresBackend::connect(&Config::parse(&url).unwrap()).unwrap())
}

/// Tries for the key until `until`; when another client gets it, the holder must not believe it
/// holds it any more. `Some(when)` if the other got it.
fn other_takes(
    other: &Client,
    key: &str,
    holder: &leasehold_core::Lease,
    until: Instant,
) -> Option<Duration> {
    let start = Instant::now();
    while Instant::now() < until {
        match other.try_acquire(key, TTL) {
            Ok(lease) => {
                let believed = holder.remaining();
                let after = start.elapsed();
                let _ = lease.release();
                assert!(
                    believed.is_zero(),
                    "another client got the key while the holder believed it had {believed:?} left"
                );
                return Some(after);
            }
            Err(e) => assert!(
                matches!(e.kind(), ErrorKind::NotAcquired | ErrorKind::Unavailable),
                "{e}"
            ),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

/// A 2.5 s outage that covers the first keepalive probe of both sides: with a client TCP user
/// timeout as short as the I/O timeout, the client's socket gave up on that one unanswered probe,
/// and its reset ended the session (and freed the lock) once the network was back, about 7 s after
/// the acquire, while the holder still believed 52 s.
#[test]
fn a_short_outage_keeps_the_lock() {
    if !in_private_network("a_short_outage_keeps_the_lock") {
        return;
    }
    let server = PostgresServer::start();
    let (holder, other) = (client(&server), client(&server));
    let key = unique_key("partition-short");
    let acquired = Instant::now();
    let lease = holder.try_acquire(&key, TTL).unwrap();
    // Idle until just before the keepalive probes (5 s of silence), then cut the network.
    std::thread::sleep(Duration::from_secs(4));
    loopback(false);
    std::thread::sleep(Duration::from_millis(2500));
    loopback(true);
    let taken = other_takes(&other, &key, &lease, acquired + Duration::from_secs(9));
    assert_eq!(taken, None, "the outage cost the holder its lock");
    lease.release().expect("the lock outlived the outage");
}

/// An outage longer than the server tolerates ends the session and frees the lock: the holder
/// must have stopped believing before that (it relies on an advisory lease for at most the
/// server's dead-peer time after its last call, not its whole TTL).
#[test]
fn a_long_outage_ends_the_belief_before_the_lock() {
    if !in_private_network("a_long_outage_ends_the_belief_before_the_lock") {
        return;
    }
    let server = PostgresServer::start();
    let (holder, other) = (client(&server), client(&server));
    let key = unique_key("partition-long");
    let lease = holder.try_acquire(&key, TTL).unwrap();
    std::thread::sleep(Duration::from_secs(1));
    loopback(false);
    std::thread::sleep(Duration::from_secs(13));
    loopback(true);
    let taken = other_takes(
        &other,
        &key,
        &lease,
        Instant::now() + Duration::from_secs(15),
    );
    assert!(
        taken.is_some(),
        "the server never freed the lock of a silent session"
    );
    assert!(lease.remaining().is_zero());
}
