//! The lock directory: created private, checked, and held open.
//!
//! Whoever can write the directory can take or free any key in it, so an existing directory is
//! used only if it belongs to this process's effective user and is not writable by group or others
//! (another local user could otherwise pre-create it, for example in a world-writable `/tmp`). It
//! is opened once, and every record is reached relative to that descriptor (`openat`), so renaming
//! or replacing the path later cannot redirect us to a directory that was never checked. It must
//! be on a file system known to be local ([`LOCAL_FILE_SYSTEMS`]), unless the URL vouches for it
//! with `single_host=true`: records tell boots apart by the kernel's boot id, which only means
//! "an earlier boot" when every writer runs on this host.

use crate::io_error::io_error;
use leasehold_core::{Error, Result};
use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// File systems known to be local to this host: the kernel's own block-device and memory file
/// systems, which no other host writes while this one has them mounted. Only these are accepted
/// without `single_host=true`: records tell boots apart by this host's boot id, deadlines are on
/// its `CLOCK_BOOTTIME`, and waiters are woken by inotify, which sees only this host's changes, so
/// two hosts sharing a directory could both hold one key. An allowlist rather than a list of network
/// file systems, because the shared ones are too many to name: every FUSE file system (sshfs, s3fs,
/// GlusterFS, JuiceFS, ceph-fuse, virtiofs) reports one magic number, and new cluster and
/// shared-folder file systems keep appearing. Magic numbers from linux/magic.h, OpenZFS, bcachefs
/// and JFS.
const LOCAL_FILE_SYSTEMS: &[(u64, &str)] = &[
    (0xef53, "ext2/ext3/ext4"),
    (0x5846_5342, "xfs"),
    (0x9123_683e, "btrfs"),
    (0xca45_1a4e, "bcachefs"),
    (0x2fc1_2fc1, "zfs"),
    (0xf2f5_2010, "f2fs"),
    (0x3153_464a, "jfs"),
    (0x5265_4973, "reiserfs"),
    (0x3434, "nilfs2"),
    (0x0102_1994, "tmpfs"),
    (0x8584_58f6, "ramfs"),
    // A container's root: its upper layer, where records are written, cannot be a network file
    // system.
    (0x794c_7630, "overlayfs"),
    (0x4d44, "vfat"),
    (0x2011_bab0, "exfat"),
];

/// Names of file systems that are refused (and what they are, where the name does not say), so the
/// error can say what the directory is on.
const OTHER_FILE_SYSTEMS: &[(u64, &str, &str)] = &[
    (
        0x6573_5546,
        "fuse",
        "sshfs, s3fs, GlusterFS, JuiceFS, ceph-fuse, virtiofs, ntfs-3g, …",
    ),
    (0x6969, "nfs", ""),
    (0x517b, "smb", ""),
    (0xff53_4d42, "cifs", ""),
    (0xfe53_4d42, "smb2", ""),
    (0x0102_1997, "9p", ""),
    (0x00c3_6400, "ceph", ""),
    (0x5346_414f, "afs", ""),
    (0x6b41_4653, "afs", ""),
    (0x7375_7245, "coda", ""),
    (0x0bd0_0bd0, "lustre", ""),
    (0x0116_1970, "gfs2", ""),
    (0x7461_636f, "ocfs2", ""),
    (0x4750_4653, "gpfs", ""),
    (0x1983_0326, "beegfs", ""),
    (0x2003_0528, "orangefs", ""),
    (0xaad7_aaea, "panfs", ""),
    (0x6163_6673, "acfs", ""),
    (0xbeef_dead, "stornext", ""),
    (0x0131_11a8, "ibrix", ""),
    (0x786f_4256, "vboxsf", "a VirtualBox shared folder"),
    (0xbacb_acbc, "vmhgfs", "a VMware shared folder"),
    (0x7c7c_6673, "prl_fs", "a Parallels shared folder"),
    (0x5346_4846, "wslfs", ""),
    (0x00c0_ffee, "hostfs", ""),
    (0xf15f, "ecryptfs", "stacked on another file system"),
    (0x6175_6673, "aufs", "stacked on other file systems"),
    (0x5346_544e, "ntfs", ""),
    (0x482b, "hfs+", ""),
];

