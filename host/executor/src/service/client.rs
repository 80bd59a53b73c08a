//! The client side: [`RemoteExecutor`], the [`Executor`] of a far side reached through a command
//! (`dsh-host executor serve --stdio`, or `ssh build-box dsh-host executor serve --stdio`).
//!
//! The connection is the command's stdin and stdout. A reader thread of its own takes every
//! line the far side sends, so that the trait's synchronous operations (`read_output`, `kill`,
//! `get`, ...) can wait for their answers on any runtime, even a single-threaded one, without
//! the runtime having to drive the connection meanwhile. Lines are written whole, under a lock.
//!
//! When the connection is lost and the far side keeps its session for a reconnect grace (its
//! `hello` answer says so), the same command is run again and its `hello` names the session:
//! every request without an answer is sent again with its JSON-RPC id and request id (a
//! repeated `run` or `start` starts nothing; a repeated read gets the same answer), and the
//! task-done events missed meanwhile are asked for from the last one passed on.
//!
//! When the far side is gone for good, nothing is retried elsewhere: a call in flight fails,
//! saying the command "may or may not have run" once it was sent (or "did not start" when it
//! provably was not), and each background task still running gets one task-done event, lost.

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use super::wire::{self, Offsets, Outcome};
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
    /// The current connection.
    link: Mutex<Link>,
    pending: Mutex<HashMap<u64, Pending>>,
    next_id: AtomicU64,
    /// Request ids: this executor's random prefix and a counter.
    request_prefix: String,
    next_request: AtomicU64,
    state: Mutex<State>,
    task_done: UnboundedSender<Task>,
    limits: Mutex<Option<Limits>>,
    /// The far side's session kept for a new connection: its name, its resume key and how long
    /// it waits.
    session: Mutex<Option<Resumable>>,
}

/// What a new connection needs to take the far side's session over.
#[derive(Clone)]
struct Resumable {
    session: String,
    /// The secret from hello's answer (absent from a server that predates it).
    key: Option<wire::ResumeKey>,
    grace: Duration,
}

/// One run of the command: its input, and the process to stop and reap.
#[derive(Default)]
struct Link {
    /// Counts connections from 1; a reader reports its end with its connection's number.
    number: u64,
    /// `None` once closed, or while a new connection is being made.
    writer: Option<ChildStdin>,
    child: Option<Child>,
}

/// A request waiting for its answer.
struct Pending {
    waiter: Waiter,
    /// The whole line, to send again on a new connection.
    line: String,
    /// The connection it was written to, completely.
    sent_on: Option<u64>,
}

