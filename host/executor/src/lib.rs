//! The process executor: what the tools component's `bash-executor` import runs on.
//!
//! [`Executor`] is the seam: the engine links any implementation to the guest. [`LocalExecutor`]
//! runs real processes as the executor contract describes.
//!
//! Used on its own, a foreground command and a background task look like this. Each command is
//! started by a spawn helper; a program that calls [`helper::dispatch`] first thing in
//! `main` serves as its own (otherwise a `dsh-spawn-helper` binary must sit next to it).
//!
//! ```rust,standalone_crate
//! use dsh_executor::{Config, Executor, LocalExecutor, Request, TaskState};
//! use tokio_util::sync::CancellationToken;
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     // Before any thread starts: when re-executed as the spawn helper, this is all it does.
//!     dsh_executor::helper::dispatch();
//!     let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
//!     runtime.block_on(async {
//!         let (task_done, mut ended) = tokio::sync::mpsc::unbounded_channel();
//!         let executor = LocalExecutor::new(Config::default(), task_done)?;
//!
//!         // `resolve` applies the defaults and the cap; `run` waits for the end.
//!         let request = |command: &str, timeout_ms| Request {
//!             command: command.to_string(),
//!             workdir: None,
//!             timeout_ms,
//!             owner: Some("session-1".to_string()),
//!         };
//!         let spec = executor.resolve(request("echo hello; exit 3", Some(1e9)))?;
//!         assert_eq!(spec.timeout_ms, 600_000.0); // capped at the maximum
//!         let result = executor.run(spec, CancellationToken::new()).await?;
//!         assert_eq!((result.stdout.text.as_str(), result.exit_code), ("hello\n", Some(3)));
//!
//!         // A background task: `start` returns at once, its end arrives on `ended`.
//!         let task = executor.start(executor.resolve(request("echo done", None))?).await?;
//!         assert_eq!(task.id, "bash-1");
//!         let finished = ended.recv().await.expect("one event per task");
//!         assert_eq!((finished.state, finished.exit_code), (TaskState::Completed, Some(0)));
//!         assert_eq!(executor.read_output(&task.id)?.stdout.text, "done\n");
//!
//!         executor.shutdown().await; // kills and awaits whatever still runs
//!         Ok(())
//!     })
//! }
//! ```

#![deny(missing_docs)]

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;

use tokio_util::sync::CancellationToken;

// Host side: the executor and what it keeps.
mod config;
mod containment;
mod local;
mod output;
mod spawn;
mod tasks;
// Both sides: how bash is invoked, and the wire between the host and a spawn helper.
mod bash;
pub mod pool;
mod protocol;
pub mod sandbox;
// The executor behind a protocol on a byte stream, and the client of one.
pub mod service;
// Runs in the spawn helper factory and its helpers, processes of their own.
pub mod helper;
pub mod hex;

/// The spawn helper's entry points under the name embedders have used so far.
pub use helper as spawn_helper;

pub use bash::env::EnvPolicy;
pub use local::LocalExecutor;
pub use output::meter::OutputMeter;
pub use output::spill::random_hex;
pub use sandbox::{NetworkMode, Sandbox, SandboxConfig, SandboxMode, Tier, TierPreference};
pub use service::RemoteExecutor;

/// A boxed future, so that [`Executor`] stays object-safe.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a tool call asks for, before defaults and caps.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Request {
    /// The command line, run as `bash -c <command>`.
    pub command: String,
    /// Working directory; `None` is [`Config::cwd`], else the host's cwd.
    pub workdir: Option<String>,
    /// Requested timeout in milliseconds; `None` is [`Config::default_timeout_ms`].
    pub timeout_ms: Option<f64>,
    /// The caller's owner token (a session id); the task started from it keeps it.
    pub owner: Option<String>,
}

/// Everything [`Executor::resolve`] takes from an executor that resolves with nothing but its
/// settings: a pool's front resolves a request for a node with the node's own and gets the
/// spec the node would make, without asking it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Resolution {
    /// [`Config::default_timeout_ms`].
    pub default_timeout_ms: f64,
    /// [`Config::max_timeout_ms`].
    pub max_timeout_ms: f64,
    /// [`Config::max_command_bytes`].
    pub max_command_bytes: u64,
    /// The working directory of a request without one.
    pub workdir: String,
}

