//! `leasehold doctor` for MySQL and MariaDB: the server's durability and replication settings, the
//! session's TLS and the server's clock, read in one batch on a pooled session, and each promise
//! judged by them.
//!
//! - Named locks live in the holder's session, so a restart or a failover ends every lease (its
//!   holder sees its session end); table leases live in InnoDB rows, which survive as far as
//!   `innodb_flush_log_at_trx_commit` (and `innodb_doublewrite`) keep committed rows.
//! - A failover keeps a grant only if the promoted replica has it: with the binary log on,
//!   replication is asynchronous unless semi-synchronous replication is on (and it falls back to
//!   asynchronous after its timeout); `sync_binlog` other than 1 lets a host crash leave the binary
//!   log behind InnoDB, so replicas miss commits the primary kept.
//! - `SHOW … WHERE Variable_name IN (…)` rather than `@@name`, so a variable one server does not
//!   have (MySQL's `gtid_mode`, MariaDB's `gtid_strict_mode`, the semi-sync plugin's) is simply
//!   absent, not an error.

use crate::names::NOW_US;
use crate::session::{call, int, Pools};
use leasehold_core::doctor::{
    judge_fence_clock, ClockOffset, Diagnosis, Promise, Verdict, OTHER_VERSIONS,
};
use leasehold_core::Result;
use mysql::Value;
use std::collections::BTreeMap;
use std::time::SystemTime;

const VARIABLES: &[&str] = &[
    "version",
    "version_comment",
    "innodb_flush_log_at_trx_commit",
    "innodb_doublewrite",
    "sync_binlog",
    "log_bin",
    "binlog_format",
    "gtid_mode",
    "gtid_strict_mode",
    "rpl_semi_sync_master_enabled",
    "rpl_semi_sync_source_enabled",
    "rpl_semi_sync_master_timeout",
    "rpl_semi_sync_source_timeout",
    "wait_timeout",
    "interactive_timeout",
    "read_only",
];

const GLOBAL_STATUS: &[&str] = &[
    "Slaves_connected",
    "Rpl_semi_sync_master_clients",
    "Rpl_semi_sync_master_status",
    "Rpl_semi_sync_source_clients",
    "Rpl_semi_sync_source_status",
];

const SESSION_STATUS: &[&str] = &["Ssl_version", "Ssl_cipher"];

/// What the server said: variables and status values by name, and its clock's offset.
#[derive(Debug, Default, Clone)]
pub(crate) struct MyFacts {
    values: BTreeMap<String, String>,
    offset: Option<ClockOffset>,
}

impl MyFacts {
    fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// The first of `names` the server has (MariaDB's and MySQL's names for one thing).
    fn any(&self, names: &[&str]) -> Option<&str> {
        names.iter().find_map(|n| self.get(n))
    }

    fn on(&self, names: &[&str]) -> bool {
        self.any(names)
            .is_some_and(|v| v.eq_ignore_ascii_case("ON") || v == "1")
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
        Value::NULL => String::new(),
        other => int(other).map_or_else(|| format!("{other:?}"), |i| i.to_string()),
    }
}

