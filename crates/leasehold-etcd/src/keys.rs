//! Where a key's state lives in etcd. Every name is the URL's prefix, a word for what it holds, and
//! the key: `{prefix}lock/{key}` for the exclusive holder, `{prefix}shared/{len}/{key}/{token}` for
//! each shared holder, `{prefix}queue/{len}/{key}/{x|s}{token}` for its waiters (writers, readers),
//! `{prefix}permit/{len}/{key}/{slot}` for a semaphore's holders and `{prefix}pqueue/{len}/{key}/{token}`
//! for its waiters (the key's length in four hex
//! digits first, so that no key's range holds another key's entries, whatever bytes the keys
//! contain).

use leasehold_core::Key;

/// The holder's key of `key`: its value is the holder's token, attached to the holder's etcd lease.
pub(crate) fn lock(prefix: &str, key: &Key) -> Vec<u8> {
    named(prefix, "lock/", key.as_bytes())
}

/// The start of `key`'s queue: every waiter's entry begins with it.
pub(crate) fn queue(prefix: &str, key: &Key) -> Vec<u8> {
    ranged(prefix, "queue", key)
}

/// The start of `key`'s shared holders.
pub(crate) fn readers(prefix: &str, key: &Key) -> Vec<u8> {
    ranged(prefix, "shared", key)
}

/// The start of semaphore `key`'s holders.
pub(crate) fn permits(prefix: &str, key: &Key) -> Vec<u8> {
    ranged(prefix, "permit", key)
}

/// The start of semaphore `key`'s queue of waiters (a namespace of its own: a lock and a
/// semaphore of the same name are unrelated).
pub(crate) fn permit_queue(prefix: &str, key: &Key) -> Vec<u8> {
    ranged(prefix, "pqueue", key)
}

/// A semaphore's slot (zero-padded, so slots sort by number).
pub(crate) fn slot(permits: &[u8], slot: u32) -> Vec<u8> {
    entry(permits, &format!("{slot:05}"))
}

fn ranged(prefix: &str, what: &str, key: &Key) -> Vec<u8> {
    let mut name = named(
        prefix,
        &format!("{what}/{:04x}/", key.as_bytes().len()),
        key.as_bytes(),
    );
    name.push(b'/');
    name
}

/// What a writer's (exclusive) queue entry starts with after the queue's name; a reader's starts
/// with [`READER`]. Entries sort by their revision, whatever their kind.
pub(crate) const WRITER: &str = "x";
pub(crate) const READER: &str = "s";

/// A waiter's entry in `key`'s queue.
pub(crate) fn entry(queue: &[u8], id: &str) -> Vec<u8> {
    let mut name = queue.to_vec();
    name.extend_from_slice(id.as_bytes());
    name
}

fn named(prefix: &str, what: &str, key: &[u8]) -> Vec<u8> {
    let mut name = Vec::with_capacity(prefix.len() + what.len() + key.len());
    name.extend_from_slice(prefix.as_bytes());
    name.extend_from_slice(what.as_bytes());
    name.extend_from_slice(key);
    name
}

/// The end of the range of every key that starts with `start` (etcd's `range_end`): `start` with
/// its last byte below 0xff raised by one and the rest cut off.
pub(crate) fn range_end(start: &[u8]) -> Vec<u8> {
    let mut end = start.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every byte 0xff: to the end of the key space.
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queues_never_hold_another_keys_entries() {
        let a = Key::new(b"a").unwrap();
        let ab = Key::new(b"a/x").unwrap();
        let qa = queue("p:", &a);
        let qab = queue("p:", &ab);
        assert_eq!(qa, b"p:queue/0001/a/");
        assert!(!qab.starts_with(&qa));
        assert_eq!(lock("p:", &a), b"p:lock/a");
        assert!(!permit_queue("p:", &a).starts_with(&permits("p:", &a)));
        assert!(!permits("p:", &a).starts_with(&permit_queue("p:", &a)));
        assert_eq!(range_end(b"ab"), b"ac");
        assert_eq!(range_end(b"a\xff"), b"b");
        assert_eq!(range_end(b"\xff"), b"\0");
    }
}
