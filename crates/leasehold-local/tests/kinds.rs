//! Shared locks and semaphores across real OS processes, and the local backend's own limits.
//! Workers are this test binary run again (see `child_worker`); they count what they see in
//! counters every process maps, and report on stdout.

mod common;
#[path = "../../../tests/support/kinds_in_processes.rs"]
mod procs;

use common::{temp_dir, FileUrl};
use leasehold_core::{Client, Config, ErrorKind, MAX_PERMITS};
use leasehold_local::{LocalBackend, MAX_HOLDERS};
use leasehold_testkit::processes::{self, Worker};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(30);

fn client(url: &str) -> Client {
    Client::new(LocalBackend::open(&Config::parse(url).expect("url")).expect("open"))
}

/// Not a test of its own: the body of every worker process. Outside a worker it does nothing.
#[test]
fn child_worker() {
    if let Some(mode) = processes::worker_mode() {
        procs::worker(&mode, &client(&processes::worker_url()));
    }
}

#[test]
fn eight_processes_on_a_semaphore_of_3_never_see_a_4th_holder() {
    let dir = temp_dir("kinds-semaphore");
    procs::semaphore_in_processes(&dir.file_url(), client, 8, 200, Duration::from_micros(200));
}

#[test]
fn readers_and_writers_in_processes_never_overlap_a_writer() {
    let dir = temp_dir("kinds-rw");
    procs::readers_and_writers(&dir.file_url(), 60, 150);
}

#[test]
fn a_writer_gets_in_under_a_continuous_stream_of_readers() {
    let dir = temp_dir("kinds-stream");
    procs::writer_under_reader_stream(&dir.file_url(), client);
}

/// A SIGKILLed process's permit still counts until its TTL runs out (the backend cannot tell a
/// dead holder from a slow one), then comes back; the other permit is untouched.
#[test]
fn a_killed_permit_holders_permit_comes_back_after_its_ttl() {
    let dir = temp_dir("kinds-kill");
    let url = dir.file_url();
    let mut worker = Worker::spawn(
        "hold-permit",
        &url,
        &[
            ("KEY", "sem:kill".to_owned()),
            ("PERMITS", "2".to_owned()),
            ("TTL_MS", "600".to_owned()),
        ],
    );
    let child_fence: u64 = worker.report().parse().unwrap();
    let taken = Instant::now();
    let c = client(&url);
    let mine = c.try_acquire_permit("sem:kill", 2, LONG).unwrap();
    assert!(mine.fence() > child_fence);
    worker.kill(); // SIGKILL: it releases nothing
    assert_eq!(
        c.try_acquire_permit("sem:kill", 2, LONG)
            .unwrap_err()
            .kind(),
        ErrorKind::NotAcquired,
        "the dead holder's permit counts until its TTL"
    );
    let back = c
        .acquire_permit("sem:kill", 2, LONG, Duration::from_secs(5))
        .expect("the permit comes back");
    let after = taken.elapsed();
    assert!(
        after >= Duration::from_millis(450) && after < Duration::from_millis(2500),
        "came back after {after:?} (TTL 600 ms)"
    );
    assert!(back.fence() > mine.fence());
    let info = c.inspect_semaphore("sem:kill").unwrap();
    assert_eq!(info.holders, Some(2));
    back.release().unwrap();
    mine.release().unwrap();
}

/// `inspect` and `inspect_semaphore` count holders; the namespaces stay apart.
#[test]
fn inspect_counts_holders_of_each_kind() {
    let dir = temp_dir("kinds-inspect");
    let c = client(&dir.file_url());
    let free = c.inspect("ins").unwrap();
    assert!(!free.held && free.holders == Some(0));
    let r1 = c.try_acquire_shared("ins", LONG).unwrap();
    let r2 = c.try_acquire_shared("ins", LONG).unwrap();
    let info = c.inspect("ins").unwrap();
    assert!(info.held);
    assert_eq!((info.holders, info.shared), (Some(2), Some(true)));
    assert_eq!(info.fence, Some(r2.fence()));
    assert!(
        !c.inspect_semaphore("ins").unwrap().held,
        "another namespace"
    );
    r1.release().unwrap();
    r2.release().unwrap();
    let w = c.try_acquire("ins", LONG).unwrap();
    let info = c.inspect("ins").unwrap();
    assert_eq!((info.holders, info.shared), (Some(1), Some(false)));
    let p: Vec<_> = (0..2)
        .map(|_| c.try_acquire_permit("ins", 5, LONG).unwrap())
        .collect();
    let info = c.inspect_semaphore("ins").unwrap();
    assert!(info.held);
    assert_eq!((info.holders, info.shared), (Some(2), Some(false)));
    assert!(info.remaining.unwrap() > Duration::from_secs(20));
    w.release().unwrap();
    for p in p {
        p.release().unwrap();
    }
    assert_eq!(c.inspect_semaphore("ins").unwrap().holders, Some(0));
}

