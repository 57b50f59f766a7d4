//! The waiter of `acquire` with a wait: a FIFO queue of waiters kept in the key's record, under the same `flock`.
//!
//! A waiter takes a ticket at the tail and may take the key only when the waiters ahead of it are
//! served too (see `Record::admits`): an exclusive waiter only when the key is free and it is first,
//! a shared one when no exclusive holder nor exclusive waiter is ahead of it (writer preference),
//! a permit when the holders plus the waiters ahead leave one. So newcomers (including
//! `try_acquire`) never cut in, every waiter gets its turn in order, and readers queued together
//! (or permits freed together) go in together.
//! Waiters refresh a heartbeat in their entry every [`HEARTBEAT`]; an entry not refreshed for
//! [`crate::STALE_WAITER`] belongs to a dead (or stopped) waiter and is dropped by whoever looks
//! next, so a crashed process cannot block a queue. A dropped waiter that was only slow notices its
//! ticket is gone and queues again at the tail.
//!
//! The first [`WATCHERS`] waiters block on an inotify watch of the record file (see `wake`) and wake
//! as soon as the holder releases, or when its lease runs out; the rest look every ~1 ms, which is
//! soon enough since they only have to notice that they moved up.

use crate::file::{Locked, Mode};
use crate::record::Admit;
use crate::size::Size;
use crate::wake::Watch;
use crate::{clock, full_error, stale_ns, want, LocalBackend};
use leasehold_core::retry::{Backoff, Retry};
use leasehold_core::wait::{Turn, Waiter, Wake, Woken};
use leasehold_core::{Error, Key, LeaseKind, RawLease, Result, Token, Ttl};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How often a waiter refreshes its entry; well below [`crate::STALE_WAITER`].
const HEARTBEAT: Duration = Duration::from_millis(50);
/// How many waiters at the front of a queue block on a wake-up rather than look periodically.
const WATCHERS: usize = 2;
/// The pace of a waiter behind the watchers: it only has to notice that it moved up.
const LOOK_LATER: Retry = Retry::steady(Duration::from_micros(1500));
/// The pace of a watcher whose inotify watch could not be made: it looks as a watch would wake it.
const POLL_SOON: Retry = Retry::steady(Duration::from_micros(300));

/// A waiter in a key's queue, as core's wait loop drives it. It leaves the queue when it is
/// dropped holding a ticket (the wait ended by an error).
pub(crate) struct QueueWaiter<'a> {
    backend: &'a LocalBackend,
    key: &'a Key,
    kind: LeaseKind,
    ttl: Ttl,
    /// The wait's end: no I/O runs past it plus one I/O timeout.
    end: Instant,
    token: Token,
    name: String,
    path: PathBuf,
    ticket: Option<u64>,
    /// With the identity of the file it watches: a record deleted and created again is a new file.
    watch: Option<(Watch, (u64, u64))>,
    watch_failed: bool,
    last_beat: Instant,
    /// What the latest attempt saw: our place in the queue, and the record file's identity.
    position: Option<usize>,
    file_id: (u64, u64),
    look_later: Backoff,
    poll_soon: Backoff,
}

impl<'a> QueueWaiter<'a> {
    pub(crate) fn new(
        backend: &'a LocalBackend,
        key: &'a Key,
        kind: LeaseKind,
        ttl: Ttl,
        end: Instant,
    ) -> Result<Self> {
        let name = backend.record_name(key, kind);
        Ok(QueueWaiter {
            path: backend.dir.join(&name),
            name,
            backend,
            key,
            kind,
            ttl,
            end,
            token: Token::generate()?,
            ticket: None,
            watch: None,
            watch_failed: false,
            last_beat: Instant::now(),
            position: None,
            file_id: (0, 0),
            look_later: LOOK_LATER.backoff(),
            poll_soon: POLL_SOON.backoff(),
        })
    }
}

