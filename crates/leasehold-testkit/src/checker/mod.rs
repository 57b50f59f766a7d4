//! The checker: reads a [`Snapshot`] and reports what a lock service must never do.
//!
//! Violations, counted in [`Report::summary_line`]:
//! - (A) **overlaps**: two leases of one key whose conservative validity windows, derived from the
//!   history, overlap where their modes forbid it (exclusive beside anything, shared beside
//!   exclusive, more permits than the semaphore has). A window runs from the acquire's completion
//!   until the earliest of its release's invocation and its expiry (`invoke + ttl − drift` of the
//!   acquire or of the last successful extend, promote or demote). A lease that was promoted or
//!   demoted counts as exclusive only where it surely was ([`swaps`]).
//! - (B) **believed overlaps**: the same, over what the holders *believed*: a lease's believed
//!   interval is the union of `[at, min(until, its release's invocation)]` over the beliefs
//!   recorded for it (`until = at + remaining()`). A holder whose `remaining()` says 9.5 s while
//!   another client holds the key is caught here, whatever the history says.
//! - (C) **fence order**: an exclusive grant (an exclusive acquire or a promote) whose fence is not
//!   larger than that of one which had completed before it was invoked, or two exclusive grants of
//!   one key with the same fence.
//! - (D) **stale writes**: an accepted write whose fence is below one accepted earlier on its key.
//! - (E) **past bound**: a call that took longer than its bound (or is still running past it).
//!
//! Where every client session was ended by someone else (recorded for session-held backends), a
//! lease acquired before ends there, and beliefs read after are judged at their moment ([`sessions`]).
//!
//! Counted apart: **stranded** refusals (no possible holder at all, a liveness failure) and
//! **late-grant costs** (a refusal explained only by an acquire whose caller never learned its
//! outcome: a late-delivered request holds the key under a token nobody has until its TTL), and
//! **no-validity refusals** (a Redlock round that outlasted its TTL: granted by a quorum, refused
//! as it must be, its grants left to lapse).
//!
//! Every allowance is in [`allowance`].

pub mod allowance;
mod beliefs;
mod exclusion;
mod report;
mod restarts;
mod sessions;
mod swaps;

pub use crate::store::FencedStore;
pub use allowance::drift;
pub use report::{Finding, Report};

use crate::history::{Mode, Op, OpId, OpKind, Outcome, Snapshot};
use allowance::{BELIEF_SLACK, STRANDED_SLACK};
use exclusion::{clashes, Span};
use std::collections::HashMap;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct CheckConfig {
    /// Whether a refused acquire may still have left part of a grant behind until its TTL: true for
    /// Redlock, whose failed rounds give back what they took, but cannot reach a node that stopped
    /// answering (the leftover then blocks others until it expires, which is the promise).
    pub refusals_may_hold: bool,
    /// The shortest a server holds a lease, whatever its TTL: etcd's leases last whole seconds
    /// and at least the server's minimum, and end when etcd's expiry check next runs (0 for the
    /// backends that end a lease at its TTL). Only the liveness checks (stranded refusals, late
    /// grants) use it; what holders believed is judged by their own TTL as for every backend.
    pub server_hold_floor: Duration,
    /// How long a writer that waited keeps new readers back after its wait ended without the key:
    /// MySQL/MariaDB table mode marks the key's row for a second past a waiting writer's last
    /// attempt (it polls, and the mark must outlast its pause), and a writer that gives up leaves
    /// the mark to run out. A liveness cost (readers refused with no holder), never an exclusion
    /// one; only the stranded-refusal check uses it. 0 for the other backends, whose waiting
    /// writers hold readers back only while they wait.
    pub writer_mark: Duration,
    /// Examples kept per finding (all are counted).
    pub max_examples: usize,
}

impl Default for CheckConfig {
    fn default() -> Self {
        CheckConfig {
            refusals_may_hold: false,
            server_hold_floor: Duration::ZERO,
            writer_mark: Duration::ZERO,
            max_examples: 5,
        }
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1}ms", d.as_secs_f64() * 1000.0)
}

