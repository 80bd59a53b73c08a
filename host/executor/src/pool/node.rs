//! A node of the pool: this machine's executor, serving the sessions placed on it.
//!
//! Registered with the NATS services API as `dsh-executor`, with three endpoints: `place` on its
//! own subject, `place` on the pool's shared subject (a queue group: whichever node gets it
//! takes the session), and `rpc` on its own subject, where each request is one executor
//! protocol message of the session its `Dsh-Session` header names. A command starts only after
//! its request id was claimed in the requests bucket; a store that cannot be reached means the
//! command does not start.
//!
//! The node writes its heartbeat every interval. One that could not renew it for a lease (cut
//! off, or stopped and continued) takes its tasks for orphans: it kills them all and ends, so
//! that a new start (a new epoch) begins with nothing of the old one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::kv;
use async_nats::service::ServiceExt;
use futures_util::StreamExt;
use serde_json::Value;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

use super::store::Buckets;
use super::{Heartbeat, PlaceRequest, Placement, PoolOptions, SESSION_HEADER, valid_name};
use crate::service::session::{self, Message, Session, Sink, answer, lock};
use crate::service::wire::{self, Outcome, RpcError, code};
use crate::{ExecError, Executor, Task, TaskState};

/// How long a failing request store is asked again before a command is refused.
const CLAIM_RETRIES: Duration = Duration::from_secs(5);

/// A node's identity and the pool it joins.
#[derive(Debug, Clone)]
pub struct NodeOptions {
    /// The pool.
    pub pool: PoolOptions,
    /// This node's id (unique in the pool; letters, digits, `-`, `_`).
    pub node_id: String,
    /// Name and version, e.g. `dsh-host 0.9.0`.
    pub server: String,
}

/// A session placed on this node.
struct Placed {
    core: Arc<Session>,
    /// When a front last called, or said it holds the session.
    seen: Mutex<Instant>,
    /// Held while a `run` or `start` is checked and claimed, so that two copies of one request
    /// arriving together start it once.
    claims: tokio::sync::Mutex<()>,
}

struct Node {
    executor: Arc<dyn Executor>,
    client: async_nats::Client,
    buckets: Buckets,
    options: NodeOptions,
    epoch: String,
    base: String,
    sessions: Mutex<HashMap<String, Arc<Placed>>>,
    /// When the heartbeat was last written.
    last_beat: Mutex<Instant>,
}

