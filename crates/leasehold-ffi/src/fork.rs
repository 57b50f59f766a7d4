//! fork() support: which process owns an object, and a place to park what a child inherited.
//!
//! A child must neither use nor close the parent's connections: using them interleaves two
//! processes on one socket, and closing them (a PostgreSQL connection sends Terminate on drop)
//! would end the parent's session and its locks. So what a child inherited is kept alive here,
//! untouched, until the child exits.

use std::any::Any;
use std::sync::Mutex;

// Reachable from a static, so leak checkers count it as still in use rather than lost.
static INHERITED: Mutex<Vec<Box<dyn Any + Send>>> = Mutex::new(Vec::new());

/// The calling process's id, read fresh on every call (glibc does not cache it across fork()).
pub(crate) fn pid() -> u32 {
    std::process::id()
}

/// Keeps `object`, which belongs to the parent process, alive and unused until this process exits.
pub(crate) fn keep_forever(object: impl Any + Send) {
    INHERITED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .push(Box::new(object));
}
