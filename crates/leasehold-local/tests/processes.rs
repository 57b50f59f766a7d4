//! Behaviour across real OS processes. Workers are this test binary run again (see
//! `child_worker`); they report on stdout.

mod common;

use common::{temp_dir, FileUrl};
use leasehold_core::{Client, Config, ErrorKind};
use leasehold_local::LocalBackend;
use leasehold_testkit::processes::{self, monotonic_ns, num, var, Worker};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(30);

fn client(url: &str) -> Client {
    Client::new(LocalBackend::open(&Config::parse(url).expect("url")).expect("open"))
}

/// Not a test of its own: the body of every worker process. Outside a worker it does nothing.
#[test]
fn child_worker() {
    let Some(mode) = processes::worker_mode() else {
        return;
    };
    let url = processes::worker_url();
    let key = var("KEY");
    match mode.as_str() {
        // acquire / read-increment-write of a counter file / release, printing every fence
        "counter" => {
            let c = client(&url);
            let path = var("COUNTER");
            let cycles = num("CYCLES") as usize;
            let mut fences = Vec::with_capacity(cycles);
            for _ in 0..cycles {
                let lease = c
                    .acquire(&key, LONG, Duration::from_secs(120))
                    .expect("acquire");
                let seen: u64 = std::fs::read_to_string(&path)
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
                    .unwrap_or(0);
                std::thread::yield_now();
                std::fs::write(&path, (seen + 1).to_string()).expect("write counter");
                fences.push(lease.fence().to_string());
                lease.release().expect("release");
            }
            println!("@@ {}", fences.join(" "));
        }
        // take the key, report, then wait to be killed
        "hold" => {
            let c = client(&url);
            let ttl = Duration::from_millis(num("TTL_MS"));
            let taken = monotonic_ns();
            let lease = c.try_acquire(&key, ttl).expect("child takes the key");
            println!("@@ {} {taken}", lease.fence());
            std::thread::sleep(Duration::from_secs(60));
        }
        // wait for the key, report when it came
        "wait" => {
            let c = client(&url);
            println!("@@ waiting");
            let lease = c.acquire(&key, LONG, LONG).expect("waiter gets the key");
            println!("@@ {} {}", monotonic_ns(), lease.fence());
            lease.release().expect("release");
        }
        // lock a record file with flock and stop, as a process stopped inside an operation would
        "flock-and-stop" => {
            use std::os::fd::AsRawFd;
            let file = std::fs::File::open(var("FILE")).expect("record file");
            // SAFETY: plain syscalls on a descriptor we own.
            assert_eq!(unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) }, 0);
            println!("@@ locked");
            unsafe { libc::raise(libc::SIGSTOP) };
            std::thread::sleep(Duration::from_secs(60));
        }
        // acquire in a loop for a while, reporting every wait
        "fair" => {
            let c = client(&url);
            let hold = Duration::from_micros(num("HOLD_US"));
            // Start together, or the first processes would have the key to themselves for a while.
            println!("@@ ready");
            let mut go = String::new();
            std::io::stdin().read_line(&mut go).expect("go signal");
            let end = Instant::now() + Duration::from_millis(num("RUN_MS"));
            let mut waits = Vec::new();
            while Instant::now() < end {
                let start = Instant::now();
                let lease = c
                    .acquire(&key, LONG, Duration::from_secs(60))
                    .expect("acquire");
                waits.push(start.elapsed().as_micros().to_string());
                std::thread::sleep(hold);
                lease.release().expect("release");
            }
            println!("@@ {}", waits.join(" "));
        }
        other => panic!("unknown child mode {other}"),
    }
}

#[test]
fn four_processes_lose_no_increment() {
    let dir = temp_dir("local-procs");
    let counter = dir.path().join("counter.txt");
    let key = "processes:counter".to_string();
    let cycles = 250;
    let workers: Vec<_> = (0..4)
        .map(|_| {
            Worker::spawn(
                "counter",
                &dir.file_url(),
                &[
                    ("KEY", key.clone()),
                    ("COUNTER", counter.display().to_string()),
                    ("CYCLES", cycles.to_string()),
                ],
            )
        })
        .collect();
    let mut fences = Vec::new();
    for mut worker in workers {
        let line = worker.report();
        let mine: Vec<u64> = line
            .split_whitespace()
            .map(|f| f.parse().unwrap())
            .collect();
        assert_eq!(mine.len(), cycles);
        assert!(
            mine.windows(2).all(|w| w[0] < w[1]),
            "fences increase in each process"
        );
        fences.extend(mine);
        worker.finish();
    }
    let total: u64 = std::fs::read_to_string(&counter)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(total, 4 * cycles as u64, "lost increments");
    fences.sort();
    fences.dedup();
    assert_eq!(
        fences.len(),
        4 * cycles,
        "every acquisition got its own fence"
    );
}

