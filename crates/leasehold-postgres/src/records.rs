//! Records ([`leasehold_core::records`]) on PostgreSQL, in both modes: one row per record in a
//! table of their own,
//!
//! ```sql
//! CREATE TABLE IF NOT EXISTS leasehold_records (key bytea PRIMARY KEY, fence bigint NOT NULL,
//!                                               value bytea NOT NULL, expires_at timestamptz NOT NULL)
//! ```
//!
//! named `leasehold_records`, or `<table>_records` (beside `<table>_shares` and `<table>_permits`,
//! in the same schema) when table mode is given a `?table=` of its own. Advisory mode keeps no
//! table for its locks, but records need one. The key is the prefixed key (`prefix ‖ key`, as
//! table mode's rows), so a record never shares a row with a lock, and one table serves every
//! prefix. The table is created on first use: the first put that finds it missing (SQLSTATE
//! 42P01) creates it and writes again; a get that finds it missing has found no record. A role
//! without CREATE needs it made once by the owner (the statement above) and `SELECT, INSERT,
//! UPDATE, DELETE` on it.
//!
//! A put is one statement, `INSERT … ON CONFLICT (key) DO UPDATE … WHERE r.fence <=
//! EXCLUDED.fence OR r.expires_at <= clock_timestamp() RETURNING true`: the conflict arm locks the
//! row and checks the condition on its latest version, so two writers of one key are serialized,
//! and a row comes back only when the record was written (an equal fence is the same holder
//! writing again; an expired record counts as absent). Expiry is judged by the server's clock.
//! Fences are `bigint`: a fence above 2^63 − 1 (no backend hands one out) is `InvalidArgument`.
//!
//! Sessions come from the backend's pool, and every call has its deadline (connect + I/O), each
//! statement the I/O timeout as `SET LOCAL statement_timeout` (so nothing stays on the session:
//! table mode works through a transaction-pooling PgBouncer). Bounded state: expired rows count as
//! absent, and rows that expired over a second ago are deleted after a put (at most 1000 at a
//! time, at most once a minute per table, server and process), as table mode sweeps its rows.

use crate::lock_id::hex;
use crate::session::{describe, number, Failure, Session};
use crate::table::{suffixed, DURABLE};
use crate::waiting::bounded_wait;
use crate::{created_meanwhile, with_session, PostgresBackend};
use leasehold_core::config::DEFAULT_TABLE;
use leasehold_core::records::{Record, RecordStore, SweepThrottle, SQL_SWEEP_EVERY};
use leasehold_core::{Deadline, Error, Key, Result};
use std::time::Duration;

/// The records table when table mode names no table of its own (and always in advisory mode).
pub const RECORDS_TABLE: &str = "leasehold_records";

/// SQLSTATE `undefined_table`.
const UNDEFINED_TABLE: &str = "42P01";

impl PostgresBackend {
    /// The records table, quoted (`"name"` or `"schema"."name"`).
    fn records_table(&self) -> String {
        match self.mode.table() {
            Some(table) if table != DEFAULT_TABLE => match table.rsplit_once('.') {
                Some((schema, last)) => format!("\"{schema}\".\"{}\"", suffixed(last, "_records")),
                None => format!("\"{}\"", suffixed(table, "_records")),
            },
            _ => format!("\"{RECORDS_TABLE}\""),
        }
    }

    /// `sql` with a durable commit ([`DURABLE`]) and the I/O timeout set for its implicit
    /// transaction only.
    fn records_bounded(&self, sql: &str) -> String {
        format!(
            "{DURABLE}{}{sql}",
            bounded_wait(self.pools.io_timeout, Duration::ZERO)
        )
    }

    /// Creates the records table if it is missing.
    fn create_records_table(
        &self,
        session: &mut Session,
        table: &str,
        deadline: Deadline,
    ) -> std::result::Result<(), Failure> {
        let create = format!(
            "CREATE TABLE IF NOT EXISTS {table} (\
               key bytea PRIMARY KEY, \
               fence bigint NOT NULL, \
               value bytea NOT NULL, \
               expires_at timestamptz NOT NULL)"
        );
        match session.rows(&self.records_bounded(&create), deadline) {
            Ok(_) => Ok(()),
            Err(e) if created_meanwhile(&e) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Deletes (a bounded batch of) rows that expired over a second ago, at most once per
    /// [`SQL_SWEEP_EVERY`] per table, server and process, when `deadline` leaves room for it. The
    /// outer condition is checked again on the locked row, so a row written meanwhile is kept.
    fn sweep_records(&self, session: &mut Session, table: &str, deadline: Deadline) {
        static SWEEPS: SweepThrottle = SweepThrottle::new(SQL_SWEEP_EVERY);
        if !SWEEPS.due_by(&self.describe, table, deadline, self.pools.io_timeout) {
            return;
        }
        if let Err(e) = self.delete_expired(session, table, deadline) {
            tracing::debug!(error = %describe(&e), "sweeping expired records failed");
        }
    }

    /// Deletes up to 1000 rows of `table` that expired over a second ago; how many it deleted.
    fn delete_expired(
        &self,
        session: &mut Session,
        table: &str,
        deadline: Deadline,
    ) -> std::result::Result<usize, Failure> {
        let sql = format!(
            "DELETE FROM {table} WHERE key IN \
               (SELECT key FROM {table} WHERE expires_at < clock_timestamp() - interval '1 second' \
                LIMIT 1000 FOR UPDATE SKIP LOCKED) \
             AND expires_at < clock_timestamp() - interval '1 second'"
        );
        let sql = format!("WITH gone AS ({sql} RETURNING 1) SELECT count(*) FROM gone");
        let rows = session.rows(&self.records_bounded(&sql), deadline)?;
        Ok(rows
            .last()
            .and_then(|r| r.get(0))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0))
    }
}

impl RecordStore for PostgresBackend {
    fn get(&self, key: &Key) -> Result<Option<Record>> {
        let table = self.records_table();
        let sql = self.records_bounded(&format!(
            "SELECT fence, encode(value, 'hex') FROM {table} \
             WHERE key = decode('{}', 'hex') AND expires_at > clock_timestamp()",
            hex(&key.prefixed(&self.prefix))
        ));
        let deadline = self.pools.call();
        let (_conn, result) = with_session(&self.pools, deadline, |s| s.rows(&sql, deadline))?;
        let rows = match result {
            Ok(rows) => rows,
            // No table yet: no record yet.
            Err(e) if e.code() == Some(UNDEFINED_TABLE) => return Ok(None),
            Err(e) => return Err(self.pools.failed("record get", &e)),
        };
        let Some(row) = rows.last() else {
            return Ok(None);
        };
        let fence = number::<u64>(row.get(0))?.ok_or_else(|| {
            Error::Internal("PostgreSQL record get: a record without a fence".into())
        })?;
        let value = ::hex::decode(row.get(1).unwrap_or_default()).map_err(|e| {
            Error::Internal(format!("PostgreSQL record get: the value is not hex: {e}"))
        })?;
        Ok(Some(Record { fence, value }))
    }

