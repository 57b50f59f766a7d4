//! Faults a MySQL/MariaDB deployment meets: the server killed (-9) and restarted, the fence table
//! lost, and a holder's session killed by an operator. Each test starts a server of its own.

use leasehold_core::{Client, Config, ErrorKind};
use leasehold_mysql::{lock_name, MysqlBackend};
use leasehold_testkit::{
    in_child, unique_key, wait_until, MariaDbServer, MARIADB_PASSWORD, MARIADB_USER,
};
use mysql::prelude::Queryable;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(60);

fn client(server: &MariaDbServer, query: &str) -> Client {
    let url = server.url_with(&format!(
        "{query}&connect_timeout_ms=1000&io_timeout_ms=2000"
    ));
    Client::new(MysqlBackend::connect(&Config::parse(&url).unwrap()).expect("connect"))
}

/// A plain session of the test account, for what an operator would type.
fn admin(server: &MariaDbServer) -> mysql::Conn {
    let opts = mysql::OptsBuilder::new()
        .ip_or_hostname(Some("127.0.0.1"))
        .tcp_port(server.port())
        .user(Some(MARIADB_USER))
        .pass(Some(MARIADB_PASSWORD))
        .db_name(Some("leasehold"))
        .prefer_socket(false);
    mysql::Conn::new(opts).expect("admin session")
}

/// Fences rise across a crash (kill -9) and restart of the server, in both modes, on the same
/// clients (their pooled sessions died with the server) and on new ones; and they still rise when
/// the tables that hold them are emptied (a restore from an old backup, a failover to a replica
/// that lagged): the clock term takes over.
#[test]
fn fences_rise_across_a_crash_and_a_lost_table() {
    let mut server = MariaDbServer::start();
    let modes = ["lock=named", "lock=table&table=crash_locks"];
    let clients: Vec<Client> = modes.iter().map(|m| client(&server, m)).collect();
    let key = unique_key("crash");
    let mut last = Vec::new();
    for c in &clients {
        let mut fence = 0;
        for _ in 0..5 {
            let lease = c.try_acquire(&key, LONG).unwrap();
            assert!(lease.fence() > fence);
            fence = lease.fence();
            lease.release().unwrap();
        }
        last.push(fence);
    }
    // A named lease held through the crash is lost with its session.
    let held = clients[0]
        .try_acquire(unique_key("held-through-crash"), LONG)
        .unwrap();

    server.kill();
    server.start_again();

    assert_eq!(held.release().unwrap_err().kind(), ErrorKind::Lost);
    for (i, c) in clients.iter().enumerate() {
        let lease = c
            .acquire(&key, LONG, Duration::from_secs(5))
            .expect("the same client recovers after the restart");
        assert!(
            lease.fence() > last[i],
            "{}: fence {} after {}",
            modes[i],
            lease.fence(),
            last[i]
        );
        last[i] = lease.fence();
        lease.release().unwrap();
        let fresh = client(&server, modes[i]).try_acquire(&key, LONG).unwrap();
        assert!(fresh.fence() > last[i]);
        last[i] = fresh.fence();
        fresh.release().unwrap();
    }

    let mut admin = admin(&server);
    admin
        .query_drop("DELETE FROM leasehold_locks_fences; DELETE FROM crash_locks")
        .unwrap();
    for (i, c) in clients.iter().enumerate() {
        let lease = c.try_acquire(&key, LONG).unwrap();
        assert!(
            lease.fence() > last[i],
            "{}: fence {} after {} with the table emptied",
            modes[i],
            lease.fence(),
            last[i]
        );
        lease.release().unwrap();
    }
}

/// An operator's `KILL CONNECTION` of a named-mode holder's session: the holder learns `Lost` at
/// its next extend or release, and another client takes the key at once.
#[test]
fn killed_holder_session_loses_its_lease() {
    let server = MariaDbServer::start();
    let (a, b) = (client(&server, "lock=named"), client(&server, "lock=named"));
    let mut admin = admin(&server);
    let holder_of = |admin: &mut mysql::Conn, key: &str| -> u64 {
        let name = lock_name(format!("leasehold:{key}").as_bytes());
        admin
            .query_first::<Option<u64>, _>(format!("SELECT IS_USED_LOCK('{name}')"))
            .unwrap()
            .flatten()
            .expect("the key's lock is held")
    };

    for op in ["extend", "release"] {
        let key = unique_key("killed");
        let mut lease = a.try_acquire(&key, LONG).unwrap();
        assert_eq!(
            b.try_acquire(&key, LONG).unwrap_err().kind(),
            ErrorKind::NotAcquired
        );
        let session = holder_of(&mut admin, &key);
        admin
            .query_drop(format!("KILL CONNECTION {session}"))
            .unwrap();
        // The server frees the lock as the killed session ends.
        let mut taken = None;
        assert!(
            wait_until(Duration::from_secs(5), || {
                taken = b.try_acquire(&key, LONG).ok();
                taken.is_some()
            }),
            "another client takes the key of a killed session"
        );
        let taker = taken.unwrap();
        let err = match op {
            "extend" => lease.extend(LONG).unwrap_err(),
            _ => lease.release_in_place().unwrap_err(),
        };
        assert_eq!(err.kind(), ErrorKind::Lost, "{op}: {err}");
        assert!(!err.to_string().contains(MARIADB_PASSWORD), "{err}");
        assert_eq!(lease.remaining(), Duration::ZERO);
        assert!(taker.fence() > lease.fence());
        assert!(
            b.inspect(&key).unwrap().held,
            "the new holder keeps the key"
        );
        taker.release().unwrap();
    }
}

