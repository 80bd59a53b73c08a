//! `--sandbox-allow-net HOST`: each command reaches the named hosts through the host's HTTP proxy
//! and nothing else. Tried as an attacker would, in the namespace tier, as root and as an
//! unprivileged user, and judged by ground truth: origin servers of the test's own on the host's
//! loopback (one on 127.0.0.1 and ::1, one on 127.0.0.2) record every connection they receive.

#[path = "support/sandbox.rs"]
mod sandbox;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sandbox::{Called, Findings, Mcp, User, World, flags, unshared, without_namespaces, world};

/// The system's Python, reachable by every user (a pyenv shim under /root is not).
const PY: &str = "/usr/bin/python3";

const TIER: &str = "namespaces";

/// What the command's environment names in `NO_PROXY` and `no_proxy`.
const NO_PROXY: &str = "localhost,127.0.0.1,::1";

const FLAG: &str = "--sandbox-allow-net";

/// `mode` in the namespace tier with each of `hosts` allowed.
fn allow<'a>(mode: &'a str, hosts: &[&'a str]) -> Vec<&'a str> {
    let mut f = flags(mode, TIER);
    for host in hosts {
        f.extend([FLAG, host]);
    }
    f
}

/// The result's `[sandbox: …]` line: its last, when there is one.
fn sandbox_line(text: &str) -> Option<&str> {
    text.lines()
        .last()
        .filter(|l| l.starts_with("[sandbox: ") && l.ends_with(']'))
}

/// The line the host adds for a refused host.
fn not_allowed(hostport: &str) -> String {
    format!("[sandbox: connect to {hostport} denied (not an allowed host)]")
}

// ---- origin servers on the host ----------------------------------------------------------------

/// One connection an origin received.
#[derive(Clone, Debug, Default)]
struct Conn {
    /// Its first line: an HTTP request line, or `ECHO x` / `HOLD x` (a tunnel's raw bytes).
    first: String,
    /// An HTTP request's `Host` and `Connection` headers, and the names of its `Proxy-*` ones.
    host: String,
    connection: String,
    proxy_headers: Vec<String>,
    /// Until the peer closed it.
    open: bool,
}

/// A TCP server of the test's own that speaks just enough HTTP/1.1 (a 200 whose body is
/// `origin-<name> <target>`) and echoes raw lines (`ECHO x` and `HOLD x` get
/// `origin-<name> echo x`), recording every connection.
struct Origin {
    name: &'static str,
    port: u16,
    addrs: Vec<IpAddr>,
    log: Arc<Mutex<Vec<Conn>>>,
    seen: Mutex<usize>,
}

impl Origin {
    /// Listens on one port at each of `ips` (the first must bind; the others are skipped where
    /// the machine lacks them, as `::1` without IPv6).
    fn start(name: &'static str, ips: &[&str]) -> Origin {
        'port: for _ in 0..50 {
            let first = TcpListener::bind((ips[0], 0)).unwrap();
            let port = first.local_addr().unwrap().port();
            let mut listeners = vec![first];
            for ip in &ips[1..] {
                match TcpListener::bind((*ip, port)) {
                    Ok(l) => listeners.push(l),
                    Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => continue 'port,
                    Err(_) => {}
                }
            }
            let log = Arc::new(Mutex::new(Vec::new()));
            let addrs = listeners
                .iter()
                .map(|l| l.local_addr().unwrap().ip())
                .collect();
            for listener in listeners {
                let log = log.clone();
                std::thread::spawn(move || {
                    for stream in listener.incoming() {
                        let Ok(stream) = stream else { continue };
                        let index = {
                            let mut log = log.lock().unwrap();
                            log.push(Conn {
                                open: true,
                                ..Conn::default()
                            });
                            log.len() - 1
                        };
                        let log = log.clone();
                        std::thread::spawn(move || serve(stream, index, name, &log));
                    }
                });
            }
            return Origin {
                name,
                port,
                addrs,
                log,
                seen: Mutex::new(0),
            };
        }
        panic!("no port free on all of {ips:?}");
    }

    fn on(&self, ip: &str) -> bool {
        self.addrs.contains(&ip.parse().unwrap())
    }

    /// Returns once every connection made before the call has been accepted: a connection of
    /// the test's own, accepted after them (one accept loop per address, in order).
    fn settle(&self) {
        static N: AtomicU64 = AtomicU64::new(0);
        for ip in &self.addrs {
            let marker = format!("SYNC {}-{}", self.name, N.fetch_add(1, Ordering::SeqCst));
            let mut s = TcpStream::connect((*ip, self.port)).unwrap();
            writeln!(s, "{marker}").unwrap();
            let deadline = Instant::now() + Duration::from_secs(10);
            while !self.log.lock().unwrap().iter().any(|c| c.first == marker) {
                assert!(
                    Instant::now() < deadline,
                    "origin {}: its own sync never arrived",
                    self.name
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }

    /// The connections received since the last look.
    fn fresh(&self) -> Vec<Conn> {
        self.settle();
        let log = self.log.lock().unwrap();
        let mut seen = self.seen.lock().unwrap();
        let new = log[*seen..]
            .iter()
            .filter(|c| !c.first.starts_with("SYNC "))
            .cloned()
            .collect();
        *seen = log.len();
        new
    }

    /// The connection whose first line is `first`, if any arrived.
    fn find(&self, first: &str) -> Option<Conn> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .find(|c| c.first == first)
            .cloned()
    }
}

fn update(log: &Mutex<Vec<Conn>>, index: usize, f: impl FnOnce(&mut Conn)) {
    if let Ok(mut log) = log.lock() {
        f(&mut log[index]);
    }
}

fn serve(stream: TcpStream, index: usize, name: &'static str, log: &Mutex<Vec<Conn>>) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let Ok(read) = stream.try_clone() else {
        update(log, index, |c| c.open = false);
        return;
    };
    let mut reader = BufReader::new(read);
    let mut writer = stream;
    let mut line = || -> Option<String> {
        let mut buf = Vec::new();
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(String::from_utf8_lossy(&buf).trim_end().to_string()),
        }
    };
    let first = line().unwrap_or_default();
    update(log, index, |c| c.first = first.clone());
    if first.starts_with("SYNC ") {
        while line().is_some() {}
    } else if first.starts_with("ECHO ") || first.starts_with("HOLD ") {
        // A tunnel held open is held as long as its peer keeps it: no timeout.
        if first.starts_with("HOLD ") {
            let _ = writer.set_read_timeout(None);
        }
        let mut next = Some(first);
        while let Some(l) = next {
            if let Some(rest) = l.strip_prefix("ECHO ").or(l.strip_prefix("HOLD "))
                && writer
                    .write_all(format!("origin-{name} echo {rest}\n").as_bytes())
                    .is_err()
            {
                break;
            }
            next = line();
        }
    } else if !first.is_empty() {
        let (mut host, mut connection, mut proxy) = (String::new(), String::new(), Vec::new());
        while let Some(h) = line() {
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                let k = k.trim().to_ascii_lowercase();
                match k.as_str() {
                    "host" => host = v.trim().to_string(),
                    "connection" => connection = v.trim().to_string(),
                    _ if k.starts_with("proxy-") => proxy.push(k),
                    _ => {}
                }
            }
        }
        update(log, index, |c| {
            c.host = host;
            c.connection = connection;
            c.proxy_headers = proxy;
        });
        let target = first.split(' ').nth(1).unwrap_or("");
        let body = format!("origin-{name} {target}\n");
        // An origin that keeps connections open whatever the request said.
        let keep = target.contains("/keepalive");
        let _ = writer.write_all(
            format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
                 Connection: {}\r\n\r\n{body}",
                body.len(),
                if keep { "keep-alive" } else { "close" }
            )
            .as_bytes(),
        );
        let _ = writer.flush();
        if !keep {
            let _ = writer.shutdown(Shutdown::Write);
        }
        // Until the peer is done, so that the proxy reads the whole answer.
        let mut sink = [0u8; 1024];
        while matches!(writer.read(&mut sink), Ok(n) if n > 0) {}
    }
    update(log, index, |c| c.open = false);
}

/// Whether neither origin got a connection since it was last asked.
fn nothing_reached(a: &Origin, b: &Origin) -> bool {
    a.fresh().is_empty() && b.fresh().is_empty()
}

fn firsts(conns: &[Conn]) -> Vec<&str> {
    conns.iter().map(|c| c.first.as_str()).collect()
}