impl Resolution {
    /// The spec `req` resolves to.
    pub fn resolve(&self, req: Request) -> Result<Spec, ExecError> {
        resolve_request(
            req,
            self.default_timeout_ms,
            self.max_timeout_ms,
            self.max_command_bytes,
            || Ok(self.workdir.clone()),
        )
    }
}

/// Applies the defaults and caps [`Executor::resolve`] describes; `default_workdir` is asked
/// only for a request without a workdir.
pub(crate) fn resolve_request(
    req: Request,
    default_timeout_ms: f64,
    max_timeout_ms: f64,
    max_command_bytes: u64,
    default_workdir: impl FnOnce() -> Result<String, ExecError>,
) -> Result<Spec, ExecError> {
    bash::long_command::check(&req.command, max_command_bytes)?;
    let timeout_ms =
        effective_timeout(req.timeout_ms.unwrap_or(default_timeout_ms), max_timeout_ms)?;
    let workdir = match req.workdir {
        Some(dir) => dir,
        None => default_workdir()?,
    };
    Ok(Spec {
        command: req.command,
        workdir,
        timeout_ms,
        owner: req.owner,
    })
}

/// The timeout a command runs with: `requested`, at most `max`; one that is not finite and
/// > 0 is refused.
pub(crate) fn effective_timeout(requested: f64, max: f64) -> Result<f64, ExecError> {
    if !requested.is_finite() || requested <= 0.0 {
        return Err(ExecError::InvalidRequest(format!(
            "invalid timeoutMs: expected a positive number, got {requested}"
        )));
    }
    Ok(requested.min(max))
}

/// A request with defaults and caps applied: exactly what [`Executor::run`] or
/// [`Executor::start`] will run.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Spec {
    /// The command line, run as `bash -c <command>`.
    pub command: String,
    /// The working directory, as requested or defaulted (not checked until the command starts).
    pub workdir: String,
    /// Effective timeout in milliseconds: the requested or default one, capped at the maximum.
    pub timeout_ms: f64,
    /// The owner token the request carried.
    pub owner: Option<String>,
}

/// One stream of a finished foreground command.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct StreamOutput {
    /// The kept tail, decoded as UTF-8 with replacement characters.
    pub text: String,
    /// Bytes before `text` were dropped from memory.
    pub truncated: bool,
    /// A spill file holding the complete stream, only when it is complete.
    pub spill_path: Option<String>,
    /// The stream's complete spill file was deleted to keep within a spill budget
    /// ([`Config::max_session_spill_bytes`]); `spill_path` is then unset.
    pub spill_evicted: bool,
}

/// The facts of a finished foreground command.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunResult {
    /// The leader's exit code when it exited normally.
    pub exit_code: Option<i32>,
    /// The signal's name (`SIGTERM`, `SIGKILL`, ...) when the leader died of one.
    pub signal: Option<String>,
    /// The timeout fired. Never set together with `aborted` (the first cause wins).
    pub timed_out: bool,
    /// The caller's abort token stopped the command. Never set together with `timed_out`.
    pub aborted: bool,
    /// The effective timeout in milliseconds.
    pub timeout_ms: f64,
    /// What the command wrote to stdout.
    pub stdout: StreamOutput,
    /// What the command wrote to stderr.
    pub stderr: StreamOutput,
    /// Members of the tree still alive after the leader exited and the drain ended, then stopped.
    pub leftover_processes: u32,
    /// Set when the command was still running at [`Config::yield_after_ms`] and now continues as
    /// this background task. The streams above are then its output so far, and exit code,
    /// signal, `timed_out`, `aborted` and `leftover_processes` are unset: nothing ended.
    pub yielded: Option<Yielded>,
    /// What the sandbox denied the command (or, for a yielded one, denied it so far).
    pub denials: Denials,
    /// The caller's session moved to another node before this command ran: set once, on the
    /// first result of the session after the move, by an executor that spreads sessions over
    /// nodes ([`pool::PoolExecutor`]); never by one that runs commands itself or a client of one
    /// remote executor. Absent on the wire when unset, so older peers decode it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relocated: Option<Relocation>,
}

