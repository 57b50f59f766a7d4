//! The record files: fences, file names, corruption, reboots, the directory, and queue order.

use leasehold_core::{Client, Config, ErrorKind, MAX_KEY_LEN};
use leasehold_local::LocalBackend;
use leasehold_testkit::TempDir;
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
    let slot = |at: usize| -> Option<(u64, u32)> {
        let s = bytes.get(at..at + 96)?;
        (s[..4] == *b"LHL1").then(|| {
            (
                u64::from_le_bytes(s[16..24].try_into().unwrap()),
                u32::from_le_bytes(s[88..92].try_into().unwrap()),
            )
        })
    };
    [slot(0), slot(2048)]
        .into_iter()
        .flatten()
        .max()
        .map_or(0, |(_, n)| n as usize)
}

#[test]
fn fence_strictly_increases_over_1000_acquisitions() {
    let dir = TempDir::new("local-fence");
    let (a, b) = (client(&dir.file_url()), client(&dir.file_url()));
    let mut last = 0;
    for i in 0..1000 {
        let c = if i % 2 == 0 { &a } else { &b };
        let lease = c.try_acquire("fence:1000", LONG).unwrap();
        assert!(lease.fence() > last, "fence {} after {last}", lease.fence());
        last = lease.fence();
        lease.release().unwrap();
    }
    assert_eq!(
        a.inspect("fence:1000").unwrap().fence,
        Some(last),
        "the fence survives release"
    );
}

#[test]
fn odd_keys_map_to_safe_distinct_file_names() {
    let dir = TempDir::new("local-names");
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
    let dir = TempDir::new("local-corrupt");
    let c = client(&dir.file_url());
    let key = "corrupt:key";
    let mut fence = 0;
    for _ in 0..3 {
        let lease = c.try_acquire(key, LONG).unwrap();
        fence = lease.fence();
        lease.release().unwrap();
    }
    let file = record_files(dir.path()).pop().unwrap();

    // A torn write: the newest slot is garbage, the previous one still holds the fence.
    let mut bytes = std::fs::read(&file).unwrap();
    let generation = |at: usize| -> u64 {
        match bytes.get(at..at + 24) {
            Some(s) if s[..4] == *b"LHL1" => u64::from_le_bytes(s[16..24].try_into().unwrap()),
            _ => 0,
        }
    };
    let newest_slot = if generation(2048) > generation(0) {
        2048
    } else {
        0
    };
    assert!(
        generation(0) > 0 && generation(2048) > 0,
        "both slots written"
    );
    for b in &mut bytes[newest_slot + 20..newest_slot + 60] {
        *b ^= 0xa5;
    }
    std::fs::write(&file, &bytes).unwrap();
    let lease = c.try_acquire(key, LONG).expect("a torn record is readable");
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

#[test]
fn a_reboot_frees_every_lease_and_fences_keep_increasing() {
    let dir = TempDir::new("local-reboot");
    let url = dir.file_url();
    let before = client(&url);
    let old = before
        .try_acquire("reboot:key", Duration::from_secs(3600))
        .unwrap();
    let old_fence = old.fence();
    old.forget(); // the holder "dies" with the machine

    // Pretend the directory was last used in another boot.
    let epoch_file = dir.path().join(".leasehold-epoch");
    let text = std::fs::read_to_string(&epoch_file).unwrap();
    let edited: String = text
        .lines()
        .map(|l| {
            if l.starts_with("boot=") {
                "boot=00000000-0000-0000-0000-000000000000".to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&epoch_file, edited + "\n").unwrap();

    let after = client(&url);
    assert!(
        !after.inspect("reboot:key").unwrap().held,
        "a record of an earlier boot holds nothing"
    );
    let lease = after
        .try_acquire("reboot:key", LONG)
        .expect("free after the reboot");
    assert!(lease.fence() > old_fence);
    assert!(
        lease.fence() > 1 << 32,
        "fences of a new boot start above every earlier boot's"
    );
    lease.release().unwrap();
}

#[test]
fn the_directory_is_created_private() {
    use std::os::unix::fs::PermissionsExt;
    let parent = TempDir::new("local-mkdir");
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
    let dir = TempDir::new("local-fifo");
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
    let dir = TempDir::new("local-wake");
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
