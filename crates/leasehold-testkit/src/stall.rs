//! The machine's own stalls, measured while a history is recorded: a probe thread sleeps a few
//! milliseconds at a time and records each wake-up that came much later than asked. A worker's
//! call cannot see its own timeout fire while the machine keeps every thread off the CPU, so the
//! checker does not count such a stall against the library's bound (it reports the call apart).
//! The probe runs at the workers' priority: a stall it saw is one the run queue imposed on them too;
//! one it did not see (a worker alone descheduled) gets no allowance.

use crate::history::History;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long the probe sleeps between looks.
const TICK: Duration = Duration::from_millis(5);
/// A wake-up later than this is a stall: shorter ones are a scheduler quantum or two, which the
/// checker's fixed scheduling slack covers.
pub const STALL_MIN: Duration = Duration::from_millis(20);

/// A probe recording into `history` until `stop` is set.
pub fn watch(history: Arc<History>, stop: Arc<AtomicBool>) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name("stall-probe".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let asked = Instant::now() + TICK;
                std::thread::sleep(TICK);
                let woke = Instant::now();
                if woke.saturating_duration_since(asked) > STALL_MIN {
                    history.stalled(asked, woke);
                }
            }
        })
        .expect("spawn the stall probe")
}
