//! The command line: subcommands, options and their help text.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::ffi::OsString;
use std::time::Duration;

const ABOUT: &str =
    "Distributed locks as leases: run a job under a lock, inspect locks, load-test a backend";

const URL_HELP: &str =
    "Backend URL: file:///dir, redis://[[user]:password@]host[:port][/db], rediss://…, \
redlock://h1,h2,h3, postgres://…, mysql://… (default: local files under the temp dir)";

#[derive(Debug, Parser)]
#[command(name = "leasehold", version, about = ABOUT, after_help = crate::exit::TABLE)]
pub struct Cli {
    // The env value is hidden from --help because it may hold a password.
    #[arg(long, global = true, env = "LEASEHOLD_URL", hide_env_values = true, help = URL_HELP)]
    pub url: Option<String>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command while holding the lease on KEY (like flock(1), but across hosts).
    #[command(
        after_help = RUN_AFTER_HELP,
        override_usage = "leasehold run [OPTIONS] <KEY> -- <COMMAND> [ARG]..."
    )]
    Run(RunArgs),
    /// Run a command at most once per KEY (an idempotency key): a later call prints the recorded
    /// output and exits with the recorded status instead of running it again.
    #[command(
        after_help = ONCE_AFTER_HELP,
        override_usage = "leasehold once [OPTIONS] <KEY> -- <COMMAND> [ARG]..."
    )]
    Once(OnceArgs),
    /// Show whether KEY is held, the time left and the last fence (where the backend can tell).
    #[command(after_help = crate::exit::TABLE)]
    Status(StatusArgs),
    /// Load-test a backend: lock cycles per second, latency percentiles, handoff latency, errors.
    #[command(after_help = crate::exit::TABLE)]
    Bench(BenchArgs),
    /// Judge a deployment: connect as a client would and say, promise by promise, whether it holds
    /// there and which setting or fact decides it.
    #[command(after_help = DOCTOR_AFTER_HELP)]
    Doctor(DoctorArgs),
    /// Print the counters that PHP workers wrote under DIR (PoolMetrics::flush), summed per pool,
    /// as Prometheus text. Needs no backend.
    #[command(after_help = METRICS_AFTER_HELP)]
    Metrics(MetricsArgs),
}

const METRICS_AFTER_HELP: &str = "\
Each pool is a directory DIR/<pool> holding one file per PHP worker (and retired.json for the workers
that exited); every series gets a pool label. The text is the same as PoolMetrics::render(DIR) prints.

Example (a node_exporter textfile collector, every minute):
  * * * * * leasehold metrics --dir /run/leasehold-metrics > /var/lib/node_exporter/leasehold.prom.tmp && mv /var/lib/node_exporter/leasehold.prom.tmp /var/lib/node_exporter/leasehold.prom

Exit status:
  0      success (no pool under DIR prints nothing)
  64     usage: bad option
  66     DIR does not exist or is not a directory";

const DOCTOR_AFTER_HELP: &str = "\
One line per promise: exclusion, fence_order, bounded_calls, survives_restart, survives_failover,
session_end_seen; each holds, holds_if (a condition the deployment cannot show) or does_not_hold, with
the setting or fact that decides it (maxmemory-policy, appendfsync, fsync, synchronous_commit,
innodb_flush_log_at_trx_commit, replicas, the file system, the server's clock). Then the facts read.
What connect would refuse is judged, not refused. Passwords are never printed.

Exit status:
  0      every promise holds
  1      some promise holds only if a condition is met (and none does not hold)
  2      some promise does not hold
  64     usage: bad option or URL
  69     the backend is unavailable (unreachable, refused, timed out)";

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// The backend URL to judge (default: --url, else LEASEHOLD_URL, else the local default).
    // Not `url`: that is the global --url's id.
    #[arg(id = "doctor_url", value_name = "URL")]
    pub url: Option<String>,

    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct MetricsArgs {
    /// The directory given to PoolMetrics::flush().
    #[arg(long, value_name = "DIR")]
    pub dir: std::path::PathBuf,

    /// One series per worker (label worker: its pid, or \"retired\") instead of one per pool.
    #[arg(long)]
    pub per_worker: bool,
}

const RUN_AFTER_HELP: &str = "\
The command gets LEASEHOLD_KEY, LEASEHOLD_FENCE and LEASEHOLD_TOKEN in its environment; hand the fence to
the store you protect so it can reject a stale holder. The lease is renewed every third of --ttl while the
command runs and released when it ends. SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to
leasehold are passed on to the command. If the lease is lost (the backend says it is no longer ours, or it
could not be renewed in time), the command is told as --on-lost says and leasehold exits with 79.

A SIGINT or SIGTERM that arrives while leasehold waits for the key (--wait) ends the wait within 100 ms and
then acts as it normally would (the command was never started).

The command runs in a process group of its own, so signals reach the processes it starts too; with
--foreground it stays in leasehold's group (it can then read from the terminal, but only the command
itself gets signals).

Example (cron):
  */5 * * * * leasehold run --url redis://lock-host nightly-report -- php report.php

Exit status:
  N      the command's own exit status; 128+N if it was killed by signal N
  64     usage: bad option, duration, URL, key or TTL
  69     the backend is unavailable (unreachable, refused, timed out)
  70     internal error (a bug in Leasehold)
  71     the command could not be started (other than 126/127)
  75     the key is held by someone else (after --wait, if given); try again later
  78     the backend's configuration was refused (e.g. a Redis that evicts keys)
  79     the lease was lost while the command ran (it may have overlapped another holder)
  126    the command is not executable
  127    the command was not found
  130    SIGINT or SIGTERM ended the wait for the key (the command never started)";