#[derive(Default)]
struct State {
    /// Why the far side is gone, once it is.
    lost: Option<String>,
    /// A new connection is being made.
    reconnecting: bool,
    /// No task-done event is passed on after shutdown began.
    shutting_down: bool,
    /// Foreground runs asked to stop, by request id: asked again on a new connection.
    cancels: std::collections::HashSet<String>,
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

impl Waiter {
    fn deliver(self, reply: Reply) {
        match self {
            Waiter::Blocking(tx) => {
                let _ = tx.send(reply);
            }
            Waiter::Async(tx) => {
                let _ = tx.send(reply);
            }
        }
    }
}

type Reply = Result<Value, Failure>;

/// Why a call got no answer, in the service's words.
type Failure = super::failure::Failure<super::failure::Service>;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
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
        let inner = Arc::new(Inner {
            command: command.to_string(),
            link: Mutex::new(Link::default()),
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            request_prefix: crate::random_hex(),
            next_request: AtomicU64::new(1),
            state: Mutex::new(State::default()),
            task_done,
            limits: Mutex::new(None),
            session: Mutex::new(None),
        });
        let welcome = inner.clone().dial(None, HELLO_TIMEOUT).map_err(|failure| {
            let command = command.to_string();
            match failure {
                Dial::Spawn(source) => ConnectError::Spawn { command, source },
                Dial::Failed(Failure::NotSent(reason) | Failure::Lost(reason))
                    if reason == TIMED_OUT =>
                {
                    ConnectError::Timeout { command }
                }
                Dial::Failed(Failure::NotSent(reason) | Failure::Lost(reason)) => {
                    ConnectError::Closed { command, reason }
                }
                Dial::Failed(Failure::Protocol(error)) => ConnectError::Refused {
                    command,
                    message: error.message,
                },
            }
        })?;
        tracing::debug!(server = %welcome.server, session = %welcome.session, "executor service connected");
        *lock(&inner.limits) = Some(welcome.limits);
        if welcome.reconnect_grace_ms > 0.0 {
            let grace =
                Duration::from_secs_f64(welcome.reconnect_grace_ms.min(86_400_000.0) / 1000.0);
            *lock(&inner.session) = Some(Resumable {
                session: welcome.session,
                key: welcome.resume_key,
                grace,
            });
        }
        Ok(Arc::new(RemoteExecutor { inner }))
    }

    /// The command line this executor runs.
    pub fn command(&self) -> &str {
        &self.inner.command
    }

    /// The process id of the command's current run (the connection's own end), while it runs.
    pub fn connection_pid(&self) -> Option<u32> {
        lock(&self.inner.link).child.as_ref().map(Child::id)
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
        // A run whose caller stops waiting (its future dropped) is stopped as an abort stops it.
        let mut cancel_on_drop = CancelOnDrop {
            inner: &self.inner,
            request_id: Some(request_id.clone()),
        };
        let answer = self.inner.call_async("run", &params);
        tokio::pin!(answer);
        let reply = tokio::select! {
            reply = &mut answer => reply,
            () = abort.cancelled() => {
                // The far side stops the command and answers the run as aborted.
                self.inner.cancel(&request_id);
                answer.await
            }
        };
        cancel_on_drop.request_id = None;
        lock(&self.inner.state).cancels.remove(&request_id);
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

/// Asks the far side to stop a foreground run whose caller dropped it unanswered.
struct CancelOnDrop<'a> {
    inner: &'a Inner,
    request_id: Option<String>,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(request_id) = self.request_id.take() {
            self.inner.cancel(&request_id);
            lock(&self.inner.state).cancels.remove(&request_id);
        }
    }
}

impl Drop for RemoteExecutor {
    /// An executor dropped without [`Executor::shutdown`] still ends its far side: it is asked
    /// to shut down (a far side that keeps its session for a new connection would otherwise
    /// keep it), and the end of its input makes it kill its tasks and exit.
    fn drop(&mut self) {
        lock(&self.inner.state).shutting_down = true;
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let _ = self
            .inner
            .write(&wire::request(id, "shutdown", Value::Null));
        self.inner.close();
    }
}

const TIMED_OUT: &str = "no answer in time";

/// How long an operation answered at once on the far side (`resolve`, `read`, `kill`, `get`,
/// ...) may take: they wait on the caller's thread, so a far side that stopped answering must not
/// hold it for good.
pub const QUICK_TIMEOUT: Duration = Duration::from_secs(60);

/// The first wait between attempts to connect again; it doubles up to [`RECONNECT_BACKOFF_MAX`].
const RECONNECT_BACKOFF: Duration = Duration::from_millis(100);
const RECONNECT_BACKOFF_MAX: Duration = Duration::from_secs(2);

/// Why making a connection failed.
enum Dial {
    /// The command could not be started.
    Spawn(std::io::Error),
    /// It did not answer `hello`, or refused it.
    Failed(Failure),
}

