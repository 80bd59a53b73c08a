//! The server side: an [`Executor`] behind the protocol on a byte stream (`executor serve --stdio`).
//!
//! Each line read is one message. Quick operations are answered in order; `run`, `start` and
//! `shutdown` each go to a task of their own, so that a long command never holds up a read or a
//! kill. Answers and events go out through the connection's writer, a whole line at a time.
//!
//! A session (its tasks, the answers of its request ids, its reads' offsets, its events) belongs
//! to the server, not to a connection. With a reconnect grace, a lost connection leaves the
//! session running for that long: a new connection naming the session (through the session's
//! socket, see [`super::resume`]) takes it over and carries on where the last one stopped. Without
//! one, or once the grace ran out, the session ends: every running task is killed and awaited.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::session::{self, Message, Session, Sink, answer, lock};

/// How long a connection through the session's socket has to say a successful `hello` before
/// it is closed.
const HELLO_WITHIN: Duration = Duration::from_secs(10);

/// Connections through the session's socket that have not said a successful `hello` yet, at
/// most: one more closes the oldest of them (a command that opens them by the thousand exhausts
/// nothing of the session's, and a client coming back is not kept out by them).
const UNGREETED_AT_MOST: usize = 16;
use super::wire::{self, RpcError, code};
use crate::{Executor, Task};

/// Who the server says it is in `hello`, and how long its session outlives a lost connection.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Name and version, e.g. `dsh-host 0.1.0`.
    pub server: String,
    /// How long the session waits for a new connection once its connection is lost; zero ends
    /// it at once (killing its tasks).
    pub reconnect_grace: Duration,
    /// The private directory where the session's socket is made for new connections; needed
    /// when `reconnect_grace` is not zero.
    pub session_dir: Option<PathBuf>,
}

/// Serves `executor` on `input` and `output`. Ends when the connection ends (or, with a
/// reconnect grace, when no connection took the session over within the grace), then shuts the
/// executor down (every running task is killed and awaited) and returns. `events` is the
/// receiver of the task-done channel `executor` was made with.
pub async fn serve<R, W>(
    executor: Arc<dyn Executor>,
    events: UnboundedReceiver<Task>,
    input: R,
    output: W,
    options: ServeOptions,
) -> std::io::Result<()>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    // 96 random bits: the session's name is what a new connection needs to take it over.
    let session = format!("{}{}", crate::random_hex(), crate::random_hex());
    let grace = options.reconnect_grace;
    let rendezvous = match (&options.session_dir, grace.is_zero()) {
        (_, true) => None,
        (Some(dir), false) => Some(Rendezvous::bind(dir, &session)?),
        (None, false) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "a reconnect grace needs a directory for the session's socket",
            ));
        }
    };
    // The credential a new connection needs to take the session over: apart from its name,
    // which is on disk (the socket's), told only to the client in hello's answer.
    let resume_key = match rendezvous {
        Some(_) => Some(wire::ResumeKey::new(super::resume::new_resume_key()?)),
        None => None,
    };
    let server = Arc::new(Server {
        core: Arc::new(Session::new(executor)),
        session,
        resume_key,
        options,
        next_connection: AtomicU64::new(1),
        ungreeted: Mutex::new(Vec::new()),
        current: Mutex::new(None),
        ever_attached: AtomicBool::new(false),
        attached: tokio::sync::Notify::new(),
        stopping: AtomicBool::new(false),
        shut_down: tokio::sync::OnceCell::new(),
    });
    let (ended_tx, mut ended) = tokio::sync::mpsc::unbounded_channel();
    let first = server.clone().open(input, output, false, ended_tx.clone());
    let pump = tokio::spawn(pump_events(server.clone(), events));
    let mut deadline: Option<tokio::time::Instant> = None;
    let result = loop {
        let grace_over = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            Some(ended) = ended.recv() => {
                let Ended { connection, error } = ended;
                if !server.lost(connection, first.id) {
                    continue;
                }
                if let Some(err) = error
                    && connection == first.id
                    && rendezvous.is_none()
                {
                    break Err(err);
                }
                // Nothing to come back to: no grace, a session never taken up, or one ending.
                if rendezvous.is_none()
                    || !server.ever_attached.load(Ordering::Acquire)
                    || server.stopping.load(Ordering::Acquire)
                {
                    break Ok(());
                }
                if deadline.is_none() {
                    tracing::info!(grace = ?grace, "the executor client's connection is lost; its session waits for it");
                    deadline = Some(tokio::time::Instant::now() + grace);
                }
            }
            accepted = accept(rendezvous.as_ref()) => match accepted {
                Ok(stream) => server.clone().take_socket_connection(stream, &ended_tx),
                Err(err) => {
                    tracing::warn!(%err, "cannot accept a connection on the session's socket");
                    // Out of descriptors, say: the socket stays readable, so an immediate
                    // retry would spin.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            () = server.attached.notified() => {
                if server.current().is_some() {
                    deadline = None;
                }
            }
            () = grace_over => {
                tracing::info!("no executor client came back within the reconnect grace; its session ends");
                break Ok(());
            }
        }
    };
    // Nobody may attach to a session that ends.
    drop(rendezvous);
    server.shutdown().await;
    pump.abort();
    // The last answers (shutdown's) go out before the connection closes.
    let last = lock(&server.current).take();
    if let Some(connection) = last {
        connection.finish().await;
    }
    result
}

