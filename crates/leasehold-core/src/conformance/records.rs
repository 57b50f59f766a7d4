//! Records ([`crate::records`]): small fenced values kept beside the locks, for backends that keep
//! them. Each check writes through one client and reads through the other, as two processes
//! would.

use super::{key, run_checks, Check, LONG};
use crate::records::{Record, RecordStore, MAX_RECORD};
use crate::{Client, Key, MAX_KEY_LEN};
use std::time::{Duration, Instant};

/// Every promise of a [`RecordStore`]: absent records, fenced writes (higher and equal fences
/// write, lower ones are refused), expiry, a namespace apart from the locks, binary keys and
/// values, the largest value, and racing writers.
pub fn run_records(new_client: &dyn Fn() -> Client) {
    let checks: &[Check] = &[
        ("records_absent_is_none", absent_is_none),
        ("records_put_then_get", put_then_get),
        ("records_higher_fence_overwrites", higher_fence_overwrites),
        ("records_equal_fence_overwrites", equal_fence_overwrites),
        ("records_lower_fence_is_refused", lower_fence_is_refused),
        ("records_expire_after_keep", expire_after_keep),
        (
            "records_do_not_collide_with_locks",
            do_not_collide_with_locks,
        ),
        ("records_binary_keys_and_values", binary_keys_and_values),
        ("records_largest_value", largest_value),
        (
            "records_racing_puts_leave_the_highest",
            racing_puts_leave_the_highest,
        ),
    ];
    run_checks(&new_client(), &new_client(), checks);
}

fn store(client: &Client) -> &dyn RecordStore {
    client
        .backend()
        .records()
        .unwrap_or_else(|| panic!("the {} backend keeps no records", client.backend_name()))
}

fn record_key(label: &str) -> Key {
    Key::new(key(label)).expect("a valid key")
}

fn record(fence: u64, value: &[u8]) -> Option<Record> {
    Some(Record {
        fence,
        value: value.to_vec(),
    })
}

fn absent_is_none(a: &Client, b: &Client) {
    let k = record_key("record-absent");
    assert_eq!(store(a).get(&k).unwrap(), None);
    assert_eq!(store(b).get(&k).unwrap(), None);
}

fn put_then_get(a: &Client, b: &Client) {
    let k = record_key("record-put");
    assert!(
        store(a).put(&k, 7, b"started", LONG).unwrap(),
        "a first put"
    );
    assert_eq!(store(b).get(&k).unwrap(), record(7, b"started"));
    assert_eq!(store(a).get(&k).unwrap(), record(7, b"started"));
    // An empty value is a value.
    let empty = record_key("record-empty");
    assert!(store(a).put(&empty, 1, b"", LONG).unwrap());
    assert_eq!(store(b).get(&empty).unwrap(), record(1, b""));
}

fn higher_fence_overwrites(a: &Client, b: &Client) {
    let k = record_key("record-higher");
    assert!(store(a).put(&k, 9, b"nine", LONG).unwrap());
    // One more decimal digit: fences compare as numbers, never as text.
    assert!(store(b).put(&k, 10, b"ten", LONG).unwrap());
    assert_eq!(store(a).get(&k).unwrap(), record(10, b"ten"));
    // Fences as large as the backends hand out (microseconds since 1970).
    let big = 1_764_590_000_000_001;
    assert!(store(a).put(&k, big, b"big", LONG).unwrap());
    assert!(store(b).put(&k, big + 1, b"bigger", LONG).unwrap());
    assert_eq!(store(a).get(&k).unwrap(), record(big + 1, b"bigger"));
}

fn equal_fence_overwrites(a: &Client, b: &Client) {
    let k = record_key("record-equal");
    assert!(store(a).put(&k, 5, b"started", LONG).unwrap());
    assert!(
        store(b).put(&k, 5, b"done: 42", LONG).unwrap(),
        "the same holder writes again"
    );
    assert_eq!(store(a).get(&k).unwrap(), record(5, b"done: 42"));
    assert!(store(a).put(&k, 5, b"done: 43", LONG).unwrap());
    assert_eq!(store(b).get(&k).unwrap(), record(5, b"done: 43"));
}

fn lower_fence_is_refused(a: &Client, b: &Client) {
    let k = record_key("record-lower");
    assert!(store(a).put(&k, 10, b"ten", LONG).unwrap());
    assert!(
        !store(b).put(&k, 9, b"nine", LONG).unwrap(),
        "a stale holder's write is refused"
    );
    assert!(!store(b).put(&k, 1, b"one", LONG).unwrap());
    assert_eq!(store(a).get(&k).unwrap(), record(10, b"ten"));
    assert_eq!(store(b).get(&k).unwrap(), record(10, b"ten"));
}

fn expire_after_keep(a: &Client, b: &Client) {
    let keep = Duration::from_millis(500);
    let k = record_key("record-expiry");
    assert!(store(a).put(&k, 5, b"short", keep).unwrap());
    // Written by the time the put returned: gone by `keep` after that.
    let written = Instant::now();
    let seen = store(b).get(&k).unwrap();
    if written.elapsed() < keep - Duration::from_millis(100) {
        assert_eq!(seen, record(5, b"short"), "read at once");
    }
    super::sleep_past_expiry((keep * 2).saturating_sub(written.elapsed()));
    assert_eq!(store(b).get(&k).unwrap(), None, "gone after its keep");
    assert_eq!(store(a).get(&k).unwrap(), None);
    // An expired record counts as absent: any fence writes.
    assert!(
        store(b).put(&k, 1, b"again", LONG).unwrap(),
        "a lower fence writes over an expired record"
    );
    assert_eq!(store(a).get(&k).unwrap(), record(1, b"again"));
    // Each write keeps the record `keep` from then.
    assert!(store(a).put(&k, 2, b"renewed", keep).unwrap());
    let renewed = Instant::now();
    super::sleep_past_expiry((keep * 2).saturating_sub(renewed.elapsed()));
    assert_eq!(store(b).get(&k).unwrap(), None);
}

