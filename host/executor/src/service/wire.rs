//! The executor service's messages: JSON-RPC 2.0, one JSON object per line (`docs/executor-protocol.md`).
//!
//! The executor contract's own types ([`crate::RunResult`], [`crate::Task`], [`crate::Read`], ...)
//! travel as they are (they derive their encoding), so a field added to one reaches the far side
//! without a change here.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{ExecError, Read, Request, Spec, Task};

/// The protocol version this build speaks. A `hello` naming another is refused.
pub const PROTOCOL_VERSION: u32 = 1;

/// Completed `run`/`start` request ids whose answers the server keeps for repeats. Older ones
/// are forgotten: a repeat of one of those runs the command again.
pub const REMEMBERED_REQUESTS: usize = 1024;

/// Task-done events the server keeps until the client acknowledges them. Past it the oldest
/// unacknowledged one is dropped (a client that never acknowledges cannot grow the server).
pub const UNACKED_EVENTS: usize = 4096;

/// The longest line either side reads, in bytes: a command of the executor's largest limit
/// (64 MiB), JSON-escaped, fits; a longer line is answered with an error and skipped.
pub const MAX_LINE_BYTES: usize = 512 * 1024 * 1024;

/// JSON-RPC's own error codes, and the protocol's.
pub mod code {
    /// The line is not JSON.
    pub const PARSE_ERROR: i64 = -32700;
    /// JSON, but not a JSON-RPC request or notification.
    pub const INVALID_REQUEST: i64 = -32600;
    /// No such method.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// The method's parameters do not decode.
    pub const INVALID_PARAMS: i64 = -32602;
    /// `hello` named a protocol version this server does not speak.
    pub const VERSION_MISMATCH: i64 = -32001;
    /// A method other than `hello` came before a successful `hello`.
    pub const HELLO_FIRST: i64 = -32002;
    /// `read` offsets that are neither the previous answer's start nor its end.
    pub const STALE_OFFSETS: i64 = -32003;
    /// The line is longer than [`super::MAX_LINE_BYTES`].
    pub const LINE_TOO_LONG: i64 = -32004;
    /// `hello` named a session this machine does not have (it ended, or its reconnect grace
    /// ran out): there is nothing to resume.
    pub const UNKNOWN_SESSION: i64 = -32005;
    /// `hello` named this session without its resume key, or with another: only the client
    /// the session's first `hello` was answered to may take it over. The connection that has
    /// the session keeps it.
    pub const RESUME_REFUSED: i64 = -32006;
}

/// What an executor operation answered: the JSON-RPC `result` of every executor method. The
/// contract's errors are answers (re-delivered for a repeated request id like any other), not
/// JSON-RPC errors, which are kept for the protocol's own failures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome<T> {
    /// The operation's value.
    Ok(T),
    /// The executor's error.
    Err(ExecError),
}

impl<T> From<Result<T, ExecError>> for Outcome<T> {
    fn from(result: Result<T, ExecError>) -> Self {
        match result {
            Ok(value) => Outcome::Ok(value),
            Err(err) => Outcome::Err(err),
        }
    }
}

impl<T> From<Outcome<T>> for Result<T, ExecError> {
    fn from(outcome: Outcome<T>) -> Self {
        match outcome {
            Outcome::Ok(value) => Ok(value),
            Outcome::Err(err) => Err(err),
        }
    }
}

/// `hello`'s parameters: the first message of a connection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    /// The protocol version the client speaks.
    pub protocol: u32,
    /// The client's name and version, for the server's log.
    #[serde(default)]
    pub client: String,
    /// The server session to resume (a server started with a reconnect grace keeps its tasks
    /// for a new connection naming it); `None` starts a new one.
    #[serde(default)]
    pub session: Option<String>,
    /// The session's resume key, from the answer to the `hello` that started it: needed with
    /// `session`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_key: Option<ResumeKey>,
}

/// `hello`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Welcome {
    /// The protocol version the server speaks (the client's).
    pub protocol: u32,
    /// The server's name and version.
    pub server: String,
    /// This server session's id (random), for a later reconnection to name. Not a secret: it
    /// names the session's socket.
    pub session: String,
    /// The secret a later reconnection's `hello` must carry with `session` (256 random bits, in
    /// hexadecimal; kept in the server's memory only), given when the session outlives its
    /// connection (`reconnect_grace_ms` above 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_key: Option<ResumeKey>,
    /// The executor's limits, which never change during a session.
    pub limits: crate::Limits,
    /// How many completed request ids the server remembers ([`REMEMBERED_REQUESTS`]).
    pub remembered_requests: usize,
    /// The longest line the server reads ([`MAX_LINE_BYTES`]).
    #[serde(default = "max_line_bytes")]
    pub max_line_bytes: usize,
    /// How long the server keeps the session (its tasks, answers and events) for a new
    /// connection once this one is lost, in milliseconds; 0 when a lost connection ends it.
    #[serde(default)]
    pub reconnect_grace_ms: f64,
}

fn max_line_bytes() -> usize {
    MAX_LINE_BYTES
}

/// A session's resume key: its text on the wire, never in debug output (a log of a `hello`
/// or its answer would hand the session to whoever reads it).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ResumeKey(String);

impl ResumeKey {
    /// The key whose text is `text`.
    pub fn new(text: String) -> ResumeKey {
        ResumeKey(text)
    }

    /// Its text, as it goes on the wire.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ResumeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// `prove`'s parameters: asked by a relay of the session's server, on a connection through the
/// session's socket, before it passes on a `hello` that carries the resume key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProveParams {
    /// The relay's random challenge (hexadecimal, 32 to 128 digits).
    pub nonce: String,
}

