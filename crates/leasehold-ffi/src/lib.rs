//! Leasehold's C ABI: `libleasehold.so` and `libleasehold.a`, described by the
//! generated `include/leasehold.h` (and `include/leasehold_ffi.h` for PHP's `FFI::cdef`).
//!
//! Every export checks its pointers and lengths, catches panics (`LEASEHOLD_INTERNAL`, never an
//! unwind into C), writes outputs only on success, and leaves a message for
//! `leasehold_last_error()` when it fails. The library must be built with `panic = "unwind"` (the
//! default) for the panic boundary to hold.

#![allow(clippy::missing_safety_doc)]

mod abi;
mod boundary;
mod client;
mod gate;
mod handle;
mod last_error;
mod lease;
mod lent;
mod metrics;
mod once;
mod persistent;
mod renewed;
mod status;

pub use abi::{leasehold_abi_check, leasehold_abi_version, LEASEHOLD_ABI_VERSION};
pub use client::{
    leasehold_acquire, leasehold_client_free, leasehold_client_open,
    leasehold_client_open_persistent, leasehold_try_acquire,
};
pub use handle::leasehold_client;
pub use lease::{
    leasehold_lease, leasehold_lease_extend, leasehold_lease_fence, leasehold_lease_free,
    leasehold_lease_keep_alive, leasehold_lease_keep_alive_status, leasehold_lease_release,
    leasehold_lease_remaining_ms, leasehold_lease_token,
};
pub use metrics::{
    leasehold_client_metrics, leasehold_client_retries, leasehold_client_stats_json,
};
pub use status::leasehold_status;

use std::ffi::c_char;

/// The library's version, such as "0.4.0": a static string owned by the library, never freed.
/// Thread-safe.
#[no_mangle]
pub extern "C" fn leasehold_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// The message of the last call on this thread that failed, or "" if none has. Successful calls
/// leave it as it was, so look at it only after a status other than `LEASEHOLD_OK`. Never
/// NULL, never contains a password. Owned by the library: do not free it; it stays valid until
/// the next leasehold call on this thread. Thread-safe (each thread has its own).
#[no_mangle]
pub extern "C" fn leasehold_last_error() -> *const c_char {
    last_error::as_ptr()
}

/// What a php-fpm worker's next request relies on: `leasehold_keep_alive_stop_all` (in `lease.rs`)
/// reaches the handles `renewed.rs` lists, and never a freed one.
#[cfg(test)]
mod renewed_tests {
    use crate::client::{leasehold_client_free, leasehold_client_open, leasehold_try_acquire};
    use crate::handle::leasehold_client;
    use crate::lease::{
        leasehold_keep_alive_stop_all, leasehold_lease_free, leasehold_lease_keep_alive,
        leasehold_lease_remaining_ms,
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