impl Waiter for QueueWaiter<'_> {
    fn attempt(&mut self, last: bool, _block_until: Instant) -> Result<Turn> {
        let backend = self.backend;
        let (want, exclusive) = (want(self.kind), self.kind == LeaseKind::Exclusive);
        if let Some((w, _)) = &self.watch {
            w.drain();
        }
        let sent = Instant::now();
        // No I/O may run past the wait plus one I/O timeout.
        let give_up = backend
            .give_up(sent)
            .min(backend.give_up(self.end).max(sent));
        let file = Locked::open(&backend.dir, &self.name, true, Mode::Exclusive, give_up)?
            .ok_or_else(|| Error::Internal("record file vanished".into()))?;
        if self.watch.as_ref().is_some_and(|(_, id)| *id != file.id()) {
            self.watch = None;
        }
        self.file_id = file.id();
        let mut record = backend.read(&file, &self.name)?;
        let now_ns = clock::now_ns()?;
        let mut dirty = record.normalize(&backend.boot, now_ns, stale_ns());
        if let Some(t) = self.ticket {
            if record.position(t).is_none() {
                // Dropped as stale while we were descheduled: queue again.
                self.ticket = None;
            }
        }
        let size = match Size::check(
            &backend.dir,
            &file,
            &self.name,
            &record,
            self.key,
            self.kind,
        ) {
            Ok(size) => size,
            // Another size is refused at once, and the wait leaves the queue with it.
            Err(e) => {
                if let Some(t) = self.ticket.take() {
                    dirty |= record.remove_waiter(t);
                }
                if dirty {
                    file.write(&mut record, &self.path)?;
                }
                return Err(e);
            }
        };
        match record.admits(want, self.ticket) {
            Admit::Yes => {
                if let Some(size) = size {
                    size.store(&backend.dir, &file, &self.name)?;
                }
                if let Some(t) = self.ticket.take() {
                    record.remove_waiter(t);
                }
                let (token, ttl) = (self.token, self.ttl);
                let fence = backend.grant(&mut record, token, ttl, now_ns, exclusive, give_up)?;
                file.write(&mut record, &self.path)?;
                let lease = RawLease::new(self.key.clone(), token, fence, ttl, sent);
                return Ok(Turn::Granted(lease.with_kind(self.kind)));
            }
            Admit::Full => {
                if let Some(t) = self.ticket.take() {
                    dirty |= record.remove_waiter(t);
                }
                if dirty {
                    file.write(&mut record, &self.path)?;
                }
                return Err(full_error(self.key, self.kind));
            }
            Admit::No => {}
        }
        let now = Instant::now();
        if last {
            if let Some(t) = self.ticket.take() {
                dirty |= record.remove_waiter(t);
            }
            if dirty {
                file.write(&mut record, &self.path)?;
            }
            return Ok(Turn::NotYet { holder_left: None });
        }
        match self.ticket {
            None => {
                self.ticket = record.enqueue(now_ns, exclusive);
                dirty |= self.ticket.is_some();
                self.last_beat = now;
            }
            // Renewed at half the heartbeat: core wakes us at least every heartbeat.
            Some(t) if now.saturating_duration_since(self.last_beat) >= HEARTBEAT / 2 => {
                record.heartbeat(t, now_ns);
                dirty = true;
                self.last_beat = now;
            }
            Some(_) => {}
        }
        if dirty {
            file.write(&mut record, &self.path)?;
        }
        self.position = self.ticket.and_then(|t| record.position(t));
        // The first holder to run out may let us in (a crashed holder frees its share only by
        // running out).
        let holder_left = record
            .holders
            .iter()
            .map(|h| h.deadline_ns)
            .min()
            .map(|d| Duration::from_nanos(d.saturating_sub(now_ns)));
        Ok(Turn::NotYet { holder_left })
    }

    /// Sleeps until something may have changed: the first [`WATCHERS`] waiters until a wake-up of
    /// the record file, the others a short while, since they only have to notice that they moved
    /// up.
    fn block(&mut self, wake: Wake) -> Result<Woken> {
        let nap = wake.left();
        if self.position.is_some_and(|p| p < WATCHERS) {
            if self.watch.is_none() && !self.watch_failed {
                self.watch = Watch::new(&self.path).map(|w| (w, self.file_id));
                self.watch_failed = self.watch.is_none();
                if self.watch.is_some() {
                    // A release between our look and the new watch would go unseen: look again
                    // first.
                    return Ok(Woken::Attempt);
                }
            }
            match &self.watch {
                Some((w, _)) if w.wait(nap) => return Ok(Woken::Attempt),
                Some(_) => return Ok(Woken::Quiet),
                None => std::thread::sleep(nap.min(self.poll_soon.next_delay())),
            }
        } else {
            std::thread::sleep(nap.min(self.look_later.next_delay()));
        }
        // The short naps of a waiter without a watch: it looks after each (they are far below
        // core's slices).
        Ok(Woken::Attempt)
    }

    fn heartbeat(&self) -> Option<Duration> {
        Some(HEARTBEAT)
    }
}

impl Drop for QueueWaiter<'_> {
    fn drop(&mut self) {
        let Some(ticket) = self.ticket else {
            return;
        };
        // Best effort and without waiting (the caller is already returning an error): a ticket left
        // behind goes stale and is dropped by the next waiter.
        let now = Instant::now();
        let dir = &self.backend.dir;
        let Ok(Some(file)) = Locked::open(dir, &self.name, false, Mode::Exclusive, now) else {
            return;
        };
        let Ok(mut record) = self.backend.read(&file, &self.name) else {
            return;
        };
        if record.remove_waiter(ticket) {
            let _ = file.write(&mut record, &self.path);
        }
    }
}
