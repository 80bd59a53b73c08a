//! `dsh-host mcp --http ADDR`: the tools over MCP's streamable HTTP transport, for a host that
//! runs many agents with one server.
//!
//! rmcp's streamable HTTP service keeps the MCP sessions (`Mcp-Session-Id`, the `initialize`
//! handshake, `DELETE` to end one, idle expiry); each MCP session gets its own [`McpServer`],
//! so each is its own dsh session: its own owner token, tasks and completion notices, kept apart
//! by the host's session guard as on stdio. In front of rmcp, every request passes this
//! module's gate:
//!
//! - the path must be [`ENDPOINT`] (404 otherwise);
//! - an `Origin` header must name a loopback host or an origin allowed with
//!   `--http-allow-origin` (403 otherwise), against DNS rebinding from browsers; requests
//!   without `Origin` (programs, not browsers) pass;
//! - `Authorization: Bearer TOKEN` must carry the server's token, compared in constant time
//!   (401 with `WWW-Authenticate: Bearer` otherwise);
//! - a JSON-RPC request that would run outside a session is refused: tasks and notices live in a
//!   session. One without `Mcp-Session-Id` that is not an `initialize` gets an error saying to
//!   initialize; one of revision 2026-07-28 (which has no sessions: its `_meta` carries the
//!   version) gets the revision's `UnsupportedProtocolVersionError` listing the handshake
//!   revisions, from which a client that speaks both falls back to `initialize`;
//! - an `initialize` beyond `--http-max-sessions` open sessions is refused (HTTP 503, JSON-RPC
//!   error -32000 naming the limit).
//!
//! The listener is bounded (see `connections`): connections are capped, unauthenticated ones
//! apart, the oldest unauthenticated one closed to make room; a client has
//! `--http-header-timeout-ms` to send a request's headers (which also closes a keep-alive
//! connection left idle that long) and `--http-body-timeout-ms` for its body, of at most
//! [`MAX_MESSAGE_BYTES`] bytes. Bodies are read by the stdio transport's decoder (`decode`), so
//! that a message gets the same answer over both transports.
//!
//! A session ends when the client sends `DELETE`, when it was idle for `--http-session-idle-ms`
//! (no message either way), or when the server stops; its running tasks are killed then.
//! SIGINT or SIGTERM stop the server: it stops accepting, ends every session, kills every task,
//! waits for each, and returns.

use std::borrow::Cow;
use std::convert::Infallible;
use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

mod connections;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use rmcp::model::ErrorCode;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio_util::sync::CancellationToken;

use super::decode::{self, Decoded, MAX_MESSAGE_BYTES, Refusal};
use super::{McpOptions, McpServer, mcp_tools, watch_signals};
use crate::engine::ToolHost;
use connections::{Admission, Connections};

/// The path of the MCP endpoint.
pub const ENDPOINT: &str = "/mcp";

/// Sessions open at once by default.
pub const DEFAULT_MAX_SESSIONS: usize = 64;

/// How long a session may be idle (no message either way) before it is closed, by default.
pub const DEFAULT_SESSION_IDLE: Duration = Duration::from_secs(30 * 60);

/// Connections open at once by default.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// Unauthenticated connections open at once by default.
pub const DEFAULT_MAX_UNAUTHENTICATED: usize = 128;

/// How long a client may take to send a request's headers, by default; a keep-alive
/// connection idle this long is closed too (it is waiting for the next request's headers).
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a client may take to send a request's body, by default.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// The environment variable that may hold the bearer token.
pub const TOKEN_ENV: &str = "DSH_HTTP_TOKEN";

/// Connections the kernel queues until they are accepted (capped by `net.core.somaxconn`).
/// std's and tokio's 128 fill in a burst of connections, after which the kernel drops new
/// ones and their clients, an authenticated one too, retry a second later.
const LISTEN_BACKLOG: u32 = 1024;

/// How long accepting waits when it fails with nothing to close (out of descriptors, all of
/// them held by authenticated connections and commands, or out of memory).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// How long accepting waits for a connection closed to make room to give back its descriptor.
const SHED_SETTLE: Duration = Duration::from_millis(1);

