//! Host name resolution under a deadline.
//!
//! `getaddrinfo` has no timeout of its own: a resolver that does not answer can hold a caller for
//! the resolver's full retry schedule (tens of seconds), far past a call's bound (`docs/semantics.md` §4). Literal
//! addresses need no lookup; a name is looked up on a short-lived thread, and the caller stops
//! waiting when the deadline passes (the thread finishes on its own and its answer is dropped).
//! A plain std thread, created on demand, keeps this usable after `fork()`.

use crate::deadline::Deadline;
use crate::error::{Error, Result};
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::mpsc;

/// The addresses of `host:port`, within `deadline`. `Unavailable` when the name does not resolve or
/// the deadline passes first.
pub fn resolve(host: &str, port: u16, deadline: Deadline) -> Result<Vec<SocketAddr>> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let left = deadline.check(&format!("resolving {host}"))?;
    let (tx, rx) = mpsc::channel();
    let name = bare.to_owned();
    crate::threads::quietly(|| {
        std::thread::Builder::new()
            .name("leasehold-resolve".into())
            .spawn(move || {
                let _ = tx.send((name.as_str(), port).to_socket_addrs().map(Vec::from_iter));
            })
    })
    .map_err(|e| Error::Unavailable(format!("cannot start a resolver thread: {e}")))?;
    match rx.recv_timeout(left) {
        Ok(Ok(addrs)) if !addrs.is_empty() => Ok(addrs),
        Ok(Ok(_)) => Err(Error::Unavailable(format!("{host} has no addresses"))),
        Ok(Err(e)) => Err(Error::Unavailable(format!("cannot resolve {host}: {e}"))),
        Err(_) => Err(Error::Unavailable(format!(
            "resolving {host} took longer than the call's timeout ({} ms)",
            left.as_millis()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn literals_and_names() {
        let d = Deadline::after(Duration::from_secs(5));
        assert_eq!(
            resolve("127.0.0.1", 7, d).unwrap(),
            vec!["127.0.0.1:7".parse().unwrap()]
        );
        assert_eq!(
            resolve("[::1]", 7, d).unwrap(),
            vec!["[::1]:7".parse().unwrap()]
        );
        assert!(resolve("localhost", 7, d)
            .unwrap()
            .iter()
            .all(|a| a.port() == 7));
        let past = Deadline::after(Duration::ZERO);
        assert!(matches!(
            resolve("localhost", 7, past),
            Err(Error::Unavailable(_))
        ));
        assert!(matches!(
            resolve("no-such-host.invalid", 7, d),
            Err(Error::Unavailable(_))
        ));
    }
}
