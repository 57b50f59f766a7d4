//! etcd's own faults, on clusters of the test's own: the leader killed and started again while
//! workers contend, a member paused (SIGSTOP), a majority stopped. Calls stay bounded, a member
//! that cannot serve is passed over, no two holders ever overlap, and fences keep rising across
//! every leader change.

use leasehold_core::{Client, Config, ErrorKind};
use leasehold_etcd::EtcdBackend;
use leasehold_testkit::EtcdCluster;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const CONNECT_MS: u64 = 500;
const IO_MS: u64 = 2000;

/// A call's bound (connect + I/O) and room for a loaded machine.
const BOUND: Duration = Duration::from_millis(CONNECT_MS + IO_MS + 1500);

fn client(cluster: &EtcdCluster) -> Client {
    let url = cluster.url_with(&format!(
        "connect_timeout_ms={CONNECT_MS}&io_timeout_ms={IO_MS}&prefix=faults:"
    ));
    Client::new(EtcdBackend::connect(&Config::parse(&url).unwrap()).unwrap())
}

#[test]
fn leader_killed_and_restarted_while_workers_contend() {
    let mut cluster = EtcdCluster::start();
    let key = leasehold_testkit::unique_key("leader-kill");
    let stop = Arc::new(AtomicBool::new(false));
    let inside = Arc::new(AtomicBool::new(false));
    // The fence of every grant, in the order the critical sections ran.
    let fences = Arc::new(Mutex::new(Vec::<u64>::new()));
    let unavailable = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (client, key) = (client(&cluster), key.clone());
            let (stop, inside, fences, unavailable) = (
                stop.clone(),
                inside.clone(),
                fences.clone(),
                unavailable.clone(),
            );
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let asked = Instant::now();
                    let wait = Duration::from_secs(3);
                    match client.acquire(&key, Duration::from_secs(2), wait) {
                        Ok(lease) => {
                            assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                            fences.lock().unwrap().push(lease.fence());
                            std::thread::sleep(Duration::from_millis(5));
                            inside.store(false, Ordering::SeqCst);
                            let released = Instant::now();
                            match lease.release() {
                                Ok(()) => {}
                                Err(e) => {
                                    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
                                    unavailable.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                            assert!(released.elapsed() < BOUND, "release took too long");
                        }
                        Err(e) => {
                            assert!(
                                matches!(e.kind(), ErrorKind::Unavailable | ErrorKind::NotAcquired),
                                "{e}"
                            );
                            if e.kind() == ErrorKind::Unavailable {
                                unavailable.fetch_add(1, Ordering::Relaxed);
                            }
                            assert!(asked.elapsed() < wait + BOUND, "acquire took too long");
                        }
                    }
                }
            })
        })
        .collect();
    let grants = |fences: &Mutex<Vec<u64>>| fences.lock().unwrap().len();
    std::thread::sleep(Duration::from_secs(1));
    for round in 0..2 {
        let leader = cluster.leader().expect("a leader");
        let before = grants(&fences);
        cluster.kill(leader);
        eprintln!("round {round}: killed the leader, member {leader}");
        std::thread::sleep(Duration::from_secs(4));
        cluster.start_again(leader);
        cluster.wait_healthy(Duration::from_secs(30));
        // A holder whose release was lost in the outage keeps the key until its etcd lease ends
        // (a new leader gives every lease its whole TTL again): 2 s, and the expiry check.
        assert!(
            leasehold_testkit::wait_until(Duration::from_secs(15), || grants(&fences) > before),
            "no grant since the leader was killed"
        );
    }
    stop.store(true, Ordering::SeqCst);
    for w in workers {
        w.join().expect("worker");
    }
    let fences = fences.lock().unwrap();
    eprintln!(
        "{} grants, {} calls unavailable",
        fences.len(),
        unavailable.load(Ordering::Relaxed)
    );
    assert!(
        fences.windows(2).all(|w| w[1] > w[0]),
        "fences rise across leader changes"
    );
}

#[test]
fn a_paused_member_is_passed_over_in_bounded_time() {
    let cluster = EtcdCluster::start();
    // A follower (a paused leader would add an election to the test), named first: the client
    // talks to it first.
    let victim = (cluster.leader().expect("a leader") + 1) % 3;
    let members = cluster.members();
    let hosts: Vec<String> = (0..3).map(|i| members[(victim + i) % 3].addr()).collect();
    let url = format!(
        "etcd://{}?connect_timeout_ms={CONNECT_MS}&io_timeout_ms={IO_MS}&prefix=faults:",
        hosts.join(",")
    );
    let client = Client::new(EtcdBackend::connect(&Config::parse(&url).unwrap()).unwrap());
    let key = leasehold_testkit::unique_key("paused");
    client
        .try_acquire(&key, Duration::from_secs(30))
        .unwrap()
        .release()
        .unwrap();
    cluster.pause(victim);
    let mut ok = 0;
    for _ in 0..4 {
        let asked = Instant::now();
        match client.try_acquire(&key, Duration::from_secs(30)) {
            Ok(lease) => {
                ok += 1;
                lease.release().unwrap();
            }
            Err(e) => assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}"),
        }
        assert!(asked.elapsed() < BOUND, "took {:?}", asked.elapsed());
    }
    cluster.resume(victim);
    assert!(ok >= 3, "the other members served: {ok} of 4");
}

