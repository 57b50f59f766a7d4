//! `leasehold_client_stats_json` and `leasehold_client_metrics`: the client's counters for C and PHP.

use crate::boundary;
use crate::handle::leasehold_client;
use crate::lent;
use leasehold::{Client, Result};
use std::ffi::c_char;

/// The client of this process behind `client` (connecting anew in a fork() child, whose counters
/// therefore start from zero).
fn current(client: *const leasehold_client) -> Result<Client> {
    let handle = leasehold_client::live(client)?;
    handle.current().map(std::borrow::Cow::into_owned)
}

/// The client's counters and histograms as one JSON object (a snapshot; makes no network call):
///
/// `{"acquire_attempts":N,"acquired":N,"not_acquired":N,"releases_ok":N,"releases_lost":N,`
/// `"extends_ok":N,"extends_lost":N,"expired":N,"keepalive_renewals":N,"keepalive_failures":N,`
/// `"retries":N,"errors":{"not_acquired":N,"lost":N,"unavailable":N,"invalid_argument":N,`
/// `"internal":N},"wait_seconds":H,"hold_seconds":H,"round_trip_seconds":H}` where each histogram
/// H is `{"count":N,"sum":seconds,"buckets":[[upper_bound_seconds,cumulative_count],…,["+Inf",N]]}`.
/// New members may be added in later versions; ignore the ones you do not know.
///
/// What is counted: `acquire_attempts` every acquire that reached the backend; `acquired` /
/// `not_acquired` its outcome (contention); `releases_ok` / `releases_lost`, `extends_ok` /
/// `extends_lost` (keep-alive renewals that found the lease lost included); `expired` leases found
/// lost after their local deadline had passed; `keepalive_renewals` / `keepalive_failures`;
/// `retries` extra attempts inside waits and multi-node rounds; `errors` failed calls by kind. The
/// counts cover every handle sharing this client (all threads, and every reference of a persistent
/// client). In a fork() child the client reconnects and its counts start from zero.
///
/// Returns NULL (with `leasehold_last_error()` set) for a NULL `client`, and in a fork() child if
/// reconnecting fails. The string is owned by the library: do not free it; it stays valid until
/// the next leasehold call on this thread (copy it to keep it). Thread-safe.
///
/// # Safety
/// `client` is NULL or a live client.
#[no_mangle]
pub unsafe extern "C" fn leasehold_client_stats_json(
    client: *const leasehold_client,
) -> *const c_char {
    boundary::value("leasehold_client_stats_json", std::ptr::null(), || {
        lent::lend(current(client)?.stats().to_json())
    })
}

/// The `retries` member of `leasehold_client_stats_json` (extra attempts inside waits and
/// multi-node rounds, so far), read alone: a caller that reports the retries of each acquire reads
/// it before and after the acquire, without building and parsing the JSON of every counter. 0 for
/// a NULL `client` (with `leasehold_last_error()` set), and in a fork() child if reconnecting
/// fails, where the counts start from zero anyway. Makes no network call. Thread-safe.
///
/// # Safety
/// `client` is NULL or a live client.
#[no_mangle]
pub unsafe extern "C" fn leasehold_client_retries(client: *const leasehold_client) -> u64 {
    boundary::value("leasehold_client_retries", 0, || {
        Ok(current(client)?.retries())
    })
}

/// The same counters in the Prometheus text exposition format (version 0.0.4), ready to serve as
/// the body of a `/metrics` response (`Content-Type: text/plain; version=0.0.4`): counters named
/// `leasehold_<counter>_total`, `leasehold_errors_total{kind="…"}`, and histograms
/// `leasehold_wait_seconds`, `leasehold_hold_seconds`, `leasehold_round_trip_seconds`. Every series
/// carries the labels `backend` (such as "local" or "redis") and `prefix` (the URL's key prefix),
/// never a key or a password. Makes no network call.
///
/// NULL, ownership, lifetime and fork() as for `leasehold_client_stats_json`. Thread-safe.
///
/// # Safety
/// `client` is NULL or a live client.
#[no_mangle]
pub unsafe extern "C" fn leasehold_client_metrics(
    client: *const leasehold_client,
) -> *const c_char {
    boundary::value("leasehold_client_metrics", std::ptr::null(), || {
        lent::lend(current(client)?.prometheus())
    })
}
