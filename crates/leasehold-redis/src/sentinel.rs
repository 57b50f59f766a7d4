//! `redis+sentinel://`: the master the Sentinels name for a service, looked up again when it stops
//! answering as the master (see `topology.rs` for the rules every routed call follows).

use crate::connection::ConnectSettings;
use crate::node::{Failure, Hint, Node, Via};
use crate::routing::{join_addr, pause_before_retry, NodeTemplate, LOOKUP_EVERY};
use leasehold_core::config::RedisServer;
use leasehold_core::{Deadline, Error, Result};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// How many times one call may move to another master the Sentinels name (see [`Sentinel::run`]).
const MAX_MOVES: u32 = 3;

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
            // Sentinels hold no keys: nothing of theirs to screen for eviction.
            settings: ConnectSettings {
                allow_eviction: true,
                ..template.settings.clone()
            },
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

    /// Fence retention for the master from now on: it is built again with it on first use.
    pub(crate) fn set_fence_retention(&mut self, retention: Duration) {
        self.template.fence_retention = retention;
        *self.current.get_mut().unwrap_or_else(|p| p.into_inner()) = None;
    }

    pub(crate) fn service(&self) -> &str {
        &self.service
    }

    pub(crate) fn sentinel_count(&self) -> usize {
        self.sentinels.len()
    }

    pub(crate) fn current(&self) -> Option<Arc<Node>> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Runs `op` on the master, following a failover while `deadline` allows. `stands` says
    /// whether an answer is one a lease may rest on: one that is not (the key no longer holds our
    /// token) counts only from the master the Sentinels name now, who are asked before it is
    /// believed — the node that said so may be an old master back after a failover (empty, or a
    /// replica still syncing) while the lease stands on the new one. A call that succeeds costs
    /// no lookup.
    pub(crate) fn run<T>(
        &self,
        deadline: Deadline,
        mut op: impl FnMut(&Node, Via) -> std::result::Result<T, Failure>,
        stands: impl Fn(&T) -> bool,
    ) -> Result<T> {
        // Moves to another master after an answer or an error of the one before: bounded, so
        // Sentinels that keep changing their minds cannot keep a call going round.
        let mut moves = 0;
        loop {
            let node = match self.current() {
                Some(node) => node,
                None => match self.resolve(deadline, None) {
                    Ok(node) => node,
                    Err(e) if e.is_refused_deployment() => return Err(e),
                    Err(e) if !pause_before_retry(deadline) => return Err(e),
                    Err(_) => continue,
                },
            };
            let failure = match op(&node, Via::default()) {
                Ok(value) if stands(&value) => return Ok(value),
                Ok(value) => match self.resolve(deadline, Some(&node)) {
                    Ok(master) if Arc::ptr_eq(&master, &node) || moves >= MAX_MOVES => {
                        return Ok(value)
                    }
                    Ok(_) => {
                        moves += 1;
                        continue;
                    }
                    Err(e) if e.is_refused_deployment() => return Err(e),
                    Err(e) => {
                        return Err(Error::Unavailable(format!(
                            "redis {} says the lease is gone, but it may stand on another \
                             master: {e}",
                            node.name()
                        )))
                    }
                },
                Err(failure) => failure,
            };
            if deadline.is_past() {
                return Err(failure.into_error());
            }
            // After any error the Sentinels may name another master by now (another thread may
            // have asked them already).
            let changed = |sentinel: &Sentinel| {
                sentinel
                    .current()
                    .is_some_and(|now| !Arc::ptr_eq(&now, &node))
            };
            if !changed(self) && self.due() {
                match self.resolve(deadline, Some(&node)) {
                    Err(e) if e.is_refused_deployment() => return Err(e),
                    _ => {}
                }
            }
            if failure.hint == Hint::Reroute {
                if !pause_before_retry(deadline) {
                    return Err(failure.into_error());
                }
            } else if !changed(self) || moves >= MAX_MOVES {
                return Err(failure.into_error());
            } else {
                moves += 1;
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

    /// Asks the Sentinels for the master's address, until a majority of them agree (or every one
    /// was asked), and takes the address most of them name that `ROLE` confirms is a master. A
    /// Sentinel that has not caught up with a failover names the old master, which may be back and
    /// claim to be one (empty, until the Sentinels make it a replica); one that lies may name a
    /// replica. `failed` is the node that just failed or answered: kept if it still says `master`.
    fn resolve(&self, deadline: Deadline, failed: Option<&Arc<Node>>) -> Result<Arc<Node>> {
        *self.looked_up.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        let mut problems: Vec<String> = Vec::new();
        // Each address named, with how many Sentinels named it, in the order first named.
        let mut named: Vec<(String, u16, usize)> = Vec::new();
        let majority = self.sentinels.len() / 2 + 1;
        for sentinel in &self.sentinels {
            if deadline.is_past() || named.iter().any(|n| n.2 >= majority) {
                break;
            }
            let ask = deadline.min(Deadline::after(sentinel.settings().io_timeout));
            let reply = sentinel.call_routed("sentinel get-master-addr-by-name", ask, |c| {
                redis::cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg(&self.service)
                    .query::<Option<(String, u16)>>(c)
            });
            match reply {
                Ok(Some((host, port))) => {
                    match named.iter_mut().find(|n| n.0 == host && n.1 == port) {
                        Some(n) => n.2 += 1,
                        None => named.push((host, port, 1)),
                    }
                }
                Ok(None) => problems.push(format!(
                    "{} does not know service {:?}",
                    sentinel.name(),
                    self.service
                )),
                Err(f) => problems.push(f.into_error().to_string()),
            }
        }
        // Most named first; a stable sort keeps the first named first among equals.
        named.sort_by_key(|n| std::cmp::Reverse(n.2));
        for (host, port, _) in named {
            if deadline.is_past() {
                break;
            }
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
                    "the Sentinels name {addr} as the master, which says it is a {role}"
                )),
                // The master is screened on its first call (`ROLE`): one that may evict lock
                // keys is refused, not looked past, and kept as the master so later calls are
                // refused at once (its refusal is cached).
                Err(f) if f.error.is_refused_deployment() => {
                    *self.current.write().unwrap_or_else(|p| p.into_inner()) = Some(node);
                    return Err(f.into_error());
                }
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
