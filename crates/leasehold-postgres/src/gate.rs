//! The fence gate: the check that makes a fence worth having, at the store the lock protects.
//!
//! A lease can end while its holder still believes in it (a GC pause, a SIGSTOP, a slow network):
//! the lock then goes to someone else, and the old holder's late write races the new one. The gate
//! refuses that write. It keeps, per resource, the highest fence it accepted, in a table of the
//! protected database (`leasehold_fences` by default), and [`FenceGate::guard`] — a statement in
//! the caller's own transaction, before the caller's writes — accepts a fence equal to or above the
//! stored one (equal: the same holder writing again) and refuses an older one with
//! [`GateError::Stale`]. The caller then rolls back: nothing of the stale holder commits.
//!
//! Why it holds under concurrency: the upsert locks the resource's row until the caller's
//! transaction ends, so two writers of one resource are serialized on that row, and the second one
//! is judged against what the first committed (READ COMMITTED re-reads the row once the lock is
//! granted; under REPEATABLE READ or SERIALIZABLE the server refuses it with a serialization
//! failure instead, which is just as safe). A writer refused by the gate never reaches its writes.
//!
//! What it does not do: it orders writes that go through it, nothing else; a write that skips the
//! gate, or goes to another database, is not protected. See docs/gate.md.

use leasehold_core::gate::{check_resource, sql_fence, GateTable};
pub use leasehold_core::gate::{GateError, DEFAULT_TABLE, MAX_RESOURCE_LEN};
use leasehold_core::Error;
use postgres::types::Type;
use postgres::{GenericClient, Transaction};

/// The longest identifier PostgreSQL keeps (`NAMEDATALEN - 1`); longer ones would be truncated
/// silently, so two different names could mean one table.
const MAX_IDENTIFIER_LEN: usize = 63;

/// The gate over one table. Cheap to clone; holds no connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FenceGate {
    /// Each part double-quoted: the name is used exactly as given, like table mode's lock table.
    table: GateTable,
}

impl Default for FenceGate {
    fn default() -> Self {
        FenceGate::new(DEFAULT_TABLE).expect("the default table name is valid")
    }
}

impl FenceGate {
    /// A gate over `table`: an SQL identifier (`[A-Za-z_][A-Za-z0-9_]*`, at most 63 bytes),
    /// optionally schema-qualified (`schema.table`). Anything else is `InvalidArgument`: the name
    /// goes into SQL text, so only names that cannot change a statement are accepted.
    pub fn new(table: &str) -> leasehold_core::Result<FenceGate> {
        Ok(FenceGate {
            table: GateTable::new(table, MAX_IDENTIFIER_LEN, '"', "schema")?,
        })
    }

    /// The table's name, as given.
    pub fn table(&self) -> &str {
        self.table.name()
    }

    /// Creates the table if it does not exist. Safe to call from several processes at once.
    pub fn create_table(&self, client: &mut impl GenericClient) -> leasehold_core::Result<()> {
        let sql = format!(
            "CREATE TABLE IF NOT EXISTS {} (resource text PRIMARY KEY, fence bigint NOT NULL, \
             updated_at timestamptz NOT NULL DEFAULT now())",
            self.table.quoted()
        );
        match client.batch_execute(&sql) {
            Ok(()) => Ok(()),
            // IF NOT EXISTS does not cover a creation racing ours: it ends in a unique violation
            // on the catalog (or the type); the table is there either way.
            Err(e)
                if e.code()
                    .is_some_and(|c| CREATED_MEANWHILE.contains(&c.code())) =>
            {
                Ok(())
            }
            Err(e) => Err(self.failed("creating the table", &e)),
        }
    }

