//! The store a torture run protects, fenced (or, to show the checker catches it, not).

use crate::history::{History, Op, OpId, Outcome};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

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

    /// Starts recording a write of `fence` to `key` that a store of its own decides — a real
    /// database's fence gate, or a plain `UPDATE` that accepts everything — rather than this
    /// in-memory one: invoked now; call [`GatedWrite::decided`] the moment the store has decided,
    /// then [`GatedWrite::finish`] once its transaction has committed or rolled back.
    pub fn gated_write<'h>(
        history: &'h History,
        worker: usize,
        key: &str,
        lease: Option<OpId>,
        fence: u64,
    ) -> GatedWrite<'h> {
        let mut op = Op::write(worker, key, lease, fence);
        op.invoke = history.now();
        GatedWrite {
            history,
            op,
            decided: None,
        }
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

/// A write whose acceptance an external store decides ([`FencedStore::gated_write`]). Nothing is in
/// the history until it is finished.
///
/// The checker's (D) orders accepted writes by completion, so the completion recorded is the moment
/// the store *decided*, taken while the store still holds what decided it (the row lock a
/// database's gate keeps until commit), not the moment the commit returned: two transactions that
/// commit one after the other can return to their threads in the opposite order, and a history
/// stamped at the return would show a stale write that the store never accepted.
#[derive(Debug)]
#[must_use = "a gated write is recorded only by finish() or unknown()"]
pub struct GatedWrite<'h> {
    history: &'h History,
    op: Op,
    decided: Option<Duration>,
}

impl GatedWrite<'_> {
    /// Marks now as the moment the store decided (accepted or refused). Call it right after the
    /// gate (and the write) returned, before the commit.
    pub fn decided(&mut self) {
        self.decided = Some(self.history.now());
    }

    /// Records the write as accepted (committed) or rejected, completed when it was decided (now,
    /// if [`GatedWrite::decided`] was never called).
    pub fn finish(self, accepted: bool) -> OpId {
        let outcome = if accepted {
            Outcome::Ok
        } else {
            Outcome::Rejected
        };
        self.record(outcome)
    }

    /// Records a write whose fate the writer never learned (its commit failed or timed out): it
    /// may or may not have been accepted, so the checker counts it as neither.
    pub fn unknown(self) -> OpId {
        self.record(Outcome::Unknown)
    }

    fn record(self, outcome: Outcome) -> OpId {
        let GatedWrite {
            history,
            mut op,
            decided,
        } = self;
        op.complete = Some(decided.unwrap_or_else(|| history.now()));
        op.outcome = outcome;
        history.record(op)
    }
}