fn list(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("'{n}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Asks the server, within one call's bound.
pub(crate) fn gather(pools: &Pools) -> Result<MyFacts> {
    let sql = format!(
        "SHOW GLOBAL VARIABLES WHERE Variable_name IN ({}); \
         SHOW GLOBAL STATUS WHERE Variable_name IN ({}); \
         SHOW SESSION STATUS WHERE Variable_name IN ({}); \
         SELECT {NOW_US}",
        list(VARIABLES),
        list(GLOBAL_STATUS),
        list(SESSION_STATUS)
    );
    let before = SystemTime::now();
    let answers = call(pools, pools.call(), &sql, "reading the settings")?;
    let after = SystemTime::now();
    let mut facts = MyFacts::default();
    for answer in answers.iter().take(3) {
        for row in &answer.rows {
            if let [name, value, ..] = row.as_slice() {
                facts.values.insert(text(name), text(value));
            }
        }
    }
    facts.offset = answers[3]
        .int(0)
        .map(|us| ClockOffset::measure(before, us, after));
    Ok(facts)
}

/// Judges the facts of a server used in `named` mode (else table mode).
pub(crate) fn judge(facts: &MyFacts, named: bool) -> Diagnosis {
    let mut d = Diagnosis::new();
    // 0.3 used the same lock names and tables: its clients cannot be told apart from this
    // version's, and need not be, since both draw from and store the same fence.
    d.fact(
        OTHER_VERSIONS,
        "not told apart: 0.3 uses the same lock names and tables",
    );
    for (name, value) in &facts.values {
        d.fact(name.as_str(), if value.is_empty() { "\"\"" } else { value });
    }
    if let Some(o) = facts.offset {
        d.fact(
            "clock_offset_ms",
            format!("{:.1}", o.micros as f64 / 1000.0),
        );
    }
    d.fact("lock_mode", if named { "named" } else { "table" });

    d.judge(
        Promise::Exclusion,
        Verdict::Holds,
        if named {
            "GET_LOCK on a session the lease owns, its TTL kept by the server's clock"
        } else {
            "one InnoDB row per held key, its expiry judged by the server's clock"
        },
    );
    judge_fence_clock(&mut d, "the server's", facts.offset);
    d.judge(
        Promise::FenceOrder,
        Verdict::Holds,
        "0.3 clients, if any, draw from the same stored fence as this version",
    );

    // Surviving a restart.
    if named {
        d.judge(
            Promise::SurvivesRestart,
            Verdict::DoesNotHold,
            "named locks live in sessions: a restart ends every lease (its holder sees its \
             session end)",
        );
    } else {
        let flush = facts.get("innodb_flush_log_at_trx_commit");
        let (verdict, because) = match flush {
            Some("1") => (
                Verdict::Holds,
                "innodb_flush_log_at_trx_commit=1: every grant is on disk before its reply"
                    .to_owned(),
            ),
            Some("2") => (
                Verdict::HoldsIf,
                "innodb_flush_log_at_trx_commit=2: a crash of the server process keeps every \
                 lease; a crash of the host or a power loss may lose about the last second of \
                 grants"
                    .to_owned(),
            ),
            Some(v @ ("0" | "3")) => (
                Verdict::DoesNotHold,
                format!(
                    "innodb_flush_log_at_trx_commit={v}: a crash of the server process loses \
                     about the last second of grants"
                ),
            ),
            _ => (
                Verdict::HoldsIf,
                "innodb_flush_log_at_trx_commit could not be read: rows survive a crash with 1"
                    .to_owned(),
            ),
        };
        d.judge(Promise::SurvivesRestart, verdict, because);
        if facts
            .get("innodb_doublewrite")
            .is_some_and(|v| v == "OFF" || v == "0")
        {
            d.judge(
                Promise::SurvivesRestart,
                Verdict::HoldsIf,
                "innodb_doublewrite=OFF: safe only on storage that writes a whole page \
                 atomically (a torn page after a power loss can corrupt the table)",
            );
        }
    }

    // Surviving a failover.
    let binlog = facts.on(&["log_bin"]);
    let replicas = facts
        .any(&["Slaves_connected"])
        .and_then(|n| n.parse::<u32>().ok());
    let semi_sync = facts.on(&[
        "rpl_semi_sync_master_enabled",
        "rpl_semi_sync_source_enabled",
    ]);
    let semi_clients = facts
        .any(&[
            "Rpl_semi_sync_master_clients",
            "Rpl_semi_sync_source_clients",
        ])
        .and_then(|n| n.parse::<u32>().ok())
        .unwrap_or(0);
    let (verdict, because) = match (binlog, replicas) {
        (false, _) => (
            Verdict::Holds,
            "log_bin=OFF: no replica copies from this server, so nothing to fail over to"
                .to_owned(),
        ),
        (true, Some(0)) => (
            Verdict::Holds,
            "no replicas connected: nothing to fail over to".to_owned(),
        ),
        (true, Some(n)) if named => (
            Verdict::DoesNotHold,
            format!(
                "{n} replicas, but named locks live in sessions: a failover ends every lease \
                 (its holder sees its session end)"
            ),
        ),
        (true, _) if semi_sync && semi_clients > 0 => (
            Verdict::HoldsIf,
            format!(
                "semi-synchronous replication to {semi_clients} replicas: a grant is on a \
                 replica before its reply, unless replication fell back to asynchronous after \
                 rpl_semi_sync_master_timeout={} ms",
                facts
                    .any(&[
                        "rpl_semi_sync_master_timeout",
                        "rpl_semi_sync_source_timeout"
                    ])
                    .unwrap_or("?")
            ),
        ),
        (true, Some(n)) => (
            Verdict::DoesNotHold,
            format!(
                "asynchronous replication to {n} replicas: a promoted replica may miss the \
                 last grants"
            ),
        ),
        (true, None) => (
            Verdict::HoldsIf,
            "log_bin=ON and the replicas could not be counted: asynchronous replicas may miss \
             the last grants"
                .to_owned(),
        ),
    };
    d.judge(Promise::SurvivesFailover, verdict, because);
    if binlog && !named && replicas != Some(0) {
        if let Some(s) = facts.get("sync_binlog").filter(|s| *s != "1") {
            d.judge(
                Promise::SurvivesFailover,
                Verdict::HoldsIf,
                format!(
                    "sync_binlog={s}: after a host crash the binary log may lack grants InnoDB \
                     kept, so replicas miss them"
                ),
            );
        }
    }

    // Seeing a session end.
    if named {
        d.judge(
            Promise::SessionEndSeen,
            Verdict::HoldsIf,
            "named locks live in sessions: a holder stops relying on its lease once the \
             server's goodbye reaches its connection (one network latency); a host or network \
             that vanishes without closing it is noticed only by the lease's TTL",
        );
    } else {
        d.judge(
            Promise::SessionEndSeen,
            Verdict::Holds,
            "leases live in rows, not in sessions: a session that ends takes no lease with it",
        );
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(pairs: &[(&str, &str)]) -> MyFacts {
        MyFacts {
            values: pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            offset: None,
        }
    }

    fn verdict(d: &Diagnosis, p: Promise) -> Verdict {
        d.judgement(p).unwrap().verdict
    }

    #[test]
    fn log_flushing_decides_table_restarts() {
        for (flush, expected) in [
            ("1", Verdict::Holds),
            ("2", Verdict::HoldsIf),
            ("0", Verdict::DoesNotHold),
        ] {
            let f = facts(&[
                ("innodb_flush_log_at_trx_commit", flush),
                ("innodb_doublewrite", "ON"),
                ("log_bin", "OFF"),
            ]);
            let d = judge(&f, false);
            let j = d.judgement(Promise::SurvivesRestart).unwrap();
            assert_eq!(j.verdict, expected, "{flush}");
            assert!(
                j.because
                    .contains(&format!("innodb_flush_log_at_trx_commit={flush}")),
                "{}",
                j.because
            );
            assert_eq!(verdict(&d, Promise::SurvivesFailover), Verdict::Holds);
        }
        let d = judge(&facts(&[("innodb_flush_log_at_trx_commit", "1")]), true);
        assert_eq!(verdict(&d, Promise::SurvivesRestart), Verdict::DoesNotHold);
    }

    #[test]
    fn asynchronous_replicas_lose_the_last_grants() {
        let f = facts(&[
            ("log_bin", "ON"),
            ("Slaves_connected", "2"),
            ("sync_binlog", "1"),
        ]);
        assert_eq!(
            verdict(&judge(&f, false), Promise::SurvivesFailover),
            Verdict::DoesNotHold
        );
        let f = facts(&[
            ("log_bin", "ON"),
            ("Slaves_connected", "2"),
            ("rpl_semi_sync_master_enabled", "ON"),
            ("Rpl_semi_sync_master_clients", "2"),
            ("sync_binlog", "0"),
        ]);
        let d = judge(&f, false);
        let j = d.judgement(Promise::SurvivesFailover).unwrap();
        assert_eq!(j.verdict, Verdict::HoldsIf);
        assert!(j.because.contains("sync_binlog=0"), "{}", j.because);
    }
}
