//! The torture soak: workers take exclusive, shared and permit leases, extend some, write to a
//! fenced store, pause past their TTL or hand leases over by token, and release, recording what each
//! holder believed of its lease, while a seeded fault generator applies a schedule of faults; then
//! the checker's verdict, ending with the one line
//! `violations: N (overlaps A, believed-overlaps B, fence-order C, stale-writes D, past-bound E)`.
//!
//! ```sh
//! cargo run --release --example torture -- --url URL --seconds 600 --faults all --seed N
//! cargo run --release --example torture -- --backend redlock --seconds 600 --faults all
//! ```
//!
//! `--url URL`: a server you run. `--faults all` puts a fault proxy in front of every host:port of
//! the URL (redis://host:port, redlock://h1,h2,…, postgres://…host:port…, mysql://…host:port…) and
//! draws proxy faults (black hole, replies delayed past the I/O timeout, slow drip, replies dropped,
//! resets — not for PostgreSQL advisory or MySQL named, whose locks are their connections), beside
//! the workers' own faults (holders paused past their TTL, handoffs where the backend restores).
//! `--faults none`: the workers' faults only. Server-level faults (SIGSTOP, kill and restart,
//! failovers, killed sessions) need servers the program owns: `--backend NAME` starts them through
//! the test kit, with the same catalogue as tests/torture.rs (names: local, redis, redis-replicas,
//! redlock, redis-cluster, redis-sentinel, postgres-advisory, postgres-table, mysql-named,
//! mysql-table).
//!
//! The seed is printed (`seed=…`); `--seed` or `TORTURE_SEED` replays the schedule. `--workers`
//! and `--keys` size the run. Exits 1 on any violation.

#[path = "../tests/support/scenarios.rs"]
mod scenarios;
#[path = "../tests/support/torture.rs"]
mod torture;

use leasehold_testkit::Catalogue;
use std::time::Duration;

fn usage() -> ! {
    eprintln!(
        "usage: torture (--url URL | --backend NAME) [--seconds N] [--faults all|none] [--seed N] \
         [--workers N] [--keys N]\n  backends: {}",
        scenarios::NAMES.join(", ")
    );
    std::process::exit(2);
}

fn main() {
    let mut url = std::env::var("LEASEHOLD_URL").ok();
    let mut backend = None;
    let (mut seconds, mut workers, mut keys) = (60u64, None, None);
    let mut seed = None;
    let mut faults = true;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| usage());
        match a.as_str() {
            "--url" => url = Some(value()),
            "--backend" => backend = Some(value()),
            "--seconds" => seconds = value().parse().unwrap_or_else(|_| usage()),
            "--workers" => workers = Some(value().parse().unwrap_or_else(|_| usage())),
            "--keys" => keys = Some(value().parse().unwrap_or_else(|_| usage())),
            "--seed" => seed = Some(value().parse::<u64>().unwrap_or_else(|_| usage())),
            "--faults" => {
                faults = match value().as_str() {
                    "all" => true,
                    "none" => false,
                    _ => usage(),
                }
            }
            _ => usage(),
        }
    }
    if let Some(s) = seed {
        std::env::set_var("TORTURE_SEED", s.to_string());
    }
    let seed = leasehold_testkit::history::seed("torture");
    let duration = Duration::from_secs(seconds);
    let (name, mut setup) = match (backend, url) {
        (Some(b), _) => {
            let setup = scenarios::by_name(&b, seed, duration).unwrap_or_else(|| usage());
            (b, setup)
        }
        (None, Some(u)) => ("torture".to_owned(), for_url(&u, seed, duration)),
        (None, None) => usage(),
    };
    if !faults {
        setup.catalogue = Catalogue::new();
        setup.plan.pause_chance = 0.0;
        setup.plan.handoff_chance = 0.0;
    }
    if let Some(w) = workers {
        setup.plan.workers = w;
    }
    if let Some(k) = keys {
        setup.plan.keys = k;
    }
    eprintln!(
        "{name}: {} workers, {} keys, {seconds} s, faults: {:?}",
        setup.plan.workers,
        setup.plan.keys,
        setup.catalogue.names()
    );
    let report = scenarios::run(&name, setup, seed);
    println!("{}", torture::summary(&name, seed, &report));
    println!("{}", report.summary_line());
    if !report.is_clean() {
        std::process::exit(1);
    }
}

/// A server the user runs: proxy faults in front of it, and the lease kinds its URL offers.
fn for_url(url: &str, seed: u64, duration: Duration) -> scenarios::Setup {
    let local = url.starts_with("file:");
    let (url, proxies) = if local {
        (url.to_owned(), Vec::new())
    } else {
        torture::proxied(url)
    };
    let mut plan = torture::Plan::new(&url, duration, seed);
    let session = session_owned(&url);
    if session.is_some() {
        plan.handoff_chance = 0.0;
    }
    if session == Some("mysql") {
        // Named locks: no shared leases, so no promote or demote either.
        plan.shared = false;
        plan.swaps = false;
    }
    let mut catalogue = Catalogue::new();
    catalogue.proxy_faults(&proxies, plan.io_timeout, session.is_none());
    scenarios::Setup {
        plan,
        catalogue,
        keep: vec![Box::new(proxies)],
        session_ends: scenarios::SessionEnds::default(),
        restarts: scenarios::Restarts::default(),
    }
}

/// Whether a lease lives in its connection (PostgreSQL advisory, the default of postgres://; MySQL
/// named, the default of mysql:// and mariadb://), and which: a reset connection frees the lock at
/// once and its holder learns so only at its next call, as the README documents, so a reset is not
/// a fault such a lease can survive; nor can it be restored elsewhere.
fn session_owned(url: &str) -> Option<&'static str> {
    let (scheme, rest) = url.split_once("://")?;
    let query = rest.split_once('?').map_or("", |(_, q)| q);
    let table = query.split('&').any(|p| p == "lock=table");
    match scheme {
        "mysql" | "mariadb" if !table => Some("mysql"),
        "postgres" | "postgresql" if !table => Some("postgres"),
        _ => None,
    }
}
