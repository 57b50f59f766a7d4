//! Turns one run of the benchmark suite into the report people read: criterion's estimates
//! (`target/criterion/<group>/<bench>/new/estimates.json`, the median) and the JSON of
//! `examples/perf_run.rs` (handoff, load) become a Markdown table of every figure, its floor measured in
//! the same run, their ratio and the issue's target, written to `docs/perf/rust.md`, between the
//! `perf:rust` markers of README.md, and as gnuplot data for `docs/perf/rust.png`.
//!
//! ```sh
//! cargo run --release --example perf_report -- target/perf/custom.json target/perf/chart.dat
//! ```
//!
//! `scripts/bench.sh` runs the whole suite and then this.

use serde_json::Value;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

const BEGIN: &str = "<!-- perf:rust:begin -->";
const END: &str = "<!-- perf:rust:end -->";

#[derive(Clone, Copy)]
enum Target {
    AtMost(f64),
    AtLeast(f64),
    None,
}

impl Target {
    fn text(self) -> String {
        match self {
            Target::AtMost(v) => format!("≤ {v}"),
            Target::AtLeast(v) => format!("≥ {v}"),
            Target::None => "—".to_owned(),
        }
    }

    fn verdict(self, ratio: f64) -> &'static str {
        match self {
            Target::AtMost(v) if ratio <= v => "met",
            Target::AtLeast(v) if ratio >= v => "met",
            Target::None => "",
            _ => "**not yet**",
        }
    }
}

/// A figure: µs per operation, or a rate (operations per second).
#[derive(Clone, Copy)]
enum Amount {
    Micros(f64),
    Rate(f64),
}

impl Amount {
    fn text(self) -> String {
        match self {
            Amount::Micros(v) if v >= 100.0 => format!("{v:.0} µs"),
            Amount::Micros(v) => format!("{v:.1} µs"),
            Amount::Rate(v) => format!("{:.1}k/s", v / 1e3),
        }
    }

    fn raw(self) -> f64 {
        match self {
            Amount::Micros(v) | Amount::Rate(v) => v,
        }
    }
}

struct Row {
    /// Short name for the chart's axis.
    short: &'static str,
    figure: String,
    floor_is: String,
    measured: Amount,
    floor: Option<Amount>,
    /// Figure ÷ floor: for a paired bench, the median of the per-sample ratios.
    ratio: Option<f64>,
    target: Target,
}

impl Row {
    /// A bench timed in alternation with its floor (crates/leasehold-redis/benches/support/paired.rs).
    fn paired(short: &'static str, figure: &str, floor_is: &str, p: Paired, target: Target) -> Row {
        Row {
            short,
            figure: figure.into(),
            floor_is: floor_is.into(),
            measured: p.figure,
            floor: Some(p.floor),
            ratio: Some(p.ratio),
            target,
        }
    }

    /// A figure and a floor measured side by side by examples/perf_run.rs.
    fn custom(
        short: &'static str,
        figure: String,
        floor_is: &str,
        measured: Amount,
        floor: Option<Amount>,
        target: Target,
    ) -> Row {
        Row {
            short,
            figure,
            floor_is: floor_is.into(),
            measured,
            floor,
            ratio: floor.map(|f| measured.raw() / f.raw()),
            target,
        }
    }
}

#[derive(Clone, Copy)]
struct Paired {
    figure: Amount,
    floor: Amount,
    ratio: f64,
}

struct Inputs {
    criterion: PathBuf,
    custom: Value,
}

impl Inputs {
    fn json(&self, id: &str, file: &str) -> Option<(PathBuf, Value)> {
        let path = self.criterion.join(id).join(file);
        let text = std::fs::read_to_string(&path).ok()?;
        let json = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{}: not JSON: {e}", path.display()));
        Some((path, json))
    }