/// A connection's end: which one, and the read error that ended it, if any.
struct Ended {
    connection: u64,
    error: Option<std::io::Error>,
}

async fn accept(rendezvous: Option<&Rendezvous>) -> std::io::Result<tokio::net::UnixStream> {
    match rendezvous {
        Some(rendezvous) => rendezvous.listener.accept().await.map(|(stream, _)| stream),
        None => std::future::pending().await,
    }
}

/// The session's socket in the session directory, removed when the session ends.
struct Rendezvous {
    listener: tokio::net::UnixListener,
    path: PathBuf,
}

impl Rendezvous {
    fn bind(dir: &Path, session: &str) -> std::io::Result<Rendezvous> {
        let path = super::resume::session_socket(dir, session);
        let listener = tokio::net::UnixListener::bind(&path).map_err(|err| {
            std::io::Error::new(
                err.kind(),
                format!("cannot make the session's socket {}: {err}", path.display()),
            )
        })?;
        Ok(Rendezvous { listener, path })
    }
}

impl Drop for Rendezvous {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// One connection: its writer, and whether it said hello.
struct Connection {
    id: u64,
    /// `None` once closed.
    out: Mutex<Option<UnboundedSender<String>>>,
    writer: Mutex<Option<JoinHandle<std::io::Result<()>>>>,
    greeted: AtomicBool,
    /// Made through the session's socket: it must name the session.
    resumed: bool,
    /// Ends its reader.
    stop: CancellationToken,
}

impl Sink for Connection {
    fn send(&self, line: String) {
        // A closed writer means the client is gone (or another connection took over).
        if let Some(out) = lock(&self.out).as_ref() {
            let _ = out.send(line);
        }
    }
}

impl Connection {
    /// Stops reading and closes the output once what was sent before is written.
    fn close(&self) {
        self.stop.cancel();
        lock(&self.out).take();
    }

    /// Closes it and waits (a few seconds at most) until what was sent is written.
    async fn finish(&self) {
        self.close();
        let writer = lock(&self.writer).take();
        if let Some(writer) = writer {
            let _ = tokio::time::timeout(Duration::from_secs(5), writer).await;
        }
    }
}

enum LineRead {
    Line,
    TooLong,
    Eof,
}

/// The next line into `line` (without its newline), reading at most [`wire::MAX_LINE_BYTES`] of
/// it into memory; the rest of a longer one is read and dropped.
async fn read_line<R: AsyncBufRead + Unpin>(
    input: &mut R,
    line: &mut Vec<u8>,
) -> std::io::Result<LineRead> {
    line.clear();
    let mut too_long = false;
    loop {
        let buf = input.fill_buf().await?;
        if buf.is_empty() {
            // A last line without its newline counts; an empty end is the end.
            return Ok(if too_long {
                LineRead::TooLong
            } else if line.is_empty() {
                LineRead::Eof
            } else {
                LineRead::Line
            });
        }
        let (take, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i, true),
            None => (buf.len(), false),
        };
        if !too_long && line.len() + take <= wire::MAX_LINE_BYTES {
            line.extend_from_slice(&buf[..take]);
        } else {
            too_long = true;
            line.clear();
        }
        input.consume(if done { take + 1 } else { take });
        if done {
            return Ok(if too_long {
                LineRead::TooLong
            } else {
                LineRead::Line
            });
        }
    }
}

