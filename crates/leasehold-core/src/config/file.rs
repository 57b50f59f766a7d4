//! `file:///absolute/dir`: the local backend's directory.

use super::params::{decode, invalid, Query};
use super::BackendConfig;
use crate::error::Result;
use std::path::PathBuf;

/// Parameters of `file://` URLs besides the common ones.
///
/// `single_host=true`: the user vouches that no other host writes the directory, so the local
/// backend accepts it on a file system it does not know to be local (ntfs-3g, fuse-overlayfs, …).
pub const FILE_PARAMS: &[&str] = &["single_host"];

pub(super) fn parse_file(rest: &str, query: &Query<'_>) -> Result<BackendConfig> {
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
    let single_host = match query.get("single_host") {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(invalid(format!(
                "`single_host` must be `true` or `false`, got `{}`",
                other.escape_debug()
            )))
        }
    };
    Ok(BackendConfig::Local {
        dir: PathBuf::from(path),
        single_host,
    })
}
