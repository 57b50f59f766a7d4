//! Per-client counters and histograms: what a production team watches (the second seed's list:
//! failed acquisitions, critical-section durations, expiries, extensions, connection errors, retries).
//! Everything is a relaxed atomic add on the hot path; no lock is taken.

use crate::error::ErrorKind;
use std::cell::Cell;
use std::fmt::{self, Write as _};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Upper bounds of the histogram buckets, in microseconds (the last bucket is +Inf).
const BOUNDS_US: [u64; 18] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000, 30_000_000, 60_000_000,
];

/// A fixed-bucket latency histogram.
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; BOUNDS_US.len() + 1],
    count: AtomicU64,
    sum_us: AtomicU64,
}

impl Histogram {
    pub fn record(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let i = BOUNDS_US.partition_point(|b| *b < us);
        self.buckets[i].fetch_add(1, Relaxed);
        self.count.fetch_add(1, Relaxed);
        self.sum_us.fetch_add(us, Relaxed);
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            buckets: self.buckets.iter().map(|b| b.load(Relaxed)).collect(),
            count: self.count.load(Relaxed),
            sum: Duration::from_micros(self.sum_us.load(Relaxed)),
        }
    }
}

/// A point-in-time copy of a [`Histogram`]: per-bucket counts (not cumulative), total count and sum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistogramSnapshot {
    pub buckets: Vec<u64>,
    pub count: u64,
    pub sum: Duration,
}

impl HistogramSnapshot {
    /// Bucket upper bounds in seconds; the count vector has one more entry (+Inf).
    pub fn bounds_seconds() -> impl Iterator<Item = f64> {
        BOUNDS_US.iter().map(|us| *us as f64 / 1e6)
    }
}

/// The live counters of one client. Shared by the client and its leases.
#[derive(Debug)]
pub struct Stats {
    /// Off only for measuring what counting costs (`Client::without_stats`).
    enabled: bool,
    acquire_attempts: AtomicU64,
    acquired: AtomicU64,
    acquired_shared: AtomicU64,
    acquired_permit: AtomicU64,
    not_acquired: AtomicU64,
    releases_ok: AtomicU64,
    releases_lost: AtomicU64,
    extends_ok: AtomicU64,
    extends_lost: AtomicU64,
    expired: AtomicU64,
    keepalive_renewals: AtomicU64,
    keepalive_failures: AtomicU64,
    restored: AtomicU64,
    force_released: AtomicU64,
    retries: AtomicU64,
    errors: [AtomicU64; ErrorKind::ALL.len()],
    wait: Histogram,
    hold: Histogram,
    round_trip: Histogram,
}

/// What a counter records; used by the client and lease code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    AcquireAttempt,
    Acquired,
    AcquiredShared,
    AcquiredPermit,
    NotAcquired,
    ReleaseOk,
    ReleaseLost,
    ExtendOk,
    ExtendLost,
    Expired,
    KeepAliveRenewal,
    KeepAliveFailure,
    Restored,
    ForceReleased,
}

impl Default for Stats {
    fn default() -> Self {
        Stats::new(true)
    }
}

impl Stats {
    pub(crate) fn new(enabled: bool) -> Self {
        Stats {
            enabled,
            acquire_attempts: AtomicU64::default(),
            acquired: AtomicU64::default(),
            acquired_shared: AtomicU64::default(),
            acquired_permit: AtomicU64::default(),
            not_acquired: AtomicU64::default(),
            releases_ok: AtomicU64::default(),
            releases_lost: AtomicU64::default(),
            extends_ok: AtomicU64::default(),
            extends_lost: AtomicU64::default(),
            expired: AtomicU64::default(),
            keepalive_renewals: AtomicU64::default(),
            keepalive_failures: AtomicU64::default(),
            restored: AtomicU64::default(),
            force_released: AtomicU64::default(),
            retries: AtomicU64::default(),
            errors: Default::default(),
            wait: Histogram::default(),
            hold: Histogram::default(),
            round_trip: Histogram::default(),
        }
    }

