//! Both modes through a real PgBouncer in both of its pool modes: what works under each works
//! (the conformance suite, waits of several processes in bounded time), what cannot work is refused
//! with an error that says why, and a transaction pooler is detected when the URL does not name one.

use leasehold_core::config::PostgresPooler;
use leasehold_core::{conformance, Client, Config, ErrorKind};
use leasehold_postgres::PostgresBackend;
use leasehold_testkit::processes::{self, Counters, Worker, ENTERS, MOST};
use leasehold_testkit::{unique_key, PgBouncer, PoolMode, PostgresServer, TempDir};
use postgres::{NoTls, SimpleQueryMessage};
use std::sync::{OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

/// The database that clients of the transaction-pooling bouncer use, so that advisory locks
/// taken there (by nobody, if all is well) are told apart from the session-pooled tests' own.
const TX_DB: &str = "pgb_tx";

/// A server of this binary's own (PgBouncer needs one the testkit started), and a bouncer in
/// front of it in each pool mode.
fn server() -> &'static PostgresServer {
    static SERVER: OnceLock<PostgresServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        let server = PostgresServer::start();
        let mut db = postgres::Client::connect(&server.url(), NoTls).unwrap();
        db.batch_execute(&format!("CREATE DATABASE {TX_DB}"))
            .unwrap();
        server
    })
}

/// `query` on the bouncer in `mode`: the transaction-pooling one's clients use [`TX_DB`].
fn url(mode: PoolMode, query: &str) -> String {
    let bouncer = bouncer(mode);
    match mode {
        PoolMode::Transaction => format!(
            "postgres://postgres@127.0.0.1:{}/{TX_DB}?{query}",
            bouncer.port()
        ),
        PoolMode::Session => bouncer.url_with(query),
    }
}

fn bouncer(mode: PoolMode) -> &'static PgBouncer {
    static SESSION: OnceLock<PgBouncer> = OnceLock::new();
    static TRANSACTION: OnceLock<PgBouncer> = OnceLock::new();
    let cell = match mode {
        PoolMode::Session => &SESSION,
        PoolMode::Transaction => &TRANSACTION,
    };
    cell.get_or_init(|| PgBouncer::start(server(), mode))
}

fn backend(url: &str) -> leasehold_core::Result<PostgresBackend> {
    PostgresBackend::connect(&Config::parse(url).expect("test URL"))
}

fn client(mode: PoolMode, query: &str) -> Client {
    let url = url(mode, query);
    Client::new(backend(&url).unwrap_or_else(|e| panic!("connect through PgBouncer: {e}")))
}

/// The first column of the first row `sql` gives on a plain connection to `url`.
fn value(url: &str, sql: &str) -> Option<String> {
    let mut db = postgres::Client::connect(url, NoTls).unwrap();
    db.simple_query(sql)
        .unwrap()
        .into_iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(r.get(0).map(str::to_owned)),
            _ => None,
        })
        .flatten()
}

/// Advisory locks held on the server in [`TX_DB`], by any session (looked at directly, not through
/// a bouncer).
fn advisory_locks() -> i64 {
    value(
        &server().url(),
        &format!(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' \
             AND database = (SELECT oid FROM pg_database WHERE datname = '{TX_DB}')"
        ),
    )
    .and_then(|v| v.parse().ok())
    .unwrap_or(-1)
}

/// The 4-process scenarios keep two cores busy with their workers' polls: they run alone, so the
/// conformance suites' short TTLs are not measured against them; the other tests run side by side.
static CPU: RwLock<()> = RwLock::new(());

fn side_by_side() -> RwLockReadGuard<'static, ()> {
    CPU.read().unwrap_or_else(|p| p.into_inner())
}

fn alone() -> RwLockWriteGuard<'static, ()> {
    CPU.write().unwrap_or_else(|p| p.into_inner())
}

const TX_TABLE: &str = "lock=table&table=pgb_tx_locks&pooler=transaction";

#[test]
fn child_worker() {
    let Some(mode) = processes::worker_mode() else {
        return;
    };
    match mode.as_str() {
        // `CYCLES` waiting acquires of `KEY`, one after another, each counted in and out.
        "cycles" => {
            let counters = Counters::open(processes::var("COUNTERS").as_ref());
            let backend = backend(&processes::worker_url()).expect("connect");
            assert_eq!(
                backend.pooler().name(),
                processes::var("POOLER"),
                "the pooler connect settled on"
            );
            let client = Client::new(backend);
            let key = processes::var("KEY");
            for _ in 0..processes::num("CYCLES") {
                let lease = client
                    .acquire(&key, Duration::from_secs(10), Duration::from_secs(25))
                    .expect("a waiting acquire is granted");
                counters.enter();
                processes::spin(Duration::from_millis(1));
                counters.leave();
                lease.release().expect("release");
            }
            println!("@@ done");
        }
        other => panic!("unknown worker mode {other}"),
    }
}

