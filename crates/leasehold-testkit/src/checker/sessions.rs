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
//!
//! The one allowance is the goodbye's travel time that the guarantee leaves out (README,
//! "Guarantees and their limits"): a relay that forwards it late. While the kill ran, the fault
//! proxy held every chunk for [`SessionEnd::goodbye_held`] (a latency fault); a goodbye it read
//! then reached its holder that much after the kill completed at the latest, while another
//! client's traffic after the fault healed was not held. So a belief read before the kill's
//! completion plus that hold counts as one read before the kill. With no hold, none.

use crate::history::{Op, OpId, OpKind, Outcome, SessionEnd};
use std::time::Duration;

/// How long a belief read after its lease's session may have ended is relied on: only at the
/// moment it was read.
pub(crate) const POINT: Duration = Duration::from_micros(1);

/// The kill (the earliest by invocation) that may have ended the lease of the acquire `a`, whose
/// calls are `related`; `None` if no kill may have ended it.
pub(crate) fn ended_by<'a>(
    ops: &[Op],
    a: OpId,
    related: &[OpId],
    ends: &'a [SessionEnd],
) -> Option<&'a SessionEnd> {
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
        .filter(|end| end.complete > acquired && !answered_after(end.complete))
        .min_by_key(|end| end.invoke)
}

/// From when (the invocation of [`ended_by`]'s kill) the lease may be over.
pub(crate) fn ended_from(
    ops: &[Op],
    a: OpId,
    related: &[OpId],
    ends: &[SessionEnd],
) -> Option<Duration> {
    ended_by(ops, a, related, ends).map(|end| end.invoke)
}

/// The end of a belief read at `at` of a lease that the kill `ended` may have ended (see
/// [`ended_by`]): the kill's invocation for one read before it, or before its goodbyes held by a
/// relay could arrive; the moment itself for one read after.
pub(crate) fn belief_end(ended: Option<&SessionEnd>, at: Duration) -> Duration {
    match ended {
        Some(end) if at < end.invoke => end.invoke,
        Some(end) if !end.goodbye_held.is_zero() && at < end.complete + end.goodbye_held => {
            end.invoke
        }
        Some(_) => at.saturating_add(POINT),
        None => Duration::MAX,
    }
}
