//! What `leasehold doctor` reports: for one deployment, each promise the README makes and whether
//! it holds there, with the setting or fact that decides it.
//!
//! A backend gathers its facts over its own connections ([`crate::LockBackend::diagnose`]) and
//! judges each promise by them; the facade adds what every backend shares (the client's timeouts).
//! Nothing here talks to a server.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How a promise fares in one deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verdict {
    /// It holds, whatever happens within what the README describes.
    Holds,
    /// It holds only under a condition the deployment cannot show (the `because` says which).
    HoldsIf,
    /// It does not hold: a setting or fact of this deployment breaks it.
    DoesNotHold,
}

impl Verdict {
    /// `holds`, `holds_if`, `does_not_hold`: the names the JSON and the text use.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Holds => "holds",
            Verdict::HoldsIf => "holds_if",
            Verdict::DoesNotHold => "does_not_hold",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The promises a deployment is judged on, in the order they are reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Promise {
    /// `remaining() > 0` never coexists with another owner of the key.
    Exclusion,
    /// A later acquisition of a key gets a larger fence.
    FenceOrder,
    /// Every call returns within its bound.
    BoundedCalls,
    /// A granted lease is still there after the backend restarts (or crashes).
    SurvivesRestart,
    /// A granted lease is still there after a failover to a replica.
    SurvivesFailover,
    /// A holder stops relying on its lease when the server ends its session.
    SessionEndSeen,
}

impl Promise {
    pub const ALL: [Promise; 6] = [
        Promise::Exclusion,
        Promise::FenceOrder,
        Promise::BoundedCalls,
        Promise::SurvivesRestart,
        Promise::SurvivesFailover,
        Promise::SessionEndSeen,
    ];

    /// The promise's name in the report.
    pub fn as_str(self) -> &'static str {
        match self {
            Promise::Exclusion => "exclusion",
            Promise::FenceOrder => "fence_order",
            Promise::BoundedCalls => "bounded_calls",
            Promise::SurvivesRestart => "survives_restart",
            Promise::SurvivesFailover => "survives_failover",
            Promise::SessionEndSeen => "session_end_seen",
        }
    }
}

impl fmt::Display for Promise {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One promise judged: its verdict and the setting or fact that decides it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judgement {
    pub promise: Promise,
    pub verdict: Verdict,
    pub because: String,
}

/// What a backend found about its deployment: a judgement per promise and the facts behind them.
/// Never holds a password (facts are settings and counts, not connection strings).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diagnosis {
    judgements: BTreeMap<Promise, Judgement>,
    facts: BTreeMap<String, String>,
}

impl Diagnosis {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a fact (a setting as the server reported it, a count, a measurement).
    pub fn fact(&mut self, name: impl Into<String>, value: impl fmt::Display) -> &mut Self {
        self.facts.insert(name.into(), value.to_string());
        self
    }

    /// Judges `promise`. Judged twice (a Cluster's masters, Redlock's nodes), the worse verdict
    /// stays, and equal verdicts keep both reasons.
    pub fn judge(
        &mut self,
        promise: Promise,
        verdict: Verdict,
        because: impl Into<String>,
    ) -> &mut Self {
        let because = because.into();
        match self.judgements.get_mut(&promise) {
            Some(old) if old.verdict > verdict => {}
            Some(old) if old.verdict == verdict => {
                if !old.because.split("; ").any(|b| b == because) {
                    old.because = format!("{}; {because}", old.because);
                }
            }
            _ => {
                self.judgements.insert(
                    promise,
                    Judgement {
                        promise,
                        verdict,
                        because,
                    },
                );
            }
        }
        self
    }

    /// Whether `promise` has been judged.
    pub fn has(&self, promise: Promise) -> bool {
        self.judgements.contains_key(&promise)
    }

    /// Judges every promise no one judged as `holds_if`, saying the backend does not tell.
    pub fn complete(mut self, backend: &str) -> Self {
        for promise in Promise::ALL {
            if !self.has(promise) {
                self.judge(
                    promise,
                    Verdict::HoldsIf,
                    format!("the {backend} backend does not report what decides it"),
                );
            }
        }
        self
    }

    /// The judgements in report order ([`Promise::ALL`]).
    pub fn judgements(&self) -> impl Iterator<Item = &Judgement> {
        self.judgements.values()
    }

    pub fn judgement(&self, promise: Promise) -> Option<&Judgement> {
        self.judgements.get(&promise)
    }

    /// The facts, by name.
    pub fn facts(&self) -> &BTreeMap<String, String> {
        &self.facts
    }

    /// The worst verdict (`Holds` when nothing was judged).
    pub fn worst(&self) -> Verdict {
        self.judgements
            .values()
            .map(|j| j.verdict)
            .max()
            .unwrap_or(Verdict::Holds)
    }
}

/// What `leasehold doctor` prints: the deployment (its URL without passwords, the backend's name)
/// and its [`Diagnosis`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The URL as given, every password in it replaced by `***`.
    pub url: String,
    /// The backend's short name (`redis`, `postgres-table`, …).
    pub backend: String,
    pub diagnosis: Diagnosis,
}

