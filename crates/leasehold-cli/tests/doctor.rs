//! `leasehold doctor` against real servers in good and bad configurations: its verdicts, the
//! setting each names, its exit status, its JSON, and that it never prints a password. Where a
//! verdict is about a crash, the crash is made too, under that setting, and the lease is looked
//! for afterwards.

mod support;

use leasehold_testkit::{
    free_port, unique_key, EtcdCluster, MariaDbServer, PostgresServer, RedisCluster, RedisSentinel,
    RedisServer, TempDir, MARIADB_PASSWORD,
};
use serde_json::Value;
use std::time::Duration;
use support::*;

/// `leasehold doctor URL --json`: the exit status and the parsed report.
fn doctor(url: &str) -> (i32, Value) {
    let mut cmd = bin();
    cmd.args(["doctor", "--json", url]);
    let out = output(cmd);
    let text = stdout(&out);
    let report: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}; stderr: {}", stderr(&out)));
    (code(&out), report)
}

/// The verdict and reason of the promise `name`.
fn promise(report: &Value, name: &str) -> (String, String) {
    let p = report["promises"]
        .as_array()
        .expect("promises")
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no promise {name} in {report}"));
    (
        p["verdict"].as_str().unwrap().to_owned(),
        p["because"].as_str().unwrap().to_owned(),
    )
}

fn assert_verdict(report: &Value, name: &str, verdict: &str, because: &str) {
    let (got, why) = promise(report, name);
    assert_eq!(got, verdict, "{name}: {why}\n{report:#}");
    assert!(why.contains(because), "{name}: {why:?} lacks {because:?}");
}

/// Every promise, in the contract's order, each with a verdict and a reason.
fn assert_shape(report: &Value, backend: &str) {
    assert_eq!(report["backend"], backend, "{report:#}");
    let names: Vec<&str> = report["promises"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "exclusion",
            "fence_order",
            "bounded_calls",
            "survives_restart",
            "survives_failover",
            "session_end_seen"
        ]
    );
    for p in report["promises"].as_array().unwrap() {
        assert!(
            ["holds", "holds_if", "does_not_hold"].contains(&p["verdict"].as_str().unwrap()),
            "{p}"
        );
        assert!(!p["because"].as_str().unwrap().is_empty(), "{p}");
    }
    assert!(report["facts"].is_object(), "{report:#}");
    assert!(report["url"].is_string(), "{report:#}");
}

#[test]
fn local_files_hold_every_promise_in_text_and_json() {
    let dir = TempDir::new("doctor-local");
    let (status, report) = doctor(&dir.file_url());
    assert_eq!(status, 0, "{report:#}");
    assert_shape(&report, "local");
    assert_verdict(&report, "exclusion", "holds", "is local to this host");
    assert!(report["facts"]["file_system"].is_string(), "{report:#}");

    let out = leasehold(&dir.file_url(), &["doctor"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].ends_with("(local)"), "{text}");
    for (line, name) in lines[1..7].iter().zip([
        "exclusion",
        "fence_order",
        "bounded_calls",
        "survives_restart",
        "survives_failover",
        "session_end_seen",
    ]) {
        assert!(line.starts_with(name), "{line:?}");
        assert!(line.contains(" holds "), "{line:?}");
    }
    assert_eq!(lines[7], "facts:", "{text}");
}

#[test]
fn a_deployment_connect_refuses_is_judged_not_refused() {
    // A lock directory its group may write: anyone in the group could take or free every lock.
    let dir = TempDir::new("doctor-refused");
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o770),
    )
    .unwrap();
    let refused = leasehold(&dir.file_url(), &["status", "k"]);
    assert_eq!(code(&refused), 64, "{}", stderr(&refused));
    let (status, report) = doctor(&dir.file_url());
    assert_eq!(status, 2, "{report:#}");
    assert_shape(&report, "local");
    assert_verdict(
        &report,
        "exclusion",
        "does_not_hold",
        "connect refuses this deployment",
    );
    assert_verdict(
        &report,
        "exclusion",
        "does_not_hold",
        "writable by its group",
    );
}

