//! An executor middleware component: it imports `dsh:bash/bash-executor@0.4.0` (the real
//! executor) and exports the same interface, so that a composition can put it in front of the
//! tools component's executor import without rebuilding the tools:
//!
//! ```sh
//! examples/policy-executor/compose.sh target/guest-wasm/guest_tools.wasm target/composed.wasm
//! dsh-host --component target/composed.wasm call bash '{"command":"echo rm -rf /","description":"Try it"}'
//! ```
//!
//! `compose.sh` builds this crate for `wasm32-unknown-unknown` (so the component imports no WASI,
//! only `bash-executor`), wraps the core module into a component with `src/bin/componentize.rs`
//! and runs `wac compose compose.wac` (see there why it is `wac compose` and not `wac plug`).
//!
//! The policy is compile-time configuration, in [`policy`]: commands matching one of
//! [`policy::REFUSED_PATTERNS`] are refused with `invalid-request`
//! (`command refused by policy: matches "rm -rf /"`), and every foreground timeout is capped at
//! [`policy::MAX_TIMEOUT_MS`] (the limits the tools describe to the model say so). Everything
//! else passes through unchanged, the real executor's sandbox and its denials included. The component is built only for `wasm32`; natively the crate
//! is the policy and its tests.

pub mod policy {
    //! The policy, as constants: edit them and rebuild this component (not the tools).

    /// Commands containing one of these (after collapsing runs of whitespace) are refused.
    pub const REFUSED_PATTERNS: &[&str] = &[
        "rm -rf /",
        "rm -fr /",
        "mkfs",
        "dd if=/dev/zero of=/dev/",
        ":(){ :|:& };:",
    ];

    /// The largest foreground timeout, in milliseconds, whatever the call or executor asks for.
    pub const MAX_TIMEOUT_MS: f64 = 1000.0;

    /// The refusal message for `command`, if a pattern matches it.
    pub fn refusal(command: &str) -> Option<String> {
        let normalized = command.split_whitespace().collect::<Vec<_>>().join(" ");
        REFUSED_PATTERNS
            .iter()
            .find(|pattern| normalized.contains(*pattern))
            .map(|pattern| format!("command refused by policy: matches {pattern:?}"))
    }

    /// A timeout with the cap applied.
    pub fn cap(timeout_ms: f64) -> f64 {
        timeout_ms.min(MAX_TIMEOUT_MS)
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn refuses_matching_commands_whatever_the_spacing() {
            assert_eq!(
                refusal("echo hi &&  rm   -rf  /tmp/x").as_deref(),
                Some(r#"command refused by policy: matches "rm -rf /""#)
            );
            assert!(refusal("mkfs.ext4 /dev/sda1").is_some());
            assert_eq!(refusal("rm -rf ./build"), None);
            assert_eq!(refusal("printf 'hello\\n'"), None);
        }

        #[test]
        fn caps_timeouts() {
            assert_eq!(cap(100_000.0), MAX_TIMEOUT_MS);
            assert_eq!(cap(50.0), 50.0);
        }
    }
}

#[cfg(target_arch = "wasm32")]
mod component {
    wit_bindgen::generate!({
        path: ["../../wit", "wit"],
        world: "dsh:policy-executor/policy-executor",
        // The bash-executor interface lives in another package (../../wit): generate it here.
        generate_all,
    });

    use crate::policy;
    use dsh::bash::bash_executor as inner;
    use exports::dsh::bash::bash_executor as outer;

    struct Policy;

    impl outer::Guest for Policy {
        fn current_limits() -> outer::Limits {
            let l = inner::current_limits();
            outer::Limits {
                default_timeout_ms: policy::cap(l.default_timeout_ms),
                max_timeout_ms: policy::cap(l.max_timeout_ms),
                max_output_bytes: l.max_output_bytes,
                grace_ms: l.grace_ms,
                // The real executor's sandbox confines every command this policy lets through.
                sandbox: l.sandbox.map(sandbox_policy),
            }
        }

        fn resolve(req: outer::Request) -> Result<outer::Spec, outer::ExecutorError> {
            refuse(&req.command)?;
            let spec = inner::resolve(&inner::Request {
                command: req.command,
                workdir: req.workdir,
                timeout_ms: req.timeout_ms,
                owner: req.owner,
            })
            .map_err(error)?;
            Ok(outer::Spec {
                timeout_ms: policy::cap(spec.timeout_ms),
                ..spec_out(spec)
            })
        }

        fn run(spec: outer::Spec) -> Result<outer::RunResult, outer::ExecutorError> {
            refuse(&spec.command)?;
            let spec = inner::Spec {
                timeout_ms: policy::cap(spec.timeout_ms),
                ..spec_in(spec)
            };
            let r = inner::run(&spec).map_err(error)?;
            Ok(outer::RunResult {
                exit_code: r.exit_code,
                signal: r.signal,
                timed_out: r.timed_out,
                aborted: r.aborted,
                timeout_ms: r.timeout_ms,
                stdout: stream_output(r.stdout),
                stderr: stream_output(r.stderr),
                leftover_processes: r.leftover_processes,
                // A command past the executor's foreground limit is a task like a started one,
                // which this policy lets through too.
                yielded: r.yielded.map(|y| outer::Yielded {
                    task: task(y.task),
                    after_ms: y.after_ms,
                }),
                denials: denials(r.denials),
            })
        }

        fn start(spec: outer::Spec) -> Result<outer::Task, outer::ExecutorError> {
            refuse(&spec.command)?;
            inner::start(&spec_in(spec)).map(task).map_err(error)
        }

