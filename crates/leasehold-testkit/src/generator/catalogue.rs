//! The faults that apply to a target, each with how often and how long it strikes, and the action
//! that does it. The scenario builds the catalogue: it owns the servers, so server-level faults are
//! closures over its handles; proxy faults have a constructor here.

use crate::checker::allowance::SERVER_STALL;
use crate::proxy::{Fault, FaultProxy};
use std::sync::Arc;
use std::time::Duration;

/// Does the fault for the given duration (start, wait, end), then says what it did (may be empty).
pub type Action = Arc<dyn Fn(Duration, &mut fastrand::Rng) -> String + Send + Sync>;

#[derive(Clone)]
pub struct FaultSpec {
    pub name: String,
    /// Faults on one resource never overlap.
    pub resource: String,
    /// About how often it strikes (the gap between two is drawn from half to one and a half times).
    pub every: Duration,
    pub min: Duration,
    pub max: Duration,
    /// How long the resource stays reserved after the fault (a restarted server starting up).
    pub settle: Duration,
    pub action: Action,
}

impl std::fmt::Debug for FaultSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} on {} every {:?} for {:?}..{:?}",
            self.name, self.resource, self.every, self.min, self.max
        )
    }
}

#[derive(Debug, Clone, Default)]
pub struct Catalogue {
    pub specs: Vec<FaultSpec>,
}

impl Catalogue {
    pub fn new() -> Catalogue {
        Catalogue::default()
    }

    pub fn is_empty(&self) -> bool {
        self.specs.is_empty()
    }

    /// The names of the faults, for the run's log.
    pub fn names(&self) -> Vec<&str> {
        self.specs.iter().map(|s| s.name.as_str()).collect()
    }

    #[allow(clippy::too_many_arguments)]
    pub fn add(
        &mut self,
        name: &str,
        resource: &str,
        every: Duration,
        min: Duration,
        max: Duration,
        settle: Duration,
        action: impl Fn(Duration, &mut fastrand::Rng) -> String + Send + Sync + 'static,
    ) -> &mut Catalogue {
        self.specs.push(FaultSpec {
            name: name.to_owned(),
            resource: resource.to_owned(),
            every,
            min,
            max: max.max(min),
            settle,
            action: Arc::new(action),
        });
        self
    }

    /// The proxy faults, on a minority of `proxies` (so a quorum keeps its majority) or, one time in
    /// four, on all: a black hole, replies delayed past `io_timeout`, traffic delayed but in time, a
    /// slow drip, replies dropped after the request ran, and (when `resets`) every connection reset. A backend whose lease lives
    /// in its connection (PostgreSQL advisory, MySQL named) loses every lease to a reset by design,
    /// as its README says, so it gets none.
    pub fn proxy_faults(
        &mut self,
        proxies: &[Arc<FaultProxy>],
        io_timeout: Duration,
        resets: bool,
    ) -> &mut Catalogue {
        if proxies.is_empty() {
            return self;
        }
        let every = Duration::from_millis(2500);
        let (short, long) = (Duration::from_millis(50), Duration::from_millis(600));
        let late = move |rng: &mut fastrand::Rng| {
            Fault::Latency(io_timeout + Duration::from_millis(rng.u64(20..=400)))
        };
        let faults: [(&str, DrawFault); 3] = [
            ("proxy black hole", |_| Fault::BlackHole),
            ("proxy slow drip", |rng| {
                Fault::SlowDrip(Duration::from_millis(rng.u64(1..=5)))
            }),
            ("proxy drop replies", |_| Fault::DropReplies),
        ];
        for (name, fault) in faults {
            let ps = proxies.to_vec();
            self.add(
                name,
                "proxies",
                every,
                short,
                long,
                Duration::ZERO,
                move |d, rng| {
                    let f = fault(rng);
                    hold(&ps, f, d, rng)
                },
            );
        }
        let ps = proxies.to_vec();
        self.add(
            "proxy latency past the io timeout",
            "proxies",
            every,
            short,
            long,
            Duration::ZERO,
            move |d, rng| {
                let f = late(rng);
                hold(&ps, f, d, rng)
            },
        );
        // Slow but in time: each direction held up to just under half the I/O timeout, so calls
        // succeed after a long round trip. A lease dated from its reply rather than its send
        // would show here as a holder believing past the server's expiry.
        let ps = proxies.to_vec();
        let half = (io_timeout / 2).saturating_sub(Duration::from_millis(20));
        self.add(
            "proxy latency under the io timeout",
            "proxies",
            every,
            short,
            long,
            Duration::ZERO,
            move |d, rng| {
                let ms = half.as_millis().max(10) as u64;
                let f = Fault::Latency(Duration::from_millis(rng.u64(5..=ms)));
                hold(&ps, f, d, rng)
            },
        );
        if resets {
            let ps = proxies.to_vec();
            self.add(
                "proxy reset all",
                "proxy resets",
                every,
                Duration::ZERO,
                Duration::ZERO,
                Duration::ZERO,
                move |_, rng| {
                    let targets = pick(ps.len(), rng);
                    for &i in &targets {
                        ps[i].reset_all();
                    }
                    format!("{targets:?}")
                },
            );
        }
        self
    }

    /// A server stopped (SIGSTOP) then continued, for at most [`SERVER_STALL`] (the checker's
    /// allowance for requests that run when it wakes).
    pub fn pause(
        &mut self,
        name: &str,
        resource: &str,
        every: Duration,
        max: Duration,
        pause: impl Fn() + Send + Sync + 'static,
        resume: impl Fn() + Send + Sync + 'static,
    ) -> &mut Catalogue {
        let max = max.min(SERVER_STALL);
        self.add(
            name,
            resource,
            every,
            (max / 4).max(Duration::from_millis(100)),
            max,
            Duration::from_millis(200),
            move |d, _| {
                pause();
                std::thread::sleep(d);
                resume();
                String::new()
            },
        )
    }

    /// A server killed, kept down for `down`, then restarted by `restart` (which says what it did;
    /// with or without its data is the scenario's choice, by what the backend claims to survive).
    pub fn kill_restart(
        &mut self,
        name: &str,
        resource: &str,
        every: Duration,
        down: Duration,
        kill: impl Fn() + Send + Sync + 'static,
        restart: impl Fn() -> String + Send + Sync + 'static,
    ) -> &mut Catalogue {
        self.add(
            name,
            resource,
            every,
            down,
            down,
            Duration::from_millis(500),
            move |d, _| {
                kill();
                std::thread::sleep(d);
                restart()
            },
        )
    }
}

/// Draws the details of a proxy fault (how slow a drip).
type DrawFault = fn(&mut fastrand::Rng) -> Fault;

/// A minority of `n` (at least one), or all of them one time in four.
fn pick(n: usize, rng: &mut fastrand::Rng) -> Vec<usize> {
    let mut all: Vec<usize> = (0..n).collect();
    if n == 1 || rng.u8(..4) == 0 {
        return all;
    }
    rng.shuffle(&mut all);
    all.truncate(((n - 1) / 2).max(1));
    all.sort();
    all
}

/// Sets `fault` on some of `proxies` for `d`, then heals them.
fn hold(proxies: &[Arc<FaultProxy>], fault: Fault, d: Duration, rng: &mut fastrand::Rng) -> String {
    let targets = pick(proxies.len(), rng);
    for &i in &targets {
        proxies[i].set(fault);
    }
    std::thread::sleep(d);
    for &i in &targets {
        proxies[i].heal();
    }
    format!("{fault:?} on {targets:?}")
}
