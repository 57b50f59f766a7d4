//! Fences as hybrid logical clocks, and the directory's high-water mark.
//!
//! A key's next fence is `max(stored + 1, CLOCK_REALTIME in µs)`. While the key's record exists the
//! stored part alone makes fences strictly increase, whatever the wall clock does. When the record
//! is gone — deleted on release (see `LocalBackend::release`), swept, removed by a tmp cleaner or by
//! hand, or rolled back by a power loss (record writes are not fsynced) — two guards remain:
//!
//! - the high-water mark, [`MARK_FILE`], which holds at least the fence of every record Leasehold
//!   deleted itself; a new record starts above it. It is written before the record is unlinked,
//!   under the record's `flock`, so a process that recreates the record reads a mark that already
//!   covers it.
//! - the wall clock: fences follow `CLOCK_REALTIME` in µs (a key taken less than once per µs has
//!   fences that are just the grant times), so even with the mark lost too, the next fence is larger
//!   as long as the wall clock has not stepped back by more than the time since the key's last
//!   grant. That is the documented bound; NTP slews small offsets and steps mostly at boot.
//!
//! This replaces the epoch floor (`epoch << 32`) of format 1: after a reboot the wall clock is past
//! every fence of the boot before, so no per-boot floor is needed, and the boot identity moved into
//! each record (see `clock`). The mark is 24 bytes written in place with a check, never fsynced:
//! losing it only falls back to the wall clock.

use crate::dir::{identity, Dir};
use crate::file::lock;
use crate::io_error::io_error;
use leasehold_core::Result;
use std::fs::File;
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;
use std::sync::Mutex;
use std::time::Instant;

pub(crate) const MARK_FILE: &str = ".leasehold-fences";
const MAGIC: &[u8; 8] = b"LHFENCE2";
const LEN: usize = 24;

/// The next fence of a key whose record holds `stored` (0: none known) given the directory's mark
/// `floor` and the wall clock `now_us`; `None` only at `u64::MAX`.
pub(crate) fn next(stored: u64, floor: u64, now_us: u64) -> Option<u64> {
    Some(stored.max(floor).checked_add(1)?.max(now_us))
}

/// The mark file, kept open by one backend: every fresh key reads the mark and every deleted record
/// raises it, and opening and closing the file each time was most of what a fresh key cost beyond a
/// known one.
///
/// Kept safe by three rules. The file is used under the mutex only: `flock` belongs to the open file
/// description, so two threads sharing the descriptor would both "hold" `LOCK_EX`; a thread that
/// finds the mutex taken opens the file for itself, as before, rather than wait unboundedly. A
/// `fork()` child never uses its parent's descriptor (same reason: shared with the parent). And each
/// use first checks that the path still names the file held (device and inode): a mark deleted or
/// replaced by hand is reopened, never written on an orphan that no other process reads.
#[derive(Debug, Default)]
pub(crate) struct Mark {
    held: Mutex<Option<Held>>,
}

#[derive(Debug)]
struct Held {
    file: File,
    id: (u64, u64),
    pid: u32,
    /// Opened read-write (by a raise); a read-only one is reopened for the first raise.
    writable: bool,
}

impl Mark {
    /// The directory's high-water mark; 0 if it is missing or unreadable (the wall clock then guards
    /// alone).
    pub(crate) fn get(&self, dir: &Dir, give_up: Instant) -> Result<u64> {
        // Read without the lock first. A raise writes the mark in one `pwrite` that completes
        // before it deletes the record, so a reader that created the record after the deletion
        // reads the raised mark; a read torn by a raise under way fails the check, and is made
        // again under the lock. (Two `flock` calls are a sixth of what a fresh key costs.)
        match self.with(dir, Access::Peek, give_up, |file| Ok(read_checked(file)))? {
            None => Ok(0),
            Some(Some(mark)) => Ok(mark),
            Some(None) => self
                .with(dir, Access::Read, give_up, |file| Ok(read(file)))
                .map(Option::unwrap_or_default),
        }
    }

    /// Raises the mark to at least `fence`. Call before deleting a record whose fence is `fence`.
    pub(crate) fn raise(&self, dir: &Dir, fence: u64, give_up: Instant) -> Result<()> {
        self.with(dir, Access::Write, give_up, |file| {
            if read(file) >= fence {
                return Ok(());
            }
            file.write_all_at(&encode(fence), 0)
                .map_err(|e| io_error("cannot write", &dir.join(MARK_FILE), &e))
        })
        .map(drop)
    }

