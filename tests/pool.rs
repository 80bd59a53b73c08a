//! The executor pool on NATS: real `nats-server`s (`support/nats.rs`), real nodes
//! (`dsh-host executor serve --nats`), and the host's `PoolExecutor` as the front.
//!
//! Each node runs in a directory of its own, so `pwd` in a session tells which node holds it.
//! Ground truth comes from marker files the commands append to: a command that ran twice, or
//! on two nodes, leaves two lines.

#[allow(dead_code)]
#[path = "support/mcp_child.rs"]
mod mcp_child;
#[path = "support/nats.rs"]
mod nats;
#[path = "support/nested_cargo.rs"]
mod nested_cargo;
#[path = "support/procs.rs"]
mod procs;
#[path = "support/provision.rs"]
mod provision;
#[path = "support/wait.rs"]
mod wait;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_host::executor::pool::{PoolExecutor, PoolOptions};
use dsh_host::executor::{
    ExecError, Executor, Relocation, RelocationReason, Request, RunResult, Spec, Task, TaskState,
};
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};
use tokio_util::sync::CancellationToken;

use nats::Cluster;

const BIN: &str = env!("CARGO_BIN_EXE_dsh-host");
const HEARTBEAT_MS: u64 = 200;
const LEASE_MS: u64 = 1500;
/// How long a node keeps a session no front holds.
const SESSION_GRACE_MS: u64 = 2000;
/// The lease of the failover test: longer than a JetStream leader election takes.
const FAILOVER_LEASE_MS: u64 = 10_000;
/// Generous bound for anything that should be "prompt".
const PROMPT: Duration = Duration::from_secs(20);

fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// A cluster, nodes on it, and a directory per node.
struct Pool {
    cluster: Cluster,
    dir: tempfile::TempDir,
    nodes: Vec<Option<Child>>,
    replicas: usize,
    lease_ms: u64,
}

impl Pool {
    /// `servers` NATS servers and `nodes` nodes; node `i` prefers server `i % servers`.
    fn start(servers: usize, nodes: usize) -> Pool {
        Pool::with_lease(servers, nodes, LEASE_MS)
    }

    fn with_lease(servers: usize, nodes: usize, lease_ms: u64) -> Pool {
        let cluster = Cluster::start(servers);
        let mut pool = Pool {
            cluster,
            dir: tempfile::tempdir().unwrap(),
            nodes: Vec::new(),
            replicas: servers.min(3),
            lease_ms,
        };
        for i in 0..nodes {
            let child = pool.spawn_node(i);
            pool.nodes.push(Some(child));
        }
        pool
    }

