//! The waiter of every acquire (exclusive, shared, a semaphore's permit): a queue by revision,
//! woken by a watch, as etcd's own lock recipe does.
//!
//! A waiter refused at its first attempt puts an entry under the key's queue
//! (`{prefix}queue/{len}/{key}/{token}`), attached to an etcd lease of its own with a short TTL
//! ([`PLACE_TTL`], renewed by each attempt, at least every [`HEARTBEAT`]): a waiter that dies
//! leaves the queue by itself within seconds. The entry's `create_revision` is its place. Each
//! waiter watches only the entry just before its own (or, at the head, the holder's key) for its
//! deletion, so a release wakes one waiter, never a herd, and they are served in the order they
//! came. An attempt by a queued waiter succeeds only while no older entry is there; a newcomer's
//! only while the queue is empty (a reader's: while no writer is queued, since readers queue only
//! behind a writer, and a reader's entry left behind by a failed leave must not hold readers up).
//!
//! A semaphore's waiters queue apart (`{prefix}pqueue/{len}/{key}/{token}`) and are admitted by
//! rank: an attempt takes a permit while fewer older entries wait than permits are free (a
//! newcomer: while the queue is shorter than the free permits), so several permits freed at once
//! let several waiters in without each waiting for the one before to be served, yet nobody
//! overtakes an older waiter. The head watches the semaphore's holders for a deletion (a permit
//! released or expired), every other waiter its predecessor's entry, as for locks: one release
//! wakes the head alone, and each grant (its entry leaving) wakes the next.
//!
//! Core looks for interrupts every 50 ms, so a block lasts one slice at most. The watch starts from
//! the revision of the waiter's last look, so nothing that happened since is missed, whatever the
//! slices, and the waiter keeps it open across slices on a connection of its own
//! ([`crate::gateway::HeldWatch`]), closed when it reports something (the gateway's watch has no
//! cancel; the closed connection ends it).
//!
//! The holder's etcd lease is granted at the first attempt and renewed before each later one, so
//! a grant is valid from the send of that renewal.

use crate::gateway::HeldWatch;
use crate::{EtcdBackend, Held, Holding, Take, Who};
use leasehold_core::retry::Retry;
use leasehold_core::wait::{Turn, Waiter, Wake, Woken};
use leasehold_core::{Deadline, Error, Key, LeaseKind, RawLease, Result, Token, Ttl};
use std::time::{Duration, Instant};

/// The TTL of a waiter's place: a dead waiter is out of the line this long after its last attempt
/// (at most; etcd may round it up to its minimum).
const PLACE_TTL: Duration = Duration::from_secs(3);

/// How often a queued waiter renews its place.
const HEARTBEAT: Duration = Duration::from_secs(1);

/// A failed watch is opened again after this pause (the next attempt goes to another member).
const WATCH_AGAIN: Retry = Retry::steady(Duration::from_millis(20));

/// What a waiter watches for a deletion: a key (or the range up to the second, exclusive), from
/// a revision.
type Target = (Vec<u8>, Option<Vec<u8>>, i64);

struct Place {
    entry: Vec<u8>,
    revision: i64,
    lease: i64,
    renewed: Instant,
}

pub(crate) struct QueueWaiter<'a> {
    backend: &'a EtcdBackend,
    key: &'a Key,
    kind: LeaseKind,
    ttl: Ttl,
    token: Token,
    /// The whole wait's bound: its end plus one connect and I/O.
    deadline: Deadline,
    /// The etcd lease a grant will be attached to, and when its grant or last renewal was sent.
    held: Option<(Held, Instant)>,
    place: Option<Place>,
    /// What to watch for a deletion (a key, or a range), and from which revision.
    watch: Option<Target>,
    /// The watch held open across slices, and what it watches.
    held_watch: Option<(HeldWatch, Target)>,
}

impl<'a> QueueWaiter<'a> {
    pub(crate) fn new(
        backend: &'a EtcdBackend,
        key: &'a Key,
        kind: LeaseKind,
        ttl: Ttl,
        end: Instant,
    ) -> Result<Self> {
        Ok(QueueWaiter {
            backend,
            key,
            kind,
            ttl,
            token: Token::generate()?,
            deadline: Deadline::for_acquire_until(end, backend.connect_timeout, backend.io_timeout),
            held: None,
            place: None,
            watch: None,
            held_watch: None,
        })
    }

