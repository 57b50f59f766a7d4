//! `leasehold_lease`: a held (or once held) lock, owned by the process that took it.

use crate::boundary::{self, Redact, Secrets};
use crate::status::leasehold_status;
use leasehold::{Error, Lease, Result, Ttl};
use std::ffi::c_char;
use std::sync::Arc;
use std::time::Duration;

/// A lease on one key: proof of exclusive ownership until it is released or its TTL runs out.
///
/// Opaque. Owned by the caller, who frees it with `leasehold_lease_free`. Use one lease from one
/// thread at a time (different leases may be used by different threads at once). It keeps the
/// client it came from alive. A lease inherited by a fork() child still belongs to the parent:
/// in the child, release and extend fail with `LEASEHOLD_INVALID_ARGUMENT` and
/// `leasehold_lease_free` frees the handle without releasing the parent's lock.
#[allow(non_camel_case_types)]
pub struct leasehold_lease {
    /// Knows which process took it: in any other (a fork() child) core's guard refuses release,
    /// extend and keep-alive, and dropping it leaves the parent's lock and connection alone.
    pub(crate) lease: Lease,
    /// The 32 hex characters and a NUL, so the token can be lent to C for the lease's lifetime.
    token: [u8; 33],
    /// The client's secrets, masked in this lease's errors. The lease itself keeps the client's
    /// backend (its connections and counters) alive.
    secrets: Arc<Secrets>,
    /// The result `leasehold_once_read` lent to C last, kept until the next read or the free.
    pub(crate) once_result: Vec<u8>,
}

impl leasehold_lease {
    pub(crate) fn new(lease: Lease, secrets: Arc<Secrets>) -> Self {
        let mut token = [0u8; 33];
        let hex = lease.token();
        let hex = hex.as_str().as_bytes();
        let n = hex.len().min(32);
        token[..n].copy_from_slice(&hex[..n]);
        leasehold_lease {
            lease,
            token,
            secrets,
            once_result: Vec::new(),
        }
    }
}

/// A shared view of a lease pointer, or InvalidArgument for NULL.
fn view<'a>(lease: *const leasehold_lease) -> Result<&'a leasehold_lease> {
    // SAFETY: non-NULL lease pointers come from an acquire and are not yet freed (header contract).
    unsafe { lease.as_ref() }.ok_or_else(|| Error::invalid("lease is NULL"))
}

/// Runs `f` on the lease behind a pointer the caller lends us exclusively for the call, with the
/// client's secrets masked in its error.
pub(crate) fn with_lease(
    lease: *mut leasehold_lease,
    f: impl FnOnce(&mut Lease) -> Result<()>,
) -> Result<()> {
    // SAFETY: as for `view`; the caller gives us exclusive use for the call.
    let handle = unsafe { lease.as_mut() }.ok_or_else(|| Error::invalid("lease is NULL"))?;
    f(&mut handle.lease).map_err(|e| handle.secrets.redact(e))
}

/// Releases the key if it still holds this lease's token (compare-and-delete). Does not free the
/// lease: call `leasehold_lease_free` afterwards.
///
/// `LEASEHOLD_LOST` if the key is not ours any more (expired or taken over; the current holder
/// keeps it); `LEASEHOLD_INVALID_ARGUMENT` for NULL, for a lease already released ("already
/// released") and in a fork() child for a lease the parent took. After `LEASEHOLD_UNAVAILABLE`
/// the release may or may not have run, so the lease is over for its holder (remaining 0, extend
/// gives `LEASEHOLD_LOST`); the release may be retried to free the key before its TTL (a retry
/// that finds the key already gone gives `LEASEHOLD_LOST`).
///
/// # Safety
/// `lease` is NULL or a live lease not used by another thread during the call.
#[no_mangle]
pub unsafe extern "C" fn leasehold_lease_release(lease: *mut leasehold_lease) -> leasehold_status {
    boundary::call("leasehold_lease_release", || {
        with_lease(lease, Lease::release_in_place)
    })
}

/// Makes the lease end `ttl_ms` milliseconds (1 to 604800000) from now, if it is still ours.
///
/// `LEASEHOLD_LOST` if the key is not ours any more; `LEASEHOLD_INVALID_ARGUMENT` for NULL, a
/// `ttl_ms` out of range, a released lease, or in a fork() child for a lease the parent took.
/// After `LEASEHOLD_UNAVAILABLE` the extend may or may not have run: the remaining time is 0 until
/// a later extend succeeds, and that one counts from its own send with the shorter of the two TTLs
/// (the unanswered extend may still run after it).
///
/// # Safety
/// `lease` is NULL or a live lease not used by another thread during the call.
#[no_mangle]
pub unsafe extern "C" fn leasehold_lease_extend(
    lease: *mut leasehold_lease,
    ttl_ms: u64,
) -> leasehold_status {
    boundary::call("leasehold_lease_extend", || {
        with_lease(lease, |l| l.extend(Ttl::from_millis(ttl_ms)?.as_duration()))
    })
}

