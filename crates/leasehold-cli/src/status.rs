//! `leasehold status KEY`: what the backend can tell about a key without taking it.

use crate::cli::StatusArgs;
use crate::exit::Failure;
use leasehold::{Client, KeyInfo};
use serde::Serialize;
use std::os::unix::ffi::OsStrExt;

#[derive(Debug, Serialize)]
struct Report<'a> {
    key: &'a str,
    held: bool,
    /// Milliseconds left on the holder's lease, if held and the backend can tell.
    remaining_ms: Option<u64>,
    /// The last fence handed out for the key, if the backend can tell.
    fence: Option<u64>,
    /// `lock` or `semaphore`.
    kind: &'a str,
    /// How many leases hold it (shared holders, permits; 1 for an exclusive holder), if the backend
    /// can tell.
    holders: Option<u32>,
    /// Whether the holders are shared (read) leases, if the backend can tell.
    shared: Option<bool>,
    backend: &'a str,
    url: &'a str,
    /// Where the backend's data lives (which master, how many replicas acknowledged), if it can tell.
    topology: Option<String>,
}

pub fn status(client: &Client, described_url: &str, args: &StatusArgs) -> Result<u8, Failure> {
    let key = String::from_utf8_lossy(args.key.as_bytes()).into_owned();
    let info: KeyInfo = if args.semaphore {
        client.inspect_semaphore(args.key.as_bytes())?
    } else {
        client.inspect(args.key.as_bytes())?
    };
    let report = Report {
        key: &key,
        held: info.held,
        remaining_ms: info
            .remaining
            .filter(|_| info.held)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        fence: info.fence,
        kind: if args.semaphore { "semaphore" } else { "lock" },
        holders: info.holders.filter(|_| info.held),
        shared: info.shared.filter(|_| info.held),
        backend: client.backend_name(),
        url: described_url,
        topology: client.topology(),
    };
    if args.json {
        let text = serde_json::to_string(&report)
            .map_err(|e| Failure::new(crate::exit::INTERNAL, format!("cannot encode JSON: {e}")))?;
        println!("{text}");
    } else {
        print!("{}", text(&report));
    }
    Ok(0)
}

fn text(r: &Report<'_>) -> String {
    let state = match (r.held, r.kind, r.holders, r.shared) {
        (false, _, _, _) => "free".to_owned(),
        (true, "semaphore", Some(n), _) => {
            format!("{n} permit{} held", if n == 1 { "" } else { "s" })
        }
        (true, _, Some(n), Some(true)) => {
            format!("held by {n} reader{}", if n == 1 { "" } else { "s" })
        }
        (true, _, _, _) => "held".to_owned(),
    };
    let remaining = match (r.held, r.remaining_ms) {
        (false, _) => "-".to_owned(),
        (true, Some(ms)) => {
            humantime::format_duration(std::time::Duration::from_millis(ms)).to_string()
        }
        (true, None) => "unknown (the backend cannot tell)".to_owned(),
    };
    let fence = match r.fence {
        Some(f) => f.to_string(),
        None => "unknown (never taken, or the backend cannot tell)".to_owned(),
    };
    let mut out = format!(
        "key:        {}\nstate:      {state}\nremaining:  {remaining}\nlast fence: {fence}\nbackend:    {} ({})\n",
        r.key, r.backend, r.url
    );
    if let Some(t) = &r.topology {
        out.push_str(&format!("topology:   {t}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_names_state_time_and_fence() {
        let r = Report {
            key: "k",
            held: true,
            remaining_ms: Some(1500),
            fence: Some(7),
            kind: "lock",
            holders: Some(1),
            shared: Some(false),
            backend: "local",
            url: "file:///tmp/x",
            topology: None,
        };
        let t = text(&r);
        assert!(t.contains("state:      held"), "{t}");
        assert!(t.contains("remaining:  1s 500ms"), "{t}");
        assert!(t.contains("last fence: 7"), "{t}");
    }
}
