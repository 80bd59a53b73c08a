//! The front: an [`Executor`] whose sessions run on the pool's nodes.
//!
//! Each session (an owner token, or the front's own session for calls without one) is placed on
//! a node on its first call: the least loaded live node takes it, unless a live node holds it
//! already (then that one is used, so two fronts agree). Every later call of the session goes
//! to that node, with a request id; a call that timed out is asked again with the same id, of
//! the same node only. Task ids are the front's own (`bash-1`, `bash-2`, …), whatever node
//! runs them.
//!
//! The front watches the nodes' heartbeats. A node is dead when its heartbeat is older than the
//! lease, when it left, or when it answers with another epoch; then each of its running tasks
//! ends once, `lost`, every call in flight to it fails saying the command may or may not have
//! run, and its sessions are placed anew on their next call. The first `run` or `start` result
//! of a session placed anew says where it moved from and why ([`RunResult::relocated`]), once.
//!
//! The NATS client runs on a runtime of the front's own, so that the trait's synchronous
//! operations can wait for their answers from any thread, even one of a single-threaded
//! runtime.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::kv;
use futures_util::StreamExt;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use super::store::Buckets;
use super::{Heartbeat, PlaceRequest, Placement, PoolOptions, SESSION_HEADER};
use crate::service::session::lock;
use crate::service::wire::{self, Offsets, Outcome, RpcError};
use crate::{
    BoxFuture, ExecError, Executor, Limits, Read, Relocation, RelocationReason, Request, RunResult,
    Spec, Task, TaskState,
};

/// How long `connect` waits for a live node (its limits are the pool's).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// How long an operation answered at once is asked again before it fails.
const QUICK_TOTAL: Duration = Duration::from_secs(30);

/// Dead nodes a front names in its placement requests.
const DEAD_REMEMBERED: usize = 64;

/// Ended tasks kept for `get`, `list` and `owner_of`.
const KEPT_TASKS: usize = 4096;

/// An [`Executor`] on a pool of nodes.
pub struct PoolExecutor {
    runtime: Option<tokio::runtime::Runtime>,
    front: Arc<Front>,
}

impl std::fmt::Debug for PoolExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolExecutor")
            .field("urls", &self.front.options.urls)
            .finish_non_exhaustive()
    }
}

struct Front {
    options: PoolOptions,
    client: async_nats::Client,
    buckets: Buckets,
    limits: Limits,
    /// The session of calls without an owner token.
    own_session: String,
    request_prefix: String,
    next_request: AtomicU64,
    next_message: AtomicU64,
    state: Mutex<State>,
    task_done: UnboundedSender<Task>,
    stop: CancellationToken,
    /// What the NATS server last refused this client (a permissions violation).
    server_events: super::ServerEvents,
}

#[derive(Default)]
struct State {
    /// Live nodes as last seen: node id → its heartbeat and when it was seen.
    nodes: HashMap<String, (Heartbeat, Instant)>,
    /// Sessions this front placed on each node since its last heartbeat (which counts them).
    placed_since: HashMap<String, Vec<Instant>>,
    /// The front lost its connection since the last look at the leases.
    blind: bool,
    /// Nodes found dead, newest last (a few): placement requests name them.
    dead: VecDeque<Placement>,
    /// Placed sessions.
    sessions: HashMap<String, PlacedSession>,
    /// What the front knows of each session it serves.
    owners: HashMap<String, Served>,
    /// Tasks by the front's id.
    tasks: HashMap<String, TaskView>,
    /// (node, epoch, the node's task id) → the front's id.
    names: HashMap<(String, String, String), String>,
    next_task: u64,
    /// Ended tasks, oldest first.
    ended: VecDeque<String>,
    /// When each node's latest heartbeat reached this front.
    heard: HashMap<String, Instant>,
    /// Calls each node let go unanswered in a row (each timed out).
    timeouts: HashMap<Placement, u32>,
    /// Calls in flight, by node and epoch: a dead node's are told.
    in_flight: HashMap<u64, (Placement, CancellationToken)>,
    /// Sessions taken off their node and not yet told: where they were and why; `to_node` is
    /// empty until the session is placed anew. The first `run` or `start` result of the session
    /// on its new node carries it.
    relocated: HashMap<String, Relocation>,
}

/// A session the front serves.
#[derive(Default)]
struct Served {
    /// Its owner token, as its callers gave it (a task-done event names only the session).
    owner: Option<String>,
    /// The default working directory its last request without one was resolved to: a spec
    /// with it that is run on another node (the session moved) runs in that node's default.
    default_workdir: Option<String>,
}

struct PlacedSession {
    placement: Placement,
    /// The highest event sequence number passed on.
    cursor: u64,
    /// Ends the session's event subscription.
    events: CancellationToken,
}

struct TaskView {
    session: String,
    placement: Placement,
    /// The node's id of the task.
    remote: String,
    /// The owner token the task's caller gave.
    owner: Option<String>,
    /// The task as last seen, with the front's id and the caller's owner.
    task: Task,
    /// Where the next read starts.
    offsets: Offsets,
}

/// Why a call got no answer, in the pool's words.
type Failure = crate::service::failure::Failure<crate::service::failure::Pool>;

/// The pool's session id of an owner token: the same on every front, and no token on the wire.
fn session_of_token(token: &str) -> String {
    let digest = Sha256::digest(format!("dsh-session:{token}").as_bytes());
    crate::hex::hex(&digest[..12])
}

