//! Record files opened and `flock`ed for the length of one operation.
//!
//! `flock` is taken with `LOCK_NB` in a bounded retry loop: a process stopped (SIGSTOP, a debugger)
//! while it holds the lock must give us `Unavailable` after the I/O timeout, never a hang. Critical
//! sections are a read and a write of one page, so the lock is normally free within microseconds.

use crate::dir::{identity, Dir};
use crate::io_error::io_error;
use crate::record::{self, Decoded, Record, FILE_LEN};
use leasehold_core::retry::Retry;
use leasehold_core::{Deadline, Error, Result};
use std::fs::File;
use std::io::ErrorKind;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// The pace of a process waiting for a record file's `flock` once it has yielded a few times:
/// critical sections last microseconds, so 16 µs doubling to 64 µs (a longer sleep would let the
/// lock sit idle and make the waiters behind us wait for nothing).
const FLOCK_BUSY: Retry = Retry::doubling(Duration::from_micros(16), Duration::from_micros(64));

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Shared,
    Exclusive,
}

/// An open file whose `flock` we hold; unlocked on drop.
#[derive(Debug)]
pub(crate) struct Locked {
    file: File,
    /// Device and inode, to tell a record file that was replaced since.
    id: (u64, u64),
}

impl Locked {
    /// Opens and locks the record `name` in `dir`. `Ok(None)` when `create` is false and the file
    /// does not exist.
    ///
    /// A record may be unlinked (on release, by a sweep, by hand) between our `open` and our
    /// `flock`; the lock would then be on a file nobody else looks at. So once locked, the path must
    /// still name the very file we hold (same device and inode), else we open again. Records are only
    /// unlinked under their `flock`, so once the check passes the file stays ours until we unlock.
    pub(crate) fn open(
        dir: &Dir,
        name: &str,
        create: bool,
        mode: Mode,
        give_up: Instant,
    ) -> Result<Option<Self>> {
        let path = dir.join(name);
        let mut flags = match mode {
            Mode::Shared => libc::O_RDONLY,
            Mode::Exclusive => libc::O_RDWR,
        };
        if create {
            flags |= libc::O_CREAT;
        }
        let op = match mode {
            Mode::Shared => libc::LOCK_SH,
            Mode::Exclusive => libc::LOCK_EX,
        };
        loop {
            let file = match dir.open_at(name, flags) {
                Ok(f) => f,
                Err(e) if !create && e.kind() == ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(io_error("cannot open the record file", &path, &e)),
            };
            let locked = lock(file, op, give_up, &path)?;
            match dir.identity_of(name) {
                Ok(id) if id == locked.id => return Ok(Some(locked)),
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(io_error("cannot stat the record file", &path, &e)),
            }
            if Instant::now() >= give_up {
                return Err(Error::Unavailable(format!(
                    "the record file {} was replaced again and again for the whole I/O timeout",
                    path.display()
                )));
            }
        }
    }

    /// Device and inode of the file.
    pub(crate) fn id(&self) -> (u64, u64) {
        self.id
    }

    pub(crate) fn file(&self) -> &File {
        &self.file
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

/// Takes `flock` `op` on `file`, retrying until `give_up`.
pub(crate) fn lock(file: File, op: libc::c_int, give_up: Instant, path: &Path) -> Result<Locked> {
    flock_until(&file, op, give_up, path)?;
    let id = match identity(&file) {
        Ok(id) => id,
        Err(e) => return Err(io_error("cannot stat", path, &e)),
    };
    Ok(Locked { file, id })
}

/// Takes `flock` `op` on `file` (which the caller unlocks), retrying until `give_up`.
pub(crate) fn flock_until(
    file: &File,
    op: libc::c_int,
    give_up: Instant,
    path: &Path,
) -> Result<()> {
    let mut yields = 0;
    let mut tries = FLOCK_BUSY.start(Deadline::at(give_up));
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
            return Err(stayed_locked(path));
        }
        // Critical sections last microseconds: yield first, then pause (FLOCK_BUSY).
        if yields < 3 {
            yields += 1;
            std::thread::yield_now();
        } else if !tries.pause() {
            return Err(stayed_locked(path));
        }
    }
}

fn stayed_locked(path: &Path) -> Error {
    Error::Unavailable(format!(
        "the record file {} stayed locked for the whole I/O timeout (is a process that holds it stopped?)",
        path.display()
    ))
}