/// How long open connections may take to finish once the server stops, on top of the kill
/// grace.
const CONNECTION_DRAIN_SLACK: Duration = Duration::from_secs(2);

/// The JSON-RPC error of an `initialize` beyond the session limit (as for calls in flight).
const SESSIONS_EXCEEDED: ErrorCode = super::LIMIT_EXCEEDED;

/// Where the bearer token comes from.
#[derive(Debug, Clone)]
pub enum TokenSource {
    /// Read from this file (surrounding whitespace trimmed).
    File(PathBuf),
    /// Given on the command line or in `DSH_HTTP_TOKEN`.
    Value(String),
    /// Generate a random one and write it to a new file readable by the user only.
    Generate,
}

/// How the HTTP server is served.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// The address to listen on (port 0: any free port).
    pub addr: SocketAddr,
    /// The bearer token every request must carry.
    pub token: TokenSource,
    /// Browser origins allowed besides loopback ones (`scheme://host[:port]`, lowercase).
    pub allowed_origins: Vec<String>,
    /// Sessions open at once; one more `initialize` is refused.
    pub max_sessions: usize,
    /// A session idle this long is closed and its tasks killed.
    pub session_idle: Duration,
    /// Connections open at once (fewer when the descriptor limit leaves less room).
    pub max_connections: usize,
    /// Unauthenticated connections open at once: beyond it, the oldest is closed.
    pub max_unauthenticated: usize,
    /// How long a client may take to send a request's headers, or leave a connection idle.
    pub header_timeout: Duration,
    /// How long a client may take to send a request's body.
    pub body_timeout: Duration,
    /// Each session's settings (cwd, calls in flight, progress interval).
    pub session: McpOptions,
}

impl HttpOptions {
    /// Defaults for everything but the address.
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            token: TokenSource::Generate,
            allowed_origins: Vec::new(),
            max_sessions: DEFAULT_MAX_SESSIONS,
            session_idle: DEFAULT_SESSION_IDLE,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_unauthenticated: DEFAULT_MAX_UNAUTHENTICATED,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            session: McpOptions::default(),
        }
    }
}

