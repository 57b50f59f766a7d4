//! The fence gate's text for C programs and shell jobs: the SQL statements and the Redis script
//! that `docs/gate.md` explains and its tests run, handed out by `leasehold_fence_gate_text` so a
//! C program need not copy them (a test keeps the two equal).

use std::ffi::{c_char, CStr};

/// Which text `leasehold_fence_gate_text` gives. The values never change.
#[repr(C)]
#[allow(non_camel_case_types, clippy::enum_variant_names)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum leasehold_gate_text {
    /// PostgreSQL: the table (`CREATE TABLE IF NOT EXISTS`), run once by its owner.
    LEASEHOLD_GATE_POSTGRES_TABLE = 0,
    /// PostgreSQL: the guard, in the writer's transaction before its writes; `$1` the resource, `$2` the fence. One row affected: accepted; none: stale, roll back.
    LEASEHOLD_GATE_POSTGRES_GUARD = 1,
    /// MySQL/MariaDB: the table, created outside the writers' transactions (DDL commits).
    LEASEHOLD_GATE_MYSQL_TABLE = 2,
    /// MySQL/MariaDB: the guard, two statements in the writer's transaction (parameters: resource, fence, fence, fence, fence, resource). The fence read back equal to yours: accepted; larger: stale, roll back.
    LEASEHOLD_GATE_MYSQL_GUARD = 3,
    /// SQLite: the table.
    LEASEHOLD_GATE_SQLITE_TABLE = 4,
    /// SQLite (3.24+): the guard, the first statement of the writer's transaction; `sqlite3_changes()` 1: accepted, 0: stale, roll back.
    LEASEHOLD_GATE_SQLITE_GUARD = 5,
    /// Redis: the Lua script of a fenced write (`EVAL script 1 KEY value fence`): `{1, fence}` written, `{0, stored}` refused as stale.
    LEASEHOLD_GATE_REDIS_SCRIPT = 6,
}

const POSTGRES_TABLE: &CStr = cr#"CREATE TABLE IF NOT EXISTS leasehold_fences (
  resource   text        PRIMARY KEY,
  fence      bigint      NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now()
);
"#;

const POSTGRES_GUARD: &CStr =
    cr#"INSERT INTO leasehold_fences AS g (resource, fence) VALUES ($1, $2)
ON CONFLICT (resource) DO UPDATE SET fence = EXCLUDED.fence, updated_at = now()
WHERE g.fence <= EXCLUDED.fence;
"#;

const MYSQL_TABLE: &CStr = cr#"CREATE TABLE IF NOT EXISTS leasehold_fences (
  resource   VARBINARY(1024) NOT NULL PRIMARY KEY,
  fence      BIGINT          NOT NULL,
  updated_at TIMESTAMP(6)    NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB;
"#;

const MYSQL_GUARD: &CStr = cr#"INSERT INTO leasehold_fences (resource, fence) VALUES (?, ?)
ON DUPLICATE KEY UPDATE updated_at = IF(fence <= ?, CURRENT_TIMESTAMP(6), updated_at),
                        fence      = IF(fence <= ?, ?, fence);
SELECT fence FROM leasehold_fences WHERE resource = ? FOR UPDATE;
"#;

const SQLITE_TABLE: &CStr = cr#"CREATE TABLE IF NOT EXISTS leasehold_fences (
  resource   TEXT    NOT NULL PRIMARY KEY,
  fence      INTEGER NOT NULL,
  updated_at TEXT    NOT NULL DEFAULT CURRENT_TIMESTAMP
);
"#;

const SQLITE_GUARD: &CStr = cr#"INSERT INTO leasehold_fences (resource, fence) VALUES (?, ?)
ON CONFLICT (resource) DO UPDATE SET fence = excluded.fence, updated_at = CURRENT_TIMESTAMP
WHERE fence <= excluded.fence;
"#;

/// The Redis gate is the script the Redis backend runs itself (one text, kept in its `.lua` file).
const REDIS_SCRIPT: &CStr = match CStr::from_bytes_with_nul(
    concat!(
        include_str!("../../leasehold-redis/src/lua/fence_gate.lua"),
        "\0"
    )
    .as_bytes(),
) {
    Ok(text) => text,
    Err(_) => panic!("the gate script holds a NUL byte"),
};

/// The text of one statement (or script) of the fence gate (`which`: a `leasehold_gate_text`
/// value) for the default table
/// `leasehold_fences`, as a NUL-terminated string that lives as long as the library (never free
/// it); NULL for an unknown `which`. See `docs/gate.md` for what each does, and why the gate
/// matters: a holder whose lease ran out while it was paused writes nothing once a newer holder
/// has written. Thread-safe; makes no call.
#[no_mangle]
pub extern "C" fn leasehold_fence_gate_text(which: u32) -> *const c_char {
    use leasehold_gate_text::*;
    let text = match which {
        w if w == LEASEHOLD_GATE_POSTGRES_TABLE as u32 => POSTGRES_TABLE,
        w if w == LEASEHOLD_GATE_POSTGRES_GUARD as u32 => POSTGRES_GUARD,
        w if w == LEASEHOLD_GATE_MYSQL_TABLE as u32 => MYSQL_TABLE,
        w if w == LEASEHOLD_GATE_MYSQL_GUARD as u32 => MYSQL_GUARD,
        w if w == LEASEHOLD_GATE_SQLITE_TABLE as u32 => SQLITE_TABLE,
        w if w == LEASEHOLD_GATE_SQLITE_GUARD as u32 => SQLITE_GUARD,
        w if w == LEASEHOLD_GATE_REDIS_SCRIPT as u32 => REDIS_SCRIPT,
        _ => return std::ptr::null(),
    };
    text.as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The blocks of `docs/gate.md` (which its tests run against real servers) and these texts are
    /// the same.
    #[test]
    fn texts_match_the_documented_ones() {
        let doc =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/gate.md"))
                .expect("docs/gate.md");
        let text = |which: u32| {
            let ptr = leasehold_fence_gate_text(which);
            assert!(!ptr.is_null());
            // SAFETY: a static NUL-terminated string.
            unsafe { CStr::from_ptr(ptr) }.to_str().unwrap().to_owned()
        };
        for which in 0..7 {
            let t = text(which);
            for chunk in t.split("\n\n") {
                assert!(
                    doc.contains(chunk.trim_end()),
                    "not in docs/gate.md: {chunk}"
                );
            }
        }
        assert!(leasehold_fence_gate_text(7).is_null());
        assert!(leasehold_fence_gate_text(u32::MAX).is_null());
    }
}
