//! `leasehold_client`: one backend, shared by threads, rebuilt in a child after fork().

use crate::boundary::{Redact, Secrets};
use leasehold::fork::{self, PerProcess};
use leasehold::interrupt::Interrupts;
use leasehold::{Client, Config, Error, Result};
use std::borrow::Cow;
use std::mem::ManuallyDrop;
use std::sync::{Arc, Mutex};

/// A connection to one backend, chosen by the URL given to `leasehold_client_open`.
///
/// Opaque. Thread-safe: share one client between all threads of a process. Owned by the caller,
/// who frees it with `leasehold_client_free`; leases taken through it keep it alive, so a client
/// and its leases may be freed in either order. After fork() a client keeps working in the child:
/// on its first call there it connects anew and leaves the parent's connections untouched.
#[allow(non_camel_case_types)]
pub struct leasehold_client {
    config: Config,
    secrets: Arc<Secrets>,
    /// The process `opened` belongs to.
    pid: u32,
    /// The client connected by `leasehold_client_open`, used without a lock by its own process.
    /// Never dropped in another one (see `Drop`).
    opened: ManuallyDrop<Client>,
    /// A fork() child's own client, made on its first call there: None until connected, and after a
    /// reconnect failed (the next call tries again). Per process, so a child never takes a lock its
    /// parent (or a parent's thread, at the fork) held.
    forked: PerProcess<Mutex<Option<Client>>>,
    /// Ends the waits of `opened` and of the clients made in fork() children
    /// (`leasehold_client_interrupt`).
    interrupts: Arc<Interrupts>,
}

impl leasehold_client {
    /// The client behind a pointer from C, or InvalidArgument for NULL.
    pub(crate) fn live<'a>(client: *const leasehold_client) -> Result<&'a leasehold_client> {
        // SAFETY: non-NULL client pointers are live handles from this library (header contract).
        unsafe { client.as_ref() }.ok_or_else(|| Error::invalid("client is NULL"))
    }

    /// Parses `url` and connects: the handle behind `leasehold_client_open` and the persistent cache.
    pub(crate) fn open(url: &str) -> Result<Arc<leasehold_client>> {
        let config = Config::parse(url)?;
        let secrets = Arc::new(Secrets::new(config.secrets()));
        let client = leasehold::connect_config(&config).map_err(|e| secrets.redact(e))?;
        let interrupts = client.interrupts().clone();
        Ok(Arc::new(leasehold_client {
            config,
            secrets,
            pid: fork::pid(),
            opened: ManuallyDrop::new(client),
            forked: PerProcess::new(),
            interrupts,
        }))
    }

    /// This process's client: the one opened here, or a fresh one if we are a fork() child.
    pub(crate) fn current(&self) -> Result<Cow<'_, Client>> {
        let pid = fork::pid();
        if pid == self.pid {
            return Ok(Cow::Borrowed(&self.opened));
        }
        let (slot, _) = self.forked.get(|| Mutex::new(None));
        if let Some(client) = lock(slot).clone() {
            return Ok(Cow::Owned(client));
        }
        // Connected without the lock held: a connect takes up to its timeout, and a process forked
        // meanwhile by another thread would inherit the lock held. Another thread of this process
        // may connect at the same time: the first to finish is kept, the other's client closed.
        let client = leasehold::connect_config(&self.config)
            .map_err(|e| self.redacted(e))?
            .with_interrupts(self.interrupts.clone());
        Ok(Cow::Owned(lock(slot).get_or_insert(client).clone()))
    }

    /// Ends every wait in progress on this handle (see `leasehold_client_interrupt`): one atomic
    /// increment, nothing else.
    pub(crate) fn interrupt(&self) {
        self.interrupts.interrupt();
    }

    pub(crate) fn redacted(&self, error: Error) -> Error {
        self.secrets.redact(error)
    }

    /// What masks this client's errors, for the leases taken through it.
    pub(crate) fn secrets(&self) -> Arc<Secrets> {
        self.secrets.clone()
    }
}

impl Drop for leasehold_client {
    fn drop(&mut self) {
        let pid = fork::pid();
        // SAFETY: `opened` is taken once, here, and never used again.
        let opened = unsafe { ManuallyDrop::take(&mut self.opened) };
        if self.pid == pid {
            drop(opened);
        } else {
            fork::keep_forever(opened);
        }
        // `forked` parks a value of another process by itself when dropped.
    }
}

fn lock(slot: &Mutex<Option<Client>>) -> std::sync::MutexGuard<'_, Option<Client>> {
    slot.lock().unwrap_or_else(|p| p.into_inner())
}
