//! What a record file holds for one key, and its on-disk format.
//!
//! A record file has two slots of [`SLOT`] bytes. Each write goes to the slot that does NOT hold the
//! newest valid record, carries a generation number one higher, and carries a check over
//! its bytes; a reader takes the valid slot with the highest generation. A write torn by a crash
//! (power loss mid-`pwrite`) therefore leaves the previous record readable, fence included. A slot
//! that is neither valid nor blank means damage: the key then counts as free (the torn write may
//! have been a release; a holder that still runs is less harm than a key locked by garbage) with
//! the fence of the valid slot, and the next write repairs the whole file. Only when neither slot is
//! valid is the fence unknown; the epoch floor (see `epoch`) still keeps fences from going
//! backwards across a reboot, which is when torn writes really happen.
//!
//! Slot layout (little-endian): `magic "LHL1" | len u32 | check [8] | gen u64 | epoch u64 | fence u64
//! | deadline_ns u64 (0 = free) | token [32] (hex) | next_ticket u64 | waiters u32 | reserved u32 |
//! waiters × (ticket u64, heartbeat_ns u64)`; `check` is the FNV-1a 64 hash of `[16..len]`. The check
//! only has to catch torn or garbled writes, not an adversary (anyone who can write the file can take
//! the lock anyway), and waiters read records often, so a cheap hash beats a cryptographic one.

use leasehold_core::Token;

