//! The server side: an [`Executor`] behind the protocol on a byte stream (`executor serve --stdio`).
//!
//! Each line read is one message. Quick operations are answered in order; `run`, `start` and
//! `shutdown` each go to a task of their own, so that a long command never holds up a read or a
//! kill. Answers and events go out through one writer, a whole line at a time.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tokio_util::sync::CancellationToken;

use super::wire::{self, Offsets, Outcome, RpcError, code};
use crate::{Executor, Read, Task};

/// Who the server says it is in `hello`.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Name and version, e.g. `dsh-host 0.1.0`.
    pub server: String,
}

/// Serves `executor` on `input` and `output` until `input` ends, then shuts the executor down
/// (every running task is killed and awaited) and returns. `events` is the receiver of the
/// task-done channel `executor` was made with.
pub async fn serve<R, W>(
    executor: Arc<dyn Executor>,
    events: UnboundedReceiver<Task>,
    input: R,
    output: W,
    options: ServeOptions,
) -> std::io::Result<()>
where
    R: tokio::io::AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (out, lines) = tokio::sync::mpsc::unbounded_channel();
    let writer = tokio::spawn(write_lines(output, lines));
    let server = Arc::new(Server {
        executor,
        out,
        session: crate::random_hex(),
        options,
        greeted: std::sync::atomic::AtomicBool::new(false),
        calls: Mutex::new(Calls::default()),
        reads: Mutex::new(HashMap::new()),
        log: Mutex::new(EventLog::default()),
        shut_down: tokio::sync::OnceCell::new(),
    });
    let pump = tokio::spawn(pump_events(server.clone(), events));
    let mut input = BufReader::with_capacity(64 * 1024, input);
    let mut line = Vec::new();
    let result = loop {
        match read_line(&mut input, &mut line).await {
            Ok(LineRead::Eof) => break Ok(()),
            Ok(LineRead::TooLong) => server.send(wire::error_response(
                &Value::Null,
                &RpcError::new(
                    code::LINE_TOO_LONG,
                    format!(
                        "a line longer than {} bytes was skipped",
                        wire::MAX_LINE_BYTES
                    ),
                ),
            )),
            Ok(LineRead::Line) => server.clone().handle(&line),
            Err(err) => break Err(err),
        }
    };
    // The client is gone (or said goodbye): nothing may outlive it.
    server.shutdown().await;
    pump.abort();
    drop(server);
    // The writer ends once every sender is gone (the last in-flight calls hold some).
    let _ = writer.await;
    result
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
    executor: Arc<dyn Executor>,
    out: UnboundedSender<String>,
    session: String,
    options: ServeOptions,
    greeted: std::sync::atomic::AtomicBool,
    calls: Mutex<Calls>,
    reads: Mutex<HashMap<String, ReadState>>,
    log: Mutex<EventLog>,
    shut_down: tokio::sync::OnceCell<()>,
}

/// The `run` and `start` calls by request id: in flight (with who waits for the answer) or done
/// (with the answer, for repeats).
#[derive(Default)]
struct Calls {
    entries: HashMap<String, Call>,
    /// Done ids, oldest first, at most [`wire::REMEMBERED_REQUESTS`].
    done: VecDeque<String>,
}

enum Call {
    InFlight {
        /// The JSON-RPC ids of the first request and of each repeat so far.
        waiters: Vec<Value>,
        abort: CancellationToken,
    },
    Done(Value),
}

/// Where a task's reads through the protocol stand.
#[derive(Default)]
struct ReadState {
    /// The end of what has been answered: the next delta starts here.
    end: Offsets,
    /// The last answer and its start, answered again to a read from that start.
    last: Option<(Offsets, Read)>,
}

/// Tasks' reads remembered before those of forgotten tasks are dropped.
const READ_STATES: usize = 4096;

#[derive(Default)]
struct EventLog {
    next: u64,
    /// Sent but not acknowledged, in order.
    unacked: VecDeque<wire::Event>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere leaves the tables consistent (each update is one step).
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// A method's parameters, or the JSON-RPC error naming why they do not decode.
fn params<T: DeserializeOwned>(params: Option<Value>) -> Result<T, RpcError> {
    serde_json::from_value(params.unwrap_or(Value::Null))
        .map_err(|err| RpcError::new(code::INVALID_PARAMS, format!("invalid params: {err}")))
}

impl Server {
    fn send(&self, line: String) {
        // A closed writer means the client is gone; the input's end follows.
        let _ = self.out.send(line);
    }

    fn answer(&self, id: &Value, result: Result<Value, RpcError>) {
        self.send(match result {
            Ok(value) => wire::response(id, &value),
            Err(error) => wire::error_response(id, &error),
        });
    }

