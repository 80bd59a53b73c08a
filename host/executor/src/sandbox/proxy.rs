//! The host's side of `--sandbox-allow-net`: an HTTP proxy that lets a sandboxed command reach
//! the allowed hosts ([`super::allow_net`]) and nothing else.
//!
//! Each command's spawn helper listens on `127.0.0.1:<port>` inside the command's own network
//! namespace, where nothing else beyond its loopback is reachable, and hands the listening socket
//! to the host ([`crate::protocol::Report::Proxy`]). The host accepts on it here, for as long as
//! the command runs, and connects out from its own network: a `CONNECT host:port` becomes a
//! tunnel (HTTPS), a plain-HTTP request in absolute form (`GET http://host/path`) is forwarded
//! with `Connection: close`. A refused host gets `403` and is recorded as the command's denial,
//! which its result then names; the command's bytes are never changed but the forwarded
//! request's head.

use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::allow_net::{Host, HostPattern};
use super::log::DenialLog;
use super::upstream::{Upstream, Upstreams};
use crate::{Denial, DenialReason, DeniedAccess};

/// The longest request head the proxy reads.
const MAX_HEAD: usize = 32 * 1024;
/// How long a client has to send its request head.
const HEAD_WAIT: Duration = Duration::from_secs(30);
/// How long connecting to an allowed host may take, every address it resolves to included.
const CONNECT_WAIT: Duration = Duration::from_secs(30);
/// How long connecting to one of its addresses may take before the next is tried.
const ADDRESS_WAIT: Duration = Duration::from_secs(10);
/// Connections one command may have open through the proxy at once (fewer where the host's
/// share for all commands is small: a quarter of it); more wait to be accepted.
const MAX_CONNECTIONS: usize = 256;
/// Name lookups in progress at once, for every command together: each holds a thread of the
/// host's blocking pool until the resolver answers, however long that takes.
const MAX_LOOKUPS: usize = 8;
/// Name lookups in progress at once for one command.
const COMMAND_LOOKUPS: usize = 2;

/// What every command's proxy of one executor shares: the allowed hosts, and the host's
/// descriptors and resolver threads, which no command may take all of.
#[derive(Debug)]
pub(crate) struct Proxy {
    allowed: Vec<HostPattern>,
    /// The proxies of the host's own environment, gone through to reach an allowed host.
    upstreams: Upstreams,
    /// Sized when the first command is served, from the descriptor limit then (a server raises
    /// its own after the executor is made).
    pool: std::sync::OnceLock<Pool>,
    lookups: Arc<Semaphore>,
}

/// The connections every command's proxy may hold together, and one command's.
#[derive(Debug)]
struct Pool {
    /// One permit a connection (two descriptors: the command's and the host's).
    connections: Arc<Semaphore>,
    per_command: usize,
}

impl Proxy {
    /// The proxy letting commands reach `allowed`, through `upstreams` where they name one.
    pub(crate) fn new(allowed: Vec<HostPattern>, upstreams: Upstreams) -> Proxy {
        Proxy {
            allowed,
            upstreams,
            pool: std::sync::OnceLock::new(),
            lookups: Arc::new(Semaphore::new(MAX_LOOKUPS)),
        }
    }

    /// At most an eighth of the host's descriptors held by connections through every proxy (two
    /// descriptors each: from 16 to 4096 connections), a quarter of those, and at most
    /// [`MAX_CONNECTIONS`], by one command's.
    fn pool(&self) -> &Pool {
        self.pool.get_or_init(|| {
            let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile)
                .current
                .unwrap_or(1 << 20);
            let connections = usize::try_from(soft / 16).unwrap_or(4096).clamp(16, 4096);
            Pool {
                connections: Arc::new(Semaphore::new(connections)),
                per_command: (connections / 4).min(MAX_CONNECTIONS),
            }
        })
    }
}

