//! The torture workers, shared by the torture test (tests/torture.rs) and the soak
//! (examples/torture.rs): threads that take exclusive, shared and permit leases, extend them
//! sometimes (with another TTL), promote readers and demote writers sometimes, write to a fenced
//! store (while exclusive, with their fence), sometimes pause past their TTL or hand their lease to
//! another worker (detach, then restore by token), and release, recording every call and what the
//! holder believed of its lease after each (`remaining()`) in a history for the checker.

#![allow(dead_code)]

use leasehold::{Error, Lease};
use leasehold_testkit::checker::allowance::SCHEDULING_SLACK as SLACK;
use leasehold_testkit::history::{OpId, OpKind};
use leasehold_testkit::{
    check, CheckConfig, FaultProxy, FencedStore, History, Mode, Op, Outcome, Report,
};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The longest TTL a worker asks for (acquire or extend) unless its plan says otherwise: a server
/// that loses its data stays down longer than this, so no lease granted before the loss is still
/// believed after it.
pub const MAX_TTL: Duration = Duration::from_millis(200);

#[derive(Debug, Clone)]
pub struct Plan {
    pub url: String,
    pub workers: usize,
    pub keys: usize,
    pub duration: Duration,
    pub seed: u64,
    pub connect_timeout: Duration,
    pub io_timeout: Duration,
    /// Chance that a holder "pauses" past its TTL before writing.
    pub pause_chance: f64,
    /// A worker opens a new client every this many cycles (a PHP worker is a new process per
    /// request): a backend that rebuilds its bookkeeping when a client opens gets to do so mid-run.
    pub reconnect_every: Option<u32>,
    /// A refused acquire may leave part of a grant behind until its TTL (Redlock): see
    /// [`CheckConfig::refusals_may_hold`].
    pub refusals_may_hold: bool,
    /// Whether workers also take shared leases (on the lock keys, beside exclusive ones).
    pub shared: bool,
    /// Whether workers also take permits of semaphores of this many permits (on keys of their own:
    /// semaphores are a namespace apart).
    pub permits: Option<u32>,
    /// Chance that an exclusive holder detaches its lease for another worker to restore by token.
    pub handoff_chance: f64,
    /// Whether holders promote shared leases and demote exclusive ones (backends that offer it).
    pub swaps: bool,
    /// What the URL adds to the bound of an acquire attempt and an extend: `replicas_timeout_ms`
    /// with `replicas=N` (the `WAIT` for the replicas' acknowledgement runs inside the call).
    pub write_allowance: Duration,
    /// The shortest a server holds a lease ([`CheckConfig::server_hold_floor`]).
    pub server_hold_floor: Duration,
    /// How much of what is left of a lease a holder works on it at most (a quarter by default):
    /// longer where leases live in sessions that faults end, so that holders are at work, looking
    /// at what is left, when another client is granted the key.
    pub work_share: u64,
    /// Chance, per cycle, that a worker sits idle for a while (drawn from this range) keeping its
    /// client, as a PHP-FPM worker with a persistent connection does between requests: a client
    /// that made no call while the servers changed (a failover) learns of it on its next call.
    pub idle: Option<(f64, std::ops::RangeInclusive<Duration>)>,
    /// The TTLs workers ask for (acquire and extend), drawn from this range; a paused holder
    /// sleeps past its end. 20 ms to [`MAX_TTL`] by default; longer where a server crashes and
    /// comes back with its data, so that leases granted before the crash are still held, and
    /// relied on, once it answers again.
    pub ttls: std::ops::RangeInclusive<Duration>,
    /// How long a writer that waited keeps new readers back after its wait ended
    /// ([`CheckConfig::writer_mark`]).
    pub writer_mark: Duration,
}

