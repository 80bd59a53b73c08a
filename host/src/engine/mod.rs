//! The engine: loads the tools component once, links its imports, and runs every tool call in a
//! fresh instance of a pre-instantiated component.
//!
//! A fresh instance per call means calls run concurrently and a call that traps or misbehaves
//! cannot poison the next one.

mod bindings;
mod deny;
mod limits;
mod load;
mod session_guard;
mod state;
mod wasi;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use dsh_executor::{Executor, OutputMeter, Task, TaskState};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Engine, Store};

pub use load::{ComponentSource, EMBEDDED_COMPONENT, default_cache_dir};
pub(crate) use load::{create_exclusive, open_private_dir, runtime_dir};

use bindings::{ToolsComponentPre, wit_tools};
use limits::{GUEST_FUEL, GUEST_MEMORY_LIMIT, GuestLimiter, MemoryLimitExceeded};
use state::CallState;

use crate::inject::{Session, SessionRouter};

/// A tool as the model and the client see it, as the component lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDefinition {
    /// `bash`, `bash_output` or `bash_kill`.
    pub name: String,
    /// A short human title, for clients to display.
    pub title: String,
    /// What the model is told about the tool (for `bash`, it names the executor's timeouts).
    pub description: String,
    /// JSON Schema of the arguments, exactly as the component converted it.
    pub input_schema: serde_json::Value,
    /// What the tool may do to its environment.
    pub annotations: ToolAnnotations,
}

/// What a tool may do to its environment, as the component states it: hints for clients
/// deciding which calls need the user's approval (MCP's tool annotations), never enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolAnnotations {
    /// The tool changes nothing in its environment.
    pub read_only_hint: bool,
    /// The tool may change or delete what it did not create.
    pub destructive_hint: bool,
    /// Repeating a call with the same arguments has no further effect.
    pub idempotent_hint: bool,
    /// The tool may reach entities outside the host.
    pub open_world_hint: bool,
}

/// Who calls: the session's owner token and working directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caller {
    /// The session's owner token; `None` reaches only tasks started without one.
    pub owner: Option<String>,
    /// The session's working directory, against which relative `workdir`s resolve.
    pub cwd: Option<String>,
}

/// What the model gets back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolResult {
    /// The text for the model (an error's starts with `Error: `).
    pub text: String,
    /// An error result: invalid arguments, an unknown tool or task, an infrastructure failure.
    /// A non-zero exit, a timeout or a signal is not one.
    pub is_error: bool,
    /// `INVALID_ARGS`, `UNKNOWN_TOOL`, `TOOL_ERROR`, `ABORTED` or `GUEST_FAULT` on an error.
    pub error_code: Option<String>,
}

/// How to build a [`ToolHost`].
#[derive(Debug, Clone, Default)]
pub struct HostOptions {
    /// The component to load.
    pub component: ComponentSource,
    /// Cache directory for the compiled component; `None` compiles at every start.
    pub cache_dir: Option<PathBuf>,
    /// The permission rules a policy middleware component (one importing
    /// `dsh:bash/approval`) is given, and who it asks; `None` gives it no rules and nobody to
    /// ask. The executor enforces its own rules either way.
    pub rules: Option<crate::policy::Rules>,
}

impl HostOptions {
    /// The embedded component with the default cache directory.
    pub fn new() -> Self {
        Self {
            component: ComponentSource::Embedded,
            cache_dir: default_cache_dir(),
            rules: None,
        }
    }
}

struct Inner {
    engine: Engine,
    pre: ToolsComponentPre<CallState>,
    executor: Arc<dyn Executor>,
    sessions: SessionRouter,
    tools: Vec<ToolDefinition>,
    /// The component's `instructions`, read at load like the tools.
    instructions: String,
    /// A fresh instance made between calls for the next one (each is used for one call only):
    /// instantiating costs ~20 µs, which then falls outside the call.
    ready: std::sync::Mutex<Option<Instance>>,
    /// Calls that may hold an instance at once; later ones wait for a slot rather than fail
    /// when the pool is used up.
    calls: Arc<tokio::sync::Semaphore>,
    /// What a policy middleware component's `approval` import reaches.
    rules: Option<crate::policy::Rules>,
}