/// The proxy of one command: it serves until dropped, and then every connection through it
/// ends too.
#[derive(Debug)]
pub(crate) struct Serving(tokio::task::AbortHandle);

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Serves the command whose listening socket is `listener` (in its own network namespace),
/// through `proxy`; what it refuses goes to `denials`. Must be called within the host's
/// runtime.
pub(crate) fn serve(
    listener: OwnedFd,
    proxy: Arc<Proxy>,
    denials: Arc<DenialLog>,
) -> std::io::Result<Serving> {
    let listener = std::net::TcpListener::from(listener);
    listener.set_nonblocking(true)?;
    let listener = TcpListener::from_std(listener)?;
    let per_command = proxy.pool().per_command;
    // This command's share of the name lookups.
    let lookups = Arc::new(Semaphore::new(COMMAND_LOOKUPS));
    let task = tokio::spawn(async move {
        // Dropped with this task: every connection ends with the command's proxy.
        let mut connections = JoinSet::new();
        loop {
            while connections.try_join_next().is_some() {}
            if connections.len() >= per_command {
                connections.join_next().await;
                continue;
            }
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            };
            match accepted {
                Ok((mut client, _)) => {
                    // Taken once a connection is there: an idle command holds none.
                    let Ok(permit) = proxy.pool().connections.clone().try_acquire_owned() else {
                        connections.spawn(async move {
                            let why = "every connection the host's proxy may hold is in use; \
                                       try again later";
                            let _ = answer(&mut client, 503, why).await;
                        });
                        continue;
                    };
                    let (proxy, denials, lookups) =
                        (proxy.clone(), denials.clone(), lookups.clone());
                    connections.spawn(async move {
                        connection(client, &proxy, &denials, &lookups).await;
                        drop(permit);
                    });
                }
                // Short of descriptors or memory for now: another try shortly.
                Err(err)
                    if matches!(
                        err.raw_os_error(),
                        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
                    ) =>
                {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(err) => {
                    tracing::debug!(%err, "the sandbox proxy cannot accept; it stops");
                    return;
                }
            }
        }
    });
    Ok(Serving(task.abort_handle()))
}

/// What a client asked for.
#[derive(Debug, PartialEq, Eq)]
struct Request {
    host: Host,
    port: u16,
    /// For a plain-HTTP request, the head to send the origin; none for a tunnel.
    forward: Option<Vec<u8>>,
}

