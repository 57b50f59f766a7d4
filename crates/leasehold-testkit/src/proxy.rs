//! A TCP fault proxy: sits between a client and a server on loopback and misbehaves on demand, so a
//! test can show what the client does when the network (not the server) goes wrong.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often a blocked pump looks at the fault and the stop flag: the upper bound on how long a
/// fault switch or a drop takes to reach every connection.
const POLL: Duration = Duration::from_millis(10);

/// What the proxy does to the traffic. Switch with [`FaultProxy::set`]; effective within ~10 ms on
/// every connection, old and new.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Fault {
    /// Forward everything as it comes.
    #[default]
    Normal,
    /// Hold every chunk this long before forwarding it, in both directions.
    Latency(Duration),
    /// Accept connections and read what arrives, forward nothing either way: a host that vanished
    /// without a reset.
    BlackHole,
    /// Deliver requests to the server, discard its replies: the client cannot tell whether its
    /// acquire happened.
    DropReplies,
    /// Forward one byte at a time, this long apart, both directions: a peer that answers half a reply.
    SlowDrip(Duration),
    /// Forward requests as they come, and replies one byte at a time, this long apart: a server (or
    /// proxy) that answers, but so slowly that no single read ever waits long. A client that bounds
    /// each read instead of the whole call never gives up on it.
    SlowDripReplies(Duration),
    /// Reset every new connection at once (open ones are left alone; see [`FaultProxy::reset_all`]).
    Refuse,
}

#[derive(Debug)]
struct Conn {
    client: TcpStream,
    server: TcpStream,
    /// Who sent the requests, once a request named it (see [`FaultProxy::start_sniffing`]).
    source: Mutex<Option<String>>,
}