    /// Criterion's median estimate for `group/bench` (µs), with the floor and ratio the paired bench
    /// wrote beside it; None if that bench did not run.
    fn bench(&self, id: &str) -> Option<Paired> {
        let (path, estimates) = self.json(id, "new/estimates.json")?;
        let ns = estimates["median"]["point_estimate"]
            .as_f64()
            .unwrap_or_else(|| panic!("{}: no median.point_estimate", path.display()));
        let (path, paired) = self
            .json(id, "paired.json")
            .unwrap_or_else(|| panic!("{id}: estimates.json without paired.json"));
        let field = |f: &str| {
            paired[f]
                .as_f64()
                .unwrap_or_else(|| panic!("{}: no number `{f}`", path.display()))
        };
        Some(Paired {
            figure: Amount::Micros(ns / 1e3),
            floor: Amount::Micros(field("floor_ns") / 1e3),
            ratio: field("ratio"),
        })
    }

    fn need(&self, id: &str) -> Paired {
        self.bench(id).unwrap_or_else(|| {
            panic!(
                "{}/{id}/new/estimates.json is missing: run `cargo bench` first (scripts/bench.sh does)",
                self.criterion.display()
            )
        })
    }

    fn handoff(&self, backend: &str) -> &Value {
        self.custom["handoff"]
            .as_array()
            .and_then(|rows| rows.iter().find(|r| r["backend"] == backend))
            .unwrap_or_else(|| panic!("no handoff row for {backend} in perf_run's JSON"))
    }
}

fn num(v: &Value, field: &str) -> f64 {
    v[field]
        .as_f64()
        .unwrap_or_else(|| panic!("perf_run's JSON: no number `{field}` in {v}"))
}

fn handoff_row(
    inputs: &Inputs,
    backend: &str,
    short: &'static str,
    name: &str,
    rtt_of: &str,
) -> Row {
    let h = inputs.handoff(backend);
    Row::custom(
        short,
        format!(
            "{name} handoff p50, {} processes (p99 {:.0} µs)",
            num(h, "workers"),
            num(h, "p99_us")
        ),
        rtt_of,
        Amount::Micros(num(h, "p50_us")),
        h["rtt_us"].as_f64().map(Amount::Micros),
        Target::None,
    )
}

