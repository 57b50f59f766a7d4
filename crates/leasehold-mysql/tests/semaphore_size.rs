//! Tables made by 0.2 (no `permits` column) are upgraded at connect. (Racing sizes are in the
//! conformance suite: `run_semaphore_size`.)

use leasehold_core::{Client, Config};
use leasehold_mysql::MysqlBackend;
use leasehold_testkit::MariaDbServer;
use mysql::prelude::Queryable;
fn client(query: &str) -> Client {
    let url = MariaDbServer::shared().url_with(&format!("{query}&io_timeout_ms=5000"));
    let config = Config::parse(&url).expect("test URL");
    Client::new(MysqlBackend::connect(&config).expect("connect to the test MariaDB"))
}

fn db() -> mysql::Conn {
    let opts = mysql::Opts::from_url(&MariaDbServer::shared().url()).expect("test URL");
    mysql::Conn::new(mysql::OptsBuilder::from_opts(opts).prefer_socket(false)).expect("a session")
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
