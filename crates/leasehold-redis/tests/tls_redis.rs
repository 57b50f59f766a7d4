//! Redis TLS on every scheme against real TLS-only `redis-server`s (`--port 0 --tls-port P`)
//! started by the testkit, with certificates made here by `openssl`: a CA, a server certificate
//! for 127.0.0.1 and localhost, an expired one, one for another name, a self-signed one, another
//! CA, and a client certificate for mutual TLS (`--tls-auth-clients yes`).
//!
//! Every refusal must be `Unavailable`, say which check failed, and never quote the password.

mod common;

use leasehold_core::{conformance, ErrorKind};
use leasehold_redis::RedlockBackend;
use leasehold_testkit::{unique_key, RedisServer, RedisTls, TempDir};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const PASSWORD: &str = "Redis-Tls-Secret-17";

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

/// `name.pem` / `name.key`: signed by `ca`, or self-signed when `ca` is None (a CA, or with `san` a
/// self-signed server certificate).
fn cert(dir: &Path, name: &str, cn: &str, ca: Option<&str>, days: &str, san: Option<&str>) {
    let (key, pem, subj) = (
        format!("{name}.key"),
        format!("{name}.pem"),
        format!("/CN={cn}"),
    );
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    match ca {
        None => {
            let mut args = vec![
                "req", "-x509", "-keyout", &key, "-out", &pem, "-subj", &subj,
            ];
            args.extend(ec);
            args.extend(["-days", days]);
            let ext;
            if let Some(san) = san {
                ext = format!("subjectAltName={san}");
                args.extend(["-addext", &ext]);
            }
            openssl(dir, &args);
        }
        Some(ca) => {
            let csr = format!("{name}.csr");
            let mut args = vec!["req", "-keyout", &key, "-out", &csr, "-subj", &subj];
            args.extend(ec);
            openssl(dir, &args);
            let ext = format!("{name}.ext");
            let mut text = "basicConstraints=CA:FALSE\n".to_owned();
            if let Some(san) = san {
                text.push_str(&format!("subjectAltName={san}\n"));
            }
            std::fs::write(dir.join(&ext), text).unwrap();
            let (ca_pem, ca_key) = (format!("{ca}.pem"), format!("{ca}.key"));
            openssl(
                dir,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &csr,
                    "-CA",
                    &ca_pem,
                    "-CAkey",
                    &ca_key,
                    "-CAcreateserial",
                    "-out",
                    &pem,
                    "-days",
                    days,
                    "-extfile",
                    &ext,
                ],
            );
        }
    }
}

struct Setup {
    dir: TempDir,
}

fn setup() -> &'static Setup {
    static SETUP: OnceLock<Setup> = OnceLock::new();
    SETUP.get_or_init(|| {
        let dir = TempDir::new("redis-tls-certs");
        let d = dir.path();
        cert(d, "ca", "leasehold test CA", None, "3", None);
        cert(d, "other_ca", "another CA", None, "3", None);
        let san = Some("DNS:localhost,IP:127.0.0.1");
        cert(d, "server", "localhost", Some("ca"), "3", san);
        // notAfter before notBefore: expired from the start.
        cert(d, "expired", "localhost", Some("ca"), "-1", san);
        cert(
            d,
            "wrong_name",
            "wrong.example",
            Some("ca"),
            "3",
            Some("DNS:wrong.example"),
        );
        cert(d, "self", "localhost", None, "3", san);
        cert(d, "client", "leasehold client", Some("ca"), "3", None);
        Setup { dir }
    })
}

fn file(name: &str) -> PathBuf {
    setup().dir.path().join(name)
}

/// A TLS-only server presenting `name.pem`, with the password.
fn server(name: &str, auth_clients: bool) -> RedisServer {
    let tls = RedisTls {
        cert: file(&format!("{name}.pem")),
        key: file(&format!("{name}.key")),
        ca: file("ca.pem"),
        auth_clients,
    };
    RedisServer::start_tls_with(Some(PASSWORD), &tls, Vec::new())
}

fn ca(name: &str) -> String {
    format!("tls_ca_file={}", file(name).display())
}

fn client_cert() -> String {
    format!(
        "tls_cert_file={}&tls_key_file={}",
        file("client.pem").display(),
        file("client.key").display()
    )
}

/// `rediss://:PASSWORD@host:port?query` (short timeouts: every refusal is quick).
fn url(server: &RedisServer, host: &str, query: &str) -> String {
    format!(
        "rediss://:{PASSWORD}@{host}:{}?connect_timeout_ms=2000&io_timeout_ms=2000&{query}",
        server.port()
    )
}

/// The connection is refused with `Unavailable`, a message containing `says`, and no password.
fn refused(url: &str, says: &str) -> String {
    let started = Instant::now();
    let e = common::connect(url).expect_err("the connection must be refused");
    let msg = e.to_string();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{msg}");
    assert!(msg.contains(says), "expected `{says}` in: {msg}");
    assert!(!msg.contains(PASSWORD), "the password leaked: {msg}");
    eprintln!("refused as expected: {msg}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "refused within connect + I/O timeout: {:?}",
        started.elapsed()
    );
    msg
}

fn cycle(client: &leasehold_core::Client, label: &str) {
    let lease = client
        .try_acquire(unique_key(label), Duration::from_secs(10))
        .unwrap();
    assert!(
        lease.fence() > 1_000_000_000_000_000,
        "fences are server µs"
    );
    lease.release().unwrap();
}

