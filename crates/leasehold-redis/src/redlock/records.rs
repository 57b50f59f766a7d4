//! Records ([`leasehold_core::records`]) on Redlock: the single-node record (the hash and script of
//! `records.rs`) on every node, read and written by quorum.
//!
//! A put runs the script on every node at once (the fan-out, as a release does) and is written
//! once a quorum of nodes wrote it; the nodes that had not answered by then still get it (their
//! calls are not dropped when the caller stops listening, until the calls' deadline). Fewer than a
//! quorum written: `Ok(false)` if some node refused it for a higher fence (a newer holder wrote
//! there), `Unavailable` otherwise (too few nodes answered to tell).
//!
//! A get reads every node and, once a quorum answered, returns the newest version among their
//! answers: the highest fence, and among equal fences the latest stamp (the writer's clock; equal
//! fences are one holder writing again). A record a quorum wrote is on at least one node of any
//! quorum, so a get after a successful put sees it or a newer one. Fewer than a quorum answering
//! is `Unavailable`. Each node expires its copy `keep` after the write reached it.

use super::fanout::Timing;
use super::round::listen_until;
use super::tally::Tally;
use super::RedlockBackend;
use crate::node::{Node, Via};
use crate::records::{get_call, get_reply, newer, put_call, put_reply, record_name, stamp};
use leasehold_core::records::{Record, RecordStore};
use leasehold_core::{Key, Result};
use redis::Value;
use std::sync::Arc;
use std::time::Duration;

impl RecordStore for RedlockBackend {
    fn get(&self, key: &Key) -> Result<Option<Record>> {
        let name = Arc::new(record_name(&self.prefix, key));
        let calls = self.call_deadline();
        let mut replies = {
            let name = name.clone();
            self.fanout
                .call_all(&name.clone(), self.answer_timing(calls), move |_, node| {
                    let call = get_call(&name);
                    let reply = node.call("record get", calls, |c| {
                        call.send::<Value>(c, Via::default(), None)
                            .map(|(reply, _)| reply)
                    })?;
                    get_reply(node.name(), reply)
                })
        };
        let n = self.fanout.len();
        let mut tally = Tally::new(n, self.quorum);
        let mut best = None;
        while tally.yes < self.quorum && !tally.down() {
            let Some((_, answer)) = tally.hear_all(&mut replies, "record get") else {
                break;
            };
            match answer {
                Ok(found) => {
                    tally.yes += 1;
                    best = newer(best, found);
                }
                Err(e) => tally.failed.push(e),
            }
        }
        if tally.yes < self.quorum {
            return Err(tally.unavailable("record get"));
        }
        Ok(best.map(|(record, _)| record))
    }

    fn put(&self, key: &Key, fence: u64, value: &[u8], keep: Duration) -> Result<bool> {
        let name = Arc::new(record_name(&self.prefix, key));
        let value = Arc::new(value.to_vec());
        let stamp = stamp();
        let calls = self.call_deadline();
        // Every node gets the write while the calls' deadline allows, whether or not the caller
        // still listens: a record on more nodes outlives more of them.
        let timing = Timing {
            listen_until: listen_until(calls),
            inline_until: calls.instant(),
            run_until: calls.instant(),
            only_while_heard: false,
        };
        let mut replies = {
            let name = name.clone();
            self.fanout
                .call_all(&name.clone(), timing, move |_, node: &Node| {
                    let call = put_call(&name, fence, &value, keep, stamp);
                    let reply = node.call("record put", calls, |c| {
                        call.send::<Value>(c, Via::default(), None)
                            .map(|(reply, _)| reply)
                    })?;
                    put_reply(node.name(), reply)
                })
        };
        let n = self.fanout.len();
        let mut tally = Tally::new(n, self.quorum);
        while let Some((_, answer)) = tally.hear_all(&mut replies, "record put") {
            match answer {
                Ok(true) => tally.yes += 1,
                Ok(false) => tally.no += 1,
                Err(e) => tally.failed.push(e),
            }
            // Decided: written on a quorum, or refused somewhere with no quorum left to write.
            if tally.yes >= self.quorum || (tally.no > 0 && tally.decided()) {
                break;
            }
        }
        if tally.yes >= self.quorum {
            return Ok(true);
        }
        if tally.no > 0 {
            return Ok(false);
        }
        Err(tally.unavailable("record put"))
    }
}
