//! Advisory mode: a session advisory lock held by a session that the lease owns for its whole life.
//!
//! The TTL is the session's `idle_session_timeout`, set in the acquiring statement and moved by extend:
//! a holder that goes silent past its TTL has its session ended by the server, which frees the lock. A
//! holder whose process dies frees it as soon as the server sees the connection close; one whose host
//! vanishes, within [`crate::session::SERVER_DEAD_PEER`] (server-side TCP keepalives and user timeout).
//! The fence is `nextval` of one sequence, taken after the lock is granted, in the same round trip.

use crate::lock_id::lock_id;
use crate::session::{describe, last_value, number, Conn, Pools};
use crate::with_session;
use leasehold_core::wait::held_elsewhere;
use leasehold_core::{Error, Key, KeyInfo, RawLease, Result, Token, Ttl};
use std::time::{Duration, Instant};

/// What a lease keeps: the session that holds the lock.
pub(crate) struct Held {
    conn: Conn,
    id: i64,
    /// The process that acquired: a `fork()` child must not use (or close) its parent's session.
    pid: u32,
}

#[derive(Debug)]
pub(crate) struct Advisory {
    /// The fence sequence's OID: immune to `search_path` and quoting.
    pub fence_seq: u32,
}

impl Advisory {
    pub fn try_acquire(
        &self,
        pools: &Pools,
        prefixed: &[u8],
        key: &Key,
        ttl: Ttl,
    ) -> Result<RawLease> {
        let id = lock_id(prefixed);
        let ms = ttl.as_millis();
        // OFFSET 0 keeps the lock attempt in its own subquery, evaluated once, before set_config.
        let sql = format!(
            "SELECT f, CASE WHEN f IS NOT NULL THEN set_config('idle_session_timeout', '{ms}', false) END \
             FROM (SELECT CASE WHEN pg_try_advisory_lock({id}) THEN nextval({}::regclass) END AS f \
             OFFSET 0) s",
            self.fence_seq
        );
        let (mut conn, result) = with_session(pools, |s| {
            let sent = Instant::now();
            s.rows(&sql).map(|rows| (sent, rows))
        })?;
        match result {
            Ok((sent, rows)) => match number::<i64>(last_value(&rows, 0)) {
                Ok(Some(fence)) => self.lease(conn, id, key, fence, ttl, sent),
                Ok(None) => Err(held_elsewhere(key)),
                Err(e) => {
                    conn.poisoned = true;
                    Err(e)
                }
            },
            Err(e) => {
                // The lock may have been granted before the error: never reuse this session.
                conn.poisoned = true;
                Err(pools.failed("advisory lock", &e))
            }
        }
    }

    /// The server's lock queue does the waiting: `pg_advisory_lock` under `lock_timeout`, no polling.
    pub fn acquire(
        &self,
        pools: &Pools,
        prefixed: &[u8],
        key: &Key,
        ttl: Ttl,
        wait: Duration,
        io_timeout: Duration,
    ) -> Result<RawLease> {
        let id = lock_id(prefixed);
        let wait_ms = wait_millis(wait);
        let total_ms = wait_ms.saturating_add(io_timeout.as_millis() as u64);
        // The fence is drawn only once the lock is granted, so fences follow the order of holders.
        // The last column is how long the server waited, to date the TTL from the grant.
        let sql = format!(
            "SET LOCAL statement_timeout = {total_ms}; SET LOCAL lock_timeout = {wait_ms}; \
             SELECT pg_advisory_lock({id}); \
             SELECT nextval({}::regclass), set_config('idle_session_timeout', '{}', false), \
             floor(extract(epoch FROM clock_timestamp() - statement_timestamp()) * 1000000)::bigint",
            self.fence_seq,
            ttl.as_millis()
        );
        let (mut conn, result) = with_session(pools, |s| {
            let sent = Instant::now();
            s.rows(&sql).map(|rows| (sent, rows))
        })?;
        match result {
            Ok((sent, rows)) => {
                let fence = number::<i64>(last_value(&rows, 0));
                let waited_us = number::<u64>(last_value(&rows, 2));
                let (Ok(Some(fence)), Ok(waited_us)) = (fence, waited_us) else {
                    // The lock is granted but unusable: closing the session frees it.
                    conn.poisoned = true;
                    return Err(Error::Internal("PostgreSQL returned no fence".into()));
                };
                let waited_us = waited_us.unwrap_or(0);
                // The server's idle timer starts after the grant, not before: the lease's local
                // deadline counts from `sent` plus the server's own measure of the wait.
                let granted = sent
                    .checked_add(Duration::from_micros(waited_us))
                    .unwrap_or(sent);
                self.lease(conn, id, key, fence, ttl, granted)
            }
            Err(e) if e.code().is_some_and(|c| c.code() == "55P03") => Err(held_elsewhere(key)),
            Err(e) => {
                conn.poisoned = true;
                Err(pools.failed("advisory lock", &e))
            }
        }
    }

