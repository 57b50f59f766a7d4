//! `leasehold once`: run a command at most once per key (core's `once` steps), record its output and
//! exit status, and give them back to every later call.

use crate::cli::{OnceArgs, Recover};
use crate::exit::{self, Failure};
use leasehold::once::{Incomplete, OnceRecord, MAX_RESULT};
use leasehold::{Client, Error, Lease};
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::process::{Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

pub fn once(client: &Client, args: &OnceArgs) -> Result<u8, Failure> {
    let key = args.key.as_bytes();
    let shown = String::from_utf8_lossy(key).into_owned();
    let lease = client.once_lock(key, args.ttl, args.wait)?;
    match lease.once_record()? {
        OnceRecord::Done { result, .. } => {
            lease.release()?;
            return replay(&result);
        }
        OnceRecord::Started { fence, started_at } => match args.recover {
            None => {
                let _ = lease.release();
                return Err(Failure::new(
                    exit::INCOMPLETE,
                    format!(
                        "{} (started {}); once checked, run again with --recover done or --recover rerun",
                        Incomplete { fence, started_at }.error(key).message(),
                        humantime::format_rfc3339_seconds(started_at)
                    ),
                ));
            }
            Some(Recover::Done) => {
                lease.once_done(&record(0, b""), args.keep_for)?;
                lease.release()?;
                say!("leasehold: \"{shown}\": the attempt of fence {fence} is recorded as done");
                return Ok(0);
            }
            Some(Recover::Rerun) => {}
        },
        OnceRecord::None => {}
    }
    lease.once_started(args.keep_for)?;
    lease.keep_alive(true)?;
    let (code, output) = run(&lease, args)?;
    lease.once_done(&record(code, &output), args.keep_for)?;
    lease.release()?;
    Ok(code)
}

/// The recorded result: the exit status, then the output.
fn record(code: u8, output: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(1 + output.len());
    bytes.push(code);
    bytes.extend_from_slice(output);
    bytes
}

/// Prints a recorded output and gives its exit status.
fn replay(result: &[u8]) -> Result<u8, Failure> {
    let Some((&code, output)) = result.split_first() else {
        return Err(Failure::new(exit::INTERNAL, "the recorded result is empty"));
    };
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(output);
    let _ = out.flush();
    Ok(code)
}

/// Runs the command, passing its standard output through and keeping up to the record's limit.
fn run(lease: &Lease, args: &OnceArgs) -> Result<(u8, Vec<u8>), Failure> {
    let Some((program, rest)) = args.command.split_first() else {
        return Err(Failure::new(exit::USAGE, "no command given"));
    };
    let token = lease.token();
    let started = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let mut command = Command::new(program);
    // Like `run`'s command: it gets SIGTERM if leasehold dies, since nothing keeps its lease then.
    crate::child::die_with_parent(&mut command);
    let child = command
        .args(rest)
        .env("LEASEHOLD_KEY", &args.key)
        .env("LEASEHOLD_FENCE", lease.fence().to_string())
        .env("LEASEHOLD_TOKEN", token.as_str())
        .env("LEASEHOLD_ONCE_STARTED_MS", started.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| crate::child::not_started(program, &e));
    let mut child = match child {
        Ok(child) => child,
        Err(failure) => {
            // Not started: nothing happened, so nothing may look half-done to the next call.
            let _ = lease.once_cleared(args.keep_for);
            return Err(failure);
        }
    };
    let mut kept = Vec::new();
    let limit = MAX_RESULT - 1;
    let mut truncated = false;
    if let Some(mut pipe) = child.stdout.take() {
        let mut buf = [0u8; 8192];
        let mut out = std::io::stdout();
        loop {
            match pipe.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    let _ = out.write_all(&buf[..n]);
                    let room = limit.saturating_sub(kept.len());
                    truncated |= n > room;
                    kept.extend_from_slice(&buf[..n.min(room)]);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        let _ = out.flush();
    }
    let status = child
        .wait()
        .map_err(|e| Failure::new(exit::OS_ERROR, format!("cannot wait for the command: {e}")))?;
    if truncated {
        say!("leasehold: the output is above {limit} bytes; only the first {limit} are recorded");
    }
    if let Err(Error::Lost(why)) = lease.checkpoint(std::time::Duration::ZERO) {
        // The record would be refused anyway; say why the end is not recorded.
        return Err(Failure::new(
            exit::LOST,
            format!("the lease was lost while the command ran ({why}); its end is not recorded"),
        ));
    }
    Ok((crate::child::exit_code(status), kept))
}
