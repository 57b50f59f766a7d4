//! The checker: reads a [`Snapshot`] and reports what a lock service must never do.
//!
//! - (a) **overlaps**: two acquisitions of one key whose conservative validity windows overlap. A
//!   window is what its holder may rely on: from the acquire's completion until the earliest of its
//!   release's invocation and its expiry, where the expiry is `invoke + ttl − drift` of the acquire or
//!   of the last successful extend (drift = 1 % of the TTL + 2 ms, as the client's `remaining()`).
//! - (b) **fence order**: an acquisition whose fence is not larger than that of one which had completed
//!   before it was invoked, or two acquisitions of one key with the same fence.
//! - (c) **stale writes**: an accepted write whose fence is below one accepted earlier on its key.
//! - (d) **bounds**: a call that took longer than its bound (or is still running past it).
//! - (e) **stranded**: an acquire refused (`NotAcquired`) while no operation could have been holding
//!   the key — every possible holder (a successful acquire not yet released, an acquire or extend of
//!   unknown outcome) had released (a release that succeeded; one that said `Lost` settles nothing
//!   sooner than the TTL), or its TTL plus the slack had run out since its last call. The example
//!   names the last unknown or failed acquire before it, the usual culprit, and the hold that ended
//!   last before it, with its calls.

use crate::history::{Op, OpId, OpKind, Outcome, Snapshot};
use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

/// The drift allowance the client subtracts from a TTL.
pub fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

#[derive(Debug, Clone)]
pub struct CheckConfig {
    /// How long after its last call a lease of unknown fate may still hold its key, beyond its TTL:
    /// covers a request the proxy delivered late and the server's own expiry granularity.
    pub stranded_slack: Duration,
    /// Whether a refused acquire may still have left part of a grant behind until its TTL: true for
    /// Redlock, whose failed rounds give back what they took, but cannot reach a node that stopped
    /// answering (the leftover then blocks others until it expires, which is the promise).
    pub refusals_may_hold: bool,
    /// Examples kept per finding (all are counted).
    pub max_examples: usize,
}

impl Default for CheckConfig {
    fn default() -> Self {
        CheckConfig {
            stranded_slack: Duration::from_millis(500),
            refusals_may_hold: false,
            max_examples: 5,
        }
    }
}

/// How many times one kind of violation occurred, with a few examples.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Finding {
    pub count: usize,
    pub examples: Vec<String>,
}

impl Finding {
    fn add(&mut self, max: usize, example: impl FnOnce() -> String) {
        self.count += 1;
        if self.examples.len() < max {
            self.examples.push(example());
        }
    }
}

/// What the checker found, and what the history held.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    pub overlaps: Finding,
    pub fence_order: Finding,
    pub stale_writes: Finding,
    pub bound_overruns: Finding,
    pub stranded: Finding,
    pub acquired: usize,
    pub not_acquired: usize,
    pub unknown: usize,
    pub failed: usize,
    pub lost: usize,
    pub writes_accepted: usize,
    pub writes_rejected: usize,
    pub pending: usize,
    /// The longest call relative to its bound (took − bound, negative as zero), for tuning slack.
    pub worst_overrun: Duration,
    /// The least headroom a call left under its bound (bound − took, overruns as zero): how much
    /// of the scheduling slack a run used.
    pub least_headroom: Option<Duration>,
    pub slowest_call: Duration,
}

impl Report {
    /// The five violation counts (a)–(e).
    pub fn violations(&self) -> [usize; 5] {
        [
            self.overlaps.count,
            self.fence_order.count,
            self.stale_writes.count,
            self.bound_overruns.count,
            self.stranded.count,
        ]
    }

    pub fn is_clean(&self) -> bool {
        self.violations().iter().all(|n| *n == 0)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "overlaps={} fence_order={} stale_writes={} bound_overruns={} stranded={}",
            self.overlaps.count,
            self.fence_order.count,
            self.stale_writes.count,
            self.bound_overruns.count,
            self.stranded.count
        )?;
        write!(
            f,
            "acquired={} not_acquired={} unknown={} failed={} lost={} writes_accepted={} \
             writes_rejected={} pending={} slowest_call={:?} least_headroom={:?}",
            self.acquired,
            self.not_acquired,
            self.unknown,
            self.failed,
            self.lost,
            self.writes_accepted,
            self.writes_rejected,
            self.pending,
            self.slowest_call,
            self.least_headroom.unwrap_or_default()
        )?;
        for (name, finding) in [
            ("overlap", &self.overlaps),
            ("fence order", &self.fence_order),
            ("stale write", &self.stale_writes),
            ("bound overrun", &self.bound_overruns),
            ("stranded", &self.stranded),
        ] {
            for e in &finding.examples {
                write!(f, "\n  {name}: {e}")?;
            }
        }
        Ok(())
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1}ms", d.as_secs_f64() * 1000.0)
}

