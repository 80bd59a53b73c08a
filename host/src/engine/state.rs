//! Per-call store state and the host side of the guest's imports.
//!
//! Each tool call gets a fresh store holding only what that call may reach: the shared executor,
//! its own abort token, the session router for `agent.inject`, and a deny-all WASI context.

use std::sync::Arc;

use dsh_executor::Executor;
use tokio_util::sync::CancellationToken;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::bindings::{wit_agent, wit_ex};
use super::limits::GuestLimiter;
use crate::inject::{Injection, SessionRouter, Source};

pub struct CallState {
    pub(crate) executor: Arc<dyn Executor>,
    pub(crate) abort: CancellationToken,
    pub(crate) sessions: SessionRouter,
    pub(crate) limiter: GuestLimiter,
    wasi: WasiCtx,
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
            executor,
            abort,
            sessions,
            limiter,
            // Deny-all: no preopens, no env, no args, no network; stdio goes nowhere.
            wasi: WasiCtx::builder().build(),
            table: ResourceTable::new(),
        }
    }
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

type ExResult<T> = wasmtime::Result<Result<T, wit_ex::ExecutorError>>;

impl wit_ex::Host for CallState {
    async fn current_limits(&mut self) -> wasmtime::Result<wit_ex::Limits> {
        Ok(self.executor.limits().into())
    }

    async fn resolve(&mut self, req: wit_ex::Request) -> ExResult<wit_ex::Spec> {
        Ok(self
            .executor
            .resolve(req.into())
            .map(Into::into)
            .map_err(Into::into))
    }

    async fn run(&mut self, spec: wit_ex::Spec) -> ExResult<wit_ex::RunResult> {
        let result = self.executor.run(spec.into(), self.abort.clone()).await;
        Ok(result.map(Into::into).map_err(Into::into))
    }

    async fn start(&mut self, spec: wit_ex::Spec) -> ExResult<wit_ex::Task> {
        Ok(self
            .executor
            .start(spec.into())
            .await
            .map(Into::into)
            .map_err(Into::into))
    }

    async fn read_output(&mut self, id: String) -> ExResult<wit_ex::Read> {
        Ok(self
            .executor
            .read_output(&id)
            .map(Into::into)
            .map_err(Into::into))
    }

    async fn kill(&mut self, id: String) -> ExResult<bool> {
        Ok(self.executor.kill(&id).map_err(Into::into))
    }

    async fn owner_of(&mut self, id: String) -> wasmtime::Result<Option<String>> {
        Ok(self.executor.owner_of(&id))
    }

    async fn get(&mut self, id: String) -> ExResult<wit_ex::Task> {
        Ok(self.executor.get(&id).map(Into::into).map_err(Into::into))
    }

    async fn list_tasks(&mut self) -> wasmtime::Result<Vec<wit_ex::Task>> {
        Ok(self.executor.list().into_iter().map(Into::into).collect())
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
            .sessions
            .inject(injection)
            .map_err(|_| wit_agent::InjectError::UnknownOwner))
    }
}