    fn node_dir(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("n{i}"))
    }

    fn urls_for(&self, i: usize) -> String {
        let urls = self.cluster.urls();
        let n = urls.len();
        (0..n)
            .map(|k| urls[(i + k) % n].clone())
            .collect::<Vec<_>>()
            .join(",")
    }

    fn spawn_node(&self, i: usize) -> Child {
        let dir = self.node_dir(i);
        std::fs::create_dir_all(&dir).unwrap();
        let log = std::fs::File::create(self.dir.path().join(format!("n{i}.log"))).unwrap();
        Command::new(BIN)
            .args(["executor", "serve", "--nats", &self.urls_for(i)])
            .args(["--node-id", &format!("n{i}")])
            .arg(format!("--nats-heartbeat-ms={HEARTBEAT_MS}"))
            .arg(format!("--nats-lease-ms={}", self.lease_ms))
            .arg(format!("--nats-replicas={}", self.replicas))
            .arg(format!("--nats-session-grace-ms={SESSION_GRACE_MS}"))
            .arg("--grace-ms=200")
            .arg("--timeout-ms=60000")
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap()
    }

    fn options(&self) -> PoolOptions {
        PoolOptions {
            urls: self.cluster.urls(),
            heartbeat: Duration::from_millis(HEARTBEAT_MS),
            lease: Duration::from_millis(self.lease_ms),
            replicas: self.replicas,
            ..PoolOptions::default()
        }
    }

    /// A front that sees every node live.
    async fn front(&self) -> (Arc<PoolExecutor>, UnboundedReceiver<Task>) {
        self.front_with(self.options()).await
    }

    /// A front with `options` that sees every node live.
    async fn front_with(
        &self,
        options: PoolOptions,
    ) -> (Arc<PoolExecutor>, UnboundedReceiver<Task>) {
        let (tx, events) = unbounded_channel();
        let front = tokio::task::spawn_blocking(move || PoolExecutor::connect(options, tx))
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("{e}\n{}", self.logs()));
        let want = self.nodes.iter().filter(|n| n.is_some()).count();
        wait_until("every node is live", || front.nodes().len() == want).await;
        (front, events)
    }

    fn pid(&self, i: usize) -> i32 {
        self.nodes[i].as_ref().unwrap().id() as i32
    }

    fn signal(&self, i: usize, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.pid(i).to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Which node's directory `pwd` printed.
    fn node_named(&self, pwd: &str) -> usize {
        (0..self.nodes.len())
            .find(|&i| Path::new(pwd.trim()) == self.node_dir(i))
            .unwrap_or_else(|| panic!("not a node's directory: {pwd}"))
    }

    fn logs(&self) -> String {
        (0..self.nodes.len())
            .map(|i| {
                let log = std::fs::read_to_string(self.dir.path().join(format!("n{i}.log")))
                    .unwrap_or_default();
                format!("--- n{i}:\n{log}")
            })
            .collect()
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        for child in self.nodes.iter_mut().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn spec(exec: &dyn Executor, owner: &str, command: &str) -> Spec {
    exec.resolve(Request {
        command: command.to_string(),
        workdir: None,
        timeout_ms: None,
        owner: Some(owner.to_string()),
    })
    .expect("the pool resolves a plain command")
}

async fn run(exec: &dyn Executor, owner: &str, command: &str) -> String {
    run_result(exec, owner, command).await.stdout.text
}

async fn run_result(exec: &dyn Executor, owner: &str, command: &str) -> RunResult {
    exec.run(spec(exec, owner, command), CancellationToken::new())
        .await
        .expect("the run succeeds")
}

/// The node holding `owner`'s session, by its `pwd`.
async fn node_of(pool: &Pool, exec: &dyn Executor, owner: &str) -> usize {
    pool.node_named(&run(exec, owner, "pwd").await)
}

async fn wait_until(what: &str, done: impl FnMut() -> bool) {
    wait::until(what, PROMPT, done).await
}

/// Waits until the NATS server has dropped the subscriptions of `placement`'s node.
async fn until_nobody_listens(pool: &Pool, placement: &dsh_host::executor::pool::Placement) {
    let client = async_nats::connect(pool.cluster.url(0)).await.unwrap();
    let subject = format!("dsh.node.{}.{}.place", placement.node, placement.epoch);
    let deadline = Instant::now() + PROMPT;
    loop {
        let request = async_nats::Request::new()
            .payload("{}".into())
            .timeout(Some(Duration::from_millis(200)));
        match client.send_request(subject.clone(), request).await {
            Err(err) if err.kind() == async_nats::client::RequestErrorKind::NoResponders => {
                return;
            }
            _ => assert!(Instant::now() < deadline, "the node still listens"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn next_event(events: &mut UnboundedReceiver<Task>) -> Task {
    tokio::time::timeout(PROMPT, events.recv())
        .await
        .expect("a task-done event in time")
        .expect("the channel is open")
}

async fn no_more_events(events: &mut UnboundedReceiver<Task>) {
    let more = tokio::time::timeout(Duration::from_millis(500), events.recv()).await;
    assert!(matches!(more, Err(_) | Ok(None)), "another event: {more:?}");
}

/// A background `sleep 60` in `owner`'s session, and its pid once it runs.
async fn start_sleeper(pool: &Pool, exec: &dyn Executor, owner: &str) -> (Task, i32) {
    let pid_file = pool.dir.path().join(format!("sleeper-{owner}.pid"));
    let command = format!(
        "echo $$ > {}; exec sleep 60",
        quoted(&pid_file.display().to_string())
    );
    let task = exec.start(spec(exec, owner, &command)).await.unwrap();
    wait_until("the task wrote its pid", || lines(&pid_file).len() == 1).await;
    (task, lines(&pid_file)[0].parse().unwrap())
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|s| s.lines().map(str::to_string).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_stay_on_their_node_and_spread_over_the_pool() {
    let pool = Pool::start(1, 3);
    let (front, mut events) = pool.front().await;
    let mut homes = Vec::new();
    for owner in ["a", "b", "c"] {
        let home = node_of(&pool, front.as_ref(), owner).await;
        for _ in 0..3 {
            assert_eq!(node_of(&pool, front.as_ref(), owner).await, home);
        }
        homes.push(home);
    }
    homes.sort_unstable();
    assert_eq!(homes, [0, 1, 2], "one session per node");

    // A background task, read to its end, and its one event.
    let task = front
        .start(spec(
            front.as_ref(),
            "a",
            "for i in 1 2 3; do echo $i; sleep 0.1; done",
        ))
        .await
        .unwrap();
    assert_eq!(task.id, "bash-1");
    assert_eq!(task.owner.as_deref(), Some("a"));
    let ended = next_event(&mut events).await;
    assert_eq!(
        (ended.id.as_str(), ended.state, ended.exit_code),
        ("bash-1", TaskState::Completed, Some(0))
    );
    let read = front.read_output(&task.id).unwrap();
    assert_eq!(read.stdout.text, "1\n2\n3\n");
    assert_eq!(read.task.id, "bash-1");
    assert_eq!(read.task.owner.as_deref(), Some("a"));
    no_more_events(&mut events).await;
    // Another session cannot reach the task through its node.
    assert_eq!(front.owner_of("bash-1").as_deref(), Some("a"));
    front.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_killed_mid_run_and_mid_background_reports_each_once_and_nothing_runs_again() {
    // A lease longer than the test: the front learns of each death from the calls nobody
    // listens for, never from a heartbeat that stopped.
    let mut pool = Pool::with_lease(1, 2, 120_000);
    let (front, mut events) = pool.front().await;
    let home = node_of(&pool, front.as_ref(), "s").await;
    let marks = pool.dir.path().join("marks");
    let m = quoted(&marks.display().to_string());
    let task = front
        .start(spec(
            front.as_ref(),
            "s",
            &format!("echo background >> {m}; sleep 8; echo background-end >> {m}"),
        ))
        .await
        .unwrap();
    let in_flight = {
        let front = front.clone();
        let spec = spec(
            front.as_ref(),
            "s",
            &format!("echo run >> {m}; sleep 8; echo run-end >> {m}"),
        );
        tokio::spawn(async move { front.run(spec, CancellationToken::new()).await })
    };
    wait_until("both commands started", || lines(&marks).len() == 2).await;
    let later = spec(front.as_ref(), "s", &format!("echo later >> {m}; pwd"));
    let placed = front.placement(Some("s")).unwrap();
    pool.signal(home, "-KILL");
    let _ = pool.nodes[home].as_mut().unwrap().wait();
    // Until its server has seen the connection close, a message to the node is delivered to
    // it (and its fate is unknown).
    until_nobody_listens(&pool, &placed).await;
    // Asked of the dead node before its lease ran out: nobody listens, so it did not start
    // there, and it runs on the session's new node.
    let later = front
        .run(later, CancellationToken::new())
        .await
        .expect("run on the other node");
    assert_eq!(pool.node_named(&later.stdout.text), 1 - home);

    let ended = next_event(&mut events).await;
    assert_eq!(
        (ended.id.as_str(), ended.state),
        (task.id.as_str(), TaskState::Lost)
    );
    let err = tokio::time::timeout(PROMPT, in_flight)
        .await
        .expect("the run is answered")
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(&err, ExecError::Internal(m) if m.contains("may or may not have run")),
        "{err:?}"
    );
    no_more_events(&mut events).await;
    // The lost task reads as lost; the session goes on, placed on the other node.
    let read = front.read_output(&task.id).unwrap();
    assert_eq!(
        (read.task.state, read.stdout.text.as_str()),
        (TaskState::Lost, "")
    );
    assert_eq!(node_of(&pool, front.as_ref(), "s").await, 1 - home);
    // Neither command was run again, here or anywhere.
    let mut seen = lines(&marks);
    seen.sort();
    assert_eq!(seen, ["background", "later", "run"]);
    // With no node left to take the session, a command did not start.
    let last = spec(front.as_ref(), "s", &format!("echo last >> {m}"));
    let placed = front.placement(Some("s")).unwrap();
    pool.signal(1 - home, "-KILL");
    let _ = pool.nodes[1 - home].as_mut().unwrap().wait();
    until_nobody_listens(&pool, &placed).await;
    let err = front.run(last, CancellationToken::new()).await.unwrap_err();
    assert!(
        matches!(&err, ExecError::SpawnFailed(m) if m.contains("did not start")),
        "{err:?}"
    );
    assert_eq!(lines(&marks).len(), 3, "the last command ran");
    front.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_placed_anew_is_told_once_with_its_next_result_and_no_other_session_is() {
    let mut pool = Pool::start(1, 3);
    let (front, _events) = pool.front().await;
    let exec = front.as_ref();
    // A session on each node (placement spreads them; more are made until each node has one).
    let mut found: Vec<(String, usize)> = Vec::new();
    for i in 0..30 {
        if found.len() == 3 {
            break;
        }
        let owner = format!("s{i}");
        let first = run_result(exec, &owner, "pwd").await;
        assert_eq!(first.relocated, None, "a first placement is no move");
        let home = pool.node_named(&first.stdout.text);
        if found.iter().all(|(_, h)| *h != home) {
            found.push((owner, home));
        }
    }
    let [(oa, a), (ob, b), (oc, c)] = &found[..] else {
        panic!("not a session on every node: {found:?}");
    };
    let (a, b, c) = (*a, *b, *c);
    let (oa, ob, oc) = (oa.as_str(), ob.as_str(), oc.as_str());

    // a's node dies: a's next result (a foreground run) carries the move, and only that one.
    // (Asked once the front knows, so that no call is in flight to the dead node: such a call
    // fails, which `a_node_killed_mid_run_…` covers.)
    let dead = |i: usize| {
        let front = front.clone();
        move || {
            front
                .nodes()
                .iter()
                .all(|beat| beat.node != format!("n{i}"))
        }
    };
    pool.signal(a, "-KILL");
    let _ = pool.nodes[a].as_mut().unwrap().wait();
    wait_until("the front took a's node for dead", dead(a)).await;
    let told = run_result(exec, oa, "pwd").await;
    let now = pool.node_named(&told.stdout.text);
    assert_ne!(now, a);
    assert_eq!(
        told.relocated,
        Some(Relocation {
            from_node: format!("n{a}"),
            to_node: format!("n{now}"),
            reason: RelocationReason::NodeLost,
        })
    );
    for _ in 0..2 {
        let again = run_result(exec, oa, "pwd").await;
        assert_eq!(
            (pool.node_named(&again.stdout.text), again.relocated),
            (now, None)
        );
    }
    // Sessions whose node lives on are never told.
    for (owner, home) in [(ob, b), (oc, c)] {
        let r = run_result(exec, owner, "pwd").await;
        assert_eq!((pool.node_named(&r.stdout.text), r.relocated), (home, None));
    }

    // c's node dies too: c's next call starts a background task, whose answer carries the move;
    // its later results and task records do not.
    pool.signal(c, "-KILL");
    let _ = pool.nodes[c].as_mut().unwrap().wait();
    wait_until("the front took c's node for dead", dead(c)).await;
    let task = exec.start(spec(exec, oc, "true")).await.unwrap();
    let placed = front.placement(Some(oc)).expect("c is placed").node;
    assert_eq!(placed, format!("n{b}"), "the one node left");
    assert_eq!(
        task.relocated,
        Some(Relocation {
            from_node: format!("n{c}"),
            to_node: placed,
            reason: RelocationReason::NodeLost,
        })
    );
    assert_eq!(exec.get(&task.id).unwrap().relocated, None);
    let r = run_result(exec, oc, "pwd").await;
    assert_eq!((pool.node_named(&r.stdout.text), r.relocated), (b, None));
    let r = run_result(exec, ob, "pwd").await;
    assert_eq!((pool.node_named(&r.stdout.text), r.relocated), (b, None));
    front.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_fronts_racing_place_each_session_on_one_node() {
    let pool = Pool::start(1, 3);
    let (first, _e1) = pool.front().await;
    let (second, _e2) = pool.front().await;
    for owner in ["r1", "r2", "r3", "r4", "r5", "r6"] {
        let (a, b) = tokio::join!(
            node_of(&pool, first.as_ref(), owner),
            node_of(&pool, second.as_ref(), owner)
        );
        assert_eq!(a, b, "session {owner} on two nodes");
        assert_eq!(first.placement(Some(owner)), second.placement(Some(owner)));
    }
    // Placement requests for one session reaching every node at once: one node takes it, and
    // every answer names that node.
    let client = async_nats::connect(pool.cluster.url(0)).await.unwrap();
    let nodes = first.nodes();
    for session in ["q1", "q2", "q3", "q4", "q5"] {
        let asks = nodes.iter().map(|beat| {
            let client = client.clone();
            let subject = format!("dsh.node.{}.{}.place", beat.node, beat.epoch);
            async move {
                let answer = client
                    .request(subject, json!({"session": session}).to_string().into())
                    .await
                    .unwrap();
                serde_json::from_slice::<Value>(&answer.payload).unwrap()["ok"].clone()
            }
        });
        let answers = futures_util::future::join_all(asks).await;
        assert!(answers[0].is_object(), "{answers:?}");
        assert!(answers.iter().all(|a| *a == answers[0]), "{answers:?}");
    }
    first.shutdown().await;
    second.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_node_is_declared_dead_and_kills_its_orphans_when_continued() {
    let mut pool = Pool::start(1, 2);
    let (front, mut events) = pool.front().await;
    let home = node_of(&pool, front.as_ref(), "s").await;
    let (task, task_pid) = start_sleeper(&pool, front.as_ref(), "s").await;
    pool.signal(home, "-STOP");
    let stopped = Instant::now();
    let ended = next_event(&mut events).await;
    assert_eq!(
        (ended.id.as_str(), ended.state),
        (task.id.as_str(), TaskState::Lost)
    );
    assert!(
        stopped.elapsed() >= Duration::from_millis(LEASE_MS - 300),
        "declared dead before its lease ran out: {:?}",
        stopped.elapsed()
    );
    // The session goes on elsewhere.
    assert_eq!(node_of(&pool, front.as_ref(), "s").await, 1 - home);
    // Continued, the node finds its lease gone: it kills its task and ends.
    pool.signal(home, "-CONT");
    let child = pool.nodes[home].as_mut().unwrap();
    let deadline = Instant::now() + PROMPT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the continued node did not end");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(!status.success(), "{status}");
    wait_until("the orphan was killed", || !procs::alive(task_pid)).await;
    let log = std::fs::read_to_string(pool.dir.path().join(format!("n{home}.log"))).unwrap();
    assert!(log.contains("could not renew its heartbeat"), "{log}");
    front.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_server_dies_fails_over_and_is_not_declared_dead() {
    let mut pool = tokio::task::spawn_blocking(|| Pool::with_lease(3, 1, FAILOVER_LEASE_MS))
        .await
        .unwrap();
    let (front, mut events) = pool.front().await;
    let task = front
        .start(spec(front.as_ref(), "s", "sleep 3; echo done"))
        .await
        .unwrap();
    // Node 0 prefers server 0: it goes, and the node carries on through another.
    tokio::task::block_in_place(|| pool.cluster.kill(0));
    let ended = next_event(&mut events).await;
    assert_eq!(
        (ended.id.as_str(), ended.state, ended.exit_code),
        (task.id.as_str(), TaskState::Completed, Some(0)),
        "{}",
        pool.logs()
    );
    assert_eq!(front.read_output(&task.id).unwrap().stdout.text, "done\n");
    assert_eq!(run(front.as_ref(), "s", "echo on").await, "on\n");
    front.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_request_id_twice_starts_once() {
    let pool = Pool::start(1, 1);
    let (front, _events) = pool.front().await;
    let epoch = front.nodes()[0].epoch.clone();
    let client = async_nats::connect(pool.cluster.url(0)).await.unwrap();
    let base = format!("dsh.node.n0.{epoch}");
    let placed = client
        .request(
            format!("{base}.place"),
            json!({"session": "s1"}).to_string().into(),
        )
        .await
        .unwrap();
    let placed: Value = serde_json::from_slice(&placed.payload).unwrap();
    assert_eq!(placed["ok"]["node"], "n0", "{placed}");

    let marks = pool.dir.path().join("marks");
    let start = json!({"jsonrpc": "2.0", "id": 1, "method": "start", "params": {
        "request_id": "same-1",
        "spec": {"command": format!("echo x >> {}", quoted(&marks.display().to_string())),
                 "workdir": pool.dir.path(), "timeout_ms": 10000.0, "owner": null}}});
    let ask = || {
        let client = client.clone();
        let subject = format!("{base}.rpc");
        let body = start.to_string();
        async move {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert("Dsh-Session", "s1");
            let answer = client
                .request_with_headers(subject, headers, body.into())
                .await
                .unwrap();
            serde_json::from_slice::<Value>(&answer.payload).unwrap()
        }
    };
    // Eight copies at once, then again after it ended.
    let answers = futures_util::future::join_all((0..8).map(|_| ask())).await;
    let a = answers[0].clone();
    for b in &answers {
        assert_eq!(a["result"], b["result"], "{a} {b}");
    }
    assert_eq!(a["result"]["ok"]["owner"], "s1", "{a}");
    wait_until("the command ran", || lines(&marks).len() == 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let c = ask().await;
    assert_eq!(c["result"]["ok"]["id"], a["result"]["ok"]["id"], "{c}");
    assert_eq!(lines(&marks), ["x"]);
    // The claim is in the pool's store, naming the node.
    let js = async_nats::jetstream::new(client.clone());
    let requests = js.get_key_value("dsh-requests").await.unwrap();
    let claim: Value =
        serde_json::from_slice(&requests.get("same-1").await.unwrap().unwrap()).unwrap();
    assert_eq!(claim["node"], "n0");
    // A session not placed on the node is refused.
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Dsh-Session", "nobody");
    let refused = client
        .request_with_headers(format!("{base}.rpc"), headers, start.to_string().into())
        .await
        .unwrap();
    let refused: Value = serde_json::from_slice(&refused.payload).unwrap();
    assert_eq!(refused["error"]["code"], -32005, "{refused}");
    // The services API sees the node.
    let mut info = client.subscribe("probe.info").await.unwrap();
    client
        .publish_with_reply("$SRV.INFO.dsh-executor", "probe.info", "".into())
        .await
        .unwrap();
    let info = tokio::time::timeout(PROMPT, info.next())
        .await
        .unwrap()
        .unwrap();
    let info: Value = serde_json::from_slice(&info.payload).unwrap();
    assert_eq!(info["metadata"]["node"], "n0", "{info}");
    front.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_front_that_comes_back_within_the_grace_finds_its_session_and_after_it_nothing_runs() {
    let pool = Pool::start(1, 2);
    let (home, task_pid) = {
        let (front, _events) = pool.front().await;
        let home = node_of(&pool, front.as_ref(), "s").await;
        let (_, task_pid) = start_sleeper(&pool, front.as_ref(), "s").await;
        (home, task_pid)
        // The front goes away without a word (dropped, not shut down).
    };
    // Back within the grace: the same session, on the same node, its task still running.
    tokio::time::sleep(Duration::from_millis(SESSION_GRACE_MS / 2)).await;
    {
        let (front, _events) = pool.front().await;
        assert_eq!(node_of(&pool, front.as_ref(), "s").await, home);
        assert!(
            procs::alive(task_pid),
            "the task outlived a front that came back"
        );
        // Held for longer than the grace, by this front's word alone.
        tokio::time::sleep(Duration::from_millis(SESSION_GRACE_MS * 2)).await;
        assert!(procs::alive(task_pid), "a held session's task was killed");
    }
    // Gone for longer than the grace: the node killed the session's task.
    wait_until("the unheld session's task was killed", || {
        !procs::alive(task_pid)
    })
    .await;
    let (front, _events) = pool.front().await;
    assert_eq!(run(front.as_ref(), "s", "echo again").await, "again\n");
    front.shutdown().await;
}

/// A `tools/call` of `dsh-host mcp` and its text.
fn mcp_call(mcp: &mut mcp_child::McpChild, name: &str, arguments: Value) -> String {
    let id = mcp
        .request(
            "tools/call",
            json!({ "name": name, "arguments": arguments }),
        )
        .unwrap();
    let result = mcp.response(id, PROMPT).unwrap();
    result["result"]["content"]
        .as_array()
        .unwrap_or_else(|| panic!("no content: {result}"))
        .iter()
        .map(|block| block["text"].as_str().unwrap_or_default().to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_front_on_three_servers_and_three_nodes_tells_the_model_of_a_lost_node() {
    // Replicated heartbeats on three servers are slower on a loaded machine: a longer lease.
    let lease_ms = 4000;
    let mut pool = tokio::task::spawn_blocking(move || Pool::with_lease(3, 3, lease_ms))
        .await
        .unwrap();
    // Every node live, as a front sees them.
    drop(pool.front().await);
    let cache = pool.dir.path().join("cache");
    let mut mcp = mcp_child::spawn(
        [
            "--executor".to_string(),
            pool.cluster.urls().join(","),
            format!("--nats-heartbeat-ms={HEARTBEAT_MS}"),
            format!("--nats-lease-ms={lease_ms}"),
        ],
        &cache,
    );
    let id = mcp
        .request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "pool-test", "version": "0"}}),
        )
        .unwrap();
    mcp.response(id, PROMPT).unwrap();
    mcp.notify("notifications/initialized", json!({})).unwrap();

    let pwd = mcp_call(
        &mut mcp,
        "bash",
        json!({"command": "pwd", "description": "Where"}),
    );
    let home = pool.node_named(&pwd);
    let started = mcp_call(
        &mut mcp,
        "bash",
        json!({"command": "sleep 30", "description": "Wait", "run_in_background": true}),
    );
    assert_eq!(started, "started background task bash-1");
    pool.signal(home, "-KILL");
    let _ = pool.nodes[home].as_mut().unwrap().wait();
    // The next call finds the node gone (nobody answers on its subjects), the session goes on on
    // another node, and the result carries the notice.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let next = mcp_call(
        &mut mcp,
        "bash",
        json!({"command": "pwd", "description": "Where now"}),
    );
    assert!(
        next.contains(
            "background bash task bash-1 was lost [status: lost: the executor is gone; the \
             command may or may not have finished]. Its output can no longer be read."
        ),
        "{next}"
    );
    let elsewhere = pool.node_named(next.lines().next().unwrap());
    assert_ne!(elsewhere, home, "{next}");
    // The result's last line (before the notice) says the session moved, once.
    let moved = format!(
        "[executor: node n{home} was lost; this session now runs on node n{elsewhere}, where \
         files written by earlier commands may be missing]"
    );
    assert_eq!(next.matches("[executor: ").count(), 1, "{next}");
    let dir = pool.node_dir(elsewhere).display().to_string();
    assert!(next.starts_with(&format!("{dir}\n{moved}\n")), "{next}");
    let after = mcp_call(
        &mut mcp,
        "bash",
        json!({"command": "pwd", "description": "Where still"}),
    );
    assert_eq!(after, format!("{dir}\n"), "told once");
    let output = mcp_call(&mut mcp, "bash_output", json!({"task_id": "bash-1"}));
    assert_eq!(
        output,
        "(output unavailable: the executor is gone)\n[status: lost: the executor is gone; the \
         command may or may not have finished]"
    );
    drop(mcp.stdin.take());
    let _ = mcp.child.wait();
}

/// A request of a placed session is resolved by the front as the session's node would (its
/// heartbeat says how), without asking the node: the same spec, the same refusals, and an
/// answer while the node is stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_placed_session_is_resolved_as_its_node_would_without_asking_it() {
    // A lease longer than the test: the stopped node is never taken for dead.
    let pool = Pool::with_lease(1, 1, 120_000);
    let (front, _events) = pool.front().await;
    let request =
        |owner: &str, command: &str, workdir: Option<&str>, timeout_ms: Option<f64>| Request {
            command: command.to_string(),
            workdir: workdir.map(str::to_string),
            timeout_ms,
            owner: Some(owner.to_string()),
        };
    let long = "x".repeat(1024 * 1024 + 1);
    let cases = [
        ("true", None, None),
        ("true", Some("/tmp"), Some(1500.0)),
        ("true", None, Some(1e12)),
        ("true", None, Some(-1.0)),
    ];
    // Placed now; every later request of this session is resolved at the front.
    assert_eq!(run(front.as_ref(), "placed", "true").await, "");
    for (i, (command, workdir, timeout)) in cases.iter().enumerate() {
        // The first request of a new session is placed and resolved by its node.
        let fresh = format!("fresh-{i}");
        let by_node = front.resolve(request(&fresh, command, *workdir, *timeout));
        let by_front = front.resolve(request("placed", command, *workdir, *timeout));
        let without_owner = |r: Result<Spec, ExecError>| r.map(|s| Spec { owner: None, ..s });
        assert_eq!(
            format!("{:?}", without_owner(by_front)),
            format!("{:?}", without_owner(by_node)),
            "case {i}"
        );
    }
    assert_eq!(
        spec(front.as_ref(), "placed", "true").workdir,
        pool.node_dir(0).display().to_string()
    );
    // Refused as a local executor refuses them (on the way to a node, JSON has no NaN, and a
    // command of the node's limit is more than a NATS message carries).
    for (command, timeout) in [("true", Some(f64::NAN)), (long.as_str(), None)] {
        assert!(matches!(
            front.resolve(request("placed", command, None, timeout)),
            Err(ExecError::InvalidRequest(_))
        ));
    }
    // Stopped, the node answers nothing; its placed session still resolves.
    pool.signal(0, "-STOP");
    let resolved = front.resolve(request("placed", "echo hi", None, Some(2000.0)));
    pool.signal(0, "-CONT");
    let resolved = resolved.expect("resolved without the node");
    assert_eq!(resolved.timeout_ms, 2000.0);
    assert_eq!(resolved.owner.as_deref(), Some("placed"));
    assert_eq!(run(front.as_ref(), "placed", "echo after").await, "after\n");
    front.shutdown().await;
}

/// A session that ended is forgotten: by the front at once (nothing it kept for it grows with
/// the sessions a long-lived front serves), by its node after the session grace; the other
/// sessions, and the same owner coming back, carry on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ended_session_is_forgotten_by_the_front_then_by_its_node() {
    let pool = Pool::start(1, 1);
    let (front, mut events) = pool.front().await;
    assert_eq!(run(front.as_ref(), "kept", "echo k").await, "k\n");
    let (task, task_pid) = start_sleeper(&pool, front.as_ref(), "ended").await;
    assert_eq!(front.sessions_held(), 2);
    wait_until("the node counts both sessions", || {
        front.nodes().first().is_some_and(|beat| beat.sessions == 2)
    })
    .await;
    // As the host ends a session: its running tasks killed, then the executor told.
    assert!(front.kill(&task.id).unwrap());
    assert_eq!(next_event(&mut events).await.id, task.id);
    front.end_session("ended");
    assert_eq!(front.sessions_held(), 1);
    assert!(front.placement(Some("ended")).is_none());
    assert!(
        matches!(front.get(&task.id), Err(ExecError::UnknownTask(_))),
        "an ended session's task is still kept"
    );
    wait_until("the node forgot the ended session", || {
        front.nodes().first().is_some_and(|beat| beat.sessions == 1)
    })
    .await;
    assert!(!procs::alive(task_pid));
    assert_eq!(run(front.as_ref(), "kept", "echo still").await, "still\n");
    assert_eq!(run(front.as_ref(), "ended", "echo anew").await, "anew\n");
    assert_eq!(front.sessions_held(), 2);
    front.shutdown().await;
}

/// The host tells the pool when an agent session ends (dropped), so a front serving many
/// sessions one after another keeps nothing for those that ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_session_that_ends_is_forgotten_by_the_pool_front() {
    let pool = Pool::start(1, 1);
    let (front, events) = pool.front().await;
    let mut options = dsh_host::HostOptions::new();
    options.cache_dir = Some(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("component-cache"));
    let host = dsh_host::ToolHost::new(options, front.clone(), events)
        .await
        .expect("the host loads");
    for round in 0..3 {
        let session = host.open_session(None);
        let arguments = json!({"command": format!("echo {round}"), "description": "Echo"});
        let result = host
            .call(
                "bash",
                &arguments.to_string(),
                &session.caller(),
                CancellationToken::new(),
            )
            .await;
        assert_eq!(result.text, format!("{round}\n"));
        assert_eq!(front.sessions_held(), 1);
        drop(session);
        assert_eq!(front.sessions_held(), 0, "round {round}");
    }
    host.shutdown().await;
}

/// A node that answers nothing although its heartbeat has not expired (stopped, with a long
/// lease) is dead to a front once it let the front's calls go unanswered a number of times in a
/// row: its task ends lost, once, the session goes on on another node, and the node, continued,
/// kills the task no front holds any more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_lets_calls_go_unanswered_is_dead_before_its_lease_runs_out() {
    let pool = Pool::with_lease(1, 2, 120_000);
    let options = PoolOptions {
        request_timeout: Duration::from_secs(2),
        dead_after_timeouts: 2,
        ..pool.options()
    };
    let (front, mut events) = pool.front_with(options).await;
    let home = node_of(&pool, front.as_ref(), "s").await;
    let (task, task_pid) = start_sleeper(&pool, front.as_ref(), "s").await;
    pool.signal(home, "-STOP");
    // A call that starts nothing, asked twice and unanswered twice.
    let asked = {
        let (front, id) = (front.clone(), task.id.clone());
        tokio::task::spawn_blocking(move || front.get(&id))
            .await
            .unwrap()
    };
    assert!(
        matches!(&asked, Err(ExecError::Internal(m)) if m.contains("node")),
        "{asked:?}"
    );
    let ended = next_event(&mut events).await;
    assert_eq!(
        (ended.id.as_str(), ended.state),
        (task.id.as_str(), TaskState::Lost)
    );
    assert_eq!(node_of(&pool, front.as_ref(), "s").await, 1 - home);
    pool.signal(home, "-CONT");
    wait_until("the continued node killed the task no front holds", || {
        !procs::alive(task_pid)
    })
    .await;
    // Its heartbeats, written again meanwhile, do not bring it back to this front: its task
    // was told lost and its session moved. New sessions go to the other node.
    assert!(
        front
            .nodes()
            .iter()
            .all(|beat| beat.node != format!("n{home}")),
        "a node found dead came back in the same epoch"
    );
    for owner in ["t", "u"] {
        assert_eq!(node_of(&pool, front.as_ref(), owner).await, 1 - home);
    }
    no_more_events(&mut events).await;
    front.shutdown().await;
}

/// Calls that go unanswered while the front itself is cut off from NATS say nothing of the
/// nodes: none is taken for dead, no task is told lost, and the session carries on where it
/// was once the front is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_unanswered_while_the_front_is_cut_off_do_not_kill_a_node() {
    let mut pool = Pool::with_lease(1, 1, 120_000);
    let options = PoolOptions {
        request_timeout: Duration::from_millis(500),
        dead_after_timeouts: 2,
        ..pool.options()
    };
    let (front, mut events) = pool.front_with(options).await;
    let (task, task_pid) = start_sleeper(&pool, front.as_ref(), "s").await;
    tokio::task::block_in_place(|| pool.cluster.kill(0));
    let asked = {
        let (front, id) = (front.clone(), task.id.clone());
        tokio::task::spawn_blocking(move || front.get(&id))
    };
    // Long enough for the call to go unanswered more than twice.
    tokio::time::sleep(Duration::from_secs(3)).await;
    tokio::task::block_in_place(|| pool.cluster.restart(0));
    let _ = asked.await.unwrap();
    assert!(
        front.nodes().iter().any(|beat| beat.node == "n0"),
        "the node was taken for dead"
    );
    wait_until("the node answers again", || {
        front
            .get(&task.id)
            .is_ok_and(|t| t.state == TaskState::Running)
    })
    .await;
    assert!(procs::alive(task_pid));
    no_more_events(&mut events).await;
    assert_eq!(node_of(&pool, front.as_ref(), "s").await, 0);
    front.shutdown().await;
}