/// Waits (polling, up to `secs`) for `cond`; whether it came.
fn eventually(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if cond() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ---- the clients, in Python, inside the sandbox -----------------------------------------------

/// Helpers every command's Python starts with: `fetch` (urllib, which reads the proxy
/// environment), and hand-written requests to the proxy (`connect`, `get`, `show`), each
/// printing `RESULT <label> <status> <repr of the body>`; a `CONNECT` answered 200 sends
/// `ECHO <label>` through the tunnel and reads the echo.
const PRELUDE: &str = r#"
import http.client, os, socket, sys, time, urllib.error, urllib.request
def through_proxy():
    # NO_PROXY names localhost and 127.0.0.1: a client would reach the host's servers there
    # directly (that is, not at all). These tests go through the proxy on purpose.
    for k in ('NO_PROXY', 'no_proxy'):
        os.environ.pop(k, None)
def proxy_addr():
    p = os.environ['HTTP_PROXY'].split('://', 1)[1].rstrip('/')
    h, port = p.rsplit(':', 1)
    return h, int(port)
def out(label, status, body):
    print('RESULT', label, status, repr(body), flush=True)
def ask(data, echo=None):
    s = socket.create_connection(proxy_addr(), timeout=5)
    try:
        s.sendall(data)
        buf = b''
        while b'\r\n\r\n' not in buf:
            c = s.recv(65536)
            if not c:
                break
            buf += c
        head, _, rest = buf.partition(b'\r\n\r\n')
        words = head.split(b' ', 2)
        status = words[1].decode() if head.startswith(b'HTTP/') and len(words) > 1 else 'none'
        length = None
        for line in head.split(b'\r\n')[1:]:
            k, _, v = line.partition(b':')
            if k.strip().lower() == b'content-length':
                length = int(v.strip())
        if status == '200' and data.startswith(b'CONNECT'):
            if echo is not None:
                s.sendall(echo + b'\n')
                while b'\n' not in rest:
                    c = s.recv(65536)
                    if not c:
                        break
                    rest += c
        elif length is not None:
            while len(rest) < length:
                c = s.recv(65536)
                if not c:
                    break
                rest += c
        else:
            s.settimeout(2)
            try:
                while True:
                    c = s.recv(65536)
                    if not c:
                        break
                    rest += c
            except OSError:
                pass
        return status, rest.decode('utf-8', 'replace')
    finally:
        s.close()
def show(label, data, echo=None):
    try:
        status, body = ask(data, echo)
    except Exception as e:
        status, body = 'error', repr(e)
    out(label, status, body)
def connect(label, target, host=None):
    head = 'CONNECT ' + target + ' HTTP/1.1\r\nHost: ' + (host or target) + '\r\n\r\n'
    show(label, head.encode('latin-1'), b'ECHO ' + label.encode())
def get(label, target, host, extra=''):
    head = 'GET ' + target + ' HTTP/1.1\r\nHost: ' + host + '\r\n' + extra + 'Connection: close\r\n\r\n'
    show(label, head.encode('latin-1'))
def fetch(label, url):
    try:
        r = urllib.request.urlopen(url, timeout=8)
        status, body = str(r.status), r.read().decode('utf-8', 'replace')
    except urllib.error.HTTPError as e:
        status, body = str(e.code), e.read().decode('utf-8', 'replace')
    except Exception as e:
        status, body = 'error', repr(e)
    out(label, status, body)
def direct(label, host, port):
    try:
        s = socket.create_connection((host, port), timeout=3)
        s.sendall(b'ECHO ' + label.encode() + b'\n')
        out(label, 'connected', s.recv(100).decode('utf-8', 'replace'))
    except Exception as e:
        out(label, 'error', repr(e))
def tunnel(target):
    s = socket.create_connection(proxy_addr(), timeout=8)
    s.sendall(('CONNECT ' + target + ' HTTP/1.1\r\nHost: ' + target + '\r\n\r\n').encode())
    buf = b''
    while b'\r\n\r\n' not in buf:
        c = s.recv(65536)
        if not c:
            raise SystemExit('the proxy closed: %r' % buf)
        buf += c
    if buf.split(b' ')[1] != b'200':
        raise SystemExit('refused: %r' % buf)
    s.settimeout(None)
    return s
"#;

/// `code` (after the prelude) as a shell command; `PORT_A` and `PORT_B` stand for the origins'
/// ports.
fn py(code: &str, a: &Origin, b: &Origin) -> String {
    let code = code
        .replace("PORT_A", &a.port.to_string())
        .replace("PORT_B", &b.port.to_string());
    format!("{PY} - <<'PYEOF'\n{PRELUDE}\n{code}\nPYEOF\n")
}

/// A `RESULT` line's status and body (its Python `repr`).
#[derive(Debug, Clone, Default)]
struct Res {
    status: String,
    body: String,
}

impl Res {
    fn ok(&self) -> bool {
        self.status == "200"
    }
    fn from(&self, origin: &Origin) -> bool {
        self.body.contains(&format!("origin-{} ", origin.name))
    }
}

fn results(text: &str) -> BTreeMap<String, Res> {
    text.lines()
        .filter_map(|l| l.strip_prefix("RESULT "))
        .filter_map(|l| {
            let mut parts = l.splitn(3, ' ');
            let label = parts.next()?.to_string();
            let status = parts.next()?.to_string();
            let body = parts.next().unwrap_or_default().to_string();
            Some((label, Res { status, body }))
        })
        .collect()
}

/// One call: what it printed and its results by label (a missing label is status `missing`).
struct Ran {
    called: Called,
    res: BTreeMap<String, Res>,
}

impl Ran {
    fn get(&self, label: &str) -> Res {
        self.res.get(label).cloned().unwrap_or(Res {
            status: "missing".into(),
            body: String::new(),
        })
    }
    fn line(&self) -> Option<&str> {
        sandbox_line(&self.called.text)
    }
}

fn run(w: &World, f: &[&str], code: &str, a: &Origin, b: &Origin) -> Ran {
    let called = w.call(f, &py(code, a, b)).ran();
    let res = results(&called.text);
    Ran { called, res }
}

fn who(user: User) -> String {
    format!("{user:?}")
}

// ---- the tests ---------------------------------------------------------------------------------

/// An allowed host is reached through the proxy, by urllib's absolute-form GET and through a
/// CONNECT tunnel that carries bytes both ways; the environment names the proxy; the command's
/// own server is reached directly (NO_PROXY), and a direct try at the host's server is not; no
/// sandbox line. In both modes, with the network flag left out, `off` and `loopback`.
#[test]
fn an_allowed_host_is_reached_through_the_proxy_only() {
    let a = Origin::start("a", &["127.0.0.1", "::1"]);
    let b = Origin::start("b", &["127.0.0.2"]);
    let code = r#"
for k in ('HTTP_PROXY', 'HTTPS_PROXY', 'http_proxy', 'https_proxy', 'ALL_PROXY', 'NO_PROXY', 'no_proxy'):
    print('ENV', k, os.environ.get(k, '<unset>'))
import http.server, threading
class Own(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'own-server'
        self.send_response(200)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
own = http.server.HTTPServer(('127.0.0.1', 0), Own)
threading.Thread(target=own.serve_forever, daemon=True).start()
fetch('own', 'http://127.0.0.1:%d/' % own.server_address[1])
fetch('direct', 'http://localhost:PORT_A/direct')
through_proxy()
fetch('get', 'http://localhost:PORT_A/via-get')
get('raw-get', 'http://localhost:PORT_A/raw-get', 'localhost:PORT_A', 'Proxy-Authorization: Basic c2VjcmV0\r\n')
try:
    c = http.client.HTTPConnection(*proxy_addr(), timeout=8)
    c.set_tunnel('localhost', PORT_A)
    c.request('GET', '/via-tunnel')
    r = c.getresponse()
    out('tunnel-get', r.status, r.read().decode())
except Exception as e:
    out('tunnel-get', 'error', repr(e))
connect('tunnel-echo', 'localhost:PORT_A')
"#;
    let cases: [(User, &str, Option<&str>); 4] = [
        (User::Root, "workspace-write", None),
        (User::Root, "read-only", Some("off")),
        (User::Nobody, "read-only", None),
        (User::Nobody, "workspace-write", Some("loopback")),
    ];
    for (user, mode, network) in cases {
        let w = world(user);
        let mut f = allow(mode, &["localhost"]);
        if let Some(network) = network {
            f.extend(["--sandbox-network", network]);
        }
        a.fresh();
        b.fresh();
        let r = run(&w, &f, code, &a, &b);
        let case = format!("{user:?} {mode} {network:?}: {:?}", r.called);
        // The environment: one proxy, named five ways, and the local exemptions.
        let env: BTreeMap<&str, &str> = r
            .called
            .text
            .lines()
            .filter_map(|l| l.strip_prefix("ENV "))
            .filter_map(|l| l.split_once(' '))
            .collect();
        let proxy = env.get("HTTP_PROXY").copied().unwrap_or("<missing>");
        let port = proxy.strip_prefix("http://127.0.0.1:").unwrap_or("");
        assert!(
            !port.is_empty() && port.parse::<u16>().is_ok(),
            "HTTP_PROXY={proxy}: {case}"
        );
        for k in ["HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"] {
            assert_eq!(env.get(k).copied(), Some(proxy), "{k}: {case}");
        }
        for k in ["NO_PROXY", "no_proxy"] {
            assert_eq!(env.get(k).copied(), Some(NO_PROXY), "{k}: {case}");
        }
        // The command's own server, directly; the host's server at localhost, not directly.
        let own = r.get("own");
        assert!(own.ok() && own.body.contains("own-server"), "{case}");
        assert_eq!(r.get("direct").status, "error", "{case}");
        // Through the proxy.
        let get = r.get("get");
        assert!(
            get.ok() && get.from(&a) && get.body.contains("/via-get"),
            "{case}"
        );
        assert!(r.get("raw-get").ok() && r.get("raw-get").from(&a), "{case}");
        // Origin-form through the tunnel: the origin sees exactly what the client sent.
        let tg = r.get("tunnel-get");
        assert!(
            tg.ok() && tg.body.contains("origin-a /via-tunnel"),
            "{case}"
        );
        let te = r.get("tunnel-echo");
        assert!(
            te.ok() && te.body.contains("origin-a echo tunnel-echo"),
            "{case}"
        );
        assert_eq!(r.line(), None, "{case}");
        // Ground truth.
        let got = a.fresh();
        let seen = firsts(&got);
        assert!(
            !seen.iter().any(|f| f.contains("/direct")),
            "{seen:?}: {case}"
        );
        let forwarded = got
            .iter()
            .find(|c| c.first.contains("/via-get"))
            .unwrap_or_else(|| panic!("no forwarded GET in {seen:?}: {case}"));
        assert!(
            forwarded.connection.eq_ignore_ascii_case("close"),
            "forwarded with Connection: close: {forwarded:?}"
        );
        let raw = got
            .iter()
            .find(|c| c.first.contains("/raw-get"))
            .unwrap_or_else(|| panic!("no raw GET in {seen:?}: {case}"));
        assert!(
            raw.proxy_headers.is_empty(),
            "Proxy-* headers reached the origin: {raw:?}"
        );
        assert!(
            seen.contains(&"GET /via-tunnel HTTP/1.1"),
            "{seen:?}: {case}"
        );
        assert!(seen.contains(&"ECHO tunnel-echo"), "{seen:?}: {case}");
        assert!(b.fresh().is_empty(), "{case}");
    }
}

/// A host not allowed gets 403 and the result's line naming it, by urllib and by CONNECT, and
/// its server receives nothing; the same request with that host allowed reaches it (the test
/// can fail).
#[test]
fn a_host_not_allowed_gets_403_a_line_and_no_connection() {
    let a = Origin::start("a", &["127.0.0.1", "::1"]);
    let b = Origin::start("b", &["127.0.0.2"]);
    let refused = not_allowed(&format!("127.0.0.2:{}", b.port));
    for user in User::ALL {
        let w = world(user);
        let f = allow("workspace-write", &["localhost"]);
        for (label, code) in [
            (
                "urllib",
                "through_proxy(); fetch('x', 'http://127.0.0.2:PORT_B/refused')",
            ),
            (
                "CONNECT",
                "through_proxy(); connect('x', '127.0.0.2:PORT_B')",
            ),
        ] {
            a.fresh();
            b.fresh();
            let r = run(&w, &f, code, &a, &b);
            let case = format!("{user:?} {label}: {:?}", r.called);
            assert_eq!(r.get("x").status, "403", "{case}");
            assert_eq!(r.line(), Some(refused.as_str()), "{case}");
            assert!(b.fresh().is_empty(), "the refused host was reached: {case}");
            assert!(a.fresh().is_empty(), "{case}");
        }
        // Allowed by its address, the same request arrives.
        let r = run(
            &w,
            &allow("workspace-write", &["localhost", "127.0.0.2"]),
            "through_proxy(); fetch('x', 'http://127.0.0.2:PORT_B/allowed')",
            &a,
            &b,
        );
        let case = format!("{user:?} control: {:?}", r.called);
        assert!(r.get("x").ok() && r.get("x").from(&b), "{case}");
        assert_eq!(r.line(), None, "{case}");
        assert!(
            firsts(&b.fresh()).iter().any(|f| f.contains("/allowed")),
            "{case}"
        );
    }
}

/// Around the proxy: direct TCP to the host's servers (by address, by name, over IPv6, bash's
/// /dev/tcp), with the proxy variables unset, DNS over UDP to 8.8.8.8 and a name lookup all
/// reach nothing; a connect beyond loopback is named. Unsandboxed, the direct connect arrives.
#[test]
fn direct_connections_that_bypass_the_proxy_reach_nothing() {
    let a = Origin::start("a", &["127.0.0.1", "::1"]);
    let b = Origin::start("b", &["127.0.0.2"]);
    let code = r#"
for k in list(os.environ):
    if k.lower().endswith('_proxy'):
        del os.environ[k]
direct('d-a', '127.0.0.1', PORT_A)
direct('d-a6', '::1', PORT_A)
direct('d-name', 'localhost', PORT_A)
direct('d-b', '127.0.0.2', PORT_B)
fetch('d-urllib', 'http://localhost:PORT_A/no-proxy')
q = b'\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03com\x00\x00\x01\x00\x01'
try:
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.settimeout(2)
    u.sendto(q, ('8.8.8.8', 53))
    out('dns', 'answered', u.recv(512))
except Exception as e:
    out('dns', 'error', repr(e))
try:
    out('resolve', 'answered', socket.getaddrinfo('example.com', 80))
except Exception as e:
    out('resolve', 'error', repr(e))
direct('d-far', '192.0.2.1', 9)
"#;
    let mut found = Findings::default();
    for user in User::ALL {
        let w = world(user);
        let who = who(user);
        a.fresh();
        b.fresh();
        let devtcp = format!(
            "(echo 'ECHO devtcp' > /dev/tcp/127.0.0.1/{}) 2>/dev/null && echo 'RESULT devtcp \
             connected' || echo 'RESULT devtcp error'\n",
            a.port
        );
        let command = format!("{devtcp}{}", py(code, &a, &b));
        let called = w
            .call(&allow("workspace-write", &["localhost"]), &command)
            .ran();
        let res = results(&called.text);
        for label in [
            "devtcp", "d-a", "d-a6", "d-name", "d-b", "d-urllib", "dns", "resolve", "d-far",
        ] {
            let status = res
                .get(label)
                .map(|r| r.status.as_str())
                .unwrap_or("missing");
            found.check(status == "error", &who, label, &called);
        }
        found.check(
            nothing_reached(&a, &b),
            &who,
            "the host's servers received a connection",
            &called,
        );
        found.check(
            sandbox_line(&called.text).is_some_and(|l| {
                l.contains("connect to 192.0.2.1:9 denied (only loopback is reachable)")
            }),
            &who,
            "no line for the connect beyond loopback",
            &called,
        );
        // Unsandboxed, the direct connect arrives: the check above can fail.
        let called = w
            .call(
                &["--sandbox", "off"],
                &py("direct('d-a', '127.0.0.1', PORT_A)", &a, &b),
            )
            .ran();
        assert!(
            firsts(&a.fresh()).contains(&"ECHO d-a"),
            "[{who}] control: {called:?}"
        );
    }
    found.done();
}

/// Names that merely resemble the allowed `localhost` (a suffix, a prefix, a subdomain, its
/// address, its IPv6 address) are refused with 403 and a line naming them as the request gave
/// them, lowercased; the allowed name in capitals and with a trailing dot is allowed.
#[test]
fn names_that_only_resemble_an_allowed_one_are_refused() {
    let a = Origin::start("a", &["127.0.0.1", "::1"]);
    let b = Origin::start("b", &["127.0.0.2"]);
    let pa = a.port;
    let mut found = Findings::default();
    for user in User::ALL {
        let w = world(user);
        let who = who(user);
        let f = allow("workspace-write", &["localhost"]);
        for (target, named) in [
            ("localhost.evil.test", "localhost.evil.test"),
            ("EvilLocalhost", "evillocalhost"),
            ("sub.localhost", "sub.localhost"),
            ("localhost..", "localhost.."),
            // A name never allows the addresses it resolves to.
            ("127.0.0.1", "127.0.0.1"),
            ("[::1]", "[::1]"),
        ] {
            a.fresh();
            b.fresh();
            let r = run(
                &w,
                &f,
                &format!("through_proxy(); connect('x', '{target}:PORT_A')"),
                &a,
                &b,
            );
            let attack = format!("CONNECT {target}:{pa}");
            let line = not_allowed(&format!("{named}:{pa}"));
            // `localhost..` may be refused as no host at all (400, no line) as well.
            let status = r.get("x").status;
            let lenient = target == "localhost.." && status == "400";
            found.check(status == "403" || lenient, &who, &attack, &r.called);
            if !lenient {
                found.check(
                    r.line() == Some(line.as_str()),
                    &who,
                    &format!("{attack}: want {line}"),
                    &r.called,
                );
            }
            found.check(
                nothing_reached(&a, &b),
                &who,
                &format!("{attack} reached a server"),
                &r.called,
            );
        }
        // The allowed name, spelled otherwise.
        a.fresh();
        let r = run(
            &w,
            &f,
            "through_proxy()\n\
             connect('upper', 'LOCALHOST:PORT_A')\n\
             connect('dot', 'localhost.:PORT_A')\n\
             connect('upperdot', 'LoCaLhOsT.:PORT_A')\n\
             get('getupper', 'http://LOCALHOST:PORT_A/upper', 'LOCALHOST:PORT_A')",
            &a,
            &b,
        );
        found.check(
            r.get("upper").ok() && r.get("upper").from(&a),
            &who,
            "CONNECT LOCALHOST allowed",
            &r.called,
        );
        found.check(
            r.get("getupper").ok() && r.get("getupper").from(&a),
            &who,
            "GET http://LOCALHOST allowed",
            &r.called,
        );
        for label in ["dot", "upperdot"] {
            // Allowed: the proxy tries it (connected, or failed to resolve: 5xx), never 403.
            let s = r.get(label).status;
            found.check(
                s == "200" || s.starts_with('5'),
                &who,
                &format!("{label} (a trailing dot) allowed"),
                &r.called,
            );
        }
        found.check(
            r.line().is_none(),
            &who,
            "a line for allowed names",
            &r.called,
        );
        found.check(b.fresh().is_empty(), &who, "B reached", &r.called);
    }
    found.done();
}

/// Userinfo in a request target (`localhost@127.0.0.2`, `user:pw@localhost`) gets 400 and no
/// line, in CONNECT and in absolute form, and reaches nothing.
#[test]
fn userinfo_in_a_target_gets_400_and_reaches_nothing() {
    let a = Origin::start("a", &["127.0.0.1", "::1"]);
    let b = Origin::start("b", &["127.0.0.2"]);
    let code = r#"
through_proxy()
connect('u1', 'localhost@127.0.0.2:PORT_B')
connect('u2', 'user@localhost:PORT_A')
get('u3', 'http://localhost@127.0.0.2:PORT_B/u3', '127.0.0.2:PORT_B')
get('u4', 'http://localhost:PORT_A@127.0.0.2:PORT_B/u4', 'localhost:PORT_A')
get('u5', 'http://user:pw@localhost:PORT_A/u5', 'localhost:PORT_A')
"#;
    let mut found = Findings::default();
    for user in User::ALL {
        let w = world(user);
        let who = who(user);
        a.fresh();
        b.fresh();
        let r = run(&w, &allow("read-only", &["localhost"]), code, &a, &b);
        for label in ["u1", "u2", "u3", "u4", "u5"] {
            found.check(r.get(label).status == "400", &who, label, &r.called);
        }
        found.check(r.line().is_none(), &who, "a line for a 400", &r.called);
        found.check(
            nothing_reached(&a, &b),
            &who,
            "a server was reached",
            &r.called,
        );
    }
    found.done();
}

/// Targets that hide the refused 127.0.0.2 behind URL syntax (fragments, queries, backslashes,
/// percent-encoding), other spellings of its address, a relative or https:// target, the Host
/// header, and a second request pipelined behind an allowed one: none reaches it. A target
/// refused by name is refused whatever the Host header says.
#[test]
fn url_tricks_and_host_headers_never_reach_a_refused_host() {
    let a = Origin::start("a", &["127.0.0.1", "::1"]);
    let b = Origin::start("b", &["127.0.0.2"]);
    let code = r#"
through_proxy()
connect('o1', '127.0.0.2#localhost:PORT_B')
connect('o2', '127.0.0.2:PORT_B#localhost')
connect('o3', 'localhost#@127.0.0.2:PORT_B')
connect('o4', '127%2e0%2e0%2e2:PORT_B')
connect('o5', 'localhost:PORT_A', '127.0.0.2:PORT_B')
get('o6', 'http://localhost:PORT_A#@127.0.0.2:PORT_B/', 'localhost:PORT_A')
get('o7', 'http://127.0.0.2:PORT_B\\@localhost:PORT_A/', 'localhost:PORT_A')
get('o8', 'http://127.0.0.2:PORT_B?@localhost:PORT_A/', 'localhost:PORT_A')
get('o9', 'http://127%2e0%2e0%2e2:PORT_B/', 'localhost:PORT_A')
get('o10', 'http://localhost:PORT_A/o10', '127.0.0.2:PORT_B')
get('o11', '/o11', '127.0.0.2:PORT_B')
get('o12', 'https://127.0.0.2:PORT_B/', '127.0.0.2:PORT_B')
get('o13', 'https://localhost:PORT_A/', 'localhost:PORT_A')
show('o14', ('GET http://localhost:PORT_A/first HTTP/1.1\r\nHost: localhost:PORT_A\r\n\r\n'
             'GET http://127.0.0.2:PORT_B/second HTTP/1.1\r\nHost: 127.0.0.2:PORT_B\r\n\r\n').encode())
for spelling in ('127.2', '2130706434', '0x7f.0.0.2', '0177.0.0.2', '127.000.000.002',
                 '0x7f000002', '127.0.0.2.', '[::ffff:127.0.0.2]', '[::ffff:7f00:2]',
                 '[0:0:0:0:0:ffff:127.0.0.2]'):
    connect('ip-' + spelling, spelling + ':PORT_B')
    get('ipget-' + spelling, 'http://' + spelling + ':PORT_B/', spelling + ':PORT_B')
"#;
    let mut found = Findings::default();
    for user in User::ALL {
        let w = world(user);
        let who = who(user);
        a.fresh();
        b.fresh();
        let r = run(
            &w,
            &allow("workspace-write", &["localhost", "127.0.0.1"]),
            code,
            &a,
            &b,
        );
        let mut labels: Vec<String> = (1..=14).map(|n| format!("o{n}")).collect();
        labels.extend(r.res.keys().filter(|k| k.starts_with("ip")).cloned());
        found.check(labels.len() == 14 + 20, &who, "every attack ran", &r.called);
        for label in &labels {
            let res = r.get(label);
            found.check(!res.from(&b), &who, label, &r.called);
        }
        // What names only 127.0.0.2 (or no valid host, or a relative or https:// target) is
        // never answered 200.
        for label in labels
            .iter()
            .filter(|l| !matches!(l.as_str(), "o5" | "o6" | "o10" | "o14"))
        {
            found.check(
                r.get(label).status != "200",
                &who,
                &format!("{label} answered 200"),
                &r.called,
            );
        }
        for label in ["o11", "o12", "o13"] {
            found.check(
                r.get(label).status == "400",
                &who,
                &format!("{label}: relative or https:// target, want 400"),
                &r.called,
            );
        }
        found.check(
            b.fresh().is_empty(),
            &who,
            "the server on 127.0.0.2 was reached",
            &r.called,
        );
        // The target decides, not the Host header: refused, named, nothing reached.
        a.fresh();
        let r = run(
            &w,
            &allow("workspace-write", &["localhost"]),
            "through_proxy(); get('h', 'http://127.0.0.2:PORT_B/h', 'localhost:PORT_A')",
            &a,
            &b,
        );
        found.check(
            r.get("h").status == "403",
            &who,
            "Host header: 403",
            &r.called,
        );
        let line = not_allowed(&format!("127.0.0.2:{}", b.port));
        found.check(
            r.line() == Some(line.as_str()),
            &who,
            "Host header: line",
            &r.called,
        );
        found.check(
            nothing_reached(&a, &b),
            &who,
            "Host header: a server was reached",
            &r.called,
        );
    }
    found.done();
}

/// `*.example.test` allows names strictly beneath example.test, at any depth and in any case
/// (the proxy then fails to resolve them: a 5xx, no line), and refuses example.test itself and
/// names that only end alike.
#[test]
fn a_wildcard_allows_names_strictly_beneath_its_domain_only() {
    let a = Origin::start("a", &["127.0.0.1"]);
    let b = Origin::start("b", &["127.0.0.2"]);
    let mut found = Findings::default();
    for user in User::ALL {
        let w = world(user);
        let who = who(user);
        let f = allow("read-only", &["*.example.test"]);
        for target in [
            "example.test",
            "aexample.test",
            "a.example.test.evil",
            "example.test.a",
        ] {
            let r = run(
                &w,
                &f,
                &format!("through_proxy(); connect('x', '{target}:80')"),
                &a,
                &b,
            );
            found.check(r.get("x").status == "403", &who, target, &r.called);
            let line = not_allowed(&format!("{target}:80"));
            found.check(
                r.line() == Some(line.as_str()),
                &who,
                &format!("{target}: want {line}"),
                &r.called,
            );
        }
        let r = run(
            &w,
            &f,
            "through_proxy()\n\
             connect('a', 'a.example.test:80')\n\
             connect('deep', 'x.y.example.test:80')\n\
             connect('case', 'A.Example.TEST.:80')\n\
             get('get', 'http://a.example.test/', 'a.example.test')",
            &a,
            &b,
        );
        for label in ["a", "deep", "case", "get"] {
            found.check(
                r.get(label).status.starts_with('5'),
                &who,
                &format!("{label}: allowed and unresolvable, want a 5xx"),
                &r.called,
            );
        }
        found.check(
            r.line().is_none(),
            &who,
            "a line for allowed names",
            &r.called,
        );
    }
    found.done();
}

/// An address is allowed as written: `127.0.0.1` and `::1` reach the host's server through the
/// proxy (IPv6 in brackets), and the name `localhost` is not thereby allowed (nor 127.0.0.2).
#[test]
fn addresses_are_allowed_as_written() {
    let a = Origin::start("a", &["127.0.0.1", "::1"]);
    let b = Origin::start("b", &["127.0.0.2"]);
    let v6 = a.on("::1");
    let pa = a.port;
    let mut found = Findings::default();
    for user in User::ALL {
        let w = world(user);
        let who = who(user);
        let f = allow("workspace-write", &["127.0.0.1", "::1"]);
        a.fresh();
        let r = run(
            &w,
            &f,
            "through_proxy()\n\
             connect('v4', '127.0.0.1:PORT_A')\n\
             get('v4get', 'http://127.0.0.1:PORT_A/v4', '127.0.0.1:PORT_A')\n\
             connect('v6', '[::1]:PORT_A')\n\
             get('v6get', 'http://[::1]:PORT_A/v6', '[::1]:PORT_A')",
            &a,
            &b,
        );
        let mut reached = vec!["v4", "v4get"];
        if v6 {
            reached.extend(["v6", "v6get"]);
        }
        for label in reached {
            found.check(
                r.get(label).ok() && r.get(label).from(&a),
                &who,
                label,
                &r.called,
            );
        }
        found.check(r.line().is_none(), &who, "a line", &r.called);
        let seen = a.fresh();
        found.check(
            firsts(&seen).contains(&"ECHO v4") && seen.iter().any(|c| c.first.contains("/v4")),
            &who,
            "the origin saw the IPv4 requests",
            &r.called,
        );
        for (target, named) in [("localhost", "localhost"), ("127.0.0.2", "127.0.0.2")] {
            let r = run(
                &w,
                &f,
                &format!("through_proxy(); connect('x', '{target}:PORT_A')"),
                &a,
                &b,
            );
            found.check(r.get("x").status == "403", &who, target, &r.called);
            let line = not_allowed(&format!("{named}:{pa}"));
            found.check(
                r.line() == Some(line.as_str()),
                &who,
                &format!("{target}: want {line}"),
                &r.called,
            );
            found.check(nothing_reached(&a, &b), &who, target, &r.called);
        }
    }
    found.done();
}

/// Python that opens a tunnel to `localhost:PORT_A` through the proxy, says `HOLD <tag>`,
/// writes `held-<tag>` in the workdir once answered and holds the tunnel for two minutes.
fn holder(tag: &str, a: &Origin, b: &Origin) -> String {
    py(
        &format!(
            "through_proxy()\n\
             open('proxy-{tag}', 'w').write(os.environ['HTTP_PROXY'])\n\
             s = tunnel('localhost:PORT_A')\n\
             s.sendall(b'HOLD {tag}\\n')\n\
             s.recv(100)\n\
             open('held-{tag}', 'w').write('held')\n\
             time.sleep(120)"
        ),
        a,
        b,
    )
}

/// A command's proxy does not outlive it: a tunnel a command's background child holds is
/// closed once the command is over, and one a background task holds is closed when bash_kill
/// ends the task (and held until then); the next command's proxy answers; the proxy's port on
/// the host's own loopback is no way in.
#[test]
fn the_proxy_and_its_tunnels_end_with_the_command() {
    let a = Origin::start("a", &["127.0.0.1", "::1"]);
    let b = Origin::start("b", &["127.0.0.2"]);
    for user in User::ALL {
        let w = world(user);
        let case = who(user);
        let tag = |t: &str| format!("{}-{t}", user.uid());
        let mut mcp = Mcp::start(&w, &allow("workspace-write", &["localhost"]));
        // 1. A foreground command whose background child holds a tunnel.
        let t1 = tag("fg");
        let out = mcp.bash(&format!(
            "cat <<'SHEOF' > hold.sh\n{}SHEOF\n\
             bash hold.sh >/dev/null 2>&1 &\n\
             for i in $(seq 100); do [ -e held-{t1} ] && break; sleep 0.1; done; \
             echo \"held=$(cat held-{t1})\"",
            holder(&t1, &a, &b)
        ));
        assert!(out.contains("held=held"), "{case}: {out}");
        let first = format!("HOLD {t1}");
        assert!(a.find(&first).is_some(), "{case}: the tunnel never arrived");
        assert!(
            eventually(15, || a.find(&first).is_some_and(|c| !c.open)),
            "{case}: a tunnel outlived its command"
        );
        // 2. The next command gets a proxy that answers.
        let out = mcp.bash(&py(
            "through_proxy(); fetch('next', 'http://localhost:PORT_A/next')",
            &a,
            &b,
        ));
        let res = results(&out);
        let next = res.get("next").cloned().unwrap_or_default();
        assert!(next.ok() && next.from(&a), "{case}: {out}");
        // 3. A background task's tunnel: held while the task runs, closed by bash_kill.
        let t3 = tag("bg");
        let started = mcp.tool(
            "bash",
            serde_json::json!({"command": holder(&t3, &a, &b), "description": "x",
                "run_in_background": true}),
        );
        let task = started
            .strip_prefix("started background task ")
            .unwrap_or_else(|| panic!("{case}: {started}"))
            .trim()
            .to_string();
        let third = format!("HOLD {t3}");
        assert!(
            eventually(15, || a.find(&third).is_some()),
            "{case}: the background tunnel never arrived"
        );
        assert!(
            eventually(15, || w.work.join(format!("held-{t3}")).exists()),
            "{case}: the holder never wrote"
        );
        // From the host's own loopback, the proxy's port is no proxy to the allowed host.
        let proxy = std::fs::read_to_string(w.work.join(format!("proxy-{t3}"))).unwrap();
        let port: u16 = proxy
            .trim()
            .strip_prefix("http://127.0.0.1:")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("{case}: {proxy}"));
        if let Ok(mut s) = TcpStream::connect_timeout(
            &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
            Duration::from_secs(2),
        ) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(3)));
            let _ = write!(
                s,
                "CONNECT localhost:{p} HTTP/1.1\r\nHost: localhost:{p}\r\n\r\nECHO from-host\n",
                p = a.port
            );
            let mut sink = [0u8; 4096];
            let _ = s.read(&mut sink);
        }
        a.settle();
        assert!(
            a.find("ECHO from-host").is_none(),
            "{case}: the host's 127.0.0.1:{port} tunnelled to the allowed host"
        );
        assert!(
            a.find(&third).is_some_and(|c| c.open),
            "{case}: the tunnel closed while its task ran"
        );
        let killed = mcp.tool("bash_kill", serde_json::json!({"task_id": task}));
        assert!(killed.contains("killed"), "{case}: {killed}");
        assert!(
            eventually(15, || a.find(&third).is_some_and(|c| !c.open)),
            "{case}: a tunnel outlived its killed task"
        );
        assert!(b.fresh().is_empty(), "{case}");
    }
}

