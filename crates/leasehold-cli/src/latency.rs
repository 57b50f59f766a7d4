//! Latency percentiles in bounded memory: HdrHistogram with 3 significant digits (under 0.1 %
//! relative error), so a bench of any length keeps a fixed few tens of KiB per measured quantity,
//! shared by all workers.

use serde::Serialize;
use std::sync::Mutex;
use std::time::Duration;

const HOUR_NS: u64 = 3_600_000_000_000;

/// Percentiles in microseconds (fractional, so sub-microsecond differences still show).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    pub count: u64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

/// Nanosecond values from any thread. A record holds the lock for a few nanoseconds: next to a
/// lock cycle's tens of microseconds, contention on it does not show.
pub struct Histogram(Mutex<hdrhistogram::Histogram<u64>>);

impl Default for Histogram {
    fn default() -> Self {
        // 1 ns to an hour: no lock call takes longer (longer ones are recorded as an hour).
        let h = hdrhistogram::Histogram::new_with_bounds(1, HOUR_NS, 3)
            .expect("valid bounds and precision");
        Histogram(Mutex::new(h))
    }
}

impl Histogram {
    pub fn record(&self, d: Duration) {
        let mut h = self.0.lock().unwrap_or_else(|p| p.into_inner());
        h.saturating_record(nanos(d));
    }

    /// Percentiles; `None` when nothing was recorded. The maximum is exact to the precision.
    pub fn summary(&self) -> Option<Summary> {
        let h = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if h.is_empty() {
            return None;
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        Some(Summary {
            count: h.len(),
            p50_us: us(h.value_at_quantile(0.50)),
            p90_us: us(h.value_at_quantile(0.90)),
            p99_us: us(h.value_at_quantile(0.99)),
            max_us: us(h.max()),
        })
    }
}

/// A duration in microseconds, printed with a unit people read at a glance.
pub fn human(us: f64) -> String {
    if us < 1000.0 {
        format!("{us:.0}µs")
    } else if us < 1_000_000.0 {
        format!("{:.2}ms", us / 1000.0)
    } else {
        format!("{:.2}s", us / 1e6)
    }
}

/// Nanoseconds in a `u64`, saturating (a bench never runs for 584 years).
pub fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(got: f64, want: f64) -> bool {
        (got - want).abs() <= want * 0.01
    }

    #[test]
    fn percentiles_within_one_percent() {
        let h = Histogram::default();
        for us in (1..=1000u64).rev() {
            h.record(Duration::from_micros(us));
        }
        let s = h.summary().unwrap();
        assert_eq!(s.count, 1000);
        assert!(close(s.p50_us, 500.0), "{s:?}");
        assert!(close(s.p90_us, 900.0), "{s:?}");
        assert!(close(s.p99_us, 990.0), "{s:?}");
        assert!(close(s.max_us, 1000.0), "{s:?}");
    }

    #[test]
    fn empty_single_and_extreme_values() {
        assert!(Histogram::default().summary().is_none());
        let one = Histogram::default();
        one.record(Duration::from_nanos(5_500));
        let s = one.summary().unwrap();
        assert!(close(s.p50_us, 5.5) && close(s.max_us, 5.5), "{s:?}");
        let wide = Histogram::default();
        wide.record(Duration::ZERO);
        wide.record(Duration::MAX);
        assert_eq!(wide.summary().unwrap().count, 2);
    }

    #[test]
    fn human_units() {
        assert_eq!(human(12.0), "12µs");
        assert_eq!(human(1500.0), "1.50ms");
        assert_eq!(human(2_500_000.0), "2.50s");
    }
}
