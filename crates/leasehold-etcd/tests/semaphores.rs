//! Semaphore waits on the real three-member cluster: waiters queue by revision and are woken by a
//! watch, first come, first served; a newcomer's try is refused while the queue is as long as the
//! free permits; a waiter that died holds nobody up beyond its place's TTL; a wait ends at its
//! deadline and leaves the queue, as an interrupted one does; and a waiter does not poll.

use base64::Engine;
use leasehold_core::{Client, Config, ErrorKind};
use leasehold_etcd::EtcdBackend;
use leasehold_testkit::{unique_key, wait_until, EtcdCluster};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const CONNECT_MS: u64 = 500;
const IO_MS: u64 = 5000;
const PREFIX: &str = "semq:";
const TTL: Duration = Duration::from_secs(30);

fn client() -> Client {
    let url = EtcdCluster::shared().url_with(&format!(
        "connect_timeout_ms={CONNECT_MS}&io_timeout_ms={IO_MS}&prefix={PREFIX}"
    ));
    Client::new(EtcdBackend::connect(&Config::parse(&url).unwrap()).unwrap())
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The start of semaphore `key`'s queue, and the end of its range.
fn queue_range(key: &str) -> (Vec<u8>, Vec<u8>) {
    let start = format!("{PREFIX}pqueue/{:04x}/{key}/", key.len()).into_bytes();
    let mut end = start.clone();
    *end.last_mut().unwrap() += 1;
    (start, end)
}

/// How many waiters semaphore `key`'s queue holds, read from the cluster directly.
fn queued(key: &str) -> usize {
    let (start, end) = queue_range(key);
    let body = format!(
        r#"{{"key":"{}","range_end":"{}","count_only":true}}"#,
        b64(&start),
        b64(&end)
    );
    let answer = EtcdCluster::shared()
        .request(0, "/v3/kv/range", &body)
        .unwrap();
    answer
        .split("\"count\":\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(0)
}

/// Three waiters that came one after the other get the permits in that order, one permit freed
/// at a time, and a newcomer is refused while they wait.
#[test]
fn waiters_are_served_first_come_first_served() {
    let client = client();
    let key = unique_key("fifo");
    let a = client.try_acquire_permit(&key, 2, TTL).unwrap();
    let b = client.try_acquire_permit(&key, 2, TTL).unwrap();
    let granted = Arc::new(Mutex::new(Vec::new()));
    let waiters: Vec<_> = (0..3)
        .map(|i| {
            // Each comes once the one before is in the queue.
            assert!(
                wait_until(Duration::from_secs(20), || queued(&key) >= i),
                "waiter {} never queued",
                i.saturating_sub(1)
            );
            let (client, key, granted) = (client.clone(), key.clone(), granted.clone());
            std::thread::spawn(move || {
                let lease = client
                    .acquire_permit(&key, 2, TTL, Duration::from_secs(60))
                    .expect("a waiter gets a permit");
                granted
                    .lock()
                    .unwrap()
                    .push((i, lease.fence(), Some(lease)));
            })
        })
        .collect();
    assert!(wait_until(Duration::from_secs(20), || queued(&key) >= 3));
    let refused = client.try_acquire_permit(&key, 2, TTL).unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::NotAcquired, "{refused}");
    let served = |n: usize| {
        assert!(
            wait_until(Duration::from_secs(30), || granted.lock().unwrap().len()
                >= n),
            "waiter {} was not served",
            n - 1
        );
    };
    // One permit freed at a time: each goes to the oldest waiter left.
    a.release().unwrap();
    served(1);
    b.release().unwrap();
    served(2);
    let first = granted.lock().unwrap()[0].2.take().unwrap();
    first.release().unwrap();
    served(3);
    for w in waiters {
        w.join().expect("waiter");
    }
    let granted = std::mem::take(&mut *granted.lock().unwrap());
    let order: Vec<usize> = granted.iter().map(|(i, _, _)| *i).collect();
    assert_eq!(order, vec![0, 1, 2], "first come, first served");
    assert!(
        granted.windows(2).all(|w| w[0].1 < w[1].1),
        "fences rise in the order of the grants"
    );
    assert_eq!(
        queued(&key),
        0,
        "every waiter left the queue with its grant"
    );
    for lease in granted.into_iter().filter_map(|(_, _, lease)| lease) {
        lease.release().unwrap();
    }
}

/// A try against a queue as long as the free permits is refused, though a permit is free: it
/// would overtake the waiters. Once the queue is shorter, it is granted.
#[test]
fn a_try_does_not_overtake_the_queue() {
    let client = client();
    let key = unique_key("overtake");
    let holder = client.try_acquire_permit(&key, 2, TTL).unwrap();
    // A waiter's entry, written as a waiter writes it, that nobody will serve: one permit is free,
    // one entry waits for it.
    let (start, _) = queue_range(&key);
    let mut entry = start.clone();
    entry.extend_from_slice(b"0123456789abcdef0123456789abcdef");
    let cluster = EtcdCluster::shared();
    let put = format!(r#"{{"key":"{}","value":""}}"#, b64(&entry));
    cluster.request(0, "/v3/kv/put", &put).unwrap();
    let refused = client.try_acquire_permit(&key, 2, TTL).unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::NotAcquired, "{refused}");
    // A waiting newcomer queues behind the entry, and is served once the entry leaves.
    let waiter = {
        let (client, key) = (client.clone(), key.clone());
        std::thread::spawn(move || client.acquire_permit(&key, 2, TTL, Duration::from_secs(60)))
    };
    assert!(wait_until(Duration::from_secs(20), || queued(&key) >= 2));
    let delete = format!(r#"{{"key":"{}"}}"#, b64(&entry));
    cluster.request(0, "/v3/kv/deleterange", &delete).unwrap();
    let lease = waiter.join().unwrap().expect("served once the entry left");
    lease.release().unwrap();
    // Queue empty, a permit free: a try is granted.
    client
        .try_acquire_permit(&key, 2, TTL)
        .expect("nobody waits")
        .release()
        .unwrap();
    holder.release().unwrap();
}

/// A waiter killed in the queue (kill -9: it leaves its entry behind) holds up the waiter behind
/// it only until its place's etcd lease ends (3 s, plus etcd's expiry check and a Raft round): the
/// live one gets the permit well within its wait.
#[test]
fn a_dead_waiter_holds_nobody_up_for_long() {
    let client = client();
    let key = unique_key("dead");
    let holder = client.try_acquire_permit(&key, 1, TTL).unwrap();
    // SAFETY: the child only waits for a permit and then ends with _exit; the parent kills it.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        let _ = client.acquire_permit(&key, 1, TTL, Duration::from_secs(60));
        // SAFETY: ends the child without the parent's destructors.
        unsafe { libc::_exit(0) };
    }
    assert!(wait_until(Duration::from_secs(20), || queued(&key) >= 1));
    let behind = {
        let (client, key) = (client.clone(), key.clone());
        std::thread::spawn(move || client.acquire_permit(&key, 1, TTL, Duration::from_secs(20)))
    };
    assert!(wait_until(Duration::from_secs(20), || queued(&key) >= 2));
    // SAFETY: our own child.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
    let killed = Instant::now();
    holder.release().unwrap();
    let lease = behind
        .join()
        .unwrap()
        .expect("the dead waiter's place ended and the live one was served");
    eprintln!(
        "served {:?} after the waiter before it died",
        killed.elapsed()
    );
    lease.release().unwrap();
    assert_eq!(queued(&key), 0);
}

/// A wait that runs out ends with `NotAcquired` within its bound and leaves the queue, and it does
/// not poll: its attempts are its first, one per place renewal (each second), and its last.
#[test]
fn a_wait_ends_at_its_deadline_without_polling() {
    let client = client();
    let key = unique_key("deadline");
    let holder = client.try_acquire_permit(&key, 1, TTL).unwrap();
    let wait = Duration::from_secs(3);
    let retries = client.retries();
    let started = Instant::now();
    let refused = client
        .acquire_permit(&key, 1, TTL, wait)
        .expect_err("the permit stays held");
    let took = started.elapsed();
    let retries = client.retries() - retries;
    assert_eq!(refused.kind(), ErrorKind::NotAcquired, "{refused}");
    assert!(took >= wait, "gave up early: {took:?}");
    assert!(
        took <= wait + Duration::from_millis(CONNECT_MS + IO_MS),
        "past its bound: {took:?}"
    );
    // A polling waiter makes an attempt every 32 ms at most: about a hundred in 3 s.
    eprintln!("{retries} attempts after the first in {took:?}");
    assert!(retries <= 6, "{retries} attempts after the first: it polls");
    assert_eq!(queued(&key), 0, "the waiter left the queue");
    holder.release().unwrap();
}

/// An interrupt ends a permit wait with `Interrupted` and takes the waiter out of the queue, so
/// the next waiter is not held up by its place.
#[test]
fn an_interrupt_ends_the_wait_and_leaves_the_queue() {
    let client = client();
    let key = unique_key("interrupt");
    let holder = client.try_acquire_permit(&key, 1, TTL).unwrap();
    let waiting = client.clone();
    let waiter = {
        let key = key.clone();
        std::thread::spawn(move || waiting.acquire_permit(&key, 1, TTL, Duration::from_secs(60)))
    };
    assert!(wait_until(Duration::from_secs(20), || queued(&key) >= 1));
    client.interrupt();
    let ended = waiter.join().unwrap().expect_err("interrupted");
    assert_eq!(ended.kind(), ErrorKind::Interrupted, "{ended}");
    assert_eq!(queued(&key), 0, "the interrupted waiter left the queue");
    holder.release().unwrap();
    // Nobody waits: the permit is free for a try.
    client
        .try_acquire_permit(&key, 1, TTL)
        .expect("free")
        .release()
        .unwrap();
}
