//! `file:///dir`: leases shared by the processes of one host through record files in `dir`.
//!
//! The same lease semantics as the Redis backend (TTL, random token, a per-key fence that strictly
//! increases, compare-and-delete release, owner-only extend, inspect), made atomic with `flock(2)`:
//!
//! - Each key in use has one record file, `k-<readable part>-<sha256 of prefix+key>.lock` (see
//!   `names`); a semaphore's is `s-….lock`, so semaphores are a namespace of their own. Every
//!   operation opens it relative to the directory's descriptor, takes `flock` (non-blocking,
//!   retried until the I/O timeout, so a stopped process cannot hang us), checks the path still
//!   names the file it locked (records get deleted), reads the record, writes the next one, and
//!   unlocks.
//! - Deadlines and waiter heartbeats are stored on `CLOCK_BOOTTIME` together with the writer's boot
//!   id, so wall-clock jumps never move an expiry, and a holder is judged gone only when its
//!   deadline has passed on its own boot's clock, or when its boot is over (another boot id; see
//!   `clock`). Deleting any file of the directory's bookkeeping never frees a held key.
//! - Fences are hybrid logical clocks, `max(stored + 1, CLOCK_REALTIME µs)`, floored by the
//!   directory's high-water mark of deleted records (see `fences`): they keep increasing when a
//!   record is deleted, lost to a power loss or damaged, as long as the wall clock does not step
//!   back by more than the time since the key's last grant while its record is lost. Fences are
//!   therefore large numbers (about the grant time in µs since 1970).
//! - Bounded state: a release that leaves nobody waiting deletes the record (after raising the
//!   high-water mark), so unused keys leave nothing behind, unless the same backend released the
//!   key less than a second before (a hot key keeps its record, for speed). Records left that way,
//!   and those of crashed holders and waiters, are swept a few at a time by later releases (64
//!   entries at most once a second per backend), or all at once by [`LocalBackend::sweep`].
//! - Records survive torn writes (two checksummed page-sized slots, see `record`): a damaged
//!   record counts as free but keeps the fence of its intact slot. Records of the older formats 1
//!   and 2 are refused with an error that says how to move on.
//! - Shared locks and semaphores live in the same kind of record, which keeps a list of holders,
//!   each with its own token, deadline and fence (a share or a permit expires, is released and
//!   extended on its own; every grant of a key, of any kind, gets a larger fence). One key keeps
//!   at most [`MAX_HOLDERS`] (64) leases at once, so a record stays within its page: the request
//!   that would be the 65th shared holder, or the 65th permit of a semaphore of more than 64, gets
//!   `InvalidArgument` naming that limit (never a grant beyond it, never a silent wait). Permits
//!   up to the API's 65535 are accepted; a semaphore of 64 or fewer never meets the limit.
//! - One size per semaphore: while a semaphore has live holders, a permit request of another size
//!   is refused with `InvalidArgument` (`leasehold_core::wait::other_size`) at its first attempt,
//!   a waiting one too; once every holder is gone (released or expired) a new size may be used.
//!   The size is kept out of the record, which an older 0.2 process may still read during an
//!   upgrade, in a side file next to it (`s-….lock.size`, see `size`), read and written under the
//!   record's `flock` and deleted with the record.
//! - Writer preference: an exclusive `acquire` waiting in a key's queue holds back every shared
//!   request that comes after it (a `try_acquire_shared` gets `NotAcquired`, an `acquire_shared`
//!   queues behind it), so a stream of readers cannot starve a writer; readers that queued before
//!   it go in first, together. The waiter shows it is alive by its heartbeat, so a writer that
//!   died holds readers back for [`STALE_WAITER`] at most. (Readers first, as Symfony does, lets a
//!   busy report lock a writer out for ever; that is what its users complained about.)
//! - Promote and demote rewrite the holder's own entry under the record's `flock`: a promote, when
//!   the token is the only live holder, sets the record's exclusive flag and gives the entry a new
//!   fence, drawn as a grant draws one; a demote clears the flag and keeps the fence. One write of
//!   one record under its lock, so no other process sees the key free or held twice in between.
//! - `restore` and `force_release` work on locks (exclusive and shared), not semaphores: a
//!   restore reads the record under a shared `flock` (`Lost` unless the token holds the key; the
//!   time left from the holder's `CLOCK_BOOTTIME` deadline); a force-release removes every holder
//!   and keeps the fence (or raises the high-water mark when the record goes), as a release does.
//! - `acquire` (of every kind) queues waiters FIFO in the record itself, with heartbeats so a dead
//!   waiter is dropped after [`STALE_WAITER`]; the first two waiters block on an inotify watch of
//!   the record file and wake as soon as it changes, the others look every millisecond or so (see
//!   `queue`). A `try_acquire` does not cut in front of live waiters: while any are queued that
//!   would be served before it, it gets `NotAcquired`, even in the instant between a release and
//!   the first waiter taking the key.
//!
//! The directory is created with mode 0700 if it is missing; an existing one must belong to this
//! process's effective user and not be writable by group or others, and must be on a file system
//! known to be local (ext4, xfs, btrfs, tmpfs, …; see `dir`) unless the URL vouches that no other
//! host writes it (`single_host=true`); files are created 0600. So one directory serves the processes of one user on
//! one host, in one time namespace. [`default_dir`] says where locks go when no URL is given, and
//! why. A record deleted while its key is held (by hand, or by a cleaner in a directory that is
//! aged) does let a second holder in: keep lock directories out of aged places such as `/tmp`.

