//! `cargo bench -p leasehold-mysql`: the uncontended lock cycle (try_acquire + release of a fresh key,
//! one thread) in both modes next to the floor, measured in the same run against a MariaDB this bench
//! starts on a free loopback port:
//!
//! - `mysql/named` and `mysql/table` beside a bare `SELECT GET_LOCK(?, 0)` then
//!   `SELECT RELEASE_LOCK(?)` on one connection of the `mysql` crate, prepared statements, two round
//!   trips (what a hand-written client would run);
//! - `mysql/bare_pair`: that pair beside two prepared `SELECT 1` round trips, the protocol's own floor.
//! - `mysql/named_vs_write` (the named cycle again) and `mysql/write_floor` (that floor itself, beside
//!   the bare pair) against a second floor: the bare pair with, between its two statements, the one
//!   write any named-mode lease must make, the fence row's upsert as named mode writes it (a fresh
//!   row, autocommit, prepared): three round trips. Named mode cannot come close to the bare pair:
//!   a fence that survives the server losing data has to be written before the lease is handed out
//!   (and the row changed again before the lock is released, see src/named.rs); this floor says
//!   how far above that one write the cycle is.
//!
//! Then a breakdown (`breakdown.json` beside them): the pieces of the cycle timed in alternation, on
//! one connection (the row write, fresh or reused rows, the explicit transaction, text or prepared,
//! one more statement in a batch, the release's row update) beside both modes' cycles through the
//! library.
//!
//! Each figure is timed in alternation with its floor (tests/support/paired.rs):
//! `target/criterion/mysql/<bench>/new/estimates.json` is the figure, `paired.json` beside it the
//! floor and the ratio (see scripts/bench.sh).
//!
//! Then each mode's cycle runs through a proxy that counts the commands the client sends: a command
//! waits for its answer before the next one goes, so that is the cycle's round trips, written to
//! `round_trips.json` beside `paired.json` (a time says how far from the floor; this says why).

#[path = "../../../tests/support/paired.rs"]
mod paired;

use criterion::{criterion_group, criterion_main, Criterion};
use leasehold_core::{Client, Config};
use leasehold_mysql::MysqlBackend;
use leasehold_testkit::MariaDbServer;
use mysql::prelude::Queryable;
use std::cell::{Cell, RefCell};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const TTL: Duration = Duration::from_secs(30);
const SAMPLES: usize = 20;
/// Cycles counted through the proxy: enough that the once-a-minute sweep of old fence rows (one
/// more command, at most) shows as a fraction, not as a whole round trip.
const COUNTED: u64 = 500;

fn client(url: &str) -> Client {
    let config = Config::parse(url).unwrap_or_else(|e| panic!("bad bench URL: {e}"));
    Client::new(MysqlBackend::connect(&config).unwrap_or_else(|e| panic!("connect {url}: {e}")))
}

fn mysql(c: &mut Criterion) {
    let server = MariaDbServer::start();
    let named = client(&server.url_with("lock=named"));
    let table = client(&server.url_with("lock=table&table=bench_locks"));
    let raw = RefCell::new(Raw::connect(&server));
    // Names of at most 64 characters (the server's limit), never used twice: "f:<pid>:<n>".
    let id = Cell::new(0u64);
    let pid = std::process::id();
    let fresh = || {
        id.set(id.get() + 1);
        format!("f:{pid}:{}", id.get())
    };
    let bare_pair = || raw.borrow_mut().bare_pair(&fresh());
    let write_floor = || raw.borrow_mut().write_floor(&fresh());
    let two_select1 = || raw.borrow_mut().two_select1();

    let mut g = c.benchmark_group("mysql");
    paired::bench(
        &mut g,
        "mysql",
        "named",
        SAMPLES,
        paired::fresh_cycle(&named, "bench-named", TTL),
        bare_pair,
    );
    paired::bench(
        &mut g,
        "mysql",
        "named_vs_write",
        SAMPLES,
        paired::fresh_cycle(&named, "bench-named-w", TTL),
        write_floor,
    );
    paired::bench(
        &mut g,
        "mysql",
        "table",
        SAMPLES,
        paired::fresh_cycle(&table, "bench-table", TTL),
        bare_pair,
    );
    paired::bench(
        &mut g,
        "mysql",
        "bare_pair",
        SAMPLES,
        bare_pair,
        two_select1,
    );
    paired::bench(
        &mut g,
        "mysql",
        "write_floor",
        SAMPLES,
        write_floor,
        bare_pair,
    );
    g.finish();

    breakdown(&raw, &fresh, &named, &table);

    let proxy = CommandCounter::start(server.port());
    let through = |query: &str| {
        let url = server.url_with(query);
        let url = url.replace(
            &format!(":{}/", server.port()),
            &format!(":{}/", proxy.port),
        );
        client(&url)
    };
    for (name, query, floor) in [
        ("named", "lock=named", 2),
        ("table", "lock=table&table=bench_locks", 2),
    ] {
        let counted = through(query);
        let per_cycle = proxy.per_op(paired::fresh_cycle(&counted, "bench-count", TTL));
        write_round_trips(name, per_cycle, floor);
    }
}