/// A plain-HTTP answer tells the client the connection closes, even from an origin that would
/// keep it open: a client that keeps proxy connections for requests to any host then sends no
/// request meant for another host down a connection that leads to this origin.
#[test]
fn a_forwarded_answer_closes_its_connection() {
    let a = Origin::start("a", &["127.0.0.1"]);
    let b = Origin::start("b", &["127.0.0.2"]);
    for user in User::ALL {
        let w = world(user);
        let ran = run(
            &w,
            &allow("workspace-write", &["localhost"]),
            "import socket\n\
             s = socket.create_connection(proxy_addr())\n\
             s.sendall(b'GET http://localhost:PORT_A/keepalive HTTP/1.1\\r\\nHost: localhost\\r\\n\\r\\n')\n\
             data = b''\n\
             while b'\\r\\n\\r\\n' not in data:\n    data += s.recv(4096)\n\
             print('HEAD', repr(data.split(b'\\r\\n\\r\\n')[0]))",
            &a,
            &b,
        );
        let case = format!("{}: {}", who(user), ran.called.text);
        let head = ran
            .called
            .text
            .lines()
            .find(|l| l.starts_with("HEAD "))
            .unwrap_or_else(|| panic!("{case}"));
        assert!(head.contains("Connection: close"), "{case}");
        assert!(!head.to_ascii_lowercase().contains("keep-alive"), "{case}");
    }
}

