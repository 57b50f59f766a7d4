//! A permits table made by 0.2 (no `permits` column) is upgraded at connect, its rows of unknown
//! size binding nobody. (Racing sizes are in the conformance suite: `run_semaphore_size`.)

use leasehold_core::{Client, Config, ErrorKind};
use leasehold_postgres::PostgresBackend;
use leasehold_testkit::{unique_key, PostgresServer};
use postgres::NoTls;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(30);

fn client(query: &str) -> Client {
    let url = PostgresServer::shared().url_with(&format!("{query}&io_timeout_ms=5000"));
    let config = Config::parse(&url).expect("test URL");
    Client::new(PostgresBackend::connect(&config).expect("connect to the test PostgreSQL"))
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
