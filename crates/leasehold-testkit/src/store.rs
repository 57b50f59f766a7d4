//! The store a torture run protects, fenced (or, to show the checker catches it, not).

use crate::history::{Op, OpId, Outcome};
use std::collections::HashMap;
use std::sync::Mutex;

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
