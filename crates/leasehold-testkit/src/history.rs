//! A thread-safe record of every operation a torture run makes: when it was invoked, when it
//! completed and how. Plain data (strings, numbers, durations since the history's start), so the
//! checker knows nothing of Leasehold and a test can write a history by hand.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Index of an operation in its history.
pub type OpId = usize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OpKind {
    Acquire,
    Release,
    Extend,
    /// A write to the protected store, carrying the writer's fence.
    Write,
    /// Another client picked the lease up by its token (`lease` names the acquire it continues).
    Restore,
    /// A shared lease made exclusive (`fence`: the new one, when granted). It renews the lease's
    /// TTL (`ttl`) as an extend does.
    Promote,
    /// An exclusive lease made shared, keeping its fence; it renews the TTL too.
    Demote,
}

/// What an acquire asked for, as plain data: the checker's exclusion rules depend on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Mode {
    #[default]
    Exclusive,
    /// A reader: any number at once, never beside an exclusive lease.
    Shared,
    /// One of this many permits of a semaphore.
    Permit(u32),
}

impl Mode {
    /// How many leases of this mode may hold one key at once.
    pub fn capacity(self) -> usize {
        match self {
            Mode::Exclusive => 1,
            Mode::Shared => usize::MAX,
            Mode::Permit(n) => n.max(1) as usize,
        }
    }

    /// Whether a lease of this mode and one of `other` may hold one key at the same time.
    pub fn coexists_with(self, other: Mode) -> bool {
        matches!(
            (self, other),
            (Mode::Shared, Mode::Shared) | (Mode::Permit(_), Mode::Permit(_))
        )
    }
}

/// What a holder believed right after a call on its lease (or right before a write): from `at` until
/// `until` its `remaining()` said the lease was valid. `at` is read from the history clock before
/// `remaining()`, so `until = at + remaining` errs early, never late.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Belief {
    /// The acquire whose lease this is.
    pub lease: OpId,
    pub at: Duration,
    pub until: Duration,
}

/// How an operation ended: ok, one of the definite failures, or unknown (the call gave up without
/// learning whether it took effect — a timeout, a reset, `Unavailable`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// Invoked, not completed yet (or never: a hang).
    Pending,
    Ok,
    /// An acquire refused because the key is held.
    NotAcquired,
    /// An acquire refused although a quorum granted it: the round took the whole TTL, so the grant
    /// came back with no validity left (Redlock). Nobody holds its token; its grants lapse at the TTL.
    NoValidity,
    /// A release or extend told the lease was not ours any more.
    Lost,
    /// A write the store refused (its fence was stale).
    Rejected,
    /// Another definite failure (for example `InvalidArgument`).
    Failed,
    Unknown,
}

impl Outcome {
    pub fn is_fail(self) -> bool {
        matches!(
            self,
            Outcome::NotAcquired
                | Outcome::NoValidity
                | Outcome::Lost
                | Outcome::Rejected
                | Outcome::Failed
        )
    }
}

/// One operation. Times are offsets from the history's start on the monotonic clock.
#[derive(Debug, Clone, PartialEq)]
pub struct Op {
    pub worker: usize,
    pub key: String,
    pub kind: OpKind,
    /// Acquire: exclusive, shared or a permit (other operations: their lease's, unused).
    pub mode: Mode,
    /// Acquire and extend: the TTL asked for; promote and demote: the TTL they renew.
    pub ttl: Duration,
    /// Acquire and promote: how long it may wait for the key.
    pub wait: Duration,
    /// The longest the call may take by the contract; `None` for writes to the test's own store.
    pub bound: Option<Duration>,
    /// Release, extend and write: the acquire this operation belongs to.
    pub lease: Option<OpId>,
    /// Acquire and promote: the fence returned. Write: the fence presented.
    pub fence: Option<u64>,
    pub invoke: Duration,
    pub complete: Option<Duration>,
    pub outcome: Outcome,
}

