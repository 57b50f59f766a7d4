//! Helpers shared by the Redis backend's test binaries.
#![allow(dead_code)]

use leasehold_core::{Client, Config, Result};
use leasehold_redis::RedisBackend;
use leasehold_testkit::RedisServer;

pub fn connect(url: &str) -> Result<Client> {
    Ok(Client::new(RedisBackend::connect(&Config::parse(url)?)?))
}

pub fn client(url: &str) -> Client {
    connect(url).unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

/// How many times the server ran `command` (from INFO commandstats): proves how many round trips a
/// behaviour took without timing anything.
pub fn calls(server: &RedisServer, command: &str) -> u64 {
    let info = server.command(&[b"INFO", b"commandstats"]);
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The number of keys matching `pattern` (a RESP array header `*N`).
pub fn count_keys(server: &RedisServer, pattern: &str) -> usize {
    let reply = server.command(&[b"KEYS", pattern.as_bytes()]);
    reply
        .strip_prefix('*')
        .and_then(|r| r.split("\r\n").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected KEYS reply {reply:?}"))
}

pub fn dbsize(server: &RedisServer) -> usize {
    let reply = server.command(&[b"DBSIZE"]);
    reply
        .trim()
        .strip_prefix(':')
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected DBSIZE reply {reply:?}"))
}

/// A client whose blocked waiters renew their queue place only this often, so a test can count
/// round trips without heartbeats in between.
pub fn client_with_heartbeat(url: &str, every: std::time::Duration) -> Client {
    let config = Config::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
    let backend =
        RedisBackend::connect(&config).unwrap_or_else(|e| panic!("connect to {url}: {e}"));
    Client::new(backend.with_waiter_heartbeat(every))
}

/// The server's clock in milliseconds (TIME), for planting queue entries.
pub fn server_ms(server: &RedisServer) -> u64 {
    let reply = server.command(&[b"TIME"]);
    let fields: Vec<&str> = reply.split("\r\n").collect();
    // *2, $len, seconds, $len, microseconds
    let secs: u64 = fields[2].parse().unwrap();
    let micros: u64 = fields[4].parse().unwrap();
    secs * 1000 + micros / 1000
}
