//! `leasehold doctor` for etcd: each member's status (version, leader, revision) and the cluster's
//! member list, read through the gateway, and each promise judged by them.
//!
//! - Fences need no clock: they are 2^62 + the cluster's revision, which Raft keeps rising across
//!   leader changes and member loss. Only a cluster restored from a snapshot rewinds it (etcd 3.4
//!   cannot bump it on restore), so fence order holds on the condition that none is. A restore
//!   shows while the Raft index is below the revision: every write is one Raft entry, so a
//!   cluster's index never falls below its revision - 1, but a restore starts the Raft log over
//!   (at one entry per member) and keeps the snapshot's revision. Writes after it close the gap
//!   (lease grants are entries that write nothing), so a restore long past may no longer show.
//! - A lease survives what a majority survives: a grant is acknowledged once a majority has it in
//!   its fsynced Raft log. So a failover keeps every lease where the cluster has three members or
//!   more, and none where it has one.
//! - etcd before 3.4.28 / 3.5.11 lets a leader that stalled past a lease's TTL still revoke the
//!   lease once it wakes, after a new leader renewed it: the lease ends early under its holder.

use crate::gateway::{number, Gateway};
use leasehold_core::doctor::{Diagnosis, Promise, Verdict, OTHER_VERSIONS};
use leasehold_core::{Deadline, Error, Result};
use serde_json::{json, Value};

/// What one member said of itself, or why it did not answer.
struct Member {
    name: String,
    status: std::result::Result<Value, String>,
}

/// Asks every member of the URL for its status, and one of them for the member list.
pub(crate) fn diagnose(gateway: &Gateway, deadline: impl Fn() -> Deadline) -> Result<Diagnosis> {
    let members: Vec<Member> = gateway
        .member_names()
        .into_iter()
        .enumerate()
        .map(|(i, name)| Member {
            status: gateway.ask_member(i, "/v3/maintenance/status", &json!({}), deadline()),
            name,
        })
        .collect();
    let Some(answering) = members.iter().position(|m| m.status.is_ok()) else {
        let why = members
            .iter()
            .filter_map(|m| m.status.as_ref().err().map(|e| format!("{}: {e}", m.name)))
            .collect::<Vec<_>>()
            .join("; ");
        return Err(Error::Unavailable(format!(
            "no etcd member answered: {why}"
        )));
    };
    let list = gateway
        .ask_member(answering, "/v3/cluster/member/list", &json!({}), deadline())
        .ok();
    Ok(judge(&members, list.as_ref()))
}

/// `major.minor.patch` of a version string, where it has that form.
fn version(text: &str) -> Option<(u64, u64, u64)> {
    let mut parts = text.split('.').map(|p| p.parse::<u64>().ok());
    Some((parts.next()??, parts.next()??, parts.next()??))
}

/// Whether etcd `v` ignores a stalled old leader's lease revocations.
fn revokes_only_from_the_leader(v: (u64, u64, u64)) -> bool {
    match v {
        (3, 4, patch) => patch >= 28,
        (3, 5, patch) => patch >= 11,
        (major, minor, _) => (major, minor) > (3, 5),
    }
}

