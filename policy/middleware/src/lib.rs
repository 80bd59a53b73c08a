//! The permission rules of `dsh-policy` as an executor middleware component: it imports
//! `dsh:bash/bash-executor@0.9.0` (the real executor) and `dsh:bash/approval@0.9.0` (the rules,
//! the session's grants and the person to ask), and exports `bash-executor`, so that a
//! composition puts it in front of the tools component's executor import without rebuilding the
//! tools (world `dsh:bash/policy-middleware`):
//!
//! ```sh
//! policy/middleware/compose.sh target/guest-wasm/guest_tools.wasm target/policy-tools.wasm
//! ```
//!
//! Every `run` and `start` is decided by the same engine and the same refusal wording as
//! `dsh-host --policy` (`dsh_policy::decide`): allowed ones reach the imported executor
//! unchanged; denied ones fail with `refused`; one that needs approval is put to the host's
//! `approval.ask` and runs only on `once` or `session`. The other operations pass through. The
//! component keeps nothing between calls but the parsed rules: the grants are the host's.
//!
//! `compose.sh` builds this crate for `wasm32-unknown-unknown` (so the component imports no
//! WASI), wraps the core module into a component with `src/bin/componentize.rs` and runs
//! `wac compose compose.wac`. Natively the crate is empty.

