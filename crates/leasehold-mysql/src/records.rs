//! Records ([`leasehold_core::records`]) on MySQL/MariaDB, in both modes: one row per record in an
//! InnoDB table of their own,
//!
//! ```sql
//! CREATE TABLE IF NOT EXISTS leasehold_records (k BINARY(32) NOT NULL PRIMARY KEY,
//!   fence BIGINT UNSIGNED NOT NULL, value MEDIUMBLOB NOT NULL, expires_us BIGINT NOT NULL,
//!   KEY (expires_us)) ENGINE=InnoDB
//! ```
//!
//! named `leasehold_records`, or `<table>_records` (beside `<table>_fences`, `_shares` and
//! `_permits`, in the same database) when the URL names a `?table=` of its own. The row key is
//! SHA-256 of `prefix ‖ key`, as table mode's (keys may be 1 KiB of any bytes, more than an index
//! should carry); the table is the records' own, so a record never shares a row with a lock.
//! `MEDIUMBLOB`: a `BLOB` stops one byte short of the largest record (64 KiB). The table is created
//! on first use: the first put that finds it missing (error 1146) creates it and writes again; a
//! get that finds it missing has found no record. Expiry is `expires_us`, by the server's clock.
//!
//! A put is one batch, in a transaction: an upsert, then a locking read of the row, as the fence
//! gate does (`gate.rs` explains why the decision is read back rather than taken from the affected
//! rows, which `CLIENT_FOUND_ROWS` and an unchanged row make ambiguous, and why the upsert comes
//! first: a locking read of a missing row takes a gap lock, and two first writers deadlock).
//!
//! ```sql
//! INSERT INTO t (k, fence, value, expires_us) VALUES (k, F, V, now + keep)
//!   ON DUPLICATE KEY UPDATE fence = IF(w, F, fence), value = IF(w, V, value),
//!                           expires_us = IF(w, now + keep, expires_us);
//! SELECT fence FROM t WHERE k = … FOR UPDATE
//! ```
//!
//! with `w` = `fence <= F OR expires_us <= now` (an equal fence is the same holder writing again;
//! an expired record counts as absent). The fence read back is ours when the record was written,
//! and the higher stored one when it was refused. The order of the assignments makes `w` come out
//! the same whether the server evaluates them left to right, each seeing the ones before (MySQL,
//! MariaDB by default), or all against the old row (MariaDB's `SIMULTANEOUS_ASSIGNMENT`): `fence`
//! first (written, it is `F`, and `F <= F`), `expires_us` last (the one column whose new value
//! could turn `w` around).
//!
//! Sessions come from the backend's pool with its deadline (connect + I/O) and its bounded round
//! trips; InnoDB giving up a row lock to a concurrent writer of the same key (a deadlock, 1213) is
//! retried within the deadline (the server rolled the transaction back: nothing was written).
//! Bounded state: expired rows count as absent, and rows that expired over a second ago are
//! deleted after a put (at most 1000 at a time, at most once a minute per table, server and
//! process).

use crate::names::{hex_literal, micros, row_key, NOW_US};
use crate::session::{call, with_session, Answers, Failure};
use crate::MysqlBackend;
use leasehold_core::config::DEFAULT_MYSQL_TABLE;
use leasehold_core::records::{Record, RecordStore, SweepThrottle, SQL_SWEEP_EVERY};
use leasehold_core::retry::Retry;
use leasehold_core::{Deadline, Error, Key, Result};
use mysql::Value;
use std::time::Duration;

/// A record write InnoDB rolled back for a concurrent writer of the key (it wrote nothing) is sent
/// again every millisecond or so while the call's deadline lasts: the other writer's transaction is
/// one statement long.
const RECORD_CONTENTION: Retry = Retry::steady(Duration::from_millis(1));

/// The records table when the URL names no table of its own.
pub const RECORDS_TABLE: &str = "leasehold_records";

/// `ER_NO_SUCH_TABLE`.
const NO_SUCH_TABLE: u16 = 1146;

/// The records table beside the mode's table `ident` (quoted, with `suffix` after the name as
/// given): `leasehold_records` for the default name, `<name>_records` otherwise.
fn records_ident(ident: &str, suffix: &str) -> String {
    let given = ident
        .strip_suffix('`')
        .and_then(|i| i.strip_suffix(suffix))
        .unwrap_or(ident);
    if given == format!("`{DEFAULT_MYSQL_TABLE}") {
        format!("`{RECORDS_TABLE}`")
    } else {
        format!("{given}_records`")
    }
}

