//! Secrets (passwords) that must never reach a log line or an error message.

use std::fmt;

/// A password or other secret. `Debug` and `Display` print `***`; only [`Secret::expose`] gives the value.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret itself, for handing to a driver. Never format it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// The secrets of one configuration, kept for masking error messages. Reads as a slice of the
/// values (for [`redact`]); `Debug` prints only how many there are, so a struct that derives
/// `Debug` over it cannot leak one.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secrets(Vec<String>);

impl Secrets {
    pub fn new(secrets: Vec<String>) -> Self {
        Secrets(secrets)
    }
}

impl From<Vec<String>> for Secrets {
    fn from(secrets: Vec<String>) -> Self {
        Secrets(secrets)
    }
}

impl std::ops::Deref for Secrets {
    type Target = [String];

    fn deref(&self) -> &[String] {
        &self.0
    }
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secrets({} hidden)", self.0.len())
    }
}

/// Masks every occurrence of each non-empty secret in `text`, also in its percent-encoded form, since
/// drivers sometimes echo the URL they were given.
pub fn redact<S: AsRef<str>>(text: &str, secrets: &[S]) -> String {
    let mut out = text.to_owned();
    for secret in secrets.iter().map(AsRef::as_ref).filter(|s| !s.is_empty()) {
        out = out.replace(secret, "***");
        let encoded =
            percent_encoding::utf8_percent_encode(secret, percent_encoding::NON_ALPHANUMERIC)
                .to_string();
        if encoded != *secret {
            out = out.replace(&encoded, "***");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_format() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s} {s:?}"), "*** ***");
        assert_eq!(s.expose(), "hunter2");
    }

    #[test]
    fn secret_lists_never_format() {
        let s = Secrets::new(vec!["hunter2".into(), "s3cret".into()]);
        assert_eq!(format!("{s:?}"), "Secrets(2 hidden)");
        assert_eq!(redact("hunter2", &s), "***");
    }

    #[test]
    fn redact_masks_plain_and_encoded() {
        let text = "auth failed for p@ss:word and p%40ss%3Aword";
        assert_eq!(redact(text, &["p@ss:word"]), "auth failed for *** and ***");
        assert_eq!(redact("x", &[""]), "x");
    }
}