    /// The holder's etcd lease, granted or renewed now.
    fn holder_lease(&mut self) -> Result<(Held, Instant)> {
        let sent = Instant::now();
        if let Some((held, _)) = self.held {
            match self.backend.renew(held.lease, self.deadline) {
                Ok(()) => {
                    self.held = Some((held, sent));
                    return Ok((held, sent));
                }
                Err(Error::Lost(_)) => self.held = None,
                Err(error) => return Err(error),
            }
        }
        let held = self.backend.grant(self.ttl, self.deadline)?;
        self.held = Some((held, sent));
        Ok((held, sent))
    }

    /// Renews the waiter's place when it is due; a place whose etcd lease ended is gone.
    fn keep_place(&mut self) -> Result<()> {
        let Some(place) = &mut self.place else {
            return Ok(());
        };
        if place.renewed.elapsed() < HEARTBEAT {
            return Ok(());
        }
        let sent = Instant::now();
        match self.backend.renew(place.lease, self.deadline) {
            Ok(()) => place.renewed = sent,
            Err(Error::Lost(_)) => self.place = None,
            Err(error) => return Err(error),
        }
        Ok(())
    }

    /// Joins the queue: an entry on an etcd lease of its own. Its revision is the place.
    fn join(&mut self) -> Result<()> {
        let sent = Instant::now();
        let ttl = Ttl::new(PLACE_TTL)?;
        let lease = self.backend.grant(ttl, self.deadline)?.lease;
        let prefix = &self.backend.prefix;
        let entry = match self.kind {
            LeaseKind::Permit(_) => crate::keys::entry(
                &crate::keys::permit_queue(prefix, self.key),
                self.token.as_str(),
            ),
            kind => {
                let letter = match kind {
                    LeaseKind::Shared => crate::keys::READER,
                    _ => crate::keys::WRITER,
                };
                let queue = crate::keys::queue(prefix, self.key);
                crate::keys::entry(&queue, &format!("{letter}{}", self.token.as_str()))
            }
        };
        let answer = self.backend.call(
            "/v3/kv/put",
            serde_json::json!({"key": crate::b64(&entry), "value": "",
                "lease": lease.to_string(), "prev_kv": true}),
            crate::Resend::Safe,
            self.deadline,
        );
        // The place is the entry's create_revision: this put's revision, or, when a first send
        // whose answer was lost wrote it already, that one's.
        let created = |a: &serde_json::Value| {
            crate::number(&a["prev_kv"]["create_revision"]).or_else(|| crate::revision(a))
        };
        let revision = match answer.map(|a| created(&a)) {
            Ok(Some(revision)) => revision,
            Ok(None) => {
                self.backend.revoke(lease, self.deadline);
                return Err(Error::Unavailable("etcd: a put without a revision".into()));
            }
            Err(error) => {
                self.backend.revoke(lease, self.deadline);
                return Err(error);
            }
        };
        self.place = Some(Place {
            entry,
            revision,
            lease,
            renewed: sent,
        });
        Ok(())
    }

    /// Out of the line, and the holder's etcd lease ended (with the key, if an attempt whose
    /// answer was lost took it).
    fn leave(&mut self) {
        let deadline = self.deadline.min(Deadline::for_call(
            self.backend.connect_timeout,
            self.backend.io_timeout,
        ));
        if let Some(place) = self.place.take() {
            self.backend.revoke(place.lease, deadline);
        }
        if let Some((held, _)) = self.held.take() {
            self.backend.revoke(held.lease, deadline);
        }
    }
}

impl QueueWaiter<'_> {
    /// Waits on the held watch of `target` (opened now if it watches something else) until
    /// `until`. A watch that reported something is closed: the attempt after it may pick another
    /// target, and the next one starts from that attempt's look.
    fn held(&mut self, target: Target, until: Deadline) -> Result<bool> {
        let gateway = &self.backend.gateway;
        if self.held_watch.as_ref().is_none_or(|(_, t)| *t != target) {
            self.held_watch = None;
            if until.is_past() {
                return Ok(false);
            }
            let (key, end, from) = &target;
            let watch = gateway.open_watch(key, end.as_deref(), *from, until)?;
            self.held_watch = Some((watch, target));
        }
        let Some((watch, _)) = &mut self.held_watch else {
            return Ok(false);
        };
        let woken = gateway.wait_deletion(watch, until);
        if !matches!(woken, Ok(false)) {
            self.held_watch = None;
        }
        woken
    }
}