#[test]
fn redis_with_noeviction_and_aof_always_holds_and_keeps_a_lease_across_a_crash() {
    let mut server = RedisServer::start_with_args(
        None,
        ["--appendonly", "yes", "--appendfsync", "always"]
            .map(String::from)
            .to_vec(),
    );
    let (status, report) = doctor(&server.url());
    assert_eq!(status, 0, "{report:#}");
    assert_shape(&report, "redis");
    assert_verdict(&report, "exclusion", "holds", "maxmemory-policy=noeviction");
    assert_verdict(&report, "survives_restart", "holds", "appendfsync=always");
    assert_verdict(&report, "survives_failover", "holds", "no replicas");
    assert_verdict(
        &report,
        "session_end_seen",
        "holds",
        "keys, not in sessions",
    );
    assert_verdict(&report, "fence_order", "holds", "clock");
    assert_eq!(report["facts"]["tls"], "off", "{report:#}");

    // The crash the verdict is about: SIGKILL, then the same directory again.
    let key = unique_key("doctor-aof");
    let lease = leasehold::connect(&server.url())
        .unwrap()
        .try_acquire(&key, Duration::from_secs(60))
        .unwrap();
    server.restart();
    let after = leasehold::connect(&server.url())
        .unwrap()
        .inspect(&key)
        .unwrap();
    assert!(
        after.held,
        "the lease did not survive a crash with appendfsync=always"
    );
    assert_eq!(after.fence, Some(lease.fence()));
    std::mem::forget(lease);
}

/// A server only this version has used reports no client of another version, whatever its keys
/// went through: leases released, held, expired and force-released, shared and counted ones. A
/// fence key this version leaves behind (a force-release leaves it to expire with the lease) is not
/// taken for 0.3's counter; what a real 0.3 client leaves is counted in tests/rolling_upgrade.rs.
#[test]
fn redis_used_by_this_version_alone_sees_no_other_version() {
    let server = RedisServer::start();
    let client = leasehold::connect(&server.url()).unwrap();
    let ttl = Duration::from_secs(60);
    for _ in 0..3 {
        let key = unique_key("doctor-versions");
        client.try_acquire(&key, ttl).unwrap().release().unwrap();
        let key = unique_key("doctor-versions-shared");
        let a = client.try_acquire_shared(&key, ttl).unwrap();
        let b = client.try_acquire_shared(&key, ttl).unwrap();
        a.release().unwrap();
        b.release().unwrap();
        let key = unique_key("doctor-versions-permit");
        client
            .try_acquire_permit(&key, 2, ttl)
            .unwrap()
            .release()
            .unwrap();
    }
    let held = client
        .try_acquire(unique_key("doctor-versions-held"), ttl)
        .unwrap();
    let permit = client
        .try_acquire_permit(unique_key("doctor-versions-held-permit"), 3, ttl)
        .unwrap();
    let expired = client
        .try_acquire(
            unique_key("doctor-versions-expired"),
            Duration::from_millis(100),
        )
        .unwrap();
    let forced = unique_key("doctor-versions-forced");
    let gone = client.try_acquire(&forced, ttl).unwrap();
    assert!(client.force_release(&forced).unwrap());
    std::thread::sleep(Duration::from_millis(200));

    let (status, report) = doctor(&server.url());
    assert_eq!(status, 2, "no persistence: {report:#}");
    assert_eq!(report["facts"]["other_versions"], "none seen", "{report:#}");
    let scan = report["facts"]["other_versions_scan"].as_str().unwrap();
    assert!(scan.starts_with("every key scanned: "), "{scan}");
    assert_verdict(
        &report,
        "fence_order",
        "holds",
        "no 0.3 client's fence counter",
    );
    let text = leasehold(&server.url(), &["doctor"]);
    assert!(
        stdout(&text).contains("  other_versions: none seen\n"),
        "{}",
        stdout(&text)
    );
    drop((held, permit, expired));
    std::mem::forget(gone);
}

