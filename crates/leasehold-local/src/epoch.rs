//! Epochs: one number per boot of the host, kept in the lock directory.
//!
//! Record deadlines are on `CLOCK_BOOTTIME`, which restarts at zero on every boot, so a record must say
//! which boot wrote it: it carries the directory's epoch, and a record of another epoch holds nothing.
//! The epoch also floors fences at `epoch << 32`: record writes are not fsynced (that would cost a
//! disk flush per lock operation), so a power loss may lose the last writes of a record, but every
//! fence handed out after the reboot is above every fence of the boots before (as long as one key
//! sees fewer than 2^32 acquisitions in one boot). The epoch file itself is rare to write and is
//! written durably: temporary file, fsync, rename, fsync of the directory.

use crate::file::{io_error, Locked, Mode};
use crate::names::is_record_file_name;
use crate::record::{self, Decoded};
use leasehold_core::{Error, Result};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Instant;

const EPOCH_FILE: &str = ".leasehold-epoch";
const EPOCH_TMP: &str = ".leasehold-epoch.tmp";
/// Serializes epoch updates; never replaced, so its `flock` is reliable (unlike the epoch file's,
/// which `rename` swaps out).
const EPOCH_LOCK: &str = ".leasehold-epoch.lock";
const HEADER: &str = "leasehold-epoch v1";

/// The lowest fence of an epoch's boot is one above this.
pub(crate) fn fence_floor(epoch: u64) -> u64 {
    epoch.saturating_mul(1 << 32)
}

/// This boot's epoch in `dir`, starting a new one if the directory last saw another boot.
pub(crate) fn current(dir: &Path, boot_id: &str, give_up: Instant) -> Result<u64> {
    let lock_path = dir.join(EPOCH_LOCK);
    let _lock = Locked::open(&lock_path, true, Mode::Exclusive, give_up)?
        .ok_or_else(|| Error::Internal("epoch lock file vanished".into()))?;
    let epoch = match read(dir) {
        Some((epoch, boot)) if boot == boot_id => return Ok(epoch),
        Some((epoch, _)) => epoch.saturating_add(1),
        // No (readable) epoch file: a new directory, or one whose epoch file was lost. Start above
        // every epoch a record remembers, so nothing an earlier boot wrote can look current.
        None => highest_record_epoch(dir)?.map_or(0, |e| e.saturating_add(1)),
    };
    write(dir, epoch, boot_id)?;
    Ok(epoch)
}

fn read(dir: &Path) -> Option<(u64, String)> {
    let text = std::fs::read_to_string(dir.join(EPOCH_FILE)).ok()?;
    let mut lines = text.lines();
    if lines.next()? != HEADER {
        return None;
    }
    let epoch = lines.next()?.strip_prefix("epoch=")?.parse().ok()?;
    let boot = lines.next()?.strip_prefix("boot=")?.to_owned();
    Some((epoch, boot))
}

fn write(dir: &Path, epoch: u64, boot_id: &str) -> Result<()> {
    let tmp = dir.join(EPOCH_TMP);
    let target = dir.join(EPOCH_FILE);
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(&tmp)?;
        f.write_all(format!("{HEADER}\nepoch={epoch}\nboot={boot_id}\n").as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, &target)?;
        File::open(dir)?.sync_all()
    })();
    result.map_err(|e| io_error("cannot write the epoch file", &target, &e))
}

fn highest_record_epoch(dir: &Path) -> Result<Option<u64>> {
    let entries = std::fs::read_dir(dir).map_err(|e| io_error("cannot list", dir, &e))?;
    let mut highest = None;
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_str().is_some_and(is_record_file_name) {
            continue;
        }
        let Ok(bytes) = std::fs::read(entry.path()) else {
            continue;
        };
        if let Decoded::Valid(r) = record::decode(&bytes) {
            highest = highest.max(Some(r.epoch));
        }
    }
    Ok(highest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epochs_follow_boots() {
        let dir = leasehold_testkit::TempDir::new("epoch");
        let later = Instant::now() + std::time::Duration::from_secs(5);
        assert_eq!(current(dir.path(), "boot-a", later).unwrap(), 0);
        assert_eq!(current(dir.path(), "boot-a", later).unwrap(), 0);
        assert_eq!(current(dir.path(), "boot-b", later).unwrap(), 1);
        assert_eq!(current(dir.path(), "boot-b", later).unwrap(), 1);
        std::fs::write(dir.path().join(EPOCH_FILE), "garbage").unwrap();
        assert_eq!(
            current(dir.path(), "boot-b", later).unwrap(),
            0,
            "no records to remember"
        );
        assert_eq!(fence_floor(0), 0);
        assert_eq!(fence_floor(2), 2 << 32);
        assert_eq!(fence_floor(u64::MAX), u64::MAX);
    }
}