/// Turns a shared lease exclusive, keeping its token: waits up to `wait_ms` milliseconds (0 to
/// 604800000; 0 makes one attempt) until no other shared holder is left, then the lease is the
/// key's only holder, with a new fence (read it again with `leasehold_lease_fence`) and its TTL
/// renewed from this call.
///
/// `LEASEHOLD_NOT_ACQUIRED` when other readers still hold the key at the end of the wait: the
/// lease stays shared and held, as before. `LEASEHOLD_INTERRUPTED`, the lease also still shared
/// and held, when SIGTERM, SIGINT or `leasehold_client_interrupt` ends the wait, as for an
/// acquire's. Two holders promoting at once wait for each other until one's wait ends.
/// `LEASEHOLD_LOST` if the lease is not ours any more; `LEASEHOLD_INVALID_ARGUMENT` for NULL, a
/// lease that is not shared, a released lease, or in a fork() child for a lease the parent took. After `LEASEHOLD_UNAVAILABLE` the promote may or may not have run: the remaining time is
/// 0 until a later extend succeeds.
///
/// # Safety
/// `lease` is NULL or a live lease not used by another thread during the call.
#[no_mangle]
pub unsafe extern "C" fn leasehold_lease_promote(
    lease: *mut leasehold_lease,
    wait_ms: u64,
) -> leasehold_status {
    boundary::call("leasehold_lease_promote", || {
        with_lease(lease, |l| l.promote(Duration::from_millis(wait_ms)))
    })
}

/// Turns an exclusive lease shared, keeping its token and fence, at once: other readers may join
/// from now on, writers may not. Its TTL is renewed from this call.
///
/// `LEASEHOLD_LOST` if the lease is not ours any more; `LEASEHOLD_INVALID_ARGUMENT` for NULL, a
/// lease that is not exclusive, a released lease, a backend that cannot demote, or in a fork()
/// child for a lease the parent took. After `LEASEHOLD_UNAVAILABLE` the remaining time is 0 until
/// a later extend succeeds.
///
/// # Safety
/// `lease` is NULL or a live lease not used by another thread during the call.
#[no_mangle]
pub unsafe extern "C" fn leasehold_lease_demote(lease: *mut leasehold_lease) -> leasehold_status {
    boundary::call("leasehold_lease_demote", || {
        with_lease(lease, Lease::demote)
    })
}

/// Turns background renewal of the lease on (`true`) or off (`false`), for work that runs longer
/// than the TTL and cannot stop to call `leasehold_lease_extend`.
///
/// While on, a library thread (one per process, shared by every lease; not one per lease) extends
/// the lease by its TTL (the last one given to acquire or extend) every third of the TTL, so the
/// caller's thread never has to. Renewal stops when the lease is released or freed, when it is
/// turned off, and in a fork() child (the child has no renewal thread; only the parent renews).
/// A renewal that finds the lease lost stops renewing and is never silent: from then on
/// `leasehold_lease_remaining_ms` is ≤ 0, the next `leasehold_lease_release` or
/// `leasehold_lease_extend` gives `LEASEHOLD_LOST`, and `leasehold_lease_keep_alive_status`
/// reports it. Check `leasehold_lease_remaining_ms` (no network call) before each step of the work
/// that must not run unprotected. A renewal that fails for another reason (backend unavailable) is
/// retried soon, within the TTL.
///
/// `LEASEHOLD_INVALID_ARGUMENT` for NULL, for a released lease ("already released") and in a
/// fork() child for a lease the parent took (nothing is touched then). Makes no network call.
///
/// # Safety
/// `lease` is NULL or a live lease not used by another thread during the call.
#[no_mangle]
pub unsafe extern "C" fn leasehold_lease_keep_alive(
    lease: *mut leasehold_lease,
    enabled: bool,
) -> leasehold_status {
    boundary::call("leasehold_lease_keep_alive", || {
        with_lease(lease, |l| l.keep_alive(enabled))?;
        if enabled {
            crate::renewed::track(lease);
        }
        Ok(())
    })
}

/// A function the keep-alive thread calls when a renewal of a lease fails (see
/// `leasehold_lease_on_keep_alive_failure`): `user_data` as registered, and `LEASEHOLD_LOST` (the
/// lease is lost; renewal has stopped) or `LEASEHOLD_UNAVAILABLE` (the backend did not answer; the
/// lease may be gone, renewal tries again soon).
#[allow(non_camel_case_types)]
pub type leasehold_keep_alive_failed =
    Option<unsafe extern "C" fn(user_data: *mut std::ffi::c_void, status: leasehold_status)>;