fn do_not_collide_with_locks(a: &Client, b: &Client) {
    let k = record_key("record-lock");
    // A record alone does not make the key look held.
    assert!(store(a).put(&k, 3, b"before", LONG).unwrap());
    let info = b.inspect(k.as_bytes()).unwrap();
    assert!(!info.held, "a record is no lock: {info:?}");
    let lease = b.try_acquire(k.as_bytes(), LONG).expect("the lock is free");
    assert!(
        store(a)
            .put(&k, lease.fence(), b"under the lease", LONG)
            .unwrap(),
        "written while the lock is held"
    );
    assert_eq!(
        store(b).get(&k).unwrap(),
        record(lease.fence(), b"under the lease")
    );
    assert!(a.inspect(k.as_bytes()).unwrap().held, "the lock stays held");
    assert_eq!(
        a.try_acquire(k.as_bytes(), LONG)
            .map(drop)
            .unwrap_err()
            .kind(),
        crate::ErrorKind::NotAcquired
    );
    let fence = lease.fence();
    lease.release().expect("release");
    assert_eq!(
        store(a).get(&k).unwrap(),
        record(fence, b"under the lease"),
        "a release leaves the record"
    );
    assert!(!a.inspect(k.as_bytes()).unwrap().held);
    let again = a
        .try_acquire(k.as_bytes(), LONG)
        .expect("free after release");
    again.release().unwrap();
}

fn binary_keys_and_values(a: &Client, b: &Client) {
    let every_byte: Vec<u8> = (0..=255u8).collect();
    let odd: &[&[u8]] = &[b"\0", b"\0\xff{}\r\n*?[]", b"a}{b", b"\xc3\x28", b" "];
    let mut suffix = key("record-binary");
    suffix.push(0);
    for (i, raw) in odd.iter().enumerate() {
        let mut bytes = raw.to_vec();
        bytes.extend_from_slice(&suffix);
        let k = Key::new(&bytes).unwrap();
        let mut value = every_byte.clone();
        value.push(i as u8);
        assert!(store(a).put(&k, 1 + i as u64, &value, LONG).unwrap());
        assert_eq!(
            store(b).get(&k).unwrap(),
            record(1 + i as u64, &value),
            "key {k:?}"
        );
    }
    // Keys that differ in one byte, or by a NUL at the end, are different records.
    let (x, y) = (record_key("record-x"), record_key("record-x"));
    assert_ne!(x, y);
    let mut nul = x.as_bytes().to_vec();
    nul.push(0);
    let nul = Key::new(nul).unwrap();
    assert!(store(a).put(&x, 1, b"x", LONG).unwrap());
    assert_eq!(store(b).get(&nul).unwrap(), None);
    // The longest key.
    let mut long = key("record-long");
    long.resize(MAX_KEY_LEN, 0xfe);
    let long = Key::new(long).unwrap();
    assert!(store(a).put(&long, 2, b"long", LONG).unwrap());
    assert_eq!(store(b).get(&long).unwrap(), record(2, b"long"));
}

fn largest_value(a: &Client, b: &Client) {
    let k = record_key("record-largest");
    let value: Vec<u8> = (0..MAX_RECORD).map(|i| (i * 7 + i / 256) as u8).collect();
    assert!(store(a).put(&k, 11, &value, LONG).unwrap());
    let got = store(b).get(&k).unwrap().expect("the record");
    assert_eq!(got.fence, 11);
    assert_eq!(got.value.len(), MAX_RECORD);
    assert!(got.value == value, "the largest value comes back intact");
    // And is replaced as a whole.
    assert!(store(b).put(&k, 12, b"small", LONG).unwrap());
    assert_eq!(store(a).get(&k).unwrap(), record(12, b"small"));
}

fn racing_puts_leave_the_highest(a: &Client, b: &Client) {
    const TOP: u64 = 20;
    let k = record_key("record-race");
    std::thread::scope(|s| {
        for (name, client) in [("a", a), ("b", b)] {
            let k = &k;
            s.spawn(move || {
                let mut fences: Vec<u64> = (1..=TOP).collect();
                fastrand::Rng::new().shuffle(&mut fences);
                for fence in fences {
                    let value = format!("{name}:{fence}");
                    let written = store(client)
                        .put(k, fence, value.as_bytes(), LONG)
                        .unwrap_or_else(|e| panic!("put {fence} by {name}: {e}"));
                    if fence == TOP {
                        assert!(written, "nothing is above fence {TOP}");
                    }
                }
            });
        }
    });
    for client in [a, b] {
        let got = store(client).get(&k).unwrap().expect("the record");
        assert_eq!(got.fence, TOP, "{got:?}");
        let value = String::from_utf8(got.value).unwrap();
        assert!(
            value == format!("a:{TOP}") || value == format!("b:{TOP}"),
            "{value}"
        );
    }
}
