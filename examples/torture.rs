//! The torture soak (issue 12): workers acquire short leases, write to a fenced store, sometimes
//! pause past their TTL and release, against the backend a URL names; then the checker's counts.
//!
//! ```sh
//! cargo run --release --example torture -- --url URL --seconds 600 [--workers 8] [--keys 4] \
//!     [--seed N] [--faults] [--max-fault-ms 400]
//! ```
//!
//! `--faults` puts a fault proxy in front of every host:port of the URL (redis://host:port,
//! redlock://h1,h2,…, postgres://…host:port…, mysql://…host:port…) and switches faults on them on a
//! random schedule (latency, black hole, dropped replies, resets, slow drip, refused connections;
//! MySQL named mode gets no resets, as in tests/torture.rs). The seed is printed
//! (`seed=…`); `--seed` or `TORTURE_SEED` replays a schedule. Server hooks (SIGSTOP, SIGKILL, restarts)
//! need servers the program owns: tests/torture.rs has them. Exits 1 on any violation.

#[path = "../tests/support/torture.rs"]
mod torture;

use leasehold_testkit::FaultCycler;
use std::time::Duration;

fn usage() -> ! {
    eprintln!(
        "usage: torture --url URL [--seconds N] [--workers N] [--keys N] [--seed N] [--faults] [--max-fault-ms N]"
    );
    std::process::exit(2);
}

fn main() {
    let mut url = std::env::var("LEASEHOLD_URL").ok();
    let (mut seconds, mut workers, mut keys) = (60u64, 8usize, 4usize);
    let mut seed = None;
    let mut faults = false;
    let mut max_fault = 400u64;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| usage());
        match a.as_str() {
            "--url" => url = Some(value()),
            "--seconds" => seconds = value().parse().unwrap_or_else(|_| usage()),
            "--workers" => workers = value().parse().unwrap_or_else(|_| usage()),
            "--keys" => keys = value().parse().unwrap_or_else(|_| usage()),
            "--seed" => seed = Some(value().parse::<u64>().unwrap_or_else(|_| usage())),
            "--max-fault-ms" => max_fault = value().parse().unwrap_or_else(|_| usage()),
            "--faults" => faults = true,
            _ => usage(),
        }
    }
    let url = url.unwrap_or_else(|| usage());
    if let Some(s) = seed {
        std::env::set_var("TORTURE_SEED", s.to_string());
    }
    let seed = leasehold_testkit::history::seed("torture");
    let (url, proxies) = if faults && !url.starts_with("file:") {
        let (u, p) = torture::proxied(&url);
        (u, p)
    } else {
        (url, Vec::new())
    };
    let mut plan = torture::Plan::new(&url, Duration::from_secs(seconds), seed);
    plan.workers = workers;
    plan.keys = keys;
    eprintln!(
        "torture: {} workers, {} keys, {} s, {} proxies{}",
        workers,
        keys,
        seconds,
        proxies.len(),
        if proxies.is_empty() {
            ""
        } else {
            " with faults"
        }
    );
    let run = torture::start(&plan);
    let resets = !session_owned(&url);
    let cycler = (!proxies.is_empty()).then(|| {
        FaultCycler::start_with(
            proxies.clone(),
            seed,
            Duration::from_millis(max_fault),
            resets,
        )
    });
    std::thread::sleep(plan.duration);
    let fault_log = cycler.map(FaultCycler::finish).unwrap_or_default();
    let report = run.finish(Duration::from_secs(5));
    drop(proxies);
    println!("faults switched: {}", fault_log.len());
    println!("{}", torture::summary("torture", seed, &report));
    if !report.is_clean() {
        std::process::exit(1);
    }
}

/// Whether a lease lives in its connection (MySQL named mode, the default mode of mysql:// and
/// mariadb://): a reset connection frees the lock at once and its holder learns so only at its next
/// call, as the README documents, so a reset is not a fault such a lease can survive.
fn session_owned(url: &str) -> bool {
    let Some((scheme, rest)) = url.split_once("://") else {
        return false;
    };
    if scheme != "mysql" && scheme != "mariadb" {
        return false;
    }
    let query = rest.split_once('?').map_or("", |(_, q)| q);
    !query.split('&').any(|p| p == "lock=table")
}