/// The scan for other versions' keys is bounded: on a server with more keys than its pages cover
/// it says so, and judges fence order `holds_if`, not `holds`.
#[test]
fn redis_with_more_keys_than_the_scan_covers_says_so() {
    let server = RedisServer::start();
    let reply = server.command(&[
        b"EVAL",
        b"for i = 1, 300000 do redis.call('SET', 'leasehold:{0123456789abcdef}l:k' .. i, 'x') end",
        b"0",
    ]);
    assert!(!reply.starts_with('-'), "{reply}");
    let started = std::time::Instant::now();
    let (_, report) = doctor(&server.url());
    let took = started.elapsed();
    eprintln!(
        "doctor on 300,000 lease keys: {:.2} s; {}",
        took.as_secs_f64(),
        report["facts"]["other_versions_scan"]
    );
    assert_eq!(
        report["facts"]["other_versions"], "none seen in the keys scanned",
        "{report:#}"
    );
    let scan = report["facts"]["other_versions_scan"].as_str().unwrap();
    assert!(
        scan.starts_with("scan stopped after 200 SCAN calls"),
        "{scan}"
    );
    assert_verdict(&report, "fence_order", "holds_if", "not every key was");
}

#[test]
fn redis_evicting_under_a_memory_limit_does_not_hold_exclusion() {
    let server = RedisServer::start_with_args(
        None,
        ["--maxmemory", "100mb", "--maxmemory-policy", "volatile-lru"]
            .map(String::from)
            .to_vec(),
    );
    let (status, report) = doctor(&server.url());
    assert_eq!(status, 2, "{report:#}");
    assert_verdict(
        &report,
        "exclusion",
        "does_not_hold",
        "maxmemory-policy=volatile-lru",
    );
    assert_eq!(report["facts"]["maxmemory_policy"], "volatile-lru");

    // The same policy without a limit never evicts.
    server.command(&[b"CONFIG", b"SET", b"maxmemory", b"0"]);
    let (_, report) = doctor(&server.url());
    assert_verdict(&report, "exclusion", "holds", "maxmemory=0");
}

#[test]
fn redis_without_persistence_loses_leases_on_restart_and_never_prints_its_password() {
    const PASSWORD: &str = "doctor-pw-9f3e";
    let mut server = RedisServer::start_with_password(PASSWORD);
    let url = server.url();
    assert!(url.contains(PASSWORD), "{url}");
    let mut cmd = bin();
    cmd.args(["doctor", "--json", &url]);
    let out = output(cmd);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let all = format!("{}{}", stdout(&out), stderr(&out));
    assert!(!all.contains(PASSWORD), "{all}");
    let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert!(
        report["url"].as_str().unwrap().contains("***"),
        "{report:#}"
    );
    assert_verdict(
        &report,
        "survives_restart",
        "does_not_hold",
        "appendonly=no and no RDB save points",
    );
    let text = leasehold(&url, &["doctor"]);
    assert!(!format!("{}{}", stdout(&text), stderr(&text)).contains(PASSWORD));

    // The crash the verdict is about: the lease is gone after it.
    let key = unique_key("doctor-nopersist");
    let lease = leasehold::connect(&url)
        .unwrap()
        .try_acquire(&key, Duration::from_secs(60))
        .unwrap();
    server.restart();
    let after = leasehold::connect(&url).unwrap().inspect(&key).unwrap();
    assert!(!after.held, "a server without persistence kept the lease");
    std::mem::forget(lease);
}