/// Joins the pool and serves `executor` until `stop` is cancelled (then every task is killed
/// and the node leaves the pool) or the node lost its lease (then every task is killed and an
/// error says so). `events` is the receiver of the task-done channel `executor` was made with.
pub async fn serve_node(
    executor: Arc<dyn Executor>,
    mut events: UnboundedReceiver<Task>,
    options: NodeOptions,
    stop: CancellationToken,
) -> Result<(), String> {
    if !valid_name(&options.node_id) {
        return Err(format!(
            "--node-id {:?}: expected letters, digits, '-' and '_' (at most 128)",
            options.node_id
        ));
    }
    let (client, server_events) = options
        .pool
        .connect(&format!("dsh-host node {}", options.node_id))
        .await?;
    let js = async_nats::jetstream::new(client.clone());
    let buckets = Buckets::open(&js, &options.pool, true).await?;
    // 96 random bits: a restarted node never answers to an older epoch's subjects.
    let epoch = format!("{}{}", crate::random_hex(), crate::random_hex());
    let base = options.pool.node_base(&options.node_id, &epoch);
    let node = Arc::new(Node {
        executor,
        client: client.clone(),
        buckets,
        epoch: epoch.clone(),
        base: base.clone(),
        sessions: Mutex::new(HashMap::new()),
        last_beat: Mutex::new(Instant::now()),
        options,
    });
    let metadata = HashMap::from([
        ("node".to_string(), node.options.node_id.clone()),
        ("epoch".to_string(), epoch.clone()),
    ]);
    let service = client
        .service_builder()
        .description("dsh-host executor node")
        .metadata(metadata)
        .start("dsh-executor", env!("CARGO_PKG_VERSION"))
        .await
        .map_err(|err| format!("cannot register with the NATS services API: {err}"))?;
    let endpoint = |name: &'static str, subject: String, queue: Option<String>| {
        let mut builder = service.endpoint_builder().name(name);
        if let Some(queue) = queue {
            builder = builder.queue_group(queue);
        }
        async move {
            builder
                .add(subject.clone())
                .await
                .map_err(|err| format!("cannot serve {subject}: {err}"))
        }
    };
    let mut place = endpoint("place", format!("{base}.place"), None).await?;
    let mut place_any = endpoint(
        "place-any",
        node.options.pool.place_any(),
        Some(format!("{}-nodes", node.options.pool.prefix)),
    )
    .await?;
    let mut rpc = endpoint("rpc", format!("{base}.rpc"), None).await?;
    // Fronts use a node once they see its heartbeat: by then it listens (a request to a node
    // nobody listens for makes a front take that node for dead).
    let _ = client.flush().await;
    // The first heartbeat is written again for a while: a bucket just made on a cluster may
    // not take writes at once ("no stream found"). A refusal ends it at once.
    let joined_by = Instant::now() + node.options.pool.lease.max(Duration::from_secs(10));
    let mut pause = Duration::from_millis(50);
    loop {
        match node.beat().await {
            Ok(()) => break,
            // Its subscriptions or its heartbeat not permitted: say so, not only the timeout.
            Err(err) if server_events.last().is_some() => {
                let refused = server_events.last().unwrap_or_default();
                return Err(format!("{err} (the NATS server refused: {refused})"));
            }
            Err(err) if Instant::now() >= joined_by => return Err(err),
            Err(err) => {
                tracing::debug!(%err, "the first heartbeat was not written; writing it again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(500));
            }
        }
    }
    tracing::info!(node = %node.options.node_id, %epoch, "executor node joined the pool");

    let mut ticks = tokio::time::interval(node.options.pool.heartbeat);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let result = loop {
        tokio::select! {
            () = stop.cancelled() => break Ok(()),
            Some(request) = place.next() => {
                tokio::spawn(node.clone().place(request));
            }
            Some(request) = place_any.next() => {
                tokio::spawn(node.clone().place(request));
            }
            Some(request) = rpc.next() => {
                tokio::spawn(node.clone().rpc(request));
            }
            Some(task) = events.recv() => node.task_done(task).await,
            _ = ticks.tick() => {
                let silent = lock(&node.last_beat).elapsed();
                if silent > node.options.pool.lease {
                    break Err(format!(
                        "node {} could not renew its heartbeat for {silent:?} (the lease is {:?}): \
                         its tasks were killed as orphans; start it again to rejoin the pool",
                        node.options.node_id, node.options.pool.lease
                    ));
                }
                let node = node.clone();
                tokio::spawn(async move {
                    if let Err(err) = node.beat().await {
                        tracing::warn!(%err, "cannot write the heartbeat");
                    }
                    node.forget_unheld().await;
                });
            }
        }
    };
    // Nothing outlives the node: foreground runs are stopped, tasks killed and awaited.
    let placed: Vec<Arc<Placed>> = lock(&node.sessions).values().cloned().collect();
    for session in &placed {
        session.core.abort_runs();
    }
    node.executor.shutdown().await;
    // NATS may be out of reach (the reason the lease ran out): leaving it is bounded.
    let leave = async {
        let _ = service.stop().await;
        if result.is_ok() {
            // A clean leave: fronts see the node gone at once, not a lease later.
            let _ = node.buckets.nodes.delete(&node.options.node_id).await;
        }
        let _ = client.flush().await;
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), leave).await;
    result
}

/// Where an `rpc` request's answer goes: its reply subject, once.
struct ReplySink {
    request: Mutex<Option<async_nats::service::Request>>,
}

impl Sink for ReplySink {
    fn send(&self, line: String) {
        if let Some(request) = lock(&self.request).take() {
            tokio::spawn(async move {
                if let Err(err) = request.respond(Ok(line.into())).await {
                    tracing::debug!(%err, "cannot answer a request");
                }
            });
        }
    }
}

impl Node {
    fn mine(&self) -> Placement {
        Placement {
            node: self.options.node_id.clone(),
            epoch: self.epoch.clone(),
        }
    }

