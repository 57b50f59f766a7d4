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

use crate::connection::ConnectSettings;
use crate::keys::RedisKeys;
use crate::node::{Failure, Hint, Node, Via};
use leasehold_core::config::RedisServer;
use leasehold_core::{Deadline, Error, Result, Secrets};
use redis::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// Slots in a Redis Cluster.
const SLOTS: usize = 16384;

/// A pause before sending again to a node that is unreachable or not the master: failovers take
/// hundreds of milliseconds, and hammering meanwhile would only load the survivors.
const REROUTE_PAUSE: Duration = Duration::from_millis(50);

/// The slot map or the Sentinels are asked again at most this often on failures (a `MOVED` always
/// updates its slot at once).
const LOOKUP_EVERY: Duration = Duration::from_millis(100);

/// How every node of a topology is built.
#[derive(Debug, Clone)]
pub(crate) struct NodeTemplate {
    pub(crate) settings: ConnectSettings,
    pub(crate) pool_size: u32,
    pub(crate) secrets: Secrets,
    pub(crate) fence_retention: Duration,
    pub(crate) replicas: u32,
    pub(crate) replicas_timeout: Duration,
}

impl NodeTemplate {
    fn build(&self, server: &RedisServer) -> Result<Node> {
        let mut node = Node::unchecked(
            server,
            self.settings.clone(),
            self.pool_size,
            self.secrets.clone(),
        )?;
        node.set_fence_retention(self.fence_retention);
        node.set_replicas(self.replicas, self.replicas_timeout);
        Ok(node)
    }
}

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
            Topology::Cluster(cluster) => {
                cluster.template.fence_retention = retention;
                let state = cluster.state.get_mut().unwrap_or_else(|p| p.into_inner());
                // Rebuilt with the new retention on first use (the slot map is read again).
                state.nodes.clear();
                state.slots = vec![None; SLOTS];
            }
            Topology::Sentinel(sentinel) => {
                sentinel.template.fence_retention = retention;
                *sentinel
                    .current
                    .get_mut()
                    .unwrap_or_else(|p| p.into_inner()) = None;
            }
        }
    }

    /// Runs `op` on the node serving `keys`, following redirections and failovers while
    /// `deadline` allows (see the module docs).
    pub(crate) fn run<T>(
        &self,
        keys: &RedisKeys,
        deadline: Deadline,
        mut op: impl FnMut(&Node, Via) -> std::result::Result<T, Failure>,
    ) -> Result<T> {
        match self {
            Topology::Single(node) => op(node, Via::default()).map_err(Failure::into_error),
            Topology::Cluster(cluster) => cluster.run(keys.slot(), deadline, op),
            Topology::Sentinel(sentinel) => sentinel.run(deadline, op),
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
                    sentinel.service,
                    sentinel.sentinels.len(),
                    current.map(|n| acked(&[n])).unwrap_or_default()
                )
            }
        }
    }
}

/// Sleeps `REROUTE_PAUSE` (or what is left of the deadline); false once no time is left to try
/// again.
fn pause_before_retry(deadline: Deadline) -> bool {
    let pause = deadline.cap(REROUTE_PAUSE);
    if pause.is_zero() {
        return false;
    }
    std::thread::sleep(pause);
    !deadline.is_past()
}

// ---------------------------------------------------------------------------------------------
// Cluster

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
        Ok(cluster)
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

    fn run<T>(
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

fn join_addr(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// `host:port` or `[v6]:port` (the form `RedisServer`'s `Display` and Redis's redirections use).
fn split_addr(addr: &str) -> Option<(String, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return None;
    }
    Some((host.to_owned(), port.parse().ok()?))
}

// ---------------------------------------------------------------------------------------------
// Sentinel

pub(crate) struct Sentinel {
    /// The Sentinels, each an ordinary node (a small pool, their own credentials).
    sentinels: Vec<Node>,
    service: String,
    /// The master's credentials and db; its address comes from the Sentinels.
    master: RedisServer,
    template: NodeTemplate,
    current: RwLock<Option<Arc<Node>>>,
    looked_up: Mutex<Option<Instant>>,
}

impl std::fmt::Debug for Sentinel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sentinel")
            .field("service", &self.service)
            .field(
                "sentinels",
                &self.sentinels.iter().map(Node::name).collect::<Vec<_>>(),
            )
            .field("master", &self.current().map(|n| n.name().to_owned()))
            .finish_non_exhaustive()
    }
}

