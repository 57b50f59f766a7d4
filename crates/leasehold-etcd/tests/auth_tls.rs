//! etcd's user/password authentication, and `etcds://` with a CA and a client certificate, each on
//! a one-member cluster of the test's own (the gateway's handling of both does not depend on the
//! number of members; the three-member runs are in conformance.rs and faults.rs).

use leasehold_core::{Client, Config, ErrorKind};
use leasehold_etcd::EtcdBackend;
use leasehold_testkit::{unique_key, EtcdCluster, EtcdTls, TempDir};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const PASSWORD: &str = "lh-etcd-root-pw";

fn connect(url: &str) -> leasehold_core::Result<Client> {
    Ok(Client::new(EtcdBackend::connect(&Config::parse(url)?)?))
}

/// A lease taken, waited for, extended to another TTL and released.
fn exercise(client: &Client) {
    let key = unique_key("exercise");
    let mut lease = client.try_acquire(&key, Duration::from_secs(10)).unwrap();
    assert_eq!(
        client
            .try_acquire(&key, Duration::from_secs(10))
            .unwrap_err()
            .kind(),
        ErrorKind::NotAcquired
    );
    lease.extend(Duration::from_secs(20)).unwrap();
    let fence = lease.fence();
    let holder = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        lease.release().unwrap();
    });
    let next = client
        .acquire(&key, Duration::from_secs(10), Duration::from_secs(10))
        .expect("a waiter gets the key");
    holder.join().unwrap();
    assert!(next.fence() > fence);
    next.release().unwrap();
}

#[test]
fn user_and_password() {
    let cluster = EtcdCluster::start_with(1);
    cluster.enable_auth(PASSWORD);
    let hosts = cluster.hosts();
    exercise(&connect(&format!("etcd://root:{PASSWORD}@{hosts}")).unwrap());

    let dir = TempDir::new("etcd-password");
    let file = dir.path().join("password");
    std::fs::write(&file, format!("{PASSWORD}\n")).unwrap();
    exercise(
        &connect(&format!(
            "etcd://root@{hosts}?password_file={}",
            file.display()
        ))
        .unwrap(),
    );

    let wrong = connect(&format!("etcd://root:not-the-{PASSWORD}@{hosts}")).unwrap();
    let e = wrong
        .try_acquire(unique_key("wrong"), Duration::from_secs(5))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(!e.to_string().contains(PASSWORD), "{e}");
    let anonymous = connect(&format!("etcd://{hosts}")).unwrap();
    let e = anonymous
        .try_acquire(unique_key("anon"), Duration::from_secs(5))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
}

fn openssl(dir: &Path, args: &[&str]) {
    let status = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("the openssl command (it makes this test's certificates)");
    assert!(status.success(), "openssl {args:?}");
}

/// A throwaway CA, and a certificate signed by it for `name` (`server` for 127.0.0.1, `client`).
fn make_certificates(dir: &Path) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec![
        "req",
        "-x509",
        "-days",
        "2",
        "-subj",
        "/CN=leasehold etcd test CA",
    ];
    ca.extend(ec);
    ca.extend(["-keyout", "ca.key", "-out", "ca.pem"]);
    openssl(dir, &ca);
    std::fs::write(
        dir.join("server.cnf"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n\
         extendedKeyUsage=serverAuth,clientAuth\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("client.cnf"),
        "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n",
    )
    .unwrap();
    for name in ["server", "client"] {
        let (key, csr, pem, cnf) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.pem"),
            format!("{name}.cnf"),
        );
        let subject = format!("/CN={name}");
        let mut req = vec!["req", "-subj", subject.as_str()];
        req.extend(ec);
        req.extend(["-keyout", key.as_str(), "-out", csr.as_str()]);
        openssl(dir, &req);
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
                "-days",
                "2",
                "-extfile",
                &cnf,
                "-out",
                &pem,
            ],
        );
    }
}

#[test]
fn tls_with_a_client_certificate() {
    let dir = TempDir::new("etcd-tls");
    make_certificates(dir.path());
    let file = |name: &str| dir.path().join(name);
    let cluster = EtcdCluster::start_tls(
        1,
        Some(EtcdTls {
            cert: file("server.pem"),
            key: file("server.key"),
            ca: file("ca.pem"),
            client_cert_auth: true,
        }),
    );
    let (ca, cert, key) = (file("ca.pem"), file("client.pem"), file("client.key"));
    let query = format!(
        "tls_ca_file={}&tls_cert_file={}&tls_key_file={}",
        ca.display(),
        cert.display(),
        key.display()
    );
    let url = cluster.url_with(&query);
    assert!(url.starts_with("etcds://"));
    exercise(&connect(&url).unwrap());

    // Without the client certificate the members refuse; without the CA the client does.
    let no_client_cert = connect(&cluster.url_with(&format!("tls_ca_file={}", ca.display())));
    let e = no_client_cert
        .unwrap()
        .try_acquire(unique_key("no-cert"), Duration::from_secs(5))
        .unwrap_err();
    assert!(
        matches!(
            e.kind(),
            ErrorKind::Unavailable | ErrorKind::InvalidArgument
        ),
        "{e}"
    );
    let no_ca = connect(&cluster.url_with(&format!(
        "tls_cert_file={}&tls_key_file={}",
        cert.display(),
        key.display()
    )));
    let e = no_ca
        .unwrap()
        .try_acquire(unique_key("no-ca"), Duration::from_secs(5))
        .unwrap_err();
    assert!(
        matches!(
            e.kind(),
            ErrorKind::Unavailable | ErrorKind::InvalidArgument
        ),
        "{e}"
    );
    // Plain text to a TLS listener is no lease either.
    let plain = connect(&format!("etcd://{}", cluster.hosts())).unwrap();
    assert!(plain
        .try_acquire(unique_key("plain"), Duration::from_secs(5))
        .is_err());
}
