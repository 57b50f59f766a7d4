//! `leasehold doctor` for PostgreSQL: the server's durability and replication settings, the
//! session's TLS, the privileges the mode needs and the server's clock, read in one statement on a
//! pooled session, and each promise judged by them.
//!
//! - Advisory locks live in the holder's session, so a restart or a failover ends every lease
//!   (the holder sees its session end); table leases live in rows, which survive both as far as
//!   the server's durability settings keep committed rows: `fsync`, `synchronous_commit`,
//!   `full_page_writes`, and for a failover `synchronous_standby_names`. Table mode commits its own
//!   transactions with `synchronous_commit = on` (see `table::DURABLE`), so a server or role
//!   setting of `off` loses no grant.
//! - A pooler in transaction mode hands a session's state (its advisory locks) to whichever client
//!   comes next. What the pooler is comes from the URL's `pooler=` or connect's detection (see
//!   [`Pooler`]).

use crate::session::{last_value, Pools};
use leasehold_core::config::PostgresPooler;
use leasehold_core::doctor::{
    judge_fence_clock, ClockOffset, Diagnosis, Promise, Verdict, OTHER_VERSIONS,
};
use leasehold_core::Result;
use std::time::SystemTime;

/// The pooler in front of the server, as connect settled it: named by the URL's `pooler=`, or
/// detected (a transaction pooler is detected where the server session behind a connection
/// changes; nothing proves a session pooler, which behaves as a direct connection).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pooler {
    pub mode: PostgresPooler,
    pub named: bool,
}

impl Pooler {
    #[cfg(test)]
    const NONE: Pooler = Pooler {
        mode: PostgresPooler::None,
        named: true,
    };

    fn describe(self) -> String {
        let how = if self.named {
            "named by the URL"
        } else {
            "detected at connect; name it with pooler= where detection cannot see it"
        };
        format!("{} ({how})", self.mode.name())
    }
}

