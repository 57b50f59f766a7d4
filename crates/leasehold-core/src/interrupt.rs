//! Ending a wait early. A queue worker told to stop (SIGTERM from a supervisor, Ctrl-C) must not sit
//! in a native wait until it runs out; and a program may want to end its waits from another thread
//! or from a signal handler of its own ([`Interrupts::interrupt`]).
//!
//! How a signal is noticed without taking the process's handlers away: for the length of a wait,
//! the waiting thread blocks SIGTERM and SIGINT (those not blocked or ignored already), and core's
//! wait loop looks at the thread's pending signals at least every [`CHECK_EVERY`]. A signal that
//! arrives meanwhile stays pending; the wait ends, the mask is put back, and the signal is delivered
//! then, to whatever handler the process has: PHP's pcntl handlers run right after the call returns,
//! a default disposition ends the process as it would have. So nothing changes about *what* a
//! signal does, only that a wait no longer delays it.
//!
//! A process-directed signal goes to some thread that does not block it: in a multi-threaded
//! program another thread may take it at once, and the wait does not see it. Such programs end
//! waits with [`Interrupts::interrupt`]. The library's own threads block every asynchronous signal
//! ([`crate::threads`]), so they never take one away from a single-threaded program.

use crate::error::{Error, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often a wait looks for an interrupt: each block between attempts, and each attempt that
/// blocks on the server, lasts at most this long, so a wait ends within about this (plus one
/// round trip and a server timer's tick) of the interrupt. The contract promises 100 ms.
pub const CHECK_EVERY: Duration = Duration::from_millis(50);

/// The interrupt switch of one client, shared by its clones: [`Interrupts::interrupt`] ends the waits
/// in progress, and leaves later ones alone.
#[derive(Debug, Default)]
pub struct Interrupts {
    generation: AtomicU64,
}

impl Interrupts {
    /// Ends every wait in progress on this switch. One atomic increment: safe from any thread and
    /// from a signal handler.
    pub fn interrupt(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }
}

/// What a wait made later, by a lease rather than by its client (a promote), watches: the
/// client's switch, and the signals when the client watches them.
#[derive(Debug, Clone)]
pub(crate) struct Interruptible {
    pub(crate) switch: Arc<Interrupts>,
    pub(crate) signals: bool,
}

impl Interruptible {
    pub(crate) fn watch(&self) -> Watch<'_> {
        Watch::new(Some(&self.switch), self.signals)
    }
}

/// One wait's watch for interrupts: from its start until it is dropped.
#[derive(Debug)]
pub struct Watch<'a> {
    switch: Option<(&'a Interrupts, u64)>,
    #[cfg(unix)]
    signals: Option<signals::Held>,
}

impl<'a> Watch<'a> {
    /// Watches `switch` (when given) and, when `signals`, SIGTERM and SIGINT.
    pub fn new(switch: Option<&'a Interrupts>, signals: bool) -> Watch<'a> {
        #[cfg(not(unix))]
        let _ = signals;
        Watch {
            switch: switch.map(|s| (s, s.generation())),
            #[cfg(unix)]
            signals: if signals {
                signals::Held::start()
            } else {
                None
            },
        }
    }

    /// A watch that never fires (waits that cannot be interrupted, and tests).
    pub fn none() -> Watch<'static> {
        Watch {
            switch: None,
            #[cfg(unix)]
            signals: None,
        }
    }

    /// `Interrupted` once the switch was flipped or a watched signal arrived since the watch began.
    pub fn check(&self) -> Result<()> {
        if let Some((switch, seen)) = self.switch {
            if switch.generation() != seen {
                return Err(Error::Interrupted("the wait was interrupted".into()));
            }
        }
        #[cfg(unix)]
        if let Some(signal) = self.signals.as_ref().and_then(signals::Held::arrived) {
            return Err(Error::Interrupted(format!(
                "{signal} arrived during the wait; it is delivered as the call returns"
            )));
        }
        Ok(())
    }
}

#[cfg(unix)]
mod signals {
    use std::mem::MaybeUninit;

    const WATCHED: [(libc::c_int, &str); 2] =
        [(libc::SIGTERM, "SIGTERM"), (libc::SIGINT, "SIGINT")];

    /// SIGTERM and SIGINT held back from this thread for one wait; the old mask comes back on drop,
    /// and with it the delivery of a signal that arrived meanwhile.
    #[derive(Debug)]
    pub(super) struct Held {
        old: libc::sigset_t,
        /// The watched signals this wait blocked (not blocked or ignored before).
        mine: Vec<(libc::c_int, &'static str)>,
    }

    impl Held {
        pub(super) fn start() -> Option<Held> {
            // SAFETY: sigset_t is plain data, initialised by sigemptyset/pthread_sigmask before
            // use; sigaction with a null new action only reads the disposition.
            unsafe {
                let mut old = MaybeUninit::<libc::sigset_t>::uninit();
                if libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), old.as_mut_ptr()) != 0 {
                    return None;
                }
                let old = old.assume_init();
                let mut block = MaybeUninit::<libc::sigset_t>::uninit();
                libc::sigemptyset(block.as_mut_ptr());
                let mut block = block.assume_init();
                let mut mine = Vec::new();
                for (signal, name) in WATCHED {
                    let mut action = MaybeUninit::<libc::sigaction>::zeroed();
                    if libc::sigaction(signal, std::ptr::null(), action.as_mut_ptr()) != 0 {
                        continue;
                    }
                    // An ignored signal stays pending while blocked (Linux keeps blocked signals
                    // whatever their disposition), and would end every wait for nothing.
                    let ignored = action.assume_init().sa_sigaction == libc::SIG_IGN;
                    if ignored || libc::sigismember(&old, signal) == 1 {
                        continue;
                    }
                    libc::sigaddset(&mut block, signal);
                    mine.push((signal, name));
                }
                if mine.is_empty() {
                    return None;
                }
                if libc::pthread_sigmask(libc::SIG_BLOCK, &block, std::ptr::null_mut()) != 0 {
                    return None;
                }
                Some(Held { old, mine })
            }
        }

        /// The name of a watched signal pending now.
        pub(super) fn arrived(&self) -> Option<&'static str> {
            // SAFETY: `pending` is filled by sigpending before it is read.
            unsafe {
                let mut pending = MaybeUninit::<libc::sigset_t>::uninit();
                if libc::sigpending(pending.as_mut_ptr()) != 0 {
                    return None;
                }
                let pending = pending.assume_init();
                self.mine
                    .iter()
                    .find(|(signal, _)| libc::sigismember(&pending, *signal) == 1)
                    .map(|(_, name)| *name)
            }
        }
    }

    impl Drop for Held {
        fn drop(&mut self) {
            // SAFETY: restores the mask read in `start`, on the same thread (a Watch lives within
            // one wait, on the waiting thread's stack).
            unsafe {
                libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_switch_ends_the_waits_in_progress_only() {
        let switch = Interrupts::default();
        let watch = Watch::new(Some(&switch), false);
        assert!(watch.check().is_ok());
        switch.interrupt();
        assert_eq!(
            watch.check().unwrap_err().kind(),
            crate::ErrorKind::Interrupted
        );
        let later = Watch::new(Some(&switch), false);
        assert!(later.check().is_ok());
    }
}
