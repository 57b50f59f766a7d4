//! The fence gate judged by the fault harness's checker, end to end on real PostgreSQL: writers
//! take one key from the advisory-lock backend with a 300 ms TTL, some of them pause past their
//! TTL (as a GC pause or SIGSTOP would) and then write as if nothing happened, and every write goes
//! to a protected table in a PostgreSQL transaction, recorded in the testkit's history. The
//! checker's (D) counts stale writes accepted (an accepted write whose fence is below one accepted
//! earlier):
//!
//! * through the real [`FenceGate`]: none, and the paused holders' writes are refused;
//! * with the gate bypassed (a plain `UPDATE`, which accepts everything), on the same schedule:
//!   some — the paused holders' late writes land over their successors'. This proves the run does
//!   produce stale writers, so the zero above is the gate's doing.
//!
//! The schedule (who pauses, how long, how long each holder works) comes from a seed, printed as
//! `seed=N`; `TORTURE_SEED=N` replays it, as for the torture runs.

use leasehold_core::{Client, Config, Error};
use leasehold_postgres::{FenceGate, GateError, PostgresBackend};
use leasehold_testkit::history::seed;
use leasehold_testkit::{check, unique_key, CheckConfig, FencedStore, History, Op, Outcome};
use leasehold_testkit::{PostgresServer, Report};
use postgres::NoTls;
use std::time::Duration;

const WORKERS: usize = 4;
const ROUNDS: usize = 6;
const TTL: Duration = Duration::from_millis(300);
const WAIT: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT_MS: u64 = 2000;
const IO_TIMEOUT_MS: u64 = 2000;
/// Past the TTL by enough that the server has ended the paused holder's session (its idle timeout
/// is the TTL) and a waiting worker has taken the key and written.
const PAUSE: Duration = Duration::from_millis(700);

/// What each worker does in each round: pause past its TTL before writing (`Some`), or work a
/// little (`None`, then `work` ms).
struct Schedule {
    pauses: Vec<Vec<Option<Duration>>>,
    work: Vec<Vec<Duration>>,
}

/// SplitMix64: a seeded schedule without another dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

impl Schedule {
    fn new(seed: u64) -> Schedule {
        let mut rng = Rng(seed);
        let mut pauses = vec![vec![None; ROUNDS]; WORKERS];
        let mut work = vec![vec![Duration::ZERO; ROUNDS]; WORKERS];
        for w in 0..WORKERS {
            for r in 0..ROUNDS {
                // Pauses in the early rounds only, while the others still have rounds to write in.
                if r + 2 < ROUNDS && rng.below(10) < 3 {
                    pauses[w][r] = Some(PAUSE + Duration::from_millis(rng.below(200)));
                }
                work[w][r] = Duration::from_millis(rng.below(20));
            }
        }
        // At least one pause at the start, when every other worker is still contending.
        pauses[0][0].get_or_insert(PAUSE);
        Schedule { pauses, work }
    }