mod clock;
mod dir;
mod doctor;
mod fences;
mod file;
mod io_error;
mod names;
mod queue;
mod record;
mod records;
mod size;
mod sweep;
mod wake;

pub use dir::default_dir;

use clock::BootId;
use dir::Dir;
use file::{Locked, Mode};
use leasehold_core::wait::{held_elsewhere, Waiter};
use leasehold_core::{
    BackendConfig, Config, Error, Key, KeyInfo, LeaseKind, LockBackend, RawLease, Request, Result,
    Token, Ttl,
};
pub use record::MAX_HOLDERS;
use record::{Admit, Holder, Record, Want};
use size::Size;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use sweep::{SWEEP_BATCH, SWEEP_BUDGET, SWEEP_EVERY};

/// A waiter that showed no sign of life for this long is dropped from a key's queue.
pub const STALE_WAITER: Duration = Duration::from_millis(500);

/// A key this backend released less than [`HOT`] ago keeps its record on the next release (the
/// sweep deletes it once idle), so a key taken over and over does not pay for deleting and
/// recreating its record every time; [`RECENT`] slots remember such keys.
const HOT: Duration = Duration::from_secs(1);
const RECENT: usize = 64;

/// Files that format 1 (older Leasehold versions) kept in the directory.
const FORMAT_1_FILES: &[&str] = &[".leasehold-epoch", ".leasehold-epoch.lock"];

/// The local backend. Holds one descriptor of its directory (close-on-exec) and no threads, so it is
/// cheap and safe across `fork()`.
#[derive(Debug)]
pub struct LocalBackend {
    dir: Dir,
    prefix: String,
    io_timeout: Duration,
    boot: BootId,
    /// The directory's fence high-water mark, kept open.
    mark: fences::Mark,
    sweep: Mutex<Sweep>,
    /// Hashes of record names and when this backend last released them.
    recent: Mutex<[(u64, Option<Instant>); RECENT]>,
}

/// Where the gradual sweep of leftover records is.
#[derive(Debug, Default)]
struct Sweep {
    next: Option<Instant>,
    cursor: Option<std::fs::ReadDir>,
}