/// Whether the lock directory `path` may be on a file system of type `magic` (`statfs`'s `f_type`):
/// one [known to be local](LOCAL_FILE_SYSTEMS), or any when the URL says `single_host=true`.
pub(crate) fn check_file_system(path: &Path, magic: u64, single_host: bool) -> Result<()> {
    if single_host || LOCAL_FILE_SYSTEMS.iter().any(|(m, _)| *m == magic) {
        return Ok(());
    }
    let path = path.display();
    let what = match OTHER_FILE_SYSTEMS.iter().find(|(m, _, _)| *m == magic) {
        Some((_, name, "")) => format!("a {name} file system (magic {magic:#x})"),
        Some((_, name, what)) => format!("a {name} file system (magic {magic:#x}: {what})"),
        None => format!("a file system of unknown type (magic {magic:#x})"),
    };
    let local: Vec<&str> = LOCAL_FILE_SYSTEMS.iter().map(|(_, name)| *name).collect();
    Err(Error::invalid(format!(
        "the lock directory {path} is on {what}, which Leasehold does not know to be local to \
         this host. The local backend needs a directory that only this host writes (boot ids, \
         CLOCK_BOOTTIME and inotify are per host): through a shared one, two hosts could hold \
         one key. Use a directory on a local file system ({}) or a network backend (redis://, \
         postgres://); or, if no other host ever writes this directory (ntfs-3g on a local disk, \
         fuse-overlayfs), vouch for it by adding `?single_host=true` to the file:// URL",
        local.join(", ")
    )))
}

/// The name of the file system of type `magic`, and whether it is [known to be
/// local](LOCAL_FILE_SYSTEMS).
pub(crate) fn file_system_name(magic: u64) -> (String, bool) {
    if let Some((_, name)) = LOCAL_FILE_SYSTEMS.iter().find(|(m, _)| *m == magic) {
        return ((*name).to_owned(), true);
    }
    let name = match OTHER_FILE_SYSTEMS.iter().find(|(m, _, _)| *m == magic) {
        Some((_, name, "")) => (*name).to_owned(),
        Some((_, name, what)) => format!("{name} ({what})"),
        None => format!("unknown (magic {magic:#x})"),
    };
    (name, false)
}

#[derive(Debug)]
pub(crate) struct Dir {
    path: PathBuf,
    fd: OwnedFd,
    /// The URL vouches that no other host writes the directory (`single_host=true`).
    single_host: bool,
}

