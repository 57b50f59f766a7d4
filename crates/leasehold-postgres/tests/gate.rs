//! The fence gate on a real PostgreSQL: a newer or equal fence is let through, an older one is
//! refused and its transaction commits nothing, and two racing transactions are judged in the order
//! they commit — the one that commits later with the older fence is refused.

use leasehold_core::ErrorKind;
use leasehold_postgres::{FenceGate, GateError};
use leasehold_testkit::PostgresServer;
use postgres::{IsolationLevel, NoTls};
use std::sync::mpsc;
use std::time::Duration;

fn db() -> postgres::Client {
    postgres::Client::connect(&PostgresServer::shared().url(), NoTls).expect("a session")
}

/// A gate over a table of this test's own (and of this process: tests share the server).
fn gate(name: &str, db: &mut postgres::Client) -> FenceGate {
    let gate = FenceGate::new(&format!("gate_{name}_{}", std::process::id())).unwrap();
    gate.create_table(db).expect("create the gate table");
    gate
}

/// The highest fence the gate has accepted for `resource`.
fn stored(db: &mut postgres::Client, gate: &FenceGate, resource: &str) -> Option<i64> {
    db.query_opt(
        &format!("SELECT fence FROM \"{}\" WHERE resource = $1", gate.table()),
        &[&resource],
    )
    .unwrap()
    .map(|r| r.get(0))
}