/// Parse `--http`'s value: `HOST:PORT` with an IP address or `localhost` as host, or a bare
/// port on 127.0.0.1.
pub fn parse_listen_addr(s: &str) -> Result<SocketAddr, String> {
    let s = s.trim();
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    if let Ok(addr) = s.parse::<SocketAddr>() {
        return Ok(addr);
    }
    if let Some(port) = s
        .strip_prefix("localhost:")
        .and_then(|p| p.parse::<u16>().ok())
    {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    Err(format!(
        "expected IP:PORT (e.g. 127.0.0.1:8765, [::1]:8765), localhost:PORT or PORT, got {s:?}"
    ))
}

/// Parse an `--http-allow-origin` value: `scheme://host[:port]` as browsers send it, or `null`.
pub fn parse_origin(s: &str) -> Result<String, String> {
    let origin = s.trim().trim_end_matches('/').to_ascii_lowercase();
    if origin == "null" || split_origin(&origin).is_some() {
        Ok(origin)
    } else {
        Err(format!(
            "expected an origin such as https://app.example.com or http://localhost:3000, got {s:?}"
        ))
    }
}

/// Serve the tools over MCP streamable HTTP until SIGINT or SIGTERM, then end every session,
/// kill every running task of `host`, wait for each, and return.
pub async fn serve_http(host: ToolHost, options: HttpOptions) -> anyhow::Result<()> {
    let stop = CancellationToken::new();
    let signals = watch_signals(stop.clone())?;
    let result = serve_http_until(&host, options, stop).await;
    signals.abort();
    host.shutdown().await;
    result
}

/// [`serve_http`] until `stop` is cancelled (without watching signals).
pub async fn serve_http_until(
    host: &ToolHost,
    options: HttpOptions,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let tools = Arc::new(mcp_tools(host.tools())?);
    let token = Token::resolve(&options.token)?;
    let connections = Connections::new(
        descriptor_bounded(options.max_connections),
        options.max_unauthenticated,
    );
    let listener = listen(options.addr)
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", options.addr))?;
    let bound = listener
        .local_addr()
        .map_err(|e| anyhow::anyhow!("cannot read the address listened on: {e}"))?;
    if !bound.ip().is_loopback() {
        tracing::warn!(
            "listening on {bound}, which other machines may reach: only the bearer token keeps \
             them out"
        );
    }

    let mut manager = LocalSessionManager::default();
    manager.session_config.keep_alive = Some(options.session_idle);
    let manager = Arc::new(manager);
    let sessions_stop = CancellationToken::new();
    let config = StreamableHttpServerConfig::default()
        .with_cancellation_token(sessions_stop.clone())
        // The gate read the body within MAX_MESSAGE_BYTES; the text it hands on may be longer
        // by the stand-ins of out-of-range numbers, which stdio accepts as well.
        .with_max_request_body_bytes(usize::MAX);
    // rmcp checks the Host header against loopback names (DNS rebinding); a server listening on
    // another address is reached by that address too.
    let config = if bound.ip().is_unspecified() {
        config.disable_allowed_hosts()
    } else if bound.ip().is_loopback() {
        config
    } else {
        let mut hosts = config.allowed_hosts.clone();
        hosts.push(bound.ip().to_string());
        config.with_allowed_hosts(hosts)
    };
    let session = options.session.clone();
    let factory_host = host.clone();
    let service = StreamableHttpService::new(
        move || {
            // rmcp calls this for each new session (and, for header checks, without one); the
            // handler opens its dsh session on its first tool call.
            Ok(McpServer::new(&factory_host, tools.clone(), &session, None))
        },
        manager.clone(),
        config,
    );
    let gate = Arc::new(Gate {
        service,
        manager,
        token: token.secret.clone(),
        allowed_origins: options.allowed_origins.clone(),
        max_sessions: options.max_sessions,
        initializing: tokio::sync::Mutex::new(()),
        body_timeout: options.body_timeout,
    });
    let header_timeout = options.header_timeout;

    // The address line comes last: once it is out, the server is ready.
    if let Some(path) = &token.generated {
        tracing::info!("the HTTP bearer token is in {}", path.display());
        eprintln!("dsh-host: HTTP bearer token written to {}", path.display());
    }
    let url = format!("http://{bound}{ENDPOINT}");
    tracing::info!("serving MCP over HTTP at {url}");
    eprintln!("dsh-host: serving MCP over HTTP at {url}");

    let mut tasks = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    tracing::debug!("HTTP connection from {peer}");
                    let Some(admission) = connections.admit() else {
                        refuse_connection(&stream, peer);
                        continue;
                    };
                    let connection = Connection { stream, admission, header_timeout };
                    tasks.spawn(serve_connection(connection, gate.clone(), stop.clone()));
                }
                Err(e) => accept_failed(&e, &connections).await,
            },
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }

    tracing::info!("stopping the HTTP server: ending every session");
    drop(listener);
    // Ends every session (its handler goes, and with it the session's tasks) and every stream.
    sessions_stop.cancel();
    let grace = Duration::from_secs_f64(host.executor().limits().grace_ms.max(0.0) / 1000.0);
    let drained = tokio::time::timeout(grace + CONNECTION_DRAIN_SLACK, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::debug!("closing HTTP connections still open");
        tasks.shutdown().await;
    }
    token.remove_generated();
    Ok(())
}

/// A socket listening on `addr` with a queue of [`LISTEN_BACKLOG`] connections.
fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    // As std and tokio bind: a restarted server gets its port back at once.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// The soft descriptor limit raised to the hard one, and `requested` connections, or fewer
/// when the limit leaves less room beside the host's own descriptors.
fn descriptor_bounded(requested: usize) -> usize {
    let limit = connections::raise_descriptor_limit();
    let cap = connections::connection_cap(requested, limit);
    if cap < requested
        && let Some(limit) = limit
    {
        tracing::warn!(
            "the descriptor limit of {limit} leaves room for {cap} HTTP connections, fewer than \
             --http-max-connections {requested}: raise the hard limit (ulimit -Hn, or systemd's \
             LimitNOFILE=) to serve more"
        );
    }
    cap
}

