//! `redis+unix:///path`: one server over its Unix socket, with the password read from a file.

use leasehold_core::{conformance, Client, Config};
use leasehold_redis::RedisBackend;
use leasehold_testkit::{RedisServer, TempDir};
use std::time::Duration;

fn client(url: &str) -> Client {
    let config = Config::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
    Client::new(RedisBackend::connect(&config).unwrap_or_else(|e| panic!("connect {url}: {e}")))
}

#[test]
fn conformance_over_a_unix_socket_with_a_password_file() {
    let server = RedisServer::start_with_args(
        Some("file-secret".into()),
        vec![
            "--unixsocket".into(),
            "@SOCKET@".into(),
            "--unixsocketperm".into(),
            "700".into(),
        ],
    );
    let dir = TempDir::new("pwfile");
    let file = dir.path().join("pw");
    std::fs::write(&file, "file-secret\n").unwrap();
    let url = format!(
        "redis+unix://{}?password_file={}",
        server.socket_path().display(),
        file.display()
    );
    conformance::run(&|| client(&url));
    let backend = RedisBackend::connect(&Config::parse(&url).unwrap()).unwrap();
    assert!(
        backend.topology().contains("unix:"),
        "{}",
        backend.topology()
    );

    // A wrong password is refused, and never shown.
    std::fs::write(&file, "wrong-secret\n").unwrap();
    let err = RedisBackend::connect(&Config::parse(&url).unwrap()).unwrap_err();
    assert!(!err.to_string().contains("wrong-secret"), "{err}");
    // The socket gone: Unavailable at once.
    drop(server);
    std::fs::write(&file, "file-secret\n").unwrap();
    let start = std::time::Instant::now();
    let err = RedisBackend::connect(&Config::parse(&url).unwrap()).unwrap_err();
    assert_eq!(err.kind(), leasehold_core::ErrorKind::Unavailable, "{err}");
    assert!(start.elapsed() < Duration::from_secs(3));
}
