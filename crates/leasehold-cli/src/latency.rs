//! Latency percentiles in bounded memory: a log-linear histogram with under 1 % relative error, so a
//! bench of any length keeps a fixed 60 KiB per measured quantity, shared by all workers.

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Bits of each value kept below its leading one: 2^7 = 128 sub-buckets per power of two.
const PRECISION: u32 = 7;
const SUB: usize = 1 << PRECISION;
/// Values below `SUB` ns get a bucket each; every power of two above gets `SUB` buckets.
const BUCKETS: usize = SUB * (64 - PRECISION as usize + 1);

/// Percentiles in microseconds (fractional, so sub-microsecond differences still show).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    pub count: u64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

/// Counts of nanosecond values; recording is one relaxed atomic add, from any thread.
pub struct Histogram {
    buckets: Vec<AtomicU64>,
    count: AtomicU64,
    max: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            max: AtomicU64::new(0),
        }
    }
}

fn index(ns: u64) -> usize {
    if ns < SUB as u64 {
        return ns as usize;
    }
    let top = 63 - ns.leading_zeros(); // >= PRECISION
    let shift = top - PRECISION;
    let mantissa = ((ns >> shift) as usize) & (SUB - 1);
    (shift as usize + 1) * SUB + mantissa
}

/// The middle of a bucket's range, in nanoseconds.
fn value(index: usize) -> f64 {
    if index < SUB {
        return index as f64;
    }
    let shift = (index / SUB - 1) as i32;
    let low = ((SUB + index % SUB) as f64) * 2f64.powi(shift);
    low + 2f64.powi(shift) / 2.0
}

impl Histogram {
    pub fn record(&self, d: Duration) {
        let ns = nanos(d);
        self.buckets[index(ns)].fetch_add(1, Relaxed);
        self.count.fetch_add(1, Relaxed);
        self.max.fetch_max(ns, Relaxed);
    }

    /// Nearest-rank percentiles; `None` when nothing was recorded. The maximum is exact.
    pub fn summary(&self) -> Option<Summary> {
        let counts: Vec<u64> = self.buckets.iter().map(|b| b.load(Relaxed)).collect();
        let count: u64 = counts.iter().sum();
        if count == 0 {
            return None;
        }
        let max = self.max.load(Relaxed) as f64;
        let rank = |q: f64| {
            let wanted = ((q * count as f64).ceil() as u64).clamp(1, count);
            let mut seen = 0;
            for (i, c) in counts.iter().enumerate() {
                seen += c;
                if seen >= wanted {
                    return value(i).min(max) / 1000.0;
                }
            }
            max / 1000.0
        };
        Some(Summary {
            count,
            p50_us: rank(0.50),
            p90_us: rank(0.90),
            p99_us: rank(0.99),
            max_us: max / 1000.0,
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
        assert_eq!(s.max_us, 1000.0);
    }

    #[test]
    fn every_value_lands_in_a_bucket_that_holds_it() {
        for ns in [
            0,
            1,
            127,
            128,
            129,
            255,
            256,
            1_000,
            123_456_789,
            u64::MAX / 3,
            u64::MAX,
        ] {
            let i = index(ns);
            assert!(i < BUCKETS, "{ns}");
            let mid = value(i);
            assert!(
                (mid - ns as f64).abs() <= (ns as f64) / 128.0 + 1.0,
                "{ns}: {mid}"
            );
        }
        assert!(Histogram::default().summary().is_none());
        let one = Histogram::default();
        one.record(Duration::from_nanos(5_500));
        let s = one.summary().unwrap();
        assert!(close(s.p50_us, 5.5) && s.max_us == 5.5, "{s:?}");
    }

    #[test]
    fn human_units() {
        assert_eq!(human(12.0), "12µs");
        assert_eq!(human(1500.0), "1.50ms");
        assert_eq!(human(2_500_000.0), "2.50s");
    }
}
