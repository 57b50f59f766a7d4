//! A grant survives a crash of the server even where the server's own setting would not make it
//! durable: table mode commits with `synchronous_commit = on` whatever the role, database or
//! server says. Uses a server of its own (it crashes it).

use leasehold_core::{Client, Config, Key, LockBackend};
use leasehold_postgres::PostgresBackend;
use leasehold_testkit::{unique_key, PostgresServer};
use postgres::NoTls;
use std::time::Duration;

#[test]
fn a_grant_and_a_record_survive_a_crash_under_asynchronous_commit() {
    let mut server = PostgresServer::start();
    let mut admin = postgres::Client::connect(&server.url(), NoTls).unwrap();
    // A role whose transactions commit asynchronously, and a WAL writer that writes them out only
    // every 10 s: a crash loses what such a transaction committed just before it.
    for sql in [
        "CREATE ROLE async_user LOGIN SUPERUSER",
        "ALTER ROLE async_user SET synchronous_commit = off",
        "ALTER SYSTEM SET wal_writer_delay = '10s'",
        "SELECT pg_reload_conf()",
    ] {
        admin.batch_execute(sql).unwrap();
    }
    let url = format!(
        "postgres://async_user@127.0.0.1:{}/postgres?lock=table&table=durable_locks&pooler=none",
        server.port()
    );
    let connect = || PostgresBackend::connect(&Config::parse(&url).unwrap()).unwrap();
    let client = Client::new(connect());
    let backend = connect();
    let records = backend.records().expect("records in table mode");
    // The tables exist durably before the grant (a commit that creates a relation is flushed
    // whatever the setting, and would take the grant's commit with it).
    let first = Key::new(unique_key("durable-first")).unwrap();
    assert!(records
        .put(&first, 1, b"first", Duration::from_secs(120))
        .unwrap());
    admin.batch_execute("CHECKPOINT").unwrap();
    drop(admin);

    let key = unique_key("durable");
    let lease = client.try_acquire(&key, Duration::from_secs(120)).unwrap();
    let fence = lease.fence();
    let recorded = Key::new(unique_key("durable-record")).unwrap();
    assert!(records
        .put(&recorded, fence, b"kept", Duration::from_secs(120))
        .unwrap());
    lease.forget();
    server.kill();
    server.start_again();

    let backend = connect();
    let info = backend
        .inspect(
            &Key::new(&key).unwrap(),
            leasehold_core::LeaseKind::Exclusive,
        )
        .unwrap();
    assert!(info.held, "the grant survived the crash");
    assert_eq!(info.fence, Some(fence), "with its fence");
    let got = backend.records().unwrap().get(&recorded).unwrap();
    assert_eq!(
        got.map(|r| r.value),
        Some(b"kept".to_vec()),
        "the record too"
    );
}
