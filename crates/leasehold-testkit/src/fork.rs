//! Tests of what a forked child may do with the parent's clients, pools and leases.

use std::time::{Duration, Instant};

/// Runs `child` in a forked child process and gives how it ended: `Some(0)` when `child` returned
/// true, `Some(1)` when it returned false or panicked, `Some(128 + n)` when signal `n` killed it,
/// `None` when it was still running after `limit` (it is then killed). A hung child is what a
/// fork bug usually looks like (a lock some vanished thread of the parent held), so the wait is
/// bounded.
pub fn in_child(limit: Duration, child: impl FnOnce() -> bool) -> Option<i32> {
    // SAFETY: the child runs `child` and `_exit`s; it never returns into the test harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).unwrap_or(false);
        // SAFETY: ends the child at once, without the parent's destructors or atexit hooks.
        unsafe { libc::_exit(i32::from(!ok)) };
    }
    let start = Instant::now();
    let mut status = 0;
    loop {
        // SAFETY: `pid` is our child; `status` is a valid out-pointer.
        if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
            return Some(if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status)
            } else {
                128 + libc::WTERMSIG(status)
            });
        }
        if start.elapsed() > limit {
            // SAFETY: our own child, not yet reaped.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tells_passed_failed_killed_and_hung_apart() {
        let limit = Duration::from_secs(5);
        assert_eq!(in_child(limit, || true), Some(0));
        assert_eq!(in_child(limit, || false), Some(1));
        assert_eq!(in_child(limit, || panic!("in the child")), Some(1));
        // SAFETY: the child kills itself.
        let killed = in_child(limit, || unsafe { libc::raise(libc::SIGKILL) } == 0);
        assert_eq!(killed, Some(128 + libc::SIGKILL));
        let hung = in_child(Duration::from_millis(200), || loop {
            std::thread::sleep(Duration::from_secs(1));
        });
        assert_eq!(hung, None);
    }
}