impl LocalBackend {
    /// Opens the directory a `file://` configuration names, creating it (mode 0700) if it is
    /// missing. `InvalidArgument` if it belongs to another user, is writable by group or others,
    /// is on a file system not known to be local (unless the URL says `single_host=true`), or was
    /// used by an older Leasehold (record format 1).
    pub fn open(config: &Config) -> Result<LocalBackend> {
        let BackendConfig::Local { dir, single_host } = &config.backend else {
            return Err(Error::invalid(format!(
                "the local backend needs a file:// URL, not {}",
                config.describe()
            )));
        };
        let dir = Dir::open(dir, *single_host)?;
        for old in FORMAT_1_FILES {
            if dir.identity_of(old).is_ok() {
                return Err(old_format_error(dir.path(), &dir.join(old), 1));
            }
        }
        Ok(LocalBackend {
            dir,
            prefix: config.prefix.clone(),
            io_timeout: config.io_timeout,
            boot: clock::boot_id()?,
            mark: fences::Mark::default(),
            sweep: Mutex::new(Sweep::default()),
            recent: Mutex::new([(0, None); RECENT]),
        })
    }

    /// The directory holding the record files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Deletes every record file in the directory that keeps nothing but a fence (no live holder,
    /// no live waiter; the fence goes into the directory's high-water mark first, so nothing is
    /// lost) and returns how many it deleted. Releases delete their own record when nobody waits,
    /// and look at a few leftovers (of crashed holders and waiters) on their own, so this is only
    /// needed to clean a large directory at once. Takes time in proportion to the directory.
    pub fn sweep(&self) -> Result<usize> {
        let entries = std::fs::read_dir(self.dir.path())
            .map_err(|e| io_error::io_error("cannot list", self.dir.path(), &e))?;
        let mut deleted = 0;
        for entry in entries.flatten() {
            if let Some(name) = entry.file_name().to_str() {
                if self.sweep_name(name, self.give_up(Instant::now()))? {
                    deleted += 1;
                }
            }
        }
        Ok(deleted)
    }

    /// The record of a lock (exclusive and shared leases share it) or of a semaphore.
    fn record_name(&self, key: &Key, kind: LeaseKind) -> String {
        let start = match kind {
            LeaseKind::Permit(_) => names::SEMAPHORE_PREFIX,
            _ => names::RECORD_PREFIX,
        };
        names::record_file_name(start, key.as_bytes(), &key.prefixed(&self.prefix))
    }

    /// The I/O deadline of one operation started at `start`.
    fn give_up(&self, start: Instant) -> Instant {
        start.checked_add(self.io_timeout).unwrap_or(start)
    }

    fn read(&self, file: &Locked, name: &str) -> Result<Record> {
        let path = self.dir.join(name);
        let (record, damaged) = file
            .read(&path)?
            .into_record()
            .map_err(|format| old_format_error(self.dir.path(), &path, format))?;
        if damaged {
            tracing::warn!(path = %path.display(), fence = record.fence, "damaged lock record treated as free");
        }
        Ok(record)
    }

    /// Makes `token` a holder of `record` (the only one if `exclusive`) until `ttl` after `now_ns`
    /// and returns the new fence.
    fn grant(
        &self,
        record: &mut Record,
        token: Token,
        ttl: Ttl,
        now_ns: u64,
        exclusive: bool,
        give_up: Instant,
    ) -> Result<u64> {
        let fence = self.next_fence(record, give_up)?;
        record.exclusive = exclusive;
        record.holders.push(Holder {
            token,
            deadline_ns: now_ns.saturating_add(ttl_ns(ttl)),
            fence,
        });
        Ok(fence)
    }

    /// Draws the record's next fence (every grant of the key, of any kind, and every promote) and
    /// stores it as the record's last one.
    fn next_fence(&self, record: &mut Record, give_up: Instant) -> Result<u64> {
        // A file without a fence may replace a deleted one: start above every deleted fence.
        let floor = if record.fence == 0 {
            self.mark.get(&self.dir, give_up)?
        } else {
            0
        };
        let fence = fences::next(record.fence, floor, clock::wall_us()?)
            .ok_or_else(|| Error::Internal("the key's fence reached its maximum".into()))?;
        record.fence = fence;
        Ok(fence)
    }

