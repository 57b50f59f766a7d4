//! `leasehold metrics --dir DIR`: the counters that the workers of each PHP pool wrote under DIR
//! (`Leasehold\Metrics\PoolMetrics::flush()`), summed per pool, as Prometheus text.
//!
//! The output must be byte for byte what `PoolMetrics::render()` prints from the same files
//! (bindings/php/src/Metrics/Exposition.php and PoolMetrics.php): families and samples in order of
//! first appearance, pools and files visited by name in byte order, sums taken in that order (so
//! floating-point sums agree too), numbers printed as Rust's `Display` prints them. Change both
//! together.
//!
//! A pool is a directory `DIR/<pool>/`; each worker has a file `<pid>-<start>-<boot>.json`, and the
//! workers that exited are folded into `retired.json`, whose `folded` list names worker files that
//! are already in it (a fold that crashed before removing them): those are skipped. Files are read
//! under a shared flock on `DIR/<pool>/.lock`, which a fold holds exclusively.

use crate::cli::MetricsArgs;
use crate::exit::{Failure, NO_INPUT};
use serde_json::Value;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// The version of the files this reads; others are left out with a warning.
const FORMAT: i64 = 1;
const RETIRED: &str = "retired.json";

pub fn metrics(args: &MetricsArgs) -> Result<u8, Failure> {
    if !args.dir.is_dir() {
        return Err(Failure::new(
            NO_INPUT,
            format!(
                "the metrics directory {} does not exist or is not a directory (it is the --dir or \
                 $dir given to PoolMetrics::flush())",
                args.dir.display()
            ),
        ));
    }
    let text = render(&args.dir, args.per_worker, &mut |warning| {
        say!("leasehold: {warning}");
    });
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| Failure::new(crate::exit::OS_ERROR, format!("cannot write: {e}")))?;
    Ok(0)
}

// serde_json reads floats exactly only with its float_roundtrip feature (on in Cargo.toml); without
// it a sum could differ from PHP's in the last digit.

/// A sample's value: integers stay integers (as in PHP) until a sum overflows or meets a float.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Num {
    Int(i64),
    Float(f64),
}

impl Num {
    fn of(value: &Value) -> Option<Num> {
        match value {
            Value::Number(n) => n
                .as_i64()
                .map(Num::Int)
                .or_else(|| n.as_f64().map(Num::Float)),
            _ => None,
        }
    }

    fn add(self, other: Num) -> Num {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => a
                .checked_add(b)
                .map_or(Num::Float(a as f64 + b as f64), Num::Int),
            (a, b) => Num::Float(a.as_f64() + b.as_f64()),
        }
    }

    fn as_f64(self) -> f64 {
        match self {
            Num::Int(n) => n as f64,
            Num::Float(f) => f,
        }
    }
}

impl std::fmt::Display for Num {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Num::Int(n) => write!(f, "{n}"),
            Num::Float(x) if x.is_nan() => f.write_str("NaN"),
            Num::Float(x) if x.is_infinite() => f.write_str(if x > 0.0 { "+Inf" } else { "-Inf" }),
            // -0.0 too (a float pattern compares with ==), as PHP prints it.
            Num::Float(0.0) => f.write_str("0"),
            Num::Float(x) => write!(f, "{x}"),
        }
    }
}

/// One metric family: its samples in first-seen order.
#[derive(Debug, Default)]
struct Family {
    kind: String,
    help: String,
    samples: Vec<(String, Num)>,
    index: HashMap<String, usize>,
}

impl Family {
    fn add(&mut self, sample: String, value: Num) {
        match self.index.get(&sample) {
            Some(&i) => self.samples[i].1 = self.samples[i].1.add(value),
            None => {
                self.index.insert(sample.clone(), self.samples.len());
                self.samples.push((sample, value));
            }
        }
    }
}

/// Families in first-seen order.
#[derive(Debug, Default)]
struct Families {
    list: Vec<(String, Family)>,
    index: HashMap<String, usize>,
}

impl Families {
    /// The family `name`, made with `kind` and `help` if it is new.
    fn family(&mut self, name: &str, kind: &str, help: &str) -> &mut Family {
        let i = match self.index.get(name) {
            Some(&i) => i,
            None => {
                let family = Family {
                    kind: kind.to_owned(),
                    help: help.to_owned(),
                    ..Family::default()
                };
                self.index.insert(name.to_owned(), self.list.len());
                self.list.push((name.to_owned(), family));
                self.list.len() - 1
            }
        };
        &mut self.list[i].1
    }

