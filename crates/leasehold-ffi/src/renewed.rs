//! The lease handles whose keep-alive was turned on, by address, so that a host running one request
//! at a time in a long-lived process (php-fpm) can stop renewing what an earlier request leaked.
//!
//! PHP runs neither destructors nor, when another shutdown function ends the request first, its own
//! shutdown function after a fatal error: the request's handles are then never freed, and the
//! keep-alive thread, which outlives requests, would renew their leases until the worker exits. The
//! next request of that worker calls `leasehold_keep_alive_stop_all`, which reaches those handles
//! here. A handle leaves this list when it is freed or detached, so every address in it is live.
//! Each process has a list of its own: a fork() child never touches the parent's handles.

use crate::boundary;
use crate::lease::leasehold_lease;
use leasehold::fork::PerProcess;
use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard};

static RENEWED: PerProcess<Mutex<HashSet<usize>>> = PerProcess::new();

fn renewed() -> MutexGuard<'static, HashSet<usize>> {
    let (set, _) = RENEWED.get(|| Mutex::new(HashSet::new()));
    set.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn track(lease: *const leasehold_lease) {
    renewed().insert(lease as usize);
}

pub(crate) fn untrack(lease: *const leasehold_lease) {
    renewed().remove(&(lease as usize));
}

/// Stops background renewal (`leasehold_lease_keep_alive`) of every lease of this process that has
/// it on, and returns how many it stopped. For hosts that run one request at a time in a
/// long-lived process and end each request's leases themselves (PHP under php-fpm): called as a
/// request begins, it stops the renewal of leases an earlier request never ended (PHP ran neither
/// its destructors nor its shutdown function after a fatal error), which then end within their
/// TTL. Nothing is released, and the handles stay valid. Makes no network call.
///
/// Call it only while no other thread uses a lease of this process; in a fork() child it touches
/// none of the parent's leases.
#[no_mangle]
pub extern "C" fn leasehold_keep_alive_stop_all() -> usize {
    boundary::value("leasehold_keep_alive_stop_all", 0, || {
        let addresses: Vec<usize> = renewed().drain().collect();
        let mut stopped = 0;
        for address in addresses {
            // SAFETY: a handle leaves the list when it is freed or detached, so this one is live;
            // the caller promises no other thread uses it now.
            let handle = unsafe { &*(address as *const leasehold_lease) };
            if handle.lease.keeps_alive() && handle.lease.keep_alive(false).is_ok() {
                stopped += 1;
            }
        }
        Ok(stopped)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{leasehold_client_free, leasehold_client_open, leasehold_try_acquire};
    use crate::handle::leasehold_client;
    use crate::lease::{
        leasehold_lease_free, leasehold_lease_keep_alive, leasehold_lease_remaining_ms,
    };
    use crate::status::leasehold_status;
    use leasehold_testkit::TempDir;
    use std::ffi::CString;
    use std::time::Duration;

    #[test]
    fn stopped_leases_are_no_longer_renewed_and_freed_ones_are_never_touched() {
        let dir = TempDir::new("ffi-renewed");
        let url = CString::new(format!("file://{}", dir.path().display())).unwrap();
        let mut client: *mut leasehold_client = std::ptr::null_mut();
        // SAFETY: valid pointers throughout; each lease is used by this thread only.
        unsafe {
            assert_eq!(
                leasehold_client_open(url.as_ptr(), &mut client),
                leasehold_status::LEASEHOLD_OK
            );
            let take = |key: &str| {
                let mut lease = std::ptr::null_mut();
                let status =
                    leasehold_try_acquire(client, key.as_ptr().cast(), key.len(), 300, &mut lease);
                assert_eq!(status, leasehold_status::LEASEHOLD_OK);
                assert_eq!(
                    leasehold_lease_keep_alive(lease, true),
                    leasehold_status::LEASEHOLD_OK
                );
                lease
            };
            let leaked = take("leaked");
            let freed = take("freed");
            leasehold_lease_free(freed);
            assert_eq!(leasehold_keep_alive_stop_all(), 1, "only the live lease");
            assert_eq!(leasehold_keep_alive_stop_all(), 0, "nothing left to stop");
            std::thread::sleep(Duration::from_millis(600));
            assert!(
                leasehold_lease_remaining_ms(leaked) <= 0,
                "no longer renewed: it ran out its 300 ms TTL"
            );
            leasehold_lease_free(leaked);
            leasehold_client_free(client);
        }
    }
}
