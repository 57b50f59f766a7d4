//! Record files opened and `flock`ed for the length of one operation.
//!
//! `flock` is taken with `LOCK_NB` in a bounded retry loop: a process stopped (SIGSTOP, a debugger)
//! while it holds the lock must give us `Unavailable` after the I/O timeout, never a hang. Critical
//! sections are a read and a write of one page, so the lock is normally free within microseconds.

use crate::record::{self, Decoded, Record, FILE_LEN};
use leasehold_core::{Error, Result};
use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

/// Record files are created group-writable (before the umask), so a directory a group shares works
/// with `umask 002`; the directory we create ourselves is 0700.
const FILE_MODE: u32 = 0o660;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Shared,
    Exclusive,
}

/// An open record file whose `flock` we hold; unlocked on drop.
#[derive(Debug)]
pub(crate) struct Locked {
    file: File,
}

impl Locked {
    /// Opens and locks `path`. `Ok(None)` when `create` is false and the file does not exist.
    pub(crate) fn open(
        path: &Path,
        create: bool,
        mode: Mode,
        give_up: Instant,
    ) -> Result<Option<Self>> {
        let file = match OpenOptions::new()
            .read(true)
            .write(mode == Mode::Exclusive)
            .create(create)
            .mode(FILE_MODE)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(path)
        {
            Ok(f) => f,
            Err(e) if !create && e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error("cannot open the record file", path, &e)),
        };
        let op = match mode {
            Mode::Shared => libc::LOCK_SH,
            Mode::Exclusive => libc::LOCK_EX,
        };
        lock(&file, op, give_up, path)?;
        Ok(Some(Locked { file }))
    }

    /// The record, and whether the file held bytes that are no valid record.
    pub(crate) fn read(&self, path: &Path) -> Result<Decoded> {
        // One byte more than a record file has, so trailing garbage shows.
        let mut buf = vec![0u8; FILE_LEN + 1];
        let mut filled = 0;
        while filled < buf.len() {
            match self.file.read_at(&mut buf[filled..], filled as u64) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(io_error("cannot read the record file", path, &e)),
            }
        }
        Ok(record::decode(&buf[..filled]))
    }

    /// Writes `record` as the next generation into the slot that does not hold the current one.
    /// A record read from a damaged file is written as a whole new file instead, so no garbage
    /// stays behind to make it look damaged again.
    pub(crate) fn write(&self, record: &mut Record, path: &Path) -> Result<()> {
        record.gen = record.gen.wrapping_add(1);
        let (offset, bytes) = record::encode(record);
        let fail = |e: std::io::Error| io_error("cannot write the record file", path, &e);
        if !record.repair {
            return self.file.write_all_at(&bytes, offset).map_err(fail);
        }
        let mut whole = vec![0u8; FILE_LEN];
        let at = offset as usize;
        whole[at..at + bytes.len()].copy_from_slice(&bytes);
        self.file.write_all_at(&whole, 0).map_err(fail)?;
        self.file.set_len(FILE_LEN as u64).map_err(fail)?;
        record.repair = false;
        Ok(())
    }
}

impl Drop for Locked {
    fn drop(&mut self) {
        // Explicitly, not just by closing: a child forked meanwhile shares this open file description
        // and would otherwise keep the lock until it exits.
        // SAFETY: the descriptor is open for as long as `self.file` lives.
        unsafe {
            libc::flock(self.file.as_raw_fd(), libc::LOCK_UN);
        }
    }
}

fn lock(file: &File, op: libc::c_int, give_up: Instant, path: &Path) -> Result<()> {
    let mut tries: u32 = 0;
    loop {
        // SAFETY: a plain syscall on a descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), op | libc::LOCK_NB) } == 0 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) => {}
            _ => return Err(io_error("cannot lock the record file", path, &err)),
        }
        if Instant::now() >= give_up {
            return Err(Error::Unavailable(format!(
                "the record file {} stayed locked for the whole I/O timeout (is a process that holds it stopped?)",
                path.display()
            )));
        }
        tries = tries.saturating_add(1);
        // Critical sections last microseconds: yield first, then retry every 16-64 µs (a longer
        // sleep would let the lock sit idle and make the waiters behind us wait for nothing).
        if tries < 4 {
            std::thread::yield_now();
        } else {
            let shift = (tries - 4).min(2);
            std::thread::sleep(
                Duration::from_micros(16u64 << shift)
                    .min(give_up.saturating_duration_since(Instant::now())),
            );
        }
    }
}

pub(crate) fn io_error(what: &str, path: &Path, err: &std::io::Error) -> Error {
    Error::Unavailable(format!("{what} {}: {err}", path.display()))
}
