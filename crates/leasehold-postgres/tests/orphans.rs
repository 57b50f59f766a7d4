//! Advisory locks that outlive every lease (a torture soak found the key refused for ~10 s
//! with no holder, and one overlap): the server sequences behind them, driven exactly, one test each.

mod common;

use common::{advisory_holders, scalar};

use leasehold_core::{Client, Config, ErrorKind};
use leasehold_postgres::{lock_id, PostgresBackend};
use leasehold_testkit::{unique_key, wait_until, FaultProxy, PostgresServer};
use postgres::NoTls;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(60);

fn server() -> &'static PostgresServer {
    PostgresServer::shared()
}

fn client(url: &str) -> Client {
    let config = Config::parse(url).expect("test URL");
    Client::new(PostgresBackend::connect(&config).expect("connect to the test PostgreSQL"))
}

fn admin() -> postgres::Client {
    postgres::Client::connect(&server().url(), NoTls).expect("admin session")
}

/// The server process of the session waiting for the advisory lock `id`, once there is one.
fn waiter_pid(db: &mut postgres::Client, id: i64) -> i32 {
    let sql = format!(
        "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
         AND query LIKE '%pg_advisory_lock({id})%' AND pid <> pg_backend_pid()"
    );
    let mut pid = None;
    assert!(
        wait_until(Duration::from_secs(5), || {
            pid = scalar(db, &sql).and_then(|p| p.parse().ok());
            pid.is_some()
        }),
        "the waiter never queued for the lock"
    );
    pid.unwrap()
}

/// A waiter whose `lock_timeout` fires just as the holder lets go: the server grants the lock and
/// raises 55P03 all the same (`LockErrorCleanup` keeps the grant). Driven exactly: the waiter's
/// server process is stopped, the holder releases (the grant is recorded in shared memory), the
/// lock timeout passes, the waiter resumes and handles its overdue alarm first. This is what a
/// paused server does to every waiter at once when it resumes with holders whose TTLs ran out.
/// Before the fix the refusal's session went back to the pool still holding the key, with no idle
/// timeout: refused to everyone (the soak's "stranded" refusals) until that session closed.
#[test]
fn lock_timeout_that_races_a_grant_leaves_no_lock_behind() {
    let url = server().url_with("lock=advisory&connect_timeout_ms=3000&io_timeout_ms=3000");
    let (holder, waiter, other) = (client(&url), client(&url), client(&url));
    let key = unique_key("orphan-55p03");
    let id = lock_id(format!("leasehold:{key}").as_bytes());
    let mut db = admin();

    let lease = holder.try_acquire(&key, LONG).unwrap();
    let k = key.clone();
    let wait = std::thread::spawn(move || {
        let outcome = waiter.acquire(&k, LONG, Duration::from_millis(700));
        (waiter, outcome)
    });
    let pid = waiter_pid(&mut db, id);
    // SAFETY: signalling a server process this test's server started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    lease.release().unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    let (waiter, outcome) = wait.join().unwrap();

    match outcome {
        Ok(lease) => {
            // The grant won the race after all: a real lease, which excludes everyone else.
            assert_eq!(
                other
                    .try_acquire(&key, LONG)
                    .map(|_| ())
                    .unwrap_err()
                    .kind(),
                ErrorKind::NotAcquired
            );
            lease.release().unwrap();
        }
        Err(e) => assert_eq!(e.kind(), ErrorKind::NotAcquired, "{e}"),
    }
    assert_eq!(
        advisory_holders(&mut db, id),
        0,
        "a refused waiter left the lock held"
    );
    let taken = other.try_acquire(&key, LONG).expect("the key is free");
    taken.release().unwrap();
    // The refused waiter's session is fine to use again.
    waiter.try_acquire(&key, LONG).unwrap().release().unwrap();
}

/// The advisory lock that orders table mode's waiters for one key (see `lock_id.rs`,
/// `wait_queue`): SHA-256 over the domain, the table and the prefixed key, its first 8 bytes.
fn table_queue_id(table: &str, prefixed_key: &str) -> i64 {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(b"leasehold table-mode wait queue\0");
    h.update(table.as_bytes());
    h.update(b"\0");
    h.update(prefixed_key.as_bytes());
    let digest = h.finalize();
    i64::from_be_bytes(digest[..8].try_into().unwrap())
}