/// One command cannot take every connection the host's proxies may hold: with the host's
/// descriptor limit at 1024 (64 connections for all commands, 16 for one), a background task
/// holding 80 tunnels open leaves the next command's proxy its own. Once four such tasks hold
/// all 64, the next command's proxy answers 503 at once rather than leaving it waiting.
#[test]
fn one_command_cannot_take_every_proxy_connection() {
    use std::os::unix::process::CommandExt;
    let a = Origin::start("a", &["127.0.0.1"]);
    let b = Origin::start("b", &["127.0.0.2"]);
    let w = world(User::Root);
    let mut command = w.host(&[
        "mcp",
        "--sandbox",
        "workspace-write",
        "--sandbox-allow-net",
        "localhost",
    ]);
    // SAFETY: only setrlimit, async-signal-safe, between fork and exec.
    unsafe {
        command.pre_exec(|| {
            rustix::process::setrlimit(
                rustix::process::Resource::Nofile,
                rustix::process::Rlimit {
                    current: Some(1024),
                    maximum: Some(1024),
                },
            )
            .map_err(std::io::Error::from)
        });
    }
    let mut mcp = Mcp::from_command(command);
    // A background task opening 80 tunnels, each saying `HOLD <tag>-<n>`.
    let hog = |mcp: &mut Mcp, tag: &str| {
        let code = py(
            &format!(
                "import socket\n\
                 held = []\n\
                 for i in range(80):\n    \
                     s = socket.create_connection(proxy_addr())\n    \
                     s.sendall(b'CONNECT localhost:PORT_A HTTP/1.1\\r\\n\\r\\nHOLD {tag}-%d\\n' % i)\n    \
                     held.append(s)\n\
                 open('{tag}', 'w').close()\n\
                 time.sleep(120)"
            ),
            &a,
            &b,
        );
        let started = mcp.tool(
            "bash",
            serde_json::json!({"command": code, "description": "x", "run_in_background": true}),
        );
        assert!(started.starts_with("started background task "), "{started}");
        let task = started
            .trim()
            .rsplit(' ')
            .next()
            .unwrap_or_default()
            .to_string();
        let first16 = format!("HOLD {tag}-15");
        if !eventually(15, || {
            w.work.join(tag).exists() && a.find(&first16).is_some()
        }) {
            let output = mcp.tool("bash_output", serde_json::json!({ "task_id": task }));
            panic!(
                "the background task's tunnels never arrived: {output}; the origin saw {:?}",
                firsts(&a.fresh())
            );
        }
    };
    hog(&mut mcp, "hog");
    let out = mcp.bash(&py(
        "through_proxy(); fetch('mine', 'http://localhost:PORT_A/mine')",
        &a,
        &b,
    ));
    let mine = results(&out).get("mine").cloned().unwrap_or_default();
    assert!(
        mine.ok() && mine.from(&a),
        "the next command's proxy was starved: {out}"
    );
    a.settle();
    assert!(
        a.find("HOLD hog-16").is_none(),
        "one command held more than its share of the proxy's connections"
    );
    for tag in ["hog2", "hog3", "hog4"] {
        hog(&mut mcp, tag);
    }
    let out = mcp.bash(&py(
        "through_proxy(); fetch('full', 'http://localhost:PORT_A/full')",
        &a,
        &b,
    ));
    let full = results(&out).get("full").cloned().unwrap_or_default();
    assert_eq!(full.status, "503", "with every connection in use: {out}");
}

