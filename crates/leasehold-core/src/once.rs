//! Idempotency keys: an irreversible action (a charge, an e-mail, a call to a partner's API) run at
//! most once per key, however often a job is retried.
//!
//! The steps, each under a lease on the key (so two attempts never run the action at once):
//! 1. take the lease ([`Client::once_lock`]) and read the key's record ([`Lease::once_record`]);
//! 2. done: return the recorded result without running anything;
//! 3. started but never done (its worker died, or its action failed): **not** rerun blindly. The
//!    caller gets `IncompleteAttempt` with the earlier fence and start time, unless a `recover`
//!    step checks the business result and decides (record it as done, or run again);
//! 4. nothing yet: record "started by fence F at T" ([`Lease::once_started`]), run the action under
//!    the lease (kept alive), record "done" with its result ([`Lease::once_done`]), release.
//!
//! Records are fenced: a holder that lost its lease cannot overwrite what a newer one recorded
//! (its write is refused, `Lost`), so a late "done" never hides a newer attempt and a late
//! "started" never reopens a finished one. They are kept `keep_for` after their last write, so the
//! state stays bounded. [`Client::once`] runs all of this; C and PHP get the steps themselves.

use crate::client::Client;
use crate::error::{Error, Result};
use crate::key::{Key, MAX_KEY_LEN};
use crate::lease::Lease;
use crate::records::{Record, RecordStore, MAX_KEEP, MAX_RECORD};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The lock of a once-key is this prefix plus the key, so it never takes the lock a program may
/// hold on the key itself.
pub const LOCK_PREFIX: &[u8] = b"once:";

/// The longest once-key: the lock's key (prefix + key) must fit [`MAX_KEY_LEN`].
pub const MAX_ONCE_KEY_LEN: usize = MAX_KEY_LEN - LOCK_PREFIX.len();

/// The largest result `once` records (the record also holds a 10-byte header).
pub const MAX_RESULT: usize = MAX_RECORD - HEADER;

const VERSION: u8 = 1;
const STARTED: u8 = b'S';
const DONE: u8 = b'D';
/// Nothing happened after all (the action could not even start): as if never recorded.
const CLEARED: u8 = b'C';
/// Version, state, start time (ms since the Unix epoch, big-endian).
const HEADER: usize = 10;

/// What a once-key's record says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OnceRecord {
    /// Nothing recorded (never run, or kept past `keep_for`).
    None,
    /// An attempt with `fence` started at `started_at` and never recorded its end.
    Started { fence: u64, started_at: SystemTime },
    /// The action ran, with this result.
    Done {
        fence: u64,
        started_at: SystemTime,
        result: Vec<u8>,
    },
}

/// What a `recover` step decided about an incomplete earlier attempt, after checking the business
/// result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovery {
    /// It did happen: record it as done with this result, and return it.
    Done(Vec<u8>),
    /// It did not happen: run the action now.
    Rerun,
}

/// An incomplete earlier attempt, as a `recover` step sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Incomplete {
    pub fence: u64,
    pub started_at: SystemTime,
}

impl Incomplete {
    /// The `IncompleteAttempt` error callers get when nothing recovers it.
    pub fn error(&self, key: &[u8]) -> Error {
        Error::IncompleteAttempt(format!(
            "once-key \"{}\": an attempt with fence {} started at {} ms since the epoch and never \
             finished; check whether its action happened, then recover (mark it done, or run it \
             again)",
            String::from_utf8_lossy(key),
            self.fence,
            millis_since_epoch(self.started_at)
        ))
    }
}