impl Plan {
    pub fn new(url: &str, duration: Duration, seed: u64) -> Plan {
        Plan {
            url: url.to_owned(),
            workers: 8,
            keys: 4,
            duration,
            seed,
            connect_timeout: Duration::from_millis(400),
            io_timeout: Duration::from_millis(400),
            pause_chance: 0.1,
            reconnect_every: None,
            refusals_may_hold: url.starts_with("redlock"),
            shared: true,
            permits: Some(2),
            handoff_chance: 0.05,
            swaps: true,
            write_allowance: Duration::ZERO,
            server_hold_floor: Duration::ZERO,
            work_share: 4,
            idle: None,
            ttls: Duration::from_millis(20)..=MAX_TTL,
            writer_mark: Duration::ZERO,
        }
    }

    /// The contract's bound of an acquire with `wait`: wait + connect + io, plus [`SLACK`].
    pub fn acquire_bound(&self, wait: Duration) -> Duration {
        wait + self.call_bound() + self.write_allowance
    }

    /// The bound of an extend: a call's, plus the wait for replicas ([`Plan::write_allowance`]).
    pub fn extend_bound(&self) -> Duration {
        self.call_bound() + self.write_allowance
    }

    /// The contract's bound of every other call: connect + io, plus [`SLACK`].
    pub fn call_bound(&self) -> Duration {
        self.connect_timeout + self.io_timeout + SLACK
    }

    /// The URL with this plan's timeouts (unless it names its own).
    pub fn full_url(&self) -> String {
        let mut url = self.url.clone();
        for (name, value) in [
            ("connect_timeout_ms", self.connect_timeout),
            ("io_timeout_ms", self.io_timeout),
        ] {
            if !url.contains(name) {
                let sep = if url.contains('?') { '&' } else { '?' };
                url = format!("{url}{sep}{name}={}", value.as_millis());
            }
        }
        url
    }
}

/// A lease one worker detached for another to pick up by its token.
struct Handoff {
    key: String,
    token: String,
    /// The acquire the lease came from: the restorer's calls and beliefs continue it.
    lease: OpId,
}

/// What the workers share.
struct Shared {
    history: Arc<History>,
    store: Arc<FencedStore>,
    stop: Arc<AtomicBool>,
    handoffs: Mutex<VecDeque<Handoff>>,
}

/// Running workers; [`Run::finish`] stops them and checks what they did.
pub struct Run {
    pub history: Arc<History>,
    pub store: Arc<FencedStore>,
    stop: Arc<AtomicBool>,
    workers: Vec<JoinHandle<()>>,
    /// Records the machine's stalls into the history, for the checker's bounds.
    probe: JoinHandle<()>,
    /// The checker's settings, from the plan.
    config: CheckConfig,
}

pub fn start(plan: &Plan) -> Run {
    let shared = Arc::new(Shared {
        history: Arc::new(History::new()),
        store: Arc::new(FencedStore::new()),
        stop: Arc::new(AtomicBool::new(false)),
        handoffs: Mutex::new(VecDeque::new()),
    });
    let url = plan.full_url();
    let workers = (0..plan.workers)
        .map(|w| {
            let (sh, plan, url) = (shared.clone(), plan.clone(), url.clone());
            std::thread::Builder::new()
                .name(format!("torture-{w}"))
                .spawn(move || worker(w, &plan, &url, &sh))
                .expect("spawn a torture worker")
        })
        .collect();
    let probe = leasehold_testkit::stall::watch(shared.history.clone(), shared.stop.clone());
    Run {
        history: shared.history.clone(),
        probe,
        store: shared.store.clone(),
        stop: shared.stop.clone(),
        workers,
        config: CheckConfig {
            refusals_may_hold: plan.refusals_may_hold,
            server_hold_floor: plan.server_hold_floor,
            writer_mark: plan.writer_mark,
            ..CheckConfig::default()
        },
    }
}

impl Run {
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// Stops the workers, waits for them at most `grace` (a hung call is the checker's to report,
    /// not ours to wait for), and checks the history.
    pub fn finish(self, grace: Duration) -> Report {
        self.stop();
        let until = Instant::now() + grace;
        while Instant::now() < until && !self.workers.iter().all(|w| w.is_finished()) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.probe.join();
        let snapshot = self.history.snapshot();
        for w in self.workers {
            if w.is_finished() {
                let _ = w.join();
            }
        }
        check(&snapshot, &self.config)
    }
}

