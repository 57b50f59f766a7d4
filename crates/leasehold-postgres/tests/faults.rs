//! What happens to holders that die, stop, or lose their session, and the lease-expiry scenarios, in both
//! modes, against a real PostgreSQL.

mod common;

use common::{advisory_holders, idle_queue_holders, scalar};

use leasehold_core::{Client, Config, ErrorKind};
use leasehold_postgres::{lock_id, PostgresBackend};
use leasehold_testkit::{in_child, unique_key, wait_until, PostgresServer};
use postgres::NoTls;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

const ADVISORY: &str = "lock=advisory";
const TABLE: &str = "lock=table&table=fault_locks";
const LONG: Duration = Duration::from_secs(60);

fn server() -> &'static PostgresServer {
    PostgresServer::shared()
}

fn client(query: &str) -> Client {
    let config = Config::parse(&server().url_with(query)).expect("test URL");
    Client::new(PostgresBackend::connect(&config).expect("connect to the test PostgreSQL"))
}

fn admin() -> postgres::Client {
    postgres::Client::connect(&server().url(), NoTls).expect("admin session")
}

fn kind<T: std::fmt::Debug>(r: leasehold_core::Result<T>) -> ErrorKind {
    r.expect_err("expected an error").kind()
}

#[test]
fn lock_id_is_the_documented_sql_expression() {
    let mut db = admin();
    for key in ["report:2026-11-29", "a", "ключ", "x'y\"z"] {
        let literal = key.replace('\'', "''");
        let sql = format!(
            "SELECT ('x' || encode(substring(sha256(convert_to('leasehold:' || '{literal}', 'UTF8')) \
             FROM 1 FOR 8), 'hex'))::bit(64)::bigint"
        );
        let prefixed = format!("leasehold:{key}");
        assert_eq!(
            scalar(&mut db, &sql).unwrap(),
            lock_id(prefixed.as_bytes()).to_string(),
            "{key}"
        );
    }
    let binary = b"\0\xff\xfe*";
    let sql =
        "SELECT ('x' || encode(substring(sha256('leasehold:'::bytea || '\\x00fffe2a'::bytea) \
               FROM 1 FOR 8), 'hex'))::bit(64)::bigint";
    let mut prefixed = b"leasehold:".to_vec();
    prefixed.extend_from_slice(binary);
    assert_eq!(
        scalar(&mut db, sql).unwrap(),
        lock_id(&prefixed).to_string()
    );

    // A SQL job that takes the documented id really excludes Leasehold users, and the other way round.
    let key = unique_key("sql-user");
    let c = client(ADVISORY);
    let id = lock_id(format!("leasehold:{key}").as_bytes());
    assert_eq!(
        scalar(&mut db, &format!("SELECT pg_try_advisory_lock({id})")).unwrap(),
        "t"
    );
    assert_eq!(kind(c.try_acquire(&key, LONG)), ErrorKind::NotAcquired);
    assert_eq!(
        scalar(&mut db, &format!("SELECT pg_advisory_unlock({id})")).unwrap(),
        "t"
    );
    let lease = c.try_acquire(&key, LONG).unwrap();
    assert_eq!(
        scalar(&mut db, &format!("SELECT pg_try_advisory_lock({id})")).unwrap(),
        "f"
    );
    lease.release().unwrap();
}

#[test]
fn advisory_terminated_session_is_lost_and_key_is_taken() {
    let (a, b) = (client(ADVISORY), client(ADVISORY));
    let mut db = admin();
    for op in ["extend", "release"] {
        let key = unique_key("terminated");
        let mut lease = a.try_acquire(&key, LONG).unwrap();
        let id = lock_id(format!("leasehold:{key}").as_bytes()) as u64;
        let pid = scalar(
            &mut db,
            &format!(
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted \
                 AND classid = {} AND objid = {} AND objsubid = 1",
                id >> 32,
                id & 0xffff_ffff
            ),
        )
        .expect("the holder's session shows in pg_locks");
        assert_eq!(
            scalar(&mut db, &format!("SELECT pg_terminate_backend({pid})")).unwrap(),
            "t"
        );
        let taken = b
            .acquire(&key, LONG, Duration::from_secs(10))
            .expect("key freed");
        assert!(taken.fence() > lease.fence());
        let r = if op == "extend" {
            lease.extend(LONG)
        } else {
            lease.release_in_place()
        };
        assert_eq!(kind(r), ErrorKind::Lost, "{op} after pg_terminate_backend");
        assert_eq!(lease.remaining(), Duration::ZERO);
        assert_eq!(
            kind(a.try_acquire(&key, LONG)),
            ErrorKind::NotAcquired,
            "B keeps it"
        );
        taken.release().unwrap();
        // The same client goes on working.
        a.try_acquire(&key, LONG).unwrap().release().unwrap();
    }
}

