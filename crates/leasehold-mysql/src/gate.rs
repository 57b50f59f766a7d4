//! The fence gate for a MySQL/MariaDB store: the check that makes a fence worth having, at the
//! store the lock protects (the PostgreSQL twin is `leasehold_postgres::gate`; see docs/gate.md).
//!
//! A lease can end while its holder still believes in it (a GC pause, a SIGSTOP, a slow network);
//! the old holder's late write then races the new holder's. The gate keeps, per resource, the
//! highest fence it accepted, in an InnoDB table of the protected database (`leasehold_fences` by
//! default), and [`FenceGate::guard`] — statements in the caller's own transaction, before the
//! caller's writes — accepts a fence equal to or above the stored one and refuses an older one
//! with [`GateError::Stale`]; the caller then rolls back.
//!
//! # Why two statements, and why the decision is read back rather than counted
//!
//! `INSERT … ON DUPLICATE KEY UPDATE fence = IF(fence <= ?, ?, fence)` alone does the right write,
//! but its affected-row count cannot say whether the write was accepted: 1 for an insert, 2 for an
//! update, and 0 for a row left as it was — which is both an equal fence (accepted) and an older
//! one (refused); and a connection with `CLIENT_FOUND_ROWS` (PDO's `MYSQL_ATTR_FOUND_ROWS`, some
//! drivers' default) reports 1 for those instead. So the gate makes that upsert, which creates the
//! row if needed and leaves it exclusively locked until the transaction ends, and then reads the
//! row with `SELECT … FOR UPDATE`: a locking read sees the latest committed version (not the
//! transaction's snapshot), so the fence it returns is what the decision was made against. Stored
//! equal to ours: accepted; above ours: refused.
//!
//! The upsert comes first, and not a `SELECT … FOR UPDATE` of a row that may not exist yet: under
//! REPEATABLE READ (InnoDB's default) a locking read of a missing row takes a gap lock, two first
//! writers of one resource both get one, and their inserts then deadlock. Inserting first, the
//! second writer simply waits for the first one's row.

use leasehold_core::gate::{check_resource, sql_fence, GateTable};
pub use leasehold_core::gate::{GateError, DEFAULT_TABLE, MAX_RESOURCE_LEN};
use leasehold_core::Error;
use mysql::prelude::Queryable;
use mysql::Transaction;

/// The longest identifier MySQL and MariaDB accept.
const MAX_IDENTIFIER_LEN: usize = 64;

/// The gate over one table. Cheap to clone; holds no connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FenceGate {
    /// Each part back-quoted: the name is used exactly as given.
    table: GateTable,
}

impl Default for FenceGate {
    fn default() -> Self {
        FenceGate::new(DEFAULT_TABLE).expect("the default table name is valid")
    }
}

impl FenceGate {
    /// A gate over `table`: an SQL identifier (`[A-Za-z_][A-Za-z0-9_]*`, at most 64 bytes),
    /// optionally qualified by its database (`db.table`). Anything else is `InvalidArgument`: the
    /// name goes into SQL text, so only names that cannot change a statement are accepted.
    pub fn new(table: &str) -> leasehold_core::Result<FenceGate> {
        Ok(FenceGate {
            table: GateTable::new(table, MAX_IDENTIFIER_LEN, '`', "database")?,
        })
    }

    /// The table's name, as given.
    pub fn table(&self) -> &str {
        self.table.name()
    }

    /// Creates the table if it does not exist. Note that DDL commits an open transaction in
    /// MySQL: call it outside the transactions that write.
    pub fn create_table(&self, conn: &mut impl Queryable) -> leasehold_core::Result<()> {
        // VARBINARY: resources compare byte for byte, whatever the server's default collation
        // (a case-insensitive one would make `Report` and `report` one resource).
        let sql = format!(
            "CREATE TABLE IF NOT EXISTS {} (resource VARBINARY({MAX_RESOURCE_LEN}) NOT NULL \
             PRIMARY KEY, fence BIGINT NOT NULL, updated_at TIMESTAMP(6) NOT NULL DEFAULT \
             CURRENT_TIMESTAMP(6)) ENGINE=InnoDB",
            self.table.quoted()
        );
        conn.query_drop(sql)
            .map_err(|e| self.failed("creating the table", &e))
    }

    /// Lets the caller's write to `resource` through if `fence` is at least the highest fence
    /// accepted for it so far, and records `fence` as the highest; [`GateError::Stale`] otherwise.
    /// Run it inside the transaction that makes the protected writes, before them, and roll back
    /// on any error: the resource's row stays locked until that transaction ends, which is what
    /// orders two writers. A deadlock error (1213) means the server already rolled the whole
    /// transaction back.
    ///
    /// `InvalidArgument` for an empty resource, one above [`MAX_RESOURCE_LEN`] bytes or with a
    /// NUL, and for fence 0 (no lease has it) or above `i64::MAX` (the column is a `BIGINT`; every
    /// Leasehold backend's fences fit).
    pub fn guard(
        &self,
        tx: &mut Transaction<'_>,
        resource: &str,
        fence: u64,
    ) -> Result<(), GateError> {
        check_resource(resource.as_bytes())?;
        let f = sql_fence(fence)?;
        // `updated_at` first: assignments run left to right and see the values already set.
        let upsert = format!(
            "INSERT INTO {} (resource, fence) VALUES (?, ?) ON DUPLICATE KEY UPDATE \
             updated_at = IF(fence <= ?, CURRENT_TIMESTAMP(6), updated_at), \
             fence = IF(fence <= ?, ?, fence)",
            self.table.quoted()
        );
        let key = resource.as_bytes();
        tx.exec_drop(upsert, (key, f, f, f, f))
            .map_err(|e| self.failed("guard", &e))?;
        let read = format!(
            "SELECT fence FROM {} WHERE resource = ? FOR UPDATE",
            self.table.quoted()
        );
        let stored: Option<i64> = tx
            .exec_first(read, (key,))
            .map_err(|e| self.failed("reading the stored fence", &e))?;
        match stored {
            Some(s) if s == f => Ok(()),
            Some(s) if s > f => Err(GateError::Stale {
                resource: resource.to_owned(),
                fence,
                stored: s as u64,
            }),
            // The upsert just wrote a fence at least ours, under a lock this transaction holds.
            other => Err(Error::Internal(format!(
                "fence gate on {}: after the upsert of fence {fence} the row holds {other:?}",
                self.table.name()
            ))
            .into()),
        }
    }

    /// A database error as `Unavailable`, naming the table and the step (the driver's text has the
    /// server's error code, so a caller can tell a deadlock, 1213, worth a retry).
    fn failed(&self, what: &str, e: &mysql::Error) -> Error {
        // A connected session's errors never carry its URL: there is no secret to mask.
        Error::Unavailable(format!(
            "fence gate on {}: {what} failed: {e}",
            self.table.name()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_core::ErrorKind;

    #[test]
    fn table_names_are_identifiers_optionally_qualified() {
        assert_eq!(FenceGate::default().table.quoted(), "`leasehold_fences`");
        assert_eq!(
            FenceGate::new("app.Fences").unwrap().table.quoted(),
            "`app`.`Fences`"
        );
        assert!(FenceGate::new(&"t".repeat(MAX_IDENTIFIER_LEN)).is_ok());
        for bad in [
            "",
            "a.",
            ".a",
            "a.b.c",
            "9t",
            "a-b",
            "t`; DROP TABLE x; --",
            "tä",
            &"t".repeat(MAX_IDENTIFIER_LEN + 1),
        ] {
            let e = FenceGate::new(bad).expect_err(bad);
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{bad:?}");
        }
    }
}
