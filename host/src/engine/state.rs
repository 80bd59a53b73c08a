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

use super::bindings::{wit_agent, wit_ex};
use super::limits::GuestLimiter;
use super::session_guard::SessionGuard;
use crate::inject::{Injection, SessionRouter, Source};

pub struct CallState {
    /// The executor and the session router, as far as the calling session may reach them; the
    /// imports below have no other way to either.
    pub(crate) session: SessionGuard,
    pub(crate) abort: CancellationToken,
    /// Counts a foreground command's output for the caller's progress reports.
    pub(crate) meter: OutputMeter,
    pub(crate) limiter: GuestLimiter,
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
    ) -> Self {
        Self {
            session: SessionGuard::new(executor, sessions),
            abort,
            meter: OutputMeter::new(),
            limiter,
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