/// A store with its instance of the component.
type Instance = (Store<CallState>, bindings::ToolsComponent);

/// The tools component, ready to serve calls. Cheap to clone.
#[derive(Clone)]
pub struct ToolHost {
    inner: Arc<Inner>,
}

impl ToolHost {
    /// Load the component and link it to `executor`. Task-done events arriving on `task_done`
    /// are handed to the component, which writes the notice and injects it into the owner's
    /// session. Must be called within a tokio runtime.
    pub async fn new(
        options: HostOptions,
        executor: Arc<dyn Executor>,
        task_done: mpsc::UnboundedReceiver<Task>,
    ) -> anyhow::Result<Self> {
        Self::new_with_sessions(options, executor, task_done, SessionRouter::default()).await
    }

    /// As [`ToolHost::new`], serving the sessions of `sessions`: several hosts (for example one
    /// per component) can then serve the same agent sessions, each call still reaching only its
    /// own session's tasks and notices.
    pub async fn new_with_sessions(
        options: HostOptions,
        executor: Arc<dyn Executor>,
        task_done: mpsc::UnboundedReceiver<Task>,
        sessions: SessionRouter,
    ) -> anyhow::Result<Self> {
        let engine = new_engine()?;
        let component = load::load(&engine, &options.component, options.cache_dir.as_deref())?;
        let pre = link(&engine, &component)?;
        let mut inner = Inner {
            engine,
            pre,
            executor,
            sessions,
            tools: Vec::new(),
            instructions: String::new(),
            ready: std::sync::Mutex::new(None),
            calls: Arc::new(tokio::sync::Semaphore::new(CALL_SLOTS)),
            rules: options.rules,
        };
        (inner.tools, inner.instructions) = inner.describe().await?;
        let host = Self {
            inner: Arc::new(inner),
        };
        host.spawn_task_done_pump(task_done);
        Ok(host)
    }

    /// The tool definitions, as listed by the component at load.
    pub fn tools(&self) -> &[ToolDefinition] {
        &self.inner.tools
    }

    /// The component's instructions for the model (how its tools work together), as it gave
    /// them at load: MCP serves them as the `initialize` result's `instructions`.
    pub fn instructions(&self) -> &str {
        &self.inner.instructions
    }

    /// Open an agent session: a fresh owner token and the channel its notices arrive on.
    /// Dropping the session kills the background tasks it started that are still running.
    pub fn open_session(&self, cwd: Option<String>) -> Session {
        let executor = self.inner.executor.clone();
        self.inner
            .sessions
            .open(cwd)
            .on_end(move |owner| kill_tasks_of(executor.as_ref(), owner))
    }

    /// The router behind `agent.inject`, for hosts that manage sessions themselves.
    pub fn sessions(&self) -> &SessionRouter {
        &self.inner.sessions
    }

    /// The executor the component's `bash-executor` import runs on.
    pub fn executor(&self) -> &Arc<dyn Executor> {
        &self.inner.executor
    }

    /// Run one tool call. Cancelling `abort` kills a foreground command in flight; the result is
    /// then the component's abort error.
    pub async fn call(
        &self,
        name: &str,
        arguments: &str,
        caller: &Caller,
        abort: CancellationToken,
    ) -> ToolResult {
        self.call_metered(name, arguments, caller, abort, OutputMeter::new())
            .await
    }

