//! One size per semaphore: the number of permits a semaphore's holders were granted under, kept in
//! a side file next to its record (`s-….lock.size`), never in the record itself.
//!
//! Why not in the record: a Leasehold 0.2 process may still read the directory's records during a
//! rolling upgrade, and it takes unknown format or flag bits for damage, which counts as free, so a
//! size in the record would let it in beside the holders. The side file's name does not end in
//! `.lock`, so a 0.2 process neither reads nor sweeps it (nor writes it: sizes are enforced among
//! newer processes only).
//!
//! Every read and write of the side file happens under the record's exclusive `flock`, which
//! orders them with the grants:
//!
//! - The size binds only while the record has live holders, judged as for every other decision
//!   (the record normalized: holders past their `CLOCK_BOOTTIME` deadline and of an earlier boot
//!   dropped). A permit request of another size is then refused with `other_size`. Without live
//!   holders any size is taken, and written over the old one.
//! - The size is written before the grant goes into the record, and only when the file does not
//!   say it already. A crash in between leaves a new size beside no new holder: with no live
//!   holders it does not bind, and with live holders it was already theirs (or unknown, below). So
//!   no crash leaves a size that refuses for ever, or two sizes among live holders.
//! - A file that is missing or not a valid size while holders are live (they are 0.2 holders, or
//!   the file was deleted by hand; a power loss that tears it also ends every holder) says nothing:
//!   the request is taken at its own size, which is written, and binds from then on.
//! - It goes with its record: `LocalBackend::retire` deletes it first, then the record, so every
//!   release, sweep or force-release that deletes a record deletes its side file. A side file whose
//!   record is gone (deleted by a process that does not know side files) is deleted by the sweep.
//! - It is opened like a record: relative to the checked directory's descriptor, never through a
//!   symbolic link, created 0600.
//!
//! Layout (16 bytes, little-endian): `0 magic "LHS1" | 4 permits u32 | 8 check [8]`, `check` being
//! the FNV-1a 64 hash of `[0..8]`, as in records.

use crate::dir::Dir;
use crate::file::Locked;
use crate::io_error::io_error;
use crate::names;
use crate::record::{check, Record};
use leasehold_core::wait::other_size;
use leasehold_core::{Key, LeaseKind, Result};
use std::io::{ErrorKind, Read};
use std::os::unix::fs::FileExt;

/// What a semaphore record's name gets to name its side file.
const SUFFIX: &str = ".size";
const MAGIC: &[u8; 4] = b"LHS1";
const LEN: usize = 16;

/// A permit request that may go ahead at its size.
#[derive(Debug)]
pub(crate) struct Size {
    asked: u32,
    /// What the side file said.
    stored: Option<u32>,
}

impl Size {
    /// For a permit request of `kind` on the record `name` (`None` for other kinds): reads the side
    /// file and refuses the request if `record`'s live holders were granted under another size.
    /// `file` is the record's `flock`, held; `record` must be normalized.
    pub(crate) fn check(
        dir: &Dir,
        file: &Locked,
        name: &str,
        record: &Record,
        key: &Key,
        kind: LeaseKind,
    ) -> Result<Option<Size>> {
        // Taken only as proof that the caller holds the record's flock, which orders the side
        // file's readers and writers.
        let _ = file;
        let LeaseKind::Permit(asked) = kind else {
            return Ok(None);
        };
        let asked = asked.get();
        let stored = read(dir, name)?;
        match stored {
            Some(held) if held != asked && !record.holders.is_empty() => {
                Err(other_size(key, held, asked))
            }
            _ => Ok(Some(Size { asked, stored })),
        }
    }

    /// Stores the size in the side file of the record `name` (whose `flock` `file` holds), unless
    /// it says so already. Called before the grant is written to the record.
    pub(crate) fn store(&self, dir: &Dir, file: &Locked, name: &str) -> Result<()> {
        let _ = file;
        if self.stored == Some(self.asked) {
            return Ok(());
        }
        let side = side_name(name);
        let fail = |e: std::io::Error| {
            io_error("cannot write the semaphore size file", &dir.join(&side), &e)
        };
        dir.open_at(&side, libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC)
            .and_then(|f| f.write_all_at(&encode(self.asked), 0))
            .map_err(fail)
    }
}