/// A holder that stays silent past its TTL is taken over at the TTL (its session is ended by the
/// next acquirer), and learns `Lost`.
#[test]
fn expired_named_holder_is_ended_by_the_next_acquirer() {
    let server = MariaDbServer::shared();
    let (a, b) = (client(server, "lock=named"), client(server, "lock=named"));
    let key = unique_key("silent");
    let stale = a.try_acquire(&key, Duration::from_millis(200)).unwrap();
    assert_eq!(
        b.try_acquire(&key, LONG).unwrap_err().kind(),
        ErrorKind::NotAcquired
    );
    let start = std::time::Instant::now();
    let taker = b.acquire(&key, LONG, Duration::from_secs(5)).unwrap();
    let waited = start.elapsed();
    assert!(
        waited < Duration::from_secs(2),
        "taken over {waited:?} after"
    );
    assert!(taker.fence() > stale.fence());
    assert_eq!(stale.release().unwrap_err().kind(), ErrorKind::Lost);
    taker.release().unwrap();
}

/// The SQL that the README gives takes the same named lock as Leasehold, so a SQL job and Leasehold
/// exclude each other.
#[test]
fn a_sql_job_takes_the_same_named_lock() {
    let server = MariaDbServer::shared();
    let c = client(server, "lock=named");
    let mut admin = admin(server);
    let key = unique_key("report");
    let sql_name: String = admin
        .query_first(format!(
            "SELECT CONCAT('lh:', LEFT(SHA2(CONCAT('leasehold:', '{key}'), 256), 40))"
        ))
        .unwrap()
        .unwrap();
    assert_eq!(sql_name, lock_name(format!("leasehold:{key}").as_bytes()));
    let got: Option<i64> = admin
        .query_first(format!("SELECT GET_LOCK('{sql_name}', 0)"))
        .unwrap()
        .flatten();
    assert_eq!(got, Some(1));
    assert_eq!(
        c.try_acquire(&key, LONG).unwrap_err().kind(),
        ErrorKind::NotAcquired
    );
    admin
        .query_drop(format!("DO RELEASE_LOCK('{sql_name}')"))
        .unwrap();
    let lease = c.try_acquire(&key, Duration::from_millis(100)).unwrap();
    let got: Option<i64> = admin
        .query_first(format!("SELECT GET_LOCK('{sql_name}', 0)"))
        .unwrap()
        .flatten();
    assert_eq!(got, Some(0), "the SQL job sees Leasehold's lock");
    lease.release().unwrap();
}

/// php-fpm forks its workers after the client may have been created: the child must get sessions of
/// its own (and a watchdog of its own), and must neither use nor close the parent's (closing one
/// would free the parent's named lock).
#[test]
fn client_works_in_a_forked_child_without_touching_the_parents_sessions() {
    let server = MariaDbServer::shared();
    for query in ["lock=named", "lock=table&table=fork_locks"] {
        let c = client(server, query);
        let key = unique_key("fork-parent");
        let lease = c.try_acquire(&key, LONG).unwrap();
        c.try_acquire(unique_key("warm"), LONG)
            .unwrap()
            .release()
            .unwrap();
        let child_key = unique_key("fork-child");
        // The child takes the parent's lease out of `held`; the parent's copy stays put.
        let mut held = Some(lease);
        let status = in_child(Duration::from_secs(30), || {
            let Some(mut inherited) = held.take() else {
                return false;
            };
            let own = c
                .try_acquire(&child_key, LONG)
                .is_ok_and(|l| l.release().is_ok());
            let parents = c.try_acquire(&key, LONG).map(|_| ()).map_err(|e| e.kind());
            // The child's copy of the parent's lease: core refuses to release or extend it.
            let extend = inherited.extend(LONG).map_err(|e| e.kind());
            let release = inherited.release_in_place().map_err(|e| e.kind());
            let still_held = c.try_acquire(&key, LONG).is_err();
            own && parents == Err(ErrorKind::NotAcquired)
                && extend == Err(ErrorKind::InvalidArgument)
                && release == Err(ErrorKind::InvalidArgument)
                && still_held
        });
        assert_ne!(status, None, "{query}: the forked child hung");
        assert_eq!(status, Some(0), "{query}: the forked child failed");
        let mut lease = held.expect("the parent keeps its lease");
        assert_eq!(
            client(server, query)
                .try_acquire(&key, LONG)
                .unwrap_err()
                .kind(),
            ErrorKind::NotAcquired
        );
        lease
            .extend(LONG)
            .expect("the parent's lease survives the child");
        lease.release().unwrap();
        c.try_acquire(&child_key, LONG).unwrap().release().unwrap();
    }
}

