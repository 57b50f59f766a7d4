//! `cargo bench -p leasehold-etcd --bench scaling`: the cluster's work per acquire and per release
//! of a fresh key as the keys held grow, judged on the servers' own counters: the CPU time of the
//! three members' processes, all their threads (`/proc/<pid>/task/*/schedstat`, in nanoseconds),
//! summed.
//!
//! - `keys_{1k,10k,100k}`: a cluster holding that many other locks beside an empty one (the floor),
//!   rounds alternated, the ratio the median of the rounds' ratios; `keys_0` the same before any
//!   key is written, the two clusters' own difference;
//! - `keys_*/plain_{put,delete}`: the same servers, a put conditioned on a fresh key's absence and
//!   a delete conditioned on its value, with no lock library (what grows there is etcd's own);
//! - `memory`: the members' database size (`/v3/maintenance/status`'s `dbSize`) per key held.
//!
//! The held keys are written as a lease leaves its holder's key (`{prefix}lock/{key}`, the token as
//! its value, attached to an etcd lease), 128 to a transaction and 1,000 to an etcd lease: one lease
//! per key through the client would take many minutes on a three-member cluster here, and a
//! million keys would too, so the rows stop at 100,000. Written to
//! `<criterion home>/scaling/etcd.json`.

#[path = "../../../tests/support/paired.rs"]
mod paired;

use paired::median;

use base64::Engine;
use leasehold_core::{Client, Config, Lease};
use leasehold_etcd::EtcdBackend;
use leasehold_testkit::{unique_key, EtcdCluster};
use std::time::Duration;

const TTL: Duration = Duration::from_secs(3_600);
const ROUNDS: usize = 9;
const PER_ROUND: usize = 200;
const PREFIX: &str = "scale:";

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The pid of the process whose command line names `127.0.0.1:<port>` among etcd's, found in /proc.
fn etcd_pid(port: u16) -> u32 {
    let wanted = format!("127.0.0.1:{port}");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline);
            (cmdline.contains("etcd") && cmdline.contains(&wanted) && !cmdline.contains("scaling"))
                .then_some(pid)
        })
        .min()
        .unwrap_or_else(|| panic!("no etcd process listening on {wanted}"))
}

struct Side {
    cluster: EtcdCluster,
    lock: Client,
    agent: ureq::Agent,
    pids: Vec<u32>,
}

impl Side {
    fn start() -> Side {
        let cluster = EtcdCluster::start();
        let url = cluster.url_with(&format!("io_timeout_ms=5000&prefix={PREFIX}"));
        let config = Config::parse(&url).unwrap_or_else(|e| panic!("bad bench URL: {e}"));
        let lock = Client::new(EtcdBackend::connect(&config).expect("connect"));
        let pids = cluster
            .members()
            .iter()
            .map(|m| etcd_pid(m.client_port()))
            .collect();
        Side {
            cluster,
            lock,
            agent: ureq::Agent::new_with_defaults(),
            pids,
        }
    }

