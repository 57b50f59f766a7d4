//! `cargo bench -p leasehold-mysql --bench scaling`: table mode's server work per acquire and per
//! release of a fresh key as the leases held in the table grow, judged on the server's own
//! counters: the CPU time (`/proc/<pid>/task/<tid>/schedstat`, in nanoseconds; MariaDB starts with
//! performance_schema off) of the threads serving the lock client's connections (`acquire`,
//! `release`), and of the whole server process, background threads too (`*_process`).
//!
//! - `keys_{1k,10k,100k,1m}`: a server whose lock table holds that many other leases beside an
//!   empty one (the floor), rounds alternated, the ratio the median of the rounds' ratios;
//! - `memory`: the table's data and indexes per lease held (`information_schema.TABLES`, after
//!   `ANALYZE TABLE`).
//!
//! The held rows are written by `INSERT … SELECT` in the shape a lease leaves (taking a million
//! through the client would take minutes here). `LEASEHOLD_SCALING_MAX_KEYS` caps the rows
//! (default 1,000,000). Written to `<criterion home>/scaling/mysql.json`.

#[path = "../../../tests/support/paired.rs"]
mod paired;

use paired::median;

use leasehold_core::{Client, Config, Lease};
use leasehold_mysql::MysqlBackend;
use leasehold_testkit::{unique_key, MariaDbServer};
use mysql::prelude::Queryable;
use std::time::Duration;

const TTL: Duration = Duration::from_secs(3_600);
const ROUNDS: usize = 11;
const PER_ROUND: usize = 500;
const TABLE: &str = "scale_locks";

fn client(url: &str) -> Client {
    let config = Config::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
    Client::new(MysqlBackend::connect(&config).unwrap_or_else(|e| panic!("connect {url}: {e}")))
}

/// A server, its lock client and a connection that reads its counters.
struct Side {
    _server: MariaDbServer,
    lock: Client,
    raw: mysql::Conn,
    pid: u32,
}

impl Side {
    fn start() -> Side {
        // The testkit gives InnoDB 32 MB of buffer pool; a million leases are some 250 MB, and a
        // server that holds them would be given a pool they fit in, as here.
        let server = MariaDbServer::start_with_options(&["--innodb-buffer-pool-size=512M"]);
        let lock = client(&server.url_with(&format!("lock=table&table={TABLE}")));
        let mut raw = mysql::Conn::new(mysql::Opts::from_url(&server.url()).unwrap())
            .unwrap_or_else(|e| panic!("raw connection to MariaDB: {e}"));
        let pid_file: String = raw.query_first("SELECT @@pid_file").unwrap().unwrap();
        let pid = std::fs::read_to_string(&pid_file)
            .unwrap_or_else(|e| panic!("{pid_file}: {e}"))
            .trim()
            .parse()
            .unwrap();
        Side {
            _server: server,
            lock,
            raw,
            pid,
        }
    }

    /// CPU ns used so far by the server's threads: those serving the lock client's connections
    /// (`information_schema.PROCESSLIST`'s `TID`, every connection but ours), and the whole
    /// process (background threads too: purge, page cleaners, the change buffer's merges).
    fn cpu_ns(&mut self) -> (f64, f64) {
        let tids: Vec<u64> = self
            .raw
            .query("SELECT TID FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID()")
            .unwrap();
        let tasks = format!("/proc/{}/task", self.pid);
        let schedstat = |tid: &str| -> Option<f64> {
            std::fs::read_to_string(format!("{tasks}/{tid}/schedstat"))
                .ok()?
                .split_whitespace()
                .next()?
                .parse::<f64>()
                .ok()
        };
        let connections = tids.iter().filter_map(|t| schedstat(&t.to_string())).sum();
        let all = std::fs::read_dir(&tasks)
            .unwrap_or_else(|e| panic!("{tasks}: {e}"))
            .filter_map(|t| schedstat(t.ok()?.file_name().to_str()?))
            .sum();
        (connections, all)
    }

    /// Server µs per acquire of `PER_ROUND` fresh keys and per release of them: on the connection
    /// threads, then on the whole process.
    fn acquire_release_us(&mut self) -> [f64; 4] {
        let prefix = unique_key("scale-fresh");
        let t0 = self.cpu_ns();
        let held: Vec<Lease> = (0..PER_ROUND)
            .map(|i| self.lock.try_acquire(format!("{prefix}:{i}"), TTL).unwrap())
            .collect();
        let t1 = self.cpu_ns();
        for lease in held {
            lease.release().unwrap();
        }
        let t2 = self.cpu_ns();
        let n = PER_ROUND as f64 * 1e3;
        [
            (t1.0 - t0.0) / n,
            (t2.0 - t1.0) / n,
            (t1.1 - t0.1) / n,
            (t2.1 - t1.1) / n,
        ]
    }

