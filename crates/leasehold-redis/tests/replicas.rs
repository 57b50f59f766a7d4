//! `replicas=N` on one master with one replica: every kind of lease (exclusive, shared, permit)
//! counts an acquire or an extend only once the replica acknowledged it, and a write it did not
//! acknowledge in time is given back and reported truthfully.

mod common;

use common::client;
use leasehold_core::{Client, ErrorKind, Lease, Result};
use leasehold_testkit::{unique_key, wait_until, RedisServer};
use std::time::Duration;

const TTL: Duration = Duration::from_secs(10);

/// A master and one replica of it, the replica in sync.
fn replicated() -> (RedisServer, RedisServer) {
    let master = RedisServer::start();
    let replica = RedisServer::start_with_args(
        None,
        vec![
            "--replicaof".into(),
            "127.0.0.1".into(),
            master.port().to_string(),
        ],
    );
    // Online, and acknowledging writes (a replica that just finished its sync may not yet).
    let acking = wait_until(Duration::from_secs(20), || {
        master.command(&[b"SET", b"replicas-probe", b"1"]);
        master.command(&[b"WAIT", b"1", b"200"]).trim() == ":1"
    });
    assert!(acking, "the replica did not come online");
    (master, replica)
}

/// A client that waits for one replica, for at most 1 s (a paused replica never answers; a
/// loaded machine may keep a live one a few hundred ms).
fn waiting_client(master: &RedisServer) -> Client {
    client(
        &master.url_with(
            "replicas=1&replicas_timeout_ms=1000&connect_timeout_ms=1000&io_timeout_ms=1000",
        ),
    )
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Exclusive,
    Shared,
    Permit,
}

impl Kind {
    fn try_acquire(self, c: &Client, key: &str) -> Result<Lease> {
        match self {
            Kind::Exclusive => c.try_acquire(key, TTL),
            Kind::Shared => c.try_acquire_shared(key, TTL),
            Kind::Permit => c.try_acquire_permit(key, 1, TTL),
        }
    }

    /// What another owner would take that `self`'s lease on `key` excludes: the lock exclusively
    /// (against a share too), the semaphore's only permit.
    fn rival(self, c: &Client, key: &str) -> Result<Lease> {
        match self {
            Kind::Exclusive | Kind::Shared => c.try_acquire(key, TTL),
            Kind::Permit => c.try_acquire_permit(key, 1, TTL),
        }
    }
}

/// An extend that the replica did not acknowledge deletes the key (the library gives the
/// unconfirmed write back), so the holder must learn that it is `Lost` and see no time left:
/// another client may take the key at once.
fn extend_short_of_replicas_is_lost(kind: Kind) {
    let (master, replica) = replicated();
    let (holder, other) = (waiting_client(&master), client(&master.url()));
    let key = unique_key("replicas-extend");
    let mut lease = kind
        .try_acquire(&holder, &key)
        .unwrap_or_else(|e| panic!("{kind:?}: acquire with the replica in sync: {e}"));
    replica.pause();
    let extended = lease.extend(TTL);
    let left = lease.remaining();
    let rival = kind.rival(&other, &key);
    replica.resume();
    eprintln!(
        "{kind:?}: extend short of replicas gave {:?}; remaining {left:?}; another owner {}",
        extended.as_ref().map_err(|e| e.to_string()),
        if rival.is_ok() {
            "acquired"
        } else {
            "was refused"
        }
    );
    assert!(
        !(left > Duration::ZERO && rival.is_ok()),
        "{kind:?}: the holder reports {left:?} left while another owner holds the key"
    );
    let err = extended.expect_err("an extend the replica never acknowledged cannot succeed");
    assert_eq!(err.kind(), ErrorKind::Lost, "{kind:?}: {err}");
    assert_eq!(left, Duration::ZERO, "{kind:?}: lost, so no time left");
}

/// An acquire the replica did not acknowledge is given back and reported `Unavailable`: the key is
/// free for the next owner, as for an exclusive lock.
fn acquire_short_of_replicas_is_given_back(kind: Kind) {
    let (master, replica) = replicated();
    let (holder, other) = (waiting_client(&master), client(&master.url()));
    let key = unique_key("replicas-acquire");
    replica.pause();
    let got = kind.try_acquire(&holder, &key);
    replica.resume();
    eprintln!(
        "{kind:?}: acquire short of replicas gave {:?}",
        got.as_ref().map(|l| l.fence()).map_err(|e| e.to_string())
    );
    let err = got.expect_err("an acquire the replica never acknowledged cannot succeed");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{kind:?}: {err}");
    let next = kind
        .rival(&other, &key)
        .unwrap_or_else(|e| panic!("{kind:?}: the unconfirmed grant was not given back: {e}"));
    next.release().unwrap();
}

#[test]
fn exclusive_extend_short_of_replicas_is_lost_with_no_time_left() {
    extend_short_of_replicas_is_lost(Kind::Exclusive);
}

#[test]
fn shared_extend_short_of_replicas_is_lost_with_no_time_left() {
    extend_short_of_replicas_is_lost(Kind::Shared);
}

#[test]
fn permit_extend_short_of_replicas_is_lost_with_no_time_left() {
    extend_short_of_replicas_is_lost(Kind::Permit);
}

#[test]
fn shared_acquire_short_of_replicas_is_unavailable_and_given_back() {
    acquire_short_of_replicas_is_given_back(Kind::Shared);
}

#[test]
fn permit_acquire_short_of_replicas_is_unavailable_and_given_back() {
    acquire_short_of_replicas_is_given_back(Kind::Permit);
}

#[test]
fn exclusive_acquire_short_of_replicas_is_unavailable_and_given_back() {
    acquire_short_of_replicas_is_given_back(Kind::Exclusive);
}

/// Records wait for the replicas like leases: a put the replica acknowledged is written; one it
/// did not acknowledge in time cannot be taken back (the previous record is gone), so it is
/// `Unavailable`, which tells the caller the outcome is not known.
#[test]
fn record_puts_wait_for_the_replicas() {
    let (master, replica) = replicated();
    let writer = waiting_client(&master);
    let store = writer.backend().records().expect("redis keeps records");
    let key = leasehold_core::Key::new(unique_key("replicas-record")).unwrap();
    assert!(store.put(&key, 1, b"acknowledged", TTL).unwrap());
    replica.pause();
    let unconfirmed = store.put(&key, 2, b"unconfirmed", TTL);
    replica.resume();
    let err = unconfirmed.expect_err("a put the replica never acknowledged cannot succeed");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.to_string().contains("replicas"), "{err}");
    // A refused put is no write: there is nothing to wait for.
    assert!(!store.put(&key, 1, b"stale", TTL).unwrap());
}
