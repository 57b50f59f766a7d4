//! `once` while the network loses replies: workers race on a few once-keys through a fault proxy
//! that drops replies (the request ran, the caller cannot tell), black-holes, delays, drips and
//! resets, drawn by the seeded fault cycler. Every key's action must run at most once, and every
//! caller that got a result must have got the one recorded. The seed is printed;
//! `TORTURE_SEED=…` replays the faults.

mod common;

use leasehold_core::ErrorKind;
use leasehold_testkit::history::seed;
use leasehold_testkit::{unique_key, RedisServer};
use leasehold_testkit::{FaultCycler, FaultProxy};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Many keys, so that first runs (not only replays) meet the faults all along the run.
const KEYS: usize = 1000;
const WORKERS: usize = 6;
const RUN: Duration = Duration::from_secs(8);

#[test]
fn lost_replies_never_run_an_action_twice() {
    let server = RedisServer::start();
    let proxy = Arc::new(FaultProxy::start(server.addr()));
    let url = format!(
        "redis://{}?connect_timeout_ms=200&io_timeout_ms=200",
        proxy.host_port()
    );
    let seed = seed("once under lost replies");
    let cycler = FaultCycler::start(vec![proxy.clone()], seed, Duration::from_millis(400));
    let keys: Arc<Vec<String>> = Arc::new((0..KEYS).map(|_| unique_key("once-faults")).collect());
    let runs: Arc<Vec<AtomicU32>> = Arc::new((0..KEYS).map(|_| AtomicU32::new(0)).collect());
    let ran_with: Arc<Mutex<BTreeMap<usize, Vec<u8>>>> = Arc::default();
    let got: Arc<Mutex<BTreeMap<usize, Vec<Vec<u8>>>>> = Arc::default();
    let outcomes: Arc<Mutex<BTreeMap<String, u32>>> = Arc::default();
    let end = Instant::now() + RUN;
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (keys, runs, ran_with, got, outcomes) = (
                keys.clone(),
                runs.clone(),
                ran_with.clone(),
                got.clone(),
                outcomes.clone(),
            );
            let url = url.clone();
            std::thread::spawn(move || {
                let mut rng = fastrand::Rng::with_seed(seed ^ w as u64);
                let mut client = None;
                while Instant::now() < end {
                    let Some(c) = client.as_ref() else {
                        client = common::connect(&url).ok();
                        std::thread::sleep(Duration::from_millis(20));
                        continue;
                    };
                    let k = rng.usize(..KEYS);
                    let result = c.once(
                        &keys[k],
                        Duration::from_millis(800),
                        Duration::from_millis(1500),
                        Duration::from_secs(120),
                        |lease| {
                            runs[k].fetch_add(1, Ordering::SeqCst);
                            // The action takes a while, so faults land between its start and
                            // its record too.
                            std::thread::sleep(Duration::from_millis(30));
                            let value = format!("key {k}, fence {}", lease.fence()).into_bytes();
                            ran_with.lock().unwrap().insert(k, value.clone());
                            Ok(value)
                        },
                        None::<fn(_, &_) -> _>,
                    );
                    let label = match &result {
                        Ok(value) => {
                            got.lock()
                                .unwrap()
                                .entry(k)
                                .or_default()
                                .push(value.clone());
                            "ok".to_owned()
                        }
                        Err(e) => {
                            assert!(
                                matches!(
                                    e.kind(),
                                    ErrorKind::Unavailable
                                        | ErrorKind::Lost
                                        | ErrorKind::NotAcquired
                                        | ErrorKind::IncompleteAttempt
                                ),
                                "unexpected: {e}"
                            );
                            e.kind().as_str().to_owned()
                        }
                    };
                    *outcomes.lock().unwrap().entry(label).or_default() += 1;
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let faults = cycler.finish();
    proxy.heal();
    let ran_with = ran_with.lock().unwrap();
    let got = got.lock().unwrap();
    for k in 0..KEYS {
        let n = runs[k].load(Ordering::SeqCst);
        assert!(n <= 1, "key {k}: the action ran {n} times (seed {seed})");
        if let Some(results) = got.get(&k) {
            let ran = ran_with.get(&k).expect("a result without a run");
            assert!(
                results.iter().all(|r| r == ran),
                "key {k}: results {results:?} differ from the run's {ran:?} (seed {seed})"
            );
        }
    }
    let ran: u32 = runs.iter().map(|r| r.load(Ordering::SeqCst)).sum();
    eprintln!(
        "once under lost replies: {} faults, outcomes {:?}, {ran} of {KEYS} keys ran their action, \
         none twice",
        faults.len(),
        outcomes.lock().unwrap()
    );
}
