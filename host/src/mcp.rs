//! `dsh-host mcp`: the tools over the Model Context Protocol, served with the official Rust SDK
//! (`rmcp`).
//!
//! One connection (on stdio) or one MCP session (over HTTP: `dsh-host mcp --http`) is one agent
//! session: it gets its own owner token, and every call it makes carries it; when it ends, its
//! running tasks are killed. What the server does on top of rmcp:
//!
//! - `tools/list` lists the component's tools with their input schemas exactly as the component
//!   converted them, and the component's titles and annotations (`readOnlyHint`,
//!   `destructiveHint`, `idempotentHint`, `openWorldHint`).
//! - The `initialize` result carries the component's instructions (its `instructions` export,
//!   read once at load: foreground or background, fresh shells) and the server's title,
//!   [`SERVER_TITLE`].
//! - `tools/call` hands the name and the `arguments` object (as JSON text, `{}` when absent) to
//!   the component unchecked, so that the component answers unknown tools and bad arguments
//!   itself. The result is the tool text as the first text block, `isError` from the component.
//! - A client that declares the `roots` capability is asked `roots/list` once initialized and
//!   on each `notifications/roots/list_changed`; the first root, when it is a `file://` URI
//!   naming a directory, is the session's cwd for later calls, else the default (`--cwd`), with
//!   a log line saying why. A call waits for an outstanding answer, at most [`ROOTS_WAIT`]
//!   (see `roots.rs`).
//! - With `--policy`, a command that needs approval is asked of the person behind the session:
//!   by `elicitation/create` (`elicit.rs`), or, for a request of revision 2026-07-28, through an
//!   input-required result that the client answers by calling again (`input_required.rs`).
//! - `notifications/cancelled` aborts the call it names: rmcp cancels the request's token, which
//!   is the call's abort token, so a foreground command is killed.
//! - A completion notice for the session is sent at once as a `notifications/message` (logger
//!   `tool-bash`, level `info`, the notice text as data), and is also appended as an extra text
//!   block to the session's next `tools/call` result, for clients that do not show log messages
//!   to the model. Each notice rides on exactly one result, in arrival order.
//! - A line that is not JSON gets a JSON-RPC parse error (`"id": null`, -32700) and the server
//!   keeps serving (see the `transport` module); an HTTP request body is read by the same
//!   decoder (`decode`), so it gets the same answer.
//! - When the input ends (or, for [`serve_stdio`], on SIGINT or SIGTERM) the server stops, lets
//!   in-flight calls end (rmcp cancels them), kills every running task and waits for it.

// Logging is deprecated in rmcp by SEP-2577, but `notifications/message` is what today's MCP
// clients show, and the notices must reach them at once.
#![allow(deprecated)]

mod big_numbers;
mod decode;
mod elicit;
mod http;
mod input_required;
mod roots;
mod transport;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, CustomRequest,
    CustomResult, ErrorCode, Implementation, InitializeRequestParams, InitializeResult, JsonObject,
    ListToolsResult, LoggingLevel, LoggingMessageNotificationParam, PaginatedRequestParams,
    ProgressNotificationParam, ProgressToken, ProtocolVersion, ServerCapabilities, ServerConfig,
    SetLevelRequestParams, Tool, ToolAnnotations,
};
use rmcp::service::{
    NotificationContext, QuitReason, RequestContext, ServerInitializeError, serve_server_with_ct,
};
use rmcp::{ErrorData as McpError, Peer, RoleServer, ServerHandler};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use crate::engine::{Caller, ToolDefinition, ToolHost};
use crate::inject::{Injection, Session};
use dsh_executor::OutputMeter;
pub use http::{
    DEFAULT_BODY_TIMEOUT as DEFAULT_HTTP_BODY_TIMEOUT,
    DEFAULT_HEADER_TIMEOUT as DEFAULT_HTTP_HEADER_TIMEOUT,
    DEFAULT_MAX_CONNECTIONS as DEFAULT_HTTP_MAX_CONNECTIONS, DEFAULT_MAX_SESSIONS,
    DEFAULT_MAX_UNAUTHENTICATED as DEFAULT_HTTP_MAX_UNAUTHENTICATED, DEFAULT_SESSION_IDLE,
    ENDPOINT as HTTP_ENDPOINT, HttpOptions, TOKEN_ENV as HTTP_TOKEN_ENV, TokenSource,
    parse_listen_addr as http_listen_addr, parse_origin as http_origin, serve_http,
    serve_http_until,
};
pub use roots::ROOTS_WAIT;
use roots::SessionCwd;
use transport::LineTransport;

