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
//! at once anyway), with a small stack; they end when the backend is dropped. They use only std's
//! futex-based channels and mutexes, so a client rebuilt in a `fork()` child starts its own.
//!
//! One node's call is made on the calling thread, which would otherwise only wait: that saves a
//! thread handoff per call (the benchmark measured 3.4× → 2.8× a single node for Redlock(3)). It
//! is a node that has not failed lately and has nothing queued for the key, so the per-key order
//! holds.

use crate::node::Node;
use leasehold_core::Result;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

type Job = Box<dyn FnOnce(&Node) + Send>;

/// Node calls are a few frames of socket I/O and parsing; the default 2 MiB would be waste.
const WORKER_STACK: usize = 256 * 1024;

/// A node that failed a call this recently is not called on the caller's own thread, where a hang
/// would hold the caller for its whole timeout instead of letting the quorum answer without it.
const TROUBLE_MEMORY: Duration = Duration::from_secs(5);

pub(crate) struct Fanout {
    groups: Vec<Group>,
    epoch: Instant,
}

/// One node's workers: slot `i` is a queue with one thread behind it, started on first use.
struct Group {
    node: Arc<Node>,
    slots: Vec<Slot>,
    /// When (ms after the fan-out's epoch, plus one; 0 = never) a call to this node last failed.
    trouble: Arc<AtomicU64>,
}

struct Slot {
    queue: Mutex<Option<Sender<Job>>>,
    /// Jobs queued or running on this worker.
    pending: Arc<AtomicUsize>,
}

/// When a queued call is still worth making.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    /// The caller listens for answers until then.
    pub(crate) listen_until: Instant,
    /// A call that has not started by then is dropped unsent.
    pub(crate) run_until: Instant,
    /// Whether a call that has not started when the caller stops listening (drops its
    /// [`Replies`]) is dropped unsent too. Without this, a caller that decides early and calls
    /// again (a waiter polling a hot key) would queue work faster than a slow node's worker does
    /// it.
    pub(crate) only_while_heard: bool,
}

impl Timing {
    /// For calls whose answer matters only to a caller still listening.
    pub(crate) fn answer_by(deadline: Instant) -> Timing {
        Timing {
            listen_until: deadline,
            run_until: deadline,
            only_while_heard: true,
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
                    .map(|_| Slot {
                        queue: Mutex::new(None),
                        pending: Arc::new(AtomicUsize::new(0)),
                    })
                    .collect(),
                trouble: Arc::new(AtomicU64::new(0)),
            })
            .collect();
        Fanout {
            groups,
            epoch: Instant::now(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.groups.len()
    }

    pub(crate) fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.groups.iter().map(|g| &*g.node)
    }

    /// Runs `call` (given the node's index and the node) on each node in `which` in parallel.
    /// Answers arrive on the returned [`Replies`] as they come.
    ///
    /// One node's call runs on the calling thread, which would otherwise only wait (saving a
    /// thread handoff, the largest part of the fan-out's cost): the first node that has not failed
    /// lately and has nothing queued for this key (so calls about one key still reach it in
    /// order). The others go to the worker that `affinity` (the key) picks on each node.
    pub(crate) fn call<T, F>(
        &self,
        which: &[usize],
        affinity: &[u8],
        timing: Timing,
        call: F,
    ) -> Replies<T>
    where
        T: Send + 'static,
        F: Fn(usize, &Node) -> Result<T> + Send + Sync + 'static,
    {
        let slot = slot_of(affinity, self.groups.first().map_or(1, |g| g.slots.len()));
        let inline = which.iter().copied().find(|&i| {
            self.groups
                .get(i)
                .is_some_and(|g| !self.troubled(g) && g.idle(slot))
        });
        let (tx, rx) = mpsc::channel();
        let call = Arc::new(call);
        let deaf = Arc::new(AtomicBool::new(false));
        let mut sent = 0;
        for &i in which {
            if Some(i) == inline {
                continue;
            }
            let Some(group) = self.groups.get(i) else {
                continue;
            };
            let (tx, call, trouble) = (tx.clone(), call.clone(), group.trouble.clone());
            let (epoch, deaf) = (self.epoch, deaf.clone());
            let job: Job = Box::new(move |node: &Node| {
                let unheard = timing.only_while_heard && deaf.load(Ordering::Acquire);
                if unheard || Instant::now() >= timing.run_until {
                    return;
                }
                let answer = call(i, node);
                if answer.is_err() {
                    note_trouble(&trouble, epoch);
                }
                let _ = tx.send((i, answer));
            });
            if group.submit(slot, job) {
                sent += 1;
            }
        }
        let first = inline.and_then(|i| {
            let group = self.groups.get(i)?;
            let answer = call(i, &group.node);
            if answer.is_err() {
                note_trouble(&group.trouble, self.epoch);
            }
            Some((i, answer))
        });
        Replies {
            first,
            deaf,
            rx,
            deadline: timing.listen_until,
            outstanding: sent,
        }
    }

