use crate::{free_port, wait_until, Fault, FaultProxy, TempDir};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// A real etcd cluster for tests: `members` etcd processes (Debian's `etcd-server`, `/usr/bin/etcd`)
/// on free loopback ports, each with its data directory in one temporary directory (on `/dev/shm`
/// where it exists: etcd syncs its log on every write, which a RAM disk makes cheap). Members can
/// be killed, restarted on the same data, paused (SIGSTOP) and resumed. Stopped and removed on
/// drop; if the test process dies first, the members go down with it.
///
/// Elections are tuned for tests (heartbeat 100 ms, election timeout 1 s): a killed leader is
/// replaced within a few seconds, and a loaded test machine does not trigger elections by itself.
///
/// Members talk to each other through a fault proxy in front of each one's peer listener (the
/// proxy's address is the peer URL they advertise), so a member can be cut off from the others
/// ([`EtcdCluster::partition`]) while its client listener still answers.
#[derive(Debug)]
pub struct EtcdCluster {
    dir: TempDir,
    token: String,
    members: Vec<EtcdMember>,
    tls: Option<EtcdTls>,
    /// The members [`EtcdCluster::partition`] cut off.
    partitioned: Mutex<Vec<usize>>,
}

/// TLS on the members' client listeners (`etcds://`): PEM files of the members' certificate and
/// key, and of the CA that signs client certificates. Peers talk plain text among themselves.
#[derive(Debug, Clone)]
pub struct EtcdTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
    /// Clients must present a certificate signed by `ca` (`--client-cert-auth`).
    pub client_cert_auth: bool,
}

/// What a member says of itself (`/v3/maintenance/status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EtcdStatus {
    pub member_id: u64,
    /// The member it follows (itself when it leads); 0 when it knows no leader.
    pub leader: u64,
    pub raft_term: u64,
    /// The last entry of its Raft log.
    pub raft_index: u64,
    /// The key-value store's revision.
    pub revision: u64,
}

/// One member of an [`EtcdCluster`].
#[derive(Debug)]
pub struct EtcdMember {
    name: String,
    client_port: u16,
    peer_port: u16,
    /// In front of `peer_port`; names each connection by its requests' `X-Server-From`.
    peer_proxy: FaultProxy,
    /// etcd's id of the member (hex, as `X-Server-From` writes it), once it has started.
    id: String,
    /// Plain HTTP `/health` (and `/metrics`), whatever the client listener speaks.
    metrics_port: u16,
    child: Option<Child>,
}

impl EtcdMember {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn client_port(&self) -> u16 {
        self.client_port
    }

    /// `127.0.0.1:port` of the member's client (and HTTP/JSON gateway) listener.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The peer URL the others dial: the proxy's.
    fn peer_url(&self) -> String {
        format!("http://{}", self.peer_proxy.host_port())
    }

    fn listen_peer_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.peer_port)
    }

    fn signal(&self, sig: i32) {
        if let Some(child) = &self.child {
            // SAFETY: kill(2) on a child we spawned and have not reaped.
            unsafe {
                libc::kill(child.id() as i32, sig);
            }
        }
    }
}

impl EtcdCluster {
    /// Starts a cluster of three members and waits until it has a leader.
    pub fn start() -> EtcdCluster {
        EtcdCluster::start_with(3)
    }

    /// Starts a cluster of `members` and waits until every member answers with a leader.
    pub fn start_with(members: usize) -> EtcdCluster {
        EtcdCluster::start_tls(members, None)
    }