impl Op {
    /// A pending operation invoked at `invoke`, for building histories by hand.
    pub fn new(worker: usize, key: &str, kind: OpKind, invoke: Duration) -> Op {
        Op {
            worker,
            key: key.to_owned(),
            kind,
            mode: Mode::Exclusive,
            ttl: Duration::ZERO,
            wait: Duration::ZERO,
            bound: None,
            lease: None,
            fence: None,
            invoke,
            complete: None,
            outcome: Outcome::Pending,
        }
    }

    pub fn acquire(worker: usize, key: &str, ttl: Duration, wait: Duration, bound: Duration) -> Op {
        Op {
            ttl,
            wait,
            bound: Some(bound),
            ..Op::new(worker, key, OpKind::Acquire, Duration::ZERO)
        }
    }

    pub fn release(worker: usize, key: &str, lease: OpId, bound: Duration) -> Op {
        Op {
            bound: Some(bound),
            lease: Some(lease),
            ..Op::new(worker, key, OpKind::Release, Duration::ZERO)
        }
    }

    pub fn extend(worker: usize, key: &str, lease: OpId, ttl: Duration, bound: Duration) -> Op {
        Op {
            ttl,
            bound: Some(bound),
            lease: Some(lease),
            ..Op::new(worker, key, OpKind::Extend, Duration::ZERO)
        }
    }

    /// A promote of `lease` (TTL `ttl`), waiting up to `wait` for the other readers to leave.
    pub fn promote(
        worker: usize,
        key: &str,
        lease: OpId,
        ttl: Duration,
        wait: Duration,
        bound: Duration,
    ) -> Op {
        Op {
            ttl,
            wait,
            bound: Some(bound),
            lease: Some(lease),
            ..Op::new(worker, key, OpKind::Promote, Duration::ZERO)
        }
    }

    pub fn demote(worker: usize, key: &str, lease: OpId, ttl: Duration, bound: Duration) -> Op {
        Op {
            ttl,
            bound: Some(bound),
            lease: Some(lease),
            ..Op::new(worker, key, OpKind::Demote, Duration::ZERO)
        }
    }

    pub fn write(worker: usize, key: &str, lease: Option<OpId>, fence: u64) -> Op {
        Op {
            lease,
            fence: Some(fence),
            ..Op::new(worker, key, OpKind::Write, Duration::ZERO)
        }
    }

    /// Sets the times and outcome (builder style, for hand-written histories).
    pub fn at(mut self, invoke_ms: u64, complete_ms: Option<u64>, outcome: Outcome) -> Op {
        self.invoke = Duration::from_millis(invoke_ms);
        self.complete = complete_ms.map(Duration::from_millis);
        self.outcome = outcome;
        self
    }

    pub fn restore(worker: usize, key: &str, lease: OpId, bound: Duration) -> Op {
        Op {
            bound: Some(bound),
            lease: Some(lease),
            ..Op::new(worker, key, OpKind::Restore, Duration::ZERO)
        }
    }

    pub fn with_mode(mut self, mode: Mode) -> Op {
        self.mode = mode;
        self
    }

    pub fn with_fence(mut self, fence: u64) -> Op {
        self.fence = Some(fence);
        self
    }

    /// How long it took (until `end` if it never completed).
    pub fn took(&self, end: Duration) -> Duration {
        self.complete.unwrap_or(end).saturating_sub(self.invoke)
    }
}

/// A copy of a history at one moment: the operations and when the copy was taken.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub ops: Vec<Op>,
    /// What holders believed of their leases, in the order recorded.
    pub beliefs: Vec<Belief>,
    /// When the snapshot was taken: pending operations have been running at least until then.
    pub end: Duration,
    /// Every client session ended by someone else (an administrator's kill of them all), by the
    /// call that ended them: a lease that lives in its session (PostgreSQL advisory, MySQL named)
    /// ends with it, and its holder must stop relying on it when the session's end reaches it.
    /// Recorded only for such backends.
    pub session_ends: Vec<SessionEnd>,
    /// When the machine kept a probe thread off the CPU far past its wake-up (see `stall.rs`).
    pub stalls: Vec<Stall>,
    /// Every time the server was crashed and started again with its data, from the crash until it
    /// answered again. The checker grants nothing for them (a backend that keeps its leases through
    /// such a restart must lose none); it counts the leases relied on across one
    /// ([`crate::Report::held_across_restarts`]), to show that a run put the claim to the test.
    pub restarts: Vec<Restart>,
}

