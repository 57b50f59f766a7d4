//! The exports on a `leasehold_client`: opening and freeing it, and taking leases through it.

use crate::boundary;
use crate::handle::leasehold_client;
use crate::lease::leasehold_lease;
use crate::persistent;
use crate::status::leasehold_status;
use leasehold::{LeaseKind, Permits, Request, Result};
use std::ffi::c_char;
use std::sync::Arc;
use std::time::Duration;

/// Opens a client for the backend `url` names (`file:///dir`, `redis://…`, `redlock://…`,
/// `postgres://…`, `mysql://…`; see the README for parameters).
///
/// `url` must be a NUL-terminated UTF-8 string; it is copied, so the caller may free it at once.
/// On `LEASEHOLD_OK`, `*client_out` receives a new client that the caller owns and must free with
/// `leasehold_client_free`; on any other status `*client_out` is left as it was.
/// NULL `url` or `client_out`: `LEASEHOLD_INVALID_ARGUMENT`. A bad URL: `LEASEHOLD_INVALID_ARGUMENT`;
/// a backend that does not answer: `LEASEHOLD_UNAVAILABLE` within the URL's connect timeout.
/// Error messages never contain the URL's password. Thread-safe.
///
/// # Safety
/// `url` is NULL or a NUL-terminated string; `client_out` is NULL or points to writable storage.
#[no_mangle]
pub unsafe extern "C" fn leasehold_client_open(
    url: *const c_char,
    client_out: *mut *mut leasehold_client,
) -> leasehold_status {
    boundary::call("leasehold_client_open", || {
        open_into(client_out, url, leasehold_client::open)
    })
}

/// Like `leasehold_client_open`, but shares one client per distinct `url` (compared as text) in this
/// process: for php-fpm and other hosts that keep the library loaded while their own objects come
/// and go (a PHP request), so each worker connects once instead of once per request.
///
/// Each successful call gives a new reference in `*client_out` (calls for one URL may return the
/// same pointer value), which the caller owns and frees with `leasehold_client_free` as usual, once
/// per successful call; freeing drops only that reference. The shared client itself (its
/// connections, its counters in `leasehold_client_stats_json`) lives until the process exits, and
/// so that the cache outlives hosts that dlclose() the library between uses (PHP's FFI without
/// preloading), the first call pins the library in memory (RTLD_NODELETE). The first call for a
/// URL connects (and may fail like `leasehold_client_open`; a failure is not remembered, so the
/// next call tries again); later calls make no network call. A fork() child gets clients of its
/// own on its first call for each URL, never the parent's.
/// NULL `url` or `client_out`, or a bad URL: `LEASEHOLD_INVALID_ARGUMENT`. Thread-safe.
///
/// # Safety
/// As for `leasehold_client_open`.
#[no_mangle]
pub unsafe extern "C" fn leasehold_client_open_persistent(
    url: *const c_char,
    client_out: *mut *mut leasehold_client,
) -> leasehold_status {
    boundary::call("leasehold_client_open_persistent", || {
        open_into(client_out, url, persistent::open)
    })
}

/// The body of both opens: `*client_out` written only once `open` gave a client.
fn open_into(
    client_out: *mut *mut leasehold_client,
    url: *const c_char,
    open: fn(&str) -> Result<Arc<leasehold_client>>,
) -> Result<()> {
    let out = boundary::out(client_out, "client_out")?;
    let handle = open(boundary::text(url, "url")?)?;
    *out = Arc::into_raw(handle).cast_mut();
    Ok(())
}

/// Gives up the caller's reference to `client`. Its connections close once no lease taken through
/// it is left (leases keep it alive) and, for a client from `leasehold_client_open_persistent`,
/// never before the process exits (the process-wide cache keeps it). NULL is a no-op. In a fork()
/// child, the connections the client inherited from the parent are left open and untouched.
///
/// # Safety
/// `client` is NULL or a pointer from `leasehold_client_open` not yet freed; it must not be used
/// after this call, by any thread.
#[no_mangle]
pub unsafe extern "C" fn leasehold_client_free(client: *mut leasehold_client) {
    boundary::quietly("leasehold_client_free", || {
        if !client.is_null() {
            // SAFETY: the pointer came from Arc::into_raw in leasehold_client_open.
            drop(unsafe { Arc::from_raw(client.cast_const()) });
        }
    });
}