/// The server's clock in µs, as named mode writes it (src/names.rs).
const NOW_US: &str = "(UNIX_TIMESTAMP() * 1000000 + MICROSECOND(NOW(6)))";
/// Named mode's fence table (the default table name + `_fences`).
const FENCES: &str = "`leasehold_locks_fences`";

/// Named mode's upsert of a name's row once its lock is taken (src/named.rs, without the
/// `LAST_INSERT_ID` that hands the fence back: a client of its own would read it some way too).
fn upsert_sql(name: &str) -> String {
    format!(
        "INSERT INTO {FENCES} (name, fence, holder, expires_us) \
           VALUES ({name}, {NOW_US}, CONNECTION_ID(), {NOW_US} + {ttl}) \
         ON DUPLICATE KEY UPDATE fence = GREATEST(fence + 1, VALUES(fence)), \
           holder = VALUES(holder), expires_us = VALUES(expires_us)",
        ttl = TTL.as_micros()
    )
}

/// Named mode's change of the row before the lock is released (src/named.rs, without the
/// `LAST_INSERT_ID` that says whether the lease was live).
fn clear_sql(name: &str) -> String {
    format!(
        "UPDATE {FENCES} SET expires_us = LEAST(expires_us, {NOW_US}), holder = 0 \
         WHERE name = {name} AND holder = CONNECTION_ID()"
    )
}

/// One connection of the `mysql` crate with the floors' prepared statements.
struct Raw {
    conn: mysql::Conn,
    lock: mysql::Statement,
    unlock: mysql::Statement,
    select1: mysql::Statement,
    upsert: mysql::Statement,
    clear: mysql::Statement,
}

impl Raw {
    fn connect(server: &MariaDbServer) -> Raw {
        let mut conn = mysql::Conn::new(mysql::Opts::from_url(&server.url()).unwrap())
            .unwrap_or_else(|e| panic!("raw connection to MariaDB on port {}: {e}", server.port()));
        Raw {
            lock: conn.prep("SELECT GET_LOCK(?, 0)").unwrap(),
            unlock: conn.prep("SELECT RELEASE_LOCK(?)").unwrap(),
            select1: conn.prep("SELECT 1").unwrap(),
            upsert: conn.prep(upsert_sql("?")).unwrap(),
            clear: conn.prep(clear_sql("?")).unwrap(),
            conn,
        }
    }

    fn take(&mut self, name: &str) {
        let got: Option<i64> = self.conn.exec_first(&self.lock, (name,)).unwrap();
        assert_eq!(got, Some(1), "a fresh named lock was taken");
    }

    fn give_back(&mut self, name: &str) {
        let freed: Option<i64> = self.conn.exec_first(&self.unlock, (name,)).unwrap();
        assert_eq!(freed, Some(1));
    }

    /// `SELECT GET_LOCK(?, 0)`, `SELECT RELEASE_LOCK(?)`: two round trips.
    fn bare_pair(&mut self, name: &str) {
        self.take(name);
        self.give_back(name);
    }

    /// The bare pair with the fence row's upsert between: three round trips, one commit.
    fn write_floor(&mut self, name: &str) {
        self.take(name);
        self.conn.exec_drop(&self.upsert, (name,)).unwrap();
        self.give_back(name);
    }

    fn two_select1(&mut self) {
        for _ in 0..2 {
            let _: Option<i64> = self.conn.exec_first(&self.select1, ()).unwrap();
        }
    }