impl Conn {
    fn source(&self) -> Option<String> {
        self.source
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

#[derive(Debug, Default)]
struct Shared {
    fault: Mutex<Fault>,
    /// The request header whose value names a connection's source, if the proxy looks for one.
    sniff: Option<String>,
    /// Sources whose connections are cut.
    cut: Mutex<Vec<String>>,
    stop: AtomicBool,
    conns: Mutex<Vec<(u64, Arc<Conn>)>>,
    pumps: Mutex<Vec<JoinHandle<()>>>,
    next_id: AtomicU64,
    accepted: AtomicU64,
}

impl Shared {
    fn fault(&self) -> Fault {
        *self.fault.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    fn is_cut(&self, conn: &Conn) -> bool {
        conn.source().is_some_and(|source| {
            self.cut
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&source)
        })
    }
}

/// A proxy on a free loopback port forwarding to one target, with one thread pair per connection.
/// Dropping it closes every connection and joins every thread it started.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    target: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl FaultProxy {
    /// Starts forwarding to `target` (resolved once, now).
    pub fn start(target: impl ToSocketAddrs) -> FaultProxy {
        FaultProxy::start_with(target, None)
    }

    /// [`FaultProxy::start`] for HTTP/1.1 traffic whose requests name their sender in `header`
    /// (etcd's peers: `X-Server-From`): each connection is named by the first value it carries, so
    /// [`FaultProxy::cut_sources`] can cut one sender off while the others pass. A connection is
    /// one sender's (its requests come from the process that dialled it).
    pub fn start_sniffing(target: impl ToSocketAddrs, header: &str) -> FaultProxy {
        FaultProxy::start_with(target, Some(header.to_owned()))
    }

    fn start_with(target: impl ToSocketAddrs, sniff: Option<String>) -> FaultProxy {
        let target = target
            .to_socket_addrs()
            .expect("resolve the proxy's target")
            .next()
            .expect("the proxy's target has an address");
        let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind the fault proxy");
        // Non-blocking so the acceptor can notice a drop between connections.
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let addr = listener.local_addr().expect("proxy address");
        let shared = Arc::new(Shared {
            sniff,
            ..Shared::default()
        });
        let s = shared.clone();
        let acceptor = std::thread::Builder::new()
            .name(format!("fault-proxy-{}", addr.port()))
            .spawn(move || accept_loop(listener, target, s))
            .expect("spawn the proxy's acceptor");
        FaultProxy {
            addr,
            target,
            shared,
            acceptor: Some(acceptor),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `127.0.0.1:PORT`, for building URLs.
    pub fn host_port(&self) -> String {
        self.addr.to_string()
    }

    pub fn target(&self) -> SocketAddr {
        self.target
    }

    /// Switches the fault for every connection.
    pub fn set(&self, fault: Fault) {
        *self.shared.fault.lock().unwrap_or_else(|e| e.into_inner()) = fault;
    }

    pub fn fault(&self) -> Fault {
        self.shared.fault()
    }

    /// Back to forwarding everything.
    pub fn heal(&self) {
        self.set(Fault::Normal);
    }

    /// Resets every open connection (RST to both sides); the fault setting is unchanged.
    pub fn reset_all(&self) {
        let conns: Vec<Arc<Conn>> = {
            let mut list = self.shared.conns.lock().unwrap_or_else(|e| e.into_inner());
            list.drain(..).map(|(_, c)| c).collect()
        };
        for c in conns {
            reset(&c.client);
            reset(&c.server);
        }
    }

    /// Cuts every connection whose requests name one of `sources` (see
    /// [`FaultProxy::start_sniffing`]): open ones now, later ones as soon as their first request
    /// naming the source arrives, before it is forwarded. An empty list lets every source through
    /// again. Independent of [`FaultProxy::set`].
    pub fn cut_sources(&self, sources: &[String]) {
        *self.shared.cut.lock().unwrap_or_else(|e| e.into_inner()) = sources.to_vec();
        let conns: Vec<Arc<Conn>> = self
            .shared
            .conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(_, c)| c.clone())
            .collect();
        for c in conns.iter().filter(|c| self.shared.is_cut(c)) {
            reset(&c.client);
            reset(&c.server);
        }
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.shared
            .conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Connections accepted since the start (refused ones included).
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        self.reset_all();
        let pumps: Vec<JoinHandle<()>> = self
            .shared
            .pumps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
            .collect();
        for p in pumps {
            let _ = p.join();
        }
    }
}

/// SO_LINGER 0 then shutdown: the peer sees a reset, and our blocked reader wakes up.
fn reset(s: &TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on a socket we own, with a correctly sized linger struct.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
    let _ = s.shutdown(Shutdown::Both);
}

fn accept_loop(listener: TcpListener, target: SocketAddr, shared: Arc<Shared>) {
    while !shared.stopped() {
        match listener.accept() {
            Ok((client, _)) => {
                shared.accepted.fetch_add(1, Ordering::Relaxed);
                if shared.fault() == Fault::Refuse {
                    reset(&client);
                    continue;
                }
                let _ = client.set_nonblocking(false);
                // The server is on loopback: a connect that takes long means it is gone (killed);
                // the client then sees its connection closed, as it would without the proxy.
                let Ok(server) = TcpStream::connect_timeout(&target, Duration::from_millis(500))
                else {
                    reset(&client);
                    continue;
                };
                start_pumps(client, server, &shared);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(POLL),
            Err(_) => std::thread::sleep(POLL),
        }
        // Finished pumps are reaped here so a long soak does not accumulate handles.
        let mut pumps = shared.pumps.lock().unwrap_or_else(|e| e.into_inner());
        let (done, running): (Vec<_>, Vec<_>) = pumps.drain(..).partition(|p| p.is_finished());
        *pumps = running;
        drop(pumps);
        for p in done {
            let _ = p.join();
        }
    }
}

fn start_pumps(client: TcpStream, server: TcpStream, shared: &Arc<Shared>) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let conn = Arc::new(Conn {
        client,
        server,
        source: Mutex::new(None),
    });
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    shared
        .conns
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((id, conn.clone()));
    let (s_up, s_down) = (shared.clone(), shared.clone());
    let (conn_up, conn_down) = (conn.clone(), conn);
    let up = std::thread::spawn(move || {
        pump(c2, &conn_up, Direction::Request, &s_up);
        finish(id, &conn_up, &s_up);
    });
    let down = std::thread::spawn(move || {
        pump(s2, &conn_down, Direction::Reply, &s_down);
        finish(id, &conn_down, &s_down);
    });
    let mut pumps = shared.pumps.lock().unwrap_or_else(|e| e.into_inner());
    pumps.push(up);
    pumps.push(down);
}

/// One side ended: end the other too (a closed client must close its server session, or a
/// PostgreSQL advisory lock would outlive the client that gave up on it).
fn finish(id: u64, conn: &Conn, shared: &Shared) {
    let _ = conn.client.shutdown(Shutdown::Both);
    let _ = conn.server.shutdown(Shutdown::Both);
    shared
        .conns
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|(i, _)| *i != id);
}

#[derive(Clone, Copy, PartialEq)]
enum Direction {
    Request,
    Reply,
}

fn pump(mut from: TcpStream, conn: &Conn, dir: Direction, shared: &Shared) {
    let mut to = match dir {
        Direction::Request => &conn.server,
        Direction::Reply => &conn.client,
    };
    let _ = from.set_read_timeout(Some(POLL));
    let mut buf = [0u8; 16 * 1024];
    // The requests' latest bytes, while the connection's source is not known yet.
    let mut unnamed = Vec::new();
    loop {
        if shared.stopped() {
            return;
        }
        let n = match from.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        let data = &buf[..n];
        if dir == Direction::Request {
            if let Some(header) = &shared.sniff {
                sniff(&mut unnamed, data, header, conn);
            }
        }
        if shared.is_cut(conn) {
            reset(&conn.client);
            reset(&conn.server);
            return;
        }
        // The fault is read per chunk, so a switch applies mid-connection.
        let ok = match shared.fault() {
            Fault::Normal | Fault::Refuse => to.write_all(data).is_ok(),
            Fault::BlackHole => true,
            Fault::DropReplies if dir == Direction::Reply => true,
            Fault::DropReplies => to.write_all(data).is_ok(),
            Fault::Latency(d) => sleep_unless_stopped(d, shared) && to.write_all(data).is_ok(),
            Fault::SlowDrip(d) => drip(data, to, d, shared),
            Fault::SlowDripReplies(d) if dir == Direction::Reply => drip(data, to, d, shared),
            Fault::SlowDripReplies(_) => to.write_all(data).is_ok(),
        };
        if !ok {
            return;
        }
    }
}

/// Names `conn` by the value of `header` once its requests carry it. `unnamed` keeps the bytes
/// seen so far that may still hold the start of the header (it can straddle two reads).
fn sniff(unnamed: &mut Vec<u8>, data: &[u8], header: &str, conn: &Conn) {
    let mut source = conn.source.lock().unwrap_or_else(|e| e.into_inner());
    if source.is_some() {
        return;
    }
    unnamed.extend_from_slice(data);
    let needle = format!("\r\n{header}: ");
    let needle = needle.as_bytes();
    match find(unnamed, needle) {
        Some(at) => {
            let value = &unnamed[at + needle.len()..];
            match find(value, b"\r\n") {
                Some(end) => {
                    *source = Some(String::from_utf8_lossy(&value[..end]).trim().to_owned());
                    unnamed.clear();
                }
                // The value goes on in the next read (a header line is short: past 4 KiB this is
                // no header but a body that happens to hold its name).
                None if unnamed.len() - at < 4096 => {
                    unnamed.drain(..at);
                }
                None => unnamed.clear(),
            }
        }
        None => {
            let keep = needle.len().min(unnamed.len());
            unnamed.drain(..unnamed.len() - keep);
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Writes `data` one byte at a time, `d` apart. False if a write failed or the proxy was dropped.
fn drip(data: &[u8], mut to: &TcpStream, d: Duration, shared: &Shared) -> bool {
    data.iter()
        .all(|b| to.write_all(&[*b]).is_ok() && sleep_unless_stopped(d, shared))
}

/// False if the proxy was dropped meanwhile.
fn sleep_unless_stopped(d: Duration, shared: &Shared) -> bool {
    let end = Instant::now() + d;
    loop {
        if shared.stopped() {
            return false;
        }
        let now = Instant::now();
        if now >= end {
            return true;
        }
        std::thread::sleep((end - now).min(POLL));
    }
}

/// Switches faults on a set of proxies on a random (seeded) schedule until dropped: each step picks a
/// proxy (or all of them), a fault and a duration, then heals it for a while. Joins its thread on drop
/// and leaves every proxy healed.
#[derive(Debug)]
pub struct FaultCycler {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Vec<String>>>,
}

impl FaultCycler {
    /// `max_fault` bounds how long one fault lasts; the heal between faults is as long again at most.
    pub fn start(proxies: Vec<Arc<FaultProxy>>, seed: u64, max_fault: Duration) -> FaultCycler {
        FaultCycler::start_with(proxies, seed, max_fault, true)
    }

    /// [`FaultCycler::start`], with connection resets only if `resets`: a backend whose lease lives
    /// in its connection (PostgreSQL advisory locks) loses every lease to a reset by design.
    pub fn start_with(
        proxies: Vec<Arc<FaultProxy>>,
        seed: u64,
        max_fault: Duration,
        resets: bool,
    ) -> FaultCycler {
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut rng = fastrand::Rng::with_seed(seed);
            let mut log = Vec::new();
            let max_ms = max_fault.as_millis().max(20) as u64;
            let nap = |d: Duration| {
                let end = Instant::now() + d;
                while Instant::now() < end && !st.load(Ordering::SeqCst) {
                    std::thread::sleep(POLL);
                }
            };
            while !st.load(Ordering::SeqCst) {
                let fault = random_fault(&mut rng);
                let targets: Vec<usize> = if rng.u8(..4) == 0 || proxies.len() == 1 {
                    (0..proxies.len()).collect()
                } else {
                    // A minority, so a quorum backend keeps its majority.
                    let mut all: Vec<usize> = (0..proxies.len()).collect();
                    rng.shuffle(&mut all);
                    all.truncate(((proxies.len() - 1) / 2).max(1));
                    all
                };
                let hold = Duration::from_millis(rng.u64(10..=max_ms));
                if rng.u8(..5) == 0 && resets {
                    for &i in &targets {
                        proxies[i].reset_all();
                    }
                    log.push(format!("reset {targets:?}"));
                } else {
                    for &i in &targets {
                        proxies[i].set(fault);
                    }
                    log.push(format!("{fault:?} on {targets:?} for {hold:?}"));
                    nap(hold);
                    for &i in &targets {
                        proxies[i].heal();
                    }
                }
                nap(Duration::from_millis(rng.u64(10..=max_ms)));
            }
            for p in &proxies {
                p.heal();
            }
            log
        });
        FaultCycler {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops switching, heals every proxy and returns what was done, in order.
    pub fn finish(mut self) -> Vec<String> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for FaultCycler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn random_fault(rng: &mut fastrand::Rng) -> Fault {
    match rng.u8(..6) {
        0 => Fault::Latency(Duration::from_millis(rng.u64(5..=150))),
        1 => Fault::BlackHole,
        2 => Fault::DropReplies,
        3 => Fault::SlowDrip(Duration::from_millis(rng.u64(1..=5))),
        4 => Fault::Refuse,
        _ => Fault::Latency(Duration::from_millis(rng.u64(1..=20))),
    }
}