/// 4 processes × 50 waiting acquires of one key through `url`: all granted, never two at once,
/// within `bound`.
fn four_processes_wait_in_turn(url: &str, pooler: PostgresPooler, bound: Duration) -> Duration {
    let dir = TempDir::new("pgb-cycles");
    let path = dir.path().join("counters");
    let counters = Counters::create(&path);
    let key = unique_key("pgb-cycles");
    let start = Instant::now();
    let mut workers: Vec<Worker> = (0..4)
        .map(|_| {
            Worker::spawn(
                "cycles",
                url,
                &[
                    ("COUNTERS", path.display().to_string()),
                    ("KEY", key.clone()),
                    ("CYCLES", "50".into()),
                    ("POOLER", pooler.name().into()),
                ],
            )
            .limit(bound)
        })
        .collect();
    for w in &mut workers {
        assert_eq!(w.report(), "done");
        w.finish();
    }
    let took = start.elapsed();
    assert_eq!(counters.get(ENTERS), 200, "every acquire was granted");
    assert_eq!(counters.get(MOST), 1, "never two holders at once");
    eprintln!("4 processes × 50 waiting acquires through {url}: {took:?}");
    took
}

#[test]
fn transaction_pooling_table_conformance() {
    let _cpu = side_by_side();
    let new = || client(PoolMode::Transaction, TX_TABLE);
    conformance::run(&new);
    conformance::run_records(&new);
    conformance::run_once(&new);
    conformance::run_restore(&new);
    conformance::run_force_release(&new);
}

#[test]
fn transaction_pooling_table_semaphores_and_exclusion() {
    let _cpu = side_by_side();
    let new = || client(PoolMode::Transaction, TX_TABLE);
    conformance::run_semaphore(&new);
    conformance::run_semaphore_size(&new);
    conformance::semaphore_limit(&new(), 3, 8, 30);
    conformance::mutual_exclusion(&new(), 8, 30);
    assert_eq!(advisory_locks(), 0, "no advisory lock left on any session");
}

#[test]
fn transaction_pooling_waits_of_four_processes_finish() {
    let _cpu = alone();
    let url = url(PoolMode::Transaction, TX_TABLE);
    four_processes_wait_in_turn(&url, PostgresPooler::Transaction, Duration::from_secs(30));
    assert_eq!(advisory_locks(), 0, "no advisory lock left on any session");
}

#[test]
fn transaction_pooling_detected_by_four_processes_at_once() {
    let _cpu = alone();
    // No pooler= in the URL: each worker detects it while the others connect and wait.
    let url = url(PoolMode::Transaction, "lock=table&table=pgb_tx_locks");
    four_processes_wait_in_turn(&url, PostgresPooler::Transaction, Duration::from_secs(30));
    assert_eq!(advisory_locks(), 0, "no advisory lock left on any session");
}

#[test]
fn session_pooling_advisory_conformance() {
    let _cpu = side_by_side();
    let new = || client(PoolMode::Session, "lock=advisory&pooler=session");
    conformance::run(&new);
    conformance::run_shared(&new);
    conformance::run_semaphore(&new);
    conformance::mutual_exclusion(&new(), 8, 30);
}

#[test]
fn session_pooling_table_conformance() {
    let _cpu = side_by_side();
    let new = || client(PoolMode::Session, "lock=table&table=pgb_session_locks");
    conformance::run(&new);
    conformance::run_shared(&new);
    conformance::run_promote(&new);
    conformance::run_semaphore(&new);
}

#[test]
fn session_pooling_waits_of_four_processes_finish() {
    let _cpu = alone();
    let url = url(PoolMode::Session, "lock=table&table=pgb_session_locks");
    four_processes_wait_in_turn(&url, PostgresPooler::None, Duration::from_secs(30));
}

