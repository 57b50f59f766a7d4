//! The torture workers, shared by the torture test (tests/torture.rs) and the soak
//! (examples/torture.rs): threads that acquire, write to a fenced store, sometimes pause past their
//! TTL, and release, recording everything in a history for the checker.

#![allow(dead_code)]

use leasehold::{Error, Lease};
use leasehold_testkit::{
    check, CheckConfig, FaultProxy, FencedStore, History, Op, Outcome, Report,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Scheduling slack on top of the contract's bounds: this is a 2-core machine running the workers,
/// the proxies' thread pairs and the servers at once, so a thread can wait a few scheduler quanta
/// (and a latency fault can hold a reply) before it sees its own timeout fire.
pub const SLACK: Duration = Duration::from_millis(400);

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
    /// How long past its TTL a lease of unknown fate may still hold its key: a request sent to a
    /// server that is paused runs when the server wakes, and its TTL starts only then, so a scenario
    /// that pauses a server for P needs at least P here (see [`CheckConfig::stranded_slack`]).
    pub stranded_slack: Duration,
    /// What the URL adds to the bound of an acquire attempt and an extend: `replicas_timeout_ms`
    /// with `replicas=N` (the `WAIT` for the replicas' acknowledgement runs inside the call).
    pub write_allowance: Duration,
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
            // A request held back by a fault (a black hole, up to 400 ms; a slow drip of up to 5 ms a
            // byte, over 1 s for a 250-byte script call) reaches the server, and takes its lease, up
            // to about 2 s after its caller gave up: its TTL starts only then. (Seen in a 10-minute
            // Redis soak: a refusal 1.74 s after an unknown acquire.)
            stranded_slack: Duration::from_millis(2500),
            write_allowance: Duration::ZERO,
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

/// Running workers; [`Run::finish`] stops them and checks what they did.
pub struct Run {
    pub history: Arc<History>,
    pub store: Arc<FencedStore>,
    stop: Arc<AtomicBool>,
    workers: Vec<JoinHandle<()>>,
    /// The checker's settings, from the plan.
    config: CheckConfig,
}

pub fn start(plan: &Plan) -> Run {
    let history = Arc::new(History::new());
    let store = Arc::new(FencedStore::new());
    let stop = Arc::new(AtomicBool::new(false));
    let url = plan.full_url();
    let workers = (0..plan.workers)
        .map(|w| {
            let (h, s, st, plan, url) = (
                history.clone(),
                store.clone(),
                stop.clone(),
                plan.clone(),
                url.clone(),
            );
            std::thread::Builder::new()
                .name(format!("torture-{w}"))
                .spawn(move || worker(w, &plan, &url, &h, &s, &st))
                .expect("spawn a torture worker")
        })
        .collect();
    Run {
        history,
        store,
        stop,
        workers,
        config: CheckConfig {
            refusals_may_hold: plan.refusals_may_hold,
            stranded_slack: plan.stranded_slack,
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
        Error::NotAcquired(_) => Outcome::NotAcquired,
        Error::Lost(_) => Outcome::Lost,
        Error::Unavailable(_) => Outcome::Unknown,
        _ => Outcome::Failed,
    }
}

fn worker(w: usize, plan: &Plan, url: &str, h: &History, store: &FencedStore, stop: &AtomicBool) {
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
        let key = format!("torture:{}", rng.usize(..plan.keys.max(1)));
        let ttl = Duration::from_millis(rng.u64(20..=200));
        let wait = Duration::from_millis(rng.u64(0..=300));
        let id = h.invoke(Op::acquire(w, &key, ttl, wait, plan.acquire_bound(wait)));
        let mut lease: Lease = match client.acquire(&key, ttl, wait) {
            Ok(l) => {
                h.ok(id, Some(l.fence()));
                l
            }
            Err(e) => {
                h.fail(id, outcome_of(&e));
                if !matches!(e, Error::NotAcquired(_)) {
                    // A backend in trouble: do not spin on it.
                    std::thread::sleep(Duration::from_millis(rng.u64(1..=20)));
                }
                continue;
            }
        };
        let fence = lease.fence();
        if rng.f64() < plan.pause_chance {
            // A holder paused (GC, SIGSTOP) past its TTL, then writing as if nothing happened: the
            // store must refuse it if a newer holder has written.
            std::thread::sleep(ttl + Duration::from_millis(rng.u64(1..=50)));
        } else {
            std::thread::sleep(Duration::from_millis(
                rng.u64(0..=ttl.as_millis() as u64 / 4),
            ));
            if rng.u8(..5) == 0 {
                let new_ttl = Duration::from_millis(rng.u64(20..=200));
                let x = h.invoke(Op::extend(w, &key, id, new_ttl, plan.extend_bound()));
                match lease.extend(new_ttl) {
                    Ok(()) => h.ok(x, None),
                    Err(e) => {
                        h.fail(x, outcome_of(&e));
                        if !lease.is_held() {
                            // The client says the lease is over (an extend that found it lost, or
                            // one whose session had to be dropped): from here on the holder does
                            // not rely on it, as a careful worker would not. Recorded as the start
                            // of giving it back (which ends the lease's validity window), but not
                            // as settled: the server may hold the key until the release below (a
                            // PostgreSQL advisory session is closed then, not inside the extend).
                            let gone = h.invoke(Op::release(w, &key, id, plan.call_bound()));
                            h.fail(gone, Outcome::Failed);
                        }
                    }
                }
            }
        }
        store.write_recorded(h, w, &key, Some(id), fence);
        let r = h.invoke(Op::release(w, &key, id, plan.call_bound()));
        match lease.release() {
            Ok(()) => h.ok(r, None),
            Err(e) => h.fail(r, outcome_of(&e)),
        }
    }
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