fn describe(id: OpId, op: &Op) -> String {
    let mode = match (op.kind, op.mode) {
        (OpKind::Acquire, Mode::Shared) => " shared",
        (OpKind::Acquire, Mode::Permit(_)) => " permit",
        _ => "",
    };
    format!(
        "#{id} w{} {:?}{mode} {:?} fence={:?} ttl={} [{} .. {}] {:?}",
        op.worker,
        op.kind,
        op.key,
        op.fence,
        ms(op.ttl),
        ms(op.invoke),
        op.complete.map(ms).unwrap_or_else(|| "never".into()),
        op.outcome
    )
}

/// Runs every check on `history`.
pub fn check(history: &Snapshot, config: &CheckConfig) -> Report {
    let ops = &history.ops;
    let max = config.max_examples;
    let mut r = Report::default();
    // Operations of each lease, in invocation order.
    let mut of_lease: HashMap<OpId, Vec<OpId>> = HashMap::new();
    let mut by_key: HashMap<&str, Vec<OpId>> = HashMap::new();
    for (id, op) in ops.iter().enumerate() {
        if let Some(l) = op.lease {
            of_lease.entry(l).or_default().push(id);
        }
        by_key.entry(op.key.as_str()).or_default().push(id);
        match (op.kind, op.outcome) {
            (OpKind::Write, Outcome::Ok) => r.writes_accepted += 1,
            (OpKind::Write, Outcome::Rejected) => r.writes_rejected += 1,
            (_, Outcome::Pending) => r.pending += 1,
            (OpKind::Acquire, Outcome::Ok) => r.acquired += 1,
            (OpKind::Restore, Outcome::Ok) => r.restored += 1,
            (OpKind::Promote, Outcome::Ok) => r.promoted += 1,
            (OpKind::Demote, Outcome::Ok) => r.demoted += 1,
            (_, Outcome::NotAcquired) => r.not_acquired += 1,
            (_, Outcome::NoValidity) => r.no_validity.add(max, || describe(id, op)),
            (_, Outcome::Unknown) => r.unknown += 1,
            (_, Outcome::Lost) => r.lost += 1,
            (_, Outcome::Failed) => r.failed += 1,
            _ => {}
        }
    }
    for list in of_lease.values_mut() {
        list.sort_by_key(|&i| ops[i].invoke);
    }
    let no_ops = Vec::new();
    r.beliefs = history.beliefs.len();
    r.held_across_restarts = restarts::held_across(ops, &history.beliefs, &history.restarts);

    // (d) bounds.
    for (id, op) in ops.iter().enumerate() {
        let Some(bound) = op.bound else { continue };
        let took = op.took(history.end);
        r.slowest_call = r.slowest_call.max(took);
        let headroom = bound.saturating_sub(took);
        r.least_headroom = Some(r.least_headroom.map_or(headroom, |h| h.min(headroom)));
        if took > bound {
            // The machine's own stalls during the call are not the library's (see `stall.rs`).
            let stalled = history.stalled_within(op.invoke, op.invoke + took);
            let finding = if took > bound + stalled {
                r.worst_overrun = r.worst_overrun.max(took - bound - stalled);
                &mut r.bound_overruns
            } else {
                &mut r.stalled_overruns
            };
            finding.add(max, || {
                format!(
                    "{} took {} > bound {} (the machine stalled {} meanwhile)",
                    describe(id, op),
                    ms(took),
                    ms(bound),
                    ms(stalled)
                )
            });
        }
    }
    r.longest_stall = history
        .stalls
        .iter()
        .map(|s| s.end.saturating_sub(s.start))
        .max()
        .unwrap_or_default();

    for ids in by_key.values() {
        let acquired: Vec<OpId> = ids
            .iter()
            .copied()
            .filter(|&i| ops[i].kind == OpKind::Acquire && ops[i].outcome == Outcome::Ok)
            .collect();

        // (A) overlapping windows.
        let windows: Vec<Span> = acquired
            .iter()
            .filter_map(|&a| {
                let related = of_lease.get(&a).unwrap_or(&no_ops);
                let (start, end) = window(ops, a, related, &history.session_ends)?;
                let span = Span {
                    start,
                    end,
                    lease: a,
                    mode: ops[a].mode,
                };
                Some(swaps::by_kind(ops, related, span))
            })
            .flatten()
            .collect();
        for c in clashes(windows, Duration::ZERO) {
            let (a, b) = (c.first, c.second);
            r.overlaps.add(max, || {
                // What the earlier holder did with its lease, to tell why it ended early.
                let calls: Vec<String> = of_lease
                    .get(&a)
                    .unwrap_or(&no_ops)
                    .iter()
                    .map(|&i| describe(i, &ops[i]))
                    .collect();
                format!(
                    "{} and {} both valid during [{} .. {}]{}; the first one's calls: [{}]",
                    describe(a, &ops[a]),
                    describe(b, &ops[b]),
                    ms(c.from),
                    ms(c.to),
                    swapped_modes(ops, &c),
                    calls.join("; ")
                )
            });
        }

        // (C) fence order among exclusive grants (the fence is what an exclusive holder presents to
        // the store; readers and permits share it with no promise of order among themselves):
        // against the largest fence among grants completed before this one was invoked, and
        // duplicates.
        let promoted = ids
            .iter()
            .copied()
            .filter(|&i| ops[i].kind == OpKind::Promote && ops[i].outcome == Outcome::Ok);
        let exclusive: Vec<OpId> = acquired
            .iter()
            .copied()
            .filter(|&a| ops[a].mode == Mode::Exclusive)
            .chain(promoted)
            .collect();
        let mut done: Vec<(Duration, u64, OpId)> = exclusive
            .iter()
            .filter_map(|&a| Some((ops[a].complete?, ops[a].fence?, a)))
            .collect();
        done.sort();
        let mut prefix_max: Vec<(u64, OpId)> = Vec::with_capacity(done.len());
        for &(_, f, a) in &done {
            let best = match prefix_max.last() {
                Some(&(m, i)) if m >= f => (m, i),
                _ => (f, a),
            };
            prefix_max.push(best);
        }
        let mut seen: HashMap<u64, OpId> = HashMap::new();
        for &b in &exclusive {
            let Some(fb) = ops[b].fence else { continue };
            let before = done.partition_point(|&(c, _, _)| c < ops[b].invoke);
            if before > 0 {
                let (fa, a) = prefix_max[before - 1];
                if fb <= fa {
                    r.fence_order.add(max, || {
                        format!(
                            "{} got a fence not above {} which completed before it began",
                            describe(b, &ops[b]),
                            describe(a, &ops[a])
                        )
                    });
                    continue;
                }
            }
            if let Some(&a) = seen.get(&fb) {
                r.fence_order.add(max, || {
                    format!(
                        "{} repeats the fence of {}",
                        describe(b, &ops[b]),
                        describe(a, &ops[a])
                    )
                });
            } else {
                seen.insert(fb, b);
            }
        }

        // (D) stale writes accepted, in the order the store accepted them.
        let mut writes: Vec<OpId> = ids
            .iter()
            .copied()
            .filter(|&i| ops[i].kind == OpKind::Write && ops[i].outcome == Outcome::Ok)
            .collect();
        writes.sort_by_key(|&i| (ops[i].complete.unwrap_or(ops[i].invoke), i));
        let mut highest: Option<(u64, OpId)> = None;
        for w in writes {
            let Some(f) = ops[w].fence else { continue };
            match highest {
                Some((h, hw)) if f < h => r.stale_writes.add(max, || {
                    format!(
                        "{} accepted after {}",
                        describe(w, &ops[w]),
                        describe(hw, &ops[hw])
                    )
                }),
                Some((h, _)) if f == h => {}
                _ => highest = Some((f, w)),
            }
        }

        // Refusals: each needs a possible holder whose mode conflicts with it (a shared refusal
        // also an exclusive request in flight, which readers queue behind, or one that ended
        // within the backend's `writer_mark`). One that only an
        // acquire of unknown outcome explains is a cost; one that nothing explains is stranded.
        let holds: Vec<Hold> = ids
            .iter()
            .filter(|&&i| ops[i].kind == OpKind::Acquire)
            .filter_map(|&a| possible_hold(ops, a, of_lease.get(&a).unwrap_or(&no_ops), config))
            .collect();
        for &x in ids {
            let op = &ops[x];
            if op.kind != OpKind::Acquire || op.outcome != Outcome::NotAcquired {
                continue;
            }
            let Some(done_at) = op.complete else { continue };
            let blocks = |h: &&Hold| {
                h.lease != x
                    && h.from <= done_at
                    && h.until >= op.invoke
                    && (!h.mode.coexists_with(op.mode) || matches!(op.mode, Mode::Permit(_)))
            };
            let writer_waiting = op.mode == Mode::Shared
                && ids.iter().any(|&i| {
                    let w = &ops[i];
                    (w.kind == OpKind::Acquire && w.mode == Mode::Exclusive
                        || w.kind == OpKind::Promote)
                        && w.invoke <= done_at
                        && w.complete
                            .is_none_or(|c| c + config.writer_mark >= op.invoke)
                });
            if writer_waiting || holds.iter().filter(blocks).any(|h| h.owned) {
                continue;
            }
            let last = || last_hold(ops, &holds, &of_lease, x);
            if let Some(h) = holds.iter().find(blocks) {
                r.late_grants.add(max, || {
                    format!(
                        "{} refused while only {} (nobody has its token) may have held the key",
                        describe(x, op),
                        describe(h.lease, &ops[h.lease])
                    )
                });
                continue;
            }
            let culprit = ids
                .iter()
                .copied()
                .filter(|&u| {
                    ops[u].kind == OpKind::Acquire
                        && matches!(ops[u].outcome, Outcome::Unknown | Outcome::Failed)
                        && ops[u].invoke < op.invoke
                })
                .max_by_key(|&u| ops[u].invoke);
            r.stranded.add(max, || match culprit {
                Some(u) => format!(
                    "{} refused with no possible holder; last unsettled attempt {}{}",
                    describe(x, op),
                    describe(u, &ops[u]),
                    last()
                ),
                None => format!(
                    "{} refused with no possible holder{}",
                    describe(x, op),
                    last()
                ),
            });
        }
    }

    // (B) believed overlaps.
    for (_, spans) in
        beliefs::believed_spans(ops, &history.beliefs, &of_lease, &history.session_ends)
    {
        for c in clashes(spans, BELIEF_SLACK) {
            let (a, b) = (c.first, c.second);
            r.believed_overlaps.add(max, || {
                let calls: Vec<String> = std::iter::once(a)
                    .chain(of_lease.get(&a).unwrap_or(&no_ops).iter().copied())
                    .map(|i| describe(i, &ops[i]))
                    .collect();
                format!(
                    "{} and {} both believed valid during [{} .. {}]{}; the first one's beliefs: [{}], \
                     calls: [{}]; the second one's beliefs: [{}]",
                    describe(a, &ops[a]),
                    describe(b, &ops[b]),
                    ms(c.from),
                    ms(c.to),
                    swapped_modes(ops, &c),
                    beliefs::describe_beliefs(&history.beliefs, a),
                    calls.join("; "),
                    beliefs::describe_beliefs(&history.beliefs, b),
                )
            });
        }
    }
    r
}

