//! A pooled SQL session that a server restart closed while it sat idle: the rule for running a
//! call again on the next session, shared by the PostgreSQL and MySQL backends.
//!
//! Every idle session of a pool may be stale after a restart, and one fresh session follows them:
//! so one client recovers by itself, without a failed call per stale session. Whatever a dead
//! session held died with it, so another attempt never doubles a lock; a fresh session that fails,
//! or a failure that does not say the session was dead before the call ran (a timeout: the call
//! may have run), ends the attempts.

use crate::deadline::Deadline;
use crate::error::Result;
use std::ops::DerefMut;

/// What [`with_session`] asks of a backend's session.
pub trait StaleSession {
    /// The failure of one call on the session.
    type Failure;

    /// Whether a call ran on the session before: only such a session can be stale.
    fn reused(&self) -> bool;

    /// A call just ran on the session (a backend whose calls say so themselves does nothing).
    fn called(&mut self) {}

    /// Whether `failure` says the session was dead before the call ran, so that running the call
    /// again on another session cannot double anything.
    fn was_stale(&self, failure: &Self::Failure) -> bool;

    /// The session is left for the next one: it must not go back to the pool's idle list.
    fn set_aside(&mut self) {}
}

/// Runs `f` on a session from `get` (a checkout by `deadline`), and again on the next one while a
/// reused session turns out stale, at most `tries` times in all and never past `deadline`. Returns
/// the session with the outcome of the last try.
pub fn with_session<C, S, T, E>(
    tries: usize,
    deadline: Deadline,
    mut get: impl FnMut() -> Result<C>,
    mut f: impl FnMut(&mut S) -> std::result::Result<T, E>,
) -> Result<(C, std::result::Result<T, E>)>
where
    C: DerefMut<Target = S>,
    S: StaleSession<Failure = E>,
{
    let mut left = tries;
    loop {
        let mut conn = get()?;
        let reused = conn.reused();
        let outcome = f(&mut conn);
        conn.called();
        left = left.saturating_sub(1);
        match outcome {
            Err(e) if reused && left > 0 && conn.was_stale(&e) && !deadline.is_past() => {
                conn.set_aside();
            }
            other => return Ok((conn, other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A session that a restart closed (`dead`) or not.
    struct Fake {
        reused: bool,
        dead: bool,
        set_aside: bool,
    }

    impl StaleSession for Fake {
        type Failure = &'static str;
        fn reused(&self) -> bool {
            self.reused
        }
        fn called(&mut self) {
            self.reused = true;
        }
        fn was_stale(&self, failure: &&'static str) -> bool {
            *failure == "closed"
        }
        fn set_aside(&mut self) {
            self.set_aside = true;
        }
    }

    fn run(
        sessions: Vec<Fake>,
        tries: usize,
    ) -> (usize, Box<Fake>, std::result::Result<(), &'static str>) {
        let deadline = Deadline::after(Duration::from_secs(5));
        let mut pool = sessions.into_iter();
        let mut taken = 0;
        let (conn, outcome) = with_session(
            tries,
            deadline,
            || {
                taken += 1;
                Ok(Box::new(pool.next().expect("a session")))
            },
            |s: &mut Fake| if s.dead { Err("closed") } else { Ok(()) },
        )
        .unwrap();
        (taken, conn, outcome)
    }

    #[test]
    fn stale_reused_sessions_are_passed_over_until_a_live_one() {
        let stale = || Fake {
            reused: true,
            dead: true,
            set_aside: false,
        };
        let live = Fake {
            reused: false,
            dead: false,
            set_aside: false,
        };
        let (taken, conn, outcome) = run(vec![stale(), stale(), live], 3);
        assert_eq!((taken, outcome), (3, Ok(())));
        assert!(conn.reused && !conn.set_aside);
    }

    #[test]
    fn a_fresh_session_failing_or_the_last_try_ends_the_attempts() {
        let fresh_dead = Fake {
            reused: false,
            dead: true,
            set_aside: false,
        };
        let (taken, conn, outcome) = run(vec![fresh_dead], 3);
        assert_eq!((taken, outcome), (1, Err("closed")));
        assert!(!conn.set_aside);
        let stale = || Fake {
            reused: true,
            dead: true,
            set_aside: false,
        };
        let (taken, conn, outcome) = run(vec![stale(), stale()], 2);
        assert_eq!((taken, outcome), (2, Err("closed")));
        assert!(!conn.set_aside, "the last one is handed back as it is");
    }
}
