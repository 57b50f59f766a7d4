//! Table mode: one row per held key, `key bytea PRIMARY KEY`, judged by the server's clock.
//!
//! Acquire is one `INSERT … ON CONFLICT … DO UPDATE … WHERE expired … RETURNING` that never raises on
//! conflict (so nothing lands in the server log, and no caller's transaction can be involved: we use
//! our own sessions in autocommit). Release deletes the row only with our token; extend moves
//! `expires_at` only with our token.
//!
//! The fence is drawn by a second statement of the same round trip and the same (implicit)
//! transaction, an `UPDATE` of the row we just took, so it is drawn while we hold the row's lock:
//! fences of one key follow the order in which the key was granted. (Drawn in the `INSERT`'s
//! `VALUES`, as `EXCLUDED.fence`, it would be taken before the row lock, and an acquirer that drew
//! first but was granted last would commit the smaller fence.) See the crate docs for the value.
//!
//! Waiting ([`QueueWaiter`], driven by core's wait loop): waiters for a key queue on an advisory lock
//! of their own (FIFO, by the server); only the first LISTENs on the key's channel, which a release
//! NOTIFYs, and it also wakes at the holder's expiry in case the holder died, and at every
//! heartbeat, so that a head that stops is dropped from the queue (see `waiting.rs`). One release
//! wakes one waiter.

mod kinds;
mod queue;

pub(crate) use queue::QueueWaiter;

use crate::lock_id::{hex, semaphore_internal, wait_queue};
use crate::mode::LockMode;
use crate::session::{describe, last_value, number, Conn, Failure, Pools, Session};
use crate::waiting::{bounded_wait, hold_place, join_queue, restore_idle_timeout, Line};
use crate::{acquiring, call_rows, created_meanwhile, timed, with_session, Ask};
use leasehold_core::wait::{held_elsewhere, other_size, Turn, Waiter, Wake, Woken};
use leasehold_core::{
    Deadline, Error, Key, KeyInfo, LeaseKind, Permits, RawLease, Result, Token, Ttl,
};
use sha2::Digest;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio_postgres::SimpleQueryRow;

/// Put in front of every table-mode and records statement: its commit waits until its WAL is
/// flushed (and, where `synchronous_standby_names` names standbys, flushed on them), whatever the
/// server, database or role says. With `synchronous_commit = off` (or `local` behind synchronous
/// standbys) a grant, a fence or a record the client was told about could be gone after a crash
/// (or a failover), and another client then granted the key while the first still relies on it.
/// `SET LOCAL`: for the statement's own transaction, in its round trip, nothing left on the session.
/// (It also lowers `remote_apply` to `on` for these transactions: the same durability, only a
/// standby's readers may see the row later, and Leasehold reads the primary.)
pub(crate) const DURABLE: &str = "SET LOCAL synchronous_commit = on; ";

/// How often a backend deletes rows that crashed holders left behind (released rows go at once).
const SWEEP_EVERY: Duration = Duration::from_secs(60);
/// How long a waiter naps when it could not learn the holder's expiry (a row it cannot see yet).
/// Core wakes it [`leasehold_core::wait::EXPIRY_MARGIN`] later.
const UNKNOWN_HOLDER_NAP: Duration = Duration::from_millis(5);

#[derive(Debug)]
pub(crate) struct Table {
    /// As given in the URL, for the wait queue's hash.
    name: String,
    prefix: String,
    /// `"schema"."name"`: validated identifiers, quoted.
    quoted: String,
    /// The table of shared holders (`name_shares`), quoted.
    shares: String,
    /// The table of semaphore permits (`name_permits`), quoted.
    permits: String,
    /// Put in front of every statement: [`DURABLE`] and the I/O timeout, as SET LOCAL, so nothing
    /// is left on the session (a transaction-pooling PgBouncer would carry session SETs to other
    /// clients).
    bound: String,
    started: Instant,
    /// Milliseconds since `started` when the next sweep is due.
    next_sweep: AtomicU64,
    io_timeout: Duration,
    /// The OID of the `fence` column's identity sequence, known once [`Table::ensure`] ran.
    fence_seq: u32,
}

