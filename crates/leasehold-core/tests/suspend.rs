//! The first version kept lease deadlines on CLOCK_MONOTONIC, which stops while the
//! host is suspended, while every backend's TTL keeps running; after waking, `remaining()` overstated
//! by the time slept. Deadlines are on the boot clock now, which counts suspend. Its own test binary:
//! the simulated suspend moves the clock for the whole process.

use leasehold_core::{
    Client, Error, Key, KeyInfo, LeaseKind, LockBackend, RawLease, Request, Result, Token, Ttl,
};
use std::time::{Duration, Instant};

/// Grants every request: only the client-side deadline is under test.
#[derive(Debug)]
struct Always;

impl LockBackend for Always {
    fn name(&self) -> &'static str {
        "always"
    }
    fn try_acquire(&self, request: &Request) -> Result<RawLease> {
        let (key, ttl) = (request.key(), request.ttl());
        Ok(RawLease::new(
            key.clone(),
            Token::generate()?,
            1,
            ttl,
            Instant::now(),
        ))
    }
    fn release(&self, _: &mut RawLease) -> Result<()> {
        Ok(())
    }
    fn extend(&self, _: &mut RawLease, _: Ttl) -> Result<()> {
        Err(Error::Lost("not under test".into()))
    }
    fn inspect(&self, _: &Key, _: LeaseKind) -> Result<KeyInfo> {
        Ok(KeyInfo::default())
    }
}

#[test]
fn remaining_counts_time_the_host_slept() {
    let client = Client::new(Always);
    let lease = client
        .try_acquire("suspend", Duration::from_secs(10))
        .unwrap();
    let raw = RawLease::new(
        Key::new("raw").unwrap(),
        Token::generate().unwrap(),
        1,
        Ttl::from_millis(10_000).unwrap(),
        Instant::now(),
    );
    assert!(lease.remaining() > Duration::from_secs(9));
    leasehold_core::clock::simulate_suspend(Duration::from_secs(8));
    for left in [lease.remaining(), raw.remaining()] {
        assert!(
            left <= Duration::from_secs(2),
            "remaining() is {left:?} after 8 s of a 10 s lease were slept away"
        );
    }
    leasehold_core::clock::simulate_suspend(Duration::from_secs(3));
    assert!(
        !lease.is_held(),
        "a lease whose TTL passed during suspend is not held"
    );
    assert_eq!(raw.remaining(), Duration::ZERO);
}