/// Ends every wait in progress on `client` (`leasehold_acquire` and the other waiting acquires, on
/// any thread) with `LEASEHOLD_INTERRUPTED`, within 100 ms. Waits that start later are not
/// affected, nor are held leases or their keep-alive. For a worker's shutdown: call it from
/// another thread, or from a signal handler.
///
/// Async-signal-safe: it only increments an atomic counter. So it does not set
/// `leasehold_last_error`, even for its one failure: NULL `client` gives
/// `LEASEHOLD_INVALID_ARGUMENT`.
///
/// (A waiting acquire also ends by itself when SIGTERM or SIGINT arrives on its thread: see the
/// README's "Waits a signal can end".)
///
/// # Safety
/// `client` is NULL or a live client.
#[no_mangle]
pub unsafe extern "C" fn leasehold_client_interrupt(
    client: *const leasehold_client,
) -> leasehold_status {
    // No panic boundary: nothing here can panic, and the boundary's error path allocates, which a
    // signal handler must not.
    // SAFETY: non-NULL client pointers are live handles from this library (header contract).
    match unsafe { client.as_ref() } {
        Some(client) => {
            client.interrupt();
            leasehold_status::LEASEHOLD_OK
        }
        None => leasehold_status::LEASEHOLD_INVALID_ARGUMENT,
    }
}

/// One attempt to take `key` for `ttl_ms` milliseconds.
///
/// `key` points to `key_len` bytes (1 to 1024, any bytes including NUL; not NUL-terminated), which
/// are copied. `ttl_ms` is 1 to 604800000 (7 days). On `LEASEHOLD_OK`, `*lease_out` receives a new
/// lease that the caller owns and must free with `leasehold_lease_free`; on any other status it is
/// left as it was. `LEASEHOLD_NOT_ACQUIRED` if someone else holds the key.
/// NULL `client`, `key` or `lease_out`, `key_len` of 0 or above 1024 (checked before `key` is
/// read), or `ttl_ms` out of range: `LEASEHOLD_INVALID_ARGUMENT`.
/// Thread-safe: any number of threads may call this on one client at once.
///
/// # Safety
/// `client` is NULL or a live client; `key` is NULL or points to `key_len` readable bytes;
/// `lease_out` is NULL or points to writable storage.
#[no_mangle]
pub unsafe extern "C" fn leasehold_try_acquire(
    client: *const leasehold_client,
    key: *const c_char,
    key_len: usize,
    ttl_ms: u64,
    lease_out: *mut *mut leasehold_lease,
) -> leasehold_status {
    boundary::call("leasehold_try_acquire", || {
        let kind = Ok(LeaseKind::Exclusive);
        acquire(client, key, key_len, kind, ttl_ms, None, lease_out)
    })
}

/// Like `leasehold_try_acquire`, but waits up to `wait_ms` milliseconds (0 to 604800000) for the
/// key to become free; `LEASEHOLD_NOT_ACQUIRED` when the wait runs out. Returns no later than
/// `wait_ms` plus one connect and one I/O timeout of the URL. A `wait_ms` of 0 makes a single
/// attempt. Thread-safe; blocks only the calling thread.
///
/// # Safety
/// As for `leasehold_try_acquire`.
#[no_mangle]
pub unsafe extern "C" fn leasehold_acquire(
    client: *const leasehold_client,
    key: *const c_char,
    key_len: usize,
    ttl_ms: u64,
    wait_ms: u64,
    lease_out: *mut *mut leasehold_lease,
) -> leasehold_status {
    boundary::call("leasehold_acquire", || {
        let kind = Ok(LeaseKind::Exclusive);
        acquire(client, key, key_len, kind, ttl_ms, Some(wait_ms), lease_out)
    })
}

