//! `dsh-host doctor --executor nats://…`: a real `nats-server` (`support/nats.rs`), real nodes
//! (`dsh-host executor serve --nats`), and the doctor's report checked against the heartbeats
//! the nodes wrote into the pool's `dsh-nodes` bucket.

#[path = "support/nats.rs"]
mod nats;
#[path = "support/nested_cargo.rs"]
mod nested_cargo;
#[path = "support/provision.rs"]
mod provision;
#[path = "support/wait.rs"]
mod wait;

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

use nats::Cluster;

const BIN: &str = env!("CARGO_BIN_EXE_dsh-host");
const HEARTBEAT_MS: u64 = 200;
const LEASE_MS: u64 = 1500;
/// Generous bound for anything that should be "prompt".
const PROMPT: Duration = Duration::from_secs(20);

/// Node `n{i}` of the pool at `url`, in a directory of its own, with `extra` executor flags.
fn spawn_node(url: &str, dir: &Path, i: usize, extra: &[&str]) -> Child {
    let home = dir.join(format!("n{i}"));
    std::fs::create_dir_all(&home).unwrap();
    let log = std::fs::File::create(dir.join(format!("n{i}.log"))).unwrap();
    Command::new(BIN)
        .args(["executor", "serve", "--nats", url])
        .args(["--node-id", &format!("n{i}")])
        .arg(format!("--nats-heartbeat-ms={HEARTBEAT_MS}"))
        .arg(format!("--nats-lease-ms={LEASE_MS}"))
        .arg("--grace-ms=200")
        .args(extra)
        .current_dir(&home)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

fn doctor(url: &str) -> Output {
    Command::new(BIN)
        .args(["doctor", "--executor", url])
        .arg(format!("--nats-heartbeat-ms={HEARTBEAT_MS}"))
        .arg(format!("--nats-lease-ms={LEASE_MS}"))
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The heartbeats in the `dsh-nodes` bucket, by node id, once `want` nodes have written one.
async fn heartbeats(url: &str, want: usize) -> Vec<Value> {
    let client = async_nats::connect(url).await.unwrap();
    let js = async_nats::jetstream::new(client);
    let (js, what) = (&js, format!("{want} heartbeats"));
    wait::until_some(&what, PROMPT, || async move {
        let mut beats = Vec::new();
        if let Ok(store) = js.get_key_value("dsh-nodes").await {
            for node in ["n0", "n1"] {
                if let Ok(Some(value)) = store.get(node).await {
                    beats.push(serde_json::from_slice::<Value>(&value).unwrap());
                }
            }
        }
        (beats.len() == want).then_some(beats)
    })
    .await
}

/// Nodes, killed when the test ends however it ends.
struct Nodes(Vec<Child>);

impl Nodes {
    /// SIGTERM to each: it kills its tasks and leaves the pool (its heartbeat is deleted).
    fn terminate(&mut self) {
        for child in &mut self.0 {
            let status = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status()
                .unwrap();
            assert!(status.success());
            let _ = child.wait();
        }
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[test]
fn doctor_lists_each_live_node_with_its_epoch_and_fails_naming_the_pool_without_one() {
    let cluster = Cluster::start(1);
    let url = cluster.url(0);
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();

    // No node has joined yet: no bucket, an error naming the servers.
    let out = doctor(&url);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("the executor pool at {url} has no live node"))
            && err.contains("no bucket dsh-nodes"),
        "{err}"
    );

    let mut nodes = Nodes(vec![
        spawn_node(&url, dir.path(), 0, &[]),
        spawn_node(&url, dir.path(), 1, &["--timeout-ms=45000"]),
    ]);
    let beats = runtime.block_on(heartbeats(&url, 2));
    let out = doctor(&url);
    let report = text(&out.stdout);
    assert!(out.status.success(), "{report}\n{}", text(&out.stderr));
    assert!(
        report.starts_with(&format!("executor: the pool of executor nodes at {url}\n")),
        "{report}"
    );
    assert!(report.contains("\nlive nodes: 2\n"), "{report}");
    let lines: Vec<&str> = report.lines().collect();
    let mut at = Vec::new();
    for beat in &beats {
        let line = format!(
            "node {}: epoch {}, {}, load 0, sessions 0, last heartbeat ",
            beat["node"].as_str().unwrap(),
            beat["epoch"].as_str().unwrap(),
            beat["server"].as_str().unwrap()
        );
        let i = lines
            .iter()
            .position(|l| l.starts_with(&line))
            .unwrap_or_else(|| panic!("no line {line:?} in:\n{report}"));
        at.push(i);
        let timeout = beat["limits"]["default_timeout_ms"].as_f64().unwrap();
        assert!(
            lines[i + 1].starts_with(&format!("  limits: timeout {timeout} ms by default, ")),
            "{report}"
        );
        assert_eq!(
            lines[i + 2],
            "  sandbox: off (commands have the node's user's full authority)",
            "{report}"
        );
    }
    assert!(at[0] < at[1], "nodes not in order of their ids:\n{report}");
    assert_eq!(beats[1]["limits"]["default_timeout_ms"], 45000.0);
    // The epochs shown are still the nodes' own: neither started again meanwhile.
    let after = runtime.block_on(heartbeats(&url, 2));
    for (before, after) in beats.iter().zip(&after) {
        assert_eq!(before["epoch"], after["epoch"]);
    }

    // Both nodes leave the pool: an error naming the servers.
    nodes.terminate();
    let out = doctor(&url);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("the executor pool at {url} has no live node")),
        "{err}"
    );
}

#[test]
fn doctor_names_the_servers_it_cannot_reach() {
    // A loopback port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("nats://127.0.0.1:{port}");
    let out = doctor(&url);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert_eq!(text(&out.stdout), "");
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("cannot reach NATS at {url}")),
        "{err}"
    );
}