impl MysqlBackend {
    /// The records table, quoted.
    fn records_table(&self) -> String {
        let (table, suffix) = self.mode.own_table();
        records_ident(table, suffix)
    }

    /// One batch on a pooled session by `deadline`, its failure as it came.
    fn records_batch(
        &self,
        sql: &str,
        deadline: Deadline,
    ) -> Result<std::result::Result<Answers, Failure>> {
        let (_conn, outcome) = with_session(&self.pools, deadline, |s| s.batch(sql, deadline))?;
        Ok(outcome)
    }

    fn create_records_table(&self, table: &str, deadline: Deadline) -> Result<()> {
        let sql = format!(
            "CREATE TABLE IF NOT EXISTS {table} (\
               k BINARY(32) NOT NULL PRIMARY KEY, fence BIGINT UNSIGNED NOT NULL, \
               value MEDIUMBLOB NOT NULL, expires_us BIGINT NOT NULL, \
               KEY (expires_us)) ENGINE=InnoDB"
        );
        call(
            &self.pools,
            deadline,
            &sql,
            &format!("creating the table {table}"),
        )
        .map(drop)
    }

    /// Deletes up to 1000 rows that expired over a second ago, at most once per [`SQL_SWEEP_EVERY`]
    /// per table, server and process; a failure is left to the next time.
    fn sweep_records(&self, table: &str, deadline: Deadline) {
        static SWEEPS: SweepThrottle = SweepThrottle::new(SQL_SWEEP_EVERY);
        if !SWEEPS.due_by(&self.describe, table, deadline, self.pools.io_timeout) {
            return;
        }
        if let Err(e) = self.delete_expired(table, deadline) {
            tracing::debug!("leasehold-mysql: sweeping expired records failed: {e}");
        }
    }

    /// Deletes up to 1000 rows of `table` that expired over a second ago; how many it deleted.
    fn delete_expired(&self, table: &str, deadline: Deadline) -> Result<u64> {
        let sql = format!("DELETE FROM {table} WHERE expires_us < {NOW_US} - 1000000 LIMIT 1000");
        match self.records_batch(&sql, deadline)? {
            Ok(answers) => Ok(answers.nth_last(1).affected),
            Err(Failure::Server(NO_SUCH_TABLE, _)) => Ok(0),
            Err(e) => Err(self.pools.failed("sweeping expired records", &e)),
        }
    }
}

impl RecordStore for MysqlBackend {
    fn get(&self, key: &Key) -> Result<Option<Record>> {
        let table = self.records_table();
        let sql = format!(
            "SELECT fence, value FROM {table} WHERE k = {} AND expires_us > {NOW_US}",
            row_key(&key.prefixed(&self.prefix))
        );
        let deadline = self.pools.call();
        let answers = match self.records_batch(&sql, deadline)? {
            Ok(answers) => answers,
            // No table yet: no record yet.
            Err(Failure::Server(NO_SUCH_TABLE, _)) => return Ok(None),
            Err(e) => return Err(self.pools.failed("reading a record", &e)),
        };
        let answer = answers.nth_last(1);
        let Some(row) = answer.rows.first() else {
            return Ok(None);
        };
        let fence = row.first().and_then(unsigned).ok_or_else(|| {
            Error::Internal(format!("{table}: a record row without a fence: {row:?}"))
        })?;
        let value = match row.get(1) {
            Some(Value::Bytes(b)) => b.clone(),
            other => {
                return Err(Error::Internal(format!(
                    "{table}: a record's value came back as {other:?}"
                )))
            }
        };
        Ok(Some(Record { fence, value }))
    }