#[test]
fn redis_with_appendfsync_everysec_holds_if_the_host_does_not_crash() {
    let mut server = RedisServer::start_with_args(
        None,
        ["--appendonly", "yes", "--appendfsync", "everysec"]
            .map(String::from)
            .to_vec(),
    );
    let (status, report) = doctor(&server.url());
    assert_eq!(status, 1, "{report:#}");
    assert_verdict(
        &report,
        "survives_restart",
        "holds_if",
        "appendfsync=everysec",
    );

    // What it still promises: a crash of the process (its writes are in the kernel already).
    let key = unique_key("doctor-everysec");
    let lease = leasehold::connect(&server.url())
        .unwrap()
        .try_acquire(&key, Duration::from_secs(60))
        .unwrap();
    server.restart();
    let after = leasehold::connect(&server.url())
        .unwrap()
        .inspect(&key)
        .unwrap();
    assert!(
        after.held,
        "a crash of redis-server lost a lease with appendfsync=everysec"
    );
    assert_eq!(after.fence, Some(lease.fence()));
    std::mem::forget(lease);
}

#[test]
fn redis_that_denies_info_and_config_is_judged_holds_if() {
    // Managed services forbid CONFIG, and an ACL may deny INFO too.
    let server = RedisServer::start();
    let reply = server.command(&[
        b"ACL",
        b"SETUSER",
        b"doctor",
        b"on",
        b">doctor-pw",
        b"~*",
        b"&*",
        b"+@all",
        b"-info",
        b"-config",
    ]);
    assert_eq!(reply, "+OK\r\n");
    let url = format!("redis://doctor:doctor-pw@{}/0", server.addr());
    let (status, report) = doctor(&url);
    assert_eq!(status, 1, "{report:#}");
    assert_verdict(&report, "exclusion", "holds_if", "eviction policy");
    assert_verdict(&report, "survives_restart", "holds_if", "appendonly");
    assert_verdict(&report, "fence_order", "holds", "clock");
    assert!(!report.to_string().contains("doctor-pw"), "{report}");

    // The README's ACL user may not SCAN: whether 0.3 clients share the keys is then unknown.
    let reply = server.command(&[
        b"ACL",
        b"SETUSER",
        b"noscan",
        b"on",
        b">noscan-pw",
        b"~*",
        b"&*",
        b"+@all",
        b"-scan",
        b"-dbsize",
    ]);
    assert_eq!(reply, "+OK\r\n");
    let url = format!("redis://noscan:noscan-pw@{}/0", server.addr());
    let (_, report) = doctor(&url);
    assert_eq!(
        report["facts"]["other_versions"], "unknown (SCAN was not answered)",
        "{report:#}"
    );
    assert_verdict(&report, "fence_order", "holds_if", "could not be scanned");
}

#[test]
fn redlock_names_the_node_that_evicts_and_compares_the_nodes_clocks() {
    let good = RedisServer::start();
    let also = RedisServer::start();
    let bad = RedisServer::start_with_args(
        None,
        ["--maxmemory", "50mb", "--maxmemory-policy", "allkeys-lru"]
            .map(String::from)
            .to_vec(),
    );
    let url = format!("redlock://{},{},{}", good.addr(), also.addr(), bad.addr());
    let (status, report) = doctor(&url);
    assert_eq!(status, 2, "{report:#}");
    assert_shape(&report, "redlock");
    let (verdict, because) = promise(&report, "exclusion");
    assert_eq!(verdict, "does_not_hold");
    assert!(
        because.contains(&bad.addr()) && because.contains("maxmemory-policy=allkeys-lru"),
        "{because}"
    );
    // Redlock's gate keeps a node back without its data out of every quorum until its leases
    // are over, so restarts hold without persistence.
    assert_verdict(&report, "survives_restart", "holds", "grants nothing");
    assert!(
        report["facts"]["node_clock_spread_ms"].is_string(),
        "{report:#}"
    );
    assert_eq!(report["facts"]["quorum"], "2 of 3");
}

