//! Turns one run of the benchmark suite into the report people read: criterion's estimates
//! (`target/criterion/<group>/<bench>/new/estimates.json`, the median) and the JSON of
//! `examples/perf_run.rs` (handoff, load) become a Markdown table of every figure, its floor measured in
//! the same run, their ratio and its target, written to `docs/perf/rust.md` and between the `perf:rust`
//! markers of README.md, and a chart of the same figures, `docs/perf/rust.svg`.
//!
//! The chart is drawn here with plotters' SVG backend, which writes text as SVG `<text>` elements: no
//! plotting program to install and no font files or font libraries at build time, so the report builds
//! and draws wherever the crate builds.
//!
//! ```sh
//! cargo run --release --example perf_report -- target/perf/custom.json [docs/perf/rust.svg]
//! ```
//!
//! `scripts/bench.sh` runs the whole suite and then this.

use plotters::prelude::{
    BindKeyPoints, ChartBuilder, Color, EmptyElement, FontStyle, FontTransform, IntoDrawingArea,
    IntoFont, IntoLogRange, RGBColor, Rectangle, SVGBackend, SeriesLabelPosition, Text, BLACK,
    WHITE,
};
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde_json::Value;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

const BEGIN: &str = "<!-- perf:rust:begin -->";
/// Below this ratio a floor was slowed by something other than its own work.
const DISTURBED: f64 = 0.9;
const END: &str = "<!-- perf:rust:end -->";

#[derive(Clone, Copy)]
enum Target {
    AtMost(f64),
    AtLeast(f64),
    /// A bound on the figure itself, in MB (memory rows have no floor to divide by).
    MbAtMost(f64),
    None,
}

impl Target {
    fn text(self) -> String {
        match self {
            Target::AtMost(v) => format!("≤ {v}"),
            Target::AtLeast(v) => format!("≥ {v}"),
            Target::MbAtMost(v) => format!("≤ +{v} MB"),
            Target::None => "—".to_owned(),
        }
    }

    fn verdict(self, ratio: f64) -> &'static str {
        match self {
            // A figure includes its floor's work, so it cannot take much less time: a ratio this low
            // says the floor was slowed by something else (see `about` in `main`), not that the
            // goal is met.
            Target::AtMost(_) if ratio < DISTURBED => "**floor disturbed**: rerun",
            Target::AtMost(v) if ratio <= v => "met",
            Target::AtLeast(v) if ratio >= v => "met",
            Target::MbAtMost(v) if ratio <= v => "met",
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
    /// Resident memory, MB.
    Mb(f64),
}

impl Amount {
    fn text(self) -> String {
        match self {
            Amount::Micros(v) if v >= 100.0 => format!("{v:.0} µs"),
            Amount::Micros(v) => format!("{v:.1} µs"),
            Amount::Rate(v) => format!("{:.1}k/s", v / 1e3),
            Amount::Mb(v) => format!("{v:.1} MB"),
        }
    }

