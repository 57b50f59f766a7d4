//! A small connection pool that starts no threads.
//!
//! r2d2 keeps a `scheduled-thread-pool` whose parked workers live in parking_lot's global table. After
//! `fork()` those threads are gone but their entries are not, and the child's next thread creation can
//! spin forever re-hashing that table: a process that forks after opening a client (a PHP worker
//! forking with `pcntl_fork`, a C server) could never connect again. This pool does only what
//! Leasehold needs — a bounded number of connections, made on demand, a bounded checkout wait,
//! broken ones dropped on return — with std's futex-based `Mutex` and `Condvar`, so a forked child can
//! build a fresh pool and use it.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How a pool makes and checks connections (the shape of r2d2's trait of the same name).
pub trait ManageConnection: Send + Sync + 'static {
    type Connection: Send + 'static;
    type Error: fmt::Display;

    /// Opens a connection; must itself be bounded by a connect timeout.
    fn connect(&self) -> Result<Self::Connection, Self::Error>;

    /// Whether a connection coming back to the pool must be dropped instead of reused.
    fn has_broken(&self, conn: &mut Self::Connection) -> bool;
}

/// Why a checkout failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum PoolError<E> {
    /// Every connection stayed in use for the whole checkout wait.
    Timeout(Duration),
    /// Opening a new connection failed.
    Connect(E),
}

impl<E: fmt::Display> fmt::Display for PoolError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolError::Timeout(d) => write!(
                f,
                "every pooled connection stayed busy for {} ms (raise pool_size?)",
                d.as_millis()
            ),
            PoolError::Connect(e) => write!(f, "{e}"),
        }
    }
}

struct State<C> {
    idle: Vec<C>,
    /// Connections in existence: idle, checked out, or being opened.
    open: usize,
}

struct Shared<M: ManageConnection> {
    manager: M,
    max_size: usize,
    state: Mutex<State<M::Connection>>,
    returned: Condvar,
}

impl<M: ManageConnection> Shared<M> {
    fn lock(&self) -> MutexGuard<'_, State<M::Connection>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A pool of at most `max_size` connections. Cheap to clone; clones share the connections.
pub struct Pool<M: ManageConnection>(Arc<Shared<M>>);

impl<M: ManageConnection> Clone for Pool<M> {
    fn clone(&self) -> Self {
        Pool(self.0.clone())
    }
}

impl<M: ManageConnection + fmt::Debug> fmt::Debug for Pool<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.0.lock();
        f.debug_struct("Pool")
            .field("manager", &self.0.manager)
            .field("max_size", &self.0.max_size)
            .field("open", &state.open)
            .field("idle", &state.idle.len())
            .finish()
    }
}

impl<M: ManageConnection> Pool<M> {
    /// A pool that opens connections on demand (none up front), at most `max_size` (at least 1).
    pub fn new(manager: M, max_size: u32) -> Pool<M> {
        Pool(Arc::new(Shared {
            manager,
            max_size: (max_size as usize).max(1),
            state: Mutex::new(State {
                idle: Vec::new(),
                open: 0,
            }),
            returned: Condvar::new(),
        }))
    }

    pub fn manager(&self) -> &M {
        &self.0.manager
    }

    pub fn max_size(&self) -> usize {
        self.0.max_size
    }

    /// Connections open now (idle or in use).
    pub fn open_connections(&self) -> usize {
        self.0.lock().open
    }

