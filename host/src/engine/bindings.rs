//! Host bindings of the `tools-component` world, and conversions between the WIT types and the
//! executor's own types (the executor crate does not depend on wasmtime).

use dsh_executor as ex;

wasmtime::component::bindgen!({
    path: "../wit",
    world: "tools-component",
    imports: { default: async | trappable },
    exports: { default: async },
});

/// The `approval` interface a policy middleware component imports (`policy/middleware`): linked
/// only for a component that imports it.
pub mod approval_host {
    wasmtime::component::bindgen!({
        path: "../wit",
        inline: "package dsh:host; world approval-host { import dsh:bash/approval@0.9.0; }",
        world: "dsh:host/approval-host",
        imports: { default: async | trappable },
    });

    pub use dsh::bash::approval as wit_approval;
}

pub use dsh::bash::agent as wit_agent;
pub use dsh::bash::bash_executor as wit_ex;
pub use exports::dsh::bash::tools as wit_tools;

impl From<wit_ex::Request> for ex::Request {
    fn from(r: wit_ex::Request) -> Self {
        Self {
            command: r.command,
            workdir: r.workdir,
            timeout_ms: r.timeout_ms,
            owner: r.owner,
        }
    }
}

impl From<wit_ex::Spec> for ex::Spec {
    fn from(s: wit_ex::Spec) -> Self {
        Self {
            command: s.command,
            workdir: s.workdir,
            timeout_ms: s.timeout_ms,
            owner: s.owner,
        }
    }
}

impl From<ex::Spec> for wit_ex::Spec {
    fn from(s: ex::Spec) -> Self {
        Self {
            command: s.command,
            workdir: s.workdir,
            timeout_ms: s.timeout_ms,
            owner: s.owner,
        }
    }
}

impl From<ex::StreamOutput> for wit_ex::StreamOutput {
    fn from(s: ex::StreamOutput) -> Self {
        Self {
            text: s.text,
            truncated: s.truncated,
            spill_path: s.spill_path,
            spill_evicted: s.spill_evicted,
        }
    }
}

impl From<ex::RunResult> for wit_ex::RunResult {
    fn from(r: ex::RunResult) -> Self {
        Self {
            exit_code: r.exit_code,
            signal: r.signal,
            timed_out: r.timed_out,
            aborted: r.aborted,
            timeout_ms: r.timeout_ms,
            stdout: r.stdout.into(),
            stderr: r.stderr.into(),
            leftover_processes: r.leftover_processes,
            yielded: r.yielded.map(Into::into),
            denials: r.denials.into(),
            relocated: r.relocated.map(Into::into),
        }
    }
}

impl From<ex::Relocation> for wit_ex::Relocation {
    fn from(r: ex::Relocation) -> Self {
        Self {
            from_node: r.from_node,
            to_node: r.to_node,
            reason: r.reason.into(),
        }
    }
}

impl From<ex::RelocationReason> for wit_ex::RelocationReason {
    fn from(r: ex::RelocationReason) -> Self {
        match r {
            ex::RelocationReason::NodeLost => Self::NodeLost,
            ex::RelocationReason::NodeLeft => Self::NodeLeft,
            ex::RelocationReason::NodeRestarted => Self::NodeRestarted,
            ex::RelocationReason::SessionDropped => Self::SessionDropped,
        }
    }
}

impl From<ex::Yielded> for wit_ex::Yielded {
    fn from(y: ex::Yielded) -> Self {
        Self {
            task: y.task.into(),
            after_ms: y.after_ms,
        }
    }
}

impl From<ex::TaskState> for wit_ex::TaskState {
    fn from(s: ex::TaskState) -> Self {
        match s {
            ex::TaskState::Running => Self::Running,
            ex::TaskState::Completed => Self::Completed,
            ex::TaskState::Killed => Self::Killed,
            ex::TaskState::Lost => Self::Lost,
        }
    }
}

impl From<ex::Task> for wit_ex::Task {
    fn from(t: ex::Task) -> Self {
        Self {
            id: t.id,
            command: t.command,
            owner: t.owner,
            state: t.state.into(),
            exit_code: t.exit_code,
            signal: t.signal,
            relocated: t.relocated.map(Into::into),
        }
    }
}

impl From<ex::StreamDelta> for wit_ex::StreamDelta {
    fn from(d: ex::StreamDelta) -> Self {
        Self {
            text: d.text,
            lossy: d.lossy,
            spill_path: d.spill_path,
            spill_evicted: d.spill_evicted,
        }
    }
}

impl From<ex::Read> for wit_ex::Read {
    fn from(r: ex::Read) -> Self {
        Self {
            stdout: r.stdout.into(),
            stderr: r.stderr.into(),
            task: r.task.into(),
            denials: r.denials.into(),
        }
    }
}