#[test]
fn a_majority_stopped_grants_nothing_and_answers_in_time() {
    let mut cluster = EtcdCluster::start();
    let client = client(&cluster);
    let key = leasehold_testkit::unique_key("majority");
    let held = client.try_acquire(&key, Duration::from_secs(60)).unwrap();
    let fence = held.fence();
    cluster.kill(1);
    cluster.kill(2);
    for _ in 0..2 {
        let asked = Instant::now();
        let e = client
            .try_acquire(
                leasehold_testkit::unique_key("majority-other"),
                Duration::from_secs(5),
            )
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
        assert!(asked.elapsed() < BOUND, "took {:?}", asked.elapsed());
    }
    cluster.start_again(1);
    cluster.start_again(2);
    cluster.wait_healthy(Duration::from_secs(30));
    // The lease outlived the outage (etcd renews every lease on a new leader).
    let mut held = held;
    held.extend(Duration::from_secs(60))
        .expect("the lease survived");
    held.release().unwrap();
    let next = client.try_acquire(&key, Duration::from_secs(5)).unwrap();
    assert!(next.fence() > fence);
    next.release().unwrap();
}

/// A member the client reaches through the fault proxy: black-holed, dripping its replies,
/// dropping them. Every call ends within its bound, with a lease or `Unavailable`, and the calls
/// after it are served by the other members.
#[test]
fn a_member_behind_a_faulty_link_is_passed_over() {
    use leasehold_testkit::{Fault, FaultProxy};
    let cluster = EtcdCluster::shared();
    let members = cluster.members();
    let proxy = FaultProxy::start(members[0].addr());
    let url = format!(
        "etcd://{},{},{}?connect_timeout_ms={CONNECT_MS}&io_timeout_ms={IO_MS}&prefix=link:",
        proxy.host_port(),
        members[1].addr(),
        members[2].addr()
    );
    for fault in [
        Fault::BlackHole,
        Fault::SlowDripReplies(Duration::from_millis(200)),
        Fault::DropReplies,
    ] {
        proxy.set(Fault::Normal);
        // Back to the proxied member first: a fresh client starts there.
        let client = Client::new(EtcdBackend::connect(&Config::parse(&url).unwrap()).unwrap());
        client
            .try_acquire(unique_key("link-warm"), Duration::from_secs(5))
            .unwrap()
            .release()
            .unwrap();
        proxy.set(fault);
        let mut served = 0;
        for _ in 0..3 {
            let asked = Instant::now();
            match client.try_acquire(unique_key("link"), Duration::from_secs(5)) {
                Ok(lease) => {
                    served += 1;
                    lease.release().unwrap();
                }
                Err(e) => assert_eq!(e.kind(), ErrorKind::Unavailable, "{fault:?}: {e}"),
            }
            assert!(
                asked.elapsed() < BOUND,
                "{fault:?}: took {:?}",
                asked.elapsed()
            );
        }
        assert!(
            served >= 2,
            "{fault:?}: the other members served {served} of 3"
        );
    }
    proxy.set(Fault::Normal);
}

