//! `leasehold doctor` for every Redis topology: what each master the client uses says about itself
//! (`INFO`, which managed services that rename or forbid `CONFIG` still answer; `CONFIG GET` for the
//! two settings `INFO` does not show, where allowed; `TIME`), and each promise judged by it.
//!
//! - Exclusion: a lock key is a key with a TTL, exactly what every evicting `maxmemory-policy`
//!   (`volatile-*` as much as `allkeys-*`) drops under memory pressure, and a dropped key is a free
//!   one while its holder still holds. Only `noeviction`, or no memory limit, keeps them.
//! - Surviving a restart: only the append-only file keeps every acknowledged write; RDB snapshots
//!   keep what was there at the last one. With `appendfsync everysec` (or `no`) a crash of the
//!   process keeps every write (it is in the kernel's page cache before the reply goes out) and a
//!   crash of the host may lose the last second (or more); `always` loses nothing.
//! - Surviving a failover: a replica copies asynchronously; only `replicas=N` (`WAIT`) makes a grant
//!   count once N replicas have it.
//! - Fence order: fences are `max(stored + 1, server µs)`, so a lost counter is replaced by the
//!   server's clock, which must not step back; the server's clock is compared with this host's.
//!   Where 0.3 clients share the keys (their fence counters found by `versions.rs`), a 0.3 client
//!   taking a key after a release of this version draws from the clock alone, so the order then
//!   rests on the clock never stepping back.

use crate::node::Node;
use crate::topology::Topology;
use crate::versions::{self, Seen};
use leasehold_core::doctor::{
    judge_fence_clock, ClockOffset, Diagnosis, Promise, Verdict, CLOCK_AGREEMENT, OTHER_VERSIONS,
};
use leasehold_core::{Deadline, Error, Result};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

/// What one server told about itself.
#[derive(Debug, Default)]
pub(crate) struct NodeFacts {
    /// `INFO`'s `name:value` lines; `None` when it could not be read (denied, no answer).
    info: Option<HashMap<String, String>>,
    /// `CONFIG GET appendfsync` and `save`, where allowed.
    config: HashMap<String, String>,
    offset: Option<ClockOffset>,
    /// Why a question was not answered (the first one).
    error: Option<String>,
    /// Whether the server answered at all.
    reachable: bool,
}

impl NodeFacts {
    fn info(&self, name: &str) -> Option<&str> {
        self.info.as_ref()?.get(name).map(String::as_str)
    }
}

/// Asks `node` for its settings, within one call's bound.
pub(crate) fn gather(node: &Node, deadline: Deadline) -> NodeFacts {
    let mut facts = NodeFacts::default();
    match node.call("doctor", deadline, |c| {
        redis::cmd("INFO").query::<String>(c)
    }) {
        Ok(text) => {
            facts.info = Some(parse_info(&text));
            facts.reachable = true;
        }
        Err(e) => {
            facts.error = Some(e.message().to_owned());
            // An ACL may deny INFO (the rest is then judged `holds_if`); a server that is gone
            // answers nothing else either.
            facts.reachable = node
                .call("doctor", deadline, |c| {
                    redis::cmd("PING").query::<String>(c)
                })
                .is_ok();
            if !facts.reachable {
                return facts;
            }
        }
    }
    for name in ["appendfsync", "save"] {
        let got = node.call("doctor", deadline, |c| {
            redis::cmd("CONFIG")
                .arg("GET")
                .arg(name)
                .query::<HashMap<String, String>>(c)
        });
        if let Ok(mut pairs) = got {
            if let Some(value) = pairs.remove(name) {
                facts.config.insert(name.to_owned(), value);
            }
        }
    }
    let before = SystemTime::now();
    if let Ok((secs, micros)) = node.call("doctor", deadline, |c| {
        redis::cmd("TIME").query::<(i64, i64)>(c)
    }) {
        let after = SystemTime::now();
        let server = secs.saturating_mul(1_000_000).saturating_add(micros);
        facts.offset = Some(ClockOffset::measure(before, server, after));
    }
    facts
}

fn parse_info(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

/// How this client reaches its masters, for the failover judgement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failover {
    /// `redis://`, `redis+unix://`: nothing promotes a replica unless someone does it by hand.
    Manual,
    /// Sentinel or Cluster: a replica is promoted when the master fails.
    Automatic,
    /// Redlock: independent masters, a lease lives on a majority of them.
    Redlock,
}

