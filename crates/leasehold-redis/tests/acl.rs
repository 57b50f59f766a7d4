//! Least privilege on Redis: the `ACL SETUSER` line of the README's security section (this file's
//! [`ACL_SETUSER`], the very string) gives a user exactly what Leasehold needs: the prefix's keys
//! and the commands it sends (and its scripts call). The whole conformance suite runs as that
//! user, and the user can touch no other key and run no administrative command, not even from a
//! script.

mod common;

use leasehold_core::{conformance, Client};
use leasehold_redis::RedlockBackend;
use leasehold_testkit::{RedisCluster, RedisServer};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// The line of `/work/notes/security.md` (README, "Security"), `<password>` standing for the
/// user's password. Keys: the prefix's (`leasehold:` by default; with another `prefix=`, change
/// `~leasehold:*` to match). Commands: what Leasehold sends itself (PING, EVALSHA and SCRIPT LOAD
/// for its scripts, BLPOP for waiters, WAIT for `replicas=N`, ROLE for Sentinel's master check,
/// CLUSTER SLOTS and ASKING for Cluster) and what its scripts call. AUTH, HELLO's AUTH and the
/// connection commands need no grant; INFO is optional (without it the server is taken to be
/// Redis ≥ 6); SELECT only for a db other than 0.
pub const ACL_SETUSER: &str = "ACL SETUSER leasehold reset on ><password> ~leasehold:* \
    resetchannels -@all +ping +evalsha +script|load +blpop +wait +role +cluster|slots +asking \
    +get +set +del +exists +pexpire +pttl +time +rpush +ltrim \
    +hget +hset +hdel +hexists +hincrby +hlen \
    +zadd +zcard +zcount +zrange +zrangebyscore +zrank +zrem +zremrangebyscore +zscore";

const PASSWORD: &str = "Acl-Secret-17";
const ADMIN_PASSWORD: &str = "Acl-Admin-17";