/// After a failed `accept`: out of descriptors, close the oldest unauthenticated connection for
/// one (rather than wait while it holds it); else wait a little rather than spin.
async fn accept_failed(error: &std::io::Error, connections: &Connections) {
    use rustix::io::Errno;
    let errno = Errno::from_io_error(error);
    if matches!(errno, Some(Errno::MFILE | Errno::NFILE)) && connections.shed_one() {
        // Its task closes its socket when it next runs.
        tokio::time::sleep(SHED_SETTLE).await;
        return;
    }
    if matches!(errno, Some(Errno::CONNABORTED | Errno::INTR | Errno::PROTO)) {
        // That connection is gone; the next may come at once.
        tracing::debug!("an HTTP connection went before it was accepted: {error}");
        return;
    }
    tracing::warn!("cannot accept an HTTP connection: {error}");
    tokio::time::sleep(ACCEPT_BACKOFF).await;
}

/// Turn away a connection when every open one is authenticated and there is no room: a 503 if
/// the socket takes it at once, then close.
fn refuse_connection(stream: &TcpStream, peer: SocketAddr) {
    tracing::warn!(
        "refused an HTTP connection from {peer}: every connection is authenticated and the \
         limit is reached (--http-max-connections)"
    );
    let text = "Service Unavailable: too many connections (--http-max-connections)";
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Type: text/plain; \
         charset=utf-8\r\nContent-Length: {}\r\n\r\n{text}",
        text.len()
    );
    // A client that cannot take it at once sees the connection close.
    let _ = stream.try_write(response.as_bytes());
}

/// An accepted connection and its place among the open ones.
struct Connection {
    stream: TcpStream,
    admission: Admission,
    header_timeout: Duration,
}