impl Sentinel {
    /// Asks the Sentinels for the master of `service`, within `deadline`.
    pub(crate) fn connect(
        sentinels: &[RedisServer],
        service: String,
        master: RedisServer,
        template: NodeTemplate,
        deadline: Deadline,
    ) -> Result<Sentinel> {
        let sentinel_template = NodeTemplate {
            pool_size: 2,
            replicas: 0,
            ..template.clone()
        };
        let sentinels = sentinels
            .iter()
            .map(|s| sentinel_template.build(s))
            .collect::<Result<Vec<_>>>()?;
        let sentinel = Sentinel {
            sentinels,
            service,
            master,
            template,
            current: RwLock::new(None),
            looked_up: Mutex::new(None),
        };
        sentinel.resolve(deadline, None)?;
        Ok(sentinel)
    }

    pub(crate) fn current(&self) -> Option<Arc<Node>> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn run<T>(
        &self,
        deadline: Deadline,
        mut op: impl FnMut(&Node, Via) -> std::result::Result<T, Failure>,
    ) -> Result<T> {
        loop {
            let node = match self.current() {
                Some(node) => node,
                None => match self.resolve(deadline, None) {
                    Ok(node) => node,
                    Err(e) if !pause_before_retry(deadline) => return Err(e),
                    Err(_) => continue,
                },
            };
            let failure = match op(&node, Via::default()) {
                Ok(value) => return Ok(value),
                Err(failure) => failure,
            };
            if failure.hint != Hint::Reroute || deadline.is_past() {
                return Err(failure.into_error());
            }
            // Unreachable or demoted: the Sentinels may name another master by now (another
            // thread may have asked them already).
            let changed = self.current().is_some_and(|now| !Arc::ptr_eq(&now, &node));
            if !changed && self.due() {
                let _ = self.resolve(deadline, Some(&node));
            }
            if !pause_before_retry(deadline) {
                return Err(failure.into_error());
            }
        }
    }

    fn due(&self) -> bool {
        let mut last = self.looked_up.lock().unwrap_or_else(|p| p.into_inner());
        let due = last.is_none_or(|at| at.elapsed() >= LOOKUP_EVERY);
        if due {
            *last = Some(Instant::now());
        }
        due
    }

    /// Asks each Sentinel in turn for the master's address and takes the first one that `ROLE`
    /// confirms is a master (a Sentinel that has not caught up with a failover, or lies, names a
    /// replica). `failed` is the node that just failed: it is kept only if it still says `master`.
    fn resolve(&self, deadline: Deadline, failed: Option<&Arc<Node>>) -> Result<Arc<Node>> {
        *self.looked_up.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        let mut problems: Vec<String> = Vec::new();
        for sentinel in &self.sentinels {
            if deadline.is_past() {
                break;
            }
            let ask = deadline.min(Deadline::after(sentinel.settings().io_timeout));
            let reply = sentinel.call_routed("sentinel get-master-addr-by-name", ask, |c| {
                redis::cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg(&self.service)
                    .query::<Option<(String, u16)>>(c)
            });
            let (host, port) = match reply {
                Ok(Some(addr)) => addr,
                Ok(None) => {
                    problems.push(format!(
                        "{} does not know service {:?}",
                        sentinel.name(),
                        self.service
                    ));
                    continue;
                }
                Err(f) => {
                    problems.push(f.into_error().to_string());
                    continue;
                }
            };
            let addr = join_addr(&host, port);
            let node = match self.current() {
                Some(now) if now.name() == addr => now,
                _ => match failed.filter(|n| n.name() == addr) {
                    Some(n) => n.clone(),
                    None => {
                        let server = RedisServer {
                            host,
                            port,
                            ..self.master.clone()
                        };
                        Arc::new(self.template.build(&server)?)
                    }
                },
            };
            let confirm = deadline.min(Deadline::after(node.settings().io_timeout));
            match node.role(confirm) {
                Ok(role) if role == "master" => {
                    *self.current.write().unwrap_or_else(|p| p.into_inner()) = Some(node.clone());
                    return Ok(node);
                }
                Ok(role) => problems.push(format!(
                    "{} names {addr} as the master, which says it is a {role}",
                    sentinel.name()
                )),
                Err(f) => problems.push(f.into_error().to_string()),
            }
        }
        Err(Error::Unavailable(format!(
            "redis sentinel: no master for service {:?} ({})",
            self.service,
            if problems.is_empty() {
                "out of time".to_owned()
            } else {
                problems.join("; ")
            }
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_split_and_join() {
        assert_eq!(
            split_addr("127.0.0.1:7000"),
            Some(("127.0.0.1".into(), 7000))
        );
        assert_eq!(split_addr("[::1]:7000"), Some(("::1".into(), 7000)));
        assert_eq!(join_addr("::1", 7000), "[::1]:7000");
        assert_eq!(split_addr(":7000"), None);
        assert_eq!(split_addr("nohost"), None);
    }

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