impl Inner {
    /// Runs the command once more as a new connection, says `hello` (naming `session` to take
    /// it over) and, once answered, makes it the current connection. The previous run of the
    /// command, if any, is stopped first.
    fn dial(
        self: Arc<Self>,
        session: Option<(String, Option<wire::ResumeKey>)>,
        timeout: Duration,
    ) -> Result<wire::Welcome, Dial> {
        let previous = {
            let mut link = lock(&self.link);
            link.writer = None;
            link.child.take()
        };
        if let Some(previous) = previous {
            stop(previous);
        }
        let mut child = Command::new("sh")
            .args(["-c", &self.command])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            // A group of its own: whatever the command line starts is stopped with it.
            .process_group(0)
            .spawn()
            .map_err(Dial::Spawn)?;
        let (mut stdin, stdout) = match (child.stdin.take(), child.stdout.take()) {
            (Some(stdin), Some(stdout)) => (stdin, stdout),
            _ => unreachable!("both were asked for as pipes"),
        };
        let number = lock(&self.link).number + 1;
        let reader = self.clone();
        if let Err(err) = std::thread::Builder::new()
            .name("dsh-executor-client".into())
            .spawn(move || reader.read_loop(number, stdout))
        {
            stop(child);
            return Err(Dial::Spawn(err));
        }
        let (session, resume_key) = session.unzip();
        let hello = wire::Hello {
            protocol: wire::PROTOCOL_VERSION,
            client: format!("dsh-executor {}", env!("CARGO_PKG_VERSION")),
            session,
            resume_key: resume_key.flatten(),
        };
        // Written straight to the new connection, which is not the current one yet: a hello
        // is never sent again on another.
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let line = wire::request(id, "hello", &hello);
        lock(&self.pending).insert(
            id,
            Pending {
                waiter: Waiter::Blocking(tx),
                line: String::new(),
                sent_on: Some(number),
            },
        );
        let welcome = stdin
            .write_all(line.as_bytes())
            .and_then(|()| stdin.flush())
            .map_err(|err| Failure::NotSent(format!("cannot write to it: {err}")))
            .and_then(|()| match rx.recv_timeout(timeout) {
                Ok(reply) => reply.and_then(Failure::decode::<wire::Welcome>),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    Err(Failure::Lost(TIMED_OUT.to_string()))
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    Err(Failure::Lost("the connection closed".to_string()))
                }
            });
        lock(&self.pending).remove(&id);
        match welcome {
            Ok(welcome) => {
                let mut link = lock(&self.link);
                link.number = number;
                link.writer = Some(stdin);
                link.child = Some(child);
                Ok(welcome)
            }
            Err(failure) => {
                // One that does not end at the end of its input (an `ssh` waiting for a
                // password) is not left behind.
                drop(stdin);
                stop(child);
                Err(Dial::Failed(failure))
            }
        }
    }

    /// Writes one line, whole, to the current connection. An error means the line did not
    /// reach the far side complete (its newline is last), so it cannot have been acted on.
    fn write(&self, line: &str) -> Result<(), String> {
        let mut link = lock(&self.link);
        let Some(stdin) = link.writer.as_mut() else {
            return Err("the connection is closed".to_string());
        };
        let written = stdin
            .write_all(line.as_bytes())
            .and_then(|()| stdin.flush());
        written.map_err(|err| {
            link.writer = None;
            format!("cannot write to it: {err}")
        })
    }

    fn notify(&self, method: &str, params: impl Serialize) {
        // A notification whose far side is gone has nobody to tell.
        let _ = self.write(&wire::notification(method, params));
    }

    /// Asks the far side to stop the foreground run `request_id` (again on a new connection).
    fn cancel(&self, request_id: &str) {
        lock(&self.state).cancels.insert(request_id.to_string());
        self.notify(
            "cancel",
            &wire::CancelParams {
                request_id: request_id.to_string(),
            },
        );
    }

    /// The far side keeps its session for a new connection.
    fn resumable(&self) -> bool {
        lock(&self.session).is_some()
    }

    /// Registers a request and writes it. Refused, unsent, when the far side is gone or the
    /// line is too long; kept for the next connection when this one cannot take it and the far
    /// side keeps its session.
    fn send_request(
        &self,
        waiter: Waiter,
        method: &str,
        params: impl Serialize,
    ) -> Result<u64, Failure> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let line = wire::request(id, method, params);
        // The far side skips a longer line, and its error could name no request: refused here,
        // unsent, rather than waited for.
        if line.len() > wire::MAX_LINE_BYTES {
            return Err(Failure::NotSent(format!(
                "the request is longer than the protocol's line limit of {} bytes",
                wire::MAX_LINE_BYTES
            )));
        }
        {
            // Under the state lock, so a loss either sees this request or is seen here.
            let state = lock(&self.state);
            if let Some(reason) = &state.lost {
                return Err(Failure::NotSent(reason.clone()));
            }
            lock(&self.pending).insert(
                id,
                Pending {
                    waiter,
                    line,
                    sent_on: None,
                },
            );
        }
        // Whether a new connection will send it, if this one cannot.
        let kept = self.resumable() && !lock(&self.state).shutting_down;
        // Under the connection's lock: a new connection sends what is pending once, either
        // before this (and it is marked sent) or after.
        let mut link = lock(&self.link);
        let number = link.number;
        let mut pending = lock(&self.pending);
        let Some(request) = pending.get_mut(&id) else {
            // Answered or failed already (a loss).
            return Ok(id);
        };
        if request.sent_on.is_some() {
            return Ok(id);
        }
        let written = match link.writer.as_mut() {
            Some(stdin) => stdin
                .write_all(request.line.as_bytes())
                .and_then(|()| stdin.flush())
                .map_err(|err| format!("cannot write to it: {err}")),
            None => Err("the connection is closed".to_string()),
        };
        match written {
            Ok(()) => {
                request.sent_on = Some(number);
                Ok(id)
            }
            Err(_) if kept => {
                // The reader sees the connection's end and a new one sends it.
                link.writer = None;
                Ok(id)
            }
            Err(reason) => {
                link.writer = None;
                pending.remove(&id);
                Err(Failure::NotSent(reason))
            }
        }
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
        let id = self.send_request(Waiter::Blocking(tx), method, params)?;
        let reply = rx.recv_timeout(timeout).map_err(|err| match err {
            std::sync::mpsc::RecvTimeoutError::Timeout => {
                lock(&self.pending).remove(&id);
                Failure::Lost(TIMED_OUT.to_string())
            }
            std::sync::mpsc::RecvTimeoutError::Disconnected => self.loss(),
        })?;
        Failure::decode(reply?)
    }

    async fn call_async<T: DeserializeOwned>(
        &self,
        method: &str,
        params: impl Serialize,
    ) -> Result<T, Failure> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let id = self.send_request(Waiter::Async(tx), method, params)?;
        // A caller that stops waiting takes its request off the books.
        let _forget = ForgetOnDrop { inner: self, id };
        let reply = rx.await.map_err(|_| self.loss())?;
        Failure::decode(reply?)
    }

    fn loss(&self) -> Failure {
        let reason = lock(&self.state).lost.clone();
        Failure::Lost(reason.unwrap_or_else(|| "the connection closed".to_string()))
    }

    /// Closes the far side's stdin: it shuts down (killing its tasks) when it reads the end.
    fn close(&self) {
        lock(&self.link).writer.take();
    }

    fn read_loop(self: Arc<Self>, number: u64, stdout: ChildStdout) {
        let mut reader = BufReader::with_capacity(64 * 1024, stdout);
        let mut line = Vec::new();
        let reason = loop {
            line.clear();
            match read_line(&mut reader, &mut line) {
                Ok(true) => self.received(&line),
                Ok(false) => break "it closed the connection".to_string(),
                Err(err) => break format!("cannot read from it: {err}"),
            }
        };
        self.disconnected(number, reason);
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
            (_, Some(error)) => Err(Failure::Protocol(error)),
            (Some(result), None) => Ok(result),
            (None, None) => Ok(Value::Null),
        };
        let waiter = lock(&self.pending).remove(&id);
        if let Some(request) = waiter {
            request.waiter.deliver(reply);
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

    /// Connection `number` ended: the far side is lost, unless it keeps its session for a new
    /// connection, which is then made (on a thread of its own).
    fn disconnected(self: Arc<Self>, number: u64, reason: String) {
        {
            let mut link = lock(&self.link);
            if link.number != number {
                // A connection that was never made current (its hello, the only request it
                // was sent, fails now), or was replaced.
                drop(link);
                let mut pending = lock(&self.pending);
                let hellos: Vec<u64> = pending
                    .iter()
                    .filter(|(_, p)| p.sent_on == Some(number) && p.line.is_empty())
                    .map(|(id, _)| *id)
                    .collect();
                for id in hellos {
                    if let Some(hello) = pending.remove(&id) {
                        hello.waiter.deliver(Err(Failure::Lost(reason.clone())));
                    }
                }
                return;
            }
            link.writer = None;
        }
        let grace = lock(&self.session)
            .as_ref()
            .map(|resumable| resumable.grace);
        let connected = lock(&self.limits).is_some();
        let mut state = lock(&self.state);
        let Some(grace) =
            grace.filter(|_| connected && !state.shutting_down && state.lost.is_none())
        else {
            drop(state);
            return self.lose(reason);
        };
        if state.reconnecting {
            return;
        }
        state.reconnecting = true;
        drop(state);
        tracing::warn!(command = %self.command, %reason, "the executor service's connection is lost; connecting again");
        let inner = self.clone();
        let spawned = std::thread::Builder::new()
            .name("dsh-executor-reconnect".into())
            .spawn(move || inner.reconnect(reason, grace));
        if let Err(err) = spawned {
            self.lose(format!("cannot connect again: {err}"));
        }
    }

    /// Makes a new connection to the far side's session within `grace` of the loss, sends it
    /// every request without an answer, and asks for the events missed.
    fn reconnect(self: Arc<Self>, reason: String, grace: Duration) {
        let deadline = std::time::Instant::now() + grace;
        let Some(Resumable { session, key, .. }) = lock(&self.session).clone() else {
            return self.lose(reason);
        };
        let mut backoff = RECONNECT_BACKOFF;
        let mut last = reason.clone();
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() || lock(&self.state).lost.is_some() {
                return self.lose(format!(
                    "{reason}; no new connection within its reconnect grace of {grace:?}, the \
                     last attempt: {last}"
                ));
            }
            match self.clone().dial(
                Some((session.clone(), key.clone())),
                left.min(HELLO_TIMEOUT),
            ) {
                Ok(_) => break,
                Err(Dial::Failed(Failure::Protocol(error)))
                    if error.code == wire::code::UNKNOWN_SESSION
                        || error.code == wire::code::RESUME_REFUSED =>
                {
                    return self.lose(format!("{reason}; its session is gone ({})", error.message));
                }
                Err(Dial::Spawn(err)) => last = format!("cannot start the command: {err}"),
                Err(Dial::Failed(failure)) => {
                    last = match failure {
                        Failure::NotSent(r) | Failure::Lost(r) => r,
                        Failure::Protocol(error) => error.message,
                    }
                }
            }
            std::thread::sleep(
                backoff.min(deadline.saturating_duration_since(std::time::Instant::now())),
            );
            backoff = (backoff * 2).min(RECONNECT_BACKOFF_MAX);
        }
        tracing::info!(command = %self.command, "the executor service's session is taken up again");
        self.resend();
        // Events sent while there was no connection are asked for; those passed on are not
        // passed on again.
        let cursor = lock(&self.state).cursor;
        match self.call_blocking::<Vec<wire::Event>>(
            "events",
            wire::Cursor { cursor },
            QUICK_TIMEOUT,
        ) {
            Ok(events) => {
                for event in events {
                    self.event(event);
                }
            }
            Err(failure) => {
                tracing::warn!(error = %failure.other(), "cannot ask the executor service for missed events");
            }
        }
        lock(&self.state).reconnecting = false;
    }

    /// Sends every request without an answer to the current connection, oldest first, and the
    /// cancels of foreground runs still running.
    fn resend(&self) {
        let cancels: Vec<String> = lock(&self.state).cancels.iter().cloned().collect();
        let mut link = lock(&self.link);
        let number = link.number;
        let Some(stdin) = link.writer.as_mut() else {
            return;
        };
        let mut pending = lock(&self.pending);
        let mut ids: Vec<u64> = pending
            .iter()
            .filter(|(_, request)| request.sent_on != Some(number) && !request.line.is_empty())
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        let mut written = Ok(());
        for id in ids {
            let Some(request) = pending.get_mut(&id) else {
                continue;
            };
            written = stdin
                .write_all(request.line.as_bytes())
                .and_then(|()| stdin.flush());
            if written.is_err() {
                break;
            }
            request.sent_on = Some(number);
        }
        if written.is_ok() {
            for request_id in cancels {
                let line = wire::notification("cancel", &wire::CancelParams { request_id });
                if stdin
                    .write_all(line.as_bytes())
                    .and_then(|()| stdin.flush())
                    .is_err()
                {
                    break;
                }
            }
        }
        // A failed write: the reader sees the end of this connection too, and another follows.
    }

    /// The far side is gone for good: every waiting call fails, and every task still running
    /// ends, lost, with one event.
    fn lose(&self, reason: String) {
        let mut state = lock(&self.state);
        if state.lost.is_some() {
            return;
        }
        // Before hello was answered, `connect` reports the failure itself.
        let connected = lock(&self.limits).is_some();
        if state.shutting_down || !connected {
            tracing::debug!(command = %self.command, %reason, "the executor service ended");
        } else {
            tracing::warn!(command = %self.command, %reason, "the executor service is lost");
        }
        state.lost = Some(reason.clone());
        state.reconnecting = false;
        let waiting: Vec<Pending> = lock(&self.pending).drain().map(|(_, p)| p).collect();
        for request in waiting {
            let failure = match request.sent_on {
                Some(_) => Failure::Lost(reason.clone()),
                None => Failure::NotSent(reason.clone()),
            };
            request.waiter.deliver(Err(failure));
        }
        let running: Vec<Task> = state.running.drain().map(|(_, task)| task).collect();
        for mut task in running {
            // Nobody can tell whether it still runs, or how it ended.
            task.state = TaskState::Lost;
            task.exit_code = None;
            task.signal = None;
            state.ended(task.clone());
            if !state.shutting_down {
                let _ = self.task_done.send(task);
            }
        }
        drop(state);
        self.close();
    }
}

