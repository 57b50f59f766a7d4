//! What the URL configures on the server side: AUTH (password and ACL user), the db number, the key
//! prefix, and the scripts' survival of `SCRIPT FLUSH`.

mod common;

use leasehold_core::ErrorKind;
use leasehold_testkit::{unique_key, RedisServer};
use std::time::Duration;

const LONG: Duration = Duration::from_secs(30);
const PASSWORD: &str = "s3cret-Pa55:w@rd";

fn encoded(pw: &str) -> String {
    pw.replace('%', "%25")
        .replace(':', "%3A")
        .replace('@', "%40")
}

/// The lock key of `key` under `prefix` (ASCII here, so it is its own KEYS pattern).
fn lock_name(prefix: &str, key: &str) -> String {
    let key = leasehold_core::Key::new(key.as_bytes()).unwrap();
    String::from_utf8(leasehold_redis::keys::namespaced(prefix, b"l:", &key)).unwrap()
}

#[test]
fn auth_with_a_password_works_and_a_wrong_one_is_unavailable_without_the_password() {
    let server = RedisServer::start_with_password("right-one");
    let base = format!("127.0.0.1:{}", server.port());
    let ok = common::client(&format!("redis://:right-one@{base}"));
    ok.try_acquire(unique_key("auth"), LONG)
        .unwrap()
        .release()
        .unwrap();

    for url in [
        format!(
            "redis://:{}@{base}?connect_timeout_ms=500",
            encoded(PASSWORD)
        ),
        format!(
            "redis://default:{}@{base}?connect_timeout_ms=500",
            encoded(PASSWORD)
        ),
        format!("redis://{base}?connect_timeout_ms=500"),
    ] {
        let err = common::connect(&url).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
        let text = format!("{err} {err:?}");
        eprintln!("{err}");
        for secret in [PASSWORD, &encoded(PASSWORD), "Pa55"] {
            assert!(!text.contains(secret), "password in error: {text}");
        }
    }
}

#[test]
fn acl_user_and_password() {
    let server = RedisServer::start_with_password("admin-pw");
    let reply = server.command(&[
        b"ACL",
        b"SETUSER",
        b"worker",
        b"on",
        b">worker-pw",
        b"~*",
        b"+@all",
    ]);
    assert!(reply.starts_with("+OK"), "{reply}");
    let base = format!("127.0.0.1:{}", server.port());
    let worker = common::client(&format!("redis://worker:worker-pw@{base}"));
    let lease = worker.try_acquire(unique_key("acl"), LONG).unwrap();
    lease.release().unwrap();
    let err = common::connect(&format!("redis://worker:admin-pw@{base}")).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert!(!err.to_string().contains("admin-pw"), "{err}");
}

#[test]
fn db_number_and_prefix_isolate_keys() {
    let server = RedisServer::start();
    let port = server.port();
    let db0 = common::client(&format!("redis://127.0.0.1:{port}/0"));
    let db3 = common::client(&format!("redis://127.0.0.1:{port}/3"));
    let app1 = common::client(&format!("redis://127.0.0.1:{port}/0?prefix=app1:"));
    let app1_again = common::client(&format!("redis://127.0.0.1:{port}/0?prefix=app1:"));
    let key = unique_key("iso");
    let held: Vec<_> = [&db0, &db3, &app1]
        .iter()
        .map(|c| {
            c.try_acquire(&key, LONG)
                .expect("different db or prefix: no contention")
        })
        .collect();
    assert_eq!(
        app1_again.try_acquire(&key, LONG).unwrap_err().kind(),
        ErrorKind::NotAcquired
    );
    assert_eq!(
        common::count_keys(&server, &lock_name("app1:", &key)),
        1,
        "the prefix is in front of every key"
    );
    assert_eq!(
        common::count_keys(&server, &lock_name("leasehold:", &key)),
        1
    );
    assert_eq!(
        common::dbsize(&server),
        6,
        "db 0 holds two locks, their fences and each prefix's fence high-water; db 3 the rest"
    );
    for lease in held {
        lease.release().unwrap();
    }
}

#[test]
fn operations_survive_script_flush() {
    let server = RedisServer::start();
    let a = common::client(&server.url());
    let key = unique_key("noscript");
    let mut lease = a.try_acquire(&key, LONG).unwrap();
    let flush = || assert!(server.command(&[b"SCRIPT", b"FLUSH"]).starts_with("+OK"));
    flush();
    lease.extend(LONG).expect("extend reloads its script");
    flush();
    assert!(a.inspect(&key).expect("inspect reloads its script").held);
    flush();
    lease.release().expect("release reloads its script");
    flush();
    let again = a
        .try_acquire(&key, LONG)
        .expect("acquire reloads its script");
    assert!(again.fence() > 1);
    flush();
    drop(again);
    assert!(!a.inspect(&key).unwrap().held);
}
