//! `file:///dir`: leases shared by the processes of one host through record files in `dir`.
//!
//! The same lease semantics as the Redis backend (TTL, random token, a per-key fence that survives
//! release, compare-and-delete release, owner-only extend, inspect), made atomic with `flock(2)`:
//!
//! - Each key has one record file, `k-<readable part>-<sha256 of prefix+key>.lock` (see `names`),
//!   created on first use and never deleted, because it carries the key's fence. Every operation opens
//!   it, takes `flock` (non-blocking, retried until the I/O timeout, so a stopped process cannot hang
//!   us), reads the record, writes the next one, and unlocks.
//! - Deadlines are stored on `CLOCK_BOOTTIME` together with the directory's epoch, a number that
//!   changes with every boot, so wall-clock jumps never move an expiry and a reboot frees every lease
//!   (see `clock` and `epoch`).
//! - Records survive torn writes (two checksummed slots, see `record`): a damaged record counts as
//!   free but keeps the fence of its intact slot, and the epoch floor keeps fences from going
//!   backwards across reboots.
//! - `acquire` queues waiters FIFO in the record itself, with heartbeats so a dead waiter is dropped
//!   after [`STALE_WAITER`]; the first two waiters block on an inotify watch of the record file and
//!   wake as soon as it changes, the others look every millisecond or so (see `queue`). A
//!   `try_acquire` does not cut in front of live waiters: while any are queued it gets
//!   `NotAcquired`, even in the instant between a release and the first waiter taking the key.
//! - Fences of a new boot start above `epoch << 32`, so after the first reboot they are large
//!   numbers (still strictly increasing; see `epoch`).
//!
//! The directory is created with mode 0700 if it is missing; record files are created 0660 before
//! the umask. The directory must be on a local file system (inotify and `flock` semantics), shared
//! only by processes of one host in one time namespace. Files of keys no longer used stay behind (a
//! few KiB each); delete them only while no process uses the directory.

mod clock;
mod epoch;
mod file;
mod names;
mod queue;
mod record;
mod wake;

use file::{Locked, Mode};
use leasehold_core::wait::held_elsewhere;
use leasehold_core::{
    BackendConfig, Config, Error, Key, KeyInfo, LockBackend, RawLease, Result, Token, Ttl,
};
use record::{Holder, Record};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A waiter that showed no sign of life for this long is dropped from a key's queue.
pub const STALE_WAITER: Duration = Duration::from_millis(500);

/// The local backend. Holds no open files or threads, so it is cheap and safe across `fork()`.
#[derive(Debug)]
pub struct LocalBackend {
    dir: PathBuf,
    prefix: String,
    io_timeout: Duration,
    epoch: u64,
}

impl LocalBackend {
    /// Opens (creating if needed, mode 0700) the directory a `file://` configuration names.
    pub fn open(config: &Config) -> Result<LocalBackend> {
        let BackendConfig::Local { dir } = &config.backend else {
            return Err(Error::invalid(format!(
                "the local backend needs a file:// URL, not {}",
                config.describe()
            )));
        };
        let give_up = Instant::now() + config.io_timeout;
        create_dir(dir)?;
        let boot = clock::boot_id()?;
        let epoch = epoch::current(dir, &boot, give_up)?;
        Ok(LocalBackend {
            dir: dir.clone(),
            prefix: config.prefix.clone(),
            io_timeout: config.io_timeout,
            epoch,
        })
    }