/// A read of a task lost with the far side: no output, no denials, the task as last seen.
pub(crate) fn lost_read(task: Task) -> Read {
    Read {
        stdout: crate::StreamDelta::default(),
        stderr: crate::StreamDelta::default(),
        task,
        denials: crate::Denials::default(),
    }
}

/// Takes a request whose caller stopped waiting off the books.
struct ForgetOnDrop<'a> {
    inner: &'a Inner,
    id: u64,
}

impl Drop for ForgetOnDrop<'_> {
    fn drop(&mut self) {
        lock(&self.inner.pending).remove(&self.id);
    }
}

/// Reads one line into `line` (its newline dropped); false at the end of the input. A line
/// longer than the protocol's limit ends the connection: the far side never sends one.
fn read_line(reader: &mut impl BufRead, line: &mut Vec<u8>) -> std::io::Result<bool> {
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(!line.is_empty());
        }
        let (take, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i, true),
            None => (buf.len(), false),
        };
        if line.len() + take > wire::MAX_LINE_BYTES {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "it sent a line longer than the protocol's limit of {} bytes",
                    wire::MAX_LINE_BYTES
                ),
            ));
        }
        line.extend_from_slice(&buf[..take]);
        reader.consume(if done { take + 1 } else { take });
        if done {
            return Ok(true);
        }
    }
}