/// One transaction: the gate, then the protected write; committed if the gate let it through.
fn guarded_write(
    db: &mut postgres::Client,
    gate: &FenceGate,
    r: &str,
    fence: u64,
) -> Result<(), GateError> {
    let mut tx = db.transaction().unwrap();
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
fn newer_and_equal_fences_pass_an_older_one_is_refused() {
    let mut db = db();
    let gate = gate("order", &mut db);
    guarded_write(&mut db, &gate, "report", 5).expect("first fence");
    assert_eq!(stored(&mut db, &gate, "report"), Some(5));
    guarded_write(&mut db, &gate, "report", 7).expect("a newer fence");
    guarded_write(&mut db, &gate, "report", 7).expect("the same holder again");
    assert_eq!(stale(guarded_write(&mut db, &gate, "report", 6)), (6, 7));
    assert_eq!(
        stored(&mut db, &gate, "report"),
        Some(7),
        "refusal changed nothing"
    );
    // Resources are independent.
    guarded_write(&mut db, &gate, "other", 1).expect("another resource, its own history");
    assert_eq!(stored(&mut db, &gate, "report"), Some(7));
}

#[test]
fn a_refused_transaction_commits_nothing_of_its_own() {
    let mut db = db();
    let gate = gate("rollback", &mut db);
    let items = format!("gate_items_{}", std::process::id());
    db.batch_execute(&format!(
        "CREATE TABLE {items} (resource text PRIMARY KEY, value text NOT NULL)"
    ))
    .unwrap();
    guarded_write(&mut db, &gate, "invoice", 9).unwrap();

    // The stale holder writes first and asks the gate after: the refusal must still take its
    // write away (the caller rolls back — here by dropping the transaction).
    {
        let mut tx = db.transaction().unwrap();
        tx.execute(
            &format!("INSERT INTO {items} VALUES ('invoice', 'stale')"),
            &[],
        )
        .unwrap();
        assert_eq!(stale(gate.guard(&mut tx, "invoice", 8)), (8, 9));
    }
    let rows = db
        .query(&format!("SELECT value FROM {items}"), &[])
        .unwrap();
    assert!(
        rows.is_empty(),
        "the refused transaction's write is not visible"
    );

    // The current holder's transaction, gate first, commits both.
    let mut tx = db.transaction().unwrap();
    gate.guard(&mut tx, "invoice", 9).unwrap();
    tx.execute(
        &format!("INSERT INTO {items} VALUES ('invoice', 'current')"),
        &[],
    )
    .unwrap();
    tx.commit().unwrap();
    let value: String = db
        .query_one(&format!("SELECT value FROM {items}"), &[])
        .unwrap()
        .get(0);
    assert_eq!(value, "current");
}

/// Transaction A takes the gate with `first` and holds it; B asks with `second` meanwhile and must
/// wait for A's commit (the row lock), then be judged against what A committed.
fn race(name: &str, new_resource: bool, first: u64, second: u64) -> Result<(), GateError> {
    let mut a = db();
    let gate = gate(name, &mut a);
    if !new_resource {
        guarded_write(&mut a, &gate, "ledger", 1).unwrap();
    }
    let mut tx = a.transaction().unwrap();
    gate.guard(&mut tx, "ledger", first).expect("A goes first");

    let (done, outcome) = mpsc::channel();
    let b_gate = gate.clone();
    let b = std::thread::spawn(move || {
        let mut b = db();
        let mut tx = b.transaction().unwrap();
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
        .recv_timeout(Duration::from_secs(10))
        .expect("B answered once A committed");
    b.join().unwrap();
    result
}

#[test]
fn racing_transactions_the_older_fence_committing_later_is_refused() {
    for new_resource in [false, true] {
        let name = format!("race_old_{new_resource}");
        assert_eq!(stale(race(&name, new_resource, 5, 4)), (4, 5), "{name}");
        let mut db = db();
        let gate = FenceGate::new(&format!("gate_{name}_{}", std::process::id())).unwrap();
        assert_eq!(stored(&mut db, &gate, "ledger"), Some(5), "{name}");
    }
    // The other way round both pass: the older one committed first, and was current then.
    for new_resource in [false, true] {
        let name = format!("race_new_{new_resource}");
        race(&name, new_resource, 4, 5).expect("a newer fence after an older commit");
        let mut db = db();
        let gate = FenceGate::new(&format!("gate_{name}_{}", std::process::id())).unwrap();
        assert_eq!(stored(&mut db, &gate, "ledger"), Some(5), "{name}");
    }
}

/// Under REPEATABLE READ the loser of a race cannot re-read the row: the server refuses it with a
/// serialization failure, which the gate passes on with its SQLSTATE. Nothing stale commits.
#[test]
fn under_repeatable_read_a_racing_loser_gets_a_serialization_failure() {
    let mut a = db();
    let gate = gate("rr", &mut a);
    guarded_write(&mut a, &gate, "stock", 1).unwrap();
    let mut tx = a.transaction().unwrap();
    gate.guard(&mut tx, "stock", 5).unwrap();
    let (done, outcome) = mpsc::channel();
    let b_gate = gate.clone();
    let b = std::thread::spawn(move || {
        let mut b = db();
        let mut tx = b
            .build_transaction()
            .isolation_level(IsolationLevel::RepeatableRead)
            .start()
            .unwrap();
        done.send(b_gate.guard(&mut tx, "stock", 4)).unwrap();
    });
    assert!(outcome.recv_timeout(Duration::from_millis(300)).is_err());
    tx.commit().unwrap();
    match outcome.recv_timeout(Duration::from_secs(10)).unwrap() {
        Err(GateError::Backend(e)) => {
            assert_eq!(e.kind(), ErrorKind::Unavailable);
            assert!(e.to_string().contains("40001"), "{e}");
        }
        other => panic!("expected a serialization failure, got {other:?}"),
    }
    b.join().unwrap();
    assert_eq!(stored(&mut db(), &gate, "stock"), Some(5));
}

#[test]
fn bad_input_is_refused_before_any_sql_and_leaves_the_transaction_usable() {
    let mut db = db();
    let gate = gate("input", &mut db);
    let mut tx = db.transaction().unwrap();
    let too_long = "r".repeat(1025);
    for (resource, fence) in [
        ("r", 0),
        ("r", i64::MAX as u64 + 1),
        ("r", u64::MAX),
        ("", 1),
        ("a\0b", 1),
        (too_long.as_str(), 1),
    ] {
        match gate.guard(&mut tx, resource, fence) {
            Err(GateError::Backend(e)) => assert_eq!(e.kind(), ErrorKind::InvalidArgument),
            other => panic!("{resource:?}/{fence}: expected InvalidArgument, got {other:?}"),
        }
    }
    gate.guard(&mut tx, "r", i64::MAX as u64)
        .expect("the largest fence the column holds");
    tx.commit().unwrap();
    for bad in ["", "a;b", "x.y.z", "1x", "select *", "t\"x"] {
        let e = FenceGate::new(bad).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{bad:?}");
    }
}

#[test]
fn schema_qualified_tables_and_concurrent_creation_work() {
    let mut admin = db();
    let schema = format!("gate_schema_{}", std::process::id());
    admin
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .unwrap();
    let gate = FenceGate::new(&format!("{schema}.Fences")).unwrap();
    // Several processes starting at once each create the table: none of them fails.
    let creators: Vec<_> = (0..6)
        .map(|_| {
            let gate = gate.clone();
            std::thread::spawn(move || gate.create_table(&mut db()))
        })
        .collect();
    for c in creators {
        c.join().unwrap().expect("create_table racing others");
    }
    guarded_write(&mut admin, &gate, "r", 3).unwrap();
    assert_eq!(stale(guarded_write(&mut admin, &gate, "r", 2)), (2, 3));
    // The name is used as given (quoted), so the mixed case is the table's.
    let n: i64 = admin
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = 'Fences'",
            &[&schema],
        )
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
}

/// The SQL block of docs/gate.md after `<!-- test: MARKER -->`, with the documented names replaced
/// by this test's own.
fn documented(marker: &str, table: &str, function: &str) -> String {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/gate.md"))
        .expect("docs/gate.md");
    let at = doc
        .find(&format!("<!-- test: {marker} -->"))
        .unwrap_or_else(|| panic!("docs/gate.md has no block {marker}"));
    let block = &doc[at..];
    let start = block.find("```sql\n").expect("a sql block") + "```sql\n".len();
    let end = start + block[start..].find("```").expect("the block's end");
    block[start..end]
        .replace("leasehold_fences", table)
        .replace("leasehold_guard", function)
}

/// docs/gate.md's PostgreSQL SQL, run as written: the table is the one the Rust gate uses, the
/// guard statement accepts by affected rows, and the function raises LH001 on a stale fence.
#[test]
fn the_documented_postgres_sql_works_as_documented() {
    let mut db = db();
    let table = format!("gate_doc_{}", std::process::id());
    let function = format!("gate_doc_guard_{}", std::process::id());
    db.batch_execute(&documented("postgres-table", &table, &function))
        .unwrap();
    db.batch_execute(&documented("postgres-function", &table, &function))
        .unwrap();

    let guard = documented("postgres-guard", &table, &function);
    let mut tx = db.transaction().unwrap();
    assert_eq!(tx.execute(&guard, &[&"doc", &7i64]).unwrap(), 1, "accepted");
    assert_eq!(tx.execute(&guard, &[&"doc", &7i64]).unwrap(), 1, "equal");
    assert_eq!(tx.execute(&guard, &[&"doc", &6i64]).unwrap(), 0, "refused");
    tx.commit().unwrap();

    // The documented table is the Rust gate's.
    let gate = FenceGate::new(&table).unwrap();
    assert_eq!(stale(guarded_write(&mut db, &gate, "doc", 6)), (6, 7));

    let call = format!("SELECT {function}($1, $2)");
    db.execute(&call, &[&"doc", &8i64]).expect("a newer fence");
    let e = db.execute(&call, &[&"doc", &7i64]).unwrap_err();
    let e = e.as_db_error().expect("raised by the function");
    assert_eq!(e.code().code(), "LH001");
    assert_eq!(
        e.message(),
        "stale fence for doc: 7 is older than 8, already accepted"
    );
}
