use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU16, Ordering};

/// A loopback port that nothing listens on now. Ports are taken from a per-process walk through a
/// high range (seeded by the pid) instead of the kernel's ephemeral range, so a port handed to a server
/// we start later is not grabbed meanwhile by an outgoing connection, and parallel test binaries rarely
/// pick the same one.
pub fn free_port() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let _ = NEXT.compare_exchange(
        0,
        20_000 + (std::process::id().wrapping_mul(2_654_435_761) % 20_000) as u16,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    loop {
        let port = NEXT.fetch_add(1, Ordering::SeqCst);
        let port = if port >= 40_000 {
            20_000 + port % 20_000
        } else {
            port
        };
        let bound = TcpListener::bind(("127.0.0.1", port)).is_ok();
        let in_use = TcpStream::connect(("127.0.0.1", port)).is_ok();
        if bound && !in_use {
            return port;
        }
    }
}
