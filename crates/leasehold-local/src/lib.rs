//! `file:///dir`: leases shared by processes on one host through files. (Placeholder until built.)

use leasehold_core::{Config, Error, Result};

#[derive(Debug)]
pub struct LocalBackend;

impl LocalBackend {
    pub fn open(_config: &Config) -> Result<LocalBackend> {
        Err(Error::Internal("the local backend is not built yet".into()))
    }
}
