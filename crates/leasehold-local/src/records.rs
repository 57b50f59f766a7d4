//! Records ([`leasehold_core::records`]) on the local backend: one file per record, in the
//! subdirectory `records` of the lock directory (created 0700 on first use, checked like the lock
//! directory itself), named like a lock's record file (`r-<readable part>-<sha256 of prefix +
//! key>.rec`, see `names`), so a record never shares a file, or a name, with a lock.
//!
//! Every call opens the file relative to the subdirectory's descriptor and takes its `flock`
//! (shared to read, exclusive to write; non-blocking and retried until the I/O timeout, so a
//! stopped process holding it gives `Unavailable`, never a hang), exactly as lock records are
//! handled (`file::Locked`). A put reads the record, decides, and writes under that one lock, so
//! two writers of one key are serialized and a reader sees the old record or the new one.
//!
//! A record file has two slots, like a lock record (see `record`): each write goes to the slot
//! that does not hold the current record, with a generation one higher and a check over its
//! bytes; a reader takes the valid slot of the highest generation. A write torn by a crash (a
//! process killed in the middle of a 64 KiB `pwrite`, a power loss) therefore leaves the previous
//! record readable. Writes are `fdatasync`ed (and a new file's directory entry `fsync`ed): unlike a
//! lock, a record is meant to outlive its writer, the boot and a power loss, for its whole keep.
//! The syncs are the one part of a call the I/O timeout cannot bound (no file system call can be
//! interrupted); the `flock` wait is bounded as for locks.
//!
//! Slot layout (little-endian): `0 magic "LHR1" | 4 len u32 | 8 check [8] | 16 gen u64 | 24 fence
//! u64 | 32 expires_ms u64 | 40 value_len u32 | 44 zero u32 | 48 value`. `check` is the FNV-1a 64
//! hash of `[16..len]`, as in lock records (it has to catch torn writes, not an adversary: only the
//! directory's owner can write the file).
//!
//! Expiry is judged on the **wall clock** (`SystemTime`, milliseconds since 1970), not on the
//! `CLOCK_BOOTTIME` + boot id that lock deadlines use: a lock's holder is gone once its boot is
//! over, so locks may (and must) treat a record of an earlier boot as free, but a record must
//! survive a reboot within its keep, and `CLOCK_BOOTTIME` restarts at zero each boot. The price is
//! the wall clock's: a step forward expires records early, a step back keeps them longer (NTP
//! slews; steps mostly happen at boot). Records survive a reboot only where the lock directory
//! does: the default `/run/lock/…` is a tmpfs, emptied at every boot; give a `file://` URL on a
//! persistent file system to keep records across reboots.
//!
//! Bounded state: an expired record counts as absent, is overwritten by the next put of its key,
//! and its file is deleted by a gradual sweep that puts run (at most once a second per directory
//! and process, 64 entries and 2 ms at most each time, one try at each file's lock).

use crate::dir::Dir;
use crate::file::{Locked, Mode};
use crate::io_error::io_error;
use crate::names;
use crate::sweep::{SWEEP_BATCH, SWEEP_BUDGET, SWEEP_EVERY};
use crate::LocalBackend;
use leasehold_core::records::{Record, RecordStore, MAX_RECORD};
use leasehold_core::{Error, Key, Result};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The subdirectory of the lock directory that holds the record files.
pub(crate) const RECORDS_DIR: &str = "records";
/// Record file names start with this and end with [`RECORD_SUFFIX`].
const RECORD_START: &str = "r-";
const RECORD_SUFFIX: &str = ".rec";

const MAGIC: &[u8; 4] = b"LHR1";
const HEADER: usize = 48;
/// One slot: the header and the largest value, rounded up to whole pages.
const SLOT: usize = (HEADER + MAX_RECORD).div_ceil(4096) * 4096;

/// One slot's record as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stored {
    gen: u64,
    fence: u64,
    /// Wall-clock milliseconds since 1970 after which the record is gone.
    expires_ms: u64,
    value: Vec<u8>,
}