async fn write_lines<W: AsyncWrite + Unpin>(
    mut output: W,
    mut lines: UnboundedReceiver<String>,
) -> std::io::Result<()> {
    while let Some(line) = lines.recv().await {
        output.write_all(line.as_bytes()).await?;
        // Flush only when nothing else is waiting: a burst goes out in one write.
        if lines.is_empty() {
            output.flush().await?;
        }
    }
    output.flush().await
}

struct Server {
    core: Arc<Session>,
    session: String,
    /// What a `hello` naming the session must carry (a session kept for reconnection has one).
    resume_key: Option<wire::ResumeKey>,
    options: ServeOptions,
    next_connection: AtomicU64,
    /// Connections through the socket not greeted yet.
    ungreeted: Mutex<Vec<Arc<Connection>>>,
    /// The connection that said hello last: answers to it, events to it.
    current: Mutex<Option<Arc<Connection>>>,
    /// A connection said hello once (a session nobody took up is not waited for).
    ever_attached: AtomicBool,
    /// Told when a connection takes the session.
    attached: tokio::sync::Notify,
    /// Shutdown began: a lost connection ends the session at once.
    stopping: AtomicBool,
    shut_down: tokio::sync::OnceCell<()>,
}

impl Server {
    fn current(&self) -> Option<Arc<Connection>> {
        lock(&self.current).clone()
    }

    /// A connection made through the session's socket: served (closing the oldest of those
    /// still waiting to say `hello` when too many are); closed if it has not said one within
    /// [`HELLO_WITHIN`].
    fn take_socket_connection(
        self: Arc<Self>,
        stream: tokio::net::UnixStream,
        ended: &UnboundedSender<Ended>,
    ) {
        let mut ungreeted = lock(&self.ungreeted);
        ungreeted.retain(|c| !c.greeted.load(Ordering::Acquire) && !c.stop.is_cancelled());
        if ungreeted.len() >= UNGREETED_AT_MOST {
            tracing::warn!(
                "too many connections on the session's socket wait to say hello; the oldest was closed"
            );
            ungreeted.remove(0).close();
        }
        let (input, output) = stream.into_split();
        let connection = self.clone().open(input, output, true, ended.clone());
        ungreeted.push(connection.clone());
        drop(ungreeted);
        tokio::spawn(async move {
            tokio::select! {
                () = tokio::time::sleep(HELLO_WITHIN) => {}
                () = connection.stop.cancelled() => return,
            }
            if !connection.greeted.load(Ordering::Acquire) {
                tracing::debug!(
                    "a connection on the session's socket said no hello in time; closed"
                );
                connection.close();
            }
        });
    }

