//! Table mode's waiting: FIFO on the key's queue lock (see the module docs of `table`).

use super::*;

/// What a newcomer's attempt ([`QueueWaiter::first`]) found.
enum First {
    Granted(RawLease),
    /// Not granted; `head`: nobody was queued, so the session took the queue lock.
    Refused {
        head: bool,
    },
    /// A permit refused for live holders of this other size; nothing is kept (the queue lock
    /// taken to tell is given back in the same round trip).
    OtherSize(Error),
}

/// A waiting acquire in table mode, of any kind (see the module docs): first an attempt that takes
/// the key only if nobody is queued, then FIFO on the queue lock, the first waiter LISTENing and
/// waking at a release's NOTIFY, when the holder it waits for expires, or at its heartbeat.
pub(crate) struct QueueWaiter<'a> {
    table: &'a Table,
    ask: Ask<'a>,
    kind: LeaseKind,
    key_hex: String,
    line: Line<'a>,
}

impl<'a> QueueWaiter<'a> {
    pub fn new(table: &'a Table, ask: Ask<'a>, kind: LeaseKind, end: Instant) -> QueueWaiter<'a> {
        let (queue, channel) = match kind {
            LeaseKind::Permit(_) => semaphore_internal("queue", &table.name, &ask.prefixed),
            _ => wait_queue(&table.name, &ask.prefixed),
        };
        let key_hex = hex(&ask.prefixed);
        let line = Line::new(ask.pools, queue, channel, "wait for the key", end);
        QueueWaiter {
            table,
            ask,
            kind,
            key_hex,
            line,
        }
    }

    /// One shared or permit attempt, gated by the SQL boolean `gate`: the last statement gives
    /// the fence (NULL when not granted) and the holder's time left in ms.
    fn gated(&self, token: Token, gate: &str) -> String {
        let ask = &self.ask;
        match self.kind {
            LeaseKind::Permit(n) => {
                self.table
                    .permit_attempt(&ask.prefixed, n, token, ask.ttl, gate)
            }
            _ => self
                .table
                .shared_attempt(&self.key_hex, token, ask.ttl, gate),
        }
    }

    /// A newcomer's attempt, in one round trip: take the key only if nobody is queued for it (so a
    /// newcomer never cuts in front of waiters), and say whether we are now first in the queue.
    /// With `keep`, the queue lock taken to tell is kept when the key is not granted: the session
    /// is the queue's head from then on, and gets a queued session's short idle timeout
    /// ([`hold_place`]) in the same statement, so it is never idle in the queue without it.
    /// Without, the lock is the transaction's.
    fn first(&self, keep: bool, call: Deadline) -> Result<(Conn, First)> {
        let (ask, queue) = (&self.ask, self.line.queue);
        let table = self.table;
        let try_lock = if keep {
            "pg_try_advisory_lock"
        } else {
            "pg_try_advisory_xact_lock"
        };
        let token = Token::generate()?;
        let t = token.as_str();
        let sql = match self.kind {
            LeaseKind::Exclusive => {
                let kept = if keep {
                    format!(
                        ", CASE WHEN a.ok THEN pg_advisory_unlock({queue}) END, \
                         CASE WHEN h AND a.ok IS NOT TRUE THEN {} END",
                        hold_place()
                    )
                } else {
                    String::new()
                };
                format!(
                    "WITH head AS MATERIALIZED (SELECT {try_lock}({queue}) AS h), \
                          acquired AS ({}) \
                     SELECT h, a.ok{kept} \
                     FROM head, (SELECT (SELECT ok FROM acquired) AS ok) a; {}",
                    table.insert_when(&self.key_hex, token, ask.ttl, "FROM head WHERE h"),
                    table.draw_fence(&self.key_hex, token)
                )
            }
            _ => {
                let kept = if keep {
                    format!(
                        ", CASE WHEN {HEAD} AND ({GRANTED} = '{t}' OR {SIZE_REFUSED}) \
                             THEN pg_advisory_unlock({queue}) END, \
                         CASE WHEN {HEAD} AND {GRANTED} IS DISTINCT FROM '{t}' AND NOT {SIZE_REFUSED} \
                             THEN {} END",
                        hold_place()
                    )
                } else {
                    String::new()
                };
                format!(
                    "SELECT set_config('leasehold.head', {try_lock}({queue})::text, true); {}; \
                     SELECT current_setting('leasehold.head', true){kept}",
                    self.gated(token, HEAD)
                )
            }
        };
        let (conn, sent, statements) = acquiring(ask.pools, call, "acquire", |s| {
            s.statements(&table.bounded(&sql), call)
        })?;
        let n = statements.len();
        let (fence, head) = match self.kind {
            LeaseKind::Exclusive => (
                number::<i64>(fence_of(&statements))?,
                statements
                    .get(n.wrapping_sub(2))
                    .and_then(|rows| last_value(rows, 0))
                    == Some("t"),
            ),
            _ => (
                statements
                    .get(n.wrapping_sub(2))
                    .map(|rows| number::<i64>(last_value(rows, 0)))
                    .transpose()?
                    .flatten(),
                statements.last().and_then(|rows| last_value(rows, 0)) == Some("true"),
            ),
        };
        let refusal = size_refusal(ask.key, statements.get(n.wrapping_sub(2)), self.kind)?;
        let first = match (fence, refusal) {
            (_, Some(refusal)) => First::OtherSize(refusal),
            (Some(fence), None) => {
                First::Granted(new_lease(ask.key, token, fence, ask.ttl, sent, self.kind))
            }
            (None, None) => First::Refused { head },
        };
        Ok((conn, first))
    }

    /// An attempt of the queue's head; refused in the final one, it leaves the queue.
    fn at_head(&mut self, last: bool, call: Deadline) -> Result<Turn> {
        let (ask, table, kind) = (&self.ask, self.table, self.kind);
        let (queue, channel) = (self.line.queue, self.line.channel.clone());
        let key_hex = &self.key_hex;
        let token = Token::generate()?;
        // The holder's row as the statement's snapshot saw it says when to wake up at the latest,
        // in case the holder died and nobody will notify. On success the exclusive attempt also
        // leaves the queue, so the next waiter moves up at once, and gives the session its idle
        // timeout back: all that is left of the line is the LISTEN, ended by the session's next
        // statement (`Line::leave_granted`), so the lease is out one round trip sooner.
        let sql = match kind {
            LeaseKind::Exclusive => format!(
                "WITH acquired AS ({}) \
                 SELECT a.ok, \
                        (SELECT ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint \
                         FROM {} WHERE key = decode('{key_hex}', 'hex')), \
                        CASE WHEN a.ok THEN pg_advisory_unlock({queue}) END, \
                        CASE WHEN a.ok THEN {} END \
                 FROM (SELECT (SELECT ok FROM acquired) AS ok) a; {}",
                table.insert(key_hex, token, ask.ttl),
                table.quoted,
                restore_idle_timeout(),
                table.draw_fence(key_hex, token)
            ),
            _ => self.gated(token, "true"),
        };
        let sql = table.bounded(&sql);
        let Some(conn) = self.line.attempting() else {
            return Ok(Turn::NotYet { holder_left: None });
        };
        let sent = Instant::now();
        let statements = conn
            .statements(&sql, call)
            .map_err(|e| ask.pools.failed("acquire", &e))?;
        let (fence, rows) = match kind {
            LeaseKind::Exclusive => {
                let fence = number::<i64>(fence_of(&statements))?;
                (
                    fence,
                    statements.into_iter().rev().nth(1).unwrap_or_default(),
                )
            }
            _ => {
                let rows = statements.into_iter().last().unwrap_or_default();
                (number::<i64>(last_value(&rows, 0))?, rows)
            }
        };
        let refusal = size_refusal(ask.key, Some(&rows), kind)?;
        // The session goes back to the pool with the idle timeout it had. If leaving fails, the
        // session is closed (poisoned), which also ends its LISTEN and frees the queue; a lease
        // got here is ours either way.
        let unlock = format!("SELECT pg_advisory_unlock({queue}); ");
        let leave = |unlock: &str| {
            table.bounded(&format!(
                "UNLISTEN \"{channel}\"; {unlock}RESET idle_session_timeout"
            ))
        };
        if let Some(refusal) = refusal {
            drop(self.line.leave(&leave(&unlock), call));
            return Err(refusal);
        }
        match fence {
            Some(fence) => {
                let lease = new_lease(ask.key, token, fence, ask.ttl, sent, kind);
                if kind == LeaseKind::Exclusive {
                    self.line.leave_granted();
                } else {
                    drop(self.line.leave(&leave(&unlock), call));
                }
                Ok(Turn::Granted(lease))
            }
            None if last => {
                drop(self.line.leave(&leave(&unlock), call));
                Ok(Turn::NotYet { holder_left: None })
            }
            // Reading the holder's time left may fail; the failure counts only if the wait goes
            // on (a wait that has run out is refused whatever the answer said).
            None => Ok(Turn::NotYet {
                holder_left: Some(holder_left(number::<i64>(last_value(&rows, 1))?)),
            }),
        }
    }
}