    /// Lets the caller's write to `resource` through if `fence` is at least the highest fence
    /// accepted for it so far, and records `fence` as the highest; [`GateError::Stale`] otherwise.
    /// Run it inside the transaction that makes the protected writes, before them, and roll back
    /// on any error: the resource's row stays locked until that transaction ends, which is what
    /// orders two writers.
    ///
    /// `InvalidArgument` for an empty resource, one above [`MAX_RESOURCE_LEN`] bytes or with a
    /// NUL (PostgreSQL's text cannot hold one), and for fence 0 (no lease has it: it is what a
    /// missing lease reads as) or above `i64::MAX` (the column is a `bigint`; every Leasehold
    /// backend's fences fit).
    pub fn guard(
        &self,
        tx: &mut Transaction<'_>,
        resource: &str,
        fence: u64,
    ) -> Result<(), GateError> {
        check_resource(resource.as_bytes())?;
        let fence_param = sql_fence(fence)?;
        // One round trip when the write is let through (the common case): typed parameters need
        // no separate Parse, and nothing is left prepared on the session (PgBouncer-safe).
        let upsert = format!(
            "INSERT INTO {t} AS g (resource, fence) VALUES ($1, $2) \
             ON CONFLICT (resource) DO UPDATE SET fence = EXCLUDED.fence, updated_at = now() \
             WHERE g.fence <= EXCLUDED.fence RETURNING g.fence",
            t = self.table.quoted()
        );
        let params: [(&(dyn postgres::types::ToSql + Sync), Type); 2] =
            [(&resource, Type::TEXT), (&fence_param, Type::INT8)];
        let accepted = tx
            .query_typed_opt(&upsert, &params)
            .map_err(|e| self.failed("guard", &e))?;
        if accepted.is_some() {
            return Ok(());
        }
        // Refused: the upsert locked the row even so (ON CONFLICT locks the row it does not
        // update), so the value read now is the one that refused us. A statement of its own and
        // not a CTE beside the upsert: a CTE's read would see the statement's snapshot, taken
        // before a concurrent writer we waited for had committed.
        let read = format!(
            "SELECT fence FROM {} WHERE resource = $1",
            self.table.quoted()
        );
        let row = tx
            .query_typed_opt(&read, &[(&resource, Type::TEXT)])
            .map_err(|e| self.failed("reading the stored fence", &e))?;
        let stored: i64 = row
            .map(|r| r.try_get(0))
            .transpose()
            .map_err(|e| self.failed("reading the stored fence", &e))?
            .unwrap_or(0);
        Err(GateError::Stale {
            resource: resource.to_owned(),
            fence,
            stored: u64::try_from(stored).unwrap_or(0),
        })
    }

    /// A database error as `Unavailable`, naming the table, the step and the SQLSTATE (so a caller
    /// can tell a serialization failure, 40001, worth a retry of its transaction).
    fn failed(&self, what: &str, e: &postgres::Error) -> Error {
        let code = e
            .code()
            .map(|c| format!(" (SQLSTATE {})", c.code()))
            .unwrap_or_default();
        let detail = e
            .as_db_error()
            .map(|d| d.message().to_owned())
            .unwrap_or_else(|| e.to_string());
        // The server's message only: a connected client's errors never carry its connection
        // string, so there is no secret to mask.
        Error::Unavailable(format!(
            "fence gate on {}: {what} failed: {detail}{code}",
            self.table.name()
        ))
    }
}

/// SQLSTATEs of a `CREATE … IF NOT EXISTS` that lost a race with the same creation.
const CREATED_MEANWHILE: [&str; 3] = ["23505", "42P07", "42710"];

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_core::ErrorKind;

    #[test]
    fn table_names_are_identifiers_optionally_schema_qualified() {
        assert_eq!(FenceGate::default().table.quoted(), "\"leasehold_fences\"");
        assert_eq!(
            FenceGate::new("app.Fences").unwrap().table.quoted(),
            "\"app\".\"Fences\""
        );
        let longest = "t".repeat(MAX_IDENTIFIER_LEN);
        assert!(FenceGate::new(&longest).is_ok());
        for bad in [
            "",
            ".",
            "a.",
            ".a",
            "a.b.c",
            "1abc",
            "a-b",
            "a b",
            "fences;DROP TABLE x",
            "\"quoted\"",
            "tä",
            &"t".repeat(MAX_IDENTIFIER_LEN + 1),
        ] {
            let e = FenceGate::new(bad).expect_err(bad);
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{bad:?}");
        }
    }
}