    fn fill(&mut self, from: usize, to: usize) {
        // MariaDB's Sequence engine numbers the rows; expiries an hour ahead on the server's clock,
        // as table mode writes them.
        let mut at = from;
        while at < to {
            let end = (at + 100_000).min(to);
            self.raw
                .query_drop(format!(
                    "INSERT INTO {TABLE} (k, token, last_token, fence, expires_us, writer_until) \
                     SELECT UNHEX(SHA2(CONCAT('scale-held:', seq), 256)), UNHEX(MD5(seq)), \
                            UNHEX(MD5(seq)), seq, \
                            UNIX_TIMESTAMP() * 1000000 + MICROSECOND(NOW(6)) + 3600000000, 0 \
                     FROM seq_{}_to_{end}",
                    at + 1
                ))
                .unwrap();
            at = end;
        }
        // Settled as a server would be some time after the rows came: `FOR EXPORT` merges InnoDB's
        // change buffer and writes the table's dirty pages now, which the background threads
        // would otherwise do during the rounds, counted as the full side's work.
        self.raw
            .query_drop(format!(
                "ANALYZE TABLE {TABLE}; FLUSH TABLES {TABLE} FOR EXPORT; UNLOCK TABLES"
            ))
            .unwrap();
    }
}

fn main() {
    let max: usize = std::env::var("LEASEHOLD_SCALING_MAX_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("scaling/mysql: load average at start {}", load.trim());
    let (mut empty, mut full) = (Side::start(), Side::start());
    // Creates the tables, opens the pools' connections.
    empty.acquire_release_us();
    full.acquire_release_us();
    let mut json = Vec::new();
    let mut held = 0;
    for (name, n) in [
        ("1k", 1_000usize),
        ("10k", 10_000),
        ("100k", 100_000),
        ("1m", 1_000_000),
    ] {
        if n > max {
            break;
        }
        full.fill(held, n);
        held = n;
        let mut pairs: [Vec<(f64, f64)>; 4] = Default::default();
        for _ in 0..ROUNDS {
            let f = full.acquire_release_us();
            let e = empty.acquire_release_us();
            for i in 0..4 {
                pairs[i].push((f[i], e[i]));
            }
        }
        let [acq, rel, acq_all, rel_all] = pairs;
        for (what, pairs) in [
            ("acquire", acq),
            ("release", rel),
            ("acquire_process", acq_all),
            ("release_process", rel_all),
        ] {
            let figure = median(pairs.iter().map(|p| p.0).collect());
            let floor = median(pairs.iter().map(|p| p.1).collect());
            let ratio = median(pairs.iter().map(|p| p.0 / p.1).collect());
            println!(
                "scaling/mysql/keys_{name}/{what}: {figure:.1} µs of server CPU beside a floor of {floor:.1} µs = {ratio:.3}× \
                 ({n} other leases held in the table vs none; median of {ROUNDS} rounds)"
            );
            json.push(format!(
                "{{\"name\": \"keys_{name}/{what}\", \"figure_us\": {figure:.2}, \"floor_us\": {floor:.2}, \"ratio\": {ratio:.4}}}"
            ));
        }
    }
    full.raw
        .query_drop(format!("ANALYZE TABLE {TABLE}"))
        .unwrap();
    let bytes: u64 = full
        .raw
        .query_first(format!(
            "SELECT DATA_LENGTH + INDEX_LENGTH FROM information_schema.TABLES \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '{TABLE}'"
        ))
        .unwrap()
        .unwrap();
    let per_lease = bytes as f64 / held.max(1) as f64;
    println!(
        "scaling/mysql/memory: {per_lease:.0} B of table and indexes per lease held ({held} held)"
    );
    json.push(format!(
        "{{\"name\": \"memory\", \"held\": {held}, \"bytes_per_lease\": {per_lease:.1}}}"
    ));
    let load_end = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("scaling/mysql: load average at end {}", load_end.trim());
    paired::save(
        "scaling",
        "mysql.json",
        &format!(
            "{{\"load_start\": \"{}\", \"load_end\": \"{}\", \"rows\": [\n{}\n]}}\n",
            load.trim(),
            load_end.trim(),
            json.join(",\n")
        ),
    );
}