/// For a clash of a lease in another mode than it was acquired in (promoted or demoted): which.
fn swapped_modes(ops: &[Op], c: &exclusion::Clash) -> String {
    let (first, second) = c.modes;
    if ops[c.first].mode == first && ops[c.second].mode == second {
        return String::new();
    }
    format!(" as {first:?} and {second:?}")
}

/// When an acquire could have been holding its key on the server, and whether anybody holds its
/// token (an acquire that never learned its outcome leaves a grant nobody can release).
struct Hold {
    from: Duration,
    until: Duration,
    lease: OpId,
    owned: bool,
    /// The strongest mode it may have held in: exclusive once it tried a promote.
    mode: Mode,
}

/// The hold that ended last before the refusal `x`, with its calls: what the checker believed
/// settled it is usually the thing to look at.
fn last_hold(ops: &[Op], holds: &[Hold], of_lease: &HashMap<OpId, Vec<OpId>>, x: OpId) -> String {
    let op = &ops[x];
    let Some(done_at) = op.complete else {
        return String::new();
    };
    holds
        .iter()
        .filter(|h| h.from <= done_at && h.until < op.invoke)
        .max_by_key(|h| h.until)
        .map(|h| {
            let calls: Vec<String> = std::iter::once(h.lease)
                .chain(of_lease.get(&h.lease).into_iter().flatten().copied())
                .map(|i| describe(i, &ops[i]))
                .collect();
            format!(
                "; last hold ended at {}: [{}]",
                ms(h.until),
                calls.join("; ")
            )
        })
        .unwrap_or_default()
}