impl PoolExecutor {
    /// Connects to the pool and waits (at most [`CONNECT_TIMEOUT`]) for a live node.
    /// `task_done` receives one event per background task when it ends, or when its node is
    /// lost while it runs.
    pub fn connect(
        options: PoolOptions,
        task_done: UnboundedSender<Task>,
    ) -> Result<Arc<PoolExecutor>, String> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("dsh-pool-front")
            .enable_all()
            .build()
            .map_err(|err| format!("cannot start the pool client's runtime: {err}"))?;
        let made = wait_on(runtime.handle(), Front::connect(options, task_done)).and_then(|m| m);
        let front = match made {
            Ok(front) => front,
            Err(err) => {
                // Dropping a runtime blocks, which panics in an async context (the CLI's).
                runtime.shutdown_background();
                return Err(err);
            }
        };
        runtime.spawn(front.clone().watch_nodes());
        Ok(Arc::new(PoolExecutor {
            runtime: Some(runtime),
            front,
        }))
    }

    /// The live nodes as this front sees them, by id: their heartbeats.
    pub fn nodes(&self) -> Vec<Heartbeat> {
        let mut nodes: Vec<Heartbeat> = lock(&self.front.state)
            .nodes
            .values()
            .map(|(beat, _)| beat.clone())
            .collect();
        nodes.sort_by(|a, b| a.node.cmp(&b.node));
        nodes
    }

    /// The node holding the session of `owner` (the front's own session for `None`), if it is
    /// placed.
    pub fn placement(&self, owner: Option<&str>) -> Option<Placement> {
        let session = owner.map_or_else(|| self.front.own_session.clone(), session_of_token);
        lock(&self.front.state)
            .sessions
            .get(&session)
            .map(|placed| placed.placement.clone())
    }

    /// How many sessions this front holds on the pool's nodes (placed, or with a task or an
    /// owner remembered): the state it keeps grows with them.
    pub fn sessions_held(&self) -> usize {
        let state = lock(&self.front.state);
        let mut held: std::collections::HashSet<&String> = state.sessions.keys().collect();
        held.extend(state.owners.keys());
        held.extend(state.relocated.keys());
        held.extend(state.tasks.values().map(|view| &view.session));
        held.len()
    }

    fn wait<T: Send + 'static>(
        &self,
        work: impl std::future::Future<Output = T> + Send + 'static,
    ) -> Result<T, ExecError> {
        let Some(runtime) = &self.runtime else {
            return Err(ExecError::Internal(
                "the pool client is shut down".to_string(),
            ));
        };
        wait_on(runtime.handle(), work).map_err(ExecError::Internal)
    }

    /// Runs `work` on the front's runtime from any context, async or not.
    async fn spawned<T: Send + 'static>(
        &self,
        work: impl std::future::Future<Output = T> + Send + 'static,
    ) -> Result<T, ExecError> {
        let Some(runtime) = &self.runtime else {
            return Err(ExecError::Internal(
                "the pool client is shut down".to_string(),
            ));
        };
        runtime
            .spawn(work)
            .await
            .map_err(|err| ExecError::Internal(format!("the pool client failed: {err}")))
    }
}

/// Runs `work` on `handle` and blocks this thread until it is done.
fn wait_on<T: Send + 'static>(
    handle: &tokio::runtime::Handle,
    work: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T, String> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    handle.spawn(async move {
        let _ = tx.send(work.await);
    });
    rx.recv().map_err(|_| "the pool client stopped".to_string())
}

