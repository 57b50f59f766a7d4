//! `redis://` and `redlock://` backends. (Placeholder until built.)

use leasehold_core::{Config, Error, Result};

#[derive(Debug)]
pub struct RedisBackend;

impl RedisBackend {
    pub fn connect(_config: &Config) -> Result<RedisBackend> {
        Err(Error::Internal("the redis backend is not built yet".into()))
    }
}

impl leasehold_core::LockBackend for RedisBackend {
    fn name(&self) -> &'static str {
        "redis"
    }
    fn try_acquire(&self, _: &leasehold_core::Key, _: leasehold_core::Ttl) -> Result<leasehold_core::RawLease> {
        Err(Error::Internal("not built yet".into()))
    }
    fn release(&self, _: &mut leasehold_core::RawLease) -> Result<()> {
        Err(Error::Internal("not built yet".into()))
    }
    fn extend(&self, _: &mut leasehold_core::RawLease, _: leasehold_core::Ttl) -> Result<()> {
        Err(Error::Internal("not built yet".into()))
    }
    fn inspect(&self, _: &leasehold_core::Key) -> Result<leasehold_core::KeyInfo> {
        Err(Error::Internal("not built yet".into()))
    }
}
