//! A forked child's client connects anew (each process has its own agent and idle connections):
//! it takes and releases leases of its own while the parent holds one and keeps using its client,
//! and never touches the parent's connections.

use leasehold_core::{Client, Config, ErrorKind};
use leasehold_etcd::EtcdBackend;
use leasehold_testkit::{in_child, unique_key, EtcdCluster};
use std::time::Duration;

#[test]
fn a_forked_child_uses_connections_of_its_own() {
    let cluster = EtcdCluster::shared();
    let url = cluster.url_with("io_timeout_ms=5000&prefix=fork:");
    let client = Client::new(EtcdBackend::connect(&Config::parse(&url).unwrap()).unwrap());
    let held_key = unique_key("parent");
    // The parent's agent has idle connections by now.
    let held = client
        .try_acquire(&held_key, Duration::from_secs(30))
        .unwrap();
    let child_key = unique_key("child");
    let (c, hk, ck) = (client.clone(), held_key.clone(), child_key.clone());
    let status = in_child(Duration::from_secs(30), move || {
        let refused = c.try_acquire(&hk, Duration::from_secs(5)).unwrap_err();
        let lease = c.try_acquire(&ck, Duration::from_secs(5)).unwrap();
        let waited = c.acquire(&hk, Duration::from_secs(5), Duration::from_millis(300));
        refused.kind() == ErrorKind::NotAcquired
            && waited.is_err_and(|e| e.kind() == ErrorKind::NotAcquired)
            && lease.release().is_ok()
    });
    assert_eq!(status, Some(0), "the child's calls");
    // The parent's connections were left alone: its lease and client still work.
    let mut held = held;
    held.extend(Duration::from_secs(30)).unwrap();
    client
        .try_acquire(&child_key, Duration::from_secs(5))
        .expect("the child released its key")
        .release()
        .unwrap();
    held.release().unwrap();
}