impl From<ex::Denials> for wit_ex::Denials {
    fn from(d: ex::Denials) -> Self {
        Self {
            first: d.first.into_iter().map(Into::into).collect(),
            more: d.more,
        }
    }
}

impl From<ex::Denial> for wit_ex::Denial {
    fn from(d: ex::Denial) -> Self {
        Self {
            access: d.access.into(),
            target: d.target,
            reason: d.reason.into(),
        }
    }
}

impl From<ex::DeniedAccess> for wit_ex::DeniedAccess {
    fn from(a: ex::DeniedAccess) -> Self {
        match a {
            ex::DeniedAccess::Read => Self::Read,
            ex::DeniedAccess::Write => Self::Write,
            ex::DeniedAccess::Socket => Self::Socket,
            ex::DeniedAccess::Connect => Self::Connect,
            ex::DeniedAccess::Undone => Self::Undone,
        }
    }
}

impl From<ex::DenialReason> for wit_ex::DenialReason {
    fn from(r: ex::DenialReason) -> Self {
        match r {
            ex::DenialReason::OutsideWritableRoots => Self::OutsideWritableRoots,
            ex::DenialReason::DeniedRead => Self::DeniedRead,
            ex::DenialReason::ProtectedPath => Self::ProtectedPath,
            ex::DenialReason::NetworkOff => Self::NetworkOff,
            ex::DenialReason::LoopbackOnly => Self::LoopbackOnly,
            ex::DenialReason::CreatedAfterSetup => Self::CreatedAfterSetup,
            ex::DenialReason::HostNotAllowed => Self::HostNotAllowed,
        }
    }
}

impl From<ex::NetworkMode> for wit_ex::SandboxNetwork {
    fn from(n: ex::NetworkMode) -> Self {
        match n {
            ex::NetworkMode::Off => Self::Off,
            ex::NetworkMode::Loopback => Self::Loopback,
            ex::NetworkMode::On => Self::On,
        }
    }
}

/// The WIT policy of a sandbox; none for one whose mode is off, which confines nothing (the
/// executor never describes such a sandbox, and the WIT has no mode for it).
fn sandbox_to_wit(p: ex::SandboxPolicy) -> Option<wit_ex::SandboxPolicy> {
    let mode = match p.mode {
        ex::SandboxMode::Off => return None,
        ex::SandboxMode::ReadOnly => wit_ex::SandboxMode::ReadOnly,
        ex::SandboxMode::WorkspaceWrite => wit_ex::SandboxMode::WorkspaceWrite,
    };
    Some(wit_ex::SandboxPolicy {
        mode,
        writable: p.writable,
        denied_reads: p.denied_reads,
        network: p.network.into(),
        allowed_hosts: p.allowed_hosts,
    })
}

impl From<ex::Limits> for wit_ex::Limits {
    fn from(l: ex::Limits) -> Self {
        Self {
            default_timeout_ms: l.default_timeout_ms,
            max_timeout_ms: l.max_timeout_ms,
            max_output_bytes: l.max_output_bytes,
            grace_ms: l.grace_ms,
            sandbox: l.sandbox.and_then(sandbox_to_wit),
        }
    }
}

impl From<ex::ExecError> for wit_ex::ExecutorError {
    fn from(e: ex::ExecError) -> Self {
        match e {
            ex::ExecError::InvalidRequest(m) => Self::InvalidRequest(m),
            ex::ExecError::WorkdirUnusable(m) => Self::WorkdirUnusable(m),
            ex::ExecError::SpawnFailed(m) => Self::SpawnFailed(m),
            ex::ExecError::UnknownTask(m) => Self::UnknownTask(m),
            ex::ExecError::TaskLimit(m) => Self::TaskLimit(m),
            ex::ExecError::Aborted => Self::Aborted,
            ex::ExecError::Internal(m) => Self::Internal(m),
            ex::ExecError::Refused(r) => Self::Refused(wit_ex::PolicyRefusal {
                // Moved out of its box field by field.
                kind: match r.kind {
                    ex::RefusalKind::Denied => wit_ex::RefusalKind::Denied,
                    ex::RefusalKind::Declined => wit_ex::RefusalKind::Declined,
                    ex::RefusalKind::TimedOut => wit_ex::RefusalKind::TimedOut,
                    ex::RefusalKind::CannotAsk => wit_ex::RefusalKind::CannotAsk,
                    ex::RefusalKind::NotAnalysable => wit_ex::RefusalKind::NotAnalysable,
                },
                part: r.part,
                rule: r.rule,
                source: r.source,
                message: r.message,
                allow_rule: r.allow_rule,
                waited_ms: r.waited_ms,
            }),
        }
    }
}
