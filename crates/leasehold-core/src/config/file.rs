//! `file:///absolute/dir`: the local backend's directory.

use super::params::{decode, invalid};
use super::BackendConfig;
use crate::error::Result;
use std::path::PathBuf;

pub(super) fn parse_file(rest: &str) -> Result<BackendConfig> {
    // rest is "host/path"; only an empty host or localhost makes sense for files on this machine.
    let slash = rest.find('/').unwrap_or(rest.len());
    let (host, path) = rest.split_at(slash);
    if !(host.is_empty() || host.eq_ignore_ascii_case("localhost")) {
        return Err(invalid(
            "a file:// URL must name a local directory: file:///absolute/dir",
        ));
    }
    let path = decode(path, "path")?;
    if !path.starts_with('/') || path.len() < 2 {
        return Err(invalid(
            "a file:// URL needs an absolute directory: file:///absolute/dir",
        ));
    }
    if path.contains('\0') {
        return Err(invalid("the directory in a file:// URL contains NUL"));
    }
    Ok(BackendConfig::Local {
        dir: PathBuf::from(path),
    })
}