/// The fact that says whether clients of another Leasehold version share the deployment's keys:
/// `0.3 seen (N keys)`, `none seen`, or why the backend cannot tell them apart (both versions
/// keep the same layout there).
pub const OTHER_VERSIONS: &str = "other_versions";

/// How far a server's clock reads from this host's, measured around one round trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockOffset {
    /// Server minus client, in microseconds (positive: the server is ahead).
    pub micros: i64,
    /// Half the round trip: how far off the measurement itself may be.
    pub uncertainty: Duration,
}

/// Beyond this, a server's clock is reported as not agreeing with this host's: NTP keeps
/// disciplined clocks within milliseconds of each other, so a gap this large means one of them is
/// not kept, and may step.
pub const CLOCK_AGREEMENT: Duration = Duration::from_millis(500);

impl ClockOffset {
    /// The offset of a server that read `server_micros` (µs since the Unix epoch) between `before`
    /// and `after` on this host's wall clock.
    pub fn measure(before: SystemTime, server_micros: i64, after: SystemTime) -> ClockOffset {
        let micros = |t: SystemTime| {
            t.duration_since(UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
        };
        let (b, a) = (micros(before), micros(after));
        let middle = b.saturating_add(a.saturating_sub(b) / 2);
        ClockOffset {
            micros: server_micros.saturating_sub(middle),
            uncertainty: Duration::from_micros(a.saturating_sub(b).unsigned_abs() / 2),
        }
    }

    /// Whether the offset is within [`CLOCK_AGREEMENT`], allowing for the measurement's own error.
    pub fn agrees(&self) -> bool {
        let off = Duration::from_micros(self.micros.unsigned_abs());
        off.saturating_sub(self.uncertainty) <= CLOCK_AGREEMENT
    }
}

impl fmt::Display for ClockOffset {
    /// `3 ms ahead of this host's (±0.2 ms)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.micros.unsigned_abs() as f64 / 1000.0;
        let side = if self.micros >= 0 {
            "ahead of"
        } else {
            "behind"
        };
        write!(
            f,
            "{ms:.1} ms {side} this host's (±{:.1} ms)",
            self.uncertainty.as_secs_f64() * 1000.0
        )
    }
}

/// The judgement of fences drawn from a server's clock (every backend's fences are a hybrid
/// logical clock: a lost counter is replaced by the clock, which must not step back past it).
pub fn judge_fence_clock(diagnosis: &mut Diagnosis, server: &str, offset: Option<ClockOffset>) {
    match offset {
        Some(o) if o.agrees() => diagnosis.judge(
            Promise::FenceOrder,
            Verdict::Holds,
            format!("{server} clock {o}"),
        ),
        Some(o) => diagnosis.judge(
            Promise::FenceOrder,
            Verdict::HoldsIf,
            format!(
                "{server} clock {o}: fences follow that clock once a counter is lost, so it \
                 must not step back (is it kept by NTP?)"
            ),
        ),
        None => diagnosis.judge(
            Promise::FenceOrder,
            Verdict::HoldsIf,
            format!("{server} clock could not be read: fences rely on it never stepping back"),
        ),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worse_verdict_stays_and_equal_ones_keep_both_reasons() {
        let mut d = Diagnosis::new();
        d.judge(Promise::Exclusion, Verdict::Holds, "a");
        d.judge(Promise::Exclusion, Verdict::DoesNotHold, "b");
        d.judge(Promise::Exclusion, Verdict::HoldsIf, "c");
        d.judge(Promise::Exclusion, Verdict::DoesNotHold, "d");
        d.judge(Promise::Exclusion, Verdict::DoesNotHold, "d");
        let j = d.judgement(Promise::Exclusion).unwrap();
        assert_eq!(
            (j.verdict, j.because.as_str()),
            (Verdict::DoesNotHold, "b; d")
        );
        assert_eq!(d.worst(), Verdict::DoesNotHold);
    }

    #[test]
    fn complete_judges_every_promise_in_order() {
        let mut d = Diagnosis::new();
        d.judge(Promise::SessionEndSeen, Verdict::Holds, "rows");
        let d = d.complete("x");
        let names: Vec<&str> = d.judgements().map(|j| j.promise.as_str()).collect();
        assert_eq!(
            names,
            [
                "exclusion",
                "fence_order",
                "bounded_calls",
                "survives_restart",
                "survives_failover",
                "session_end_seen"
            ]
        );
        assert_eq!(d.worst(), Verdict::HoldsIf);
    }

    #[test]
    fn clock_offsets_allow_for_the_round_trip() {
        let t0 = UNIX_EPOCH + Duration::from_secs(1_000);
        let t1 = t0 + Duration::from_millis(10);
        let o = ClockOffset::measure(t0, 1_000_005_000 + 600_000, t1);
        assert_eq!(o.micros, 600_000);
        assert_eq!(o.uncertainty, Duration::from_millis(5));
        assert!(!o.agrees());
        let o = ClockOffset::measure(t0, 1_000_005_000 - 2_000, t1);
        assert!(o.agrees());
        assert!(o.to_string().starts_with("2.0 ms behind"), "{o}");
    }
}
