//! The WIT world as plain Rust: the imported `bash-executor` and `agent` interfaces as traits, and
//! the types of all three interfaces.
//!
//! The tool logic is written against these so it compiles and is tested natively; the wasm glue
//! (`component.rs`) implements the traits with the generated imports and converts the types.

/// `bash-executor.request`: what a call asks for, before defaults and caps.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub command: String,
    pub workdir: Option<String>,
    pub timeout_ms: Option<f64>,
    pub owner: Option<String>,
}

/// `bash-executor.spec`: exactly what will run.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    pub command: String,
    pub workdir: String,
    pub timeout_ms: f64,
    pub owner: Option<String>,
}

/// `bash-executor.stream-output`: one stream of a finished foreground command.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StreamOutput {
    pub text: String,
    pub truncated: bool,
    pub spill_path: Option<String>,
    pub spill_evicted: bool,
}

/// `bash-executor.run-result`: the facts of a finished foreground command, or of one that
/// continues as a background task (`yielded`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunResult {
    pub exit_code: Option<i32>,
    pub signal: Option<String>,
    pub timed_out: bool,
    pub aborted: bool,
    pub timeout_ms: f64,
    pub stdout: StreamOutput,
    pub stderr: StreamOutput,
    pub leftover_processes: u32,
    pub yielded: Option<Yielded>,
    pub denials: Denials,
    /// The session moved to another node before this command ran.
    pub relocated: Option<Relocation>,
}

/// `bash-executor.relocation-reason`: why a session left its node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelocationReason {
    NodeLost,
    NodeLeft,
    NodeRestarted,
    SessionDropped,
}

/// `bash-executor.relocation`: a session placed anew; node ids as the pool's operators name them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relocation {
    pub from_node: String,
    pub to_node: String,
    pub reason: RelocationReason,
}

/// `bash-executor.yielded`: the background task a foreground command continues as, after the
/// executor's foreground limit.
#[derive(Debug, Clone, PartialEq)]
pub struct Yielded {
    pub task: Task,
    pub after_ms: f64,
}

/// `bash-executor.task-state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskState {
    Running,
    Completed,
    Killed,
    Lost,
}

/// `bash-executor.task`: a background task.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    pub id: String,
    pub command: String,
    pub owner: Option<String>,
    pub state: TaskState,
    pub exit_code: Option<i32>,
    pub signal: Option<String>,
    /// Only in `start`'s answer: the session moved to another node before the task started.
    pub relocated: Option<Relocation>,
}

/// `bash-executor.stream-delta`: new output of one stream since the previous read.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StreamDelta {
    pub text: String,
    pub lossy: bool,
    pub spill_path: Option<String>,
    pub spill_evicted: bool,
}

/// `bash-executor.read`: both deltas and the task's current state.
#[derive(Debug, Clone, PartialEq)]
pub struct Read {
    pub stdout: StreamDelta,
    pub stderr: StreamDelta,
    pub task: Task,
    /// Denied since the previous read.
    pub denials: Denials,
}

/// `bash-executor.denied-access`: what a denied operation attempted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeniedAccess {
    Read,
    Write,
    Socket,
    Connect,
    Undone,
}

/// `bash-executor.denial-reason`: why the sandbox denied it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenialReason {
    OutsideWritableRoots,
    DeniedRead,
    ProtectedPath,
    NetworkOff,
    LoopbackOnly,
    CreatedAfterSetup,
    HostNotAllowed,
}

/// `bash-executor.denial`: one denied operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    pub access: DeniedAccess,
    /// A path, an address or a socket family, as the host reports it.
    pub target: String,
    pub reason: DenialReason,
}

/// `bash-executor.denials`: the first few distinct denials of a command, in order, and how many
/// more there were. The default is none, what an executor without a sandbox reports.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Denials {
    pub first: Vec<Denial>,
    pub more: u32,
}

/// `bash-executor.sandbox-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxMode {
    ReadOnly,
    WorkspaceWrite,
}

/// `bash-executor.sandbox-network`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxNetwork {
    Off,
    Loopback,
    On,
}

/// `bash-executor.sandbox-policy`: the sandbox in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxPolicy {
    pub mode: SandboxMode,
    pub writable: Vec<String>,
    pub denied_reads: Vec<String>,
    pub network: SandboxNetwork,
    /// The hosts the sandbox's proxy lets a command reach; empty without one.
    pub allowed_hosts: Vec<String>,
}

/// `bash-executor.limits`, as `current-limits` returns it.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    pub default_timeout_ms: f64,
    pub max_timeout_ms: f64,
    pub max_output_bytes: u64,
    pub grace_ms: f64,
    /// None when commands run unconfined.
    pub sandbox: Option<SandboxPolicy>,
}

/// `bash-executor.executor-error`.
#[derive(Debug, Clone, PartialEq)]
pub enum ExecError {
    InvalidRequest(String),
    WorkdirUnusable(String),
    SpawnFailed(String),
    /// Carries the unknown task id.
    UnknownTask(String),
    TaskLimit(String),
    Aborted,
    Internal(String),
    /// A permission rule kept the command from running.
    Refused(Box<Refusal>),
}

/// `bash-executor.policy-refusal`: what kept a command from running.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub kind: RefusalKind,
    pub part: String,
    pub rule: Option<String>,
    pub source: Option<String>,
    pub message: Option<String>,
    pub allow_rule: Option<String>,
    pub waited_ms: Option<u32>,
}

/// `bash-executor.refusal-kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    Denied,
    Declined,
    TimedOut,
    CannotAsk,
    NotAnalysable,
}

/// The `bash-executor` import.
pub trait Executor {
    fn current_limits(&self) -> Limits;
    fn resolve(&self, request: Request) -> Result<Spec, ExecError>;
    fn run(&self, spec: Spec) -> Result<RunResult, ExecError>;
    fn start(&self, spec: Spec) -> Result<Task, ExecError>;
    fn read_output(&self, id: &str) -> Result<Read, ExecError>;
    fn kill(&self, id: &str) -> Result<bool, ExecError>;
    fn owner_of(&self, id: &str) -> Option<String>;
    fn get(&self, id: &str) -> Result<Task, ExecError>;
    fn list_tasks(&self) -> Vec<Task>;
}

/// `agent.source`: who injects.
#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    pub kind: String,
    pub plugin: Option<String>,
}

/// `agent.inject-error`.
#[derive(Debug, Clone, PartialEq)]
pub enum InjectError {
    UnknownOwner,
    Failed(String),
}

/// The `agent` import.
pub trait Agent {
    fn inject(&self, owner: &str, text: &str, source: Source) -> Result<(), InjectError>;
}

/// `tools.tool-annotations`: hints for clients about what a tool may do to its environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolAnnotations {
    pub read_only_hint: bool,
    pub destructive_hint: bool,
    pub idempotent_hint: bool,
    pub open_world_hint: bool,
}

/// `tools.tool-definition`.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDefinition {
    pub name: String,
    pub title: String,
    pub description: String,
    pub input_schema: String,
    pub annotations: ToolAnnotations,
}

/// `tools.caller`: who is calling.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Caller {
    pub owner: Option<String>,
    pub cwd: Option<String>,
}

/// `tools.tool-result`: what the model gets back.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    pub text: String,
    pub is_error: bool,
    pub error_code: Option<String>,
}