/// Judges one master (`label`: empty for a single server, else its address) into `d`.
pub(crate) fn judge_node(
    d: &mut Diagnosis,
    label: &str,
    facts: &NodeFacts,
    replicas: u32,
    failover: Failover,
) {
    let name = |key: &str| {
        if label.is_empty() {
            key.to_owned()
        } else {
            format!("{label} {key}")
        }
    };
    let server = if label.is_empty() {
        "the server's".to_owned()
    } else {
        format!("{label}'s")
    };
    let at = |what: String| {
        if label.is_empty() {
            what
        } else {
            format!("{label}: {what}")
        }
    };
    if let Some(e) = &facts.error {
        d.fact(name("error"), e);
    }
    for key in [
        "redis_version",
        "role",
        "maxmemory",
        "maxmemory_policy",
        "aof_enabled",
        "connected_slaves",
    ] {
        if let Some(v) = facts.info(key) {
            d.fact(name(key), v);
        }
    }
    for (k, v) in &facts.config {
        d.fact(name(k), if v.is_empty() { "\"\"" } else { v });
    }
    if let Some(o) = facts.offset {
        d.fact(
            name("clock_offset_ms"),
            format!("{:.1}", o.micros as f64 / 1000.0),
        );
    }

    // Exclusion: eviction.
    let maxmemory = facts.info("maxmemory").and_then(|m| m.parse::<u64>().ok());
    let policy = facts.info("maxmemory_policy");
    let (verdict, because) = match (maxmemory, policy) {
        (_, Some("noeviction")) => (Verdict::Holds, "maxmemory-policy=noeviction".to_owned()),
        (Some(0), Some(p)) => (
            Verdict::Holds,
            format!("maxmemory=0 (no memory limit, so maxmemory-policy={p} never evicts)"),
        ),
        (Some(m), Some(p)) => (
            Verdict::DoesNotHold,
            format!(
                "maxmemory-policy={p} with maxmemory={m}: under memory pressure the server \
                 evicts lock keys, freeing keys whose holders still hold them"
            ),
        ),
        _ => (
            Verdict::HoldsIf,
            "INFO memory could not be read: the eviction policy must be noeviction (or no \
             maxmemory)"
                .to_owned(),
        ),
    };
    d.judge(Promise::Exclusion, verdict, at(because));

    judge_fence_clock(d, &server, facts.offset);

    // Surviving a restart: persistence.
    if failover == Failover::Redlock {
        d.judge(
            Promise::SurvivesRestart,
            Verdict::Holds,
            "a Redlock node back without its data grants nothing until every lease it may have \
             granted is over, and a lease lives on a majority",
        );
    } else {
        let aof = facts.info("aof_enabled");
        let fsync = facts.config.get("appendfsync").map(String::as_str);
        let save = facts.config.get("save").map(String::as_str);
        let (verdict, because) = match (aof, fsync) {
            (Some("1"), Some("always")) => (
                Verdict::Holds,
                "appendonly=yes, appendfsync=always: every grant is on disk before its reply"
                    .to_owned(),
            ),
            (Some("1"), Some(f @ ("everysec" | "no"))) => (
                Verdict::HoldsIf,
                format!(
                    "appendonly=yes, appendfsync={f}: a restart or a crash of the process keeps \
                     every lease; a crash of the host or a power loss may lose the last {}",
                    if f == "no" {
                        "writes the kernel had not flushed (up to about 30 s)"
                    } else {
                        "second of grants"
                    }
                ),
            ),
            (Some("1"), _) => (
                Verdict::HoldsIf,
                "appendonly=yes, appendfsync unknown (CONFIG denied): a crash of the process \
                 keeps every lease; a crash of the host may lose the last writes"
                    .to_owned(),
            ),
            (Some(_), _) => (
                Verdict::DoesNotHold,
                match save {
                    Some("") => "appendonly=no and no RDB save points: a restart loses every \
                                 lease, and their holders go on believing"
                        .to_owned(),
                    Some(s) => format!(
                        "appendonly=no (RDB snapshots only, save {s}): a restart loses every \
                         lease granted since the last snapshot"
                    ),
                    None => "appendonly=no: a restart loses every lease granted since the last \
                             RDB snapshot, if any"
                        .to_owned(),
                },
            ),
            (None, _) => (
                Verdict::HoldsIf,
                "INFO persistence could not be read: leases survive a restart only with \
                 appendonly=yes"
                    .to_owned(),
            ),
        };
        d.judge(Promise::SurvivesRestart, verdict, at(because));
    }

    // Surviving a failover: replicas.
    let connected = facts
        .info("connected_slaves")
        .and_then(|n| n.parse::<u32>().ok());
    let lag = max_replica_lag(facts);
    if let Some(lag) = lag {
        d.fact(name("max_replica_lag_s"), lag);
    }
    let lagging = lag.map_or(String::new(), |l| format!(", lag up to {l} s"));
    let (verdict, because) = match (failover, connected) {
        (Failover::Redlock, _) => (
            Verdict::Holds,
            "independent masters, no failover: a lease lives on a majority of them".to_owned(),
        ),
        (_, None) => (
            Verdict::HoldsIf,
            "INFO replication could not be read: a failover keeps leases only with \
             replicas=N and N replicas connected"
                .to_owned(),
        ),
        (_, Some(n)) if replicas > 0 && n >= replicas => (
            Verdict::Holds,
            format!(
                "replicas={replicas}: every grant acknowledged by {replicas} of {n} connected \
                 replicas{lagging}"
            ),
        ),
        (_, Some(n)) if replicas > 0 => (
            Verdict::HoldsIf,
            format!(
                "replicas={replicas} but {n} replicas connected: acquires fail (Unavailable) \
                 until {replicas} are"
            ),
        ),
        (_, Some(0)) => (
            Verdict::Holds,
            "no replicas: nothing to fail over to".to_owned(),
        ),
        (Failover::Manual, Some(n)) => (
            Verdict::HoldsIf,
            format!(
                "replicas=0 with {n} replicas connected{lagging}: if one is promoted, grants it \
                 had not copied yet are lost (add replicas=1 to the URL)"
            ),
        ),
        (_, Some(n)) => (
            Verdict::DoesNotHold,
            format!(
                "replicas=0 with automatic failover ({n} replicas connected{lagging}): a \
                 promoted replica lacks the grants it had not copied yet (add replicas=1 to the \
                 URL)"
            ),
        ),
    };
    d.judge(Promise::SurvivesFailover, verdict, at(because));
}