#[test]
fn sentinel_failover_keeps_leases_only_with_replicas_in_the_url() {
    let group = RedisSentinel::start(1, 3, 5000);
    let (status, report) = doctor(&group.url());
    assert_eq!(status, 2, "{report:#}");
    assert_shape(&report, "redis-sentinel");
    assert_eq!(report["facts"]["sentinels"], "3", "{report:#}");
    assert_verdict(
        &report,
        "survives_failover",
        "does_not_hold",
        "replicas=0 with automatic failover (1 replicas connected",
    );
    let (_, report) = doctor(&group.url_with("replicas=1"));
    assert_verdict(
        &report,
        "survives_failover",
        "holds",
        "replicas=1: every grant acknowledged by 1 of 1 connected replicas",
    );
}

#[test]
fn a_cluster_is_judged_master_by_master() {
    let cluster = RedisCluster::start(3, 5000);
    assert!(cluster.wait_replicas_online(Duration::from_secs(30)));
    let (status, report) = doctor(&cluster.url());
    assert_eq!(status, 2, "{report:#}");
    assert_shape(&report, "redis-cluster");
    assert_eq!(report["facts"]["masters"], "3", "{report:#}");
    // One reason per master, each naming it.
    let (verdict, because) = promise(&report, "survives_failover");
    assert_eq!(verdict, "does_not_hold");
    assert_eq!(
        because
            .matches("replicas=0 with automatic failover")
            .count(),
        3,
        "{because}"
    );
    assert_verdict(&report, "exclusion", "holds", "maxmemory-policy=noeviction");
    let (_, report) = doctor(&cluster.url_with("replicas=1"));
    assert_verdict(&report, "survives_failover", "holds", "replicas=1");
}

#[test]
fn postgres_durable_table_mode_holds_and_keeps_a_lease_across_a_crash() {
    let mut server = PostgresServer::start_with_settings(&["fsync=on", "full_page_writes=on"]);
    let url = server.url_with("lock=table");
    let (status, report) = doctor(&url);
    assert_eq!(status, 0, "{report:#}");
    assert_shape(&report, "postgres-table");
    assert_verdict(
        &report,
        "survives_restart",
        "holds",
        "fsync=on, synchronous_commit=on, full_page_writes=on",
    );
    assert_verdict(
        &report,
        "session_end_seen",
        "holds",
        "rows, not in sessions",
    );
    assert_verdict(&report, "survives_failover", "holds", "no standbys");
    assert_eq!(report["facts"]["table_privileges"], "true", "{report:#}");

    // An immediate shutdown (SIGQUIT: no checkpoint, recovery at the next start).
    let key = unique_key("doctor-pg");
    let lease = leasehold::connect(&url)
        .unwrap()
        .try_acquire(&key, Duration::from_secs(60))
        .unwrap();
    server.kill();
    server.start_again();
    let after = leasehold::connect(&url).unwrap().inspect(&key).unwrap();
    assert!(after.held, "the row did not survive a crash");
    assert_eq!(after.fence, Some(lease.fence()));
    std::mem::forget(lease);
}

#[test]
fn postgres_fsync_off_does_not_hold_restarts_and_synchronous_commit_off_is_raised() {
    // The testkit's own server runs with fsync=off, for speed.
    let fast = PostgresServer::start();
    let (status, report) = doctor(&fast.url_with("lock=table"));
    assert_eq!(status, 2, "{report:#}");
    assert_verdict(&report, "survives_restart", "does_not_hold", "fsync=off");

    let async_commit = PostgresServer::start_with_settings(&[
        "fsync=on",
        "full_page_writes=on",
        "synchronous_commit=off",
    ]);
    // Leasehold raises it to on in its own transactions (the crash is in the test below).
    let (status, report) = doctor(&async_commit.url_with("lock=table"));
    assert_eq!(status, 0, "{report:#}");
    assert_verdict(
        &report,
        "survives_restart",
        "holds",
        "synchronous_commit=off but raised to on",
    );

    // Advisory locks live in sessions, whatever the settings.
    let (status, report) = doctor(&async_commit.url());
    assert_eq!(status, 2, "{report:#}");
    assert_shape(&report, "postgres-advisory");
    assert_verdict(
        &report,
        "survives_restart",
        "does_not_hold",
        "live in sessions",
    );
    assert_verdict(&report, "session_end_seen", "holds_if", "goodbye");
    assert_verdict(&report, "exclusion", "holds", "advisory locks");
}

