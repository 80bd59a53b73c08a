//! A pool of executor nodes on NATS (`docs/pool.md`).
//!
//! A node (`executor serve --nats URL`) serves this machine's executor to the pool: it answers
//! placement requests, runs the calls of the sessions placed on it (the executor protocol's
//! messages, one per NATS request), publishes their task-done events, and heartbeats its
//! liveness and load into a key-value bucket. A front ([`front::PoolExecutor`]) places each
//! session on a node on its first call and sends every later call of that session there.
//!
//! What is shared lives in three key-value buckets: the nodes' heartbeats (a key expires when
//! its node stops beating), the sessions' placements (claimed with create-if-absent, so two
//! fronts racing for one session agree), and the request ids that started a command (claimed
//! before the command starts, so no id runs twice anywhere).

pub mod front;
pub mod node;
mod store;
pub mod survey;

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use front::PoolExecutor;
pub use node::{NodeOptions, serve_node};

/// The NATS header naming the session a message belongs to.
pub const SESSION_HEADER: &str = "Dsh-Session";

/// How to reach the pool, and its timing. Every node and front of one pool uses the same
/// prefix, heartbeat and lease.
#[derive(Debug, Clone)]
pub struct PoolOptions {
    /// NATS server URLs (`nats://host:port`, `tls://…`), tried in turn.
    pub urls: Vec<String>,
    /// A NATS credentials file (JWT and seed), if the servers ask for one.
    pub creds: Option<PathBuf>,
    /// The first token of every subject and the start of every bucket name.
    pub prefix: String,
    /// How often a node writes its heartbeat.
    pub heartbeat: Duration,
    /// How long a node is live after its last heartbeat; past it, it is dead (and a node that
    /// could not renew its own heartbeat for this long kills its tasks).
    pub lease: Duration,
    /// Copies the pool's buckets keep (1, or 3 on a 3-server cluster).
    pub replicas: usize,
    /// How long a node keeps a session no front has shown interest in (a front tells the
    /// nodes every heartbeat which of their sessions it holds); past it, the session's
    /// commands are killed and the session is forgotten.
    pub session_grace: Duration,
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            urls: vec!["nats://127.0.0.1:4222".to_string()],
            creds: None,
            prefix: "dsh".to_string(),
            heartbeat: Duration::from_millis(1000),
            lease: Duration::from_millis(5000),
            replicas: 1,
            session_grace: Duration::from_secs(60),
        }
    }
}

impl PoolOptions {
    /// Parses `nats://a:4222,nats://b:4222` (a `nats://` URL list, as `--executor` and
    /// `--nats` take it).
    pub fn urls_from(list: &str) -> Vec<String> {
        list.split(',')
            .map(str::trim)
            .filter(|url| !url.is_empty())
            .map(str::to_string)
            .collect()
    }

    fn bucket(&self, name: &str) -> String {
        format!("{}-{name}", self.prefix)
    }

    /// The shared placement subject (a queue group of every node answers it).
    fn place_any(&self) -> String {
        format!("{}.place", self.prefix)
    }

    /// The subjects of one node's epoch start with this.
    fn node_base(&self, node: &str, epoch: &str) -> String {
        format!("{}.node.{node}.{epoch}", self.prefix)
    }

    /// Connects to the servers (with the credentials, if any).
    async fn connect(&self, name: &str) -> Result<async_nats::Client, String> {
        let mut options = async_nats::ConnectOptions::new()
            .name(name)
            .connection_timeout(Duration::from_secs(5))
            // The first URL is the preferred server; the others (and those the cluster
            // announces) are where it fails over.
            .retain_servers_order()
            .retry_on_initial_connect();
        if let Some(creds) = &self.creds {
            options = options.credentials_file(creds).await.map_err(|err| {
                format!(
                    "cannot read the NATS credentials file {}: {err}",
                    creds.display()
                )
            })?;
        }
        let client = options
            .connect(self.urls.clone())
            .await
            .map_err(|err| format!("cannot connect to NATS at {}: {err}", self.urls.join(",")))?;
        Ok(client)
    }
}

/// A node's heartbeat: the value of its key in the nodes bucket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Heartbeat {
    /// The node's id.
    pub node: String,
    /// The node's epoch: random, new at every start.
    pub epoch: String,
    /// Its name and version (`dsh-host 0.7.0`).
    pub server: String,
    /// Background tasks running and foreground runs in flight.
    pub load: usize,
    /// Sessions placed on it.
    pub sessions: usize,
    /// Its executor's limits.
    pub limits: crate::Limits,
}

/// A session's placement: the value of its key in the sessions bucket, and the answer to a
/// placement request.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Placement {
    /// The node holding the session.
    pub node: String,
    /// That node's epoch when it took the session.
    pub epoch: String,
}

/// The `keepalive` notification's parameters: the sessions a front holds on the node.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Keepalive {
    sessions: Vec<String>,
}

/// A placement request's parameters.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct PlaceRequest {
    session: String,
    /// Nodes (with their epochs) the asking front found dead (nobody answered on their
    /// subjects), although their heartbeats may not have expired yet: a session held by one of
    /// them is taken over.
    #[serde(default)]
    dead: Vec<Placement>,
}

/// A name usable as one subject token and one key: letters, digits, `-` and `_`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}
