//! The client side: [`RemoteExecutor`], the [`Executor`] of a far side reached through a command
//! (`dsh-host executor serve --stdio`, or `ssh build-box dsh-host executor serve --stdio`).
//!
//! The connection is the command's stdin and stdout. A reader thread of its own takes every
//! line the far side sends, so that the trait's synchronous operations (`read_output`, `kill`,
//! `get`, ...) can wait for their answers on any runtime, even a single-threaded one, without
//! the runtime having to drive the connection meanwhile. Lines are written whole, under a lock.
//!
//! When the far side goes away, nothing is retried elsewhere: a call in flight fails, saying
//! the command "may or may not have run" once it was sent (or "did not start" when it provably
//! was not), and each background task still running gets one task-done event, killed.

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use super::wire::{self, Offsets, Outcome, RpcError};
use crate::{
    BoxFuture, ExecError, Executor, Limits, Read, Request, RunResult, Spec, Task, TaskState,
};

/// How long the far side may take to answer `hello` (an `ssh` that asks for a password never
/// does).
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(30);

/// Finished tasks whose last state is kept for `get`, `owner_of` and `list` once the far side is
/// gone (and to know a task's event came before its `start` answer).
const KEPT_TASKS: usize = 4096;

/// Why [`RemoteExecutor::connect`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The command line is empty.
    #[error("the executor command is empty")]
    EmptyCommand,
    /// The command could not be started.
    #[error("cannot start the executor command {command:?}: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The far side ended or closed its output before answering `hello`.
    #[error("the executor command {command:?} ended before answering hello ({reason})")]
    Closed {
        /// The command line.
        command: String,
        /// What was seen.
        reason: String,
    },
    /// No answer to `hello` within [`HELLO_TIMEOUT`].
    #[error(
        "the executor command {command:?} did not answer hello within {0:?}",
        HELLO_TIMEOUT
    )]
    Timeout {
        /// The command line.
        command: String,
    },
    /// The far side refused `hello` (a protocol version mismatch names both versions).
    #[error("the executor command {command:?} refused the connection: {message}")]
    Refused {
        /// The command line.
        command: String,
        /// The far side's message.
        message: String,
    },
}

/// An [`Executor`] on the far side of a command's stdin and stdout.
pub struct RemoteExecutor {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RemoteExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteExecutor")
            .field("command", &self.inner.command)
            .finish_non_exhaustive()
    }
}

struct Inner {
    command: String,
    /// `None` once closed (at shutdown, or when writing failed).
    writer: Mutex<Option<ChildStdin>>,
    pending: Mutex<HashMap<u64, Waiter>>,
    next_id: AtomicU64,
    /// Request ids: this connection's random prefix and a counter.
    request_prefix: String,
    next_request: AtomicU64,
    state: Mutex<State>,
    task_done: UnboundedSender<Task>,
    limits: Mutex<Option<Limits>>,
    child: Mutex<Child>,
}

#[derive(Default)]
struct State {
    /// Why the far side is gone, once it is.
    lost: Option<String>,
    /// No task-done event is passed on after shutdown began.
    shutting_down: bool,
    /// Background tasks known to be running (a `start` or yielded `run` answered, no event yet).
    running: HashMap<String, Task>,
    /// The highest event sequence number passed on.
    cursor: u64,
    /// Where each task's next read starts.
    offsets: HashMap<String, Offsets>,
    /// Ended tasks as last seen, oldest first (bounded by [`KEPT_TASKS`]).
    ended: HashMap<String, Task>,
    ended_order: VecDeque<String>,
}

impl State {
    fn ended(&mut self, task: Task) {
        self.running.remove(&task.id);
        if self.ended.insert(task.id.clone(), task.clone()).is_none() {
            self.ended_order.push_back(task.id);
            while self.ended_order.len() > KEPT_TASKS {
                if let Some(old) = self.ended_order.pop_front() {
                    self.ended.remove(&old);
                    self.offsets.remove(&old);
                }
            }
        }
    }

    /// A task a `start` or a yielded `run` answered: running, unless its event came first.
    fn started(&mut self, task: &Task) {
        if task.state == TaskState::Running && !self.ended.contains_key(&task.id) {
            self.running.insert(task.id.clone(), task.clone());
        }
    }
}

enum Waiter {
    Blocking(std::sync::mpsc::SyncSender<Reply>),
    Async(tokio::sync::oneshot::Sender<Reply>),
}

type Reply = Result<Value, RpcError>;

