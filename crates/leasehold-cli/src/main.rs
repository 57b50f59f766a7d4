//! `leasehold`: run a job under a distributed lock, inspect locks, load-test a backend.
//!
//! ```text
//! leasehold run [--url URL] [--ttl 30s] [--wait 0s] [--on-lost term|kill|ignore] [--grace 10s] [-q] KEY -- COMMAND [ARG…]
//! leasehold status [--url URL] [--json] KEY
//! leasehold bench [--url URL] [--workers 4] [--keys 1] [--duration 10s] [--json]
//! leasehold metrics --dir DIR [--per-worker]
//! leasehold doctor [URL] [--json]
//! ```
//!
//! The backend URL comes from `--url`, else `LEASEHOLD_URL`, else the embedded local backend (files
//! under the system temp directory, for processes of one host). Durations are human: `30s`, `1m30s`,
//! `250ms`. Every error is one line on stderr, without secrets.
//!
//! `run` takes the lease (or gives up at once, or after `--wait`), starts the command with
//! `LEASEHOLD_KEY`, `LEASEHOLD_FENCE` and `LEASEHOLD_TOKEN` in its environment, renews the lease every
//! third of `--ttl` while the command runs, passes SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and
//! SIGUSR2 on to it, releases the lease when it ends and exits with its status. If the lease is lost
//! meanwhile, the command gets SIGTERM and, after `--grace`, SIGKILL (or as `--on-lost` says).
//!
//! # Exit status
//!
//! | code | meaning |
//! |---|---|
//! | N | `run`: the command's own exit status; 128+N if it was killed by signal N |
//! | 0 | `status`, `bench`, `metrics`: success; `doctor`: every promise holds |
//! | 1 | `doctor`: some promise holds only if a condition is met, none does not hold |
//! | 2 | `doctor`: some promise does not hold in this deployment |
//! | 64 | usage: bad option, duration, URL, key or TTL (`EX_USAGE`) |
//! | 66 | `metrics`: DIR does not exist or is not a directory (`EX_NOINPUT`) |
//! | 69 | the backend is unavailable: unreachable, refused, timed out (`EX_UNAVAILABLE`) |
//! | 70 | internal error, a bug in Leasehold (`EX_SOFTWARE`) |
//! | 71 | `run`: the command could not be started, other than 126/127 (`EX_OSERR`) |
//! | 75 | `run`: the key is held by someone else, after `--wait` if given; try again later (`EX_TEMPFAIL`) |
//! | 79 | `run`: the lease was lost while the command ran, so it may have overlapped another holder |
//! | 126 | `run`: the command is not executable |
//! | 127 | `run`: the command was not found |

/// Writes one line to stderr in one write(2). The command that `run` starts shares our stderr, and
/// `eprintln!` writes its pieces one by one, so the command's own output ("Terminated" from a shell
/// told to stop) could land inside our line. A write of up to PIPE_BUF bytes to a pipe is atomic.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let line = format!("{}\n", format_args!($($arg)*));
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }};
}

mod bench;
mod child;
mod cli;
mod doctor;
mod exit;
mod latency;
mod metrics;
mod once;
mod run;
mod status;

use clap::error::ErrorKind as ClapErrorKind;
use clap::Parser;
use cli::{Cli, Command};
use exit::Failure;
use std::process::ExitCode;
use std::sync::Mutex;

/// The message of the last panic, for the one-line report (the default hook prints a backtrace).
static LAST_PANIC: Mutex<Option<String>> = Mutex::new(None);

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    // A panic is a bug; it still ends in one line on stderr and a documented code, never a backtrace.
    std::panic::set_hook(Box::new(|info| {
        let payload = info.payload();
        let what = payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("unknown panic");
        if let Ok(mut last) = LAST_PANIC.lock() {
            *last = Some(exit::one_line(what));
        }
    }));
    let outcome = std::panic::catch_unwind(|| dispatch(&cli)).unwrap_or_else(|_| {
        Err(Failure::new(
            exit::INTERNAL,
            format!(
                "internal error: unexpected panic (a bug in leasehold): {}",
                last_panic()
            ),
        ))
    });
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            say!("leasehold: {}", exit::one_line(&failure.message));
            ExitCode::from(failure.code)
        }
    }
}

/// The message of the last panic caught, or "" if none.
fn last_panic() -> String {
    LAST_PANIC
        .lock()
        .ok()
        .and_then(|mut last| last.take())
        .unwrap_or_default()
}

fn dispatch(cli: &Cli) -> Result<u8, Failure> {
    // Reads files that PHP workers wrote: no backend to connect to.
    if let Command::Metrics(args) = &cli.command {
        return metrics::metrics(args);
    }
    let url = cli.url.clone().unwrap_or_else(leasehold::default_url);
    // Connects by itself: what connect would refuse is judged, not an error.
    if let Command::Doctor(args) = &cli.command {
        return doctor::doctor(args.url.as_deref().unwrap_or(&url), args);
    }
    let config = leasehold::Config::parse(&url)?;
    let described = config.describe();
    let client = leasehold::connect_config(&config)?;
    match &cli.command {
        Command::Run(args) => run::run(&client, args),
        Command::Once(args) => once::once(&client, args),
        Command::Status(args) => status::status(&client, &described, args),
        Command::Bench(args) => bench::bench(&client, &described, args),
        Command::Metrics(_) | Command::Doctor(_) => unreachable!("handled before connecting"),
    }
}

/// Help and version go to stdout with status 0; anything else is a one-line usage error (64).
fn usage_error(e: clap::Error) -> ExitCode {
    match e.kind() {
        ClapErrorKind::DisplayHelp
        | ClapErrorKind::DisplayVersion
        | ClapErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            if e.kind() == ClapErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                ExitCode::from(exit::USAGE)
            } else {
                ExitCode::SUCCESS
            }
        }
        _ => {
            // Clap's message, tips included, without the usage block it appends.
            let rendered = e.render().to_string();
            let message: Vec<&str> = rendered
                .lines()
                .map(str::trim)
                .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
                .filter(|l| !l.is_empty())
                .collect();
            let first = message.join(" ");
            let first = first.strip_prefix("error: ").unwrap_or(&first);
            say!("leasehold: {first} (see leasehold --help)");
            ExitCode::from(exit::USAGE)
        }
    }
}
