//! The fence gate on a real MariaDB: a newer or equal fence is let through, an older one is refused
//! and its transaction commits nothing, two racing transactions are judged in the order they
//! commit, first writers of a new resource racing each other do not deadlock, and the verdict does
//! not depend on how the connection counts affected rows (`CLIENT_FOUND_ROWS`).

use leasehold_core::ErrorKind;
use leasehold_mysql::gate::{FenceGate, GateError};
use leasehold_testkit::MariaDbServer;
use mysql::consts::CapabilityFlags;
use mysql::prelude::Queryable;
use mysql::{Conn, OptsBuilder, TxOpts};
use std::sync::{mpsc, Arc, Barrier};
use std::time::Duration;

fn connect(found_rows: bool) -> Conn {
    let opts = mysql::Opts::from_url(&MariaDbServer::shared().url()).expect("test URL");
    let mut builder = OptsBuilder::from_opts(opts).prefer_socket(false);
    if found_rows {
        builder = builder.additional_capabilities(CapabilityFlags::CLIENT_FOUND_ROWS);
    }
    Conn::new(builder).expect("a session")
}

fn db() -> Conn {
    connect(false)
}

/// A gate over a table of this test's own (and of this process: tests share the server).
fn gate(name: &str, db: &mut Conn) -> FenceGate {
    let gate = FenceGate::new(&format!("gate_{name}_{}", std::process::id())).unwrap();
    gate.create_table(db).expect("create the gate table");
    gate
}

fn stored(db: &mut Conn, gate: &FenceGate, resource: &str) -> Option<i64> {
    db.exec_first(
        format!("SELECT fence FROM {} WHERE resource = ?", gate.table()),
        (resource.as_bytes(),),
    )
    .unwrap()
}

/// One transaction through the gate; committed if the gate let it through.
fn guarded_write(db: &mut Conn, gate: &FenceGate, r: &str, fence: u64) -> Result<(), GateError> {
    let mut tx = db.start_transaction(TxOpts::default()).unwrap();
    gate.guard(&mut tx, r, fence)?;
    tx.commit().unwrap();
    Ok(())
}

fn stale(result: Result<(), GateError>) -> (u64, u64) {
    match result {
        Err(GateError::Stale { fence, stored, .. }) => (fence, stored),
        other => panic!("expected a stale refusal, got {other:?}"),
    }
}

#[test]
fn newer_and_equal_fences_pass_an_older_one_is_refused_whatever_the_row_count_flag() {
    for found_rows in [false, true] {
        let mut db = connect(found_rows);
        let gate = gate(&format!("order_{found_rows}"), &mut db);
        guarded_write(&mut db, &gate, "report", 5).expect("first fence");
        assert_eq!(stored(&mut db, &gate, "report"), Some(5));
        guarded_write(&mut db, &gate, "report", 7).expect("a newer fence");
        guarded_write(&mut db, &gate, "report", 7).expect("the same holder again");
        assert_eq!(stale(guarded_write(&mut db, &gate, "report", 6)), (6, 7));
        assert_eq!(stored(&mut db, &gate, "report"), Some(7));
        // Resources compare byte for byte: another case is another resource.
        guarded_write(&mut db, &gate, "Report", 1).expect("its own history");
        assert_eq!(stored(&mut db, &gate, "report"), Some(7));
    }
}

#[test]
fn a_refused_transaction_commits_nothing_of_its_own() {
    let mut db = db();
    let gate = gate("rollback", &mut db);
    let items = format!("gate_items_{}", std::process::id());
    db.query_drop(format!(
        "CREATE TABLE {items} (resource VARCHAR(64) PRIMARY KEY, value TEXT NOT NULL) ENGINE=InnoDB"
    ))
    .unwrap();
    guarded_write(&mut db, &gate, "invoice", 9).unwrap();

    // The stale holder writes first and asks the gate after: its write must go with the refusal
    // (the transaction rolls back when dropped).
    {
        let mut tx = db.start_transaction(TxOpts::default()).unwrap();
        tx.query_drop(format!("INSERT INTO {items} VALUES ('invoice', 'stale')"))
            .unwrap();
        assert_eq!(stale(gate.guard(&mut tx, "invoice", 8)), (8, 9));
    }
    let rows: Vec<String> = db.query(format!("SELECT value FROM {items}")).unwrap();
    assert!(
        rows.is_empty(),
        "the refused transaction's write is not visible"
    );

    let mut tx = db.start_transaction(TxOpts::default()).unwrap();
    gate.guard(&mut tx, "invoice", 9).unwrap();
    tx.query_drop(format!("INSERT INTO {items} VALUES ('invoice', 'current')"))
        .unwrap();
    tx.commit().unwrap();
    let rows: Vec<String> = db.query(format!("SELECT value FROM {items}")).unwrap();
    assert_eq!(rows, ["current"]);
    assert_eq!(stored(&mut db, &gate, "invoice"), Some(9));
}

