//! A look at the pool from outside: which nodes are live now, read once from the nodes bucket
//! (`dsh-host doctor --executor nats://…`). It places nothing and joins nothing.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::kv;
use futures_util::StreamExt;

use super::{Heartbeat, PoolOptions};

/// How long the survey waits for its connection to a server before it calls NATS unreachable.
const REACH_WITHIN: Duration = Duration::from_secs(5);

/// How long the survey's reads of the bucket may take together.
const READ_WITHIN: Duration = Duration::from_secs(10);

/// A live node as its heartbeat shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveNode {
    /// The heartbeat, as the node wrote it.
    pub heartbeat: Heartbeat,
    /// How long ago it was written (by the NATS server's clock against this machine's).
    pub age: Duration,
}

/// Why the survey found no node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SurveyError {
    /// No server of the list could be reached (or the credentials were refused).
    #[error("cannot reach NATS at {urls}: {reason}")]
    Unreachable {
        /// The servers, comma-separated.
        urls: String,
        /// What failed.
        reason: String,
    },
    /// NATS answered but the pool's nodes bucket cannot be read.
    #[error("the executor pool at {urls} cannot be read: {reason}")]
    Unreadable {
        /// The servers, comma-separated.
        urls: String,
        /// What failed.
        reason: String,
    },
    /// NATS answered and no node of the pool is live.
    #[error("the executor pool at {urls} has no live node ({reason})")]
    NoLiveNode {
        /// The servers, comma-separated.
        urls: String,
        /// What the bucket showed.
        reason: String,
    },
}

/// The nodes of the pool whose heartbeat is younger than the lease (as a node judges another:
/// the bucket drops an older heartbeat, but not at once), by id; never empty.
pub async fn live_nodes(options: &PoolOptions) -> Result<Vec<LiveNode>, SurveyError> {
    let urls = options.urls.join(",");
    let unreachable = |reason: String| SurveyError::Unreachable {
        urls: urls.clone(),
        reason,
    };
    let (client, _refusals) = options
        .connect("dsh-host doctor")
        .await
        .map_err(&unreachable)?;
    // The client connects in the background (and would keep trying): wait for it, bounded.
    let deadline = Instant::now() + REACH_WITHIN;
    while client.connection_state() != async_nats::connection::State::Connected {
        if Instant::now() >= deadline {
            return Err(unreachable(format!(
                "no server answered within {REACH_WITHIN:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let unreadable = |reason: String| SurveyError::Unreadable {
        urls: urls.clone(),
        reason,
    };
    let bucket = options.bucket("nodes");
    let read = async {
        let js = async_nats::jetstream::new(client.clone());
        // No bucket: no node has started in this pool (under this prefix), or the server has
        // no JetStream.
        let Ok(store) = js.get_key_value(bucket.clone()).await else {
            return Ok(None);
        };
        read_live(&store, options.lease)
            .await
            .map(Some)
            .map_err(|err| format!("the bucket {bucket}: {err}"))
    };
    let nodes = tokio::time::timeout(READ_WITHIN, read)
        .await
        .map_err(|_| unreadable(format!("no answer within {READ_WITHIN:?}")))?
        .map_err(&unreadable)?;
    let no_live_node = |reason: String| SurveyError::NoLiveNode {
        urls: urls.clone(),
        reason,
    };
    match nodes {
        None => Err(no_live_node(format!(
            "no bucket {bucket}: no node has joined it, or the server has no JetStream"
        ))),
        Some(nodes) if nodes.is_empty() => Err(no_live_node(format!(
            "no heartbeat in the bucket {bucket} is younger than the lease of {:?}",
            options.lease
        ))),
        Some(nodes) => Ok(nodes),
    }
}

/// The heartbeats in `store` younger than `lease`, by node id: what the doctor lists and what a
/// front starts from.
pub(crate) async fn read_live(store: &kv::Store, lease: Duration) -> Result<Vec<LiveNode>, String> {
    let mut keys = store.keys().await.map_err(|err| err.to_string())?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128);
    let mut nodes = Vec::new();
    while let Some(key) = keys.next().await {
        let key = key.map_err(|err| err.to_string())?;
        let Some(entry) = store.entry(&key).await.map_err(|err| err.to_string())? else {
            continue;
        };
        if entry.operation != kv::Operation::Put {
            continue;
        }
        let Ok(heartbeat) = serde_json::from_slice::<Heartbeat>(&entry.value) else {
            continue;
        };
        let age = now - entry.created.unix_timestamp_nanos();
        if age > lease.as_nanos() as i128 {
            continue;
        }
        let age = Duration::from_nanos(u64::try_from(age).unwrap_or(0));
        nodes.push(LiveNode { heartbeat, age });
    }
    nodes.sort_by(|a, b| a.heartbeat.node.cmp(&b.heartbeat.node));
    Ok(nodes)
}