/// Why a request head was refused (the text of the `400` answer).
#[derive(Debug, PartialEq, Eq)]
struct Malformed(&'static str);

/// Why the proxy answers a request without relaying it: the status and its text, and the denial
/// it records for a host the sandbox refuses.
struct Refusal {
    status: u16,
    why: String,
    denied: Option<Denial>,
}

impl Refusal {
    fn new(status: u16, why: impl Into<String>) -> Refusal {
        Refusal {
            status,
            why: why.into(),
            denied: None,
        }
    }

    /// A host the sandbox refuses: `403`, and the command's denial.
    fn host(request: &Request, why: String) -> Refusal {
        Refusal {
            status: 403,
            why,
            denied: Some(Denial {
                access: DeniedAccess::Connect,
                target: format!("{}:{}", request.host, request.port),
                reason: DenialReason::HostNotAllowed,
            }),
        }
    }
}

async fn connection(
    mut client: TcpStream,
    proxy: &Proxy,
    denials: &DenialLog,
    lookups: &Arc<Semaphore>,
) {
    match open(&mut client, proxy, lookups).await {
        Ok(Some((request, rest, connected))) => relay(client, request, rest, connected).await,
        // The client went away.
        Ok(None) => {}
        Err(refusal) => {
            // Recorded before the answer: the command learns of it no sooner than its result
            // does.
            if let Some(denial) = refusal.denied {
                denials.add(denial);
            }
            let _ = answer(&mut client, refusal.status, &refusal.why).await;
        }
    }
}

/// Reads the client's request and connects to the host it names, if the sandbox allows it: the
/// request, what came after its head, and the connection; none when the client went away first.
async fn open(
    client: &mut TcpStream,
    proxy: &Proxy,
    lookups: &Arc<Semaphore>,
) -> Result<Option<(Request, Vec<u8>, Connected)>, Refusal> {
    let (head, rest) = match tokio::time::timeout(HEAD_WAIT, read_head(client)).await {
        Ok(Ok(Some(got))) => got,
        Ok(Ok(None)) => return Err(Refusal::new(431, "the request head is too long")),
        Ok(Err(_)) => return Ok(None),
        Err(_) => return Err(Refusal::new(408, "no request head in time")),
    };
    let request = parse(&head).map_err(|Malformed(why)| Refusal::new(400, why))?;
    let matched: Vec<&HostPattern> = proxy
        .allowed
        .iter()
        .filter(|pattern| pattern.allows(&request.host))
        .collect();
    if matched.is_empty() {
        let why = format!(
            "{} is not among the hosts this sandbox allows (--sandbox-allow-net)",
            request.host
        );
        return Err(Refusal::host(&request, why));
    }
    // Only through a `*.` pattern: then only global addresses (see `global`).
    let wildcard = matched
        .iter()
        .all(|pattern| matches!(pattern, HostPattern::Beneath(_)));
    let through = proxy
        .upstreams
        .for_host(request.forward.is_none(), &request.host);
    let connecting = connect(
        &request.host,
        request.port,
        wildcard,
        [&proxy.lookups, lookups],
        through,
    );
    match tokio::time::timeout(CONNECT_WAIT, connecting).await {
        Ok(Ok(connected)) => Ok(Some((request, rest, connected))),
        Ok(Err(Unreachable::Address(why))) => {
            let why = format!("{}: {why}", request.host);
            Err(Refusal::host(&request, why))
        }
        Ok(Err(Unreachable::Io(err))) => Err(Refusal::new(
            502,
            format!("cannot reach {}:{}: {err}", request.host, request.port),
        )),
        Ok(Err(Unreachable::Upstream(refused))) => Err(Refusal::new(
            502,
            format!("cannot reach {}:{}: {refused}", request.host, request.port),
        )),
        Err(_) => Err(Refusal::new(
            504,
            format!("no connection to {}:{} in time", request.host, request.port),
        )),
    }
}

/// Carries the exchange once connected: a tunnel both ways, or a forwarded request (its head,
/// then [`relay_closing`]); `rest` is what the client sent after its request head.
async fn relay(mut client: TcpStream, request: Request, rest: Vec<u8>, connected: Connected) {
    let Connected {
        stream: mut upstream,
        early,
    } = connected;
    let sent = match &request.forward {
        Some(head) => upstream.write_all(head).await,
        None => {
            client
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await
        }
    };
    if sent.is_err() || upstream.write_all(&rest).await.is_err() {
        return;
    }
    match request.forward {
        Some(_) => relay_closing(&mut client, &mut upstream, early).await,
        None => {
            if client.write_all(&early).await.is_ok() {
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            }
        }
    }
}

/// Relays a forwarded request's exchange: the client's bytes to the origin as they come, and the
/// origin's back with its response head saying `Connection: close` (1xx heads passed as they
/// are). A client that keeps proxy connections open for requests to any host (as HTTP client
/// libraries do for plain HTTP) then sends no later request down this one, which goes to this
/// origin only.
/// `early` is what came from the origin before (through the host's proxy, with its answer).
async fn relay_closing(client: &mut TcpStream, upstream: &mut TcpStream, early: Vec<u8>) {
    let (mut from_client, mut to_client) = client.split();
    let (mut from_origin, mut to_origin) = upstream.split();
    let requests = async {
        let _ = tokio::io::copy(&mut from_client, &mut to_origin).await;
        let _ = to_origin.shutdown().await;
    };
    let responses = async {
        let mut pending = early;
        loop {
            let (head, rest) = match read_head_after(&mut from_origin, pending).await {
                Ok(Head::Whole(head, rest)) => (head, rest),
                // No head to tell apart (too long, lines ending in a bare line feed, or none
                // before the origin closed): passed on as it came.
                Ok(Head::Unread(bytes)) => {
                    if to_client.write_all(&bytes).await.is_ok() {
                        let _ = tokio::io::copy(&mut from_origin, &mut to_client).await;
                    }
                    break;
                }
                Err(_) => break,
            };
            let interim = head.starts_with(b"HTTP/1.1 1") || head.starts_with(b"HTTP/1.0 1");
            let head = match interim {
                true => [&head[..], b"\r\n\r\n"].concat(),
                false => closing(&head),
            };
            if to_client.write_all(&head).await.is_err() {
                break;
            }
            if interim {
                pending = rest;
                continue;
            }
            if to_client.write_all(&rest).await.is_ok() {
                let _ = tokio::io::copy(&mut from_origin, &mut to_client).await;
            }
            break;
        }
        let _ = to_client.shutdown().await;
    };
    tokio::join!(requests, responses);
}

/// A response head (without its blank line) with its connection headers replaced by
/// `Connection: close`, blank line included.
fn closing(head: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(head.len() + 24);
    for (i, line) in head.split(|&b| b == b'\n').enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let name = line.split(|&b| b == b':').next().unwrap_or_default();
        let name = String::from_utf8_lossy(name);
        if i > 0
            && ["connection", "keep-alive", "proxy-connection"]
                .iter()
                .any(|h| name.trim().eq_ignore_ascii_case(h))
        {
            continue;
        }
        out.extend_from_slice(line);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out
}

/// Reads up to the end of the request head: the head (without its blank line) and what came
/// after it; `None` when the head is longer than [`MAX_HEAD`].
async fn read_head(client: &mut TcpStream) -> std::io::Result<Option<(Vec<u8>, Vec<u8>)>> {
    match read_head_after(client, Vec::with_capacity(1024)).await? {
        Head::Whole(head, rest) => Ok(Some((head, rest))),
        Head::Unread(bytes) if bytes.len() > MAX_HEAD => Ok(None),
        Head::Unread(_) => Err(std::io::ErrorKind::UnexpectedEof.into()),
    }
}

/// What came before a blank line ending with `\r\n`.
pub(super) enum Head {
    /// The head (without its blank line), and what came after it.
    Whole(Vec<u8>, Vec<u8>),
    /// Everything read, where no head ended within [`MAX_HEAD`] bytes or before the stream did.
    Unread(Vec<u8>),
}

/// As [`read_head`], from a stream of which `buf` was read already.
pub(super) async fn read_head_after(
    stream: &mut (impl tokio::io::AsyncRead + Unpin),
    mut buf: Vec<u8>,
) -> std::io::Result<Head> {
    let mut chunk = [0u8; 4096];
    // Where the blank line may start: each read is searched once, not the whole head again.
    let mut searched = 0;
    loop {
        if let Some(end) = buf[searched..].windows(4).position(|w| w == b"\r\n\r\n") {
            let end = searched + end;
            let rest = buf.split_off(end + 4);
            buf.truncate(end);
            return Ok(Head::Whole(buf, rest));
        }
        searched = buf.len().saturating_sub(3);
        if buf.len() > MAX_HEAD {
            return Ok(Head::Unread(buf));
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(Head::Unread(buf));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The request a head (without its blank line) asks for.
fn parse(head: &[u8]) -> Result<Request, Malformed> {
    let head = std::str::from_utf8(head).map_err(|_| Malformed("the request head is not text"))?;
    let mut lines = head.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let mut words = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Err(Malformed("expected METHOD TARGET HTTP/1.x"));
    };
    if !matches!(version, "HTTP/1.1" | "HTTP/1.0") {
        return Err(Malformed("expected HTTP/1.1 or HTTP/1.0"));
    }
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(Malformed("expected a method such as GET or CONNECT"));
    }
    if method == "CONNECT" {
        let (host, port) = authority(target, None)?;
        return Ok(Request {
            host,
            port,
            forward: None,
        });
    }
    let scheme_end = target
        .find("://")
        .ok_or(Malformed("expected an absolute http:// URL, or CONNECT"))?;
    if !target[..scheme_end].eq_ignore_ascii_case("http") {
        return Err(Malformed(
            "only http:// URLs are forwarded; other schemes go through CONNECT",
        ));
    }
    let after = &target[scheme_end + 3..];
    let end = after.find(['/', '?', '#']).unwrap_or(after.len());
    let (host, port) = authority(&after[..end], Some(80))?;
    // Without its fragment; `http://host?query` gives the origin `/?query`.
    let path = after[end..].split('#').next().unwrap_or_default();
    let path = match path.starts_with('/') {
        true => path.to_string(),
        false => format!("/{path}"),
    };
    // The origin is told the host the proxy connects to, whatever `Host` the client gave: a
    // front end serving many hosts routes plain requests by it. (A tunnel to the same front end
    // can still name another site; an allowed host comes with whatever serves its addresses.)
    let named = match port {
        80 => host.to_string(),
        port => format!("{host}:{port}"),
    };
    let mut forward = format!("{method} {path} {version}\r\nHost: {named}\r\n").into_bytes();
    for header in lines {
        let name = header.split(':').next().unwrap_or_default().trim();
        if [
            "host",
            "proxy-connection",
            "proxy-authorization",
            "connection",
            "keep-alive",
        ]
        .iter()
        .any(|h| name.eq_ignore_ascii_case(h))
        {
            continue;
        }
        forward.extend_from_slice(header.as_bytes());
        forward.extend_from_slice(b"\r\n");
    }
    forward.extend_from_slice(b"Connection: close\r\n\r\n");
    Ok(Request {
        host,
        port,
        forward: Some(forward),
    })
}

/// `host:port` (the port may be left out where `default` is given).
fn authority(text: &str, default: Option<u16>) -> Result<(Host, u16), Malformed> {
    if text.contains('@') {
        return Err(Malformed("a user name in the request target is not taken"));
    }
    // The port follows the last colon outside an IPv6 address's brackets.
    let split = match text.rfind(':') {
        Some(colon) if !text[colon..].contains(']') => Some(colon),
        _ => None,
    };
    let (host, port) = match (split, default) {
        (Some(colon), _) => {
            let port = text[colon + 1..]
                .parse::<u16>()
                .ok()
                .filter(|&p| p != 0)
                .ok_or(Malformed("expected a port from 1 to 65535"))?;
            (&text[..colon], port)
        }
        (None, Some(port)) => (text, port),
        (None, None) => return Err(Malformed("expected host:port")),
    };
    let host = Host::parse(host).ok_or(Malformed("expected a host name or an address"))?;
    Ok((host, port))
}

/// Why an allowed host was not connected to.
#[derive(Debug)]
enum Unreachable {
    /// A name allowed only beneath a domain resolved to an address it may not lead to (not a
    /// global one, or one of this machine's own): why.
    Address(&'static str),
    Io(std::io::Error),
    /// The host's proxy would not open the tunnel.
    Upstream(super::upstream::Refused),
}

/// A connection to an allowed host, and what it sent before anything was asked of it (through
/// the host's proxy, along with that proxy's answer).
struct Connected {
    stream: TcpStream,
    early: Vec<u8>,
}

impl From<std::io::Error> for Unreachable {
    fn from(err: std::io::Error) -> Self {
        Unreachable::Io(err)
    }
}

/// A connection to `host:port` from the host's network: the first of its addresses that
/// answers, each given [`ADDRESS_WAIT`]. With `wildcard` (the name is allowed only as one beneath
/// an allowed domain), the name is looked up as absolute (no search domain of the host's
/// resolver appended), and one that resolves to an address other than a global one
/// ([`global`]), or to one of the host's own (a public address on its interfaces, where its
/// services listen), is refused. A lookup holds a permit of each of `lookups` (every
/// command's, this command's).
async fn connect(
    host: &Host,
    port: u16,
    wildcard: bool,
    lookups: [&Arc<Semaphore>; 2],
    through: Option<&Upstream>,
) -> Result<Connected, Unreachable> {
    // Through the host's proxy, a host allowed by itself is handed to it as named (where the
    // machine's own resolver may know no outside names); a name allowed only through `*.` is
    // looked up and checked here all the same, and the tunnel asked for to an address checked.
    if let Some(upstream) = through
        && !wildcard
    {
        let target = match host {
            Host::Address(address) => SocketAddr::new(*address, port).to_string(),
            Host::Name(name) => format!("{name}:{port}"),
        };
        return through_upstream(upstream, &target, lookups).await;
    }
    let addresses: Vec<SocketAddr> = match host {
        Host::Address(address) => vec![SocketAddr::new(*address, port)],
        Host::Name(name) => {
            let name = match wildcard {
                true => format!("{name}."),
                false => name.clone(),
            };
            let (addresses, own) = lookup(lookups, move || {
                let addresses: Vec<SocketAddr> =
                    std::net::ToSocketAddrs::to_socket_addrs(&(name.as_str(), port))?.collect();
                // The host's addresses as they are once the name is known.
                let own = match wildcard {
                    true => Some(own_addresses()?),
                    false => None,
                };
                Ok((addresses, own))
            })
            .await?;
            if let Some(own) = own {
                if !addresses.iter().all(|a| global(a.ip())) {
                    return Err(Unreachable::Address(NOT_GLOBAL));
                }
                if addresses.iter().any(|a| own.contains(&judged_as(a.ip()))) {
                    return Err(Unreachable::Address(OWN));
                }
            }
            addresses
        }
    };
    let Some(upstream) = through else {
        let stream = first_answering(&addresses).await?;
        // Wherever the kernel routed it to this machine itself (an address no interface lists, a
        // local route): the connection ends before a byte is sent.
        if wildcard && to_itself(&stream) {
            return Err(Unreachable::Address(OWN));
        }
        return Ok(Connected {
            stream,
            early: Vec::new(),
        });
    };
    let mut last = Unreachable::Io(no_address());
    for address in addresses {
        match through_upstream(upstream, &address.to_string(), lookups).await {
            Ok(connected) => return Ok(connected),
            Err(unreachable) => last = unreachable,
        }
    }
    Err(last)
}

/// A connection to the first of `addresses` that answers, each given [`ADDRESS_WAIT`]; else
/// the last one's error.
async fn first_answering(addresses: &[SocketAddr]) -> std::io::Result<TcpStream> {
    let mut last = no_address();
    for &address in addresses {
        match tokio::time::timeout(ADDRESS_WAIT, TcpStream::connect(address)).await {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(err)) => last = err,
            Err(_) => last = std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out"),
        }
    }
    Err(last)
}

fn no_address() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::NotFound, "no address")
}