    fn raw(self) -> f64 {
        match self {
            Amount::Micros(v) | Amount::Rate(v) | Amount::Mb(v) => v,
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
    /// A bench timed in alternation with its floor (tests/support/paired.rs).
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

/// "; N transactions per acquisition (advisory: M)" where the run counted them.
fn transactions(inputs: &Inputs, backend: &str) -> String {
    let per = |b: &str| inputs.handoff(b)["transactions_per_acquisition"].as_f64();
    match (per(backend), per("postgres-advisory")) {
        (Some(n), Some(a)) if backend != "postgres-advisory" => {
            format!("; the server ran {n:.1} transactions per acquisition, advisory {a:.1}")
        }
        (Some(n), _) => format!("; the server ran {n:.1} transactions per acquisition"),
        _ => String::new(),
    }
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
            "{name} handoff p50, {} processes (p99 {:.0} µs{})",
            num(h, "workers"),
            num(h, "p99_us"),
            transactions(inputs, backend)
        ),
        rtt_of,
        Amount::Micros(num(h, "p50_us")),
        h["rtt_us"].as_f64().map(Amount::Micros),
        Target::None,
    )
}

fn rows(inputs: &Inputs) -> Vec<Row> {
    // Where the cycle's time goes beside its floor's, measured by the same bench.
    let profile = inputs
        .json("redis/cycle", "profile.json")
        .map_or_else(String::new, |(_, p)| {
            format!(
                "; per cycle {:.1} µs of server work and {:.1} µs of client CPU, per 2 PINGs {:.1} and {:.1}",
                num(&p, "server_us_per_cycle"),
                num(&p, "client_cpu_us_per_cycle"),
                num(&p, "server_us_per_ping_pair"),
                num(&p, "client_cpu_us_per_ping_pair")
            )
        });
    let mut rows = vec![
        Row::paired(
            "Redis cycle",
            &format!("Redis cycle (try_acquire + release, fresh keys, 1 thread{profile})"),
            "2 raw `PING` round trips, one connection",
            inputs.need("redis/cycle"),
            Target::AtMost(1.05),
        ),
        Row::paired(
            "Redis cycle vs SET+DEL",
            "Redis cycle (timed again, beside this floor)",
            "raw `SET NX PX` + compare-and-`DEL` script",
            inputs.need("redis/cycle_vs_set_del"),
            Target::None,
        ),
    ];
    // A handoff wakes a sleeping waiter, so its floor is the server waking a sleeping client at all.
    let redis = inputs.handoff("redis");
    for (pct, target) in [("p50", 1.2), ("p99", 2.0)] {
        rows.push(Row::custom(
            if pct == "p50" {
                "Redis handoff p50"
            } else {
                "Redis handoff p99"
            },
            format!(
                "Redis handoff {pct}, {} processes{}",
                num(redis, "workers"),
                redis["server_us_per_acquisition"]
                    .as_f64()
                    .map_or_else(String::new, |s| format!(
                        " (the server's work: {s:.1} µs per acquisition, all commands of the run)"
                    ))
            ),
            &format!(
                "sleeping-client floor {pct}: a reader blocked in `BLPOP` woken by an `LPUSH`"
            ),
            Amount::Micros(num(redis, &format!("{pct}_us"))),
            Some(Amount::Micros(num(redis, &format!("wake_{pct}_us")))),
            Target::AtMost(target),
        ));
    }
    let redlock_profile = inputs
        .json("redlock5/cycle", "profile.json")
        .map_or_else(String::new, |(_, p)| {
            format!(
                "; CPU per cycle: 5 servers {:.0} µs, client {:.0} µs; per floor operation {:.0} and {:.0}",
                num(&p, "servers_cpu_us_per_cycle"),
                num(&p, "client_cpu_us_per_cycle"),
                num(&p, "servers_cpu_us_per_floor"),
                num(&p, "client_cpu_us_per_floor")
            )
        });
    rows.push(Row::paired(
        "Redlock(5) cycle",
        &format!("Redlock(5) cycle (fresh keys{redlock_profile})"),
        "`SET NX PX` then `DEL` written to all 5 nodes at once, one thread",
        inputs.need("redlock5/cycle"),
        Target::AtMost(1.15),
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
    let advisory = inputs.need("postgres/advisory");
    rows.push(Row::paired(
        "PG advisory cycle",
        "PostgreSQL advisory cycle (fresh keys)",
        "bare `pg_try_advisory_lock` + `pg_advisory_unlock`, one connection",
        advisory,
        Target::None,
    ));
    // PostgreSQL's own client running the same pair: the floor from outside the library.
    if let Some((_, pgbench)) = inputs.json("postgres/pgbench", "result.json") {
        rows.push(Row::custom(
            "PG advisory vs pgbench",
            "PostgreSQL advisory cycle (fresh keys, mean over 3 s between the two pgbench runs)".into(),
            "`pgbench -c 1` of `SELECT pg_try_advisory_lock(42); SELECT pg_advisory_unlock(42);` (average, before and after)",
            Amount::Micros(num(&pgbench, "cycle_us")),
            Some(Amount::Micros(num(&pgbench, "pgbench_us"))),
            Target::AtMost(1.1),
        ));
    }
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
    // Named mode stores a durable fence and an expiry per grant: one row write no safe cycle can
    // skip, so it is also timed beside the bare pair plus that write alone.
    if let Some(p) = inputs.bench("mysql/named_vs_write") {
        rows.push(Row::paired(
            "MySQL named vs write",
            "MySQL/MariaDB named cycle (timed again, beside this floor)",
            "bare `GET_LOCK` + one prepared upsert of the fence row (autocommit) + `RELEASE_LOCK` (3 round trips)",
            p,
            Target::None,
        ));
    }
    if let Some(p) = inputs.bench("mysql/write_floor") {
        rows.push(Row::paired(
            "MySQL write floor",
            "bare `GET_LOCK` + fence upsert + `RELEASE_LOCK`",
            "bare `GET_LOCK` pair",
            p,
            Target::None,
        ));
    }
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
    rows.push(handoff_row(
        inputs,
        "postgres-advisory",
        "PG advisory handoff p50",
        "PostgreSQL advisory",
        "1 prepared `SELECT 1` round trip",
    ));
    let table = inputs.handoff("postgres-table");
    rows.push(Row::custom(
        "PG table handoff p50",
        format!(
            "PostgreSQL table handoff p50, {} processes (p99 {:.0} µs{})",
            num(table, "workers"),
            num(table, "p99_us"),
            transactions(inputs, "postgres-table")
        ),
        "PostgreSQL advisory handoff p50 (same run)",
        Amount::Micros(num(table, "p50_us")),
        Some(Amount::Micros(num(
            inputs.handoff("postgres-advisory"),
            "p50_us",
        ))),
        Target::AtMost(1.5),
    ));
    // Which file system each pair ran on, as the bench found it.
    let local_fs = inputs.json("local", "file_systems.json");
    let on = |which: &str| {
        local_fs.as_ref().map_or_else(String::new, |(_, fs)| {
            format!(", on {}", fs[which].as_str().unwrap_or("?"))
        })
    };
    rows.push(Row::paired(
        "Local fresh cycle",
        &format!(
            "Local cycle, fresh key (record created and deleted{}: the default directory /run/lock is a tmpfs)",
            on("fresh")
        ),
        "local cycle, known key, same directory",
        inputs.need("local/fresh"),
        Target::AtMost(1.5),
    ));
    rows.push(Row::paired(
        "Local fresh cycle, disk",
        &format!(
            "Local cycle, fresh key (record created and deleted{}: a journalled inode each)",
            on("fresh_disk")
        ),
        "local cycle, known key, same directory",
        inputs.need("local/fresh_disk"),
        Target::None,
    ));
    rows.push(handoff_row(
        inputs,
        "local",
        "Local handoff p50",
        "Local",
        "—",
    ));
    // etcd (crates/leasehold-etcd/benches/cycle.rs): a consensus write per step, so its own floor.
    const ETCD_PAIR: &str =
        "raw etcd transaction pair through the same gateway (put if absent, delete if ours), no lease";
    if let Some(p) = inputs.bench("etcd/cycle") {
        rows.push(Row::paired(
            "etcd cycle",
            "etcd cycle, 3 members (fresh keys: lease grant, grant txn, release txn, revoke)",
            ETCD_PAIR,
            p,
            Target::None,
        ));
    }
    if let Some((_, h)) = inputs.json("etcd/handoff", "handoff.json") {
        rows.push(Row::custom(
            "etcd handoff p50",
            format!(
                "etcd handoff p50, release to the watching waiter holding it, in one process (p99 {:.0} µs)",
                num(&h, "p99_us")
            ),
            ETCD_PAIR,
            Amount::Micros(num(&h, "p50_us")),
            Some(Amount::Micros(num(&h, "floor_us"))),
            Target::None,
        ));
    }
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
        Target::AtLeast(0.75),
    ));
    // Growth: what a lock costs as the work around it grows, each beside the same operation with
    // little around it (crates/leasehold-redis/benches/cycle.rs).
    for (id, short, name, floor_is, target) in [
        (
            "growth/keys_100k",
            "100k keys held",
            "Redis cycle, fresh keys, with 100,000 other leases held on the server",
            "the same with none held",
            1.1,
        ),
        (
            "growth/permits_65535",
            "65,535 permits",
            "Redis permit cycle, semaphore of 65,535 permits with 1,000 held",
            "semaphore of 2 permits with 1 held",
            1.2,
        ),
        (
            "growth/redlock_permits_65535",
            "Redlock 65,535 permits",
            "Redlock(3) permit cycle, semaphore of 65,535 permits with 1,000 held",
            "semaphore of 2 permits with 1 held",
            1.2,
        ),
    ] {
        if let Some(p) = inputs.bench(id) {
            rows.push(Row::paired(
                short,
                name,
                floor_is,
                p,
                Target::AtMost(target),
            ));
        }
    }
    if let Some((_, m)) = inputs.json("growth/leases_10k", "memory.json") {
        let mb = |field: &str| num(&m, field) / 1024.0;
        let mut row = Row::custom(
            "",
            format!(
                "resident memory added by holding {} Redis leases in one process",
                num(&m, "leases")
            ),
            "the same process before (its RSS)",
            Amount::Mb(mb("rss_after_kib") - mb("rss_before_kib")),
            Some(Amount::Mb(mb("rss_before_kib"))),
            Target::MbAtMost(20.0),
        );
        // The goal bounds what is added; a ratio to what the process used before means nothing.
        row.ratio = None;
        rows.push(row);
    }
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
            match r.target {
                Target::MbAtMost(_) => r.target.verdict(r.measured.raw()),
                target => ratio.map_or("", |v| target.verdict(v)),
            },
        );
    }
    out
}