impl Drop for PoolExecutor {
    fn drop(&mut self) {
        self.front.stop.cancel();
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Front {
    async fn connect(
        options: PoolOptions,
        task_done: UnboundedSender<Task>,
    ) -> Result<Arc<Front>, String> {
        let (client, server_events) = options.connect("dsh-host front").await?;
        let js = async_nats::jetstream::new(client.clone());
        let deadline = Instant::now() + CONNECT_TIMEOUT;
        let (buckets, beat) = loop {
            let found = match Buckets::open(&js, &options, false).await {
                Ok(buckets) => live_nodes(&buckets, options.lease)
                    .await
                    .into_iter()
                    .next()
                    .map(|beat| (buckets, beat))
                    .ok_or_else(|| "no live executor node in the pool".to_string()),
                Err(err) => Err(err),
            };
            match found {
                Ok(found) => break found,
                Err(err) if Instant::now() >= deadline => {
                    return Err(format!(
                        "the executor pool at {} has no live node ({err}) after {CONNECT_TIMEOUT:?}",
                        options.urls.join(",")
                    ));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        };
        // The live nodes as they stand, before the watch of their heartbeats takes over.
        let mut state = State::default();
        for beat in live_nodes(&buckets, options.lease).await {
            state
                .nodes
                .insert(beat.node.clone(), (beat, Instant::now()));
        }
        Ok(Arc::new(Front {
            client,
            buckets,
            limits: beat.limits,
            own_session: format!("{}{}", crate::random_hex(), crate::random_hex()),
            request_prefix: crate::random_hex(),
            next_request: AtomicU64::new(1),
            next_message: AtomicU64::new(1),
            state: Mutex::new(state),
            task_done,
            stop: CancellationToken::new(),
            server_events,
            options,
        }))
    }

    /// The session of `owner`, remembered with it (a task-done event names only the session).
    fn session_of(&self, owner: Option<&str>) -> String {
        let session = owner.map_or_else(|| self.own_session.clone(), session_of_token);
        lock(&self.state)
            .owners
            .entry(session.clone())
            .or_insert_with(|| Served {
                owner: owner.map(str::to_string),
                default_workdir: None,
            });
        session
    }

    /// What a `run` or `start` of `spec` sends: its session, a new request id, and the spec
    /// with the session as its owner; with the owner token its caller gave.
    fn starting(&self, spec: Spec) -> (String, Option<String>, wire::StartParams) {
        let owner = spec.owner.clone();
        let session = self.session_of(owner.as_deref());
        let params = wire::StartParams {
            request_id: self.request_id(),
            spec: Spec {
                owner: Some(session.clone()),
                ..spec
            },
        };
        (session, owner, params)
    }

    /// `method` (`run` or `start`) of `session`, asked again of the same node until `deadline`;
    /// with the session's placement once answered (which its task is named under).
    async fn call_placed<T: DeserializeOwned>(
        self: Arc<Self>,
        session: String,
        method: &'static str,
        params: wire::StartParams,
        deadline: Duration,
    ) -> (Result<T, Failure>, Placement) {
        let (answer, placement) = self
            .call_at::<T>(&session, method, params, Some(deadline))
            .await;
        (
            answer,
            placement.unwrap_or_else(|| self_placement(&self, &session)),
        )
    }

    /// `session`'s last request without a workdir was resolved to `workdir`.
    fn defaulted(&self, session: &str, workdir: &str) {
        if let Some(served) = lock(&self.state).owners.get_mut(session) {
            served.default_workdir = Some(workdir.to_string());
        }
    }

    /// A `run` or `start` of `session` about to be asked of its node: a spec whose workdir is
    /// the default it was resolved with, for a node the session has since left, is given this
    /// node's default instead (the old one may not exist here).
    fn rebase(&self, session: &str, params: &mut Value) {
        let Some(here) = self.resolution_for(session).map(|r| r.workdir) else {
            return;
        };
        let Some(workdir) = params
            .get_mut("spec")
            .and_then(|spec| spec.get_mut("workdir"))
        else {
            return;
        };
        let mut state = lock(&self.state);
        let Some(served) = state.owners.get_mut(session) else {
            return;
        };
        if let Some(before) = &served.default_workdir
            && *before != here
            && workdir.as_str() == Some(before.as_str())
        {
            *workdir = Value::String(here.clone());
            served.default_workdir = Some(here);
        }
    }

    /// How `session`'s node resolves requests, when it is placed on a live node that told it.
    fn resolution_for(&self, session: &str) -> Option<crate::Resolution> {
        let state = lock(&self.state);
        let placement = &state.sessions.get(session)?.placement;
        let (beat, _) = state.nodes.get(&placement.node)?;
        if beat.epoch != placement.epoch {
            return None;
        }
        beat.resolution.clone()
    }

    /// The session of `owner` ended: what this front kept for it is dropped, and its node,
    /// no longer told that it is held, forgets it after the session grace.
    fn end_session(&self, owner: &str) {
        let session = session_of_token(owner);
        let mut state = lock(&self.state);
        state.owners.remove(&session);
        state.relocated.remove(&session);
        if let Some(placed) = state.sessions.remove(&session) {
            placed.events.cancel();
        }
        let ended: Vec<String> = state
            .tasks
            .iter()
            .filter(|(_, view)| view.session == session)
            .map(|(id, _)| id.clone())
            .collect();
        for id in ended {
            if let Some(view) = state.tasks.remove(&id) {
                state
                    .names
                    .remove(&(view.placement.node, view.placement.epoch, view.remote));
            }
        }
        let State { ended, tasks, .. } = &mut *state;
        ended.retain(|id| tasks.contains_key(id));
    }

    fn request_id(&self) -> String {
        let n = self.next_request.fetch_add(1, Ordering::Relaxed);
        format!("{}-{n}", self.request_prefix)
    }

    /// Follows the nodes' heartbeats: a node whose heartbeat is older than the lease, that
    /// left, or that came back with another epoch is dead.
    async fn watch_nodes(self: Arc<Self>) {
        let mut ticks = tokio::time::interval(self.options.heartbeat);
        loop {
            let mut watch = match self.buckets.nodes.watch_all().await {
                Ok(watch) => {
                    // A new watch starts from the latest heartbeats: the leases start again.
                    lock(&self.state).blind = true;
                    watch
                }
                Err(err) => {
                    tracing::warn!(%err, "cannot watch the pool's nodes");
                    tokio::select! {
                        () = self.stop.cancelled() => return,
                        () = tokio::time::sleep(self.options.heartbeat) => continue,
                    }
                }
            };
            loop {
                tokio::select! {
                    () = self.stop.cancelled() => return,
                    entry = watch.next() => match entry {
                        Some(Ok(entry)) => self.seen(entry),
                        Some(Err(err)) => {
                            tracing::warn!(%err, "the watch of the pool's nodes failed");
                            break;
                        }
                        None => break,
                    },
                    _ = ticks.tick() => {
                        self.expire();
                        tokio::spawn(self.clone().keep_alive());
                    }
                }
            }
        }
    }

    fn seen(&self, entry: kv::Entry) {
        let mut state = lock(&self.state);
        let previous = state
            .nodes
            .get(&entry.key)
            .map(|(beat, _)| beat.epoch.clone());
        if entry.operation != kv::Operation::Put {
            state.nodes.remove(&entry.key);
            drop(state);
            if let Some(epoch) = previous {
                self.dead(
                    &entry.key,
                    &epoch,
                    "it left the pool",
                    RelocationReason::NodeLeft,
                );
            }
            return;
        }
        let Ok(beat) = serde_json::from_slice::<Heartbeat>(&entry.value) else {
            return;
        };
        // A node this front found dead (it let calls go unanswered, say) stays dead in that
        // epoch, whatever its heartbeats say: its tasks were told lost and its sessions moved.
        // Only a new start of it (a new epoch) is taken up.
        let gone = Placement {
            node: beat.node.clone(),
            epoch: beat.epoch.clone(),
        };
        if entry.key != beat.node || state.dead.contains(&gone) {
            return;
        }
        // A node's heartbeat counts its sessions: this front's placements on it stop counting
        // once they are surely in one (two heartbeats), not at the next heartbeat, which may
        // have been written before them.
        let counted = self.options.heartbeat * 2;
        if let Some(placed) = state.placed_since.get_mut(&entry.key) {
            placed.retain(|at| at.elapsed() < counted);
        }
        state
            .nodes
            .insert(entry.key.clone(), (beat.clone(), Instant::now()));
        state.heard.insert(entry.key.clone(), Instant::now());
        drop(state);
        if let Some(epoch) = previous
            && epoch != beat.epoch
        {
            self.dead(
                &entry.key,
                &epoch,
                "it started again",
                RelocationReason::NodeRestarted,
            );
        }
    }

    /// Tells each node which of its sessions this front holds.
    async fn keep_alive(self: Arc<Self>) {
        let mut held: HashMap<Placement, Vec<String>> = HashMap::new();
        for (session, placed) in lock(&self.state).sessions.iter() {
            held.entry(placed.placement.clone())
                .or_default()
                .push(session.clone());
        }
        for (placement, sessions) in held {
            let subject = format!(
                "{}.rpc",
                self.options.node_base(&placement.node, &placement.epoch)
            );
            let line = wire::notification("keepalive", super::Keepalive { sessions });
            let _ = self.client.publish(subject, line.into()).await;
        }
    }

    /// `session` is no longer on `placement`'s node (no front held it for the node's session
    /// grace, and the node killed its commands): its running tasks there end once, lost, and it
    /// is placed anew on its next call.
    fn session_gone(&self, session: &str, placement: &Placement) {
        let mut lost = Vec::new();
        {
            let mut state = lock(&self.state);
            if let Some(placed) = state.sessions.remove(session) {
                placed.events.cancel();
                state.moved(session, &placed.placement, RelocationReason::SessionDropped);
            }
            let mut ended = Vec::new();
            for (id, view) in state.tasks.iter_mut() {
                if view.session == session
                    && view.placement == *placement
                    && view.task.state == TaskState::Running
                {
                    view.task.state = TaskState::Lost;
                    view.task.exit_code = None;
                    view.task.signal = None;
                    lost.push(view.task.clone());
                    ended.push(id.clone());
                }
            }
            for id in ended {
                state.ended(id);
            }
        }
        for task in lost {
            let _ = self.task_done.send(task);
        }
    }

    fn expire(&self) {
        let lease = self.options.lease;
        let connected = self.client.connection_state() == async_nats::connection::State::Connected;
        let expired: Vec<(String, String)> = {
            let mut state = lock(&self.state);
            // Heartbeats this front could not see (its own server went) say nothing of the
            // nodes: their leases start again once it is back.
            if !connected {
                state.blind = true;
                // Nor do calls that went unanswered meanwhile.
                state.timeouts.clear();
                return;
            }
            if std::mem::take(&mut state.blind) {
                let now = Instant::now();
                for (_, seen) in state.nodes.values_mut() {
                    *seen = now;
                }
                return;
            }
            let expired: Vec<(String, String)> = state
                .nodes
                .iter()
                .filter(|(_, (_, seen))| seen.elapsed() > lease)
                .map(|(node, (beat, _))| (node.clone(), beat.epoch.clone()))
                .collect();
            for (node, _) in &expired {
                state.nodes.remove(node);
            }
            expired
        };
        for (node, epoch) in expired {
            self.dead(
                &node,
                &epoch,
                "its heartbeat stopped",
                RelocationReason::NodeLost,
            );
        }
    }

    /// Node `node` in `epoch` is dead: its calls in flight fail, its running tasks end once,
    /// and its sessions are placed anew on their next call.
    fn dead(&self, node: &str, epoch: &str, why: &str, reason: RelocationReason) {
        let gone = Placement {
            node: node.to_string(),
            epoch: epoch.to_string(),
        };
        let mut lost = Vec::new();
        {
            let mut state = lock(&self.state);
            if state
                .nodes
                .get(node)
                .is_some_and(|(beat, _)| beat.epoch == epoch)
            {
                state.nodes.remove(node);
            }
            state.timeouts.remove(&gone);
            if !state.dead.contains(&gone) {
                state.dead.push_back(gone.clone());
                while state.dead.len() > DEAD_REMEMBERED {
                    state.dead.pop_front();
                }
            }
            let mut moved = Vec::new();
            state.sessions.retain(|session, placed| {
                let keep = placed.placement != gone;
                if !keep {
                    placed.events.cancel();
                    moved.push(session.clone());
                }
                keep
            });
            for session in moved {
                state.moved(&session, &gone, reason);
            }
            for (_, (placement, cancel)) in state.in_flight.iter() {
                if *placement == gone {
                    cancel.cancel();
                }
            }
            let mut ended = Vec::new();
            for (id, view) in state.tasks.iter_mut() {
                if view.placement == gone && view.task.state == TaskState::Running {
                    view.task.state = TaskState::Lost;
                    view.task.exit_code = None;
                    view.task.signal = None;
                    lost.push(view.task.clone());
                    ended.push(id.clone());
                }
            }
            for id in ended {
                state.ended(id);
            }
        }
        tracing::warn!(%node, %epoch, why, lost_tasks = lost.len(), "an executor node of the pool is dead");
        for task in lost {
            let _ = self.task_done.send(task);
        }
    }

    fn live(&self, placement: &Placement) -> bool {
        lock(&self.state)
            .nodes
            .get(&placement.node)
            .is_some_and(|(beat, _)| beat.epoch == placement.epoch)
    }

    /// The session's placement, placing it first when it has none.
    async fn placed(self: &Arc<Self>, session: &str) -> Result<Placement, Failure> {
        if let Some(placed) = lock(&self.state).sessions.get(session) {
            return Ok(placed.placement.clone());
        }
        let dead = lock(&self.state).dead.iter().cloned().collect();
        let body = serde_json::to_vec(&PlaceRequest {
            session: session.to_string(),
            dead,
        })
        .map_err(|err| Failure::NotSent(err.to_string()))?;
        // The least loaded live node first (its running commands, then its sessions, those
        // placed since its last heartbeat included); the shared subject when none is known.
        let mut candidates: Vec<(usize, usize, String, String)> = {
            let state = lock(&self.state);
            state
                .nodes
                .values()
                .map(|(beat, _)| {
                    let recent = state.placed_since.get(&beat.node).map_or(0, Vec::len);
                    (
                        beat.load,
                        beat.sessions + recent,
                        beat.node.clone(),
                        beat.epoch.clone(),
                    )
                })
                .collect()
        };
        candidates.sort();
        let mut subjects: Vec<(Option<String>, String)> = candidates
            .iter()
            .map(|(_, _, node, epoch)| {
                let subject = format!("{}.place", self.options.node_base(node, epoch));
                (Some(node.clone()), subject)
            })
            .collect();
        subjects.push((None, self.options.place_any()));
        let mut last = "no executor node of the pool answered".to_string();
        for (node, subject) in subjects {
            // Counted on the node asked before its answer, so that placements made at the same
            // time do not all pick the same node; moved if another node holds the session.
            let asked = node.inspect(|node| {
                lock(&self.state)
                    .placed_since
                    .entry(node.clone())
                    .or_default()
                    .push(Instant::now());
            });
            let uncount = |node: &Option<String>| {
                if let Some(node) = node
                    && let Some(placed) = lock(&self.state).placed_since.get_mut(node)
                {
                    placed.pop();
                }
            };
            let request = async_nats::Request::new()
                .payload(body.clone().into())
                .timeout(Some(self.options.request_timeout));
            // The server may not let this client ask: then nobody was asked.
            let refused = self.server_events.refused(&subject);
            let answer = tokio::select! {
                answer = self.client.send_request(subject.clone(), request) => answer,
                refused = refused => {
                    uncount(&asked);
                    last = format!("placement: the NATS server refused: {refused}");
                    continue;
                }
            };
            uncount(&asked);
            let answer = match answer {
                Ok(message) => message,
                Err(err) => {
                    last = format!("placement: {err}");
                    continue;
                }
            };
            let answer: Value = match serde_json::from_slice(&answer.payload) {
                Ok(answer) => answer,
                Err(err) => {
                    last = format!("a placement answer that does not decode: {err}");
                    continue;
                }
            };
            if let Some(placement) = answer
                .get("ok")
                .and_then(|ok| serde_json::from_value::<Placement>(ok.clone()).ok())
            {
                lock(&self.state)
                    .placed_since
                    .entry(placement.node.clone())
                    .or_default()
                    .push(Instant::now());
                self.clone().follow(session, placement.clone()).await;
                return Ok(placement);
            }
            last = answer
                .get("err")
                .and_then(Value::as_str)
                .unwrap_or("a placement answer without a placement")
                .to_string();
        }
        Err(Failure::NotSent(last))
    }

    /// Records `session` on `placement` and follows its task-done events.
    async fn follow(self: Arc<Self>, session: &str, placement: Placement) {
        let subject = format!(
            "{}.events.{session}",
            self.options.node_base(&placement.node, &placement.epoch)
        );
        let subscription = match self.client.subscribe(subject).await {
            Ok(subscription) => subscription,
            Err(err) => {
                tracing::warn!(%err, "cannot follow a session's events");
                return;
            }
        };
        let events = self.stop.child_token();
        {
            let mut state = lock(&self.state);
            if state.sessions.contains_key(session) {
                return;
            }
            state.sessions.insert(
                session.to_string(),
                PlacedSession {
                    placement: placement.clone(),
                    cursor: 0,
                    events: events.clone(),
                },
            );
            if let Some(relocation) = state.relocated.get_mut(session) {
                relocation.to_node = placement.node.clone();
            }
        }
        let front = self.clone();
        let session_id = session.to_string();
        let mut subscription = subscription;
        let followed = placement.clone();
        tokio::spawn(async move {
            let placement = followed;
            loop {
                tokio::select! {
                    () = events.cancelled() => return,
                    message = subscription.next() => {
                        let Some(message) = message else { return };
                        if let Ok(incoming) = serde_json::from_slice::<wire::Incoming>(&message.payload)
                            && let Some(params) = incoming.params
                            && let Ok(event) = serde_json::from_value::<wire::Event>(params)
                        {
                            front.event(&session_id, &placement, event).await;
                        }
                    }
                }
            }
        });
        // Events sent before the subscription (a session taken up again) are asked for.
        let cursor = lock(&self.state)
            .sessions
            .get(session)
            .map_or(0, |s| s.cursor);
        let params = serde_json::json!({ "cursor": cursor });
        if let Ok(events) = self
            .ask(session, &placement, "events", &params, None)
            .await
            .and_then(Failure::decode::<Vec<wire::Event>>)
        {
            for event in events {
                self.event(session, &placement, event).await;
            }
        }
    }

    /// Passes a task-done event on once.
    async fn event(&self, session: &str, placement: &Placement, event: wire::Event) {
        let task = {
            let mut state = lock(&self.state);
            let Some(placed) = state.sessions.get_mut(session) else {
                return;
            };
            if placed.placement != *placement || event.seq <= placed.cursor {
                return;
            }
            placed.cursor = event.seq;
            let id = state.name(session, placement, &event.task);
            let Some(view) = state.tasks.get_mut(&id) else {
                return;
            };
            if view.task.state != TaskState::Running {
                // Already ended here (its node was taken for dead).
                None
            } else {
                view.task = front_task(&event.task, &id, view.owner.clone());
                let task = view.task.clone();
                state.ended(id);
                Some(task)
            }
        };
        if let Some(task) = task {
            let _ = self.task_done.send(task);
        }
        self.notify(
            session,
            placement,
            "ack",
            wire::Cursor { cursor: event.seq },
        )
        .await;
    }

    async fn notify(
        &self,
        session: &str,
        placement: &Placement,
        method: &str,
        params: impl Serialize,
    ) {
        let subject = format!(
            "{}.rpc",
            self.options.node_base(&placement.node, &placement.epoch)
        );
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(SESSION_HEADER, session);
        let line = wire::notification(method, params);
        let _ = self
            .client
            .publish_with_headers(subject, headers, line.into())
            .await;
    }

    /// One call of `session`'s node, answered with the method's `result`. With a `deadline`
    /// (a `run` or `start`: asked again only of the same node, with the same request id), it
    /// waits until then; without, it asks again for [`QUICK_TOTAL`].
    async fn call<T: DeserializeOwned>(
        self: &Arc<Self>,
        session: &str,
        method: &str,
        params: impl Serialize,
        deadline: Option<Duration>,
    ) -> Result<T, Failure> {
        self.call_at(session, method, params, deadline).await.0
    }

    /// [`Front::call`], with the placement of the node that answered (none when none did).
    async fn call_at<T: DeserializeOwned>(
        self: &Arc<Self>,
        session: &str,
        method: &str,
        params: impl Serialize,
        deadline: Option<Duration>,
    ) -> (Result<T, Failure>, Option<Placement>) {
        let mut params = match serde_json::to_value(params) {
            Ok(params) => params,
            Err(err) => return (Err(Failure::NotSent(err.to_string())), None),
        };
        let (mut forgotten, mut gone) = (false, false);
        loop {
            let placement = match self.placed(session).await {
                Ok(placement) => placement,
                Err(failure) => return (Err(failure), None),
            };
            if deadline.is_some() {
                self.rebase(session, &mut params);
            }
            match self
                .ask(session, &placement, method, &params, deadline)
                .await
            {
                // The node does not have the session (it was placed there by a front that
                // thought it dead, or the node forgot it): placed anew, once. Nothing started.
                Err(Failure::Protocol(error)) if error.code == wire::code::UNKNOWN_SESSION => {
                    if forgotten {
                        return (Err(Failure::NotSent(error.message)), None);
                    }
                    forgotten = true;
                    self.session_gone(session, &placement);
                }
                // Its node is gone and nobody received the call: it is asked of the session's
                // new node, once, with the same request id. Where no node takes the session, a
                // `run` or `start` did not start.
                Err(Failure::NotSent(_)) if !gone && !self.live(&placement) => {
                    gone = true;
                }
                Err(failure) => return (Err(failure), None),
                Ok(answer) => return (Failure::decode(answer), Some(placement)),
            }
        }
    }

    /// One call of `placement`'s node.
    async fn ask(
        self: &Arc<Self>,
        session: &str,
        placement: &Placement,
        method: &str,
        params: &Value,
        deadline: Option<Duration>,
    ) -> Result<Value, Failure> {
        let subject = format!(
            "{}.rpc",
            self.options.node_base(&placement.node, &placement.epoch)
        );
        let id = self.next_message.fetch_add(1, Ordering::Relaxed);
        let line = wire::request(id, method, params);
        let cancel = CancellationToken::new();
        lock(&self.state)
            .in_flight
            .insert(id, (placement.clone(), cancel.clone()));
        let _forget = Forget { front: self, id };
        // Found dead since it was chosen (and so not told of this call): not asked.
        if !self.live(placement) {
            return Err(Failure::NotSent(format!("node {} is dead", placement.node)));
        }
        let total = deadline.unwrap_or(QUICK_TOTAL);
        let until = Instant::now() + total;
        let mut sent = false;
        // A publish the server refuses reached nobody.
        let refused = self.server_events.refused(&subject);
        tokio::pin!(refused);
        loop {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert(SESSION_HEADER, session);
            let left = until.saturating_duration_since(Instant::now());
            let attempt = if deadline.is_some() {
                left
            } else {
                left.min(self.options.request_timeout)
            };
            let request = async_nats::Request::new()
                .headers(headers)
                .payload(line.clone().into())
                .timeout(Some(attempt.max(Duration::from_millis(10))));
            let connects = self.client.statistics().connects.load(Ordering::Relaxed);
            let answer = tokio::select! {
                // Published: the node may have acted on it.
                () = cancel.cancelled() => {
                    return Err(Failure::Lost(format!("node {} is dead", placement.node)));
                }
                answer = self.client.send_request(subject.clone(), request) => answer,
                refused = &mut refused => {
                    let why = format!("the NATS server refused: {refused}");
                    return Err(if sent { Failure::Lost(why) } else { Failure::NotSent(why) });
                }
            };
            match answer {
                Ok(message) => {
                    lock(&self.state).timeouts.remove(placement);
                    return reply(&message.payload);
                }
                Err(err) => match err.kind() {
                    async_nats::client::RequestErrorKind::NoResponders => {
                        // Nobody listens on the node's subject: this attempt reached nobody,
                        // and the node is gone, if it was heard from since this front's
                        // server last took it (a node's subscriptions reach a server before
                        // its heartbeats do; a server that just started, or a front that just
                        // came back, may not know of a node that has yet to come back).
                        let heard = lock(&self.state).heard.get(&placement.node).copied();
                        if heard.is_some_and(|heard| heard >= self.server_events.connected_at()) {
                            self.dead(
                                &placement.node,
                                &placement.epoch,
                                "it does not answer",
                                RelocationReason::NodeLost,
                            );
                        }
                        let why = format!("node {} does not answer", placement.node);
                        return Err(if sent {
                            Failure::Lost(why)
                        } else {
                            Failure::NotSent(why)
                        });
                    }
                    async_nats::client::RequestErrorKind::TimedOut => {
                        sent = true;
                        // Unanswered while this front was cut off says nothing of the node.
                        let connected = self.client.connection_state()
                            == async_nats::connection::State::Connected
                            && self.client.statistics().connects.load(Ordering::Relaxed)
                                == connects;
                        let unanswered = if connected {
                            let mut state = lock(&self.state);
                            let count = state.timeouts.entry(placement.clone()).or_default();
                            *count += 1;
                            *count
                        } else {
                            0
                        };
                        if unanswered >= self.options.dead_after_timeouts {
                            self.dead(
                                &placement.node,
                                &placement.epoch,
                                &format!("it let {unanswered} calls in a row go unanswered"),
                                RelocationReason::NodeLost,
                            );
                        }
                        if Instant::now() >= until || !self.live(placement) {
                            return Err(Failure::Lost(format!(
                                "node {} did not answer in time",
                                placement.node
                            )));
                        }
                        // Asked again, of the same node, with the same ids.
                    }
                    _ => {
                        return Err(if sent {
                            Failure::Lost(err.to_string())
                        } else {
                            Failure::NotSent(err.to_string())
                        });
                    }
                },
            }
        }
    }
}

/// The current placement of a session (after `follow` recorded it).
fn self_placement(front: &Front, session: &str) -> Placement {
    lock(&front.state)
        .sessions
        .get(session)
        .map(|s| s.placement.clone())
        .unwrap_or(Placement {
            node: String::new(),
            epoch: String::new(),
        })
}

/// A JSON-RPC answer line: its `result`, or its error.
fn reply(payload: &[u8]) -> Result<Value, Failure> {
    let message: wire::Incoming = serde_json::from_slice(payload).map_err(|err| {
        Failure::Protocol(RpcError::new(
            wire::code::PARSE_ERROR,
            format!("an answer that is not JSON-RPC: {err}"),
        ))
    })?;
    match (message.result, message.error) {
        (_, Some(error)) => Err(Failure::Protocol(error)),
        (Some(result), None) => Ok(result),
        (None, None) => Ok(Value::Null),
    }
}

/// Takes a call off the books when it is done (or dropped).
struct Forget<'a> {
    front: &'a Front,
    id: u64,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        lock(&self.front.state).in_flight.remove(&self.id);
    }
}

/// The nodes whose heartbeat is younger than a lease (none when the bucket cannot be read).
async fn live_nodes(buckets: &Buckets, lease: Duration) -> Vec<Heartbeat> {
    super::survey::read_live(&buckets.nodes, lease)
        .await
        .unwrap_or_default()
        .into_iter()
        .map(|node| node.heartbeat)
        .collect()
}

/// `task` as the front shows it: its id and its caller's owner token (and no move, which only
/// `start`'s answer tells).
fn front_task(task: &Task, id: &str, owner: Option<String>) -> Task {
    Task {
        id: id.to_string(),
        owner,
        relocated: None,
        ..task.clone()
    }
}

impl State {
    /// `session` was taken off `placement`'s node: its next result says so. A move not yet told
    /// keeps its first node, where the commands the caller knows of ran.
    fn moved(&mut self, session: &str, placement: &Placement, reason: RelocationReason) {
        self.relocated
            .entry(session.to_string())
            .and_modify(|relocation| relocation.to_node.clear())
            .or_insert_with(|| Relocation {
                from_node: placement.node.clone(),
                to_node: String::new(),
                reason,
            });
    }

    /// The move of `session` to `placement`'s node, taken to be told once.
    fn relocation(&mut self, session: &str, placement: &Placement) -> Option<Relocation> {
        let placed = self
            .relocated
            .get(session)
            .is_some_and(|r| !r.to_node.is_empty() && r.to_node == placement.node);
        placed.then(|| self.relocated.remove(session)).flatten()
    }

    /// The front's id of a node's task, named now if it has none.
    fn name(&mut self, session: &str, placement: &Placement, task: &Task) -> String {
        let key = (
            placement.node.clone(),
            placement.epoch.clone(),
            task.id.clone(),
        );
        if let Some(id) = self.names.get(&key) {
            return id.clone();
        }
        self.next_task += 1;
        let id = format!("bash-{}", self.next_task);
        let owner = self.owners.get(session).and_then(|s| s.owner.clone());
        self.names.insert(key, id.clone());
        self.tasks.insert(
            id.clone(),
            TaskView {
                session: session.to_string(),
                placement: placement.clone(),
                remote: task.id.clone(),
                owner: owner.clone(),
                task: front_task(task, &id, owner),
                offsets: Offsets::default(),
            },
        );
        id
    }

    fn ended(&mut self, id: String) {
        self.ended.push_back(id);
        while self.ended.len() > KEPT_TASKS {
            if let Some(old) = self.ended.pop_front()
                && let Some(view) = self.tasks.remove(&old)
            {
                self.names
                    .remove(&(view.placement.node, view.placement.epoch, view.remote));
            }
        }
    }
}

impl Front {
    /// A task a `start` or a yielded `run` answered, under the front's id.
    fn started(
        &self,
        session: &str,
        placement: &Placement,
        task: &Task,
        owner: Option<String>,
    ) -> Task {
        let mut state = lock(&self.state);
        let id = state.name(session, placement, task);
        let view = state.tasks.get_mut(&id).expect("named just now or before");
        // An event that came first has already ended it.
        if view.task.state == TaskState::Running {
            view.task = front_task(task, &id, owner);
        }
        view.task.clone()
    }

    fn view(&self, id: &str) -> Option<(String, Placement, String, Task, Offsets)> {
        lock(&self.state).tasks.get(id).map(|view| {
            (
                view.session.clone(),
                view.placement.clone(),
                view.remote.clone(),
                view.task.clone(),
                view.offsets,
            )
        })
    }
}

impl PoolExecutor {
    /// `method` (`kill`, `get`) of task `id`, asked of its node while it runs there; `None`
    /// when it has ended as far as this front knows (or its node is gone).
    fn ask_running<T: DeserializeOwned + Send + 'static>(
        &self,
        id: &str,
        method: &'static str,
    ) -> Result<Option<T>, ExecError> {
        let Some((session, placement, remote, task, _)) = self.front.view(id) else {
            return Err(ExecError::UnknownTask(id.to_string()));
        };
        if task.state != TaskState::Running || !self.front.live(&placement) {
            return Ok(None);
        }
        let front = self.front.clone();
        let outcome = self.wait(async move {
            front
                .call::<Outcome<T>>(&session, method, wire::TaskParams { task: remote }, None)
                .await
        })?;
        Result::from(outcome.map_err(Failure::other)?).map(Some)
    }
}

impl Executor for PoolExecutor {
    fn limits(&self) -> Limits {
        self.front.limits.clone()
    }