/// A tunnel to `target` through the host's proxy `upstream`: its name looked up as any other
/// ([`lookup`]), each of its addresses given [`ADDRESS_WAIT`] to answer.
async fn through_upstream(
    upstream: &Upstream,
    target: &str,
    lookups: [&Arc<Semaphore>; 2],
) -> Result<Connected, Unreachable> {
    let refused = |err| {
        Unreachable::Upstream(super::upstream::Refused::Unreachable(
            upstream.named.clone(),
            err,
        ))
    };
    let addresses: Vec<SocketAddr> = match upstream.host() {
        (Host::Address(address), port) => vec![SocketAddr::new(*address, port)],
        (Host::Name(name), port) => {
            let name = name.clone();
            lookup(lookups, move || {
                Ok(std::net::ToSocketAddrs::to_socket_addrs(&(name.as_str(), port))?.collect())
            })
            .await
            .map_err(|err| match err {
                Unreachable::Io(err) => refused(err),
                other => other,
            })?
        }
    };
    let stream = first_answering(&addresses).await.map_err(refused)?;
    match tokio::time::timeout(ADDRESS_WAIT, upstream.tunnel(stream, target)).await {
        Ok(Ok((stream, early))) => Ok(Connected { stream, early }),
        Ok(Err(why)) => Err(Unreachable::Upstream(why)),
        Err(_) => Err(refused(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "no answer in time",
        ))),
    }
}

