//! Restore and force-release (`docs/semantics.md` §6): picking up a lease by key and token in another
//! process, and the operator's escape hatch.

use super::{key, kind, run_checks, Check, LONG};
use crate::{Client, ErrorKind};
use std::time::Duration;

/// Restore, for backends that can (all but PostgreSQL advisory).
pub fn run_restore(new_client: &dyn Fn() -> Client) {
    let checks: &[Check] = &[
        (
            "restore_picks_up_a_held_lease",
            restore_picks_up_a_held_lease,
        ),
        (
            "restore_of_a_gone_lease_is_lost",
            restore_of_a_gone_lease_is_lost,
        ),
        ("restore_checks_its_token", restore_checks_its_token),
    ];
    run_checks(&new_client(), &new_client(), checks);
}

/// Force-release, on every backend.
pub fn run_force_release(new_client: &dyn Fn() -> Client) {
    let checks: &[Check] = &[(
        "force_release_frees_any_holder",
        force_release_frees_any_holder,
    )];
    run_checks(&new_client(), &new_client(), checks);
}

/// For a backend that cannot restore: a clear `InvalidArgument`, and nothing disturbed.
pub fn run_restore_refused(new_client: &dyn Fn() -> Client, hint: &str) {
    let (a, b) = (new_client(), new_client());
    eprintln!(
        "conformance[{}]: restore_is_refused_clearly",
        a.backend_name()
    );
    let k = key("restore-refused");
    let lease = a.try_acquire(&k, LONG).unwrap();
    let err = b.restore(&k, lease.token().as_str()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(err.to_string().contains(hint), "{err}");
    assert!(a.inspect(&k).unwrap().held, "the holder keeps the key");
    lease.release().unwrap();
}

fn restore_picks_up_a_held_lease(a: &Client, b: &Client) {
    let k = key("restore");
    let original = a.try_acquire(&k, Duration::from_secs(20)).unwrap();
    let mut restored = b
        .restore(&k, original.token().as_str())
        .expect("the token holds the key");
    assert_eq!(restored.token(), original.token());
    assert_eq!(restored.fence(), original.fence());
    let left = restored.remaining();
    assert!(
        left > Duration::from_secs(10) && left <= Duration::from_secs(20),
        "remaining {left:?}"
    );
    assert_eq!(b.stats().restored, 1);
    restored.extend(LONG).expect("a restored lease extends");
    assert!(restored.remaining() > Duration::from_secs(20));
    restored.release().expect("a restored lease releases");
    assert!(
        !a.inspect(&k).unwrap().held,
        "released through the restored handle"
    );
    assert_eq!(
        kind(original.release()),
        ErrorKind::Lost,
        "the other handle now finds it gone"
    );
}

fn restore_of_a_gone_lease_is_lost(a: &Client, b: &Client) {
    let k = key("restore-gone");
    let short = a.try_acquire(&k, Duration::from_millis(100)).unwrap();
    let token = short.token();
    super::sleep_past_expiry(Duration::from_millis(350));
    assert_eq!(
        kind(b.restore(&k, token.as_str())),
        ErrorKind::Lost,
        "expired"
    );
    let holder = a.try_acquire(&k, LONG).unwrap();
    assert_eq!(
        kind(b.restore(&k, token.as_str())),
        ErrorKind::Lost,
        "taken over"
    );
    let holder_token = holder.token();
    holder.release().unwrap();
    assert_eq!(
        kind(b.restore(&k, holder_token.as_str())),
        ErrorKind::Lost,
        "released"
    );
    assert_eq!(
        kind(b.restore(key("never-held"), token.as_str())),
        ErrorKind::Lost
    );
    drop(short);
}

fn restore_checks_its_token(a: &Client, b: &Client) {
    let k = key("restore-token");
    let lease = a.try_acquire(&k, LONG).unwrap();
    let token = lease.token();
    for bad in [
        "",
        "xyz",
        &token.as_str()[..31],
        &token.as_str().to_uppercase(),
        &format!("{}0", token.as_str()),
    ] {
        if bad == token.as_str() {
            continue; // all digits: uppercase changes nothing
        }
        assert_eq!(
            kind(b.restore(&k, bad)),
            ErrorKind::InvalidArgument,
            "{bad:?}"
        );
    }
    let other = key("restore-token-other");
    assert_eq!(
        kind(b.restore(&other, token.as_str())),
        ErrorKind::Lost,
        "a token of another key"
    );
    assert!(
        a.inspect(&k).unwrap().held,
        "bad restores leave the lease alone"
    );
    lease.release().expect("the original still owns it");
}

fn force_release_frees_any_holder(a: &Client, b: &Client) {
    let k = key("force");
    let mut stuck = a.try_acquire(&k, LONG).unwrap();
    assert!(
        b.force_release(&k).expect("force_release"),
        "a holder was removed"
    );
    assert_eq!(b.stats().force_released, 1);
    let next = b.try_acquire(&k, LONG).expect("the key is free again");
    assert!(next.fence() > stuck.fence(), "fences keep rising");
    assert_eq!(kind(stuck.extend(LONG)), ErrorKind::Lost);
    assert_eq!(kind(stuck.release_in_place()), ErrorKind::Lost);
    assert!(b.inspect(&k).unwrap().held, "the new holder keeps it");
    next.release().unwrap();
    assert!(!b.force_release(&k).unwrap(), "a free key: nothing removed");
    assert_eq!(kind(b.force_release(b"")), ErrorKind::InvalidArgument);
}
