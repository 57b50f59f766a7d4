//! A bound on a whole round trip, not only on each read.
//!
//! The driver reads a reply in as many `recv` calls as the bytes arrive in, and a socket timeout
//! bounds each call, not their sum: a server (or a network) that drips a reply a few bytes at a
//! time keeps every `recv` within its timeout while the statement as a whole runs past the call's
//! deadline (seen in the torture test's slow-drip fault). So each round trip also registers its
//! socket here with the call's deadline; one thread per process shuts the socket down
//! (`shutdown(2)`, which ends a blocked `recv` at once) when a deadline passes first, and the
//! session reports a timeout and is never reused.
//!
//! The thread is started on a process's first round trip, and again in a `fork()` child (each
//! process has a registry of its own: a child never touches what it inherited, whose lock a vanished
//! thread may hold). If it cannot be started, the socket timeouts alone bound the reads.

use leasehold_core::fork::PerProcess;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

struct Entry {
    id: u64,
    at: Instant,
    fd: RawFd,
    fired: Arc<AtomicBool>,
}

struct Watch {
    entries: Mutex<Entries>,
    wake: Condvar,
    running: AtomicBool,
    next_id: AtomicU64,
}

/// The sockets watched, and when the thread looks at them next.
struct Entries {
    list: Vec<Entry>,
    /// When the thread wakes by itself (`None`: it waits until woken). A new deadline later than
    /// this needs no wake-up: the thread will see it then. Round trips come one after another
    /// with deadlines that grow, so most never wake the thread (a wake-up per round trip cost a
    /// context switch each, on the CPU the client and the server share).
    wakes_at: Option<Instant>,
}

static CURRENT: PerProcess<Watch> = PerProcess::new();

/// A socket watched until this is dropped (which must happen before the socket is closed).
pub(crate) struct Guard {
    id: u64,
    watch: &'static Watch,
    fired: Arc<AtomicBool>,
}

impl Guard {
    /// Whether the deadline passed and the socket was shut down.
    pub fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let mut entries = self.watch.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.list.retain(|e| e.id != self.id);
    }
}

/// Watches `fd` until `at`; `None` when this process has no watchdog thread.
pub(crate) fn watch(fd: RawFd, at: Instant) -> Option<Guard> {
    let (watch, made) = CURRENT.get(|| Watch {
        entries: Mutex::new(Entries {
            list: Vec::new(),
            wakes_at: None,
        }),
        wake: Condvar::new(),
        running: AtomicBool::new(false),
        next_id: AtomicU64::new(0),
    });
    if made {
        watch.running.store(start(watch), Ordering::SeqCst);
    }
    if !watch.running.load(Ordering::SeqCst) {
        return None;
    }
    let fired = Arc::new(AtomicBool::new(false));
    let id = watch.next_id.fetch_add(1, Ordering::Relaxed);
    let mut entries = watch.entries.lock().unwrap_or_else(|p| p.into_inner());
    entries.list.push(Entry {
        id,
        at,
        fd,
        fired: fired.clone(),
    });
    let wake = entries.wakes_at.is_none_or(|t| at < t);
    if wake {
        // Until the thread has looked again, it wakes for this one at the latest.
        entries.wakes_at = Some(at);
    }
    drop(entries);
    if wake {
        watch.wake.notify_one();
    }
    Some(Guard { id, watch, fired })
}

/// Starts the thread that runs `watch`: a plain pthread, not a `std::thread`. std keeps a thread's
/// closure, handle and thread-local bookkeeping on the heap, reachable only from that thread; in a
/// `fork()` child the thread is gone, so a leak checker (valgrind in the C tests) counts them as
/// lost, and nothing can free or park them. This thread allocates nothing of its own, and its
/// `Watch` is parked with the rest of the parent's state.
fn start(watch: &'static Watch) -> bool {
    extern "C" fn main(arg: *mut libc::c_void) -> *mut libc::c_void {
        // SAFETY: `arg` is the `&'static Watch` given to pthread_create below; a parked `Watch` is
        // never freed.
        let watch = unsafe { &*(arg as *const Watch) };
        // `run` never returns and never panics (poisoned locks are taken over), so nothing unwinds
        // out of this extern "C" function.
        watch.run()
    }
    let mut thread: libc::pthread_t = 0;
    // SAFETY: default attributes; `main` has the signature pthread_create expects, and its argument
    // lives for the rest of the process.
    let rc = leasehold_core::threads::quietly(|| unsafe {
        libc::pthread_create(
            &mut thread,
            std::ptr::null(),
            main,
            watch as *const Watch as *mut libc::c_void,
        )
    });
    if rc != 0 {
        return false;
    }
    // SAFETY: `thread` was just created and is neither joined nor detached yet. A name has at
    // most 15 bytes: the one std gave this thread before, as it was truncated.
    unsafe {
        libc::pthread_setname_np(thread, c"leasehold-mysql".as_ptr());
        libc::pthread_detach(thread);
    }
    true
}

impl Watch {
    fn run(&self) -> ! {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let now = Instant::now();
            // Shut down every socket whose deadline has passed, under the lock: a guard removes its
            // entry (and only then may its socket close) under the same lock, so the descriptor is
            // still the session's.
            entries.list.retain(|e| {
                if e.at > now {
                    return true;
                }
                e.fired.store(true, Ordering::SeqCst);
                // SAFETY: shutdown(2) on a descriptor its guard keeps open (see above).
                unsafe {
                    libc::shutdown(e.fd, libc::SHUT_RDWR);
                }
                false
            });
            // The earliest deadline; with none left, the time it meant to wake anyway (a round
            // trip that starts before then need not wake it), and once that has passed, none.
            let next = match entries.list.iter().map(|e| e.at).min() {
                Some(at) => Some(at),
                None => entries.wakes_at.filter(|t| *t > now),
            };
            entries.wakes_at = next;
            entries = match next {
                None => self.wake.wait(entries).unwrap_or_else(|p| p.into_inner()),
                Some(at) => {
                    let wait = at.saturating_duration_since(Instant::now());
                    self.wake
                        .wait_timeout(entries, wait)
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
            };
        }
    }
}