async fn serve_connection(connection: Connection, gate: Arc<Gate>, stop: CancellationToken) {
    let Connection {
        stream,
        admission,
        header_timeout,
    } = connection;
    let admission = Arc::new(admission);
    let on_requests = admission.clone();
    let service = hyper::service::service_fn(move |request| {
        let gate = gate.clone();
        let admission = on_requests.clone();
        async move { Ok::<_, Infallible>(gate.handle(request, &admission).await) }
    });
    // hyper's header timeout runs whenever the connection waits for a request's headers,
    // which includes a keep-alive connection's wait for its next request.
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    let outcome = tokio::select! {
        outcome = connection.as_mut() => outcome,
        // Dropping the connection closes its socket.
        () = admission.closed() => {
            tracing::debug!("closed an unauthenticated HTTP connection to make room");
            return;
        }
        _ = stop.cancelled() => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(e) = outcome {
        tracing::debug!("HTTP connection ended: {e}");
    }
}

type Body = BoxBody<Bytes, Infallible>;

/// The checks in front of rmcp's service.
struct Gate {
    service: StreamableHttpService<McpServer, LocalSessionManager>,
    manager: Arc<LocalSessionManager>,
    token: String,
    allowed_origins: Vec<String>,
    max_sessions: usize,
    /// Held while an `initialize` is counted and served, so that the limit holds for
    /// concurrent ones.
    initializing: tokio::sync::Mutex<()>,
    body_timeout: Duration,
}

impl Gate {
    async fn handle(&self, request: Request<Incoming>, connection: &Admission) -> Response<Body> {
        if request.uri().path() != ENDPOINT {
            return text_response(
                StatusCode::NOT_FOUND,
                format!("Not Found: the MCP endpoint is {ENDPOINT}"),
            );
        }
        if let Err(reason) = check_origin(request.headers(), &self.allowed_origins) {
            tracing::warn!("refused a request: {reason}");
            return text_response(StatusCode::FORBIDDEN, format!("Forbidden: {reason}"));
        }
        if let Err(given) = check_token(request.headers(), &self.token) {
            return unauthorized(given);
        }
        connection.authenticate();
        if request.method() == Method::DELETE {
            let mut response = self.service.handle(request).await;
            // rmcp says 202 Accepted; the session is gone by now, which clients (the Python
            // SDK) expect to hear as 200 or 204.
            if response.status() == StatusCode::ACCEPTED {
                *response.status_mut() = StatusCode::NO_CONTENT;
            }
            return response;
        }
        if request.method() != Method::POST {
            return self.service.handle(request).await;
        }

        let (parts, body) = request.into_parts();
        let body = match self.read_body(body).await {
            Ok(body) => body,
            Err(response) => return response,
        };
        // The text rmcp reads: the body, or a copy with out-of-range numbers stood in.
        let text = match decode::decode(&body) {
            Decoded::Message { text, .. } => match text {
                Cow::Borrowed(text) => body.slice_ref(text),
                Cow::Owned(text) => Bytes::from(text),
            },
            Decoded::Refused(refusal) => {
                return refusal_response(StatusCode::BAD_REQUEST, &refusal);
            }
            // A malformed notification, answered as rmcp answers notifications.
            Decoded::Ignored => return empty_response(StatusCode::ACCEPTED),
            Decoded::Blank => {
                return text_response(
                    StatusCode::BAD_REQUEST,
                    "Bad Request: the request body is empty; send one JSON-RPC message".into(),
                );
            }
        };
        let in_session = parts.headers.contains_key("mcp-session-id");
        let probe = serde_json::from_slice(&text).ok().and_then(probe);
        let request = Request::from_parts(parts, Full::new(text));
        let Some(probe) = probe else {
            // Not one JSON-RPC request (a notification, a response, a batch): rmcp answers it.
            return self.service.handle(request).await;
        };
        if let Some(requested) = probe.modern {
            return unsupported_version(probe.id, &requested);
        }
        if !in_session && probe.method != "initialize" {
            return jsonrpc_error(
                StatusCode::BAD_REQUEST,
                probe.id,
                rmcp::ErrorData::invalid_request(
                    format!(
                        "Invalid request: {} needs a session; dsh-host keeps each MCP session's \
                         tasks apart, so send initialize first and then its Mcp-Session-Id \
                         with each request",
                        probe.method
                    ),
                    None,
                ),
            );
        }
        if in_session || probe.method != "initialize" {
            return self.service.handle(request).await;
        }
        let _counting = self.initializing.lock().await;
        let open = self.manager.sessions.read().await.len();
        if open >= self.max_sessions {
            tracing::warn!("refused a session: {open} are open");
            return jsonrpc_error(
                StatusCode::SERVICE_UNAVAILABLE,
                probe.id,
                rmcp::ErrorData::new(
                    SESSIONS_EXCEEDED,
                    format!(
                        "too many MCP sessions: the limit is {} (--http-max-sessions); end one \
                         (HTTP DELETE) or wait for an idle one to expire",
                        self.max_sessions
                    ),
                    None,
                ),
            );
        }
        self.service.handle(request).await
    }
}

impl Gate {
    /// A POST's body, read within the body timeout: at most [`MAX_MESSAGE_BYTES`], else the
    /// answer stdio gives a line that long (HTTP 413), once the rest is read and dropped.
    async fn read_body(&self, body: Incoming) -> Result<Bytes, Response<Body>> {
        let mut reading = BodyRead::default();
        let read = tokio::time::timeout(self.body_timeout, reading.read(body)).await;
        if reading.overflowed {
            let refusal = decode::oversized(&reading.collected);
            return Err(closing(refusal_response(
                StatusCode::PAYLOAD_TOO_LARGE,
                &refusal,
            )));
        }
        match read {
            Ok(Ok(())) => Ok(reading.collected.freeze()),
            Ok(Err(e)) => Err(text_response(
                StatusCode::BAD_REQUEST,
                format!("Bad Request: cannot read the request body: {e}"),
            )),
            Err(_) => {
                tracing::debug!(
                    "an HTTP request body took longer than {:?}",
                    self.body_timeout
                );
                Err(closing(text_response(
                    StatusCode::REQUEST_TIMEOUT,
                    format!(
                        "Request Timeout: the body was not sent within {} ms \
                         (--http-body-timeout-ms)",
                        self.body_timeout.as_millis()
                    ),
                )))
            }
        }
    }
}

/// A request body being read: its first [`MAX_MESSAGE_BYTES`], and whether more came.
#[derive(Default)]
struct BodyRead {
    collected: BytesMut,
    overflowed: bool,
}

impl BodyRead {
    /// Read `body` to its end, keeping what fits; what is read stays in `self` should the read
    /// be cut short by the timeout.
    async fn read(&mut self, mut body: Incoming) -> Result<(), hyper::Error> {
        while let Some(frame) = body.frame().await {
            let Ok(data) = frame?.into_data() else {
                continue;
            };
            let room = MAX_MESSAGE_BYTES - self.collected.len();
            if data.len() > room {
                self.overflowed = true;
            }
            // Past the limit, the rest is read and dropped, so that the client, still
            // sending, gets the answer rather than a reset connection.
            self.collected
                .extend_from_slice(&data[..data.len().min(room)]);
        }
        Ok(())
    }
}

/// What the gate needs to know of a JSON-RPC request.
struct Probe {
    id: serde_json::Value,
    method: String,
    /// The per-request protocol version of revision 2026-07-28 on, which rmcp would serve
    /// outside any session.
    modern: Option<String>,
}

/// The request in `message`, if it is one JSON-RPC request.
fn probe(message: serde_json::Value) -> Option<Probe> {
    let serde_json::Value::Object(message) = message else {
        return None;
    };
    let id = message.get("id")?.clone();
    let method = message.get("method")?.as_str()?.to_string();
    let modern = message
        .get("params")
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get("io.modelcontextprotocol/protocolVersion"))
        .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string));
    Some(Probe { id, method, modern })
}