/// Restore picks up a shared lease as shared, with its own fence; force-release frees every
/// reader.
#[test]
fn restore_and_force_release_of_shared_leases() {
    let dir = temp_dir("kinds-restore");
    let (a, b) = (client(&dir.file_url()), client(&dir.file_url()));
    let r1 = a.try_acquire_shared("rs", LONG).unwrap();
    let r2 = a.try_acquire_shared("rs", LONG).unwrap();
    let restored = b.restore("rs", r1.token().as_str()).unwrap();
    assert_eq!(restored.kind(), leasehold_core::LeaseKind::Shared);
    assert_eq!(
        restored.fence(),
        r1.fence(),
        "its own fence, not the key's last"
    );
    assert!(restored.fence() < r2.fence());
    restored.release().unwrap();
    assert_eq!(r1.release().unwrap_err().kind(), ErrorKind::Lost);
    let r3 = a.try_acquire_shared("rs", LONG).unwrap();
    let r3_fence = r3.fence();
    assert!(b.force_release("rs").unwrap());
    assert_eq!(b.inspect("rs").unwrap().holders, Some(0));
    assert_eq!(r2.release().unwrap_err().kind(), ErrorKind::Lost);
    assert_eq!(r3.release().unwrap_err().kind(), ErrorKind::Lost);
    let w = b.try_acquire("rs", LONG).unwrap();
    assert!(w.fence() > r3_fence, "fences keep rising");
    w.release().unwrap();
    // A permit is not restorable here: its token names no lock.
    let p = a.try_acquire_permit("rs-sem", 2, LONG).unwrap();
    assert_eq!(
        b.restore("rs-sem", p.token().as_str()).unwrap_err().kind(),
        ErrorKind::Lost
    );
    p.release().unwrap();
}

/// A record keeps at most MAX_HOLDERS leases: a semaphore of more permits (up to the API's
/// 65535) works up to that many holders, and the next request is refused with an error naming the
/// limit, never granted beyond what the record can keep.
#[test]
fn a_key_keeps_at_most_max_holders_leases() {
    let dir = temp_dir("kinds-limit");
    let c = client(&dir.file_url());
    let mut held: Vec<_> = (0..MAX_HOLDERS)
        .map(|_| c.try_acquire_permit("big", MAX_PERMITS, LONG).unwrap())
        .collect();
    for err in [
        c.try_acquire_permit("big", MAX_PERMITS, LONG).unwrap_err(),
        c.acquire_permit("big", MAX_PERMITS, LONG, Duration::from_millis(50))
            .unwrap_err(),
    ] {
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
        assert!(err.to_string().contains("at most 64"), "{err}");
    }
    held.pop().unwrap().release().unwrap();
    held.push(c.try_acquire_permit("big", MAX_PERMITS, LONG).unwrap());
    // A semaphore of 64 (its own key: one size per semaphore) is simply full.
    held.extend((0..MAX_HOLDERS).map(|_| {
        c.try_acquire_permit("full", MAX_HOLDERS as u32, LONG)
            .unwrap()
    }));
    assert_eq!(
        c.try_acquire_permit("full", MAX_HOLDERS as u32, LONG)
            .unwrap_err()
            .kind(),
        ErrorKind::NotAcquired,
        "a semaphore of 64 is simply full"
    );
    let readers: Vec<_> = (0..MAX_HOLDERS)
        .map(|_| c.try_acquire_shared("many", LONG).unwrap())
        .collect();
    let err = c.try_acquire_shared("many", LONG).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(err.to_string().contains("at most 64"), "{err}");
    for l in held.into_iter().chain(readers) {
        l.release().unwrap();
    }
}

/// Promote and demote flip the holder's one entry in the record: inspect and restore see the new
/// kind (and the promote's new fence), a release of either kind frees the key, and a release by a
/// handle that missed the flip (an outcome the caller never learnt) still leaves no entry behind.
#[test]
fn promote_and_demote_rewrite_the_one_entry() {
    use leasehold_core::{Key, LeaseKind, LockBackend, Request, Ttl};
    let dir = temp_dir("kinds-promote");
    let (a, b) = (client(&dir.file_url()), client(&dir.file_url()));
    let mut r = a.try_acquire_shared("pd", LONG).unwrap();
    let shared_fence = r.fence();
    r.promote(Duration::ZERO).unwrap();
    let info = b.inspect("pd").unwrap();
    assert_eq!((info.holders, info.shared), (Some(1), Some(false)));
    assert_eq!(info.fence, Some(r.fence()));
    let restored = b.restore("pd", r.token().as_str()).unwrap();
    assert_eq!(restored.kind(), LeaseKind::Exclusive);
    assert_eq!(restored.fence(), r.fence());
    assert!(r.fence() > shared_fence);
    restored.forget();
    r.demote().unwrap();
    let info = b.inspect("pd").unwrap();
    assert_eq!((info.holders, info.shared), (Some(1), Some(true)));
    let reader = b.try_acquire_shared("pd", LONG).unwrap();
    assert_eq!(b.inspect("pd").unwrap().holders, Some(2));
    r.release().unwrap();
    reader.release().unwrap();
    assert_eq!(b.inspect("pd").unwrap().holders, Some(0));
    b.try_acquire("pd", LONG).unwrap().release().unwrap();

    // At the backend: a second handle of the same token still says shared after the promote.
    let backend = LocalBackend::open(&Config::parse(&dir.file_url()).unwrap()).unwrap();
    let (key, ttl) = (Key::new("pd-raw").unwrap(), Ttl::new(LONG).unwrap());
    let mut promoted = backend
        .try_acquire(&Request::from_parts(key.clone(), LeaseKind::Shared, ttl))
        .unwrap();
    let mut stale = backend.restore(&key, promoted.token()).unwrap();
    backend.try_promote(&mut promoted, ttl).unwrap();
    assert_eq!(promoted.kind(), LeaseKind::Exclusive);
    assert_eq!(
        backend.extend(&mut stale, ttl).unwrap_err().kind(),
        ErrorKind::InvalidArgument,
        "no renewal under the wrong kind"
    );
    assert_eq!(
        backend.demote(&mut stale, ttl).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    backend.release(&mut stale).unwrap();
    assert_eq!(
        backend.inspect(&key, LeaseKind::Exclusive).unwrap().holders,
        Some(0)
    );
    assert_eq!(
        backend.release(&mut promoted).unwrap_err().kind(),
        ErrorKind::Lost
    );
    assert_eq!(
        backend.demote(&mut promoted, ttl).unwrap_err().kind(),
        ErrorKind::Lost
    );
}