/// Deletes the side file of the record `name`, if it has one; the caller holds the record's
/// `flock`.
pub(crate) fn remove(dir: &Dir, name: &str) -> Result<()> {
    if !name.starts_with(names::SEMAPHORE_PREFIX) {
        return Ok(());
    }
    let side = side_name(name);
    match dir.unlink(&side) {
        Err(e) if e.kind() != ErrorKind::NotFound => Err(io_error(
            "cannot delete the semaphore size file",
            &dir.join(&side),
            &e,
        )),
        _ => Ok(()),
    }
}

/// The record a directory entry is the side file of, if it is one.
pub(crate) fn record_of(entry: &str) -> Option<&str> {
    entry
        .strip_suffix(SUFFIX)
        .filter(|r| r.starts_with(names::SEMAPHORE_PREFIX) && names::is_record_file_name(r))
}

fn side_name(name: &str) -> String {
    format!("{name}{SUFFIX}")
}

/// The size the side file of the record `name` says; `None` when it is missing or no valid size.
fn read(dir: &Dir, name: &str) -> Result<Option<u32>> {
    let side = side_name(name);
    let fail =
        |e: std::io::Error| io_error("cannot read the semaphore size file", &dir.join(&side), &e);
    let file = match dir.open_at(&side, libc::O_RDONLY) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(fail(e)),
    };
    // One byte more than a size, so trailing garbage shows.
    let mut bytes = Vec::with_capacity(LEN + 1);
    file.take(LEN as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(fail)?;
    Ok(decode(&bytes))
}

fn encode(permits: u32) -> [u8; LEN] {
    let mut b = [0u8; LEN];
    b[..4].copy_from_slice(MAGIC);
    b[4..8].copy_from_slice(&permits.to_le_bytes());
    let sum = check(&b[..8]);
    b[8..].copy_from_slice(&sum);
    b
}