    /// A stored list of families (entries of the wrong shape left out), duplicates summed.
    fn from_list(list: Option<&Value>) -> Families {
        let mut families = Families::default();
        for family in list.and_then(Value::as_array).into_iter().flatten() {
            let (Some(name), Some(series)) = (
                family.get("name").and_then(Value::as_str),
                family.get("series").and_then(Value::as_array),
            ) else {
                continue;
            };
            let kind = family
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("untyped");
            let help = family.get("help").and_then(Value::as_str).unwrap_or("");
            let target = families.family(name, kind, help);
            for pair in series {
                let (Some(sample), Some(value)) = (
                    pair.get(0).and_then(Value::as_str),
                    pair.get(1).and_then(Num::of),
                ) else {
                    continue;
                };
                target.add(sample.to_owned(), value);
            }
        }
        families
    }

    /// Prometheus text as the library prints it (`Exposition::parse()`).
    fn parse(text: &str) -> Families {
        let mut families = Families::default();
        let mut current: Option<String> = None;
        for line in text.split('\n') {
            if line.is_empty() {
                continue;
            }
            if let Some(rest) = line
                .strip_prefix("# HELP ")
                .or_else(|| line.strip_prefix("# TYPE "))
            {
                let (name, value) = rest.split_once(' ').unwrap_or((rest, ""));
                let family = families.family(name, "untyped", "");
                if line.as_bytes()[2] == b'H' {
                    family.help = value.to_owned();
                } else {
                    family.kind = value.to_owned();
                }
                current = Some(name.to_owned());
                continue;
            }
            if line.starts_with('#') {
                continue;
            }
            // The value is after the last space: a label value may hold spaces, never a raw newline.
            let Some((sample, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let name = match &current {
                Some(name) => name.clone(),
                None => sample.split('{').next().unwrap_or("").to_owned(),
            };
            let value = parse_value(value);
            // A sample printed twice replaces the first, as in a PHP array.
            let family = families.family(&name, "untyped", "");
            match family.index.get(sample) {
                Some(&i) => family.samples[i].1 = value,
                None => family.add(sample.to_owned(), value),
            }
        }
        families
    }

    fn render(&self) -> String {
        let mut out = String::new();
        for (name, family) in &self.list {
            let _ = writeln!(out, "# HELP {name} {}", family.help);
            let _ = writeln!(out, "# TYPE {name} {}", family.kind);
            for (sample, value) in &family.samples {
                let _ = writeln!(out, "{sample} {value}");
            }
        }
        out
    }
}

/// A printed number: an integer of up to 18 digits stays one (as `Exposition::value()` reads it).
fn parse_value(text: &str) -> Num {
    let digits = text.strip_prefix('-').unwrap_or(text);
    if (1..=18).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_digit()) {
        if let Ok(n) = text.parse() {
            return Num::Int(n);
        }
    }
    match text {
        "+Inf" | "Inf" => Num::Float(f64::INFINITY),
        "-Inf" => Num::Float(f64::NEG_INFINITY),
        "NaN" => Num::Float(f64::NAN),
        _ => Num::Float(text.parse().unwrap_or(0.0)),
    }
}

/// `sample` with `labels` put first: `name{a="1",…}`.
fn with_labels(sample: &str, labels: &[(&str, &str)]) -> String {
    let added: Vec<String> = labels
        .iter()
        .map(|(label, value)| {
            let escaped = value
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            format!("{label}=\"{escaped}\"")
        })
        .collect();
    let added = added.join(",");
    match sample.find('{') {
        None => format!("{sample}{{{added}}}"),
        Some(brace) => {
            let rest = &sample[brace + 1..];
            let comma = if rest == "}" { "" } else { "," };
            format!("{}{added}{comma}{rest}", &sample[..=brace])
        }
    }
}

/// The sources of a stored file by id (a persistent client's text as the library printed it, or
/// the families that per-request clients added up), a later one with the same id replacing the earlier in its
/// place (as a PHP array does).
fn sources(data: &Value) -> Vec<(String, Families)> {
    let mut sources: Vec<(String, Families)> = Vec::new();
    for source in data
        .get("sources")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(id) = source.get("id").and_then(Value::as_str) else {
            continue;
        };
        let families = match source.get("text").and_then(Value::as_str) {
            Some(text) => Families::parse(text),
            None => Families::from_list(source.get("families")),
        };
        match sources.iter_mut().find(|(known, _)| known == id) {
            Some(slot) => slot.1 = families,
            None => sources.push((id.to_owned(), families)),
        }
    }
    sources
}