/// One attempt at a shared (read) lease on `key`: granted while no exclusive lease holds the key
/// and no exclusive request waits for it (so readers never starve a writer); any number of shared
/// leases may hold it at once. Arguments, ownership and statuses as for `leasehold_try_acquire`;
/// the lease is released, extended and freed with the same calls. `LEASEHOLD_INVALID_ARGUMENT` on
/// a backend without shared locks (the message says which).
///
/// # Safety
/// As for `leasehold_try_acquire`.
#[no_mangle]
pub unsafe extern "C" fn leasehold_try_acquire_shared(
    client: *const leasehold_client,
    key: *const c_char,
    key_len: usize,
    ttl_ms: u64,
    lease_out: *mut *mut leasehold_lease,
) -> leasehold_status {
    boundary::call("leasehold_try_acquire_shared", || {
        let kind = Ok(LeaseKind::Shared);
        acquire(client, key, key_len, kind, ttl_ms, None, lease_out)
    })
}

/// Like `leasehold_try_acquire_shared`, but waits up to `wait_ms` milliseconds, as
/// `leasehold_acquire` does.
///
/// # Safety
/// As for `leasehold_try_acquire`.
#[no_mangle]
pub unsafe extern "C" fn leasehold_acquire_shared(
    client: *const leasehold_client,
    key: *const c_char,
    key_len: usize,
    ttl_ms: u64,
    wait_ms: u64,
    lease_out: *mut *mut leasehold_lease,
) -> leasehold_status {
    boundary::call("leasehold_acquire_shared", || {
        let kind = Ok(LeaseKind::Shared);
        acquire(client, key, key_len, kind, ttl_ms, Some(wait_ms), lease_out)
    })
}

/// One attempt at one of `permits` (1 to 65535) permits of the semaphore `key`: granted while fewer
/// than `permits` leases hold it. Each permit is a lease of its own (token, fence, TTL on the
/// backend's clock; release, extend and free as for any lease). Semaphore keys and lock keys are
/// separate namespaces. Everyone using one semaphore should pass the same `permits`.
/// `permits` of 0 or above 65535: `LEASEHOLD_INVALID_ARGUMENT`; otherwise as `leasehold_try_acquire`.
///
/// # Safety
/// As for `leasehold_try_acquire`.
#[no_mangle]
pub unsafe extern "C" fn leasehold_try_acquire_permit(
    client: *const leasehold_client,
    key: *const c_char,
    key_len: usize,
    permits: u32,
    ttl_ms: u64,
    lease_out: *mut *mut leasehold_lease,
) -> leasehold_status {
    boundary::call("leasehold_try_acquire_permit", || {
        let kind = Permits::new(permits).map(LeaseKind::Permit);
        acquire(client, key, key_len, kind, ttl_ms, None, lease_out)
    })
}

/// Like `leasehold_try_acquire_permit`, but waits up to `wait_ms` milliseconds for a permit (first
/// come, first served), as `leasehold_acquire` does.
///
/// # Safety
/// As for `leasehold_try_acquire`.
#[no_mangle]
pub unsafe extern "C" fn leasehold_acquire_permit(
    client: *const leasehold_client,
    key: *const c_char,
    key_len: usize,
    permits: u32,
    ttl_ms: u64,
    wait_ms: u64,
    lease_out: *mut *mut leasehold_lease,
) -> leasehold_status {
    boundary::call("leasehold_acquire_permit", || {
        let kind = Permits::new(permits).map(LeaseKind::Permit);
        acquire(client, key, key_len, kind, ttl_ms, Some(wait_ms), lease_out)
    })
}