fn setuser_args(password: &str) -> Vec<String> {
    ACL_SETUSER
        .replace("<password>", password)
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

fn apply_acl(server: &RedisServer) {
    let args = setuser_args(PASSWORD);
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    let reply = server.command(&args);
    assert!(reply.starts_with("+OK"), "ACL SETUSER: {reply}");
}

fn resp(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// One command as the restricted user, on a fresh connection: the reply after AUTH's.
fn as_user(port: u16, args: &[&[u8]]) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut req = resp(&[b"AUTH", b"leasehold", PASSWORD.as_bytes()]);
    req.extend(resp(args));
    s.write_all(&req).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    // AUTH's +OK, then the reply: one line, two for a bulk string (all these tests need).
    let whole = |out: &[u8]| {
        let text = String::from_utf8_lossy(out);
        let lines = text.matches("\r\n").count();
        let second = text.split("\r\n").nth(1).unwrap_or_default();
        lines >= if second.starts_with('$') { 3 } else { 2 }
    };
    while !whole(&out) {
        let n = s.read(&mut buf).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&out).into_owned();
    let (auth, rest) = text.split_once("\r\n").unwrap_or((&text, ""));
    assert_eq!(auth, "+OK", "AUTH as the restricted user: {text}");
    rest.to_owned()
}

fn denied(port: u16, args: &[&[u8]]) {
    let reply = as_user(port, args);
    // A script's own call to a forbidden key is refused with an ERR that says so.
    assert!(
        reply.starts_with("-NOPERM")
            || (reply.starts_with("-ERR") && reply.contains("can't access"))
            || (reply.starts_with("-ERR") && reply.contains("can't run this command")),
        "{:?} must be refused, got {reply:?}",
        args.iter()
            .map(|a| String::from_utf8_lossy(a))
            .collect::<Vec<_>>()
    );
}

fn user_url(server: &RedisServer, scheme: &str) -> String {
    format!(
        "{scheme}://leasehold:{PASSWORD}@127.0.0.1:{}",
        server.port()
    )
}

fn checks_the_user_is_confined(server: &RedisServer) {
    let port = server.port();
    assert_eq!(as_user(port, &[b"PING"]), "+PONG\r\n");
    // Other keys, directly and from scripts (which run under the caller's ACL).
    denied(port, &[b"SET", b"other:key", b"x"]);
    denied(port, &[b"GET", b"other:key"]);
    denied(port, &[b"DEL", b"other:key"]);
    let sha = as_user(
        port,
        &[
            b"SCRIPT",
            b"LOAD",
            b"return redis.call('SET', 'other:key', 'x')",
        ],
    );
    let sha = sha.lines().nth(1).unwrap_or_default().to_owned();
    assert_eq!(sha.len(), 40, "SCRIPT LOAD reply {sha:?}");
    denied(port, &[b"EVALSHA", sha.as_bytes(), b"0"]);
    let flush = as_user(
        port,
        &[b"SCRIPT", b"LOAD", b"return redis.call('FLUSHALL')"],
    );
    let flush = flush.lines().nth(1).unwrap_or_default().to_owned();
    denied(port, &[b"EVALSHA", flush.as_bytes(), b"0"]);
    // Administration and enumeration.
    for cmd in [
        &[&b"FLUSHALL"[..]][..],
        &[b"FLUSHDB"],
        &[b"CONFIG", b"GET", b"*"],
        &[b"CONFIG", b"SET", b"maxmemory-policy", b"allkeys-lru"],
        &[b"KEYS", b"*"],
        &[b"SCAN", b"0"],
        &[b"EVAL", b"return 1", b"0"],
        &[b"SCRIPT", b"FLUSH"],
        &[b"ACL", b"SETUSER", b"leasehold", b"+@all"],
        &[b"SHUTDOWN"],
        &[b"CLIENT", b"KILL", b"TYPE", b"normal"],
        &[b"MONITOR"],
        &[b"PUBLISH", b"c", b"m"],
    ] {
        denied(port, cmd);
    }
    // Nothing was written outside the prefix.
    assert_eq!(server.command(&[b"EXISTS", b"other:key"]).trim(), ":0");
}

#[test]
fn the_whole_contract_runs_as_the_restricted_user_who_can_touch_nothing_else() {
    let server = RedisServer::start_with_password(ADMIN_PASSWORD);
    apply_acl(&server);
    let url = user_url(&server, "redis");
    conformance::run(&|| common::client(&url));
    conformance::run_shared(&|| common::client(&url));
    conformance::run_semaphore(&|| common::client(&url));
    conformance::run_restore(&|| common::client(&url));
    conformance::run_force_release(&|| common::client(&url));
    conformance::run_records(&|| common::client(&url));
    conformance::mutual_exclusion(&common::client(&url), 4, 50);
    // `replicas=N` (WAIT), with no replica: refused for want of acknowledgements, not for want of
    // the WAIT grant.
    let waiting = common::client(&format!("{url}?replicas=1&replicas_timeout_ms=50"));
    let e = waiting
        .try_acquire("acl-wait", Duration::from_secs(5))
        .unwrap_err();
    assert!(!e.to_string().contains("NOPERM"), "{e}");
    assert!(!e.to_string().contains(PASSWORD), "{e}");
    checks_the_user_is_confined(&server);
}

#[test]
fn redlock_runs_as_the_restricted_user() {
    let nodes: Vec<RedisServer> = (0..3)
        .map(|_| RedisServer::start_with_password(ADMIN_PASSWORD))
        .collect();
    nodes.iter().for_each(apply_acl);
    let hosts: Vec<String> = nodes.iter().map(RedisServer::addr).collect();
    let url = format!("redlock://leasehold:{PASSWORD}@{}", hosts.join(","));
    let connect = || {
        let config = leasehold_core::Config::parse(&url).unwrap();
        Client::new(RedlockBackend::connect(&config).unwrap())
    };
    conformance::run(&connect);
    conformance::run_shared(&connect);
    conformance::run_semaphore(&connect);
    checks_the_user_is_confined(&nodes[0]);
}

#[test]
fn a_cluster_runs_as_the_restricted_user() {
    let cluster = RedisCluster::start(3, 2000);
    for node in cluster.nodes() {
        apply_acl(node);
    }
    let seeds: Vec<String> = cluster.nodes().iter().map(RedisServer::addr).collect();
    // The prefix carries the hash tag; the keys still start with `leasehold:`.
    let url = format!(
        "redis+cluster://leasehold:{PASSWORD}@{}?prefix=leasehold:{{l}}:",
        seeds.join(",")
    );
    conformance::run(&|| common::client(&url));
    conformance::run_shared(&|| common::client(&url));
    let master = cluster
        .nodes()
        .iter()
        .find(|n| n.command(&[b"ROLE"]).contains("master"))
        .unwrap();
    denied(master.port(), &[b"FLUSHALL"]);
    denied(master.port(), &[b"CLUSTER", b"RESET"]);
}

#[test]
fn a_wrong_password_for_the_user_is_unavailable_and_not_quoted() {
    let server = RedisServer::start_with_password(ADMIN_PASSWORD);
    apply_acl(&server);
    let url = format!(
        "redis://leasehold:Not-{PASSWORD}@127.0.0.1:{}",
        server.port()
    );
    let e = common::connect(&url).unwrap_err();
    assert_eq!(e.kind(), leasehold_core::ErrorKind::Unavailable, "{e}");
    assert!(!e.to_string().contains(PASSWORD), "{e}");
}

/// Finds which grants the suites need on one server: drops each `+command` of [`ACL_SETUSER`] in
/// turn and reports the ones without which some check fails. Slow (a suite per grant), so run by
/// hand when the scripts change: `cargo test -p leasehold-redis --test acl -- --ignored --nocapture`.
/// ROLE, CLUSTER SLOTS, ASKING and WAIT show as unneeded here: only Sentinel, Cluster and
/// `replicas=N` send them.
#[test]
#[ignore = "slow: a suite per grant; run by hand when the scripts change"]
fn which_grants_are_needed() {
    let grants: Vec<String> = setuser_args(PASSWORD)
        .into_iter()
        .filter(|a| a.starts_with('+'))
        .collect();
    let mut needed = Vec::new();
    for grant in &grants {
        let server = RedisServer::start_with_password(ADMIN_PASSWORD);
        let args: Vec<String> = setuser_args(PASSWORD)
            .into_iter()
            .filter(|a| a != grant)
            .collect();
        let refs: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        assert!(server.command(&refs).starts_with("+OK"));
        let url = user_url(&server, "redis");
        let passed = std::panic::catch_unwind(|| {
            conformance::run(&|| common::client(&url));
            conformance::run_shared(&|| common::client(&url));
            conformance::run_semaphore(&|| common::client(&url));
            conformance::run_restore(&|| common::client(&url));
            conformance::run_force_release(&|| common::client(&url));
        })
        .is_ok();
        eprintln!(
            "without {grant}: {}",
            if passed { "passes" } else { "FAILS" }
        );
        if !passed {
            needed.push(grant.clone());
        }
    }
    eprintln!("needed on one server: {needed:?}");
}
