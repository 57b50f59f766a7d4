//! Threads the library starts (keep-alive, resolver, connect, watchdog and Redlock node workers)
//! take no asynchronous signals. A process-directed signal goes to any thread that does not block
//! it: were it one of ours, the program's own thread would not see it — PHP's pcntl handler would
//! run late, and a wait would not notice the SIGTERM that should end it (see [`crate::interrupt`]).
//! Synchronous signals (a fault in the thread itself) stay unblocked.

/// Runs `spawn` with every asynchronous signal blocked on the calling thread, so that a thread it
/// starts inherits that mask from birth (no window where a signal could land on it); the caller's
/// mask is back before this returns.
pub fn quietly<T>(spawn: impl FnOnce() -> T) -> T {
    #[cfg(unix)]
    {
        let _restore = block_async();
        spawn()
    }
    #[cfg(not(unix))]
    spawn()
}

#[cfg(unix)]
struct Restore(Option<libc::sigset_t>);

#[cfg(unix)]
fn block_async() -> Restore {
    use std::mem::MaybeUninit;
    const SYNCHRONOUS: [libc::c_int; 6] = [
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGFPE,
        libc::SIGILL,
        libc::SIGTRAP,
        libc::SIGSYS,
    ];
    // SAFETY: both sets are initialised by sigfillset / pthread_sigmask before they are read.
    unsafe {
        let mut all = MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigfillset(all.as_mut_ptr());
        let mut all = all.assume_init();
        for signal in SYNCHRONOUS {
            libc::sigdelset(&mut all, signal);
        }
        let mut old = MaybeUninit::<libc::sigset_t>::uninit();
        if libc::pthread_sigmask(libc::SIG_BLOCK, &all, old.as_mut_ptr()) != 0 {
            return Restore(None);
        }
        Restore(Some(old.assume_init()))
    }
}

#[cfg(unix)]
impl Drop for Restore {
    fn drop(&mut self) {
        if let Some(old) = &self.0 {
            // SAFETY: puts back the mask read in `block_async`, on the same thread.
            unsafe {
                libc::pthread_sigmask(libc::SIG_SETMASK, old, std::ptr::null_mut());
            }
        }
    }
}