#[test]
fn killed_holder_frees_the_key_after_its_ttl() {
    let dir = temp_dir("local-kill");
    let url = dir.file_url();
    let key = "processes:killed".to_string();
    let ttl = Duration::from_millis(1500);
    let mut worker = Worker::spawn(
        "hold",
        &url,
        &[
            ("KEY", key.clone()),
            ("TTL_MS", ttl.as_millis().to_string()),
        ],
    );
    let line = worker.report();
    let mut parts = line.split_whitespace().map(|p| p.parse::<u64>().unwrap());
    let (child_fence, taken_ns) = (parts.next().unwrap(), parts.next().unwrap());
    let c = client(&url);
    worker.kill();
    let since_taken = || Duration::from_nanos(monotonic_ns().saturating_sub(taken_ns));
    if since_taken() < ttl / 2 {
        let err = c.try_acquire(&key, LONG).unwrap_err();
        assert_eq!(
            err.kind(),
            ErrorKind::NotAcquired,
            "the dead holder's lease still runs"
        );
    }
    let lease = c
        .acquire(&key, LONG, Duration::from_secs(20))
        .expect("the key frees at the TTL");
    let after = since_taken();
    assert!(after >= ttl, "freed before the TTL ran out: {after:?}");
    assert!(
        after < ttl + Duration::from_secs(10),
        "freed too late: {after:?}"
    );
    assert!(lease.fence() > child_fence);
    lease.release().unwrap();
}

/// Deleting the directory's own files (as a tmp cleaner would) while another
/// process holds a key must not let a second process take it.
#[test]
fn a_held_key_stays_held_across_processes_when_the_bookkeeping_is_deleted() {
    let dir = temp_dir("local-two-holders-procs");
    let url = dir.file_url();
    let key = "processes:two-holders".to_string();
    let mut worker = Worker::spawn(
        "hold",
        &url,
        &[("KEY", key.clone()), ("TTL_MS", "30000".into())],
    );
    let child_fence: u64 = worker
        .report()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(".leasehold")
        {
            std::fs::remove_file(path).unwrap();
        }
    }
    let c = client(&url);
    match c.try_acquire(&key, LONG) {
        Ok(l) => panic!(
            "two holders: fence {} while the child's {child_fence} runs",
            l.fence()
        ),
        Err(e) => assert_eq!(e.kind(), ErrorKind::NotAcquired, "{e}"),
    }
    worker.kill();
}

#[test]
fn waiter_in_another_process_gets_a_released_key_quickly() {
    let dir = temp_dir("local-handoff");
    let url = dir.file_url();
    let key = "processes:handoff".to_string();
    let c = client(&url);
    let mut latencies = Vec::new();
    for _ in 0..5 {
        let lease = c.try_acquire(&key, LONG).unwrap();
        let mut worker = Worker::spawn("wait", &url, &[("KEY", key.clone())]);
        assert_eq!(worker.report(), "waiting");
        // Give the child time to queue and block.
        std::thread::sleep(Duration::from_millis(300));
        let fence = lease.fence();
        let released = monotonic_ns();
        lease.release().unwrap();
        let line = worker.report();
        let mut parts = line.split_whitespace().map(|p| p.parse::<u64>().unwrap());
        let (got, child_fence) = (parts.next().unwrap(), parts.next().unwrap());
        assert!(child_fence > fence);
        latencies.push(Duration::from_nanos(got.saturating_sub(released)));
        worker.finish();
    }
    latencies.sort();
    eprintln!("cross-process handoff latencies: {latencies:?}");
    // Peers poll every 100-500 ms; a waiter here is woken by the release itself.
    assert!(
        latencies[2] < Duration::from_millis(100),
        "median handoff {:?}",
        latencies[2]
    );
}

#[test]
fn stopped_process_holding_the_flock_gives_unavailable_not_a_hang() {
    let dir = temp_dir("local-stopped");
    let url = format!("{}?io_timeout_ms=300", dir.file_url());
    let c = client(&url);
    let key = "processes:stopped";
    // A lease that runs out leaves its record in place (a released one would take it along).
    c.try_acquire(key, Duration::from_millis(1))
        .unwrap()
        .forget();
    std::thread::sleep(Duration::from_millis(5));
    let record = record_files(dir.path()).pop().expect("a record file");
    let mut worker = Worker::spawn(
        "flock-and-stop",
        &url,
        &[("FILE", record.display().to_string())],
    );
    assert_eq!(worker.report(), "locked");

    let start = Instant::now();
    let err = c.try_acquire(key, LONG).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(3),
        "{took:?}"
    );

    let start = Instant::now();
    let err = c
        .acquire(key, LONG, Duration::from_millis(200))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "bounded by wait + io timeout: {:?}",
        start.elapsed()
    );
    assert_eq!(c.inspect(key).unwrap_err().kind(), ErrorKind::Unavailable);

    worker.kill();
    c.try_acquire(key, LONG)
        .expect("works again once the process is gone")
        .release()
        .unwrap();
}