/// The server name in the `initialize` result.
pub const SERVER_NAME: &str = "dsh-host";

/// The server's title in the `initialize` result, for clients to display.
pub const SERVER_TITLE: &str = "dsh bash tools";

/// The logger name of the completion-notice log messages.
pub const NOTICE_LOGGER: &str = "tool-bash";

/// How long in-flight calls may take to end once the server stopped and rmcp cancelled them,
/// on top of the executor's TERM-to-KILL grace.
const CALL_DRAIN_SLACK: Duration = Duration::from_secs(5);

/// Tool calls one session may have in flight by default: more than a model runs in parallel, and
/// few enough that one session at its limit slows a hundred others' calls by a third at most
/// (the benchmark's flooded sessions workload).
pub const DEFAULT_MAX_CALLS_IN_FLIGHT: usize = 16;

/// Tool calls one server may have in flight in all its sessions together, at most and by
/// default: what the host runs at once. Past it a call would wait for an instance of the
/// component; it is refused instead, so that no call ever queues unseen.
pub const MAX_CALLS_TOTAL: usize = crate::engine::CALL_SLOTS;

/// How often a call that carries a `progressToken` reports progress, by default: well under the
/// 60 s after which common clients time a request out unless progress resets their clock.
pub const DEFAULT_PROGRESS_INTERVAL: Duration = Duration::from_secs(10);

/// How a session is served.
#[derive(Debug, Clone)]
pub struct McpOptions {
    /// The session's default working directory (relative `workdir`s resolve against it), used
    /// unless the client offers a usable root when asked `roots/list`.
    pub cwd: Option<String>,
    /// Tool calls one session may have in flight at once; one more is answered with an error
    /// naming the limit instead of being run.
    pub max_calls_in_flight: usize,
    /// Tool calls in flight in every session together, shared by the clones of these options
    /// (so by every session of one server); one more is answered with an error naming it.
    pub calls_total: CallsTotal,
    /// The interval of `notifications/progress` for a call whose request carries a
    /// `progressToken`.
    pub progress_interval: Duration,
    /// Where each session registers its client as the one to ask about a command that needs
    /// approval (MCP elicitation), when permission rules are in force.
    pub approvals: Option<crate::policy::Approvals>,
}

impl Default for McpOptions {
    fn default() -> Self {
        Self {
            cwd: None,
            max_calls_in_flight: DEFAULT_MAX_CALLS_IN_FLIGHT,
            calls_total: CallsTotal::default(),
            progress_interval: DEFAULT_PROGRESS_INTERVAL,
            approvals: None,
        }
    }
}

/// Serve the tools over MCP on stdin/stdout until stdin ends or the process gets SIGINT or
/// SIGTERM, then kill every running task, wait for each, and return.
///
/// stdout carries the protocol only: logs must go elsewhere (stderr).
pub async fn serve_stdio(host: ToolHost, options: McpOptions) -> anyhow::Result<()> {
    let stop = CancellationToken::new();
    let signals = watch_signals(stop.clone())?;
    // Non-blocking pipes where stdin/stdout are pipes (as MCP clients spawn servers), so that a
    // signal can end the server while a read is pending.
    let (reader, writer) = rmcp::transport::stdio_pipes();
    let result = serve_until(host, options, reader, writer, stop).await;
    signals.abort();
    result
}

/// Serve one MCP session over `reader`/`writer` (newline-delimited JSON-RPC) until the input
/// ends, then kill every running task of `host`, wait for each, and return.
pub async fn serve<R, W>(
    host: ToolHost,
    options: McpOptions,
    reader: R,
    writer: W,
) -> anyhow::Result<()>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    serve_until(host, options, reader, writer, CancellationToken::new()).await
}

/// [`serve`], which also stops when `stop` is cancelled.
pub async fn serve_until<R, W>(
    host: ToolHost,
    options: McpOptions,
    reader: R,
    writer: W,
    stop: CancellationToken,
) -> anyhow::Result<()>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let outcome = serve_session(&host, options, reader, writer, stop).await;
    host.shutdown().await;
    outcome
}