    fn resolve(&self, req: Request) -> Result<Spec, ExecError> {
        let front = self.front.clone();
        let owner = req.owner.clone();
        let session = front.session_of(owner.as_deref());
        // Resolved here as the session's node would, when its heartbeat says how: a request
        // less per call. The node checks the command and the timeout again when it runs.
        let defaulted = req.workdir.is_none();
        if let Some(resolution) = front.resolution_for(&session) {
            let spec = resolution.resolve(req)?;
            if defaulted {
                front.defaulted(&session, &spec.workdir);
            }
            return Ok(spec);
        }
        let request = Request {
            owner: Some(session.clone()),
            ..req
        };
        let session_id = session.clone();
        let outcome = self.wait(async move {
            front
                .call::<Outcome<Spec>>(&session, "resolve", wire::ResolveParams { request }, None)
                .await
        })?;
        let spec: Spec = Result::from(outcome.map_err(Failure::other)?)?;
        if defaulted {
            self.front.defaulted(&session_id, &spec.workdir);
        }
        Ok(Spec { owner, ..spec })
    }

    fn run(
        &self,
        spec: Spec,
        abort: CancellationToken,
    ) -> BoxFuture<'_, Result<RunResult, ExecError>> {
        Box::pin(async move {
            if abort.is_cancelled() {
                return Err(ExecError::Aborted);
            }
            let front = self.front.clone();
            let deadline =
                Duration::from_secs_f64((spec.timeout_ms + front.limits.grace_ms) / 1000.0)
                    + Duration::from_secs(30);
            let (session, owner, params) = front.starting(spec);
            let request_id = params.request_id.clone();
            let Some(runtime) = &self.runtime else {
                return Err(ExecError::Internal(
                    "the pool client is shut down".to_string(),
                ));
            };
            let mut handle = runtime.spawn(front.clone().call_placed::<Outcome<RunResult>>(
                session.clone(),
                "run",
                params,
                deadline,
            ));
            let joined = tokio::select! {
                joined = &mut handle => joined,
                () = abort.cancelled() => {
                    let cancel = {
                        let front = front.clone();
                        let session = session.clone();
                        async move {
                            let placement = self_placement(&front, &session);
                            front
                                .notify(&session, &placement, "cancel", wire::CancelParams { request_id })
                                .await;
                        }
                    };
                    let _ = self.spawned(cancel).await;
                    handle.await
                }
            };
            let (answer, placement) = joined
                .map_err(|err| ExecError::Internal(format!("the pool client failed: {err}")))?;
            let outcome = answer.map_err(Failure::starting)?;
            let mut result: RunResult = Result::from(outcome)?;
            if let Some(yielded) = result.yielded.as_mut() {
                yielded.task = front.started(&session, &placement, &yielded.task, owner);
            }
            // An aborted call's result is not shown: the move is told with the next one.
            if !result.aborted {
                result.relocated = lock(&front.state).relocation(&session, &placement);
            }
            Ok(result)
        })
    }