impl Waiter for QueueWaiter<'_> {
    fn attempt(&mut self, last: bool, block_until: Instant) -> Result<Turn> {
        let call = self.line.call();
        if !self.line.is_head() {
            // The final attempt of a waiter not in the queue (its entry timed out, or the wait was
            // over at once) only looks, and keeps nothing.
            let (conn, head) = match self.first(!last, call)? {
                (_, First::Granted(lease)) => return Ok(Turn::Granted(lease)),
                (_, First::OtherSize(refusal)) => return Err(refusal),
                (conn, First::Refused { head }) => (conn, head),
            };
            if last {
                return Ok(Turn::NotYet { holder_left: None });
            }
            let enter = join_queue(
                head.then_some(self.table.bound.as_str()),
                self.line.queue,
                &self.line.channel,
                block_until,
                self.ask.pools.io_timeout,
            );
            if !self.line.enter(conn, &enter, call)? {
                // Timed out in the queue; the statement rolled back, the session is clean.
                return Ok(Turn::NotYet { holder_left: None });
            }
        }
        self.at_head(last, call)
    }

    fn block(&mut self, wake: Wake) -> Result<Woken> {
        self.line.block(wake)
    }

    fn heartbeat(&self) -> Option<Duration> {
        self.line.heartbeat()
    }
}