#[test]
fn advisory_mode_is_refused_under_transaction_pooling() {
    let _cpu = side_by_side();
    // Named in the URL: refused before any connection (nothing listens on port 1).
    let e = backend("postgres://postgres@127.0.0.1:1/postgres?pooler=transaction").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    // A deployment refused, which the CLI tells from a bad argument (exit 78).
    assert!(e.is_refused_deployment(), "{e}");
    let text = e.to_string();
    assert!(
        text.contains("advisory locks belong to the server session")
            && text.contains("pooler=transaction")
            && text.contains("use lock=table"),
        "{text}"
    );
    assert!(!text.contains("detected"), "{text}");

    // Unnamed: detected, and refused the same way, saying it was detected.
    let e = backend(&url(PoolMode::Transaction, "lock=advisory")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(e.is_refused_deployment(), "{e}");
    let text = e.to_string();
    assert!(
        text.contains("advisory locks belong to the server session") && text.contains("detected"),
        "{text}"
    );
    // The look at the server left nothing on the bouncer's server sessions for other clients.
    let through = url(PoolMode::Transaction, "");
    for _ in 0..4 {
        assert_eq!(
            value(&through, "SHOW statement_timeout").as_deref(),
            Some("0"),
            "no session setting handed to other clients"
        );
    }
    assert_eq!(advisory_locks(), 0);
}

#[test]
fn shared_leases_are_refused_under_transaction_pooling() {
    let _cpu = side_by_side();
    let c = client(PoolMode::Transaction, TX_TABLE);
    let key = unique_key("pgb-shared");
    let says = |e: leasehold_core::Error| {
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
        let text = e.to_string();
        assert!(
            text.contains("shared leases are refused under transaction pooling")
                && text.contains("pooler=transaction"),
            "{text}"
        );
    };
    says(
        c.try_acquire_shared(&key, Duration::from_secs(5))
            .unwrap_err(),
    );
    says(
        c.acquire_shared(&key, Duration::from_secs(5), Duration::from_millis(200))
            .unwrap_err(),
    );
    // Exclusive leases work; demoting one to shared is refused, and it stays exclusive.
    let mut lease = c.try_acquire(&key, Duration::from_secs(5)).unwrap();
    says(lease.demote().unwrap_err());
    assert!(!lease.remaining().is_zero());
    lease.release().unwrap();
}

#[test]
fn a_transaction_pooler_is_detected_when_the_url_names_none() {
    let _cpu = side_by_side();
    let pooler = |url: &str| backend(url).expect("connect").pooler();
    let query = "lock=table&table=pgb_detect_locks";
    assert_eq!(
        pooler(&url(PoolMode::Transaction, query)),
        PostgresPooler::Transaction
    );
    assert_eq!(
        pooler(&url(PoolMode::Session, query)),
        PostgresPooler::None,
        "session pooling keeps one server session per connection: nothing to tell it apart by"
    );
    assert_eq!(
        pooler(&url(PoolMode::Session, "lock=advisory")),
        PostgresPooler::None,
        "advisory mode connects through session pooling"
    );
    assert_eq!(pooler(&server().url_with(query)), PostgresPooler::None);
    // Clients connecting at once, each seeing the others' transactions on the bouncer's server
    // sessions, all tell (with one round of the probe, about 1 in 13 did not).
    for _ in 0..3 {
        let at_once: Vec<_> = (0..8)
            .map(|_| {
                let url = url(PoolMode::Transaction, query);
                std::thread::spawn(move || pooler(&url))
            })
            .collect();
        for each in at_once {
            assert_eq!(each.join().unwrap(), PostgresPooler::Transaction);
        }
    }
    assert_eq!(
        pooler(&url(PoolMode::Transaction, &format!("{query}&pooler=none"))),
        PostgresPooler::None,
        "the URL's word is taken"
    );
    // Detected, it behaves as named: shared leases are refused, waits poll and finish.
    let c = client(PoolMode::Transaction, query);
    let e = c
        .try_acquire_shared(unique_key("pgb-d"), Duration::from_secs(1))
        .unwrap_err();
    assert!(e.to_string().contains("detected"), "{e}");
    let key = unique_key("pgb-detect-wait");
    let held = c.try_acquire(&key, Duration::from_secs(10)).unwrap();
    let waiter = {
        let (c, key) = (c.clone(), key.clone());
        std::thread::spawn(move || c.acquire(&key, Duration::from_secs(5), Duration::from_secs(10)))
    };
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(advisory_locks(), 0, "the waiter holds no queue lock");
    held.release().unwrap();
    waiter
        .join()
        .unwrap()
        .expect("the waiter gets the key")
        .release()
        .unwrap();
}