/// A session placed anew on another node (or its node under a new epoch).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Relocation {
    /// The node the session's earlier commands ran on.
    pub from_node: String,
    /// The node it runs on now.
    pub to_node: String,
    /// Why it left `from_node`.
    pub reason: RelocationReason,
}

/// Why a session left its node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RelocationReason {
    /// The node was taken for dead: its heartbeat stopped, or nobody answered on its subject.
    NodeLost,
    /// The node left the pool.
    NodeLeft,
    /// The node started again under a new epoch, which keeps nothing of its sessions.
    NodeRestarted,
    /// The node no longer held the session.
    SessionDropped,
}

/// A foreground command handed over to the task table while it runs.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Yielded {
    /// The task it continues as. Its first [`Executor::read_output`] returns only what came after
    /// the streams of the run result.
    pub task: Task,
    /// How long it ran in the call, in milliseconds ([`Config::yield_after_ms`]).
    pub after_ms: f64,
}

/// Where a background task stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    /// Its leader has not ended and nobody killed it.
    Running,
    /// The leader exited on its own; [`Task::exit_code`] holds its code.
    Completed,
    /// Killed, died of a signal, or failed to spawn.
    Killed,
    /// The executor that ran it is gone (a remote executor service lost beyond reconnection, or
    /// killed): whether the command still runs or finished, and how, is unknown, and its output
    /// can no longer be read. [`Task::exit_code`] and [`Task::signal`] are `None`. The local
    /// executor never produces it; a client of a remote executor ends each task still running
    /// so when it loses the far side.
    Lost,
}

/// A background task.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Task {
    /// `bash-<n>`, counting from 1 per executor, never reused.
    pub id: String,
    /// The command line it runs.
    pub command: String,
    /// The owner token of the request that started it.
    pub owner: Option<String>,
    /// Where it stands.
    pub state: TaskState,
    /// The leader's exit code, once it exited normally.
    pub exit_code: Option<i32>,
    /// The signal's name, once the leader died of one.
    pub signal: Option<String>,
    /// Set only on [`Executor::start`]'s answer, as [`RunResult::relocated`]: the caller's
    /// session moved to another node before the task started. Absent on the wire when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relocated: Option<Relocation>,
}

/// New output of one stream since the previous read.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct StreamDelta {
    /// The new output, decoded as UTF-8 with replacement characters.
    pub text: String,
    /// Part of the delta had already left the in-memory window: `text` is the whole window.
    pub lossy: bool,
    /// A spill file holding the complete stream, only when it is complete.
    pub spill_path: Option<String>,
    /// The stream's complete spill file was deleted to keep within a spill budget
    /// ([`Config::max_session_spill_bytes`]); `spill_path` is then unset.
    pub spill_evicted: bool,
}

/// The result of [`Executor::read_output`].
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Read {
    /// New stdout since the previous read.
    pub stdout: StreamDelta,
    /// New stderr since the previous read.
    pub stderr: StreamDelta,
    /// The task as it stands now.
    pub task: Task,
    /// What the sandbox denied the task since the previous read.
    pub denials: Denials,
}

/// Operations a sandbox denied a command, known to the host (not guessed from its output):
/// the first few distinct ones, in the order they happened, and how many more there were.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Denials {
    /// The first distinct denials, at most [`Denials::KEPT`].
    pub first: Vec<Denial>,
    /// How many more distinct denials there were.
    pub more: u32,
}

impl Denials {
    /// How many denials are named; the rest are counted.
    pub const KEPT: usize = 3;

    /// None at all.
    pub fn is_empty(&self) -> bool {
        self.first.is_empty()
    }

    /// Adds `denial` unless it is already named.
    pub fn add(&mut self, denial: Denial) {
        if self.first.contains(&denial) {
            return;
        }
        if self.first.len() < Self::KEPT {
            self.first.push(denial);
        } else {
            self.more = self.more.saturating_add(1);
        }
    }
}

