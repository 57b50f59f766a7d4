//! Runs the conformance suite against a tiny in-process backend, so a mistake in the suite itself shows
//! up here, next to the suite, rather than as a mysterious failure in every real backend.

use leasehold_core::{
    conformance, wait, Client, Error, Key, KeyInfo, LockBackend, RawLease, Result, Token, Ttl,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The holder (token, expiry) if any, and the last fence.
type Record = (Option<(Token, Instant)>, u64);

#[derive(Debug, Default)]
struct Memory {
    keys: Mutex<HashMap<Vec<u8>, Record>>,
}

impl LockBackend for Memory {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn try_acquire(&self, key: &Key, ttl: Ttl) -> Result<RawLease> {
        let sent = Instant::now();
        let mut keys = self.keys.lock().unwrap();
        let entry = keys.entry(key.as_bytes().to_vec()).or_default();
        if matches!(entry.0, Some((_, exp)) if exp > sent) {
            return Err(wait::held_elsewhere(key));
        }
        let token = Token::generate()?;
        entry.1 += 1;
        entry.0 = Some((token, sent + ttl.as_duration()));
        Ok(RawLease::new(key.clone(), token, entry.1, ttl, sent))
    }

    fn release(&self, lease: &mut RawLease) -> Result<()> {
        let mut keys = self.keys.lock().unwrap();
        match keys.get_mut(lease.key().as_bytes()) {
            Some(e) if matches!(e.0, Some((t, exp)) if t == lease.token() && exp > Instant::now()) =>
            {
                e.0 = None;
                Ok(())
            }
            _ => Err(Error::Lost("not ours".into())),
        }
    }

    fn extend(&self, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        let sent = Instant::now();
        let mut keys = self.keys.lock().unwrap();
        match keys.get_mut(lease.key().as_bytes()) {
            Some(e) if matches!(e.0, Some((t, exp)) if t == lease.token() && exp > sent) => {
                e.0 = Some((lease.token(), sent + ttl.as_duration()));
                lease.renewed(ttl, sent);
                Ok(())
            }
            _ => Err(Error::Lost("not ours".into())),
        }
    }

    fn inspect(&self, key: &Key) -> Result<KeyInfo> {
        let keys = self.keys.lock().unwrap();
        let now = Instant::now();
        Ok(match keys.get(key.as_bytes()) {
            Some((Some((_, exp)), fence)) if *exp > now => {
                KeyInfo::new(true, Some(*exp - now), Some(*fence))
            }
            Some((_, fence)) => KeyInfo::new(false, None, Some(*fence)),
            None => KeyInfo::new(false, None, None),
        })
    }
}

#[test]
fn the_suite_passes_on_a_correct_backend() {
    let shared: Arc<dyn LockBackend> = Arc::new(Memory::default());
    conformance::run(&|| Client::from_arc(shared.clone()));
    conformance::mutual_exclusion(&Client::from_arc(shared.clone()), 8, 200);
}

#[test]
fn keep_alive_loss_is_never_silent() {
    let memory = Arc::new(Memory::default());
    let client = Client::from_arc(memory.clone());
    let lease = client
        .try_acquire("ka-lost", Duration::from_millis(300))
        .unwrap();
    lease.keep_alive(true).unwrap();
    std::thread::sleep(Duration::from_millis(250));
    assert!(lease.is_held());
    // Delete the key underneath, as an operator or a failover would.
    memory.keys.lock().unwrap().clear();
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(lease.remaining(), Duration::ZERO);
    assert!(matches!(lease.keep_alive_error(), Some(Error::Lost(_))));
    assert!(matches!(lease.release(), Err(Error::Lost(_))));
    let stats = client.stats();
    assert!(stats.keepalive_renewals >= 1);
    assert_eq!(stats.keepalive_failures, 1);
    assert_eq!(stats.releases_lost, 1);
    assert_eq!(
        stats.expired, 0,
        "deleted underneath is a loss, not an expiry"
    );
}
