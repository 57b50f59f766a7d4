//! What every scheme's parser shares: query parameters (unknown ones rejected by name), percent
//! decoding, user info, hosts and ports, password files, and the pieces of a URL that may be secret.

use super::MAX_TIMEOUT;
use crate::error::{Error, Result};
use crate::secret::Secret;
use percent_encoding::percent_decode_str;
use std::time::Duration;

/// The longest a password file may be: a password, not a document.
const MAX_PASSWORD_FILE: u64 = 4096;

/// Everything between `://` and the last `@` before the path, and its `:`-separated pieces: whatever
/// could be a password, even in a URL too broken to parse.
pub(super) fn secret_parts(url: &str) -> Vec<&str> {
    let Some((_, rest)) = url.split_once("://") else {
        return vec![];
    };
    let Some(at) = rest.rfind('@') else {
        return vec![];
    };
    let userinfo = &rest[..at];
    let mut parts = vec![userinfo];
    if let Some((_, pw)) = userinfo.split_once(':') {
        parts.push(pw);
    }
    // Longest first, so a piece never leaves part of a longer secret showing.
    parts.sort_by_key(|p| std::cmp::Reverse(p.len()));
    parts
}

pub(super) fn invalid(msg: impl Into<String>) -> Error {
    Error::InvalidArgument(msg.into())
}

pub(super) fn decode(text: &str, what: &str) -> Result<String> {
    percent_decode_str(text)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| invalid(format!("the URL's {what} is not valid UTF-8 once decoded")))
}

pub(super) struct Query<'a> {
    /// (name, decoded value, raw pair)
    pub(super) pairs: Vec<(String, String, &'a str)>,
}

impl<'a> Query<'a> {
    pub(super) fn parse(query: &'a str, accepted: &[&str]) -> Result<Self> {
        let mut pairs: Vec<(String, String, &str)> = Vec::new();
        for raw in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = raw.split_once('=').unwrap_or((raw, ""));
            let name = decode(name, "parameter name")?;
            if !accepted.contains(&name.as_str()) {
                return Err(invalid(format!(
                    "unknown URL parameter `{}`; accepted: {}",
                    name.escape_debug(),
                    accepted.join(", ")
                )));
            }
            if pairs.iter().any(|(n, _, _)| *n == name) {
                return Err(invalid(format!("URL parameter `{name}` is given twice")));
            }
            let value = decode(value, "parameter value")?;
            pairs.push((name, value, raw));
        }
        Ok(Query { pairs })
    }

    pub(super) fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, v, _)| v.as_str())
    }

    pub(super) fn millis(&self, name: &str, default: Duration) -> Result<Duration> {
        let Some(text) = self.get(name) else {
            return Ok(default);
        };
        let ms: u64 = text.parse().map_err(|_| {
            invalid(format!(
                "`{name}` must be a whole number of milliseconds, got `{}`",
                text.escape_debug()
            ))
        })?;
        let d = Duration::from_millis(ms);
        if ms == 0 || d > MAX_TIMEOUT {
            return Err(invalid(format!(
                "`{name}` must be between 1 and {} ms, got {ms}",
                MAX_TIMEOUT.as_millis()
            )));
        }
        Ok(d)
    }
}

/// The password in a `password_file`: its content without one trailing line break. The file's
/// content never appears in an error.
pub(super) fn read_password_file(path: &str) -> Result<Secret> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| {
        invalid(format!(
            "cannot read password_file {}: {}",
            path.escape_debug(),
            e.kind()
        ))
    })?;
    let mut text = String::new();
    file.take(MAX_PASSWORD_FILE + 1)
        .read_to_string(&mut text)
        .map_err(|_| {
            invalid(format!(
                "password_file {} is not a UTF-8 text file",
                path.escape_debug()
            ))
        })?;
    if text.len() as u64 > MAX_PASSWORD_FILE {
        return Err(invalid(format!(
            "password_file {} is longer than {MAX_PASSWORD_FILE} bytes",
            path.escape_debug()
        )));
    }
    let password = text
        .strip_suffix("\r\n")
        .or_else(|| text.strip_suffix('\n'))
        .unwrap_or(&text);
    if password.is_empty() {
        return Err(invalid(format!(
            "password_file {} is empty",
            path.escape_debug()
        )));
    }
    Ok(Secret::new(password))
}

/// `user:password`, `:password`, `user` (each percent-decoded; empty parts are absent).
pub(super) fn parse_userinfo(userinfo: Option<&str>) -> Result<(Option<String>, Option<Secret>)> {
    let Some(info) = userinfo else {
        return Ok((None, None));
    };
    let (user, pw) = match info.split_once(':') {
        Some((u, p)) => (u, Some(p)),
        None => (info, None),
    };
    let user = decode(user, "user name")?;
    let pw = pw.map(|p| decode(p, "password")).transpose()?;
    Ok((
        (!user.is_empty()).then_some(user),
        pw.filter(|p| !p.is_empty()).map(Secret::new),
    ))
}

pub(super) fn split_host_port(text: &str) -> Result<(String, Option<u16>)> {
    let (host, port) = if let Some(v6) = text.strip_prefix('[') {
        let (host, after) = v6
            .split_once(']')
            .ok_or_else(|| invalid("an IPv6 host in the URL lacks its closing `]`"))?;
        match after {
            "" => (host, None),
            p => (
                host,
                Some(
                    p.strip_prefix(':')
                        .ok_or_else(|| invalid("unexpected text after an IPv6 host in the URL"))?,
                ),
            ),
        }
    } else {
        match text.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (text, None),
        }
    };
    if host.is_empty() {
        return Err(invalid("the URL names no host"));
    }
    let host = decode(host, "host")?;
    if host
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || "/?#@".contains(c))
    {
        return Err(invalid(
            "the URL's host name has characters a host cannot have",
        ));
    }
    let port = match port {
        None => None,
        // Never echo the port text: in a mangled URL it may be a piece of the password.
        Some(p) => Some(
            p.parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| invalid("the URL has an invalid port (expected 1 to 65535)"))?,
        ),
    };
    Ok((host, port))
}
