//! Exit codes: part of the command's interface, so scripts and cron wrappers can tell "someone else is
//! running it" from "the backend is down" from "the job itself failed". They follow `sysexits.h` where
//! it has a fitting code, and the shell's conventions (126, 127, 128+N) for the command.

use leasehold::{Error, ErrorKind};

/// Bad usage: an unknown option, a bad duration, URL, key or TTL (`EX_USAGE`).
pub const USAGE: u8 = 64;
/// `metrics`: the directory does not exist or is not a directory (`EX_NOINPUT`).
pub const NO_INPUT: u8 = 66;
/// The backend could not be reached or answered with an error (`EX_UNAVAILABLE`).
pub const UNAVAILABLE: u8 = 69;
/// A bug in Leasehold (`EX_SOFTWARE`).
pub const INTERNAL: u8 = 70;
/// The command could not be started for a reason other than 126/127 (`EX_OSERR`).
pub const OS_ERROR: u8 = 71;
/// The key is held by someone else (after `--wait`, if given): try again later (`EX_TEMPFAIL`).
pub const NOT_ACQUIRED: u8 = 75;
/// `once`: an earlier attempt started and never finished (`EX_PROTOCOL`: the record says it may
/// have done its work; check before recovering).
pub const INCOMPLETE: u8 = 76;
/// The backend's server is configured so that a lease cannot hold (an evicting Redis, say): the
/// deployment was refused at connect (`EX_CONFIG`).
pub const CONFIG: u8 = 78;
/// The lease was lost while the command ran, so it may have overlapped with another holder.
pub const LOST: u8 = 79;
/// The wait was interrupted (by SIGINT or SIGTERM, which then ends leasehold itself unless the
/// signal is ignored or handled), as shells report an interrupted command.
pub const INTERRUPTED: u8 = 130;
/// The command was found but cannot be executed (as shells do).
pub const CANNOT_EXECUTE: u8 = 126;
/// The command was not found (as shells do).
pub const NOT_FOUND: u8 = 127;

/// The table printed after `--help` and in the crate docs.
pub const TABLE: &str = "\
Exit status:
  N      run: the command's own exit status; 128+N if it was killed by signal N
  0      status, bench: success; doctor: every promise holds
  1      doctor: some promise holds only if a condition is met
  2      doctor: some promise does not hold
  64     usage: bad option, duration, URL, key or TTL
  66     metrics: DIR does not exist or is not a directory
  69     the backend is unavailable (unreachable, refused, timed out)
  70     internal error (a bug in Leasehold)
  71     run: the command could not be started (other than 126/127)
  75     run: the key is held by someone else (after --wait, if given); try again later
  76     once: an earlier attempt started and never finished; check it, then --recover
  78     the backend's configuration was refused (e.g. a Redis that evicts keys; see the message)
  79     run: the lease was lost while the command ran (it may have overlapped another holder)
  126    run: the command is not executable
  127    run: the command was not found
  130    run: the wait for the key was interrupted (SIGINT or SIGTERM)";

/// The exit code for a library error.
pub fn for_error(error: &Error) -> u8 {
    match error.kind() {
        ErrorKind::NotAcquired => NOT_ACQUIRED,
        ErrorKind::Lost => LOST,
        ErrorKind::Unavailable => UNAVAILABLE,
        // Not a bad argument but a server that cannot keep a lease: the operator's to fix.
        ErrorKind::InvalidArgument if error.is_refused_deployment() => CONFIG,
        ErrorKind::InvalidArgument => USAGE,
        ErrorKind::Interrupted => INTERRUPTED,
        ErrorKind::IncompleteAttempt => INCOMPLETE,
        _ => INTERNAL,
    }
}

/// An error that ends the command: the one-line reason for stderr and the exit code.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    pub fn new(code: u8, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
        }
    }
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        // Library messages are already free of secrets; newlines would break the one-line promise.
        Failure::new(for_error(&error), one_line(&error.to_string()))
    }
}

/// Joins a multi-line text into one line.
pub fn one_line(text: &str) -> String {
    text.split(['\n', '\r'])
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_map_to_distinct_codes() {
        let codes = [
            for_error(&Error::NotAcquired("x".into())),
            for_error(&Error::Lost("x".into())),
            for_error(&Error::Unavailable("x".into())),
            for_error(&Error::InvalidArgument("x".into())),
            for_error(&Error::Internal("x".into())),
        ];
        assert_eq!(codes, [75, 79, 69, 64, 70]);
        assert_eq!(for_error(&Error::refused_deployment("evicting")), 78);
    }

    #[test]
    fn messages_become_one_line() {
        assert_eq!(one_line("a\n\n  b\r\nc  "), "a; b; c");
    }
}
