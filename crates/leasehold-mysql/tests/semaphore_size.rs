//! One size per semaphore beyond the conformance check: acquirers of two sizes racing never hold
//! the semaphore under both at once (in both modes), and tables made by 0.2 (no `permits` column)
//! are upgraded at connect.

use leasehold_core::{Client, Config, ErrorKind};
use leasehold_mysql::MysqlBackend;
use leasehold_testkit::{unique_key, MariaDbServer};
use mysql::prelude::Queryable;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(30);

fn client(query: &str) -> Client {
    let url = MariaDbServer::shared().url_with(&format!("{query}&io_timeout_ms=5000"));
    let config = Config::parse(&url).expect("test URL");
    Client::new(MysqlBackend::connect(&config).expect("connect to the test MariaDB"))
}

fn db() -> mysql::Conn {
    let opts = mysql::Opts::from_url(&MariaDbServer::shared().url()).expect("test URL");
    mysql::Conn::new(mysql::OptsBuilder::from_opts(opts).prefer_socket(false)).expect("a session")
}

/// Threads asking for 2 or 3 permits of one semaphore, over and over: a grant of one size while
/// the other is held would show in the counts of holders per size.
fn two_sizes_never_overlap(query: &str) {
    let key = unique_key("sem-two-sizes");
    let inside: Arc<[AtomicUsize; 2]> = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let granted = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let (client, key, inside, granted) =
                (client(query), key.clone(), inside.clone(), granted.clone());
            std::thread::spawn(move || {
                let (mine, other) = (t % 2, 1 - t % 2);
                let permits = 2 + mine as u32;
                for _ in 0..60 {
                    match client.try_acquire_permit(&key, permits, LONG) {
                        Ok(permit) => {
                            inside[mine].fetch_add(1, SeqCst);
                            assert_eq!(inside[other].load(SeqCst), 0, "two sizes held at once");
                            granted.fetch_add(1, SeqCst);
                            std::thread::yield_now();
                            inside[mine].fetch_sub(1, SeqCst);
                            permit.release().expect("release");
                        }
                        Err(e) => assert!(
                            matches!(
                                e.kind(),
                                ErrorKind::InvalidArgument | ErrorKind::NotAcquired
                            ),
                            "{e}"
                        ),
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("no overlap");
    }
    assert!(granted.load(SeqCst) > 0);
}

#[test]
fn named_two_sizes_never_overlap() {
    two_sizes_never_overlap("lock=named&table=two_sizes_named");
}

#[test]
fn table_two_sizes_never_overlap() {
    two_sizes_never_overlap("lock=table&table=two_sizes_locks");
}

fn has_size_column(db: &mut mysql::Conn, table: &str) -> bool {
    let n: Option<i64> = db
        .exec_first(
            "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() \
               AND TABLE_NAME = ? AND COLUMN_NAME = 'permits'",
            (table,),
        )
        .unwrap();
    n == Some(1)
}

#[test]
fn tables_of_0_2_get_their_size_column() {
    let name = format!("old_size_{}", std::process::id());
    let mut db = db();
    db.query_drop(format!(
        "CREATE TABLE `{name}_fences` (\
           name VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY, \
           fence BIGINT UNSIGNED NOT NULL DEFAULT 0, holder BIGINT UNSIGNED NOT NULL DEFAULT 0, \
           expires_us BIGINT NOT NULL DEFAULT 0) ENGINE=InnoDB"
    ))
    .unwrap();
    db.query_drop(format!(
        "CREATE TABLE `{name}_permits` (\
           k BINARY(32) NOT NULL, token BINARY(16) NOT NULL, \
           fence BIGINT UNSIGNED NOT NULL, expires_us BIGINT NOT NULL, \
           PRIMARY KEY (k, token), KEY (expires_us)) ENGINE=InnoDB"
    ))
    .unwrap();
    for (mode, table) in [("named", "fences"), ("table", "permits")] {
        let query = format!("lock={mode}&table={name}");
        assert!(!has_size_column(&mut db, &format!("{name}_{table}")));
        drop(client(&query));
        assert!(
            has_size_column(&mut db, &format!("{name}_{table}")),
            "{mode}: the column was added"
        );
        // Connecting again finds the column and leaves the table alone.
        leasehold_core::conformance::run_semaphore_size(&|| client(&query));
    }
}