/// `prove`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Proof {
    /// The session's server's process id: the socket's peer, for a relay that reached the server.
    pub pid: u32,
    /// HMAC-SHA256 under the resume key of the nonce and the process id, in hexadecimal
    /// ([`super::resume::proof`]).
    pub proof: String,
}

/// `resolve`'s parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResolveParams {
    /// The request to apply defaults and caps to.
    pub request: Request,
}

/// `run`'s and `start`'s parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StartParams {
    /// The client's id for this call: a repeat of it (while the first runs or after) gets the
    /// first one's answer and starts nothing.
    pub request_id: String,
    /// What to run.
    pub spec: Spec,
}

/// `cancel`'s parameters: abort the foreground `run` with this request id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CancelParams {
    /// The `run`'s request id.
    pub request_id: String,
}

/// Byte positions in a task's streams as read through this protocol: how many bytes of each
/// stream's text earlier `read` answers have delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Offsets {
    /// Delivered bytes of stdout.
    pub stdout: u64,
    /// Delivered bytes of stderr.
    pub stderr: u64,
}

impl Offsets {
    /// The offsets after `read` was delivered from these.
    pub fn after(self, read: &Read) -> Offsets {
        Offsets {
            stdout: self.stdout + read.stdout.text.len() as u64,
            stderr: self.stderr + read.stderr.text.len() as u64,
        }
    }
}

impl std::fmt::Display for Offsets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stdout {}, stderr {}", self.stdout, self.stderr)
    }
}

/// `read`'s parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReadParams {
    /// The task.
    pub task: String,
    /// Where the client's copy of the streams ends: the previous answer's `to` (the next delta)
    /// or its `from` (that answer again).
    pub from: Offsets,
}

/// `read`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReadAnswer {
    /// Where this delta starts.
    pub from: Offsets,
    /// Where it ends: the next read's `from`.
    pub to: Offsets,
    /// The delta and the task as it stands.
    pub read: Read,
}

/// The parameters of `kill`, `get` and `owner_of`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskParams {
    /// The task.
    pub task: String,
}

/// The parameters of `events` and of the `ack` notification.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Cursor {
    /// The highest event sequence number the client has; events after it are wanted (`events`)
    /// and those up to it may be forgotten (both).
    pub cursor: u64,
}

/// A task-done event: the `task_done` notification's parameters, and an entry of `events`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// 1, 2, 3, ... in the order the tasks ended, per server session.
    pub seq: u64,
    /// The task as it ended.
    pub task: Task,
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RpcError {
    /// One of [`code`].
    pub code: i64,
    /// What went wrong, for people.
    pub message: String,
    /// Facts for programs (a version mismatch names both versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    /// An error without data.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }
}

/// Any message either side reads, before it is told apart: a request has `method` and `id`, a
/// notification `method` only, a response `id` and `result` or `error`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Incoming {
    /// `"2.0"`.
    #[serde(default)]
    pub jsonrpc: Option<String>,
    /// The request's id (a response's, echoed).
    #[serde(default)]
    pub id: Option<Value>,
    /// The method of a request or notification.
    #[serde(default)]
    pub method: Option<String>,
    /// Its parameters.
    #[serde(default)]
    pub params: Option<Value>,
    /// A success response's result.
    #[serde(default)]
    pub result: Option<Value>,
    /// An error response's error.
    #[serde(default)]
    pub error: Option<RpcError>,
}

/// A request line.
pub fn request(id: u64, method: &str, params: impl Serialize) -> String {
    line(&serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
}

/// A notification line.
pub fn notification(method: &str, params: impl Serialize) -> String {
    line(&serde_json::json!({"jsonrpc": "2.0", "method": method, "params": params}))
}

/// A success response line.
pub fn response(id: &Value, result: &Value) -> String {
    line(&serde_json::json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

/// An error response line.
pub fn error_response(id: &Value, error: &RpcError) -> String {
    line(&serde_json::json!({"jsonrpc": "2.0", "id": id, "error": error}))
}

fn line(value: &Value) -> String {
    let mut line = value.to_string();
    line.push('\n');
    line
}

/// A value as JSON; the contract's types always encode (no maps with non-string keys).
pub fn to_value(value: impl Serialize) -> Value {
    serde_json::to_value(value).unwrap_or_else(|err| {
        tracing::error!(%err, "cannot encode an answer");
        Value::Null
    })
}

#[cfg(test)]
mod debug_tests {
    use super::*;

    #[test]
    fn a_resume_key_never_shows_in_debug_output() {
        let hello = Hello {
            protocol: 1,
            client: "c".into(),
            session: Some("00ff".into()),
            resume_key: Some(ResumeKey::new("5ec2e7".into())),
        };
        let shown = format!("{hello:?}");
        assert!(
            !shown.contains("5ec2e7") && shown.contains("<redacted>"),
            "{shown}"
        );
        let welcome: Welcome = serde_json::from_value(serde_json::json!({
            "protocol": 1, "server": "s", "session": "00ff", "resume_key": "5ec2e7",
            "limits": {"default_timeout_ms": 1.0, "max_timeout_ms": 1.0, "max_output_bytes": 1,
                       "grace_ms": 1.0, "sandbox": null},
            "remembered_requests": 1
        }))
        .unwrap();
        let shown = format!("{welcome:?}");
        assert!(
            !shown.contains("5ec2e7") && shown.contains("<redacted>"),
            "{shown}"
        );
    }
}