    pub(crate) fn count(&self, event: Event) {
        if !self.enabled {
            return;
        }
        let c = match event {
            Event::AcquireAttempt => &self.acquire_attempts,
            Event::Acquired => &self.acquired,
            Event::AcquiredShared => &self.acquired_shared,
            Event::AcquiredPermit => &self.acquired_permit,
            Event::NotAcquired => &self.not_acquired,
            Event::ReleaseOk => &self.releases_ok,
            Event::ReleaseLost => &self.releases_lost,
            Event::ExtendOk => &self.extends_ok,
            Event::ExtendLost => &self.extends_lost,
            Event::Expired => &self.expired,
            Event::KeepAliveRenewal => &self.keepalive_renewals,
            Event::KeepAliveFailure => &self.keepalive_failures,
            Event::Restored => &self.restored,
            Event::ForceReleased => &self.force_released,
        };
        c.fetch_add(1, Relaxed);
    }

    /// Backend failures (`Unavailable`, `Internal`), by kind. Contention and loss have their own counters.
    pub(crate) fn error(&self, kind: ErrorKind) {
        if !self.enabled {
            return;
        }
        if let Some(i) = ErrorKind::ALL.iter().position(|k| *k == kind) {
            self.errors[i].fetch_add(1, Relaxed);
        }
    }

    pub(crate) fn retries_total(&self) -> u64 {
        self.retries.load(Relaxed)
    }

    pub(crate) fn retries(&self, n: u64) {
        if self.enabled && n > 0 {
            self.retries.fetch_add(n, Relaxed);
        }
    }

    pub(crate) fn wait(&self, d: Duration) {
        if self.enabled {
            self.wait.record(d)
        }
    }

    pub(crate) fn hold(&self, d: Duration) {
        if self.enabled {
            self.hold.record(d)
        }
    }

    pub(crate) fn round_trip(&self, d: Duration) {
        if self.enabled {
            self.round_trip.record(d)
        }
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            acquire_attempts: self.acquire_attempts.load(Relaxed),
            acquired: self.acquired.load(Relaxed),
            acquired_shared: self.acquired_shared.load(Relaxed),
            acquired_permit: self.acquired_permit.load(Relaxed),
            not_acquired: self.not_acquired.load(Relaxed),
            releases_ok: self.releases_ok.load(Relaxed),
            releases_lost: self.releases_lost.load(Relaxed),
            extends_ok: self.extends_ok.load(Relaxed),
            extends_lost: self.extends_lost.load(Relaxed),
            expired: self.expired.load(Relaxed),
            keepalive_renewals: self.keepalive_renewals.load(Relaxed),
            keepalive_failures: self.keepalive_failures.load(Relaxed),
            restored: self.restored.load(Relaxed),
            force_released: self.force_released.load(Relaxed),
            retries: self.retries.load(Relaxed),
            errors: ErrorKind::ALL
                .iter()
                .zip(&self.errors)
                .map(|(k, c)| (*k, c.load(Relaxed)))
                .collect(),
            wait: self.wait.snapshot(),
            hold: self.hold.snapshot(),
            round_trip: self.round_trip.snapshot(),
        }
    }
}

/// A copy of a client's counters. Field names are the JSON and Prometheus names.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StatsSnapshot {
    /// Calls to try_acquire/acquire that reached the backend.
    pub acquire_attempts: u64,
    /// Leases acquired, of every kind.
    pub acquired: u64,
    /// Of those, shared (read) leases.
    pub acquired_shared: u64,
    /// Of those, semaphore permits.
    pub acquired_permit: u64,
    /// Acquisitions refused because someone else held the key (after the whole wait).
    pub not_acquired: u64,
    pub releases_ok: u64,
    /// Releases that found the lease no longer ours.
    pub releases_lost: u64,
    pub extends_ok: u64,
    pub extends_lost: u64,
    /// Leases found lost after their local deadline had passed (expired while held).
    pub expired: u64,
    pub keepalive_renewals: u64,
    pub keepalive_failures: u64,
    /// Leases picked up by key and token (taken by another process or client).
    pub restored: u64,
    /// Keys freed by `force_release`, whoever held them.
    pub force_released: u64,
    /// Extra attempts inside waits and multi-node rounds.
    pub retries: u64,
    /// Errors by kind: `unavailable` and `internal` from the backend, and `invalid_argument` for inputs
    /// the Rust client rejected (the C and PHP layers reject theirs before they reach it).
    pub errors: Vec<(ErrorKind, u64)>,
    /// Time spent in acquire calls, successful or not.
    pub wait: HistogramSnapshot,
    /// Time from acquisition to release.
    pub hold: HistogramSnapshot,
    /// Duration of single backend calls (try_acquire, release, extend).
    pub round_trip: HistogramSnapshot,
}