impl RecordStore for LocalBackend {
    fn get(&self, key: &Key) -> Result<Option<Record>> {
        let give_up = self.give_up(Instant::now());
        // No records directory yet: no record yet (and a read makes none).
        let Some(dir) = self.dir.subdir(RECORDS_DIR, false)? else {
            return Ok(None);
        };
        let name = self.record_file(key);
        let Some(file) = Locked::open(&dir, &name, false, Mode::Shared, give_up)? else {
            return Ok(None);
        };
        let (current, _) = read(file.file(), &dir.join(&name))?;
        let now = wall_ms()?;
        Ok(current.filter(|r| r.expires_ms > now).map(|r| Record {
            fence: r.fence,
            value: r.value,
        }))
    }

    fn put(&self, key: &Key, fence: u64, value: &[u8], keep: Duration) -> Result<bool> {
        if value.len() > MAX_RECORD {
            return Err(Error::invalid(format!(
                "a record is at most {MAX_RECORD} bytes, not {}",
                value.len()
            )));
        }
        let give_up = self.give_up(Instant::now());
        let dir = self.dir.subdir(RECORDS_DIR, true)?.ok_or_else(|| {
            Error::Internal("the records directory vanished as it was made".into())
        })?;
        let name = self.record_file(key);
        let path = dir.join(&name);
        let file = Locked::open(&dir, &name, true, Mode::Exclusive, give_up)?
            .ok_or_else(|| Error::Internal("record file vanished".into()))?;
        let (current, current_slot) = read(file.file(), &path)?;
        let now = wall_ms()?;
        // An expired record counts as absent, whatever its fence.
        if let Some(r) = current.as_ref().filter(|r| r.expires_ms > now) {
            if r.fence > fence {
                return Ok(false);
            }
        }
        let keep_ms = u64::try_from(keep.as_millis()).unwrap_or(u64::MAX).max(1);
        let stored = Stored {
            gen: current.as_ref().map_or(0, |r| r.gen).wrapping_add(1),
            fence,
            expires_ms: now.saturating_add(keep_ms),
            value: value.to_vec(),
        };
        let created = current.is_none()
            && file
                .file()
                .metadata()
                .map_err(|e| io_error("cannot stat", &path, &e))?
                .len()
                == 0;
        // The slot that does not hold the current record: a torn write leaves that one intact.
        let slot = match current_slot {
            Some(0) => 1,
            _ => 0,
        };
        let fail = |e: std::io::Error| io_error("cannot write the record file", &path, &e);
        file.file()
            .write_all_at(&encode(&stored), (slot * SLOT) as u64)
            .map_err(fail)?;
        file.file().sync_data().map_err(fail)?;
        if created {
            dir.sync()
                .map_err(|e| io_error("cannot sync the directory", dir.path(), &e))?;
        }
        drop(file);
        self.sweep_records(&dir);
        Ok(true)
    }
}

impl LocalBackend {
    /// The record file of `key` (in [`RECORDS_DIR`]).
    fn record_file(&self, key: &Key) -> String {
        let name =
            names::record_file_name(RECORD_START, key.as_bytes(), &key.prefixed(&self.prefix));
        let stem = name.strip_suffix(names::RECORD_SUFFIX).unwrap_or(&name);
        format!("{stem}{RECORD_SUFFIX}")
    }

    /// A few steps of the gradual sweep of expired record files in `dir`, at most once per
    /// [`SWEEP_EVERY`] per directory and process; errors are left to the next look.
    fn sweep_records(&self, dir: &Dir) {
        static SWEEPS: Mutex<Vec<Sweep>> = Mutex::new(Vec::new());
        let Ok(id) = dir.identity_of(".") else {
            return;
        };
        let now = Instant::now();
        // Another thread is sweeping (or, in a forked child, a parent's thread was): skip.
        let Ok(mut sweeps) = SWEEPS.try_lock() else {
            return;
        };
        let at = match sweeps.iter().position(|s| s.0 == id) {
            Some(at) => at,
            None => {
                sweeps.push((id, now, 0));
                sweeps.len() - 1
            }
        };
        let (_, due, skip) = sweeps[at];
        if now < due {
            return;
        }
        let end = now.checked_add(SWEEP_BUDGET).unwrap_or(now);
        let Ok(entries) = std::fs::read_dir(dir.path()) else {
            sweeps[at] = (id, now + SWEEP_EVERY, 0);
            return;
        };
        let mut seen = 0;
        let mut done = true;
        for entry in entries.skip(skip) {
            if seen == SWEEP_BATCH || Instant::now() >= end {
                done = false;
                break;
            }
            seen += 1;
            let Ok(entry) = entry else { continue };
            if let Some(name) = entry.file_name().to_str() {
                if name.starts_with(RECORD_START) && name.ends_with(RECORD_SUFFIX) {
                    let _ = sweep_entry(dir, name);
                }
            }
        }
        // Deleted entries shift those after them: a few may wait for the next pass.
        let next = if done { 0 } else { skip + seen };
        sweeps[at] = (id, Instant::now() + SWEEP_EVERY, next);
    }
}