#[test]
fn dead_waiter_does_not_block_the_queue() {
    let dir = temp_dir("local-dead-waiter");
    let url = dir.file_url();
    let key = "processes:dead-waiter".to_string();
    let c = client(&url);
    let lease = c.try_acquire(&key, LONG).unwrap();
    let mut worker = Worker::spawn("wait", &url, &[("KEY", key.clone())]);
    assert_eq!(worker.report(), "waiting");
    std::thread::sleep(Duration::from_millis(300)); // the child is queued now
    worker.kill();
    lease.release().unwrap();
    let start = Instant::now();
    let next = c
        .acquire(&key, LONG, Duration::from_secs(10))
        .expect("a dead waiter is skipped");
    eprintln!("dead waiter skipped after {:?}", start.elapsed());
    assert!(start.elapsed() < Duration::from_secs(5));
    next.release().unwrap();
}

#[test]
fn a_waiter_stopped_too_long_loses_its_place_but_still_gets_the_key() {
    let dir = temp_dir("local-stopped-waiter");
    let url = dir.file_url();
    let key = "processes:stopped-waiter".to_string();
    let c = client(&url);
    let lease = c.try_acquire(&key, LONG).unwrap();
    let mut worker = Worker::spawn("wait", &url, &[("KEY", key.clone())]);
    assert_eq!(worker.report(), "waiting");
    std::thread::sleep(Duration::from_millis(300)); // queued
    let record = record_files(dir.path()).pop().expect("a record file");
    for _ in 0..50 {
        worker.signal(libc::SIGSTOP);
        std::thread::sleep(Duration::from_millis(20));
        if !flock_is_held(&record) {
            break;
        }
        // Stopped inside its few microseconds under the flock: let it finish and stop it again.
        worker.signal(libc::SIGCONT);
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(!flock_is_held(&record));
    // Long enough to count as dead: the next look drops it from the queue.
    std::thread::sleep(leasehold_local::STALE_WAITER + Duration::from_millis(300));
    let fence = lease.fence();
    lease.release().unwrap();
    let meanwhile = c
        .try_acquire(&key, LONG)
        .expect("a stopped waiter does not keep the key from others");
    meanwhile.release().unwrap();
    worker.signal(libc::SIGCONT);
    let line = worker.report();
    let child_fence: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(
        child_fence > fence + 1,
        "the resumed waiter queued again and got the key"
    );
    worker.finish();
}

#[test]
fn eight_processes_share_the_key_fairly() {
    let dir = temp_dir("local-fair");
    let url = dir.file_url();
    let key = "processes:fair".to_string();
    let mut workers: Vec<_> = (0..8)
        .map(|_| {
            Worker::spawn(
                "fair",
                &url,
                &[
                    ("KEY", key.clone()),
                    ("HOLD_US", "1000".into()),
                    ("RUN_MS", "3000".into()),
                ],
            )
        })
        .collect();
    for worker in &mut workers {
        assert_eq!(worker.report(), "ready");
    }
    for worker in &mut workers {
        worker.say("go");
    }
    let mut counts = Vec::new();
    let mut all = Vec::new();
    for mut worker in workers {
        let waits: Vec<u64> = worker
            .report()
            .split_whitespace()
            .map(|w| w.parse().unwrap())
            .collect();
        counts.push(waits.len());
        all.extend(waits);
        worker.finish();
    }
    all.sort();
    let median = all[all.len() / 2];
    let longest = *all.last().unwrap();
    eprintln!(
        "fairness: acquisitions per process {counts:?}; median wait {median} µs, longest {longest} µs ({:.1}x)",
        longest as f64 / median.max(1) as f64
    );
    let (min, max) = (*counts.iter().min().unwrap(), *counts.iter().max().unwrap());
    assert!(min > 0, "every process got the key: {counts:?}");
    assert!(
        min * 2 >= max,
        "FIFO shares the key about evenly: {counts:?}"
    );
}

fn record_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("k-"))
        .collect()
}

fn flock_is_held(path: &std::path::Path) -> bool {
    use std::os::fd::AsRawFd;
    let file = std::fs::File::open(path).expect("record file");
    // SAFETY: plain syscalls on a descriptor we own.
    let free = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
    if free {
        unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_UN) };
    }
    !free
}