    fn start(&self, spec: Spec) -> BoxFuture<'_, Result<Task, ExecError>> {
        Box::pin(async move {
            let front = self.front.clone();
            let (session, owner, params) = front.starting(spec);
            let call = front.clone().call_placed::<Outcome<Task>>(
                session.clone(),
                "start",
                params,
                Duration::from_secs(60),
            );
            let (answer, placement) = self.spawned(call).await?;
            let outcome = answer.map_err(Failure::starting)?;
            let task: Task = Result::from(outcome)?;
            let mut task = front.started(&session, &placement, &task, owner);
            task.relocated = lock(&front.state).relocation(&session, &placement);
            Ok(task)
        })
    }

    fn read_output(&self, id: &str) -> Result<Read, ExecError> {
        let Some((session, placement, remote, task, from)) = self.front.view(id) else {
            return Err(ExecError::UnknownTask(id.to_string()));
        };
        if task.state == TaskState::Lost {
            return Ok(crate::service::client::lost_read(task));
        }
        if !self.front.live(&placement) {
            return Err(ExecError::Internal(format!(
                "the executor node {} that ran {id} is gone; its output can no longer be read",
                placement.node
            )));
        }
        let front = self.front.clone();
        let params = wire::ReadParams { task: remote, from };
        let outcome = self.wait(async move {
            front
                .call::<Outcome<wire::ReadAnswer>>(&session, "read", params, None)
                .await
        })?;
        let answer: wire::ReadAnswer = Result::from(outcome.map_err(Failure::other)?)?;
        let mut state = lock(&self.front.state);
        let Some(view) = state.tasks.get_mut(id) else {
            return Err(ExecError::UnknownTask(id.to_string()));
        };
        view.offsets = answer.to;
        if view.task.state == TaskState::Running {
            view.task = front_task(&answer.read.task, id, task.owner.clone());
        }
        let shown = view.task.clone();
        Ok(Read {
            task: shown,
            ..answer.read
        })
    }

    fn kill(&self, id: &str) -> Result<bool, ExecError> {
        Ok(self.ask_running::<bool>(id, "kill")?.unwrap_or(false))
    }

    fn end_session(&self, owner: &str) {
        self.front.end_session(owner);
    }

    fn owner_of(&self, id: &str) -> Option<String> {
        self.front
            .view(id)
            .and_then(|(_, _, _, task, _)| task.owner)
    }

    fn get(&self, id: &str) -> Result<Task, ExecError> {
        let Some(remote) = self.ask_running::<Task>(id, "get")? else {
            return self
                .front
                .view(id)
                .map(|(_, _, _, task, _)| task)
                .ok_or_else(|| ExecError::UnknownTask(id.to_string()));
        };
        let owner = self
            .front
            .view(id)
            .and_then(|(_, _, _, task, _)| task.owner);
        let mut state = lock(&self.front.state);
        let Some(view) = state.tasks.get_mut(id) else {
            return Err(ExecError::UnknownTask(id.to_string()));
        };
        if view.task.state == TaskState::Running {
            view.task = front_task(&remote, id, owner);
        }
        Ok(view.task.clone())
    }

    fn list(&self) -> Vec<Task> {
        let state = lock(&self.front.state);
        let mut tasks: Vec<(u64, Task)> = state
            .tasks
            .iter()
            .map(|(id, view)| {
                let n = id
                    .strip_prefix("bash-")
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                (n, view.task.clone())
            })
            .collect();
        tasks.sort_by_key(|(n, _)| *n);
        tasks.into_iter().map(|(_, task)| task).collect()
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            // The front's tasks do not outlive it: each still running is killed.
            let running: Vec<String> = lock(&self.front.state)
                .tasks
                .iter()
                .filter(|(_, view)| view.task.state == TaskState::Running)
                .map(|(id, _)| id.clone())
                .collect();
            for id in running {
                let Some((session, placement, remote, _, _)) = self.front.view(&id) else {
                    continue;
                };
                if !self.front.live(&placement) {
                    continue;
                }
                let front = self.front.clone();
                let _ = self
                    .spawned(async move {
                        front
                            .call::<Outcome<bool>>(
                                &session,
                                "kill",
                                wire::TaskParams { task: remote },
                                None,
                            )
                            .await
                    })
                    .await;
            }
            self.front.stop.cancel();
        })
    }
}
