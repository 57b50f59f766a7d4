//! The per-thread message of the last failed call, which `leasehold_last_error()` hands out.

use std::cell::RefCell;
use std::ffi::{c_char, CString};

thread_local! {
    // None until the first failure, so threads that never fail never allocate.
    static LAST_ERROR: RefCell<Option<CString>> = const { RefCell::new(None) };
}

/// Records `message` as this thread's last error. Interior NULs (from a binary key echoed in a
/// message, say) are shown as `\0` so C sees the whole text.
pub(crate) fn set(message: &str) {
    let text = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    // During thread teardown the slot may be gone; losing the message then is harmless.
    let _ = LAST_ERROR.try_with(|slot| {
        if let Ok(mut slot) = slot.try_borrow_mut() {
            *slot = Some(text);
        }
    });
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
            set("boom\0with nul");
            assert_eq!(get(), "boom\\0with nul");
        })
        .join()
        .unwrap();
    }
}
