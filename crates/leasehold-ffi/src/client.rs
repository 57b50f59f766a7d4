//! `leasehold_client`: one backend, shared by threads, rebuilt in a child after fork().

use crate::boundary;
use crate::fork;
use crate::lease::leasehold_lease;
use crate::persistent;
use crate::status::leasehold_status;
use leasehold::{check_wait, Client, Config, Error, Key, Result, Ttl};
use std::ffi::c_char;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// A connection to one backend, chosen by the URL given to `leasehold_client_open`.
///
/// Opaque. Thread-safe: share one client between all threads of a process. Owned by the caller,
/// who frees it with `leasehold_client_free`; leases taken through it keep it alive, so a client
/// and its leases may be freed in either order. After fork() a client keeps working in the child:
/// on its first call there it connects anew and leaves the parent's connections untouched.
#[allow(non_camel_case_types)]
pub struct leasehold_client {
    config: Config,
    secrets: Vec<String>,
    connection: Mutex<Connection>,
}

struct Connection {
    /// The process `client` belongs to.
    pid: u32,
    /// None after a reconnect in a child failed; the next call tries again.
    client: Option<Client>,
}

impl leasehold_client {
    fn lock(&self) -> MutexGuard<'_, Connection> {
        self.connection.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Parses `url` and connects: the handle behind `leasehold_client_open` and the persistent cache.
    pub(crate) fn open(url: &str) -> Result<Arc<leasehold_client>> {
        let config = Config::parse(url)?;
        let secrets = config.secrets();
        let client =
            leasehold::connect_config(&config).map_err(|e| boundary::redacted(e, &secrets))?;
        Ok(Arc::new(leasehold_client {
            config,
            secrets,
            connection: Mutex::new(Connection {
                pid: fork::pid(),
                client: Some(client),
            }),
        }))
    }

    /// This process's client: the one opened here, or a fresh one if we are a fork() child.
    pub(crate) fn current(&self) -> Result<Client> {
        let mut connection = self.lock();
        let pid = fork::pid();
        if connection.pid != pid {
            if let Some(inherited) = connection.client.take() {
                fork::keep_forever(inherited);
            }
            connection.pid = pid;
        }
        if let Some(client) = &connection.client {
            return Ok(client.clone());
        }
        let client = leasehold::connect_config(&self.config).map_err(|e| self.redacted(e))?;
        connection.client = Some(client.clone());
        Ok(client)
    }

    pub(crate) fn redacted(&self, error: Error) -> Error {
        boundary::redacted(error, &self.secrets)
    }
}

impl Drop for leasehold_client {
    fn drop(&mut self) {
        let connection = self.connection.get_mut().unwrap_or_else(|p| p.into_inner());
        if connection.pid != fork::pid() {
            if let Some(inherited) = connection.client.take() {
                fork::keep_forever(inherited);
            }
        }
    }
}

/// Opens a client for the backend `url` names (`file:///dir`, `redis://…`, `redlock://…`,
/// `postgres://…`; see the README for parameters).
///
/// `url` must be a NUL-terminated UTF-8 string; it is copied, so the caller may free it at once.
/// On `LEASEHOLD_OK`, `*client_out` receives a new client that the caller owns and must free with
/// `leasehold_client_free`; on any other status `*client_out` is left as it was.
/// NULL `url` or `client_out`: `LEASEHOLD_INVALID_ARGUMENT`. A bad URL: `LEASEHOLD_INVALID_ARGUMENT`;
/// a backend that does not answer: `LEASEHOLD_UNAVAILABLE` within the URL's connect timeout.
/// Error messages never contain the URL's password. Thread-safe.
///
/// # Safety
/// `url` is NULL or a NUL-terminated string; `client_out` is NULL or points to writable storage.
#[no_mangle]
pub unsafe extern "C" fn leasehold_client_open(
    url: *const c_char,
    client_out: *mut *mut leasehold_client,
) -> leasehold_status {
    boundary::call("leasehold_client_open", || {
        let out = boundary::out(client_out, "client_out")?;
        let url = boundary::text(url, "url")?;
        let handle = leasehold_client::open(url)?;
        *out = Arc::into_raw(handle).cast_mut();
        Ok(())
    })
}

/// Like `leasehold_client_open`, but shares one client per distinct `url` (compared as text) in this
/// process: for php-fpm and other hosts that keep the library loaded while their own objects come
/// and go (a PHP request), so each worker connects once instead of once per request.
///
/// Each successful call gives a new reference in `*client_out` (calls for one URL may return the
/// same pointer value), which the caller owns and frees with `leasehold_client_free` as usual, once
/// per successful call; freeing drops only that reference. The shared client itself (its
/// connections, its counters in `leasehold_client_stats_json`) lives until the process exits, and
/// so that the cache outlives hosts that dlclose() the library between uses (PHP's FFI without
/// preloading), the first call pins the library in memory (RTLD_NODELETE). The first call for a
/// URL connects (and may fail like `leasehold_client_open`; a failure is not remembered, so the
/// next call tries again); later calls make no network call. A fork() child gets clients of its
/// own on its first call for each URL, never the parent's.
/// NULL `url` or `client_out`, or a bad URL: `LEASEHOLD_INVALID_ARGUMENT`. Thread-safe.
///
/// # Safety
/// As for `leasehold_client_open`.
#[no_mangle]
pub unsafe extern "C" fn leasehold_client_open_persistent(
    url: *const c_char,
    client_out: *mut *mut leasehold_client,
) -> leasehold_status {
    boundary::call("leasehold_client_open_persistent", || {
        let out = boundary::out(client_out, "client_out")?;
        let url = boundary::text(url, "url")?;
        let handle = persistent::open(url)?;
        *out = Arc::into_raw(handle).cast_mut();
        Ok(())
    })
}