fn outcome_of(e: &Error) -> Outcome {
    match e {
        // Redlock's refusal of a grant whose round outlasted its TTL: not contention, and nobody
        // holds what the quorum granted (the checker counts it as a cost, not a refusal).
        Error::NotAcquired(why) if why.contains("left no validity") => Outcome::NoValidity,
        Error::NotAcquired(_) => Outcome::NotAcquired,
        Error::Lost(_) => Outcome::Lost,
        Error::Unavailable(_) => Outcome::Unknown,
        _ => Outcome::Failed,
    }
}

fn random_ttl(plan: &Plan, rng: &mut fastrand::Rng) -> Duration {
    let (lo, hi) = (plan.ttls.start().as_millis(), plan.ttls.end().as_millis());
    Duration::from_millis(rng.u64(lo as u64..=hi as u64))
}

/// The mode of the next acquire: exclusive half the time, else shared or a permit when offered.
fn random_mode(plan: &Plan, rng: &mut fastrand::Rng) -> Mode {
    let mut modes = vec![Mode::Exclusive, Mode::Exclusive];
    if plan.shared {
        modes.push(Mode::Shared);
    }
    if let Some(n) = plan.permits {
        modes.push(Mode::Permit(n));
    }
    while modes.len() < 4 {
        modes.push(Mode::Exclusive);
    }
    modes[rng.usize(..modes.len())]
}

fn worker(w: usize, plan: &Plan, url: &str, sh: &Shared) {
    let (h, stop) = (&*sh.history, &*sh.stop);
    let mut rng = fastrand::Rng::with_seed(plan.seed.wrapping_add(w as u64 * 0x9E37_79B9));
    // Each worker its own client: its own pool, as separate processes would have.
    let connect = || loop {
        match leasehold::connect(url) {
            Ok(c) => break Some(c),
            Err(_) if !stop.load(Ordering::SeqCst) => std::thread::sleep(Duration::from_millis(50)),
            Err(_) => break None,
        }
    };
    let Some(mut client) = connect() else { return };
    let end = Instant::now() + plan.duration;
    let mut cycles = 0u32;
    while Instant::now() < end && !stop.load(Ordering::SeqCst) {
        cycles = cycles.wrapping_add(1);
        if plan
            .reconnect_every
            .is_some_and(|n| cycles.is_multiple_of(n.max(1)))
        {
            match connect() {
                Some(c) => client = c,
                None => return,
            }
        }
        if let Some((chance, range)) = &plan.idle {
            if rng.f64() < *chance {
                let (lo, hi) = (range.start().as_millis(), range.end().as_millis());
                let until = Instant::now() + Duration::from_millis(rng.u64(lo as u64..=hi as u64));
                while Instant::now() < until.min(end) && !stop.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(20));
                }
                continue;
            }
        }
        // A lease another worker detached comes first: picking it up late is part of the test.
        let handoff = sh
            .handoffs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front();
        if let Some(hd) = handoff {
            let r = h.invoke(Op::restore(w, &hd.key, hd.lease, plan.call_bound()));
            match client.restore(&hd.key, &hd.token) {
                Ok(lease) => {
                    h.ok(r, Some(lease.fence()));
                    h.believe(hd.lease, || lease.remaining());
                    let held = Held {
                        key: &hd.key,
                        id: hd.lease,
                        mode: Mode::Exclusive,
                        ttl: None,
                    };
                    hold(w, plan, &mut rng, sh, held, lease);
                }
                Err(e) => h.fail(r, outcome_of(&e)),
            }
            continue;
        }
        let mode = random_mode(plan, &mut rng);
        let key = match mode {
            Mode::Permit(_) => format!("torture-sem:{}", rng.usize(..plan.keys.max(1))),
            _ => format!("torture:{}", rng.usize(..plan.keys.max(1))),
        };
        let ttl = random_ttl(plan, &mut rng);
        let wait = Duration::from_millis(rng.u64(0..=300));
        let op = Op::acquire(w, &key, ttl, wait, plan.acquire_bound(wait)).with_mode(mode);
        let id = h.invoke(op);
        let got = match mode {
            Mode::Exclusive => client.acquire(&key, ttl, wait),
            Mode::Shared => client.acquire_shared(&key, ttl, wait),
            Mode::Permit(n) => client.acquire_permit(&key, n, ttl, wait),
        };
        match got {
            Ok(lease) => {
                h.ok(id, Some(lease.fence()));
                h.believe(id, || lease.remaining());
                let held = Held {
                    key: &key,
                    id,
                    mode,
                    ttl: Some(ttl),
                };
                hold(w, plan, &mut rng, sh, held, lease);
            }
            Err(e) => {
                h.fail(id, outcome_of(&e));
                if !matches!(e, Error::NotAcquired(_)) {
                    // A backend in trouble: do not spin on it.
                    std::thread::sleep(Duration::from_millis(rng.u64(1..=20)));
                }
            }
        }
    }
}