/// The largest `lag=` (seconds since the replica's last acknowledgement) among `INFO replication`'s
/// `slaveN:` lines.
fn max_replica_lag(facts: &NodeFacts) -> Option<u64> {
    let info = facts.info.as_ref()?;
    info.iter()
        .filter(|(k, _)| k.starts_with("slave") && k[5..].chars().all(|c| c.is_ascii_digit()))
        .filter_map(|(_, v)| {
            v.split(',')
                .find_map(|p| p.strip_prefix("lag="))
                .and_then(|l| l.parse().ok())
        })
        .max()
}

/// What every Redis topology shares: leases are keys, not sessions.
fn judge_common(d: &mut Diagnosis) {
    d.judge(
        Promise::SessionEndSeen,
        Verdict::Holds,
        "leases live in keys, not in sessions: a connection that ends takes no lease with it",
    );
}

/// Where the masters keep their leases, for the look for other versions' keys.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layout<'a> {
    pub(crate) prefix: &'a str,
    /// One high-water per slot (a Cluster).
    pub(crate) cluster: bool,
}

/// Judges the masters of `nodes` (each labelled by its address when there is more than one), and,
/// given their `layout`, looks for 0.3 clients' keys on them; an error when none of them answered.
pub(crate) fn diagnose_nodes(
    nodes: &[&Node],
    deadline: impl Fn() -> Deadline,
    failover: Failover,
    layout: Option<Layout<'_>>,
) -> Result<Diagnosis> {
    let mut d = Diagnosis::new();
    judge_common(&mut d);
    let mut answered = 0;
    let mut first_error = None;
    let mut offsets: Vec<i64> = Vec::new();
    let mut seen: Option<Seen> = None;
    let mut unscanned = 0;
    for node in nodes {
        let label = if nodes.len() == 1 && failover != Failover::Redlock {
            ""
        } else {
            node.name()
        };
        let facts = gather(node, deadline());
        if facts.reachable {
            answered += 1;
        } else if first_error.is_none() {
            first_error = facts.error.clone();
        }
        judge_node(&mut d, label, &facts, node.replicas(), failover);
        offsets.extend(facts.offset.map(|o| o.micros));
        if let (Some(layout), true) = (layout, facts.reachable) {
            match versions::scan(node, layout.prefix, layout.cluster, deadline()) {
                Some(found) => match &mut seen {
                    Some(all) => all.add(&found),
                    None => seen = Some(found),
                },
                None => unscanned += 1,
            }
        }
    }
    if layout.is_some() {
        judge_versions(&mut d, seen, unscanned);
    } else if failover == Failover::Redlock {
        d.fact(
            OTHER_VERSIONS,
            "not told apart: 0.3 and this version keep the same per-key fence counters on \
             Redlock nodes and read each other's",
        );
    }
    // Redlock's fence is the largest of a quorum's, each drawn from its node's clock: nodes whose
    // clocks disagree by more than a claim covers cost extra rounds and make fences jump.
    if let (Failover::Redlock, Some(lo), Some(hi)) =
        (failover, offsets.iter().min(), offsets.iter().max())
    {
        let spread = hi.saturating_sub(*lo).unsigned_abs();
        d.fact(
            "node_clock_spread_ms",
            format!("{:.1}", spread as f64 / 1000.0),
        );
        if std::time::Duration::from_micros(spread) > CLOCK_AGREEMENT {
            d.judge(
                Promise::FenceOrder,
                Verdict::HoldsIf,
                format!(
                    "the nodes' clocks differ by {:.1} ms: fences follow the largest once a \
                     counter is lost, so none of them may step back",
                    spread as f64 / 1000.0
                ),
            );
        }
    }
    if answered == 0 {
        return Err(Error::Unavailable(first_error.unwrap_or_else(|| {
            "no Redis server answered the doctor's questions".to_owned()
        })));
    }
    Ok(d)
}