/// One call of `command` with `--sandbox-allow-net pattern`, the host run in namespaces of its
/// own ([`unshared`]); the result text.
fn unshared_call(
    w: &World,
    command: &str,
    pattern: &str,
    flags: &[&str],
    program: &[&OsStr],
) -> String {
    let args = serde_json::json!({"command": command, "description": "x"}).to_string();
    let direct = w.host(&[
        "call",
        "bash",
        &args,
        "--sandbox",
        "workspace-write",
        "--sandbox-allow-net",
        pattern,
    ]);
    let out = unshared(flags, program, &direct).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A resolver on `127.0.0.1:53` answering every `A` question with `127.0.0.1` (and every other
/// with no answer), for as long as the test runs.
fn loopback_resolver() {
    let socket = std::net::UdpSocket::bind("127.0.0.1:53").expect("port 53 on 127.0.0.1");
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        while let Ok((n, from)) = socket.recv_from(&mut buf) {
            let query = &buf[..n];
            // The header, then one question: its name's labels, its type and class.
            let mut end = 12;
            while end < n && query[end] != 0 {
                end += 1 + usize::from(query[end]);
            }
            if end + 5 > n {
                continue;
            }
            let question = &query[12..end + 5];
            let a = question[question.len() - 4..question.len() - 2] == [0, 1];
            let mut reply = vec![
                query[0],
                query[1],
                0x81,
                0x80,
                0,
                1,
                0,
                u8::from(a),
                0,
                0,
                0,
                0,
            ];
            reply.extend_from_slice(question);
            if a {
                // The name by a pointer to the question's; type A, class IN, no time to live.
                reply.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4, 127, 0, 0, 1]);
            }
            let _ = socket.send_to(&reply, from);
        }
    });
}

