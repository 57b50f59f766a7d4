//! Which ABI this library speaks, so a program or binding built against one header can refuse a
//! library of another at start, with a message, instead of failing later on a missing symbol or, worse,
//! running against changed semantics.

use crate::boundary;
use crate::status::leasehold_status;
use leasehold::Error;

/// The ABI version of this header, `major * 1000 + minor`: 0.4 is `4`. A library is compatible with
/// a program built against this header when its major is the same and its minor is the same or newer
/// (minors only add functions and status values). Compare with `leasehold_abi_version()`, or let
/// `leasehold_abi_check(LEASEHOLD_ABI_VERSION)` do it.
pub const LEASEHOLD_ABI_VERSION: u32 = 4;

/// The ABI version of the loaded library, `major * 1000 + minor` (see `LEASEHOLD_ABI_VERSION`).
/// Thread-safe; makes no other call.
#[no_mangle]
pub extern "C" fn leasehold_abi_version() -> u32 {
    LEASEHOLD_ABI_VERSION
}

/// `LEASEHOLD_OK` when this library can serve a program built against ABI version `expected`
/// (pass `LEASEHOLD_ABI_VERSION`): the same major, and a minor at least `expected`'s.
/// Otherwise `LEASEHOLD_INVALID_ARGUMENT`, and `leasehold_last_error()` names both versions.
/// Call it once at start, before opening a client. Thread-safe.
#[no_mangle]
pub extern "C" fn leasehold_abi_check(expected: u32) -> leasehold_status {
    boundary::call("leasehold_abi_check", || {
        check(expected, LEASEHOLD_ABI_VERSION).map_err(Error::invalid)
    })
}

/// Whether a library of ABI `library` serves a program built for ABI `expected`, and if not, why.
fn check(expected: u32, library: u32) -> Result<(), String> {
    let (want_major, want_minor) = (expected / 1000, expected % 1000);
    let (have_major, have_minor) = (library / 1000, library % 1000);
    if want_major == have_major && have_minor >= want_minor {
        return Ok(());
    }
    let why = if want_major != have_major {
        "another major version"
    } else {
        "an older minor version"
    };
    Err(format!(
        "libleasehold {} speaks ABI {have_major}.{have_minor}, {why} than the ABI \
         {want_major}.{want_minor} this program was built for: install libleasehold \
         {want_major}.{want_minor} or newer of the same major",
        env!("CARGO_PKG_VERSION"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_abi_version_is_the_crate_version_s_major_and_minor() {
        let major: u32 = env!("CARGO_PKG_VERSION_MAJOR").parse().unwrap();
        let minor: u32 = env!("CARGO_PKG_VERSION_MINOR").parse().unwrap();
        assert_eq!(LEASEHOLD_ABI_VERSION, major * 1000 + minor);
    }

    #[test]
    fn same_major_and_a_newer_or_equal_minor_is_compatible() {
        assert!(check(3, 3).is_ok());
        assert!(check(2, 3).is_ok());
        assert!(check(1002, 1005).is_ok());
    }

    #[test]
    fn another_major_or_an_older_minor_is_refused_naming_both_versions() {
        let older = check(4, 3).unwrap_err();
        assert!(
            older.contains("ABI 0.3") && older.contains("ABI 0.4"),
            "{older}"
        );
        assert!(older.contains("older minor"), "{older}");
        let other = check(1000, 3).unwrap_err();
        assert!(
            other.contains("ABI 0.3") && other.contains("ABI 1.0"),
            "{other}"
        );
        assert!(other.contains("another major"), "{other}");
        assert!(check(3, 1003).is_err());
    }
}
