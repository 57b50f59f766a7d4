//! TLS against a real TLS PostgreSQL (`ssl=on`, `hostssl` rules, a `cert` rule for client
//! certificates), with certificates made by `openssl` here: a CA, a server certificate for
//! 127.0.0.1 and localhost, an expired one (on a second server), another CA, a client certificate.

use leasehold_core::{Client, Config, ErrorKind};
use leasehold_postgres::PostgresBackend;
use leasehold_testkit::{unique_key, PostgresServer};
use postgres::NoTls;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tempfile::TempDir;

const PASSWORD: &str = "Tls-Secret-42";

struct Setup {
    dir: TempDir,
    good: PostgresServer,
    expired: PostgresServer,
}

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

/// `name.pem` / `name.key` signed by `ca` (or self-signed CA when `ca` is None).
fn cert(dir: &Path, name: &str, cn: &str, ca: Option<&str>, days: &str, san: Option<&str>) {
    let key = format!("{name}.key");
    let pem = format!("{name}.pem");
    let subj = format!("/CN={cn}");
    match ca {
        None => openssl(
            dir,
            &[
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &pem,
                "-subj", &subj, "-days", days,
            ],
        ),
        Some(ca) => {
            let csr = format!("{name}.csr");
            openssl(
                dir,
                &[
                    "req", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &csr, "-subj",
                    &subj,
                ],
            );
            let ext = format!("{name}.ext");
            std::fs::write(
                dir.join(&ext),
                match san {
                    Some(san) => format!("subjectAltName={san}\n"),
                    None => "basicConstraints=CA:FALSE\n".to_owned(),
                },
            )
            .unwrap();
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

fn setup() -> &'static Setup {
    static SETUP: OnceLock<Setup> = OnceLock::new();
    SETUP.get_or_init(|| {
        let dir = temp_dir("pg-tls");
        let d = dir.path();
        cert(d, "ca", "leasehold test CA", None, "3", None);
        cert(d, "other_ca", "another CA", None, "3", None);
        let san = Some("DNS:localhost,IP:127.0.0.1");
        cert(d, "server", "localhost", Some("ca"), "3", san);
        // notAfter before notBefore: expired from the start.
        cert(d, "expired", "localhost", Some("ca"), "-1", san);
        cert(d, "client", "cert_user", Some("ca"), "3", None);
        let hba = [
            "hostssl all tls_user 127.0.0.1/32 scram-sha-256",
            "hostssl all cert_user 127.0.0.1/32 cert",
        ];
        let start = |name: &str| {
            let server = PostgresServer::start_tls(
                &d.join(format!("{name}.pem")),
                &d.join(format!("{name}.key")),
                Some(&d.join("ca.pem")),
                &hba,
            );
            let mut admin = postgres::Client::connect(&server.url(), NoTls).unwrap();
            admin
                .batch_execute(&format!(
                    "SET password_encryption = 'scram-sha-256';
                     CREATE ROLE tls_user LOGIN SUPERUSER PASSWORD '{PASSWORD}';
                     CREATE ROLE cert_user LOGIN SUPERUSER;"
                ))
                .unwrap();
            server
        };
        let good = start("server");
        let expired = start("expired");
        Setup { dir, good, expired }
    })
}

fn file(name: &str) -> PathBuf {
    setup().dir.path().join(name)
}

fn url(server: &PostgresServer, user: &str, host: &str, query: &str) -> String {
    let auth = if user == "tls_user" {
        format!("{user}:{PASSWORD}")
    } else {
        user.to_owned()
    };
    format!(
        "postgres://{auth}@{host}:{}/postgres?{query}",
        server.port()
    )
}

fn connect(url: &str) -> leasehold_core::Result<Client> {
    PostgresBackend::connect(&Config::parse(url)?).map(Client::new)
}

fn refused(url: &str, says: &str) -> String {
    let e = connect(url).expect_err("the connection must be refused");
    let msg = e.to_string();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{msg}");
    assert!(msg.contains(says), "expected `{says}` in: {msg}");
    assert!(!msg.contains(PASSWORD), "the password leaked: {msg}");
    msg
}

fn verify(mode: &str, ca: &str) -> String {
    format!(
        "sslmode={mode}&sslrootcert={}&lock=table&table=tls_locks",
        file(ca).display()
    )
}

#[test]
fn the_right_ca_passes_under_verify_full_and_locks_work() {
    let s = setup();
    let c = connect(&url(
        &s.good,
        "tls_user",
        "127.0.0.1",
        &verify("verify-full", "ca.pem"),
    ))
    .expect("verify-full with the right CA");
    let key = unique_key("tls");
    c.try_acquire(&key, Duration::from_secs(10))
        .unwrap()
        .release()
        .unwrap();
    // By name too: the certificate names localhost.
    connect(&url(
        &s.good,
        "tls_user",
        "localhost",
        &verify("verify-full", "ca.pem"),
    ))
    .expect("verify-full by host name");
    // And in advisory mode, with require (encrypted, unchecked).
    let a = connect(&url(&s.good, "tls_user", "127.0.0.1", "sslmode=require")).unwrap();
    a.try_acquire(&key, Duration::from_secs(10))
        .unwrap()
        .release()
        .unwrap();

    // Cycle time with TLS next to plain text (as postgres, allowed in plain text), table mode.
    let plain = connect(&format!(
        "postgres://postgres@127.0.0.1:{}/postgres?sslmode=disable&lock=table&table=tls_locks",
        s.good.port()
    ))
    .unwrap();
    let p50 = |c: &Client| {
        let mut t: Vec<Duration> = (0..230)
            .map(|_| {
                let start = Instant::now();
                c.try_acquire(&key, Duration::from_secs(10))
                    .unwrap()
                    .release()
                    .unwrap();
                start.elapsed()
            })
            .skip(30)
            .collect();
        t.sort();
        t[t.len() / 2]
    };
    let connect_started = Instant::now();
    let fresh = connect(&url(
        &s.good,
        "tls_user",
        "127.0.0.1",
        &verify("verify-full", "ca.pem"),
    ))
    .unwrap();
    let tls_connect = connect_started.elapsed();
    eprintln!(
        "table cycle p50: TLS {:?}, plain {:?}; a TLS backend connect (handshake + SCRAM + setup) {tls_connect:?}",
        p50(&fresh),
        p50(&plain)
    );
}

#[test]
fn a_wrong_ca_is_refused() {
    let s = setup();
    refused(
        &url(
            &s.good,
            "tls_user",
            "127.0.0.1",
            &verify("verify-full", "other_ca.pem"),
        ),
        "not signed by a CA of sslrootcert",
    );
    refused(
        &url(
            &s.good,
            "tls_user",
            "127.0.0.1",
            &verify("verify-ca", "other_ca.pem"),
        ),
        "unknown issuer",
    );
}

#[test]
fn an_expired_certificate_is_refused() {
    let s = setup();
    refused(
        &url(
            &s.expired,
            "tls_user",
            "127.0.0.1",
            &verify("verify-full", "ca.pem"),
        ),
        "has expired",
    );
    refused(
        &url(
            &s.expired,
            "tls_user",
            "127.0.0.1",
            &verify("verify-ca", "ca.pem"),
        ),
        "has expired",
    );
}

#[test]
fn a_wrong_host_name_is_refused_under_verify_full_only() {
    let s = setup();
    let wrong = format!(
        "postgres://tls_user:{PASSWORD}@wrong.example:{}/postgres?hostaddr=127.0.0.1&",
        s.good.port()
    );
    let msg = refused(
        &format!("{wrong}{}", verify("verify-full", "ca.pem")),
        "not valid for the host name wrong.example",
    );
    assert!(msg.contains("verify-full"), "{msg}");
    connect(&format!("{wrong}{}", verify("verify-ca", "ca.pem")))
        .expect("verify-ca does not check the name");
}

#[test]
fn a_plain_text_client_is_refused_by_a_tls_only_server() {
    let s = setup();
    let msg = refused(
        &url(&s.good, "tls_user", "127.0.0.1", "sslmode=disable"),
        "no pg_hba.conf entry",
    );
    assert!(msg.contains("no encryption"), "{msg}");
}

#[test]
fn mutual_tls_needs_the_client_certificate() {
    let s = setup();
    let base = url(
        &s.good,
        "cert_user",
        "127.0.0.1",
        &verify("verify-full", "ca.pem"),
    );
    refused(&base, "certificate");
    let with_cert = format!(
        "{base}&sslcert={}&sslkey={}",
        file("client.pem").display(),
        file("client.key").display()
    );
    let c = connect(&with_cert).expect("mutual TLS with the client certificate");
    c.try_acquire(unique_key("mtls"), Duration::from_secs(10))
        .unwrap()
        .release()
        .unwrap();
}

#[test]
fn password_file_logs_in() {
    let s = setup();
    let pw = file("password");
    std::fs::write(&pw, format!("{PASSWORD}\n")).unwrap();
    let url = format!(
        "postgres://tls_user@127.0.0.1:{}/postgres?password_file={}&{}",
        s.good.port(),
        pw.display(),
        verify("verify-full", "ca.pem")
    );
    connect(&url).expect("the password from the file");
    std::fs::write(&pw, "wrong-password\n").unwrap();
    let e = connect(&url).unwrap_err().to_string();
    assert!(!e.contains("wrong-password"), "{e}");
    assert!(e.contains("password authentication failed"), "{e}");
}

/// A private directory under the system temp dir, removed on drop.
fn temp_dir(label: &str) -> TempDir {
    tempfile::Builder::new()
        .prefix(&format!("leasehold-test-{label}-"))
        .tempdir()
        .expect("create a temp dir")
}

/// Over TLS too, a held advisory lease is dropped as soon as the session's end reaches the socket
/// (TLS wraps the socket the watch polls): idle, it stays held; terminated, it reads 0 left at once.
#[test]
fn an_advisory_lease_over_tls_is_dropped_when_its_session_is_terminated() {
    let s = setup();
    let c = connect(&url(&s.good, "tls_user", "127.0.0.1", "sslmode=require")).unwrap();
    let key = unique_key("tls-terminated");
    let lease = c.try_acquire(&key, Duration::from_secs(30)).unwrap();
    let until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < until {
        assert!(
            lease.remaining() > Duration::ZERO,
            "an idle TLS session's lease"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut admin = postgres::Client::connect(&s.good.url(), NoTls).unwrap();
    let id = leasehold_postgres::lock_id(format!("leasehold:{key}").as_bytes()) as u64;
    let row = admin
        .query_one(
            &format!(
                "SELECT pg_terminate_backend(pid, 5000) FROM pg_locks WHERE locktype = 'advisory' \
                 AND granted AND classid = {} AND objid = {} AND objsubid = 1",
                id >> 32,
                id & 0xffff_ffff
            ),
            &[],
        )
        .unwrap();
    assert!(row.get::<_, bool>(0), "the holder's session ended");
    let ended = Instant::now();
    while !lease.remaining().is_zero() {
        assert!(
            ended.elapsed() < Duration::from_millis(500),
            "the holder still relies on its lease {:?} after its session ended",
            ended.elapsed()
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    eprintln!("dropped {:?} after the session ended", ended.elapsed());
    assert_eq!(
        lease.checkpoint(Duration::ZERO).unwrap_err().kind(),
        ErrorKind::Lost
    );
}