impl Table {
    pub fn new(name: &str, prefix: &str, io_timeout: Duration) -> Table {
        let quoted = name
            .split('.')
            .map(|part| format!("\"{part}\""))
            .collect::<Vec<_>>()
            .join(".");
        let (schema, last) = match name.rsplit_once('.') {
            Some((schema, last)) => (format!("\"{schema}\"."), last),
            None => (String::new(), name),
        };
        Table {
            name: name.to_owned(),
            prefix: prefix.to_owned(),
            quoted,
            shares: format!("{schema}\"{}\"", suffixed(last, "_shares")),
            permits: format!("{schema}\"{}\"", suffixed(last, "_permits")),
            bound: format!("{DURABLE}{}", bounded_wait(io_timeout, Duration::ZERO)),
            started: Instant::now(),
            next_sweep: AtomicU64::new(0),
            io_timeout,
            fence_seq: 0,
        }
    }

    /// Creates the table if it is missing (checking first, so a user without CREATE rights can use a
    /// table made for them), and finds its fence sequence.
    pub fn ensure(&mut self, session: &mut Session, deadline: Deadline) -> Result<(), Failure> {
        let literal = self.quoted.replace('\'', "''");
        let exists = session.rows(
            &self.bounded(&format!("SELECT to_regclass('{literal}') IS NOT NULL")),
            deadline,
        )?;
        if last_value(&exists, 0) != Some("t") {
            let create = format!(
                "CREATE TABLE IF NOT EXISTS {} (\
                   key bytea PRIMARY KEY, \
                   token text NOT NULL, \
                   fence bigint GENERATED BY DEFAULT AS IDENTITY, \
                   expires_at timestamptz NOT NULL)",
                self.quoted
            );
            match session.rows(&self.bounded(&create), deadline) {
                Ok(_) => {}
                Err(e) if created_meanwhile(&e) => {}
                Err(e) => return Err(e),
            }
        }
        // A permit's row also says the size it was granted under (NULL: a row of 0.2, size
        // unknown, which binds nobody).
        for (holders, size) in [(&self.shares, ""), (&self.permits, "permits integer, ")] {
            let literal = holders.replace('\'', "''");
            let exists = session.rows(
                &self.bounded(&format!("SELECT to_regclass('{literal}') IS NOT NULL")),
                deadline,
            )?;
            if last_value(&exists, 0) == Some("t") {
                continue;
            }
            let create = format!(
                "CREATE TABLE IF NOT EXISTS {holders} (\
                   key bytea NOT NULL, \
                   token text NOT NULL, \
                   fence bigint NOT NULL, \
                   expires_at timestamptz NOT NULL, \
                   {size}\
                   PRIMARY KEY (key, token))"
            );
            match session.rows(&self.bounded(&create), deadline) {
                Ok(_) => {}
                Err(e) if created_meanwhile(&e) => {}
                Err(e) => return Err(e),
            }
        }
        self.add_size_column(session, deadline)?;
        let seq = session.rows(
            &self.bounded(&format!(
                "SELECT pg_get_serial_sequence('{literal}', 'fence')::regclass::oid"
            )),
            deadline,
        )?;
        self.fence_seq = last_value(&seq, 0)
            .and_then(|t| t.parse().ok())
            .unwrap_or(0);
        Ok(())
    }

