//! Records ([`leasehold_core::records`]) on Redis: one hash per record, `base ‖ "r:" ‖ key` (see
//! `keys.rs`: the lease's own base, so on a Cluster the record lives in the lease's hash slot; the
//! tag `r:` is prefix-free with every other tag, so a record never shares a name with a lease's
//! keys), holding `fence`, `value` and `stamp`, expiring `keep` after its last write (`PEXPIRE`,
//! by the server's clock).
//!
//! Reads and writes are one script, `RECORD` in `scripts.rs` (EVALSHA, loaded again on NOSCRIPT):
//! a put compares the stored fence with its own and writes only if the stored one is not higher,
//! atomically on the server. Fences are compared as decimal strings, never as Lua numbers (exact
//! only up to 2^53), as `fence_gate.rs` does, so any `u64` works.
//!
//! One server, Sentinel and Cluster: every call goes through the topology like the lease calls
//! (`MOVED`, `ASK` and failovers followed within the call's deadline: connect + I/O). With
//! `replicas=N` a put waits for its replicas in the same round trip (`WAIT`, as acquire and extend
//! do, and within the same allowance); a written record that fewer replicas acknowledged cannot be
//! taken back (the previous one is gone), so the put is `Unavailable`: the record may or may not
//! survive a failover. Redlock's records are in `redlock/records.rs`.
//!
//! The `stamp` is the writer's wall clock in µs (made to rise within a process): a single server
//! holds one version of a record and ignores it; Redlock's reads use it to pick the newest of
//! versions with equal fences.

use crate::keys::{namespaced, RedisKeys};
use crate::node::{millis, Failure, ScriptCall};
use crate::scripts::RECORD_SCRIPT;
use crate::single::RedisBackend;
use leasehold_core::records::{Record, RecordStore};
use leasehold_core::{Error, Key, Result};
use redis::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The namespace tag of records (see `keys.rs`).
pub(crate) const RECORD_TAG: &[u8] = b"r:";

/// The Redis key of the record of `key`.
pub(crate) fn record_name(prefix: &str, key: &Key) -> Vec<u8> {
    namespaced(prefix, RECORD_TAG, key)
}

/// The script call that reads the record `name`.
pub(crate) fn get_call(name: &[u8]) -> ScriptCall<'static> {
    ScriptCall::new(&RECORD_SCRIPT).keys([name]).arg("get")
}

/// The script call that writes `value` with `fence` as the record `name`, kept `keep`.
pub(crate) fn put_call(
    name: &[u8],
    fence: u64,
    value: &[u8],
    keep: Duration,
    stamp: u64,
) -> ScriptCall<'static> {
    ScriptCall::new(&RECORD_SCRIPT)
        .keys([name])
        .arg("put")
        .arg(fence)
        .arg(value)
        .arg(millis(keep))
        .arg(stamp)
}

/// A put's answer: `true` written, `false` refused for a higher fence.
pub(crate) fn put_reply(server: &str, reply: Value) -> Result<bool> {
    let items = array(server, reply)?;
    match items.first() {
        Some(Value::Int(1)) => Ok(true),
        Some(Value::Int(0)) => Ok(false),
        _ => Err(unexpected(server, "put", &items)),
    }
}

/// A get's answer: the record and its stamp, or `None`.
pub(crate) fn get_reply(server: &str, reply: Value) -> Result<Option<(Record, u64)>> {
    let items = array(server, reply)?;
    if items.is_empty() {
        return Ok(None);
    }
    let (Some(fence), Some(value), Some(stamp)) = (
        items.first().and_then(bytes),
        items.get(1).and_then(bytes),
        items.get(2).and_then(bytes),
    ) else {
        return Err(unexpected(server, "get", &items));
    };
    let number = |b: &[u8]| std::str::from_utf8(b).ok()?.parse::<u64>().ok();
    let (Some(fence), Some(stamp)) = (number(fence), number(stamp)) else {
        return Err(unexpected(server, "get", &items));
    };
    Ok(Some((
        Record {
            fence,
            value: value.to_vec(),
        },
        stamp,
    )))
}

/// The newer of two versions of a record: the higher fence, then the later stamp.
pub(crate) fn newer(a: Option<(Record, u64)>, b: Option<(Record, u64)>) -> Option<(Record, u64)> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if (b.0.fence, b.1) > (a.0.fence, a.1) {
            b
        } else {
            a
        }),
        (a, b) => a.or(b),
    }
}

/// The writer's stamp for a put: wall-clock µs since 1970, above every stamp this process gave
/// before (so one process's writes of one fence order even within a microsecond or across a step
/// of its clock).
pub(crate) fn stamp() -> u64 {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    let previous = LAST
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |last| {
            Some(now.max(last.saturating_add(1)))
        })
        .unwrap_or(now);
    now.max(previous.saturating_add(1))
}

