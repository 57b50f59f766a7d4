//! What every export does at the C boundary: catch panics, turn errors into a status plus
//! `leasehold_last_error()`, and read raw arguments without trusting them.

use crate::last_error;
use crate::status::leasehold_status;
use leasehold::{Error, Result, MAX_KEY_LEN};
use std::ffi::{c_char, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs `body` for the export `function`. Never unwinds: a panic becomes `LEASEHOLD_INTERNAL`.
pub(crate) fn call(function: &str, body: impl FnOnce() -> Result<()>) -> leasehold_status {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => leasehold_status::LEASEHOLD_OK,
        Ok(Err(error)) => {
            last_error::set(format_args!("{function}: {error}"));
            error.kind().into()
        }
        Err(payload) => {
            panicked(function, payload);
            leasehold_status::LEASEHOLD_INTERNAL
        }
    }
}

/// Like [`call`] for exports that return a value; `fallback` stands in on error or panic.
pub(crate) fn value<T>(function: &str, fallback: T, body: impl FnOnce() -> Result<T>) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(value)) => value,
        Ok(Err(error)) => {
            last_error::set(format_args!("{function}: {error}"));
            fallback
        }
        Err(payload) => {
            panicked(function, payload);
            fallback
        }
    }
}

/// Runs `body`, which cannot fail, swallowing a panic (for the `_free` functions).
pub(crate) fn quietly(function: &str, body: impl FnOnce()) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(body)) {
        panicked(function, payload);
    }
}

fn panicked(function: &str, payload: Box<dyn std::any::Any + Send>) {
    // The payload text is left out: it could quote anything, a connection string included. The
    // panic hook has already printed it to stderr for whoever debugs this.
    last_error::set(format_args!(
        "{function}: internal error: a panic was caught inside leasehold (a bug; please report it)"
    ));
    // Dropping a payload could itself panic; forgetting it costs a few bytes once per bug.
    std::mem::forget(payload);
}

/// Checks an output pointer before any work is done, so nothing is acquired that cannot be handed over.
pub(crate) fn out<'a, T>(ptr: *mut *mut T, name: &str) -> Result<&'a mut *mut T> {
    // SAFETY: non-NULL output pointers must point at writable storage, as the header states.
    unsafe { ptr.as_mut() }.ok_or_else(|| Error::invalid(format!("{name} is NULL")))
}

/// The key bytes. The length is checked before the pointer is read, so a huge `key_len` never
/// makes us touch memory beyond what a valid key could occupy.
pub(crate) fn key<'a>(ptr: *const c_char, len: usize) -> Result<&'a [u8]> {
    if ptr.is_null() {
        return Err(Error::invalid("key is NULL"));
    }
    if len == 0 {
        return Err(Error::invalid(
            "key is empty (key_len is 0; a key is 1 to 1024 bytes)",
        ));
    }
    if len > MAX_KEY_LEN {
        return Err(Error::invalid(format!(
            "key_len is {len} (a key is 1 to {MAX_KEY_LEN} bytes)"
        )));
    }
    // SAFETY: the caller promises `len` readable bytes at a non-NULL `ptr`; len is at most 1024.
    Ok(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) })
}

/// A NUL-terminated UTF-8 string argument.
pub(crate) fn text<'a>(ptr: *const c_char, name: &str) -> Result<&'a str> {
    if ptr.is_null() {
        return Err(Error::invalid(format!("{name} is NULL")));
    }
    // SAFETY: the caller promises a NUL-terminated string at a non-NULL pointer.
    let bytes = unsafe { CStr::from_ptr(ptr) };
    bytes
        .to_str()
        .map_err(|_| Error::invalid(format!("{name} is not valid UTF-8")))
}

/// The secrets of one client's URL (core's [`Secrets`], which never formats them), shared by the
/// client and its leases.
pub(crate) use leasehold::Secrets;

/// Masking of errors by a client's secrets, before they cross the boundary.
pub(crate) trait Redact {
    /// `error` with every secret masked.
    fn redact(&self, error: Error) -> Error;
}

impl Redact for Secrets {
    fn redact(&self, error: Error) -> Error {
        redacted(error, self)
    }
}

/// `error` with every secret masked: a second line of defence over the backends' own masking.
pub(crate) fn redacted(error: Error, secrets: &[String]) -> Error {
    if secrets.is_empty() {
        // Nothing to mask; spares the copy of the message on every refused try-acquire.
        return error;
    }
    error.redacted(secrets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panics_become_internal_and_never_unwind() {
        let status = call("leasehold_test", || panic!("secret pa55word"));
        assert_eq!(status, leasehold_status::LEASEHOLD_INTERNAL);
        let message = last_error::get();
        assert!(
            message.starts_with("leasehold_test: internal error"),
            "{message}"
        );
        assert!(!message.contains("pa55word"));
        assert_eq!(value("leasehold_test", 7u64, || panic!("x")), 7);
        quietly("leasehold_test", || panic!("x"));
    }

    #[test]
    fn errors_set_the_message_and_the_status() {
        let status = call("leasehold_test", || Err(Error::Lost("gone".into())));
        assert_eq!(status, leasehold_status::LEASEHOLD_LOST);
        assert_eq!(last_error::get(), "leasehold_test: lease lost: gone");
    }

    #[test]
    fn keys_are_checked_before_they_are_read() {
        let dangling = 8usize as *const c_char;
        assert!(key(dangling, 1 << 20).is_err());
        assert!(key(std::ptr::null(), 0).is_err());
        assert!(key(std::ptr::null(), 5).is_err());
        assert!(key(b"k".as_ptr().cast(), 0).is_err());
        assert_eq!(key(b"k\0x".as_ptr().cast(), 3).unwrap(), b"k\0x");
    }

    #[test]
    fn redaction_masks_every_secret() {
        let e = redacted(
            Error::Unavailable("auth pw1 failed".into()),
            &["pw1".into()],
        );
        assert_eq!(e, Error::Unavailable("auth *** failed".into()));
    }
}