    /// Gives a permits table made by 0.2 its `permits` column, looking first, so a role that may
    /// not alter the table can use one its owner has upgraded. The column is nullable with no
    /// default: adding it rewrites nothing, and old rows read NULL (size unknown, binds nobody).
    fn add_size_column(&self, session: &mut Session, deadline: Deadline) -> Result<(), Failure> {
        let literal = self.permits.replace('\'', "''");
        let has = session.rows(
            &self.bounded(&format!(
                "SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('{literal}') \
                   AND attname = 'permits' AND NOT attisdropped)"
            )),
            deadline,
        )?;
        if last_value(&has, 0) == Some("t") {
            return Ok(());
        }
        let alter = format!(
            "ALTER TABLE {} ADD COLUMN IF NOT EXISTS permits integer DEFAULT NULL",
            self.permits
        );
        match session.rows(&self.bounded(&alter), deadline) {
            Ok(_) => Ok(()),
            // Another client added it at the same moment.
            Err(e) if created_meanwhile(&e) || e.code() == Some("42701") => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn bounded(&self, sql: &str) -> String {
        format!("{}{sql}", self.bound)
    }

    /// The table's name as given in the URL (`name` or `schema.name`).
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    fn insert(&self, key_hex: &str, token: Token, ttl: Ttl) -> String {
        self.insert_when(key_hex, token, ttl, "")
    }

    /// The acquiring INSERT, returning `true` when the key is ours; with `from` (such as
    /// `FROM head WHERE h`) it inserts only if that yields a row. It leaves the fence alone: the
    /// statement of [`Table::draw_fence`] that follows in the same transaction sets it.
    fn insert_when(&self, key_hex: &str, token: Token, ttl: Ttl, from: &str) -> String {
        format!(
            "INSERT INTO {t} AS l (key, token, expires_at) \
             SELECT decode('{key_hex}', 'hex'), '{token}', \
                    clock_timestamp() + interval '1 millisecond' * {ms} {from} \
             ON CONFLICT (key) DO UPDATE \
               SET token = EXCLUDED.token, expires_at = EXCLUDED.expires_at \
               WHERE l.expires_at <= clock_timestamp() \
             RETURNING true AS ok",
            t = self.quoted,
            token = token.as_str(),
            ms = ttl.as_millis()
        )
    }

    /// The fence, drawn on the row we hold (no row, so no fence, when the key was not taken):
    /// larger than the row's previous fence, than every earlier draw of the sequence, and than the
    /// server's clock in microseconds since the epoch — so a sequence gone back with lost data (a
    /// failover to a replica that missed it) is overtaken by the clock.
    fn draw_fence(&self, key_hex: &str, token: Token) -> String {
        format!(
            "UPDATE {t} AS l SET fence = greatest(l.fence + 1, nextval({seq}::regclass), \
                    floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint) \
             WHERE key = decode('{key_hex}', 'hex') AND token = '{token}' \
             RETURNING fence",
            t = self.quoted,
            seq = self.fence_seq,
            token = token.as_str(),
        )
    }

    pub fn try_acquire(&self, ask: &Ask) -> Result<RawLease> {
        let key_hex = hex(&ask.prefixed);
        self.try_once(ask.pools, ask.key, ask.ttl, LeaseKind::Exclusive, |token| {
            format!(
                "{}; {}",
                self.insert(&key_hex, token, ask.ttl),
                self.draw_fence(&key_hex, token)
            )
        })
    }

    pub fn inspect(&self, pools: &Pools, prefixed: &[u8]) -> Result<KeyInfo> {
        let sql = format!(
            "SELECT expires_at > clock_timestamp(), \
                    greatest(0, floor(extract(epoch FROM expires_at - clock_timestamp()) * 1000))::bigint, \
                    fence, token = '{SHARED}', \
                    (SELECT count(*) FROM {s} WHERE key = l.key AND expires_at > clock_timestamp()) \
             FROM {} l WHERE key = decode('{}', 'hex')",
            self.quoted,
            hex(prefixed),
            s = self.shares,
        );
        let deadline = pools.call();
        let (_conn, rows) = call_rows(pools, deadline, &self.bounded(&sql), "inspect")?;
        let Some(row) = rows.last() else {
            return Ok(KeyInfo::new(false, None, None));
        };
        let held = row.get(0) == Some("t");
        let remaining = number::<u64>(row.get(1))?.map(Duration::from_millis);
        let fence = number::<u64>(row.get(2))?;
        let info = KeyInfo::new(held, remaining.filter(|_| held), fence);
        if !held {
            return Ok(info);
        }
        Ok(match row.get(3) {
            Some("t") => info.with_holders(number::<u32>(row.get(4))?.unwrap_or(0), true),
            _ => info.with_holders(1, false),
        })
    }

    /// Deletes (a bounded batch of) rows that expired over a second ago, at most once per
    /// [`SWEEP_EVERY`] per backend. The outer condition is checked again on the locked row, so a row
    /// re-acquired meanwhile is kept.
    fn maybe_sweep(&self, session: &mut Session, deadline: Deadline) {
        let now = self.started.elapsed().as_millis() as u64;
        let due = self.next_sweep.load(Ordering::Relaxed);
        if now < due
            || self
                .next_sweep
                .compare_exchange(
                    due,
                    now + SWEEP_EVERY.as_millis() as u64,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_err()
        {
            return;
        }
        let sql = format!(
            "DELETE FROM {t} WHERE key IN \
               (SELECT key FROM {t} WHERE expires_at < clock_timestamp() - interval '1 second' \
                LIMIT 1000 FOR UPDATE SKIP LOCKED) \
             AND expires_at < clock_timestamp() - interval '1 second'; \
             DELETE FROM {s} WHERE (key, token) IN \
               (SELECT key, token FROM {s} WHERE expires_at < clock_timestamp() - interval '1 second' \
                LIMIT 1000 FOR UPDATE SKIP LOCKED) \
             AND expires_at < clock_timestamp() - interval '1 second'; \
             DELETE FROM {p} WHERE (key, token) IN \
               (SELECT key, token FROM {p} WHERE expires_at < clock_timestamp() - interval '1 second' \
                LIMIT 1000 FOR UPDATE SKIP LOCKED) \
             AND expires_at < clock_timestamp() - interval '1 second'",
            t = self.quoted,
            s = self.shares,
            p = self.permits,
        );
        if deadline.remaining() < self.io_timeout {
            // Not worth risking the caller's bound; the next call will sweep.
            self.next_sweep.store(due, Ordering::Relaxed);
            return;
        }
        if let Err(e) = session.rows(&self.bounded(&sql), deadline) {
            tracing::debug!(error = %describe(&e), "sweeping expired lock rows failed");
        }
    }
}

/// The token a key's row holds while shared holders hold the key (their own rows are in the shares
/// table). Never a lease token (those are 32 hex digits).
const SHARED: &str = "shared";
/// The token a key's row holds after a force-release: the row (and its fence) stays, free.
const FREED: &str = "freed";
/// Whether the statement before granted the key to this attempt (same implicit transaction).
const GRANTED: &str = "current_setting('leasehold.grant', true)";
/// Whether the acquire's first statement found the queue empty (took the queue lock).
const HEAD: &str = "current_setting('leasehold.head', true) = 'true'";
/// Whether the permit attempt before refused for live holders of another size (same implicit
/// transaction); never for the other kinds, which do not set it.
const SIZE_REFUSED: &str = "coalesce(current_setting('leasehold.size', true), '') <> ''";

/// `name` + `suffix` as one identifier of at most 63 bytes: a name too long for the suffix is cut
/// and told apart by a hash of the whole.
pub(crate) fn suffixed(name: &str, suffix: &str) -> String {
    if name.len() + suffix.len() <= 63 {
        return format!("{name}{suffix}");
    }
    let digest = hex(&sha2::Sha256::digest(name.as_bytes())[..4]);
    let keep = 63 - suffix.len() - digest.len() - 1;
    format!("{}_{digest}{suffix}", &name[..keep])
}

/// The fence column of the last statement (the fence draw): `None` when the key was not taken.
fn fence_of(statements: &[Vec<SimpleQueryRow>]) -> Option<&str> {
    statements.last().and_then(|rows| last_value(rows, 0))
}

/// The process a table lease was acquired in. After `fork()` the child has a copy of the lease (and its
/// token): it must not release or extend the parent's key.
struct Owner(u32);

/// The lease of a grant (`kind`, fence `fence`, sent at `sent`), owned by this process. One
/// function for every kind of table acquire, so their leases are made alike.
fn new_lease(
    key: &Key,
    token: Token,
    fence: i64,
    ttl: Ttl,
    sent: Instant,
    kind: LeaseKind,
) -> RawLease {
    owned(RawLease::new(key.clone(), token, fence as u64, ttl, sent).with_kind(kind))
}

/// The holder's time left as an attempt saw it, `ms`, or [`UNKNOWN_HOLDER_NAP`] when it saw no
/// holder's row: the queue's head wakes by then at the latest.
fn holder_left(ms: Option<i64>) -> Duration {
    match ms {
        Some(ms) => Duration::from_millis(ms.max(0) as u64),
        None => UNKNOWN_HOLDER_NAP,
    }
}

fn owned(lease: RawLease) -> RawLease {
    lease.with_state(Owner(leasehold_core::fork::pid()))
}

fn check_owner(lease: &mut RawLease) -> Result<()> {
    match lease.state_mut::<Owner>() {
        Some(Owner(pid)) if *pid != leasehold_core::fork::pid() => Err(Error::Lost(
            "this lease was acquired by another process (before fork); only that process can \
             release or extend it"
                .into(),
        )),
        _ => Ok(()),
    }
}

fn lost_unless(live: Option<bool>) -> Result<()> {
    match live {
        Some(true) => Ok(()),
        Some(false) => Err(Error::Lost(
            "the lease had expired (its row is now removed)".into(),
        )),
        None => Err(Error::Lost(
            "the key no longer holds this lease's token (expired and taken, or released)".into(),
        )),
    }
}

/// The refusal of a permit attempt whose last statement ([`Table::permit_attempt`]) found live
/// holders granted under another size; `None` for other kinds, which have no size.
fn size_refusal(
    key: &Key,
    rows: Option<&Vec<SimpleQueryRow>>,
    kind: LeaseKind,
) -> Result<Option<Error>> {
    let LeaseKind::Permit(asked) = kind else {
        return Ok(None);
    };
    let other = rows.and_then(|rows| last_value(rows, 3));
    let held = number::<u32>(other.filter(|o| !o.is_empty()))?;
    Ok(held.map(|held| other_size(key, held, asked.get())))
}

fn refused(key: &Key, kind: LeaseKind) -> Error {
    match kind {
        LeaseKind::Permit(n) => Error::NotAcquired(format!(
            "all {} permits of semaphore \"{key}\" are held",
            n.get()
        )),
        _ => held_elsewhere(key),
    }
}

/// A table of leases: the lease lives in its row (waiters queue on an advisory lock and LISTEN
/// at the head, `waiting.rs`).
impl LockMode for Table {
    fn name(&self) -> &'static str {
        "postgres-table"
    }

    fn table(&self) -> Option<&str> {
        Some(Table::name(self))
    }

    fn try_acquire(&self, ask: &Ask, kind: LeaseKind) -> Result<RawLease> {
        match kind {
            LeaseKind::Exclusive => Table::try_acquire(self, ask),
            LeaseKind::Shared => self.try_acquire_shared(ask),
            LeaseKind::Permit(n) => self.try_acquire_permit(ask, n),
            other => Err(leasehold_core::unsupported(LockMode::name(self), other)),
        }
    }

    fn waiter<'a>(
        &'a self,
        ask: Ask<'a>,
        kind: LeaseKind,
        end: Instant,
    ) -> Result<Box<dyn Waiter + 'a>> {
        match kind {
            LeaseKind::Exclusive | LeaseKind::Shared | LeaseKind::Permit(_) => {
                Ok(Box::new(QueueWaiter::new(self, ask, kind, end)))
            }
            other => Err(leasehold_core::unsupported(LockMode::name(self), other)),
        }
    }