    /// A text batch, every answer read.
    fn text(&mut self, sql: &str) {
        let mut result = self.conn.query_iter(sql).unwrap();
        while let Some(set) = result.iter() {
            for row in set {
                row.unwrap();
            }
        }
    }
}

/// The pieces of the named cycle, timed in alternation (rounds of [`PIECE_OPS`] runs of each, the
/// median over [`PIECE_ROUNDS`] rounds), so that load drift hits them alike. Printed as time per
/// run and its excess over the bare pair, and written to `<criterion home>/mysql/breakdown.json`.
fn breakdown(raw: &RefCell<Raw>, fresh: &dyn Fn() -> String, named: &Client, table: &Client) {
    let reused = "f:reused";
    let quoted = |name: &str| format!("'{name}'");
    type Piece<'a> = (&'static str, Box<dyn FnMut() + 'a>);
    let mut pieces: Vec<Piece> = vec![
        (
            "bare pair: prepared GET_LOCK, RELEASE_LOCK (2 round trips)",
            Box::new(|| raw.borrow_mut().bare_pair(&fresh())),
        ),
        (
            "text pair: the same as text queries",
            Box::new(|| {
                let n = quoted(&fresh());
                let mut raw = raw.borrow_mut();
                raw.text(&format!("SELECT GET_LOCK({n}, 0)"));
                raw.text(&format!("SELECT RELEASE_LOCK({n})"));
            }),
        ),
        (
            "text pair, each batch one statement more (DO 0)",
            Box::new(|| {
                let n = quoted(&fresh());
                let mut raw = raw.borrow_mut();
                raw.text(&format!("SELECT GET_LOCK({n}, 0); DO 0"));
                raw.text(&format!("SELECT RELEASE_LOCK({n}); DO 0"));
            }),
        ),
        (
            "write floor: bare pair + fence upsert, fresh row (3 round trips)",
            Box::new(|| raw.borrow_mut().write_floor(&fresh())),
        ),
        (
            "bare pair + fence upsert, the same row every time",
            Box::new(|| {
                let mut raw = raw.borrow_mut();
                raw.take(reused);
                let upsert = raw.upsert.clone();
                raw.conn.exec_drop(&upsert, (reused,)).unwrap();
                raw.give_back(reused);
            }),
        ),
        (
            "bare pair + fence upsert as text",
            Box::new(|| {
                let name = fresh();
                let mut raw = raw.borrow_mut();
                raw.take(&name);
                raw.text(&upsert_sql(&quoted(&name)));
                raw.give_back(&name);
            }),
        ),
        (
            "bare pair + START TRANSACTION; upsert; COMMIT (text)",
            Box::new(|| {
                let name = fresh();
                let mut raw = raw.borrow_mut();
                raw.take(&name);
                raw.text(&format!(
                    "START TRANSACTION; {}; COMMIT",
                    upsert_sql(&quoted(&name))
                ));
                raw.give_back(&name);
            }),
        ),
        (
            "bare pair + upsert + the release's row update (4 round trips, 2 commits)",
            Box::new(|| {
                let name = fresh();
                let mut raw = raw.borrow_mut();
                raw.take(&name);
                let (upsert, clear) = (raw.upsert.clone(), raw.clear.clone());
                raw.conn.exec_drop(&upsert, (&name,)).unwrap();
                raw.conn.exec_drop(&clear, (&name,)).unwrap();
                raw.give_back(&name);
            }),
        ),
        (
            "named cycle (the library)",
            Box::new(paired::fresh_cycle(named, "bench-named-b", TTL)),
        ),
        (
            "table cycle (the library)",
            Box::new(paired::fresh_cycle(table, "bench-table-b", TTL)),
        ),
    ];
    for (_, piece) in pieces.iter_mut() {
        for _ in 0..20 {
            piece();
        }
    }
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); pieces.len()];
    for _ in 0..PIECE_ROUNDS {
        for (i, (_, piece)) in pieces.iter_mut().enumerate() {
            let t = std::time::Instant::now();
            for _ in 0..PIECE_OPS {
                piece();
            }
            times[i].push(t.elapsed().as_secs_f64() * 1e9 / PIECE_OPS as f64);
        }
    }
    let medians: Vec<f64> = times
        .into_iter()
        .map(|mut v| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        })
        .collect();
    let bare = medians[0];
    println!("mysql breakdown (median of {PIECE_ROUNDS} alternating rounds of {PIECE_OPS}):");
    let mut json = Vec::new();
    for ((what, _), ns) in pieces.iter().zip(&medians) {
        println!(
            "  {:>7.1} µs  {:>+7.1} µs over the bare pair  {what}",
            ns / 1e3,
            (ns - bare) / 1e3
        );
        json.push(format!(
            "  {{\"piece\": \"{what}\", \"ns\": {ns:.0}, \"over_bare_ns\": {:.0}}}",
            ns - bare
        ));
    }
    paired::save(
        "mysql",
        "breakdown.json",
        &format!("[\n{}\n]\n", json.join(",\n")),
    );
}

