//! What a record file holds for one key, and its on-disk format.
//!
//! A record file has two slots of [`SLOT`] bytes. Each write goes to the slot that does NOT hold the
//! newest valid record, carries a generation number one higher, and carries a check over
//! its bytes; a reader takes the valid slot with the highest generation. A write torn by a crash
//! (power loss mid-`pwrite`) therefore leaves the previous record readable, fence included. A slot
//! that is neither valid nor blank means damage: the key then counts as free with the fence of the
//! valid slot, and the next write repairs the whole file. A slot is one page, page-aligned, so a
//! write of it is never torn by a signal (the kernel checks for a fatal signal between pages, not
//! within one); only a power loss tears it, and after it every record is of an earlier boot (free)
//! anyway. Damage within a boot means someone wrote garbage into the file, and a key locked for ever
//! by garbage would be worse. When neither slot is valid the fence is unknown; the next fence is
//! still larger, from the directory's high-water mark and the wall clock (see `fences`).
//!
//! Slot layout, format 3 (little-endian):
//!
//! ```text
//!  0 magic "LHL3" | 4 len u32 | 8 check [8] | 16 gen u64 | 24 fence u64 | 32 boot [16]
//! 48 next_ticket u64 | 56 holders u16 | 58 waiters u16 | 60 flags u32 (bit 0: the holder is exclusive)
//! 64 holders × (token [16] | deadline_ns u64 | fence u64)
//!    waiters × (ticket u64, bit 63 set for an exclusive request | heartbeat_ns u64)
//! ```
//!
//! `check` is the FNV-1a 64 hash of `[16..len]`. `boot` is the boot id of the record's last writer:
//! the holders' deadlines and the waiters' heartbeats are `CLOCK_BOOTTIME` readings of that boot
//! (one id covers them all, because whoever writes a record first drops every entry of another
//! boot; see `Record::normalize`). The check only has to catch torn or garbled writes, not an
//! adversary (only the directory's owner can write the file), and waiters read records often, so a
//! cheap hash beats a cryptographic one.
//!
//! One record serves a lock (one exclusive holder, or shared holders) or a semaphore (permits; a
//! file of its own, see `names`): [`MAX_HOLDERS`] holders and [`MAX_WAITERS`] waiters at most,
//! which is what keeps a slot within its page. Each holder keeps its own token, deadline and fence,
//! so a share or a permit expires, releases and is restored on its own.
//!
//! Format 3 replaced format 2 (one holder; never released) when shared locks and semaphores came;
//! formats 1 (`"LHL1"`) and 2 (`"LHL2"`) are refused, not migrated: a process of the older version
//! may still be running on the directory, and format 1's deadlines are only meaningful with the
//! epoch file of its directory. The error says to stop the older processes and delete the
//! directory's files (or use a new directory).

use crate::clock::BootId;
use leasehold_core::Token;

pub(crate) const SLOT: usize = 4096;
pub(crate) const FILE_LEN: usize = 2 * SLOT;
const HEADER: usize = 64;
const HOLDER_LEN: usize = 32;
const WAITER_LEN: usize = 16;
/// The most leases (shared holders, or permits of a semaphore) one key has at once on this backend.
pub const MAX_HOLDERS: usize = 64;
/// The longest waiter queue a key keeps; waiters beyond it poll until there is room.
pub(crate) const MAX_WAITERS: usize = (SLOT - HEADER - MAX_HOLDERS * HOLDER_LEN) / WAITER_LEN;
const MAGIC: &[u8; 4] = b"LHL3";
/// Older formats, refused: (magic, format number).
const OLD_MAGICS: &[(&[u8; 4], u32)] = &[(b"LHL1", 1), (b"LHL2", 2)];
/// Where formats 1 and 2 put their second slot.
const OLD_SLOT: usize = 2048;
const EXCLUSIVE_HOLDER: u32 = 1;
const EXCLUSIVE_WAITER: u64 = 1 << 63;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Holder {
    pub token: Token,
    /// `CLOCK_BOOTTIME` nanoseconds at which the lease runs out.
    pub deadline_ns: u64,
    /// The fence this holder was granted.
    pub fence: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Waiter {
    /// Below 2^63 (the flag bit is stored apart in `exclusive`).
    pub ticket: u64,
    /// When the waiter last showed it is alive (`CLOCK_BOOTTIME` ns).
    pub heartbeat_ns: u64,
    /// Waits for the key alone: shared requests that come later queue behind it.
    pub exclusive: bool,
}

/// What a request asks of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Want {
    Exclusive,
    Shared,
    /// One of this many permits.
    Permit(u32),
}