    /// The directory holding the record files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn record_path(&self, key: &Key) -> PathBuf {
        self.dir.join(names::record_file_name(
            key.as_bytes(),
            &key.prefixed(&self.prefix),
        ))
    }

    /// The I/O deadline of one operation started at `start`.
    fn give_up(&self, start: Instant) -> Instant {
        start.checked_add(self.io_timeout).unwrap_or(start)
    }

    fn read(&self, file: &Locked, path: &Path) -> Result<Record> {
        let (record, damaged) = file.read(path)?.into_record();
        if damaged {
            tracing::warn!(path = %path.display(), fence = record.fence, "damaged lock record treated as free");
        }
        Ok(record)
    }

    /// Makes `token` the holder of `record` until `ttl` after `now_ns` and returns the new fence.
    fn grant(&self, record: &mut Record, token: Token, ttl: Ttl, now_ns: u64) -> Result<u64> {
        let fence = record
            .next_fence(epoch::fence_floor(self.epoch))
            .ok_or_else(|| Error::Internal("the key's fence reached its maximum".into()))?;
        record.fence = fence;
        record.holder = Some(Holder {
            token,
            deadline_ns: now_ns.saturating_add(ttl_ns(ttl)),
        });
        Ok(fence)
    }

    /// Opens, locks and reads a held lease's record for release/extend: `Lost` unless `lease` still
    /// holds it.
    fn owned_record(
        &self,
        lease: &RawLease,
        give_up: Instant,
    ) -> Result<(Locked, Record, PathBuf, u64)> {
        let path = self.record_path(lease.key());
        let lost = || {
            Error::Lost(format!(
                "key \"{}\" is no longer held by this lease (it expired or was taken over)",
                lease.key()
            ))
        };
        let file = Locked::open(&path, false, Mode::Exclusive, give_up)?.ok_or_else(lost)?;
        let mut record = self.read(&file, &path)?;
        let now_ns = clock::now_ns()?;
        record.normalize(self.epoch, now_ns, stale_ns());
        match record.holder {
            Some(h) if h.token == lease.token() => Ok((file, record, path, now_ns)),
            _ => Err(lost()),
        }
    }
}

impl LockBackend for LocalBackend {
    fn name(&self) -> &'static str {
        "local"
    }

    fn try_acquire(&self, key: &Key, ttl: Ttl) -> Result<RawLease> {
        let sent = Instant::now();
        let token = Token::generate()?;
        let path = self.record_path(key);
        let file = Locked::open(&path, true, Mode::Exclusive, self.give_up(sent))?
            .ok_or_else(|| Error::Internal("record file vanished".into()))?;
        let mut record = self.read(&file, &path)?;
        let now_ns = clock::now_ns()?;
        record.normalize(self.epoch, now_ns, stale_ns());
        // Live waiters are ahead of a single attempt: cutting in would starve them.
        if record.holder.is_some() || !record.waiters.is_empty() {
            return Err(held_elsewhere(key));
        }
        let fence = self.grant(&mut record, token, ttl, now_ns)?;
        file.write(&mut record, &path)?;
        Ok(RawLease::new(key.clone(), token, fence, ttl, sent))
    }

    fn acquire(&self, key: &Key, ttl: Ttl, wait: Duration) -> Result<RawLease> {
        queue::acquire(self, key, ttl, wait)
    }

    fn release(&self, lease: &mut RawLease) -> Result<()> {
        let give_up = self.give_up(Instant::now());
        let (file, mut record, path, _) = self.owned_record(lease, give_up)?;
        record.holder = None;
        file.write(&mut record, &path)
    }

    fn extend(&self, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        let sent = Instant::now();
        let (file, mut record, path, now_ns) = self.owned_record(lease, self.give_up(sent))?;
        record.holder = Some(Holder {
            token: lease.token(),
            deadline_ns: now_ns.saturating_add(ttl_ns(ttl)),
        });
        file.write(&mut record, &path)?;
        lease.renewed(ttl, sent);
        Ok(())
    }

    fn inspect(&self, key: &Key) -> Result<KeyInfo> {
        let path = self.record_path(key);
        let Some(file) = Locked::open(&path, false, Mode::Shared, self.give_up(Instant::now()))?
        else {
            return Ok(KeyInfo::new(false, None, None));
        };
        let mut record = self.read(&file, &path)?;
        let now_ns = clock::now_ns()?;
        record.normalize(self.epoch, now_ns, stale_ns());
        let fence = (record.fence > 0).then_some(record.fence);
        Ok(match record.holder {
            Some(h) => KeyInfo::new(
                true,
                Some(Duration::from_nanos(h.deadline_ns.saturating_sub(now_ns))),
                fence,
            ),
            None => KeyInfo::new(false, None, fence),
        })
    }
}

fn ttl_ns(ttl: Ttl) -> u64 {
    ttl.as_millis().saturating_mul(1_000_000)
}

fn stale_ns() -> u64 {
    STALE_WAITER.as_nanos() as u64
}

fn create_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) if dir.is_dir() => Ok(()),
        Ok(()) => Err(Error::Unavailable(format!(
            "{} is not a directory",
            dir.display()
        ))),
        Err(e) => Err(file::io_error("cannot create the lock directory", dir, &e)),
    }
}