        fn read_output(id: String) -> Result<outer::Read, outer::ExecutorError> {
            let r = inner::read_output(&id).map_err(error)?;
            Ok(outer::Read {
                stdout: stream_delta(r.stdout),
                stderr: stream_delta(r.stderr),
                task: task(r.task),
                denials: denials(r.denials),
            })
        }

        fn kill(id: String) -> Result<bool, outer::ExecutorError> {
            inner::kill(&id).map_err(error)
        }

        fn owner_of(id: String) -> Option<String> {
            inner::owner_of(&id)
        }

        fn get(id: String) -> Result<outer::Task, outer::ExecutorError> {
            inner::get(&id).map(task).map_err(error)
        }

        fn list_tasks() -> Vec<outer::Task> {
            inner::list_tasks().into_iter().map(task).collect()
        }
    }

    fn refuse(command: &str) -> Result<(), outer::ExecutorError> {
        match policy::refusal(command) {
            Some(message) => Err(outer::ExecutorError::InvalidRequest(message)),
            None => Ok(()),
        }
    }

    // The imported and exported interfaces have distinct generated types: convert field by field.

    fn spec_in(s: outer::Spec) -> inner::Spec {
        inner::Spec {
            command: s.command,
            workdir: s.workdir,
            timeout_ms: s.timeout_ms,
            owner: s.owner,
        }
    }

    fn spec_out(s: inner::Spec) -> outer::Spec {
        outer::Spec {
            command: s.command,
            workdir: s.workdir,
            timeout_ms: s.timeout_ms,
            owner: s.owner,
        }
    }

    fn stream_output(s: inner::StreamOutput) -> outer::StreamOutput {
        outer::StreamOutput {
            text: s.text,
            truncated: s.truncated,
            spill_path: s.spill_path,
        }
    }

    fn stream_delta(s: inner::StreamDelta) -> outer::StreamDelta {
        outer::StreamDelta {
            text: s.text,
            lossy: s.lossy,
            spill_path: s.spill_path,
        }
    }

    fn task(t: inner::Task) -> outer::Task {
        outer::Task {
            id: t.id,
            command: t.command,
            owner: t.owner,
            state: match t.state {
                inner::TaskState::Running => outer::TaskState::Running,
                inner::TaskState::Completed => outer::TaskState::Completed,
                inner::TaskState::Killed => outer::TaskState::Killed,
            },
            exit_code: t.exit_code,
            signal: t.signal,
        }
    }

    fn denials(d: inner::Denials) -> outer::Denials {
        outer::Denials {
            first: d
                .first
                .into_iter()
                .map(|denial| outer::Denial {
                    access: match denial.access {
                        inner::DeniedAccess::Read => outer::DeniedAccess::Read,
                        inner::DeniedAccess::Write => outer::DeniedAccess::Write,
                        inner::DeniedAccess::Socket => outer::DeniedAccess::Socket,
                        inner::DeniedAccess::Connect => outer::DeniedAccess::Connect,
                        inner::DeniedAccess::Undone => outer::DeniedAccess::Undone,
                    },
                    target: denial.target,
                    reason: match denial.reason {
                        inner::DenialReason::OutsideWritableRoots => {
                            outer::DenialReason::OutsideWritableRoots
                        }
                        inner::DenialReason::DeniedRead => outer::DenialReason::DeniedRead,
                        inner::DenialReason::ProtectedPath => outer::DenialReason::ProtectedPath,
                        inner::DenialReason::NetworkOff => outer::DenialReason::NetworkOff,
                        inner::DenialReason::LoopbackOnly => outer::DenialReason::LoopbackOnly,
                    },
                })
                .collect(),
            more: d.more,
        }
    }

    fn sandbox_policy(p: inner::SandboxPolicy) -> outer::SandboxPolicy {
        outer::SandboxPolicy {
            mode: match p.mode {
                inner::SandboxMode::ReadOnly => outer::SandboxMode::ReadOnly,
                inner::SandboxMode::WorkspaceWrite => outer::SandboxMode::WorkspaceWrite,
            },
            writable: p.writable,
            denied_reads: p.denied_reads,
            network: match p.network {
                inner::SandboxNetwork::Off => outer::SandboxNetwork::Off,
                inner::SandboxNetwork::Loopback => outer::SandboxNetwork::Loopback,
                inner::SandboxNetwork::On => outer::SandboxNetwork::On,
            },
        }
    }

    fn error(e: inner::ExecutorError) -> outer::ExecutorError {
        use inner::ExecutorError as I;
        use outer::ExecutorError as O;
        match e {
            I::InvalidRequest(m) => O::InvalidRequest(m),
            I::WorkdirUnusable(m) => O::WorkdirUnusable(m),
            I::SpawnFailed(m) => O::SpawnFailed(m),
            I::UnknownTask(m) => O::UnknownTask(m),
            I::TaskLimit(m) => O::TaskLimit(m),
            I::Aborted => O::Aborted,
            I::Internal(m) => O::Internal(m),
            I::Refused(r) => O::Refused(outer::PolicyRefusal {
                kind: match r.kind {
                    inner::RefusalKind::Denied => outer::RefusalKind::Denied,
                    inner::RefusalKind::Declined => outer::RefusalKind::Declined,
                    inner::RefusalKind::TimedOut => outer::RefusalKind::TimedOut,
                    inner::RefusalKind::CannotAsk => outer::RefusalKind::CannotAsk,
                    inner::RefusalKind::NotAnalysable => outer::RefusalKind::NotAnalysable,
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

    export!(Policy);
}
