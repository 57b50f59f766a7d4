//! A pooler in front of the server (PgBouncer, say): which one the URL names (`pooler=`), and what
//! connect infers when it names none.
//!
//! A client cannot ask a pooler its pool mode; it can only watch what the pooler does. Under
//! transaction (or statement) pooling, the server session behind a client connection changes
//! between transactions, and two client connections open at once may be served by the same server
//! session in turn. Neither can happen on a direct connection or under session pooling, where each
//! client connection has a server session of its own for as long as it lasts. So the probe is: the
//! backend (`pg_backend_pid()`, with the server's start time, so that two servers behind one pooler
//! are told apart) of the first session, of a second session opened beside it, and of the first
//! again. A repeated backend across the two, or a changed one within a session, proves transaction
//! pooling; seeing neither proves nothing (a busy pooler may hand out distinct server sessions by
//! chance), which is why the URL may say.
//!
//! The probe costs a second session and up to ten round trips (two when a transaction pooler is
//! idle: the second session gets the first one's server session at once), so it runs only where a
//! pooler may sit:
//! when the server says it was reached on another port than the URL's (a pooler listens on a port
//! of its own, 6432 by default) or not over TCP at all while we connected over TCP, and when the
//! URL names a Unix socket (a local pooler is commonly reached that way). A pooler on the same port
//! as its server on another host is not suspected: name it in the URL (`pooler=transaction`).

use crate::session::{last_value, Failure, Pools, Session};
use leasehold_core::config::PostgresPooler;
use leasehold_core::{Deadline, Error, Result};
use tokio_postgres::config::Host;

/// The SQL expression of the session's server backend: its process id and its server's start
/// time.
pub(crate) const BACKEND: &str =
    "pg_backend_pid()::text || '@' || pg_postmaster_start_time()::text";

/// The SQL expression of the server's port as the server saw our connection (NULL over a Unix
/// socket).
pub(crate) const SERVER_PORT: &str = "inet_server_port()";

/// How many times the probe asks each of its two sessions for its backend, at most (it stops at
/// the first proof): 2 round trips each.
const PROBE_ROUNDS: usize = 5;

/// Where the connection string sends us: TCP ports, and whether any host is a Unix socket.
struct Dialed {
    ports: Vec<u16>,
    unix: bool,
}

fn dialed(connection: &str) -> Dialed {
    let Ok(config) = connection.parse::<tokio_postgres::Config>() else {
        return Dialed {
            ports: vec![5432],
            unix: false,
        };
    };
    let mut ports = config.get_ports().to_vec();
    if ports.is_empty() {
        ports.push(5432);
    }
    let unix = config
        .get_hosts()
        .iter()
        .any(|h| matches!(h, Host::Unix(_)));
    Dialed { ports, unix }
}

/// Whether a pooler may sit between us and the server, from the server's port as it saw our
/// first session (`server_port`, `None` when it was reached over a Unix socket).
pub(crate) fn suspected(connection: &str, server_port: Option<&str>) -> bool {
    let dialed = dialed(connection);
    if dialed.unix {
        return true;
    }
    match server_port.and_then(|p| p.parse::<u16>().ok()) {
        Some(port) => !dialed.ports.contains(&port),
        // TCP to us, not TCP to the server: something in between.
        None => true,
    }
}

/// The pooler that connect goes on with: the URL's, else `transaction` when the probe proves it,
/// else `none`. `first` is the session connect has open, `first_backend` its backend as the
/// first statement saw it. The second session is opened outside the pool and closed here.
pub(crate) fn settle(
    given: Option<PostgresPooler>,
    pools: &Pools,
    first: &mut Session,
    first_backend: Option<&str>,
    suspect: bool,
    deadline: Deadline,
) -> Result<PostgresPooler> {
    if let Some(given) = given {
        return Ok(given);
    }
    if !suspect {
        return Ok(PostgresPooler::None);
    }
    let Some(first_backend) = first_backend else {
        return Ok(PostgresPooler::None);
    };
    let failed = |e: &Failure| pools.failed("looking for a pooler", e);
    let mut second = pools.open_apart(deadline)?;
    let ask = |s: &mut Session| -> Result<Option<String>> {
        let rows = s
            .rows(&format!("SELECT {BACKEND}"), deadline)
            .map_err(|e| failed(&e))?;
        Ok(last_value(&rows, 0).map(str::to_owned))
    };
    let mut seen_first = vec![first_backend.to_owned()];
    let mut seen_second = Vec::new();
    // Several rounds: a pooler busy with other clients may happen to give each of the two
    // connections the same server session again for a while; an idle one shows it at once.
    for _ in 0..PROBE_ROUNDS {
        seen_second.extend(ask(&mut second)?);
        seen_first.extend(ask(first)?);
        let changed = |seen: &[String]| seen.windows(2).any(|w| w[0] != w[1]);
        let shared = seen_second.iter().any(|b| seen_first.contains(b));
        if shared || changed(&seen_first) || changed(&seen_second) {
            return Ok(PostgresPooler::Transaction);
        }
    }
    Ok(PostgresPooler::None)
}

/// How connect says which pooler it went on with, for errors: `pooler=transaction` as the URL
/// gave it, or as detected.
pub(crate) fn said(given: Option<PostgresPooler>, pooler: PostgresPooler) -> String {
    match given {
        Some(_) => format!("pooler={}", pooler.name()),
        None => format!(
            "pooler={} (detected: the server session behind a connection changes between \
             transactions; set pooler= in the URL to say otherwise)",
            pooler.name()
        ),
    }
}

/// The refusal of advisory mode under transaction pooling, at connect.
pub(crate) fn advisory_refused(said: &str) -> Error {
    Error::refused_deployment(format!(
        "PostgreSQL advisory locks belong to the server session that takes them, and a \
         transaction-pooling pooler ({said}) hands that session to other clients between \
         transactions, so a lease would stay in another client's session: use lock=table, or \
         session pooling (PgBouncer's pool_mode = session), or connect to the server directly"
    ))
}

/// The refusal of shared leases (and of promote and demote, which move between shared and
/// exclusive) in table mode under transaction pooling.
pub(crate) fn shared_refused(said: &str) -> Error {
    Error::invalid(format!(
        "shared leases are refused under transaction pooling ({said}): a waiting writer holds \
         back new readers with a session advisory lock, which a transaction-pooling pooler would \
         hand to other clients, so writers could wait forever behind a stream of readers; use \
         session pooling (PgBouncer's pool_mode = session) or a direct connection for shared leases"
    ))
}

#[cfg(test)]
mod tests {
    use super::suspected;

    #[test]
    fn a_pooler_is_suspected_where_the_server_was_reached_another_way() {
        let url = "postgres://u@db.example:6432/app";
        assert!(suspected(url, Some("5432")), "another port: a pooler's");
        assert!(
            suspected(url, None),
            "TCP to us, a Unix socket to the server"
        );
        assert!(!suspected("postgres://u@db.example:5432/app", Some("5432")));
        assert!(
            !suspected("postgres://u@db.example/app", Some("5432")),
            "5432 by default"
        );
        assert!(!suspected("postgres://u@a:5433,b:5434/app", Some("5434")));
        assert!(
            suspected("postgres://u@%2Fvar%2Frun%2Fpostgresql/app", Some("5432")),
            "a Unix socket: a local pooler is commonly reached so"
        );
    }
}