/// Why a call got no answer.
enum Failure {
    /// The request was never (completely) written: the far side cannot have acted on it.
    NotSent(String),
    /// It was written, and the far side went away before answering.
    Lost(String),
    /// The far side answered with a protocol error, or an answer that does not decode.
    Protocol(String),
}

impl Failure {
    /// The contract-shaped error for an operation that may start a command.
    fn starting(self) -> ExecError {
        match self {
            Failure::NotSent(reason) => ExecError::SpawnFailed(format!(
                "the executor service is gone ({reason}); the command did not start"
            )),
            Failure::Lost(reason) => ExecError::Internal(format!(
                "the executor service was lost ({reason}) while the command was in flight; it \
                 may or may not have run"
            )),
            Failure::Protocol(message) => ExecError::Internal(format!(
                "the executor service failed the call ({message}); the command may or may not \
                 have run"
            )),
        }
    }

    /// The error for an operation that starts nothing.
    fn other(self) -> ExecError {
        match self {
            Failure::NotSent(reason) => {
                ExecError::Internal(format!("the executor service was not reached ({reason})"))
            }
            Failure::Lost(reason) => {
                ExecError::Internal(format!("the executor service is gone ({reason})"))
            }
            Failure::Protocol(message) => {
                ExecError::Internal(format!("the executor service failed the call: {message}"))
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

fn decode<T: DeserializeOwned>(value: Value) -> Result<T, Failure> {
    serde_json::from_value(value)
        .map_err(|err| Failure::Protocol(format!("an answer that does not decode: {err}")))
}

impl RemoteExecutor {
    /// Starts `command` with `sh -c`, says `hello` and waits for the answer (at most
    /// [`HELLO_TIMEOUT`]). `task_done` receives one event per background task when it ends, or
    /// when the far side is lost while it runs.
    pub fn connect(
        command: &str,
        task_done: UnboundedSender<Task>,
    ) -> Result<Arc<RemoteExecutor>, ConnectError> {
        if command.trim().is_empty() {
            return Err(ConnectError::EmptyCommand);
        }
        let mut child = Command::new("sh")
            .args(["-c", command])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|source| ConnectError::Spawn {
                command: command.to_string(),
                source,
            })?;
        let (stdin, stdout) = match (child.stdin.take(), child.stdout.take()) {
            (Some(stdin), Some(stdout)) => (stdin, stdout),
            _ => unreachable!("both were asked for as pipes"),
        };
        let inner = Arc::new(Inner {
            command: command.to_string(),
            writer: Mutex::new(Some(stdin)),
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            request_prefix: crate::random_hex(),
            next_request: AtomicU64::new(1),
            state: Mutex::new(State::default()),
            task_done,
            limits: Mutex::new(None),
            child: Mutex::new(child),
        });
        let reader = inner.clone();
        std::thread::Builder::new()
            .name("dsh-executor-client".into())
            .spawn(move || reader.read_loop(stdout))
            .map_err(|source| ConnectError::Spawn {
                command: command.to_string(),
                source,
            })?;
        let hello = wire::Hello {
            protocol: wire::PROTOCOL_VERSION,
            client: format!("dsh-executor {}", env!("CARGO_PKG_VERSION")),
            session: None,
        };
        let welcome: wire::Welcome = match inner.call_blocking("hello", &hello, HELLO_TIMEOUT) {
            Ok(welcome) => welcome,
            Err(failure) => {
                let command = command.to_string();
                inner.close();
                // One that does not end at the end of its input (an `ssh` waiting for a
                // password) is not left behind.
                let mut child = lock(&inner.child);
                let _ = child.kill();
                let _ = child.wait();
                drop(child);
                return Err(match failure {
                    Failure::NotSent(reason) | Failure::Lost(reason) if reason == TIMED_OUT => {
                        ConnectError::Timeout { command }
                    }
                    Failure::NotSent(reason) | Failure::Lost(reason) => {
                        ConnectError::Closed { command, reason }
                    }
                    Failure::Protocol(message) => ConnectError::Refused { command, message },
                });
            }
        };
        tracing::debug!(server = %welcome.server, session = %welcome.session, "executor service connected");
        *lock(&inner.limits) = Some(welcome.limits);
        Ok(Arc::new(RemoteExecutor { inner }))
    }

    /// The command line this executor runs.
    pub fn command(&self) -> &str {
        &self.inner.command
    }

    fn request_id(&self) -> String {
        let n = self.inner.next_request.fetch_add(1, Ordering::Relaxed);
        format!("{}-{n}", self.inner.request_prefix)
    }

    async fn run_remote(
        &self,
        spec: Spec,
        abort: CancellationToken,
    ) -> Result<RunResult, ExecError> {
        if abort.is_cancelled() {
            return Err(ExecError::Aborted);
        }
        let request_id = self.request_id();
        let params = wire::StartParams {
            request_id: request_id.clone(),
            spec,
        };
        let answer = self.inner.call_async("run", &params);
        tokio::pin!(answer);
        let reply = tokio::select! {
            reply = &mut answer => reply,
            () = abort.cancelled() => {
                // The far side stops the command and answers the run as aborted.
                self.inner.notify("cancel", &wire::CancelParams { request_id });
                answer.await
            }
        };
        let outcome: Outcome<RunResult> = reply.map_err(Failure::starting)?;
        let result: Result<RunResult, ExecError> = outcome.into();
        if let Ok(RunResult {
            yielded: Some(yielded),
            ..
        }) = &result
        {
            lock(&self.inner.state).started(&yielded.task);
        }
        result
    }

    async fn start_remote(&self, spec: Spec) -> Result<Task, ExecError> {
        let params = wire::StartParams {
            request_id: self.request_id(),
            spec,
        };
        let outcome: Outcome<Task> = self
            .inner
            .call_async("start", &params)
            .await
            .map_err(Failure::starting)?;
        let result: Result<Task, ExecError> = outcome.into();
        if let Ok(task) = &result {
            lock(&self.inner.state).started(task);
        }
        result
    }

    /// The reason the far side is gone, if it is.
    fn lost(&self) -> Option<String> {
        lock(&self.inner.state).lost.clone()
    }

    /// A task as last seen, once the far side is gone.
    fn last_seen(&self, id: &str) -> Option<Task> {
        let state = lock(&self.inner.state);
        state.ended.get(id).cloned()
    }
}

impl Drop for RemoteExecutor {
    /// An executor dropped without [`Executor::shutdown`] still ends its far side: the reader
    /// thread keeps the connection's state alive, but the end of the far side's input makes it
    /// kill its tasks and exit.
    fn drop(&mut self) {
        lock(&self.inner.state).shutting_down = true;
        self.inner.close();
    }
}

const TIMED_OUT: &str = "no answer in time";

/// How long an operation answered at once on the far side (`resolve`, `read`, `kill`, `get`,
/// ...) may take: they wait on the caller's thread, so a far side that stopped answering must not
/// hold it for good.
pub const QUICK_TIMEOUT: Duration = Duration::from_secs(60);

impl Inner {
    /// Writes one line, whole. An error means the line did not reach the far side complete
    /// (its newline is last), so it cannot have been acted on.
    fn write(&self, line: &str) -> Result<(), String> {
        let mut writer = lock(&self.writer);
        let Some(stdin) = writer.as_mut() else {
            return Err("the connection is closed".to_string());
        };
        let written = stdin
            .write_all(line.as_bytes())
            .and_then(|()| stdin.flush());
        written.map_err(|err| {
            *writer = None;
            format!("cannot write to it: {err}")
        })
    }

    fn notify(&self, method: &str, params: impl Serialize) {
        // A notification whose far side is gone has nobody to tell.
        let _ = self.write(&wire::notification(method, params));
    }

    fn register(&self, waiter: Waiter) -> Result<u64, Failure> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        // Under the state lock, so a loss either sees this waiter or is seen here.
        let state = lock(&self.state);
        if let Some(reason) = &state.lost {
            return Err(Failure::NotSent(reason.clone()));
        }
        lock(&self.pending).insert(id, waiter);
        Ok(id)
    }

    fn send_request(&self, id: u64, method: &str, params: impl Serialize) -> Result<(), Failure> {
        let line = wire::request(id, method, params);
        // The far side skips a longer line, and its error could name no request: refused here,
        // unsent, rather than waited for.
        let sent = if line.len() > wire::MAX_LINE_BYTES {
            Err(format!(
                "the request is longer than the protocol's line limit of {} bytes",
                wire::MAX_LINE_BYTES
            ))
        } else {
            self.write(&line)
        };
        sent.map_err(|reason| {
            lock(&self.pending).remove(&id);
            Failure::NotSent(reason)
        })
    }

    /// A call whose answer is waited for on this thread (for the trait's synchronous
    /// operations): the reader thread delivers it whatever the runtime does meanwhile.
    fn call_blocking<T: DeserializeOwned>(
        &self,
        method: &str,
        params: impl Serialize,
        timeout: Duration,
    ) -> Result<T, Failure> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let id = self.register(Waiter::Blocking(tx))?;
        self.send_request(id, method, params)?;
        let reply = rx.recv_timeout(timeout).map_err(|err| match err {
            std::sync::mpsc::RecvTimeoutError::Timeout => {
                lock(&self.pending).remove(&id);
                Failure::Lost(TIMED_OUT.to_string())
            }
            std::sync::mpsc::RecvTimeoutError::Disconnected => self.loss(),
        })?;
        decode(reply.map_err(|err| Failure::Protocol(err.message))?)
    }

    async fn call_async<T: DeserializeOwned>(
        &self,
        method: &str,
        params: impl Serialize,
    ) -> Result<T, Failure> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let id = self.register(Waiter::Async(tx))?;
        self.send_request(id, method, params)?;
        let reply = rx.await.map_err(|_| self.loss())?;
        decode(reply.map_err(|err| Failure::Protocol(err.message))?)
    }