pub(crate) const SLOT: usize = 2048;
pub(crate) const FILE_LEN: usize = 2 * SLOT;
const HEADER: usize = 96;
const WAITER_LEN: usize = 16;
/// The longest waiter queue a key keeps; waiters beyond it poll until there is room.
pub(crate) const MAX_WAITERS: usize = (SLOT - HEADER) / WAITER_LEN;
const MAGIC: &[u8; 4] = b"LHL1";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Holder {
    pub token: Token,
    /// `CLOCK_BOOTTIME` nanoseconds at which the lease runs out.
    pub deadline_ns: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Waiter {
    pub ticket: u64,
    /// When the waiter last showed it is alive (`CLOCK_BOOTTIME` ns).
    pub heartbeat_ns: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Record {
    pub gen: u64,
    /// The epoch (boot) the deadline and heartbeats were written in.
    pub epoch: u64,
    /// The last fence handed out for this key; kept across releases.
    pub fence: u64,
    pub holder: Option<Holder>,
    pub next_ticket: u64,
    /// FIFO of waiting `acquire` calls.
    pub waiters: Vec<Waiter>,
    /// Read from a damaged file: the next write rewrites the whole file. Not stored.
    pub repair: bool,
}

/// What reading a record file found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Decoded {
    /// A new file (empty or zeros): the key was never taken.
    Fresh,
    Valid(Record),
    /// Bytes that are no valid record in at least one slot: free, with whatever fence a valid slot
    /// still tells (0 if none), marked for repair.
    Damaged(Record),
}

impl Decoded {
    /// The record, and whether the file was damaged.
    pub(crate) fn into_record(self) -> (Record, bool) {
        match self {
            Decoded::Fresh => (Record::default(), false),
            Decoded::Valid(r) => (r, false),
            Decoded::Damaged(r) => (r, true),
        }
    }
}

pub(crate) fn decode(bytes: &[u8]) -> Decoded {
    let slots = [slot(bytes, 0), slot(bytes, SLOT)];
    let blank = |s: Option<&[u8]>| s.map_or(true, |s| s.iter().all(|&b| b == 0));
    let mut damaged = bytes.len() > FILE_LEN;
    let mut best: Option<Record> = None;
    for s in slots {
        match s.and_then(decode_slot) {
            Some(r) if best.as_ref().map_or(true, |b| r.gen > b.gen) => best = Some(r),
            Some(_) => {}
            None => damaged |= !blank(s),
        }
    }
    match (best, damaged) {
        (Some(r), false) => Decoded::Valid(r),
        (None, false) => Decoded::Fresh,
        (best, true) => {
            let mut r = best.unwrap_or_default();
            r.holder = None;
            r.waiters.clear();
            r.repair = true;
            Decoded::Damaged(r)
        }
    }
}

fn slot(bytes: &[u8], at: usize) -> Option<&[u8]> {
    let end = bytes.len().min(at.saturating_add(SLOT));
    bytes.get(at..end)
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

fn check(body: &[u8]) -> [u8; 8] {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in body {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash.to_le_bytes()
}

fn decode_slot(b: &[u8]) -> Option<Record> {
    if b.get(..4)? != MAGIC {
        return None;
    }
    let len = usize::try_from(u32_at(b, 4)?).ok()?;
    if !(HEADER..=SLOT).contains(&len) || b.len() < len {
        return None;
    }
    if b.get(8..16)? != check(b.get(16..len)?) {
        return None;
    }
    let deadline_ns = u64_at(b, 40)?;
    let holder = if deadline_ns == 0 {
        None
    } else {
        Some(Holder {
            token: Token::parse(b.get(48..80)?)?,
            deadline_ns,
        })
    };
    let count = usize::try_from(u32_at(b, 88)?).ok()?;
    if count > MAX_WAITERS || HEADER + count * WAITER_LEN != len {
        return None;
    }
    let waiters = (0..count)
        .map(|i| {
            let at = HEADER + i * WAITER_LEN;
            Some(Waiter {
                ticket: u64_at(b, at)?,
                heartbeat_ns: u64_at(b, at + 8)?,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Record {
        gen: u64_at(b, 16)?,
        epoch: u64_at(b, 24)?,
        fence: u64_at(b, 32)?,
        holder,
        next_ticket: u64_at(b, 80)?,
        waiters,
        repair: false,
    })
}

/// The bytes of `record` and the file offset of the slot they go to. `record.gen` must already be
/// the new generation.
pub(crate) fn encode(record: &Record) -> (u64, Vec<u8>) {
    let count = record.waiters.len().min(MAX_WAITERS);
    let len = HEADER + count * WAITER_LEN;
    let mut b = Vec::with_capacity(len);
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&(len as u32).to_le_bytes());
    b.extend_from_slice(&[0u8; 8]);
    b.extend_from_slice(&record.gen.to_le_bytes());
    b.extend_from_slice(&record.epoch.to_le_bytes());
    b.extend_from_slice(&record.fence.to_le_bytes());
    match &record.holder {
        Some(h) => {
            b.extend_from_slice(&h.deadline_ns.max(1).to_le_bytes());
            b.extend_from_slice(h.token.as_str().as_bytes());
        }
        None => {
            b.extend_from_slice(&0u64.to_le_bytes());
            b.extend_from_slice(&[b'0'; 32]);
        }
    }
    b.extend_from_slice(&record.next_ticket.to_le_bytes());
    b.extend_from_slice(&(count as u32).to_le_bytes());
    b.extend_from_slice(&[0u8; 4]);
    for w in &record.waiters[..count] {
        b.extend_from_slice(&w.ticket.to_le_bytes());
        b.extend_from_slice(&w.heartbeat_ns.to_le_bytes());
    }
    debug_assert_eq!(b.len(), len);
    let sum = check(&b[16..]);
    b[8..16].copy_from_slice(&sum);
    let offset = if record.gen % 2 == 0 { 0 } else { SLOT as u64 };
    (offset, b)
}

impl Record {
    /// Drops what no longer counts: everything written in another boot, an expired holder, waiters
    /// that stopped showing signs of life. True if anything changed.
    pub(crate) fn normalize(&mut self, epoch: u64, now_ns: u64, stale_ns: u64) -> bool {
        let mut changed = false;
        if self.epoch != epoch {
            changed |= self.holder.take().is_some() || !self.waiters.is_empty();
            self.waiters.clear();
            self.epoch = epoch;
        }
        if matches!(self.holder, Some(h) if h.deadline_ns <= now_ns) {
            self.holder = None;
            changed = true;
        }
        let before = self.waiters.len();
        self.waiters
            .retain(|w| w.heartbeat_ns.saturating_add(stale_ns) > now_ns);
        changed || self.waiters.len() != before
    }

    /// The next fence: one above both the last one handed out and this epoch's floor.
    pub(crate) fn next_fence(&self, floor: u64) -> Option<u64> {
        self.fence.max(floor).checked_add(1)
    }

    pub(crate) fn position(&self, ticket: u64) -> Option<usize> {
        self.waiters.iter().position(|w| w.ticket == ticket)
    }

    pub(crate) fn remove_waiter(&mut self, ticket: u64) -> bool {
        let before = self.waiters.len();
        self.waiters.retain(|w| w.ticket != ticket);
        self.waiters.len() != before
    }

    /// Appends a waiter; `None` when the queue is full.
    pub(crate) fn enqueue(&mut self, now_ns: u64) -> Option<u64> {
        if self.waiters.len() >= MAX_WAITERS {
            return None;
        }
        let ticket = self.next_ticket;
        self.next_ticket = self.next_ticket.wrapping_add(1);
        self.waiters.push(Waiter {
            ticket,
            heartbeat_ns: now_ns,
        });
        Some(ticket)
    }

    pub(crate) fn heartbeat(&mut self, ticket: u64, now_ns: u64) {
        if let Some(w) = self.waiters.iter_mut().find(|w| w.ticket == ticket) {
            w.heartbeat_ns = now_ns;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Record {
        Record {
            gen: 7,
            epoch: 2,
            fence: 41,
            holder: Some(Holder {
                token: Token::from_bytes([0xab; 16]),
                deadline_ns: 123_456,
            }),
            next_ticket: 9,
            waiters: vec![
                Waiter {
                    ticket: 7,
                    heartbeat_ns: 5,
                },
                Waiter {
                    ticket: 8,
                    heartbeat_ns: 6,
                },
            ],
            repair: false,
        }
    }

    fn file_with(records: &[&Record]) -> Vec<u8> {
        let mut file = vec![0u8; FILE_LEN];
        for r in records {
            let (at, bytes) = encode(r);
            file[at as usize..at as usize + bytes.len()].copy_from_slice(&bytes);
        }
        file
    }

    #[test]
    fn round_trip_and_newest_slot_wins() {
        let a = sample();
        let mut b = sample();
        b.gen = 8;
        b.fence = 42;
        b.holder = None;
        b.waiters.clear();
        assert_eq!(decode(&file_with(&[&a])), Decoded::Valid(a.clone()));
        assert_eq!(decode(&file_with(&[&a, &b])), Decoded::Valid(b.clone()));
        let full = Record {
            waiters: (0..MAX_WAITERS as u64)
                .map(|t| Waiter {
                    ticket: t,
                    heartbeat_ns: t,
                })
                .collect(),
            ..sample()
        };
        assert_eq!(decode(&file_with(&[&full])), Decoded::Valid(full));
    }

    #[test]
    fn torn_write_keeps_the_previous_record() {
        let a = sample();
        let mut b = sample();
        b.gen = 8;
        b.fence = 42;
        let mut file = file_with(&[&a, &b]);
        // b went to slot 0 (even generation); tear it.
        for byte in &mut file[40..60] {
            *byte ^= 0x5a;
        }
        let Decoded::Damaged(r) = decode(&file) else {
            panic!("a torn slot is damage");
        };
        assert_eq!(r.fence, a.fence, "the fence of the intact slot survives");
        assert!(r.holder.is_none() && r.waiters.is_empty() && r.repair);
        assert_eq!(r.gen, a.gen, "the next write goes to the torn slot");
    }

    #[test]
    fn garbage_empty_and_short_files_never_panic() {
        assert_eq!(decode(&[]), Decoded::Fresh);
        assert_eq!(decode(&[0u8; 10]), Decoded::Fresh);
        assert!(matches!(decode(b"garbage"), Decoded::Damaged(r) if r.fence == 0));
        let file = file_with(&[&sample()]);
        for cut in 0..file.len().min(SLOT + HEADER + 40) {
            let _ = decode(&file[..cut]);
        }
        let mut x = 0x1234_5678u32;
        let noise: Vec<u8> = (0..FILE_LEN)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
        assert!(matches!(decode(&noise), Decoded::Damaged(r) if r.fence == 0));
        let mut bad_magic_len = file_with(&[&sample()]);
        bad_magic_len[SLOT + 4..SLOT + 8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(decode(&bad_magic_len), Decoded::Damaged(r) if r.fence == 0));
        let mut long = file_with(&[&sample()]);
        long.push(1);
        assert!(
            matches!(decode(&long), Decoded::Damaged(_)),
            "trailing bytes are damage"
        );
    }

    #[test]
    fn normalize_and_fences() {
        let mut r = sample();
        assert!(!r.normalize(2, 100, 1_000));
        assert!(
            r.normalize(2, 200_000, 1_000),
            "expired holder and stale waiters go"
        );
        assert!(r.holder.is_none() && r.waiters.is_empty());
        let mut other_boot = sample();
        assert!(other_boot.normalize(3, 0, u64::MAX));
        assert!(other_boot.holder.is_none() && other_boot.waiters.is_empty());
        assert_eq!(other_boot.fence, 41, "the fence survives");
        assert_eq!(other_boot.next_fence(3 << 32), Some((3 << 32) + 1));
        assert_eq!(sample().next_fence(0), Some(42));
        let mut max = sample();
        max.fence = u64::MAX;
        assert_eq!(max.next_fence(0), None);
    }
}