/// Runs `resolve` (a name lookup) on a thread of the blocking pool, holding a permit of each of
/// `lookups` (every command's, this command's) until it returns: a lookup the caller gave up on
/// still counts until the resolver answers.
async fn lookup<T: Send + 'static>(
    lookups: [&Arc<Semaphore>; 2],
    resolve: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T, Unreachable> {
    // This command's first: a command waiting for its own cannot hold everyone's.
    let mine = lookups[1].clone().acquire_owned().await;
    let every = lookups[0].clone().acquire_owned().await;
    let (Ok(mine), Ok(every)) = (mine, every) else {
        return Err(std::io::Error::other("no name lookups any more").into());
    };
    tokio::task::spawn_blocking(move || {
        let _permits = (mine, every);
        resolve()
    })
    .await
    .map_err(std::io::Error::other)?
    .map_err(Unreachable::Io)
}

/// Why a name allowed only through a `*.` pattern was not connected to.
const NOT_GLOBAL: &str = "a name allowed only through a *. pattern resolves to a loopback, \
                          private, link-local or other non-global address (name the host or \
                          the address itself to allow that)";
const OWN: &str = "a name allowed only through a *. pattern resolves to an address of this \
                   machine's own (name the host or the address itself to allow that)";

/// The addresses of the host's interfaces, each as [`judged_as`].
fn own_addresses() -> std::io::Result<std::collections::HashSet<IpAddr>> {
    Ok(if_addrs::get_if_addrs()?
        .iter()
        .map(|interface| judged_as(interface.ip()))
        .collect())
}