/// Whether a request may take the key now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admit {
    Yes,
    No,
    /// It would be admitted, but the record already keeps [`MAX_HOLDERS`] holders.
    Full,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Record {
    pub gen: u64,
    /// The last fence handed out for this key (0: none in this file); kept across releases.
    pub fence: u64,
    /// The boot the deadlines and heartbeats were written in (all zero: none yet).
    pub boot: BootId,
    /// The only holder is exclusive (`holders` has one entry).
    pub exclusive: bool,
    pub holders: Vec<Holder>,
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
    /// A record of an older format (its number), which this version does not read (see the
    /// module docs).
    OldFormat(u32),
}

impl Decoded {
    /// The record and whether the file was damaged, or the number of the older format found.
    pub(crate) fn into_record(self) -> Result<(Record, bool), u32> {
        match self {
            // Generation 1, so the first write (generation 2) goes to the first slot: no slot of a
            // new file is valid, so either would do, and one at offset 0 keeps the file to the
            // bytes written instead of a hole and a block past it.
            Decoded::Fresh => Ok((
                Record {
                    gen: 1,
                    ..Record::default()
                },
                false,
            )),
            Decoded::Valid(r) => Ok((r, false)),
            Decoded::Damaged(r) => Ok((r, true)),
            Decoded::OldFormat(n) => Err(n),
        }
    }
}

