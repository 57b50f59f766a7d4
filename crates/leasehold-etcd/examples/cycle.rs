//! What a lease costs on etcd, beside the floor in the same run: a three-member cluster of the
//! test kit's own, one client.
//!
//! * floor: a raw transaction pair through the same gateway and HTTP client (a put conditioned on
//!   the key's absence, then a delete conditioned on its value), no etcd lease;
//! * cycle: `try_acquire` + `release` (a lease grant, the granting transaction, the releasing
//!   transaction and the revoke);
//! * handoff: from the holder's release to the waiter holding the key.
//!
//! `cargo run -p leasehold-etcd --example cycle [--release]`

use leasehold_core::{Client, Config};
use leasehold_etcd::EtcdBackend;
use leasehold_testkit::{unique_key, EtcdCluster};
use std::time::{Duration, Instant};

fn main() {
    let cluster = EtcdCluster::start();
    let url = cluster.url_with("io_timeout_ms=5000&prefix=bench:");
    let client = Client::new(EtcdBackend::connect(&Config::parse(&url).unwrap()).unwrap());
    let rounds = 300u32;

    let agent = ureq::Agent::new_with_defaults();
    let base = format!("http://{}", cluster.members()[0].addr());
    let txn = |body: &str| {
        agent
            .post(format!("{base}/v3/kv/txn"))
            .send(body)
            .unwrap()
            .into_body()
            .read_to_string()
            .unwrap()
    };
    let (put, delete) = (
        r#"{"compare":[{"key":"Zmxvb3I=","target":"CREATE","result":"EQUAL","create_revision":"0"}],
            "success":[{"request_put":{"key":"Zmxvb3I=","value":"dA=="}}]}"#,
        r#"{"compare":[{"key":"Zmxvb3I=","target":"VALUE","result":"EQUAL","value":"dA=="}],
            "success":[{"request_delete_range":{"key":"Zmxvb3I="}}]}"#,
    );
    let time = |f: &mut dyn FnMut()| {
        for _ in 0..20 {
            f();
        }
        let start = Instant::now();
        for _ in 0..rounds {
            f();
        }
        start.elapsed() / rounds
    };
    let floor = time(&mut || {
        txn(put);
        txn(delete);
    });
    let key = unique_key("cycle");
    let cycle = time(&mut || {
        client
            .try_acquire(&key, Duration::from_secs(10))
            .unwrap()
            .release()
            .unwrap()
    });
    let floor_again = time(&mut || {
        txn(put);
        txn(delete);
    });
    let mut handoffs = Vec::new();
    for _ in 0..40 {
        let lease = client.try_acquire(&key, Duration::from_secs(10)).unwrap();
        let (waiter, k) = (client.clone(), key.clone());
        let woken = std::thread::spawn(move || {
            let lease = waiter
                .acquire(&k, Duration::from_secs(10), Duration::from_secs(10))
                .unwrap();
            let at = Instant::now();
            lease.release().unwrap();
            at
        });
        std::thread::sleep(Duration::from_millis(100));
        let released = Instant::now();
        lease.release().unwrap();
        handoffs.push(woken.join().unwrap() - released);
    }
    handoffs.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!("| figure | measured |");
    println!("|---|---|");
    println!("| raw transaction pair (floor) | {:.2} ms |", ms(floor));
    println!("| try_acquire + release | {:.2} ms |", ms(cycle));
    println!(
        "| raw transaction pair (again) | {:.2} ms |",
        ms(floor_again)
    );
    println!(
        "| handoff p50 / p90 | {:.2} / {:.2} ms |",
        ms(handoffs[handoffs.len() / 2]),
        ms(handoffs[handoffs.len() * 9 / 10])
    );
}
