//! `rediss+cluster://` and `rediss+sentinel://` against real TLS-only servers: a Redis Cluster of 3
//! masters and a Sentinel group (master, replica, 3 Sentinels), every process `--port 0
//! --tls-port P` with the cluster bus, replication and the Sentinels' own links over TLS as well,
//! so nothing in these tests can succeed over plain text. Certificates are made here by `openssl`:
//! a CA, a server certificate for 127.0.0.1 (IP SAN) and localhost, a client certificate, and
//! another CA. The Sentinel group also demands client certificates (`tls-auth-clients yes`).

mod common;

use leasehold_core::{conformance, ErrorKind, Key};
use leasehold_redis::keys::RedisKeys;
use leasehold_redis::RedisBackend;
use leasehold_testkit::{unique_key, RedisCluster, RedisSentinel, RedisTls, TempDir};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl (the README's test command installs it)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

const EC: [&str; 5] = [
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
];

/// A self-signed CA, `name.pem` / `name.key`.
fn make_ca(dir: &Path, name: &str, cn: &str) {
    let (key, pem, subj) = (
        format!("{name}.key"),
        format!("{name}.pem"),
        format!("/CN={cn}"),
    );
    let mut args = vec![
        "req", "-x509", "-keyout", &key, "-out", &pem, "-subj", &subj, "-days", "3",
    ];
    args.extend(EC);
    openssl(dir, &args);
}

/// `name.pem` / `name.key`, signed by `ca`, with extensions `ext`.
fn make_leaf(dir: &Path, name: &str, cn: &str, ext: &str) {
    let (key, csr, pem, extfile, subj) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.pem"),
        format!("{name}.ext"),
        format!("/CN={cn}"),
    );
    let mut args = vec!["req", "-keyout", &key, "-out", &csr, "-subj", &subj];
    args.extend(EC);
    openssl(dir, &args);
    std::fs::write(
        dir.join(&extfile),
        format!("basicConstraints=CA:FALSE\n{ext}"),
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "3",
            "-extfile",
            &extfile,
        ],
    );
}

/// The certificates of one test, in a directory of its own that goes with it.
struct Certs(TempDir);

impl Certs {
    fn new() -> Certs {
        let dir = TempDir::new("redis-tls-topology-certs");
        make_ca(dir.path(), "ca", "leasehold test CA");
        make_ca(dir.path(), "other_ca", "another CA");
        make_leaf(
            dir.path(),
            "server",
            "localhost",
            "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
        );
        make_leaf(dir.path(), "client", "leasehold client", "");
        Certs(dir)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }

    fn tls(&self, auth_clients: bool) -> RedisTls {
        RedisTls {
            cert: self.file("server.pem"),
            key: self.file("server.key"),
            ca: self.file("ca.pem"),
            auth_clients,
        }
    }

    fn client_cert(&self) -> String {
        format!(
            "&tls_cert_file={}&tls_key_file={}",
            self.file("client.pem").display(),
            self.file("client.key").display()
        )
    }

    /// Short timeouts (every refusal is quick) and the CA file `ca`.
    fn query(&self, ca: &str) -> String {
        format!(
            "connect_timeout_ms=2000&io_timeout_ms=2000&tls_ca_file={}",
            self.file(ca).display()
        )
    }
}

/// Connecting to `url` fails with `Unavailable` saying `says`, within the connect + I/O bound.
fn refused(url: &str, says: &str) {
    let started = Instant::now();
    let e = common::connect(url).expect_err("the connection must be refused");
    let msg = e.to_string();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{msg}");
    assert!(msg.contains(says), "expected `{says}` in: {msg}");
    eprintln!("refused as expected in {:?}: {msg}", started.elapsed());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "refused within connect + I/O timeout: {:?}",
        started.elapsed()
    );
}

/// One TLS cluster of 3 masters without replicas (the quickest to start; failover over TLS is not
/// what this is about), owned by this one test so its servers are stopped when it ends (a cluster
/// in a `static` is never dropped, and its processes would outlive the test binary).
#[test]
fn tls_cluster() {
    let certs = Certs::new();
    let started = Instant::now();
    let cluster = RedisCluster::start_tls(3, 0, 2000, &certs.tls(false));
    eprintln!("TLS cluster up in {:?}", started.elapsed());
    cluster_passes_the_contract(&certs, &cluster);
    cluster_reaches_every_master(&certs, &cluster);
    cluster_refuses_a_wrong_ca_and_plain_text(&certs, &cluster);
}