    /// Deletes an idle record (whose `flock` `file` holds) after raising the high-water mark to its
    /// fence, so whoever recreates it starts above.
    fn retire(&self, file: &Locked, name: &str, record: &Record, give_up: Instant) -> Result<()> {
        debug_assert!(record.is_idle());
        // Taken only as proof that the caller holds the record's flock: unlinking without it would
        // race with a writer of the same file.
        let _ = file;
        if record.fence > 0 {
            self.mark.raise(&self.dir, record.fence, give_up)?;
        }
        // The side file first: a crash in between leaves an idle record, which is no harm.
        size::remove(&self.dir, name)?;
        match self.dir.unlink(name) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_error::io_error(
                "cannot delete the record file",
                &self.dir.join(name),
                &e,
            )),
            _ => Ok(()),
        }
    }

    /// Whether this backend released the record `name` less than [`HOT`] ago; notes this release.
    fn released_lately(&self, name: &str) -> bool {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        name.hash(&mut hasher);
        let hash = hasher.finish();
        // try_lock: contended (or held by a parent's thread at fork) just means "not known".
        let Ok(mut recent) = self.recent.try_lock() else {
            return false;
        };
        let now = Instant::now();
        let slot = &mut recent[(hash % RECENT as u64) as usize];
        let lately = slot.0 == hash
            && slot
                .1
                .is_some_and(|t| now.saturating_duration_since(t) < HOT);
        *slot = (hash, Some(now));
        lately
    }

    /// Looks at one directory entry for the sweep: deletes a record that keeps nothing but a fence
    /// (true), or the side file of a semaphore record that is gone.
    fn sweep_name(&self, name: &str, give_up: Instant) -> Result<bool> {
        if names::is_record_file_name(name) {
            return self.sweep_entry(name, false, give_up);
        }
        match size::record_of(name) {
            // Left by a process that deleted the record without knowing side files. A grant may be
            // writing it under the record's flock right now, so the record is created to take that
            // flock, then retired together with the side file if idle.
            Some(record) if self.dir.identity_of(record).is_err() => {
                self.sweep_entry(record, true, give_up)?;
                Ok(false)
            }
            _ => Ok(false),
        }
    }

    /// Looks at one record for the sweep: deletes it if it keeps nothing but a fence. `create`: a
    /// missing record is created (fresh, so idle) to be retired.
    fn sweep_entry(&self, name: &str, create: bool, give_up: Instant) -> Result<bool> {
        // One try at the lock: a record in use is not idle anyway.
        let Ok(Some(file)) = Locked::open(&self.dir, name, create, Mode::Exclusive, Instant::now())
        else {
            return Ok(false);
        };
        let Ok(mut record) = self.read(&file, name) else {
            return Ok(false);
        };
        record.normalize(&self.boot, clock::now_ns()?, stale_ns());
        if !record.is_idle() {
            return Ok(false);
        }
        self.retire(&file, name, &record, give_up)?;
        Ok(true)
    }

    /// A few steps of the gradual sweep, at most once per [`SWEEP_EVERY`]; errors are left to the
    /// next look.
    fn sweep_a_little(&self) {
        // try_lock: another thread is sweeping (or, in a forked child, a parent's thread was).
        let Ok(mut sweep) = self.sweep.try_lock() else {
            return;
        };
        let now = Instant::now();
        if sweep.next.is_some_and(|t| now < t) {
            return;
        }
        sweep.next = now.checked_add(SWEEP_EVERY);
        let end = now.checked_add(SWEEP_BUDGET).unwrap_or(now);
        if sweep.cursor.is_none() {
            sweep.cursor = std::fs::read_dir(self.dir.path()).ok();
        }
        for _ in 0..SWEEP_BATCH {
            let Some(cursor) = sweep.cursor.as_mut() else {
                return;
            };
            match cursor.next() {
                None => {
                    sweep.cursor = None;
                    return;
                }
                Some(Ok(entry)) => {
                    if let Some(name) = entry.file_name().to_str() {
                        let _ = self.sweep_name(name, end);
                    }
                }
                Some(Err(_)) => {}
            }
            if Instant::now() >= end {
                return;
            }
        }
    }

    /// Opens, locks and reads a held lease's record for release, extend, promote and demote:
    /// `Lost` unless `lease` still holds it. `same_kind`: also `InvalidArgument` unless the record
    /// holds the token as the lease's kind (exclusive or shared).
    fn owned_record(
        &self,
        lease: &RawLease,
        same_kind: bool,
        give_up: Instant,
    ) -> Result<(Locked, Record, String, u64)> {
        let name = self.record_name(lease.key(), lease.kind());
        let lost = || {
            Error::Lost(format!(
                "key \"{}\" is no longer held by this {} lease (it expired or was taken over)",
                lease.key(),
                lease.kind().name()
            ))
        };
        let file =
            Locked::open(&self.dir, &name, false, Mode::Exclusive, give_up)?.ok_or_else(lost)?;
        let mut record = self.read(&file, &name)?;
        let now_ns = clock::now_ns()?;
        record.normalize(&self.boot, now_ns, stale_ns());
        if record.holder(lease.token()).is_none() {
            return Err(lost());
        }
        // Reachable with a lease handle that lies about its kind, or after a promote or demote whose
        // outcome the caller never learnt (the token is ours either way).
        let exclusive = lease.kind() == LeaseKind::Exclusive;
        if same_kind
            && !matches!(lease.kind(), LeaseKind::Permit(_))
            && record.exclusive != exclusive
        {
            return Err(Error::invalid(format!(
                "key \"{}\" is held by this token as a{} lease, not as a{} one",
                lease.key(),
                if record.exclusive {
                    "n exclusive"
                } else {
                    " shared"
                },
                if exclusive { "n exclusive" } else { " shared" },
            )));
        }
        Ok((file, record, name, now_ns))
    }
}

