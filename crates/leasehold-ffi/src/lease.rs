//! `leasehold_lease`: a held (or once held) lock, owned by the process that took it.

use crate::boundary;
use crate::client::leasehold_client;
use crate::fork;
use crate::status::leasehold_status;
use leasehold::{Error, Lease, Result, Ttl};
use std::ffi::c_char;
use std::sync::Arc;

/// A lease on one key: proof of exclusive ownership until it is released or its TTL runs out.
///
/// Opaque. Owned by the caller, who frees it with `leasehold_lease_free`. Use one lease from one
/// thread at a time (different leases may be used by different threads at once). It keeps the
/// client it came from alive. A lease inherited by a fork() child still belongs to the parent:
/// in the child, release and extend fail with `LEASEHOLD_INVALID_ARGUMENT` and
/// `leasehold_lease_free` frees the handle without releasing the parent's lock.
#[allow(non_camel_case_types)]
pub struct leasehold_lease {
    /// None only while being freed in a process that does not own the lease.
    lease: Option<Lease>,
    /// The process that acquired the lease.
    pid: u32,
    fence: u64,
    /// The 32 hex characters and a NUL, so the token can be lent to C for the lease's lifetime.
    token: [u8; 33],
    client: Arc<leasehold_client>,
}

impl leasehold_lease {
    pub(crate) fn new(lease: Lease, client: Arc<leasehold_client>) -> Self {
        let mut token = [0u8; 33];
        let hex = lease.token();
        let hex = hex.as_str().as_bytes();
        let n = hex.len().min(32);
        token[..n].copy_from_slice(&hex[..n]);
        leasehold_lease {
            fence: lease.fence(),
            lease: Some(lease),
            pid: fork::pid(),
            token,
            client,
        }
    }

    /// The lease, for the process that took it only.
    fn owned(&mut self) -> Result<&mut Lease> {
        self.check_owner()?;
        self.lease
            .as_mut()
            .ok_or_else(|| Error::Internal("lease handle is empty".into()))
    }

    /// Shared access to the lease, for the process that took it only.
    fn owned_ref(&self) -> Result<&Lease> {
        self.check_owner()?;
        self.lease
            .as_ref()
            .ok_or_else(|| Error::Internal("lease handle is empty".into()))
    }

    fn check_owner(&self) -> Result<()> {
        if self.pid != fork::pid() {
            return Err(Error::invalid(
                "lease belongs to another process (it was inherited across fork(); only the \
                 process that acquired it may release, extend or keep it alive)",
            ));
        }
        Ok(())
    }
}

impl Drop for leasehold_lease {
    fn drop(&mut self) {
        if self.pid != fork::pid() {
            // Releasing would free the parent's lock; even dropping could close its connection.
            if let Some(inherited) = self.lease.take() {
                fork::keep_forever(inherited);
            }
        }
        // In the owning process the Lease guard releases a still held key as it drops.
    }
}

/// A shared view of a lease pointer, or InvalidArgument for NULL.
fn view<'a>(lease: *const leasehold_lease) -> Result<&'a leasehold_lease> {
    // SAFETY: non-NULL lease pointers come from an acquire and are not yet freed (header contract).
    unsafe { lease.as_ref() }.ok_or_else(|| Error::invalid("lease is NULL"))
}

/// Releases the key if it still holds this lease's token (compare-and-delete). Does not free the
/// lease: call `leasehold_lease_free` afterwards.
///
/// `LEASEHOLD_LOST` if the key is not ours any more (expired or taken over; the current holder
/// keeps it); `LEASEHOLD_INVALID_ARGUMENT` for NULL, for a lease already released ("already
/// released") and in a fork() child for a lease the parent took. After `LEASEHOLD_UNAVAILABLE`
/// the lease is still held and the release may be retried.
///
/// # Safety
/// `lease` is NULL or a live lease not used by another thread during the call.
#[no_mangle]
pub unsafe extern "C" fn leasehold_lease_release(lease: *mut leasehold_lease) -> leasehold_status {
    boundary::call("leasehold_lease_release", || {
        // SAFETY: as for `view`; the caller gives us exclusive use for the call.
        let handle = unsafe { lease.as_mut() }.ok_or_else(|| Error::invalid("lease is NULL"))?;
        let client = handle.client.clone();
        handle
            .owned()?
            .release_in_place()
            .map_err(|e| client.redacted(e))
    })
}

/// Makes the lease end `ttl_ms` milliseconds (1 to 604800000) from now, if it is still ours.
///
/// `LEASEHOLD_LOST` if the key is not ours any more; `LEASEHOLD_INVALID_ARGUMENT` for NULL, a
/// `ttl_ms` out of range, a released lease, or in a fork() child for a lease the parent took.
///
/// # Safety
/// `lease` is NULL or a live lease not used by another thread during the call.
#[no_mangle]
pub unsafe extern "C" fn leasehold_lease_extend(
    lease: *mut leasehold_lease,
    ttl_ms: u64,
) -> leasehold_status {
    boundary::call("leasehold_lease_extend", || {
        // SAFETY: as for `view`; the caller gives us exclusive use for the call.
        let handle = unsafe { lease.as_mut() }.ok_or_else(|| Error::invalid("lease is NULL"))?;
        let ttl = Ttl::from_millis(ttl_ms)?.as_duration();
        let client = handle.client.clone();
        handle.owned()?.extend(ttl).map_err(|e| client.redacted(e))
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
        // SAFETY: as for `view`; the caller gives us exclusive use for the call.
        let handle = unsafe { lease.as_mut() }.ok_or_else(|| Error::invalid("lease is NULL"))?;
        let client = handle.client.clone();
        handle
            .owned()?
            .keep_alive(enabled)
            .map_err(|e| client.redacted(e))
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
        // In a fork() child the lease's lock may be held forever by the parent's renewal thread
        // (which did not survive the fork), so the child must not even read it.
        let lease = handle.owned_ref()?;
        match lease.keep_alive_error() {
            None => Ok(()),
            Some(error) => Err(handle.client.redacted(error)),
        }
    })
}

/// The lease's fencing token: strictly increasing per key, starting at 1. Hand it to the store you
/// protect so it can reject a stale holder. 0 for NULL. Makes no network call.
///
/// # Safety
/// `lease` is NULL or a live lease.
#[no_mangle]
pub unsafe extern "C" fn leasehold_lease_fence(lease: *const leasehold_lease) -> u64 {
    boundary::value("leasehold_lease_fence", 0, || Ok(view(lease)?.fence))
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
        let handle = view(lease)?;
        let left = handle
            .lease
            .as_ref()
            .map_or(0, |l| l.remaining().as_millis());
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
            // SAFETY: the pointer came from Box::into_raw in an acquire.
            drop(unsafe { Box::from_raw(lease) });
        }
    });
}