/// One operation a sandbox denied.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Denial {
    /// What was attempted.
    pub access: DeniedAccess,
    /// The path as the kernel resolved it, the address (`203.0.113.7:443`, `[2001:db8::1]:443`)
    /// or the socket family (`AF_INET`).
    pub target: String,
    /// Why the sandbox denied it.
    pub reason: DenialReason,
}

/// What a denied operation attempted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeniedAccess {
    /// Opening a file or listing a directory for reading.
    Read,
    /// Writing, creating, removing or renaming.
    Write,
    /// Making a socket (of the family named by the target).
    Socket,
    /// Connecting to an address.
    Connect,
    /// A change the command made to a protected path, undone after it ended.
    Undone,
}

/// Why the sandbox denied an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DenialReason {
    /// The path lies outside every writable root.
    OutsideWritableRoots,
    /// The path is one the sandbox keeps from being read.
    DeniedRead,
    /// A protected git path inside a writable root.
    ProtectedPath,
    /// The network is off.
    NetworkOff,
    /// Only the command's own loopback interface is reachable.
    LoopbackOnly,
    /// The file was made after the command's sandbox was set up, in a directory whose entries
    /// the sandbox grants one by one (beside a denied path): readable from the next command.
    CreatedAfterSetup,
    /// The host is not one the sandbox's proxy may reach (`--sandbox-allow-net`).
    HostNotAllowed,
}

/// The sandbox in force, as the tools describe it to the model.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SandboxPolicy {
    /// The mode (never off).
    pub mode: SandboxMode,
    /// Directories a command may write beneath, besides its private `TMPDIR`; empty in
    /// `read-only`.
    pub writable: Vec<String>,
    /// Paths no command may read.
    pub denied_reads: Vec<String>,
    /// What a command may reach.
    pub network: NetworkMode,
    /// The hosts a command may reach through the sandbox's proxy (names, or `*.` and a domain
    /// for any name beneath it); none without one.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
}

/// The limits in force, as the tools describe them to the model.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Limits {
    /// The timeout of a request without one, in milliseconds.
    pub default_timeout_ms: f64,
    /// The cap on any timeout, in milliseconds.
    pub max_timeout_ms: f64,
    /// The in-memory tail kept per stream, in bytes.
    pub max_output_bytes: u64,
    /// TERM-to-KILL grace in milliseconds.
    pub grace_ms: f64,
    /// The sandbox commands run in, if any.
    pub sandbox: Option<SandboxPolicy>,
}

/// Why an executor operation failed. Mirrors the WIT `executor-error` variant.
#[derive(Debug, Clone, PartialEq, thiserror::Error, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
///
/// Each case but `Aborted` carries a message the tools show the model as `Error: <message>`;
/// `UnknownTask` carries the id, worded by the tools as `unknown bash task "<id>"`.
pub enum ExecError {
    /// A request value is out of range (a timeout that is not finite and > 0, a command over
    /// [`Config::max_command_bytes`], an owner the calling session may not use).
    #[error("{0}")]
    InvalidRequest(String),
    /// The working directory cannot be used; the message names it and the OS error.
    #[error("{0}")]
    WorkdirUnusable(String),
    /// The shell could not be started.
    #[error("{0}")]
    SpawnFailed(String),
    /// No task has this id (never existed, or no longer retained); carries the id.
    #[error("{0}")]
    UnknownTask(String),
    /// [`Config::max_tasks`] tasks are running already.
    #[error("{0}")]
    TaskLimit(String),
    /// The caller aborted before the command could start.
    #[error("command aborted")]
    Aborted,
    /// Anything else the executor could not do.
    #[error("{0}")]
    Internal(String),
    /// A permission rule kept the command from running: nothing of it ran. The tools word it
    /// (a `[policy: …]` line) from these facts.
    #[error("refused by the permission rules: {}", .0.part)]
    Refused(Box<Refusal>),
}

/// What kept a command from running. Mirrors the WIT `policy-refusal` record.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Refusal {
    /// Why.
    pub kind: RefusalKind,
    /// The part of the command concerned (one of its commands, or a file it writes).
    pub part: String,
    /// The rule as written; none for the policy's default or a part that cannot be analysed.
    pub rule: Option<String>,
    /// `FILE:LINE` of the rule or the default.
    pub source: Option<String>,
    /// The rule's message, or the construct that cannot be analysed.
    pub message: Option<String>,
    /// For [`RefusalKind::CannotAsk`]: a rule that would allow exactly this part.
    pub allow_rule: Option<String>,
    /// For [`RefusalKind::TimedOut`]: how long the person was given, in milliseconds.
    pub waited_ms: Option<u32>,
}

