//! Least privilege: a role with only the grants table mode needs (the crate docs' GRANT lines,
//! used here verbatim) can lock, share, count permits, restore and force-release, and nothing
//! more: no DDL, no other table, no advisory force-release of other sessions.

use leasehold_core::{Client, Config, ErrorKind};
use leasehold_postgres::PostgresBackend;
use leasehold_testkit::{unique_key, PostgresServer};
use postgres::NoTls;
use std::time::Duration;

/// The crate docs' lines, with the table `lp_locks` and the role `lh_app`.
const GRANTS: &str = "
GRANT SELECT, INSERT, UPDATE, DELETE ON lp_locks, lp_locks_shares, lp_locks_permits TO lh_app;
GRANT USAGE ON SEQUENCE lp_locks_fence_seq TO lh_app;
";

fn connect(url: &str) -> leasehold_core::Result<Client> {
    PostgresBackend::connect(&Config::parse(url)?).map(Client::new)
}

#[test]
fn a_role_with_only_the_table_grants_can_lock_and_no_more() {
    let server = PostgresServer::shared();
    // The owner (here the superuser) creates the tables once, by connecting in table mode.
    connect(&server.url_with("lock=table&table=lp_locks")).expect("owner creates the tables");
    let mut admin = postgres::Client::connect(&server.url(), NoTls).unwrap();
    admin
        .batch_execute("DROP ROLE IF EXISTS lh_app; CREATE ROLE lh_app LOGIN;")
        .unwrap();
    admin.batch_execute(GRANTS).unwrap();
    let app_url = |query: &str| {
        format!(
            "postgres://lh_app@127.0.0.1:{}/postgres?{query}",
            server.port()
        )
    };
    let c = connect(&app_url("lock=table&table=lp_locks")).expect("lh_app connects");
    let key = unique_key("lp");
    let long = Duration::from_secs(20);
    let lease = c.try_acquire(&key, long).expect("lock");
    let restored = c.restore(&key, lease.token().as_str()).expect("restore");
    restored.release().expect("release");
    lease.forget();
    let r1 = c.try_acquire_shared(&key, long).expect("shared");
    let r2 = c.try_acquire_shared(&key, long).expect("shared");
    assert!(c.force_release(&key).expect("force_release"));
    drop((r1, r2));
    let w = c
        .acquire(&key, long, Duration::from_secs(2))
        .expect("wait and lock");
    w.release().unwrap();
    let p = c
        .acquire_permit(&key, 2, long, Duration::from_secs(2))
        .expect("permit");
    assert_eq!(c.inspect_semaphore(&key).unwrap().holders, Some(1));
    p.release().unwrap();

    // And no more.
    let mut app = postgres::Client::connect(&app_url(""), NoTls).unwrap();
    for sql in [
        "DROP TABLE lp_locks",
        "TRUNCATE lp_locks",
        "CREATE TABLE lp_other (x int)",
        "ALTER TABLE lp_locks ADD COLUMN x int",
        "SELECT setval('lp_locks_fence_seq', 1)",
    ] {
        let e = app.batch_execute(sql).expect_err(sql);
        assert_eq!(e.code().map(|c| c.code()), Some("42501"), "{sql}: {e:?}");
    }
    let e = connect(&app_url("lock=table&table=lp_missing")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.to_string().contains("permission denied"), "{e}");

    // Advisory force-release of another role's session needs pg_signal_backend, and says so.
    let holder = connect(&server.url_with("lock=advisory")).unwrap();
    admin
        .batch_execute("GRANT USAGE ON SEQUENCE leasehold_fence TO lh_app")
        .unwrap();
    let adv = holder.try_acquire(&key, long).unwrap();
    let app_adv = connect(&app_url("lock=advisory")).expect("lh_app in advisory mode");
    let e = app_adv.force_release(&key).unwrap_err();
    assert!(e.to_string().contains("pg_signal_backend"), "{e}");
    assert!(holder.inspect(&key).unwrap().held);
    adv.release().unwrap();
}
