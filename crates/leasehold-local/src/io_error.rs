//! The one shape of a failed file-system call: `Unavailable`, naming what was attempted and the
//! path. Every module that touches the directory or its files uses it, so it sits below them all
//! (the directory and the record files would otherwise depend on each other for it).

use leasehold_core::Error;
use std::path::Path;

pub(crate) fn io_error(what: &str, path: &Path, err: &std::io::Error) -> Error {
    Error::Unavailable(format!("{what} {}: {err}", path.display()))
}