async fn serve_session<R, W>(
    host: &ToolHost,
    options: McpOptions,
    reader: R,
    writer: W,
    stop: CancellationToken,
) -> anyhow::Result<()>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let tools = Arc::new(mcp_tools(host.tools())?);
    // The handler holds the only sender. rmcp shares the handler with each request it runs, so
    // the channel closes once the service ended and every in-flight call with it.
    let (in_flight, mut calls_ended) = mpsc::channel::<()>(1);
    let server = McpServer::new(host, tools, &options, Some(in_flight));

    // A child token: rmcp cancels the token it is given when it is done, which must not reach
    // the caller's. The transport cancels it when the client is gone (its input ended, or a
    // write to it failed): every in-flight call's token derives from it, so the calls are
    // aborted at once and their commands killed, rather than left running while rmcp waits for
    // their answers.
    let service = stop.child_token();
    let transport = LineTransport::new(reader, writer, service.clone());
    let running = match serve_server_with_ct(server, transport, service).await {
        Ok(running) => running,
        Err(ServerInitializeError::ConnectionClosed(_) | ServerInitializeError::Cancelled) => {
            tracing::debug!("MCP input ended before the session was initialized");
            return Ok(());
        }
        Err(e) => return Err(anyhow::anyhow!("MCP session failed to start: {e}")),
    };
    let quit = running.waiting().await;

    // rmcp has cancelled every in-flight call by now; the calls kill their commands.
    let grace = Duration::from_secs_f64(host.executor().limits().grace_ms.max(0.0) / 1000.0);
    if tokio::time::timeout(grace + CALL_DRAIN_SLACK, calls_ended.recv())
        .await
        .is_err()
    {
        tracing::warn!("tool calls still running after the MCP session ended");
    }
    match quit {
        Ok(QuitReason::Closed) => tracing::debug!("MCP input ended"),
        Ok(QuitReason::Cancelled) => tracing::debug!("MCP server stopped"),
        Ok(QuitReason::JoinError(e)) => return Err(anyhow::anyhow!("MCP service failed: {e}")),
        Ok(other) => tracing::debug!("MCP session ended: {other:?}"),
        Err(e) => return Err(anyhow::anyhow!("MCP service failed: {e}")),
    }
    Ok(())
}

/// The component's tools as MCP tools (the entries of `tools/list`): schemas passed through
/// unchanged, with the component's titles and annotations. The title is also the annotations'
/// `title`, where clients of the 2025-03-26 revision (which has no tool `title`) look for it.
pub fn mcp_tools(defs: &[ToolDefinition]) -> anyhow::Result<Vec<Tool>> {
    defs.iter()
        .map(|d| {
            let serde_json::Value::Object(schema) = &d.input_schema else {
                anyhow::bail!(
                    "tool {} has an input schema that is not a JSON object",
                    d.name
                );
            };
            let hints = d.annotations;
            let annotations = ToolAnnotations::from_raw(
                Some(d.title.clone()),
                Some(hints.read_only_hint),
                Some(hints.destructive_hint),
                Some(hints.idempotent_hint),
                Some(hints.open_world_hint),
            );
            Ok(Tool::new(
                d.name.clone(),
                d.description.clone(),
                Arc::new(schema.clone()),
            )
            .with_title(d.title.clone())
            .with_annotations(annotations))
        })
        .collect()
}

/// Completion notices not yet carried by a `tools/call` result, and the client's log level.
#[derive(Default)]
struct Notices {
    pending: Mutex<Vec<String>>,
    /// The minimum level the client asked for with `logging/setLevel`; `None` sends everything.
    level: Mutex<Option<LoggingLevel>>,
    /// For revisions from 2026-07-28 on, where each request opts in to log messages with the
    /// `io.modelcontextprotocol/logLevel` of its `_meta`: the level of the session's latest
    /// call (`Some(None)`: it did not opt in, so no log messages are sent).
    per_request: Mutex<Option<Option<LoggingLevel>>>,
}

impl Notices {
    fn push(&self, text: String) {
        lock(&self.pending).push(text);
    }

    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *lock(&self.pending))
    }

    fn set_level(&self, level: LoggingLevel) {
        *lock(&self.level) = Some(level);
    }

    /// A call of a revision with per-request log levels, with the level it asked for.
    fn set_request_level(&self, level: Option<LoggingLevel>) {
        *lock(&self.per_request) = Some(level);
    }

    fn wants(&self, level: LoggingLevel) -> bool {
        let at_least = |min: LoggingLevel| severity(level) >= severity(min);
        match *lock(&self.per_request) {
            Some(opt_in) => opt_in.is_some_and(at_least),
            None => lock(&self.level).is_none_or(at_least),
        }
    }
}

