//! Table mode's waiting writer marks its key so new readers hold back and cannot starve it; the
//! mark ends with the writer's wait, so a writer that gives up leaves none behind.

use leasehold_core::{Client, Config, ErrorKind};
use leasehold_mysql::MysqlBackend;
use leasehold_testkit::{unique_key, MariaDbServer};
use std::time::Duration;

fn client() -> Client {
    let url = MariaDbServer::shared().url_with("lock=table&io_timeout_ms=5000");
    let config = Config::parse(&url).expect("test URL");
    Client::new(MysqlBackend::connect(&config).expect("connect to the test MariaDB"))
}

#[test]
fn readers_hold_back_while_a_writer_waits_and_not_once_it_gave_up() {
    let key = unique_key("writer-mark");
    let (reader, writer) = (client(), client());
    let held = reader
        .acquire_shared(&key, Duration::from_secs(10), Duration::ZERO)
        .unwrap();
    let waiting = std::thread::scope(|s| {
        let w =
            s.spawn(|| writer.acquire(&key, Duration::from_secs(5), Duration::from_millis(600)));
        std::thread::sleep(Duration::from_millis(300));
        // The writer is waiting: a new reader is refused, so it cannot starve the writer.
        let refused = reader
            .acquire_shared(&key, Duration::from_secs(5), Duration::ZERO)
            .map(drop)
            .unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::NotAcquired, "{refused}");
        w.join().unwrap()
    });
    assert_eq!(waiting.unwrap_err().kind(), ErrorKind::NotAcquired);
    // The writer gave up: the next reader gets in at once.
    let next = reader
        .acquire_shared(&key, Duration::from_secs(5), Duration::ZERO)
        .expect("no writer waits any more");
    drop((next, held));
}