/// Table mode's waiters queue on an advisory lock of their own; the same race as above on that
/// queue lock: a waiter whose `lock_timeout` fires just as the queue's head leaves is granted the
/// queue lock all the same. Before the fix its session went back to the pool holding it, so every
/// later acquire of the key saw "someone is queued" and waited behind nobody until its wait ran
/// out. Driven exactly as above: the late waiter's server process is stopped while the head is
/// granted the key and leaves the queue.
#[test]
fn table_queue_wait_that_races_a_grant_leaves_no_queue_lock_behind() {
    let table = "leasehold_orphan_queue";
    let url = server().url_with(&format!(
        "lock=table&table={table}&connect_timeout_ms=3000&io_timeout_ms=3000"
    ));
    let (holder, head, late, other) = (client(&url), client(&url), client(&url), client(&url));
    let key = unique_key("orphan-queue");
    let queue = table_queue_id(table, &format!("leasehold:{key}"));
    let mut db = admin();

    let lease = holder.try_acquire(&key, LONG).unwrap();
    let k = key.clone();
    let head_wait = std::thread::spawn(move || head.acquire(&k, LONG, Duration::from_secs(20)));
    assert!(
        wait_until(Duration::from_secs(5), || advisory_holders(&mut db, queue)
            == 1),
        "the first waiter never took the queue lock"
    );
    let k = key.clone();
    let late_wait = std::thread::spawn(move || {
        let outcome = late.acquire(&k, LONG, Duration::from_millis(700));
        (late, outcome)
    });
    let pid = waiter_pid(&mut db, queue);
    // SAFETY: signalling a server process this test's server started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    lease.release().unwrap();
    let granted = head_wait.join().unwrap().expect("the head gets the key");
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    let (late, outcome) = late_wait.join().unwrap();
    assert_eq!(
        outcome.map(|_| ()).unwrap_err().kind(),
        ErrorKind::NotAcquired,
        "the key was held throughout"
    );
    assert_eq!(
        advisory_holders(&mut db, queue),
        0,
        "a refused waiter left the queue lock held"
    );
    granted.release().unwrap();
    let started = std::time::Instant::now();
    let taken = other
        .acquire(&key, LONG, Duration::from_secs(3))
        .expect("the key is free and nobody is queued");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    taken.release().unwrap();
    late.try_acquire(&key, LONG).unwrap().release().unwrap();
}

/// An extend that times out makes the lease lost — and the lock must not be freed before the caller
/// is told so: the session is closed when the lease is released or dropped. Before the fix the
/// session was closed inside the extend, so another waiter could be granted the key while the
/// holder's `remaining()` was still positive (the caller had not heard back yet), which is the
/// torture checker's overlap. Through a black-holed proxy, so the extend gets no answer.
#[test]
fn timed_out_extend_frees_the_key_only_after_the_holder_heard() {
    let proxy = FaultProxy::start(("127.0.0.1", server().port()));
    let url = server()
        .url_with("lock=advisory&connect_timeout_ms=500&io_timeout_ms=300")
        .replace(
            &format!(":{}/", server().port()),
            &format!(":{}/", proxy.port()),
        );
    assert!(url.contains(&proxy.port().to_string()), "{url}");
    let holder = client(&url);
    let other = client(&server().url_with("lock=advisory"));
    let key = unique_key("orphan-extend");
    let id = lock_id(format!("leasehold:{key}").as_bytes());
    let mut db = admin();

    let mut lease = holder.try_acquire(&key, LONG).unwrap();
    proxy.set(leasehold_testkit::Fault::BlackHole);
    let e = lease.extend(LONG).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(!lease.is_held(), "a timed-out extend leaves the lease lost");
    // The holder has heard; the key is still held by the session it has not given back yet.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(advisory_holders(&mut db, id), 1);
    assert_eq!(
        lease.extend(LONG).unwrap_err().kind(),
        ErrorKind::Lost,
        "later calls say lost"
    );
    proxy.heal();
    assert_eq!(lease.release().unwrap_err().kind(), ErrorKind::Lost);
    // Giving it back closes the session, which frees the key at once.
    assert!(
        wait_until(Duration::from_secs(3), || advisory_holders(&mut db, id)
            == 0),
        "closing the lost lease's session frees the key"
    );
    other.try_acquire(&key, LONG).unwrap().release().unwrap();
}