/// The data behind these locks stays consistent across a panic (single pushes and swaps).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn severity(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// Forward the session's completion notices as they arrive: queue each for the next
/// `tools/call` result first, then send it as a log message, so that a client that saw the
/// message finds the notice on its next call.
async fn pump_notices(
    mut injections: mpsc::UnboundedReceiver<Injection>,
    peer: Peer<RoleServer>,
    notices: Arc<Notices>,
) {
    while let Some(injection) = injections.recv().await {
        notices.push(injection.text.clone());
        if !notices.wants(LoggingLevel::Info) {
            continue;
        }
        let message =
            LoggingMessageNotificationParam::new(LoggingLevel::Info, injection.text.into())
                .with_logger(NOTICE_LOGGER);
        if let Err(e) = peer.notify_logging_message(message).await {
            tracing::debug!("completion notice not sent as a log message: {e}");
        }
    }
}

/// The requests this server answers (rmcp also answers `ping`).
const SERVED_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "logging/setLevel",
];

/// The rmcp handler of one session.
///
/// The session's dsh side (its owner token, notice channel and notice pump) is opened by its
/// first tool call, not at `initialize`: before a call the session has no tasks and so no
/// notices, and a server holding many idle sessions (HTTP) keeps only this handler for each.
struct McpServer {
    host: ToolHost,
    tools: Arc<Vec<Tool>>,
    /// The session's cwd: the client's root or the default.
    cwd: Arc<SessionCwd>,
    notices: Arc<Notices>,
    call_slots: CallSlots,
    calls_total: CallSlots,
    progress_interval: Duration,
    approvals: Option<crate::policy::Approvals>,
    /// The permission questions of revision 2026-07-28 requests this session holds pending.
    rounds: input_required::Rounds,
    /// Opened by the first tool call; dropped with the handler, which is when the session
    /// ended.
    dsh: OnceLock<DshSession>,
    /// Closes once the handler is gone, for a transport that waits for the calls to end
    /// (stdio).
    _in_flight: Option<mpsc::Sender<()>>,
}

impl McpServer {
    /// The handler of a new session of `host`.
    fn new(
        host: &ToolHost,
        tools: Arc<Vec<Tool>>,
        options: &McpOptions,
        in_flight: Option<mpsc::Sender<()>>,
    ) -> Self {
        McpServer {
            host: host.clone(),
            tools,
            cwd: Arc::new(SessionCwd::new(options.cwd.clone())),
            notices: Arc::new(Notices::default()),
            call_slots: CallSlots::new(
                options.max_calls_in_flight,
                "in this session",
                "--max-calls-in-flight",
            ),
            calls_total: options.calls_total.0.clone(),
            progress_interval: options.progress_interval,
            approvals: options.approvals.clone(),
            rounds: input_required::Rounds::default(),
            dsh: OnceLock::new(),
            _in_flight: in_flight,
        }
    }

    /// The session's dsh side, opened now if this is its first call; its notices go to `peer`.
    fn dsh_session(&self, peer: &Peer<RoleServer>) -> &DshSession {
        self.dsh.get_or_init(|| {
            // Each call names its own cwd (the client's root may change): the session's is unused.
            let mut session = self.host.open_session(None);
            let injections = session.take_receiver();
            let pump = tokio::spawn(pump_notices(injections, peer.clone(), self.notices.clone()));
            let approver = self.approvals.as_ref().map(|approvals| {
                approvals.register(
                    session.owner(),
                    Arc::new(elicit::Elicitation::new(peer.clone())),
                )
            });
            DshSession {
                session,
                _pump: AbortOnDropHandle::new(pump),
                _approver: approver,
            }
        })
    }
}