/// Transaction A takes the gate with `first` and holds it; B asks with `second` meanwhile and must
/// wait for A's commit (the row lock), then be judged against what A committed.
fn race(name: &str, new_resource: bool, first: u64, second: u64) -> Result<(), GateError> {
    let mut a = db();
    let gate = gate(name, &mut a);
    if !new_resource {
        guarded_write(&mut a, &gate, "ledger", 1).unwrap();
    }
    let mut tx = a.start_transaction(TxOpts::default()).unwrap();
    gate.guard(&mut tx, "ledger", first).expect("A goes first");

    let (done, outcome) = mpsc::channel();
    let b_gate = gate.clone();
    let b = std::thread::spawn(move || {
        let mut b = db();
        let mut tx = b.start_transaction(TxOpts::default()).unwrap();
        let result = b_gate.guard(&mut tx, "ledger", second);
        if result.is_ok() {
            tx.commit().unwrap();
        }
        done.send(result).unwrap();
    });
    assert!(
        outcome.recv_timeout(Duration::from_millis(300)).is_err(),
        "B must wait for A's row lock"
    );
    tx.commit().unwrap();
    let result = outcome
        .recv_timeout(Duration::from_secs(20))
        .expect("B answered once A committed");
    b.join().unwrap();
    result
}

#[test]
fn racing_transactions_the_older_fence_committing_later_is_refused() {
    for new_resource in [false, true] {
        let name = format!("race_old_{new_resource}");
        assert_eq!(stale(race(&name, new_resource, 5, 4)), (4, 5), "{name}");
        let gate = FenceGate::new(&format!("gate_{name}_{}", std::process::id())).unwrap();
        assert_eq!(stored(&mut db(), &gate, "ledger"), Some(5), "{name}");
    }
    for new_resource in [false, true] {
        let name = format!("race_new_{new_resource}");
        race(&name, new_resource, 4, 5).expect("a newer fence after an older commit");
        let gate = FenceGate::new(&format!("gate_{name}_{}", std::process::id())).unwrap();
        assert_eq!(stored(&mut db(), &gate, "ledger"), Some(5), "{name}");
    }
}

/// Eight first writers of a resource nobody wrote yet, all at once: every one gets a verdict (no
/// deadlock, which a locking read of the missing row first would cause under REPEATABLE READ),
/// the largest fence is always accepted, and it is what stays.
#[test]
fn first_writers_of_a_new_resource_racing_never_deadlock() {
    const WRITERS: u64 = 8;
    let mut admin = db();
    let gate = gate("first", &mut admin);
    for round in 0..5 {
        let resource = format!("fresh-{round}");
        let start = Arc::new(Barrier::new(WRITERS as usize));
        let writers: Vec<_> = (1..=WRITERS)
            .map(|fence| {
                let (gate, start, resource) = (gate.clone(), start.clone(), resource.clone());
                std::thread::spawn(move || {
                    let mut db = db();
                    let mut tx = db.start_transaction(TxOpts::default()).unwrap();
                    start.wait();
                    let result = gate.guard(&mut tx, &resource, fence);
                    if result.is_ok() {
                        std::thread::sleep(Duration::from_millis(5));
                        tx.commit().unwrap();
                    }
                    (fence, result)
                })
            })
            .collect();
        for w in writers {
            let (fence, result) = w.join().unwrap();
            match &result {
                Ok(()) => {}
                Err(GateError::Stale { stored, .. }) => assert!(*stored > fence),
                Err(e) => panic!("round {round}, fence {fence}: {e}"),
            }
            if fence == WRITERS {
                assert!(
                    matches!(result, Ok(())),
                    "the largest fence is always accepted"
                );
            }
        }
        assert_eq!(stored(&mut admin, &gate, &resource), Some(WRITERS as i64));
    }
}

