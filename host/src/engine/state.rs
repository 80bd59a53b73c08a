//! Per-call store state and the host side of the guest's imports.
//!
//! Each tool call gets a fresh store holding only what that call may reach: the shared executor
//! and the session router behind its session's guard (`session_guard`), its own abort token, and,
//! for a component that imports WASI (the tools component does not), a deny-all WASI context.

use std::sync::Arc;

use dsh_executor::{Executor, OutputMeter};
use tokio_util::sync::CancellationToken;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::bindings::approval_host::wit_approval;
use super::bindings::{wit_agent, wit_ex};
use super::limits::GuestLimiter;
use super::session_guard::SessionGuard;
use crate::inject::{Injection, SessionRouter, Source};
use crate::policy::{Answer, Rules};

pub struct CallState {
    /// The executor and the session router, as far as the calling session may reach them; the
    /// imports below have no other way to either.
    pub(crate) session: SessionGuard,
    pub(crate) abort: CancellationToken,
    /// Counts a foreground command's output for the caller's progress reports.
    pub(crate) meter: OutputMeter,
    pub(crate) limiter: GuestLimiter,
    /// The permission rules a policy middleware component is given (`approval`).
    rules: Option<Rules>,
    /// Made on the first WASI call only: a component without WASI imports never makes one.
    wasi: Option<WasiCtx>,
    table: ResourceTable,
}

impl CallState {
    pub fn new(
        executor: Arc<dyn Executor>,
        sessions: SessionRouter,
        abort: CancellationToken,
        limiter: GuestLimiter,
        rules: Option<Rules>,
    ) -> Self {
        Self {
            session: SessionGuard::new(executor, sessions),
            abort,
            meter: OutputMeter::new(),
            limiter,
            rules,
            wasi: None,
            table: ResourceTable::new(),
        }
    }
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            // Deny-all: no preopens, no env, no args, no network; stdio goes nowhere.
            ctx: self.wasi.get_or_insert_with(|| WasiCtx::builder().build()),
            table: &mut self.table,
        }
    }
}

type ExResult<T> = wasmtime::Result<Result<T, wit_ex::ExecutorError>>;

impl wit_ex::Host for CallState {
    async fn current_limits(&mut self) -> wasmtime::Result<wit_ex::Limits> {
        Ok(self.session.limits().into())
    }

    async fn resolve(&mut self, req: wit_ex::Request) -> ExResult<wit_ex::Spec> {
        Ok(self
            .session
            .resolve(req.into())
            .map(Into::into)
            .map_err(Into::into))
    }

    async fn run(&mut self, spec: wit_ex::Spec) -> ExResult<wit_ex::RunResult> {
        let result = self
            .session
            .run(spec.into(), self.abort.clone(), self.meter.clone())
            .await;
        Ok(result.map(Into::into).map_err(Into::into))
    }

    async fn start(&mut self, spec: wit_ex::Spec) -> ExResult<wit_ex::Task> {
        Ok(self
            .session
            .start(spec.into())
            .await
            .map(Into::into)
            .map_err(Into::into))
    }

    async fn read_output(&mut self, id: String) -> ExResult<wit_ex::Read> {
        Ok(self
            .session
            .read_output(&id)
            .map(Into::into)
            .map_err(Into::into))
    }

    async fn kill(&mut self, id: String) -> ExResult<bool> {
        Ok(self.session.kill(&id).map_err(Into::into))
    }

    async fn owner_of(&mut self, id: String) -> wasmtime::Result<Option<String>> {
        Ok(self.session.owner_of(&id))
    }

    async fn get(&mut self, id: String) -> ExResult<wit_ex::Task> {
        Ok(self.session.get(&id).map(Into::into).map_err(Into::into))
    }

    async fn list_tasks(&mut self) -> wasmtime::Result<Vec<wit_ex::Task>> {
        Ok(self.session.list().into_iter().map(Into::into).collect())
    }
}

impl wit_agent::Host for CallState {
    async fn inject(
        &mut self,
        owner: String,
        text: String,
        source: wit_agent::Source,
    ) -> wasmtime::Result<Result<(), wit_agent::InjectError>> {
        let injection = Injection {
            owner,
            text,
            source: Source {
                kind: source.kind,
                plugin: source.plugin,
            },
        };
        Ok(self
            .session
            .inject(injection)
            .map_err(|_| wit_agent::InjectError::UnknownOwner))
    }
}

/// A policy middleware component's view of the rules: the files `--policy` named, the calling
/// session's grants, and the calling session's person. The component cannot speak for another
/// session: a question or a grants request naming another owner traps the call.
impl wit_approval::Host for CallState {
    async fn policy_files(&mut self) -> wasmtime::Result<Vec<wit_approval::PolicyFile>> {
        Ok(self.rules.as_ref().map_or_else(Vec::new, |rules| {
            rules
                .sources()
                .iter()
                .map(|(name, text)| wit_approval::PolicyFile {
                    name: name.clone(),
                    text: text.clone(),
                })
                .collect()
        }))
    }

    async fn home(&mut self) -> wasmtime::Result<Option<String>> {
        Ok(self
            .rules
            .as_ref()
            .and_then(|rules| rules.home().map(str::to_string)))
    }

    async fn grants(&mut self, owner: Option<String>) -> wasmtime::Result<Vec<String>> {
        self.session.check_own(owner.as_deref())?;
        Ok(self
            .rules
            .as_ref()
            .map_or_else(Vec::new, |rules| rules.grants(owner.as_deref())))
    }

    async fn ask(&mut self, q: wit_approval::Question) -> wasmtime::Result<wit_approval::Answer> {
        self.session.check_own(q.owner.as_deref())?;
        let Some(rules) = &self.rules else {
            return Ok(wit_approval::Answer::CannotAsk);
        };
        let answer = match rules
            .ask(q.owner.as_deref(), &q.command, &q.cwd, &self.abort)
            .await
        {
            Ok(answer) => answer,
            // Aborted while the person was asked: the command does not run.
            Err(_) => Answer::Declined,
        };
        Ok(match answer {
            Answer::Once => wit_approval::Answer::Once,
            Answer::Session => wit_approval::Answer::Session,
            Answer::Declined => wit_approval::Answer::Declined,
            Answer::TimedOut => wit_approval::Answer::TimedOut(rules.waited_ms()),
            Answer::CannotAsk => wit_approval::Answer::CannotAsk,
        })
    }
}