/// One MCP session's own dsh session: its owner token, the tasks it started and the pump of
/// its completion notices. Dropping it ends the session (its running tasks are killed and its
/// owner unregistered), then stops the pump.
struct DshSession {
    session: Session,
    _pump: AbortOnDropHandle<()>,
    /// The client, as the one to ask about this session's commands (permission rules).
    _approver: Option<crate::policy::Registration>,
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_logging()
            .enable_tools()
            .build();
        let config = ServerConfig::new(capabilities).with_server_info(
            Implementation::new(SERVER_NAME, env!("CARGO_PKG_VERSION")).with_title(SERVER_TITLE),
        );
        match self.host.instructions() {
            "" => config,
            instructions => config.with_instructions(instructions),
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.tools.as_ref().clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        // rmcp cancels `context.ct` on the client's `notifications/cancelled` (and when the
        // server stops) and lets this future run to its end. Should the future ever be dropped
        // instead, the guard still aborts the call.
        // The session's own limit first: a session at it learns of its own limit, not the
        // server's.
        let _slot = self.call_slots.take()?;
        let _total = self.calls_total.take()?;
        let modern = context
            .protocol_version()
            .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str());
        if modern {
            self.notices.set_request_level(context.meta.log_level());
        }
        let abort = context.ct.child_token();
        let _abort_on_drop = abort.clone().drop_guard();
        // Ends with the call, however it ends.
        let meter = OutputMeter::new();
        let _progress = context.meta.get_progress_token().map(|token| {
            let reporting = tokio::spawn(report_progress(
                context.peer.clone(),
                token,
                self.progress_interval,
                meter.clone(),
            ));
            AbortOnDropHandle::new(reporting)
        });
        let arguments = match &request.arguments {
            Some(arguments) => arguments_json(arguments)?,
            None => "{}".to_string(),
        };
        let cwd = tokio::select! {
            cwd = self.cwd.current() => cwd,
            // The call ends at once as aborted; its directory does not matter.
            _ = abort.cancelled() => None,
        };
        let owner = self.dsh_session(&context.peer).session.owner().to_string();
        // A 2026-07-28 request is asked about its command through its result (and answered by
        // its retry), never by a request to the client.
        let round = match modern {
            true => Some(
                self.rounds
                    .begin(&owner, &request, &arguments, can_elicit(&context))?,
            ),
            false => None,
        };
        let caller = Caller {
            owner: Some(owner.clone()),
            cwd,
        };
        let call = self
            .host
            .call_metered(&request.name, &arguments, &caller, abort.clone(), meter);
        let result = match &round {
            Some(round) => round.run(call).await,
            None => call.await,
        };
        if let Some((question, timeout)) = round.as_ref().and_then(|r| r.asked()) {
            // Nothing ran: the refusal the component wrote is replaced by the question, and
            // the session's notices wait for a result that is shown.
            let asked =
                self.rounds
                    .input_required(&owner, &request.name, &arguments, question, timeout)?;
            return Ok(asked.into());
        }

        let mut content = vec![ContentBlock::text(result.text)];
        // rmcp drops the response of a cancelled request: its notices wait for the next call.
        if !abort.is_cancelled() {
            content.extend(self.notices.take().into_iter().map(ContentBlock::text));
        }
        let result = if result.is_error {
            CallToolResult::error(content)
        } else {
            CallToolResult::success(content)
        };
        Ok(result.into())
    }

    /// rmcp reads a standard request whose params do not fit as a custom request; answer it with
    /// invalid params rather than rmcp's method not found.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        let method = request.method;
        if SERVED_METHODS.contains(&method.as_str()) {
            let reason = match method.as_str() {
                "tools/call" => serde_json::from_value::<CallToolRequestParams>(
                    request.params.unwrap_or(serde_json::Value::Null),
                )
                .err()
                .map(|e| format!(": {e}")),
                _ => None,
            };
            let message = format!("invalid params for {method}{}", reason.unwrap_or_default());
            return Err(McpError::invalid_params(message, None));
        }
        Err(McpError::new(ErrorCode::METHOD_NOT_FOUND, method, None))
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.notices.set_level(request.level);
        Ok(())
    }

    /// rmcp's own `initialize`, noting whether the client offers roots to ask for.
    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        context.peer.set_peer_info(request.clone());
        let result = self.negotiate_initialize(&request)?;
        // Only revisions with `initialize` get here, and they let the server ask for roots.
        if request.capabilities.roots.is_some() {
            self.cwd.expect_roots();
        }
        Ok(result)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.cwd.ask(context.peer);
    }

    async fn on_roots_list_changed(&self, context: NotificationContext<RoleServer>) {
        self.cwd.ask(context.peer);
    }
}