fn cluster_passes_the_contract(certs: &Certs, cluster: &RedisCluster) {
    let url = cluster.url_with(&certs.query("ca.pem"));
    assert!(url.starts_with("rediss+cluster://"), "{url}");
    let started = Instant::now();
    conformance::run(&|| common::client(&url));
    conformance::run_shared(&|| common::client(&url));
    eprintln!("TLS cluster: run + run_shared in {:?}", started.elapsed());
}

/// Keys of every master are served over TLS (the slot map's addresses are the TLS ports, and each
/// master's own connection verifies its certificate), and `status` names all three.
fn cluster_reaches_every_master(certs: &Certs, cluster: &RedisCluster) {
    let url = cluster.url_with(&certs.query("ca.pem"));
    let client = common::client(&url);
    let ttl = Duration::from_secs(10);
    let mut masters = HashSet::new();
    for i in 0..30 {
        let key = Key::new(format!("{}:{i}", unique_key("tls-spread"))).unwrap();
        masters.insert(cluster.master_of(RedisKeys::new("leasehold:", &key).slot()));
        let lease = client.try_acquire(&key, ttl).expect("acquire");
        assert!(client.try_acquire(&key, ttl).is_err(), "exclusive");
        lease.release().expect("release");
    }
    assert_eq!(masters.len(), 3, "{masters:?}");
    let backend = RedisBackend::connect(&leasehold_core::Config::parse(&url).unwrap()).unwrap();
    let text = backend.topology();
    assert!(text.starts_with("cluster of 3 masters"), "{text}");
}

/// The seeds are reached for `CLUSTER SLOTS` without a check at connect, so a certificate or
/// scheme problem first shows on that command: it must still be said in words.
fn cluster_refuses_a_wrong_ca_and_plain_text(certs: &Certs, cluster: &RedisCluster) {
    refused(
        &cluster.url_with(&certs.query("other_ca.pem")),
        "not signed by a CA of tls_ca_file",
    );
    let plain = cluster
        .url_with("connect_timeout_ms=1000&io_timeout_ms=1000")
        .replacen("rediss+cluster://", "redis+cluster://", 1);
    refused(&plain, "accepts only TLS, use a TLS scheme");
}

/// Sentinels and master all TLS only, with client certificates: resolving the master (SENTINEL
/// get-master-addr-by-name on a Sentinel, ROLE on the master) and every lease call go over mutual
/// TLS.
#[test]
fn tls_sentinel_passes_the_contract() {
    let certs = Certs::new();
    let started = Instant::now();
    let group = RedisSentinel::start_tls(1, 3, 1000, &certs.tls(true));
    eprintln!("TLS sentinel group up in {:?}", started.elapsed());
    let url = group.url_with(&(certs.query("ca.pem") + &certs.client_cert()));
    assert!(url.starts_with("rediss+sentinel://"), "{url}");
    let started = Instant::now();
    conformance::run(&|| common::client(&url));
    eprintln!("TLS sentinel: run in {:?}", started.elapsed());
    let backend = RedisBackend::connect(&leasehold_core::Config::parse(&url).unwrap()).unwrap();
    let text = backend.topology();
    let master = group.servers()[0].port();
    assert!(
        text.contains(&format!("master 127.0.0.1:{master}")),
        "{text}"
    );

    refused(
        &group.url_with(&(certs.query("other_ca.pem") + &certs.client_cert())),
        "not signed by a CA of tls_ca_file",
    );
    refused(
        &group.url_with(&certs.query("ca.pem")),
        "the server requires a client certificate",
    );
    let plain = group
        .url_with("connect_timeout_ms=1000&io_timeout_ms=1000")
        .replacen("rediss+sentinel://", "redis+sentinel://", 1);
    refused(&plain, "accepts only TLS, use a TLS scheme");
}