/// The answer to a request of a revision without sessions (2026-07-28 on): the revision's
/// `UnsupportedProtocolVersionError`, listing the revisions with sessions, so that a client
/// that speaks one of them falls back to `initialize`.
fn unsupported_version(id: serde_json::Value, requested: &str) -> Response<Body> {
    use rmcp::model::ProtocolVersion;
    let supported = ProtocolVersion::known_up_to(&ProtocolVersion::LATEST_WITH_INITIALIZE);
    let error = rmcp::ErrorData::new(
        ErrorCode::UNSUPPORTED_PROTOCOL_VERSION,
        format!(
            "Unsupported protocol version {requested}: over HTTP dsh-host serves the revisions \
             with sessions, which keep each client's tasks apart; send initialize with one of them"
        ),
        Some(serde_json::json!({ "requested": requested, "supported": supported })),
    );
    jsonrpc_error(StatusCode::BAD_REQUEST, id, error)
}

/// `Err` with the reason when the request carries an `Origin` that is neither loopback nor
/// allowed.
fn check_origin(headers: &HeaderMap, allowed: &[String]) -> Result<(), String> {
    let mut origins = headers.get_all(header::ORIGIN).iter();
    let Some(origin) = origins.next() else {
        return Ok(());
    };
    if origins.next().is_some() {
        return Err("more than one Origin header".into());
    }
    let Ok(origin) = origin.to_str() else {
        return Err("the Origin header is not text".into());
    };
    let normalized = origin.trim().trim_end_matches('/').to_ascii_lowercase();
    if allowed.contains(&normalized) {
        return Ok(());
    }
    match split_origin(&normalized) {
        Some((_, "localhost" | "127.0.0.1" | "[::1]")) => Ok(()),
        _ => Err(format!(
            "origin {origin:?} is not allowed (loopback origins are; others need \
             --http-allow-origin)"
        )),
    }
}

