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
//! futex-based channels and mutexes, and each process has workers of its own: in a `fork()` child
//! (where the parent's threads do not exist) the first call starts new workers.
//!
//! The calling thread, which would otherwise only wait, makes calls itself where that cannot break
//! the per-key order or hold it on a sick node: nodes that have not failed lately and have nothing
//! queued for the key. For most calls that is one node (saving one thread handoff: 3.4× → 2.8× a
//! single node for Redlock(3) when it was measured); for the plain lock's acquire and release,
//! every such node that has an idle connection, written to at once before any answer is read
//! (`pipeline.rs`). A node that has never failed but stops answering holds such a call until the
//! call's deadline once; it is then left to its workers for a while (`TROUBLE_MEMORY`).

use crate::node::Node;
use crate::redlock::pipeline;
use leasehold_core::fork::PerProcess;
use leasehold_core::Result;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

type Job = Box<dyn FnOnce(&Node) + Send>;

/// What a fan-out runs on each node (given the node's index and the node): one name for the bound
/// that every function here puts on it.
pub(crate) trait NodeCall<T>: Fn(usize, &Node) -> Result<T> + Send + Sync + 'static {}

impl<T, F: Fn(usize, &Node) -> Result<T> + Send + Sync + 'static> NodeCall<T> for F {}

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

/// One worker, per process: in a `fork()` child the parent's thread is gone, and so are the jobs
/// it counted, and its queue's lock may be held by a thread that vanished (the keep-alive thread
/// renewing a Redlock lease), so a child starts from a fresh slot ([`PerProcess`]).
type Slot = PerProcess<Worker>;

#[derive(Default)]
struct Worker {
    /// The worker's queue, once its thread is started.
    queue: Mutex<Option<Sender<Job>>>,
    /// Jobs queued or running on this worker.
    pending: Arc<AtomicUsize>,
}

impl Worker {
    fn here(slot: &Slot) -> &Worker {
        slot.get(Worker::default).0
    }
}

/// When a queued call is still worth making.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    /// The caller listens for answers until then.
    pub(crate) listen_until: Instant,
    /// The calls' own deadline: only before it may a call run on the caller's thread. A call
    /// started later (a give-back after its round's deadline) gets a full node bound of its own,
    /// and would hold the caller that long (seen in the Redlock torture run: rounds ending 300–400
    /// ms past their bound, each behind an inline give-back begun in the listening slack).
    pub(crate) inline_until: Instant,
    /// A call that has not started by then is dropped unsent.
    pub(crate) run_until: Instant,
    /// Whether a call that has not started when the caller stops listening (drops its
    /// [`Replies`]) is dropped unsent too. Without this, a caller that decides early and calls
    /// again (a waiter polling a hot key) would queue work faster than a slow node's worker does
    /// it.
    pub(crate) only_while_heard: bool,
}

