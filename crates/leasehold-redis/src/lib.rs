//! `redis://` and `redlock://` backends. (Placeholder until built.)

use leasehold_core::{Config, Error, Result};

#[derive(Debug)]
pub struct RedisBackend;

impl RedisBackend {
    pub fn connect(_config: &Config) -> Result<RedisBackend> {
        Err(Error::Internal("the redis backend is not built yet".into()))
    }
}