const PIECE_ROUNDS: usize = 15;
const PIECE_OPS: usize = 100;

/// A loopback proxy in front of the server that counts the commands clients send. In the MySQL
/// protocol a command is a packet with sequence number 0 (the packets of a handshake, and of one
/// command split over several packets, go on from 1), and the client waits for the answer before the
/// next one: commands are round trips. A multi-statement batch is one command.
struct CommandCounter {
    port: u16,
    commands: Arc<AtomicU64>,
}

impl CommandCounter {
    fn start(target: u16) -> CommandCounter {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the counting proxy");
        let port = listener.local_addr().unwrap().port();
        let commands = Arc::new(AtomicU64::new(0));
        let count = commands.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let server = TcpStream::connect(("127.0.0.1", target)).expect("proxy to MariaDB");
                let _ = (client.set_nodelay(true), server.set_nodelay(true));
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let count = count.clone();
                std::thread::spawn(move || requests(client, server, &count));
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut &s2, &mut &c2);
                    let _ = c2.shutdown(Shutdown::Both);
                });
            }
        });
        CommandCounter { port, commands }
    }

    /// The commands per run of `op`, over [`COUNTED`] runs after a few unmeasured ones (connects,
    /// table creation).
    fn per_op(&self, mut op: impl FnMut()) -> f64 {
        for _ in 0..20 {
            op();
        }
        let before = self.commands.load(Ordering::SeqCst);
        for _ in 0..COUNTED {
            op();
        }
        (self.commands.load(Ordering::SeqCst) - before) as f64 / COUNTED as f64
    }
}

/// Forwards client → server, counting the packets that start a command.
fn requests(mut client: TcpStream, mut server: TcpStream, count: &AtomicU64) {
    let mut buf = [0u8; 16 * 1024];
    // Bytes of the current packet's payload still to come, and the header read so far.
    let mut payload_left = 0usize;
    let mut header = Vec::with_capacity(4);
    loop {
        let n = match client.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        // Counted before forwarding: the answer cannot arrive before its command is counted.
        let mut data = &buf[..n];
        while !data.is_empty() {
            if payload_left > 0 {
                let skip = payload_left.min(data.len());
                payload_left -= skip;
                data = &data[skip..];
                continue;
            }
            let take = (4 - header.len()).min(data.len());
            header.extend_from_slice(&data[..take]);
            data = &data[take..];
            if header.len() == 4 {
                payload_left = usize::from(header[0])
                    | usize::from(header[1]) << 8
                    | usize::from(header[2]) << 16;
                if header[3] == 0 {
                    count.fetch_add(1, Ordering::SeqCst);
                }
                header.clear();
            }
        }
        if server.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = server.shutdown(Shutdown::Both);
}

/// `<criterion home>/mysql/<name>/round_trips.json`, read by examples/perf_report.rs (the same
/// place as paired.rs writes to: `CRITERION_HOME`, else the workspace's target).
fn write_round_trips(name: &str, per_cycle: f64, floor: u32) {
    let home = std::env::var_os("CRITERION_HOME").map_or_else(
        || {
            let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
                || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"),
                PathBuf::from,
            );
            target.join("criterion")
        },
        PathBuf::from,
    );
    let dir = home.join("mysql").join(name);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    let path = dir.join("round_trips.json");
    let json = format!(
        "{{\"round_trips\": {per_cycle:.2}, \"floor_round_trips\": {floor}, \"cycles\": {COUNTED}}}\n"
    );
    std::fs::write(&path, json).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    println!("mysql/{name}: {per_cycle:.2} round trips per cycle (the floor: {floor})");
}

criterion_group! {
    name = benches;
    config = paired::config(SAMPLES);
    targets = mysql
}
criterion_main!(benches);
