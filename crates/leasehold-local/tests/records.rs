//! The record files: fences, file names, corruption, reboots, the directory, and queue order.

mod common;

use common::{temp_dir, FileUrl};
use leasehold_core::{Client, Config, ErrorKind, MAX_KEY_LEN};
use leasehold_local::LocalBackend;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(30);

fn client(url: &str) -> Client {
    Client::new(LocalBackend::open(&Config::parse(url).expect("url")).expect("open"))
}

fn record_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("k-"))
        .collect();
    files.sort();
    files
}

/// How many waiters the only record file in `dir` has queued, read from its newest slot (layout in
/// `src/record.rs`).
fn queued(dir: &Path) -> usize {
    let Some(file) = record_files(dir).pop() else {
        return 0;
    };
    let bytes = std::fs::read(file).unwrap_or_default();
    let slot = |at: usize| -> Option<(u64, u16)> {
        let s = bytes.get(at..at + 64)?;
        (s[..4] == *b"LHL3").then(|| {
            (
                u64::from_le_bytes(s[16..24].try_into().unwrap()),
                u16::from_le_bytes(s[58..60].try_into().unwrap()),
            )
        })
    };
    [slot(0), slot(4096)]
        .into_iter()
        .flatten()
        .max()
        .map_or(0, |(_, n)| n as usize)
}

#[test]
fn fence_strictly_increases_over_1000_acquisitions() {
    let dir = temp_dir("local-fence");
    let (a, b) = (client(&dir.file_url()), client(&dir.file_url()));
    let mut last = 0;
    for i in 0..1000 {
        let c = if i % 2 == 0 { &a } else { &b };
        let lease = c.try_acquire("fence:1000", LONG).unwrap();
        assert!(lease.fence() > last, "fence {} after {last}", lease.fence());
        last = lease.fence();
        lease.release().unwrap();
    }
    // Idle, the record goes at the next sweep; its fence lives on in the directory's high-water
    // mark.
    let sweeper = LocalBackend::open(&Config::parse(&dir.file_url()).unwrap()).unwrap();
    assert_eq!(sweeper.sweep().unwrap(), 1);
    assert!(record_files(dir.path()).is_empty());
    let next = a.try_acquire("fence:1000", LONG).unwrap();
    assert!(next.fence() > last, "fence {} after {last}", next.fence());
    assert_eq!(a.inspect("fence:1000").unwrap().fence, Some(next.fence()));
}

#[test]
fn odd_keys_map_to_safe_distinct_file_names() {
    let dir = temp_dir("local-names");
    let c = client(&dir.file_url());
    let mut long_a = vec![b'a'; MAX_KEY_LEN];
    let long_b = {
        let mut k = long_a.clone();
        k[MAX_KEY_LEN - 1] = b'b';
        k
    };
    long_a[0] = b'/';
    let keys: Vec<Vec<u8>> = vec![
        b"\0".to_vec(),
        b"\0\0".to_vec(),
        b"/".to_vec(),
        b"..".to_vec(),
        b".".to_vec(),
        b"../../../../tmp/escape".to_vec(),
        b"\xff\xfe\x80 not utf-8".to_vec(),
        b"*?[]{}'\"%_\\\n\t ".to_vec(),
        vec![b'/'; MAX_KEY_LEN],
        vec![b'.'; MAX_KEY_LEN],
        long_a,
        long_b,
        "ключ".as_bytes().to_vec(),
    ];
    let held: Vec<_> = keys
        .iter()
        .map(|k| c.try_acquire(k, LONG).expect("distinct keys never contend"))
        .collect();
    let files = record_files(dir.path());
    assert_eq!(
        files.len(),
        keys.len(),
        "one file per key, all inside the directory: {files:?}"
    );
    for f in &files {
        assert_eq!(f.parent().unwrap(), dir.path());
        let name = f.file_name().unwrap().to_str().expect("ASCII name");
        assert!(name.len() <= 255 && name.is_ascii(), "{name}");
        assert!(
            !name.contains('/') && !name.contains('\0') && !name.starts_with('.'),
            "{name}"
        );
        assert!(
            name.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)),
            "{name}"
        );
    }
    for k in &keys {
        assert_eq!(
            c.try_acquire(k, LONG).unwrap_err().kind(),
            ErrorKind::NotAcquired
        );
    }
    drop(held);
}