#[test]
fn the_right_ca_passes_the_contract_by_address_and_by_name() {
    let s = server("server", false);
    let good = url(&s, "127.0.0.1", &ca("ca.pem"));
    cycle(&common::client(&good), "tls-ip");
    // By name: the certificate names localhost (the name is what is verified).
    cycle(
        &common::client(&url(&s, "localhost", &ca("ca.pem"))),
        "tls-name",
    );
    conformance::run(&|| common::client(&good));
    conformance::mutual_exclusion(&common::client(&good), 8, 50);
}

#[test]
fn redlocks_over_three_tls_nodes_passes_the_contract() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| server("server", false)).collect();
    let hosts: Vec<String> = nodes.iter().map(RedisServer::addr).collect();
    let url = format!(
        "redlocks://:{PASSWORD}@{}?connect_timeout_ms=2000&io_timeout_ms=2000&{}",
        hosts.join(","),
        ca("ca.pem")
    );
    let connect = || {
        let config = leasehold_core::Config::parse(&url).unwrap();
        leasehold_core::Client::new(RedlockBackend::connect(&config).unwrap())
    };
    cycle(&connect(), "redlocks");
    conformance::run(&connect);

    // The wrong CA on every node: no quorum, and each node says why.
    let wrong = url.replace(&ca("ca.pem"), &ca("other_ca.pem"));
    let config = leasehold_core::Config::parse(&wrong).unwrap();
    let e = RedlockBackend::connect(&config).unwrap_err();
    let msg = e.to_string();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{msg}");
    assert!(msg.contains("not signed by a CA of tls_ca_file"), "{msg}");
    assert!(!msg.contains(PASSWORD), "{msg}");
}

#[test]
fn a_wrong_ca_is_refused() {
    let s = server("server", false);
    refused(
        &url(&s, "127.0.0.1", &ca("other_ca.pem")),
        "not signed by a CA of tls_ca_file",
    );
    // Without tls_ca_file the system store is used, which does not hold the test CA.
    refused(
        &url(&s, "127.0.0.1", ""),
        "not signed by a CA of the system trust store",
    );
}

#[test]
fn an_expired_certificate_is_refused() {
    let s = server("expired", false);
    refused(&url(&s, "127.0.0.1", &ca("ca.pem")), "has expired");
}

#[test]
fn a_wrong_host_name_is_refused() {
    let s = server("wrong_name", false);
    let msg = refused(
        &url(&s, "127.0.0.1", &ca("ca.pem")),
        "not valid for the host name 127.0.0.1",
    );
    eprintln!("wrong name: {msg}");
    // The same certificate, the check off: accepted (and logged as insecure).
    cycle(
        &common::client(&url(&s, "127.0.0.1", "tls_insecure=true")),
        "wrong-name-insecure",
    );
}

#[test]
fn a_plain_text_client_is_refused_by_a_tls_only_server() {
    let s = server("server", false);
    let plain = format!(
        "redis://:{PASSWORD}@127.0.0.1:{}?connect_timeout_ms=1000&io_timeout_ms=1000",
        s.port()
    );
    refused(&plain, "accepts only TLS, use a TLS scheme");
}

#[test]
fn mutual_tls_needs_the_client_certificate() {
    let s = server("server", true);
    refused(
        &url(&s, "127.0.0.1", &ca("ca.pem")),
        "the server requires a client certificate",
    );
    let with_cert = url(
        &s,
        "127.0.0.1",
        &format!("{}&{}", ca("ca.pem"), client_cert()),
    );
    let client = common::client(&with_cert);
    cycle(&client, "mtls");
    conformance::mutual_exclusion(&client, 4, 25);
    // A client certificate from a CA the server does not trust is refused too.
    let foreign = url(
        &s,
        "127.0.0.1",
        &format!(
            "{}&tls_cert_file={}&tls_key_file={}",
            ca("ca.pem"),
            file("other_ca.pem").display(),
            file("other_ca.key").display()
        ),
    );
    refused(&foreign, "refused our client certificate");
}

#[test]
fn tls_insecure_connects_to_a_self_signed_server() {
    let s = server("self", false);
    // Verified, the self-signed certificate chains to nothing we trust.
    refused(&url(&s, "127.0.0.1", &ca("ca.pem")), "not signed by a CA");
    let client = common::client(&url(&s, "127.0.0.1", "tls_insecure=true"));
    cycle(&client, "insecure");
}

#[test]
fn unreadable_or_malformed_tls_files_are_invalid_arguments() {
    let s = server("server", false);
    let missing = url(&s, "127.0.0.1", "tls_ca_file=/nonexistent/ca.pem");
    let e = common::connect(&missing).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(e.to_string().contains("/nonexistent/ca.pem"), "{e}");
    // A key file given as the CA: no certificate in it.
    let e = common::connect(&url(
        &s,
        "127.0.0.1",
        &format!("tls_ca_file={}", file("ca.key").display()),
    ))
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(e.to_string().contains("holds no PEM certificate"), "{e}");
    // A certificate given as the key: never quoted.
    let e = common::connect(&url(
        &s,
        "127.0.0.1",
        &format!(
            "{}&tls_cert_file={}&tls_key_file={}",
            ca("ca.pem"),
            file("client.pem").display(),
            file("client.pem").display()
        ),
    ))
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(e.to_string().contains("holds no PEM private key"), "{e}");
    assert!(!e.to_string().contains("BEGIN"), "{e}");
}
