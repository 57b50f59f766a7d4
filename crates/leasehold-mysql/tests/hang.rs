//! A stopped server (SIGSTOP of mariadbd) never hangs a call, and clients recover once it continues: the
//! conformance suite's `stopped` check, on both modes, with a server of its own (it stops it).

use leasehold_core::conformance::stopped::{self, StoppableServer, CONNECT, IO};
use leasehold_core::{Client, Config};
use leasehold_mysql::MysqlBackend;
use leasehold_testkit::MariaDbServer;

struct Stopped(MariaDbServer);

impl StoppableServer for Stopped {
    fn url(&self, mode: &str) -> String {
        let server = &self.0;
        server.url_with(&format!(
            "{mode}&connect_timeout_ms={}&io_timeout_ms={}",
            CONNECT.as_millis(),
            IO.as_millis()
        ))
    }

    fn pause(&self) {
        self.0.pause();
    }

    fn resume(&self) {
        self.0.resume();
    }
}

fn connect(url: &str) -> leasehold_core::Result<Client> {
    Ok(Client::new(MysqlBackend::connect(&Config::parse(url)?)?))
}

#[test]
fn paused_server_never_hangs_a_call_and_clients_recover() {
    let server = Stopped(MariaDbServer::start());
    for mode in ["lock=named", "lock=table&table=hang_locks"] {
        stopped::every_operation_is_bounded(&server, connect, mode, mode == "lock=named");
    }
}