    /// Starts reading `input` as a new connection; `ended` is told when it ends.
    fn open<R, W>(
        self: Arc<Self>,
        input: R,
        output: W,
        resumed: bool,
        ended: UnboundedSender<Ended>,
    ) -> Arc<Connection>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (out, lines) = tokio::sync::mpsc::unbounded_channel();
        let connection = Arc::new(Connection {
            id: self.next_connection.fetch_add(1, Ordering::Relaxed),
            out: Mutex::new(Some(out)),
            writer: Mutex::new(Some(tokio::spawn(write_lines(output, lines)))),
            greeted: AtomicBool::new(false),
            resumed,
            stop: CancellationToken::new(),
        });
        let reading = connection.clone();
        tokio::spawn(async move {
            let mut input = BufReader::with_capacity(64 * 1024, input);
            let mut line = Vec::new();
            let error = loop {
                let next = tokio::select! {
                    () = reading.stop.cancelled() => break None,
                    next = read_line(&mut input, &mut line) => next,
                };
                match next {
                    Ok(LineRead::Eof) => break None,
                    Ok(LineRead::TooLong) => reading.send(wire::error_response(
                        &Value::Null,
                        &RpcError::new(
                            code::LINE_TOO_LONG,
                            format!(
                                "a line longer than {} bytes was skipped",
                                wire::MAX_LINE_BYTES
                            ),
                        ),
                    )),
                    Ok(LineRead::Line) => self.clone().handle(&reading, &line),
                    Err(err) => break Some(err),
                }
            };
            let _ = ended.send(Ended {
                connection: reading.id,
                error,
            });
        });
        connection
    }

    /// Connection `id` ended. True when that leaves the session without a connection: it was
    /// the current one, or it was the first (`first`, the server's own) and none had taken the
    /// session. A connection through the session's socket that never had the session (its hello
    /// refused, or never said) changes nothing by ending.
    fn lost(&self, id: u64, first: u64) -> bool {
        let mut current = lock(&self.current);
        match current.as_ref() {
            Some(connection) if connection.id == id => {
                connection.close();
                *current = None;
                true
            }
            Some(_) => false,
            None => id == first,
        }
    }

    /// `connection` said hello: it takes the session over from the one before, if any.
    fn attach(&self, connection: &Arc<Connection>) {
        let previous = lock(&self.current).replace(connection.clone());
        if let Some(previous) = previous
            && previous.id != connection.id
        {
            tracing::info!("a new executor client connection took the session over");
            previous.close();
        }
        self.ever_attached.store(true, Ordering::Release);
        self.attached.notify_one();
    }

    fn handle(self: Arc<Self>, from: &Arc<Connection>, line: &[u8]) {
        let (id, method, params) = match session::parse(line) {
            Message::Request { id, method, params } => (id, method, params),
            Message::Notification { method, params } => {
                // Only a connection that has the session may cancel or acknowledge.
                if from.greeted.load(Ordering::Acquire) {
                    self.core.notified(&method, params);
                }
                return;
            }
            Message::Ignored | Message::Invalid { id: None, .. } => return,
            Message::Invalid {
                id: Some(id),
                error,
            } => return answer(from.as_ref(), &id, Err(error)),
        };
        // A relay asks the session's server to prove itself before it passes a key on.
        if method == "prove" && from.resumed && !from.greeted.load(Ordering::Acquire) {
            let result = self.prove(session::params(params));
            return answer(from.as_ref(), &id, result);
        }
        if method != "hello" && !from.greeted.load(Ordering::Acquire) {
            let error = RpcError::new(
                code::HELLO_FIRST,
                format!("{method} before hello: a connection starts with hello"),
            );
            return answer(from.as_ref(), &id, Err(error));
        }
        match method.as_str() {
            "hello" => {
                let result = self.hello(from, session::params(params));
                answer(from.as_ref(), &id, result);
            }
            "shutdown" => {
                let from = from.clone();
                self.stopping.store(true, Ordering::Release);
                tokio::spawn(async move {
                    self.shutdown().await;
                    answer(from.as_ref(), &id, Ok(Value::Null));
                });
            }
            _ => {
                let to: Arc<dyn Sink> = from.clone();
                if !self.core.request(to, id.clone(), &method, params) {
                    let error =
                        RpcError::new(code::METHOD_NOT_FOUND, format!("no method {method:?}"));
                    answer(from.as_ref(), &id, Err(error));
                }
            }
        }
    }

    fn hello(
        &self,
        from: &Arc<Connection>,
        hello: Result<wire::Hello, RpcError>,
    ) -> Result<Value, RpcError> {
        let hello = hello?;
        if hello.protocol != wire::PROTOCOL_VERSION {
            return Err(RpcError {
                code: code::VERSION_MISMATCH,
                message: format!(
                    "protocol version mismatch: the client speaks version {}, this server ({}) \
                     speaks version {}",
                    hello.protocol,
                    self.options.server,
                    wire::PROTOCOL_VERSION
                ),
                data: Some(serde_json::json!({
                    "client": hello.protocol,
                    "server": wire::PROTOCOL_VERSION,
                })),
            });
        }
        match &hello.session {
            Some(session) if *session != self.session && hello.resume_key.is_none() => {
                return Err(RpcError::new(
                    code::RESUME_REFUSED,
                    format!(
                        "session {session:?} is not taken over: the hello's resume_key is \
                         missing; only the client the session's first hello was answered to has \
                         it"
                    ),
                ));
            }
            Some(session) if *session != self.session => {
                return Err(RpcError::new(
                    code::UNKNOWN_SESSION,
                    format!(
                        "no session {session:?} to resume on this machine: it ended, or its \
                         reconnect grace ran out"
                    ),
                ));
            }
            // Refused without a change: the connection that has the session keeps it.
            Some(session)
                if self.resume_key.as_ref().is_some_and(|key| {
                    let given = hello
                        .resume_key
                        .as_ref()
                        .map_or("", wire::ResumeKey::as_str);
                    !super::resume::same_key(key.as_str(), given)
                }) =>
            {
                tracing::warn!(%session, "a hello without the session's resume key (or with another) was refused");
                return Err(RpcError::new(
                    code::RESUME_REFUSED,
                    format!(
                        "session {session:?} is not taken over: the hello's resume_key is {}; \
                         only the client the session's first hello was answered to has it",
                        if hello.resume_key.is_some() {
                            "not the session's"
                        } else {
                            "missing"
                        }
                    ),
                ));
            }
            None if from.resumed => {
                return Err(RpcError::new(
                    code::INVALID_PARAMS,
                    "a connection through a session's socket names the session",
                ));
            }
            _ => {}
        }
        tracing::debug!(client = %hello.client, resumed = hello.session.is_some(), "executor client connected");
        from.greeted.store(true, Ordering::Release);
        self.attach(from);
        Ok(wire::to_value(wire::Welcome {
            protocol: wire::PROTOCOL_VERSION,
            server: self.options.server.clone(),
            session: self.session.clone(),
            resume_key: self.resume_key.clone(),
            limits: self.core.executor().limits(),
            remembered_requests: wire::REMEMBERED_REQUESTS,
            max_line_bytes: wire::MAX_LINE_BYTES,
            reconnect_grace_ms: self.options.reconnect_grace.as_secs_f64() * 1000.0,
        }))
    }

    /// `prove`: this server's process id and the proof, under the session's resume key, of the
    /// relay's nonce and that id ([`super::resume::proof`]).
    fn prove(&self, params: Result<wire::ProveParams, RpcError>) -> Result<Value, RpcError> {
        let params = params?;
        let Some(key) = &self.resume_key else {
            return Err(RpcError::new(
                code::METHOD_NOT_FOUND,
                "prove: this session is not kept for reconnection",
            ));
        };
        let nonce = &params.nonce;
        if !(32..=128).contains(&nonce.len()) || !nonce.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(RpcError::new(
                code::INVALID_PARAMS,
                "prove: the nonce is 32 to 128 hexadecimal digits",
            ));
        }
        let pid = std::process::id();
        Ok(wire::to_value(wire::Proof {
            pid,
            proof: super::resume::proof(key.as_str(), nonce, pid),
        }))
    }

    /// Stops every foreground run and kills and awaits every task, once; no event is sent after
    /// it began.
    async fn shutdown(&self) {
        self.stopping.store(true, Ordering::Release);
        self.core.abort_runs();
        self.shut_down
            .get_or_init(|| async { self.core.executor().shutdown().await })
            .await;
    }
}

/// Numbers each task-done event, keeps it until acknowledged and sends it.
async fn pump_events(server: Arc<Server>, mut events: UnboundedReceiver<Task>) {
    while let Some(task) = events.recv().await {
        let event = server.core.record(task);
        // Without a connection, the event waits in the log for the next one's `events`.
        if let Some(connection) = server.current() {
            connection.send(wire::notification("task_done", &event));
        }
    }
}
