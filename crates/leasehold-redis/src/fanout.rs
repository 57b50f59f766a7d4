//! Sending one call to every Redlock node at once, through a small pool of long-lived worker
//! threads per node.
//!
//! Why a pool rather than `std::thread::scope` per call: measured on the 2-core test machine, a
//! scoped spawn-and-join of 2 threads costs about 160 µs and of 4 threads about 280 µs, while
//! handing 2 or 4 jobs to parked workers and collecting their answers costs about 30 and 70 µs
//! (and the benchmark in `tests/redlock_bench.rs` prints it again). A scope must also join every
//! thread, so one hung node would hold every call for its whole timeout; with a pool the caller
//! stops listening once the quorum is decided and the slow node's worker finishes on its own.
//!
//! Each node has its own workers, so a hung node backs up only its own queues. Calls about one key
//! always go to the same worker of a node (by a hash of the key), so they reach that node in the
//! order they were made: a release queued behind a slow acquire of the same token (say, one
//! reconnecting to a restarted node) runs after it and removes what it took, instead of running
//! first and leaving a key nobody will release. A call may be skipped once it is too late to be
//! wanted: an acquire once its caller has stopped listening, a release once the key has expired
//! anyway. Workers are started on demand, up to the node's connection pool size (more could not run
//! at once anyway), with a small stack; they end when the backend is dropped.

use crate::node::Node;
use leasehold_core::Result;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::Instant;

type Job = Box<dyn FnOnce(&Node) + Send>;

/// Node calls are a few frames of socket I/O and parsing; the default 2 MiB would be waste.
const WORKER_STACK: usize = 256 * 1024;

pub(crate) struct Fanout {
    groups: Vec<Group>,
}

/// One node's workers: slot `i` is a queue with one thread behind it, started on first use.
struct Group {
    node: Arc<Node>,
    slots: Vec<Mutex<Option<Sender<Job>>>>,
}

/// When a queued call is still worth making.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    /// The caller listens for answers until then.
    pub(crate) listen_until: Instant,
    /// A call that has not started by then is dropped unsent.
    pub(crate) run_until: Instant,
}

impl Timing {
    /// For calls whose answer matters only to a caller still listening.
    pub(crate) fn answer_by(deadline: Instant) -> Timing {
        Timing {
            listen_until: deadline,
            run_until: deadline,
        }
    }
}

impl Fanout {
    pub(crate) fn new(nodes: Vec<Node>, workers_per_node: usize) -> Fanout {
        let groups = nodes
            .into_iter()
            .map(|node| Group {
                node: Arc::new(node),
                slots: (0..workers_per_node.max(1))
                    .map(|_| Mutex::new(None))
                    .collect(),
            })
            .collect();
        Fanout { groups }
    }

    pub(crate) fn len(&self) -> usize {
        self.groups.len()
    }

    pub(crate) fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.groups.iter().map(|g| &*g.node)
    }

    /// Runs `call` on each node in `which` in parallel, on the worker that `affinity` (a key)
    /// picks. Answers arrive on the returned [`Replies`] as they come.
    pub(crate) fn call<T, F>(&self, which: &[usize], affinity: &[u8], timing: Timing, call: F) -> Replies<T>
    where
        T: Send + 'static,
        F: Fn(&Node) -> Result<T> + Send + Sync + 'static,
    {
        let (tx, rx) = mpsc::channel();
        let call = Arc::new(call);
        let mut sent = 0;
        for &i in which {
            let Some(group) = self.groups.get(i) else {
                continue;
            };
            let (tx, call) = (tx.clone(), call.clone());
            let job: Job = Box::new(move |node: &Node| {
                if Instant::now() >= timing.run_until {
                    return;
                }
                let _ = tx.send((i, call(node)));
            });
            if group.submit(affinity, job) {
                sent += 1;
            }
        }
        Replies {
            rx,
            deadline: timing.listen_until,
            outstanding: sent,
        }
    }

    /// [`Fanout::call`] on every node.
    pub(crate) fn call_all<T, F>(&self, affinity: &[u8], timing: Timing, call: F) -> Replies<T>
    where
        T: Send + 'static,
        F: Fn(&Node) -> Result<T> + Send + Sync + 'static,
    {
        let all: Vec<usize> = (0..self.len()).collect();
        self.call(&all, affinity, timing, call)
    }
}

impl Group {
    /// Queues a job on the key's worker, starting it if needed. False if it could not be started,
    /// so the caller does not wait for an answer that cannot come.
    fn submit(&self, affinity: &[u8], job: Job) -> bool {
        let mut hasher = DefaultHasher::new();
        affinity.hash(&mut hasher);
        let slot = (hasher.finish() % self.slots.len() as u64) as usize;
        let Some(slot) = self.slots.get(slot) else {
            return false;
        };
        let mut queue = slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if queue.is_none() {
            *queue = self.spawn_worker();
        }
        match queue.as_ref() {
            Some(q) => q.send(job).is_ok(),
            None => false,
        }
    }

    fn spawn_worker(&self) -> Option<Sender<Job>> {
        let (tx, jobs) = mpsc::channel::<Job>();
        let node = self.node.clone();
        let started = std::thread::Builder::new()
            .name("leasehold-redlock".into())
            .stack_size(WORKER_STACK)
            .spawn(move || work(&node, &jobs));
        match started {
            Ok(_) => Some(tx),
            Err(e) => {
                tracing::warn!(
                    "redlock: cannot start a worker thread for {}: {e}",
                    self.node.name()
                );
                None
            }
        }
    }
}

fn work(node: &Node, jobs: &Receiver<Job>) {
    // The queue closes when the backend is dropped.
    while let Ok(job) = jobs.recv() {
        // A panic would only lose this one answer (the caller counts it as a failed node); the
        // worker lives on.
        let _ = catch_unwind(AssertUnwindSafe(|| job(node)));
    }
}

/// The answers of one fan-out, by node index, in the order they arrive.
pub(crate) struct Replies<T> {
    rx: Receiver<(usize, Result<T>)>,
    deadline: Instant,
    outstanding: usize,
}

impl<T> Replies<T> {
    /// The next answer; `None` once every node answered or the deadline passed.
    pub(crate) fn next(&mut self) -> Option<(usize, Result<T>)> {
        if self.outstanding == 0 {
            return None;
        }
        let left = self.deadline.saturating_duration_since(Instant::now());
        match self.rx.recv_timeout(left) {
            Ok(answer) => {
                self.outstanding -= 1;
                Some(answer)
            }
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                self.outstanding = 0;
                None
            }
        }
    }
}
