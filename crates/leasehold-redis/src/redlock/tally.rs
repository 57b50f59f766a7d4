//! Counting one fan-out's answers against the quorum, and remembering the nodes whose give-back of
//! an acquire's token failed.

use super::fanout::Replies;
use leasehold_core::{Error, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The nodes where a give-back of this acquire's token failed or timed out. Rounds of one acquire
/// share a token, and a give-back held up in the network can reach its node after a later round's
/// grant there (on a new connection) and delete it: such a node's later grants are never counted.
/// Set by the nodes' workers, which run a node's calls about one key in order, so the mark is in
/// place before that node answers the next round.
#[derive(Clone)]
pub(super) struct Taint(Arc<Vec<AtomicBool>>);

impl Taint {
    pub(super) fn new(nodes: usize) -> Taint {
        Taint(Arc::new(
            (0..nodes).map(|_| AtomicBool::new(false)).collect(),
        ))
    }

    pub(super) fn mark(&self, node: usize) {
        if let Some(t) = self.0.get(node) {
            t.store(true, Ordering::Release);
        }
    }

    pub(super) fn is(&self, node: usize) -> bool {
        self.0.get(node).is_some_and(|t| t.load(Ordering::Acquire))
    }
}

/// Tallies one fan-out's answers against the quorum.
pub(super) struct Tally {
    nodes: usize,
    quorum: usize,
    pub(super) yes: usize,
    pub(super) no: usize,
    pub(super) failed: Vec<Error>,
    /// Which nodes answered so far.
    answered: Vec<bool>,
}

impl Tally {
    pub(super) fn new(nodes: usize, quorum: usize) -> Tally {
        Tally {
            nodes,
            quorum,
            yes: 0,
            no: 0,
            failed: Vec::new(),
            answered: vec![false; nodes],
        }
    }

    /// The next answer while the outcome is open, its node marked as answered; `None` once it is
    /// decided (nodes not heard by then did not fail: we stopped listening), or once the replies
    /// end, when the nodes still silent count as failed (`what` names the call).
    pub(super) fn hear<T>(
        &mut self,
        replies: &mut Replies<T>,
        what: &str,
    ) -> Option<(usize, Result<T>)> {
        if self.decided() {
            return None;
        }
        self.hear_all(replies, what)
    }

    /// [`Tally::hear`] for calls whose every answer counts: until each node answered or the
    /// listening time ran out.
    pub(super) fn hear_all<T>(
        &mut self,
        replies: &mut Replies<T>,
        what: &str,
    ) -> Option<(usize, Result<T>)> {
        let Some((i, r)) = replies.next() else {
            self.silent(what);
            return None;
        };
        if let Some(a) = self.answered.get_mut(i) {
            *a = true;
        }
        Some((i, r))
    }

    /// Whether node `i` answered.
    pub(super) fn answered(&self, i: usize) -> bool {
        self.answered.get(i).copied().unwrap_or(false)
    }

    pub(super) fn decided(&self) -> bool {
        self.yes >= self.quorum || self.no + self.failed.len() > self.nodes - self.quorum
    }

    /// Whether failures alone rule a quorum out.
    pub(super) fn down(&self) -> bool {
        self.failed.len() > self.nodes - self.quorum
    }

    /// Counts nodes that never answered as failed.
    fn silent(&mut self, what: &str) {
        let silent = self.answered.iter().filter(|a| !**a).count();
        for _ in 0..silent {
            self.failed.push(Error::Unavailable(format!(
                "a node gave no {what} answer within the timeouts"
            )));
        }
    }

    pub(super) fn unavailable(&self, what: &str) -> Error {
        let answered = self.yes + self.no;
        let mut reasons: Vec<String> = self.failed.iter().map(|e| e.message().to_owned()).collect();
        reasons.dedup();
        Error::Unavailable(format!(
            "redlock {what}: {answered} of {} nodes answered, a quorum is {}: {}",
            self.nodes,
            self.quorum,
            reasons.join("; ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tally_tells_contention_from_an_outage() {
        let mut t = Tally::new(5, 3);
        t.no = 2;
        t.failed.push(Error::Unavailable("x".into()));
        assert!(t.decided() && !t.down());
        let mut t = Tally::new(5, 3);
        t.failed = vec![Error::Unavailable("x".into()); 3];
        assert!(t.decided() && t.down());
        let mut t = Tally::new(3, 2);
        t.yes = 2;
        assert!(t.decided() && !t.down());
    }
}