/// Per records directory (device, inode): when the next look is due, and how many entries the
/// last pass got through.
type Sweep = ((u64, u64), Instant, usize);

/// Deletes the record file `name` if it holds no live record (expired, or nothing valid: a put
/// that died before its first write). One try at its lock: a record in use is being written.
fn sweep_entry(dir: &Dir, name: &str) -> Result<bool> {
    let Some(file) = Locked::open(dir, name, false, Mode::Exclusive, Instant::now())? else {
        return Ok(false);
    };
    let (current, _) = read(file.file(), &dir.join(name))?;
    let now = wall_ms()?;
    if current.is_some_and(|r| r.expires_ms > now) {
        return Ok(false);
    }
    // Under the flock: whoever opened the old file finds it gone once it gets the lock.
    match dir.unlink(name) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(io_error("cannot delete", &dir.join(name), &e))
        }
        _ => Ok(true),
    }
}

/// Wall-clock milliseconds since 1970 (see the module docs for why not the boot clock).
fn wall_ms() -> Result<u64> {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|_| Error::Internal("the wall clock is before 1970".into()))?;
    Ok(u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
}

/// The newest valid record of the file and its slot (0 or 1); `None` for a new or empty file, or
/// one with no valid slot (damaged: it counts as absent, and the next put writes a valid one).
fn read(file: &File, path: &Path) -> Result<(Option<Stored>, Option<usize>)> {
    let mut best: Option<(Stored, usize)> = None;
    let mut damaged = false;
    for slot in 0..2 {
        let at = (slot * SLOT) as u64;
        let mut header = [0u8; HEADER];
        let got = read_at(file, &mut header, at, path)?;
        if got == 0 || header.iter().all(|&b| b == 0) {
            continue;
        }
        let len = u32_at(&header, 4) as usize;
        if got < HEADER || header[..4] != *MAGIC || !(HEADER..=SLOT).contains(&len) {
            damaged = true;
            continue;
        }
        let mut bytes = vec![0u8; len];
        if read_at(file, &mut bytes, at, path)? < len {
            damaged = true;
            continue;
        }
        match decode(&bytes) {
            Some(r) if best.as_ref().is_none_or(|(b, _)| r.gen > b.gen) => best = Some((r, slot)),
            Some(_) => {}
            None => damaged = true,
        }
    }
    if damaged && best.is_none() {
        tracing::warn!(path = %path.display(), "damaged record file treated as absent");
    }
    Ok(match best {
        Some((r, slot)) => (Some(r), Some(slot)),
        None => (None, None),
    })
}

/// Reads into `buf` from `at` until it is full or the file ends; how many bytes it read.
fn read_at(file: &File, buf: &mut [u8], at: u64, path: &Path) -> Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read_at(&mut buf[filled..], at + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_error("cannot read the record file", path, &e)),
        }
    }
    Ok(filled)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u32::from_le_bytes)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

fn encode(r: &Stored) -> Vec<u8> {
    let len = HEADER + r.value.len();
    let mut b = vec![0u8; len];
    b[..4].copy_from_slice(MAGIC);
    // At most HEADER + MAX_RECORD: fits.
    b[4..8].copy_from_slice(&(len as u32).to_le_bytes());
    b[16..24].copy_from_slice(&r.gen.to_le_bytes());
    b[24..32].copy_from_slice(&r.fence.to_le_bytes());
    b[32..40].copy_from_slice(&r.expires_ms.to_le_bytes());
    b[40..44].copy_from_slice(&(r.value.len() as u32).to_le_bytes());
    b[HEADER..].copy_from_slice(&r.value);
    let sum = crate::record::check(&b[16..]);
    b[8..16].copy_from_slice(&sum);
    b
}

