//! What Cluster and Sentinel routing share: how each node they find is built, the pause and the
//! lookup rate while a node is unreachable or no longer the master, and `host:port` addresses.

use crate::connection::ConnectSettings;
use crate::node::Node;
use leasehold_core::config::RedisServer;
use leasehold_core::retry::Retry;
use leasehold_core::{Deadline, Result, Secrets};
use std::time::Duration;

/// The slot map or the Sentinels are asked again at most this often on failures (a `MOVED` always
/// updates its slot at once).
pub(crate) const LOOKUP_EVERY: Duration = Duration::from_millis(100);

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
    pub(crate) fn build(&self, server: &RedisServer) -> Result<Node> {
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

/// Pauses before sending again to a node that is unreachable or not the master
/// ([`Retry::REROUTE`]); false once no time is left to try again.
pub(crate) fn pause_before_retry(deadline: Deadline) -> bool {
    Retry::REROUTE.start(deadline).pause()
}

pub(crate) fn join_addr(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// `host:port` or `[v6]:port` (the form `RedisServer`'s `Display` and Redis's redirections use).
pub(crate) fn split_addr(addr: &str) -> Option<(String, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return None;
    }
    Some((host.to_owned(), port.parse().ok()?))
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
}
