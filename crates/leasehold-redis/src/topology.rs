//! Which server serves a lease: one server (`redis://`, `redis+unix://`), the master the Sentinels
//! name (`redis+sentinel://`), or the master of the lease's hash slot (`redis+cluster://`).
//!
//! Every operation names its lease's keys and its one [`Deadline`]; [`Topology::run`] sends it to
//! the right [`Node`] and, while the deadline allows, follows what the answer says: `MOVED` (the
//! slot map is stale: that slot goes to the named node, and the whole map is read again), `ASK` (a
//! slot being migrated: this one call goes to the named node after `ASKING`), and an unreachable
//! or demoted node (`READONLY`, `CLUSTERDOWN`, `TRYAGAIN`, refused, timed out: the master is
//! looked up again — `CLUSTER SLOTS`, or the Sentinels — and the call is sent once more after a
//! short pause). Sending again is safe for every script: acquire recognises its own token, release
//! and extend compare it. Every lookup and pause draws on the same deadline, so a call still ends
//! within its bound (connect + I/O, plus the wait for `acquire`) while slots move or a failover
//! runs; a failover longer than that gives `Unavailable`, and the next calls carry on once it is
//! over.
//!
//! Why not redis-rs's `ClusterConnection` or `SentinelClient`: neither can be bounded per call —
//! the cluster connection refreshes its slot map by connecting to every node in turn, each with
//! the full connection timeout, and sleeps between retries on its own schedule — and their
//! connections are not shared through core's fork-aware pool. Here each master is an ordinary
//! [`Node`] (its pools, its bounded connects, scripts loaded on NOSCRIPT on whichever node
//! answers, native waiting on the slot's own node), and a child process after `fork()` makes
//! connections of its own like everywhere else.

use crate::cluster::Cluster;
use crate::keys::RedisKeys;
use crate::node::{Failure, Node, Via};
use crate::sentinel::Sentinel;
use leasehold_core::{Deadline, Result};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug)]
pub(crate) enum Topology {
    Single(Arc<Node>),
    Cluster(Cluster),
    Sentinel(Sentinel),
}

impl Topology {
    /// Fence retention for every node, now and later (see `RedisBackend::with_fence_retention`).
    pub(crate) fn set_fence_retention(&mut self, retention: Duration) {
        match self {
            Topology::Single(node) => {
                if let Some(node) = Arc::get_mut(node) {
                    node.set_fence_retention(retention);
                }
            }
            Topology::Cluster(cluster) => cluster.set_fence_retention(retention),
            Topology::Sentinel(sentinel) => sentinel.set_fence_retention(retention),
        }
    }

    /// Runs `op` on the node serving `keys`, following redirections and failovers while
    /// `deadline` allows (see the module docs).
    pub(crate) fn run<T>(
        &self,
        keys: &RedisKeys,
        deadline: Deadline,
        op: impl FnMut(&Node, Via) -> std::result::Result<T, Failure>,
    ) -> Result<T> {
        self.run_standing(keys, deadline, op, |_| true)
    }

    /// [`Topology::run`] for a call whose answer may say the lease is gone: `stands` tells. Behind
    /// Sentinels, such an answer is believed only once they confirm the node that gave it is the
    /// master (see `sentinel.rs`); a successful call costs nothing more.
    pub(crate) fn run_standing<T>(
        &self,
        keys: &RedisKeys,
        deadline: Deadline,
        mut op: impl FnMut(&Node, Via) -> std::result::Result<T, Failure>,
        stands: impl Fn(&T) -> bool,
    ) -> Result<T> {
        match self {
            Topology::Single(node) => op(node, Via::default()).map_err(Failure::into_error),
            Topology::Cluster(cluster) => cluster.run(keys.slot(), deadline, op),
            Topology::Sentinel(sentinel) => sentinel.run(deadline, op, stands),
        }
    }

    /// Which servers serve the leases now, for `leasehold status` and `Debug`.
    pub(crate) fn describe(&self) -> String {
        let acked = |nodes: &[Arc<Node>]| -> String {
            let Some(first) = nodes.first() else {
                return String::new();
            };
            if first.replicas() == 0 {
                return String::new();
            }
            let last: Vec<String> = nodes
                .iter()
                .map(|n| {
                    n.last_acknowledged()
                        .map_or_else(|| "-".to_owned(), |a| a.to_string())
                })
                .collect();
            format!(
                "; replicas={} (last acknowledged by {})",
                first.replicas(),
                last.join("/")
            )
        };
        match self {
            Topology::Single(node) => {
                format!(
                    "single server {}{}",
                    node.name(),
                    acked(std::slice::from_ref(node))
                )
            }
            Topology::Cluster(cluster) => {
                let masters = cluster.masters();
                let names: Vec<&str> = masters.iter().map(|n| n.name()).collect();
                format!(
                    "cluster of {} masters ({}){}",
                    masters.len(),
                    names.join(", "),
                    acked(&masters)
                )
            }
            Topology::Sentinel(sentinel) => {
                let current = sentinel.current();
                let master = current
                    .as_ref()
                    .map_or_else(|| "not resolved".to_owned(), |n| n.name().to_owned());
                format!(
                    "sentinel service {} (via {} sentinels): master {master}{}",
                    sentinel.service(),
                    sentinel.sentinel_count(),
                    current.map(|n| acked(&[n])).unwrap_or_default()
                )
            }
        }
    }
}
