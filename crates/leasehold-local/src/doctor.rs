//! `leasehold doctor` for local files: what decides the promises is where the directory lives. A
//! file system local to this host is shared only by its processes, whose leases live in files and
//! end with the host; one that other hosts may write (NFS, SMB, FUSE) breaks exclusion, since boot
//! ids, `CLOCK_BOOTTIME` and inotify are per host.

use crate::dir::{file_system_name, Dir};
use leasehold_core::doctor::{Diagnosis, Promise, Verdict, OTHER_VERSIONS};

pub(crate) fn diagnose(dir: &Dir) -> Diagnosis {
    let mut d = Diagnosis::new();
    d.fact("dir", dir.path().display());
    d.fact(
        OTHER_VERSIONS,
        "not told apart: 0.3 uses the directory's files as they are",
    );
    d.fact("single_host", dir.single_host());
    let file_system = dir.file_system().map(file_system_name);
    match &file_system {
        Some((name, local)) => {
            d.fact("file_system", name);
            let (verdict, because) = match (local, dir.single_host()) {
                (true, _) => (
                    Verdict::Holds,
                    format!("{name} is local to this host: only its processes share the directory"),
                ),
                (false, true) => (
                    Verdict::HoldsIf,
                    format!(
                        "{name} with single_host=true: holds only if no other host ever writes \
                         the directory"
                    ),
                ),
                (false, false) => (
                    Verdict::DoesNotHold,
                    format!(
                        "{name} is not known to be local: processes of two hosts could hold one \
                         key (connect refuses it unless the URL says single_host=true)"
                    ),
                ),
            };
            d.judge(Promise::Exclusion, verdict, because);
        }
        None => {
            d.fact("file_system", "unknown (statfs failed)");
            d.judge(
                Promise::Exclusion,
                Verdict::HoldsIf,
                "the directory's file system is unknown: holds only if no other host writes it",
            );
        }
    }
    let tmpfs = file_system
        .as_ref()
        .is_some_and(|(n, _)| n == "tmpfs" || n == "ramfs");
    d.judge(
        Promise::FenceOrder,
        Verdict::Holds,
        if tmpfs {
            "fences from this host's clock and the directory's high-water mark (a tmpfs loses the \
             mark at reboot; the clock then carries fences past it)"
        } else {
            "fences from this host's clock and the directory's high-water mark"
        },
    );
    d.judge(
        Promise::BoundedCalls,
        Verdict::Holds,
        "local files: no network round trip to wait for",
    );
    d.judge(
        Promise::SurvivesRestart,
        Verdict::Holds,
        if tmpfs {
            "leases are files on this host: a process that restarts finds them; a reboot empties \
             the tmpfs and ends every holder with it"
        } else {
            "leases are files on this host: a process that restarts finds them; a reboot ends \
             every holder with it"
        },
    );
    d.judge(
        Promise::SurvivesFailover,
        Verdict::Holds,
        "one host: nothing to fail over to",
    );
    d.judge(
        Promise::SessionEndSeen,
        Verdict::Holds,
        "leases live in files, not in sessions",
    );
    d
}