/// Gives up the caller's reference to `client`. Its connections close once no lease taken through
/// it is left (leases keep it alive) and, for a client from `leasehold_client_open_persistent`,
/// never before the process exits (the process-wide cache keeps it). NULL is a no-op. In a fork()
/// child, the connections the client inherited from the parent are left open and untouched.
///
/// # Safety
/// `client` is NULL or a pointer from `leasehold_client_open` not yet freed; it must not be used
/// after this call, by any thread.
#[no_mangle]
pub unsafe extern "C" fn leasehold_client_free(client: *mut leasehold_client) {
    boundary::quietly("leasehold_client_free", || {
        if !client.is_null() {
            // SAFETY: the pointer came from Arc::into_raw in leasehold_client_open.
            drop(unsafe { Arc::from_raw(client.cast_const()) });
        }
    });
}

/// One attempt to take `key` for `ttl_ms` milliseconds.
///
/// `key` points to `key_len` bytes (1 to 1024, any bytes including NUL; not NUL-terminated), which
/// are copied. `ttl_ms` is 1 to 604800000 (7 days). On `LEASEHOLD_OK`, `*lease_out` receives a new
/// lease that the caller owns and must free with `leasehold_lease_free`; on any other status it is
/// left as it was. `LEASEHOLD_NOT_ACQUIRED` if someone else holds the key.
/// NULL `client`, `key` or `lease_out`, `key_len` of 0 or above 1024 (checked before `key` is
/// read), or `ttl_ms` out of range: `LEASEHOLD_INVALID_ARGUMENT`.
/// Thread-safe: any number of threads may call this on one client at once.
///
/// # Safety
/// `client` is NULL or a live client; `key` is NULL or points to `key_len` readable bytes;
/// `lease_out` is NULL or points to writable storage.
#[no_mangle]
pub unsafe extern "C" fn leasehold_try_acquire(
    client: *const leasehold_client,
    key: *const c_char,
    key_len: usize,
    ttl_ms: u64,
    lease_out: *mut *mut leasehold_lease,
) -> leasehold_status {
    boundary::call("leasehold_try_acquire", || {
        acquire(client, key, key_len, ttl_ms, None, lease_out)
    })
}

/// Like `leasehold_try_acquire`, but waits up to `wait_ms` milliseconds (0 to 604800000) for the
/// key to become free; `LEASEHOLD_NOT_ACQUIRED` when the wait runs out. Returns no later than
/// `wait_ms` plus one I/O timeout of the URL. A `wait_ms` of 0 makes a single attempt.
/// Thread-safe; blocks only the calling thread.
///
/// # Safety
/// As for `leasehold_try_acquire`.
#[no_mangle]
pub unsafe extern "C" fn leasehold_acquire(
    client: *const leasehold_client,
    key: *const c_char,
    key_len: usize,
    ttl_ms: u64,
    wait_ms: u64,
    lease_out: *mut *mut leasehold_lease,
) -> leasehold_status {
    boundary::call("leasehold_acquire", || {
        acquire(client, key, key_len, ttl_ms, Some(wait_ms), lease_out)
    })
}

fn acquire(
    client: *const leasehold_client,
    key: *const c_char,
    key_len: usize,
    ttl_ms: u64,
    wait_ms: Option<u64>,
    lease_out: *mut *mut leasehold_lease,
) -> Result<()> {
    let out = boundary::out(lease_out, "lease_out")?;
    if client.is_null() {
        return Err(Error::invalid("client is NULL"));
    }
    let key = Key::new(boundary::key(key, key_len)?)?;
    // Validated before a fork() child reconnects, so a bad argument is reported as such.
    let ttl = Ttl::from_millis(ttl_ms)?.as_duration();
    let wait = wait_ms
        .map(|ms| check_wait(Duration::from_millis(ms)))
        .transpose()?;
    // SAFETY: a non-NULL client pointer came from leasehold_client_open and is still owned by the
    // caller; taking a new reference for the lease keeps it alive beyond leasehold_client_free.
    let handle = unsafe {
        Arc::increment_strong_count(client);
        Arc::from_raw(client)
    };
    let backend = handle.current()?;
    let lease = match wait {
        None => backend.try_acquire(key, ttl),
        Some(wait) => backend.acquire(key, ttl, wait),
    }
    .map_err(|e| handle.redacted(e))?;
    *out = Box::into_raw(Box::new(leasehold_lease::new(lease, handle)));
    Ok(())
}
