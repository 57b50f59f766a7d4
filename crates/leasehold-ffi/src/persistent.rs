//! The process-wide client cache behind `leasehold_client_open_persistent`, for php-fpm: PHP objects
//! die with every request while the library stays loaded in the worker, so a worker opens each
//! backend once instead of once per request.
//!
//! The cache holds one reference to each client, so a client lives until the process exits whatever
//! its callers free. A fork() child must not share the parent's entries (their connections are the
//! parent's), so each process has a cache of its own and a child parks the inherited one untouched,
//! its lock included, like every other inherited object.
//!
//! The cache is only worth anything while the library stays loaded. PHP's FFI dlopen()s the library
//! per request where nothing preloads it (`php -S`, a CLI `FFI::cdef` in a loop) and dlclose()s it
//! when the request ends, which would unload it and drop the cache with it (or unmap code another
//! thread still runs). So the first persistent client pins the library with RTLD_NODELETE.

use crate::handle::leasehold_client;
use leasehold::fork::PerProcess;
use leasehold::Result;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// By the exact URL text: two spellings of one backend get two clients, which is harmless.
type Clients = HashMap<String, Arc<leasehold_client>>;

// Each process's own cache: a fork() child never takes the parent's lock, which a thread of the parent
// may hold at the fork and never give back in the child. Reachable from a static, so leak checkers
// count the cached clients as still in use.
static CACHE: PerProcess<Mutex<Clients>> = PerProcess::new();

fn clients() -> MutexGuard<'static, Clients> {
    let (cache, _) = CACHE.get(|| Mutex::new(HashMap::new()));
    cache.lock().unwrap_or_else(|p| p.into_inner())
}

/// A new reference to this process's client for `url`, connecting on first use. A failed connect
/// is not cached: the next call tries again.
pub(crate) fn open(url: &str) -> Result<Arc<leasehold_client>> {
    // Not a `Once`: a fork() while another thread runs it would leave the child waiting for ever.
    // Pinning twice is harmless.
    static PINNED: AtomicBool = AtomicBool::new(false);
    if !PINNED.swap(true, Ordering::AcqRel) {
        pin_library();
    }
    if let Some(client) = clients().get(url) {
        return Ok(client.clone());
    }
    // Connected without the lock held: a connect takes up to its timeouts, and nothing may hold a
    // lock that long (a fork() meanwhile copies it held). Two first calls for one URL may both
    // connect; the first to finish is kept and the other dropped.
    let client = leasehold_client::open(url)?;
    Ok(clients().entry(url.to_owned()).or_insert(client).clone())
}

/// Marks the shared object holding this code as never to be unloaded. Best effort: if it fails, the
/// cache still works wherever the host keeps the library loaded (php-fpm's preload does).
#[cfg(unix)]
fn pin_library() {
    // SAFETY: an all-zero Dl_info is a valid "nothing found" value that dladdr overwrites.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let here = pin_library as fn() as *const libc::c_void;
    // SAFETY: dladdr only reads the address and writes `info`.
    if unsafe { libc::dladdr(here, &mut info) } == 0 || info.dli_fname.is_null() {
        return;
    }
    // SAFETY: dli_fname is the NUL-terminated path of an object that is loaded (it holds this code).
    // RTLD_NOLOAD never loads anything new; it only sets RTLD_NODELETE on what is loaded. The handle
    // is never closed on purpose: the library is meant to stay.
    unsafe {
        libc::dlopen(
            info.dli_fname,
            libc::RTLD_LAZY | libc::RTLD_NOLOAD | libc::RTLD_NODELETE,
        );
    }
}

#[cfg(not(unix))]
fn pin_library() {}
