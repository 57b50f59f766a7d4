//! One size per semaphore beyond the conformance check: acquirers of two sizes racing never hold
//! the semaphore under both at once (in both modes), and a permits table made by 0.2 (no `permits`
//! column) is upgraded at connect, its rows of unknown size binding nobody.

use leasehold_core::{Client, Config, ErrorKind};
use leasehold_postgres::PostgresBackend;
use leasehold_testkit::{unique_key, PostgresServer};
use postgres::NoTls;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(30);

fn client(query: &str) -> Client {
    let url = PostgresServer::shared().url_with(&format!("{query}&io_timeout_ms=5000"));
    let config = Config::parse(&url).expect("test URL");
    Client::new(PostgresBackend::connect(&config).expect("connect to the test PostgreSQL"))
}

/// Threads asking for 2 or 3 permits of one semaphore, over and over: a grant of one size while
/// the other is held would show in the counts of holders per size.
fn two_sizes_never_overlap(query: &str) {
    let key = unique_key("sem-two-sizes");
    let inside: Arc<[AtomicUsize; 2]> = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let granted = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let (client, key, inside, granted) =
                (client(query), key.clone(), inside.clone(), granted.clone());
            std::thread::spawn(move || {
                let (mine, other) = (t % 2, 1 - t % 2);
                let permits = 2 + mine as u32;
                for _ in 0..60 {
                    match client.try_acquire_permit(&key, permits, LONG) {
                        Ok(permit) => {
                            inside[mine].fetch_add(1, SeqCst);
                            assert_eq!(inside[other].load(SeqCst), 0, "two sizes held at once");
                            granted.fetch_add(1, SeqCst);
                            std::thread::yield_now();
                            inside[mine].fetch_sub(1, SeqCst);
                            permit.release().expect("release");
                        }
                        Err(e) => assert!(
                            matches!(
                                e.kind(),
                                ErrorKind::InvalidArgument | ErrorKind::NotAcquired
                            ),
                            "{e}"
                        ),
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("no overlap");
    }
    assert!(granted.load(SeqCst) > 0);
}

#[test]
fn advisory_two_sizes_never_overlap() {
    two_sizes_never_overlap("lock=advisory");
}

#[test]
fn table_two_sizes_never_overlap() {
    two_sizes_never_overlap("lock=table&table=two_sizes_locks");
}

#[test]
fn a_permits_table_of_0_2_gets_its_size_column() {
    let table = format!("old_size_locks_{}", std::process::id());
    let mut db = postgres::Client::connect(&PostgresServer::shared().url(), NoTls).unwrap();
    db.batch_execute(&format!(
        "CREATE TABLE {table}_permits (key bytea NOT NULL, token text NOT NULL, \
           fence bigint NOT NULL, expires_at timestamptz NOT NULL, PRIMARY KEY (key, token))"
    ))
    .unwrap();
    // A live permit of 0.2, its size unknown.
    let key = unique_key("sem-old");
    db.execute(
        &format!(
            "INSERT INTO {table}_permits VALUES (convert_to('leasehold:' || $1, 'UTF8'), \
               'old', 1, clock_timestamp() + interval '1 minute')"
        ),
        &[&key],
    )
    .unwrap();
    let query = format!("lock=table&table={table}");
    let (a, b) = (client(&query), client(&query));
    let has = db
        .query_one(
            "SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass($1) \
               AND attname = 'permits' AND NOT attisdropped",
            &[&format!("{table}_permits")],
        )
        .unwrap()
        .get::<_, i64>(0);
    assert_eq!(has, 1, "the column was added");
    // The old row counts as a holder but binds no size.
    let first = a.try_acquire_permit(&key, 3, LONG).expect("any size");
    assert_eq!(
        b.try_acquire_permit(&key, 4, LONG).unwrap_err().kind(),
        ErrorKind::InvalidArgument,
        "the new holder's size binds"
    );
    first.release().unwrap();
    // Connecting again finds the column and leaves the table alone.
    drop(client(&query));
    leasehold_core::conformance::run_semaphore_size(&|| client(&query));
}
