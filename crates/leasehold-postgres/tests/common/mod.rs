//! What the fault tests read from the server's side: one value of a query, and who holds an advisory
//! lock.

use postgres::SimpleQueryMessage;

/// The first column of the first row of `sql`.
pub fn scalar(db: &mut postgres::Client, sql: &str) -> Option<String> {
    db.simple_query(sql)
        .expect(sql)
        .into_iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(r.get(0).map(str::to_owned)),
            _ => None,
        })
        .flatten()
}

/// How many sessions hold the advisory lock `id`.
#[allow(dead_code)]
pub fn advisory_holders(db: &mut postgres::Client, id: i64) -> u32 {
    holders_where(db, id, "")
}

/// How many sessions hold the advisory lock `id` and wait idle for their next statement.
#[allow(dead_code)]
pub fn idle_queue_holders(db: &mut postgres::Client, id: i64) -> u32 {
    holders_where(
        db,
        id,
        "AND pid IN (SELECT pid FROM pg_stat_activity WHERE state = 'idle')",
    )
}

fn holders_where(db: &mut postgres::Client, id: i64, and: &str) -> u32 {
    let id = id as u64;
    let sql = format!(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted \
         AND classid = {} AND objid = {} AND objsubid = 1 {and}",
        id >> 32,
        id & 0xffff_ffff
    );
    scalar(db, &sql).and_then(|n| n.parse().ok()).unwrap_or(0)
}
