//! Wake-ups on record changes through inotify, for the few waiters at the front of a key's queue.
//!
//! Every release (and every other write) of a record file modifies it, so a waiter blocked in `poll`
//! on an inotify watch of that file wakes within microseconds, with no polling interval to wait out.
//! Only the first waiters of a queue watch, so one release wakes a bounded number of processes, not
//! every waiter. inotify instances are a per-user resource (`fs.inotify.max_user_instances`); when
//! none can be had the caller falls back to short sleeps.
//!
//! Closing an inotify instance is slow (the kernel waits for an SRCU grace period, milliseconds), so
//! instances are not closed after each wait but kept in a small process-wide pool and reused; only
//! the watch is removed, which is cheap. A forked child starts a pool of its own: an instance shared
//! with the parent would let one process eat the other's wake-ups.

use leasehold_core::fork::PerProcess;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// Idle instances kept for reuse; more than this many are closed.
const POOL_MAX: usize = 8;

// Each process's own idle instances: a fork() child neither reads the parent's instances (it would
// eat their wake-ups) nor takes the parent's lock (a thread of the parent may hold it at the fork).
static POOL: PerProcess<Mutex<Vec<OwnedFd>>> = PerProcess::new();

fn idle() -> MutexGuard<'static, Vec<OwnedFd>> {
    let (pool, _) = POOL.get(|| Mutex::new(Vec::new()));
    pool.lock().unwrap_or_else(|p| p.into_inner())
}

fn instance() -> Option<OwnedFd> {
    if let Some(fd) = idle().pop() {
        return Some(fd);
    }
    // SAFETY: a plain syscall; the returned descriptor is owned right away.
    let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) };
    if fd < 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "no inotify instance; polling instead");
        return None;
    }
    // SAFETY: `fd` was just returned by inotify_init1 and is not owned elsewhere.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn drain(fd: &OwnedFd) {
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: `buf` is writable for its whole length.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            // EAGAIN (drained) or an error; either way nothing more to take.
            if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return;
        }
    }
}

#[derive(Debug)]
pub(crate) struct Watch {
    fd: Option<OwnedFd>,
    wd: libc::c_int,
}

impl Watch {
    /// A watch on modifications of `path`; `None` if the system gives none.
    pub(crate) fn new(path: &Path) -> Option<Watch> {
        let c_path = CString::new(path.as_os_str().as_bytes()).ok()?;
        let fd = instance()?;
        // SAFETY: `c_path` is a valid NUL-terminated string for the duration of the call.
        let wd = unsafe {
            libc::inotify_add_watch(
                fd.as_raw_fd(),
                c_path.as_ptr(),
                libc::IN_MODIFY | libc::IN_ATTRIB | libc::IN_DELETE_SELF,
            )
        };
        if wd < 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(), "no inotify watch; polling instead");
            give_back(fd);
            return None;
        }
        Some(Watch { fd: Some(fd), wd })
    }

    /// Forgets events seen so far: call before looking at the record, so any change after the look
    /// wakes the next [`Watch::wait`].
    pub(crate) fn drain(&self) {
        if let Some(fd) = &self.fd {
            drain(fd);
        }
    }

    /// Blocks until the file changes (`true`) or `timeout` passes (`false`).
    pub(crate) fn wait(&self, timeout: Duration) -> bool {
        let Some(fd) = &self.fd else {
            std::thread::sleep(timeout);
            return false;
        };
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ts = libc::timespec {
            tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
            // Below 10^9, so it fits a c_long of any width.
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: `pfd` and `ts` are valid for the call; no signal mask is changed (NULL).
        let ready = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
        // An interrupted poll (EINTR) counts as a wake-up too: the caller looks again.
        ready != 0
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(fd) = self.fd.take() {
            // SAFETY: `wd` was returned for this instance, which is still open.
            unsafe {
                libc::inotify_rm_watch(fd.as_raw_fd(), self.wd);
            }
            give_back(fd);
        }
    }
}

fn give_back(fd: OwnedFd) {
    // Removing the watch queued an IN_IGNORED event; the next user must start from an empty queue.
    drain(&fd);
    let mut idle = idle();
    if idle.len() < POOL_MAX {
        idle.push(fd);
    }
}