#[test]
fn table_lease_survives_terminated_sessions() {
    // Table mode holds no session between calls: killing the client's sessions loses nothing.
    let app = format!("lh_term_{}", std::process::id());
    let c = client(&format!("{TABLE}&application_name={app}"));
    let other = client(TABLE);
    let key = unique_key("table-terminated");
    let mut lease = c.try_acquire(&key, LONG).unwrap();
    let mut db = admin();
    let killed = scalar(
        &mut db,
        &format!(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = '{app}'"
        ),
    )
    .unwrap();
    assert_ne!(killed, "0", "the client had a pooled session to terminate");
    assert_eq!(kind(other.try_acquire(&key, LONG)), ErrorKind::NotAcquired);
    lease.extend(LONG).expect("extend on a fresh session");
    lease.release().expect("release on a fresh session");
    other.try_acquire(&key, LONG).unwrap().release().unwrap();
}

/// A holder in another process: this test binary run again with only [`child_holder`].
struct Holder {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    fence: u64,
}

impl Holder {
    fn spawn(query: &str, key: &str, ttl: Duration) -> Holder {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "child_holder",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("LEASEHOLD_PG_CHILD_URL", server().url_with(query))
            .env("LEASEHOLD_PG_CHILD_KEY", key)
            .env("LEASEHOLD_PG_CHILD_TTL_MS", ttl.as_millis().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the holder process");
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let fence = loop {
            let mut line = String::new();
            assert!(
                stdout.read_line(&mut line).unwrap() > 0,
                "holder exited early"
            );
            // libtest prints "test child_holder ... " without a newline before our output.
            if let Some((_, f)) = line.trim().split_once("HELD ") {
                break f.parse().unwrap();
            }
        };
        Holder {
            child,
            stdin,
            stdout,
            fence,
        }
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child, not yet reaped.
        unsafe {
            libc::kill(self.child.id() as i32, sig);
        }
    }

    /// Asks the holder to release; returns what its release said (`ok`, `lost`, …).
    fn release(mut self) -> String {
        writeln!(self.stdin, "release").unwrap();
        let outcome = loop {
            let mut line = String::new();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "holder exited early"
            );
            if let Some((_, r)) = line.trim().split_once("RELEASE ") {
                break r.to_owned();
            }
        };
        self.child.wait().unwrap();
        outcome
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        self.signal(libc::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
#[ignore = "helper: the holder tests run it in a child process"]
fn child_holder() {
    let Ok(url) = std::env::var("LEASEHOLD_PG_CHILD_URL") else {
        return;
    };
    let key = std::env::var("LEASEHOLD_PG_CHILD_KEY").unwrap();
    let ttl: u64 = std::env::var("LEASEHOLD_PG_CHILD_TTL_MS")
        .unwrap()
        .parse()
        .unwrap();
    let client = leasehold_core::Client::new(
        PostgresBackend::connect(&Config::parse(&url).unwrap()).unwrap(),
    );
    let mut lease = client
        .try_acquire(&key, Duration::from_millis(ttl))
        .unwrap();
    println!("HELD {}", lease.fence());
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let outcome = match lease.release_in_place() {
        Ok(()) => "ok",
        Err(e) => e.kind().as_str(),
    };
    println!("RELEASE {outcome}");
    std::io::stdout().flush().unwrap();
}

#[test]
fn advisory_killed_holder_frees_the_key_promptly() {
    let c = client(ADVISORY);
    let key = unique_key("sigkill");
    // A TTL far beyond the test: only the dead connection can free the key.
    let mut holder = Holder::spawn(ADVISORY, &key, Duration::from_secs(600));
    assert_eq!(kind(c.try_acquire(&key, LONG)), ErrorKind::NotAcquired);
    holder.child.kill().unwrap();
    let start = Instant::now();
    let lease = c
        .acquire(&key, LONG, Duration::from_secs(10))
        .expect("freed after SIGKILL");
    let freed = start.elapsed();
    eprintln!("advisory: key freed {freed:?} after SIGKILL of a holder with a 600 s TTL");
    assert!(freed < Duration::from_secs(5), "{freed:?}");
    assert!(lease.fence() > holder.fence);
    lease.release().unwrap();
}

#[test]
fn table_killed_holder_frees_the_key_at_its_ttl() {
    let c = client(TABLE);
    let key = unique_key("sigkill-table");
    let ttl = Duration::from_millis(1500);
    let mut holder = Holder::spawn(TABLE, &key, ttl);
    let held_at = Instant::now();
    holder.child.kill().unwrap();
    assert_eq!(
        kind(c.try_acquire(&key, LONG)),
        ErrorKind::NotAcquired,
        "the row outlives its owner"
    );
    let lease = c
        .acquire(&key, LONG, Duration::from_secs(15))
        .expect("freed at the TTL");
    let freed = held_at.elapsed();
    eprintln!("table: key freed {freed:?} after its holder was killed (TTL {ttl:?})");
    assert!(
        freed >= Duration::from_millis(1000),
        "freed before the TTL: {freed:?}"
    );
    assert!(lease.fence() > holder.fence);
    lease.release().unwrap();
}

fn stopped_holder_loses_the_key_after_its_ttl(query: &str) {
    let c = client(query);
    let key = unique_key("sigstop");
    let ttl = Duration::from_millis(1500);
    let holder = Holder::spawn(query, &key, ttl);
    let held_at = Instant::now();
    holder.signal(libc::SIGSTOP);
    assert_eq!(kind(c.try_acquire(&key, LONG)), ErrorKind::NotAcquired);
    let lease = c
        .acquire(&key, LONG, Duration::from_secs(20))
        .expect("freed at the TTL");
    let freed = held_at.elapsed();
    eprintln!("{query}: key freed {freed:?} after its holder was stopped (TTL {ttl:?})");
    assert!(
        freed >= Duration::from_millis(1000),
        "freed before the TTL: {freed:?}"
    );
    assert!(lease.fence() > holder.fence);
    // The holder wakes up and tries to release: refused, and the new holder keeps the key.
    holder.signal(libc::SIGCONT);
    assert_eq!(holder.release(), "lost");
    assert_eq!(
        kind(client(query).try_acquire(&key, LONG)),
        ErrorKind::NotAcquired
    );
    lease.release().unwrap();
}

#[test]
fn advisory_stopped_holder_loses_the_key_after_its_ttl() {
    stopped_holder_loses_the_key_after_its_ttl(ADVISORY);
}

#[test]
fn table_stopped_holder_loses_the_key_after_its_ttl() {
    stopped_holder_loses_the_key_after_its_ttl(TABLE);
}

#[test]
fn holder_process_releases_normally() {
    for query in [ADVISORY, TABLE] {
        let key = unique_key("child-release");
        let holder = Holder::spawn(query, &key, LONG);
        assert_eq!(
            kind(client(query).try_acquire(&key, LONG)),
            ErrorKind::NotAcquired
        );
        assert_eq!(holder.release(), "ok");
        client(query)
            .try_acquire(&key, LONG)
            .unwrap()
            .release()
            .unwrap();
    }
}

/// The fencing scenario end to end: A's lease expires while A is paused, B takes the key and
/// writes; A's late write carries an older fence, and the protected store (a PostgreSQL table here)
/// rejects it with `UPDATE … WHERE last_fence < :fence`.
fn stale_writer_is_fenced_off(query: &str) {
    let (a, b) = (client(query), client(query));
    let mut db = admin();
    let store = format!("fenced_store_{}", std::process::id());
    db.batch_execute(&format!(
        "CREATE TABLE IF NOT EXISTS {store} (id text PRIMARY KEY, value text, last_fence bigint NOT NULL)"
    ))
    .unwrap();
    let id = unique_key("doc");
    db.execute(
        &format!("INSERT INTO {store} VALUES ($1, 'initial', 0)"),
        &[&id],
    )
    .unwrap();
    let write = |db: &mut postgres::Client, value: &str, fence: u64| {
        db.execute(
            &format!(
                "UPDATE {store} SET value = $1, last_fence = $2 WHERE id = $3 AND last_fence < $2"
            ),
            &[&value, &(fence as i64), &id],
        )
        .unwrap()
    };
    let key = unique_key("fenced");
    let stale = a.try_acquire(&key, Duration::from_millis(200)).unwrap();
    std::thread::sleep(Duration::from_millis(600)); // A is paused past its TTL
    assert!(!stale.is_held(), "A can see locally that its lease ran out");
    let fresh = b.try_acquire(&key, LONG).expect("B takes the expired key");
    assert!(fresh.fence() > stale.fence());
    assert_eq!(write(&mut db, "from B", fresh.fence()), 1);
    assert_eq!(
        write(&mut db, "from A (late)", stale.fence()),
        0,
        "stale write rejected"
    );
    assert_eq!(kind(stale.release()), ErrorKind::Lost);
    fresh.release().unwrap();
    assert_eq!(
        scalar(
            &mut db,
            &format!("SELECT value FROM {store} WHERE id = '{id}'")
        )
        .unwrap(),
        "from B"
    );
}

#[test]
fn advisory_stale_writer_is_fenced_off() {
    stale_writer_is_fenced_off(ADVISORY);
}

#[test]
fn table_stale_writer_is_fenced_off() {
    stale_writer_is_fenced_off(TABLE);
}

/// Laravel's and Symfony's database locks broke callers' transactions (laravel#36280,
/// symfony#63967) and logged duplicate-key errors on every conflict (symfony#62667). Ours use their
/// own sessions and statements that never raise on conflict.
#[test]
fn table_conflicts_leave_callers_transactions_and_the_log_alone() {
    let table = format!("quiet_locks_{}", std::process::id());
    let query = format!("lock=table&table={table}");
    let (a, b) = (client(&query), client(&query));
    let key = unique_key("quiet");
    let lease = a.try_acquire(&key, LONG).unwrap();
    let mut db = admin();
    let mut tx = db.transaction().unwrap();
    tx.batch_execute("CREATE TEMP TABLE caller_work (n int)")
        .unwrap();
    for n in 0..200 {
        assert_eq!(kind(b.try_acquire(&key, LONG)), ErrorKind::NotAcquired);
        tx.execute("INSERT INTO caller_work VALUES ($1)", &[&n])
            .unwrap();
    }
    let count: i64 = tx
        .query_one("SELECT count(*) FROM caller_work", &[])
        .unwrap()
        .get(0);
    assert_eq!(count, 200, "the caller's transaction was not disturbed");
    tx.commit().unwrap();
    lease.release().unwrap();
    if let Some(log) = server().log() {
        let noisy: Vec<&str> = log.lines().filter(|l| l.contains(&table)).collect();
        assert!(
            noisy.is_empty(),
            "conflicts reached the server log: {noisy:?}"
        );
    }
}

#[test]
fn table_rows_of_released_keys_do_not_pile_up() {
    let table = format!("pile_locks_{}", std::process::id());
    let c = client(&format!("lock=table&table={table}"));
    for i in 0..50 {
        c.try_acquire(format!("k{i}"), LONG)
            .unwrap()
            .release()
            .unwrap();
    }
    let mut db = admin();
    assert_eq!(
        scalar(&mut db, &format!("SELECT count(*) FROM {table}")).unwrap(),
        "0"
    );
}

#[test]
fn table_waiter_is_woken_by_release_not_by_polling() {
    // The holder's TTL is long, so only the NOTIFY of the release can wake the waiter early.
    let (a, b) = (client(TABLE), client(TABLE));
    let key = unique_key("wake");
    let lease = a.try_acquire(&key, LONG).unwrap();
    let waiter = std::thread::spawn(move || {
        let got = b
            .acquire(&key, LONG, Duration::from_secs(30))
            .expect("woken");
        (Instant::now(), got.fence())
    });
    std::thread::sleep(Duration::from_millis(300));
    let released_at = Instant::now();
    let fence = lease.fence();
    lease.release().unwrap();
    let (got_at, new_fence) = waiter.join().unwrap();
    let handoff = got_at.saturating_duration_since(released_at);
    eprintln!("table: release → waiter acquired in {handoff:?}");
    assert!(handoff < Duration::from_secs(5), "{handoff:?}");
    assert!(new_fence > fence);
}

#[test]
fn table_waiter_wakes_at_a_dead_holders_expiry() {
    let (a, b) = (client(TABLE), client(TABLE));
    let key = unique_key("expiry-wake");
    let ttl = Duration::from_millis(800);
    let lease = a.try_acquire(&key, ttl).unwrap();
    lease.forget(); // the holder "crashes": nobody will release or notify
    let start = Instant::now();
    let got = b
        .acquire(&key, LONG, Duration::from_secs(20))
        .expect("taken at expiry");
    let waited = start.elapsed();
    eprintln!("table: waiter took a crashed holder's key after {waited:?} (TTL {ttl:?})");
    assert!(
        waited >= Duration::from_millis(500) && waited < Duration::from_secs(10),
        "{waited:?}"
    );
    got.release().unwrap();
}

#[test]
fn waiters_all_get_the_key_in_both_modes() {
    for query in [ADVISORY, TABLE] {
        let key = unique_key("queue");
        let c = client(query);
        let first = c.try_acquire(&key, LONG).unwrap();
        let waiters: Vec<_> = (0..6)
            .map(|_| {
                let (c, key) = (c.clone(), key.clone());
                std::thread::spawn(move || {
                    let lease = c
                        .acquire(&key, LONG, Duration::from_secs(30))
                        .expect("waiter");
                    let fence = lease.fence();
                    std::thread::sleep(Duration::from_millis(20));
                    lease.release().unwrap();
                    fence
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(200));
        first.release().unwrap();
        let mut fences: Vec<u64> = waiters.into_iter().map(|w| w.join().unwrap()).collect();
        fences.sort();
        fences.dedup();
        assert_eq!(fences.len(), 6, "{query}: every waiter got its own turn");
    }
}

#[test]
fn wait_is_bounded_when_the_pool_is_exhausted() {
    // pool_size=2: two held advisory leases use both sessions; a third call gives Unavailable
    // within the connect timeout instead of hanging.
    let c = client(&format!("{ADVISORY}&pool_size=2&connect_timeout_ms=500"));
    let one = c.try_acquire(unique_key("p1"), LONG).unwrap();
    let two = c.try_acquire(unique_key("p2"), LONG).unwrap();
    let start = Instant::now();
    let err = c.try_acquire(unique_key("p3"), LONG).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.to_string().contains("pool_size"), "{err}");
    assert!(start.elapsed() < Duration::from_secs(5));
    one.release().unwrap();
    c.try_acquire(unique_key("p3"), LONG)
        .unwrap()
        .release()
        .unwrap();
    two.release().unwrap();
}

#[test]
fn unreachable_server_and_bad_urls_give_clear_errors_without_passwords() {
    let port = leasehold_testkit::free_port();
    let url = format!(
        "postgres://u:Sup3rS3cret@127.0.0.1:{port}/db?connect_timeout_ms=300&io_timeout_ms=300"
    );
    let start = Instant::now();
    let err = PostgresBackend::connect(&Config::parse(&url).unwrap()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert!(!err.to_string().contains("Sup3rS3cret"), "{err}");
    // Wrong password against our server (trust auth accepts any), so check a bad database instead.
    let base = server().url();
    let (without_db, _) = base.rsplit_once('/').unwrap();
    let url = format!("{without_db}/no_such_db?password=Sup3rS3cret");
    let err = PostgresBackend::connect(&Config::parse(&url).unwrap()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.to_string().contains("no_such_db"), "{err}");
    assert!(!err.to_string().contains("Sup3rS3cret"), "{err}");
}

#[test]
fn works_through_the_facade_url_parameters() {
    let c =
        client("lock=table&table=myschema_less_locks&prefix=app:&io_timeout_ms=2000&pool_size=4");
    assert_eq!(c.backend_name(), "postgres-table");
    let key = unique_key("params");
    let lease = c.try_acquire(&key, LONG).unwrap();
    let mut db = admin();
    let stored = scalar(
        &mut db,
        &format!("SELECT convert_from(key, 'UTF8') FROM myschema_less_locks WHERE key = convert_to('app:{key}', 'UTF8')"),
    );
    assert_eq!(
        stored.as_deref(),
        Some(format!("app:{key}").as_str()),
        "prefix applied"
    );
    let info = c.inspect(&key).unwrap();
    assert!(info.held && info.fence == Some(lease.fence()));
    lease.release().unwrap();
    assert!(wait_until(Duration::from_secs(1), || !c
        .inspect(&key)
        .unwrap()
        .held));
}

/// php-fpm forks its workers after the client may have been created: the child must get sessions of
/// its own, and must neither use nor close the parent's (closing one would free the parent's lock).
#[test]
fn client_works_in_a_forked_child_without_touching_the_parents_sessions() {
    for query in [ADVISORY, TABLE] {
        let c = client(query);
        let key = unique_key("fork-parent");
        let lease = c.try_acquire(&key, LONG).unwrap();
        c.try_acquire(unique_key("warm"), LONG)
            .unwrap()
            .release()
            .unwrap();
        let child_key = unique_key("fork-child");
        // The child takes the parent's lease out of `held`; the parent's copy stays put.
        let mut held = Some(lease);
        let status = in_child(Duration::from_secs(30), || {
            let Some(mut inherited) = held.take() else {
                return false;
            };
            let own = c
                .try_acquire(&child_key, LONG)
                .is_ok_and(|l| l.release().is_ok());
            let parents = c.try_acquire(&key, LONG).map(|_| ()).map_err(|e| e.kind());
            // The child's copy of the parent's lease: it must neither release nor extend it
            // (core refuses both as a misuse, as the C ABI does).
            let extend = inherited.extend(LONG).map_err(|e| e.kind());
            let release = inherited.release_in_place().map_err(|e| e.kind());
            let still_held = c.try_acquire(&key, LONG).is_err();
            own && parents == Err(ErrorKind::NotAcquired)
                && extend == Err(ErrorKind::InvalidArgument)
                && release == Err(ErrorKind::InvalidArgument)
                && still_held
        });
        assert_ne!(status, None, "{query}: the forked child hung");
        assert_eq!(
            status,
            Some(0),
            "{query}: the forked child failed (status {status:?})"
        );
        let mut lease = held.expect("the parent keeps its lease");
        // The parent's lease and sessions are intact.
        assert_eq!(
            kind(client(query).try_acquire(&key, LONG)),
            ErrorKind::NotAcquired
        );
        lease
            .extend(LONG)
            .expect("parent's lease survives the child");
        lease.release().unwrap();
        c.try_acquire(&child_key, LONG).unwrap().release().unwrap();
    }
}

/// A waiter in another process: this test binary run again with only [`child_waiter`], waiting
/// for the key (or, with `permits`, for a permit of it) until told how its wait ended.
struct QueuedChild {
    child: Child,
    stdout: BufReader<ChildStdout>,
}

impl QueuedChild {
    fn spawn(query: &str, key: &str, permits: u32) -> QueuedChild {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "child_waiter",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("LEASEHOLD_PG_WAITER_URL", server().url_with(query))
            .env("LEASEHOLD_PG_WAITER_KEY", key)
            .env("LEASEHOLD_PG_WAITER_PERMITS", permits.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the waiter process");
        let stdout = BufReader::new(child.stdout.take().unwrap());
        QueuedChild { child, stdout }
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child, not yet reaped.
        unsafe {
            libc::kill(self.child.id() as i32, sig);
        }
    }

    /// How its wait ended (`ok`, `unavailable`, …).
    fn outcome(mut self) -> String {
        loop {
            let mut line = String::new();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "waiter exited early"
            );
            // libtest prints "test child_waiter ... " without a newline before our output.
            if let Some((_, outcome)) = line.trim().split_once("WAITED ") {
                return outcome.to_owned();
            }
        }
    }
}

impl Drop for QueuedChild {
    fn drop(&mut self) {
        self.signal(libc::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
#[ignore = "helper: the stopped-head tests run it in a child process"]
fn child_waiter() {
    let Ok(url) = std::env::var("LEASEHOLD_PG_WAITER_URL") else {
        return;
    };
    let key = std::env::var("LEASEHOLD_PG_WAITER_KEY").unwrap();
    let permits: u32 = std::env::var("LEASEHOLD_PG_WAITER_PERMITS")
        .unwrap()
        .parse()
        .unwrap();
    let client = leasehold_core::Client::new(
        PostgresBackend::connect(&Config::parse(&url).unwrap()).unwrap(),
    );
    let outcome = match permits {
        0 => client.acquire(&key, LONG, LONG),
        n => client.acquire_permit(&key, n, LONG, LONG),
    };
    let outcome = match outcome {
        Ok(_) => "ok",
        Err(e) => e.kind().as_str(),
    };
    println!("WAITED {outcome}");
    std::io::stdout().flush().unwrap();
}

/// The advisory lock a key's waiters queue on (see `lock_id.rs`): table mode's per-key queue
/// (`wait_queue`), or a semaphore's (`semaphore_internal("queue", …)`, table "" in advisory mode).
fn queue_id(table: &str, key: &str, permits: u32) -> i64 {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    if permits == 0 {
        h.update(b"leasehold table-mode wait queue\0");
    } else {
        h.update(b"leasehold semaphore queue\0");
    }
    h.update(table.as_bytes());
    h.update(b"\0");
    h.update(format!("leasehold:{key}").as_bytes());
    i64::from_be_bytes(h.finalize()[..8].try_into().unwrap())
}

/// A waiter stopped (SIGSTOP) while it is the queue's head holds the queue lock, idle
/// between attempts; newcomers take a free key only while nobody is queued, so before the fix every
/// later waiting acquire of the key waited behind it for ever, even once the key was free. Its
/// session now has a short idle timeout while it is queued, so the server ends it and the next
/// waiter moves up within a few seconds. The child is stopped as soon as it holds the queue lock,
/// which may be before it sent its LISTEN: the statement that took the lock set the timeout.
fn stopped_queue_head_does_not_block_the_queue(query: &str, table: &str, permits: u32) {
    let (holder, other) = (client(query), client(query));
    let key = unique_key("stopped-head");
    let take = |c: &Client, wait: Duration| match permits {
        0 => c.acquire(&key, LONG, wait),
        n => c.acquire_permit(&key, n, LONG, wait),
    };
    let lease = take(&holder, Duration::ZERO).unwrap();
    let queue = queue_id(table, &key, permits);
    let mut db = admin();
    let head = QueuedChild::spawn(query, &key, permits);
    assert!(
        wait_until(Duration::from_secs(10), || advisory_holders(&mut db, queue)
            == 1),
        "{query}: the child never became the queue's head"
    );
    head.signal(libc::SIGSTOP);
    // An attempt the child sent just before it stopped still runs on the server: let it finish
    // (refused, the key is still held) before the release, or it would take the key for a
    // process that cannot know it did (a grant to a stopped process, not a blocked queue).
    assert!(
        wait_until(Duration::from_secs(10), || idle_queue_holders(
            &mut db, queue
        ) == 1),
        "{query}: the stopped head's session never went idle"
    );
    lease.release().unwrap();
    let started = Instant::now();
    let got = take(&other, Duration::from_secs(15));
    let waited = started.elapsed();
    eprintln!(
        "{query} (permits {permits}): the next waiter's acquire ended {waited:?} after the \
         holder released, {}",
        if got.is_ok() { "granted" } else { "refused" }
    );
    let got = got.expect("the stopped head must not keep the next waiter from a free key");
    assert!(waited < Duration::from_secs(8), "{waited:?}");
    // The stopped head lost its place, not someone else's key: resumed, it finds its session ended.
    head.signal(libc::SIGCONT);
    assert_eq!(head.outcome(), "unavailable");
    assert_eq!(advisory_holders(&mut db, queue), 0, "nobody left queued");
    got.release().unwrap();
}

#[test]
fn table_stopped_queue_head_does_not_block_the_queue() {
    stopped_queue_head_does_not_block_the_queue(TABLE, "fault_locks", 0);
}

#[test]
fn table_stopped_semaphore_head_does_not_block_the_queue() {
    stopped_queue_head_does_not_block_the_queue(TABLE, "fault_locks", 1);
}

#[test]
fn advisory_stopped_semaphore_head_does_not_block_the_queue() {
    stopped_queue_head_does_not_block_the_queue(ADVISORY, "", 1);
}