    /// [`ToolHost::call`], counting a foreground command's output into `meter` while it runs,
    /// for progress reports.
    pub async fn call_metered(
        &self,
        name: &str,
        arguments: &str,
        caller: &Caller,
        abort: CancellationToken,
        meter: OutputMeter,
    ) -> ToolResult {
        let caller = wit_tools::Caller {
            owner: caller.owner.clone(),
            cwd: caller.cwd.clone(),
        };
        let outcome = async {
            // Never closed; without a slot the call would find the instance pool used up.
            let slot = self.inner.calls.clone().acquire_owned().await?;
            let (mut store, instance) = match self.inner.take_ready() {
                Some(ready) => ready,
                None => self.inner.instantiate(CancellationToken::new()).await?,
            };
            let state = store.data_mut();
            state.abort = abort;
            state.meter = meter;
            // The guest is told this owner in `caller`; the host holds it to the same one.
            state.session.bind(caller.owner.clone());
            let result = instance
                .dsh_bash_tools()
                .call_call_tool(&mut store, name, arguments, &caller)
                .await;
            self.inner.after_call(store, slot);
            result
        }
        .await;
        match outcome {
            Ok(r) => ToolResult {
                text: r.text,
                is_error: r.is_error,
                error_code: r.error_code,
            },
            Err(e) => {
                tracing::error!("tool call {name} failed in the guest: {e:#}");
                guest_fault(&e)
            }
        }
    }

    /// Kill every running task and wait for each to end.
    pub async fn shutdown(&self) {
        self.inner.executor.shutdown().await;
    }

    fn spawn_task_done_pump(&self, mut task_done: mpsc::UnboundedReceiver<Task>) {
        // A weak handle: the pump must not keep the host alive after its last user dropped it.
        let weak = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            while let Some(mut task) = task_done.recv().await {
                let Some(inner) = weak.upgrade() else { break };
                // The notice names the task as its session knows it.
                if let Some(owner) = &task.owner {
                    task.id = inner.sessions.name_task(owner, &task.id);
                }
                let id = task.id.clone();
                match inner.task_done(task).await {
                    Ok(Ok(())) => {}
                    Ok(Err(message)) => {
                        tracing::warn!("notice for task {id} not delivered: {message}")
                    }
                    Err(e) => tracing::error!("task-done for {id} failed in the guest: {e:#}"),
                }
            }
        });
    }
}

impl Inner {
    fn take_ready(&self) -> Option<Instance> {
        self.ready.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// Off the call's path (once the tasks woken meanwhile, such as the one sending the answer,
    /// had their turn): drop the used store, whose memory is reset then, and make the next
    /// call's instance.
    fn after_call(
        self: &Arc<Self>,
        used: Store<CallState>,
        slot: tokio::sync::OwnedSemaphorePermit,
    ) {
        let inner = Arc::downgrade(self);
        tokio::spawn(async move {
            for _ in 0..2 {
                tokio::task::yield_now().await;
            }
            drop(used);
            // The store's instance is back in the pool: another call may take its place.
            drop(slot);
            let Some(inner) = inner.upgrade() else { return };
            if inner
                .ready
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_some()
            {
                return;
            }
            match inner.instantiate(CancellationToken::new()).await {
                Ok(next) => {
                    let mut ready = inner.ready.lock().unwrap_or_else(|e| e.into_inner());
                    if ready.is_none() {
                        *ready = Some(next);
                    }
                }
                Err(e) => tracing::debug!("cannot make an instance ahead of the next call: {e:#}"),
            }
        });
    }

    async fn instantiate(
        &self,
        abort: CancellationToken,
    ) -> wasmtime::Result<(Store<CallState>, bindings::ToolsComponent)> {
        let limiter = GuestLimiter::new(GUEST_MEMORY_LIMIT);
        let state = CallState::new(
            self.executor.clone(),
            self.sessions.clone(),
            abort,
            limiter,
            self.rules.clone(),
        );
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limiter);
        store.set_fuel(GUEST_FUEL)?;
        let instance = self.pre.instantiate_async(&mut store).await?;
        Ok((store, instance))
    }

