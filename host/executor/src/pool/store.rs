//! The pool's key-value buckets: nodes' heartbeats, sessions' placements, claimed request ids.

use std::time::Duration;

use async_nats::jetstream::{self, kv};

use super::PoolOptions;

/// How long a request id's claim is kept: a repeat of an id older than this is not
/// recognised (clients repeat an id within seconds).
const REQUEST_CLAIMS: Duration = Duration::from_secs(24 * 3600);

/// The three buckets.
#[derive(Clone)]
pub(super) struct Buckets {
    /// Node id → [`super::Heartbeat`]; a key expires a lease after its last heartbeat.
    pub nodes: kv::Store,
    /// Session id → [`super::Placement`].
    pub sessions: kv::Store,
    /// Request id → [`super::Placement`] of the node that started it.
    pub requests: kv::Store,
}

impl Buckets {
    /// Opens the buckets; with `create`, makes those missing (a node does; a front waits for
    /// one to).
    pub async fn open(
        js: &jetstream::Context,
        options: &PoolOptions,
        create: bool,
    ) -> Result<Buckets, String> {
        let bucket = |name: &str, max_age: Duration| kv::Config {
            bucket: options.bucket(name),
            history: 1,
            max_age,
            num_replicas: options.replicas,
            ..Default::default()
        };
        Ok(Buckets {
            nodes: open(js, bucket("nodes", options.lease), create).await?,
            sessions: open(js, bucket("sessions", Duration::ZERO), create).await?,
            requests: open(js, bucket("requests", REQUEST_CLAIMS), create).await?,
        })
    }
}

async fn open(
    js: &jetstream::Context,
    config: kv::Config,
    create: bool,
) -> Result<kv::Store, String> {
    if let Ok(store) = js.get_key_value(config.bucket.clone()).await {
        return Ok(store);
    }
    if !create {
        return Err(format!(
            "no bucket {} yet (no node of the pool has started)",
            config.bucket
        ));
    }
    let name = config.bucket.clone();
    js.create_key_value(config)
        .await
        .map_err(|err| format!("cannot create the bucket {name}: {err}"))
}
