//! The contract every backend keeps (leasehold-core's conformance suites), in both modes, against a
//! real MariaDB server that authenticates with a password.

use leasehold_core::{conformance, Client, Config};
use leasehold_mysql::MysqlBackend;
use leasehold_testkit::MariaDbServer;

/// A 5 s I/O timeout: on a loaded 2-core machine a first `CREATE TABLE` among many at once took over
/// 1 s; bounds are proven in tests/hang.rs.
fn client(query: &str) -> Client {
    let url = MariaDbServer::shared().url_with(&format!("{query}&io_timeout_ms=5000"));
    let config = Config::parse(&url).expect("test URL");
    Client::new(MysqlBackend::connect(&config).expect("connect to the test MariaDB"))
}

#[test]
fn named_conformance() {
    conformance::run(&|| client("lock=named"));
}

#[test]
fn table_conformance() {
    conformance::run(&|| client("lock=table&table=conformance_locks"));
}

#[test]
fn named_records() {
    conformance::run_records(&|| client("lock=named"));
    conformance::run_once(&|| client("lock=named"));
}

#[test]
fn table_records() {
    conformance::run_records(&|| client("lock=table&table=records_locks"));
    conformance::run_once(&|| client("lock=table&table=records_locks"));
}

#[test]
fn named_mutual_exclusion() {
    conformance::mutual_exclusion(&client("lock=named"), 8, 40);
}

#[test]
fn table_mutual_exclusion() {
    conformance::mutual_exclusion(&client("lock=table&table=exclusion_locks"), 8, 40);
}

#[test]
fn named_restore_is_refused() {
    conformance::run_restore_refused(&|| client("lock=named"), "lock=table");
}

#[test]
fn table_restore() {
    conformance::run_restore(&|| client("lock=table&table=restore_locks"));
}

#[test]
fn named_force_release() {
    conformance::run_force_release(&|| client("lock=named"));
}

#[test]
fn table_force_release() {
    conformance::run_force_release(&|| client("lock=table&table=force_locks"));
}

#[test]
fn table_shared() {
    conformance::run_shared(&|| client("lock=table&table=shared_locks"));
    conformance::run_promote(&|| client("lock=table&table=shared_locks"));
}

/// After a promote or a demote, restore, inspect and release see the key's rows as the new kind:
/// a promoted lease leaves no reader's row behind, and a demoted one's release frees its share.
#[test]
fn table_promote_rows() {
    use leasehold_core::LeaseKind;
    use std::time::Duration;
    let long = Duration::from_secs(30);
    let c = client("lock=table&table=promote_rows_locks");
    let k = b"promote-rows";
    let mut r = c.try_acquire_shared(k, long).unwrap();
    r.promote(Duration::ZERO).unwrap();
    let info = c.inspect(k).unwrap();
    assert_eq!(
        (info.holders, info.shared),
        (Some(1), Some(false)),
        "{info:?}"
    );
    let restored = c.restore(k, r.token().as_str()).unwrap();
    assert_eq!(restored.kind(), LeaseKind::Exclusive);
    assert_eq!(restored.fence(), r.fence());
    restored.forget();
    let token = r.token();
    r.release().unwrap();
    assert!(!c.inspect(k).unwrap().held);
    let e = c
        .restore(k, token.as_str())
        .map(|l| l.forget())
        .unwrap_err();
    assert_eq!(
        e.kind(),
        leasehold_core::ErrorKind::Lost,
        "no reader's row left behind"
    );
    c.try_acquire_shared(k, long).unwrap().release().unwrap();

    let mut w = c.try_acquire(k, long).unwrap();
    w.demote().unwrap();
    let info = c.inspect(k).unwrap();
    assert_eq!(
        (info.holders, info.shared),
        (Some(1), Some(true)),
        "{info:?}"
    );
    let restored = c.restore(k, w.token().as_str()).unwrap();
    assert_eq!(restored.kind(), LeaseKind::Shared);
    assert_eq!(restored.fence(), w.fence());
    restored.forget();
    w.extend(long).expect("extended as shared");
    w.release().unwrap();
    assert!(
        !c.inspect(k).unwrap().held,
        "the demoted lease's share is freed"
    );
    c.try_acquire(k, long)
        .expect("free at once")
        .release()
        .unwrap();
}

#[test]
fn named_refuses_promote() {
    let c = client("lock=named");
    let mut w = c
        .try_acquire(b"named-demote", std::time::Duration::from_secs(5))
        .unwrap();
    let e = w.demote().unwrap_err();
    assert_eq!(e.kind(), leasehold_core::ErrorKind::InvalidArgument, "{e}");
    assert!(e.to_string().contains("mysql-named"), "{e}");
    assert!(e.to_string().contains("lock=table"), "{e}");
    assert_eq!(w.kind(), leasehold_core::LeaseKind::Exclusive);
    w.release().unwrap();
}

#[test]
fn named_semaphore() {
    conformance::run_semaphore(&|| client("lock=named"));
    conformance::run_semaphore_size(&|| client("lock=named"));
}

#[test]
fn table_semaphore() {
    conformance::run_semaphore(&|| client("lock=table&table=semaphore_locks"));
    conformance::run_semaphore_size(&|| client("lock=table&table=semaphore_locks"));
}

#[test]
fn named_semaphore_limit() {
    conformance::semaphore_limit(&client("lock=named"), 3, 8, 50);
}

#[test]
fn table_semaphore_limit() {
    conformance::semaphore_limit(&client("lock=table&table=sem_limit_locks"), 3, 8, 50);
}

#[test]
fn named_refuses_shared_locks() {
    let c = client("lock=named");
    let e = c
        .try_acquire_shared(b"named-shared", std::time::Duration::from_secs(5))
        .unwrap_err();
    assert_eq!(e.kind(), leasehold_core::ErrorKind::InvalidArgument, "{e}");
    assert!(e.to_string().contains("lock=table"), "{e}");
}