/// A stretch in which a probe thread that asked to wake was not running ([`Snapshot::stalls`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stall {
    pub start: Duration,
    pub end: Duration,
}

impl Snapshot {
    /// How long the machine stalled, summed, between `from` and `to`.
    pub fn stalled_within(&self, from: Duration, to: Duration) -> Duration {
        self.stalls
            .iter()
            .map(|s| s.end.min(to).saturating_sub(s.start.max(from)))
            .sum()
    }
}

/// One crash and restart of the server with its data ([`Snapshot::restarts`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Restart {
    pub crashed: Duration,
    pub back: Duration,
}

/// One call that ended every client session ([`Snapshot::session_ends`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionEnd {
    pub invoke: Duration,
    pub complete: Duration,
    /// How long a relay between the clients and the server held each chunk while the call ran
    /// (the fault proxy's latency, 0 when it forwarded at once): the sessions' goodbyes left the
    /// server during the call and reached their holders that much later, which is the goodbye's
    /// travel time the guarantee leaves out (README, "Guarantees and their limits").
    pub goodbye_held: Duration,
}

impl Snapshot {
    /// A snapshot of hand-written operations, ending just after the last time mentioned.
    pub fn of(ops: Vec<Op>) -> Snapshot {
        let end = ops
            .iter()
            .map(|o| o.complete.unwrap_or(o.invoke))
            .max()
            .unwrap_or_default();
        Snapshot {
            ops,
            beliefs: Vec::new(),
            end,
            session_ends: Vec::new(),
            stalls: Vec::new(),
            restarts: Vec::new(),
        }
    }

    /// Adds a hand-written end of every session, by the call that ended them.
    pub fn with_session_end(self, invoke_ms: u64, complete_ms: u64) -> Snapshot {
        self.with_held_session_end(invoke_ms, complete_ms, 0)
    }

    /// [`Snapshot::with_session_end`] while a relay held every chunk `held_ms`
    /// ([`SessionEnd::goodbye_held`]).
    pub fn with_held_session_end(
        mut self,
        invoke_ms: u64,
        complete_ms: u64,
        held_ms: u64,
    ) -> Snapshot {
        let end = SessionEnd {
            invoke: Duration::from_millis(invoke_ms),
            complete: Duration::from_millis(complete_ms),
            goodbye_held: Duration::from_millis(held_ms),
        };
        self.end = self.end.max(end.complete);
        self.session_ends.push(end);
        self
    }

    /// Adds a hand-written crash and restart of the server with its data.
    pub fn with_restart(mut self, crashed_ms: u64, back_ms: u64) -> Snapshot {
        let restart = Restart {
            crashed: Duration::from_millis(crashed_ms),
            back: Duration::from_millis(back_ms),
        };
        self.end = self.end.max(restart.back);
        self.restarts.push(restart);
        self
    }

    /// Adds hand-written beliefs `(lease, at_ms, until_ms)`.
    pub fn with_beliefs(mut self, beliefs: &[(OpId, u64, u64)]) -> Snapshot {
        for &(lease, at, until) in beliefs {
            let (at, until) = (Duration::from_millis(at), Duration::from_millis(until));
            self.end = self.end.max(until);
            self.beliefs.push(Belief { lease, at, until });
        }
        self
    }
}

/// The recorder, shared by every worker thread.
#[derive(Debug)]
pub struct History {
    start: Instant,
    ops: Mutex<Vec<Op>>,
    beliefs: Mutex<Vec<Belief>>,
    session_ends: Mutex<Vec<SessionEnd>>,
    stalls: Mutex<Vec<Stall>>,
    restarts: Mutex<Vec<Restart>>,
}

impl Default for History {
    fn default() -> Self {
        History::new()
    }
}

impl History {
    pub fn new() -> History {
        History {
            start: Instant::now(),
            ops: Mutex::new(Vec::new()),
            beliefs: Mutex::new(Vec::new()),
            session_ends: Mutex::new(Vec::new()),
            stalls: Mutex::new(Vec::new()),
            restarts: Mutex::new(Vec::new()),
        }
    }