fn describe(id: OpId, op: &Op) -> String {
    format!(
        "#{id} w{} {:?} {:?} fence={:?} ttl={} [{} .. {}] {:?}",
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
            (_, Outcome::NotAcquired) => r.not_acquired += 1,
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

    // (d) bounds.
    for (id, op) in ops.iter().enumerate() {
        let Some(bound) = op.bound else { continue };
        let took = op.took(history.end);
        r.slowest_call = r.slowest_call.max(took);
        let headroom = bound.saturating_sub(took);
        r.least_headroom = Some(r.least_headroom.map_or(headroom, |h| h.min(headroom)));
        if took > bound {
            r.worst_overrun = r.worst_overrun.max(took - bound);
            r.bound_overruns.add(max, || {
                format!(
                    "{} took {} > bound {}",
                    describe(id, op),
                    ms(took),
                    ms(bound)
                )
            });
        }
    }

    for ids in by_key.values() {
        let acquired: Vec<OpId> = ids
            .iter()
            .copied()
            .filter(|&i| ops[i].kind == OpKind::Acquire && ops[i].outcome == Outcome::Ok)
            .collect();

        // (a) overlapping windows.
        let mut windows: Vec<(Duration, Duration, OpId)> = acquired
            .iter()
            .filter_map(|&a| {
                let (start, end) = window(ops, a, of_lease.get(&a).unwrap_or(&no_ops))?;
                (end > start).then_some((start, end, a))
            })
            .collect();
        windows.sort();
        for (j, &(start, end, b)) in windows.iter().enumerate() {
            for &(_, end_a, a) in &windows[..j] {
                if end_a > start {
                    r.overlaps.add(max, || {
                        // What the earlier holder did with its lease, to tell why it ended early.
                        let calls: Vec<String> = of_lease
                            .get(&a)
                            .unwrap_or(&no_ops)
                            .iter()
                            .map(|&i| describe(i, &ops[i]))
                            .collect();
                        format!(
                            "{} and {} both valid during [{} .. {}]; the first one's calls: [{}]",
                            describe(a, &ops[a]),
                            describe(b, &ops[b]),
                            ms(start),
                            ms(end_a.min(end)),
                            calls.join("; ")
                        )
                    });
                }
            }
        }

        // (b) fence order: against the largest fence among acquisitions completed before this one
        // was invoked, and duplicates.
        let mut done: Vec<(Duration, u64, OpId)> = acquired
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
        for &b in &acquired {
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

        // (c) stale writes accepted, in the order the store accepted them.
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

        // (e) refusals with no possible holder.
        let holds: Vec<(Duration, Duration, OpId)> = ids
            .iter()
            .filter(|&&i| ops[i].kind == OpKind::Acquire)
            .filter_map(|&a| {
                let (from, until) =
                    possible_hold(ops, a, of_lease.get(&a).unwrap_or(&no_ops), config)?;
                Some((from, until, a))
            })
            .collect();
        for &x in ids {
            let op = &ops[x];
            if op.kind != OpKind::Acquire || op.outcome != Outcome::NotAcquired {
                continue;
            }
            let Some(done_at) = op.complete else { continue };
            let covered = holds
                .iter()
                .any(|&(from, until, _)| from <= done_at && until >= op.invoke);
            if !covered {
                // The hold that ended last before this refusal, with its calls: what the checker
                // believed settled it is usually the thing to look at.
                let last = || {
                    holds
                        .iter()
                        .filter(|&&(from, until, _)| from <= done_at && until < op.invoke)
                        .max_by_key(|&&(_, until, _)| until)
                        .map(|&(_, until, a)| {
                            let calls: Vec<String> = std::iter::once(a)
                                .chain(of_lease.get(&a).unwrap_or(&no_ops).iter().copied())
                                .map(|i| describe(i, &ops[i]))
                                .collect();
                            format!("; last hold ended at {}: [{}]", ms(until), calls.join("; "))
                        })
                        .unwrap_or_default()
                };
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
    }
    r
}

/// The conservative validity window of the successful acquire `a`.
fn window(ops: &[Op], a: OpId, related: &[OpId]) -> Option<(Duration, Duration)> {
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
            // Only an extend sent while the lease was still valid continues the window.
            OpKind::Extend if op.outcome == Outcome::Ok && op.invoke < expiry => {
                expiry = (op.invoke + op.ttl).saturating_sub(drift(op.ttl));
            }
            // One that failed may still have reached the backend and set a shorter TTL: a careful
            // holder believes the earlier end (the client's `remaining()` does).
            OpKind::Extend if op.outcome != Outcome::Ok && op.invoke < expiry => {
                expiry = expiry.min((op.invoke + op.ttl).saturating_sub(drift(op.ttl)));
            }
            _ => {}
        }
    }
    Some((start, end.map_or(expiry, |e| e.min(expiry))))
}

/// When the acquire `a` could have been holding its key on the server: from its invocation until its
/// release was confirmed, or its TTL (plus slack) after its last call that may have set a TTL.
fn possible_hold(
    ops: &[Op],
    a: OpId,
    related: &[OpId],
    config: &CheckConfig,
) -> Option<(Duration, Duration)> {
    let acq = &ops[a];
    if acq.outcome == Outcome::NotAcquired && !config.refusals_may_hold {
        return None;
    }
    let slack = config.stranded_slack;
    let forever = Duration::MAX / 4;
    let mut until = acq.complete.map_or(forever, |c| c + acq.ttl + slack);
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
            (OpKind::Extend, Outcome::Ok | Outcome::Unknown | Outcome::Pending) => {
                until = until.max(op.complete.map_or(forever, |c| c + op.ttl + slack));
            }
            (OpKind::Release, Outcome::Pending) => until = forever,
            _ => {}
        }
    }
    Some((acq.invoke, until))
}

