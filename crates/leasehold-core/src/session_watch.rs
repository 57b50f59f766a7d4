//! How a backend whose lease lives in a database session tells core, with no round trip, that the
//! session may have ended.
//!
//! A PostgreSQL advisory lock or a MySQL named lock belongs to a session: the server frees it the
//! moment the session ends (an administrator's `pg_terminate_backend` or `KILL CONNECTION`, a
//! shutdown or restart, a failover whose old primary closes its connections) and grants the key to
//! the next client a few milliseconds later. Before that, the server's goodbye (an error message,
//! then the closed connection) is on its way to the holder's socket: it reaches the holder one
//! network latency after the end, while another client needs a round trip to be granted the key.
//! So a holder that looks at its socket before relying on the lease stops in time, as long as the
//! goodbye is not delayed (a lost segment) and the connection is closed at all (a host or network
//! that vanishes closes nothing: the TTL and the dead-peer bounds still cover that).
//!
//! Nothing is asked on a held session between calls, so whatever arrives on it then was not asked
//! for: the goodbye, or something harmless (a notice, a parameter's new value). Which one, only the
//! driver could tell by reading it, and reading is the driver's business. So anything readable, a
//! hang-up or an error makes the lease *unproven*: [`crate::Lease::remaining`] is zero (and
//! `checkpoint` says `Lost`) until a call on the session is answered, which reads what came and
//! proves the session alive again (and if the session ended, that call fails and the lease is lost).
//! A connection known closed stays unproven for good.
//!
//! The look is `poll(2)` with a zero timeout on the session's socket: one system call, no thread
//! and nothing a `fork()` child must take care of. It never reads, so it takes nothing from the
//! driver; data the driver read ahead into its own buffer is not seen, but every ending closes the
//! connection, and the close reaches the socket after the goodbye.
//!
//! The backend's part:
//! * [`SessionWatch::new`] with the socket's descriptor, attached to the lease with
//!   [`crate::RawLease::watch_session`] before it is handed out;
//! * [`SessionWatch::call_begins`] before each call on the session and [`SessionWatch::call_ends`]
//!   after it: a reply in flight is no goodbye, so nothing is looked at meanwhile, and what the
//!   call finds (a session that ended, a lock not held any more) settles the lease through the call;
//! * [`SessionWatch::closed`] before the socket is closed, or as soon as the driver may have closed
//!   it: the descriptor's number may be given to another file after that, and must not be polled.

use crate::fork;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::sync::Arc;

/// Set in [`SessionWatch::state`] while a call runs on the session, and for good once it is closed.
const GATE: u32 = 1 << 31;

/// What a session-held lease's backend attaches to it so that core can tell, without a round trip,
/// whether the session may have ended (see the module docs).
#[derive(Debug)]
pub struct SessionWatch {
    /// The session socket's descriptor; -1 once the socket is (or may be) closed.
    fd: AtomicI32,
    /// [`GATE`], and below it how many looks are under way: a call (or the close) waits for them
    /// to finish, and looks that start while it runs do not poll.
    state: AtomicU32,
    /// Something arrived unasked, or the connection closed, since the last answered call.
    unproven: AtomicBool,
    /// The process that made the watch: a `fork()` child never waits for looks it inherited
    /// half-done (their threads are not in the child).
    pid: u32,
}

impl SessionWatch {
    /// A watch on the session socket `fd`, which the caller keeps open until it calls
    /// [`SessionWatch::closed`].
    pub fn new(fd: RawFd) -> Arc<SessionWatch> {
        Arc::new(SessionWatch {
            fd: AtomicI32::new(fd),
            state: AtomicU32::new(0),
            unproven: AtomicBool::new(fd < 0),
            pid: fork::pid(),
        })
    }

    /// Whether the holder may go on relying on the session: nothing arrived on it unasked since its
    /// last answered call, and it is not known closed. Looks at the socket (one `poll(2)`, never
    /// blocking) unless a call is running on it, whose outcome decides then. Never waits for a lock.
    pub fn quiet(&self) -> bool {
        if self.unproven.load(Ordering::Acquire) {
            return false;
        }
        let before = self.state.fetch_add(1, Ordering::AcqRel);
        if before & GATE != 0 {
            self.state.fetch_sub(1, Ordering::AcqRel);
            return !self.unproven.load(Ordering::Acquire);
        }
        // The descriptor stays open while this look is counted: closing waits for it.
        let heard = self.heard();
        self.state.fetch_sub(1, Ordering::AcqRel);
        !heard
    }

    /// Whether the connection is known closed (for messages; [`SessionWatch::quiet`] is the test).
    pub fn is_closed(&self) -> bool {
        self.fd.load(Ordering::Acquire) < 0
    }

    /// A call on the session is about to be sent: what is on the socket now came unasked (the
    /// lease is unproven until the call is answered), and looks stop until
    /// [`SessionWatch::call_ends`].
    pub fn call_begins(&self) {
        self.shut_looks();
        self.heard();
    }