/// Why a command was refused. Mirrors the WIT `refusal-kind` enum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusalKind {
    /// A deny rule matches, or the policy's default is deny.
    Denied,
    /// A person was asked and declined.
    Declined,
    /// A person was asked and did not answer in time.
    TimedOut,
    /// It needs a person's approval and nobody can be asked.
    CannotAsk,
    /// It cannot be analysed, and the policy denies what it cannot analyse.
    NotAnalysable,
}

/// Executor settings. Every number must be finite and > 0 ([`Config::validate`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The timeout of a request without one, in milliseconds (120000).
    pub default_timeout_ms: f64,
    /// The cap on any timeout, in milliseconds (600000).
    pub max_timeout_ms: f64,
    /// In-memory tail kept per stream, in bytes.
    pub max_output_bytes: u64,
    /// TERM-to-KILL grace, and the pipe drain bound after the leader exits.
    pub grace_ms: f64,
    /// Parent of the per-process spill directory; `None` is the system temp dir.
    pub spill_dir: Option<PathBuf>,
    /// Cap of one spill file, in bytes.
    pub max_spill_bytes: u64,
    /// Bytes all spill files of this executor may hold together. A spill file whose write would
    /// go beyond it is treated like one at its cap: it stops growing and is withdrawn (output
    /// continues in memory only). Bytes count until their file is deleted: when its background
    /// task is evicted from the finished list, or at shutdown unless kept (a foreground command's
    /// files stay until then, as their paths were shown to the model).
    pub max_spill_total_bytes: u64,
    /// Bytes the spill files of one session (owner token) may hold together, within
    /// [`Config::max_spill_total_bytes`]; commands without an owner count as one session. A write
    /// that would go beyond it first deletes that session's oldest finished spill files (whose
    /// later reads report [`StreamDelta::spill_evicted`]), never another session's; past the
    /// total, the session holding most loses its oldest. By default the total; a server shared by
    /// sessions sets it lower.
    pub max_session_spill_bytes: u64,
    /// Running background tasks allowed at once, in all.
    pub max_tasks: usize,
    /// Finished tasks retained for reads, in all; past it, the oldest of the session holding
    /// most is forgotten.
    pub max_finished_tasks: usize,
    /// Running background tasks one session (owner token) may have at once, within
    /// [`Config::max_tasks`]; tasks without an owner meet the total only. By default the total,
    /// so that one session sees the executor contract's default (64); a server shared by
    /// sessions sets it lower.
    pub max_session_tasks: usize,
    /// Finished tasks retained per session; past it, that session's oldest is forgotten, never
    /// another session's. By default the total (the executor contract's 1024): past the total,
    /// the session keeping most loses its oldest, so a quiet session keeps its results anyway.
    pub max_session_finished_tasks: usize,
    /// The longest command accepted, in bytes (default 1 MiB, at most 64 MiB). A longer one is
    /// refused by [`Executor::resolve`] (and by `run` and `start`) with
    /// [`ExecError::InvalidRequest`] naming the limit, before anything starts. Commands above
    /// the kernel's limit on one `exec` argument (128 KiB) run too: bash reads them from a
    /// descriptor instead of its arguments (see the `long_command` module).
    pub max_command_bytes: u64,
    /// Working directory when a request names none; `None` is the host's cwd.
    pub cwd: Option<PathBuf>,
    /// How command trees are contained: a cgroup per command where possible, or subreaper
    /// tracking only.
    pub containment: ContainmentPreference,
    /// Keep the spill directory and its files at shutdown (normally removed).
    pub keep_spill: bool,
    /// The spawn helper program that starts each command (see [`spawn_helper`]); `None` finds
    /// it: this executable when it called [`helper::dispatch`], else a
    /// `dsh-spawn-helper` next to this executable or one directory up.
    pub spawn_helper: Option<PathBuf>,
    /// Which of the host's variables commands do not get.
    pub env: EnvPolicy,
    /// Opt-in, off by default (an extension of the executor contract): a foreground command still
    /// running after this many milliseconds continues as a background task, and
    /// [`Executor::run`] returns its output so far with [`RunResult::yielded`] set. For clients
    /// that give up on a request after a fixed time. From then on it is a task like a started
    /// one: no timeout, stopped by `kill`, a task-done event when it ends, a running slot. When
    /// every slot is taken at that moment, the command stays in the foreground (its timeout
    /// still applies).
    pub yield_after_ms: Option<f64>,
    /// The sandbox every command runs in (off by default): see [`sandbox`]. A mode the machine
    /// cannot enforce makes [`LocalExecutor::new`] fail, naming what is missing.
    pub sandbox: SandboxConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            default_timeout_ms: 120_000.0,
            max_timeout_ms: 600_000.0,
            max_output_bytes: 64_000,
            grace_ms: 3_000.0,
            spill_dir: None,
            max_spill_bytes: 64 * 1024 * 1024,
            max_spill_total_bytes: 1024 * 1024 * 1024,
            max_session_spill_bytes: 1024 * 1024 * 1024,
            max_tasks: 64,
            max_finished_tasks: 1024,
            max_session_tasks: 64,
            max_session_finished_tasks: 1024,
            max_command_bytes: 1024 * 1024,
            cwd: None,
            containment: ContainmentPreference::Auto,
            keep_spill: false,
            spawn_helper: None,
            env: EnvPolicy::default(),
            yield_after_ms: None,
            sandbox: SandboxConfig::default(),
        }
    }
}