/// Reports what the look for 0.3 clients' keys found (`seen`, summed over the masters scanned;
/// `unscanned` masters answered no `SCAN`) and judges fence order by it.
fn judge_versions(d: &mut Diagnosis, seen: Option<Seen>, unscanned: usize) {
    let Some(seen) = seen else {
        d.fact(OTHER_VERSIONS, "unknown (SCAN was not answered)");
        d.judge(
            Promise::FenceOrder,
            Verdict::HoldsIf,
            "the keys could not be scanned for 0.3 clients' fence counters: with 0.3 clients \
             sharing the keys, fences rise only while the server's clock never steps back",
        );
        return;
    };
    let complete = seen.complete && unscanned == 0;
    let keys = seen
        .keys
        .map_or(String::new(), |n| format!(" of {n} keys (DBSIZE)"));
    let scope = if complete {
        format!("every key scanned: {} fence keys{keys}", seen.fences)
    } else {
        format!(
            "scan stopped after {} SCAN calls (COUNT {}) or at the call's deadline: {} fence keys \
             looked at{keys}, the rest not",
            versions::MAX_PAGES,
            versions::PAGE,
            seen.fences
        )
    };
    d.fact("other_versions_scan", &scope);
    if seen.old > 0 {
        let part = if complete { "" } else { " in the part scanned" };
        let counted = match seen.old {
            1 => "1 key".to_owned(),
            n => format!("{n} keys"),
        };
        d.fact(OTHER_VERSIONS, format!("0.3 seen ({counted}{part})"));
        d.judge(
            Promise::FenceOrder,
            Verdict::HoldsIf,
            format!(
                "0.3 clients share these keys ({counted} with a 0.3 fence counter): a 0.3 client \
                 taking a key after this version released it draws its fence from the server's \
                 clock, so fences rise only while that clock never steps back by more than the \
                 time since the key's last fence (finish the rollout)"
            ),
        );
    } else if complete {
        d.fact(OTHER_VERSIONS, "none seen");
        d.judge(
            Promise::FenceOrder,
            Verdict::Holds,
            "no 0.3 client's fence counter on the server (none took a key here in the last 24 h \
             that this version did not take after it)",
        );
    } else {
        d.fact(OTHER_VERSIONS, "none seen in the keys scanned");
        d.judge(
            Promise::FenceOrder,
            Verdict::HoldsIf,
            format!(
                "no 0.3 client's fence counter in the keys scanned, but not every key was \
                 ({scope}): with 0.3 clients sharing the keys, fences rise only while the server's \
                 clock never steps back"
            ),
        );
    }
}