/// The scheme and host of an origin `scheme://host[:port]` (http or https, no path), lowercase.
fn split_origin(origin: &str) -> Option<(&str, &str)> {
    let (scheme, authority) = origin.split_once("://")?;
    if !matches!(scheme, "http" | "https") {
        return None;
    }
    let (host, port) = if authority.starts_with('[') {
        let end = authority.find(']')?;
        let (host, rest) = authority.split_at(end + 1);
        (host, rest.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    let port_ok = port.is_none_or(|p| !p.is_empty() && p.parse::<u16>().is_ok());
    let host_ok = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(ip) => ip.parse::<std::net::Ipv6Addr>().is_ok(),
        None => {
            !host.is_empty()
                && host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
        }
    };
    (port_ok && host_ok).then_some((scheme, host))
}

/// `Err(true)` when the request carries a wrong token, `Err(false)` when it carries none.
fn check_token(headers: &HeaderMap, expected: &str) -> Result<(), bool> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Err(false);
    };
    let given = value
        .to_str()
        .ok()
        .and_then(|v| v.trim().split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim());
    match given {
        Some(token) if same_secret(token.as_bytes(), expected.as_bytes()) => Ok(()),
        _ => Err(true),
    }
}

/// Compares in time that depends on the expected secret's length only, not on where the given
/// one differs.
fn same_secret(given: &[u8], expected: &[u8]) -> bool {
    let mut diff = u8::from(given.len() != expected.len());
    for (i, e) in expected.iter().enumerate() {
        let g = given.get(i).copied().unwrap_or(!*e);
        diff |= std::hint::black_box(g ^ e);
    }
    std::hint::black_box(diff) == 0
}

fn unauthorized(token_given: bool) -> Response<Body> {
    let challenge = if token_given {
        r#"Bearer realm="dsh-host", error="invalid_token""#
    } else {
        r#"Bearer realm="dsh-host""#
    };
    let mut response = text_response(
        StatusCode::UNAUTHORIZED,
        "Unauthorized: send the server's token as Authorization: Bearer TOKEN".to_string(),
    );
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static(challenge),
    );
    response
}

fn text_response(status: StatusCode, text: String) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(text)).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

fn empty_response(status: StatusCode) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::new()).boxed());
    *response.status_mut() = status;
    response
}

/// `response`, after which the connection is closed (the request's body was not all read).
fn closing(mut response: Response<Body>) -> Response<Body> {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// The JSON-RPC error answering a message that cannot be served, as stdio writes it, sent
/// with HTTP `status`.
fn refusal_response(status: StatusCode, refusal: &Refusal) -> Response<Body> {
    json_response(status, &refusal.to_json())
}

/// A JSON-RPC error response for request `id`, sent with HTTP `status`.
fn jsonrpc_error(
    status: StatusCode,
    id: serde_json::Value,
    error: rmcp::ErrorData,
) -> Response<Body> {
    let body = serde_json::json!({ "jsonrpc": "2.0", "id": id, "error": error });
    json_response(status, &body)
}

fn json_response(status: StatusCode, body: &serde_json::Value) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The server's bearer token, and the file it was written to when generated.
struct Token {
    secret: String,
    generated: Option<PathBuf>,
}

impl Token {
    fn resolve(source: &TokenSource) -> anyhow::Result<Self> {
        match source {
            TokenSource::Value(value) => Ok(Self {
                secret: checked_token(value.trim(), "the given token")?,
                generated: None,
            }),
            TokenSource::File(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    anyhow::anyhow!("cannot read the token file {}: {e}", path.display())
                })?;
                if let Ok(meta) = std::fs::metadata(path)
                    && meta.permissions().mode() & 0o077 != 0
                {
                    tracing::warn!(
                        "the token file {} is readable by other users (chmod 600 it)",
                        path.display()
                    );
                }
                let what = format!("the token file {}", path.display());
                Ok(Self {
                    secret: checked_token(text.trim(), &what)?,
                    generated: None,
                })
            }
            TokenSource::Generate => {
                let secret = dsh_executor::hex::random_token(32)
                    .map_err(|e| anyhow::anyhow!("cannot generate a token: {e}"))?;
                let path = write_token_file(&secret)?;
                Ok(Self {
                    secret,
                    generated: Some(path),
                })
            }
        }
    }

    fn remove_generated(&self) {
        if let Some(path) = &self.generated
            && let Err(e) = std::fs::remove_file(path)
        {
            tracing::warn!("cannot remove the token file {}: {e}", path.display());
        }
    }
}

