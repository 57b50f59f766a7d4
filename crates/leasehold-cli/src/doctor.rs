//! `leasehold doctor [URL]`: judges a deployment, promise by promise, and says so in its exit
//! status (0 every promise holds, 1 some hold only if a condition is met, 2 some do not hold).

use crate::cli::DoctorArgs;
use crate::exit::{Failure, INTERNAL};
use leasehold::doctor::{Report, Verdict};

/// Every promise holds.
pub const ALL_HOLD: u8 = 0;
/// At least one holds only if a condition is met, none does not hold.
pub const SOME_HOLD_IF: u8 = 1;
/// At least one does not hold.
pub const SOME_DO_NOT_HOLD: u8 = 2;

pub fn doctor(url: &str, args: &DoctorArgs) -> Result<u8, Failure> {
    let report = leasehold::doctor(url)?;
    if args.json {
        let text = serde_json::to_string(&json(&report))
            .map_err(|e| Failure::new(INTERNAL, format!("cannot encode JSON: {e}")))?;
        println!("{text}");
    } else {
        print!("{}", text(&report));
    }
    Ok(exit_status(report.diagnosis.worst()))
}

pub fn exit_status(worst: Verdict) -> u8 {
    match worst {
        Verdict::Holds => ALL_HOLD,
        Verdict::HoldsIf => SOME_HOLD_IF,
        Verdict::DoesNotHold => SOME_DO_NOT_HOLD,
    }
}

fn json(r: &Report) -> serde_json::Value {
    let promises: Vec<serde_json::Value> = r
        .diagnosis
        .judgements()
        .map(|j| {
            serde_json::json!({
                "name": j.promise.as_str(),
                "verdict": j.verdict.as_str(),
                "because": j.because,
            })
        })
        .collect();
    serde_json::json!({
        "url": r.url,
        "backend": r.backend,
        "promises": promises,
        "facts": r.diagnosis.facts(),
    })
}

fn text(r: &Report) -> String {
    let mut out = format!("{} ({})\n", r.url, r.backend);
    for j in r.diagnosis.judgements() {
        out.push_str(&format!(
            "{:<18} {:<14} {}\n",
            j.promise.as_str(),
            j.verdict.as_str(),
            crate::exit::one_line(&j.because)
        ));
    }
    out.push_str("facts:\n");
    for (name, value) in r.diagnosis.facts() {
        out.push_str(&format!("  {name}: {}\n", crate::exit::one_line(value)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold::doctor::{Diagnosis, Promise};

    fn report() -> Report {
        let mut d = Diagnosis::new();
        d.judge(
            Promise::Exclusion,
            Verdict::DoesNotHold,
            "maxmemory-policy=volatile-lru",
        )
        .fact("maxmemory_policy", "volatile-lru");
        Report {
            url: "redis://:***@h:1/0".into(),
            backend: "redis".into(),
            diagnosis: d.complete("redis"),
        }
    }

    #[test]
    fn one_line_per_promise_then_the_facts() {
        let t = text(&report());
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "redis://:***@h:1/0 (redis)");
        assert!(lines[1].starts_with("exclusion          does_not_hold  maxmemory-policy"));
        assert_eq!(lines.len(), 1 + 6 + 2, "{t}");
        assert_eq!(exit_status(report().diagnosis.worst()), 2);
    }

    #[test]
    fn json_has_the_contracts_shape() {
        let v = json(&report());
        assert_eq!(v["backend"], "redis");
        assert_eq!(v["promises"].as_array().unwrap().len(), 6);
        assert_eq!(v["promises"][0]["name"], "exclusion");
        assert_eq!(v["promises"][0]["verdict"], "does_not_hold");
        assert_eq!(v["facts"]["maxmemory_policy"], "volatile-lru");
    }
}
