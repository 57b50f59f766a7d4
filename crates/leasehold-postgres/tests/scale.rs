//! Many keys: nothing is left behind, and keys that differ in one byte never contend.

use leasehold_core::{Client, Config, Lease};
use leasehold_postgres::PostgresBackend;
use leasehold_testkit::{unique_key, wait_until, PostgresServer};
use postgres::{NoTls, SimpleQueryMessage};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);
const KEYS: usize = 100_000;
const THREADS: usize = 4;

fn client(query: &str) -> Client {
    // These tests prove what is left behind and who contends, not call bounds (hang.rs and faults.rs
    // do): 100,000 cycles on four threads meet a busy two-core machine, where one round trip can wait
    // past the default 1 s behind other test processes. Calls get 5 s.
    let url = PostgresServer::shared().url_with(&format!("{query}&io_timeout_ms=5000"));
    let config = Config::parse(&url).expect("test URL");
    Client::new(PostgresBackend::connect(&config).expect("connect to the test PostgreSQL"))
}

fn count(sql: &str) -> i64 {
    let mut db = postgres::Client::connect(&PostgresServer::shared().url(), NoTls).unwrap();
    db.simple_query(sql)
        .unwrap()
        .into_iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(r) => r.get(0).map(|v| v.parse().unwrap()),
            _ => None,
        })
        .unwrap()
}

fn sessions(app: &str) -> i64 {
    count(&format!(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = '{app}'"
    ))
}

/// 100,000 distinct keys acquired and released on a few threads (each acquisition is one round
/// trip, each release one more); then: no advisory lock, no row, and once the client is gone, no
/// session of it.
fn distinct_keys_leave_nothing_behind(mode: &str) {
    let app = format!("lh_scale_{mode}_{}", std::process::id());
    let table = format!("scale_locks_{}", std::process::id());
    let query = match mode {
        "table" => format!("lock=table&table={table}&application_name={app}&pool_size=8"),
        _ => format!("lock=advisory&application_name={app}&pool_size=8"),
    };
    let c = client(&query);
    let run = unique_key("scale");
    let start = Instant::now();
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (c, run) = (c.clone(), run.clone());
            std::thread::spawn(move || {
                let mut last = 0;
                for i in (t..KEYS).step_by(THREADS) {
                    let lease = c
                        .try_acquire(format!("{run}:{i}"), LONG)
                        .expect("a fresh key is free");
                    assert!(lease.fence() > last, "fences grow");
                    last = lease.fence();
                    lease.release().expect("release");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let took = start.elapsed();
    eprintln!(
        "{mode}: {KEYS} keys acquired and released in {took:?} on {THREADS} threads ({:.0} cycles/s)",
        KEYS as f64 / took.as_secs_f64()
    );
    let mine = format!(
        "FROM pg_locks l JOIN pg_stat_activity a USING (pid) \
         WHERE l.locktype = 'advisory' AND a.application_name = '{app}'"
    );
    assert_eq!(
        count(&format!("SELECT count(*) {mine}")),
        0,
        "advisory locks left"
    );
    if mode == "table" {
        assert_eq!(
            count(&format!("SELECT count(*) FROM {table}")),
            0,
            "rows left"
        );
    }
    let open = sessions(&app);
    assert!(
        (1..=8).contains(&open),
        "{open} sessions open for a pool of 8"
    );
    drop(c);
    assert!(
        wait_until(Duration::from_secs(10), || sessions(&app) == 0),
        "sessions left after the client was dropped: {}",
        sessions(&app)
    );
}

#[test]
fn advisory_distinct_keys_leave_nothing_behind() {
    distinct_keys_leave_nothing_behind("advisory");
}

#[test]
fn table_distinct_keys_leave_nothing_behind() {
    distinct_keys_leave_nothing_behind("table");
}

/// Every key that differs from a held key in exactly one byte (each position with a low and a high
/// bit flipped, and every other value at the first and last position) is free while it is held.
fn one_byte_apart_never_contend(query: &str, hold_all: bool) {
    let c = client(query);
    let other = client(query);
    let base: Vec<u8> = format!("{}:{}", unique_key("bytes"), "x".repeat(24)).into_bytes();
    let held = c.try_acquire(&base, LONG).unwrap();
    let mut variants: Vec<Vec<u8>> = Vec::new();
    for i in 0..base.len() {
        for flip in [0x01u8, 0x80] {
            let mut v = base.clone();
            v[i] ^= flip;
            variants.push(v);
        }
    }
    for i in [0, base.len() - 1] {
        for b in 0..=255u8 {
            if b != base[i] {
                let mut v = base.clone();
                v[i] = b;
                variants.push(v);
            }
        }
    }
    variants.sort();
    variants.dedup();
    let mut kept: Vec<Lease> = Vec::new();
    for v in &variants {
        let lease = other
            .try_acquire(v, LONG)
            .unwrap_or_else(|e| panic!("{query}: {v:?} contends with {base:?}: {e}"));
        if hold_all {
            kept.push(lease);
        } else {
            lease.release().unwrap();
        }
    }
    eprintln!(
        "{query}: {} one-byte variants never contended",
        variants.len()
    );
    for lease in kept {
        lease.release().unwrap();
    }
    held.release().unwrap();
}

#[test]
fn advisory_keys_one_byte_apart_never_contend() {
    // One session per held advisory lease: the variants are taken one at a time while the base key
    // is held.
    one_byte_apart_never_contend("lock=advisory", false);
}

#[test]
fn table_keys_one_byte_apart_never_contend() {
    // Rows cost no session: all variants are held at once.
    one_byte_apart_never_contend("lock=table&table=byte_locks", true);
}

/// Eight clients connecting at the same moment to a lock table nobody has made yet: every one
/// works. (`CREATE TABLE IF NOT EXISTS` racing itself fails on the row type, SQLSTATE 42710, which
/// once failed a connect.)
#[test]
fn clients_that_create_the_table_at_once_all_connect() {
    for round in 0..10 {
        let table = format!("race_{}_{round}", std::process::id());
        let barrier = std::sync::Barrier::new(8);
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    let (barrier, table) = (&barrier, &table);
                    s.spawn(move || {
                        let url =
                            PostgresServer::shared().url_with(&format!("lock=table&table={table}"));
                        let config = Config::parse(&url).expect("test URL");
                        barrier.wait();
                        let client = Client::new(
                            PostgresBackend::connect(&config).expect("connect creates the table"),
                        );
                        client
                            .try_acquire(unique_key("race"), LONG)
                            .expect("a lock in the new table")
                            .release()
                            .unwrap();
                    })
                })
                .collect();
            for h in handles {
                h.join().expect("every client connected");
            }
        });
    }
}
