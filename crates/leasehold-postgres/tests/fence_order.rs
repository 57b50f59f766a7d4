//! Table mode: fences of one key follow the order in which the key was granted, even when racing
//! acquirers take it one after another on leases that expire in a millisecond or two.
//!
//! The grant order is recorded by the server itself: a deferred constraint trigger on the lock table
//! runs at commit, while the committing transaction still holds the row's lock, and logs the row's
//! final token and fence with a serial. For one key, commits under its row lock are serialized, so the
//! log's order is the grant order. A fence drawn before the row lock (as `EXCLUDED.fence` was) lets an
//! acquirer that drew first but was granted after another one's lease expired commit a smaller fence.

use leasehold_core::{Client, Config, ErrorKind};
use leasehold_postgres::PostgresBackend;
use leasehold_testkit::{unique_key, PostgresServer};
use postgres::{NoTls, SimpleQueryMessage};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const THREADS: usize = 16;
const RUN: Duration = Duration::from_secs(3);

#[test]
fn table_fences_follow_the_grant_order_of_racing_acquirers() {
    let server = PostgresServer::shared();
    let table = format!("order_locks_{}", std::process::id());
    let url = server.url_with(&format!("lock=table&table={table}&pool_size={THREADS}"));
    let client = Client::new(PostgresBackend::connect(&Config::parse(&url).unwrap()).unwrap());
    let mut db = postgres::Client::connect(&server.url(), NoTls).unwrap();
    let log = format!("{table}_log");
    db.batch_execute(&format!(
        "CREATE TABLE {log} (seq bigserial PRIMARY KEY, key bytea, token text, fence bigint);
         CREATE FUNCTION {log}_f() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           INSERT INTO {log} (key, token, fence)
             SELECT key, token, fence FROM {table} WHERE key = NEW.key AND token = NEW.token;
           RETURN NULL;
         END $$;
         CREATE CONSTRAINT TRIGGER {log}_t AFTER INSERT OR UPDATE ON {table}
           DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {log}_f();"
    ))
    .unwrap();

    // (began, returned, fence) of every acquisition, as the clients saw it.
    let seen: Arc<Mutex<Vec<(Instant, Instant, u64)>>> = Arc::default();
    let key = unique_key("order");
    let stop = Instant::now() + RUN;
    let threads: Vec<_> = (0..THREADS)
        .map(|i| {
            let (client, key, seen) = (client.clone(), key.clone(), seen.clone());
            std::thread::spawn(move || {
                let ttl = Duration::from_millis(1 + (i % 2) as u64);
                while Instant::now() < stop {
                    let began = Instant::now();
                    match client.try_acquire(&key, ttl) {
                        Ok(lease) => {
                            let returned = Instant::now();
                            seen.lock().unwrap().push((began, returned, lease.fence()));
                            // Most leases just expire (they are never released), so the next
                            // acquirer takes the key over an expired row: the racy path.
                            if i == 0 {
                                let _ = lease.release();
                            } else {
                                lease.forget();
                            }
                        }
                        Err(e) if e.kind() == ErrorKind::NotAcquired => {}
                        Err(e) => panic!("{e}"),
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }

    // The server's record: per key, fences in grant (commit) order.
    let mut fences = Vec::new();
    let mut tokens = HashSet::new();
    for m in db
        .simple_query(&format!("SELECT token, fence FROM {log} ORDER BY seq"))
        .unwrap()
    {
        if let SimpleQueryMessage::Row(r) = m {
            // Extends and the fence draw log a token again: its first entry is its grant.
            if tokens.insert(r.get(0).unwrap().to_owned()) {
                fences.push(r.get(1).unwrap().parse::<u64>().unwrap());
            }
        }
    }
    let out_of_order = fences.windows(2).filter(|w| w[1] <= w[0]).count();
    let seen = seen.lock().unwrap().clone();
    eprintln!(
        "{} grants by {THREADS} threads in {RUN:?}; {} logged by the server; {out_of_order} out of grant order",
        seen.len(),
        fences.len()
    );
    assert!(seen.len() > 100, "too few grants to race: {}", seen.len());
    assert_eq!(out_of_order, 0, "fences out of grant order: {fences:?}");

    // Fence order (`docs/semantics.md` §2) as a client sees it: an acquisition that began after another returned has the
    // larger fence.
    let mut by_return = seen.clone();
    by_return.sort_by_key(|s| s.1);
    let mut violations = 0;
    for &(began, _, fence) in &seen {
        let before = by_return.partition_point(|s| s.1 < began);
        if let Some(max) = by_return[..before].iter().map(|s| s.2).max() {
            if fence <= max {
                violations += 1;
            }
        }
    }
    assert_eq!(
        violations, 0,
        "fences not larger than earlier completed ones"
    );
    db.batch_execute(&format!(
        "DROP TABLE {log}; DROP TABLE {table}; DROP FUNCTION {log}_f()"
    ))
    .unwrap();
}
