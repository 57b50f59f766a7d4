//! The clocks records are written on, and the identity of the current boot.
//!
//! Deadlines and waiter heartbeats in the record files are read by every process on the host, so
//! they need a clock that all processes share and that never jumps: `CLOCK_BOOTTIME` is
//! system-wide, is not moved by `settimeofday`/NTP steps (unlike `CLOCK_REALTIME`), and keeps
//! counting through suspend (unlike `CLOCK_MONOTONIC`), so a lease also runs out while the machine
//! sleeps, as it would on Redis. It restarts at zero on every boot, so a reading means something
//! only together with the boot it was taken in: every record carries its writer's boot id (the
//! kernel's random `boot_id`, drawn anew at each boot and the same for every process of one boot).
//! A record of another boot id was written in a boot that is over — the current boot's id never
//! changes, and the directory is refused on network file systems (see `dir`), where another id could
//! be another live host — so its holder and waiters are gone.
//!
//! Fences are hybrid logical clocks on `CLOCK_REALTIME` microseconds (see `fences`): the one use of
//! the wall clock, for ordering, never for expiry.
//!
//! Caveat: processes in different time namespaces (containers with `CLONE_NEWTIME`) see offset
//! `CLOCK_BOOTTIME`s and must not share a lock directory.

use leasehold_core::{Error, Result};

/// The kernel's id of the current boot, as the 16 bytes of its UUID.
pub(crate) type BootId = [u8; 16];

/// Nanoseconds on `CLOCK_BOOTTIME`.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn now_ns() -> Result<u64> {
    read_clock(libc::CLOCK_BOOTTIME, "CLOCK_BOOTTIME")
        .map(|(s, n)| s.saturating_mul(1_000_000_000).saturating_add(n))
}

/// Microseconds since the Unix epoch on `CLOCK_REALTIME`.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn wall_us() -> Result<u64> {
    read_clock(libc::CLOCK_REALTIME, "CLOCK_REALTIME")
        .map(|(s, n)| s.saturating_mul(1_000_000).saturating_add(n / 1_000))
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn read_clock(clock: libc::clockid_t, name: &str) -> Result<(u64, u64)> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if rc != 0 {
        return Err(Error::Internal(format!(
            "clock_gettime({name}) failed: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok((
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u64::try_from(ts.tv_nsec).unwrap_or(0),
    ))
}

/// This boot's random id, which the kernel draws anew at every boot.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn boot_id() -> Result<BootId> {
    const PATH: &str = "/proc/sys/kernel/random/boot_id";
    let text = std::fs::read_to_string(PATH).map_err(|e| {
        Error::Unavailable(format!(
            "the local backend cannot read {PATH} ({e}); it needs /proc to tell boots apart"
        ))
    })?;
    parse_boot_id(text.trim())
        .ok_or_else(|| Error::Unavailable(format!("{PATH} holds an unexpected value (not a UUID)")))
}

/// The 16 bytes of a UUID written as 32 hex digits with or without dashes. The all-zero id is
/// refused: records use it for "no boot yet".
fn parse_boot_id(text: &str) -> Option<BootId> {
    let hex: Vec<u8> = text.bytes().filter(|&b| b != b'-').collect();
    if hex.len() != 32 {
        return None;
    }
    let mut id = [0u8; 16];
    for (i, pair) in hex.chunks(2).enumerate() {
        let digits = std::str::from_utf8(pair).ok()?;
        id[i] = u8::from_str_radix(digits, 16).ok()?;
    }
    (id != [0; 16]).then_some(id)
}

// Without a boot-wide clock that survives suspend and a boot id, expiry across processes cannot be
// made safe; refuse rather than guess.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(crate) fn now_ns() -> Result<u64> {
    Err(unsupported())
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(crate) fn wall_us() -> Result<u64> {
    Err(unsupported())
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(crate) fn boot_id() -> Result<BootId> {
    Err(unsupported())
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn unsupported() -> Error {
    Error::Unavailable("the local backend (file://) is only supported on Linux".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_move_forward_and_boot_id_is_stable() {
        let (a, wa) = (now_ns().unwrap(), wall_us().unwrap());
        std::thread::sleep(std::time::Duration::from_millis(2));
        let (b, wb) = (now_ns().unwrap(), wall_us().unwrap());
        assert!(b >= a + 1_000_000, "{a} -> {b}");
        assert!(wb > wa && wa > 1_600_000_000_000_000, "{wa} -> {wb}");
        assert_eq!(boot_id().unwrap(), boot_id().unwrap());
    }

    #[test]
    fn boot_ids_parse() {
        let id = parse_boot_id("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0").unwrap();
        assert_eq!(id[0], 0x0f);
        assert_eq!(id[15], 0xf0);
        assert_eq!(parse_boot_id("0f1e2d3c4b5a69788796a5b4c3d2e1f0"), Some(id));
        assert_eq!(parse_boot_id("00000000-0000-0000-0000-000000000000"), None);
        assert_eq!(parse_boot_id("xyz"), None);
        assert_eq!(parse_boot_id("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1fg"), None);
    }
}