/// The store a torture run protects: it keeps the largest fence it accepted per key and accepts a
/// write iff its fence is at least that (equal: the same holder writing again). The unfenced variant
/// accepts everything — the mistake the checker's (c) must catch.
#[derive(Debug, Default)]
pub struct FencedStore {
    unfenced: bool,
    highest: Mutex<HashMap<String, u64>>,
}

impl FencedStore {
    pub fn new() -> FencedStore {
        FencedStore::default()
    }

    /// A store that ignores fences (accepts every write).
    pub fn unfenced() -> FencedStore {
        FencedStore {
            unfenced: true,
            ..FencedStore::default()
        }
    }

    pub fn is_fenced(&self) -> bool {
        !self.unfenced
    }

    /// Writes to `key` with `fence`; true if accepted.
    pub fn write(&self, key: &str, fence: u64) -> bool {
        let mut highest = self.highest.lock().unwrap_or_else(|e| e.into_inner());
        self.write_locked(&mut highest, key, fence)
    }

    fn write_locked(&self, highest: &mut HashMap<String, u64>, key: &str, fence: u64) -> bool {
        let top = highest.entry(key.to_owned()).or_insert(0);
        let accept = self.unfenced || fence >= *top;
        if accept {
            *top = (*top).max(fence);
        }
        accept
    }

    /// [`FencedStore::write`], recorded in `history` while the store is locked, so the history's
    /// order of accepted writes is the store's.
    pub fn write_recorded(
        &self,
        history: &crate::history::History,
        worker: usize,
        key: &str,
        lease: Option<OpId>,
        fence: u64,
    ) -> bool {
        let mut highest = self.highest.lock().unwrap_or_else(|e| e.into_inner());
        let id = history.invoke(Op::write(worker, key, lease, fence));
        let accepted = self.write_locked(&mut highest, key, fence);
        history.complete(
            id,
            if accepted {
                Outcome::Ok
            } else {
                Outcome::Rejected
            },
            None,
        );
        accepted
    }

    /// The largest fence accepted on `key` so far.
    pub fn highest(&self, key: &str) -> Option<u64> {
        self.highest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .copied()
    }
}