fn rows(inputs: &Inputs) -> Vec<Row> {
    let mut rows = vec![
        Row::paired(
            "Redis cycle",
            "Redis cycle (try_acquire + release, fresh keys, 1 thread)",
            "2 raw `PING` round trips, one connection",
            inputs.need("redis/cycle"),
            Target::AtMost(1.3),
        ),
        Row::paired(
            "Redis cycle vs SET+DEL",
            "Redis cycle (timed again, beside this floor)",
            "raw `SET NX PX` + compare-and-`DEL` script",
            inputs.need("redis/cycle_vs_set_del"),
            Target::None,
        ),
    ];
    let mut redis_handoff = handoff_row(
        inputs,
        "redis",
        "Redis handoff p50",
        "Redis",
        "1 raw `PING` round trip",
    );
    redis_handoff.target = Target::AtMost(3.0);
    rows.push(redis_handoff);
    rows.push(Row::paired(
        "Redlock(5) cycle",
        "Redlock(5) cycle (fresh keys)",
        "`SET NX PX` then `DEL` written to all 5 nodes at once, one thread",
        inputs.need("redlock5/cycle"),
        Target::AtMost(1.1),
    ));
    rows.push(handoff_row(
        inputs,
        "redlock3",
        "Redlock(3) handoff p50",
        "Redlock(3)",
        "1 raw `PING` round trip to one node",
    ));
    for (id, short, name) in [
        (
            "topology/cluster",
            "Cluster cycle",
            "Redis Cluster (3+3) cycle",
        ),
        (
            "topology/sentinel",
            "Sentinel cycle",
            "Redis via Sentinel cycle",
        ),
        (
            "topology/replicas1",
            "replicas=1 cycle",
            "Redis `replicas=1` cycle (`WAIT` 1 replica)",
        ),
    ] {
        if let Some(p) = inputs.bench(id) {
            rows.push(Row::paired(
                short,
                name,
                "Redis cycle, one server",
                p,
                Target::None,
            ));
        }
    }
    rows.push(Row::paired(
        "PG advisory cycle",
        "PostgreSQL advisory cycle (fresh keys)",
        "bare `pg_try_advisory_lock` + `pg_advisory_unlock`, one connection",
        inputs.need("postgres/advisory"),
        Target::AtMost(1.25),
    ));
    rows.push(Row::paired(
        "PG table cycle",
        "PostgreSQL table cycle (fresh keys)",
        "bare advisory pair",
        inputs.need("postgres/table"),
        Target::None,
    ));
    rows.push(Row::paired(
        "PG bare pair",
        "bare advisory pair",
        "2 prepared `SELECT 1` round trips",
        inputs.need("postgres/bare_pair"),
        Target::None,
    ));
    // The MySQL bench also counts the round trips of one cycle (through a proxy): the reason
    // behind a ratio, printed beside it.
    let trips = |id: &str| {
        inputs
            .json(id, "round_trips.json")
            .and_then(|(_, v)| v["round_trips"].as_f64())
            .map_or_else(String::new, |n| {
                // Whole but for the rare sweep of old rows (one more round trip a minute).
                if (n - n.round()).abs() < 0.05 {
                    format!("; {n:.0} round trips")
                } else {
                    format!("; {n:.2} round trips")
                }
            })
    };
    rows.push(Row::paired(
        "MySQL named cycle",
        &format!(
            "MySQL/MariaDB named cycle (`GET_LOCK`, fresh keys{})",
            trips("mysql/named")
        ),
        "bare `GET_LOCK` + `RELEASE_LOCK`, prepared, one connection (2 round trips)",
        inputs.need("mysql/named"),
        Target::AtMost(1.15),
    ));
    rows.push(Row::paired(
        "MySQL table cycle",
        &format!(
            "MySQL/MariaDB table cycle (fresh keys{})",
            trips("mysql/table")
        ),
        "bare `GET_LOCK` pair",
        inputs.need("mysql/table"),
        Target::None,
    ));
    rows.push(Row::paired(
        "MySQL bare pair",
        "bare `GET_LOCK` pair",
        "2 prepared `SELECT 1` round trips",
        inputs.need("mysql/bare_pair"),
        Target::None,
    ));
    for (backend, short, name) in [
        (
            "postgres-advisory",
            "PG advisory handoff p50",
            "PostgreSQL advisory",
        ),
        ("postgres-table", "PG table handoff p50", "PostgreSQL table"),
    ] {
        rows.push(handoff_row(
            inputs,
            backend,
            short,
            name,
            "1 prepared `SELECT 1` round trip",
        ));
    }
    rows.push(Row::paired(
        "Local fresh cycle",
        "Local cycle, fresh key (record created)",
        "local cycle, known key",
        inputs.need("local/fresh"),
        Target::AtMost(3.0),
    ));
    rows.push(handoff_row(
        inputs,
        "local",
        "Local handoff p50",
        "Local",
        "—",
    ));
    let load = &inputs.custom["load"];
    rows.push(Row::custom(
        "",
        format!(
            "`leasehold bench`, {} workers, random keys: lock cycles/s × 2 = scripts/s ({:.1}k cycles/s)",
            num(load, "workers"),
            num(load, "cycles_per_sec") / 1e3
        ),
        &format!(
            "`redis-benchmark -c {}` `EVALSHA` of a one-`SET` script",
            num(load, "workers")
        ),
        Amount::Rate(2.0 * num(load, "cycles_per_sec")),
        Some(Amount::Rate(num(load, "evalsha_per_sec"))),
        Target::AtLeast(0.7),
    ));
    rows
}

fn table(rows: &[Row]) -> String {
    let mut out =
        String::from("| figure | measured | floor (same run) | floor is | ratio | target | |\n");
    out.push_str("|---|---:|---:|---|---:|---|---|\n");
    for r in rows {
        let ratio = r.ratio;
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} |",
            r.figure,
            r.measured.text(),
            r.floor.map_or("—".to_owned(), Amount::text),
            r.floor_is,
            ratio.map_or("—".to_owned(), |v| format!("{v:.2}")),
            r.target.text(),
            ratio.map_or("", |v| r.target.verdict(v)),
        );
    }
    out
}

