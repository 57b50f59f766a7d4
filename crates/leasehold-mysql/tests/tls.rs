//! TLS against a real TLS MariaDB (`--ssl-cert`, `--ssl-key`, `--ssl-ca`, an account that must
//! present a client certificate), with certificates made by `openssl` here: a CA, a server
//! certificate for 127.0.0.1, a client certificate, and another CA the server's certificate is not
//! signed by.

use leasehold_core::{Client, Config, ErrorKind};
use leasehold_mysql::MysqlBackend;
use leasehold_testkit::{unique_key, MariaDbServer, MARIADB_PASSWORD, MARIADB_X509_USER};
use std::path::Path;
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

/// `name.pem` / `name.key`: a self-signed CA when `ca` is None, else signed by `ca`.
fn cert(dir: &Path, name: &str, ca: Option<&str>, san: Option<&str>) {
    let (key, pem, csr) = (
        format!("{name}.key"),
        format!("{name}.pem"),
        format!("{name}.csr"),
    );
    let subj = format!("/CN={name}");
    let Some(ca) = ca else {
        openssl(
            dir,
            &[
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &pem,
                "-subj", &subj, "-days", "30",
            ],
        );
        return;
    };
    openssl(
        dir,
        &[
            "req", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &csr, "-subj", &subj,
        ],
    );
    let ext = format!("{name}.ext");
    let text = match san {
        Some(san) => format!("subjectAltName={san}\n"),
        None => "basicConstraints=CA:FALSE\n".to_owned(),
    };
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
            "30",
            "-extfile",
            &ext,
        ],
    );
}

fn connect(url: &str) -> leasehold_core::Result<Client> {
    MysqlBackend::connect(&Config::parse(url)?).map(Client::new)
}

fn works(url: &str) {
    let client = connect(url).unwrap_or_else(|e| panic!("{url}: {e}"));
    let lease = client
        .try_acquire(unique_key("tls"), Duration::from_secs(10))
        .unwrap();
    assert!(lease.fence() > 0);
    lease.release().unwrap();
}

fn refused(url: &str, expect: &str) {
    let start = Instant::now();
    let err = connect(url).map(drop).unwrap_err();
    eprintln!("refused after {:?}: {err}", start.elapsed());
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.to_string().contains(expect), "{err}");
    assert!(!err.to_string().contains(MARIADB_PASSWORD), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "a permanent failure is not retried"
    );
}

/// Over TLS too, a held named lease is dropped as soon as its killed session's close reaches the
/// socket (TLS wraps the socket the watch polls).
fn killed_over_tls(url: &str, admin_url: &str) {
    use mysql::prelude::Queryable;
    let client = connect(url).unwrap();
    let key = unique_key("tls-killed");
    let lease = client.try_acquire(&key, Duration::from_secs(30)).unwrap();
    let until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < until {
        assert!(
            lease.remaining() > Duration::ZERO,
            "an idle TLS session's lease"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut admin = mysql::Conn::new(mysql::Opts::from_url(admin_url).unwrap()).unwrap();
    let name = leasehold_mysql::lock_name(format!("leasehold:{key}").as_bytes());
    let session: u64 = admin
        .query_first::<Option<u64>, _>(format!("SELECT IS_USED_LOCK('{name}')"))
        .unwrap()
        .flatten()
        .expect("the key's lock is held");
    admin
        .query_drop(format!("KILL CONNECTION {session}"))
        .unwrap();
    let killed = Instant::now();
    while !lease.remaining().is_zero() {
        assert!(
            killed.elapsed() < Duration::from_millis(500),
            "the holder still relies on its lease {:?} after its session was killed",
            killed.elapsed()
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    eprintln!("dropped {:?} after the kill", killed.elapsed());
    assert_eq!(
        lease.checkpoint(Duration::ZERO).unwrap_err().kind(),
        ErrorKind::Lost
    );
}

#[test]
fn tls_modes_and_client_certificates() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    cert(d, "ca", None, None);
    cert(d, "server", Some("ca"), Some("IP:127.0.0.1,DNS:localhost"));
    cert(d, "client", Some("ca"), None);
    cert(d, "other-ca", None, None);
    let server = MariaDbServer::start_tls(
        &d.join("server.pem"),
        &d.join("server.key"),
        &d.join("ca.pem"),
    );
    let p = |name: &str| d.join(name).display().to_string();
    let base = server.url();
    let x509 = base.replacen("leasehold:", &format!("{MARIADB_X509_USER}:"), 1);

    for mode in ["lock=named", "lock=table&table=tls_locks"] {
        works(&format!("{base}?{mode}&ssl-mode=REQUIRED"));
        works(&format!(
            "{base}?{mode}&ssl-mode=VERIFY_CA&ssl-ca={}",
            p("ca.pem")
        ));
        works(&format!(
            "{base}?{mode}&ssl-mode=VERIFY_IDENTITY&ssl-ca={}",
            p("ca.pem")
        ));
        works(&format!(
            "{x509}?{mode}&ssl-mode=VERIFY_IDENTITY&ssl-ca={}&ssl-cert={}&ssl-key={}",
            p("ca.pem"),
            p("client.pem"),
            p("client.key")
        ));
    }
    killed_over_tls(&format!("{base}?lock=named&ssl-mode=REQUIRED"), &base);
    // The account that needs a client certificate is refused without one, and in plain text.
    refused(&format!("{x509}?ssl-mode=REQUIRED"), "Access denied");
    refused(&x509, "Access denied");
    // A server certificate not signed by the given CA.
    refused(
        &format!("{base}?ssl-mode=VERIFY_CA&ssl-ca={}", p("other-ca.pem")),
        "UnknownIssuer",
    );
    // The host name is checked under VERIFY_IDENTITY (the certificate names localhost too).
    let by_name = base.replacen("127.0.0.1", "localhost", 1);
    works(&format!(
        "{by_name}?ssl-mode=VERIFY_IDENTITY&ssl-ca={}",
        p("ca.pem")
    ));
    let err = connect(&format!("{base}?ssl-mode=VERIFY_CA&ssl-ca=/no/such/ca.pem"))
        .map(drop)
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
}