    fn loss(&self) -> Failure {
        let reason = lock(&self.state).lost.clone();
        Failure::Lost(reason.unwrap_or_else(|| "the connection closed".to_string()))
    }

    /// Closes the far side's stdin: it shuts down (killing its tasks) when it reads the end.
    fn close(&self) {
        lock(&self.writer).take();
    }

    fn read_loop(self: Arc<Self>, stdout: ChildStdout) {
        let mut reader = BufReader::with_capacity(64 * 1024, stdout);
        let mut line = Vec::new();
        let reason = loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) => break "it closed the connection".to_string(),
                Ok(_) => self.received(&line),
                Err(err) => break format!("cannot read from it: {err}"),
            }
        };
        self.lose(reason);
    }

    fn received(&self, line: &[u8]) {
        let message: wire::Incoming = match serde_json::from_slice(line) {
            Ok(message) => message,
            Err(err) => {
                tracing::warn!(%err, "the executor service sent a line that is not JSON");
                return;
            }
        };
        if let Some(method) = message.method {
            if method == "task_done"
                && let Some(params) = message.params
            {
                match serde_json::from_value::<wire::Event>(params) {
                    Ok(event) => self.event(event),
                    Err(err) => tracing::warn!(%err, "a task_done event that does not decode"),
                }
            }
            return;
        }
        let Some(id) = message.id.as_ref().and_then(Value::as_u64) else {
            if let Some(error) = message.error {
                tracing::warn!(message = %error.message, "the executor service reported an error");
            }
            return;
        };
        let reply = match (message.result, message.error) {
            (_, Some(error)) => Err(error),
            (Some(result), None) => Ok(result),
            (None, None) => Ok(Value::Null),
        };
        let waiter = lock(&self.pending).remove(&id);
        match waiter {
            Some(Waiter::Blocking(tx)) => {
                let _ = tx.send(reply);
            }
            Some(Waiter::Async(tx)) => {
                let _ = tx.send(reply);
            }
            None => {}
        }
    }

    /// Passes a task-done event on once: a repeat (a sequence number already passed) is dropped.
    fn event(&self, event: wire::Event) {
        {
            let mut state = lock(&self.state);
            if event.seq <= state.cursor {
                return;
            }
            state.cursor = event.seq;
            state.ended(event.task.clone());
            if !state.shutting_down {
                let _ = self.task_done.send(event.task);
            }
        }
        self.notify("ack", wire::Cursor { cursor: event.seq });
    }

    /// The far side is gone: every waiting call fails, and every task still running ends,
    /// killed, with one event.
    fn lose(&self, reason: String) {
        let mut state = lock(&self.state);
        // Before hello was answered, `connect` reports the failure itself.
        let connected = lock(&self.limits).is_some();
        if state.shutting_down || !connected {
            tracing::debug!(command = %self.command, %reason, "the executor service ended");
        } else {
            tracing::warn!(command = %self.command, %reason, "the executor service is lost");
        }
        state.lost = Some(reason);
        // Dropping the senders wakes each waiter with the loss.
        lock(&self.pending).clear();
        let running: Vec<Task> = state.running.drain().map(|(_, task)| task).collect();
        for mut task in running {
            task.state = TaskState::Killed;
            state.ended(task.clone());
            if !state.shutting_down {
                let _ = self.task_done.send(task);
            }
        }
        drop(state);
        self.close();
    }
}