    /// [`Fanout::call`] on every node.
    pub(crate) fn call_all<T, F>(&self, affinity: &[u8], timing: Timing, call: F) -> Replies<T>
    where
        T: Send + 'static,
        F: Fn(usize, &Node) -> Result<T> + Send + Sync + 'static,
    {
        let all: Vec<usize> = (0..self.len()).collect();
        self.call(&all, affinity, timing, call)
    }

    fn troubled(&self, group: &Group) -> bool {
        let at = group.trouble.load(Ordering::Relaxed);
        if at == 0 {
            return false;
        }
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        let memory = u64::try_from(TROUBLE_MEMORY.as_millis()).unwrap_or(u64::MAX);
        now.saturating_add(1).saturating_sub(at) < memory
    }
}

fn note_trouble(trouble: &AtomicU64, epoch: Instant) {
    let now = u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
    trouble.store(now.saturating_add(1), Ordering::Relaxed);
}

/// The worker (of each node) that serves calls about `affinity`.
fn slot_of(affinity: &[u8], slots: usize) -> usize {
    let mut hasher = DefaultHasher::new();
    affinity.hash(&mut hasher);
    (hasher.finish() % slots.max(1) as u64) as usize
}

impl Group {
    fn idle(&self, slot: usize) -> bool {
        self.slots
            .get(slot)
            .is_some_and(|s| s.pending.load(Ordering::Acquire) == 0)
    }

    /// Queues a job on worker `slot`, starting it if needed. False if it could not be started, so
    /// the caller does not wait for an answer that cannot come.
    fn submit(&self, slot: usize, job: Job) -> bool {
        let Some(slot) = self.slots.get(slot) else {
            return false;
        };
        let mut queue = slot
            .queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if queue.is_none() {
            *queue = self.spawn_worker();
        }
        let pending = slot.pending.clone();
        pending.fetch_add(1, Ordering::AcqRel);
        let counted: Job = Box::new(move |node: &Node| {
            job(node);
            pending.fetch_sub(1, Ordering::AcqRel);
        });
        let queued = queue.as_ref().is_some_and(|q| q.send(counted).is_ok());
        if !queued {
            slot.pending.fetch_sub(1, Ordering::AcqRel);
        }
        queued
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
    /// The answer of the call made on the caller's thread.
    first: Option<(usize, Result<T>)>,
    /// Set when the caller stops listening (see [`Timing::only_while_heard`]).
    deaf: Arc<AtomicBool>,
    rx: Receiver<(usize, Result<T>)>,
    deadline: Instant,
    outstanding: usize,
}

impl<T> Drop for Replies<T> {
    fn drop(&mut self) {
        self.deaf.store(true, Ordering::Release);
    }
}

impl<T> Replies<T> {
    /// The next answer; `None` once every node answered or the deadline passed.
    pub(crate) fn next(&mut self) -> Option<(usize, Result<T>)> {
        if let Some(first) = self.first.take() {
            return Some(first);
        }
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