    /// Starts a cluster of `members` whose client listeners speak TLS when `tls` is given.
    pub fn start_tls(members: usize, tls: Option<EtcdTls>) -> EtcdCluster {
        assert!(members >= 1, "an etcd cluster needs a member");
        let base = crate::mariadb::data_base();
        crate::mariadb::remove_stale_dirs(&base, "etcd");
        let dir = TempDir::new_in(&base, "etcd");
        let members: Vec<EtcdMember> = (0..members)
            .map(|i| {
                let peer_port = free_port();
                EtcdMember {
                    name: format!("m{i}"),
                    client_port: free_port(),
                    peer_port,
                    peer_proxy: FaultProxy::start_sniffing(
                        ("127.0.0.1", peer_port),
                        "X-Server-From",
                    ),
                    id: String::new(),
                    metrics_port: free_port(),
                    child: None,
                }
            })
            .collect();
        let mut cluster = EtcdCluster {
            token: crate::unique_key("etcd").replace(':', "-"),
            dir,
            members,
            tls,
            partitioned: Mutex::default(),
        };
        for i in 0..cluster.members.len() {
            cluster.spawn(i, "new");
        }
        cluster.wait_healthy(Duration::from_secs(60));
        cluster.learn_ids();
        cluster
    }

    /// One cluster for the whole test binary, started on first use. Tests sharing it must use keys
    /// of their own, and must not stop its members.
    pub fn shared() -> &'static EtcdCluster {
        static SHARED: OnceLock<EtcdCluster> = OnceLock::new();
        SHARED.get_or_init(EtcdCluster::start)
    }

    fn spawn(&mut self, i: usize, state: &str) {
        let initial = self.initial_cluster();
        let member = &self.members[i];
        let data = self.dir.path().join(&member.name);
        let log = self.dir.path().join(format!("{}.log", member.name));
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let client = format!("{scheme}://127.0.0.1:{}", member.client_port);
        let mut cmd = Command::new(binary());
        cmd.arg(format!("--name={}", member.name))
            .arg(format!("--data-dir={}", data.display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={}", member.listen_peer_url()))
            .arg(format!(
                "--initial-advertise-peer-urls={}",
                member.peer_url()
            ))
            .arg(format!("--initial-cluster={initial}"))
            .arg(format!("--initial-cluster-token={}", self.token))
            .arg(format!("--initial-cluster-state={state}"))
            .args([
                "--heartbeat-interval=100",
                "--election-timeout=1000",
                "--enable-v2=false",
                "--logger=zap",
                "--log-level=warn",
            ])
            .arg(format!("--log-outputs={}", log.display()))
            .arg(format!(
                "--listen-metrics-urls=http://127.0.0.1:{}",
                member.metrics_port
            ))
            // The Debian package's defaults file is not read by a plain `etcd`, but the
            // environment is: keep a stray ETCD_* variable from changing the cluster.
            .env_clear();
        if let Some(tls) = &self.tls {
            cmd.arg(format!("--cert-file={}", tls.cert.display()))
                .arg(format!("--key-file={}", tls.key.display()))
                .arg(format!("--trusted-ca-file={}", tls.ca.display()));
            if tls.client_cert_auth {
                cmd.arg("--client-cert-auth");
            }
        }
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
        let child = crate::spawn_for_process(cmd, libc::SIGKILL)
            .unwrap_or_else(|e| panic!("cannot start etcd ({e}); install etcd-server"));
        self.members[i].child = Some(child);
    }

    /// Waits until every running member says it is healthy (it has a leader and serves reads).
    pub fn wait_healthy(&self, limit: Duration) -> bool {
        let up = wait_until(limit, || {
            self.members.iter().filter(|m| m.is_running()).all(|m| {
                request(m.metrics_port, "GET", "/health", "")
                    .is_ok_and(|body| body.contains("\"health\":\"true\""))
            })
        });
        assert!(up, "the etcd cluster did not come up: {}", self.logs());
        up
    }

    /// Every member's log so far, for a failed assertion's message.
    pub fn logs(&self) -> String {
        self.members
            .iter()
            .map(|m| {
                let log = self.dir.path().join(format!("{}.log", m.name));
                let text = std::fs::read_to_string(log).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(20).collect();
                format!(
                    "--- {}:\n{}",
                    m.name,
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    pub fn members(&self) -> &[EtcdMember] {
        &self.members
    }

    /// `h1:p1,h2:p2,…` of every member's client listener.
    pub fn hosts(&self) -> String {
        self.members
            .iter()
            .map(EtcdMember::addr)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `etcd://` naming every member.
    pub fn url(&self) -> String {
        self.url_with("")
    }

    /// [`EtcdCluster::url`] with a query string (`""` for none); `etcds://` for a TLS cluster.
    pub fn url_with(&self, query: &str) -> String {
        let scheme = if self.tls.is_some() { "etcds" } else { "etcd" };
        if query.is_empty() {
            format!("{scheme}://{}", self.hosts())
        } else {
            format!("{scheme}://{}?{query}", self.hosts())
        }
    }

    /// Turns on etcd's authentication with a `root` user of `password` (the only user; it may do
    /// everything). Plain-text clusters only; the test kit's own requests (`leader`, `revision`,
    /// `request`) are refused from then on.
    pub fn enable_auth(&self, password: &str) {
        let port = self
            .members
            .iter()
            .find(|m| m.is_running())
            .expect("a member")
            .client_port;
        for (path, body) in [
            ("/v3/auth/role/add", r#"{"name":"root"}"#.to_owned()),
            (
                "/v3/auth/user/add",
                format!(r#"{{"name":"root","password":"{password}"}}"#),
            ),
            (
                "/v3/auth/user/grant",
                r#"{"user":"root","role":"root"}"#.to_owned(),
            ),
            ("/v3/auth/enable", "{}".to_owned()),
        ] {
            post(port, path, &body).unwrap_or_else(|e| panic!("etcd {path}: {e}"));
        }
    }

    /// The index of the member that leads now, as a running member reports it.
    pub fn leader(&self) -> Option<usize> {
        for m in self.members.iter().filter(|m| m.is_running()) {
            let Ok(body) = post(m.client_port, "/v3/maintenance/status", "{}") else {
                continue;
            };
            let (Some(leader), Some(me)) =
                (json_field(&body, "leader"), json_field(&body, "member_id"))
            else {
                continue;
            };
            if leader == "0" {
                continue;
            }
            if leader == me {
                return self.members.iter().position(|x| x.name == m.name);
            }
            // Ask the leader itself: the id alone does not say which of ours it is.
            for (i, other) in self.members.iter().enumerate() {
                if !other.is_running() {
                    continue;
                }
                if let Ok(b) = post(other.client_port, "/v3/maintenance/status", "{}") {
                    if json_field(&b, "member_id").as_deref() == Some(leader.as_str()) {
                        return Some(i);
                    }
                }
            }
        }
        None
    }

    /// What member `i` says of itself (`/v3/maintenance/status`, answered locally, without Raft),
    /// or `None` if it does not answer.
    pub fn status(&self, i: usize) -> Option<EtcdStatus> {
        let body = post(self.members[i].client_port, "/v3/maintenance/status", "{}").ok()?;
        let number = |name: &str| json_field(&body, name).and_then(|v| v.parse().ok());
        Some(EtcdStatus {
            member_id: number("member_id")?,
            leader: number("leader").unwrap_or(0),
            raft_term: number("raftTerm").unwrap_or(0),
            raft_index: number("raftIndex").unwrap_or(0),
            revision: number("revision").unwrap_or(0),
        })
    }

    /// Cuts member `i` off from the others: every peer connection into it is refused or reset,
    /// and every connection into another member that carries its requests (etcd's peers dial each
    /// other both ways, and a member falls back from its streams to plain POSTs, so a proxy on one
    /// side alone would not do). Its client listener still answers, as a host on the wrong side
    /// of a network split would to a client on its side. Until [`EtcdCluster::heal`].
    pub fn partition(&self, i: usize) {
        let mut partitioned = self.partitioned.lock().unwrap_or_else(|e| e.into_inner());
        partitioned.push(i);
        let cut: Vec<String> = partitioned
            .iter()
            .map(|&p| self.members[p].id.clone())
            .collect();
        for (j, m) in self.members.iter().enumerate() {
            if partitioned.contains(&j) {
                m.peer_proxy.set(Fault::Refuse);
                m.peer_proxy.reset_all();
            } else {
                m.peer_proxy.cut_sources(&cut);
            }
        }
    }

    /// Ends every [`EtcdCluster::partition`]: members reach each other again.
    pub fn heal(&self) {
        self.partitioned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        for m in &self.members {
            m.peer_proxy.heal();
            m.peer_proxy.cut_sources(&[]);
        }
    }

    /// Whether etcd itself sees member `i` cut off: it knows no leader, and a member of the others
    /// names a leader that is not `i`.
    pub fn is_cut_off(&self, i: usize) -> bool {
        let Some(alone) = self.status(i) else {
            return false;
        };
        alone.leader == 0
            && (0..self.members.len())
                .filter(|&j| j != i)
                .filter_map(|j| self.status(j))
                .any(|s| s.leader != 0 && s.leader != alone.member_id)
    }

    /// `etcdctl snapshot save` through a running member, into the cluster's directory (Debian's
    /// `etcd-client`); the snapshot's path. Plain-text clusters only.
    pub fn save_snapshot(&self, name: &str) -> PathBuf {
        let m = self
            .members
            .iter()
            .find(|m| m.is_running())
            .expect("a running member");
        let path = self.dir.path().join(format!("{name}.snapshot"));
        let out = etcdctl()
            .arg(format!("--endpoints=http://{}", m.addr()))
            .args(["snapshot", "save"])
            .arg(&path)
            .output()
            .unwrap_or_else(|e| panic!("cannot run etcdctl ({e}); install etcd-client"));
        assert!(
            out.status.success(),
            "etcdctl snapshot save: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        path
    }

    /// What an operator does to bring a cluster back from a backup: every member stopped, its
    /// data replaced by `etcdctl snapshot restore` of `snapshot` (same names, peer URLs and
    /// token), started again; waits until the cluster has a leader. The revision goes back to the
    /// snapshot's, and the Raft log starts over.
    pub fn restore_snapshot(&mut self, snapshot: &std::path::Path) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
        let initial = self.initial_cluster();
        for i in 0..self.members.len() {
            let m = &self.members[i];
            let data = self.dir.path().join(&m.name);
            std::fs::remove_dir_all(&data)
                .unwrap_or_else(|e| panic!("remove {}: {e}", data.display()));
            let out = etcdctl()
                .args(["snapshot", "restore"])
                .arg(snapshot)
                .arg(format!("--name={}", m.name))
                .arg(format!("--data-dir={}", data.display()))
                .arg(format!("--initial-cluster={initial}"))
                .arg(format!("--initial-cluster-token={}", self.token))
                .arg(format!("--initial-advertise-peer-urls={}", m.peer_url()))
                .output()
                .unwrap_or_else(|e| panic!("cannot run etcdctl ({e}); install etcd-client"));
            assert!(
                out.status.success(),
                "etcdctl snapshot restore: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        for i in 0..self.members.len() {
            self.spawn(i, "existing");
        }
        self.wait_healthy(Duration::from_secs(60));
        self.learn_ids();
    }

    /// Each member's id, from its metrics listener (plain HTTP whatever the client listener
    /// speaks): `etcd_server_id{server_id="<hex>"}`, as `X-Server-From` writes it.
    fn learn_ids(&mut self) {
        for m in &mut self.members {
            let metrics = request(m.metrics_port, "GET", "/metrics", "")
                .unwrap_or_else(|e| panic!("etcd {} /metrics: {e}", m.name));
            let at = metrics
                .find("etcd_server_id{server_id=\"")
                .unwrap_or_else(|| panic!("etcd {}: no etcd_server_id in /metrics", m.name));
            let rest = &metrics[at + "etcd_server_id{server_id=\"".len()..];
            m.id = rest[..rest.find('"').unwrap_or(0)].to_owned();
        }
    }

    /// `name=peer URL,…` of every member.
    fn initial_cluster(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer_url()))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// A crash of member `i`: SIGKILL, waiting until the process is gone. Its data stays.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            // SAFETY: kill(2) on a child we spawned and have not reaped (SIGCONT first, so a
            // paused member dies too).
            unsafe {
                libc::kill(child.id() as i32, libc::SIGCONT);
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts member `i` again on its ports and data after [`EtcdCluster::kill`]; it rejoins the
    /// cluster from its own log.
    pub fn start_again(&mut self, i: usize) {
        if self.members[i].child.is_none() {
            self.spawn(i, "existing");
        }
    }

    /// SIGSTOP member `i`: its sockets stay open and the kernel still accepts connections, but it
    /// answers nothing, like a hung host.
    pub fn pause(&self, i: usize) {
        self.members[i].signal(libc::SIGSTOP);
    }

    /// SIGCONT after [`EtcdCluster::pause`].
    pub fn resume(&self, i: usize) {
        self.members[i].signal(libc::SIGCONT);
    }

    /// One request to member `i`'s HTTP/JSON gateway (`path` such as `/v3/kv/put`, `body` JSON with
    /// base64 keys): the response body, or why there is none.
    pub fn request(&self, i: usize, path: &str, body: &str) -> Result<String, String> {
        post(self.members[i].client_port, path, body)
    }

    /// The cluster's revision now, read through a running member.
    pub fn revision(&self) -> u64 {
        for m in self.members.iter().filter(|m| m.is_running()) {
            if let Ok(body) = post(m.client_port, "/v3/kv/range", r#"{"key":"AA=="}"#) {
                if let Some(rev) = json_field(&body, "revision").and_then(|r| r.parse().ok()) {
                    return rev;
                }
            }
        }
        panic!("no etcd member answers: {}", self.logs());
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}

/// A POST to a gateway with a bound of its own (5 s).
fn post(port: u16, path: &str, body: &str) -> Result<String, String> {
    request(port, "POST", path, body)
}

/// One request with a bound of its own (5 s). HTTP/1.0, so the answer comes whole (no chunks) and
/// the connection closes after it.
fn request(port: u16, method: &str, path: &str, body: &str) -> Result<String, String> {
    let limit = Duration::from_secs(5);
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, limit).map_err(|e| e.to_string())?;
    stream.set_read_timeout(Some(limit)).ok();
    stream.set_write_timeout(Some(limit)).ok();
    let request = format!(
        "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream
        .write_all(request.as_bytes())
        .map_err(|e| e.to_string())?;
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .map_err(|e| e.to_string())?;
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("not an HTTP answer: {answer:?}"))?;
    if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
        return Err(format!(
            "{}: {body}",
            head.lines().next().unwrap_or_default()
        ));
    }
    Ok(body.to_owned())
}

/// The first string value of `"name":` in a JSON text (etcd's gateway writes 64-bit numbers as
/// strings). Enough for the few fields the test kit reads; no JSON parser needed.
fn json_field(json: &str, name: &str) -> Option<String> {
    let at = json.find(&format!("\"{name}\":"))? + name.len() + 3;
    let rest = json[at..].trim_start().strip_prefix('"')?;
    Some(rest[..rest.find('"')?].to_owned())
}

/// etcdctl speaking the v3 API, with nothing from the environment.
fn etcdctl() -> Command {
    let debian = PathBuf::from("/usr/bin/etcdctl");
    let mut cmd = Command::new(if debian.exists() {
        debian
    } else {
        PathBuf::from("etcdctl")
    });
    cmd.env_clear().env("ETCDCTL_API", "3");
    cmd
}

fn binary() -> PathBuf {
    let debian = PathBuf::from("/usr/bin/etcd");
    if debian.exists() {
        debian
    } else {
        PathBuf::from("etcd")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_string_fields() {
        let body = r#"{"header":{"cluster_id":"1","member_id":"22","revision":"7"},"leader":"22"}"#;
        assert_eq!(json_field(body, "revision").as_deref(), Some("7"));
        assert_eq!(json_field(body, "leader").as_deref(), Some("22"));
        assert_eq!(json_field(body, "nope"), None);
    }
}