    fn pause_count(&self) -> usize {
        self.pauses.iter().flatten().filter(|p| p.is_some()).count()
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Store {
    /// Every write passes the real fence gate in its transaction.
    Gated,
    /// Every write is a plain UPDATE: what an application without a gate does.
    Bypassed,
}

fn db() -> postgres::Client {
    postgres::Client::connect(&PostgresServer::shared().url(), NoTls).expect("a session")
}

/// The protected store of one run: a table with one row per resource, and the gate's table.
struct Protected {
    store: Store,
    table: String,
    gate: FenceGate,
}

impl Protected {
    fn new(store: Store, key: &str) -> Protected {
        let suffix = format!(
            "{}_{}",
            std::process::id(),
            format!("{store:?}").to_lowercase()
        );
        let table = format!("harness_store_{suffix}");
        let gate = FenceGate::new(&format!("harness_fences_{suffix}")).unwrap();
        let mut db = db();
        gate.create_table(&mut db).unwrap();
        db.batch_execute(&format!(
            "DROP TABLE IF EXISTS {table};
             CREATE TABLE {table} (resource text PRIMARY KEY, value text NOT NULL, fence bigint NOT NULL)"
        ))
        .unwrap();
        db.execute(&format!("INSERT INTO {table} VALUES ($1, '', 0)"), &[&key])
            .unwrap();
        Protected { store, table, gate }
    }

    /// One write with `fence` in its own transaction, recorded in `history` as decided by the
    /// database. Returns whether it was accepted.
    fn write(
        &self,
        db: &mut postgres::Client,
        history: &History,
        worker: usize,
        key: &str,
        lease: usize,
        fence: u64,
    ) -> bool {
        let mut record = FencedStore::gated_write(history, worker, key, Some(lease), fence);
        let mut tx = db.transaction().expect("begin");
        let verdict = match self.store {
            Store::Gated => self.gate.guard(&mut tx, key, fence),
            Store::Bypassed => Ok(()),
        };
        match verdict {
            Ok(()) => {
                tx.execute(
                    &format!(
                        "UPDATE {} SET value = $2, fence = $3 WHERE resource = $1",
                        self.table
                    ),
                    &[&key, &format!("w{worker}"), &(fence as i64)],
                )
                .expect("the protected write");
                // Decided: the rows stay locked until the commit, so no later writer can be
                // judged before this one.
                record.decided();
                match tx.commit() {
                    Ok(()) => {
                        record.finish(true);
                        true
                    }
                    Err(e) => {
                        eprintln!("w{worker}: commit failed: {e}");
                        record.unknown();
                        false
                    }
                }
            }
            Err(GateError::Stale { .. }) => {
                record.decided();
                drop(tx); // rolls back
                record.finish(false);
                false
            }
            Err(e) => panic!("w{worker}: the gate failed: {e}"),
        }
    }

    /// The fence of the last committed write.
    fn committed_fence(&self, key: &str) -> i64 {
        db().query_one(
            &format!("SELECT fence FROM {} WHERE resource = $1", self.table),
            &[&key],
        )
        .unwrap()
        .get(0)
    }
}

fn outcome_of(e: &Error) -> Outcome {
    match e {
        Error::NotAcquired(_) => Outcome::NotAcquired,
        Error::Lost(_) => Outcome::Lost,
        Error::InvalidArgument(_) => Outcome::Failed,
        _ => Outcome::Unknown,
    }
}

/// One run of `schedule` against `store`: the checker's report on its history.
fn run(store: Store, schedule: &Schedule) -> Report {
    let key = unique_key(&format!("gate-harness-{store:?}"));
    let protected = Protected::new(store, &key);
    let url = PostgresServer::shared().url_with(&format!(
        "lock=advisory&pool_size={}&connect_timeout_ms={CONNECT_TIMEOUT_MS}&io_timeout_ms={IO_TIMEOUT_MS}",
        WORKERS * 2
    ));
    let client = Client::new(PostgresBackend::connect(&Config::parse(&url).unwrap()).unwrap());
    let call = Duration::from_millis(CONNECT_TIMEOUT_MS + IO_TIMEOUT_MS);
    let history = History::new();
    std::thread::scope(|s| {
        for w in 0..WORKERS {
            let (client, history, protected, key) = (&client, &history, &protected, &key);
            s.spawn(move || {
                let mut db = db();
                for r in 0..ROUNDS {
                    let id = history.invoke(Op::acquire(w, key, TTL, WAIT, WAIT + call));
                    let lease = match client.acquire(key, TTL, WAIT) {
                        Ok(lease) => lease,
                        Err(e) => {
                            history.fail(id, outcome_of(&e));
                            continue;
                        }
                    };
                    history.ok(id, Some(lease.fence()));
                    history.believe(id, || lease.remaining());
                    // The stale holder: stopped past its TTL, then carrying on as if it still
                    // held the key.
                    std::thread::sleep(schedule.pauses[w][r].unwrap_or(schedule.work[w][r]));
                    history.believe(id, || lease.remaining());
                    protected.write(&mut db, history, w, key, id, lease.fence());
                    let rel = history.invoke(Op::release(w, key, id, call));
                    match lease.release() {
                        Ok(()) => history.ok(rel, None),
                        Err(e) => history.fail(rel, outcome_of(&e)),
                    }
                }
            });
        }
    });
    let report = check(&history.snapshot(), &CheckConfig::default());
    // The table agrees with the history: its last committed fence is the largest accepted one.
    let largest = history
        .snapshot()
        .ops
        .iter()
        .filter(|o| o.outcome == Outcome::Ok && o.kind == leasehold_testkit::OpKind::Write)
        .filter_map(|o| o.fence)
        .max()
        .unwrap_or(0);
    if store == Store::Gated {
        assert_eq!(
            protected.committed_fence(&key) as u64,
            largest,
            "through the gate, the store ends with the largest fence accepted"
        );
    }
    report
}

#[test]
fn the_gate_refuses_every_stale_write_that_gets_through_without_it() {
    let seed = seed("gate_harness");
    let schedule = Schedule::new(seed);
    eprintln!(
        "gate_harness: {WORKERS} workers x {ROUNDS} rounds, TTL {TTL:?}, {} pauses past the TTL",
        schedule.pause_count()
    );

    let gated = run(Store::Gated, &schedule);
    eprintln!(
        "gate_harness seed={seed} gated:    stale writes accepted {}, writes accepted {}, refused {}; {}",
        gated.stale_writes.count,
        gated.writes_accepted,
        gated.writes_rejected,
        gated.summary_line()
    );
    let bypassed = run(Store::Bypassed, &schedule);
    eprintln!(
        "gate_harness seed={seed} bypassed: stale writes accepted {}, writes accepted {}, refused {}; {}",
        bypassed.stale_writes.count,
        bypassed.writes_accepted,
        bypassed.writes_rejected,
        bypassed.summary_line()
    );

    let replay = format!("(replay: TORTURE_SEED={seed})");
    assert_eq!(
        gated.stale_writes.count, 0,
        "stale writes got through the gate {replay}: {:?}",
        gated.stale_writes.examples
    );
    assert!(
        gated.writes_rejected > 0,
        "the paused holders' writes were refused by the gate {replay}"
    );
    assert!(
        bypassed.stale_writes.count > 0,
        "without the gate the same schedule lets stale writes land {replay}"
    );
    assert_eq!(
        bypassed.writes_rejected, 0,
        "a plain UPDATE refuses nothing"
    );
}
