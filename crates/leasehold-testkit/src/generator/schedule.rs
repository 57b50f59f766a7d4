//! Drawing a schedule from a seed.

use super::Catalogue;
use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

/// One fault to apply: which entry of the catalogue, when (from the run's start), for how long.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Event {
    pub spec: usize,
    pub start: Duration,
    pub duration: Duration,
    /// Seeds the fault's own choices (which proxies, how much latency).
    pub seed: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    pub events: Vec<Event>,
    names: Vec<String>,
}

impl Schedule {
    /// Draws each fault of `catalogue` about once per its `every`, over `run` minus `tail` (the
    /// faults end before the workers stop, so the last leases are judged on a healed system),
    /// dropping any that would overlap an earlier one on the same resource.
    pub fn draw(catalogue: &Catalogue, seed: u64, run: Duration, tail: Duration) -> Schedule {
        let mut rng = fastrand::Rng::with_seed(seed ^ 0x5eed_fa17);
        let horizon = run.saturating_sub(tail);
        let mut events = Vec::new();
        for (i, spec) in catalogue.specs.iter().enumerate() {
            let every = spec.every.as_millis().max(1) as u64;
            let mut t = Duration::from_millis(rng.u64(0..every));
            loop {
                let (lo, hi) = (spec.min.as_millis() as u64, spec.max.as_millis() as u64);
                let duration = Duration::from_millis(rng.u64(lo..=hi.max(lo)));
                if t + duration + spec.settle > horizon {
                    break;
                }
                events.push(Event {
                    spec: i,
                    start: t,
                    duration,
                    seed: rng.u64(..),
                });
                t += duration + Duration::from_millis(rng.u64(every / 2..=every * 3 / 2));
            }
        }
        events.sort_by_key(|e| (e.start, e.spec));
        let mut busy: HashMap<&str, Duration> = HashMap::new();
        events.retain(|e| {
            let spec = &catalogue.specs[e.spec];
            let free = busy
                .get(spec.resource.as_str())
                .copied()
                .unwrap_or_default();
            let keep = e.start >= free;
            if keep {
                busy.insert(spec.resource.as_str(), e.start + e.duration + spec.settle);
            }
            keep
        });
        Schedule {
            events,
            names: catalogue.specs.iter().map(|s| s.name.clone()).collect(),
        }
    }

    /// How many events of each fault, in catalogue order.
    pub fn counts(&self) -> Vec<(String, usize)> {
        self.names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                (
                    n.clone(),
                    self.events.iter().filter(|e| e.spec == i).count(),
                )
            })
            .collect()
    }
}

impl fmt::Display for Schedule {
    /// One line: each fault with how many times it is drawn.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .counts()
            .into_iter()
            .map(|(n, c)| format!("{n}×{c}"))
            .collect();
        write!(f, "{} faults: {}", self.events.len(), parts.join(", "))
    }
}