    fn post(&self, path: &str, body: &str) -> String {
        let url = format!("http://{}{path}", self.cluster.members()[0].addr());
        self.agent
            .post(&url)
            .send(body)
            .and_then(|r| r.into_body().read_to_string())
            .unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// CPU ns the members' processes have used so far, every thread.
    fn cpu_ns(&self) -> f64 {
        self.pids
            .iter()
            .flat_map(|pid| {
                let tasks = format!("/proc/{pid}/task");
                std::fs::read_dir(&tasks)
                    .unwrap_or_else(|e| panic!("{tasks}: {e}"))
                    .filter_map(|t| {
                        std::fs::read_to_string(t.ok()?.path().join("schedstat"))
                            .ok()?
                            .split_whitespace()
                            .next()?
                            .parse::<f64>()
                            .ok()
                    })
            })
            .sum()
    }

    /// Cluster µs per acquire of `PER_ROUND` fresh keys, then per release of them.
    fn acquire_release_us(&self) -> (f64, f64) {
        let prefix = unique_key("scale-fresh");
        let t0 = self.cpu_ns();
        let held: Vec<Lease> = (0..PER_ROUND)
            .map(|i| self.lock.try_acquire(format!("{prefix}:{i}"), TTL).unwrap())
            .collect();
        let t1 = self.cpu_ns();
        for lease in held {
            lease.release().unwrap();
        }
        let t2 = self.cpu_ns();
        let n = PER_ROUND as f64 * 1e3;
        ((t1 - t0) / n, (t2 - t1) / n)
    }

    /// The same with no lock library: cluster µs per put conditioned on a fresh key's absence,
    /// then per delete conditioned on its value, through the gateway (no etcd lease). What grows
    /// here with the keys held is etcd's own cost, which every lock on it pays.
    fn plain_put_delete_us(&self) -> (f64, f64) {
        let prefix = unique_key("scale-plain");
        let keys: Vec<String> = (0..PER_ROUND)
            .map(|i| b64(format!("{PREFIX}plain/{prefix}:{i}").as_bytes()))
            .collect();
        let value = b64(b"t");
        let t0 = self.cpu_ns();
        for k in &keys {
            let answer = self.post(
                "/v3/kv/txn",
                &format!(
                    r#"{{"compare":[{{"key":"{k}","target":"CREATE","result":"EQUAL","create_revision":"0"}}],
                        "success":[{{"request_put":{{"key":"{k}","value":"{value}"}}}}]}}"#
                ),
            );
            assert!(answer.contains("\"succeeded\":true"), "{answer}");
        }
        let t1 = self.cpu_ns();
        for k in &keys {
            let answer = self.post(
                "/v3/kv/txn",
                &format!(
                    r#"{{"compare":[{{"key":"{k}","target":"VALUE","result":"EQUAL","value":"{value}"}}],
                        "success":[{{"request_delete_range":{{"key":"{k}"}}}}]}}"#
                ),
            );
            assert!(answer.contains("\"succeeded\":true"), "{answer}");
        }
        let t2 = self.cpu_ns();
        let n = PER_ROUND as f64 * 1e3;
        ((t1 - t0) / n, (t2 - t1) / n)
    }

    fn fill(&self, from: usize, to: usize) {
        let mut lease = String::new();
        for start in (from..to).step_by(128) {
            if start % 1_000 < 128 || lease.is_empty() {
                let grant = self.post("/v3/lease/grant", r#"{"TTL": "3600"}"#);
                lease = grant
                    .split("\"ID\":\"")
                    .nth(1)
                    .and_then(|r| r.split('"').next())
                    .unwrap_or_else(|| panic!("lease grant: {grant}"))
                    .to_string();
            }
            let puts: Vec<String> = (start..(start + 128).min(to))
                .map(|i| {
                    format!(
                        r#"{{"request_put":{{"key":"{}","value":"{}","lease":"{lease}"}}}}"#,
                        b64(format!("{PREFIX}lock/scale-held:{i}").as_bytes()),
                        b64(b"held-token-0123456789abcdef")
                    )
                })
                .collect();
            let answer = self.post(
                "/v3/kv/txn",
                &format!(r#"{{"success":[{}]}}"#, puts.join(",")),
            );
            assert!(answer.contains("\"succeeded\":true"), "fill: {answer}");
        }
    }

    fn db_size(&self) -> f64 {
        let status = self.post("/v3/maintenance/status", "{}");
        status
            .split("\"dbSize\":\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("status: {status}"))
    }
}

fn main() {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("scaling/etcd: load average at start {}", load.trim());
    let (empty, full) = (Side::start(), Side::start());
    empty.acquire_release_us();
    full.acquire_release_us();
    let size_before = full.db_size();
    let mut json = Vec::new();
    let mut held = 0;
    // `keys_0`: both clusters empty, so what sets the two apart apart from the keys held (which
    // member leads each, where the client's requests land) shows in a row of its own.
    for (name, n) in [
        ("0", 0usize),
        ("1k", 1_000),
        ("10k", 10_000),
        ("100k", 100_000),
    ] {
        full.fill(held, n);
        held = n;
        let (mut acq, mut rel, mut put, mut del) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            let f = full.acquire_release_us();
            let e = empty.acquire_release_us();
            acq.push((f.0, e.0));
            rel.push((f.1, e.1));
            let f = full.plain_put_delete_us();
            let e = empty.plain_put_delete_us();
            put.push((f.0, e.0));
            del.push((f.1, e.1));
        }
        for (what, pairs) in [
            ("acquire", acq),
            ("release", rel),
            ("plain_put", put),
            ("plain_delete", del),
        ] {
            let figure = median(pairs.iter().map(|p| p.0).collect());
            let floor = median(pairs.iter().map(|p| p.1).collect());
            let ratio = median(pairs.iter().map(|p| p.0 / p.1).collect());
            println!(
                "scaling/etcd/keys_{name}/{what}: {figure:.1} µs of the 3 members' CPU beside a floor of {floor:.1} µs = {ratio:.3}× \
                 ({n} other locks held vs none; median of {ROUNDS} rounds)"
            );
            json.push(format!(
                "{{\"name\": \"keys_{name}/{what}\", \"figure_us\": {figure:.2}, \"floor_us\": {floor:.2}, \"ratio\": {ratio:.4}}}"
            ));
        }
    }
    // bbolt's file grows in steps and keeps the revisions of the rounds' keys too: an upper bound.
    let per_key = (full.db_size() - size_before) / held as f64;
    println!("scaling/etcd/memory: {per_key:.0} B of database (one member's dbSize) per key held ({held} held; the rounds' revisions included)");
    json.push(format!(
        "{{\"name\": \"memory\", \"held\": {held}, \"bytes_per_key\": {per_key:.1}}}"
    ));
    let load_end = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("scaling/etcd: load average at end {}", load_end.trim());
    paired::save(
        "scaling",
        "etcd.json",
        &format!(
            "{{\"load_start\": \"{}\", \"load_end\": \"{}\", \"rows\": [\n{}\n]}}\n",
            load.trim(),
            load_end.trim(),
            json.join(",\n")
        ),
    );
}