fn array(server: &str, reply: Value) -> Result<Vec<Value>> {
    match reply {
        Value::Array(items) => Ok(items),
        Value::Nil => Ok(Vec::new()),
        other => Err(Error::Internal(format!(
            "redis {server}: the record script answered {other:?}"
        ))),
    }
}

fn bytes(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

fn unexpected(server: &str, what: &str, items: &[Value]) -> Error {
    Error::Internal(format!(
        "redis {server}: the record script's {what} answered {items:?}"
    ))
}

/// One server, Sentinel or Cluster: each call on the node serving the lease's slot.
impl RecordStore for RedisBackend {
    fn get(&self, key: &Key) -> Result<Option<Record>> {
        let single = self.kinds();
        let routing = RedisKeys::new(single.prefix, key);
        let call = get_call(&record_name(single.prefix, key));
        let deadline = single.bounds.call();
        single.topology.run(&routing, deadline, |node, via| {
            let reply: Value = node.call_routed("record get", deadline, |c| {
                call.send(c, via, None).map(|(reply, _)| reply)
            })?;
            get_reply(node.name(), reply)
                .map(|found| found.map(|(record, _)| record))
                .map_err(Failure::from_error)
        })
    }

    fn put(&self, key: &Key, fence: u64, value: &[u8], keep: Duration) -> Result<bool> {
        let single = self.kinds();
        let routing = RedisKeys::new(single.prefix, key);
        let call = put_call(
            &record_name(single.prefix, key),
            fence,
            value,
            keep,
            stamp(),
        );
        // A write's bound, as acquire's and extend's.
        let deadline = single.bounds.write();
        single.topology.run(&routing, deadline, |node, via| {
            let (reply, acked): (Value, _) = node.confirmed("record put", deadline, via, &call)?;
            let written = put_reply(node.name(), reply).map_err(Failure::from_error)?;
            if written {
                if let Some(acked) = node.short_of_replicas(acked) {
                    return Err(Failure::from_error(Error::Unavailable(format!(
                        "redis {}: a record put reached {acked} of the {} replicas asked for \
                         within {} ms; the record is written on the master but may not \
                         survive a failover",
                        node.name(),
                        node.replicas(),
                        node.replicas_allowance().as_millis()
                    ))));
                }
            }
            Ok(written)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &[u8]) -> Value {
        Value::BulkString(s.to_vec())
    }

    #[test]
    fn replies_parse() {
        let put = |a: i64| Value::Array(vec![Value::Int(a), bulk(b"17")]);
        assert!(put_reply("s", put(1)).unwrap());
        assert!(!put_reply("s", put(0)).unwrap());
        assert!(put_reply("s", Value::Int(1)).is_err());
        assert_eq!(get_reply("s", Value::Array(vec![])).unwrap(), None);
        let got = get_reply(
            "s",
            Value::Array(vec![
                bulk(b"18446744073709551615"),
                bulk(b"\0\xff"),
                bulk(b"9"),
            ]),
        )
        .unwrap();
        assert_eq!(
            got,
            Some((
                Record {
                    fence: u64::MAX,
                    value: b"\0\xff".to_vec()
                },
                9
            ))
        );
        assert!(get_reply("s", Value::Array(vec![bulk(b"x"), bulk(b""), bulk(b"1")])).is_err());
    }

    #[test]
    fn the_newest_version_wins() {
        let v = |fence, stamp| {
            Some((
                Record {
                    fence,
                    value: vec![],
                },
                stamp,
            ))
        };
        assert_eq!(newer(v(5, 1), v(4, 9)), v(5, 1));
        assert_eq!(newer(v(5, 1), v(5, 2)), v(5, 2));
        assert_eq!(newer(None, v(1, 1)), v(1, 1));
        assert_eq!(newer(v(1, 1), None), v(1, 1));
        assert_eq!(newer(None, None), None);
    }

    #[test]
    fn stamps_rise() {
        let a = stamp();
        let b = stamp();
        assert!(b > a);
    }

    #[test]
    fn records_have_a_namespace_of_their_own() {
        let key = Key::new(b"x").unwrap();
        let keys = RedisKeys::new("p:", &key);
        let name = record_name("p:", &key);
        assert_eq!(crate::keys::slot(&name), keys.slot());
        for other in [&keys.lock, &keys.fence, &keys.queue, &keys.heartbeats] {
            assert_ne!(&name, other);
        }
        // A user key spelling another tag stays in the lock namespace.
        let tricky = Key::new(b"r:x").unwrap();
        assert_ne!(RedisKeys::new("p:", &tricky).lock, name);
    }
}