    /// Runs `f` on the mark file, under `flock` unless peeking (exclusive to write, which creates
    /// the file if missing). `None` when the file is missing and `f` would only read.
    fn with<T>(
        &self,
        dir: &Dir,
        access: Access,
        give_up: Instant,
        f: impl FnOnce(&File) -> Result<T>,
    ) -> Result<Option<T>> {
        let path = dir.join(MARK_FILE);
        let write = access == Access::Write;
        let op = match access {
            Access::Peek => None,
            Access::Read => Some(libc::LOCK_SH),
            Access::Write => Some(libc::LOCK_EX),
        };
        let Ok(mut held) = self.held.try_lock() else {
            // Another thread is at the mark (or held the mutex when this process was forked).
            let Some(file) = open(dir, write)? else {
                return Ok(None);
            };
            let Some(op) = op else {
                return f(&file).map(Some);
            };
            let locked = lock(file, op, give_up, &path)?;
            return f(locked.file()).map(Some);
        };
        let now = match dir.identity_of(MARK_FILE) {
            Ok(id) => Some(id),
            Err(e) if e.kind() == ErrorKind::NotFound => None,
            Err(e) => return Err(io_error("cannot stat", &path, &e)),
        };
        let pid = leasehold_core::fork::pid();
        // Usable: this process's, still the file the path names, and open for writing if we write.
        let usable = held
            .as_ref()
            .is_some_and(|h| h.pid == pid && Some(h.id) == now && (h.writable || !write));
        if !usable {
            // Closing a parent's copy is harmless: a `flock` lasts until the parent closes its own.
            drop(held.take());
            if now.is_none() && !write {
                return Ok(None);
            }
            let Some(file) = open(dir, write)? else {
                return Ok(None);
            };
            let id = identity(&file).map_err(|e| io_error("cannot stat", &path, &e))?;
            *held = Some(Held {
                file,
                id,
                pid,
                writable: write,
            });
        }
        let Some(h) = held.as_ref() else {
            return Ok(None);
        };
        let Some(op) = op else {
            return f(&h.file).map(Some);
        };
        crate::file::flock_until(&h.file, op, give_up, &path)?;
        let out = f(&h.file);
        unlock(&h.file);
        out.map(Some)
    }
}

/// How [`Mark::with`] uses the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    /// Read without the lock (the caller checks what it read).
    Peek,
    Read,
    Write,
}

fn unlock(file: &File) {
    use std::os::fd::AsRawFd;
    // SAFETY: a plain syscall on a descriptor that is open for the call.
    unsafe {
        libc::flock(file.as_raw_fd(), libc::LOCK_UN);
    }
}

/// The mark file opened for reading, or (`write`) for writing, created if missing.
fn open(dir: &Dir, write: bool) -> Result<Option<File>> {
    let flags = if write {
        libc::O_RDWR | libc::O_CREAT
    } else {
        libc::O_RDONLY
    };
    match dir.open_at(MARK_FILE, flags) {
        Ok(f) => Ok(Some(f)),
        Err(e) if !write && e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error("cannot open", &dir.join(MARK_FILE), &e)),
    }
}

fn read(file: &std::fs::File) -> u64 {
    let mut buf = [0u8; LEN];
    match file.read_exact_at(&mut buf, 0) {
        Ok(()) => decode(&buf).unwrap_or_else(|| {
            tracing::warn!(
                "the fence high-water mark is damaged; the wall clock guards fences alone"
            );
            0
        }),
        Err(_) => 0,
    }
}

/// The mark if the file holds a whole, intact one; `None` for a short, torn or damaged read.
fn read_checked(file: &std::fs::File) -> Option<u64> {
    let mut buf = [0u8; LEN];
    file.read_exact_at(&mut buf, 0).ok()?;
    decode(&buf)
}

fn encode(fence: u64) -> [u8; LEN] {
    let mut b = [0u8; LEN];
    b[..8].copy_from_slice(MAGIC);
    b[8..16].copy_from_slice(&fence.to_le_bytes());
    let sum = crate::record::check(&b[..16]);
    b[16..].copy_from_slice(&sum);
    b
}

fn decode(b: &[u8; LEN]) -> Option<u64> {
    (b[..8] == *MAGIC && b[16..] == crate::record::check(&b[..16]))
        .then(|| u64::from_le_bytes(b[8..16].try_into().unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hybrid_fences() {
        assert_eq!(
            next(0, 0, 1_000),
            Some(1_000),
            "a new key starts at the clock"
        );
        assert_eq!(
            next(5_000, 0, 1_000),
            Some(5_001),
            "the stored fence wins when ahead"
        );
        assert_eq!(next(0, 7_000, 1_000), Some(7_001), "so does the mark");
        assert_eq!(next(999, 0, 1_000), Some(1_000));
        assert_eq!(next(u64::MAX, 0, 1), None);
        assert_eq!(next(0, 0, 0), Some(1), "never 0");
    }

    #[test]
    fn the_mark_round_trips_and_only_rises() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = Dir::open(tmp.path(), false).unwrap();
        let later = Instant::now() + std::time::Duration::from_secs(5);
        let (mark, other) = (Mark::default(), Mark::default());
        assert_eq!(mark.get(&dir, later).unwrap(), 0);
        mark.raise(&dir, 42, later).unwrap();
        mark.raise(&dir, 7, later).unwrap();
        assert_eq!(mark.get(&dir, later).unwrap(), 42);
        assert_eq!(
            other.get(&dir, later).unwrap(),
            42,
            "a backend of its own reads it"
        );
        // Deleted by hand: the kept descriptor is not written on (nobody else would read it).
        std::fs::remove_file(tmp.path().join(MARK_FILE)).unwrap();
        assert_eq!(mark.get(&dir, later).unwrap(), 0);
        other.raise(&dir, 50, later).unwrap();
        assert_eq!(mark.get(&dir, later).unwrap(), 50);
        mark.raise(&dir, 60, later).unwrap();
        assert_eq!(other.get(&dir, later).unwrap(), 60);
        std::fs::write(tmp.path().join(MARK_FILE), b"garbage garbage garbage!").unwrap();
        assert_eq!(
            mark.get(&dir, later).unwrap(),
            0,
            "damage falls back to the clock"
        );
        assert_eq!(decode(&encode(9)), Some(9));
    }
}
