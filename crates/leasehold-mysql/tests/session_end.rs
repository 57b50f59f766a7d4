//! A held named-mode lease whose session someone else ends (an operator's `KILL CONNECTION`, a
//! server shutdown or crash): the holder stops relying on it as soon as the session's close
//! reaches its socket, with no call of its own, and so before another client can be granted the
//! key. A session that is merely idle keeps its lease.

use leasehold_core::{Client, Config, ErrorKind, Lease};
use leasehold_mysql::{lock_name, MysqlBackend};
use leasehold_testkit::{unique_key, MariaDbServer, MARIADB_PASSWORD, MARIADB_USER};
use mysql::prelude::Queryable;
use std::time::{Duration, Instant};

/// How soon after the kill the holder must have stopped: the close crosses loopback in
/// microseconds, so this is only slack for a loaded machine. Without the session watch the
/// holder believes for its whole TTL, or (keep-alive on) until its next renewal, a second here.
const SEEN_WITHIN: Duration = Duration::from_millis(500);

fn client(server: &MariaDbServer) -> Client {
    let url = server.url_with("lock=named&connect_timeout_ms=1000&io_timeout_ms=2000");
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

/// The TTL of a test lease: long when nothing renews it, three seconds under keep-alive (a
/// renewal every second, so the idle phase spans renewals).
fn ttl(keep_alive: bool) -> Duration {
    if keep_alive {
        Duration::from_secs(3)
    } else {
        Duration::from_secs(30)
    }
}

/// Reads the holder's view for `idle` without any call on the lease: it must hold throughout
/// (no false loss from the watch, across keep-alive renewals too). Returns how many reads.
fn stays_held(lease: &Lease, idle: Duration) -> u32 {
    let until = Instant::now() + idle;
    let mut reads = 0;
    while Instant::now() < until {
        assert!(
            lease.remaining() > Duration::ZERO,
            "an idle session's lease was dropped"
        );
        lease
            .checkpoint(Duration::ZERO)
            .expect("an idle session's lease passes its checkpoint");
        reads += 1;
        std::thread::sleep(Duration::from_micros(300));
    }
    reads
}

/// Waits, reading `remaining()` only, until the holder stops relying on the lease; how long
/// after `from` that was (`None` if not within a few times [`SEEN_WITHIN`]).
fn stops_relying(lease: &Lease, from: Instant) -> Option<Duration> {
    while from.elapsed() < SEEN_WITHIN * 4 {
        if lease.remaining().is_zero() {
            return Some(from.elapsed());
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    None
}

/// After the end: `Lost` everywhere, and it stays so (keep-alive cannot bring it back).
fn lost_for_good(lease: &mut Lease) {
    assert_eq!(
        lease.checkpoint(Duration::ZERO).unwrap_err().kind(),
        ErrorKind::Lost
    );
    assert!(!lease.is_held());
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(lease.remaining(), Duration::ZERO);
    assert_ne!(
        lease.extend(Duration::from_secs(30)).map_err(|e| e.kind()),
        Ok(())
    );
    assert_eq!(lease.remaining(), Duration::ZERO);
}

#[test]
fn named_holder_stops_relying_on_a_session_an_operator_killed() {
    let server = MariaDbServer::shared();
    let (holder, other) = (client(server), client(server));
    let mut admin = admin(server);
    for keep_alive in [false, true] {
        let key = unique_key("killed");
        let mut lease = holder.try_acquire(&key, ttl(keep_alive)).unwrap();
        lease.keep_alive(keep_alive).unwrap();
        let reads = stays_held(&lease, Duration::from_millis(1500));
        let name = lock_name(format!("leasehold:{key}").as_bytes());
        let session: u64 = admin
            .query_first::<Option<u64>, _>(format!("SELECT IS_USED_LOCK('{name}')"))
            .unwrap()
            .flatten()
            .expect("the key's lock is held");
        let (seen, taken) = std::thread::scope(|s| {
            // Another client tries for the key as fast as it can: it gets it the moment the
            // killed session's end frees it.
            let contender = s.spawn(|| {
                let until = Instant::now() + Duration::from_secs(20);
                loop {
                    match other.try_acquire(&key, Duration::from_secs(30)) {
                        Ok(taken) => {
                            // What the holder believes at that moment, with no call of its own.
                            let believed = lease.remaining();
                            return (taken, believed);
                        }
                        Err(e) if e.kind() == ErrorKind::NotAcquired => {}
                        Err(e) => panic!("contender: {e}"),
                    }
                    assert!(Instant::now() < until, "the key is freed by the kill");
                }
            });
            std::thread::sleep(Duration::from_millis(100));
            admin
                .query_drop(format!("KILL CONNECTION {session}"))
                .unwrap();
            let killed = Instant::now();
            let seen = stops_relying(&lease, killed);
            let (taken, believed) = contender.join().unwrap();
            assert_eq!(
                believed,
                Duration::ZERO,
                "keep-alive {keep_alive}: the holder still relied on its lease when another \
                 client was granted the key"
            );
            (seen, taken)
        });
        eprintln!(
            "keep-alive {keep_alive}: {reads} reads while idle held; after the kill the holder \
             stopped relying on the lease in {seen:?}"
        );
        let seen = seen.expect("the holder stopped relying on its lease");
        assert!(seen < SEEN_WITHIN, "keep-alive {keep_alive}: took {seen:?}");
        assert!(taken.fence() > lease.fence());
        lost_for_good(&mut lease);
        taken.release().unwrap();
        holder
            .try_acquire(&key, ttl(false))
            .unwrap()
            .release()
            .unwrap();
    }
}

/// A clean shutdown (SIGTERM) and a crash (SIGKILL): every held lease, a lock or a semaphore's
/// permit, renewed or not, is dropped at once, with no call, and stays dropped once the server is
/// back and the key is someone else's.
#[test]
fn named_holders_stop_relying_when_the_server_shuts_down_or_crashes() {
    let mut server = MariaDbServer::start();
    let holder = client(&server);
    for crash in [false, true] {
        let keys = [
            unique_key("down-off"),
            unique_key("down-on"),
            unique_key("down-permit"),
        ];
        let mut leases = vec![
            holder.try_acquire(&keys[0], ttl(false)).unwrap(),
            holder.try_acquire(&keys[1], ttl(true)).unwrap(),
            holder.try_acquire_permit(&keys[2], 2, ttl(true)).unwrap(),
        ];
        leases[1].keep_alive(true).unwrap();
        leases[2].keep_alive(true).unwrap();
        for lease in &leases {
            stays_held(lease, Duration::from_millis(300));
        }
        let stopping = Instant::now();
        if crash {
            server.kill();
        } else {
            server.stop();
        }
        let stopped = stopping.elapsed();
        for (i, lease) in leases.iter().enumerate() {
            let seen = stops_relying(lease, stopping);
            eprintln!(
                "crash {crash}, lease {i}: the server was gone after {stopped:?}; the holder \
                 stopped relying on its lease {seen:?} after the shutdown began"
            );
            let seen = seen.expect("the holder stopped relying on its lease");
            assert!(seen < stopped + SEEN_WITHIN, "took {seen:?}");
        }
        server.start_again();
        let other = client(&server);
        let taken = vec![
            other
                .try_acquire(&keys[0], ttl(false))
                .expect("the key is free"),
            other
                .try_acquire(&keys[1], ttl(false))
                .expect("the key is free"),
            other
                .try_acquire_permit(&keys[2], 2, ttl(false))
                .expect("the slot is free"),
        ];
        for lease in &mut leases {
            lost_for_good(lease);
        }
        for lease in taken {
            lease.release().unwrap();
        }
    }
}