impl Executor for RemoteExecutor {
    fn limits(&self) -> Limits {
        // Set by `connect` before the executor exists.
        lock(&self.inner.limits).clone().unwrap_or(Limits {
            default_timeout_ms: 120_000.0,
            max_timeout_ms: 600_000.0,
            max_output_bytes: 64_000,
            grace_ms: 3_000.0,
            sandbox: None,
        })
    }

    fn resolve(&self, req: Request) -> Result<Spec, ExecError> {
        let params = wire::ResolveParams { request: req };
        let outcome: Outcome<Spec> = self
            .inner
            .call_blocking("resolve", &params, QUICK_TIMEOUT)
            .map_err(Failure::other)?;
        outcome.into()
    }

    fn run(
        &self,
        spec: Spec,
        abort: CancellationToken,
    ) -> BoxFuture<'_, Result<RunResult, ExecError>> {
        Box::pin(self.run_remote(spec, abort))
    }

    fn start(&self, spec: Spec) -> BoxFuture<'_, Result<Task, ExecError>> {
        Box::pin(self.start_remote(spec))
    }

    fn read_output(&self, id: &str) -> Result<Read, ExecError> {
        if let Some(reason) = self.lost() {
            return Err(ExecError::Internal(format!(
                "the executor service is gone ({reason}); the output of {id} can no longer be read"
            )));
        }
        let from = lock(&self.inner.state)
            .offsets
            .get(id)
            .copied()
            .unwrap_or_default();
        let params = wire::ReadParams {
            task: id.to_string(),
            from,
        };
        let outcome: Outcome<wire::ReadAnswer> = self
            .inner
            .call_blocking("read", &params, QUICK_TIMEOUT)
            .map_err(Failure::other)?;
        let answer = Result::from(outcome)?;
        lock(&self.inner.state)
            .offsets
            .insert(id.to_string(), answer.to);
        Ok(answer.read)
    }

    fn kill(&self, id: &str) -> Result<bool, ExecError> {
        if self.lost().is_some() {
            // Every task of a lost far side has ended (killed) already.
            return match self.last_seen(id) {
                Some(_) => Ok(false),
                None => Err(ExecError::UnknownTask(id.to_string())),
            };
        }
        let params = wire::TaskParams {
            task: id.to_string(),
        };
        let outcome: Outcome<bool> = self
            .inner
            .call_blocking("kill", &params, QUICK_TIMEOUT)
            .map_err(Failure::other)?;
        outcome.into()
    }

    fn owner_of(&self, id: &str) -> Option<String> {
        if self.lost().is_some() {
            return self.last_seen(id).and_then(|task| task.owner);
        }
        let params = wire::TaskParams {
            task: id.to_string(),
        };
        self.inner
            .call_blocking("owner_of", &params, QUICK_TIMEOUT)
            .unwrap_or_default()
    }

    fn get(&self, id: &str) -> Result<Task, ExecError> {
        if self.lost().is_some() {
            return self
                .last_seen(id)
                .ok_or_else(|| ExecError::UnknownTask(id.to_string()));
        }
        let params = wire::TaskParams {
            task: id.to_string(),
        };
        let outcome: Outcome<Task> = self
            .inner
            .call_blocking("get", &params, QUICK_TIMEOUT)
            .map_err(Failure::other)?;
        outcome.into()
    }

    fn list(&self) -> Vec<Task> {
        if self.lost().is_some() {
            let state = lock(&self.inner.state);
            return state
                .ended_order
                .iter()
                .filter_map(|id| state.ended.get(id).cloned())
                .collect();
        }
        self.inner
            .call_blocking("list", Value::Null, QUICK_TIMEOUT)
            .unwrap_or_default()
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            lock(&self.inner.state).shutting_down = true;
            if self.lost().is_none() {
                // The far side kills and awaits its tasks before it answers.
                // A far side that never answers (a link gone silent) is stopped below.
                let done = tokio::time::timeout(
                    QUICK_TIMEOUT,
                    self.inner.call_async::<Value>("shutdown", Value::Null),
                )
                .await;
                match done {
                    Ok(Err(Failure::Protocol(message))) => {
                        tracing::warn!(%message, "the executor service failed to shut down");
                    }
                    Err(_) => tracing::warn!(
                        "the executor service did not answer shutdown in time; it is stopped"
                    ),
                    Ok(_) => {}
                }
            }
            self.inner.close();
            // It exits once it reads the end of its input; a far side that does not is stopped.
            for _ in 0..500 {
                if !matches!(lock(&self.inner.child).try_wait(), Ok(None)) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let mut child = lock(&self.inner.child);
            let _ = child.kill();
            let _ = child.wait();
        })
    }
}
