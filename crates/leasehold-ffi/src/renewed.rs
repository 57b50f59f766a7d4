//! The lease handles whose keep-alive was turned on, by address, so that a host running one request
//! at a time in a long-lived process (php-fpm) can stop renewing what an earlier request leaked.
//!
//! PHP runs neither destructors nor, when another shutdown function ends the request first, its own
//! shutdown function after a fatal error: the request's handles are then never freed, and the
//! keep-alive thread, which outlives requests, would renew their leases until the worker exits. The
//! next request of that worker calls `leasehold_keep_alive_stop_all` (in `lease.rs`), which reaches
//! those handles here. A handle leaves this list when it is freed or detached, so every address in
//! it is live.
//! Each process has a list of its own: a fork() child never touches the parent's handles.

use leasehold::fork::PerProcess;
use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard};

static RENEWED: PerProcess<Mutex<HashSet<usize>>> = PerProcess::new();

fn renewed() -> MutexGuard<'static, HashSet<usize>> {
    let (set, _) = RENEWED.get(|| Mutex::new(HashSet::new()));
    set.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn track<T>(handle: *const T) {
    renewed().insert(handle as usize);
}

pub(crate) fn untrack<T>(handle: *const T) {
    renewed().remove(&(handle as usize));
}

/// Every address in the list, which is left empty: the caller stops their renewal.
pub(crate) fn drain() -> Vec<usize> {
    renewed().drain().collect()
}
