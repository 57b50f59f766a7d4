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
