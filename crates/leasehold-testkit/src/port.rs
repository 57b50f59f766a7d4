use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

/// The lowest port handed out: above the ports services usually take.
const LOW: u32 = 10_000;
/// A Cluster node also binds its bus port, port + 10 000, which must stay below the ephemeral range
/// too.
const BUS_OFFSET: u32 = 10_000;

/// A loopback port that nothing listens on now. Ports are taken from a per-process walk (seeded by
/// the pid) through a range below the kernel's ephemeral range, for the port and for a Cluster
/// node's bus port (port + 10 000): an outgoing connection takes its local port from the ephemeral
/// range, so it can neither grab a port between our check and the server's bind nor take the port
/// of a server a test stops and starts again on the same port. (The first walk ran through
/// 20 000–40 000, a third of it inside Linux's default 32 768–60 999.) Parallel test binaries rarely
/// pick the same port, and a server that finds its port taken is started again on another.
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let span = ephemeral_low().saturating_sub(LOW + BUS_OFFSET).max(1_000);
    let _ = NEXT.compare_exchange(
        0,
        1 + std::process::id().wrapping_mul(2_654_435_761) % span,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    loop {
        let port = (LOW + NEXT.fetch_add(1, Ordering::SeqCst) % span) as u16;
        let bound = TcpListener::bind(("127.0.0.1", port)).is_ok();
        let in_use = TcpStream::connect(("127.0.0.1", port)).is_ok();
        if bound && !in_use {
            return port;
        }
    }
}

/// The first port of the kernel's ephemeral range (32 768 where it cannot be read).
fn ephemeral_low() -> u32 {
    static LOW_END: OnceLock<u32> = OnceLock::new();
    *LOW_END.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok())
            .unwrap_or(32_768)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_and_bus_ports_stay_below_the_ephemeral_range() {
        for _ in 0..50 {
            let port = u32::from(free_port());
            assert!(port >= LOW, "{port}");
            assert!(
                port + BUS_OFFSET < ephemeral_low().max(LOW + BUS_OFFSET + 1_000),
                "{port}"
            );
        }
    }
}