#[cfg(target_arch = "wasm32")]
mod component {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "policy-middleware",
    });

    use std::cell::RefCell;
    use std::rc::Rc;

    use dsh::bash::approval;
    use dsh::bash::bash_executor as inner;
    use dsh_policy::decide::{self, Answer, RefusedKind};
    use dsh_policy::{Call, Grants, Policy, Verdict};
    use exports::dsh::bash::bash_executor as outer;
    use exports::dsh::bash::policy_check;

    struct Middleware;

    type Sources = Vec<(String, String)>;

    thread_local! {
        /// The rules parsed from the files the host gave last: a host gives the same files to
        /// every call, so an instance that serves several parses them once.
        static PARSED: RefCell<Option<(Sources, Rc<Policy>)>> = const { RefCell::new(None) };
    }

    fn sources(files: Vec<approval::PolicyFile>) -> Sources {
        files.into_iter().map(|f| (f.name, f.text)).collect()
    }

    fn policy() -> Result<Rc<Policy>, outer::ExecutorError> {
        let files = sources(approval::policy_files());
        if let Some(policy) = PARSED.with_borrow(|p| {
            p.as_ref()
                .filter(|(s, _)| *s == files)
                .map(|(_, policy)| policy.clone())
        }) {
            return Ok(policy);
        }
        // Files that do not load refuse every command: nothing runs on rules half read.
        let policy = Rc::new(Policy::from_sources(&files).map_err(|e| {
            outer::ExecutorError::Internal(format!("the policy files do not load: {e}"))
        })?);
        PARSED.set(Some((files, policy.clone())));
        Ok(policy)
    }

    fn grants(owner: Option<&str>) -> Grants {
        let mut grants = Grants::default();
        for rule in approval::grants(owner) {
            // The host records only session rules this engine wrote; one that does not parse
            // grants nothing.
            let _ = grants.add(&rule);
        }
        grants
    }

    /// Refuse `spec` unless the policy allows it or the person behind its session approves it.
    fn check(spec: &outer::Spec) -> Result<(), outer::ExecutorError> {
        let policy = policy()?;
        let home = approval::home();
        let call = Call {
            command: &spec.command,
            cwd: &spec.workdir,
            home: home.as_deref(),
        };
        let finding = match policy.evaluate(&call, &grants(spec.owner.as_deref())) {
            Verdict::Allow => return Ok(()),
            Verdict::Deny(finding) => return Err(refused(decide::refusal(finding, None), None)),
            Verdict::Ask(finding) => finding,
        };
        let q = decide::question(&finding, &spec.command, &spec.workdir);
        let answer = approval::ask(&approval::Question {
            owner: spec.owner.clone(),
            command: q.command,
            cwd: q.cwd,
            parts: q.parts,
            rule: q.rule,
            source: q.source,
            construct: q.construct,
            session_rule: q.session_rule,
        });
        let (answer, waited_ms) = match answer {
            approval::Answer::Once | approval::Answer::Session => return Ok(()),
            approval::Answer::Declined => (Answer::Declined, None),
            approval::Answer::TimedOut(ms) => (Answer::TimedOut, Some(ms)),
            approval::Answer::CannotAsk => (Answer::CannotAsk, None),
        };
        Err(refused(decide::refusal(finding, Some(answer)), waited_ms))
    }

    fn refused(r: decide::Refused, waited_ms: Option<u32>) -> outer::ExecutorError {
        outer::ExecutorError::Refused(outer::PolicyRefusal {
            kind: match r.kind {
                RefusedKind::Denied => outer::RefusalKind::Denied,
                RefusedKind::Declined => outer::RefusalKind::Declined,
                RefusedKind::TimedOut => outer::RefusalKind::TimedOut,
                RefusedKind::CannotAsk => outer::RefusalKind::CannotAsk,
                RefusedKind::NotAnalysable => outer::RefusalKind::NotAnalysable,
            },
            part: r.part,
            rule: r.rule,
            source: r.source,
            message: r.message,
            allow_rule: r.allow_rule,
            waited_ms,
        })
    }

    impl policy_check::Guest for Middleware {
        fn check(files: Vec<approval::PolicyFile>) -> Result<u32, String> {
            Policy::from_sources(&sources(files))
                .map(|p| u32::try_from(p.rule_count()).unwrap_or(u32::MAX))
                .map_err(|e| e.to_string())
        }
    }

    impl outer::Guest for Middleware {
        fn current_limits() -> outer::Limits {
            let l = inner::current_limits();
            outer::Limits {
                default_timeout_ms: l.default_timeout_ms,
                max_timeout_ms: l.max_timeout_ms,
                max_output_bytes: l.max_output_bytes,
                grace_ms: l.grace_ms,
                sandbox: l.sandbox.map(sandbox_policy),
            }
        }

        fn resolve(req: outer::Request) -> Result<outer::Spec, outer::ExecutorError> {
            inner::resolve(&inner::Request {
                command: req.command,
                workdir: req.workdir,
                timeout_ms: req.timeout_ms,
                owner: req.owner,
            })
            .map(spec_out)
            .map_err(error)
        }

        fn run(spec: outer::Spec) -> Result<outer::RunResult, outer::ExecutorError> {
            check(&spec)?;
            let r = inner::run(&spec_in(spec)).map_err(error)?;
            Ok(outer::RunResult {
                exit_code: r.exit_code,
                signal: r.signal,
                timed_out: r.timed_out,
                aborted: r.aborted,
                timeout_ms: r.timeout_ms,
                stdout: stream_output(r.stdout),
                stderr: stream_output(r.stderr),
                leftover_processes: r.leftover_processes,
                yielded: r.yielded.map(|y| outer::Yielded {
                    task: task(y.task),
                    after_ms: y.after_ms,
                }),
                denials: denials(r.denials),
                relocated: r.relocated.map(relocation),
            })
        }

        fn start(spec: outer::Spec) -> Result<outer::Task, outer::ExecutorError> {
            check(&spec)?;
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
            spill_evicted: s.spill_evicted,
        }
    }

    fn stream_delta(s: inner::StreamDelta) -> outer::StreamDelta {
        outer::StreamDelta {
            text: s.text,
            lossy: s.lossy,
            spill_path: s.spill_path,
            spill_evicted: s.spill_evicted,
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
                inner::TaskState::Lost => outer::TaskState::Lost,
            },
            exit_code: t.exit_code,
            signal: t.signal,
            relocated: t.relocated.map(relocation),
        }
    }

    fn relocation(r: inner::Relocation) -> outer::Relocation {
        outer::Relocation {
            from_node: r.from_node,
            to_node: r.to_node,
            reason: match r.reason {
                inner::RelocationReason::NodeLost => outer::RelocationReason::NodeLost,
                inner::RelocationReason::NodeLeft => outer::RelocationReason::NodeLeft,
                inner::RelocationReason::NodeRestarted => outer::RelocationReason::NodeRestarted,
                inner::RelocationReason::SessionDropped => outer::RelocationReason::SessionDropped,
            },
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
                        inner::DenialReason::CreatedAfterSetup => {
                            outer::DenialReason::CreatedAfterSetup
                        }
                        inner::DenialReason::HostNotAllowed => outer::DenialReason::HostNotAllowed,
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
            allowed_hosts: p.allowed_hosts,
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

    export!(Middleware);
}