#[test]
fn corrupt_records_never_panic_and_keep_the_fence_when_they_can() {
    let dir = temp_dir("local-corrupt");
    let c = client(&dir.file_url());
    let key = "corrupt:key";
    // Three writes (a grant and two extends) fill both slots; the holder then "dies".
    let mut lease = c.try_acquire(key, LONG).unwrap();
    lease.extend(LONG).unwrap();
    lease.extend(LONG).unwrap();
    let mut fence = lease.fence();
    lease.forget();
    let file = record_files(dir.path()).pop().unwrap();

    // A torn write: the newest slot is garbage, the previous one still holds the fence.
    let mut bytes = std::fs::read(&file).unwrap();
    let generation = |at: usize| -> u64 {
        match bytes.get(at..at + 24) {
            Some(s) if s[..4] == *b"LHL3" => u64::from_le_bytes(s[16..24].try_into().unwrap()),
            _ => 0,
        }
    };
    let newest_slot = if generation(4096) > generation(0) {
        4096
    } else {
        0
    };
    assert!(
        generation(0) > 0 && generation(4096) > 0,
        "both slots written"
    );
    for b in &mut bytes[newest_slot + 20..newest_slot + 60] {
        *b ^= 0xa5;
    }
    std::fs::write(&file, &bytes).unwrap();
    let lease = c
        .try_acquire(key, LONG)
        .expect("a torn record is readable, and damage counts as free");
    assert!(
        lease.fence() > fence,
        "fence went backwards: {} after {fence}",
        lease.fence()
    );
    fence = lease.fence();
    lease.release().unwrap();

    // Garbage everywhere, a truncated file, an empty file, a huge file: free, no panic.
    let garbage: Vec<u8> = (0..10_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    for content in [
        garbage.clone(),
        b"LH".to_vec(),
        Vec::new(),
        vec![0xff; 1 << 20],
    ] {
        std::fs::write(&file, &content).unwrap();
        let info = c.inspect(key).expect("inspect a corrupt record");
        assert!(!info.held);
        let lease = c
            .try_acquire(key, LONG)
            .expect("a corrupt record counts as free");
        assert!(lease.fence() >= 1);
        let info = c.inspect(key).unwrap();
        assert!(info.held && info.fence == Some(lease.fence()));
        lease.release().unwrap();
    }

    // The record goes bad under a held lease: release and extend say Lost, nothing panics.
    let mut lease = c.try_acquire(key, LONG).unwrap();
    std::fs::write(&file, &garbage).unwrap();
    assert_eq!(lease.extend(LONG).unwrap_err().kind(), ErrorKind::Lost);
    assert_eq!(lease.release().unwrap_err().kind(), ErrorKind::Lost);
    let _ = fence;
}

/// The FNV-1a 64 check of a record slot (layout in `src/record.rs`).
fn check(body: &[u8]) -> [u8; 8] {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in body {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash.to_le_bytes()
}

/// Rewrites every valid slot of a record file with `edit` and a fresh check.
fn edit_record(file: &Path, edit: impl Fn(&mut [u8])) {
    let mut bytes = std::fs::read(file).unwrap();
    for at in [0, 4096] {
        let Some(slot) = bytes.get_mut(at..at + 64) else {
            continue;
        };
        if slot[..4] != *b"LHL3" {
            continue;
        }
        let len = u32::from_le_bytes(slot[4..8].try_into().unwrap()) as usize;
        let slot = &mut bytes[at..at + len];
        edit(slot);
        let sum = check(&slot[16..]);
        slot[8..16].copy_from_slice(&sum);
    }
    std::fs::write(file, &bytes).unwrap();
}

#[test]
fn a_reboot_frees_every_lease_and_fences_keep_increasing() {
    let dir = temp_dir("local-reboot");
    let url = dir.file_url();
    let before = client(&url);
    let old = before
        .try_acquire("reboot:key", Duration::from_secs(3600))
        .unwrap();
    let old_fence = old.fence();
    old.forget(); // the holder "dies" with the machine

    // Pretend the record was written in another boot: its boot id (bytes 32..48) differs.
    let file = record_files(dir.path()).pop().unwrap();
    edit_record(&file, |slot| slot[32..48].copy_from_slice(&[0x42; 16]));

    let after = client(&url);
    assert!(
        !after.inspect("reboot:key").unwrap().held,
        "a record of an earlier boot holds nothing"
    );
    let lease = after
        .try_acquire("reboot:key", LONG)
        .expect("free after the reboot");
    assert!(lease.fence() > old_fence);
    lease.release().unwrap();
}

/// The fence is `max(stored + 1, wall clock µs)`, and a deleted record's fence is kept by the
/// directory's high-water mark: a fence far ahead of the clock survives the record's deletion.
#[test]
fn a_fence_ahead_of_the_clock_survives_the_record() {
    let dir = temp_dir("local-mark");
    let c = client(&dir.file_url());
    let key = "mark:key";
    c.try_acquire(key, Duration::from_millis(1))
        .unwrap()
        .forget();
    std::thread::sleep(Duration::from_millis(5));
    let ahead: u64 = 1 << 62; // far beyond any wall clock reading in µs
    let file = record_files(dir.path()).pop().unwrap();
    edit_record(&file, |slot| {
        slot[24..32].copy_from_slice(&ahead.to_le_bytes())
    });
    let lease = c.try_acquire(key, LONG).unwrap();
    assert_eq!(lease.fence(), ahead + 1, "stored + 1 beats the clock");
    lease.release().unwrap();
    assert!(
        record_files(dir.path()).is_empty(),
        "released: record deleted"
    );
    let lease = c.try_acquire(key, LONG).unwrap();
    assert_eq!(lease.fence(), ahead + 2, "the mark kept the deleted fence");
    lease.release().unwrap();
}

/// Records of the older formats 1 and 2 (and format 1's epoch files) are refused with a clear
/// error, never treated as free.
#[test]
fn older_record_formats_and_directories_are_refused() {
    let dir = temp_dir("local-format-1");
    let url = dir.file_url();
    let c = client(&url);
    let key = "old:key";
    c.try_acquire(key, LONG).unwrap().forget();
    let file = record_files(dir.path()).pop().unwrap();
    let mut bytes = std::fs::read(&file).unwrap();
    for at in [0, 4096] {
        if bytes.get(at..at + 4) == Some(b"LHL3") {
            bytes[at..at + 4].copy_from_slice(b"LHL1");
        }
    }
    std::fs::write(&file, &bytes).unwrap();
    let err = c.try_acquire(key, LONG).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(err.to_string().contains("format 1"), "{err}");
    assert_eq!(
        c.inspect(key).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );

    // Format 2 (one holder per record, slots of 2048 bytes; never released) is refused too.
    let mut v2 = vec![0u8; 4096];
    v2[2048..2052].copy_from_slice(b"LHL2");
    std::fs::write(&file, &v2).unwrap();
    let err = c.try_acquire_shared(key, LONG).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(err.to_string().contains("format 2"), "{err}");

    std::fs::write(dir.path().join(".leasehold-epoch"), "leasehold-epoch v1\n").unwrap();
    let err = LocalBackend::open(&Config::parse(&url).unwrap()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(err.to_string().contains(".leasehold-epoch"), "{err}");
}

#[test]
fn the_directory_is_created_private() {
    use std::os::unix::fs::PermissionsExt;
    let parent = temp_dir("local-mkdir");
    let dir = parent.path().join("nested/locks");
    let c = client(&format!("file://{}", dir.display()));
    c.try_acquire("mkdir", LONG).unwrap().release().unwrap();
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);

    let file = parent.path().join("plain-file");
    std::fs::write(&file, b"x").unwrap();
    let err = LocalBackend::open(&Config::parse(&format!("file://{}", file.display())).unwrap())
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
}

#[test]
fn waiters_get_the_key_in_arrival_order_and_try_acquire_does_not_cut_in() {
    let dir = temp_dir("local-fifo");
    let c = client(&dir.file_url());
    let key = "fifo:key";
    let lease = c.try_acquire(key, LONG).unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for i in 0..4 {
        let (c, order) = (client(&dir.file_url()), order.clone());
        threads.push(std::thread::spawn(move || {
            let lease = c.acquire(key, LONG, LONG).expect("waiter");
            order.lock().unwrap().push(i);
            std::thread::sleep(Duration::from_millis(5));
            lease.release().unwrap();
        }));
        // Each waiter queues before the next starts.
        assert!(
            leasehold_testkit::wait_until(Duration::from_secs(20), || queued(dir.path()) == i + 1),
            "waiter {i} did not queue"
        );
    }
    lease.release().unwrap();
    // The key is free, but it is promised to the queue.
    let cut_in = c.try_acquire(key, LONG);
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3]);
    if let Ok(l) = cut_in {
        // Only possible if every waiter had already come and gone.
        l.release().unwrap();
        panic!("try_acquire cut in front of queued waiters");
    }
}

#[test]
fn a_waiter_notices_release_long_before_any_poll_interval() {
    let dir = temp_dir("local-wake");
    let c = client(&dir.file_url());
    let key = "wake:key";
    let mut latencies = Vec::new();
    for _ in 0..10 {
        let lease = c.try_acquire(key, LONG).unwrap();
        let c2 = client(&dir.file_url());
        let waiter = std::thread::spawn(move || {
            let l = c2.acquire(key, LONG, LONG).unwrap();
            let got = Instant::now();
            l.release().unwrap();
            got
        });
        std::thread::sleep(Duration::from_millis(60));
        let released = Instant::now();
        lease.release().unwrap();
        latencies.push(waiter.join().unwrap().saturating_duration_since(released));
    }
    latencies.sort();
    eprintln!("thread handoff latencies: {latencies:?}");
    assert!(
        latencies[5] < Duration::from_millis(100),
        "median {:?}",
        latencies[5]
    );
}