    /// What the component says of itself: its tools (`list-tools`) and its instructions, each
    /// asked once, in one instance.
    async fn describe(&self) -> anyhow::Result<(Vec<ToolDefinition>, String)> {
        let (mut store, instance) = self
            .instantiate(CancellationToken::new())
            .await
            .map_err(|e| anyhow::anyhow!("cannot instantiate the tools component: {e:#}"))?;
        let defs = instance
            .dsh_bash_tools()
            .call_list_tools(&mut store)
            .await
            .map_err(|e| anyhow::anyhow!("list-tools failed in the tools component: {e:#}"))?;
        let instructions = instance
            .dsh_bash_tools()
            .call_instructions(&mut store)
            .await
            .map_err(|e| anyhow::anyhow!("instructions failed in the tools component: {e:#}"))?;
        let tools = defs
            .into_iter()
            .map(|d| {
                let input_schema = serde_json::from_str(&d.input_schema).with_context(|| {
                    format!("tool {} has an input schema that is not JSON", d.name)
                })?;
                Ok(ToolDefinition {
                    name: d.name,
                    title: d.title,
                    description: d.description,
                    input_schema,
                    annotations: ToolAnnotations {
                        read_only_hint: d.annotations.read_only_hint,
                        destructive_hint: d.annotations.destructive_hint,
                        idempotent_hint: d.annotations.idempotent_hint,
                        open_world_hint: d.annotations.open_world_hint,
                    },
                })
            })
            .collect::<anyhow::Result<_>>()?;
        Ok((tools, instructions))
    }

    async fn task_done(&self, task: Task) -> wasmtime::Result<Result<(), String>> {
        let (mut store, instance) = self.instantiate(CancellationToken::new()).await?;
        // The notice is the task owner's business: the executor's record names the session the
        // guest may inject into and whose tasks it may see while writing it.
        store.data_mut().session.bind(task.owner.clone());
        instance
            .dsh_bash_tools()
            .call_task_done(&mut store, &task.into())
            .await
    }
}

/// Kills the running tasks that `owner`'s session started: its session ended.
fn kill_tasks_of(executor: &dyn Executor, owner: &str) {
    for task in executor.list() {
        if task.state == TaskState::Running && task.owner.as_deref() == Some(owner) {
            match executor.kill(&task.id) {
                Ok(_) => tracing::info!("session ended: killed its task {}", task.id),
                Err(e) => tracing::warn!("session ended: cannot kill its task {}: {e}", task.id),
            }
        }
    }
    executor.end_session(owner);
}

fn new_engine() -> anyhow::Result<Engine> {
    // Pooled instances make a fresh instance per call cost microseconds. Where the address space
    // cannot be reserved (tight overcommit, ulimit -v), fall back to on-demand allocation.
    match Engine::new(&engine_config(true)) {
        Ok(engine) => return Ok(engine),
        Err(e) => tracing::info!("pooling allocator unavailable, allocating on demand: {e:#}"),
    }
    Engine::new(&engine_config(false))
        .map_err(|e| anyhow::anyhow!("cannot create the wasm engine: {e:#}"))
}

/// Concurrent guest instances the pool holds (calls in flight plus task-done deliveries).
const POOL_INSTANCES: u32 = 256;

/// Calls in flight at once; the rest of the pool serves the instance made ahead and task-done
/// deliveries.
pub const CALL_SLOTS: usize = POOL_INSTANCES as usize - 16;

/// Bytes of a pooled memory or table reset in place rather than given back to the kernel.
const KEEP_RESIDENT: usize = 1 << 20;