    /// The call is over. `answered`: the server answered it, so the session was alive and what
    /// had arrived unasked before it was read by the driver: the lease is proven again (as far as
    /// the session goes; its deadline is the lease's own). A call that was not answered leaves it
    /// as it was. Must not be called after [`SessionWatch::closed`].
    pub fn call_ends(&self, answered: bool) {
        if self.is_closed() {
            return;
        }
        if answered {
            self.unproven.store(false, Ordering::Release);
        }
        self.state.fetch_and(!GATE, Ordering::AcqRel);
    }

    /// The session's socket is about to be closed, or may have been: the lease is unproven for
    /// good and the descriptor is never polled again. Waits for looks under way (each is one
    /// non-blocking system call).
    pub fn closed(&self) {
        self.unproven.store(true, Ordering::Release);
        self.shut_looks();
        self.fd.store(-1, Ordering::Release);
    }

    /// Sets the gate and waits until no look is under way.
    fn shut_looks(&self) {
        self.state.fetch_or(GATE, Ordering::AcqRel);
        if self.pid != fork::pid() {
            // Looks counted at fork() belong to threads the child does not have.
            return;
        }
        let mut spins = 0u32;
        while self.state.load(Ordering::Acquire) & !GATE != 0 {
            if spins < 64 {
                std::hint::spin_loop();
                spins += 1;
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Polls the socket once without blocking; anything (data, a hang-up, an error) makes the lease
    /// unproven. The caller makes sure the descriptor is still the session's.
    fn heard(&self) -> bool {
        let fd = self.fd.load(Ordering::Acquire);
        let heard = fd < 0 || readable_or_hung_up(fd);
        if heard {
            self.unproven.store(true, Ordering::Release);
        }
        heard
    }
}

/// Whether `fd` has anything to read, was hung up on, or failed, now.
fn readable_or_hung_up(fd: RawFd) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN | libc::POLLPRI | libc::POLLRDHUP,
        revents: 0,
    };
    loop {
        // SAFETY: one valid pollfd, a zero timeout; the descriptor is the session's (see callers).
        let n = unsafe { libc::poll(&mut pfd, 1, 0) };
        if n >= 0 {
            return n > 0 && pfd.revents != 0;
        }
        match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::EINTR) => continue,
            // Out of memory for the poll table, say: nothing proves the session alive.
            _ => return true,
        }
    }
}

/// Attaches a new watch on the session socket `fd` in the session's `slot` (see
/// [`SessionWatch::new`]), closing the one attached before: a session holds at most one lease's
/// watch.
pub fn attach(slot: &mut Option<Arc<SessionWatch>>, fd: RawFd) -> Arc<SessionWatch> {
    detach(slot);
    let watch = SessionWatch::new(fd);
    *slot = Some(watch.clone());
    watch
}

/// The session no longer holds a lease that relies on it: the watch in `slot`, if any, is closed
/// (the lease is over) and taken out, so that it is no longer told of round trips.
pub fn detach(slot: &mut Option<Arc<SessionWatch>>) {
    if let Some(watch) = slot.take() {
        watch.closed();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn quiet_until_something_arrives_unasked_then_until_an_answered_call() {
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        let watch = SessionWatch::new(ours.as_raw_fd());
        assert!(watch.quiet());
        assert!(watch.quiet(), "looking takes nothing");
        theirs.write_all(b"N").unwrap();
        assert!(!watch.quiet(), "a notice or a goodbye: unknown");
        // A call reads it (here: the test) and is answered.
        watch.call_begins();
        assert!(!watch.quiet(), "still unproven while the call runs");
        let mut byte = [0u8; 1];
        std::io::Read::read_exact(&mut &ours, &mut byte).unwrap();
        watch.call_ends(true);
        assert!(watch.quiet());
    }

    #[test]
    fn a_reply_in_flight_is_not_unasked() {
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        let watch = SessionWatch::new(ours.as_raw_fd());
        watch.call_begins();
        theirs.write_all(b"reply").unwrap();
        assert!(watch.quiet(), "the call in flight decides");
        let mut reply = [0u8; 5];
        std::io::Read::read_exact(&mut &ours, &mut reply).unwrap();
        watch.call_ends(true);
        assert!(watch.quiet());
    }

    #[test]
    fn a_call_not_answered_leaves_it_unproven() {
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        let watch = SessionWatch::new(ours.as_raw_fd());
        theirs.write_all(b"E").unwrap();
        watch.call_begins();
        watch.call_ends(false);
        assert!(!watch.quiet());
    }

    #[test]
    fn a_hang_up_and_a_close_are_for_good() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let watch = SessionWatch::new(ours.as_raw_fd());
        drop(theirs);
        assert!(!watch.quiet());
        watch.closed();
        drop(ours);
        assert!(!watch.quiet());
        assert!(watch.is_closed());
        watch.call_ends(true);
        assert!(!watch.quiet(), "nothing proves a closed session alive");
    }
}