/// A lease restored just after a leader change: the new leader gave every lease its TTL plus an
/// election timeout, which the old leader, stalled, never heard of (and etcd before late 2023 lets
/// it end leases by its own count when it wakes). The restore relies on none of that: nothing is
/// left to rely on until the holder renews it, and the renewal is its own.
#[test]
fn a_lease_restored_after_a_leader_change_relies_on_nothing_the_election_added() {
    let cluster = EtcdCluster::start();
    let leader = cluster.leader().expect("a leader");
    let members = cluster.members();
    // The client talks to the two others only: no call waits on the stalled leader.
    let hosts: Vec<String> = (1..3).map(|i| members[(leader + i) % 3].addr()).collect();
    let url = format!(
        "etcd://{}?connect_timeout_ms={CONNECT_MS}&io_timeout_ms={IO_MS}&prefix=faults:",
        hosts.join(",")
    );
    let client = Client::new(EtcdBackend::connect(&Config::parse(&url).unwrap()).unwrap());
    let key = unique_key("restored-after-election");
    let lease = client
        .acquire(&key, Duration::from_millis(200), Duration::ZERO)
        .unwrap();
    let token = lease.token().to_string();
    lease.forget();
    let status = |i: usize| -> (String, String) {
        let body = cluster
            .request(i, "/v3/maintenance/status", "{}")
            .unwrap_or_default();
        let status: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        let field = |v: &serde_json::Value| v.as_str().unwrap_or("0").to_owned();
        (
            field(&status["leader"]),
            field(&status["header"]["member_id"]),
        )
    };
    let (_, old_leader) = status(leader);
    assert_ne!(old_leader, "0", "the leader's status");
    cluster.pause(leader);
    let paused = Instant::now();
    // Until another member leads (the others name the leader in their status).
    loop {
        assert!(paused.elapsed() < Duration::from_secs(10), "no new leader");
        std::thread::sleep(Duration::from_millis(50));
        let (now, _) = status((leader + 1) % 3);
        if now != "0" && now != old_leader {
            break;
        }
    }
    let restored = client.restore(&key, &token).unwrap();
    let left = restored.remaining();
    cluster.resume(leader);
    assert_eq!(
        left,
        Duration::ZERO,
        "a restore right after the election relied on what the election added"
    );
    // The holder's own renewal is what it relies on.
    let mut restored = restored;
    restored.extend(Duration::from_millis(500)).unwrap();
    assert!(restored.remaining() > Duration::ZERO);
    restored.release().unwrap();
}

fn unique_key(label: &str) -> String {
    leasehold_testkit::unique_key(label)
}

