//! The Redis fence gate on a real redis-server: a newer or equal fence replaces the value, an older
//! one is refused and changes nothing, fences above 2^53 (where Lua's numbers stop being exact)
//! are still told apart, the script survives a SCRIPT FLUSH, and racing writers can never leave an
//! older fence's value behind a newer one.

use leasehold_core::ErrorKind;
use leasehold_redis::fence_gate::{get_fenced, set_fenced, Fenced, GateError, SCRIPT};
use leasehold_testkit::{unique_key, RedisServer};
use std::sync::OnceLock;

fn server() -> &'static RedisServer {
    static SERVER: OnceLock<RedisServer> = OnceLock::new();
    SERVER.get_or_init(RedisServer::start)
}

fn conn() -> redis::Connection {
    redis::Client::open(server().url())
        .unwrap()
        .get_connection()
        .expect("a connection")
}

fn stale(result: Result<(), GateError>) -> (u64, u64) {
    match result {
        Err(GateError::Stale { fence, stored, .. }) => (fence, stored),
        other => panic!("expected a stale refusal, got {other:?}"),
    }
}

fn fenced(value: &str, fence: u64) -> Option<Fenced> {
    Some(Fenced {
        value: value.as_bytes().to_vec(),
        fence,
    })
}

#[test]
fn newer_and_equal_fences_write_an_older_one_changes_nothing() {
    let mut c = conn();
    let key = unique_key("gate");
    assert_eq!(get_fenced(&mut c, &key).unwrap(), None);
    set_fenced(&mut c, &key, "v5", 5).unwrap();
    set_fenced(&mut c, &key, "v7", 7).unwrap();
    set_fenced(&mut c, &key, "v7 again", 7).expect("the same holder writing again");
    assert_eq!(stale(set_fenced(&mut c, &key, "late", 6)), (6, 7));
    assert_eq!(get_fenced(&mut c, &key).unwrap(), fenced("v7 again", 7));
    // Values are binary-safe.
    set_fenced(&mut c, &key, b"\0\xff", 8).unwrap();
    assert_eq!(get_fenced(&mut c, &key).unwrap().unwrap().value, b"\0\xff");
}

#[test]
fn fences_above_two_to_the_53_are_compared_exactly() {
    let mut c = conn();
    let key = unique_key("gate-big");
    let big = 1u64 << 53;
    set_fenced(&mut c, &key, "a", big + 1).unwrap();
    // As doubles both are 2^53: a numeric comparison would accept this one.
    assert_eq!(stale(set_fenced(&mut c, &key, "b", big)), (big, big + 1));
    set_fenced(&mut c, &key, "c", u64::MAX).unwrap();
    assert_eq!(
        stale(set_fenced(&mut c, &key, "d", u64::MAX - 1)),
        (u64::MAX - 1, u64::MAX)
    );
    // A shorter number is smaller whatever its digits.
    let key = unique_key("gate-len");
    set_fenced(&mut c, &key, "a", 10).unwrap();
    assert_eq!(stale(set_fenced(&mut c, &key, "b", 9)), (9, 10));
    assert_eq!(get_fenced(&mut c, &key).unwrap(), fenced("a", 10));
}

#[test]
fn the_script_is_loaded_again_after_a_flush() {
    let mut c = conn();
    let key = unique_key("gate-flush");
    set_fenced(&mut c, &key, "a", 1).unwrap();
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut c).unwrap();
    set_fenced(&mut c, &key, "b", 2).expect("NOSCRIPT answered by loading it");
    assert_eq!(stale(set_fenced(&mut c, &key, "c", 1)), (1, 2));
}

#[test]
fn bad_input_and_foreign_data_are_errors_not_writes() {
    let mut c = conn();
    for (key, fence) in [("", 1), ("k", 0)] {
        match set_fenced(&mut c, key, "v", fence) {
            Err(GateError::Backend(e)) => assert_eq!(e.kind(), ErrorKind::InvalidArgument),
            other => panic!("{key:?}/{fence}: {other:?}"),
        }
    }
    // Called directly (redis-cli, another language), the script checks the fence itself.
    let key = unique_key("gate-direct");
    for bad in [
        "0",
        "007",
        "-1",
        "1e3",
        "",
        "18446744073709551616",
        "123456789012345678901",
    ] {
        let reply: redis::RedisResult<redis::Value> = redis::cmd("EVAL")
            .arg(SCRIPT)
            .arg(1)
            .arg(&key)
            .arg("v")
            .arg(bad)
            .query(&mut c);
        assert!(reply.is_err(), "fence {bad:?} must be refused");
    }
    assert_eq!(get_fenced(&mut c, &key).unwrap(), None);

    // A key of another type, and a hash whose fence someone else wrote: refused, left alone.
    let list = unique_key("gate-list");
    let _: () = redis::cmd("RPUSH")
        .arg(&list)
        .arg("x")
        .query(&mut c)
        .unwrap();
    assert!(matches!(
        set_fenced(&mut c, &list, "v", 1),
        Err(GateError::Backend(_))
    ));
    let foreign = unique_key("gate-foreign");
    let _: () = redis::cmd("HSET")
        .arg(&foreign)
        .arg("fence")
        .arg("soon")
        .query(&mut c)
        .unwrap();
    assert!(matches!(
        set_fenced(&mut c, &foreign, "v", 1),
        Err(GateError::Backend(_))
    ));
    assert!(matches!(
        get_fenced(&mut c, &foreign),
        Err(GateError::Backend(_))
    ));
    let fence: String = redis::cmd("HGET")
        .arg(&foreign)
        .arg("fence")
        .query(&mut c)
        .unwrap();
    assert_eq!(fence, "soon");
}

/// Writers racing with fences of their own: whatever the interleaving, the hash ends with the
/// largest fence and the value written with it, and every refusal named a larger stored fence.
#[test]
fn racing_writers_leave_the_newest_value() {
    const WRITERS: u64 = 8;
    const EACH: u64 = 200;
    let key = unique_key("gate-race");
    std::thread::scope(|s| {
        for w in 0..WRITERS {
            let key = &key;
            s.spawn(move || {
                let mut c = conn();
                let mut rng = fastrand::Rng::with_seed(w);
                for _ in 0..EACH {
                    let fence = rng.u64(1..=WRITERS * EACH);
                    match set_fenced(&mut c, key, format!("w{w}:{fence}"), fence) {
                        Ok(()) => {}
                        Err(GateError::Stale { stored, .. }) => assert!(stored > fence),
                        Err(e) => panic!("{e}"),
                    }
                }
            });
        }
    });
    let end = get_fenced(&mut conn(), &key).unwrap().unwrap();
    let value = String::from_utf8(end.value).unwrap();
    assert!(
        value.ends_with(&format!(":{}", end.fence)),
        "{value} / {}",
        end.fence
    );
    let expected_max = (0..WRITERS)
        .map(|w| {
            let mut rng = fastrand::Rng::with_seed(w);
            (0..EACH)
                .map(|_| rng.u64(1..=WRITERS * EACH))
                .max()
                .unwrap()
        })
        .max()
        .unwrap();
    assert_eq!(end.fence, expected_max);
}

/// docs/gate.md shows the script for callers that are not Rust: it must be this one, word for word.
#[test]
fn the_documented_script_is_the_one_that_runs() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/gate.md"))
        .expect("docs/gate.md");
    assert!(
        doc.contains(SCRIPT.trim()),
        "docs/gate.md must show fence_gate::SCRIPT as it is"
    );
}