    fn handle(self: Arc<Self>, line: &[u8]) {
        let message: wire::Incoming = match serde_json::from_slice(line) {
            Ok(message) => message,
            Err(err) => {
                let error =
                    RpcError::new(code::PARSE_ERROR, format!("not a JSON-RPC message: {err}"));
                return self.send(wire::error_response(&Value::Null, &error));
            }
        };
        let Some(method) = message.method else {
            // A response from the client: this protocol asks the client nothing.
            if message.result.is_none() && message.error.is_none() {
                let id = message.id.unwrap_or(Value::Null);
                let error = RpcError::new(code::INVALID_REQUEST, "a message needs a method");
                self.send(wire::error_response(&id, &error));
            }
            return;
        };
        if message.jsonrpc.as_deref() != Some("2.0") {
            if let Some(id) = &message.id {
                let error = RpcError::new(code::INVALID_REQUEST, "jsonrpc must be \"2.0\"");
                self.send(wire::error_response(id, &error));
            }
            return;
        }
        let Some(id) = message.id else {
            return self.notified(&method, message.params);
        };
        if method != "hello" && !self.greeted.load(std::sync::atomic::Ordering::Acquire) {
            let error = RpcError::new(
                code::HELLO_FIRST,
                format!("{method} before hello: a connection starts with hello"),
            );
            return self.answer(&id, Err(error));
        }
        match method.as_str() {
            "run" | "start" => match params::<wire::StartParams>(message.params) {
                Ok(call) => self.call(id, method == "run", call),
                Err(error) => self.answer(&id, Err(error)),
            },
            "shutdown" => {
                tokio::spawn(async move {
                    self.shutdown().await;
                    self.answer(&id, Ok(Value::Null));
                });
            }
            _ => {
                let result = self.quick(&method, message.params);
                self.answer(&id, result);
            }
        }
    }

    /// A notification: answered with nothing, whatever it holds.
    fn notified(&self, method: &str, params: Option<Value>) {
        match method {
            "cancel" => {
                if let Ok(cancel) = self::params::<wire::CancelParams>(params)
                    && let Some(Call::InFlight { abort, .. }) =
                        lock(&self.calls).entries.get(&cancel.request_id)
                {
                    abort.cancel();
                }
            }
            "ack" => {
                if let Ok(ack) = self::params::<wire::Cursor>(params) {
                    lock(&self.log).unacked.retain(|e| e.seq > ack.cursor);
                }
            }
            other => tracing::debug!(method = other, "unknown notification ignored"),
        }
    }

    /// The operations answered at once.
    fn quick(&self, method: &str, params: Option<Value>) -> Result<Value, RpcError> {
        let exec = &self.executor;
        Ok(match method {
            "hello" => return self.hello(self::params(params)?),
            "resolve" => {
                let p: wire::ResolveParams = self::params(params)?;
                wire::to_value(Outcome::from(exec.resolve(p.request)))
            }
            "read" => return self.read(self::params(params)?),
            "kill" => {
                let p: wire::TaskParams = self::params(params)?;
                wire::to_value(Outcome::from(exec.kill(&p.task)))
            }
            "get" => {
                let p: wire::TaskParams = self::params(params)?;
                wire::to_value(Outcome::from(exec.get(&p.task)))
            }
            "owner_of" => {
                let p: wire::TaskParams = self::params(params)?;
                wire::to_value(exec.owner_of(&p.task))
            }
            "list" => wire::to_value(exec.list()),
            "events" => {
                let p: wire::Cursor = self::params(params)?;
                let mut log = lock(&self.log);
                log.unacked.retain(|e| e.seq > p.cursor);
                wire::to_value(&log.unacked)
            }
            other => {
                return Err(RpcError::new(
                    code::METHOD_NOT_FOUND,
                    format!("no method {other:?}"),
                ));
            }
        })
    }

    fn hello(&self, hello: wire::Hello) -> Result<Value, RpcError> {
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
        if let Some(session) = hello.session
            && session != self.session
        {
            return Err(RpcError::new(
                code::INVALID_PARAMS,
                format!("no session {session:?} to resume on this server"),
            ));
        }
        tracing::debug!(client = %hello.client, "executor client connected");
        self.greeted
            .store(true, std::sync::atomic::Ordering::Release);
        Ok(wire::to_value(wire::Welcome {
            protocol: wire::PROTOCOL_VERSION,
            server: self.options.server.clone(),
            session: self.session.clone(),
            limits: self.executor.limits(),
            remembered_requests: wire::REMEMBERED_REQUESTS,
        }))
    }

