//! What every fence gate shares (PostgreSQL's, MySQL's, Redis's; see `docs/gate.md`): its error,
//! and the rules for a resource name and an SQL table name. Each SQL backend supplies only its
//! statements.

use crate::error::Error;

/// The longest resource name, in bytes: a primary key that always fits an index entry.
pub const MAX_RESOURCE_LEN: usize = 1024;

/// An SQL gate's table when none is named.
pub const DEFAULT_TABLE: &str = "leasehold_fences";

/// Why a gate did not let a write through.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GateError {
    /// A newer fence was already accepted for this resource: the caller's lease is stale, and its
    /// write must not happen (its transaction must not commit).
    #[error("stale fence for {resource:?}: {fence} is older than {stored}, already accepted")]
    Stale {
        resource: String,
        fence: u64,
        stored: u64,
    },
    /// Bad input (`InvalidArgument`) or a store error (`Unavailable`, with the store's own code).
    #[error(transparent)]
    Backend(#[from] Error),
}

impl GateError {
    pub fn is_stale(&self) -> bool {
        matches!(self, GateError::Stale { .. })
    }
}

/// The one error type's view: a stale fence is [`Error::StaleFence`] (status 7).
impl From<GateError> for Error {
    fn from(e: GateError) -> Error {
        match e {
            GateError::Stale { .. } => Error::StaleFence(e.to_string()),
            GateError::Backend(e) => e,
        }
    }
}

/// A resource is 1 to [`MAX_RESOURCE_LEN`] bytes without NUL (NUL fits some stores, not
/// PostgreSQL's text: one rule for every gate).
pub fn check_resource(resource: &[u8]) -> Result<(), GateError> {
    if resource.is_empty() || resource.len() > MAX_RESOURCE_LEN || resource.contains(&0) {
        return Err(Error::invalid(format!(
            "fence gate: a resource must be 1 to {MAX_RESOURCE_LEN} bytes without NUL (got {} bytes)",
            resource.len()
        ))
        .into());
    }
    Ok(())
}

/// Whether `s` is a plain SQL identifier (`[A-Za-z_][A-Za-z0-9_]*`) of at most `max` bytes: a
/// table name that goes into SQL text must not be able to change the statement.
pub fn is_identifier(s: &str, max: usize) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b'a'..=b'z' | b'A'..=b'Z' | b'_'))
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && s.len() <= max
}

/// An SQL gate's table: its name as given (for messages) and as it goes into SQL text, each part
/// validated ([`is_identifier`]) and quoted, so that the name is used exactly as given and cannot
/// change a statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateTable {
    name: String,
    quoted: String,
}

impl GateTable {
    /// `name`: an identifier of at most `max_len` bytes, optionally qualified by one more
    /// (`qualifier.table`, where `qualifier` says what the first part is: a schema, a database),
    /// each part enclosed in `quote`. Anything else is `InvalidArgument`.
    pub fn new(name: &str, max_len: usize, quote: char, qualifier: &str) -> Result<Self, Error> {
        let parts: Vec<&str> = name.split('.').collect();
        if parts.len() > 2 || !parts.iter().all(|p| is_identifier(p, max_len)) {
            return Err(Error::invalid(format!(
                "fence gate table {name:?}: expected an SQL identifier ([A-Za-z_][A-Za-z0-9_]*, at \
                 most {max_len} bytes), optionally as {qualifier}.table"
            )));
        }
        let quoted = parts
            .iter()
            .map(|p| format!("{quote}{p}{quote}"))
            .collect::<Vec<_>>()
            .join(".");
        Ok(GateTable {
            name: name.to_owned(),
            quoted,
        })
    }

    /// The name as given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name as it goes into SQL text.
    pub fn quoted(&self) -> &str {
        &self.quoted
    }
}

/// A fence for an SQL gate's `BIGINT` column: 1 to `i64::MAX` (0 is no lease's fence; every
/// Leasehold backend's fences fit).
pub fn sql_fence(fence: u64) -> Result<i64, GateError> {
    match i64::try_from(fence) {
        Ok(f) if f > 0 => Ok(f),
        _ => Err(Error::invalid(format!(
            "fence gate: fence {fence} is outside 1..={} (0 is no lease's fence; the column is a \
             BIGINT)",
            i64::MAX
        ))
        .into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_rules() {
        assert!(check_resource(b"order:42").is_ok());
        assert!(check_resource(&[b'r'; MAX_RESOURCE_LEN]).is_ok());
        for bad in [&b""[..], &[b'r'; MAX_RESOURCE_LEN + 1], b"a\0b"] {
            assert!(check_resource(bad).is_err());
        }
        assert!(is_identifier("leasehold_fences", 63));
        assert!(!is_identifier("1abc", 63) && !is_identifier("a-b", 63) && !is_identifier("", 63));
        assert!(!is_identifier(&"t".repeat(64), 63));
        assert_eq!(sql_fence(7).unwrap(), 7);
        assert!(sql_fence(0).is_err() && sql_fence(u64::MAX).is_err());
        let stale = GateError::Stale {
            resource: "r".into(),
            fence: 4,
            stored: 5,
        };
        assert!(stale.is_stale());
        assert_eq!(Error::from(stale).kind(), crate::ErrorKind::StaleFence);
    }
}