/// One line per latency row that has a floor: label, measured µs, floor µs (the chart's clustered bars).
fn chart_data(rows: &[Row]) -> String {
    let mut out = String::from("# label measured_us floor_us\n");
    for r in rows {
        if let (Amount::Micros(m), Some(Amount::Micros(f)), Some(ratio)) =
            (r.measured, r.floor, r.ratio)
        {
            let target = match r.target {
                Target::AtMost(v) => format!(" (≤{v})"),
                _ => String::new(),
            };
            let _ = writeln!(out, "\"{} {ratio:.2}×{target}\" {m:.2} {f:.2}", r.short);
        }
    }
    out
}

fn replace_between_markers(readme: &Path, body: &str) {
    let text = std::fs::read_to_string(readme)
        .unwrap_or_else(|e| panic!("read {}: {e}", readme.display()));
    let (Some(b), Some(e)) = (text.find(BEGIN), text.find(END)) else {
        panic!("{}: markers {BEGIN} / {END} not found", readme.display());
    };
    assert!(b < e, "{}: {END} before {BEGIN}", readme.display());
    let new = format!("{}{BEGIN}\n{body}{}", &text[..b], &text[e..]);
    std::fs::write(readme, new).unwrap_or_else(|e| panic!("write {}: {e}", readme.display()));
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let custom_path = args
        .first()
        .map_or("target/perf/custom.json", String::as_str);
    let chart_path = args.get(1).map_or("target/perf/chart.dat", String::as_str);
    let criterion = std::env::var_os("CRITERION_HOME")
        .map_or_else(|| PathBuf::from("target/criterion"), PathBuf::from);
    let custom: Value =
        serde_json::from_str(&std::fs::read_to_string(custom_path).unwrap_or_else(|e| {
            panic!("read {custom_path} (run examples/perf_run.rs first): {e}")
        }))
        .unwrap_or_else(|e| panic!("{custom_path}: {e}"));
    let inputs = Inputs { criterion, custom };
    let rows = rows(&inputs);

    let when = std::env::var("PERF_WHEN").unwrap_or_else(|_| "(date not given)".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    // The machine is shared: how busy it was says how far to trust this run's figures.
    let load_now = std::fs::read_to_string("/proc/loadavg").map_or_else(
        |_| "?".to_owned(),
        |l| l.split(' ').take(3).collect::<Vec<_>>().join(" "),
    );
    let load_start = std::env::var("PERF_LOAD_START").unwrap_or_else(|_| "?".into());
    let table = table(&rows);
    let about = format!(
        "Generated by `scripts/bench.sh` on {when}: release build, {cores} cores (load average over 1/5/15 min: \
         {load_start} at the start, {load_now} at the end; on a busy machine single figures move by tens of \
         percent between runs, so rerun before reading much into one), every server on loopback started by \
         the suite itself; each ratio is the figure over a floor measured in the same run. \
         Cycles are criterion medians (`cargo bench`), each sample timed right before the same number of its floor's \
         operations so that load drift hits both alike (the ratio is the median of the per-sample ratios); handoffs are 8 processes contending for one key \
         with 1 ms of work per hold (`examples/perf_run.rs`). The Redis targets \
         were set for the C ABI; these are Rust figures. MySQL named mode's target (≤ 1.15) came with \
         that backend; its rows count round trips per cycle through a proxy (`crates/leasehold-mysql/benches/cycle.rs`).\n"
    );

    std::fs::create_dir_all("docs/perf").expect("docs/perf");
    let doc = format!(
        "# Rust benchmark suite\n\n{about}\n{table}\n![figures beside their floors](rust.png)\n\n\
         Regenerate with `scripts/bench.sh` (about 5 minutes; it installs gnuplot with apt-get if missing).\n"
    );
    std::fs::write("docs/perf/rust.md", doc).expect("write docs/perf/rust.md");
    if let Some(parent) = Path::new(chart_path).parent() {
        std::fs::create_dir_all(parent).expect("chart data directory");
    }
    std::fs::write(chart_path, chart_data(&rows)).expect("write chart data");
    let section = format!(
        "{about}\n{table}\n![Rust figures beside their floors](docs/perf/rust.png)\n\n\
         Regenerate with `scripts/bench.sh` (writes this block, [docs/perf/rust.md](docs/perf/rust.md) and the chart).\n"
    );
    replace_between_markers(Path::new("README.md"), &section);
    print!("{table}");
}
