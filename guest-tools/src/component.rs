//! The wasm glue: binds the plain-Rust tools to the generated WIT imports and exports.
//!
//! Nothing here decides behaviour; it only converts between the generated types and the crate's
//! own (`crate::world`), so the logic stays natively testable.

wit_bindgen::generate!({
    path: "../wit",
    world: "tools-component",
});

use dsh::bash::agent as wit_agent;
use dsh::bash::bash_executor as wit_exec;
use exports::dsh::bash::tools as wit_tools;

use crate::dispatch;
use crate::world::{
    Agent, Caller, Denial, DenialReason, Denials, DeniedAccess, ExecError, Executor, InjectError,
    Limits, Read, Relocation, RelocationReason, Request, RunResult, SandboxMode, SandboxNetwork,
    SandboxPolicy, Source, Spec, StreamDelta, StreamOutput, Task, TaskState, Yielded,
};

/// The exported component.
struct Component;

impl wit_tools::Guest for Component {
    fn list_tools() -> Vec<wit_tools::ToolDefinition> {
        dispatch::list_tools(&WitExecutor)
            .into_iter()
            .map(|tool| wit_tools::ToolDefinition {
                name: tool.name,
                title: tool.title,
                description: tool.description,
                input_schema: tool.input_schema,
                annotations: wit_tools::ToolAnnotations {
                    read_only_hint: tool.annotations.read_only_hint,
                    destructive_hint: tool.annotations.destructive_hint,
                    idempotent_hint: tool.annotations.idempotent_hint,
                    open_world_hint: tool.annotations.open_world_hint,
                },
            })
            .collect()
    }

    fn instructions() -> String {
        dispatch::instructions(&WitExecutor)
    }

    fn call_tool(
        name: String,
        arguments: String,
        caller: wit_tools::Caller,
    ) -> wit_tools::ToolResult {
        let caller = Caller {
            owner: caller.owner,
            cwd: caller.cwd,
        };
        let result = dispatch::call_tool(&WitExecutor, &name, &arguments, &caller);
        wit_tools::ToolResult {
            text: result.text,
            is_error: result.is_error,
            error_code: result.error_code,
        }
    }

    fn task_done(task: wit_tools::Task) -> Result<(), String> {
        dispatch::task_done(&WitAgent, &task_from_wit(task))
    }
}

export!(Component);

/// The imported `bash-executor`.
struct WitExecutor;

impl Executor for WitExecutor {
    fn current_limits(&self) -> Limits {
        let l = wit_exec::current_limits();
        Limits {
            default_timeout_ms: l.default_timeout_ms,
            max_timeout_ms: l.max_timeout_ms,
            max_output_bytes: l.max_output_bytes,
            grace_ms: l.grace_ms,
            sandbox: l.sandbox.map(sandbox_from_wit),
        }
    }

    fn resolve(&self, request: Request) -> Result<Spec, ExecError> {
        let request = wit_exec::Request {
            command: request.command,
            workdir: request.workdir,
            timeout_ms: request.timeout_ms,
            owner: request.owner,
        };
        wit_exec::resolve(&request)
            .map(|s| Spec {
                command: s.command,
                workdir: s.workdir,
                timeout_ms: s.timeout_ms,
                owner: s.owner,
            })
            .map_err(error_from_wit)
    }

    fn run(&self, spec: Spec) -> Result<RunResult, ExecError> {
        wit_exec::run(&spec_to_wit(spec))
            .map(|r| RunResult {
                exit_code: r.exit_code,
                signal: r.signal,
                timed_out: r.timed_out,
                aborted: r.aborted,
                timeout_ms: r.timeout_ms,
                stdout: stream_from_wit(r.stdout),
                stderr: stream_from_wit(r.stderr),
                leftover_processes: r.leftover_processes,
                yielded: r.yielded.map(|y| Yielded {
                    task: task_from_wit(y.task),
                    after_ms: y.after_ms,
                }),
                denials: denials_from_wit(r.denials),
                relocated: r.relocated.map(relocation_from_wit),
            })
            .map_err(error_from_wit)
    }

    fn start(&self, spec: Spec) -> Result<Task, ExecError> {
        wit_exec::start(&spec_to_wit(spec))
            .map(task_from_wit)
            .map_err(error_from_wit)
    }

    fn read_output(&self, id: &str) -> Result<Read, ExecError> {
        wit_exec::read_output(id)
            .map(|r| Read {
                stdout: delta_from_wit(r.stdout),
                stderr: delta_from_wit(r.stderr),
                task: task_from_wit(r.task),
                denials: denials_from_wit(r.denials),
            })
            .map_err(error_from_wit)
    }

    fn kill(&self, id: &str) -> Result<bool, ExecError> {
        wit_exec::kill(id).map_err(error_from_wit)
    }

    fn owner_of(&self, id: &str) -> Option<String> {
        wit_exec::owner_of(id)
    }

    fn get(&self, id: &str) -> Result<Task, ExecError> {
        wit_exec::get(id).map(task_from_wit).map_err(error_from_wit)
    }

    fn list_tasks(&self) -> Vec<Task> {
        wit_exec::list_tasks()
            .into_iter()
            .map(task_from_wit)
            .collect()
    }
}

/// The imported `agent`.
struct WitAgent;

impl Agent for WitAgent {
    fn inject(&self, owner: &str, text: &str, source: Source) -> Result<(), InjectError> {
        let source = wit_agent::Source {
            kind: source.kind,
            plugin: source.plugin,
        };
        wit_agent::inject(owner, text, &source).map_err(|e| match e {
            wit_agent::InjectError::UnknownOwner => InjectError::UnknownOwner,
            wit_agent::InjectError::Failed(message) => InjectError::Failed(message),
        })
    }
}