fn old_format_error(dir: &Path, file: &Path, format: u32) -> Error {
    let old_files = if format == 1 {
        " and .leasehold-epoch*"
    } else {
        ""
    };
    Error::invalid(format!(
        "{} was written by an older Leasehold (record format {format}), which this version does not \
         read; stop every older Leasehold process that uses {}, then delete the directory's k-*.lock{old_files} \
         files (or use another directory)",
        file.display(),
        dir.display()
    ))
}

/// What a request of `kind` asks of a record.
fn want(kind: LeaseKind) -> Want {
    match kind {
        LeaseKind::Shared => Want::Shared,
        LeaseKind::Permit(p) => Want::Permit(p.get()),
        _ => Want::Exclusive,
    }
}

/// Core checks the kind before a promote or demote; this keeps a permit (whose record has no
/// exclusive holder) from being turned into one by a direct call.
fn only_kind(lease: &RawLease, kind: LeaseKind, what: &str) -> Result<()> {
    if lease.kind() == kind {
        return Ok(());
    }
    Err(Error::invalid(format!(
        "only a{} lease can be {what}; this one is {}",
        if kind == LeaseKind::Shared {
            " shared"
        } else {
            "n exclusive"
        },
        lease.kind().name()
    )))
}

/// The error of a request the record has no room for (see [`MAX_HOLDERS`]).
fn full_error(key: &Key, kind: LeaseKind) -> Error {
    let what = match kind {
        LeaseKind::Permit(_) => "permits of the semaphore",
        _ => "shared leases of the key",
    };
    Error::invalid(format!(
        "{MAX_HOLDERS} {what} \"{key}\" are held: the local backend keeps at most {MAX_HOLDERS} \
         leases per key (use Redis or PostgreSQL for more)"
    ))
}