    fn inspect(&self, pools: &Pools, prefixed: &[u8], kind: LeaseKind) -> Result<KeyInfo> {
        match kind {
            LeaseKind::Permit(_) => self.inspect_permits(pools, prefixed),
            _ => Table::inspect(self, pools, prefixed),
        }
    }

    fn restore(&self, pools: &Pools, prefixed: &[u8], key: &Key, token: Token) -> Result<RawLease> {
        Table::restore(self, pools, prefixed, key, token)
    }

    fn force_release(&self, pools: &Pools, prefixed: &[u8]) -> Result<bool> {
        Table::force_release(self, pools, prefixed)
    }

    fn release(&self, pools: &Pools, lease: &mut RawLease) -> Result<()> {
        check_owner(lease)?;
        match lease.kind() {
            LeaseKind::Shared => return self.release_shared(pools, lease),
            LeaseKind::Permit(_) => return self.release_permit(pools, lease),
            _ => {}
        }
        let prefixed = lease.key().prefixed(&self.prefix);
        let prefixed_hex = hex(&prefixed);
        let (_, channel) = wait_queue(&self.name, &prefixed);
        let sql = format!(
            "WITH gone AS (DELETE FROM {} WHERE key = decode('{prefixed_hex}', 'hex') AND token = '{}' \
                           RETURNING expires_at > clock_timestamp() AS live) \
             SELECT live, pg_notify('{channel}', '') FROM gone",
            self.quoted,
            lease.token().as_str()
        );
        let deadline = pools.call();
        let sql = self.bounded(&sql);
        let mut tries = 0;
        let (mut conn, result) = with_session(pools, deadline, |s| {
            tries += 1;
            s.rows(&sql, deadline)
        })?;
        let rows = result.map_err(|e| pools.failed("release", &e))?;
        let outcome = match last_value(&rows, 0) {
            Some("t") => Ok(()),
            Some(_) => Err(Error::Lost(
                "the lease had expired (its row is now removed)".into(),
            )),
            // Sent again after a session broke under it: nobody else can have taken the key while
            // the lease was valid, so a row gone then was removed by the earlier try, whose reply
            // was lost.
            None if tries > 1 && !lease.remaining().is_zero() => Ok(()),
            None => Err(Error::Lost(
                "the key no longer holds this lease's token (expired and taken, or released)"
                    .into(),
            )),
        };
        self.maybe_sweep(&mut conn, deadline);
        outcome
    }