impl Fanout {
    pub(crate) fn new(nodes: Vec<Node>, workers_per_node: usize) -> Fanout {
        let groups = nodes
            .into_iter()
            .map(|node| Group {
                node: Arc::new(node),
                slots: (0..workers_per_node.max(1)).map(|_| Slot::new()).collect(),
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
    pub(crate) fn call<T: Send + 'static, F: NodeCall<T>>(
        &self,
        which: &[usize],
        affinity: &[u8],
        timing: Timing,
        call: F,
    ) -> Replies<T> {
        let slot = slot_of(affinity, self.slots());
        let local: Vec<usize> = self.eligible(which, slot, timing).take(1).collect();
        let call = Arc::new(call);
        let mut replies = self.queue(which, &local, slot, timing, call.clone());
        for i in local {
            if let Some(group) = self.groups.get(i) {
                let answer = call(i, &group.node);
                self.heard(i, &answer);
                replies.local.push((i, answer));
            }
        }
        replies
    }

    /// [`Fanout::call`] with the calls of every eligible node that has an idle connection made
    /// on the calling thread, as one pipelined wave (see `pipeline.rs`): `request` packs a node's
    /// command and `parse` reads its reply; `call` makes the call the ordinary way, on workers: for
    /// the other nodes, and again for a node whose pipelined reply was not the script's answer.
    /// `deadline` is the calls' own.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn call_pipelined<T: Send + 'static, F: NodeCall<T>>(
        &self,
        which: &[usize],
        affinity: &[u8],
        timing: Timing,
        what: &str,
        deadline: leasehold_core::Deadline,
        request: impl Fn(usize, &Node) -> Vec<u8>,
        parse: impl Fn(usize, &Node, redis::Value) -> Result<T>,
        call: F,
    ) -> Replies<T> {
        let slot = slot_of(affinity, self.slots());
        let requests: Vec<pipeline::Request<'_>> = self
            .eligible(which, slot, timing)
            .filter_map(|i| {
                let node = &*self.groups.get(i)?.node;
                let conn = node.pipelined_connection(deadline)?;
                Some(pipeline::Request {
                    index: i,
                    node,
                    conn,
                    packed: request(i, node),
                })
            })
            .collect();
        let local: Vec<usize> = requests.iter().map(|r| r.index).collect();
        let call = Arc::new(call);
        let mut replies = self.queue(which, &local, slot, timing, call.clone());
        let mut again = Vec::new();
        for (i, outcome) in pipeline::run(requests, what, deadline, parse) {
            match outcome {
                pipeline::Outcome::Answered(answer) => {
                    self.heard(i, &answer);
                    replies.local.push((i, answer));
                }
                pipeline::Outcome::Again => again.push(i),
            }
        }
        if !again.is_empty() {
            self.queue_onto(&mut replies, &again, &[], slot, timing, call);
        }
        replies
    }

    fn slots(&self) -> usize {
        self.groups.first().map_or(1, |g| g.slots.len())
    }

    /// The nodes of `which` whose call may be made on the calling thread: only while the calls'
    /// deadline is ahead (a call made once its answer no longer matters, a give-back after the
    /// round's deadline, must not hold the caller, whatever its own deadline: a worker makes it),
    /// and only on nodes that have not failed lately and have nothing queued for this key (so
    /// calls about one key reach a node in order).
    fn eligible<'a>(
        &'a self,
        which: &'a [usize],
        slot: usize,
        timing: Timing,
    ) -> impl Iterator<Item = usize> + 'a {
        let listening = Instant::now() < timing.inline_until.min(timing.listen_until);
        which.iter().copied().filter(move |&i| {
            listening
                && self
                    .groups
                    .get(i)
                    .is_some_and(|g| !self.troubled(g) && g.idle(slot))
        })
    }

    /// Queues `call` on worker `slot` of every node in `which` but those in `local` (which the
    /// caller makes itself); their answers arrive on the returned [`Replies`].
    fn queue<T: Send + 'static, F: NodeCall<T>>(
        &self,
        which: &[usize],
        local: &[usize],
        slot: usize,
        timing: Timing,
        call: Arc<F>,
    ) -> Replies<T> {
        let (tx, rx) = mpsc::channel();
        let mut replies = Replies {
            local: Vec::new(),
            deaf: Arc::new(AtomicBool::new(false)),
            tx,
            rx,
            deadline: timing.listen_until,
            outstanding: 0,
        };
        self.queue_onto(&mut replies, which, local, slot, timing, call);
        replies
    }

    /// [`Fanout::queue`] onto replies already made.
    fn queue_onto<T: Send + 'static, F: NodeCall<T>>(
        &self,
        replies: &mut Replies<T>,
        which: &[usize],
        local: &[usize],
        slot: usize,
        timing: Timing,
        call: Arc<F>,
    ) {
        for &i in which {
            if local.contains(&i) {
                continue;
            }
            let Some(group) = self.groups.get(i) else {
                continue;
            };
            let (tx, call, trouble) = (replies.tx.clone(), call.clone(), group.trouble.clone());
            let (epoch, deaf) = (self.epoch, replies.deaf.clone());
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
                replies.outstanding += 1;
            }
        }
    }

    /// Notes a failed call made on the calling thread.
    fn heard<T>(&self, node: usize, answer: &Result<T>) {
        if let (Err(_), Some(group)) = (answer, self.groups.get(node)) {
            note_trouble(&group.trouble, self.epoch);
        }
    }

    /// [`Fanout::call`] on every node.
    pub(crate) fn call_all<T: Send + 'static, F: NodeCall<T>>(
        &self,
        affinity: &[u8],
        timing: Timing,
        call: F,
    ) -> Replies<T> {
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
            .is_some_and(|s| Worker::here(s).pending.load(Ordering::Acquire) == 0)
    }

    /// Queues a job on worker `slot`, starting it if needed. False if it could not be started, so
    /// the caller does not wait for an answer that cannot come.
    fn submit(&self, slot: usize, job: Job) -> bool {
        let Some(slot) = self.slots.get(slot) else {
            return false;
        };
        let slot = Worker::here(slot);
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
        let started = leasehold_core::threads::quietly(|| {
            std::thread::Builder::new()
                .name("leasehold-redlock".into())
                .stack_size(WORKER_STACK)
                .spawn(move || work(&node, &jobs))
        });
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
    /// The answers of the calls made on the caller's thread, not yet handed out.
    local: Vec<(usize, Result<T>)>,
    /// Set when the caller stops listening (see [`Timing::only_while_heard`]).
    deaf: Arc<AtomicBool>,
    /// For calls queued once the replies exist (see [`Fanout::call_pipelined`]); answers are
    /// counted, so this sender never keeps [`Replies::next`] waiting.
    tx: Sender<(usize, Result<T>)>,
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
        if let Some(answer) = self.local.pop() {
            return Some(answer);
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