impl LockBackend for LocalBackend {
    fn name(&self) -> &'static str {
        "local"
    }

    fn diagnose(&self) -> Result<leasehold_core::doctor::Diagnosis> {
        Ok(doctor::diagnose(&self.dir))
    }

    fn try_acquire(&self, request: &Request) -> Result<RawLease> {
        let (key, kind, ttl) = (request.key(), request.kind(), request.ttl());
        let sent = Instant::now();
        let token = Token::generate()?;
        let name = self.record_name(key, kind);
        let give_up = self.give_up(sent);
        let file = Locked::open(&self.dir, &name, true, Mode::Exclusive, give_up)?
            .ok_or_else(|| Error::Internal("record file vanished".into()))?;
        let mut record = self.read(&file, &name)?;
        let now_ns = clock::now_ns()?;
        record.normalize(&self.boot, now_ns, stale_ns());
        let size = Size::check(&self.dir, &file, &name, &record, key, kind)?;
        // Not queued, so behind every live waiter: cutting in would starve them.
        match record.admits(want(kind), None) {
            Admit::Yes => {}
            Admit::No => return Err(held_elsewhere(key)),
            Admit::Full => return Err(full_error(key, kind)),
        }
        if let Some(size) = size {
            size.store(&self.dir, &file, &name)?;
        }
        let exclusive = kind == LeaseKind::Exclusive;
        let fence = self.grant(&mut record, token, ttl, now_ns, exclusive, give_up)?;
        file.write(&mut record, &self.dir.join(&name))?;
        Ok(RawLease::new(key.clone(), token, fence, ttl, sent).with_kind(kind))
    }

    fn waiter<'a>(&'a self, request: &'a Request, end: Instant) -> Result<Box<dyn Waiter + 'a>> {
        let (key, kind, ttl) = (request.key(), request.kind(), request.ttl());
        Ok(Box::new(queue::QueueWaiter::new(
            self, key, kind, ttl, end,
        )?))
    }

    fn release(&self, lease: &mut RawLease) -> Result<()> {
        let give_up = self.give_up(Instant::now());
        // Whatever kind the record gives the token: after a promote or demote of unknown outcome the
        // lease may not know its kind, and its release must still free the key, leaving no entry.
        let (file, mut record, name, _) = self.owned_record(lease, false, give_up)?;
        record.remove_holder(lease.token());
        self.store(&file, &name, &mut record, give_up)?;
        drop(file);
        self.sweep_a_little();
        Ok(())
    }

    fn extend(&self, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        let sent = Instant::now();
        // Of the lease's own kind only: renewing a lease that believes itself exclusive while the
        // record holds it shared would let it write beside readers.
        let (file, mut record, name, now_ns) =
            self.owned_record(lease, true, self.give_up(sent))?;
        if let Some(h) = record.holder_mut(lease.token()) {
            h.deadline_ns = now_ns.saturating_add(ttl_ns(ttl));
        }
        file.write(&mut record, &self.dir.join(&name))?;
        lease.renewed(ttl, sent);
        Ok(())
    }

    /// The holder's entry changes in place under the record's `flock` (its exclusive flag, fence
    /// and deadline), so there is never a moment without it, nor a second entry for the token.
    fn try_promote(&self, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        only_kind(lease, LeaseKind::Shared, "promoted")?;
        let sent = Instant::now();
        let give_up = self.give_up(sent);
        let (file, mut record, name, now_ns) = self.owned_record(lease, true, give_up)?;
        // `owned_record` found the token among the live holders (expired ones are dropped), so
        // any other entry is another live reader.
        if record.holders.len() > 1 {
            return Err(held_elsewhere(lease.key()));
        }
        let fence = self.next_fence(&mut record, give_up)?;
        record.exclusive = true;
        let holder = record
            .holder_mut(lease.token())
            .ok_or_else(|| Error::Internal("the promoted holder vanished".into()))?;
        holder.fence = fence;
        holder.deadline_ns = now_ns.saturating_add(ttl_ns(ttl));
        file.write(&mut record, &self.dir.join(&name))?;
        lease.set_kind(LeaseKind::Exclusive);
        lease.set_fence(fence);
        lease.renewed(ttl, sent);
        Ok(())
    }

    /// As `try_promote`, in place: the flag goes, the fence stays. Queued readers see the write
    /// (the first ones watch the record) and may join; queued writers still wait.
    fn demote(&self, lease: &mut RawLease, ttl: Ttl) -> Result<()> {
        only_kind(lease, LeaseKind::Exclusive, "demoted")?;
        let sent = Instant::now();
        let (file, mut record, name, now_ns) =
            self.owned_record(lease, true, self.give_up(sent))?;
        record.exclusive = false;
        if let Some(h) = record.holder_mut(lease.token()) {
            h.deadline_ns = now_ns.saturating_add(ttl_ns(ttl));
        }
        file.write(&mut record, &self.dir.join(&name))?;
        lease.set_kind(LeaseKind::Shared);
        lease.renewed(ttl, sent);
        Ok(())
    }

    fn inspect(&self, key: &Key, kind: LeaseKind) -> Result<KeyInfo> {
        let name = self.record_name(key, kind);
        let give_up = self.give_up(Instant::now());
        let Some(file) = Locked::open(&self.dir, &name, false, Mode::Shared, give_up)? else {
            return Ok(KeyInfo::new(false, None, None).with_holders(0, false));
        };
        let mut record = self.read(&file, &name)?;
        let now_ns = clock::now_ns()?;
        record.normalize(&self.boot, now_ns, stale_ns());
        let fence = (record.fence > 0).then_some(record.fence);
        let longest = record.holders.iter().map(|h| h.deadline_ns).max();
        let remaining = longest.map(|d| Duration::from_nanos(d.saturating_sub(now_ns)));
        let shared = !record.holders.is_empty()
            && !record.exclusive
            && !matches!(kind, LeaseKind::Permit(_));
        Ok(KeyInfo::new(remaining.is_some(), remaining, fence)
            .with_holders(record.holders.len() as u32, shared))
    }

    /// Locks only (exclusive and shared leases): a permit is not restorable on this backend.
    fn restore(&self, key: &Key, token: Token) -> Result<RawLease> {
        let sent = Instant::now();
        let name = self.record_name(key, LeaseKind::Exclusive);
        let lost = || {
            Error::Lost(format!(
                "key \"{key}\" is not held by that token (it expired, was released or taken over)"
            ))
        };
        let file = Locked::open(&self.dir, &name, false, Mode::Shared, self.give_up(sent))?
            .ok_or_else(lost)?;
        let mut record = self.read(&file, &name)?;
        let now_ns = clock::now_ns()?;
        // Looked at, not written: a shared flock lets restores and inspects run side by side.
        record.normalize(&self.boot, now_ns, stale_ns());
        let holder = *record.holder(token).ok_or_else(lost)?;
        let kind = if record.exclusive {
            LeaseKind::Exclusive
        } else {
            LeaseKind::Shared
        };
        let left = Duration::from_nanos(holder.deadline_ns.saturating_sub(now_ns));
        Ok(RawLease::restored(key.clone(), token, holder.fence, left, sent).with_kind(kind))
    }

    /// One file per record, beside the locks (see `records`).
    fn records(&self) -> Option<&dyn leasehold_core::records::RecordStore> {
        Some(self)
    }

    /// Locks only, as `restore`: every holder of the lock, exclusive or shared, is removed.
    fn force_release(&self, key: &Key) -> Result<bool> {
        let give_up = self.give_up(Instant::now());
        let name = self.record_name(key, LeaseKind::Exclusive);
        let Some(file) = Locked::open(&self.dir, &name, false, Mode::Exclusive, give_up)? else {
            return Ok(false);
        };
        let mut record = self.read(&file, &name)?;
        record.normalize(&self.boot, clock::now_ns()?, stale_ns());
        let held = !record.holders.is_empty();
        record.holders.clear();
        record.exclusive = false;
        self.store(&file, &name, &mut record, give_up)?;
        Ok(held)
    }
}

impl LocalBackend {
    /// Writes a record after a holder left, or deletes it when it keeps nothing but a fence.
    fn store(
        &self,
        file: &Locked,
        name: &str,
        record: &mut Record,
        give_up: Instant,
    ) -> Result<()> {
        // Nobody holds or waits: the record keeps nothing but the fence, which the high-water mark
        // keeps as well, so it goes now and an unused key leaves nothing behind. A key this backend
        // takes over and over keeps it until the sweep comes by.
        let retired = record.is_idle()
            && !self.released_lately(name)
            && match self.retire(file, name, record, give_up) {
                Ok(()) => true,
                Err(e) => {
                    tracing::debug!(error = %e, "record kept; a later sweep deletes it");
                    false
                }
            };
        if !retired {
            file.write(record, &self.dir.join(name))?;
        }
        Ok(())
    }
}

fn ttl_ns(ttl: Ttl) -> u64 {
    ttl.as_millis().saturating_mul(1_000_000)
}

fn stale_ns() -> u64 {
    STALE_WAITER.as_nanos() as u64
}
