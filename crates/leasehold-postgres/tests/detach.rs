//! Detaching an advisory lease (`Lease::forget`, C `leasehold_lease_detach`, PHP `Lock::detach()`,
//! which the Symfony and Laravel stores call on destruct): the key stays held until its TTL, as
//! documented, and the session that holds it no longer counts against `pool_size`, so a long-lived
//! client (a persistent php-fpm client) that detaches on every request keeps working.

use leasehold_core::{Client, Config, ErrorKind};
use leasehold_postgres::PostgresBackend;
use leasehold_testkit::{unique_key, wait_until, PostgresServer};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);

fn client(query: &str) -> Client {
    let url = PostgresServer::shared().url_with(query);
    let config = Config::parse(&url).expect("test URL");
    Client::new(PostgresBackend::connect(&config).expect("connect to the test PostgreSQL"))
}

#[test]
fn detached_advisory_leases_do_not_use_up_the_pool() {
    // Short timeouts: on the unfixed code the third acquire waited for a free session for the whole
    // connect + I/O timeout and then said Unavailable.
    let c = client("lock=advisory&pool_size=2&connect_timeout_ms=1000&io_timeout_ms=1000");
    let other = client("lock=advisory&connect_timeout_ms=2000&io_timeout_ms=2000");
    let keys: Vec<String> = (0..5).map(|i| unique_key(&format!("detach-{i}"))).collect();
    for (i, key) in keys.iter().enumerate() {
        let lease = c.try_acquire(key, LONG).unwrap_or_else(|e| {
            panic!(
                "acquire #{} after {i} detaches with pool_size=2: {e}",
                i + 1
            )
        });
        lease.forget();
    }
    // A shared lease and a permit hold sessions the same way.
    c.try_acquire_shared(unique_key("detach-shared"), LONG)
        .expect("shared acquire after 5 detaches")
        .forget();
    c.try_acquire_permit(unique_key("detach-permit"), 2, LONG)
        .expect("permit acquire after 6 detaches")
        .forget();
    let after = c
        .try_acquire(unique_key("detach-after"), LONG)
        .expect("acquire after 7 detaches with pool_size=2");
    after.release().expect("release");
    // Detached is not released: each key is still held until its TTL.
    for key in &keys {
        let refused = other.try_acquire(key, LONG).map(|l| l.release());
        assert_eq!(
            refused.err().map(|e| e.kind()),
            Some(ErrorKind::NotAcquired),
            "{key} was freed by detach"
        );
    }
}

#[test]
fn a_detached_advisory_lease_holds_its_key_until_its_ttl() {
    let c = client("lock=advisory&pool_size=1&connect_timeout_ms=1000&io_timeout_ms=1000");
    let other = client("lock=advisory&connect_timeout_ms=2000&io_timeout_ms=2000");
    let key = unique_key("detach-ttl");
    let ttl = Duration::from_millis(1500);
    let start = Instant::now();
    c.try_acquire(&key, ttl).expect("acquire").forget();
    // The one session of the pool is free again at once.
    let next = c
        .try_acquire(unique_key("detach-ttl-next"), LONG)
        .expect("the pool's only session is free after detach");
    next.release().expect("release");
    let held = other.try_acquire(&key, LONG).map(|l| l.release());
    assert_eq!(
        held.err().map(|e| e.kind()),
        Some(ErrorKind::NotAcquired),
        "freed before its TTL ({:?} after the acquire)",
        start.elapsed()
    );
    // The server ends the session at its idle timeout (the TTL), which frees the key.
    let mut taken = None;
    assert!(
        wait_until(Duration::from_secs(15), || {
            taken = other.try_acquire(&key, LONG).ok();
            taken.is_some()
        }),
        "the detached lease's key was never freed"
    );
    let freed = start.elapsed();
    eprintln!("detached lease (TTL {ttl:?}) freed after {freed:?}");
    assert!(freed >= ttl - Duration::from_millis(100), "{freed:?}");
    taken.unwrap().release().expect("release");
    // Later calls close the client's end of the expired session; the client keeps working.
    for _ in 0..3 {
        c.try_acquire(unique_key("detach-ttl-later"), LONG)
            .expect("acquire after the detached session ended")
            .release()
            .expect("release");
    }
}