/// The C side of a registered callback: called from the keep-alive thread.
struct FailureCallback {
    callback: unsafe extern "C" fn(*mut std::ffi::c_void, leasehold_status),
    user_data: *mut std::ffi::c_void,
}

// SAFETY: the header makes the caller promise that `user_data` may be used from the library's
// keep-alive thread, and the callback is a plain C function.
unsafe impl Send for FailureCallback {}
unsafe impl Sync for FailureCallback {}

impl FailureCallback {
    fn call(&self, status: leasehold_status) {
        // A C callback cannot unwind into us.
        // SAFETY: as promised by whoever registered it (header contract).
        unsafe { (self.callback)(self.user_data, status) }
    }
}

/// Registers `callback` to be called, with `user_data`, on the library's keep-alive thread each
/// time a background renewal of `lease` fails — so a worker can stop its job at once instead of at
/// its next `leasehold_lease_check`. NULL `callback` removes it. The status passed is
/// `LEASEHOLD_LOST` or `LEASEHOLD_UNAVAILABLE` (as `leasehold_lease_keep_alive_status` would say).
///
/// The callback runs on another thread than the one that owns the lease: it must be quick, must
/// not block, must not call into this library with `lease`, and `user_data` must be safe to use
/// from that thread (set a flag, write to a pipe, signal a condition variable). It is not called
/// after `leasehold_lease_release` or `leasehold_lease_free` returned, since renewal has stopped.
///
/// `LEASEHOLD_INVALID_ARGUMENT` for NULL `lease` and in a fork() child for a lease the parent took.
///
/// # Safety
/// `lease` is NULL or a live lease not used by another thread during the call; `callback` is NULL
/// or a function that may be called from another thread with `user_data`.
#[no_mangle]
pub unsafe extern "C" fn leasehold_lease_on_keep_alive_failure(
    lease: *mut leasehold_lease,
    callback: leasehold_keep_alive_failed,
    user_data: *mut std::ffi::c_void,
) -> leasehold_status {
    boundary::call("leasehold_lease_on_keep_alive_failure", || {
        let hook = callback.map(|callback| {
            let c = FailureCallback {
                callback,
                user_data,
            };
            let hook: leasehold::KeepAliveHook =
                Arc::new(move |error: &Error| c.call(leasehold_status::from(error.kind())));
            hook
        });
        with_lease(lease, |l| l.on_keep_alive_failure(hook))
    })
}

/// How background renewal (`leasehold_lease_keep_alive`) is faring: `LEASEHOLD_OK` while no
/// renewal has failed (or the latest one succeeded, or renewal was never turned on); otherwise the
/// status of the latest failed renewal, with its message in `leasehold_last_error()`:
/// `LEASEHOLD_LOST` once a renewal found the lease lost (final: renewal has stopped), or
/// `LEASEHOLD_UNAVAILABLE` while renewals fail and are being retried (the lease may still be
/// ours; watch `leasehold_lease_remaining_ms`). Makes no network call.
///
/// `LEASEHOLD_INVALID_ARGUMENT` for NULL, and in a fork() child for a lease the parent took (the
/// parent's renewal state is not readable from the child).
///
/// # Safety
/// `lease` is NULL or a live lease not used by another thread during the call.
#[no_mangle]
pub unsafe extern "C" fn leasehold_lease_keep_alive_status(
    lease: *const leasehold_lease,
) -> leasehold_status {
    boundary::call("leasehold_lease_keep_alive_status", || {
        let handle = view(lease)?;
        // Core reads no renewal state in a fork() child (its lock may be held forever by the
        // parent's renewal thread, which did not survive the fork); C is told it is not its lease.
        handle.lease.check_owner()?;
        match handle.lease.keep_alive_error() {
            None => Ok(()),
            Some(error) => Err(handle.secrets.redact(error)),
        }
    })
}

/// A long job's checkpoint between two steps: `LEASEHOLD_OK` while the lease is held with at least
/// `margin_ms` left; `LEASEHOLD_LOST` (the reason in `leasehold_last_error()`) when it was lost or
/// released, when its latest keep-alive renewal failed, or when less than `margin_ms` is left, so
/// the job stops before the lease runs out. Makes no network call.
///
/// `LEASEHOLD_INVALID_ARGUMENT` for NULL, and in a fork() child for a lease the parent took.
///
/// # Safety
/// `lease` is NULL or a live lease not used by another thread during the call.
#[no_mangle]
pub unsafe extern "C" fn leasehold_lease_check(
    lease: *const leasehold_lease,
    margin_ms: u64,
) -> leasehold_status {
    boundary::call("leasehold_lease_check", || {
        let handle = view(lease)?;
        let margin = std::time::Duration::from_millis(margin_ms);
        handle
            .lease
            .checkpoint(margin)
            .map_err(|e| handle.secrets.redact(e))
    })
}

