//! Redlock's hot path: the calling thread writes one request to each of several nodes before it
//! reads any answer, so N nodes cost about one round trip of the slowest, with no thread handoff.
//!
//! Measured on the 2-core test machine, handing each node's call to a parked worker thread cost
//! most of the gap between a Redlock(5) cycle and five `SET NX PX` + `DEL` written at once from
//! one thread (see `tests/redlock_bench.rs`): every worker is a wake-up and a context switch on
//! cores the five servers share. Workers stay for what must not hold the caller: a node that
//! failed lately, or one with calls about the key still queued (per-key order, see `fanout.rs`).
//!
//! Only the common case runs here: a reply that is not the script's answer (NOSCRIPT after a
//! restart, a connection found closed, any error but a timeout) has the call made again the
//! ordinary way on the node's worker (`Node::call`, with its reload, reconnect and retry rules),
//! which every script tolerates (an acquire recognises its own token; release and extend compare
//! it). A timeout is not sent again: the call's time is spent.

use crate::connection::Manager;
use crate::node::Node;
use leasehold_core::pool::PooledConnection;
use leasehold_core::{Deadline, Result};
use redis::{ErrorKind, RedisError, ServerErrorKind, Value};
use std::time::{Duration, Instant};

/// One pipelined call: the node's index, the node, an idle connection of its pool (see
/// `Node::pipelined_connection`: a node that would need a connect goes to a worker instead, so
/// one refusing or silent node's connect never holds the wave), the packed request.
pub(crate) struct Request<'a> {
    pub(crate) index: usize,
    pub(crate) node: &'a Node,
    pub(crate) conn: PooledConnection<Manager>,
    pub(crate) packed: Vec<u8>,
}

enum Step {
    Sent(PooledConnection<Manager>),
    /// Sent again the ordinary way once the others are read.
    Again,
    Failed(leasehold_core::Error),
}

/// What became of one pipelined call.
pub(crate) enum Outcome<T> {
    Answered(Result<T>),
    /// To be made again the ordinary way, on the node's worker: the reply was not the script's
    /// answer but a resend may be (NOSCRIPT, a closed connection). Not on the calling thread,
    /// where a node that now refuses connections would hold the others for a connect timeout.
    Again,
}

/// Runs `requests` as one pipelined wave due by `deadline`; `parse` reads a node's reply.
/// Outcomes come in the order of `requests`.
pub(crate) fn run<T>(
    requests: Vec<Request<'_>>,
    what: &str,
    deadline: Deadline,
    parse: impl Fn(usize, &Node, Value) -> Result<T>,
) -> Vec<(usize, Outcome<T>)> {
    let mut calls = Vec::with_capacity(requests.len());
    for r in requests {
        let Request {
            index,
            node,
            mut conn,
            packed,
        } = r;
        let step = match conn.inner.send(&packed) {
            Ok(()) => Step::Sent(conn),
            Err(e) => settle_failure(node, &mut conn, &e, what, deadline),
        };
        calls.push((index, node, step));
    }
    let sent = Instant::now();
    calls
        .into_iter()
        .map(|(index, node, step)| {
            let step = match step {
                Step::Sent(mut conn) => match rebound(node, &mut conn, sent, deadline)
                    .and_then(|()| conn.inner.recv())
                {
                    Ok(Value::ServerError(e)) => {
                        settle_failure(node, &mut conn, &e.into(), what, deadline)
                    }
                    Ok(value) => return (index, Outcome::Answered(parse(index, node, value))),
                    Err(e) => settle_failure(node, &mut conn, &e, what, deadline),
                },
                other => other,
            };
            let outcome = match step {
                Step::Failed(e) => Outcome::Answered(Err(e)),
                _ => Outcome::Again,
            };
            (index, outcome)
        })
        .collect()
}

/// Each socket's timeout was set for the whole wave when its request was sent; once an earlier
/// read has taken a while (a node that does not answer), the next read gets only what is left, so
/// several silent nodes cannot add their timeouts up past the deadline.
fn rebound(
    node: &Node,
    conn: &mut PooledConnection<Manager>,
    sent: Instant,
    deadline: Deadline,
) -> redis::RedisResult<()> {
    if sent.elapsed() < Duration::from_millis(1) {
        return Ok(());
    }
    conn.bound_io(node.settings().io_timeout, deadline)
}

/// A failed send or read: recorded on the connection and the node; sent again unless the call's
/// time is spent or the server said why in a way a resend cannot change.
fn settle_failure(
    node: &Node,
    conn: &mut PooledConnection<Manager>,
    err: &RedisError,
    what: &str,
    deadline: Deadline,
) -> Step {
    let error = node.pipelined_failure(conn, err, what);
    let noscript = err.kind() == ErrorKind::Server(ServerErrorKind::NoScript);
    if noscript || !(err.is_timeout() || deadline.is_past()) {
        Step::Again
    } else {
        Step::Failed(error)
    }
}