pub(crate) fn decode(bytes: &[u8]) -> Decoded {
    let slots = [slot(bytes, 0), slot(bytes, SLOT)];
    // Older formats had slots of 2048 bytes: their second slot starts inside our first, where only
    // a slot that is no valid record of ours may be read as one of theirs.
    let first_valid = slots[0].and_then(decode_slot).is_some();
    let starts = [Some(0), (!first_valid).then_some(OLD_SLOT), Some(SLOT)];
    for (magic, number) in OLD_MAGICS {
        if starts
            .iter()
            .flatten()
            .any(|&at| bytes.get(at..).is_some_and(|s| s.starts_with(*magic)))
        {
            return Decoded::OldFormat(*number);
        }
    }
    let blank = |s: Option<&[u8]>| s.is_none_or(|s| s.iter().all(|&b| b == 0));
    let mut damaged = bytes.len() > FILE_LEN;
    let mut best: Option<Record> = None;
    for s in slots {
        match s.and_then(decode_slot) {
            Some(r) if best.as_ref().is_none_or(|b| r.gen > b.gen) => best = Some(r),
            Some(_) => {}
            None => damaged |= !blank(s),
        }
    }
    match (best, damaged) {
        (Some(r), false) => Decoded::Valid(r),
        (None, false) => Decoded::Fresh,
        (best, true) => {
            let mut r = best.unwrap_or_default();
            r.holders.clear();
            r.exclusive = false;
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

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

pub(crate) fn check(body: &[u8]) -> [u8; 8] {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in body {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash.to_le_bytes()
}

/// A token's 16 bytes (tokens are stored raw, half the size of their hex form).
fn token_bytes(token: &Token) -> [u8; 16] {
    let mut raw = [0u8; 16];
    // A token is 32 lowercase hex digits by construction, so this cannot fail.
    let decoded = hex::decode_to_slice(token.as_str(), &mut raw);
    debug_assert!(decoded.is_ok(), "a token is 32 hex digits");
    raw
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
    let holders = usize::from(u16_at(b, 56)?);
    let waiters = usize::from(u16_at(b, 58)?);
    let flags = u32_at(b, 60)?;
    let exclusive = flags & EXCLUSIVE_HOLDER != 0;
    if holders > MAX_HOLDERS
        || waiters > MAX_WAITERS
        || HEADER + holders * HOLDER_LEN + waiters * WAITER_LEN != len
        || flags & !EXCLUSIVE_HOLDER != 0
        || (exclusive && holders != 1)
    {
        return None;
    }
    let holders = (0..holders)
        .map(|i| {
            let at = HEADER + i * HOLDER_LEN;
            let raw: [u8; 16] = b.get(at..at + 16)?.try_into().ok()?;
            Some(Holder {
                token: Token::from_bytes(raw),
                deadline_ns: u64_at(b, at + 16)?,
                fence: u64_at(b, at + 24)?,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    let base = HEADER + holders.len() * HOLDER_LEN;
    let waiters = (0..waiters)
        .map(|i| {
            let at = base + i * WAITER_LEN;
            let ticket = u64_at(b, at)?;
            Some(Waiter {
                ticket: ticket & !EXCLUSIVE_WAITER,
                heartbeat_ns: u64_at(b, at + 8)?,
                exclusive: ticket & EXCLUSIVE_WAITER != 0,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Record {
        gen: u64_at(b, 16)?,
        fence: u64_at(b, 24)?,
        boot: b.get(32..48)?.try_into().ok()?,
        exclusive,
        holders,
        next_ticket: u64_at(b, 48)?,
        waiters,
        repair: false,
    })
}

/// The bytes of `record` and the file offset of the slot they go to. `record.gen` must already be
/// the new generation.
pub(crate) fn encode(record: &Record) -> (u64, Vec<u8>) {
    let holders = &record.holders[..record.holders.len().min(MAX_HOLDERS)];
    let waiters = &record.waiters[..record.waiters.len().min(MAX_WAITERS)];
    let len = HEADER + holders.len() * HOLDER_LEN + waiters.len() * WAITER_LEN;
    let exclusive = record.exclusive && holders.len() == 1;
    let mut b = Vec::with_capacity(len);
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&(len as u32).to_le_bytes());
    b.extend_from_slice(&[0u8; 8]);
    b.extend_from_slice(&record.gen.to_le_bytes());
    b.extend_from_slice(&record.fence.to_le_bytes());
    b.extend_from_slice(&record.boot);
    b.extend_from_slice(&record.next_ticket.to_le_bytes());
    b.extend_from_slice(&(holders.len() as u16).to_le_bytes());
    b.extend_from_slice(&(waiters.len() as u16).to_le_bytes());
    let flags = if exclusive { EXCLUSIVE_HOLDER } else { 0 };
    b.extend_from_slice(&flags.to_le_bytes());
    for h in holders {
        b.extend_from_slice(&token_bytes(&h.token));
        b.extend_from_slice(&h.deadline_ns.max(1).to_le_bytes());
        b.extend_from_slice(&h.fence.to_le_bytes());
    }
    for w in waiters {
        let flag = if w.exclusive { EXCLUSIVE_WAITER } else { 0 };
        b.extend_from_slice(&((w.ticket & !EXCLUSIVE_WAITER) | flag).to_le_bytes());
        b.extend_from_slice(&w.heartbeat_ns.to_le_bytes());
    }
    debug_assert_eq!(b.len(), len);
    let sum = check(&b[16..]);
    b[8..16].copy_from_slice(&sum);
    let offset = if record.gen.is_multiple_of(2) {
        0
    } else {
        SLOT as u64
    };
    (offset, b)
}

impl Record {
    /// Drops what no longer counts: everything written in another boot, expired holders, waiters
    /// that stopped showing signs of life. True if anything changed.
    ///
    /// A record of another boot id counts as over only because that boot is: the current boot's id
    /// never changes and every writer runs on this host (network file systems are refused), so
    /// another id is an earlier boot, whose processes are all gone. Within this boot a holder goes
    /// only when its own deadline has passed on this boot's clock.
    pub(crate) fn normalize(&mut self, boot: &BootId, now_ns: u64, stale_ns: u64) -> bool {
        let mut changed = false;
        if self.boot != *boot {
            changed |= !self.holders.is_empty() || !self.waiters.is_empty();
            self.holders.clear();
            self.waiters.clear();
            self.boot = *boot;
        }
        let holders = self.holders.len();
        self.holders.retain(|h| h.deadline_ns > now_ns);
        let waiters = self.waiters.len();
        self.waiters
            .retain(|w| w.heartbeat_ns.saturating_add(stale_ns) > now_ns);
        if self.holders.is_empty() {
            self.exclusive = false;
        }
        changed || self.holders.len() != holders || self.waiters.len() != waiters
    }

    /// Whether nothing in the record needs keeping but its fence.
    pub(crate) fn is_idle(&self) -> bool {
        self.holders.is_empty() && self.waiters.is_empty()
    }

    /// Whether a request may take the key now: `ticket` is its place in the queue, `None` for a
    /// request that is not queued (it counts as behind every waiter, so it never cuts in).
    ///
    /// Waiters ahead are served first, but several may be served at once: shared requests as long
    /// as no exclusive one is ahead of them (writer preference: a queued writer holds back every
    /// reader that came after it), permits as long as the holders plus the waiters ahead leave one.
    pub(crate) fn admits(&self, want: Want, ticket: Option<u64>) -> Admit {
        let ahead = match ticket.and_then(|t| self.position(t)) {
            Some(p) => &self.waiters[..p],
            None => &self.waiters[..],
        };
        let free = match want {
            Want::Exclusive => self.holders.is_empty() && ahead.is_empty(),
            Want::Shared => !self.exclusive && ahead.iter().all(|w| !w.exclusive),
            Want::Permit(permits) => {
                self.holders.len().saturating_add(ahead.len()) < permits as usize
            }
        };
        match free {
            false => Admit::No,
            true if self.holders.len() >= MAX_HOLDERS => Admit::Full,
            true => Admit::Yes,
        }
    }

    pub(crate) fn holder(&self, token: Token) -> Option<&Holder> {
        self.holders.iter().find(|h| h.token == token)
    }

    pub(crate) fn holder_mut(&mut self, token: Token) -> Option<&mut Holder> {
        self.holders.iter_mut().find(|h| h.token == token)
    }

    pub(crate) fn remove_holder(&mut self, token: Token) -> bool {
        let before = self.holders.len();
        self.holders.retain(|h| h.token != token);
        if self.holders.is_empty() {
            self.exclusive = false;
        }
        self.holders.len() != before
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
    pub(crate) fn enqueue(&mut self, now_ns: u64, exclusive: bool) -> Option<u64> {
        if self.waiters.len() >= MAX_WAITERS {
            return None;
        }
        let ticket = self.next_ticket & !EXCLUSIVE_WAITER;
        self.next_ticket = self.next_ticket.wrapping_add(1) & !EXCLUSIVE_WAITER;
        self.waiters.push(Waiter {
            ticket,
            heartbeat_ns: now_ns,
            exclusive,
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

    const BOOT: BootId = [0xb0; 16];
    const OTHER_BOOT: BootId = [0x0b; 16];

    fn holder(byte: u8, deadline_ns: u64, fence: u64) -> Holder {
        Holder {
            token: Token::from_bytes([byte; 16]),
            deadline_ns,
            fence,
        }
    }

    fn waiter(ticket: u64, heartbeat_ns: u64, exclusive: bool) -> Waiter {
        Waiter {
            ticket,
            heartbeat_ns,
            exclusive,
        }
    }

    fn sample() -> Record {
        Record {
            gen: 7,
            fence: 41,
            boot: BOOT,
            exclusive: true,
            holders: vec![holder(0xab, 123_456, 41)],
            next_ticket: 9,
            waiters: vec![waiter(7, 5, false), waiter(8, 6, true)],
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
        b.holders.clear();
        b.exclusive = false;
        b.waiters.clear();
        assert_eq!(decode(&file_with(&[&a])), Decoded::Valid(a.clone()));
        assert_eq!(decode(&file_with(&[&a, &b])), Decoded::Valid(b.clone()));
        let full = Record {
            exclusive: false,
            holders: (0..MAX_HOLDERS as u64)
                .map(|i| holder(i as u8, 1_000 + i, 50 + i))
                .collect(),
            waiters: (0..MAX_WAITERS as u64)
                .map(|t| waiter(t, t, t % 3 == 0))
                .collect(),
            ..sample()
        };
        let (_, bytes) = encode(&full);
        assert_eq!(bytes.len(), SLOT, "a full record fills its page exactly");
        assert_eq!(decode(&file_with(&[&full])), Decoded::Valid(full));
    }

    #[test]
    fn inconsistent_slots_are_damage() {
        // An exclusive flag over two holders is no record this version writes.
        let mut two = sample();
        two.exclusive = false;
        two.holders.push(holder(0xcd, 1, 2));
        let mut file = file_with(&[&two]);
        let at = if two.gen.is_multiple_of(2) { 0 } else { SLOT };
        file[at + 60] = 1;
        let sum = check(&file[at + 16..at + HEADER + 2 * HOLDER_LEN + 2 * WAITER_LEN]);
        file[at + 8..at + 16].copy_from_slice(&sum);
        assert!(matches!(decode(&file), Decoded::Damaged(r) if r.holders.is_empty()));
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
        assert!(r.holders.is_empty() && r.waiters.is_empty() && r.repair);
        assert_eq!(r.gen, a.gen, "the next write goes to the torn slot");
    }

    #[test]
    fn garbage_empty_and_short_files_never_panic() {
        assert_eq!(decode(&[]), Decoded::Fresh);
        assert_eq!(decode(&[0u8; 10]), Decoded::Fresh);
        assert!(matches!(decode(b"garbage"), Decoded::Damaged(r) if r.fence == 0));
        let file = file_with(&[&sample()]);
        for cut in 0..file.len().min(SLOT + HEADER + 200) {
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
    fn normalize_drops_other_boots_and_expired_entries() {
        let mut r = sample();
        r.exclusive = false;
        r.holders.push(holder(0xcd, 500_000, 42));
        assert!(!r.normalize(&BOOT, 100, 1_000));
        assert!(
            r.normalize(&BOOT, 200_000, 1_000),
            "an expired holder and stale waiters go"
        );
        assert_eq!(r.holders.len(), 1, "the other share stays");
        assert!(r.waiters.is_empty());
        assert!(r.normalize(&BOOT, 600_000, 1_000));
        assert!(r.is_idle() && !r.exclusive);
        let mut other_boot = sample();
        assert!(other_boot.normalize(&OTHER_BOOT, 0, u64::MAX));
        assert!(other_boot.is_idle());
        assert_eq!(other_boot.boot, OTHER_BOOT);
        assert_eq!(other_boot.fence, 41, "the fence survives");
        let mut fresh = Record::default();
        assert!(!fresh.normalize(&BOOT, 0, 0), "nothing to drop");
        assert_eq!(fresh.boot, BOOT);
    }

    #[test]
    fn admission_serves_the_queue_in_order_and_prefers_writers() {
        let mut r = Record::default();
        assert_eq!(r.admits(Want::Exclusive, None), Admit::Yes);
        r.holders.push(holder(1, 10, 1));
        assert_eq!(r.admits(Want::Shared, None), Admit::Yes, "readers share");
        assert_eq!(r.admits(Want::Exclusive, None), Admit::No);
        let writer = r.enqueue(0, true).unwrap();
        let reader = r.enqueue(0, false).unwrap();
        assert_eq!(
            r.admits(Want::Shared, None),
            Admit::No,
            "a new reader waits behind the queued writer"
        );
        assert_eq!(r.admits(Want::Shared, Some(reader)), Admit::No);
        assert_eq!(r.admits(Want::Exclusive, Some(writer)), Admit::No);
        r.holders.clear();
        assert_eq!(r.admits(Want::Exclusive, Some(writer)), Admit::Yes);
        r.remove_waiter(writer);
        assert_eq!(r.admits(Want::Shared, Some(reader)), Admit::Yes);
        // Readers queued before a writer go in together.
        let mut q = Record::default();
        q.holders.push(holder(1, 10, 1));
        q.exclusive = true;
        let r1 = q.enqueue(0, false).unwrap();
        let r2 = q.enqueue(0, false).unwrap();
        let w = q.enqueue(0, true).unwrap();
        let r3 = q.enqueue(0, false).unwrap();
        q.holders.clear();
        q.exclusive = false;
        assert_eq!(q.admits(Want::Shared, Some(r1)), Admit::Yes);
        assert_eq!(q.admits(Want::Shared, Some(r2)), Admit::Yes);
        assert_eq!(q.admits(Want::Exclusive, Some(w)), Admit::No);
        assert_eq!(q.admits(Want::Shared, Some(r3)), Admit::No);
        // Permits: the holders plus the waiters ahead must leave one.
        let mut s = Record::default();
        s.holders.push(holder(1, 10, 1));
        let p1 = s.enqueue(0, false).unwrap();
        let p2 = s.enqueue(0, false).unwrap();
        assert_eq!(s.admits(Want::Permit(3), Some(p1)), Admit::Yes);
        assert_eq!(s.admits(Want::Permit(3), Some(p2)), Admit::Yes);
        assert_eq!(s.admits(Want::Permit(3), None), Admit::No, "no cutting in");
        assert_eq!(s.admits(Want::Permit(4), None), Admit::Yes);
        assert_eq!(s.admits(Want::Permit(2), Some(p2)), Admit::No);
        // The record's own bound.
        let big = Record {
            holders: (0..MAX_HOLDERS).map(|i| holder(i as u8, 10, 1)).collect(),
            ..Record::default()
        };
        assert_eq!(big.admits(Want::Permit(1000), None), Admit::Full);
        assert_eq!(big.admits(Want::Shared, None), Admit::Full);
        assert_eq!(
            big.admits(Want::Permit(MAX_HOLDERS as u32), None),
            Admit::No
        );
    }

    #[test]
    fn older_formats_are_recognized_and_refused() {
        for (magic, number) in OLD_MAGICS {
            let mut file = file_with(&[&sample()]);
            let at = if sample().gen.is_multiple_of(2) {
                0
            } else {
                SLOT
            };
            file[at..at + 4].copy_from_slice(*magic);
            assert_eq!(decode(&file), Decoded::OldFormat(*number));
            assert_eq!(Decoded::OldFormat(*number).into_record(), Err(*number));
        }
        // Format 2 files had their second slot at 2048, inside format 3's first one.
        let mut v2 = vec![0u8; 4096];
        v2[2048..2052].copy_from_slice(b"LHL2");
        assert_eq!(decode(&v2), Decoded::OldFormat(2));
    }

    #[test]
    fn tokens_are_stored_raw() {
        let t = Token::generate().unwrap();
        assert_eq!(Token::from_bytes(token_bytes(&t)), t);
    }
}
