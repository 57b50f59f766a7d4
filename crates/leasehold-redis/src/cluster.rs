//! `redis+cluster://`: the master of each lease's hash slot, from `CLUSTER SLOTS`, following `MOVED`
//! and `ASK` (see `topology.rs` for the rules every routed call follows).

use crate::node::{Failure, Hint, Node, Via};
use crate::routing::{join_addr, pause_before_retry, split_addr, NodeTemplate, LOOKUP_EVERY};
use leasehold_core::config::RedisServer;
use leasehold_core::{Deadline, Error, Result};
use redis::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// Slots in a Redis Cluster.
const SLOTS: usize = 16384;

pub(crate) struct Cluster {
    seeds: Vec<RedisServer>,
    template: NodeTemplate,
    state: RwLock<ClusterState>,
    /// When the slot map was last read (successfully or not).
    looked_up: Mutex<Option<Instant>>,
}

struct ClusterState {
    /// The master of each slot (`None`: not covered).
    slots: Vec<Option<Arc<Node>>>,
    /// Every node we made, by `host:port`, kept across map refreshes so their pools live on.
    nodes: HashMap<String, Arc<Node>>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field(
                "seeds",
                &self.seeds.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            )
            .field(
                "masters",
                &self
                    .masters()
                    .iter()
                    .map(|n| n.name().to_owned())
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// Reads the slot map from the first seed that answers, within `deadline`.
    pub(crate) fn connect(
        seeds: Vec<RedisServer>,
        template: NodeTemplate,
        deadline: Deadline,
    ) -> Result<Cluster> {
        let cluster = Cluster {
            seeds,
            template,
            state: RwLock::new(ClusterState {
                slots: vec![None; SLOTS],
                nodes: HashMap::new(),
            }),
            looked_up: Mutex::new(None),
        };
        cluster.refresh(deadline, None, None)?;
        cluster.screen_masters(deadline)?;
        Ok(cluster)
    }

    /// Screens every master of the slot map for eviction (see `eviction.rs`), so a Cluster with
    /// one evicting master is refused at connect; masters found later are screened on first use.
    /// A master that does not answer now is not held against the connect.
    fn screen_masters(&self, deadline: Deadline) -> Result<()> {
        for node in self.masters() {
            if deadline.is_past() {
                break;
            }
            let ask = deadline.min(Deadline::after(node.settings().io_timeout));
            match node.call_routed("connect", ask, |_| Ok(())) {
                Err(f) if f.error.is_refused_deployment() => return Err(f.into_error()),
                _ => {}
            }
        }
        Ok(())
    }

    /// Fence retention for every node from now on: the nodes are built again with it on first use
    /// (the slot map is read again).
    pub(crate) fn set_fence_retention(&mut self, retention: Duration) {
        self.template.fence_retention = retention;
        let state = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        state.nodes.clear();
        state.slots = vec![None; SLOTS];
    }

    pub(crate) fn masters(&self) -> Vec<Arc<Node>> {
        let state = self.state.read().unwrap_or_else(|p| p.into_inner());
        let mut seen: Vec<Arc<Node>> = Vec::new();
        for node in state.slots.iter().flatten() {
            if !seen.iter().any(|n| Arc::ptr_eq(n, node)) {
                seen.push(node.clone());
            }
        }
        seen
    }

    fn node(&self, addr: &str) -> Result<Arc<Node>> {
        if let Some(node) = self
            .state
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .nodes
            .get(addr)
        {
            return Ok(node.clone());
        }
        let (host, port) = split_addr(addr)
            .ok_or_else(|| Error::Internal(format!("redis cluster named a node as {addr:?}")))?;
        let seed = self
            .seeds
            .first()
            .ok_or_else(|| Error::invalid("no cluster seeds"))?;
        let server = RedisServer {
            host,
            port,
            db: 0,
            username: seed.username.clone(),
            password: seed.password.clone(),
        };
        let built = Arc::new(self.template.build(&server)?);
        let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
        Ok(state.nodes.entry(addr.to_owned()).or_insert(built).clone())
    }

    fn master_of(&self, slot: u16) -> Option<Arc<Node>> {
        self.state
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .slots
            .get(usize::from(slot))
            .cloned()
            .flatten()
    }

    pub(crate) fn run<T>(
        &self,
        slot: u16,
        deadline: Deadline,
        mut op: impl FnMut(&Node, Via) -> std::result::Result<T, Failure>,
    ) -> Result<T> {
        let mut ask: Option<Arc<Node>> = None;
        loop {
            let (node, via) = match ask.take() {
                Some(node) => (node, Via { asking: true }),
                None => match self.master_of(slot) {
                    Some(node) => (node, Via::default()),
                    None => {
                        // Not covered (a failover under way, or the map was never read).
                        let _ = self.refresh(deadline, None, None);
                        match self.master_of(slot) {
                            Some(node) => (node, Via::default()),
                            None if pause_before_retry(deadline) => continue,
                            None => {
                                return Err(Error::Unavailable(format!(
                                    "redis cluster: no master serves slot {slot}"
                                )))
                            }
                        }
                    }
                },
            };
            let failure = match op(&node, via) {
                Ok(value) => return Ok(value),
                Err(failure) => failure,
            };
            if deadline.is_past() {
                return Err(failure.into_error());
            }
            match &failure.hint {
                Hint::Moved(addr) => {
                    let target = self.node(addr)?;
                    self.state.write().unwrap_or_else(|p| p.into_inner()).slots
                        [usize::from(slot)] = Some(target);
                    // One slot moved seldom comes alone (a failover moves a master's all).
                    if self.due() {
                        let _ = self.refresh(deadline, Some(addr.as_str()), None);
                    }
                }
                Hint::Ask(addr) => ask = Some(self.node(addr)?),
                Hint::Reroute => {
                    if self.due() {
                        let _ = self.refresh(deadline, None, Some(node.name()));
                    }
                    if !pause_before_retry(deadline) {
                        return Err(failure.into_error());
                    }
                }
                Hint::None => return Err(failure.into_error()),
            }
        }
    }

    /// Whether enough time passed since the last lookup to make another.
    fn due(&self) -> bool {
        let mut last = self.looked_up.lock().unwrap_or_else(|p| p.into_inner());
        let due = last.is_none_or(|at| at.elapsed() >= LOOKUP_EVERY);
        if due {
            *last = Some(Instant::now());
        }
        due
    }

    /// Reads `CLUSTER SLOTS` from the first node that answers: known masters first (`prefer`
    /// first of all: the node a `MOVED` named), then the seeds and every other node we know;
    /// `avoid` (the node that just failed, whose refused or hung connect would eat the deadline)
    /// last.
    fn refresh(&self, deadline: Deadline, prefer: Option<&str>, avoid: Option<&str>) -> Result<()> {
        *self.looked_up.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        let mut candidates: Vec<String> = Vec::new();
        if let Some(p) = prefer {
            candidates.push(p.to_owned());
        }
        candidates.extend(self.masters().iter().map(|n| n.name().to_owned()));
        candidates.extend(self.seeds.iter().map(|s| s.to_string()));
        {
            let state = self.state.read().unwrap_or_else(|p| p.into_inner());
            candidates.extend(state.nodes.keys().cloned());
        }
        let mut unique: Vec<String> = Vec::new();
        for c in candidates {
            if !unique.contains(&c) && Some(c.as_str()) != avoid {
                unique.push(c);
            }
        }
        // The node that just failed may have come back (a restart): asked if time is left.
        unique.extend(avoid.map(str::to_owned));
        let mut last_error = None;
        for addr in unique {
            if deadline.is_past() {
                break;
            }
            let node = match self.node(&addr) {
                Ok(node) => node,
                Err(e) => {
                    last_error = Some(e);
                    continue;
                }
            };
            // One node's answer may not take the whole deadline: a hung node must leave time to
            // ask the next.
            let ask = deadline.min(Deadline::after(node.settings().io_timeout));
            let reply = node.call_routed("cluster slots", ask, |c| {
                redis::cmd("CLUSTER").arg("SLOTS").query::<Value>(c)
            });
            match reply {
                Ok(value) => match parse_slots(value, &addr) {
                    Some(ranges) if !ranges.is_empty() => {
                        return self.install(ranges);
                    }
                    _ => {
                        last_error = Some(Error::Unavailable(format!(
                            "redis cluster: {addr} gave no slot map"
                        )))
                    }
                },
                Err(f) => last_error = Some(f.into_error()),
            }
        }
        Err(last_error.unwrap_or_else(|| {
            Error::Unavailable("redis cluster: no node answered CLUSTER SLOTS".to_owned())
        }))
    }

    fn install(&self, ranges: Vec<(u16, u16, String)>) -> Result<()> {
        let mut slots: Vec<Option<Arc<Node>>> = vec![None; SLOTS];
        for (start, end, addr) in ranges {
            let node = self.node(&addr)?;
            let range = usize::from(start)..=usize::from(end).min(SLOTS - 1);
            for entry in slots.get_mut(range).into_iter().flatten() {
                *entry = Some(node.clone());
            }
        }
        self.state.write().unwrap_or_else(|p| p.into_inner()).slots = slots;
        Ok(())
    }
}

/// `CLUSTER SLOTS`: `[[start, end, [host, port, id, …], replicas…], …]` → (start, end, master's
/// `host:port`). An empty or `?` host means the node we asked.
fn parse_slots(value: Value, asked: &str) -> Option<Vec<(u16, u16, String)>> {
    let asked_host = split_addr(asked).map(|(h, _)| h).unwrap_or_default();
    let Value::Array(ranges) = value else {
        return None;
    };
    let mut out = Vec::new();
    for range in ranges {
        let Value::Array(items) = range else {
            return None;
        };
        let mut items = items.into_iter();
        let start: u16 = redis::from_redis_value(items.next()?).ok()?;
        let end: u16 = redis::from_redis_value(items.next()?).ok()?;
        let Value::Array(master) = items.next()? else {
            return None;
        };
        let mut master = master.into_iter();
        let host: String = redis::from_redis_value(master.next()?).ok()?;
        let port: u16 = redis::from_redis_value(master.next()?).ok()?;
        let host = if host.is_empty() || host == "?" {
            asked_host.clone()
        } else {
            host
        };
        out.push((start, end, join_addr(&host, port)));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_maps_parse() {
        let b = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                Value::Array(vec![b("127.0.0.1"), Value::Int(7000), b("id")]),
                Value::Array(vec![b("127.0.0.1"), Value::Int(7003), b("id2")]),
            ]),
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(16383),
                Value::Array(vec![b(""), Value::Int(7001), b("id")]),
            ]),
        ]);
        assert_eq!(
            parse_slots(reply, "10.0.0.9:7001"),
            Some(vec![
                (0, 5460, "127.0.0.1:7000".into()),
                (5461, 16383, "10.0.0.9:7001".into())
            ])
        );
        assert_eq!(parse_slots(Value::Int(1), "x:1"), None);
    }
}