/// A name allowed only through `*.` that resolves to a loopback address is refused (whoever
/// controls that domain's DNS could point it at the host's own services), and the same name
/// allowed by itself is reached: the host runs with a resolver that says every name is
/// `127.0.0.1` (in a mount namespace of its own, where `/etc/resolv.conf` names it). Root only.
#[test]
fn a_wildcard_name_that_resolves_to_the_hosts_own_address_is_refused() {
    let a = Origin::start("a", &["127.0.0.1"]);
    let b = Origin::start("b", &["127.0.0.2"]);
    loopback_resolver();
    let w = world(User::Root);
    let resolv = w.work.parent().unwrap().join("resolv.conf");
    std::fs::write(&resolv, "nameserver 127.0.0.1\n").unwrap();
    let fetch = py(
        "through_proxy(); fetch('wild', 'http://a.example.test:PORT_A/wild')",
        &a,
        &b,
    );
    let call = |pattern: &str| {
        let script = "mount --bind \"$0\" /etc/resolv.conf && exec \"$@\"";
        let program = [
            "sh".as_ref(),
            "-c".as_ref(),
            script.as_ref(),
            resolv.as_os_str(),
        ];
        unshared_call(&w, &fetch, pattern, &["-m"], &program)
    };
    let refused = call("*.example.test");
    assert_eq!(
        sandbox_line(&refused),
        Some(not_allowed(&format!("a.example.test:{}", a.port)).as_str()),
        "{refused}"
    );
    a.settle();
    assert!(a.find("GET /wild HTTP/1.1").is_none(), "{refused}");
    // The control: named by itself, the same name is reached at the address it resolves to.
    let reached = call("a.example.test");
    let got = results(&reached).get("wild").cloned().unwrap_or_default();
    assert!(got.ok() && got.from(&a), "{reached}");
    // What the refused case looked for, so that its absence there meant something.
    a.settle();
    assert!(a.find("GET /wild HTTP/1.1").is_some(), "{reached}");
}

