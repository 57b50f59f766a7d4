//! `rediss://`: the same backend over TLS (rustls with the ring provider), against a redis-server
//! started here with a throwaway CA made by the `openssl` command. The certificate is trusted
//! through `SSL_CERT_FILE`, which the system trust store loader honours, so this binary holds one
//! test only.

mod common;

use leasehold_core::{conformance, ErrorKind};
use leasehold_testkit::{free_port, unique_key, wait_until, TempDir};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

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
        "/CN=leasehold test CA",
    ];
    ca.extend(ec);
    ca.extend(["-keyout", "ca.key", "-out", "ca.pem"]);
    openssl(dir, &ca);
    let mut csr = vec!["req", "-subj", "/CN=127.0.0.1"];
    csr.extend(ec);
    csr.extend(["-keyout", "server.key", "-out", "server.csr"]);
    openssl(dir, &csr);
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
            "-out",
            "server.pem",
        ],
    );
}

struct TlsRedis(Child);

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_tls_redis(dir: &Path, port: u16) -> TlsRedis {
    let path = |f: &str| dir.join(f).display().to_string();
    let child = Command::new("redis-server")
        .args([
            "--bind",
            "127.0.0.1",
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
        ])
        .args([
            "--tls-cert-file",
            &path("server.pem"),
            "--tls-key-file",
            &path("server.key"),
        ])
        .args([
            "--tls-ca-cert-file",
            &path("ca.pem"),
            "--tls-auth-clients",
            "no",
        ])
        .args(["--save", "", "--appendonly", "no", "--dir", &path("")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server");
    let server = TlsRedis(child);
    assert!(
        wait_until(Duration::from_secs(10), || TcpStream::connect((
            "127.0.0.1",
            port
        ))
        .is_ok()),
        "TLS redis-server on port {port} did not come up"
    );
    server
}

#[test]
fn rediss_verifies_the_certificate_and_passes_the_contract() {
    let dir = TempDir::new("redis-tls");
    make_certificates(dir.path());
    let port = free_port();
    let _server = start_tls_redis(dir.path(), port);
    let url = format!("rediss://127.0.0.1:{port}?connect_timeout_ms=2000");

    // Not trusted yet: the CA is in no trust store.
    let err = common::connect(&url).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    // Plain text to a TLS port is refused too.
    let plain = format!("redis://127.0.0.1:{port}?connect_timeout_ms=500&io_timeout_ms=500");
    assert_eq!(
        common::connect(&plain).unwrap_err().kind(),
        ErrorKind::Unavailable
    );

    std::env::set_var("SSL_CERT_FILE", dir.path().join("ca.pem"));
    let client = common::client(&url);
    let lease = client
        .try_acquire(unique_key("tls"), Duration::from_secs(10))
        .unwrap();
    assert!(
        lease.fence() > 1_000_000_000_000_000,
        "fences are server µs"
    );
    lease.release().unwrap();
    conformance::run(&|| common::client(&url));
    conformance::mutual_exclusion(&client, 8, 50);
}