    /// Time since the history started.
    pub fn now(&self) -> Duration {
        self.start.elapsed()
    }

    fn ops(&self) -> std::sync::MutexGuard<'_, Vec<Op>> {
        self.ops.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records `op` as invoked now (its `invoke`, `complete` and `outcome` are overwritten).
    pub fn invoke(&self, mut op: Op) -> OpId {
        let mut ops = self.ops();
        op.invoke = self.now();
        op.complete = None;
        op.outcome = Outcome::Pending;
        ops.push(op);
        ops.len() - 1
    }

    /// Records that `id` completed now with `outcome`; `fence` (when given) is the fence returned.
    pub fn complete(&self, id: OpId, outcome: Outcome, fence: Option<u64>) {
        let mut ops = self.ops();
        let now = self.now();
        if let Some(op) = ops.get_mut(id) {
            op.complete = Some(now);
            op.outcome = outcome;
            if fence.is_some() {
                op.fence = fence;
            }
        }
    }

    pub fn ok(&self, id: OpId, fence: Option<u64>) {
        self.complete(id, Outcome::Ok, fence);
    }

    pub fn fail(&self, id: OpId, outcome: Outcome) {
        self.complete(id, outcome, None);
    }

    pub fn unknown(&self, id: OpId) {
        self.complete(id, Outcome::Unknown, None);
    }

    /// Records a fully formed operation as is (times included), for merging or hand-written histories.
    pub fn record(&self, op: Op) -> OpId {
        let mut ops = self.ops();
        ops.push(op);
        ops.len() - 1
    }

    /// Records what the holder of `lease` believes now: the clock is read first, then `remaining`
    /// is called, so the recorded end is never later than the one the holder saw.
    pub fn believe(&self, lease: OpId, remaining: impl FnOnce() -> Duration) {
        let at = self.now();
        let until = at + remaining();
        self.beliefs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Belief { lease, at, until });
    }

    /// Records that every client session was ended by a call made from `invoke` to `complete`,
    /// while a relay held every chunk `goodbye_held` (see [`Snapshot::session_ends`]).
    pub fn sessions_ended(&self, invoke: Instant, complete: Instant, goodbye_held: Duration) {
        let since = |t: Instant| t.saturating_duration_since(self.start);
        self.session_ends
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(SessionEnd {
                invoke: since(invoke),
                complete: since(complete),
                goodbye_held,
            });
    }

    /// Records that the machine kept a thread that asked to wake at `asked` off the CPU until
    /// `woke` (see `stall.rs`).
    pub fn stalled(&self, asked: Instant, woke: Instant) {
        let since = |t: Instant| t.saturating_duration_since(self.start);
        self.stalls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Stall {
                start: since(asked),
                end: since(woke),
            });
    }

    /// Records that the server crashed at `crashed` and answered again, with its data, at `back`
    /// (see [`Snapshot::restarts`]).
    pub fn server_restarted(&self, crashed: Instant, back: Instant) {
        let since = |t: Instant| t.saturating_duration_since(self.start);
        self.restarts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Restart {
                crashed: since(crashed),
                back: since(back),
            });
    }

    pub fn len(&self) -> usize {
        self.ops().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn snapshot(&self) -> Snapshot {
        let ops = self.ops();
        let beliefs = self
            .beliefs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let session_ends = self
            .session_ends
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let stalls = self
            .stalls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let restarts = self
            .restarts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        Snapshot {
            ops: ops.clone(),
            beliefs,
            end: self.now(),
            session_ends,
            stalls,
            restarts,
        }
    }
}

/// The seed of a randomized schedule: `TORTURE_SEED` when set (to replay a failure), else a fresh
/// one. Printed as `seed=N` on stderr either way, so a failing run can be replayed.
pub fn seed(label: &str) -> u64 {
    let seed = std::env::var("TORTURE_SEED")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    eprintln!("{label}: seed={seed} (replay with TORTURE_SEED={seed})");
    seed
}