/// Whether a connection's two ends have the same address: it goes to this machine itself.
fn to_itself(stream: &TcpStream) -> bool {
    match (stream.local_addr(), stream.peer_addr()) {
        (Ok(local), Ok(peer)) => judged_as(local.ip()) == judged_as(peer.ip()),
        // Unknown ends: not taken for an outside host.
        _ => true,
    }
}

/// The address `address` reaches as far as this machine can tell: an IPv4 address mapped into
/// IPv6 or behind a NAT64 prefix (the well-known one, or the local-use `64:ff9b:1::/48`) is
/// that IPv4 address.
fn judged_as(address: IpAddr) -> IpAddr {
    match address.to_canonical() {
        IpAddr::V6(v6) => {
            let s = v6.segments();
            if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] || s[..3] == [0x64, 0xff9b, 1] {
                let [a, b] = s[6].to_be_bytes();
                let [c, d] = s[7].to_be_bytes();
                return IpAddr::V4(std::net::Ipv4Addr::new(a, b, c, d));
            }
            IpAddr::V6(v6)
        }
        v4 => v4,
    }
}

/// Whether `address` is a global one: not the host itself, its link or a private network
/// (loopback, unspecified, link-local, private, shared, unique-local, site-local, multicast,
/// broadcast, reserved; an IPv4 address mapped into IPv6 or behind the NAT64 prefix is judged as
/// itself). A name beneath an allowed domain whose DNS someone else controls could point at any
/// of these: the host's own services, a cloud metadata service (`169.254.169.254`,
/// `fd00:ec2::254`).
fn global(address: IpAddr) -> bool {
    let v4 = |v4: std::net::Ipv4Addr| {
        let [a, b, c, _] = v4.octets();
        !(v4.is_loopback()
            || v4.is_unspecified()
            || v4.is_link_local()
            || v4.is_private()
            || v4.is_broadcast()
            || a == 0
            || a >= 224
            || (a == 100 && (64..128).contains(&b))
            || (a == 192 && b == 0 && c == 0))
    };
    match judged_as(address) {
        IpAddr::V4(address) => v4(address),
        IpAddr::V6(v6) => {
            let s = v6.segments();
            !(v6.is_loopback()
                || v6.is_unspecified()
                || s[0] & 0xfe00 == 0xfc00
                || s[0] & 0xffc0 == 0xfe80
                || s[0] & 0xffc0 == 0xfec0
                || s[0] & 0xff00 == 0xff00)
        }
    }
}

