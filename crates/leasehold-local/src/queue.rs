//! `acquire` with a wait: a FIFO queue of waiters kept in the key's record, under the same `flock`.
//!
//! A waiter takes a ticket at the tail and may take the key only when it is free and its ticket is
//! first, so newcomers (including `try_acquire`) never cut in and every waiter gets its turn in order.
//! Waiters refresh a heartbeat in their entry every [`HEARTBEAT`]; an entry not refreshed for
//! [`crate::STALE_WAITER`] belongs to a dead (or stopped) waiter and is dropped by whoever looks
//! next, so a crashed process cannot block a queue. A dropped waiter that was only slow notices its
//! ticket is gone and queues again at the tail.
//!
//! The first [`WATCHERS`] waiters block on an inotify watch of the record file (see `wake`) and wake
//! as soon as the holder releases, or when its lease runs out; the rest look every ~1 ms, which is
//! soon enough since they only have to notice that they moved up.

use crate::file::{Locked, Mode};
use crate::wake::Watch;
use crate::{clock, stale_ns, LocalBackend};
use leasehold_core::wait::{held_elsewhere, Backoff};
use leasehold_core::{Error, Key, RawLease, Result, Token, Ttl};
use std::path::Path;
use std::time::{Duration, Instant};

/// How often a waiter refreshes its entry; well below [`crate::STALE_WAITER`].
const HEARTBEAT: Duration = Duration::from_millis(50);
/// How many waiters at the front of a queue block on a wake-up rather than look periodically.
const WATCHERS: usize = 2;

pub(crate) fn acquire(
    backend: &LocalBackend,
    key: &Key,
    ttl: Ttl,
    wait: Duration,
) -> Result<RawLease> {
    let start = Instant::now();
    let wait_end = start.checked_add(wait).unwrap_or(start);
    // No I/O may run past the wait plus one I/O timeout.
    let hard_end = backend.give_up(wait_end);
    let token = Token::generate()?;
    let path = backend.record_path(key);
    let mut waiter = Waiter {
        backend,
        path: &path,
        ticket: None,
    };
    let mut watch: Option<Watch> = None;
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
        if let Some(w) = &watch {
            w.drain();
        }
        let sent = Instant::now();
        let give_up = backend.give_up(sent).min(hard_end.max(sent));
        let file = Locked::open(&path, true, Mode::Exclusive, give_up)?
            .ok_or_else(|| Error::Internal("record file vanished".into()))?;
        let mut record = backend.read(&file, &path)?;
        let now_ns = clock::now_ns()?;
        let mut dirty = record.normalize(backend.epoch, now_ns, stale_ns());
        if let Some(t) = waiter.ticket {
            if record.position(t).is_none() {
                // Dropped as stale while we were descheduled: queue again.
                waiter.ticket = None;
            }
        }
        let first = record.waiters.first().map(|w| w.ticket);
        if record.holder.is_none() && (first.is_none() || first == waiter.ticket) {
            if let Some(t) = waiter.ticket.take() {
                record.remove_waiter(t);
            }
            let fence = backend.grant(&mut record, token, ttl, now_ns)?;
            file.write(&mut record, &path)?;
            return Ok(RawLease::new(key.clone(), token, fence, ttl, sent));
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
                waiter.ticket = record.enqueue(now_ns);
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
        let holder_left = record
            .holder
            .map(|h| Duration::from_nanos(h.deadline_ns.saturating_sub(now_ns)));
        drop(file);

        // Sleep until something may have changed: never past the wait, the next heartbeat, or the
        // holder's expiry (a crashed holder frees the key only by running out).
        let mut nap = wait_end
            .saturating_duration_since(now)
            .min(HEARTBEAT.saturating_sub(now.saturating_duration_since(last_beat)));
        if let Some(left) = holder_left {
            nap = nap.min(left.saturating_add(Duration::from_micros(100)));
        }
        if position.is_some_and(|p| p < WATCHERS) {
            if watch.is_none() && !watch_failed {
                watch = Watch::new(&path);
                watch_failed = watch.is_none();
                if watch.is_some() {
                    // A release between our look and the new watch would go unseen: look again first.
                    continue;
                }
            }
            match &watch {
                Some(w) => w.wait(nap),
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
    path: &'a Path,
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
        let Ok(Some(file)) = Locked::open(self.path, false, Mode::Exclusive, now) else {
            return;
        };
        let Ok(mut record) = self.backend.read(&file, self.path) else {
            return;
        };
        if record.remove_waiter(ticket) {
            let _ = file.write(&mut record, self.path);
        }
    }
}