    fn put(&self, key: &Key, fence: u64, value: &[u8], keep: Duration) -> Result<bool> {
        let table = self.records_table();
        let k = row_key(&key.prefixed(&self.prefix));
        let v = hex_literal(value);
        let expires = format!("{NOW_US} + {}", micros(keep).max(1));
        let w = format!("(fence <= {fence} OR expires_us <= {NOW_US})");
        let sql = format!(
            "START TRANSACTION; \
             INSERT INTO {table} (k, fence, value, expires_us) VALUES ({k}, {fence}, {v}, {expires}) \
             ON DUPLICATE KEY UPDATE \
               fence = IF({w}, {fence}, fence), \
               value = IF({w}, {v}, value), \
               expires_us = IF({w}, {expires}, expires_us); \
             SELECT fence FROM {table} WHERE k = {k} FOR UPDATE; \
             COMMIT"
        );
        let deadline = self.pools.call();
        let mut created = false;
        let mut contention = RECORD_CONTENTION.start(deadline);
        let answers = loop {
            match self.records_batch(&sql, deadline)? {
                Ok(answers) => break answers,
                // First use: make the table, then write.
                Err(Failure::Server(NO_SUCH_TABLE, _)) if !created => {
                    self.create_records_table(&table, deadline)?;
                    created = true;
                }
                // InnoDB rolled back for a concurrent writer of the key: nothing was written.
                Err(e) if e.is_contention() && contention.pause() => {}
                Err(e) => return Err(self.pools.failed("writing a record", &e)),
            }
        };
        // The locking read's answer: the statement before COMMIT.
        let stored = answers.nth_last(2).value(0).and_then(unsigned);
        let written = match stored {
            Some(s) if s == fence => true,
            Some(s) if s > fence => false,
            other => {
                return Err(Error::Internal(format!(
                    "{table}: after the upsert of fence {fence} the record holds {other:?}"
                )))
            }
        };
        self.sweep_records(&table, deadline);
        Ok(written)
    }
}

/// A column as a `u64` (`BIGINT UNSIGNED` may exceed `i64`).
fn unsigned(v: &Value) -> Option<u64> {
    match v {
        Value::UInt(u) => Some(*u),
        Value::Int(i) => u64::try_from(*i).ok(),
        Value::Bytes(b) => std::str::from_utf8(b).ok()?.trim().parse().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_tables_are_named_after_the_mode_table() {
        use crate::names::table_ident;
        let named = |t: &str| records_ident(&table_ident(t, "_fences"), "_fences");
        let table = |t: &str| records_ident(&table_ident(t, ""), "");
        assert_eq!(named(DEFAULT_MYSQL_TABLE), "`leasehold_records`");
        assert_eq!(table(DEFAULT_MYSQL_TABLE), "`leasehold_records`");
        assert_eq!(named("app_locks"), "`app_locks_records`");
        assert_eq!(table("app_locks"), "`app_locks_records`");
        assert_eq!(table("db.app_locks"), "`db`.`app_locks_records`");
        assert_eq!(named("db.app_locks"), "`db`.`app_locks_records`");
        assert_eq!(
            table("db.leasehold_locks"),
            "`db`.`leasehold_locks_records`"
        );
    }

    #[test]
    fn a_new_table_is_made_on_first_put_and_swept() {
        use leasehold_core::Config;
        use leasehold_testkit::MariaDbServer;
        // A table no earlier run made: the first put creates the records table.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .subsec_nanos();
        let name = format!("fresh{}_{nanos}", std::process::id());
        let url = MariaDbServer::shared()
            .url_with(&format!("lock=named&table={name}&io_timeout_ms=5000"));
        let backend = MysqlBackend::connect(&Config::parse(&url).unwrap()).unwrap();
        let store: &dyn RecordStore = &backend;
        let (short, kept) = (
            Key::new("sweep-short").unwrap(),
            Key::new("sweep-kept").unwrap(),
        );
        assert_eq!(store.get(&kept).unwrap(), None, "no table yet, no record");
        assert!(store
            .put(&short, 1, b"x", Duration::from_millis(1))
            .unwrap());
        assert!(store
            .put(&kept, u64::MAX, b"y", Duration::from_secs(60))
            .unwrap());
        assert_eq!(store.get(&kept).unwrap().map(|r| r.fence), Some(u64::MAX));
        std::thread::sleep(Duration::from_millis(1100));
        let table = backend.records_table();
        assert_eq!(table, format!("`{name}_records`"));
        assert_eq!(
            backend
                .delete_expired(&table, backend.pools.call())
                .unwrap(),
            1
        );
        assert_eq!(store.get(&short).unwrap(), None);
        assert!(store.get(&kept).unwrap().is_some());
        let drop = format!("DROP TABLE {table}, `{name}_fences`");
        call(&backend.pools, backend.pools.call(), &drop, "dropping").unwrap();
    }

    #[test]
    fn fences_read_as_u64() {
        assert_eq!(unsigned(&Value::UInt(u64::MAX)), Some(u64::MAX));
        assert_eq!(
            unsigned(&Value::Bytes(b"18446744073709551615".to_vec())),
            Some(u64::MAX)
        );
        assert_eq!(unsigned(&Value::Int(-1)), None);
        assert_eq!(unsigned(&Value::NULL), None);
    }
}