impl Dir {
    /// Creates `path` (mode 0700, parents too) if it is missing, opens it and checks it is safe.
    /// `single_host`: the user vouches that no other host writes it, whatever its file system.
    pub(crate) fn open(path: &Path, single_host: bool) -> Result<Dir> {
        create(path)?;
        let c_path = c_string(path)?;
        // SAFETY: `c_path` is NUL-terminated and lives for the call.
        let fd = unsafe {
            libc::open(
                c_path.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            let err = std::io::Error::last_os_error();
            return Err(io_error("cannot open the lock directory", path, &err));
        }
        // SAFETY: `fd` was just returned by open and is owned by nobody else.
        let dir = Dir {
            path: path.to_owned(),
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            single_host,
        };
        dir.check()?;
        Ok(dir)
    }

    fn check(&self) -> Result<()> {
        let path = self.path.display();
        let st = fstat(self.fd.as_raw_fd())
            .map_err(|e| io_error("cannot stat the lock directory", &self.path, &e))?;
        // SAFETY: geteuid cannot fail.
        let me = unsafe { libc::geteuid() };
        if st.st_uid != me {
            return Err(Error::invalid(format!(
                "the lock directory {path} belongs to uid {}, not to this process's uid {me}; another \
                 user could take or free every lock in it. Use a directory of your own (or, if it \
                 is yours, `chown {me} {path}`)",
                st.st_uid
            )));
        }
        let mode = st.st_mode & 0o7777;
        if mode & 0o022 != 0 {
            return Err(Error::invalid(format!(
                "the lock directory {path} is writable by {} (mode {mode:04o}); anyone who can \
                 write it can take or free every lock in it. Fix it with `chmod go-w {path}` (0700 \
                 is what Leasehold creates)",
                if mode & 0o002 != 0 {
                    "others"
                } else {
                    "its group"
                }
            )));
        }
        let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: `fs` is a valid, writable statfs for the call; the descriptor is open.
        if unsafe { libc::fstatfs(self.fd.as_raw_fd(), &mut fs) } != 0 {
            if self.single_host {
                return Ok(());
            }
            let err = std::io::Error::last_os_error();
            return Err(io_error(
                "cannot tell which file system holds the lock directory (add `?single_host=true` \
                 to the file:// URL if no other host writes it)",
                &self.path,
                &err,
            ));
        }
        // f_type is a signed word whose width differs between targets; magic numbers are 32 bits.
        let kind = (fs.f_type as u64) & 0xffff_ffff;
        check_file_system(&self.path, kind, self.single_host)
    }

    /// The type of the directory's file system (`statfs`'s `f_type`), if the kernel says.
    pub(crate) fn file_system(&self) -> Option<u64> {
        let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: `fs` is a valid, writable statfs for the call; the descriptor is open.
        if unsafe { libc::fstatfs(self.fd.as_raw_fd(), &mut fs) } != 0 {
            return None;
        }
        Some((fs.f_type as u64) & 0xffff_ffff)
    }

    /// Whether the URL vouches that no other host writes the directory.
    pub(crate) fn single_host(&self) -> bool {
        self.single_host
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The full path of an entry, for messages and inotify.
    pub(crate) fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Opens the entry `name` with `open(2)` flags `flags` (plus `O_CLOEXEC | O_NOFOLLOW`).
    pub(crate) fn open_at(&self, name: &str, flags: libc::c_int) -> std::io::Result<File> {
        let c_name = CString::new(name).map_err(|_| std::io::ErrorKind::InvalidInput)?;
        // SAFETY: `c_name` is NUL-terminated and lives for the call; the directory is open.
        let fd = unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                c_name.as_ptr(),
                flags | libc::O_CLOEXEC | libc::O_NOFOLLOW,
                FILE_MODE,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by openat and is owned by nobody else.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    /// Device and inode of the entry `name` now, without following a symbolic link.
    pub(crate) fn identity_of(&self, name: &str) -> std::io::Result<(u64, u64)> {
        let c_name = CString::new(name).map_err(|_| std::io::ErrorKind::InvalidInput)?;
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointers for the call; the directory is open.
        let rc = unsafe {
            libc::fstatat(
                self.fd.as_raw_fd(),
                c_name.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok((st.st_dev as u64, st.st_ino as u64))
    }

    /// The subdirectory `name`, reached relative to this directory's descriptor (never through a
    /// symbolic link) and checked like it: ours, private, on a file system we may use. With
    /// `create` it is created (mode 0700) if missing, and made durable in this one; without,
    /// `None` when it is missing.
    pub(crate) fn subdir(&self, name: &str, create: bool) -> Result<Option<Dir>> {
        let path = self.join(name);
        let c_name = CString::new(name)
            .map_err(|_| Error::invalid(format!("{} contains a NUL byte", path.display())))?;
        if create {
            // SAFETY: `c_name` is NUL-terminated and lives for the call; the directory is open.
            if unsafe { libc::mkdirat(self.fd.as_raw_fd(), c_name.as_ptr(), 0o700) } == 0 {
                // SAFETY: a plain syscall on a descriptor we own. Best effort: without it a power
                // loss may lose the new directory, as it may lose anything not yet written back.
                unsafe {
                    libc::fsync(self.fd.as_raw_fd());
                }
            } else {
                let err = std::io::Error::last_os_error();
                if err.kind() != std::io::ErrorKind::AlreadyExists {
                    return Err(io_error("cannot create the directory", &path, &err));
                }
            }
        }
        // SAFETY: `c_name` is NUL-terminated and lives for the call; the directory is open.
        let fd = unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                c_name.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            let err = std::io::Error::last_os_error();
            if !create && err.kind() == std::io::ErrorKind::NotFound {
                return Ok(None);
            }
            return Err(io_error("cannot open the directory", &path, &err));
        }
        // SAFETY: `fd` was just returned by openat and is owned by nobody else.
        let dir = Dir {
            path,
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            single_host: self.single_host,
        };
        dir.check()?;
        Ok(Some(dir))
    }

    /// Flushes the directory's entries to stable storage (`fsync`), so a file created in it
    /// survives a power loss.
    pub(crate) fn sync(&self) -> std::io::Result<()> {
        // SAFETY: a plain syscall on a descriptor we own.
        if unsafe { libc::fsync(self.fd.as_raw_fd()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    pub(crate) fn unlink(&self, name: &str) -> std::io::Result<()> {
        let c_name = CString::new(name).map_err(|_| std::io::ErrorKind::InvalidInput)?;
        // SAFETY: `c_name` is NUL-terminated and lives for the call; the directory is open.
        if unsafe { libc::unlinkat(self.fd.as_raw_fd(), c_name.as_ptr(), 0) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Files are private to the user: the directory already is, and nobody else may write a record.
const FILE_MODE: libc::c_uint = 0o600;

/// Device and inode of an open file.
pub(crate) fn identity(file: &File) -> std::io::Result<(u64, u64)> {
    let st = fstat(file.as_raw_fd())?;
    Ok((st.st_dev as u64, st.st_ino as u64))
}

fn fstat(fd: libc::c_int) -> std::io::Result<libc::stat> {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is valid and writable for the call.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st)
}

fn c_string(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        Error::invalid(format!(
            "the lock directory {} contains a NUL byte",
            path.display()
        ))
    })
}

fn create(dir: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) if dir.is_dir() => Ok(()),
        Ok(()) => Err(Error::Unavailable(format!(
            "{} is not a directory",
            dir.display()
        ))),
        Err(e) => Err(io_error("cannot create the lock directory", dir, &e)),
    }
}

/// Where `file://` locks go when no URL is given: the first of `/run/lock/leasehold-<uid>` (when
/// `/run/lock` exists and this user may create entries there), `$XDG_RUNTIME_DIR/leasehold`, and
/// `<temp dir>/leasehold-<uid>`.
///
/// Why: a tmp cleaner that deletes a held key's record lets a second process take the key, so the
/// default must be a directory no cleaner ages. systemd-tmpfiles deletes files in `/tmp` after 10
/// days and in `/var/tmp` after 30 without use; `/run/lock` is the tmpfs meant for lock files and is
/// not aged, and it empties at reboot, when every lease is over anyway. `$XDG_RUNTIME_DIR` (a
/// per-user tmpfs) is next; it is not aged by systemd either, but is removed when the user's last
/// session ends, so it suits interactive use. The temp directory is the last resort. The uid in the
/// name keeps users apart (the backend refuses a directory another user owns). Limits: tmpfs space
/// is counted in pages, so each key held or waited for at once takes 4 KiB (Debian's `/run/lock` is
/// 5 MiB: about 1,200 keys at once); released keys leave nothing behind.
pub fn default_dir() -> PathBuf {
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    let run_lock = Path::new("/run/lock");
    if writable_dir(run_lock) {
        return run_lock.join(format!("leasehold-{uid}"));
    }
    if let Some(runtime) = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        if runtime.is_absolute() && writable_dir(&runtime) {
            return runtime.join("leasehold");
        }
    }
    std::env::temp_dir().join(format!("leasehold-{uid}"))
}

fn writable_dir(path: &Path) -> bool {
    let Ok(c_path) = c_string(path) else {
        return false;
    };
    // SAFETY: `c_path` is NUL-terminated and lives for the call.
    path.is_dir() && unsafe { libc::access(c_path.as_ptr(), libc::W_OK | libc::X_OK) } == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    const FUSE: u64 = 0x6573_5546;
    const TMPFS: u64 = 0x0102_1994;
    const EXT4: u64 = 0xef53;

    fn refusal(magic: u64) -> String {
        let err = check_file_system(Path::new("/shared/locks"), magic, false)
            .expect_err(&format!("{magic:#x} accepted"));
        assert_eq!(err.kind(), leasehold_core::ErrorKind::InvalidArgument);
        err.to_string()
    }

    #[test]
    fn a_fuse_directory_is_refused_by_name_and_magic() {
        // sshfs, s3fs, GlusterFS, JuiceFS, CephFS through ceph-fuse, virtiofs shares: all FUSE,
        // all reachable from other hosts. The first version only refused twelve named network file
        // systems, and accepted these.
        let msg = refusal(FUSE);
        assert!(msg.contains("0x65735546"), "{msg}");
        assert!(msg.contains("fuse"), "{msg}");
        assert!(msg.contains("single_host=true"), "says how to vouch: {msg}");
        assert!(msg.contains("/shared/locks"), "{msg}");
    }

    #[test]
    fn shared_and_unknown_file_systems_are_refused() {
        for (magic, name) in [
            (0x4750_4653, "gpfs"),
            (0x1983_0326, "beegfs"),
            (0x786f_4256, "vboxsf"),
            (0xbacb_acbc, "vmhgfs"),
            (0x7c7c_6673, "prl_fs"),
            (0x2003_0528, "orangefs"),
            (0x6969, "nfs"),
            (0xff53_4d42, "cifs"),
        ] {
            let msg = refusal(magic);
            assert!(msg.contains(name), "{magic:#x}: {msg}");
            assert!(msg.contains(&format!("{magic:#x}")), "{msg}");
        }
        // A type nobody listed is refused too, by its magic number.
        let msg = refusal(0x1234_5678);
        assert!(msg.contains("0x12345678"), "{msg}");
    }

    #[test]
    fn local_file_systems_are_accepted() {
        for magic in [
            EXT4,
            TMPFS,
            0x5846_5342, // xfs
            0x9123_683e, // btrfs
            0x2fc1_2fc1, // zfs
            0xf2f5_2010, // f2fs
            0x5265_4973, // reiserfs
            0x3153_464a, // jfs
            0x794c_7630, // overlayfs
            0x8584_58f6, // ramfs
        ] {
            check_file_system(Path::new("/var/lock/app"), magic, false)
                .unwrap_or_else(|e| panic!("{magic:#x} refused: {e}"));
        }
    }

    #[test]
    fn single_host_vouches_for_any_file_system() {
        for magic in [FUSE, 0x1234_5678, 0x6969] {
            check_file_system(Path::new("/mnt/ntfs/locks"), magic, true)
                .unwrap_or_else(|e| panic!("{magic:#x} refused though vouched for: {e}"));
        }
    }
}