fn decode(b: &[u8]) -> Option<u32> {
    let valid = b.len() == LEN && b[..4] == *MAGIC && b[8..] == check(&b[..8]);
    valid.then(|| u32::from_le_bytes([b[4], b[5], b[6], b[7]]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LocalBackend;
    use leasehold_core::{Config, ErrorKind as Kind, LockBackend, Permits, Request, Ttl};
    use std::os::unix::fs::PermissionsExt;
    use std::path::PathBuf;
    use std::time::Duration;

    fn backend(dir: &tempfile::TempDir) -> LocalBackend {
        let url = format!("file://{}", dir.path().display());
        LocalBackend::open(&Config::parse(&url).unwrap()).unwrap()
    }

    fn permits(n: u32) -> LeaseKind {
        LeaseKind::Permit(Permits::new(n).unwrap())
    }

    fn long() -> Ttl {
        Ttl::from_millis(30_000).unwrap()
    }

    /// The side file of `key`'s semaphore record.
    fn side_file(b: &LocalBackend, key: &Key) -> PathBuf {
        b.dir.join(&side_name(&b.record_name(key, permits(1))))
    }

    #[test]
    fn sizes_round_trip_and_garbage_is_no_size() {
        assert_eq!(decode(&encode(3)), Some(3));
        assert_eq!(decode(&encode(u32::MAX)), Some(u32::MAX));
        let mut torn = encode(3);
        torn[5] ^= 1;
        assert_eq!(decode(&torn), None);
        assert_eq!(decode(&encode(3)[..8]), None);
        assert_eq!(decode(&[]), None);
        let mut long = encode(3).to_vec();
        long.push(0);
        assert_eq!(decode(&long), None, "trailing bytes");
        assert_eq!(record_of("s-a-00.lock.size"), Some("s-a-00.lock"));
        assert_eq!(record_of("k-a-00.lock.size"), None, "locks have no size");
        assert_eq!(record_of("s-a-00.lock"), None);
    }

    #[test]
    fn the_side_file_binds_only_while_the_record_has_live_holders() {
        let tmp = tempfile::tempdir().unwrap();
        let b = backend(&tmp);
        let key = Key::new("sem").unwrap();
        let side = side_file(&b, &key);
        let record = b.dir.join(&b.record_name(&key, permits(1)));
        b.try_acquire(&Request::from_parts(
            key.clone(),
            permits(3),
            Ttl::from_millis(1).unwrap(),
        ))
        .unwrap();
        let mode = std::fs::metadata(&side).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "private, like records");
        assert_eq!(std::fs::read(&side).unwrap(), encode(3));
        std::thread::sleep(Duration::from_millis(5));
        // The holder ran out (on the boot clock, as the record judges it): its size went with it.
        let mut lease = b
            .try_acquire(&Request::from_parts(key.clone(), permits(5), long()))
            .unwrap();
        assert_eq!(std::fs::read(&side).unwrap(), encode(5));
        let err = b
            .try_acquire(&Request::from_parts(key.clone(), permits(3), long()))
            .unwrap_err();
        assert_eq!(err.kind(), Kind::InvalidArgument, "{err}");
        b.release(&mut lease).unwrap();
        assert!(!side.exists());

        // A crash after a grant's size was written, before the grant was: a size beside a record
        // with no holder of it, which does not bind.
        std::fs::File::create(&record).unwrap();
        std::fs::write(&side, encode(7)).unwrap();
        let mut lease = b
            .try_acquire(&Request::from_parts(key.clone(), permits(2), long()))
            .unwrap();
        assert_eq!(std::fs::read(&side).unwrap(), encode(2));

        // Garbage (or no file) beside live holders says nothing: the request's size is taken,
        // and binds from then on.
        std::fs::write(&side, b"garbage").unwrap();
        let mut other = b
            .try_acquire(&Request::from_parts(key.clone(), permits(4), long()))
            .unwrap();
        assert_eq!(std::fs::read(&side).unwrap(), encode(4));
        let err = b
            .try_acquire(&Request::from_parts(key.clone(), permits(2), long()))
            .unwrap_err();
        assert_eq!(err.kind(), Kind::InvalidArgument, "{err}");
        std::fs::remove_file(&side).unwrap();
        let mut third = b
            .try_acquire(&Request::from_parts(key.clone(), permits(4), long()))
            .unwrap();
        assert_eq!(std::fs::read(&side).unwrap(), encode(4));
        for held in [&mut lease, &mut other, &mut third] {
            b.release(held).unwrap();
        }
    }

    #[test]
    fn the_side_file_goes_with_its_record() {
        let tmp = tempfile::tempdir().unwrap();
        let b = backend(&tmp);
        let key = Key::new("sem-gone").unwrap();
        let side = side_file(&b, &key);
        let record = b.dir.join(&b.record_name(&key, permits(1)));
        let mut lease = b
            .try_acquire(&Request::from_parts(key.clone(), permits(2), long()))
            .unwrap();
        b.release(&mut lease).unwrap();
        assert!(!record.exists() && !side.exists(), "a release deletes both");

        // A crashed holder's record and side file go with the sweep.
        let short = Ttl::from_millis(1).unwrap();
        b.try_acquire(&Request::from_parts(key.clone(), permits(2), short))
            .unwrap();
        assert!(side.exists());
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(b.sweep().unwrap(), 1);
        assert!(!record.exists() && !side.exists(), "a sweep deletes both");

        // A side file left by a process that deleted the record without it is swept too, and is
        // not counted as a record.
        b.try_acquire(&Request::from_parts(key.clone(), permits(2), long()))
            .unwrap();
        std::fs::remove_file(&record).unwrap();
        assert_eq!(b.sweep().unwrap(), 0);
        assert!(!record.exists() && !side.exists(), "the orphan is deleted");
    }
}