/// The conservative validity window of the successful acquire `a`.
fn window(
    ops: &[Op],
    a: OpId,
    related: &[OpId],
    session_ends: &[crate::history::SessionEnd],
) -> Option<(Duration, Duration)> {
    let acq = &ops[a];
    let start = acq.complete?;
    let mut expiry = (acq.invoke + acq.ttl).saturating_sub(drift(acq.ttl));
    let mut end = None::<Duration>;
    for &i in related {
        let op = &ops[i];
        match op.kind {
            // The holder stops relying on its lease when it starts to give it back.
            OpKind::Release => {
                end = Some(end.map_or(op.invoke, |e| e.min(op.invoke)));
            }
            // Only an extend sent while the lease was still valid continues the window (a promote
            // or demote renews the TTL as an extend does).
            OpKind::Extend | OpKind::Promote | OpKind::Demote
                if op.outcome == Outcome::Ok && op.invoke < expiry =>
            {
                expiry = (op.invoke + op.ttl).saturating_sub(drift(op.ttl));
            }
            // A refused promote changed nothing.
            OpKind::Promote if op.outcome == Outcome::NotAcquired => {}
            // One that failed may still have reached the backend and set a shorter TTL: a careful
            // holder believes the earlier end (the client's `remaining()` does).
            OpKind::Extend | OpKind::Promote | OpKind::Demote
                if op.outcome != Outcome::Ok && op.invoke < expiry =>
            {
                expiry = expiry.min((op.invoke + op.ttl).saturating_sub(drift(op.ttl)));
            }
            _ => {}
        }
    }
    let end = end.map_or(expiry, |e| e.min(expiry));
    // A session ended by someone else frees the key at once.
    let cut = sessions::ended_from(ops, a, related, session_ends).unwrap_or(end);
    Some((start, end.min(cut)))
}