/// The history compacted while waiters wait (etcd's auto-compaction, or an operator's): a watch
/// from a compacted revision says so and the waiter looks again, so every waiter still gets the
/// key once it is free, in the order they came.
#[test]
fn compaction_during_waits() {
    let cluster = EtcdCluster::shared();
    let client = client(cluster);
    let key = unique_key("compaction");
    let holder = client.try_acquire(&key, Duration::from_secs(30)).unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    // Each waiter comes once the one before it is in the queue, so the order they came in is
    // the order of the threads, however slow a loaded machine makes a first attempt.
    let queue = format!("faults:queue/{:04x}/{key}/", key.len());
    let queued = || {
        use base64::Engine;
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let mut end = queue.clone().into_bytes();
        *end.last_mut().unwrap() += 1;
        let body = format!(
            r#"{{"key":"{}","range_end":"{}","count_only":true}}"#,
            b64(queue.as_bytes()),
            b64(&end)
        );
        let answer = cluster.request(1, "/v3/kv/range", &body).unwrap();
        answer
            .split("\"count\":\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or(0)
    };
    let waiters: Vec<_> = (0..3)
        .map(|i| {
            let (client, key, order) = (client.clone(), key.clone(), order.clone());
            if i > 0 {
                assert!(
                    leasehold_testkit::wait_until(Duration::from_secs(10), || queued() >= i),
                    "waiter {} never queued",
                    i - 1
                );
            }
            std::thread::spawn(move || {
                let lease = client
                    .acquire(&key, Duration::from_secs(30), Duration::from_secs(30))
                    .expect("a waiter gets the key after compactions");
                order.lock().unwrap().push(i);
                std::thread::sleep(Duration::from_millis(50));
                lease.release().unwrap();
            })
        })
        .collect();
    assert!(leasehold_testkit::wait_until(
        Duration::from_secs(10),
        || queued() >= 3
    ));
    for _ in 0..5 {
        for _ in 0..5 {
            let body = r#"{"key":"Y29tcGFjdA==","value":"eA=="}"#;
            cluster.request(1, "/v3/kv/put", body).unwrap();
        }
        let rev = cluster.revision();
        cluster
            .request(
                1,
                "/v3/kv/compaction",
                &format!(r#"{{"revision":"{rev}"}}"#),
            )
            .unwrap();
        std::thread::sleep(Duration::from_millis(100));
    }
    holder.release().unwrap();
    for w in waiters {
        w.join().expect("waiter");
    }
    assert_eq!(
        *order.lock().unwrap(),
        vec![0, 1, 2],
        "first come, first served"
    );
}

/// A waiter killed in its queue (kill -9, so it leaves nothing behind on purpose) holds nobody up
/// for long: its entry is on an etcd lease of its own that nobody renews any more, so the key is
/// free for a newcomer within that lease's TTL (3 s; etcd's expiry check and a Raft round on top).
#[test]
fn a_dead_waiter_leaves_the_queue() {
    let cluster = EtcdCluster::shared();
    let client = client(cluster);
    let key = unique_key("dead-waiter");
    let holder = client.try_acquire(&key, Duration::from_secs(30)).unwrap();
    // SAFETY: the child only waits for the key and then ends with _exit; the parent kills it.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        let _ = client.acquire(&key, Duration::from_secs(30), Duration::from_secs(60));
        // SAFETY: ends the child without the parent's destructors.
        unsafe { libc::_exit(0) };
    }
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: our own child.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
    let killed = Instant::now();
    holder.release().unwrap();
    // Queued behind nobody alive: a newcomer gets in once the dead entry's lease ends.
    let lease = loop {
        match client.try_acquire(&key, Duration::from_secs(30)) {
            Ok(lease) => break lease,
            Err(e) => assert_eq!(e.kind(), ErrorKind::NotAcquired, "{e}"),
        }
        assert!(
            killed.elapsed() < Duration::from_secs(8),
            "the dead waiter still holds the queue"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!("free {:?} after the waiter died", killed.elapsed());
    lease.release().unwrap();
}

/// A member split from the majority by the network (its peer links cut both ways, its client
/// listener still up): a client that reaches only that member is refused within its bound, never
/// granted and never left hanging, while a client of the majority keeps being granted with fences
/// still rising. After the split heals, both are granted again, above every earlier fence. The
/// member cut off is the leader, the harder case: until etcd's quorum check steps it down it still
/// believes it leads, and takes proposals it can never commit.
#[test]
fn a_member_partitioned_from_the_majority_grants_nothing() {
    let cluster = EtcdCluster::start();
    let victim = cluster.leader().expect("a leader");
    let members = cluster.members();
    let url_of = |hosts: Vec<String>| {
        format!(
            "etcd://{}?connect_timeout_ms={CONNECT_MS}&io_timeout_ms={IO_MS}&prefix=split:",
            hosts.join(",")
        )
    };
    let connect =
        |url: String| Client::new(EtcdBackend::connect(&Config::parse(&url).unwrap()).unwrap());
    let alone = connect(url_of(vec![members[victim].addr()]));
    let majority = connect(url_of(
        (1..3).map(|d| members[(victim + d) % 3].addr()).collect(),
    ));
    let key = unique_key("split");
    alone
        .try_acquire(&key, Duration::from_secs(5))
        .unwrap()
        .release()
        .unwrap();
    let refused = |label: &str| {
        for _ in 0..3 {
            let asked = Instant::now();
            match alone.try_acquire(&key, Duration::from_secs(5)) {
                Ok(lease) => panic!("{label}: the cut-off member granted {}", lease.fence()),
                Err(e) => assert_eq!(e.kind(), ErrorKind::Unavailable, "{label}: {e}"),
            }
            assert!(
                asked.elapsed() < BOUND,
                "{label}: took {:?}",
                asked.elapsed()
            );
        }
    };

    cluster.partition(victim);
    // At once, while the old leader may still believe it leads.
    refused("just cut off");
    assert!(
        leasehold_testkit::wait_until(Duration::from_secs(20), || cluster.is_cut_off(victim)),
        "etcd does not see member {victim} cut off: {:?}\n{}",
        (0..3).map(|i| cluster.status(i)).collect::<Vec<_>>(),
        cluster.logs()
    );
    refused("without a leader");
    let mut fences = Vec::new();
    let began = Instant::now();
    while fences.len() < 5 {
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "the majority granted {} of 5",
            fences.len()
        );
        match majority.try_acquire(&key, Duration::from_secs(5)) {
            Ok(lease) => {
                fences.push(lease.fence());
                lease.release().unwrap();
            }
            // The majority's election, right after the split.
            Err(e) => assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}"),
        }
    }
    assert!(fences.windows(2).all(|w| w[1] > w[0]), "{fences:?}");
    // etcd's own view: the majority committed those grants, the lone member none of them.
    let statuses: Vec<_> = (0..3).map(|i| cluster.status(i)).collect();
    let alone_status = statuses[victim].expect("the cut-off member answers its status");
    let majority_index = (1..3)
        .filter_map(|d| statuses[(victim + d) % 3])
        .map(|s| s.raft_index)
        .max()
        .unwrap_or(0);
    assert!(
        alone_status.leader == 0 && alone_status.raft_index < majority_index,
        "the cut-off member kept up: {statuses:?}"
    );
    refused("after the majority's grants");

    cluster.heal();
    cluster.wait_healthy(Duration::from_secs(30));
    let last = *fences.last().unwrap();
    for client in [&alone, &majority] {
        let began = Instant::now();
        let lease = loop {
            match client.try_acquire(&key, Duration::from_secs(5)) {
                Ok(lease) => break lease,
                Err(e) => assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}"),
            }
            assert!(
                began.elapsed() < Duration::from_secs(30),
                "no grant after the heal"
            );
        };
        assert!(lease.fence() > last, "{} after {last}", lease.fence());
        lease.release().unwrap();
    }
}