/// Stops a run of the command that is no longer wanted: closes nothing (its pipes went with
/// it), gives it a moment to end at the end of its input, then kills it and what it started in
/// its process group, and reaps it.
fn stop(mut child: Child) {
    for _ in 0..50 {
        if ended(&child) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    kill_group(&child);
    let _ = child.wait();
}

/// Whether the command ended (left unreaped, so that its process group's id stays its own).
fn ended(child: &Child) -> bool {
    use rustix::process::{Pid, WaitId, WaitIdOptions, waitid};
    let Some(pid) = Pid::from_raw(child.id() as i32) else {
        return true;
    };
    let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
    !matches!(waitid(WaitId::Pid(pid), options), Ok(None))
}

/// Kills the command and what is left of its process group (the group is the command's own;
/// before it is reaped, its id names nobody else's).
fn kill_group(child: &Child) {
    if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
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
            if let Some(task) = self.last_seen(id).filter(|t| t.state == TaskState::Lost) {
                // Its output can no longer be read: no output, and the state says why.
                return Ok(lost_read(task));
            }
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
            // A new connection being made is waited for: through it, the far side kills its
            // tasks now rather than at the end of its grace.
            for _ in 0..6000 {
                if !lock(&self.inner.state).reconnecting {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
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
                    Ok(Err(Failure::Protocol(error))) => {
                        tracing::warn!(message = %error.message, "the executor service failed to shut down");
                    }
                    Err(_) => tracing::warn!(
                        "the executor service did not answer shutdown in time; it is stopped"
                    ),
                    Ok(_) => {}
                }
            }
            self.inner.close();
            let Some(child) = lock(&self.inner.link).child.take() else {
                return;
            };
            // It exits once it reads the end of its input; a far side that does not is stopped.
            for _ in 0..500 {
                if ended(&child) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            stop(child);
        })
    }
}