/// When the acquire `a` could have been holding its key on the server: from its invocation until its
/// release was confirmed, or its TTL (plus slack) after its last call that may have set a TTL.
fn possible_hold(ops: &[Op], a: OpId, related: &[OpId], config: &CheckConfig) -> Option<Hold> {
    let acq = &ops[a];
    if acq.outcome == Outcome::NotAcquired && !config.refusals_may_hold {
        return None;
    }
    let slack = STRANDED_SLACK;
    let forever = Duration::MAX / 4;
    let held = |ttl: Duration| ttl.max(config.server_hold_floor);
    let mut until = acq.complete.map_or(forever, |c| c + held(acq.ttl) + slack);
    for &i in related {
        let op = &ops[i];
        match (op.kind, op.outcome) {
            (OpKind::Release, Outcome::Ok) => {
                until = until.min(op.complete.unwrap_or(forever));
                break;
            }
            // `Lost` is the client's verdict, not the server's receipt: a PostgreSQL advisory lease
            // whose extend timed out reports `Lost` without a round trip and closes its session
            // only then, and the server frees the lock when that close reaches it (a slow network
            // delays it). What bounds it is the lease's TTL since its last call, as for any lost
            // lease.
            (OpKind::Release, Outcome::Lost) => break,
            (
                OpKind::Extend | OpKind::Promote | OpKind::Demote,
                Outcome::Ok | Outcome::Unknown | Outcome::Pending,
            ) => {
                until = until.max(op.complete.map_or(forever, |c| c + held(op.ttl) + slack));
            }
            (OpKind::Release, Outcome::Pending) => until = forever,
            _ => {}
        }
    }
    let promotes = related.iter().any(|&i| ops[i].kind == OpKind::Promote);
    Some(Hold {
        from: acq.invoke,
        until,
        lease: a,
        owned: acq.outcome == Outcome::Ok,
        mode: if promotes { Mode::Exclusive } else { acq.mode },
    })
}