/// Which containment [`LocalExecutor`] should use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ContainmentPreference {
    /// A cgroup v2 per command where the host may create one, else subreaper tracking.
    #[default]
    Auto,
    /// Subreaper tracking only, even where cgroups are available.
    Subreaper,
}

/// The containment in force: how a command's process tree is found, stopped and awaited.
///
/// In both modes each command is started by its own spawn helper, freshly forked by the helper
/// factory (a child subreaper that is `$PPID` of the command and serves no other), so orphans stay in the tree,
/// signals aimed at `$PPID` miss the host, and nothing done to `$PPID` reaches a later command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Containment {
    /// Each command runs in its own cgroup under `root`, joined before `exec`; the tree is the
    /// cgroup (plus the helper's descendants), killed with `cgroup.kill` and awaited until the
    /// cgroup is unpopulated.
    Cgroup {
        /// The host's parent cgroup of the per-command cgroups.
        root: PathBuf,
    },
    /// The tree is the helper's descendants (and, once the helper is gone, bash's session).
    Subreaper {
        /// Why no cgroup is used.
        reason: String,
    },
}

impl std::fmt::Display for Containment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Containment::Cgroup { root } => write!(f, "cgroup v2 ({})", root.display()),
            Containment::Subreaper { .. } => f.write_str("subreaper (process tracking)"),
        }
    }
}

/// A setting that is out of range.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid {setting}: {reason}")]
pub struct ConfigError {
    /// The setting's name as the CLI spells it (`timeout-ms`, `max-tasks`, ...).
    pub setting: &'static str,
    /// What is wrong with its value.
    pub reason: String,
}