    fn put(&self, key: &Key, fence: u64, value: &[u8], keep: Duration) -> Result<bool> {
        let fence = i64::try_from(fence).map_err(|_| {
            Error::invalid(format!(
                "fence {fence} is above the largest PostgreSQL bigint ({})",
                i64::MAX
            ))
        })?;
        let table = self.records_table();
        let keep_ms = u64::try_from(keep.as_millis()).unwrap_or(u64::MAX).max(1);
        let sql = self.records_bounded(&format!(
            "INSERT INTO {table} AS r (key, fence, value, expires_at) \
             VALUES (decode('{key}', 'hex'), {fence}, decode('{value}', 'hex'), \
                     clock_timestamp() + interval '1 millisecond' * {keep_ms}) \
             ON CONFLICT (key) DO UPDATE \
               SET fence = EXCLUDED.fence, value = EXCLUDED.value, expires_at = EXCLUDED.expires_at \
               WHERE r.fence <= EXCLUDED.fence OR r.expires_at <= clock_timestamp() \
             RETURNING true",
            key = hex(&key.prefixed(&self.prefix)),
            value = hex(value),
        ));
        let deadline = self.pools.call();
        let (mut conn, result) = with_session(&self.pools, deadline, |s| {
            match s.rows(&sql, deadline) {
                Err(e) if e.code() == Some(UNDEFINED_TABLE) => {
                    // First use: make the table, then write.
                    self.create_records_table(s, &table, deadline)?;
                    s.rows(&sql, deadline)
                }
                other => other,
            }
        })?;
        let rows = result.map_err(|e| self.pools.failed("record put", &e))?;
        self.sweep_records(&mut conn, &table, deadline);
        Ok(!rows.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_core::Config;
    use leasehold_testkit::PostgresServer;

    #[test]
    fn expired_rows_are_swept() {
        let url = PostgresServer::shared().url_with("lock=table&table=sweep_locks");
        let backend = PostgresBackend::connect(&Config::parse(&url).unwrap()).unwrap();
        let table = backend.records_table();
        let store: &dyn RecordStore = &backend;
        let (short, kept) = (
            Key::new("sweep-short").unwrap(),
            Key::new("sweep-kept").unwrap(),
        );
        assert!(store
            .put(&short, 1, b"x", Duration::from_millis(1))
            .unwrap());
        assert!(store.put(&kept, 1, b"y", Duration::from_secs(60)).unwrap());
        std::thread::sleep(Duration::from_millis(1100));
        let deadline = backend.pools.call();
        let mut conn = backend.pools.get(deadline).unwrap();
        assert!(backend.delete_expired(&mut conn, &table, deadline).unwrap() >= 1);
        let left = conn
            .rows(
                &format!(
                    "SELECT count(*) FROM {table} WHERE key = decode('{}', 'hex')",
                    hex(&short.prefixed("leasehold:"))
                ),
                deadline,
            )
            .unwrap();
        assert_eq!(left.last().and_then(|r| r.get(0)), Some("0"));
        assert_eq!(store.get(&kept).unwrap().map(|r| r.fence), Some(1));
    }

    #[test]
    fn records_tables_are_named_after_the_mode() {
        let names = |query: &str| {
            let url = PostgresServer::shared().url_with(query);
            let backend = PostgresBackend::connect(&Config::parse(&url).unwrap()).unwrap();
            backend.records_table()
        };
        assert_eq!(names("lock=advisory"), "\"leasehold_records\"");
        assert_eq!(names("lock=table"), "\"leasehold_records\"");
        assert_eq!(
            names("lock=table&table=names_locks"),
            "\"names_locks_records\""
        );
        assert_eq!(
            names("lock=table&table=public.names_locks"),
            "\"public\".\"names_locks_records\""
        );
    }
}
