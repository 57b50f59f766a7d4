//! `cargo bench -p leasehold-mysql`: the uncontended lock cycle (try_acquire + release of a fresh key,
//! one thread) in both modes next to the floor, measured in the same run against a MariaDB this bench
//! starts on a free loopback port:
//!
//! - `mysql/named` and `mysql/table` beside a bare `SELECT GET_LOCK(?, 0)` then
//!   `SELECT RELEASE_LOCK(?)` on one connection of the `mysql` crate, prepared statements, two round
//!   trips (what a hand-written client would run);
//! - `mysql/bare_pair`: that pair beside two prepared `SELECT 1` round trips, the protocol's own floor.
//!
//! Each figure is timed in alternation with its floor (../leasehold-testkit/bench/paired.rs):
//! `target/criterion/mysql/<bench>/new/estimates.json` is the figure, `paired.json` beside it the
//! floor and the ratio (see scripts/bench.sh).
//!
//! Then each mode's cycle runs through a proxy that counts the commands the client sends: a command
//! waits for its answer before the next one goes, so that is the cycle's round trips, written to
//! `round_trips.json` beside `paired.json` (a time says how far from the floor; this says why).

#[path = "../../leasehold-testkit/bench/paired.rs"]
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
    let mut raw = mysql::Conn::new(mysql::Opts::from_url(&server.url()).unwrap())
        .unwrap_or_else(|e| panic!("raw connection to MariaDB on port {}: {e}", server.port()));
    let lock = raw.prep("SELECT GET_LOCK(?, 0)").unwrap();
    let unlock = raw.prep("SELECT RELEASE_LOCK(?)").unwrap();
    let select1 = raw.prep("SELECT 1").unwrap();
    let raw = RefCell::new(raw);
    // Names of at most 64 characters (the server's limit), never used twice: "f:<pid>:<n>".
    let id = Cell::new(0u64);
    let pid = std::process::id();
    let bare_pair = || {
        id.set(id.get() + 1);
        let name = format!("f:{pid}:{}", id.get());
        let mut raw = raw.borrow_mut();
        let got: Option<i64> = raw.exec_first(&lock, (&name,)).unwrap();
        assert_eq!(got, Some(1), "a fresh named lock was taken");
        let freed: Option<i64> = raw.exec_first(&unlock, (&name,)).unwrap();
        assert_eq!(freed, Some(1));
    };
    let two_select1 = || {
        let mut raw = raw.borrow_mut();
        for _ in 0..2 {
            let _: Option<i64> = raw.exec_first(&select1, ()).unwrap();
        }
    };

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
    g.finish();

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
