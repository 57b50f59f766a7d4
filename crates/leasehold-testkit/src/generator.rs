//! The seeded fault generator: given a seed and a [`Catalogue`] of the faults that apply to the
//! target, draws a random [`Schedule`] (fault, start, duration) and applies it while the workers
//! run. The same seed and catalogue draw the same schedule (`TORTURE_SEED` replays a run; timing
//! on a loaded machine does not replay exactly).
//!
//! Faults that share a resource (one server, the proxies) never overlap; faults on different
//! resources do, as they would in life (a slow network while a server is stopped).

mod catalogue;
mod schedule;

pub use catalogue::{Catalogue, FaultSpec};
pub use schedule::{Event, Schedule};

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A schedule being applied: one thread per resource, each running its events in order.
pub struct Generator {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    log: Arc<Mutex<Vec<String>>>,
}

impl Generator {
    /// Applies `schedule` (drawn from `catalogue`), its times counted from now.
    pub fn start(catalogue: &Catalogue, schedule: &Schedule) -> Generator {
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(Vec::new()));
        let start = Instant::now();
        let mut per_resource: BTreeMap<&str, Vec<Event>> = BTreeMap::new();
        for e in &schedule.events {
            let spec = &catalogue.specs[e.spec];
            per_resource
                .entry(spec.resource.as_str())
                .or_default()
                .push(*e);
        }
        let threads = per_resource
            .into_values()
            .map(|events| {
                let specs: Vec<FaultSpec> = catalogue.specs.clone();
                let (stop, log) = (stop.clone(), log.clone());
                std::thread::Builder::new()
                    .name("fault-generator".into())
                    .spawn(move || {
                        for e in events {
                            if !sleep_until(start, e.start, &stop) {
                                return;
                            }
                            let spec = &specs[e.spec];
                            let mut rng = fastrand::Rng::with_seed(e.seed);
                            let what = (spec.action)(e.duration, &mut rng);
                            let line = format!(
                                "{:>7.3}s {} for {:?}{}{}",
                                e.start.as_secs_f64(),
                                spec.name,
                                e.duration,
                                if what.is_empty() { "" } else { ": " },
                                what
                            );
                            log.lock().unwrap_or_else(|p| p.into_inner()).push(line);
                        }
                    })
                    .expect("spawn a fault generator thread")
            })
            .collect();
        Generator { stop, threads, log }
    }

    /// Stops starting faults, waits for the running ones to end, and returns what was done.
    pub fn finish(mut self) -> Vec<String> {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let mut log = std::mem::take(&mut *self.log.lock().unwrap_or_else(|p| p.into_inner()));
        log.sort();
        log
    }
}

impl Drop for Generator {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// False if stopped first.
fn sleep_until(start: Instant, at: Duration, stop: &AtomicBool) -> bool {
    loop {
        if stop.load(Ordering::SeqCst) {
            return false;
        }
        let now = start.elapsed();
        if now >= at {
            return true;
        }
        std::thread::sleep((at - now).min(Duration::from_millis(10)));
    }
}