    fn extend(&self, pools: &Pools, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        check_owner(lease)?;
        match lease.kind() {
            LeaseKind::Shared => return self.extend_shared(pools, lease, ttl),
            LeaseKind::Permit(_) => return self.extend_permit(pools, lease, ttl),
            _ => {}
        }
        let sql = format!(
            "UPDATE {} SET expires_at = clock_timestamp() + interval '1 millisecond' * {} \
             WHERE key = decode('{}', 'hex') AND token = '{}' AND expires_at > clock_timestamp() \
             RETURNING fence",
            self.quoted,
            ttl.as_millis(),
            hex(&lease.key().prefixed(&self.prefix)),
            lease.token().as_str()
        );
        let deadline = pools.call();
        let (_conn, result) = timed(pools, deadline, |s| s.rows(&self.bounded(&sql), deadline))?;
        let (sent, rows) = result.map_err(|e| pools.failed("extend", &e))?;
        if rows.is_empty() {
            return Err(Error::Lost(
                "the key no longer holds this lease's token (expired, or taken by another holder)"
                    .into(),
            ));
        }
        lease.renewed(ttl, sent);
        Ok(())
    }

    fn try_promote(&self, pools: &Pools, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        Table::try_promote(self, pools, lease, ttl)
    }

    fn demote(&self, pools: &Pools, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        Table::demote(self, pools, lease, ttl)
    }

    /// A table lease lives in its row; its state only names the process that took it.
    fn detach(&self, lease: &mut RawLease, _: Ttl) {
        drop(lease.state.take());
    }
}
