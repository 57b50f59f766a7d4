//! Property tests of every input boundary in core: the URL parser never panics, never echoes
//! a password, and gives back exactly what a valid URL says; key, TTL and wait validation accept
//! exactly the documented ranges and never panic. `PROPTEST_CASES=100000 cargo test -p leasehold-core
//! --test fuzz_inputs --release` runs a longer campaign; CI runs the default (256 cases per property).

use leasehold_core::config::{BackendConfig, DEFAULT_REDIS_PORT};
use leasehold_core::{check_wait, Config, ErrorKind, Key, Ttl, MAX_KEY_LEN, MAX_TTL, MAX_WAIT};
use proptest::prelude::*;
use std::time::Duration;

/// Passwords from an alphabet that includes every URL metacharacter, long enough that finding one in
/// an error cannot be a coincidence.
fn password() -> impl Strategy<Value = String> {
    "[A-Za-z0-9@:/?#%&=+ ._~!$'()*,;\\[\\]-]{10,24}".prop_filter("not all blanks", |p| {
        p.chars().filter(|c| c.is_ascii_alphanumeric()).count() >= 6
    })
}

fn encode(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string()
}

const SCHEMES: &[&str] = &[
    "redis",
    "rediss",
    "redis+cluster",
    "rediss+cluster",
    "redis+sentinel",
    "rediss+sentinel",
    "redlock",
    "redlocks",
    "redis+unix",
    "postgres",
    "postgresql",
    "file",
    "mysql",
    "",
];

proptest! {
    #[test]
    fn the_parser_never_panics(url in "\\PC{0,200}") {
        let _ = Config::parse(&url);
    }

    #[test]
    fn arbitrary_bytes_after_a_scheme_never_panic(
        scheme in prop::sample::select(SCHEMES),
        rest in "[ -~]{0,120}",
    ) {
        let _ = Config::parse(&format!("{scheme}://{rest}"));
    }

    #[test]
    fn passwords_never_show(
        scheme in prop::sample::select(SCHEMES),
        pw in password(),
        raw in any::<bool>(),
        tail in "[ -~]{0,40}",
    ) {
        let given = if raw { pw.clone() } else { encode(&pw) };
        let url = format!("{scheme}://user:{given}@host{tail}");
        let shown = match Config::parse(&url) {
            Ok(c) => format!("{c:?} {c} {}", c.describe()),
            Err(e) => format!("{e:?} {e}"),
        };
        for secret in [&pw, &given, &encode(&pw)] {
            prop_assert!(!shown.contains(secret.as_str()), "{url} -> {shown}");
        }
    }

    #[test]
    fn valid_redis_urls_round_trip(
        host in "[a-z][a-z0-9-]{0,20}(\\.[a-z][a-z0-9-]{0,10}){0,2}",
        port in proptest::option::of(1u16..),
        db in 0i64..100,
        pw in proptest::option::of(password()),
        prefix in "[a-z:]{0,10}",
        connect in 1u64..600_000,
        io in 1u64..600_000,
        pool in 1u32..=1024,
    ) {
        let auth = pw.as_ref().map(|p| format!(":{}@", encode(p))).unwrap_or_default();
        let port_part = port.map(|p| format!(":{p}")).unwrap_or_default();
        let url = format!(
            "redis://{auth}{host}{port_part}/{db}?prefix={}&connect_timeout_ms={connect}&io_timeout_ms={io}&pool_size={pool}",
            encode(&prefix)
        );
        let c = Config::parse(&url).map_err(|e| TestCaseError::fail(format!("{url}: {e}")))?;
        let BackendConfig::Redis { server, tls } = &c.backend else {
            return Err(TestCaseError::fail("not a Redis config"));
        };
        prop_assert!(!tls);
        prop_assert_eq!(&server.host, &host);
        prop_assert_eq!(server.port, port.unwrap_or(DEFAULT_REDIS_PORT));
        prop_assert_eq!(server.db, db);
        prop_assert_eq!(server.password.as_ref().map(|p| p.expose().to_owned()), pw);
        prop_assert_eq!(&c.prefix, &prefix);
        prop_assert_eq!(c.connect_timeout, Duration::from_millis(connect));
        prop_assert_eq!(c.io_timeout, Duration::from_millis(io));
        prop_assert_eq!(c.pool_size, pool);
        // What it describes parses again to the same servers (without the password it hides).
        let again = Config::parse(&c.describe()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let BackendConfig::Redis { server: s2, .. } = &again.backend else {
            return Err(TestCaseError::fail("describe() is not a Redis URL"));
        };
        prop_assert_eq!((&s2.host, s2.port, s2.db), (&server.host, server.port, server.db));
    }

    #[test]
    fn keys_accept_exactly_1_to_1024_bytes(key in proptest::collection::vec(any::<u8>(), 0..1100)) {
        let result = Key::new(&key);
        prop_assert_eq!(result.is_ok(), (1..=MAX_KEY_LEN).contains(&key.len()));
        if let Err(e) = result {
            prop_assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        }
        if let Ok(k) = Key::new(&key) {
            // The display form stays printable and short, whatever the bytes.
            let shown = format!("{k} {k:?}");
            prop_assert!(!shown.chars().any(|c| c.is_control()));
            prop_assert!(shown.len() < 1024);
        }
    }

    #[test]
    fn ttls_and_waits_accept_exactly_their_ranges(ms in any::<u64>(), nanos in any::<u64>()) {
        let max = MAX_TTL.as_millis() as u64;
        prop_assert_eq!(Ttl::from_millis(ms).is_ok(), (1..=max).contains(&ms));
        let d = Duration::from_nanos(nanos);
        let ttl = Ttl::new(d);
        prop_assert_eq!(ttl.is_ok(), !d.is_zero() && d <= MAX_TTL);
        if let Ok(t) = ttl {
            prop_assert!(t.as_duration() >= d, "never shortened");
            prop_assert!(t.drift() < t.as_duration() + Duration::from_millis(3));
        }
        prop_assert_eq!(check_wait(d).is_ok(), d <= MAX_WAIT);
        let _ = check_wait(Duration::from_millis(ms));
        let _ = Ttl::new(Duration::from_secs(ms));
    }
}