#[derive(Debug, Args)]
pub struct RunArgs {
    /// How long the lease lasts without renewal (renewed every third of it while the command runs; at
    /// least 100ms).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub ttl: Duration,

    /// How long to wait for the key when someone else holds it (0s: give up at once).
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub wait: Duration,

    /// What to do to the command if the lease is lost: term = SIGTERM, then SIGKILL after --grace;
    /// kill = SIGKILL at once; ignore = let it finish (leasehold still exits with 79).
    #[arg(long, value_enum, default_value_t = OnLost::Term)]
    pub on_lost: OnLost,

    /// With --on-lost term: how long the command has between SIGTERM and SIGKILL.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub grace: Duration,

    /// Keep the command in leasehold's process group (for interactive commands that read the terminal).
    #[arg(long)]
    pub foreground: bool,

    /// Take a shared (read) lease: any number of shared holders may run at once, never beside an
    /// exclusive one; a waiting exclusive run goes before new shared ones.
    #[arg(long, conflicts_with = "permits")]
    pub shared: bool,

    /// Take one of N permits of the semaphore KEY (at most N commands run at once; 1 to 65535).
    /// Semaphore keys are separate from lock keys.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=65535))]
    pub permits: Option<u32>,

    /// Print nothing when the key is held elsewhere (exit status 75 still tells); keeps cron from
    /// mailing every skipped run.
    #[arg(short, long)]
    pub quiet: bool,

    /// Print the lease's fence and the release to stderr.
    #[arg(short, long)]
    pub verbose: bool,

    /// The lock's name (any bytes, 1 to 1024).
    pub key: OsString,

    /// The command and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    pub command: Vec<OsString>,
}

const ONCE_AFTER_HELP: &str = "\
The first call takes the lease of KEY, records that the command started (with its fence), runs it with
the lease kept alive (LEASEHOLD_KEY, LEASEHOLD_FENCE and LEASEHOLD_TOKEN in its environment), passes its
standard output through and records it (up to 64 KiB) with its exit status. Later calls within --keep-for
print the recorded output and exit with the recorded status, without running anything; a call while the
command runs waits for it (--wait) and then does the same.

If an earlier call started the command and never recorded its end (leasehold was killed, the host died),
the command is NOT run again: leasehold exits with 76 and says when that attempt started. Check whether
it did its work, then run again with --recover done (record it as done: exit 0, no output) or
--recover rerun (run the command again).

Exit status:
  N      the command's exit status (recorded: the same on every later call); 128+N if killed by signal N
  64     usage: bad option, duration, URL or key
  69     the backend is unavailable
  75     the key stayed held by a running attempt for the whole --wait
  76     an earlier attempt started and never finished (see above)
  78     the backend's configuration was refused (e.g. a Redis that evicts keys)
  79     the lease was lost while the command ran (its end could not be recorded)";

#[derive(Debug, Args)]
pub struct OnceArgs {
    /// How long the lease lasts without renewal (renewed while the command runs).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub ttl: Duration,

    /// How long to wait while another call runs the command.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub wait: Duration,

    /// How long the record is kept after it was written (at most 7 days).
    #[arg(long, default_value = "24h", value_parser = parse_duration)]
    pub keep_for: Duration,

    /// What to do about an earlier attempt that started and never finished, once you checked
    /// whether it did its work: done = record it as done (exit 0, no output); rerun = run again.
    #[arg(long, value_enum)]
    pub recover: Option<Recover>,

    /// The idempotency key (any bytes, 1 to 1019).
    pub key: OsString,

    /// The command and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    pub command: Vec<OsString>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Recover {
    Done,
    Rerun,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnLost {
    Term,
    Kill,
    Ignore,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,

    /// KEY is a semaphore (as taken by `run --permits`): show how many permits are held.
    #[arg(long)]
    pub semaphore: bool,

    /// The lock's name.
    pub key: OsString,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Threads taking and releasing leases.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub workers: u32,

    /// Distinct keys the workers spread over (fewer keys than workers means contention).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub keys: u32,

    /// How long to run.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,

    /// TTL of each lease.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub ttl: Duration,

    /// How long one acquire may wait for a busy key.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub wait: Duration,

    /// How long each lease is held before it is released.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub hold: Duration,

    /// Keys are PREFIX0, PREFIX1, …
    #[arg(long, default_value = "leasehold-bench:")]
    pub key_prefix: String,

    /// Print one JSON object instead of text (and no progress bar).
    #[arg(long)]
    pub json: bool,
}

/// Human durations: `30s`, `1m30s`, `250ms`, `0`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    humantime::parse_duration(text).map_err(|e| format!("{e} (examples: 30s, 1m30s, 250ms)"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn run_takes_the_command_after_the_key() {
        let cli = Cli::try_parse_from(["leasehold", "run", "--ttl", "1m", "k", "--", "ls", "-l"])
            .expect("parses");
        let Command::Run(run) = cli.command else {
            panic!("not run")
        };
        assert_eq!(run.key, "k");
        assert_eq!(run.command, ["ls", "-l"]);
        assert_eq!(run.ttl, Duration::from_secs(60));
        let cli =
            Cli::try_parse_from(["leasehold", "run", "k", "php", "r.php", "--x"]).expect("parses");
        let Command::Run(run) = cli.command else {
            panic!("not run")
        };
        assert_eq!(run.command, ["php", "r.php", "--x"]);
    }
}