fn engine_config(pooling: bool) -> wasmtime::Config {
    let mut config = wasmtime::Config::new();
    config.wasm_component_model(true);
    config.consume_fuel(true);
    if pooling {
        let mut pool = wasmtime::PoolingAllocationConfig::new();
        pool.total_component_instances(POOL_INSTANCES)
            .total_core_instances(POOL_INSTANCES * 4)
            .total_memories(POOL_INSTANCES * 2)
            .total_tables(POOL_INSTANCES * 4)
            .total_stacks(POOL_INSTANCES)
            .max_memory_size(GUEST_MEMORY_LIMIT)
            // A call's dirty pages are found with PAGEMAP_SCAN (Linux 6.7+) and copied back from
            // the image, up to this much; the slot stays mapped, so the next call neither
            // faults its pages in again nor makes every host thread flush its TLB.
            .pagemap_scan(wasmtime::Enabled::Auto)
            .linear_memory_keep_resident(KEEP_RESIDENT)
            .table_keep_resident(KEEP_RESIDENT);
        config.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool));
    }
    config
}

/// The interfaces the world imports, as the component names them.
const WORLD_IMPORTS: [&str; 2] = ["dsh:bash/bash-executor@0.9.0", "dsh:bash/agent@0.9.0"];

/// What a tools component composed with the policy middleware imports besides.
const APPROVAL_IMPORT: &str = "dsh:bash/approval@0.9.0";

/// Link the world's imports: the executor and agent interfaces, and nothing else. The tools
/// component (built without WASI) imports exactly these two. A component that carries WASI
/// imports as well (one built for `wasm32-wasip2`, such as tests/fault-guest) gets the pieces a
/// Rust guest's std needs (`wasi:cli`, `wasi:io`) backed by a deny-all context, and a trap for
/// any other WASI interface; a component without WASI imports is linked no WASI at all.
fn link(engine: &Engine, component: &Component) -> anyhow::Result<ToolsComponentPre<CallState>> {
    let mut linker: Linker<CallState> = Linker::new(engine);
    let wasm_err = |e: wasmtime::Error| anyhow::anyhow!("{e:#}");
    bindings::ToolsComponent::add_to_linker::<_, HasSelf<CallState>>(&mut linker, |s| s)
        .map_err(wasm_err)?;
    let mut imports_wasi = false;
    for (name, _) in component.component_type().imports(engine) {
        if name.starts_with("wasi:") {
            imports_wasi = true;
        } else if name == APPROVAL_IMPORT {
            bindings::approval_host::ApprovalHost::add_to_linker::<_, HasSelf<CallState>>(
                &mut linker,
                |s| s,
            )
            .map_err(wasm_err)?;
        } else if !WORLD_IMPORTS.contains(&name) {
            anyhow::bail!(
                "the component does not fit the dsh:bash/tools-component world: it imports `{name}`, \
                 which this host does not provide (it provides {}, {APPROVAL_IMPORT})",
                WORLD_IMPORTS.join(", ")
            );
        }
    }
    if imports_wasi {
        // Files, sockets, clocks and random link to a trap: a guest that reaches for them fails
        // its call and gets nothing.
        wasi::add_to_linker(&mut linker).map_err(wasm_err)?;
        deny::stub_unlinked_wasi(&mut linker, engine, component).map_err(wasm_err)?;
    }
    let pre = linker.instantiate_pre(component).map_err(|e| {
        anyhow::anyhow!("the component does not fit the dsh:bash/tools-component world: {e:#}")
    })?;
    ToolsComponentPre::new(pre).map_err(|e| {
        anyhow::anyhow!("the component does not fit the dsh:bash/tools-component world: {e:#}")
    })
}

/// An error result for a call the guest could not finish.
fn guest_fault(e: &wasmtime::Error) -> ToolResult {
    let text = if e.downcast_ref::<MemoryLimitExceeded>().is_some() {
        "Error: guest exceeded its memory limit".to_string()
    } else {
        match e.downcast_ref::<wasmtime::Trap>() {
            Some(wasmtime::Trap::OutOfFuel | wasmtime::Trap::Interrupt) => {
                "Error: guest exceeded its CPU budget".to_string()
            }
            Some(trap) => format!("Error: guest trapped: {trap}"),
            None => format!("Error: guest trapped: {}", e.root_cause()),
        }
    };
    ToolResult {
        text,
        is_error: true,
        error_code: Some("GUEST_FAULT".into()),
    }
}