/// The lease's fencing token: never 0, strictly increasing per key (a large number, about the server's
/// time in µs, so it keeps rising when a backend loses its data). Hand it to the store you
/// protect so it can reject a stale holder. 0 for NULL. Makes no network call.
///
/// # Safety
/// `lease` is NULL or a live lease.
#[no_mangle]
pub unsafe extern "C" fn leasehold_lease_fence(lease: *const leasehold_lease) -> u64 {
    boundary::value("leasehold_lease_fence", 0, || {
        Ok(view(lease)?.lease.fence())
    })
}

/// Whether the lease is shared (a read lease) now: true for a lease taken with
/// `leasehold_try_acquire_shared` or `leasehold_acquire_shared`, restored from one, or demoted;
/// false for an exclusive lease, a semaphore permit, a promoted lease, and NULL. Makes no network
/// call.
///
/// # Safety
/// `lease` is NULL or a live lease.
#[no_mangle]
pub unsafe extern "C" fn leasehold_lease_is_shared(lease: *const leasehold_lease) -> bool {
    boundary::value("leasehold_lease_is_shared", false, || {
        Ok(view(lease)?.lease.kind() == leasehold::LeaseKind::Shared)
    })
}

/// Milliseconds left on the lease by the local monotonic clock, minus the clock-drift allowance:
/// conservative, and makes no network call. At most 0 once the lease expired, was released, or a
/// keep-alive renewal found it lost; 0 for NULL. Kept-alive leases move it forward at each renewal.
///
/// # Safety
/// `lease` is NULL or a live lease.
#[no_mangle]
pub unsafe extern "C" fn leasehold_lease_remaining_ms(lease: *const leasehold_lease) -> i64 {
    boundary::value("leasehold_lease_remaining_ms", 0, || {
        let left = view(lease)?.lease.remaining().as_millis();
        Ok(i64::try_from(left).unwrap_or(i64::MAX))
    })
}

/// The lease's owner token: 32 lowercase hex characters, NUL-terminated. The string is owned by
/// the lease and valid until `leasehold_lease_free`; copy it to keep it longer. NULL for NULL.
///
/// # Safety
/// `lease` is NULL or a live lease.
#[no_mangle]
pub unsafe extern "C" fn leasehold_lease_token(lease: *const leasehold_lease) -> *const c_char {
    boundary::value("leasehold_lease_token", std::ptr::null(), || {
        Ok(view(lease)?.token.as_ptr().cast())
    })
}

/// Frees a lease. If it is still held, it is released first (the outcome is not reported; call
/// `leasehold_lease_release` to see it), which also ends its keep-alive renewal. NULL is a no-op.
/// In a fork() child, a lease the parent took is only forgotten here: the parent keeps its lock.
/// Works whether or not its client was freed already.
///
/// # Safety
/// `lease` is NULL or a live lease; it must not be used after this call.
#[no_mangle]
pub unsafe extern "C" fn leasehold_lease_free(lease: *mut leasehold_lease) {
    boundary::quietly("leasehold_lease_free", || {
        if !lease.is_null() {
            crate::renewed::untrack(lease);
            // SAFETY: the pointer came from Box::into_raw in an acquire.
            drop(unsafe { Box::from_raw(lease) });
        }
    });
}

/// Frees a lease WITHOUT releasing it: the key stays held on the backend until its TTL runs out
/// (keep-alive renewal stops). For hosts whose frameworks let a lock outlive the object that took
/// it — a Symfony `Key` serialized for another process, a Laravel lock restored elsewhere by its
/// owner — where freeing must not give the key back. The lease can still be picked up by key and
/// token with `leasehold_lease_restore`. On PostgreSQL advisory the lease's session is kept open
/// (it is the lock) until the session's idle timeout, the TTL, ends it; it no longer counts against
/// the client's `pool_size`, and the library closes its end at a later call once the TTL has passed.
/// NULL is a no-op; in a fork() child it does what `leasehold_lease_free` does there.
///
/// # Safety
/// `lease` is NULL or a live lease; it must not be used after this call.
#[no_mangle]
pub unsafe extern "C" fn leasehold_lease_detach(lease: *mut leasehold_lease) {
    boundary::quietly("leasehold_lease_detach", || {
        if lease.is_null() {
            return;
        }
        crate::renewed::untrack(lease);
        // SAFETY: the pointer came from Box::into_raw in an acquire.
        let handle = unsafe { Box::from_raw(lease) };
        // In a fork() child, core's forget leaves an inherited lease alone, as free does.
        handle.lease.forget();
    });
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
        let addresses = crate::renewed::drain();
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