/// The host, in a network namespace of its own where one of its interfaces has a global
/// address (`203.0.113.7`, on its loopback interface) and a server listens on every address
/// (`0.0.0.0:8080`), with a resolver that says every name is that address. Arguments: the
/// `resolv.conf` naming the resolver, the file the server logs each request's target to, then
/// the host's command.
const OWN_ADDRESS_WORLD: &str = r#"
import http.server, os, socket, subprocess, sys, threading
resolv, log = sys.argv[1], sys.argv[2]
for cmd in (["ip", "link", "set", "lo", "up"], ["ip", "addr", "add", "203.0.113.7/32", "dev", "lo"]):
    subprocess.run(cmd, check=True)
dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
dns.bind(("127.0.0.1", 53))
def resolve():
    while True:
        query, peer = dns.recvfrom(512)
        end = 12
        while end < len(query) and query[end] != 0:
            end += 1 + query[end]
        question = query[12:end + 5]
        a = question[-4:-2] == b"\0\1"
        reply = query[:2] + b"\x81\x80\0\1\0" + bytes([int(a)]) + b"\0\0\0\0" + question
        if a:
            reply += b"\xc0\x0c\0\1\0\1\0\0\0\0\0\4" + bytes([203, 0, 113, 7])
        dns.sendto(reply, peer)
threading.Thread(target=resolve, daemon=True).start()
class Origin(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        with open(log, "a") as f:
            f.write(self.path + "\n")
        body = b"origin-own " + self.path.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("0.0.0.0", 8080), Origin)
threading.Thread(target=server.serve_forever, daemon=True).start()
subprocess.run(["mount", "--bind", resolv, "/etc/resolv.conf"], check=True)
sys.exit(subprocess.run(sys.argv[3:]).returncode)
"#;

/// A name allowed only through `*.` that resolves to a global address of the host's own (a
/// public address on its interface, where its services listen on every address) is refused,
/// and the same name allowed by itself is reached. Root only.
#[test]
fn a_wildcard_name_that_resolves_to_a_global_address_of_the_host_is_refused() {
    let a = Origin::start("a", &["127.0.0.1"]);
    let b = Origin::start("b", &["127.0.0.2"]);
    let w = world(User::Root);
    let resolv = w.work.parent().unwrap().join("resolv.conf");
    std::fs::write(&resolv, "nameserver 127.0.0.1\n").unwrap();
    let log = w.work.parent().unwrap().join("own-origin.log");
    let fetch = py(
        "through_proxy(); fetch('own', 'http://a.example.test:8080/own')",
        &a,
        &b,
    );
    let call = |pattern: &str| {
        let program = [
            "python3".as_ref(),
            "-c".as_ref(),
            OWN_ADDRESS_WORLD.as_ref(),
            resolv.as_os_str(),
            log.as_os_str(),
        ];
        unshared_call(&w, &fetch, pattern, &["-n", "-m"], &program)
    };
    let seen = || std::fs::read_to_string(&log).unwrap_or_default();
    let refused = call("*.example.test");
    assert_eq!(
        sandbox_line(&refused),
        Some(not_allowed("a.example.test:8080").as_str()),
        "{refused}"
    );
    assert_eq!(seen(), "", "{refused}");
    // The control: named by itself, the same name is reached at the address it resolves to.
    let reached = call("a.example.test");
    let got = results(&reached).get("own").cloned().unwrap_or_default();
    assert!(
        got.ok() && got.body.contains("origin-own /own"),
        "{reached}"
    );
    assert_eq!(seen(), "/own\n", "{reached}");
}

/// A proxy of the test's own, standing for one the host's environment names (as behind a
/// company's firewall): it opens the tunnels it is asked for, and records each request line
/// with its `Proxy-Authorization`.
struct HostsProxy {
    port: u16,
    asked: Arc<Mutex<Vec<String>>>,
}

/// How a [`HostsProxy`] answers.
#[derive(Clone, Copy, PartialEq)]
enum Answers {
    /// `200`, then the tunnel.
    Open,
    /// `200` with the first bytes of the far end in the same write (`EARLY\n`), then the tunnel.
    Early,
    /// `407` to each.
    Refuse,
}

impl HostsProxy {
    fn start(answers: Answers) -> HostsProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let asked = Arc::new(Mutex::new(Vec::new()));
        let log = asked.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut client) = stream else { continue };
                let log = log.clone();
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(client.try_clone().unwrap());
                    let mut line = String::new();
                    let _ = reader.read_line(&mut line);
                    let mut authorization = String::new();
                    loop {
                        let mut header = String::new();
                        if reader.read_line(&mut header).unwrap_or(0) == 0 || header == "\r\n" {
                            break;
                        }
                        if let Some(value) = header.strip_prefix("Proxy-Authorization: ") {
                            authorization = value.trim().to_string();
                        }
                    }
                    log.lock()
                        .unwrap()
                        .push(format!("{} [{authorization}]", line.trim_end()));
                    let target = line.split(' ').nth(1).unwrap_or_default().to_string();
                    let far = match answers {
                        Answers::Refuse => None,
                        _ => TcpStream::connect(&target).ok(),
                    };
                    let Some(mut far) = far else {
                        let _ =
                            client.write_all(b"HTTP/1.1 407 Proxy Authentication Required\r\n\r\n");
                        return;
                    };
                    let _ = match answers {
                        Answers::Early => {
                            client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\nEARLY\n")
                        }
                        _ => client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n"),
                    };
                    let mut back = far.try_clone().unwrap();
                    let mut to_client = client.try_clone().unwrap();
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut back, &mut to_client);
                        let _ = to_client.shutdown(Shutdown::Write);
                    });
                    let _ = std::io::copy(&mut reader, &mut far);
                    let _ = far.shutdown(Shutdown::Write);
                });
            }
        });
        HostsProxy { port, asked }
    }

    fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }
}