#[test]
fn mariadb_log_flushing_decides_restarts() {
    let durable = MariaDbServer::start_with_options(&[
        "--innodb-flush-log-at-trx-commit=1",
        "--innodb-doublewrite=1",
    ]);
    let (status, report) = doctor(&durable.url_with("lock=table"));
    assert_eq!(status, 0, "{report:#}");
    assert_shape(&report, "mysql-table");
    assert_verdict(
        &report,
        "survives_restart",
        "holds",
        "innodb_flush_log_at_trx_commit=1",
    );
    assert_verdict(&report, "survives_failover", "holds", "log_bin=OFF");
    // The URL's password never shows.
    assert!(durable.url().contains(MARIADB_PASSWORD));
    assert!(!report.to_string().contains(MARIADB_PASSWORD), "{report}");

    // Named locks live in sessions.
    let (status, report) = doctor(&durable.url());
    assert_eq!(status, 2, "{report:#}");
    assert_shape(&report, "mysql-named");
    assert_verdict(
        &report,
        "survives_restart",
        "does_not_hold",
        "live in sessions",
    );
    assert_verdict(&report, "session_end_seen", "holds_if", "goodbye");
}

#[test]
fn mariadb_flushing_once_a_second_holds_if_the_host_does_not_crash() {
    // The testkit's default: innodb_flush_log_at_trx_commit=2.
    let mut server = MariaDbServer::start();
    let url = server.url_with("lock=table");
    let (status, report) = doctor(&url);
    assert_eq!(status, 1, "{report:#}");
    assert_verdict(
        &report,
        "survives_restart",
        "holds_if",
        "innodb_flush_log_at_trx_commit=2",
    );

    // What it still promises: a crash of the server process keeps the lease.
    let key = unique_key("doctor-my");
    let lease = leasehold::connect(&url)
        .unwrap()
        .try_acquire(&key, Duration::from_secs(60))
        .unwrap();
    server.kill();
    server.start_again();
    let after = leasehold::connect(&url).unwrap().inspect(&key).unwrap();
    assert!(after.held, "the row did not survive a crash of mariadbd");
    assert_eq!(after.fence, Some(lease.fence()));
    std::mem::forget(lease);
}