/// Names in `dir` in byte order, without hidden ones (and without names that are not UTF-8, which
/// no writer makes).
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| !name.starts_with('.'))
        .collect();
    names.sort();
    names
}

fn read(file: &Path, warn: &mut dyn FnMut(String)) -> Option<Value> {
    let text = std::fs::read(file).ok()?;
    match serde_json::from_slice::<Value>(&text) {
        Ok(data) if data.get("format").and_then(Value::as_i64) == Some(FORMAT) => Some(data),
        _ => {
            warn(format!(
                "{} is not a metrics file of this version; left out",
                file.display()
            ));
            None
        }
    }
}

/// A shared flock on `pool/.lock` while reading, when the file exists (the workers make it); a
/// fold holds it exclusively between writing retired.json and removing the files it folded.
struct SharedLock(Option<std::fs::File>);

impl SharedLock {
    fn take(pool: &Path) -> SharedLock {
        let file = std::fs::File::open(pool.join(".lock")).ok().filter(|f| {
            // SAFETY: flock on a descriptor we own; it only blocks until a fold is done.
            unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_SH) == 0 }
        });
        SharedLock(file)
    }
}

impl Drop for SharedLock {
    fn drop(&mut self) {
        if let Some(f) = &self.0 {
            // SAFETY: as above; closing the file would release it too.
            unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_UN) };
        }
    }
}

/// The text of every pool under `dir` (see the module comment).
fn render(dir: &Path, per_worker: bool, warn: &mut dyn FnMut(String)) -> String {
    let mut merged = Families::default();
    for pool in entries(dir) {
        let pool_dir = dir.join(&pool);
        if !pool_dir.is_dir() {
            continue;
        }
        let _lock = SharedLock::take(&pool_dir);
        let retired = read(&pool_dir.join(RETIRED), warn);
        let folded: Vec<&str> = retired
            .as_ref()
            .and_then(|r| r.get("folded"))
            .and_then(Value::as_array)
            .map(|names| names.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for name in entries(&pool_dir) {
            if !name.ends_with(".json") || folded.contains(&name.as_str()) {
                continue;
            }
            let read_here;
            let data = if name == RETIRED {
                retired.as_ref()
            } else {
                read_here = read(&pool_dir.join(&name), warn);
                read_here.as_ref()
            };
            let Some(data) = data else { continue };
            let worker = if name == RETIRED {
                "retired".to_owned()
            } else {
                match data.get("pid") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Number(n)) => n.to_string(),
                    _ => "?".to_owned(),
                }
            };
            let mut labels = vec![("pool", pool.as_str())];
            if per_worker {
                labels.push(("worker", worker.as_str()));
            }
            for (_, families) in sources(data) {
                for (name, family) in families.list {
                    let target = merged.family(&name, &family.kind, &family.help);
                    for (sample, value) in family.samples {
                        target.add(with_labels(&sample, &labels), value);
                    }
                }
            }
        }
    }
    merged.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_as_the_library_prints_them() {
        assert_eq!(Num::Int(42).to_string(), "42");
        assert_eq!(Num::Float(3.0).to_string(), "3");
        assert_eq!(Num::Float(0.0).to_string(), "0");
        assert_eq!(Num::Float(1e-7).to_string(), "0.0000001");
        assert_eq!(Num::Float(0.1 + 0.2).to_string(), "0.30000000000000004");
        assert_eq!(
            Num::Int(i64::MAX).add(Num::Int(1)),
            Num::Float(i64::MAX as f64 + 1.0)
        );
    }

    #[test]
    fn labels_go_first() {
        let pool = [("pool", "www")];
        assert_eq!(with_labels("a_total", &pool), "a_total{pool=\"www\"}");
        assert_eq!(with_labels("a{}", &pool), "a{pool=\"www\"}");
        assert_eq!(
            with_labels("a{b=\"1\"}", &[("pool", "w\"x"), ("worker", "7")]),
            "a{pool=\"w\\\"x\",worker=\"7\",b=\"1\"}"
        );
    }
}
