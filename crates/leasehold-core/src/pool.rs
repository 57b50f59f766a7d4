//! A small connection pool that starts no threads.
//!
//! r2d2 keeps a `scheduled-thread-pool` whose parked workers live in parking_lot's global table. After
//! `fork()` those threads are gone but their entries are not, and the child's next thread creation can
//! spin forever re-hashing that table: a process that forks after opening a client (a PHP worker
//! forking with `pcntl_fork`, a C server) could never connect again. This pool does only what
//! Leasehold needs — a bounded number of connections, made on demand, a bounded checkout wait,
//! broken ones dropped on return — with std's futex-based `Mutex` and `Condvar`, so a forked child can
//! build a fresh pool and use it.
//!
//! It is also fork-aware itself: a child must neither use the parent's connections (two processes
//! would interleave on one socket) nor close them (a PostgreSQL connection sends Terminate on close,
//! ending the parent's session and its locks). Nor may it take the parent's lock: a thread that did
//! not survive the fork (a Redlock fan-out worker returning a connection, the keep-alive thread) may
//! have held it, and the child would wait on it for ever (seen in `tests/fork.rs` under load). So each
//! process gets a state of its own ([`crate::fork::PerProcess`]); a child leaves the parent's
//! state, lock and connections untouched.
//!
//! Every checkout is bounded by the caller's [`Deadline`]: a connect is started only with time left
//! and is given only what is left, so a checkout never outlasts the operation that asked for it.

use crate::deadline::Deadline;
use crate::retry::Retry;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How a pool makes and checks connections (the shape of r2d2's trait of the same name).
pub trait ManageConnection: Send + Sync + 'static {
    type Connection: Send + 'static;
    type Error: fmt::Display;

    /// Opens a connection within `budget` (the connect timeout, or less when the operation's
    /// deadline is nearer).
    fn connect(&self, budget: Duration) -> Result<Self::Connection, Self::Error>;

    /// Whether a connection coming back to the pool must be dropped instead of reused.
    fn has_broken(&self, conn: &mut Self::Connection) -> bool;

    /// Whether a connect error will not go away by trying again (a certificate the client refuses,
    /// a wrong password): the checkout then fails at once with it, instead of retrying until the
    /// deadline and ending on a starved attempt's timeout that hides the cause.
    fn is_permanent(&self, _error: &Self::Error) -> bool {
        false
    }
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
    /// Checkouts waiting for a connection to come back. A return wakes one only if there is one:
    /// a `Condvar` notify is a system call even with nobody waiting, and every call of a lease
    /// returns a connection.
    waiting: usize,
}

/// One process's share of a pool.
struct Local<C> {
    state: Mutex<State<C>>,
    returned: Condvar,
}

impl<C> Local<C> {
    fn new() -> Local<C> {
        Local {
            state: Mutex::new(State {
                idle: Vec::new(),
                open: 0,
                waiting: 0,
            }),
            returned: Condvar::new(),
        }
    }
}

struct Shared<M: ManageConnection> {
    manager: M,
    max_size: usize,
    local: crate::fork::PerProcess<Local<M::Connection>>,
}

impl<M: ManageConnection> Shared<M> {
    /// This process's state, made on its first use here.
    fn here(&self) -> &Local<M::Connection> {
        self.local.get(Local::new).0
    }

    fn lock(&self) -> MutexGuard<'_, State<M::Connection>> {
        self.here().state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn returned(&self) -> &Condvar {
        &self.here().returned
    }