fn judge(members: &[Member], list: Option<&Value>) -> Diagnosis {
    let mut d = Diagnosis::new();
    d.fact(OTHER_VERSIONS, "none possible: etcd is new in 0.4");
    let answered: Vec<(&str, &Value)> = members
        .iter()
        .filter_map(|m| m.status.as_ref().ok().map(|s| (m.name.as_str(), s)))
        .collect();
    for m in members {
        let said = match &m.status {
            Ok(status) => {
                let role = if status["leader"].as_str().is_some()
                    && status["leader"] == status["header"]["member_id"]
                {
                    "leader"
                } else {
                    "follower"
                };
                format!(
                    "{role}, etcd {}, revision {}, raft index {}",
                    status["version"].as_str().unwrap_or("?"),
                    status["header"]["revision"].as_str().unwrap_or("?"),
                    status["raftIndex"].as_str().unwrap_or("?")
                )
            }
            Err(why) => format!("did not answer: {why}"),
        };
        d.fact(format!("member {}", m.name), said);
    }
    let size = list
        .and_then(|l| l["members"].as_array())
        .map(Vec::len)
        .unwrap_or(members.len());
    d.fact("cluster_members", size);
    let leader = answered
        .iter()
        .any(|(_, s)| s["leader"].as_str().is_some_and(|l| l != "0"));

    let versions: Vec<&str> = answered
        .iter()
        .filter_map(|(_, s)| s["version"].as_str())
        .collect();
    let stale_revokes = versions
        .iter()
        .find(|v| !version(v).is_some_and(revokes_only_from_the_leader));
    match (leader, stale_revokes) {
        (false, _) => d.judge(
            Promise::Exclusion,
            Verdict::HoldsIf,
            "no member knows a leader now: nothing is granted until one is elected",
        ),
        (true, Some(v)) => d.judge(
            Promise::Exclusion,
            Verdict::HoldsIf,
            format!(
                "etcd {v}: a leader that stalls past a lease's TTL may still revoke the lease after \
                 a new leader renewed it (fixed in etcd 3.4.28 and 3.5.11); the fence gate refuses \
                 the holder's late writes"
            ),
        ),
        (true, None) => d.judge(
            Promise::Exclusion,
            Verdict::Holds,
            format!(
                "every grant is a transaction committed through Raft by a majority of {size} \
                 members, its reads linearizable"
            ),
        ),
    };
    match answered
        .iter()
        .find_map(|(name, s)| restored(s).map(|r| (name, r)))
    {
        Some((name, (index, revision))) => d.judge(
            Promise::FenceOrder,
            Verdict::DoesNotHold,
            format!(
                "member {name} was restored from a snapshot: its Raft index {index} is below its \
                 revision {revision}, which only a restore leaves, and a restore rewinds the \
                 revision that fences are drawn from (2^62 + revision); fences granted since may \
                 be at or below fences granted before it. Compare the fence gate's highest fence \
                 with 2^62 + {revision}: until fences pass it, the gate refuses the new holders \
                 (clear its rows, or write to etcd until 2^62 + the revision has passed it)"
            ),
        ),
        None => d.judge(
            Promise::FenceOrder,
            Verdict::HoldsIf,
            "fences are 2^62 + the cluster's revision, no clock: they rise unless the cluster is \
             restored from a snapshot, which rewinds the revision",
        ),
    };
    d.judge(
        Promise::BoundedCalls,
        Verdict::Holds,
        "every request draws on the call's deadline, and a member cut off from its leader refuses \
         (hasleader) instead of waiting",
    );
    d.judge(
        Promise::SurvivesRestart,
        Verdict::Holds,
        "a grant is acknowledged once a majority has it in its fsynced Raft log",
    );
    let (verdict, because) = match size {
        0 | 1 => (
            Verdict::DoesNotHold,
            "a single member: no other member can take over with its data".to_owned(),
        ),
        2 => (
            Verdict::HoldsIf,
            "2 members: both must stay up (a majority of 2 is 2)".to_owned(),
        ),
        n => (
            Verdict::Holds,
            format!(
                "{n} members: a leader change keeps every committed grant; {} may fail",
                (n - 1) / 2
            ),
        ),
    };
    d.judge(Promise::SurvivesFailover, verdict, because);
    d.judge(
        Promise::SessionEndSeen,
        Verdict::Holds,
        "leases live in keys attached to etcd leases, not in connections",
    );
    d
}

/// `(raft index, revision)` of a member whose Raft index is below its revision - 1, which no
/// cluster reaches by writing (each revision is one Raft entry, and the log starts with an entry per
/// member) and a restore from a snapshot leaves: its log starts over, its revision does not.
fn restored(status: &Value) -> Option<(i64, i64)> {
    let index = number(&status["raftIndex"])?;
    let revision = number(&status["header"]["revision"])?;
    (index + 1 < revision).then_some((index, revision))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, version: &str, leader: bool) -> Member {
        Member {
            name: name.into(),
            status: Ok(json!({
                "version": version,
                "leader": if leader { "7" } else { "9" },
                "header": {"member_id": "7", "revision": "42"},
            })),
        }
    }

    fn verdict(d: &Diagnosis, promise: Promise) -> Verdict {
        d.judgement(promise).expect("judged").verdict
    }

    #[test]
    fn versions_before_the_stalled_leader_fix_make_exclusion_conditional() {
        assert!(!revokes_only_from_the_leader((3, 4, 23)));
        assert!(revokes_only_from_the_leader((3, 4, 28)));
        assert!(!revokes_only_from_the_leader((3, 5, 10)));
        assert!(revokes_only_from_the_leader((3, 6, 0)));
        let old = [
            member("a:1", "3.4.23", true),
            member("b:1", "3.4.23", false),
        ];
        assert_eq!(
            verdict(&judge(&old, None), Promise::Exclusion),
            Verdict::HoldsIf
        );
        let new = [member("a:1", "3.5.12", true)];
        assert_eq!(
            verdict(&judge(&new, None), Promise::Exclusion),
            Verdict::Holds
        );
    }

    #[test]
    fn a_raft_index_below_the_revision_is_a_restore() {
        let at = |index: &str, revision: &str| json!({"raftIndex": index, "header": {"revision": revision}});
        assert_eq!(restored(&at("3", "1000")), Some((3, 1000)));
        assert_eq!(restored(&at("999", "1000")), None);
        assert_eq!(restored(&at("5000", "1000")), None);
        assert_eq!(restored(&json!({})), None);
        let mut m = member("a:1", "3.5.12", true);
        m.status = Ok(json!({
            "version": "3.5.12", "leader": "7", "raftIndex": "12",
            "header": {"member_id": "7", "revision": "900"},
        }));
        let d = judge(&[m], None);
        assert_eq!(verdict(&d, Promise::FenceOrder), Verdict::DoesNotHold);
    }

    #[test]
    fn failover_depends_on_the_cluster_s_size() {
        let one = [member("a:1", "3.5.12", true)];
        assert_eq!(
            verdict(&judge(&one, None), Promise::SurvivesFailover),
            Verdict::DoesNotHold
        );
        let list = json!({"members": [{}, {}, {}]});
        assert_eq!(
            verdict(&judge(&one, Some(&list)), Promise::SurvivesFailover),
            Verdict::Holds
        );
    }
}