/// A token must fit an HTTP header as one word: printable ASCII without spaces.
fn checked_token(token: &str, what: &str) -> anyhow::Result<String> {
    if token.is_empty() {
        anyhow::bail!("{what} holds no token");
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        anyhow::bail!(
            "{what} holds characters a bearer token cannot have (printable ASCII only, no spaces)"
        );
    }
    Ok(token.to_string())
}

/// Write a generated token to a new file only its user may read, in `$XDG_RUNTIME_DIR/dsh-host`
/// (else the cache directory, else a per-user directory in `/var/tmp` or the system temp dir),
/// created through the checked directory's descriptor like the cache's files.
fn write_token_file(secret: &str) -> anyhow::Result<PathBuf> {
    let dir = crate::engine::runtime_dir();
    let dir_fd = crate::engine::open_private_dir(&dir).map_err(|e| {
        anyhow::anyhow!("will not put the token file there: {e} (pass --http-token-file)")
    })?;
    let name = format!(
        "http-token-{}-{}",
        std::process::id(),
        dsh_executor::random_hex()
    );
    let path = dir.join(&name);
    let file = crate::engine::create_exclusive(&dir_fd, &name)
        .map_err(|e| anyhow::anyhow!("cannot create the token file {}: {e}", path.display()))?;
    std::fs::File::from(file)
        .write_all(format!("{secret}\n").as_bytes())
        .map_err(|e| anyhow::anyhow!("cannot write the token file {}: {e}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare_equal_only_when_equal() {
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abd", b"abc"));
        assert!(!same_secret(b"ab", b"abc"));
        assert!(!same_secret(b"abcd", b"abc"));
        assert!(!same_secret(b"", b"abc"));
    }

    #[test]
    fn origins_of_loopback_hosts_pass() {
        let headers = |o: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::ORIGIN, HeaderValue::from_str(o).unwrap());
            h
        };
        for ok in [
            "http://localhost",
            "http://localhost:3000",
            "https://127.0.0.1:8765",
            "http://[::1]:9",
            "HTTP://LOCALHOST:1",
        ] {
            assert_eq!(check_origin(&headers(ok), &[]), Ok(()), "{ok}");
        }
        for bad in [
            "http://evil.example",
            "http://localhost.evil.example",
            "http://127.0.0.1.evil.example:80",
            "null",
            "file://localhost",
            "http://localhost:notaport",
            "http://user@localhost",
            "http://localhost/path",
        ] {
            assert!(check_origin(&headers(bad), &[]).is_err(), "{bad}");
        }
        let allowed = vec![parse_origin("https://App.Example.com/").unwrap()];
        assert_eq!(
            check_origin(&headers("https://app.example.com"), &allowed),
            Ok(())
        );
        assert!(check_origin(&headers("http://app.example.com"), &allowed).is_err());
        assert_eq!(check_origin(&HeaderMap::new(), &[]), Ok(()));
    }

    #[test]
    fn listen_addresses_default_to_loopback() {
        assert_eq!(
            parse_listen_addr("8765").unwrap(),
            "127.0.0.1:8765".parse().unwrap()
        );
        assert_eq!(
            parse_listen_addr("localhost:0").unwrap(),
            "127.0.0.1:0".parse().unwrap()
        );
        assert_eq!(
            parse_listen_addr("[::1]:80").unwrap(),
            "[::1]:80".parse().unwrap()
        );
        assert!(parse_listen_addr("example.com:80").is_err());
        assert!(parse_listen_addr("127.0.0.1:99999").is_err());
    }

    #[test]
    fn bearer_tokens_are_checked() {
        let headers = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, HeaderValue::from_str(v).unwrap());
            h
        };
        assert_eq!(check_token(&headers("Bearer s3cret"), "s3cret"), Ok(()));
        assert_eq!(check_token(&headers("bearer  s3cret "), "s3cret"), Ok(()));
        assert_eq!(check_token(&headers("Bearer s3cre"), "s3cret"), Err(true));
        assert_eq!(check_token(&headers("Basic s3cret"), "s3cret"), Err(true));
        assert_eq!(check_token(&HeaderMap::new(), "s3cret"), Err(false));
    }
}