    /// Writes the heartbeat (within one interval).
    async fn beat(&self) -> Result<(), String> {
        let (load, sessions) = {
            let placed = lock(&self.sessions);
            let runs: usize = placed.values().map(|p| p.core.runs_in_flight()).sum();
            (runs, placed.len())
        };
        let running = self
            .executor
            .list()
            .iter()
            .filter(|task| task.state == TaskState::Running)
            .count();
        let beat = Heartbeat {
            node: self.options.node_id.clone(),
            epoch: self.epoch.clone(),
            server: self.options.server.clone(),
            load: load + running,
            sessions,
            limits: self.executor.limits(),
            resolution: self.executor.resolution(),
        };
        let value = serde_json::to_vec(&beat).map_err(|err| err.to_string())?;
        let put = self.buckets.nodes.put(&self.options.node_id, value.into());
        match tokio::time::timeout(
            self.options.pool.heartbeat.max(Duration::from_millis(100)),
            put,
        )
        .await
        {
            Ok(Ok(_)) => {
                *lock(&self.last_beat) = Instant::now();
                Ok(())
            }
            Ok(Err(err)) => Err(err.to_string()),
            Err(_) => Err("no acknowledgement within the heartbeat interval".to_string()),
        }
    }

    /// Whether `placement`'s node is live in that epoch: its heartbeat is there, of that
    /// epoch, and younger than a lease (the bucket drops older ones, but not at once).
    async fn alive(&self, placement: &Placement) -> bool {
        match self.buckets.nodes.entry(&placement.node).await {
            Ok(Some(entry)) if entry.operation == kv::Operation::Put => {
                let written = entry.created.unix_timestamp_nanos();
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as i128);
                let fresh = now - written <= self.options.pool.lease.as_nanos() as i128;
                fresh
                    && serde_json::from_slice::<Heartbeat>(&entry.value)
                        .is_ok_and(|beat| beat.epoch == placement.epoch)
            }
            _ => false,
        }
    }

    fn adopt(&self, session: &str) {
        lock(&self.sessions)
            .entry(session.to_string())
            .or_insert_with(|| {
                Arc::new(Placed {
                    core: Arc::new(Session::new(self.executor.clone())),
                    seen: Mutex::new(Instant::now()),
                    claims: tokio::sync::Mutex::new(()),
                })
            });
    }

    async fn place(self: Arc<Self>, request: async_nats::service::Request) {
        let answer = match serde_json::from_slice::<PlaceRequest>(&request.message.payload) {
            Err(err) => Err(format!("a placement request that does not decode: {err}")),
            Ok(p) if !valid_name(&p.session) => {
                Err(format!("an invalid session id {:?}", p.session))
            }
            Ok(p) => self.claim(&p.session, &p.dead).await,
        };
        let body = match answer {
            Ok(placement) => serde_json::json!({ "ok": placement }),
            Err(message) => serde_json::json!({ "err": message }),
        };
        let _ = request.respond(Ok(body.to_string().into())).await;
    }

    /// Takes `session` unless a live node holds it: the placement the front is to use.
    async fn claim(&self, session: &str, dead: &[Placement]) -> Result<Placement, String> {
        let mine = self.mine();
        if lock(&self.sessions).contains_key(session) {
            return Ok(mine);
        }
        let value: bytes::Bytes = serde_json::to_vec(&mine).map_err(|e| e.to_string())?.into();
        for _ in 0..3 {
            match self.buckets.sessions.create(session, value.clone()).await {
                Ok(_) => {
                    self.adopt(session);
                    return Ok(mine);
                }
                Err(err) if err.kind() == kv::CreateErrorKind::AlreadyExists => {}
                Err(err) => return Err(format!("the pool's session store: {err}")),
            }
            let entry = match self.buckets.sessions.entry(session).await {
                Ok(Some(entry)) => entry,
                // Deleted meanwhile: try to create it again.
                Ok(None) => continue,
                Err(err) => return Err(format!("the pool's session store: {err}")),
            };
            let holder = serde_json::from_slice::<Placement>(&entry.value).ok();
            match holder {
                Some(holder) if holder == mine => {
                    self.adopt(session);
                    return Ok(mine);
                }
                Some(holder) if !dead.contains(&holder) && self.alive(&holder).await => {
                    return Ok(holder);
                }
                // Its node is dead: the session is taken over, if nobody else did first.
                _ => {
                    if self
                        .buckets
                        .sessions
                        .update(session, value.clone(), entry.revision)
                        .await
                        .is_ok()
                    {
                        self.adopt(session);
                        return Ok(mine);
                    }
                }
            }
        }
        Err(format!(
            "session {session} is being placed elsewhere; try again"
        ))
    }

    async fn rpc(self: Arc<Self>, request: async_nats::service::Request) {
        let session = request
            .message
            .headers
            .as_ref()
            .and_then(|headers| headers.get(SESSION_HEADER))
            .map(|value| value.to_string());
        let payload = request.message.payload.clone();
        let sink: Arc<dyn Sink> = Arc::new(ReplySink {
            request: Mutex::new(Some(request)),
        });
        let (id, method, mut params) = match session::parse(&payload) {
            Message::Request { id, method, params } => (id, method, params),
            Message::Notification { method, params } if method == "keepalive" => {
                if let Ok(held) = session::params::<super::Keepalive>(params) {
                    let placed = lock(&self.sessions);
                    for session in held.sessions {
                        if let Some(placed) = placed.get(&session) {
                            *lock(&placed.seen) = Instant::now();
                        }
                    }
                }
                return;
            }
            Message::Notification { method, params } => {
                if let Some(placed) = session.and_then(|s| lock(&self.sessions).get(&s).cloned()) {
                    *lock(&placed.seen) = Instant::now();
                    placed.core.notified(&method, params);
                }
                return;
            }
            Message::Ignored | Message::Invalid { id: None, .. } => return,
            Message::Invalid {
                id: Some(id),
                error,
            } => return answer(sink.as_ref(), &id, Err(error)),
        };
        let placed = session
            .as_ref()
            .and_then(|s| lock(&self.sessions).get(s).cloned());
        if let Some(placed) = &placed {
            *lock(&placed.seen) = Instant::now();
        }
        let (Some(session), Some(placed)) = (session, placed) else {
            let error = RpcError::new(
                code::UNKNOWN_SESSION,
                format!(
                    "the session is not placed on node {} (epoch {}); place it again",
                    self.options.node_id, self.epoch
                ),
            );
            return answer(sink.as_ref(), &id, Err(error));
        };
        match method.as_str() {
            "run" | "start" => {
                // Every task of a session is that session's, whatever the spec said.
                if let Some(spec) = params.as_mut().and_then(|p| p.get_mut("spec")) {
                    spec["owner"] = Value::String(session.clone());
                }
                let request_id = params
                    .as_ref()
                    .and_then(|p| p.get("request_id"))
                    .and_then(Value::as_str)
                    .map(str::to_string);
                let _claiming = placed.claims.lock().await;
                if let Some(request_id) = request_id
                    && !placed.core.knows(&request_id)
                    && let Err(refusal) = self.claim_request(&request_id).await
                {
                    let outcome = Outcome::<Value>::Err(ExecError::SpawnFailed(refusal));
                    return answer(sink.as_ref(), &id, Ok(wire::to_value(outcome)));
                }
                placed.core.request(sink, id, &method, params);
            }
            "list" => {
                let tasks: Vec<Task> = self
                    .executor
                    .list()
                    .into_iter()
                    .filter(|task| task.owner.as_deref() == Some(session.as_str()))
                    .collect();
                answer(sink.as_ref(), &id, Ok(wire::to_value(tasks)));
            }
            _ => {
                // A task of another session is not this session's to see.
                let task = params
                    .as_ref()
                    .and_then(|p| p.get("task"))
                    .and_then(Value::as_str);
                if let Some(task) = task
                    && self.executor.owner_of(task).as_deref() != Some(session.as_str())
                    && method != "owner_of"
                {
                    let outcome = Outcome::<Value>::Err(ExecError::UnknownTask(task.to_string()));
                    return answer(sink.as_ref(), &id, Ok(wire::to_value(outcome)));
                }
                if !placed
                    .core
                    .request(sink.clone(), id.clone(), &method, params)
                {
                    let error =
                        RpcError::new(code::METHOD_NOT_FOUND, format!("no method {method:?}"));
                    answer(sink.as_ref(), &id, Err(error));
                }
            }
        }
    }

    /// Forgets the sessions no front held for the session grace: their foreground runs are
    /// stopped, their tasks killed, their placement given up.
    async fn forget_unheld(&self) {
        let grace = self.options.pool.session_grace;
        let unheld: Vec<(String, Arc<Placed>)> = {
            let mut placed = lock(&self.sessions);
            // Cut off from NATS, the node hears no front: the grace counts from when it is
            // back.
            if self.client.connection_state() != async_nats::connection::State::Connected {
                for session in placed.values() {
                    *lock(&session.seen) = Instant::now();
                }
                return;
            }
            let unheld: Vec<String> = placed
                .iter()
                .filter(|(_, p)| lock(&p.seen).elapsed() > grace)
                .map(|(session, _)| session.clone())
                .collect();
            unheld
                .into_iter()
                .filter_map(|session| placed.remove(&session).map(|p| (session, p)))
                .collect()
        };
        for (session, placed) in unheld {
            placed.core.abort_runs();
            let tasks: Vec<Task> = self
                .executor
                .list()
                .into_iter()
                .filter(|t| t.owner.as_deref() == Some(session.as_str()))
                .filter(|t| t.state == TaskState::Running)
                .collect();
            for task in &tasks {
                let _ = self.executor.kill(&task.id);
            }
            if let Ok(Some(entry)) = self.buckets.sessions.entry(&session).await
                && serde_json::from_slice::<Placement>(&entry.value).ok() == Some(self.mine())
            {
                let _ = self
                    .buckets
                    .sessions
                    .delete_expect_revision(&session, Some(entry.revision))
                    .await;
            }
            tracing::info!(%session, killed = tasks.len(), grace = ?grace, "no front holds the session any more: its commands were killed");
        }
    }

    /// Claims `request_id` for this node before its command starts; the refusal otherwise
    /// (the command does not start).
    async fn claim_request(&self, request_id: &str) -> Result<(), String> {
        if !valid_name(request_id) {
            return Err(format!(
                "request id {request_id:?}: expected letters, digits, '-' and '_'; the command \
                 did not start"
            ));
        }
        let value: bytes::Bytes = serde_json::to_vec(&self.mine())
            .map_err(|e| e.to_string())?
            .into();
        // A store that fails (a server of the cluster just went, a new leader is being
        // chosen) is asked again for a while before the command is refused.
        let until = Instant::now() + CLAIM_RETRIES;
        let mut pause = Duration::from_millis(50);
        loop {
            match self
                .buckets
                .requests
                .create(request_id, value.clone())
                .await
            {
                Ok(_) => return Ok(()),
                Err(err) if err.kind() == kv::CreateErrorKind::AlreadyExists => {
                    return Err(format!(
                        "request id {request_id} was started before (by another node, or an \
                         earlier start of this one); it is not run again: the command did not \
                         start"
                    ));
                }
                Err(err) if Instant::now() >= until => {
                    return Err(format!(
                        "the pool's request store cannot be reached ({err}); the command did not \
                         start"
                    ));
                }
                Err(err) => {
                    tracing::debug!(%err, "the pool's request store failed; asking again");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
            }
        }
    }

    /// Records a task-done event in its session and publishes it to the session's fronts.
    async fn task_done(&self, task: Task) {
        let Some(session) = task.owner.clone() else {
            return;
        };
        let placed = lock(&self.sessions).get(&session).cloned();
        let Some(placed) = placed else {
            tracing::warn!(task = %task.id, %session, "a task-done event of a session not placed here");
            return;
        };
        let event = placed.core.record(task);
        let line = wire::notification("task_done", &event);
        let subject = format!("{}.events.{session}", self.base);
        if let Err(err) = self.client.publish(subject, line.into()).await {
            // The front asks for the events it missed (`events`).
            tracing::debug!(%err, "cannot publish a task-done event");
        }
    }
}