    /// `run` or `start` under request id `call.request_id`: the first time it runs; a repeat
    /// waits for or gets the first one's answer.
    fn call(self: Arc<Self>, id: Value, foreground: bool, call: wire::StartParams) {
        let abort = CancellationToken::new();
        {
            let mut calls = lock(&self.calls);
            match calls.entries.get_mut(&call.request_id) {
                Some(Call::Done(answer)) => {
                    let answer = answer.clone();
                    drop(calls);
                    return self.answer(&id, Ok(answer));
                }
                Some(Call::InFlight { waiters, .. }) => return waiters.push(id),
                None => {
                    calls.entries.insert(
                        call.request_id.clone(),
                        Call::InFlight {
                            waiters: vec![id],
                            abort: abort.clone(),
                        },
                    );
                }
            }
        }
        tokio::spawn(async move {
            let answer = if foreground {
                wire::to_value(Outcome::from(self.executor.run(call.spec, abort).await))
            } else {
                wire::to_value(Outcome::from(self.executor.start(call.spec).await))
            };
            let waiters = {
                let mut calls = lock(&self.calls);
                let previous = calls
                    .entries
                    .insert(call.request_id.clone(), Call::Done(answer.clone()));
                calls.done.push_back(call.request_id);
                while calls.done.len() > wire::REMEMBERED_REQUESTS {
                    if let Some(old) = calls.done.pop_front() {
                        calls.entries.remove(&old);
                    }
                }
                match previous {
                    Some(Call::InFlight { waiters, .. }) => waiters,
                    _ => Vec::new(),
                }
            };
            for id in waiters {
                self.answer(&id, Ok(answer.clone()));
            }
        });
    }

    /// A read from explicit offsets: the next delta when they are the previous answer's end,
    /// that answer again when they are its start.
    fn read(&self, p: wire::ReadParams) -> Result<Value, RpcError> {
        let mut reads = lock(&self.reads);
        if !reads.contains_key(&p.task) && reads.len() >= READ_STATES {
            reads.retain(|task, _| self.executor.get(task).is_ok());
        }
        let end = reads
            .get(&p.task)
            .map(|state| state.end)
            .unwrap_or_default();
        if p.from == end {
            // An empty answer ends where it starts, so a read from its end is always the next
            // one: its denials are not delivered twice (nor again if that answer was lost).
            let read = match self.executor.read_output(&p.task) {
                Ok(read) => read,
                // An unknown or forgotten task leaves no read state behind.
                Err(err) => return Ok(wire::to_value(Outcome::<wire::ReadAnswer>::Err(err))),
            };
            let state = reads.entry(p.task.clone()).or_default();
            let to = p.from.after(&read);
            state.end = to;
            state.last = Some((p.from, read.clone()));
            return Ok(wire::to_value(Outcome::Ok(wire::ReadAnswer {
                from: p.from,
                to,
                read,
            })));
        }
        match reads.get(&p.task).and_then(|state| state.last.as_ref()) {
            Some((start, read)) if *start == p.from => {
                Ok(wire::to_value(Outcome::Ok(wire::ReadAnswer {
                    from: *start,
                    to: end,
                    read: read.clone(),
                })))
            }
            last => Err(RpcError::new(
                code::STALE_OFFSETS,
                format!(
                    "read offsets of {} ({}) are neither the previous answer's start ({}) nor \
                     its end ({end})",
                    p.task,
                    p.from,
                    last.map_or(end, |(start, _)| *start),
                ),
            )),
        }
    }

    /// Stops every foreground run and kills and awaits every task, once; no event is sent after
    /// it began.
    async fn shutdown(&self) {
        // A foreground run is not the executor's task: it is stopped as an abort stops it.
        for call in lock(&self.calls).entries.values() {
            if let Call::InFlight { abort, .. } = call {
                abort.cancel();
            }
        }
        self.shut_down
            .get_or_init(|| async { self.executor.shutdown().await })
            .await;
    }
}

/// Numbers each task-done event, keeps it until acknowledged and sends it.
async fn pump_events(server: Arc<Server>, mut events: UnboundedReceiver<Task>) {
    while let Some(task) = events.recv().await {
        let event = {
            let mut log = lock(&server.log);
            log.next += 1;
            let event = wire::Event {
                seq: log.next,
                task,
            };
            log.unacked.push_back(event.clone());
            if log.unacked.len() > wire::UNACKED_EVENTS {
                log.unacked.pop_front();
                tracing::warn!("the executor client acknowledges no events; the oldest is dropped");
            }
            event
        };
        server.send(wire::notification("task_done", &event));
    }
}
