//! The server goes away mid-test: calls give `Unavailable` within the timeouts, and the same client
//! recovers once the server is back. Uses a server of its own (it stops it).

use leasehold_core::{Client, Config, ErrorKind};
use leasehold_postgres::PostgresBackend;
use leasehold_testkit::{unique_key, wait_until, PostgresServer};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);
/// connect_timeout_ms + io_timeout_ms below, plus generous slack for a loaded CI machine.
const BOUND: Duration = Duration::from_millis(500 + 500 + 3000);

fn client(server: &PostgresServer, query: &str) -> Client {
    let url = server.url_with(&format!("{query}&connect_timeout_ms=500&io_timeout_ms=500"));
    Client::new(PostgresBackend::connect(&Config::parse(&url).unwrap()).unwrap())
}

fn timed<T: std::fmt::Debug>(
    what: &str,
    f: impl FnOnce() -> leasehold_core::Result<T>,
) -> ErrorKind {
    let start = Instant::now();
    let err = f().expect_err(what);
    let took = start.elapsed();
    let kind = err.kind();
    eprintln!("{what}: {kind} after {took:?}: {err}");
    assert!(took < BOUND, "{what} took {took:?}");
    kind
}

#[test]
fn server_restart_gives_unavailable_then_the_same_client_recovers() {
    let mut server = PostgresServer::start();
    let advisory = client(&server, "lock=advisory");
    let table = client(&server, "lock=table&table=restart_locks");
    let (held_a, held_t) = (unique_key("restart-a"), unique_key("restart-t"));
    let mut lease_a = advisory.try_acquire(&held_a, LONG).unwrap();
    let mut lease_t = table.try_acquire(&held_t, LONG).unwrap();
    let fence_t = lease_t.fence();
    // Warm both pools with idle sessions that the restart will make stale.
    for c in [&advisory, &table] {
        let (x, y) = (
            c.try_acquire(unique_key("w1"), LONG).unwrap(),
            c.try_acquire(unique_key("w2"), LONG).unwrap(),
        );
        x.release().unwrap();
        y.release().unwrap();
    }

    server.stop();
    for (name, c) in [("advisory", &advisory), ("table", &table)] {
        let key = unique_key("down");
        assert_eq!(
            timed(&format!("{name} try_acquire while down"), || c
                .try_acquire(&key, LONG)),
            ErrorKind::Unavailable
        );
        assert_eq!(
            timed(&format!("{name} acquire while down"), || c.acquire(
                &key,
                LONG,
                Duration::from_millis(300)
            )),
            ErrorKind::Unavailable
        );
        assert_eq!(
            timed(&format!("{name} inspect while down"), || c.inspect(&key)),
            ErrorKind::Unavailable
        );
    }
    // The advisory lease's session died with the server: the lock is gone, and extend says so.
    assert_eq!(
        timed("advisory extend while down", || lease_a.extend(LONG)),
        ErrorKind::Lost
    );
    // The table lease's row is on disk: while the server is down its extend is only Unavailable.
    assert_eq!(
        timed("table extend while down", || lease_t.extend(LONG)),
        ErrorKind::Unavailable
    );

    server.start_again();
    for (name, c) in [("advisory", &advisory), ("table", &table)] {
        let key = unique_key("back");
        let lease = c
            .try_acquire(&key, LONG)
            .unwrap_or_else(|e| panic!("{name} after restart: {e}"));
        assert!(c.inspect(&key).unwrap().held);
        lease.release().unwrap();
        // Waiting works again too.
        c.acquire(&key, LONG, Duration::from_secs(5))
            .unwrap()
            .release()
            .unwrap();
    }
    // The advisory key is free again; the table key still belongs to its lease, which can go on.
    advisory
        .try_acquire(&held_a, LONG)
        .expect("advisory key freed by the restart")
        .release()
        .unwrap();
    assert_eq!(
        table.try_acquire(&held_t, LONG).unwrap_err().kind(),
        ErrorKind::NotAcquired
    );
    lease_t
        .extend(LONG)
        .expect("table lease survives a restart");
    lease_t.release().unwrap();
    let next = table.try_acquire(&held_t, LONG).unwrap();
    assert!(
        next.fence() > fence_t,
        "fences never go backwards across a restart"
    );
    next.release().unwrap();

    // A quick restart while the pools hold several idle sessions: the first call finds them all
    // stale and still succeeds.
    for c in [&advisory, &table] {
        let held: Vec<_> = (0..4)
            .map(|i| {
                c.try_acquire(unique_key(&format!("idle{i}")), LONG)
                    .unwrap()
            })
            .collect();
        drop(held);
    }
    server.restart();
    for (name, c) in [("advisory", &advisory), ("table", &table)] {
        let lease = c
            .try_acquire(unique_key("quick"), LONG)
            .unwrap_or_else(|e| panic!("{name}, first call after a quick restart: {e}"));
        lease.release().unwrap();
    }
    assert!(wait_until(Duration::from_secs(1), || true));
}
