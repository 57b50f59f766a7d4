//! The floor of a cross-process handoff through Redis: one message from the server to a
//! process blocked waiting for it, with nothing else. 8 waiter processes each block in `BLPOP` on a
//! list of their own (raw RESP, no client library); the parent pushes the current `CLOCK_MONOTONIC`
//! (shared by every process of the machine) onto one waiter's list at a time, and that waiter reports
//! how long after the push it woke. This is what a handoff by grant costs at best: the release's
//! reply and the waiter's wake-up; a lease handoff adds the release call and the client's work.
//!
//! ```sh
//! cargo run --release --example handoff_floor
//! ```

use leasehold_testkit::RedisServer;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

const WAITERS: usize = 8;
const PUSHES: usize = 4000;

fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid pointer to a timespec on the stack.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn resp(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("connect to redis");
    s.set_nodelay(true).unwrap();
    s
}

/// A waiter: BLPOP its list forever; print the wake latency of each message on stdout.
fn waiter(port: u16, list: &str) {
    let mut conn = connect(port);
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let out = std::io::stdout();
    loop {
        conn.write_all(&resp(&[b"BLPOP", list.as_bytes(), b"0"]))
            .unwrap();
        // *2 / $len / list / $len / value
        let mut lines = Vec::new();
        for _ in 0..5 {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            lines.push(line.trim_end().to_owned());
        }
        let woke = now_ns();
        let Ok(sent) = lines[4].parse::<u64>() else {
            return;
        };
        let mut out = out.lock();
        let _ = writeln!(out, "{}", woke.saturating_sub(sent));
        let _ = out.flush();
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 4 && args[1] == "--waiter" {
        return waiter(args[2].parse().unwrap(), &args[3]);
    }
    let server = RedisServer::start();
    let port = server.port();
    let exe = std::env::current_exe().unwrap();
    let mut children: Vec<_> = (0..WAITERS)
        .map(|i| {
            Command::new(&exe)
                .args(["--waiter", &port.to_string(), &format!("floor:{i}")])
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn a waiter")
        })
        .collect();
    let mut outputs: Vec<BufReader<_>> = children
        .iter_mut()
        .map(|c| BufReader::new(c.stdout.take().unwrap()))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut conn = connect(port);
    let mut reply = [0u8; 4];
    let mut wake = Vec::with_capacity(PUSHES);
    let mut rtt = Vec::with_capacity(PUSHES);
    for n in 0..PUSHES {
        let i = n % WAITERS;
        // One raw round trip first, as the floor of the floor.
        let t = now_ns();
        conn.write_all(&resp(&[b"PING"])).unwrap();
        let mut pong = [0u8; 7];
        conn.read_exact(&mut pong).unwrap();
        rtt.push(now_ns() - t);
        let sent = now_ns().to_string();
        conn.write_all(&resp(&[
            b"RPUSH",
            format!("floor:{i}").as_bytes(),
            sent.as_bytes(),
        ]))
        .unwrap();
        conn.read_exact(&mut reply).unwrap(); // ":1\r\n"
        let mut line = String::new();
        outputs[i].read_line(&mut line).unwrap();
        wake.push(line.trim().parse::<u64>().unwrap());
    }
    for c in &mut children {
        let _ = c.kill();
        let _ = c.wait();
    }
    let pct = |v: &mut Vec<u64>, q: f64| {
        v.sort_unstable();
        v[((v.len() - 1) as f64 * q) as usize] as f64 / 1000.0
    };
    let (w50, w99) = (pct(&mut wake, 0.5), pct(&mut wake, 0.99));
    let r50 = pct(&mut rtt, 0.5);
    println!(
        "handoff floor, {WAITERS} waiter processes, {PUSHES} pushes: push → waiter awake p50 {w50:.1} µs, p99 {w99:.1} µs; raw PING round trip p50 {r50:.1} µs; floor ÷ RTT {:.2}",
        w50 / r50
    );
}