/// Runs commands for the tools. Implementations keep the executor contract.
///
/// Only `run`, `start` (until the command has started) and `shutdown` wait; every other
/// operation returns at once.
pub trait Executor: Send + Sync + 'static {
    /// The limits in force (the component's `current-limits`).
    fn limits(&self) -> Limits;
    /// Apply defaults and caps: the workdir (request, else configured cwd, else the host's
    /// cwd) and the effective timeout (min(requested or default, maximum)). A requested timeout
    /// that is not finite and > 0 is [`ExecError::InvalidRequest`].
    fn resolve(&self, req: Request) -> Result<Spec, ExecError>;
    /// What `resolve` takes, when it depends on nothing but these and the request (it then
    /// equals [`Resolution::resolve`]); `None` otherwise.
    fn resolution(&self) -> Option<Resolution> {
        None
    }
    /// Foreground run. Cancelling `abort` kills the command; the result then has `aborted` set
    /// (or the call fails with [`ExecError::Aborted`] when it was cancelled before starting).
    /// With [`Config::yield_after_ms`], a command still running then returns early as a task
    /// ([`RunResult::yielded`]), and `abort` no longer reaches it.
    fn run(
        &self,
        spec: Spec,
        abort: CancellationToken,
    ) -> BoxFuture<'_, Result<RunResult, ExecError>>;
    /// [`Executor::run`], counting the command's output into `meter` as it comes (for progress
    /// reports). Executors that do not count leave the meter at 0.
    fn run_metered(
        &self,
        spec: Spec,
        abort: CancellationToken,
        meter: OutputMeter,
    ) -> BoxFuture<'_, Result<RunResult, ExecError>> {
        let _ = meter;
        self.run(spec, abort)
    }
    /// Background start. Resolves once the command has started (or failed to), without waiting
    /// for it to end; no timeout applies. When the task ends, its task-done event goes to the
    /// channel the executor was made with, exactly once.
    fn start(&self, spec: Spec) -> BoxFuture<'_, Result<Task, ExecError>>;
    /// Everything the task wrote since the previous read of it, and its current state. Reads
    /// stay valid after the task ended, until it is no longer retained.
    fn read_output(&self, id: &str) -> Result<Read, ExecError>;
    /// Stop a running task (TERM to its whole tree, KILL after the grace period) without
    /// waiting: `true`. `false` when it had already ended (or was lost); an unknown id is an
    /// error.
    fn kill(&self, id: &str) -> Result<bool, ExecError>;
    /// The owner token of a task; `None` for a task without one and for an unknown id.
    fn owner_of(&self, id: &str) -> Option<String>;
    /// One task by id.
    fn get(&self, id: &str) -> Result<Task, ExecError>;
    /// Every retained task, oldest first.
    fn list(&self) -> Vec<Task>;
    /// The session of `owner` ended (its running tasks were killed): nothing more is asked in
    /// its name, and what the executor keeps for it alone may go.
    fn end_session(&self, owner: &str) {
        let _ = owner;
    }
    /// Kill every running task and wait until each has ended. No task-done event is sent after
    /// shutdown began.
    fn shutdown(&self) -> BoxFuture<'_, ()>;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A move is left out of the executor protocol when unset, so that a peer written before
    /// it reads the same messages, and reads as unset when a peer leaves it out.
    #[test]
    fn a_relocation_is_absent_on_the_wire_when_unset_and_unset_when_absent() {
        let task = Task {
            id: "bash-1".into(),
            command: "true".into(),
            owner: None,
            state: TaskState::Running,
            exit_code: None,
            signal: None,
            relocated: None,
        };
        let result = RunResult {
            exit_code: Some(0),
            signal: None,
            timed_out: false,
            aborted: false,
            timeout_ms: 1000.0,
            stdout: StreamOutput::default(),
            stderr: StreamOutput::default(),
            leftover_processes: 0,
            yielded: Some(Yielded {
                task: task.clone(),
                after_ms: 10.0,
            }),
            denials: Denials::default(),
            relocated: None,
        };
        let wire = serde_json::to_value(&result).unwrap();
        assert!(wire.get("relocated").is_none(), "{wire}");
        assert!(wire["yielded"]["task"].get("relocated").is_none(), "{wire}");
        assert_eq!(serde_json::from_value::<RunResult>(wire).unwrap(), result);

        let moved = Relocation {
            from_node: "n0".into(),
            to_node: "n1".into(),
            reason: RelocationReason::NodeLost,
        };
        let told = RunResult {
            relocated: Some(moved.clone()),
            ..result
        };
        let wire = serde_json::to_value(&told).unwrap();
        assert_eq!(
            wire["relocated"],
            serde_json::json!({"from_node": "n0", "to_node": "n1", "reason": "node_lost"})
        );
        assert_eq!(serde_json::from_value::<RunResult>(wire).unwrap(), told);
        let started = Task {
            relocated: Some(moved),
            ..task
        };
        let wire = serde_json::to_value(&started).unwrap();
        assert_eq!(serde_json::from_value::<Task>(wire).unwrap(), started);
    }
}
