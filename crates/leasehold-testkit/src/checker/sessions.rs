//! Sessions ended by someone else: an administrator's kill of every client session
//! ([`crate::history::Snapshot::session_ends`], recorded only for backends whose leases live in a
//! session: PostgreSQL advisory, MySQL named). Such a lease ends with its session, at some moment
//! while the kill runs, and another client may be granted the key right after.
//!
//! A lease may have been ended by a kill when its acquire began before the kill completed and no
//! call on it begun after the kill completed was answered (an answered call proves its session
//! outlived the kill). Such a lease is valid until the kill's invocation at most. What its holder
//! believes: a belief read before the kill is relied on until the kill's invocation at most (the
//! holder must look again before relying on it longer, and its next read shows the end); one read
//! after the kill began is judged at the moment it was read, when the holder must not believe
//! while another client holds the key: the session's end reaches the holder before another client
//! can be granted the key, which takes that client a round trip after the end.

use crate::history::{Op, OpId, OpKind, Outcome};
use std::time::Duration;

/// How long a belief read after its lease's session may have ended is relied on: only at the
/// moment it was read.
pub(crate) const POINT: Duration = Duration::from_micros(1);

/// From when (the earliest invocation of a kill that may have ended its session) the lease of the
/// acquire `a`, whose calls are `related`, may be over; `None` if no kill may have ended it.
pub(crate) fn ended_from(
    ops: &[Op],
    a: OpId,
    related: &[OpId],
    ends: &[(Duration, Duration)],
) -> Option<Duration> {
    let acquired = ops[a].invoke;
    let answered_after = |complete: Duration| {
        related.iter().any(|&i| {
            let op = &ops[i];
            matches!(
                op.kind,
                OpKind::Release | OpKind::Extend | OpKind::Promote | OpKind::Demote
            ) && op.outcome == Outcome::Ok
                && op.invoke >= complete
        })
    };
    ends.iter()
        .filter(|&&(_, complete)| complete > acquired && !answered_after(complete))
        .map(|&(invoke, _)| invoke)
        .min()
}

/// The end of a belief read at `at` of a lease that may be over from `ended` on (see
/// [`ended_from`]): the kill's invocation for one read before it, the moment itself for one read
/// after.
pub(crate) fn belief_end(ended: Option<Duration>, at: Duration) -> Duration {
    match ended {
        Some(from) if at >= from => at.saturating_add(POINT),
        Some(from) => from,
        None => Duration::MAX,
    }
}