/// Where the host's own environment names a proxy (`https_proxy`, `http_proxy`), the sandbox
/// proxy reaches an allowed host through it, tunnels and plain-HTTP requests alike, with the
/// URL's credentials; a refused host is asked of neither; a host `no_proxy` names is reached
/// directly; the proxy's refusal is the command's `502`; and a proxy that cannot be gone
/// through (`socks5://`) refuses to start.
#[test]
fn the_hosts_own_proxy_carries_what_an_allowed_host_is_sent() {
    let a = Origin::start("a", &["127.0.0.1"]);
    let b = Origin::start("b", &["127.0.0.2"]);
    let up = HostsProxy::start(Answers::Open);
    let w = world(User::Nobody);
    let code = "through_proxy(); fetch('plain', 'http://localhost:PORT_A/plain'); \
                connect('tunnel', 'localhost:PORT_A'); \
                fetch('refused', 'http://127.0.0.2:PORT_B/refused')";
    let args = serde_json::json!({"command": py(code, &a, &b), "description": "x"}).to_string();
    let call = |env: &[(&str, String)]| {
        let mut cmd = w.host(&[
            "call",
            "bash",
            &args,
            "--sandbox",
            "workspace-write",
            "--sandbox-allow-net",
            "localhost",
        ]);
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        cmd.output().unwrap()
    };
    let url = format!("http://user:pw@127.0.0.1:{}", up.port);
    let out = call(&[("https_proxy", url.clone()), ("http_proxy", url.clone())]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let got = results(&text);
    let plain = got.get("plain").cloned().unwrap_or_default();
    assert!(plain.ok() && plain.from(&a), "{text}");
    let tunnel = got.get("tunnel").cloned().unwrap_or_default();
    assert!(
        tunnel.ok() && tunnel.body.contains("origin-a echo tunnel"),
        "{text}"
    );
    assert_eq!(
        got.get("refused").map(|r| r.status.as_str()),
        Some("403"),
        "{text}"
    );
    assert_eq!(
        sandbox_line(&text),
        Some(not_allowed(&format!("127.0.0.2:{}", b.port)).as_str()),
        "{text}"
    );
    let through = format!("CONNECT localhost:{} HTTP/1.1 [Basic dXNlcjpwdw==]", a.port);
    assert_eq!(up.asked(), vec![through.clone(), through], "{text}");
    assert!(a.find("GET /plain HTTP/1.1").is_some(), "{text}");
    assert!(a.find("ECHO tunnel").is_some(), "{text}");
    b.settle();
    assert!(b.fresh().is_empty(), "{text}");

    // Named in no_proxy: reached directly.
    let out = call(&[
        ("https_proxy", url.clone()),
        ("http_proxy", url.clone()),
        ("no_proxy", "example.test, .localhost,localhost".to_string()),
    ]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(results(&text).get("tunnel").is_some_and(Res::ok), "{text}");
    assert_eq!(up.asked().len(), 2, "no_proxy: {text}");

    // The host's proxy refusing: the command is told so, for tunnels and plain requests, with
    // no credentials shown.
    let refusing = HostsProxy::start(Answers::Refuse);
    let url = format!("http://TOKEN@127.0.0.1:{}", refusing.port);
    let out = call(&[("https_proxy", url.clone()), ("http_proxy", url.clone())]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    for (label, variable) in [("tunnel", "https_proxy"), ("plain", "http_proxy")] {
        let got = results(&text).get(label).cloned().unwrap_or_default();
        assert_eq!(got.status, "502", "{label}: {text}");
        assert!(got.body.contains("HTTP/1.1 407"), "{label}: {text}");
        assert!(
            got.body
                .contains(&format!("{variable}=http://***@127.0.0.1:")),
            "{label}: {text}"
        );
    }
    assert!(!text.contains("TOKEN"), "{text}");

    // What the far end sent along with the proxy's answer reaches the command first.
    let early = HostsProxy::start(Answers::Early);
    let out = call(&[("https_proxy", format!("http://127.0.0.1:{}", early.port))]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let tunnel = results(&text).get("tunnel").cloned().unwrap_or_default();
    assert_eq!(
        (tunnel.status.as_str(), tunnel.body.as_str()),
        // The body as Python's `repr` prints it.
        ("200", "'EARLY\\n'"),
        "{text}"
    );

    // A proxy the sandbox proxy cannot go through: refused at start, the password unshown.
    let out = call(&[("ALL_PROXY", "socks5://u:secret@127.0.0.1:1080".to_string())]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "--sandbox-allow-net localhost: ALL_PROXY in the host's environment is \
                         socks5://***@127.0.0.1:1080: a socks5 proxy"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("secret"), "{stderr}");
}

/// [`sockets_of`] once it reads the same three times 100 ms apart (the spawn helpers kept ready
/// made again, the last command's let go), or after 10 s.
fn settled_sockets_of(pid: u32) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = (sockets_of(pid), 0);
    while last.1 < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        let now = sockets_of(pid);
        last = if now == last.0 {
            (now, last.1 + 1)
        } else {
            (now, 0)
        };
    }
    last.0
}

fn sockets_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
        })
        .count()
}

/// Each command's proxy listener and its connections are the host's descriptors while the
/// command runs: once it is over, they are closed, however many commands used the proxy.
#[test]
fn the_hosts_descriptors_stay_level_across_proxied_commands() {
    let a = Origin::start("a", &["127.0.0.1"]);
    let b = Origin::start("b", &["127.0.0.2"]);
    let w = world(User::Root);
    let mut mcp = Mcp::start(&w, &allow("workspace-write", &["localhost"]));
    let call = |mcp: &mut Mcp, n: usize| {
        let out = mcp.bash(&py(
            &format!("through_proxy(); fetch('n{n}', 'http://localhost:PORT_A/n{n}')"),
            &a,
            &b,
        ));
        let got = results(&out)
            .get(&format!("n{n}"))
            .cloned()
            .unwrap_or_default();
        assert!(got.ok() && got.from(&a), "{out}");
    };
    call(&mut mcp, 0);
    let pid = mcp.child.id();
    let before = settled_sockets_of(pid);
    for n in 1..=12 {
        call(&mut mcp, n);
    }
    let after = settled_sockets_of(pid);
    assert!(
        after <= before + 2,
        "the host held {before} sockets after one proxied command and {after} after 12 more"
    );
}

/// `--sandbox-allow-net` refuses to start (non-zero, the problem on stderr, nothing run) in the
/// Landlock tier (or auto where namespaces are unavailable), with `--sandbox-network on`, with
/// the sandbox off or left out, and for a pattern that is not a host; the valid combinations
/// start, and `--sandbox off` without it still runs.
#[test]
fn allow_net_refuses_to_start_where_it_cannot_hold() {
    const MARKER: &str = "allow-net-ran";
    let command = format!("touch {MARKER}; echo ran");
    let call = serde_json::json!({"command": command, "description": "x"}).to_string();
    let mut failures = Vec::new();
    for user in User::ALL {
        let w = world(user);
        let check =
            |out: std::process::Output, args: &[&str], needles: &[&str]| -> Option<String> {
                let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
                let marker = w.work.join(MARKER);
                let ran = marker.exists();
                let _ = std::fs::remove_file(&marker);
                let ok = matches!(out.status.code(), Some(c) if c != 0)
                    && out.stdout.is_empty()
                    && !ran
                    && !stderr.contains("unexpected argument")
                    && needles.iter().all(|n| stderr.contains(n));
                (!ok).then(|| {
                format!(
                    "[{user:?}] {args:?}: want a refusal naming {needles:?}; got {:?}, ran: {ran}, \
                     stdout {:?}, stderr {stderr:?}",
                    out.status.code(),
                    String::from_utf8_lossy(&out.stdout)
                )
            })
            };
        let refused = |args: &[&str], needles: &[&str]| -> Option<String> {
            let mut all = vec!["call", "bash", call.as_str()];
            all.extend_from_slice(args);
            check(w.host(&all).output().unwrap(), args, needles)
        };
        let ws = ["--sandbox", "workspace-write", "--sandbox-tier", TIER];
        let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
            (
                vec![
                    "--sandbox",
                    "read-only",
                    "--sandbox-tier",
                    "landlock",
                    FLAG,
                    "localhost",
                ],
                vec![FLAG, "network namespace per command"],
            ),
            (
                vec![
                    "--sandbox",
                    "workspace-write",
                    "--sandbox-tier",
                    TIER,
                    "--sandbox-network",
                    "on",
                    FLAG,
                    "localhost",
                ],
                vec![FLAG, "every host"],
            ),
            (vec!["--sandbox", "off", FLAG, "localhost"], vec![FLAG]),
            (vec![FLAG, "localhost"], vec![FLAG]),
        ];
        for (args, needles) in &cases {
            failures.extend(refused(args, needles));
        }
        for bad in [
            "https://x.org",
            "x.org:443",
            "*",
            "*.",
            "",
            "a b",
            "exa_mple..com",
        ] {
            let mut args = ws.to_vec();
            args.extend([FLAG, bad]);
            let mut needles = vec![FLAG];
            if !bad.is_empty() {
                needles.push(bad);
            }
            failures.extend(refused(&args, &needles));
        }
        if user == User::Nobody {
            // Auto falls back to Landlock where namespaces are unavailable: no proxy there.
            let args = ["--sandbox", "workspace-write", FLAG, "localhost"];
            let mut all = vec!["call", "bash", call.as_str()];
            all.extend_from_slice(&args);
            failures.extend(check(without_namespaces(&w, &all), &args, &[FLAG]));
        }
        // What starts: off alone, and allow-net in each valid combination.
        let runs: Vec<Vec<&str>> = vec![
            vec!["--sandbox", "off"],
            allow("read-only", &["localhost"]),
            allow("workspace-write", &["localhost", "*.example.test", "::1"]),
            vec!["--sandbox", "workspace-write", FLAG, "example.test."],
            {
                let mut f = allow("read-only", &["LOCALHOST"]);
                f.extend(["--sandbox-network", "loopback"]);
                f
            },
            {
                let mut f = allow("workspace-write", &["localhost"]);
                f.extend(["--sandbox-network", "off"]);
                f
            },
        ];
        for args in runs {
            let out = w.call(&args, "echo ran");
            if !(out.code == Some(0) && out.text == "ran\n") {
                failures.push(format!("[{user:?}] {args:?}: want it to run; got {out:?}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