/// [`diagnose_nodes`] over the masters a topology uses now.
pub(crate) fn diagnose_topology(
    topology: &Topology,
    prefix: &str,
    deadline: impl Fn() -> Deadline,
) -> Result<Diagnosis> {
    let (nodes, failover): (Vec<Arc<Node>>, Failover) = match topology {
        Topology::Single(node) => (vec![node.clone()], Failover::Manual),
        Topology::Cluster(cluster) => (cluster.masters(), Failover::Automatic),
        Topology::Sentinel(sentinel) => (
            sentinel.current().into_iter().collect(),
            Failover::Automatic,
        ),
    };
    let refs: Vec<&Node> = nodes.iter().map(|n| &**n).collect();
    let layout = Layout {
        prefix,
        cluster: matches!(topology, Topology::Cluster(_)),
    };
    let mut d = diagnose_nodes(&refs, deadline, failover, Some(layout))?;
    match topology {
        Topology::Cluster(_) => d.fact("masters", nodes.len()),
        Topology::Sentinel(sentinel) => d
            .fact("sentinels", sentinel.sentinel_count())
            .fact("service", sentinel.service()),
        Topology::Single(_) => &mut d,
    };
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(info: &[(&str, &str)], config: &[(&str, &str)]) -> NodeFacts {
        NodeFacts {
            info: Some(
                info.iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            config: config
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            offset: None,
            error: None,
            reachable: true,
        }
    }

    fn verdict(d: &Diagnosis, p: Promise) -> Verdict {
        d.judgement(p).unwrap().verdict
    }

    #[test]
    fn an_evicting_policy_under_a_limit_breaks_exclusion() {
        for (max, policy, expected) in [
            ("104857600", "volatile-lru", Verdict::DoesNotHold),
            ("104857600", "allkeys-lfu", Verdict::DoesNotHold),
            ("0", "volatile-lru", Verdict::Holds),
            ("104857600", "noeviction", Verdict::Holds),
        ] {
            let mut d = Diagnosis::new();
            let f = facts(&[("maxmemory", max), ("maxmemory_policy", policy)], &[]);
            judge_node(&mut d, "", &f, 0, Failover::Manual);
            assert_eq!(verdict(&d, Promise::Exclusion), expected, "{max} {policy}");
        }
    }

    #[test]
    fn persistence_decides_restarts() {
        for (aof, fsync, save, expected) in [
            ("1", "always", "", Verdict::Holds),
            ("1", "everysec", "", Verdict::HoldsIf),
            ("0", "everysec", "3600 1", Verdict::DoesNotHold),
            ("0", "everysec", "", Verdict::DoesNotHold),
        ] {
            let mut d = Diagnosis::new();
            let f = facts(
                &[("aof_enabled", aof)],
                &[("appendfsync", fsync), ("save", save)],
            );
            judge_node(&mut d, "", &f, 0, Failover::Manual);
            assert_eq!(
                verdict(&d, Promise::SurvivesRestart),
                expected,
                "{aof} {fsync}"
            );
        }
    }

    #[test]
    fn automatic_failover_needs_replicas_in_the_url() {
        let f = facts(
            &[
                ("connected_slaves", "2"),
                ("slave0", "ip=127.0.0.1,port=1,state=online,offset=5,lag=0"),
                ("slave1", "ip=127.0.0.1,port=2,state=online,offset=5,lag=3"),
            ],
            &[],
        );
        let mut d = Diagnosis::new();
        judge_node(&mut d, "", &f, 0, Failover::Automatic);
        let j = d.judgement(Promise::SurvivesFailover).unwrap();
        assert_eq!(j.verdict, Verdict::DoesNotHold);
        assert!(j.because.contains("lag up to 3 s"), "{}", j.because);
        let mut d = Diagnosis::new();
        judge_node(&mut d, "", &f, 1, Failover::Automatic);
        assert_eq!(verdict(&d, Promise::SurvivesFailover), Verdict::Holds);
        let mut d = Diagnosis::new();
        judge_node(&mut d, "", &f, 3, Failover::Automatic);
        assert_eq!(verdict(&d, Promise::SurvivesFailover), Verdict::HoldsIf);
    }
}
