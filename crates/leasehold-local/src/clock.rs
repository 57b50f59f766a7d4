//! The clock that record deadlines are written on, and the identity of the current boot.
//!
//! Deadlines in the record files are read by every process on the host, so they need a clock that all
//! processes share and that never jumps: `CLOCK_BOOTTIME` is system-wide, is not moved by
//! `settimeofday`/NTP steps (unlike `CLOCK_REALTIME`), and keeps counting through suspend (unlike
//! `CLOCK_MONOTONIC`), so a lease also runs out while the machine sleeps, as it would on Redis. It
//! restarts at zero on every boot; the boot id tells records of an earlier boot apart (see `epoch`).
//! Caveat: processes in different time namespaces (containers with `CLONE_NEWTIME`) see offset
//! `CLOCK_BOOTTIME`s and must not share a lock directory.

use leasehold_core::{Error, Result};

/// Nanoseconds on `CLOCK_BOOTTIME`.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn now_ns() -> Result<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    if rc != 0 {
        return Err(Error::Internal(format!(
            "clock_gettime(CLOCK_BOOTTIME) failed: {}",
            std::io::Error::last_os_error()
        )));
    }
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    Ok(secs.saturating_mul(1_000_000_000).saturating_add(nanos))
}

/// This boot's random id, which the kernel draws anew at every boot.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn boot_id() -> Result<String> {
    const PATH: &str = "/proc/sys/kernel/random/boot_id";
    let text = std::fs::read_to_string(PATH).map_err(|e| {
        Error::Unavailable(format!(
            "the local backend cannot read {PATH} ({e}); it needs /proc to tell boots apart"
        ))
    })?;
    let id = text.trim();
    if id.is_empty() || id.len() > 64 || !id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
        return Err(Error::Unavailable(format!(
            "{PATH} holds an unexpected value"
        )));
    }
    Ok(id.to_owned())
}

// Without a boot-wide clock that survives suspend and a boot id, expiry across processes cannot be
// made safe; refuse rather than guess.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(crate) fn now_ns() -> Result<u64> {
    Err(Error::Unavailable(
        "the local backend (file://) is only supported on Linux".into(),
    ))
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(crate) fn boot_id() -> Result<String> {
    Err(Error::Unavailable(
        "the local backend (file://) is only supported on Linux".into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_moves_forward_and_boot_id_is_stable() {
        let a = now_ns().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = now_ns().unwrap();
        assert!(b >= a + 1_000_000, "{a} -> {b}");
        assert_eq!(boot_id().unwrap(), boot_id().unwrap());
    }
}
