//! The exports of idempotency keys (`once`): the steps, so that C and PHP run an action at most
//! once per key with the same records as Rust's `Client::once` (see `leasehold_core::once`).

use crate::boundary;
use crate::client::hand_out;
use crate::handle::leasehold_client;
use crate::lease::{leasehold_lease, with_lease};
use crate::status::leasehold_status;
use leasehold::once::OnceRecord;
use leasehold::{check_wait, Error, Ttl};
use std::ffi::c_char;
use std::time::{Duration, UNIX_EPOCH};

/// What `leasehold_once_read` found recorded for a once-key. The values never change.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum leasehold_once_state {
    /// Nothing recorded: run the action.
    LEASEHOLD_ONCE_NONE = 0,
    /// An attempt started and never finished: check whether its action happened first.
    LEASEHOLD_ONCE_STARTED = 1,
    /// The action ran; its result is recorded.
    LEASEHOLD_ONCE_DONE = 2,
}

use leasehold_once_state::{LEASEHOLD_ONCE_DONE, LEASEHOLD_ONCE_NONE, LEASEHOLD_ONCE_STARTED};

/// Takes the lease of the once-key `key` (an exclusive lock on `"once:"` followed by the key, so
/// it never takes a lock the program holds on the key itself), waiting up to `wait_ms` while
/// another attempt holds it. Then: `leasehold_once_read`; if nothing is recorded,
/// `leasehold_once_started`, the action (keep the lease alive), `leasehold_once_done`; and
/// `leasehold_lease_release`. The steps, the records and their fences are those of Rust's
/// `Client::once` and PHP's `Client::once()`.
///
/// `key` is 1 to 1019 bytes (the lock's key must fit 1024). Arguments, ownership and statuses as
/// for `leasehold_acquire`.
///
/// # Safety
/// As for `leasehold_acquire`.
#[no_mangle]
pub unsafe extern "C" fn leasehold_once_lock(
    client: *const leasehold_client,
    key: *const c_char,
    key_len: usize,
    ttl_ms: u64,
    wait_ms: u64,
    lease_out: *mut *mut leasehold_lease,
) -> leasehold_status {
    boundary::call("leasehold_once_lock", || {
        let out = boundary::out(lease_out, "lease_out")?;
        let handle = leasehold_client::live(client)?;
        let key = boundary::key(key, key_len)?;
        let ttl = Ttl::from_millis(ttl_ms)?.as_duration();
        let wait = check_wait(Duration::from_millis(wait_ms))?;
        let lease = handle.current()?.once_lock(key, ttl, wait);
        hand_out(out, handle, lease)
    })
}

