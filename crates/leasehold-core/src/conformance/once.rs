//! `once` (idempotency keys) on a backend's records: the action runs once, later calls get its
//! result, an attempt that died is not rerun blindly, a recovery decides, a stale holder cannot
//! overwrite a newer record.

use super::{key, kind, run_checks, Check, LONG};
use crate::once::{OnceRecord, Recovery};
use crate::{Client, ErrorKind};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

const KEEP: Duration = Duration::from_secs(60);

/// Every check of `once`.
pub fn run_once(new_client: &dyn Fn() -> Client) {
    let checks: &[Check] = &[
        ("once_runs_the_action_once", once_runs_the_action_once),
        (
            "a_died_attempt_is_not_rerun_blindly",
            a_died_attempt_is_not_rerun_blindly,
        ),
        ("recovery_decides", recovery_decides),
        ("a_stale_holder_cannot_record", a_stale_holder_cannot_record),
        (
            "concurrent_callers_share_one_run",
            concurrent_callers_share_one_run,
        ),
    ];
    run_checks(&new_client(), &new_client(), checks);
}

fn no_recover() -> Option<fn(crate::once::Incomplete, &crate::Lease) -> crate::Result<Recovery>> {
    None
}

fn once_runs_the_action_once(a: &Client, b: &Client) {
    let k = key("once");
    let runs = AtomicU32::new(0);
    let action = |_: &crate::Lease| {
        runs.fetch_add(1, Ordering::SeqCst);
        Ok(b"charged:42".to_vec())
    };
    let first = a.once(&k, LONG, LONG, KEEP, action, no_recover()).unwrap();
    let second = b
        .once(
            &k,
            LONG,
            LONG,
            KEEP,
            |_| Ok(b"again".to_vec()),
            no_recover(),
        )
        .unwrap();
    assert_eq!(first, b"charged:42");
    assert_eq!(
        second, b"charged:42",
        "a later call gets the recorded result"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // The once-key's lock is not the key's own lock.
    a.try_acquire(&k, LONG).unwrap().release().unwrap();
}

fn a_died_attempt_is_not_rerun_blindly(a: &Client, b: &Client) {
    let k = key("once-died");
    // An attempt records its start, then its worker dies (the lease is never released).
    let lease = a.once_lock(&k, Duration::from_millis(300), LONG).unwrap();
    assert_eq!(lease.once_record().unwrap(), OnceRecord::None);
    lease.once_started(KEEP).unwrap();
    let fence = lease.fence();
    lease.forget();
    let err = b
        .once(
            &k,
            LONG,
            LONG,
            KEEP,
            |_| Ok(b"twice".to_vec()),
            no_recover(),
        )
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::IncompleteAttempt, "{err}");
    assert!(err.message().contains(&fence.to_string()), "{err}");
    // An action that fails leaves its attempt incomplete too.
    let k = key("once-failed");
    let failed = a.once(
        &k,
        LONG,
        LONG,
        KEEP,
        |_| {
            Err(crate::Error::Unavailable(
                "the partner's API timed out".into(),
            ))
        },
        no_recover(),
    );
    assert_eq!(kind(failed), ErrorKind::Unavailable);
    let again = b.once(&k, LONG, LONG, KEEP, |_| Ok(vec![]), no_recover());
    assert_eq!(kind(again), ErrorKind::IncompleteAttempt);
}

fn recovery_decides(a: &Client, b: &Client) {
    for (label, decision, expect) in [
        (
            "done",
            Recovery::Done(b"it happened".to_vec()),
            &b"it happened"[..],
        ),
        ("rerun", Recovery::Rerun, &b"ran again"[..]),
    ] {
        let k = key(&format!("once-recover-{label}"));
        let lease = a.once_lock(&k, LONG, LONG).unwrap();
        lease.once_started(KEEP).unwrap();
        let fence = lease.fence();
        drop(lease); // released: the record stays "started"
        let seen = AtomicU32::new(0);
        let result = b
            .once(
                &k,
                LONG,
                LONG,
                KEEP,
                |_| Ok(b"ran again".to_vec()),
                Some(|attempt: crate::once::Incomplete, _: &crate::Lease| {
                    assert_eq!(attempt.fence, fence);
                    seen.fetch_add(1, Ordering::SeqCst);
                    Ok(decision)
                }),
            )
            .unwrap();
        assert_eq!(result, expect);
        assert_eq!(seen.load(Ordering::SeqCst), 1);
        // Recorded: the next call returns it, recover or not.
        let later = a
            .once(
                &k,
                LONG,
                LONG,
                KEEP,
                |_| Ok(b"never".to_vec()),
                no_recover(),
            )
            .unwrap();
        assert_eq!(later, expect);
    }
}

fn a_stale_holder_cannot_record(a: &Client, b: &Client) {
    let k = key("once-stale");
    let stale = a.once_lock(&k, Duration::from_millis(300), LONG).unwrap();
    stale.once_started(KEEP).unwrap();
    super::sleep_past_expiry(Duration::from_millis(400));
    // The next holder finds the attempt incomplete, checks, and records the truth.
    let newer = b.once_lock(&k, LONG, LONG).unwrap();
    assert!(matches!(
        newer.once_record().unwrap(),
        OnceRecord::Started { .. }
    ));
    newer.once_done(b"checked: done", KEEP).unwrap();
    newer.release().unwrap();
    // The stalled holder wakes up: its lease ran out, and its record is refused.
    assert_eq!(kind(stale.once_done(b"late", KEEP)), ErrorKind::Lost);
    let result = a
        .once(
            &k,
            LONG,
            LONG,
            KEEP,
            |_| Ok(b"never".to_vec()),
            no_recover(),
        )
        .unwrap();
    assert_eq!(result, b"checked: done");
}

fn concurrent_callers_share_one_run(a: &Client, b: &Client) {
    let k = Arc::new(key("once-race"));
    let runs = Arc::new(AtomicU32::new(0));
    let threads: Vec<_> = (0..6)
        .map(|i| {
            let (client, k, runs) = (
                if i % 2 == 0 { a } else { b }.clone(),
                k.clone(),
                runs.clone(),
            );
            std::thread::spawn(move || {
                client
                    .once(
                        &*k,
                        LONG,
                        Duration::from_secs(20),
                        KEEP,
                        |_| {
                            runs.fetch_add(1, Ordering::SeqCst);
                            std::thread::sleep(Duration::from_millis(50));
                            Ok(format!("run by {i}").into_bytes())
                        },
                        no_recover(),
                    )
                    .unwrap()
            })
        })
        .collect();
    let results: Vec<Vec<u8>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(results.windows(2).all(|w| w[0] == w[1]), "{results:?}");
}