    /// Changes the state by `change` (a connection back, or one fewer open) and wakes a waiting
    /// checkout if there is one. The waiter counted itself under the same lock it gives up only
    /// inside the `Condvar` wait, so a return that finds nobody counted has nobody to miss it.
    fn give_back(&self, change: impl FnOnce(&mut State<M::Connection>)) {
        let wake = {
            let mut state = self.lock();
            change(&mut state);
            state.waiting > 0
        };
        if wake {
            self.returned().notify_one();
        }
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
            local: crate::fork::PerProcess::new(),
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

    /// [`Pool::get`] with a deadline `timeout` from now.
    pub fn get_timeout(
        &self,
        timeout: Duration,
    ) -> Result<PooledConnection<M>, PoolError<M::Error>> {
        self.get(Deadline::after(timeout))
    }

    /// An idle connection (most recently returned first), or a new one while fewer than `max_size`
    /// exist, waiting until `deadline` for one to come back. A connection that cannot be opened is
    /// tried again ([`Retry::RECONNECT`]) while time is left, so a server restart shorter than
    /// that is ridden out; the last connect error is returned when it runs out, or at once when the
    /// manager calls it [permanent](ManageConnection::is_permanent). Each connect is
    /// given only what is left of the deadline.
    pub fn get(&self, deadline: Deadline) -> Result<PooledConnection<M>, PoolError<M::Error>> {
        let start = Instant::now();
        let mut reconnect = Retry::RECONNECT.start(deadline);
        let mut last_error = None;
        let pid = crate::fork::pid();
        let mut state = self.0.lock();
        loop {
            if let Some(conn) = state.idle.pop() {
                return Ok(self.wrap(conn, pid));
            }
            let left = deadline.remaining();
            if left.is_zero() {
                return Err(match last_error {
                    Some(e) => PoolError::Connect(e),
                    None => PoolError::Timeout(start.elapsed()),
                });
            }
            if state.open < self.0.max_size {
                state.open += 1;
                drop(state);
                // Connecting can take up to the budget: never with the lock held.
                match self.0.manager.connect(left) {
                    Ok(conn) => return Ok(self.wrap(conn, pid)),
                    Err(e) => {
                        self.0.give_back(|state| state.open -= 1);
                        let left = deadline.remaining();
                        if left.is_zero() || self.0.manager.is_permanent(&e) {
                            return Err(PoolError::Connect(e));
                        }
                        last_error = Some(e);
                        reconnect.pause();
                    }
                }
                state = self.0.lock();
                continue;
            }
            state.waiting += 1;
            state = self
                .0
                .returned()
                .wait_timeout(state, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            state.waiting -= 1;
        }
    }

    /// An idle connection if there is one now: never connects, never waits (a caller that would
    /// rather hand the call to a thread of its own than block on a connect).
    pub fn try_idle(&self) -> Option<PooledConnection<M>> {
        let conn = self.0.lock().idle.pop()?;
        Some(self.wrap(conn, crate::fork::pid()))
    }

    /// Drops every idle connection (after the server was found restarted, say).
    pub fn clear_idle(&self) {
        let (idle, wake) = {
            let mut state = self.0.lock();
            let idle = std::mem::take(&mut state.idle);
            state.open -= idle.len();
            (idle, state.waiting > 0)
        };
        drop(idle);
        if wake {
            self.0.returned().notify_all();
        }
    }

    fn wrap(&self, conn: M::Connection, pid: u32) -> PooledConnection<M> {
        PooledConnection {
            pool: self.0.clone(),
            conn: Some(conn),
            pid,
        }
    }
}

/// A checked-out connection; goes back to its pool on drop (or is closed if it has broken). It keeps
/// the pool alive, so it may outlive every `Pool` handle (a lease holding its session, say).
pub struct PooledConnection<M: ManageConnection> {
    pool: Arc<Shared<M>>,
    conn: Option<M::Connection>,
    /// The process that checked it out: in any other (a child after `fork()`) it is left alone.
    pid: u32,
}

impl<M: ManageConnection> PooledConnection<M> {
    /// Whether this connection belongs to another process (it was inherited through `fork()`).
    pub fn is_inherited(&self) -> bool {
        self.pid != crate::fork::pid()
    }
}

impl<M: ManageConnection> PooledConnection<M> {
    /// Closes the connection instead of returning it to the pool.
    pub fn discard(mut self) {
        if let Some(conn) = self.conn.take() {
            if self.is_inherited() {
                crate::fork::keep_forever(conn);
                return;
            }
            drop(conn);
            self.pool.give_back(|state| state.open -= 1);
        }
    }

    /// Takes the connection out of the pool for good: it no longer counts against `max_size` (a
    /// waiting checkout may open another at once), and the caller owns it, open, until it drops it.
    /// For a connection that must outlive its use without occupying the pool (a session that holds a
    /// detached lease until its TTL). `None` in a process that inherited it through `fork()`: there
    /// it is parked, untouched, as drop would.
    pub fn detach(mut self) -> Option<M::Connection> {
        let conn = self.conn.take()?;
        if self.is_inherited() {
            crate::fork::keep_forever(conn);
            return None;
        }
        self.pool.give_back(|state| state.open -= 1);
        Some(conn)
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
        if self.is_inherited() {
            crate::fork::keep_forever(conn);
            return;
        }
        let broken = self.pool.manager.has_broken(&mut conn);
        if broken {
            drop(conn);
            self.pool.give_back(|state| state.open -= 1);
        } else {
            self.pool.give_back(|state| state.idle.push(conn));
        }
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
        fn connect(&self, _budget: Duration) -> Result<(usize, bool), String> {
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
    fn a_fork_child_never_waits_on_a_lock_the_parent_held() {
        // A thread of the parent (a Redlock fan-out worker returning a connection, say) holds the
        // pool's lock at the fork; the child has no such thread, so the lock it inherited would never
        // be given back. The first version waited on it for ever.
        let pool = Pool::new(Counter::default(), 2);
        drop(pool.get_timeout(Duration::from_secs(1)).unwrap());
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let holder = {
            let pool = pool.clone();
            std::thread::spawn(move || {
                let _state = pool.0.lock();
                held_tx.send(()).unwrap();
                let _ = done_rx.recv();
            })
        };
        held_rx.recv().unwrap();
        let status = leasehold_testkit::in_child(Duration::from_secs(5), || {
            // Its own, empty state: the parent's idle connection is neither reused nor counted.
            let conn = pool.get_timeout(Duration::from_secs(1));
            let fresh = matches!(&conn, Ok(c) if !c.is_inherited());
            drop(conn);
            fresh && pool.open_connections() == 1 && pool.try_idle().is_some()
        });
        done_tx.send(()).unwrap();
        holder.join().unwrap();
        assert_eq!(
            status,
            Some(0),
            "the child hung (None) or failed its checks"
        );
        // The parent's state is untouched.
        assert_eq!(pool.open_connections(), 1);
        assert_eq!(pool.try_idle().map(|c| c.0), Some(0));
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
        let waiter = std::thread::spawn(move || {
            let start = Instant::now();
            let got = pool2.get_timeout(Duration::from_secs(5)).map(|c| c.0);
            (got, start.elapsed())
        });
        std::thread::sleep(Duration::from_millis(50));
        drop(b);
        let (got, waited) = waiter.join().unwrap();
        assert_eq!(got.unwrap(), 1, "a returned connection goes to the waiter");
        assert!(
            waited < Duration::from_secs(4),
            "the return woke the waiter ({waited:?}), not the end of its own wait"
        );
    }

    #[test]
    fn try_idle_never_connects() {
        let pool = Pool::new(Counter::default(), 2);
        assert!(pool.try_idle().is_none());
        assert_eq!(pool.manager().made.load(Ordering::SeqCst), 0);
        drop(pool.get_timeout(Duration::from_millis(10)).unwrap());
        let idle = pool.try_idle().expect("the returned connection");
        assert_eq!(idle.0, 0);
        assert!(pool.try_idle().is_none(), "it is checked out");
    }

    #[test]
    fn broken_and_failed_connections_free_their_slot() {
        let pool = Pool::new(Counter::default(), 1);
        let mut a = pool.get_timeout(Duration::from_millis(20)).unwrap();
        a.1 = true;
        drop(a);
        assert_eq!(pool.open_connections(), 0);
        assert_eq!(
            pool.get_timeout(Duration::from_millis(20)).unwrap().0,
            1,
            "a new one replaced it"
        );
        pool.manager().fail.store(true, Ordering::SeqCst);
        pool.clear_idle();
        assert!(matches!(
            pool.get_timeout(Duration::from_millis(20)),
            Err(PoolError::Connect(_))
        ));
        assert_eq!(pool.open_connections(), 0);
        pool.manager().fail.store(false, Ordering::SeqCst);
        let c = pool.get_timeout(Duration::from_millis(20)).unwrap();
        c.discard();
        assert_eq!(pool.open_connections(), 0);
    }

    #[test]
    fn a_detached_connection_frees_its_slot_and_stays_open() {
        let pool = Pool::new(Counter::default(), 1);
        let kept = pool
            .get_timeout(Duration::from_millis(20))
            .unwrap()
            .detach()
            .expect("owned by this process");
        assert_eq!(kept.0, 0);
        assert_eq!(pool.open_connections(), 0);
        let next = pool.get_timeout(Duration::from_millis(20)).unwrap();
        assert_eq!(next.0, 1, "a new connection in the freed slot");
        drop(next);
        assert_eq!(pool.open_connections(), 1);
    }

    /// A server that accepts but never answers: each connect uses its whole budget and fails.
    struct Silent;

    impl ManageConnection for Silent {
        type Connection = ();
        type Error = String;
        fn connect(&self, budget: Duration) -> Result<(), String> {
            std::thread::sleep(budget.min(Duration::from_millis(400)));
            Err("timed out".into())
        }
        fn has_broken(&self, _: &mut ()) -> bool {
            false
        }
    }

    #[test]
    fn a_checkout_never_outlasts_its_deadline() {
        // The first version gave every connect a full connect timeout, so a checkout that began a
        // connect just before its deadline ran a whole timeout past it.
        let pool = Pool::new(Silent, 4);
        let start = Instant::now();
        let result = pool.get(Deadline::after(Duration::from_millis(120)));
        let took = start.elapsed();
        assert!(matches!(result, Err(PoolError::Connect(_))));
        // The old code ran to 120 + 400 ms; the margin below that is scheduling on a loaded machine.
        assert!(
            took < Duration::from_millis(400),
            "checkout took {took:?} for a 120 ms deadline"
        );
        assert_eq!(pool.open_connections(), 0);
    }

    /// Refuses for good: the client does not trust the server's certificate, say.
    #[derive(Default)]
    struct Untrusted {
        tries: AtomicUsize,
    }

    impl ManageConnection for Untrusted {
        type Connection = ();
        type Error = String;
        fn connect(&self, _budget: Duration) -> Result<(), String> {
            self.tries.fetch_add(1, Ordering::SeqCst);
            Err("unknown issuer".into())
        }
        fn has_broken(&self, _: &mut ()) -> bool {
            false
        }
        fn is_permanent(&self, _: &String) -> bool {
            true
        }
    }

    #[test]
    fn a_permanent_connect_error_is_returned_at_once() {
        // Retried until the deadline, the last try got a starved budget and reported a timeout of
        // 0 ms instead of the certificate error (seen in CI).
        let pool = Pool::new(Untrusted::default(), 2);
        let start = Instant::now();
        let result = pool.get_timeout(Duration::from_secs(2));
        assert!(matches!(result, Err(PoolError::Connect(ref e)) if e == "unknown issuer"));
        assert_eq!(pool.manager().tries.load(Ordering::SeqCst), 1);
        assert!(start.elapsed() < Duration::from_millis(500));
    }
}
