//! The fence gate for state kept in Redis: a value that only a holder with a fence at least the
//! last writer's may replace. The PostgreSQL and MySQL gates guard a transaction of the protected
//! database; here the protected state *is* the Redis hash, so the check and the write are one Lua
//! script, atomic on the server: no stale holder's write can land between them.
//!
//! The hash `key` has two fields, `value` and `fence`. [`set_fenced`] writes both iff the new fence
//! is equal to (the same holder writing again) or above the stored one, and refuses an older one
//! with [`GateError::Stale`], leaving the hash as it was. [`get_fenced`] reads both in one command.
//! The script is sent by its SHA1 (EVALSHA) and loaded again if the server lost it, like the lease
//! scripts; the key travels as `KEYS[1]`, so it works on a Cluster too.
//!
//! Fences are compared as decimal strings (longer is larger, then byte order), never as Lua
//! numbers: those are doubles, exact only up to 2^53, and the gate takes any `u64`.

use crate::errors;
/// A stale fence, bad input, an unreachable server or a hash the gate did not write (`Internal`).
pub use leasehold_core::gate::GateError;
use leasehold_core::Error;
use redis::{ConnectionLike, Script};
use std::sync::LazyLock;

/// KEYS: the hash. ARGV: value, fence (decimal, no sign or leading zero, 1 to 2^64 - 1).
/// Returns `{1, fence}` when written, `{0, stored}` when refused; an error reply for a fence not
/// so written, given or stored (something other than the gate wrote the hash). The fence is
/// checked here too, so the script is safe to call as is from any client: this text is the one
/// docs/gate.md shows for `EVAL` from other languages and the shell. It lives in
/// `src/lua/fence_gate.lua`, included as it is.
pub const SCRIPT: &str = include_str!("lua/fence_gate.lua");

static SET_FENCED_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(SCRIPT));

/// What a fenced hash holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fenced {
    pub value: Vec<u8>,
    /// The highest fence accepted so far: the fence of the write that set `value`.
    pub fence: u64,
}

/// Stores `value` with `fence` in the hash `key` iff `fence` is at least the stored fence, in one
/// atomic script; [`GateError::Stale`] (and nothing written) otherwise. `InvalidArgument` for an
/// empty key and for fence 0 (no lease has it: it is what a missing lease reads as).
pub fn set_fenced(
    conn: &mut impl ConnectionLike,
    key: impl AsRef<[u8]>,
    value: impl AsRef<[u8]>,
    fence: u64,
) -> Result<(), GateError> {
    let key = key.as_ref();
    check(key, fence)?;
    let (written, stored): (i64, String) = SET_FENCED_SCRIPT
        .key(key)
        .arg(value.as_ref())
        .arg(fence.to_string())
        .invoke(conn)
        .map_err(|e| errors::from_redis(&e, "fence gate set", "server", &[]))?;
    if written == 1 {
        return Ok(());
    }
    Err(GateError::Stale {
        resource: String::from_utf8_lossy(key).into_owned(),
        fence,
        stored: parse_fence(key, &stored)?,
    })
}

/// The value and fence of the hash `key`, or `None` if nothing was written through the gate.
pub fn get_fenced(
    conn: &mut impl ConnectionLike,
    key: impl AsRef<[u8]>,
) -> Result<Option<Fenced>, GateError> {
    let key = key.as_ref();
    let (value, fence): (Option<Vec<u8>>, Option<String>) = redis::cmd("HMGET")
        .arg(key)
        .arg("value")
        .arg("fence")
        .query(conn)
        .map_err(|e| errors::from_redis(&e, "fence gate get", "server", &[]))?;
    let Some(fence) = fence else {
        return Ok(None);
    };
    Ok(Some(Fenced {
        value: value.unwrap_or_default(),
        fence: parse_fence(key, &fence)?,
    }))
}

fn check(key: &[u8], fence: u64) -> Result<(), GateError> {
    if key.is_empty() {
        return Err(Error::invalid("fence gate: the key is empty").into());
    }
    if fence == 0 {
        return Err(Error::invalid("fence gate: fence 0 is no lease's fence").into());
    }
    Ok(())
}

fn parse_fence(key: &[u8], text: &str) -> Result<u64, GateError> {
    text.parse().map_err(|_| {
        Error::Internal(format!(
            "fence gate: the fence stored in {:?} is not a fence: {text:?} (something other than \
             the gate wrote it)",
            String::from_utf8_lossy(key)
        ))
        .into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_keys_and_fence_zero_are_refused_before_anything_is_sent() {
        for (key, fence) in [(&b""[..], 1), (b"k", 0)] {
            match check(key, fence) {
                Err(GateError::Backend(e)) => {
                    assert_eq!(e.kind(), leasehold_core::ErrorKind::InvalidArgument)
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(check(b"k", u64::MAX).is_ok());
    }

    #[test]
    fn stored_fences_parse_as_u64_or_not_at_all() {
        assert_eq!(parse_fence(b"k", "18446744073709551615").unwrap(), u64::MAX);
        for bad in ["18446744073709551616", "1e3", "-1", ""] {
            assert!(parse_fence(b"k", bad).is_err(), "{bad:?}");
        }
    }
}