    /// An idle connection (most recently returned first), or a new one while fewer than `max_size`
    /// exist, waiting at most `timeout` for one to come back. A connection that cannot be opened is
    /// tried again (1 ms, doubling to 100 ms) until `timeout`, so a server restart shorter than that is
    /// ridden out; the last connect error is returned when it runs out.
    pub fn get_timeout(
        &self,
        timeout: Duration,
    ) -> Result<PooledConnection<M>, PoolError<M::Error>> {
        let start = Instant::now();
        let deadline = start.checked_add(timeout).unwrap_or(start);
        let mut pause = Duration::from_millis(1);
        let mut state = self.0.lock();
        loop {
            if let Some(conn) = state.idle.pop() {
                return Ok(self.wrap(conn));
            }
            if state.open < self.0.max_size {
                state.open += 1;
                drop(state);
                // Connecting can take up to the connect timeout: never with the lock held.
                match self.0.manager.connect() {
                    Ok(conn) => return Ok(self.wrap(conn)),
                    Err(e) => {
                        self.0.lock().open -= 1;
                        self.0.returned.notify_one();
                        let left = deadline.saturating_duration_since(Instant::now());
                        if left.is_zero() {
                            return Err(PoolError::Connect(e));
                        }
                        std::thread::sleep(pause.min(left));
                        pause = (pause * 2).min(Duration::from_millis(100));
                    }
                }
                state = self.0.lock();
                continue;
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(PoolError::Timeout(timeout));
            }
            state = self
                .0
                .returned
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Drops every idle connection (after the server was found restarted, say).
    pub fn clear_idle(&self) {
        let idle = {
            let mut state = self.0.lock();
            let idle = std::mem::take(&mut state.idle);
            state.open -= idle.len();
            idle
        };
        drop(idle);
        self.0.returned.notify_all();
    }

    fn wrap(&self, conn: M::Connection) -> PooledConnection<M> {
        PooledConnection {
            pool: self.0.clone(),
            conn: Some(conn),
        }
    }
}

/// A checked-out connection; goes back to its pool on drop (or is closed if it has broken). It keeps
/// the pool alive, so it may outlive every `Pool` handle (a lease holding its session, say).
pub struct PooledConnection<M: ManageConnection> {
    pool: Arc<Shared<M>>,
    conn: Option<M::Connection>,
}

impl<M: ManageConnection> PooledConnection<M> {
    /// Closes the connection instead of returning it to the pool.
    pub fn discard(mut self) {
        if let Some(conn) = self.conn.take() {
            drop(conn);
            self.pool.lock().open -= 1;
            self.pool.returned.notify_one();
        }
    }
}

impl<M: ManageConnection> Deref for PooledConnection<M> {
    type Target = M::Connection;
    fn deref(&self) -> &M::Connection {
        // Only `discard` and `drop` take the connection, and both consume the handle.
        self.conn.as_ref().expect("connection present until drop")
    }
}

impl<M: ManageConnection> DerefMut for PooledConnection<M> {
    fn deref_mut(&mut self) -> &mut M::Connection {
        self.conn.as_mut().expect("connection present until drop")
    }
}

impl<M: ManageConnection> Drop for PooledConnection<M> {
    fn drop(&mut self) {
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        let broken = self.pool.manager.has_broken(&mut conn);
        if broken {
            drop(conn);
            self.pool.lock().open -= 1;
        } else {
            self.pool.lock().idle.push(conn);
        }
        self.pool.returned.notify_one();
    }
}

impl<M: ManageConnection> fmt::Debug for PooledConnection<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PooledConnection")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[derive(Default)]
    struct Counter {
        made: AtomicUsize,
        fail: std::sync::atomic::AtomicBool,
    }

    impl ManageConnection for Counter {
        type Connection = (usize, bool);
        type Error = String;
        fn connect(&self) -> Result<(usize, bool), String> {
            if self.fail.load(Ordering::SeqCst) {
                return Err("refused".into());
            }
            Ok((self.made.fetch_add(1, Ordering::SeqCst), false))
        }
        fn has_broken(&self, conn: &mut (usize, bool)) -> bool {
            conn.1
        }
    }

    #[test]
    fn reuses_bounds_and_waits() {
        let pool = Pool::new(Counter::default(), 2);
        let a = pool.get_timeout(Duration::from_millis(10)).unwrap();
        let b = pool.get_timeout(Duration::from_millis(10)).unwrap();
        assert_eq!((a.0, b.0), (0, 1));
        let start = Instant::now();
        assert!(matches!(
            pool.get_timeout(Duration::from_millis(50)),
            Err(PoolError::Timeout(_))
        ));
        assert!(start.elapsed() >= Duration::from_millis(50));
        drop(a);
        let again = pool.get_timeout(Duration::ZERO).unwrap();
        assert_eq!(again.0, 0, "reused");
        let pool2 = pool.clone();
        let waiter =
            std::thread::spawn(move || pool2.get_timeout(Duration::from_secs(5)).map(|c| c.0));
        std::thread::sleep(Duration::from_millis(50));
        drop(b);
        assert_eq!(
            waiter.join().unwrap().unwrap(),
            1,
            "a returned connection wakes a waiter"
        );
    }

    #[test]
    fn broken_and_failed_connections_free_their_slot() {
        let pool = Pool::new(Counter::default(), 1);
        let mut a = pool.get_timeout(Duration::ZERO).unwrap();
        a.1 = true;
        drop(a);
        assert_eq!(pool.open_connections(), 0);
        assert_eq!(
            pool.get_timeout(Duration::ZERO).unwrap().0,
            1,
            "a new one replaced it"
        );
        pool.manager().fail.store(true, Ordering::SeqCst);
        pool.clear_idle();
        assert!(matches!(
            pool.get_timeout(Duration::ZERO),
            Err(PoolError::Connect(_))
        ));
        assert_eq!(pool.open_connections(), 0);
        pool.manager().fail.store(false, Ordering::SeqCst);
        let c = pool.get_timeout(Duration::ZERO).unwrap();
        c.discard();
        assert_eq!(pool.open_connections(), 0);
    }
}