/// A lease a worker holds, as its history knows it.
struct Held<'a> {
    key: &'a str,
    /// The acquire it came from (a restored lease continues its acquire).
    id: OpId,
    /// As acquired.
    mode: Mode,
    /// Its TTL as last granted, when this worker knows it (not for a restored lease, which then
    /// neither promotes nor demotes: their records carry the TTL they renew).
    ttl: Option<Duration>,
}

/// What a holder does with a lease (acquired, or restored): works (or pauses past its TTL), maybe
/// extends, maybe promotes a shared lease, writes with its fence while exclusive, maybe demotes,
/// then hands it off or releases it. A belief is recorded after every call and right before the
/// write.
fn hold(w: usize, plan: &Plan, rng: &mut fastrand::Rng, sh: &Shared, held: Held, mut lease: Lease) {
    let h = &*sh.history;
    let Held {
        key,
        id,
        mode,
        mut ttl,
    } = held;
    let mut exclusive = mode == Mode::Exclusive;
    if rng.f64() < plan.pause_chance {
        // A holder paused (GC, SIGSTOP) past its TTL, then writing as if nothing happened: the
        // store must refuse it if a newer holder has written.
        std::thread::sleep(*plan.ttls.end() + Duration::from_millis(rng.u64(1..=50)));
    } else {
        let remaining = lease.remaining().as_millis() as u64;
        let share = remaining / plan.work_share.max(1);
        work(h, id, &lease, Duration::from_millis(rng.u64(0..=share)));
        if rng.u8(..5) == 0 {
            let new_ttl = random_ttl(plan, rng);
            let op = Op::extend(w, key, id, new_ttl, plan.extend_bound());
            if renew(plan, h, &mut lease, op, |l| l.extend(new_ttl)) {
                ttl = ttl.map(|_| new_ttl);
            }
        }
    }
    let swaps = plan.swaps && lease.is_held();
    if let (true, Mode::Shared, Some(ttl)) = (swaps, mode, ttl) {
        if rng.u8(..3) == 0 {
            // A reader that turns writer: granted once the other readers have left.
            let wait = Duration::from_millis(rng.u64(0..=100));
            let op = Op::promote(w, key, id, ttl, wait, plan.acquire_bound(wait));
            exclusive = renew(plan, h, &mut lease, op, |l| l.promote(wait));
        }
    }
    if exclusive {
        h.believe(id, || lease.remaining());
        sh.store.write_recorded(h, w, key, Some(id), lease.fence());
        if mode == Mode::Exclusive && rng.f64() < plan.handoff_chance && lease.is_held() {
            // Detached: the key stays held under this token until its TTL or the restorer's
            // release; this worker no longer records anything for it.
            let token = lease.token().to_string();
            lease.forget();
            sh.handoffs
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push_back(Handoff {
                    key: key.to_owned(),
                    token,
                    lease: id,
                });
            return;
        }
        if let (true, Some(ttl)) = (swaps && lease.is_held(), ttl) {
            if rng.u8(..4) == 0 {
                // A writer done writing that lets readers in before it lets go.
                let op = Op::demote(w, key, id, ttl, plan.extend_bound());
                renew(plan, h, &mut lease, op, Lease::demote);
                let remaining = lease.remaining().as_millis() as u64;
                std::thread::sleep(Duration::from_millis(rng.u64(0..=remaining / 8)));
            }
        }
    }
    let r = h.invoke(Op::release(w, key, id, plan.call_bound()));
    match lease.release_in_place() {
        Ok(()) => h.ok(r, None),
        Err(e) => h.fail(r, outcome_of(&e)),
    }
    h.believe(id, || lease.remaining());
    if !lease.is_released() {
        // A release of unknown outcome: the key runs out at its TTL. Detaching (rather than
        // dropping, which would try again) keeps this one call per release, within its bound.
        lease.forget();
    }
}

