//! `acquire` with a wait: a FIFO queue of waiters kept in the key's record, under the same `flock`.
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
use crate::wake::Watch;
use crate::{clock, full_error, stale_ns, want, LocalBackend};
use leasehold_core::wait::{held_elsewhere, Backoff};
use leasehold_core::{Error, Key, LeaseKind, RawLease, Result, Token, Ttl};
use std::time::{Duration, Instant};

/// How often a waiter refreshes its entry; well below [`crate::STALE_WAITER`].
const HEARTBEAT: Duration = Duration::from_millis(50);
/// How many waiters at the front of a queue block on a wake-up rather than look periodically.
const WATCHERS: usize = 2;

pub(crate) fn acquire(
    backend: &LocalBackend,
    key: &Key,
    kind: LeaseKind,
    ttl: Ttl,
    wait: Duration,
) -> Result<RawLease> {
    let start = Instant::now();
    let wait_end = start.checked_add(wait).unwrap_or(start);
    // No I/O may run past the wait plus one I/O timeout.
    let hard_end = backend.give_up(wait_end);
    let token = Token::generate()?;
    let name = backend.record_name(key, kind);
    let (want, exclusive) = (want(kind), kind == LeaseKind::Exclusive);
    let path = backend.dir.join(&name);
    let mut waiter = Waiter {
        backend,
        name: &name,
        ticket: None,
    };
    // With the identity of the file it watches: a record deleted and created again is a new file.
    let mut watch: Option<(Watch, (u64, u64))> = None;
    let mut watch_failed = false;
    let mut last_beat = start;
    let mut look_later = Backoff::new(Duration::from_micros(1500), Duration::from_micros(1500));
    let mut poll_soon = Backoff::new(Duration::from_micros(300), Duration::from_micros(300));
    let mut looks = 0u32;
    loop {
        if looks > 0 {
            leasehold_core::stats::note_retry();
        }
        looks = looks.saturating_add(1);
        if let Some((w, _)) = &watch {
            w.drain();
        }
        let sent = Instant::now();
        let give_up = backend.give_up(sent).min(hard_end.max(sent));
        let file = Locked::open(&backend.dir, &name, true, Mode::Exclusive, give_up)?
            .ok_or_else(|| Error::Internal("record file vanished".into()))?;
        if watch.as_ref().is_some_and(|(_, id)| *id != file.id()) {
            watch = None;
        }
        let file_id = file.id();
        let mut record = backend.read(&file, &name)?;
        let now_ns = clock::now_ns()?;
        let mut dirty = record.normalize(&backend.boot, now_ns, stale_ns());
        if let Some(t) = waiter.ticket {
            if record.position(t).is_none() {
                // Dropped as stale while we were descheduled: queue again.
                waiter.ticket = None;
            }
        }
        match record.admits(want, waiter.ticket) {
            Admit::Yes => {
                if let Some(t) = waiter.ticket.take() {
                    record.remove_waiter(t);
                }
                let fence = backend.grant(&mut record, token, ttl, now_ns, exclusive, give_up)?;
                file.write(&mut record, &path)?;
                return Ok(RawLease::new(key.clone(), token, fence, ttl, sent).with_kind(kind));
            }
            Admit::Full => {
                if let Some(t) = waiter.ticket.take() {
                    dirty |= record.remove_waiter(t);
                }
                if dirty {
                    file.write(&mut record, &path)?;
                }
                return Err(full_error(key, kind));
            }
            Admit::No => {}
        }
        let now = Instant::now();
        if now >= wait_end {
            if let Some(t) = waiter.ticket.take() {
                dirty |= record.remove_waiter(t);
            }
            if dirty {
                file.write(&mut record, &path)?;
            }
            return Err(held_elsewhere(key));
        }
        match waiter.ticket {
            None => {
                waiter.ticket = record.enqueue(now_ns, exclusive);
                dirty |= waiter.ticket.is_some();
                last_beat = now;
            }
            Some(t) if now.saturating_duration_since(last_beat) >= HEARTBEAT => {
                record.heartbeat(t, now_ns);
                dirty = true;
                last_beat = now;
            }
            Some(_) => {}
        }
        if dirty {
            file.write(&mut record, &path)?;
        }
        let position = waiter.ticket.and_then(|t| record.position(t));
        // The first holder to run out may let us in.
        let holder_left = record
            .holders
            .iter()
            .map(|h| h.deadline_ns)
            .min()
            .map(|d| Duration::from_nanos(d.saturating_sub(now_ns)));
        drop(file);

        // Sleep until something may have changed: never past the wait, the next heartbeat, or the
        // earliest holder expiry (a crashed holder frees its share only by running out).
        let mut nap = wait_end
            .saturating_duration_since(now)
            .min(HEARTBEAT.saturating_sub(now.saturating_duration_since(last_beat)));
        if let Some(left) = holder_left {
            nap = nap.min(left.saturating_add(Duration::from_micros(100)));
        }
        if position.is_some_and(|p| p < WATCHERS) {
            if watch.is_none() && !watch_failed {
                watch = Watch::new(&path).map(|w| (w, file_id));
                watch_failed = watch.is_none();
                if watch.is_some() {
                    // A release between our look and the new watch would go unseen: look again first.
                    continue;
                }
            }
            match &watch {
                Some((w, _)) => w.wait(nap),
                None => std::thread::sleep(nap.min(poll_soon.next_delay())),
            }
        } else {
            std::thread::sleep(nap.min(look_later.next_delay()));
        }
    }
}

/// A queued waiter; leaves the queue if `acquire` ends by an error.
struct Waiter<'a> {
    backend: &'a LocalBackend,
    name: &'a str,
    ticket: Option<u64>,
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        let Some(ticket) = self.ticket else {
            return;
        };
        // Best effort and without waiting (the caller is already returning an error): a ticket left
        // behind goes stale and is dropped by the next waiter.
        let now = Instant::now();
        let dir = &self.backend.dir;
        let Ok(Some(file)) = Locked::open(dir, self.name, false, Mode::Exclusive, now) else {
            return;
        };
        let Ok(mut record) = self.backend.read(&file, self.name) else {
            return;
        };
        if record.remove_waiter(ticket) {
            let _ = file.write(&mut record, &dir.join(self.name));
        }
    }
}