/// Reads the record of the once-key whose lease `lease` is (from `leasehold_once_lock`).
///
/// On `LEASEHOLD_OK`: `*state_out` is `LEASEHOLD_ONCE_NONE` (0, run the action),
/// `LEASEHOLD_ONCE_STARTED` (1: an attempt with fence `*fence_out`, started `*started_ms_out` ms
/// after the Unix epoch, never finished — check whether its action happened before running it
/// again) or `LEASEHOLD_ONCE_DONE` (2: return the recorded result instead of running anything).
/// `*result_out` and `*result_len_out` are the recorded result (bytes, not NUL-terminated) (NULL and 0 unless done); its bytes
/// belong to the lease and stay valid until the next `leasehold_once_read` on it or its
/// `leasehold_lease_free`. Any output pointer may be NULL if not wanted. `LEASEHOLD_LOST` if the
/// lease is no longer held; `LEASEHOLD_INVALID_ARGUMENT` for a lease not from
/// `leasehold_once_lock`, or a backend that keeps no records.
///
/// # Safety
/// `lease` is NULL or a live lease not used by another thread during the call; each output is
/// NULL or points to writable storage.
#[no_mangle]
pub unsafe extern "C" fn leasehold_once_read(
    lease: *mut leasehold_lease,
    state_out: *mut leasehold_once_state,
    fence_out: *mut u64,
    started_ms_out: *mut u64,
    result_out: *mut *const c_char,
    result_len_out: *mut usize,
) -> leasehold_status {
    boundary::call("leasehold_once_read", || {
        let mut record = OnceRecord::None;
        with_lease(lease, |l| {
            record = l.once_record()?;
            Ok(())
        })?;
        // SAFETY: `with_lease` checked the pointer; the caller lends the lease for the call.
        let handle = unsafe { lease.as_mut() }.ok_or_else(|| Error::invalid("lease is NULL"))?;
        let ms = |at: std::time::SystemTime| {
            at.duration_since(UNIX_EPOCH)
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                .unwrap_or(0)
        };
        let (state, fence, started) = match record {
            OnceRecord::None => {
                handle.once_result.clear();
                (LEASEHOLD_ONCE_NONE, 0, 0)
            }
            OnceRecord::Started { fence, started_at } => {
                handle.once_result.clear();
                (LEASEHOLD_ONCE_STARTED, fence, ms(started_at))
            }
            OnceRecord::Done {
                fence,
                started_at,
                result,
            } => {
                handle.once_result = result;
                (LEASEHOLD_ONCE_DONE, fence, ms(started_at))
            }
        };
        let done = state == LEASEHOLD_ONCE_DONE;
        // SAFETY: each output is NULL or writable (header contract); written only on success.
        unsafe {
            if let Some(out) = state_out.as_mut() {
                *out = state;
            }
            if let Some(out) = fence_out.as_mut() {
                *out = fence;
            }
            if let Some(out) = started_ms_out.as_mut() {
                *out = started;
            }
            if let Some(out) = result_out.as_mut() {
                *out = if done {
                    handle.once_result.as_ptr().cast()
                } else {
                    std::ptr::null()
                };
            }
            if let Some(out) = result_len_out.as_mut() {
                *out = handle.once_result.len();
            }
        }
        Ok(())
    })
}

/// Records that this lease's attempt starts its action now (with its fence), kept `keep_for_ms`
/// (1 ms to 7 days) from now. Call it right before the action: if the worker dies during it, the
/// next attempt finds it started and does not run it blindly. `LEASEHOLD_LOST` if the lease is no
/// longer held or a newer holder recorded since.
///
/// # Safety
/// `lease` is NULL or a live lease not used by another thread during the call.
#[no_mangle]
pub unsafe extern "C" fn leasehold_once_started(
    lease: *mut leasehold_lease,
    keep_for_ms: u64,
) -> leasehold_status {
    boundary::call("leasehold_once_started", || {
        with_lease(lease, |l| {
            l.once_started(Duration::from_millis(keep_for_ms))
        })
    })
}

/// Records that the action is done, with its result (`result_len` bytes at `result`, at most
/// 65526; NULL with a length of 0 for none), kept `keep_for_ms` from now: later attempts read it
/// back instead of running the action. Also what a recovery records once it found that an
/// incomplete attempt's action did happen. `LEASEHOLD_LOST` as for `leasehold_once_started`.
///
/// # Safety
/// `lease` is NULL or a live lease not used by another thread during the call; `result` is NULL
/// (with `result_len` 0) or points to `result_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn leasehold_once_done(
    lease: *mut leasehold_lease,
    result: *const c_char,
    result_len: usize,
    keep_for_ms: u64,
) -> leasehold_status {
    boundary::call("leasehold_once_done", || {
        let bytes: &[u8] = if result_len == 0 {
            &[]
        } else if result.is_null() {
            return Err(Error::invalid("result is NULL"));
        } else if result_len > leasehold::once::MAX_RESULT {
            return Err(Error::invalid(format!(
                "a once result is at most {} bytes, got {result_len}",
                leasehold::once::MAX_RESULT
            )));
        } else {
            // SAFETY: non-NULL, `result_len` readable bytes (header contract), checked above.
            unsafe { std::slice::from_raw_parts(result.cast::<u8>(), result_len) }
        };
        with_lease(lease, |l| {
            l.once_done(bytes, Duration::from_millis(keep_for_ms))
        })
    })
}