/// Works on the lease for `time`, as a careful holder does: in steps, looking at what is left
/// before each (a belief), so a lease that ends meanwhile (a session ended by someone else) is
/// judged on what its holder believed then, not only after its next call.
fn work(h: &History, id: OpId, lease: &Lease, time: Duration) {
    const STEP: Duration = Duration::from_millis(5);
    let end = Instant::now() + time;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::sleep(left.min(STEP));
        h.believe(id, || lease.remaining());
    }
}

/// One call that renews the lease (an extend, promote or demote), recorded as `op`: its outcome
/// (a granted promote with its new fence), what the holder believes after it, and whether it
/// succeeded. When it failed and the client says the lease is over (a call that found it lost, or
/// one whose session had to be dropped), the holder no longer relies on it, as a careful worker
/// would not: recorded as the start of giving it back (which ends the lease's validity window),
/// but not as settled, since the server may hold the key until the release that follows (a
/// PostgreSQL advisory session is closed then, not inside the failed call).
fn renew(
    plan: &Plan,
    h: &History,
    lease: &mut Lease,
    op: Op,
    call: impl FnOnce(&mut Lease) -> Result<(), Error>,
) -> bool {
    let (w, key, id, kind) = (op.worker, op.key.clone(), op.lease, op.kind);
    let id = id.expect("a call on a lease names its acquire");
    let x = h.invoke(op);
    let result = call(lease);
    match &result {
        Ok(()) => h.ok(x, (kind == OpKind::Promote).then(|| lease.fence())),
        Err(e) => h.fail(x, outcome_of(e)),
    }
    h.believe(id, || lease.remaining());
    if result.is_err() && !lease.is_held() {
        let gone = h.invoke(Op::release(w, &key, id, plan.call_bound()));
        h.fail(gone, Outcome::Failed);
    }
    result.is_ok()
}

/// Puts a [`FaultProxy`] in front of every host:port of `url` (redis://, rediss://, redlock://
/// h1,h2,…, postgres://…host:port…, mysql:// and mariadb://…host:port…) and returns the URL through
/// them. Hosts are resolved once.
pub fn proxied(url: &str) -> (String, Vec<Arc<FaultProxy>>) {
    let (scheme, rest) = url.split_once("://").expect("a URL with a scheme");
    let auth_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(auth_end);
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(i) => (&authority[..=i], &authority[i + 1..]),
        None => ("", authority),
    };
    let default_port = if scheme.starts_with("postgres") {
        5432
    } else if scheme == "mysql" || scheme == "mariadb" {
        3306
    } else {
        6379
    };
    let mut proxies = Vec::new();
    let mut through = Vec::new();
    for host in hosts.split(',') {
        let target = if host.contains(':') {
            host.to_owned()
        } else {
            format!("{host}:{default_port}")
        };
        let p = Arc::new(FaultProxy::start(target.as_str()));
        through.push(p.host_port());
        proxies.push(p);
    }
    (
        format!("{scheme}://{userinfo}{}{tail}", through.join(",")),
        proxies,
    )
}

/// One line per finding, for the end of a run.
pub fn summary(name: &str, seed: u64, r: &Report) -> String {
    format!("{name} seed={seed}: {r}")
}
