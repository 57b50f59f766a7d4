//! The per-thread string that `leasehold_client_stats_json` and `leasehold_client_metrics` lend to C.
//!
//! One slot per thread, replaced by the next such call, so C never frees what we return and a thread
//! keeps at most one report alive; a thread that never asks never allocates.

use leasehold::{Error, Result};
use std::cell::RefCell;
use std::ffi::{c_char, CString};

thread_local! {
    static LENT: RefCell<Option<CString>> = const { RefCell::new(None) };
}

/// Keeps `text` in this thread's slot and returns a pointer to it, valid until the next call here on
/// this thread. A NUL inside `text` (only possible from a percent-encoded `%00` in a URL's prefix,
/// echoed in a label) would cut the string short for C, so it becomes U+FFFD.
pub(crate) fn lend(text: String) -> Result<*const c_char> {
    let text = if text.contains('\0') {
        text.replace('\0', "\u{FFFD}")
    } else {
        text
    };
    let text = CString::new(text).map_err(|_| Error::Internal("NUL in a report".into()))?;
    LENT.try_with(|slot| {
        let mut slot = slot
            .try_borrow_mut()
            .map_err(|_| Error::Internal("the report slot is in use".into()))?;
        Ok(slot.insert(text).as_ptr())
    })
    .map_err(|_| Error::Internal("the thread is exiting; no report can be lent".into()))?
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn the_slot_holds_the_latest_text() {
        let first = lend("one".into()).unwrap();
        // SAFETY: just lent, not yet replaced.
        assert_eq!(unsafe { CStr::from_ptr(first) }.to_bytes(), b"one");
        let second = lend("t\0wo".into()).unwrap();
        // SAFETY: as above.
        assert_eq!(
            unsafe { CStr::from_ptr(second) }.to_str().unwrap(),
            "t\u{FFFD}wo"
        );
    }
}