#[test]
fn bad_input_is_refused_before_any_sql_and_qualified_names_work() {
    let mut db = db();
    let gate = gate("input", &mut db);
    let mut tx = db.start_transaction(TxOpts::default()).unwrap();
    let too_long = "r".repeat(1025);
    for (resource, fence) in [
        ("r", 0),
        ("r", i64::MAX as u64 + 1),
        ("", 1),
        ("a\0b", 1),
        (too_long.as_str(), 1),
    ] {
        match gate.guard(&mut tx, resource, fence) {
            Err(GateError::Backend(e)) => assert_eq!(e.kind(), ErrorKind::InvalidArgument),
            other => panic!("{resource:?}/{fence}: expected InvalidArgument, got {other:?}"),
        }
    }
    gate.guard(&mut tx, &"r".repeat(1024), i64::MAX as u64)
        .expect("the longest resource and the largest fence");
    tx.commit().unwrap();
    drop(db);

    let mut db = self::db();
    let database: String = db.query_first("SELECT DATABASE()").unwrap().unwrap();
    let qualified =
        FenceGate::new(&format!("{database}.gate_qualified_{}", std::process::id())).unwrap();
    qualified.create_table(&mut db).unwrap();
    qualified.create_table(&mut db).expect("twice is fine");
    guarded_write(&mut db, &qualified, "r", 3).unwrap();
    assert_eq!(stale(guarded_write(&mut db, &qualified, "r", 2)), (2, 3));
}

/// The SQL block of docs/gate.md after `<!-- test: MARKER -->`, with the documented names replaced
/// by this test's own, and the client's DELIMITER lines (not SQL) taken out.
fn documented(marker: &str, table: &str, procedure: &str) -> String {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/gate.md"))
        .expect("docs/gate.md");
    let at = doc
        .find(&format!("<!-- test: {marker} -->"))
        .unwrap_or_else(|| panic!("docs/gate.md has no block {marker}"));
    let block = &doc[at..];
    let start = block.find("```sql\n").expect("a sql block") + "```sql\n".len();
    let end = start + block[start..].find("```").expect("the block's end");
    block[start..end]
        .lines()
        .filter(|l| !l.starts_with("DELIMITER"))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("END //", "END")
        .replace("leasehold_fences", table)
        .replace("leasehold_guard", procedure)
}

/// docs/gate.md's MySQL SQL, run as written: the table is the one the Rust gate uses, the two
/// guard statements decide by the fence read back, and the procedure signals 45000 on a stale one.
#[test]
fn the_documented_mysql_sql_works_as_documented() {
    let mut db = db();
    let table = format!("gate_doc_{}", std::process::id());
    let procedure = format!("gate_doc_guard_{}", std::process::id());
    db.query_drop(documented("mysql-table", &table, &procedure))
        .unwrap();
    db.query_drop(documented("mysql-procedure", &table, &procedure))
        .unwrap();

    let guard = documented("mysql-guard", &table, &procedure);
    let (upsert, read) = guard.split_once(";\n").expect("two statements");
    let mut tx = db.start_transaction(TxOpts::default()).unwrap();
    for (fence, verdict) in [(7i64, 7i64), (7, 7), (6, 7)] {
        tx.exec_drop(upsert, (b"doc", fence, fence, fence, fence))
            .unwrap();
        let stored: Option<i64> = tx
            .exec_first(read.trim_end_matches(';'), (b"doc",))
            .unwrap();
        assert_eq!(stored, Some(verdict), "fence {fence}");
    }
    tx.commit().unwrap();

    // The documented table is the Rust gate's.
    let gate = FenceGate::new(&table).unwrap();
    assert_eq!(stale(guarded_write(&mut db, &gate, "doc", 6)), (6, 7));

    let call = format!("CALL {procedure}(?, ?)");
    db.exec_drop(&call, (b"doc", 8)).expect("a newer fence");
    match db.exec_drop(&call, (b"doc", 7)) {
        Err(mysql::Error::MySqlError(e)) => {
            assert_eq!(e.state, "45000");
            assert_eq!(
                e.message,
                "stale fence: 7 is older than 8, already accepted"
            );
        }
        other => panic!("expected the procedure's signal, got {other:?}"),
    }
}
