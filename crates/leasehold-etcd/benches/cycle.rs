//! `cargo bench -p leasehold-etcd`: what a lease costs on etcd beside a raw transaction pair through
//! the same gateway in the same run, on a three-member cluster this bench starts on free loopback
//! ports (the test kit's: members on a RAM disk where there is one, peers through fault proxies
//! that forward everything):
//!
//! - `etcd/cycle`: `try_acquire` + `release` of a fresh key (a lease grant, the granting
//!   transaction, the releasing transaction and the revoke) beside the floor, a put conditioned on
//!   the key's absence then a delete conditioned on its value, on one HTTP agent, no etcd lease:
//!   what a hand-written client would send for a lock without expiry. Timed in alternation
//!   (tests/support/paired.rs).
//! - `etcd/handoff/handoff.json`: from the holder's release to the waiter (blocked in `acquire`, its
//!   watch open) holding the key, p50 and p99 over [`HANDOFFS`], beside the floor's pair timed
//!   right after.

#[path = "../../../tests/support/paired.rs"]
mod paired;

use criterion::{criterion_group, criterion_main, Criterion};
use leasehold_core::{Client, Config};
use leasehold_etcd::EtcdBackend;
use leasehold_testkit::{unique_key, EtcdCluster};
use std::time::{Duration, Instant};

const TTL: Duration = Duration::from_secs(30);
const SAMPLES: usize = 20;
const HANDOFFS: usize = 60;

/// The floor: a raw transaction pair through member `addr`'s gateway.
struct Raw {
    agent: ureq::Agent,
    url: String,
}

impl Raw {
    fn txn(&self, body: &str) {
        let answer = self
            .agent
            .post(&self.url)
            .send(body)
            .and_then(|r| r.into_body().read_to_string())
            .unwrap_or_else(|e| panic!("raw transaction: {e}"));
        assert!(answer.contains("\"succeeded\":true"), "{answer}");
    }

    fn pair(&self) {
        self.txn(
            r#"{"compare":[{"key":"Zmxvb3I=","target":"CREATE","result":"EQUAL","create_revision":"0"}],
                "success":[{"request_put":{"key":"Zmxvb3I=","value":"dA=="}}]}"#,
        );
        self.txn(
            r#"{"compare":[{"key":"Zmxvb3I=","target":"VALUE","result":"EQUAL","value":"dA=="}],
                "success":[{"request_delete_range":{"key":"Zmxvb3I="}}]}"#,
        );
    }
}

fn etcd(c: &mut Criterion) {
    let cluster = EtcdCluster::start();
    // The client talks to the first member of its URL, as the floor does.
    let url = cluster.url_with("io_timeout_ms=5000&prefix=bench:");
    let config = Config::parse(&url).unwrap_or_else(|e| panic!("bad bench URL: {e}"));
    let client = Client::new(EtcdBackend::connect(&config).expect("connect"));
    let raw = Raw {
        agent: ureq::Agent::new_with_defaults(),
        url: format!("http://{}/v3/kv/txn", cluster.members()[0].addr()),
    };
    let mut g = c.benchmark_group("etcd");
    paired::bench(
        &mut g,
        "etcd",
        "cycle",
        SAMPLES,
        paired::fresh_cycle(&client, "bench-cycle", TTL),
        || raw.pair(),
    );
    g.finish();
    handoff(&client, &raw);
}

fn handoff(client: &Client, raw: &Raw) {
    let key = unique_key("bench-handoff");
    let mut took = Vec::with_capacity(HANDOFFS);
    for _ in 0..HANDOFFS {
        let lease = client.try_acquire(&key, TTL).expect("the holder's grant");
        let (waiter, k) = (client.clone(), key.clone());
        let woken = std::thread::spawn(move || {
            let lease = waiter.acquire(&k, TTL, TTL).expect("the waiter's grant");
            let at = Instant::now();
            lease.release().expect("the waiter's release");
            at
        });
        // Until the waiter is queued and watching (its first look and its watch take a few ms).
        std::thread::sleep(Duration::from_millis(100));
        let released = Instant::now();
        lease.release().expect("the holder's release");
        took.push(woken.join().expect("waiter") - released);
    }
    took.sort();
    let floor = {
        let start = Instant::now();
        for _ in 0..200 {
            raw.pair();
        }
        start.elapsed() / 200
    };
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let (p50, p99) = (took[HANDOFFS / 2], took[HANDOFFS * 99 / 100]);
    paired::save(
        "etcd/handoff",
        "handoff.json",
        &format!(
            "{{\"p50_us\": {:.1}, \"p99_us\": {:.1}, \"floor_us\": {:.1}, \"handoffs\": {HANDOFFS}}}\n",
            us(p50),
            us(p99),
            us(floor)
        ),
    );
    println!(
        "etcd/handoff: p50 {:.0} µs, p99 {:.0} µs beside a raw transaction pair of {:.0} µs = {:.2}×",
        us(p50),
        us(p99),
        us(floor),
        us(p50) / us(floor)
    );
}

criterion_group! {
    name = benches;
    config = paired::config(SAMPLES);
    targets = etcd
}
criterion_main!(benches);