impl StatsSnapshot {
    fn counters(&self) -> [(&'static str, u64, &'static str); 15] {
        [
            (
                "acquire_attempts",
                self.acquire_attempts,
                "Acquire calls that reached the backend.",
            ),
            ("acquired", self.acquired, "Leases acquired, of every kind."),
            (
                "acquired_shared",
                self.acquired_shared,
                "Shared (read) leases acquired.",
            ),
            (
                "acquired_permit",
                self.acquired_permit,
                "Semaphore permits acquired.",
            ),
            (
                "not_acquired",
                self.not_acquired,
                "Acquisitions refused: the key was held (after any wait).",
            ),
            (
                "releases_ok",
                self.releases_ok,
                "Releases of a lease that was still ours.",
            ),
            (
                "releases_lost",
                self.releases_lost,
                "Releases that found the lease lost.",
            ),
            (
                "extends_ok",
                self.extends_ok,
                "Successful extends (keep-alive renewals included).",
            ),
            (
                "extends_lost",
                self.extends_lost,
                "Extends that found the lease lost.",
            ),
            (
                "expired",
                self.expired,
                "Leases found lost after their deadline passed while held.",
            ),
            (
                "keepalive_renewals",
                self.keepalive_renewals,
                "Background keep-alive renewals.",
            ),
            (
                "keepalive_failures",
                self.keepalive_failures,
                "Background keep-alive renewals that failed.",
            ),
            (
                "restored",
                self.restored,
                "Leases picked up by key and token.",
            ),
            (
                "force_released",
                self.force_released,
                "Keys freed by force_release, whoever held them.",
            ),
            (
                "retries",
                self.retries,
                "Extra attempts inside waits and multi-node rounds.",
            ),
        ]
    }

    fn histograms(&self) -> [(&'static str, &HistogramSnapshot, &'static str); 3] {
        [
            ("wait_seconds", &self.wait, "Time spent in acquire calls."),
            (
                "hold_seconds",
                &self.hold,
                "Time from acquisition to release.",
            ),
            (
                "round_trip_seconds",
                &self.round_trip,
                "Duration of single backend calls.",
            ),
        ]
    }

    /// The documented JSON object:
    /// `{"acquire_attempts":N, …counters…, "errors":{"unavailable":N,…},
    ///   "wait_seconds":{"count":N,"sum":S,"buckets":[[le,count],…,["+Inf",count]]}, …}`
    /// with cumulative bucket counts, as in Prometheus.
    pub fn to_json(&self) -> String {
        let mut out = String::from("{");
        for (name, value, _) in self.counters() {
            let _ = write!(out, "\"{name}\":{value},");
        }
        out.push_str("\"errors\":{");
        let errors: Vec<String> = self
            .errors
            .iter()
            .map(|(k, n)| format!("\"{}\":{n}", k.as_str()))
            .collect();
        out.push_str(&errors.join(","));
        out.push('}');
        for (name, h, _) in self.histograms() {
            let _ = write!(
                out,
                ",\"{name}\":{{\"count\":{},\"sum\":{},\"buckets\":[",
                h.count,
                h.sum.as_secs_f64()
            );
            let mut cumulative = 0;
            let mut parts = Vec::new();
            for (le, n) in HistogramSnapshot::bounds_seconds().zip(&h.buckets) {
                cumulative += n;
                parts.push(format!("[{le},{cumulative}]"));
            }
            parts.push(format!("[\"+Inf\",{}]", h.count));
            out.push_str(&parts.join(","));
            out.push_str("]}");
        }
        out.push('}');
        out
    }