#[test]
fn an_unreachable_backend_exits_69_and_bad_usage_64() {
    let url = format!("redis://:hidden-pw@127.0.0.1:{}/0", free_port());
    let mut cmd = bin();
    cmd.args(["doctor", &url]);
    let out = output(cmd);
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    let err = one_line_error(&out);
    assert!(!err.contains("hidden-pw"), "{err}");
    assert!(stdout(&out).is_empty());

    for args in [
        &["doctor", "--bogus"][..],
        &["doctor", "bogus://x"],
        &["doctor", "redis://h?nonsense=1"],
        &["doctor", "a", "b"],
    ] {
        let mut cmd = bin();
        cmd.args(args);
        let out = output(cmd);
        assert_eq!(code(&out), 64, "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn postgres_table_mode_commits_its_own_grants_durably_under_synchronous_commit_off() {
    // The WAL writer flushes asynchronous commits only every wal_writer_delay (here its
    // maximum, 10 s), so an immediate shutdown right after a grant loses it unless the grant's
    // transaction waited for its own WAL.
    let mut server =
        PostgresServer::start_with_settings(&["synchronous_commit=off", "wal_writer_delay=10000"]);
    let url = server.url_with("lock=table");
    let (_, report) = doctor(&url);
    assert_verdict(&report, "survives_restart", "does_not_hold", "fsync=off");
    let key = unique_key("doctor-async-commit");
    let lease = leasehold::connect(&url)
        .unwrap()
        .try_acquire(&key, Duration::from_secs(60))
        .unwrap();
    server.kill();
    server.start_again();
    let after = leasehold::connect(&url).unwrap().inspect(&key).unwrap();
    assert!(
        after.held,
        "a grant committed under synchronous_commit=off was lost in a crash"
    );
    assert_eq!(after.fence, Some(lease.fence()));
    std::mem::forget(lease);
}

#[test]
fn etcd_is_judged_by_its_members_its_size_and_its_version() {
    let mut cluster = EtcdCluster::start();
    let (status, report) = doctor(&cluster.url());
    assert_shape(&report, "etcd");
    // Fences need no clock but rise only while no snapshot restore rewinds the revision.
    assert_verdict(
        &report,
        "fence_order",
        "holds_if",
        "restored from a snapshot",
    );
    assert_verdict(&report, "survives_failover", "holds", "3 members");
    assert_verdict(&report, "session_end_seen", "holds", "not in connections");
    // Debian's etcd 3.4.23 predates the fix of a stalled old leader revoking leases.
    let (verdict, because) = promise(&report, "exclusion");
    if because.contains("3.4.2") {
        assert_eq!(verdict, "holds_if", "{report:#}");
    }
    assert_eq!(status, 1, "{report:#}");
    assert_eq!(report["facts"]["cluster_members"], "3", "{report:#}");

    // A member down is reported, and judged by those that answer.
    cluster.kill(2);
    let (_, report) = doctor(&cluster.url());
    let facts = report["facts"].as_object().expect("facts");
    assert!(
        facts
            .values()
            .any(|v| v.as_str().is_some_and(|v| v.contains("did not answer"))),
        "{report:#}"
    );
    assert_verdict(&report, "bounded_calls", "holds", "deadline");

    let single = EtcdCluster::start_with(1);
    let (status, report) = doctor(&single.url());
    assert_verdict(
        &report,
        "survives_failover",
        "does_not_hold",
        "a single member",
    );
    assert_eq!(status, 2, "{report:#}");
}

/// A cluster brought back from a backup (`etcdctl snapshot restore`, as an operator would): the
/// revision goes back to the snapshot's, so fences granted after the restore fall at or below
/// those granted between the snapshot and the restore. doctor sees the restore (the Raft log
/// started over below the revision) and says fence order does not hold, and what to compare.
#[test]
fn etcd_restored_from_a_snapshot_does_not_hold_fence_order() {
    let mut cluster = EtcdCluster::start();
    let url = cluster.url();
    let fence = |label: &str| {
        let client = leasehold::connect(&url).expect("connect");
        let lease = client
            .try_acquire(unique_key(label), Duration::from_secs(5))
            .expect("a grant");
        let fence = lease.fence();
        lease.release().expect("release");
        fence
    };
    // A cluster in service has written far more than it has members.
    for i in 0..50 {
        let body = format!(
            r#"{{"key":"d3JpdGU=","value":"{}"}}"#,
            ["eA==", "eQ=="][i % 2]
        );
        cluster.request(0, "/v3/kv/put", &body).expect("a put");
    }
    fence("before-backup");
    let snapshot = cluster.save_snapshot("backup");
    let highest = (0..10).map(|_| fence("after-backup")).max().unwrap();
    let (_, report) = doctor(&url);
    assert_verdict(
        &report,
        "fence_order",
        "holds_if",
        "restored from a snapshot",
    );

    cluster.restore_snapshot(&snapshot);
    let (status, report) = doctor(&url);
    assert_verdict(
        &report,
        "fence_order",
        "does_not_hold",
        "was restored from a snapshot",
    );
    let (_, because) = promise(&report, "fence_order");
    eprintln!("fence_order: {because}");
    assert!(
        because.contains("Compare the fence gate's highest fence"),
        "{because}"
    );
    assert_eq!(status, 2, "{report:#}");
    // What doctor warns of: the next grant's fence is below one handed out before the restore.
    let next = fence("after-restore");
    assert!(next <= highest, "{next} after {highest}");
}
