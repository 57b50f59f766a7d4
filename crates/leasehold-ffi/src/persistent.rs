//! The process-wide client cache behind `leasehold_client_open_persistent`, for php-fpm: PHP objects
//! die with every request while the library stays loaded in the worker, so a worker opens each
//! backend once instead of once per request.
//!
//! The cache holds one reference to each client, so a client lives until the process exits whatever
//! its callers free. A fork() child must not share the parent's entries (their connections are the
//! parent's), so the cache remembers its pid and a child starts with an empty one, parking the
//! inherited entries untouched like every other inherited object.
//!
//! The cache is only worth anything while the library stays loaded. PHP's FFI dlopen()s the library
//! per request where nothing preloads it (`php -S`, a CLI `FFI::cdef` in a loop) and dlclose()s it
//! when the request ends, which would unload it and drop the cache with it (or unmap code another
//! thread still runs). So the first persistent client pins the library with RTLD_NODELETE.

use crate::handle::leasehold_client;
use leasehold::{fork, Result};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Once};

struct Cache {
    pid: u32,
    /// By the exact URL text: two spellings of one backend get two clients, which is harmless.
    clients: HashMap<String, Arc<leasehold_client>>,
}

// Reachable from a static, so leak checkers count the cached clients as still in use.
static CACHE: Mutex<Option<Cache>> = Mutex::new(None);

/// A new reference to this process's client for `url`, connecting on first use. A failed connect
/// is not cached: the next call tries again.
pub(crate) fn open(url: &str) -> Result<Arc<leasehold_client>> {
    static PIN: Once = Once::new();
    PIN.call_once(pin_library);
    // Held across the connect so that concurrent first calls for one URL make one client; the
    // connect is bounded by the URL's connect timeout.
    let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    let pid = fork::pid();
    let cache = match cache.as_mut() {
        Some(cache) if cache.pid == pid => cache,
        _ => {
            if let Some(inherited) = cache.take() {
                fork::keep_forever(inherited.clients);
            }
            cache.insert(Cache {
                pid,
                clients: HashMap::new(),
            })
        }
    };
    if let Some(client) = cache.clients.get(url) {
        return Ok(client.clone());
    }
    let client = leasehold_client::open(url)?;
    cache.clients.insert(url.to_owned(), client.clone());
    Ok(client)
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
