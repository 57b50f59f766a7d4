//! `leasehold run`: take the lease, run the command while keeping the lease alive, pass signals on,
//! react to a lost lease, release, and exit with the command's status.

use crate::child::{self, Child};
use crate::cli::{OnLost, RunArgs};
use crate::exit::{self, Failure};
use leasehold::{Client, Error, Lease};
use signal_hook::consts::signal::{SIGHUP, SIGINT, SIGKILL, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2};
use signal_hook::iterator::exfiltrator::WithOrigin;
use signal_hook::iterator::SignalsInfo;
use signal_hook::low_level::siginfo::Cause;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::time::{Duration, Instant};

/// Signals passed on to the command.
const FORWARDED: [i32; 6] = [SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2];

/// How often the command, the signals and the lease are looked at. `remaining()` and `try_wait` are
/// cheap (an atomic load, a non-blocking waitpid), so a short tick costs nothing and keeps the lease
/// from being held long after the command ended.
const TICK: Duration = Duration::from_millis(10);

/// Below this a lease cannot outlive the scheduling delays of a busy machine between renewals (every
/// third of the TTL), so the command would be told "lost" for no reason.
const MIN_TTL: Duration = Duration::from_millis(100);

pub fn run(client: &Client, args: &RunArgs) -> Result<u8, Failure> {
    let key = args.key.as_bytes();
    let shown = String::from_utf8_lossy(key).into_owned();
    if args.ttl < MIN_TTL {
        return Err(Failure::new(
            exit::USAGE,
            format!(
                "--ttl must be at least {} for run (the lease is renewed every third of it), got {}",
                humantime::format_duration(MIN_TTL),
                humantime::format_duration(args.ttl)
            ),
        ));
    }
    let taken = match args.permits {
        Some(permits) => client.acquire_permit(key, permits, args.ttl, args.wait),
        None if args.shared => client.acquire_shared(key, args.ttl, args.wait),
        None => client.acquire(key, args.ttl, args.wait),
    };
    let lease = match taken {
        Ok(lease) => lease,
        Err(Error::NotAcquired(_)) if args.quiet => return Ok(exit::NOT_ACQUIRED),
        Err(e) => return Err(e.into()),
    };
    if args.verbose {
        say!(
            "leasehold: acquired \"{shown}\" ({}, fence {}, ttl {})",
            lease.kind(),
            lease.fence(),
            humantime::format_duration(args.ttl)
        );
    }
    lease.keep_alive(true)?;
    // Registered before the command starts, so a signal arriving in between is passed on, not lost.
    let mut signals = SignalsInfo::<WithOrigin>::new(FORWARDED).map_err(|e| {
        Failure::new(
            exit::OS_ERROR,
            format!("cannot install signal handlers: {e}"),
        )
    })?;

    let fence = lease.fence().to_string();
    let token = lease.token();
    let env: [(&str, &OsStr); 3] = [
        ("LEASEHOLD_KEY", &args.key),
        ("LEASEHOLD_FENCE", OsStr::new(&fence)),
        ("LEASEHOLD_TOKEN", OsStr::new(token.as_str())),
    ];
    let mut child = Child::spawn(&args.command, &env, !args.foreground)?;

    let mut lost = false;
    let mut kill_at: Option<Instant> = None;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(failure) => {
                // The lease is released on the way out; the command must not go on without it.
                child.signal(SIGKILL);
                return Err(failure);
            }
        }
        for origin in signals.pending() {
            // In the foreground the terminal already sent its signals (SIGINT on ^C, SIGHUP on hangup)
            // to the whole group, command included: passing them on would deliver them twice.
            if args.foreground && origin.cause == Cause::Kernel {
                continue;
            }
            child.signal(origin.signal);
        }
        if !lost && lease.remaining().is_zero() {
            let reason = loss_reason(&lease, &shown);
            let action = match args.on_lost {
                OnLost::Term => {
                    child.signal(SIGTERM);
                    kill_at = Instant::now().checked_add(args.grace);
                    format!(
                        "sent SIGTERM to the command, SIGKILL in {}",
                        humantime::format_duration(args.grace)
                    )
                }
                OnLost::Kill => {
                    child.signal(SIGKILL);
                    "sent SIGKILL to the command".to_owned()
                }
                OnLost::Ignore => "letting the command finish (--on-lost ignore)".to_owned(),
            };
            say!("leasehold: lease lost while the command ran ({reason}); {action}");
            lost = true;
        }
        if kill_at.is_some_and(|at| Instant::now() >= at) {
            child.signal(SIGKILL);
            kill_at = None;
        }
        std::thread::sleep(TICK);
    };
    drop(signals);

    let code = child::exit_code(status);
    if lost {
        // Compare-and-delete is safe even now: if the key is someone else's, it stays theirs.
        let _ = lease.release();
        return Err(Failure::new(
            exit::LOST,
            format!(
                "the command ended ({}) after its lease on \"{shown}\" was lost",
                child::describe(status)
            ),
        ));
    }
    match lease.release() {
        Ok(()) => {
            if args.verbose {
                say!(
                    "leasehold: released \"{shown}\"; the command ended ({})",
                    child::describe(status)
                );
            }
            Ok(code)
        }
        Err(Error::Lost(msg)) => Err(Failure::new(
            exit::LOST,
            format!(
                "the command ended ({}) but its lease on \"{shown}\" had been lost meanwhile ({})",
                child::describe(status),
                exit::one_line(&msg)
            ),
        )),
        Err(e) => {
            // The job did its work; the lease runs out at its TTL. Say so, keep the job's status.
            say!(
                "leasehold: could not release \"{shown}\" ({}); it expires within {}",
                exit::one_line(&e.to_string()),
                humantime::format_duration(args.ttl)
            );
            Ok(code)
        }
    }
}

fn loss_reason(lease: &Lease, shown: &str) -> String {
    match lease.keep_alive_error() {
        Some(e @ Error::Lost(_)) => exit::one_line(&e.to_string()),
        Some(e) => format!(
            "the lease on \"{shown}\" ran out while renewals failed: {}",
            exit::one_line(&e.to_string())
        ),
        None => format!("the lease on \"{shown}\" ran out before it could be renewed"),
    }
}