/// A slot's bytes (exactly its `len`) as a record, if they are a valid one.
fn decode(b: &[u8]) -> Option<Stored> {
    let len = b.len();
    let valid = len >= HEADER
        && b[..4] == *MAGIC
        && u32_at(b, 4) as usize == len
        && b[8..16] == crate::record::check(&b[16..])
        && u32_at(b, 40) as usize == len - HEADER;
    valid.then(|| Stored {
        gen: u64_at(b, 16),
        fence: u64_at(b, 24),
        expires_ms: u64_at(b, 32),
        value: b[HEADER..].to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(gen: u64, value: &[u8]) -> Stored {
        Stored {
            gen,
            fence: 1_764_590_000_000_001,
            expires_ms: 1_800_000_000_000,
            value: value.to_vec(),
        }
    }

    #[test]
    fn slots_round_trip_and_catch_damage() {
        let r = stored(3, b"done: 42");
        assert_eq!(decode(&encode(&r)), Some(r.clone()));
        let big = stored(4, &vec![0xab; MAX_RECORD]);
        let bytes = encode(&big);
        assert!(bytes.len() <= SLOT);
        assert_eq!(decode(&bytes), Some(big));
        let mut torn = encode(&r);
        let last = torn.len() - 1;
        torn[last] ^= 1;
        assert_eq!(decode(&torn), None);
        assert_eq!(decode(&encode(&r)[..HEADER]), None);
    }

    #[test]
    fn expired_record_files_are_swept_by_later_puts() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let url = format!("file://{}", tmp.path().display());
        let config = leasehold_core::Config::parse(&url).unwrap();
        let backend = LocalBackend::open(&config).unwrap();
        let files = || {
            std::fs::read_dir(tmp.path().join(RECORDS_DIR))
                .unwrap()
                .count()
        };
        let kept = Key::new("kept").unwrap();
        assert_eq!(backend.get(&kept).unwrap(), None);
        assert!(
            !tmp.path().join(RECORDS_DIR).exists(),
            "a read makes no directory"
        );
        // The first put sweeps at once (nothing to sweep yet), the next look is a second later.
        assert!(backend
            .put(&kept, 1, b"y", Duration::from_secs(60))
            .unwrap());
        for i in 0..3 {
            let key = Key::new(format!("short-{i}")).unwrap();
            assert!(backend
                .put(&key, 1, b"x", Duration::from_millis(1))
                .unwrap());
        }
        assert_eq!(files(), 4);
        // A sweep step is skipped while another thread sweeps (the other tests of this binary) and
        // stops at its time budget, so on a busy machine a few later puts may be needed: what
        // matters is that later puts, and nothing else, remove the expired files.
        let mut fence = 1;
        for _ in 0..10 {
            std::thread::sleep(SWEEP_EVERY + Duration::from_millis(100));
            fence += 1;
            assert!(backend
                .put(&kept, fence, b"z", Duration::from_secs(60))
                .unwrap());
            if files() == 1 {
                break;
            }
        }
        assert_eq!(files(), 1, "only the live record is left");
        assert_eq!(backend.get(&kept).unwrap().map(|r| r.fence), Some(fence));
    }

    #[test]
    fn a_torn_write_leaves_the_previous_record() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let path = tmp.path().join("r");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        assert_eq!(read(&file, &path).unwrap(), (None, None));
        file.write_all_at(&encode(&stored(1, b"old")), 0).unwrap();
        let newer = encode(&stored(2, &vec![7; 10_000]));
        // Half of the next write landed in the other slot.
        file.write_all_at(&newer[..5_000], SLOT as u64).unwrap();
        assert_eq!(
            read(&file, &path).unwrap(),
            (Some(stored(1, b"old")), Some(0))
        );
        file.write_all_at(&newer, SLOT as u64).unwrap();
        assert_eq!(read(&file, &path).unwrap().1, Some(1));
    }
}