fn spec_to_wit(spec: Spec) -> wit_exec::Spec {
    wit_exec::Spec {
        command: spec.command,
        workdir: spec.workdir,
        timeout_ms: spec.timeout_ms,
        owner: spec.owner,
    }
}

fn stream_from_wit(s: wit_exec::StreamOutput) -> StreamOutput {
    StreamOutput {
        text: s.text,
        truncated: s.truncated,
        spill_path: s.spill_path,
        spill_evicted: s.spill_evicted,
    }
}

fn delta_from_wit(d: wit_exec::StreamDelta) -> StreamDelta {
    StreamDelta {
        text: d.text,
        lossy: d.lossy,
        spill_path: d.spill_path,
        spill_evicted: d.spill_evicted,
    }
}

fn task_from_wit(t: wit_exec::Task) -> Task {
    Task {
        id: t.id,
        command: t.command,
        owner: t.owner,
        state: match t.state {
            wit_exec::TaskState::Running => TaskState::Running,
            wit_exec::TaskState::Completed => TaskState::Completed,
            wit_exec::TaskState::Killed => TaskState::Killed,
            wit_exec::TaskState::Lost => TaskState::Lost,
        },
        exit_code: t.exit_code,
        signal: t.signal,
        relocated: t.relocated.map(relocation_from_wit),
    }
}

fn relocation_from_wit(r: wit_exec::Relocation) -> Relocation {
    Relocation {
        from_node: r.from_node,
        to_node: r.to_node,
        reason: match r.reason {
            wit_exec::RelocationReason::NodeLost => RelocationReason::NodeLost,
            wit_exec::RelocationReason::NodeLeft => RelocationReason::NodeLeft,
            wit_exec::RelocationReason::NodeRestarted => RelocationReason::NodeRestarted,
            wit_exec::RelocationReason::SessionDropped => RelocationReason::SessionDropped,
        },
    }
}

fn denials_from_wit(d: wit_exec::Denials) -> Denials {
    Denials {
        first: d
            .first
            .into_iter()
            .map(|denial| Denial {
                access: match denial.access {
                    wit_exec::DeniedAccess::Read => DeniedAccess::Read,
                    wit_exec::DeniedAccess::Write => DeniedAccess::Write,
                    wit_exec::DeniedAccess::Socket => DeniedAccess::Socket,
                    wit_exec::DeniedAccess::Connect => DeniedAccess::Connect,
                    wit_exec::DeniedAccess::Undone => DeniedAccess::Undone,
                },
                target: denial.target,
                reason: match denial.reason {
                    wit_exec::DenialReason::OutsideWritableRoots => {
                        DenialReason::OutsideWritableRoots
                    }
                    wit_exec::DenialReason::DeniedRead => DenialReason::DeniedRead,
                    wit_exec::DenialReason::ProtectedPath => DenialReason::ProtectedPath,
                    wit_exec::DenialReason::NetworkOff => DenialReason::NetworkOff,
                    wit_exec::DenialReason::LoopbackOnly => DenialReason::LoopbackOnly,
                    wit_exec::DenialReason::CreatedAfterSetup => DenialReason::CreatedAfterSetup,
                    wit_exec::DenialReason::HostNotAllowed => DenialReason::HostNotAllowed,
                },
            })
            .collect(),
        more: d.more,
    }
}

fn sandbox_from_wit(p: wit_exec::SandboxPolicy) -> SandboxPolicy {
    SandboxPolicy {
        mode: match p.mode {
            wit_exec::SandboxMode::ReadOnly => SandboxMode::ReadOnly,
            wit_exec::SandboxMode::WorkspaceWrite => SandboxMode::WorkspaceWrite,
        },
        writable: p.writable,
        denied_reads: p.denied_reads,
        network: match p.network {
            wit_exec::SandboxNetwork::Off => SandboxNetwork::Off,
            wit_exec::SandboxNetwork::Loopback => SandboxNetwork::Loopback,
            wit_exec::SandboxNetwork::On => SandboxNetwork::On,
        },
        allowed_hosts: p.allowed_hosts,
    }
}

fn error_from_wit(e: wit_exec::ExecutorError) -> ExecError {
    use wit_exec::ExecutorError as E;
    match e {
        E::InvalidRequest(m) => ExecError::InvalidRequest(m),
        E::WorkdirUnusable(m) => ExecError::WorkdirUnusable(m),
        E::SpawnFailed(m) => ExecError::SpawnFailed(m),
        E::UnknownTask(id) => ExecError::UnknownTask(id),
        E::TaskLimit(m) => ExecError::TaskLimit(m),
        E::Aborted => ExecError::Aborted,
        E::Internal(m) => ExecError::Internal(m),
        E::Refused(r) => ExecError::Refused(Box::new(crate::world::Refusal {
            kind: match r.kind {
                wit_exec::RefusalKind::Denied => crate::world::RefusalKind::Denied,
                wit_exec::RefusalKind::Declined => crate::world::RefusalKind::Declined,
                wit_exec::RefusalKind::TimedOut => crate::world::RefusalKind::TimedOut,
                wit_exec::RefusalKind::CannotAsk => crate::world::RefusalKind::CannotAsk,
                wit_exec::RefusalKind::NotAnalysable => crate::world::RefusalKind::NotAnalysable,
            },
            part: r.part,
            rule: r.rule,
            source: r.source,
            message: r.message,
            allow_rule: r.allow_rule,
            waited_ms: r.waited_ms,
        })),
    }
}
