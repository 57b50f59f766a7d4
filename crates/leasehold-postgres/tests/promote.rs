//! Promote and demote as the server sees them, beyond core's conformance checks: what a promoted
//! or demoted lease leaves in `pg_locks` (advisory) or in the tables (table mode), and that an
//! advisory demote is granted at once even while a writer waits in the server's lock queue.

use leasehold_core::{Client, Config, ErrorKind, LeaseKind};
use leasehold_postgres::{lock_id, PostgresBackend};
use leasehold_testkit::{unique_key, PostgresServer};
use postgres::NoTls;
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(30);
const ADVISORY: &str = "lock=advisory";
const TABLE: &str = "lock=table&table=promote_locks";

fn client(query: &str) -> Client {
    let url = PostgresServer::shared().url_with(query);
    Client::new(PostgresBackend::connect(&Config::parse(&url).expect("url")).expect("connect"))
}

fn admin() -> postgres::Client {
    postgres::Client::connect(&PostgresServer::shared().url(), NoTls).expect("admin session")
}

fn kind<T: std::fmt::Debug>(r: leasehold_core::Result<T>) -> ErrorKind {
    r.expect_err("expected an error").kind()
}

/// The granted advisory lock modes of `key`, sorted: `ExclusiveLock` and `ShareLock` entries.
fn advisory_modes(db: &mut postgres::Client, key: &str) -> Vec<String> {
    let id = lock_id(format!("leasehold:{key}").as_bytes()) as u64;
    let rows = db
        .query(
            &format!(
                "SELECT mode FROM pg_locks WHERE locktype = 'advisory' AND granted \
                 AND classid = {} AND objid = {} AND objsubid = 1 ORDER BY mode",
                id >> 32,
                id & 0xffff_ffff
            ),
            &[],
        )
        .unwrap();
    rows.iter().map(|r| r.get::<_, String>(0)).collect()
}

#[test]
fn advisory_promote_leaves_only_the_exclusive_lock_and_demote_only_the_share() {
    let c = client(ADVISORY);
    let mut db = admin();
    let key = unique_key("adv-promote");
    let mut lease = c.try_acquire_shared(&key, LONG).unwrap();
    assert_eq!(advisory_modes(&mut db, &key), ["ShareLock"]);
    lease.promote(Duration::ZERO).unwrap();
    assert_eq!(advisory_modes(&mut db, &key), ["ExclusiveLock"]);
    lease.extend(LONG).unwrap();
    lease.demote().unwrap();
    assert_eq!(advisory_modes(&mut db, &key), ["ShareLock"]);
    lease.extend(LONG).unwrap();
    lease.release().unwrap();
    assert!(
        advisory_modes(&mut db, &key).is_empty(),
        "the share is freed"
    );
    c.try_acquire(&key, LONG).unwrap().release().unwrap();

    // A promoted lease's release frees the key entirely.
    let mut lease = c.try_acquire_shared(&key, LONG).unwrap();
    lease.promote(Duration::ZERO).unwrap();
    lease.release().unwrap();
    assert!(advisory_modes(&mut db, &key).is_empty());
}

#[test]
fn advisory_demote_is_granted_at_once_while_a_writer_waits() {
    let (a, b) = (client(ADVISORY), client(ADVISORY));
    let mut db = admin();
    let key = unique_key("adv-demote-queue");
    let mut w = a.try_acquire(&key, LONG).unwrap();
    let fence = w.fence();
    let k = key.clone();
    let writer = std::thread::spawn(move || {
        let lease = b.acquire(&k, LONG, Duration::from_secs(20)).unwrap();
        let fence = lease.fence();
        lease.release().unwrap();
        fence
    });
    // Until the writer's request shows in the lock queue.
    let id = lock_id(format!("leasehold:{key}").as_bytes()) as u64;
    let start = Instant::now();
    loop {
        let waiting: i64 = db
            .query_one(
                &format!(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted \
                     AND classid = {} AND objid = {} AND objsubid = 1",
                    id >> 32,
                    id & 0xffff_ffff
                ),
                &[],
            )
            .unwrap()
            .get(0);
        if waiting > 0 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the writer never queued"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let start = Instant::now();
    w.demote().expect("demote while a writer waits");
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(w.kind(), LeaseKind::Shared);
    assert_eq!(advisory_modes(&mut db, &key), ["ShareLock"]);
    // The writer still waits for the demoted share; it gets in once that is released.
    std::thread::sleep(Duration::from_millis(200));
    assert!(!writer.is_finished());
    w.release().unwrap();
    assert!(writer.join().unwrap() > fence);
}

#[test]
fn table_promote_and_demote_keep_the_tables_consistent() {
    let (a, b) = (client(TABLE), client(TABLE));
    let mut db = admin();
    let key = unique_key("table-promote");
    let shares = |db: &mut postgres::Client| -> i64 {
        db.query_one(
            "SELECT count(*) FROM promote_locks_shares \
             WHERE key = convert_to('leasehold:' || $1, 'UTF8')",
            &[&key],
        )
        .unwrap()
        .get(0)
    };
    let mut lease = a.try_acquire_shared(&key, LONG).unwrap();
    let token = lease.token().as_str().to_owned();
    lease.promote(Duration::ZERO).unwrap();
    assert_eq!(shares(&mut db), 0, "no share is left behind a promote");
    let info = a.inspect(&key).unwrap();
    assert_eq!(
        (info.held, info.holders, info.shared),
        (true, Some(1), Some(false))
    );
    assert_eq!(info.fence, Some(lease.fence()));
    // A restore sees the new kind.
    let restored = b.restore(&key, &token).unwrap();
    assert_eq!(restored.kind(), LeaseKind::Exclusive);
    assert_eq!(restored.fence(), lease.fence());
    // Detached, not dropped: dropping would release the key under the lease.
    restored.forget();

    lease.demote().unwrap();
    assert_eq!(shares(&mut db), 1);
    let info = a.inspect(&key).unwrap();
    assert_eq!(
        (info.held, info.holders, info.shared),
        (true, Some(1), Some(true))
    );
    let restored = b.restore(&key, &token).unwrap();
    assert_eq!(restored.kind(), LeaseKind::Shared);
    restored.forget();
    assert_eq!(kind(b.try_acquire(&key, LONG)), ErrorKind::NotAcquired);
    lease.extend(LONG).unwrap();
    let fence = lease.fence();
    lease.release().unwrap();
    assert_eq!(
        shares(&mut db),
        0,
        "a demoted lease's release frees its share"
    );
    let next = b
        .try_acquire(&key, LONG)
        .expect("free once the demoted lease is released");
    assert!(next.fence() > fence);
    next.release().unwrap();
}

#[test]
fn promote_of_a_force_released_lease_is_lost() {
    for query in [ADVISORY, TABLE] {
        let c = client(query);
        let key = unique_key("promote-forced");
        let mut lease = c.try_acquire_shared(&key, LONG).unwrap();
        assert!(c.force_release(&key).unwrap());
        assert_eq!(
            kind(lease.promote(Duration::ZERO)),
            ErrorKind::Lost,
            "{query}"
        );
        let mut w = c.try_acquire(&key, LONG).unwrap();
        assert!(c.force_release(&key).unwrap());
        assert_eq!(kind(w.demote()), ErrorKind::Lost, "{query}");
    }
}