    fn lease(
        &self,
        mut conn: Conn,
        id: i64,
        key: &Key,
        fence: i64,
        ttl: Ttl,
        sent: Instant,
    ) -> Result<RawLease> {
        let token = match Token::generate() {
            Ok(token) => token,
            Err(e) => {
                // The lock is held but nobody could own it: end the session, which frees it.
                conn.poisoned = true;
                return Err(e);
            }
        };
        Ok(
            RawLease::new(key.clone(), token, fence as u64, ttl, sent).with_state(Held {
                conn,
                id,
                pid: std::process::id(),
            }),
        )
    }

    pub fn release(&self, pools: &Pools, lease: &mut RawLease) -> Result<()> {
        let Some(mut held) = take_held(lease)? else {
            return Err(gone("its session is gone"));
        };
        let sql = format!(
            "SELECT pg_advisory_unlock({}), set_config('idle_session_timeout', '0', false)",
            held.id
        );
        match held.conn.rows(&sql) {
            Ok(rows) if last_value(&rows, 0) == Some("t") => Ok(()),
            Ok(_) => {
                held.conn.poisoned = true;
                Err(gone("its session no longer holds the lock"))
            }
            Err(e) if held.conn.is_gone(&e) => {
                held.conn.poisoned = true;
                Err(pools.redacted(gone(&format!("its session ended ({})", describe(&e)))))
            }
            Err(e) => {
                let err = pools.failed("advisory unlock", &e);
                lease.state = Some(Box::new(held));
                Err(err)
            }
        }
    }

    pub fn extend(&self, pools: &Pools, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        let Some(mut held) = take_held(lease)? else {
            return Err(gone("its session is gone"));
        };
        // A live session still holds its session locks: only it could have unlocked them. So moving
        // its idle timeout is the whole of extend.
        let sql = format!(
            "SELECT set_config('idle_session_timeout', '{}', false)",
            ttl.as_millis()
        );
        let sent = Instant::now();
        match held.conn.rows(&sql) {
            Ok(_) => {
                lease.renewed(ttl, sent);
                lease.state = Some(Box::new(held));
                Ok(())
            }
            Err(e) if held.conn.is_gone(&e) => {
                held.conn.poisoned = true;
                Err(pools.redacted(gone(&format!("its session ended ({})", describe(&e)))))
            }
            Err(e) => {
                let err = pools.failed("extend", &e);
                lease.state = Some(Box::new(held));
                Err(err)
            }
        }
    }

    pub fn inspect(&self, pools: &Pools, prefixed: &[u8]) -> Result<KeyInfo> {
        let id = lock_id(prefixed) as u64;
        // pg_locks shows a bigint advisory key as classid = high 32 bits, objid = low 32 bits,
        // objsubid = 1.
        let sql = format!(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
             AND classid = {} AND objid = {} AND objsubid = 1",
            id >> 32,
            id & 0xffff_ffff
        );
        let (_conn, result) = with_session(pools, |s| s.rows(&sql))?;
        let rows = result.map_err(|e| pools.failed("inspect", &e))?;
        let held = number::<u64>(last_value(&rows, 0))?.unwrap_or(0) > 0;
        Ok(KeyInfo::new(held, None, None))
    }
}

/// A wait in whole milliseconds, at least 1: `lock_timeout = 0` would mean "wait forever".
fn wait_millis(wait: Duration) -> u64 {
    (wait.as_nanos().div_ceil(1_000_000) as u64).max(1)
}

fn gone(why: &str) -> Error {
    Error::Lost(format!("the advisory lock is not held any more: {why}"))
}

fn take_held(lease: &mut RawLease) -> Result<Option<Held>> {
    let Some(held) = lease.take_state::<Held>() else {
        return Ok(None);
    };
    if held.pid != std::process::id() {
        // The parent's session: closing it would free the parent's lock, using it would corrupt it.
        std::mem::forget(held);
        return Err(Error::Lost(
            "this lease was acquired by another process (before fork); only that process can \
             release or extend it"
                .into(),
        ));
    }
    Ok(Some(held))
}