impl Waiter for QueueWaiter<'_> {
    fn attempt(&mut self, last: bool, _block_until: Instant) -> Result<Turn> {
        let (held, sent) = self.holder_lease()?;
        self.keep_place()?;
        let who = match &self.place {
            Some(place) => Who::Queued {
                entry: &place.entry,
                revision: place.revision,
            },
            None => Who::Newcomer,
        };
        let (key, token, deadline) = (self.key, self.token, self.deadline);
        let take = match self.kind {
            LeaseKind::Permit(permits) => {
                self.backend
                    .take_slot(key, permits.get(), token, held, who, deadline)?
            }
            kind => match self.backend.take(key, kind, token, held, who, deadline)? {
                Take::Granted(created) => {
                    let name = self.backend.lock_name(key, kind, token);
                    Take::Granted(Holding::new(name, token, held, created))
                }
                Take::Refused {
                    revision,
                    queue,
                    exclusive_held,
                } => Take::Refused {
                    revision,
                    queue,
                    exclusive_held,
                },
            },
        };
        match take {
            Take::Granted(holding) => {
                self.held = None;
                // The place's entry left with the grant; its etcd lease ends by itself soon
                // (revoking it would cost the new holder a round trip).
                self.place = None;
                let lease = holding.lease(key, self.kind, token, self.ttl, sent);
                Ok(Turn::Granted(lease))
            }
            Take::Refused {
                revision,
                queue,
                exclusive_held,
            } => {
                if last {
                    self.leave();
                    return Ok(Turn::NotYet { holder_left: None });
                }
                // A place whose etcd lease ended is out of the line: join again, at the end.
                if let Some(place) = &self.place {
                    if !queue.iter().any(|(entry, _)| *entry == place.entry) {
                        self.place = None;
                    }
                }
                if self.place.is_none() {
                    self.join()?;
                }
                let mine = self.place.as_ref().map_or(i64::MAX, |p| p.revision);
                // The entry just before ours, as the attempt saw the queue; none: we are next,
                // and wait for the exclusive holder's key to go, or, for a writer that only
                // shared holders keep out, for any of them to go.
                let before = queue
                    .into_iter()
                    .filter(|(_, created)| *created < mine)
                    .max_by_key(|(_, created)| *created)
                    .map(|(key, _)| key);
                let prefix = &self.backend.prefix;
                self.watch = Some(match before {
                    Some(entry) => (entry, None, revision + 1),
                    // A semaphore's head: any holder that goes frees a permit for it.
                    None if matches!(self.kind, LeaseKind::Permit(_)) => {
                        let permits = crate::keys::permits(prefix, self.key);
                        let end = crate::keys::range_end(&permits);
                        (permits, Some(end), revision + 1)
                    }
                    None if self.kind == LeaseKind::Exclusive && !exclusive_held => {
                        let readers = crate::keys::readers(prefix, self.key);
                        let end = crate::keys::range_end(&readers);
                        (readers, Some(end), revision + 1)
                    }
                    None => (crate::keys::lock(prefix, self.key), None, revision + 1),
                });
                Ok(Turn::NotYet { holder_left: None })
            }
        }
    }

    fn block(&mut self, wake: Wake) -> Result<Woken> {
        let until = Deadline::at(wake.until).min(self.deadline);
        let Some(target) = self.watch.clone() else {
            std::thread::sleep(until.remaining());
            return Ok(Woken::Quiet);
        };
        let woken = self.held(target, until);
        match woken {
            Ok(true) => Ok(Woken::Attempt),
            Ok(false) => Ok(Woken::Quiet),
            Err(Error::Unavailable(_)) => {
                // This member could not watch; the next attempt tries the next one.
                WATCH_AGAIN.start(until).pause();
                Ok(Woken::Attempt)
            }
            Err(error) => Err(error),
        }
    }

    fn give_up(&mut self, error: Error) -> Result<RawLease> {
        self.leave();
        Err(error)
    }

    fn heartbeat(&self) -> Option<Duration> {
        self.place.as_ref().map(|_| HEARTBEAT)
    }
}

impl Drop for QueueWaiter<'_> {
    fn drop(&mut self) {
        self.leave();
    }
}