const FLOOR_COLOR: RGBColor = RGBColor(0x4C, 0x72, 0xB0);
const MEASURED_COLOR: RGBColor = RGBColor(0xDD, 0x84, 0x52);
const MET_COLOR: RGBColor = RGBColor(0x1B, 0x7A, 0x2E);
const NOT_YET_COLOR: RGBColor = RGBColor(0xB0, 0x1C, 0x1C);
const FONT: &str = "sans-serif";

/// The chart of the report, an SVG at `path`: for every row whose figure and floor are both µs per
/// operation, the floor's bar beside the figure's on a log scale (they span tens of µs to a millisecond
/// and more), with the ratio and its target above the pair. Rates (the load row) and rows without a
/// floor have no such pair: the subtitle says they are in the table only.
fn chart(rows: &[Row], when: &str, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    struct Pair {
        short: &'static str,
        measured: f64,
        floor: f64,
        ratio: f64,
        target: Target,
    }
    let pairs: Vec<Pair> = rows
        .iter()
        .filter_map(|r| match (r.measured, r.floor, r.ratio) {
            (Amount::Micros(measured), Some(Amount::Micros(floor)), Some(ratio)) => Some(Pair {
                short: r.short,
                measured,
                floor,
                ratio,
                target: r.target,
            }),
            _ => None,
        })
        .collect();
    let rates = rows
        .iter()
        .filter(|r| matches!(r.measured, Amount::Rate(_)))
        .count();
    let memory = rows
        .iter()
        .filter(|r| matches!(r.measured, Amount::Mb(_)))
        .count();
    let no_floor = rows
        .iter()
        .filter(|r| matches!(r.measured, Amount::Micros(_)) && r.floor.is_none())
        .count();
    if pairs.is_empty() {
        return Err("no row with a figure and a floor in µs to draw".into());
    }

    let root = SVGBackend::new(path, (1600, 800)).into_drawing_area();
    root.fill(&WHITE)?;
    let (header, body) = root.split_vertically(104);
    let centered = Pos::new(HPos::Center, VPos::Top);
    header.draw(&Text::new(
        "Leasehold (Rust): each figure (median / p50) beside its floor, measured in the same run",
        (800, 12),
        (FONT, 28)
            .into_font()
            .style(FontStyle::Bold)
            .color(&BLACK)
            .pos(centered),
    ))?;
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    let mut left_out = Vec::new();
    if rates > 0 {
        left_out.push(format!(
            "{rates} row{} measured as a rate (operations per second)",
            plural(rates)
        ));
    }
    if memory > 0 {
        left_out.push(format!("{memory} memory row{}", plural(memory)));
    }
    if no_floor > 0 {
        left_out.push(format!(
            "{no_floor} row{} without a floor",
            plural(no_floor)
        ));
    }
    let mut notes =
        String::from("Above each pair: figure ÷ floor (target), green if met, red if not yet, ? if the floor was disturbed.");
    if !left_out.is_empty() {
        let _ = write!(notes, " In the table only: {}.", left_out.join(", "));
    }
    for (line, y) in [
        (
            format!("Criterion medians (cycles) and p50s (handoffs) in µs per operation, log scale. Run of {when}."),
            48,
        ),
        (notes, 74),
    ] {
        header.draw(&Text::new(
            line,
            (800, y),
            (FONT, 19).into_font().color(&BLACK.mix(0.75)).pos(centered),
        ))?;
    }

    let lowest = pairs
        .iter()
        .map(|p| p.measured.min(p.floor))
        .fold(f64::MAX, f64::min);
    let highest = pairs
        .iter()
        .map(|p| p.measured.max(p.floor))
        .fold(0.0, f64::max);
    // Whole decades at the bottom so that the bars start on a labelled line; headroom at the top for
    // the legend and the ratio written above the tallest pair.
    let y_low = 10f64.powf((lowest * 0.8).log10().floor());
    let y_high = highest * 4.0;
    // Lines at 1 to 9 of every decade, labelled at 1, 2 and 5 (plotters' own log ticks put each
    // decade's line in twice).
    let (mut labelled, mut faint) = (Vec::new(), Vec::new());
    for decade in y_low.log10().round() as i32..=y_high.log10().ceil() as i32 {
        for m in 1..10 {
            let v = f64::from(m) * 10f64.powi(decade);
            if (y_low..=y_high).contains(&v) {
                if [1, 2, 5].contains(&m) {
                    labelled.push(v);
                } else {
                    faint.push(v);
                }
            }
        }
    }
    let n = pairs.len();
    let mut chart = ChartBuilder::on(&body)
        .margin_left(10)
        .margin_right(25)
        .margin_top(5)
        .x_label_area_size(215)
        .y_label_area_size(90)
        .build_cartesian_2d(
            -0.5..n as f64 - 0.5,
            (y_low..y_high)
                .log_scale()
                .with_key_points(labelled)
                .with_light_points(faint),
        )?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        // The x labels are drawn below, rotated, one per pair; plotters would centre them on the tick.
        .x_labels(0)
        .y_label_formatter(&|v| {
            if *v >= 1.0 {
                format!("{v:.0}")
            } else {
                format!("{v}")
            }
        })
        .y_label_style((FONT, 17))
        .y_desc("µs per operation (log scale)")
        .axis_desc_style((FONT, 19))
        .bold_line_style(BLACK.mix(0.15))
        .light_line_style(BLACK.mix(0.06))
        .draw()?;

    let bar = |x0: f64, x1: f64, v: f64, color: RGBColor| {
        Rectangle::new([(x0, y_low), (x1, v)], color.filled())
    };
    let outline = |x0: f64, x1: f64, v: f64| {
        Rectangle::new([(x0, y_low), (x1, v)], BLACK.mix(0.6).stroke_width(1))
    };
    let at = |i: usize| i as f64;
    chart
        .draw_series(
            pairs
                .iter()
                .enumerate()
                .map(|(i, p)| bar(at(i) - 0.38, at(i) - 0.01, p.floor, FLOOR_COLOR)),
        )?
        .label("floor, measured in the same run")
        .legend(|(x, y)| Rectangle::new([(x, y - 7), (x + 18, y + 7)], FLOOR_COLOR.filled()));
    chart
        .draw_series(
            pairs
                .iter()
                .enumerate()
                .map(|(i, p)| bar(at(i) + 0.01, at(i) + 0.38, p.measured, MEASURED_COLOR)),
        )?
        .label("figure: criterion median or handoff p50")
        .legend(|(x, y)| Rectangle::new([(x, y - 7), (x + 18, y + 7)], MEASURED_COLOR.filled()));
    chart.draw_series(pairs.iter().enumerate().flat_map(|(i, p)| {
        [
            outline(at(i) - 0.38, at(i) - 0.01, p.floor),
            outline(at(i) + 0.01, at(i) + 0.38, p.measured),
        ]
    }))?;
    chart.draw_series(pairs.iter().enumerate().map(|(i, p)| {
        let ratio = p.ratio;
        let (text, color) = match p.target {
            Target::AtMost(v) if ratio < DISTURBED => (format!("{ratio:.2} (≤ {v})?"), BLACK),
            Target::AtMost(v) => (
                format!("{ratio:.2} (≤ {v})"),
                if ratio <= v { MET_COLOR } else { NOT_YET_COLOR },
            ),
            Target::AtLeast(v) => (
                format!("{ratio:.2} (≥ {v})"),
                if ratio >= v { MET_COLOR } else { NOT_YET_COLOR },
            ),
            Target::MbAtMost(_) | Target::None => (format!("{ratio:.2}"), BLACK),
        };
        let style = (FONT, 17)
            .into_font()
            .color(&color)
            .pos(Pos::new(HPos::Center, VPos::Bottom));
        EmptyElement::at((at(i), p.measured.max(p.floor))) + Text::new(text, (0, -5), style)
    }))?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FONT, 18))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.4))
        .draw()?;

    // Each pair's name under it, turned to read upwards and ending just below the axis.
    let label = (FONT, 17)
        .into_font()
        .transform(FontTransform::Rotate270)
        .color(&BLACK)
        .pos(Pos::new(HPos::Right, VPos::Center));
    for (i, p) in pairs.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(at(i), y_low));
        root.draw(&Text::new(p.short, (x, y + 10), label.clone()))?;
    }
    root.present()?;
    Ok(())
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
    let chart_path = Path::new(args.get(1).map_or("docs/perf/rust.svg", String::as_str));
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
    // On a VM, a round trip to a server process on another vCPU pays for waking it (an
    // inter-processor interrupt, 100 µs and more here), and on the same vCPU it does not; the
    // scheduler keeps each process where it is, so a floor measured against another server
    // process can come out several times slower or faster than the figure. Pinning the benches to
    // one CPU (PERF_PIN=1) takes that out and leaves the work itself.
    let pinned = if std::env::var("PERF_PIN").as_deref() == Ok("1") {
        "(the criterion benches ran pinned to one CPU with their servers, so each ratio compares the work done, \
         not wake-ups between CPUs) "
    } else {
        "(unpinned: a round trip to a server on another vCPU pays a wake-up that one on the same vCPU does not, \
         and the placement lasts, so a floor on another server process can be slowed several times; such a ratio \
         below 0.9 is marked *floor disturbed*, and `PERF_PIN=1 scripts/bench.sh` runs the cycles pinned to one \
         CPU) "
    };
    let about = format!(
        "Generated by `scripts/bench.sh` on {when}: release build, {cores} cores (load average over 1/5/15 min: \
         {load_start} at the start, {load_now} at the end; on a busy machine single figures move by tens of \
         percent between runs, so rerun before reading much into one), every server on loopback started by \
         the suite itself; each ratio is the figure over a floor measured in the same run. \
         Cycles are criterion medians (`cargo bench`), each sample timed right before the same number of its floor's \
         operations so that load drift hits both alike (the ratio is the median of the per-sample ratios); handoffs are 8 processes contending for one key \
         {pinned}
         with 1 ms of work per hold (`examples/perf_run.rs`). The Redis targets \
         were set for the C ABI; these are Rust figures. MySQL named mode's target (≤ 1.15) came with \
         that backend; its rows count round trips per cycle through a proxy (`crates/leasehold-mysql/benches/cycle.rs`).\n"
    );

    std::fs::create_dir_all("docs/perf").expect("docs/perf");
    let doc = format!(
        "# Rust benchmark suite\n\n{about}\n{table}\n![figures beside their floors](rust.svg)\n\n\
         Regenerate with `scripts/bench.sh` (about 5 minutes); `examples/perf_report.rs` draws the chart.\n"
    );
    std::fs::write("docs/perf/rust.md", doc).expect("write docs/perf/rust.md");
    if let Some(parent) = chart_path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .unwrap_or_else(|e| panic!("create {}: {e}", parent.display()));
    }
    chart(&rows, &when, chart_path)
        .unwrap_or_else(|e| panic!("draw {}: {e}", chart_path.display()));
    let section = format!(
        "{about}\n{table}\n![Rust figures beside their floors](docs/perf/rust.svg)\n\n\
         Regenerate with `scripts/bench.sh` (writes this block, [docs/perf/rust.md](docs/perf/rust.md) and the chart, \
         an SVG that `examples/perf_report.rs` draws).\n"
    );
    replace_between_markers(Path::new("README.md"), &section);
    print!("{table}");
}