fn acquire(
    client: *const leasehold_client,
    key: *const c_char,
    key_len: usize,
    kind: Result<LeaseKind>,
    ttl_ms: u64,
    wait_ms: Option<u64>,
    lease_out: *mut *mut leasehold_lease,
) -> Result<()> {
    let out = boundary::out(lease_out, "lease_out")?;
    let handle = leasehold_client::live(client)?;
    // Checked for NULL and 1 to 1024 bytes here, before it is read; copied once, into the request.
    let key = boundary::key(key, key_len)?;
    // The whole request is checked here, before a fork() child reconnects, so a bad argument is
    // reported as such; nothing below checks it again.
    let request = Request::new(key, kind?, Duration::from_millis(ttl_ms))?
        .waiting(Duration::from_millis(wait_ms.unwrap_or(0)))?;
    let lease = handle.current()?.acquire_request(&request);
    hand_out(out, handle, lease)
}

/// Writes a lease the backend gave into `*out` (owned by the caller from now), or returns the
/// backend's error with the client's secrets masked.
pub(crate) fn hand_out(
    out: &mut *mut leasehold_lease,
    handle: &leasehold_client,
    lease: Result<leasehold::Lease>,
) -> Result<()> {
    let lease = lease.map_err(|e| handle.redacted(e))?;
    *out = Box::into_raw(Box::new(leasehold_lease::new(lease, handle.secrets())));
    Ok(())
}

/// Picks up a lease taken elsewhere (another process, a queued job) by its key and `token`: the
/// 32 lowercase hex characters `leasehold_lease_token` gave the process that acquired it
/// (NUL-terminated). One round trip confirms the token still holds the key and reads its fence and
/// the time left. On `LEASEHOLD_OK`, `*lease_out` receives a new lease the caller owns and frees
/// with `leasehold_lease_free` (which releases it if still held); otherwise it is left as it was.
/// `LEASEHOLD_LOST` when that token no longer holds the key (expired, released, taken over).
/// `LEASEHOLD_INVALID_ARGUMENT` for NULL pointers, a bad `key_len`, a token that is not 32 lowercase
/// hex characters, and on a backend that cannot restore (PostgreSQL advisory: a session owns the
/// lock; use `?lock=table`). Thread-safe.
///
/// # Safety
/// `client` is NULL or a live client; `key` is NULL or points to `key_len` readable bytes; `token` is
/// NULL or a NUL-terminated string; `lease_out` is NULL or points to writable storage.
#[no_mangle]
pub unsafe extern "C" fn leasehold_lease_restore(
    client: *const leasehold_client,
    key: *const c_char,
    key_len: usize,
    token: *const c_char,
    lease_out: *mut *mut leasehold_lease,
) -> leasehold_status {
    boundary::call("leasehold_lease_restore", || {
        let out = boundary::out(lease_out, "lease_out")?;
        let handle = leasehold_client::live(client)?;
        let key = boundary::key(key, key_len)?;
        let token = boundary::text(token, "token")?;
        let backend = handle.current()?;
        hand_out(out, handle, backend.restore(key, token))
    })
}

/// The operator's escape hatch: frees `key` whoever holds it (the holder's next release or extend
/// gives `LEASEHOLD_LOST`); fences keep rising across it. `LEASEHOLD_OK` whether or not the key was
/// held. Counted (`force_released` in the stats) and logged as a warning. On PostgreSQL advisory it
/// terminates the session holding the lock, which needs the `pg_signal_backend` role.
/// NULL `client` or `key`, or a bad `key_len`: `LEASEHOLD_INVALID_ARGUMENT`. Thread-safe.
///
/// # Safety
/// `client` is NULL or a live client; `key` is NULL or points to `key_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn leasehold_force_release(
    client: *const leasehold_client,
    key: *const c_char,
    key_len: usize,
) -> leasehold_status {
    boundary::call("leasehold_force_release", || {
        let handle = leasehold_client::live(client)?;
        let key = boundary::key(key, key_len)?;
        let backend = handle.current()?;
        backend
            .force_release(key)
            .map(|_| ())
            .map_err(|e| handle.redacted(e))
    })
}