/// Answers `status` with `why` as a short text body, and closes.
async fn answer(client: &mut TcpStream, status: u16, why: &str) -> std::io::Result<()> {
    let reason = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        _ => "Gateway Timeout",
    };
    let body = format!("dsh-host sandbox proxy: {why}\n");
    let reply = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    client.write_all(reply.as_bytes()).await?;
    client.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_global_addresses_pass_for_a_wildcard() {
        for own in [
            "127.0.0.1",
            "127.8.9.10",
            "0.0.0.0",
            "169.254.169.254",
            "10.1.2.3",
            "172.17.0.1",
            "192.168.1.1",
            "100.100.100.200",
            "192.0.0.1",
            "224.0.0.1",
            "255.255.255.255",
            "240.0.0.1",
            "::1",
            "::",
            "fe80::1",
            "fd00:ec2::254",
            "fc00::1",
            "fec0::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b::7f00:1",
            "64:ff9b:1::a00:1",
        ] {
            assert!(!global(own.parse().unwrap()), "{own}");
        }
        for other in [
            "93.184.216.34",
            "192.0.2.1",
            "2001:db8::1",
            "2606:4700::1111",
            "::ffff:93.184.216.34",
            "64:ff9b::5db8:d822",
            // What the black-box test of the machine's own addresses gives its interface: a
            // global one, so that only the own-address rule refuses it there.
            "203.0.113.7",
        ] {
            assert!(global(other.parse().unwrap()), "{other}");
        }
    }

    fn name(text: &str) -> Host {
        Host::parse(text).unwrap()
    }

    #[test]
    fn a_connect_names_its_host_and_port() {
        assert_eq!(
            parse(b"CONNECT Registry.npmjs.org:443 HTTP/1.1\r\nHost: x").unwrap(),
            Request {
                host: name("registry.npmjs.org"),
                port: 443,
                forward: None
            }
        );
        assert_eq!(
            parse(b"CONNECT [::1]:8443 HTTP/1.1").unwrap().host,
            name("[::1]")
        );
        all_refused(&[
            &b"CONNECT x.org HTTP/1.1"[..],
            b"CONNECT x.org:0 HTTP/1.1",
            b"CONNECT x.org:99999 HTTP/1.1",
            b"CONNECT localhost@127.0.0.2:80 HTTP/1.1",
            b"CONNECT 127.0.0.2#localhost:80 HTTP/1.1",
            b"CONNECT ::1:80 HTTP/1.1",
            b"CONNECT x.org:443 HTTP/2",
            b"CONNECT  x.org:443 HTTP/1.1",
            b"connect x.org:443 HTTP/1.1",
            b"\xff x.org:443 HTTP/1.1",
        ]);
    }

    /// Asserts that each request head in `heads` is refused.
    fn all_refused(heads: &[&[u8]]) {
        for bad in heads {
            assert!(parse(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn a_response_head_tells_the_client_the_connection_closes() {
        assert_eq!(
            String::from_utf8(closing(
                b"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n\
                  Content-Length: 2"
            ))
            .unwrap(),
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n"
        );
        assert_eq!(
            closing(b"HTTP/1.0 204 No Content"),
            b"HTTP/1.0 204 No Content\r\nConnection: close\r\n\r\n"
        );
    }

    #[test]
    fn a_plain_request_is_forwarded_in_origin_form_with_its_connection_closed() {
        let request = parse(
            b"GET http://Example.org:8080/a/b?c=d#frag HTTP/1.1\r\nHost: internal.evil\r\n\
              Proxy-Connection: keep-alive\r\nConnection: keep-alive\r\nProxy-Authorization: x\r\n\
              Accept: */*",
        )
        .unwrap();
        assert_eq!((request.host, request.port), (name("example.org"), 8080));
        assert_eq!(
            String::from_utf8(request.forward.unwrap()).unwrap(),
            "GET /a/b?c=d HTTP/1.1\r\nHost: example.org:8080\r\nAccept: */*\r\n\
             Connection: close\r\n\r\n"
        );
        let bare = parse(b"HEAD http://x.org HTTP/1.0").unwrap();
        assert_eq!(bare.port, 80);
        assert_eq!(
            bare.forward.unwrap(),
            b"HEAD / HTTP/1.0\r\nHost: x.org\r\nConnection: close\r\n\r\n"
        );
        all_refused(&[
            &b"GET /relative HTTP/1.1"[..],
            b"GET https://x.org/ HTTP/1.1",
            b"GET http://localhost@127.0.0.2:80/ HTTP/1.1",
            b"GET http:///path HTTP/1.1",
            b"GET http://x.org:/ HTTP/1.1",
        ]);
    }
}
