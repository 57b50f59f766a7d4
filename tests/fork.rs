//! Rust programs that fork: a child that drops, releases or extends a lease it
//! inherited must leave the parent's lock alone, on every backend; and the child's own client keeps
//! working with connections of its own. The first version guarded only PostgreSQL and the C ABI: a
//! child dropping an inherited `Lease` released the parent's lock on local and Redis.

use leasehold_testkit::{in_child, unique_key, PostgresServer, RedisServer, TempDir};
use std::time::Duration;

const TTL: Duration = Duration::from_secs(30);

/// Long enough for a child's connects on a loaded machine; a child that hangs is reported, not
/// waited for.
const CHILD_LIMIT: Duration = Duration::from_secs(30);

fn check(name: &str, url: &str) {
    let client = leasehold::connect(url).unwrap();
    let key = unique_key(&format!("fork:{name}"));
    let mut held = Some(client.try_acquire(&key, TTL).unwrap());
    let other_key = unique_key(&format!("fork-child:{name}"));
    let status = in_child(CHILD_LIMIT, || {
        let Some(mut lease) = held.take() else {
            return false;
        };
        // Every way of touching the inherited lease must leave the parent's lock alone.
        let refused_extend = lease.extend(TTL).is_err();
        let refused_release = lease.release_in_place().is_err();
        let inherited = lease.is_inherited();
        drop(lease);
        // The child's own use of the inherited client works, on connections of its own.
        let own = client
            .try_acquire(&other_key, TTL)
            .and_then(|l| l.release());
        refused_extend && refused_release && inherited && own.is_ok()
    });
    assert_eq!(
        status,
        Some(0),
        "{name}: the child hung (None) or failed its checks"
    );
    let info = client.inspect(&key).unwrap();
    assert!(info.held, "{name}: the child freed the parent's lock");
    // The parent still owns it: another acquirer is refused, and the parent's release succeeds.
    assert!(
        client.try_acquire(&key, TTL).is_err(),
        "{name}: key was free"
    );
    let lease = held.expect("the parent's lease stayed in the parent");
    lease
        .release()
        .unwrap_or_else(|e| panic!("{name}: parent's release: {e}"));
}

#[test]
fn children_leave_inherited_leases_alone() {
    let dir = TempDir::new("fork");
    check("local", &dir.file_url());
    let redis = RedisServer::start();
    check("redis", &redis.url());
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let hosts: Vec<String> = nodes.iter().map(RedisServer::addr).collect();
    check("redlock", &format!("redlock://{}", hosts.join(",")));
    let pg = PostgresServer::shared();
    check("postgres-advisory", &pg.url());
    check("postgres-table", &pg.url_with("lock=table"));
}
