//! The per-thread message of the last failed call, which `leasehold_last_error()` hands out.

use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::fmt;
use std::io::Write as _;

thread_local! {
    // None until the first failure, so threads that never fail never allocate.
    static LAST_ERROR: RefCell<Option<CString>> = const { RefCell::new(None) };
}

/// Records `message` as this thread's last error. Interior NULs (from a binary key echoed in a
/// message, say) are shown as `\0` so C sees the whole text. The text is written into the buffer of
/// the message it replaces, so a thread that fails repeatedly (a contended try-acquire) allocates
/// only when a message outgrows the last one.
pub(crate) fn set(message: fmt::Arguments<'_>) {
    // During thread teardown the slot may be gone; losing the message then is harmless.
    let _ = LAST_ERROR.try_with(|slot| {
        if let Ok(mut slot) = slot.try_borrow_mut() {
            let mut text = slot.take().map(CString::into_bytes).unwrap_or_default();
            text.clear();
            // Writing to a Vec fails only if a Display impl does; keep what was written then.
            let _ = text.write_fmt(message);
            if text.contains(&0) {
                text = escape_nuls(&text);
            }
            *slot = CString::new(text).ok();
        }
    });
}

fn escape_nuls(text: &[u8]) -> Vec<u8> {
    let mut escaped = Vec::with_capacity(text.len() + 8);
    for &byte in text {
        match byte {
            0 => escaped.extend_from_slice(b"\\0"),
            other => escaped.push(other),
        }
    }
    escaped
}

/// The message as a C string owned by this thread's slot, or a static "" when there is none.
pub(crate) fn as_ptr() -> *const c_char {
    const EMPTY: &[u8] = b"\0";
    LAST_ERROR
        .try_with(|slot| match slot.try_borrow() {
            Ok(slot) => slot.as_ref().map(|m| m.as_ptr()),
            Err(_) => None,
        })
        .ok()
        .flatten()
        .unwrap_or(EMPTY.as_ptr().cast())
}

/// The message as Rust text, for this crate's own tests.
#[cfg(test)]
pub(crate) fn get() -> String {
    LAST_ERROR.with(|slot| {
        slot.borrow()
            .as_ref()
            .map(|m| m.to_string_lossy().into_owned())
            .unwrap_or_default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_until_set_and_per_thread() {
        std::thread::spawn(|| {
            // SAFETY: as_ptr always returns a valid NUL-terminated string.
            let text = unsafe { std::ffi::CStr::from_ptr(as_ptr()) };
            assert_eq!(text.to_bytes(), b"");
            set(format_args!("boom\0with nul"));
            assert_eq!(get(), "boom\\0with nul");
            set(format_args!("{}", "short"));
            assert_eq!(get(), "short");
        })
        .join()
        .unwrap();
    }
}