/// A lease's session gets the server's idle limit `wait_timeout` = TTL + 1 s, and a pooled session
/// gets the server's default back, both after a release and after an attempt that found the lock
/// taken (its batch set the limit before it knew): otherwise the server would end idle pooled
/// sessions a second past the TTL, logging each as an aborted connection. A session left idle past
/// its limit on purpose shows that the log would say so. The row of a released lease names no
/// holder, and the fence the acquire returned is the row's; a lease released after its expiry is
/// `Lost`, its lock and row freed all the same.
#[test]
fn named_sessions_idle_in_the_pool_with_the_servers_limit() {
    let server = MariaDbServer::start();
    let c = client(&server, "lock=named&pool_size=1");
    let mut admin = admin(&server);
    let short = Duration::from_secs(1);

    // An attempt that finds the lock held (by a SQL job) gets nothing and writes nothing.
    let key = unique_key("idle-taken");
    let name = lock_name(format!("leasehold:{key}").as_bytes());
    let got: Option<i64> = admin
        .query_first(format!("SELECT GET_LOCK('{name}', 0)"))
        .unwrap()
        .flatten();
    assert_eq!(got, Some(1));
    assert_eq!(
        c.try_acquire(&key, short).unwrap_err().kind(),
        ErrorKind::NotAcquired
    );
    let rows: Option<i64> = admin
        .query_first(format!(
            "SELECT COUNT(*) FROM leasehold_locks_fences WHERE name = '{name}'"
        ))
        .unwrap();
    assert_eq!(rows, Some(0), "a refused attempt writes no row");
    idle_past_the_lease_limit(&server, "after a refused attempt");
    admin
        .query_drop(format!("DO RELEASE_LOCK('{name}')"))
        .unwrap();

    // A granted lease: its fence is the row's; released, the row names nobody.
    let lease = c.try_acquire(&key, short).unwrap();
    let row: Option<(u64, u64)> = admin
        .query_first(format!(
            "SELECT fence, holder FROM leasehold_locks_fences WHERE name = '{name}'"
        ))
        .unwrap();
    let (fence, holder) = row.expect("the lease's row");
    assert_eq!(fence, lease.fence());
    let user: Option<u64> = admin
        .query_first(format!("SELECT IS_USED_LOCK('{name}')"))
        .unwrap()
        .flatten();
    assert_eq!(Some(holder), user, "the row names the lock's session");
    lease.release().unwrap();
    let row: Option<(u64, i64)> = admin
        .query_first(format!(
            "SELECT holder, expires_us <= UNIX_TIMESTAMP() * 1000000 + MICROSECOND(NOW(6)) \
             FROM leasehold_locks_fences WHERE name = '{name}'"
        ))
        .unwrap();
    assert_eq!(
        row,
        Some((0, 1)),
        "a released row names nobody and has ended"
    );

    // A lease that expired with nobody taking it over: its release says Lost, and frees the lock
    // and the row all the same.
    let expired = c.try_acquire(&key, Duration::from_millis(100)).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(expired.release().unwrap_err().kind(), ErrorKind::Lost);
    let free: Option<i64> = admin
        .query_first(format!("SELECT IS_FREE_LOCK('{name}')"))
        .unwrap()
        .flatten();
    assert_eq!(free, Some(1), "the expired lease's release frees the lock");
    let holder: Option<u64> = admin
        .query_first(format!(
            "SELECT holder FROM leasehold_locks_fences WHERE name = '{name}'"
        ))
        .unwrap();
    assert_eq!(holder, Some(0));
    idle_past_the_lease_limit(&server, "after a release");

    // The one pooled session the server kept serves the next lease.
    let again = c.try_acquire(&key, short).unwrap();
    assert!(again.fence() > fence);
    again.release().unwrap();
}

/// Leaves the client's pooled session idle past a 1 s lease's limit (2 s) beside a session of the
/// test account whose limit is 1 s, and checks that the server ended (and logged) that one only.
fn idle_past_the_lease_limit(server: &MariaDbServer, when: &str) {
    let aborted = || {
        server
            .log()
            .unwrap_or_default()
            .matches("Aborted connection")
            .count()
    };
    let before = aborted();
    let mut control = admin(server);
    control.query_drop("SET SESSION wait_timeout = 1").unwrap();
    std::thread::sleep(Duration::from_millis(3500));
    assert!(control.query_drop("DO 1").is_err(), "the server ended it");
    assert!(
        wait_until(Duration::from_secs(5), || aborted() > before),
        "the server logs a session it ends for idling"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        aborted(),
        before + 1,
        "{when}: the pooled session kept a lease's limit: {:?}",
        server.log()
    );
}
