//! The command `leasehold run` starts: spawning it, signalling it, and turning its end into an exit code.

use crate::exit::{self, Failure};
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus};

/// A running command. Signals go to its whole process group unless it runs in the foreground.
pub struct Child {
    inner: std::process::Child,
    own_group: bool,
    reaped: bool,
}

/// Why a command could not be started, with the shell's exit codes (127 not found, 126 not
/// executable).
pub fn not_started(program: &OsStr, e: &io::Error) -> Failure {
    let code = match e.kind() {
        io::ErrorKind::NotFound => exit::NOT_FOUND,
        io::ErrorKind::PermissionDenied => exit::CANNOT_EXECUTE,
        _ => exit::OS_ERROR,
    };
    Failure::new(
        code,
        format!("cannot run {}: {e}", program.to_string_lossy()),
    )
}

impl Child {
    /// Starts `argv` with `env` added to leasehold's environment.
    pub fn spawn(
        argv: &[OsString],
        env: &[(&str, &OsStr)],
        own_group: bool,
    ) -> Result<Child, Failure> {
        let Some((program, args)) = argv.split_first() else {
            return Err(Failure::new(exit::USAGE, "no command given"));
        };
        let mut command = Command::new(program);
        command.args(args);
        for (name, value) in env {
            command.env(name, value);
        }
        if own_group {
            command.process_group(0);
        }
        die_with_parent(&mut command);
        match command.spawn() {
            Ok(inner) => Ok(Child {
                inner,
                own_group,
                reaped: false,
            }),
            Err(e) => Err(not_started(program, &e)),
        }
    }

    /// Sends `signal` to the command (and its group). Does nothing once it has been reaped, so a
    /// recycled pid can never receive it.
    pub fn signal(&self, signal: i32) {
        if self.reaped {
            return;
        }
        let Ok(pid) = i32::try_from(self.inner.id()) else {
            return;
        };
        let target = if self.own_group { -pid } else { pid };
        // SAFETY: kill(2) has no memory effects; the target is our unreaped child (or its group).
        unsafe {
            libc::kill(target, signal);
        }
    }

    /// The command's exit status if it has ended.
    pub fn try_wait(&mut self) -> Result<Option<ExitStatus>, Failure> {
        match self.inner.try_wait() {
            Ok(Some(status)) => {
                self.reaped = true;
                Ok(Some(status))
            }
            Ok(None) => Ok(None),
            Err(e) => Err(Failure::new(
                exit::OS_ERROR,
                format!("cannot wait for the command: {e}"),
            )),
        }
    }
}

/// The exit code a shell would report for a command that ended with `status`.
pub fn exit_code(status: ExitStatus) -> u8 {
    if let Some(code) = status.code() {
        return (code & 0xff) as u8;
    }
    match status.signal() {
        Some(sig) => 128u8.saturating_add((sig & 0x7f) as u8),
        None => exit::INTERNAL,
    }
}

/// How a status reads in a message.
pub fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => "ended".to_owned(),
    }
}

/// On Linux, the command gets SIGTERM if leasehold dies (even by SIGKILL): its lease is no longer
/// renewed then, so it must not go on believing it holds the lock.
#[cfg(target_os = "linux")]
pub fn die_with_parent(command: &mut Command) {
    // SAFETY: getpid() before the fork; after it only async-signal-safe calls (prctl, getppid).
    let parent = unsafe { libc::getpid() };
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died before the prctl took effect.
            if libc::getppid() != parent {
                return Err(io::Error::other(
                    "leasehold exited before the command started",
                ));
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
pub fn die_with_parent(_command: &mut Command) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_like_a_shell() {
        assert_eq!(exit_code(ExitStatus::from_raw(0)), 0);
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(255 << 8)), 255);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGTERM)), 143);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGKILL)), 137);
    }
}
