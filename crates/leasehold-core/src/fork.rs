//! fork() support in one place: which process this is, and where a child parks what it inherited.
//!
//! Everything that belongs to one process (a lease, a pooled connection, the keep-alive registry, the
//! C ABI's clients) remembers [`pid`] and compares it on use; a `fork()` child sees another value and
//! leaves the parent's objects alone. A child must neither use nor close them: using them interleaves
//! two processes on one socket, and closing them (a PostgreSQL connection sends Terminate on drop)
//! would end the parent's session and its locks. What it must not drop goes to [`keep_forever`].

use std::any::Any;
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

/// The calling process's id.
///
/// glibc does not cache `getpid()` (a system call, about a tenth of a lock cycle's syscalls), so it is
/// cached here on a page the kernel zeroes in every child (`MADV_WIPEONFORK`): any fork-like clone
/// that copies memory — `fork()`, `_Fork()`, a raw `clone()`, none of which need run atfork handlers —
/// finds 0 and asks the kernel again. Where the kernel cannot wipe pages (before Linux 4.14) every
/// call asks the kernel, as before.
pub fn pid() -> u32 {
    match wiped_on_fork() {
        Some(cached) => match cached.load(Ordering::Relaxed) {
            0 => {
                let pid = std::process::id();
                cached.store(pid, Ordering::Relaxed);
                pid
            }
            pid => pid,
        },
        None => std::process::id(),
    }
}