/// Sends `notifications/progress` for a call every `interval` until aborted: the progress is the
/// seconds the call has run, which grows with each report as the protocol requires, and the
/// message says how much output its command has written so far.
async fn report_progress(
    peer: Peer<RoleServer>,
    token: ProgressToken,
    interval: Duration,
    meter: OutputMeter,
) {
    let started = tokio::time::Instant::now();
    let mut ticks = tokio::time::interval_at(started + interval, interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let seconds = started.elapsed().as_secs_f64();
        let message = format!(
            "running for {seconds:.1} s; {} bytes of output so far",
            meter.bytes()
        );
        let report = ProgressNotificationParam::new(token.clone(), seconds).with_message(message);
        if let Err(e) = peer.notify_progress(report).await {
            tracing::debug!("progress not sent: {e}");
            return;
        }
    }
}

/// A limit on tool calls in flight: a session's, or a server's (shared by its clones).
#[derive(Debug, Clone)]
struct CallSlots {
    limit: usize,
    /// Where the limit holds ("in this session"), and the flag that sets it.
    scope: &'static str,
    flag: &'static str,
    free: Arc<tokio::sync::Semaphore>,
}

impl CallSlots {
    fn new(limit: usize, scope: &'static str, flag: &'static str) -> Self {
        Self {
            limit,
            scope,
            flag,
            free: Arc::new(tokio::sync::Semaphore::new(limit)),
        }
    }

    /// A slot for one call, or the error that answers a call beyond the limit at once.
    fn take(&self) -> Result<tokio::sync::OwnedSemaphorePermit, McpError> {
        self.free.clone().try_acquire_owned().map_err(|_| {
            McpError::new(
                LIMIT_EXCEEDED,
                format!(
                    "too many tool calls in flight {}: the limit is {} ({}); wait for a call \
                     to finish",
                    self.scope, self.limit, self.flag
                ),
                None,
            )
        })
    }
}

/// The limit on tool calls in flight in every session of a server together; its clones share
/// it.
#[derive(Debug, Clone)]
pub struct CallsTotal(CallSlots);

impl CallsTotal {
    /// A limit of `limit` calls, at most [`MAX_CALLS_TOTAL`].
    pub fn new(limit: usize) -> Result<Self, String> {
        if limit == 0 || limit > MAX_CALLS_TOTAL {
            return Err(format!(
                "expected 1 to {MAX_CALLS_TOTAL} (the calls one server runs at once), got {limit}"
            ));
        }
        Ok(Self(CallSlots::new(
            limit,
            "on this server",
            "--max-calls-total",
        )))
    }
}

impl Default for CallsTotal {
    fn default() -> Self {
        Self(CallSlots::new(
            MAX_CALLS_TOTAL,
            "on this server",
            "--max-calls-total",
        ))
    }
}

/// JSON-RPC's first implementation-defined server error code: a limit (calls in flight, HTTP
/// sessions) was reached.
const LIMIT_EXCEEDED: ErrorCode = ErrorCode(-32000);

/// Whether the client of a request declared form elicitation: in the request's `_meta` (from
/// revision 2026-07-28 on), else at `initialize`. Declaring neither mode means form.
fn can_elicit(context: &RequestContext<RoleServer>) -> bool {
    let capabilities = context.meta.client_capabilities().or_else(|| {
        context
            .peer
            .peer_info()
            .map(|info| info.capabilities.clone())
    });
    capabilities
        .and_then(|c| c.elicitation)
        .is_some_and(|e| e.form.is_some() || e.url.is_none())
}

fn arguments_json(arguments: &JsonObject) -> Result<String, McpError> {
    serde_json::to_string(arguments)
        .map(big_numbers::restore)
        .map_err(|e| McpError::internal_error(format!("cannot serialize the arguments: {e}"), None))
}

/// Cancel `stop` on the first SIGINT or SIGTERM.
#[cfg(unix)]
fn watch_signals(stop: CancellationToken) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    Ok(tokio::spawn(async move {
        tokio::select! {
            _ = terminate.recv() => tracing::debug!("SIGTERM: stopping the MCP server"),
            _ = interrupt.recv() => tracing::debug!("SIGINT: stopping the MCP server"),
        }
        stop.cancel();
    }))
}

#[cfg(not(unix))]
fn watch_signals(stop: CancellationToken) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    Ok(tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            stop.cancel();
        }
    }))
}