/// What the server said, by name (see [`QUESTIONS`]).
#[derive(Debug, Default, Clone)]
pub(crate) struct PgFacts {
    values: Vec<(&'static str, Option<String>)>,
    offset: Option<ClockOffset>,
}

impl PgFacts {
    fn get(&self, name: &str) -> Option<&str> {
        self.values
            .iter()
            .find(|(n, _)| *n == name)
            .and_then(|(_, v)| v.as_deref())
    }
}

/// The questions, as (name, SQL expression giving text). Each is safe for any role: a view a role
/// may not read in full gives counts of what it sees.
const QUESTIONS: &[(&str, &str)] = &[
    ("server_version", "current_setting('server_version')"),
    ("fsync", "current_setting('fsync')"),
    ("synchronous_commit", "current_setting('synchronous_commit')"),
    ("full_page_writes", "current_setting('full_page_writes')"),
    (
        "synchronous_standby_names",
        "current_setting('synchronous_standby_names')",
    ),
    ("wal_level", "current_setting('wal_level')"),
    ("idle_session_timeout", "current_setting('idle_session_timeout')"),
    ("in_recovery", "pg_is_in_recovery()::text"),
    (
        "standbys",
        "(SELECT count(*) FROM pg_stat_replication)::text",
    ),
    (
        "synchronous_standbys",
        "(SELECT count(*) FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum'))::text",
    ),
    (
        "max_replay_lag_s",
        "(SELECT round(max(extract(epoch FROM replay_lag))::numeric, 3) FROM pg_stat_replication)::text",
    ),
    (
        "ssl",
        "coalesce((SELECT CASE WHEN ssl THEN 'on (' || version || ')' ELSE 'off' END \
         FROM pg_stat_ssl WHERE pid = pg_backend_pid()), 'unknown')",
    ),
    (
        "pg_signal_backend",
        "(pg_has_role(current_user, 'pg_signal_backend', 'MEMBER') \
          OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user))::text",
    ),
    (
        "clock_us",
        "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint::text",
    ),
];

/// Asks the server, within one call's bound. `table`: the table mode's table as given in the URL.
pub(crate) fn gather(pools: &Pools, table: Option<&str>) -> Result<PgFacts> {
    let mut questions: Vec<(&'static str, String)> = QUESTIONS
        .iter()
        .map(|(n, sql)| (*n, (*sql).to_owned()))
        .collect();
    match table {
        Some(name) => {
            // Validated identifiers (`name` or `schema.name`), quoted as the table module does.
            let quoted: Vec<String> = name.split('.').map(|p| format!("\"{p}\"")).collect();
            let literal = quoted.join(".").replace('\'', "''");
            questions.push((
                "table_privileges",
                format!(
                    "(has_table_privilege('{literal}', 'SELECT') AND \
                      has_table_privilege('{literal}', 'INSERT') AND \
                      has_table_privilege('{literal}', 'UPDATE') AND \
                      has_table_privilege('{literal}', 'DELETE'))::text"
                ),
            ));
        }
        None => questions.push((
            "fence_sequence_usage",
            format!(
                "coalesce(has_sequence_privilege(to_regclass('{}')::oid, 'USAGE')::text, 'missing')",
                crate::FENCE_SEQUENCE
            ),
        )),
    }
    let sql = format!(
        "SELECT {}",
        questions
            .iter()
            .map(|(_, q)| q.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let before = SystemTime::now();
    let (_conn, rows) = crate::call_rows(pools, pools.call(), &sql, "reading the settings")?;
    let after = SystemTime::now();
    let values: Vec<(&'static str, Option<String>)> = questions
        .iter()
        .enumerate()
        .map(|(i, (n, _))| (*n, last_value(&rows, i).map(str::to_owned)))
        .collect();
    let mut facts = PgFacts {
        values,
        offset: None,
    };
    facts.offset = facts
        .get("clock_us")
        .and_then(|t| t.parse::<i64>().ok())
        .map(|us| ClockOffset::measure(before, us, after));
    Ok(facts)
}

/// Judges the facts of a server used in `advisory` mode (else table mode) behind `pooler`.
pub(crate) fn judge(facts: &PgFacts, advisory: bool, pooler: Pooler) -> Diagnosis {
    let mut d = Diagnosis::new();
    for (name, value) in &facts.values {
        if *name != "clock_us" {
            d.fact(*name, value.as_deref().unwrap_or("unknown"));
        }
    }
    if let Some(o) = facts.offset {
        d.fact(
            "clock_offset_ms",
            format!("{:.1}", o.micros as f64 / 1000.0),
        );
    }
    d.fact("pooler", pooler.describe());
    // 0.3 used the same lock ids, tables and sequences: its clients cannot be told apart from
    // this version's, and need not be, since both draw from and store the same fence.
    d.fact(
        OTHER_VERSIONS,
        "not told apart: 0.3 uses the same lock ids, tables and fence sequence",
    );
    d.fact("lock_mode", if advisory { "advisory" } else { "table" });
    let transaction_pooled = pooler.mode == PostgresPooler::Transaction;

    // Exclusion.
    if advisory && transaction_pooled {
        d.judge(
            Promise::Exclusion,
            Verdict::DoesNotHold,
            "pool_mode=transaction: a session advisory lock stays on whichever server session \
             the pooler picked, and another client's transaction may run on it",
        );
    } else if advisory {
        d.judge(
            Promise::Exclusion,
            Verdict::Holds,
            "session advisory locks, granted by the server's lock manager",
        );
    } else {
        d.judge(
            Promise::Exclusion,
            Verdict::Holds,
            "one row per held key, its expiry judged by the server's clock",
        );
    }

    judge_fence_clock(&mut d, "the server's", facts.offset);
    d.judge(
        Promise::FenceOrder,
        Verdict::Holds,
        "0.3 clients, if any, draw from the same stored fence as this version",
    );

    // Surviving a restart.
    let fsync = facts.get("fsync");
    let commit = facts.get("synchronous_commit");
    let pages = facts.get("full_page_writes");
    if advisory {
        d.judge(
            Promise::SurvivesRestart,
            Verdict::DoesNotHold,
            "advisory locks live in sessions: a restart ends every lease (its holder sees its \
             session end)",
        );
    } else {
        let (verdict, because) = match (fsync, commit, pages) {
            (Some("off"), _, _) => (
                Verdict::DoesNotHold,
                "fsync=off: a crash of the host can lose or corrupt committed rows".to_owned(),
            ),
            (_, _, Some("off")) => (
                Verdict::HoldsIf,
                "full_page_writes=off: safe only on storage that writes a whole page atomically \
                 (a torn page after a power loss can corrupt the table)"
                    .to_owned(),
            ),
            (Some("on"), Some("off"), Some("on")) => (
                Verdict::Holds,
                "fsync=on, synchronous_commit=off but raised to on in Leasehold's own \
                 transactions, full_page_writes=on"
                    .to_owned(),
            ),
            (Some("on"), Some(c), Some("on")) => (
                Verdict::Holds,
                format!("fsync=on, synchronous_commit={c}, full_page_writes=on"),
            ),
            _ => (
                Verdict::HoldsIf,
                "the durability settings could not be read: rows survive a crash with fsync=on \
                 and synchronous_commit not off"
                    .to_owned(),
            ),
        };
        d.judge(Promise::SurvivesRestart, verdict, because);
    }

    // Surviving a failover.
    let standbys = facts.get("standbys").and_then(|n| n.parse::<u32>().ok());
    let synchronous = facts
        .get("synchronous_standbys")
        .and_then(|n| n.parse::<u32>().ok())
        .unwrap_or(0);
    let names = facts.get("synchronous_standby_names").unwrap_or("");
    let lag = facts
        .get("max_replay_lag_s")
        .map_or(String::new(), |l| format!(", replay lag up to {l} s"));
    let (verdict, because) = match standbys {
        None => (
            Verdict::HoldsIf,
            "the standbys could not be counted (pg_stat_replication)".to_owned(),
        ),
        Some(0) => (
            Verdict::Holds,
            "no standbys stream from this server: nothing to fail over to".to_owned(),
        ),
        Some(n) if advisory => (
            Verdict::DoesNotHold,
            format!(
                "{n} standbys, but advisory locks live in sessions: a failover ends every lease \
                 (its holder sees its session end)"
            ),
        ),
        Some(n) if synchronous > 0 && matches!(commit, Some("on" | "remote_apply")) => (
            Verdict::Holds,
            format!(
                "synchronous_standby_names={names}, synchronous_commit={}: each grant is on \
                 {synchronous} of {n} standbys before its reply",
                commit.unwrap_or("on")
            ),
        ),
        Some(_) if synchronous > 0 && commit == Some("remote_write") => (
            Verdict::HoldsIf,
            format!(
                "synchronous_standby_names={names} with synchronous_commit=remote_write: a \
                 standby has each grant written, not flushed (lost if its host crashes too)"
            ),
        ),
        Some(n) => (
            Verdict::DoesNotHold,
            format!(
                "{n} standbys not waited for (synchronous_standby_names={names:?}, \
                 synchronous_commit={}{lag}): a promoted standby may miss the last grants",
                commit.unwrap_or("unknown")
            ),
        ),
    };
    d.judge(Promise::SurvivesFailover, verdict, because);

    // Seeing a session end.
    if !advisory {
        d.judge(
            Promise::SessionEndSeen,
            Verdict::Holds,
            "leases live in rows, not in sessions: a session that ends takes no lease with it",
        );
    } else if transaction_pooled {
        d.judge(
            Promise::SessionEndSeen,
            Verdict::DoesNotHold,
            "pool_mode=transaction: the client's connection is to the pooler, not to the \
             session holding the lock",
        );
    } else {
        d.judge(
            Promise::SessionEndSeen,
            Verdict::HoldsIf,
            "advisory locks live in sessions: a holder stops relying on its lease once the \
             server's goodbye reaches its connection (one network latency); a host or network \
             that vanishes without closing it is noticed only by the lease's TTL",
        );
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(pairs: &[(&'static str, &str)]) -> PgFacts {
        PgFacts {
            values: pairs
                .iter()
                .map(|(n, v)| (*n, Some((*v).to_owned())))
                .collect(),
            offset: None,
        }
    }

    fn verdict(d: &Diagnosis, p: Promise) -> Verdict {
        d.judgement(p).unwrap().verdict
    }

    const DURABLE: &[(&str, &str)] = &[
        ("fsync", "on"),
        ("synchronous_commit", "on"),
        ("full_page_writes", "on"),
        ("standbys", "0"),
    ];

    #[test]
    fn durability_settings_decide_table_restarts() {
        let d = judge(&facts(DURABLE), false, Pooler::NONE);
        assert_eq!(verdict(&d, Promise::SurvivesRestart), Verdict::Holds);
        assert_eq!(verdict(&d, Promise::SessionEndSeen), Verdict::Holds);
        for (name, value, expected) in [
            ("fsync", "off", Verdict::DoesNotHold),
            ("synchronous_commit", "off", Verdict::Holds),
            ("full_page_writes", "off", Verdict::HoldsIf),
        ] {
            let mut f = facts(DURABLE);
            f.values.retain(|(n, _)| *n != name);
            f.values.push((name, Some(value.to_owned())));
            let d = judge(&f, false, Pooler::NONE);
            let j = d.judgement(Promise::SurvivesRestart).unwrap();
            assert_eq!(j.verdict, expected, "{name}={value}");
            assert!(
                j.because.contains(&format!("{name}={value}")),
                "{}",
                j.because
            );
        }
    }

    #[test]
    fn advisory_leases_end_with_their_session() {
        let d = judge(&facts(DURABLE), true, Pooler::NONE);
        assert_eq!(verdict(&d, Promise::SurvivesRestart), Verdict::DoesNotHold);
        assert_eq!(verdict(&d, Promise::Exclusion), Verdict::Holds);
        let d = judge(
            &facts(DURABLE),
            true,
            Pooler {
                mode: PostgresPooler::Transaction,
                named: true,
            },
        );
        let j = d.judgement(Promise::Exclusion).unwrap();
        assert_eq!(j.verdict, Verdict::DoesNotHold);
        assert!(j.because.contains("pool_mode=transaction"), "{}", j.because);
    }

    #[test]
    fn asynchronous_standbys_lose_the_last_grants() {
        let mut f = facts(DURABLE);
        f.values.push(("standbys", Some("2".into())));
        f.values
            .retain(|(n, v)| *n != "standbys" || v.as_deref() == Some("2"));
        let d = judge(&f, false, Pooler::NONE);
        assert_eq!(verdict(&d, Promise::SurvivesFailover), Verdict::DoesNotHold);
        f.values.push(("synchronous_standbys", Some("1".into())));
        let d = judge(&f, false, Pooler::NONE);
        assert_eq!(verdict(&d, Promise::SurvivesFailover), Verdict::Holds);
    }
}