/// The cache cell on its wiped-on-fork page, or None where the kernel cannot wipe one.
fn wiped_on_fork() -> Option<&'static AtomicU32> {
    // Null: not set up yet; FAILED: not available. The page itself is mapped once and never unmapped.
    // (A dangling pointer is never the start of a mapped page.)
    const FAILED: *mut AtomicU32 = ptr::dangling_mut::<AtomicU32>();
    static PAGE: AtomicPtr<AtomicU32> = AtomicPtr::new(ptr::null_mut());
    let mut page = PAGE.load(Ordering::Acquire);
    if page.is_null() {
        let fresh = map_wiped_page().unwrap_or(FAILED);
        page = match PAGE.compare_exchange(
            ptr::null_mut(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => fresh,
            // Another thread mapped one first; ours (at most one page, once) stays mapped unused.
            Err(theirs) => theirs,
        };
    }
    // SAFETY: a pointer other than FAILED is the start of a mapped, zero-initialised, never
    // unmapped page, suitably aligned for an AtomicU32 (a page is).
    (page != FAILED).then(|| unsafe { &*page })
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn map_wiped_page() -> Option<*mut AtomicU32> {
    // SAFETY: an anonymous private mapping of one page; nothing else refers to it. On madvise's
    // failure it is unmapped before anyone saw it.
    unsafe {
        let size = usize::try_from(libc::sysconf(libc::_SC_PAGESIZE))
            .ok()
            .filter(|s| *s >= std::mem::size_of::<AtomicU32>())?;
        let page = libc::mmap(
            ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if page == libc::MAP_FAILED {
            return None;
        }
        if libc::madvise(page, size, libc::MADV_WIPEONFORK) != 0 {
            libc::munmap(page, size);
            return None;
        }
        Some(page.cast())
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn map_wiped_page() -> Option<*mut AtomicU32> {
    None
}

/// One parked object in a push-only list. A list and not a `Mutex<Vec<_>>`: a process forked while
/// another of its threads held that mutex would inherit it held, and hang in its first park.
struct Parked {
    _object: Box<dyn Any + Send>,
    next: *mut Parked,
}

// Reachable from a static, so leak checkers (valgrind in the C tests) count what a child parks as
// still in use rather than lost. Never popped: parked objects live until the process exits.
static INHERITED: AtomicPtr<Parked> = AtomicPtr::new(ptr::null_mut());

/// Keeps `object`, which belongs to the parent process, alive and unused until this process exits.
/// Takes no lock.
pub fn keep_forever(object: impl Any + Send) {
    let node = Box::into_raw(Box::new(Parked {
        _object: Box::new(object),
        next: ptr::null_mut(),
    }));
    let mut head = INHERITED.load(Ordering::Relaxed);
    loop {
        // SAFETY: `node` is ours alone until the exchange below publishes it.
        unsafe { (*node).next = head };
        match INHERITED.compare_exchange_weak(head, node, Ordering::Release, Ordering::Relaxed) {
            Ok(_) => return,
            Err(now) => head = now,
        }
    }
}

/// A value of which each process has its own, made on its first use in that process. A `fork()` child
/// never touches the parent's value, not even its lock (a thread that did not survive the fork may
/// hold it, and the child would wait for ever): it makes its own and parks the parent's with
/// [`keep_forever`]. The connection pool, the keep-alive registry and the Redlock workers are built
/// on it.
pub struct PerProcess<T: Send + 'static> {
    current: AtomicPtr<Owned<T>>,
    _owns: std::marker::PhantomData<Box<Owned<T>>>,
}

struct Owned<T> {
    pid: u32,
    value: T,
}

impl<T: Send + 'static> PerProcess<T> {
    pub const fn new() -> PerProcess<T> {
        PerProcess {
            current: AtomicPtr::new(ptr::null_mut()),
            _owns: std::marker::PhantomData,
        }
    }

    /// This process's value, and whether this call made it (`make` runs only then).
    pub fn get(&self, make: impl FnOnce() -> T) -> (&T, bool) {
        let pid = pid();
        let current = self.current.load(Ordering::Acquire);
        // SAFETY: a non-null pointer came from Box::into_raw below and is freed only by Drop, which
        // no reference outlives; one replaced in a child is parked, never freed.
        if let Some(owned) = unsafe { current.as_ref() } {
            if owned.pid == pid {
                return (&owned.value, false);
            }
        }
        let fresh = Box::into_raw(Box::new(Owned { pid, value: make() }));
        match self
            .current
            .compare_exchange(current, fresh, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {
                if !current.is_null() {
                    // SAFETY: from Box::into_raw; the exchange retired it, once.
                    keep_forever(unsafe { Box::from_raw(current) });
                }
                // SAFETY: just installed; freed only by Drop.
                (unsafe { &(*fresh).value }, true)
            }
            Err(winner) => {
                // Another thread of this process installed one first; ours was never shared.
                // SAFETY: `fresh` came from Box::into_raw above and nobody else saw it; the
                // winner's is this process's, live until Drop.
                drop(unsafe { Box::from_raw(fresh) });
                (unsafe { &(*winner).value }, false)
            }
        }
    }
}

impl<T: Send + 'static> Default for PerProcess<T> {
    fn default() -> Self {
        PerProcess::new()
    }
}

impl<T: Send + 'static> Drop for PerProcess<T> {
    fn drop(&mut self) {
        let current = std::mem::replace(self.current.get_mut(), ptr::null_mut());
        if current.is_null() {
            return;
        }
        // SAFETY: from Box::into_raw and, with `self` gone, nothing refers to it.
        let owned = unsafe { Box::from_raw(current) };
        if owned.pid != pid() {
            // A child dropping what it never used: dropping the parent's value could close the
            // parent's connections.
            keep_forever(owned);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_testkit::in_child;
    use std::time::Duration;

    #[test]
    fn the_cached_pid_is_the_kernel_s_and_a_child_sees_its_own() {
        assert_eq!(pid(), std::process::id());
        assert_eq!(pid(), std::process::id());
        let status = in_child(Duration::from_secs(5), || {
            pid() == std::process::id() && pid() != 0
        });
        assert_eq!(status, Some(0));
        assert_eq!(pid(), std::process::id());
    }

    #[test]
    fn a_child_gets_a_value_of_its_own_and_leaves_the_parent_s_alone() {
        let value: PerProcess<std::sync::Mutex<u32>> = PerProcess::new();
        let (parent, made) = value.get(|| std::sync::Mutex::new(1));
        assert!(made);
        // Held across the fork, as a vanished thread might have held it.
        let guard = parent.lock().unwrap();
        let status = in_child(Duration::from_secs(5), || {
            let (own, made) = value.get(|| std::sync::Mutex::new(2));
            let again = value.get(|| std::sync::Mutex::new(3)).1;
            made && !again && *own.lock().unwrap() == 2
        });
        drop(guard);
        assert_eq!(
            status,
            Some(0),
            "the child hung (None) or saw the parent's value"
        );
        let (still, made) = value.get(|| std::sync::Mutex::new(4));
        assert!(!made);
        assert_eq!(*still.lock().unwrap(), 1);
    }

    #[test]
    fn parked_objects_stay_alive_whoever_parks_them() {
        let token = std::sync::Arc::new(());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let token = token.clone();
                std::thread::spawn(move || {
                    for _ in 0..100 {
                        keep_forever(token.clone());
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(std::sync::Arc::strong_count(&token), 1 + 400);
    }
}