    /// The Prometheus text exposition format, every series labelled with `labels` (for example
    /// `[("backend", "redis"), ("prefix", "app:")]`; never put a full key or a secret there).
    pub fn to_prometheus(&self, labels: &[(&str, &str)]) -> String {
        let label_text: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", escape_label(v)))
            .collect();
        let base = label_text.join(",");
        // Written straight into `out` (no string per line): a scrape renders about 120 lines.
        let mut out = String::with_capacity(8192 + 2 * 121 * base.len());
        let labelled = |out: &mut String, extra: fmt::Arguments<'_>| {
            let extra_empty = extra.as_str() == Some("");
            match (base.is_empty(), extra_empty) {
                (true, true) => {}
                (true, false) => {
                    let _ = write!(out, "{{{extra}}}");
                }
                (false, true) => {
                    let _ = write!(out, "{{{base}}}");
                }
                (false, false) => {
                    let _ = write!(out, "{{{base},{extra}}}");
                }
            }
        };
        for (name, value, help) in self.counters() {
            let _ = writeln!(out, "# HELP leasehold_{name}_total {help}");
            let _ = writeln!(out, "# TYPE leasehold_{name}_total counter");
            let _ = write!(out, "leasehold_{name}_total");
            labelled(&mut out, format_args!(""));
            let _ = writeln!(out, " {value}");
        }
        let _ = writeln!(out, "# HELP leasehold_errors_total Backend errors by kind.");
        let _ = writeln!(out, "# TYPE leasehold_errors_total counter");
        for (kind, n) in &self.errors {
            out.push_str("leasehold_errors_total");
            labelled(&mut out, format_args!("kind=\"{}\"", kind.as_str()));
            let _ = writeln!(out, " {n}");
        }
        for (name, h, help) in self.histograms() {
            let _ = writeln!(out, "# HELP leasehold_{name} {help}");
            let _ = writeln!(out, "# TYPE leasehold_{name} histogram");
            let mut cumulative = 0;
            for (le, n) in HistogramSnapshot::bounds_seconds().zip(&h.buckets) {
                cumulative += n;
                let _ = write!(out, "leasehold_{name}_bucket");
                labelled(&mut out, format_args!("le=\"{le}\""));
                let _ = writeln!(out, " {cumulative}");
            }
            let _ = write!(out, "leasehold_{name}_bucket");
            labelled(&mut out, format_args!("le=\"+Inf\""));
            let _ = writeln!(out, " {}", h.count);
            let _ = write!(out, "leasehold_{name}_sum");
            labelled(&mut out, format_args!(""));
            let _ = writeln!(out, " {}", h.sum.as_secs_f64());
            let _ = write!(out, "leasehold_{name}_count");
            labelled(&mut out, format_args!(""));
            let _ = writeln!(out, " {}", h.count);
        }
        out
    }
}

fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

thread_local! {
    static RETRIES: Cell<u64> = const { Cell::new(0) };
}

/// Backends call this for every extra attempt inside a wait or a multi-node round, so the calling
/// client can count retries without the backend knowing about it.
pub fn note_retry() {
    RETRIES.with(|r| r.set(r.get().wrapping_add(1)));
}

/// The retry count on this thread so far; the client takes the difference around a backend call.
pub(crate) fn retries_so_far() -> u64 {
    RETRIES.with(|r| r.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets() {
        let h = Histogram::default();
        h.record(Duration::from_micros(50));
        h.record(Duration::from_micros(100));
        h.record(Duration::from_millis(3));
        h.record(Duration::from_secs(1000));
        let s = h.snapshot();
        assert_eq!(s.count, 4);
        assert_eq!(s.buckets[0], 2);
        assert_eq!(s.buckets[5], 1);
        assert_eq!(*s.buckets.last().unwrap(), 1);
    }

    #[test]
    fn renderings_have_every_counter() {
        let stats = Stats::default();
        stats.count(Event::Acquired);
        stats.error(ErrorKind::Unavailable);
        stats.wait(Duration::from_millis(2));
        let snap = stats.snapshot();
        let json = snap.to_json();
        assert!(
            json.starts_with("{\"acquire_attempts\":0,\"acquired\":1,"),
            "{json}"
        );
        assert!(json.contains("\"errors\":{\"not_acquired\":0,\"lost\":0,\"unavailable\":1"));
        assert!(json.contains("[\"+Inf\",1]"));
        let prom = snap.to_prometheus(&[("backend", "redis"), ("prefix", "a\"b")]);
        assert!(prom.contains("leasehold_acquired_total{backend=\"redis\",prefix=\"a\\\"b\"} 1\n"));
        assert!(prom.contains(
            "leasehold_wait_seconds_bucket{backend=\"redis\",prefix=\"a\\\"b\",le=\"0.0025\"} 1\n"
        ));
        assert!(prom.contains(
            "leasehold_errors_total{backend=\"redis\",prefix=\"a\\\"b\",kind=\"unavailable\"} 1"
        ));
        assert!(snap
            .to_prometheus(&[])
            .contains("leasehold_acquired_total 1\n"));
    }
}