fn millis_since_epoch(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn encode(state: u8, started_at: SystemTime, result: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(HEADER + result.len());
    bytes.push(VERSION);
    bytes.push(state);
    bytes.extend_from_slice(&millis_since_epoch(started_at).to_be_bytes());
    bytes.extend_from_slice(result);
    bytes
}

fn decode(record: Record) -> Result<OnceRecord> {
    let Record { fence, mut value } = record;
    let corrupt = || {
        Error::Internal(format!(
            "a once record of {} bytes is unreadable",
            value.len()
        ))
    };
    if value.len() < HEADER || value[0] != VERSION {
        return Err(corrupt());
    }
    let mut ms = [0u8; 8];
    ms.copy_from_slice(&value[2..HEADER]);
    let started_at = UNIX_EPOCH + Duration::from_millis(u64::from_be_bytes(ms));
    match value[1] {
        STARTED => Ok(OnceRecord::Started { fence, started_at }),
        CLEARED => Ok(OnceRecord::None),
        DONE => {
            let result = value.split_off(HEADER);
            Ok(OnceRecord::Done {
                fence,
                started_at,
                result,
            })
        }
        _ => Err(corrupt()),
    }
}

fn check_keep(keep_for: Duration) -> Result<()> {
    if keep_for.is_zero() || keep_for > MAX_KEEP {
        return Err(Error::invalid(format!(
            "keep_for must be from 1 ms to {} days",
            MAX_KEEP.as_secs() / 86_400
        )));
    }
    Ok(())
}

/// The lock key of a once-key.
pub fn lock_key(key: &[u8]) -> Result<Vec<u8>> {
    Key::new(key)?;
    if key.len() > MAX_ONCE_KEY_LEN {
        return Err(Error::invalid(format!(
            "a once-key is at most {MAX_ONCE_KEY_LEN} bytes, got {}",
            key.len()
        )));
    }
    Ok([LOCK_PREFIX, key].concat())
}

impl Lease {
    /// The record key of this lease, if it is the lock of a once-key.
    fn once_key(&self) -> Result<Key> {
        let key = self.key().as_bytes();
        match key.strip_prefix(LOCK_PREFIX) {
            Some(user) => Key::new(user),
            None => Err(Error::invalid(
                "not the lease of a once-key (take it with Client::once_lock)",
            )),
        }
    }

    fn records(&self) -> Result<&dyn RecordStore> {
        self.backend().records().ok_or_else(|| {
            Error::invalid(format!(
                "the {} backend keeps no records, so it cannot run once",
                self.backend().name()
            ))
        })
    }

    /// The record of this once-key (the lease must come from [`Client::once_lock`]).
    pub fn once_record(&self) -> Result<OnceRecord> {
        let key = self.once_key()?;
        self.checkpoint(Duration::ZERO)?;
        match self.records()?.get(&key)? {
            None => Ok(OnceRecord::None),
            Some(record) => decode(record),
        }
    }

    fn once_write(
        &self,
        state: u8,
        started_at: SystemTime,
        result: &[u8],
        keep: Duration,
    ) -> Result<()> {
        let key = self.once_key()?;
        check_keep(keep)?;
        if result.len() > MAX_RESULT {
            return Err(Error::invalid(format!(
                "a once result is at most {MAX_RESULT} bytes, got {}",
                result.len()
            )));
        }
        // Written only while the lease holds: a write that would land after the lease ran out
        // could overwrite the record of a newer holder, were it not for the fence.
        self.checkpoint(Duration::ZERO)?;
        let value = encode(state, started_at, result);
        if self.records()?.put(&key, self.fence(), &value, keep)? {
            Ok(())
        } else {
            Err(Error::Lost(format!(
                "once-key \"{key}\": a newer holder (a fence above {}) recorded since; this \
                 lease was lost",
                self.fence()
            )))
        }
    }

    /// Records "started by this lease's fence, now", kept `keep_for`. Call before the action.
    pub fn once_started(&self, keep_for: Duration) -> Result<()> {
        self.once_write(STARTED, SystemTime::now(), &[], keep_for)
    }

    /// Records that this attempt's action never started after all (it could not be launched), so
    /// the next attempt runs it as if nothing had been recorded. Only for an action known not to
    /// have begun: anything else must stay started, for a recovery to judge.
    pub fn once_cleared(&self, keep_for: Duration) -> Result<()> {
        self.once_write(CLEARED, SystemTime::now(), &[], keep_for)
    }

    /// Records "done" with `result` (at most [`MAX_RESULT`] bytes), kept `keep_for`.
    pub fn once_done(&self, result: &[u8], keep_for: Duration) -> Result<()> {
        self.once_write(DONE, SystemTime::now(), result, keep_for)
    }
}

impl Client {
    /// The lease of a once-key: an exclusive lock on its own key ([`LOCK_PREFIX`] + `key`), waiting
    /// up to `wait` while another attempt holds it.
    pub fn once_lock(&self, key: impl AsRef<[u8]>, ttl: Duration, wait: Duration) -> Result<Lease> {
        let lock = lock_key(key.as_ref())?;
        self.acquire(lock, ttl, wait)
    }

    /// Runs `action` at most once per `key` within `keep_for` (see the module docs): the first
    /// call runs it under a kept-alive lease of `ttl` and records its result; later calls return
    /// the recorded result without running it (waiting up to `wait` while an attempt runs). An
    /// earlier attempt that started and never finished gives `IncompleteAttempt`, unless `recover`
    /// (given the attempt) checks the business result and decides. An error from `action` leaves
    /// the attempt incomplete: it may have done part of its work.
    pub fn once<A, R>(
        &self,
        key: impl AsRef<[u8]>,
        ttl: Duration,
        wait: Duration,
        keep_for: Duration,
        action: A,
        recover: Option<R>,
    ) -> Result<Vec<u8>>
    where
        A: FnOnce(&Lease) -> Result<Vec<u8>>,
        R: FnOnce(Incomplete, &Lease) -> Result<Recovery>,
    {
        let key = key.as_ref();
        check_keep(keep_for)?;
        let lease = self.once_lock(key, ttl, wait)?;
        match lease.once_record()? {
            OnceRecord::Done { result, .. } => {
                lease.release()?;
                return Ok(result);
            }
            OnceRecord::Started { fence, started_at } => {
                let incomplete = Incomplete { fence, started_at };
                let Some(recover) = recover else {
                    let _ = lease.release();
                    return Err(incomplete.error(key));
                };
                if let Recovery::Done(result) = recover(incomplete, &lease)? {
                    lease.once_done(&result, keep_for)?;
                    lease.release()?;
                    return Ok(result);
                }
            }
            OnceRecord::None => {}
        }
        lease.once_started(keep_for)?;
        lease.keep_alive(true)?;
        let result = action(&lease)?;
        lease.once_done(&result, keep_for)?;
        lease.release()?;
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let at = UNIX_EPOCH + Duration::from_millis(1_764_000_000_123);
        let started = encode(STARTED, at, &[]);
        assert_eq!(
            decode(Record {
                fence: 7,
                value: started
            })
            .unwrap(),
            OnceRecord::Started {
                fence: 7,
                started_at: at
            }
        );
        let done = encode(DONE, at, b"ok\0bytes");
        assert_eq!(
            decode(Record {
                fence: 9,
                value: done
            })
            .unwrap(),
            OnceRecord::Done {
                fence: 9,
                started_at: at,
                result: b"ok\0bytes".to_vec()
            }
        );
        for bad in [vec![], vec![VERSION], vec![2; HEADER], {
            let mut v = encode(DONE, at, b"");
            v[1] = b'X';
            v
        }] {
            assert!(decode(Record {
                fence: 1,
                value: bad
            })
            .is_err());
        }
    }

    #[test]
    fn once_keys_leave_room_for_the_lock_prefix() {
        assert_eq!(lock_key(b"charge:42").unwrap(), b"once:charge:42");
        assert!(lock_key(&vec![b'k'; MAX_ONCE_KEY_LEN]).is_ok());
        assert!(lock_key(&vec![b'k'; MAX_ONCE_KEY_LEN + 1]).is_err());
        assert!(lock_key(b"").is_err());
    }
}
