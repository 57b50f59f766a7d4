//! What holders believed: per lease, the union of `[at, min(until, its release's invocation)]` over
//! the beliefs recorded for it, each belief cut where the next one of its lease begins.
//!
//! The cut: a belief is what `remaining()` said at `at`; a later call can shorten the lease (an
//! extend with a shorter TTL, one of unknown outcome that drops `remaining()` to zero), and from the
//! next belief on the holder relies on the new end, not the old one. Without the cut, a holder that
//! extended to a shorter TTL would be charged with its old end, and a grant to another client after
//! the shorter end would count as an overlap that no holder believed in.

use super::allowance::drift;
use super::exclusion::Span;
use super::{sessions, swaps};
use crate::history::{Belief, Op, OpId, OpKind, SessionEnd};
use std::collections::HashMap;
use std::time::Duration;

/// The believed spans of every lease, merged where they touch, grouped by key, cut where a promote or
/// demote changed the lease's mode ([`swaps`]). `of_lease`: each lease's operations in invocation
/// order.
pub(crate) fn believed_spans<'a>(
    ops: &'a [Op],
    beliefs: &[Belief],
    of_lease: &HashMap<OpId, Vec<OpId>>,
    session_ends: &[SessionEnd],
) -> HashMap<&'a str, Vec<Span>> {
    // A holder stops relying on its lease when it starts to give it back.
    let mut released: HashMap<OpId, Duration> = HashMap::new();
    // An extend in flight may already have run: from its send the lease can be relied on only until
    // its own TTL from then (the client shortens `remaining()` when it sends a shorter extend). A
    // promote or demote renews the TTL as an extend does.
    let mut renewals: HashMap<OpId, Vec<(Duration, Duration)>> = HashMap::new();
    for op in ops {
        match (op.kind, op.lease) {
            (OpKind::Release, Some(l)) => {
                let e = released.entry(l).or_insert(op.invoke);
                *e = (*e).min(op.invoke);
            }
            (OpKind::Extend | OpKind::Promote | OpKind::Demote, Some(l)) => {
                let ends = op.invoke + op.ttl.saturating_sub(drift(op.ttl));
                renewals.entry(l).or_default().push((op.invoke, ends));
            }
            _ => {}
        }
    }
    let mut per_lease: HashMap<OpId, Vec<(Duration, Duration)>> = HashMap::new();
    for b in beliefs {
        if b.lease < ops.len() {
            per_lease.entry(b.lease).or_default().push((b.at, b.until));
        }
    }
    let mut by_key: HashMap<&str, Vec<Span>> = HashMap::new();
    for (lease, mut list) in per_lease {
        list.sort();
        let stop = released.get(&lease).copied().unwrap_or(Duration::MAX);
        let related = of_lease.get(&lease).map_or(&[][..], Vec::as_slice);
        let ended = sessions::ended_by(ops, lease, related, session_ends);
        let pieces: Vec<(Duration, Duration)> = list
            .iter()
            .enumerate()
            .map(|(i, &(at, until))| {
                let next = list.get(i + 1).map_or(Duration::MAX, |n| n.0);
                let sent_meanwhile = renewals
                    .get(&lease)
                    .into_iter()
                    .flatten()
                    .filter(|(sent, _)| *sent >= at && *sent < next)
                    .map(|(_, ends)| *ends)
                    .min()
                    .unwrap_or(Duration::MAX);
                // A session ended by someone else: relied on until that began at most (read before
                // it, or before a goodbye a relay held could arrive), and judged only at its moment
                // when read after.
                let ended = sessions::belief_end(ended, at);
                (at, until.min(next).min(stop).min(sent_meanwhile).min(ended))
            })
            .filter(|(at, end)| end > at)
            .collect();
        let acquire = &ops[lease];
        let mut merged: Vec<(Duration, Duration)> = Vec::new();
        for (s, e) in pieces {
            match merged.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        let spans = by_key.entry(acquire.key.as_str()).or_default();
        for (start, end) in merged {
            let span = Span {
                start,
                end,
                lease,
                mode: acquire.mode,
            };
            spans.extend(swaps::by_kind(ops, related, span));
        }
    }
    by_key
}

/// The beliefs recorded for `lease`, for an example.
pub(crate) fn describe_beliefs(beliefs: &[Belief], lease: OpId) -> String {
    let list: Vec<String> = beliefs
        .iter()
        .filter(|b| b.lease == lease)
        .map(|b| format!("at {} until {}", super::ms(b.at), super::ms(b.until)))
        .collect();
    list.join(", ")
}
