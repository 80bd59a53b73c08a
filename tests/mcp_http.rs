//! `dsh-host mcp --http`: MCP over streamable HTTP, one dsh session per MCP session, through
//! the binary, driven by the official Python SDK's streamable HTTP client
//! (`tests/mcp-clients/python/http_client.py`, run from the venv
//! `target/test-env/mcp-clients/venv` that `support/provision.rs` makes on first use) and by
//! plain HTTP requests.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

#[path = "support/procs.rs"]
mod procs;
use procs::alive;
#[path = "support/nested_cargo.rs"]
mod nested_cargo;
#[path = "support/provision.rs"]
mod provision;

#[path = "support/fault_guest.rs"]
mod fault_guest;
#[path = "support/rust_target.rs"]
mod rust_target;

use serde_json::Value;

const TOKEN: &str = "test-token-0123456789abcdef";

/// The line the server prints on stderr once it listens.
const SERVING: &str = "dsh-host: serving MCP over HTTP at ";

fn component_cache() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("component-cache")
}

/// A running `dsh-host mcp --http 127.0.0.1:0`.
struct Server {
    child: Child,
    /// `http://127.0.0.1:PORT/mcp`
    url: String,
    /// `127.0.0.1:PORT`
    authority: String,
    /// Everything the server wrote on stderr so far.
    stderr: Arc<Mutex<String>>,
}

impl Server {
    /// Starts the server with `TOKEN` in `DSH_HTTP_TOKEN` and `flags`.
    fn start(flags: &[&str]) -> Self {
        Self::start_with(flags, &[("DSH_HTTP_TOKEN", TOKEN)])
    }

    fn start_with(flags: &[&str], env: &[(&str, &str)]) -> Self {
        let mut args = vec!["mcp", "--http", "127.0.0.1:0", "--grace-ms", "500"];
        args.extend_from_slice(flags);
        Self::start_args(&args, env)
    }

    /// Starts `dsh-host ARGS`, which must serve HTTP.
    fn start_args(args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::spawn(args, env, None)
    }

    /// [`Server::start`] with `nofile` as both the soft and the hard descriptor limit, as
    /// `prlimit --nofile=N:N` would set them.
    fn start_limited(flags: &[&str], nofile: u64) -> Self {
        Self::start_with_nofile(flags, nofile, nofile)
    }

    /// [`Server::start`] with the soft descriptor limit `soft` and the hard one `hard`.
    fn start_with_nofile(flags: &[&str], soft: u64, hard: u64) -> Self {
        let mut args = vec!["mcp", "--http", "127.0.0.1:0", "--grace-ms", "500"];
        args.extend_from_slice(flags);
        Self::spawn(&args, &[("DSH_HTTP_TOKEN", TOKEN)], Some((soft, hard)))
    }

    fn spawn(args: &[&str], env: &[(&str, &str)], nofile: Option<(u64, u64)>) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_dsh-host"));
        if let Some((soft, hard)) = nofile {
            use std::os::unix::process::CommandExt;
            let limit = libc::rlimit {
                rlim_cur: soft,
                rlim_max: hard,
            };
            // SAFETY: setrlimit is async-signal-safe and touches only the child.
            unsafe {
                command.pre_exec(move || {
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        }
        command
            .args(args)
            .env("DSH_CACHE_DIR", component_cache())
            .env_remove("DSH_HTTP_TOKEN")
            .env("DSH_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("start dsh-host");
        let stderr = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        let pipe = child.stderr.take().expect("stderr piped");
        let collected = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix(SERVING) {
                    let _ = tx.send(url.to_string());
                }
                let mut all = collected.lock().unwrap();
                all.push_str(&line);
                all.push('\n');
            }
        });
        let url = match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(url) => url,
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "the server printed no address; stderr:\n{}",
                    stderr.lock().unwrap()
                );
            }
        };
        let authority = url
            .strip_prefix("http://")
            .and_then(|rest| rest.strip_suffix("/mcp"))
            .unwrap_or_else(|| panic!("unexpected address line: {url}"))
            .to_string();
        Self {
            child,
            url,
            authority,
            stderr,
        }
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Sends SIGTERM and waits for the exit; the exit status.
    fn terminate(&mut self) -> std::process::ExitStatus {
        self.signal(libc::SIGTERM)
    }

    /// Sends `signal` and waits for the exit; the exit status.
    fn signal(&mut self, signal: i32) -> std::process::ExitStatus {
        let pid = self.child.id() as i32;
        // SAFETY: signalling our own child.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for dsh-host") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the server did not exit after SIGTERM; stderr:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Runs a scenario of the Python client against this server; its JSON output.
    fn client(&self, scenario: &str, token: &str, scratch: &Path) -> Value {
        let clients = provision::repo().join("tests/mcp-clients/python");
        let python = provision::python_venv("mcp-clients", &clients.join("requirements.txt"));
        let script = clients.join("http_client.py");
        let out = Command::new(&python)
            .arg(script)
            .args([scenario, &self.url, token])
            .arg(scratch)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "http_client.py {scenario} failed ({}):\n{stdout}\n{}\nserver stderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            self.stderr()
        );
        serde_json::from_str(stdout.trim())
            .unwrap_or_else(|e| panic!("http_client.py {scenario} printed {stdout}: {e}"))
    }

    /// One plain HTTP/1.1 request; the status and the whole response text.
    fn request(&self, method: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
        let mut stream = TcpStream::connect(&self.authority).expect("connect to the server");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut request = format!(
            "{method} /mcp HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: {}\r\n",
            self.authority,
            body.len()
        );
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        request.push_str(body);
        stream.write_all(request.as_bytes()).unwrap();
        let mut response = String::new();
        // An SSE answer stays open: what arrived before the timeout is enough.
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    response.push_str(&String::from_utf8_lossy(&buf[..n]));
                    // An event ends with its line.
                    if (response.contains("\"result\"") || response.contains("\"error\""))
                        && response.ends_with('\n')
                    {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
        let status = response
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no HTTP status in {response:?}"));
        (status, response)
    }

    /// A session opened with plain requests (`initialize`, then `notifications/initialized`):
    /// its `Mcp-Session-Id`.
    fn open_session(&self) -> String {
        let (status, response) = self.initialize(&[("Authorization", &bearer(TOKEN))]);
        assert_eq!(status, 200, "{response}");
        let session = response
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("mcp-session-id")
                    .then(|| value.trim().to_string())
            })
            .unwrap_or_else(|| panic!("no Mcp-Session-Id in {response:?}"));
        let (status, response) = self.post_in(
            &session,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        );
        assert_eq!(status, 202, "{response}");
        session
    }

    /// A POST of `body` in `session`, with the token.
    fn post_in(&self, session: &str, body: &str) -> (u16, String) {
        let auth = bearer(TOKEN);
        let headers = [
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("Mcp-Session-Id", session),
            ("MCP-Protocol-Version", "2025-06-18"),
        ];
        self.request("POST", &headers, body)
    }

    /// A POST of `initialize` with `headers` added.
    fn initialize(&self, headers: &[(&str, &str)]) -> (u16, String) {
        let mut all = vec![
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
        ];
        all.extend_from_slice(headers);
        self.request("POST", &all, INITIALIZE)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;

/// The answer of `dsh-host mcp` on stdio to `line`, sent after the handshake: the first
/// message with an `id` after the `initialize` result.
fn stdio_answer(line: &str) -> Value {
    let mut child = Command::new(env!("CARGO_BIN_EXE_dsh-host"))
        .args(["mcp", "--grace-ms", "500"])
        .env("DSH_CACHE_DIR", component_cache())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start dsh-host mcp");
    let mut stdin = child.stdin.take().unwrap();
    let input = format!(
        "{}\n{}\n{line}\n",
        INITIALIZE.replace(r#""id":1"#, r#""id":"init""#),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#
    );
    // A writer of its own: a long line must not wait on our reading.
    let writer = std::thread::spawn(move || {
        stdin.write_all(input.as_bytes()).unwrap();
        // stdin stays open until the answer is read: its end would stop the server.
        stdin
    });
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let Ok(message) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if message.get("id").is_some_and(|id| id != "init") {
                let _ = tx.send(message);
                return;
            }
        }
    });
    let answer = rx.recv_timeout(Duration::from_secs(60));
    let _ = child.kill();
    let _ = child.wait();
    drop(writer.join());
    answer.unwrap_or_else(|_| panic!("no answer on stdio to {:.200}", line))
}

/// Raise this process's soft descriptor limit to its hard one, for a test that opens many
/// connections; the limit then in force.
fn raise_own_descriptor_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: reads and sets this process's own limit through valid pointers.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        limit.rlim_cur = limit.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
    }
    limit.rlim_cur
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

fn scratch() -> tempfile::TempDir {
    tempfile::tempdir().expect("scratch dir")
}

/// Waits up to 10 s for `pid` to end.
fn gone_within(pid: i32, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid) {
        assert!(
            Instant::now() < deadline,
            "{what}: command {pid} still runs"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn texts(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list of texts: {v}"))
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn sessions_see_only_their_own_tasks_and_notices() {
    let server = Server::start(&[]);
    let dir = scratch();
    let seen = server.client("isolation", TOKEN, dir.path());
    let a_task = seen["a_task"].as_str().unwrap();
    assert_eq!(
        seen["a_started"],
        format!("started background task {a_task}")
    );

    // B can neither read nor kill A's task, nor even name it: in B's numbering there is no
    // such task yet.
    assert_eq!(a_task, "bash-1");
    let foreign = format!("Error: unknown bash task \"{a_task}\"");
    assert_eq!(seen["b_output_of_a"]["text"][0], foreign.as_str(), "{seen}");
    assert_eq!(seen["b_output_of_a"]["isError"], true);
    assert_eq!(seen["b_kill_of_a"]["text"][0], foreign.as_str(), "{seen}");
    // B numbers its own tasks from 1 too (nothing tells it A started one), and the same name in
    // A's session is A's own task, already read.
    let b_task = seen["b_task"].as_str().unwrap();
    assert_eq!(b_task, "bash-1", "{seen}");
    assert_eq!(
        seen["a_output_of_b"]["text"][0], "(no new output)\n[status: completed, exit code: 0]",
        "{seen}"
    );

    // A's task ran to its end, untouched by B's kill, and A reads its output.
    assert_eq!(
        texts(&seen["a_output"]),
        ["done-a\n\n[status: completed, exit code: 0]"],
        "{seen}"
    );

    // The notice reached A, as a log message and on its next result, and B not at all.
    let notice = format!(
        "background bash task {a_task} finished [status: completed, exit code: 0]. Read its \
         output with bash_output."
    );
    let a_logged = seen["a_logged"].as_array().unwrap();
    assert_eq!(a_logged.len(), 1, "{seen}");
    assert_eq!(a_logged[0]["logger"], "tool-bash");
    assert_eq!(a_logged[0]["data"], notice.as_str());
    assert_eq!(seen["b_logged"], serde_json::json!([]), "{seen}");
    assert_eq!(texts(&seen["a_next"]), ["a-next\n", notice.as_str()]);
    assert_eq!(texts(&seen["b_next"]), ["b-next\n"], "{seen}");

    // And B's own notice reached B only.
    let data = |key: &str| -> Vec<String> {
        seen[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["data"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(data("a_logged_end"), [notice.as_str()], "{seen}");
    assert_eq!(
        data("b_logged_end"),
        [format!(
            "background bash task {b_task} finished [status: completed, exit code: 0]. Read its \
             output with bash_output."
        )],
        "{seen}"
    );
}

/// The JSON-RPC message in a response: its body, or the `data` of its SSE event.
fn jsonrpc_message(response: &str) -> Value {
    let line = response
        .lines()
        .map(|l| l.strip_prefix("data: ").unwrap_or(l))
        .find(|l| l.starts_with('{') && l.contains("\"jsonrpc\""))
        .unwrap_or_else(|| panic!("no JSON-RPC message in {response:?}"));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))
}

/// Every session gets the instructions of the loaded component: here the fault guest's, which
/// differ from the tools'.
#[test]
fn initialize_carries_the_components_own_instructions() {
    let component = fault_guest::fault_guest();
    let server = Server::start(&["--component", component.to_str().unwrap()]);
    let (status, response) = server.initialize(&[("Authorization", &bearer(TOKEN))]);
    assert_eq!(status, 200, "{response}");
    let init = jsonrpc_message(&response);
    assert_eq!(
        init["result"]["instructions"],
        fault_guest::INSTRUCTIONS,
        "{init}"
    );
}

#[test]
fn requests_without_the_right_token_get_401() {
    let server = Server::start(&[]);
    let (status, response) = server.initialize(&[]);
    assert_eq!(status, 401, "{response}");
    let lower = response.to_ascii_lowercase();
    assert!(
        lower.contains("\r\nwww-authenticate: bearer"),
        "no Bearer challenge: {response}"
    );

    for wrong in [
        "test-token-0123456789abcdeX",
        "test-token",
        "",
        "test-token-0123456789abcdef0",
    ] {
        let (status, response) = server.initialize(&[("Authorization", &bearer(wrong))]);
        assert_eq!(status, 401, "token {wrong:?}: {response}");
        assert!(
            response.contains("error=\"invalid_token\""),
            "token {wrong:?}: {response}"
        );
    }
    let (status, response) = server.initialize(&[("Authorization", &format!("Basic {TOKEN}"))]);
    assert_eq!(status, 401, "{response}");
    // Every method, not only POST.
    let (status, _) = server.request("GET", &[("Accept", "text/event-stream")], "");
    assert_eq!(status, 401);
    let (status, _) = server.request("DELETE", &[("Mcp-Session-Id", "x")], "");
    assert_eq!(status, 401);

    // The token from DSH_HTTP_TOKEN opens a session.
    let (status, response) = server.initialize(&[("Authorization", &bearer(TOKEN))]);
    assert_eq!(status, 200, "{response}");
    assert!(
        response.to_ascii_lowercase().contains("mcp-session-id:"),
        "{response}"
    );
}

#[test]
fn the_token_file_flag_sets_the_token() {
    let dir = scratch();
    let file = dir.path().join("token");
    std::fs::write(&file, "from-the-file\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let server = Server::start_with(
        &["--http-token-file", file.to_str().unwrap()],
        // The file wins over the environment.
        &[("DSH_HTTP_TOKEN", TOKEN)],
    );
    let (status, response) = server.initialize(&[("Authorization", &bearer(TOKEN))]);
    assert_eq!(status, 401, "{response}");
    let (status, response) = server.initialize(&[("Authorization", "Bearer from-the-file")]);
    assert_eq!(status, 200, "{response}");
}

#[test]
fn foreign_origins_get_403() {
    let server = Server::start(&["--http-allow-origin", "https://App.Example.com"]);
    let auth = bearer(TOKEN);
    for origin in [
        "http://evil.example",
        "http://localhost.evil.example",
        "https://app.example.com:8443",
        "null",
    ] {
        let (status, response) = server.initialize(&[("Authorization", &auth), ("Origin", origin)]);
        assert_eq!(status, 403, "origin {origin}: {response}");
    }
    // A foreign origin is refused before the token is looked at.
    let (status, _) = server.initialize(&[("Origin", "http://evil.example")]);
    assert_eq!(status, 403);

    for origin in [
        "http://localhost:3000",
        "http://127.0.0.1",
        "http://[::1]:8080",
        "https://app.example.com",
    ] {
        let (status, response) = server.initialize(&[("Authorization", &auth), ("Origin", origin)]);
        assert_eq!(status, 200, "origin {origin}: {response}");
    }
    let (status, response) = server.initialize(&[("Authorization", &auth)]);
    assert_eq!(status, 200, "no origin: {response}");
}

#[test]
fn a_generated_token_is_written_to_a_private_file_and_removed_at_exit() {
    let runtime = scratch();
    let mut server = Server::start_with(
        &[],
        &[("XDG_RUNTIME_DIR", runtime.path().to_str().unwrap())],
    );
    let stderr = server.stderr();
    let path = stderr
        .lines()
        .find_map(|l| l.strip_prefix("dsh-host: HTTP bearer token written to "))
        .unwrap_or_else(|| panic!("no token file named on stderr:\n{stderr}"));
    let path = PathBuf::from(path);
    assert_eq!(path.parent().unwrap(), runtime.path().join("dsh-host"));
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{}", path.display());
    let token = std::fs::read_to_string(&path).unwrap();
    let token = token.trim();
    assert_eq!(token.len(), 64, "{token}");
    assert!(token.bytes().all(|b| b.is_ascii_hexdigit()), "{token}");

    let (status, response) = server.initialize(&[("Authorization", &bearer(token))]);
    assert_eq!(status, 200, "{response}");
    let (status, _) = server.initialize(&[("Authorization", &bearer(TOKEN))]);
    assert_eq!(status, 401);

    assert_eq!(server.terminate().code(), Some(0));
    assert!(!path.exists(), "{} outlived the server", path.display());
}

#[test]
fn a_session_closed_by_the_client_loses_its_tasks() {
    let server = Server::start(&[]);
    let dir = scratch();
    let seen = server.client("close", TOKEN, dir.path());
    let pid = seen["pid"].as_i64().unwrap() as i32;
    gone_within(pid, "the session ended with DELETE");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("term"))
            .ok()
            .as_deref(),
        Some("TERM\n"),
        "the command was not sent SIGTERM"
    );
    // The server serves on.
    let (status, response) = server.initialize(&[("Authorization", &bearer(TOKEN))]);
    assert_eq!(status, 200, "{response}");
}

#[test]
fn an_idle_session_expires_with_its_tasks() {
    let server = Server::start(&["--http-session-idle-ms", "3000"]);
    let dir = scratch();
    let left = Instant::now();
    let seen = server.client("leave", TOKEN, dir.path());
    let pid = seen["pid"].as_i64().unwrap() as i32;
    // The client went without ending its session: the task runs on until the session expires.
    if left.elapsed() < Duration::from_millis(2500) {
        assert!(alive(pid), "command {pid} ended before its session expired");
    }
    gone_within(pid, "the session was idle");
    // The log line follows the kill.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !server
        .stderr()
        .contains("session ended: killed its task bash-")
    {
        assert!(Instant::now() < deadline, "{}", server.stderr());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_session_limit_refuses_one_more_session() {
    let server = Server::start(&["--http-max-sessions", "2"]);
    let dir = scratch();
    let seen = server.client("limit", TOKEN, dir.path());
    assert_eq!(texts(&seen["second"]), ["two\n"]);
    let third = &seen["third"];
    assert_eq!(third["type"], "MCPError", "{seen}");
    let message = third["message"].as_str().unwrap();
    assert!(
        message.contains("too many MCP sessions: the limit is 2 (--http-max-sessions)"),
        "{message}"
    );
    // A closed session makes room; the first one was untouched.
    assert_eq!(texts(&seen["after_close"]), ["again\n"]);
    assert_eq!(texts(&seen["first"]), ["first\n"]);
}

/// A session's dsh side (owner token, notice pump) is made by its first tool call: a session
/// that never made one still ends with DELETE and on idle expiry, and what it set before its
/// first call (the log level) holds for the notices of the tasks it starts later.
#[test]
fn sessions_that_never_called_a_tool_still_end() {
    let server = Server::start(&["--http-max-sessions", "1", "--http-session-idle-ms", "2000"]);
    let dir = scratch();
    let seen = server.client("untouched", TOKEN, dir.path());
    // The first ended with DELETE: the second fit under the limit of 1.
    assert_eq!(seen["second_opened"], true, "{seen}");
    // The second went without DELETE: the third was refused until the second expired.
    assert!(seen["refused"].as_u64().unwrap() >= 1, "{seen}");
    assert!(seen["waited_s"].as_f64().unwrap() >= 1.0, "{seen}");
    // The third asked for warnings and up before its first call: its notice (info) came on a
    // result only.
    let notice = format!(
        "background bash task {} finished [status: completed, exit code: 0]. Read its output \
         with bash_output.",
        seen["task"].as_str().unwrap()
    );
    assert_eq!(texts(&seen["next"]), ["next\n", notice.as_str()], "{seen}");
    assert_eq!(seen["logged"], serde_json::json!([]), "{seen}");
}

#[test]
fn calls_in_flight_and_progress_are_per_session() {
    let server = Server::start(&[
        "--max-calls-in-flight",
        "1",
        "--progress-interval-ms",
        "200",
    ]);
    let dir = scratch();
    let seen = server.client("calls", TOKEN, dir.path());
    assert_eq!(texts(&seen["a_slow"]), ["slow\n"], "{seen}");
    // The call that asked for progress got reports every 200 ms, on its own stream.
    let reports = seen["a_slow_progress"].as_array().unwrap();
    assert!(reports.len() >= 2, "{seen}");
    assert!(
        reports[0]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("running for ")),
        "{seen}"
    );
    assert_eq!(seen["a_second"]["type"], "MCPError", "{seen}");
    let message = seen["a_second"]["message"].as_str().unwrap();
    assert!(
        message.contains("the limit is 1 (--max-calls-in-flight)"),
        "{message}"
    );
    // The other session's call ran while A's was in flight.
    assert_eq!(texts(&seen["b"]), ["b\n"], "{seen}");
}

/// Each session runs in the root its client offers, at the same time as others in theirs; a
/// session offering no root, one that is not `file://`, or a missing directory runs in `--cwd`,
/// with a log line saying why.
#[test]
fn each_session_runs_in_its_clients_root() {
    let dir = scratch();
    // As bash's `pwd` prints it.
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let (x, y, default) = (root.join("x"), root.join("y"), root.join("default"));
    for d in [&x.join("sub"), &y, &default] {
        std::fs::create_dir_all(d).unwrap();
    }
    let server = Server::start(&["--cwd", default.to_str().unwrap()]);
    let seen = server.client("roots", TOKEN, &root);
    let path = |p: &Path| Value::from(p.to_str().unwrap());
    assert_eq!(seen["a"], path(&x), "{seen}");
    assert_eq!(seen["a_relative"], path(&x.join("sub")), "{seen}");
    assert_eq!(seen["a_again"], path(&x), "{seen}");
    assert_eq!(seen["b"], path(&y), "{seen}");
    assert_eq!(seen["no_roots"], path(&default), "{seen}");
    assert_eq!(seen["not_file"], path(&default), "{seen}");
    assert_eq!(seen["missing"], path(&default), "{seen}");
    let stderr = server.stderr();
    let using = format!("; using --cwd {}", default.display());
    for reason in [
        "the first root \"https://example.com/repo\" is not a file:// URI".to_string(),
        format!(
            "the first root \"file://{0}/missing\" names {0}/missing: No such file or directory \
             (os error 2)",
            root.display()
        ),
    ] {
        let line = format!("session cwd: no client root used ({reason}){using}");
        assert!(stderr.contains(&line), "no line {line:?} in:\n{stderr}");
    }
    // A client without roots is not asked, and needs no explanation.
    assert_eq!(
        stderr.matches("session cwd: no client root used").count(),
        2,
        "{stderr}"
    );
}

#[test]
fn sigterm_ends_the_server_and_kills_every_task() {
    let mut server = Server::start(&[]);
    let first = scratch();
    let second = scratch();
    let pids: Vec<i32> = [first.path(), second.path()]
        .iter()
        .map(|dir| server.client("leave", TOKEN, dir)["pid"].as_i64().unwrap() as i32)
        .collect();
    for &pid in &pids {
        assert!(alive(pid), "command {pid} ended before SIGTERM");
    }
    let status = server.terminate();
    assert_eq!(status.code(), Some(0), "{}", server.stderr());
    for pid in pids {
        assert!(!alive(pid), "command {pid} outlived the server");
    }
    // Each was stopped in order (SIGTERM, then the grace), not left to die with the host.
    for dir in [&first, &second] {
        assert_eq!(
            std::fs::read_to_string(dir.path().join("term"))
                .ok()
                .as_deref(),
            Some("TERM\n"),
            "a command was not sent SIGTERM"
        );
    }
}

#[test]
fn sigint_ends_the_server_as_sigterm_does() {
    let mut server = Server::start(&[]);
    let dir = scratch();
    let pid = server.client("leave", TOKEN, dir.path())["pid"]
        .as_i64()
        .unwrap() as i32;
    assert!(alive(pid), "command {pid} ended before SIGINT");
    let status = server.signal(libc::SIGINT);
    assert_eq!(status.code(), Some(0), "{}", server.stderr());
    assert!(!alive(pid), "command {pid} outlived the server");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("term"))
            .ok()
            .as_deref(),
        Some("TERM\n"),
        "the command was not sent SIGTERM"
    );
}

#[test]
fn requests_outside_a_session_are_refused_with_a_reason() {
    let server = Server::start(&[]);
    let auth = bearer(TOKEN);
    let headers = [
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    let (status, response) = server.request(
        "POST",
        &headers,
        r#"{"jsonrpc":"2.0","id":7,"method":"tools/list"}"#,
    );
    assert_eq!(status, 400, "{response}");
    assert!(
        response.contains(r#""id":7"#) && response.contains("send initialize first"),
        "{response}"
    );
    // A 2026-07-28 request, which rmcp would serve outside any session, gets the revision's
    // UnsupportedProtocolVersionError naming the revisions with sessions; so does its discovery.
    for (id, method, params) in [
        (
            8,
            "tools/call",
            r#""name":"bash","arguments":{"command":"true"},"#,
        ),
        (9, "server/discover", ""),
    ] {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{{{params}"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#
        );
        let (status, response) = server.request("POST", &headers, &body);
        assert_eq!(status, 400, "{response}");
        let error = &jsonrpc_message(&response);
        assert_eq!(error["id"], id, "{response}");
        assert_eq!(error["error"]["code"], -32022, "{response}");
        assert_eq!(
            error["error"]["data"],
            serde_json::json!({
                "requested": "2026-07-28",
                "supported": ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"],
            }),
            "{response}"
        );
        assert!(
            error["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("Unsupported protocol version 2026-07-28: over HTTP"),
            "{response}"
        );
    }

    // A body that is not JSON gets JSON-RPC's parse error, as on stdio.
    let (status, response) = server.request("POST", &headers, "{not json");
    assert_eq!(status, 400, "{response}");
    assert!(
        response.contains(r#""id":null"#) && response.contains("-32700"),
        "{response}"
    );

    let mut stream = TcpStream::connect(&server.authority).unwrap();
    write!(
        stream,
        "GET /other HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        server.authority
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 404"), "{response}");
}

/// The HTTP settings from `--config`: the address, the token file, the session limit and an
/// origin, as their flags set them; a token on the command line replaces the file's.
#[test]
fn a_config_file_sets_the_http_flags() {
    let dir = scratch();
    let token = dir.path().join("token");
    std::fs::write(&token, "from-the-file\n").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let config = dir.path().join("dsh.toml");
    std::fs::write(
        &config,
        format!(
            "http = \"127.0.0.1:0\"\nhttp-token-file = \"{}\"\nhttp-max-sessions = 1\n\
             http-allow-origin = [\"https://app.example.com\"]\n",
            token.display()
        ),
    )
    .unwrap();
    let config = config.to_str().unwrap();

    let server = Server::start_args(&["--config", config, "mcp"], &[("DSH_HTTP_TOKEN", TOKEN)]);
    // The file's token file wins over the environment, as the flag does.
    let (status, _) = server.initialize(&[("Authorization", &bearer(TOKEN))]);
    assert_eq!(status, 401);
    let file_token = bearer("from-the-file");
    let (status, _) = server.initialize(&[("Origin", "https://other.example.com")]);
    assert_eq!(status, 403);
    let (status, response) = server.initialize(&[
        ("Authorization", &file_token),
        ("Origin", "https://app.example.com"),
    ]);
    assert_eq!(status, 200, "{response}");
    // One session open: the limit of 1 from the file refuses another.
    let (status, response) = server.initialize(&[("Authorization", &file_token)]);
    assert_eq!(status, 503, "{response}");
    assert!(
        response.contains("the limit is 1 (--http-max-sessions)"),
        "{response}"
    );
    drop(server);

    // The command line's token and session limit win over the file's.
    let server = Server::start_args(
        &[
            "--config",
            config,
            "mcp",
            "--http-token",
            TOKEN,
            "--http-max-sessions",
            "2",
        ],
        &[],
    );
    let (status, _) = server.initialize(&[("Authorization", &file_token)]);
    assert_eq!(status, 401);
    for _ in 0..2 {
        let (status, response) = server.initialize(&[("Authorization", &bearer(TOKEN))]);
        assert_eq!(status, 200, "{response}");
    }
}

/// The Python SDK's `Client` connects as it does by default (mode `auto`: `server/discover` at
/// revision 2026-07-28 first): the server's answer sends it to `initialize`, and it works.
/// Pinned to 2026-07-28, it gets the revision's error naming the versions to use.
#[test]
fn a_client_of_revision_2026_07_28_falls_back_to_a_session() {
    let server = Server::start(&[]);
    let seen = server.client("modern", TOKEN, scratch().path());
    assert_eq!(seen["auto_version"], "2025-11-25", "{seen}");
    assert_eq!(texts(&seen["auto"]), ["auto\n"], "{seen}");
    assert_eq!(seen["pinned"]["code"], -32022, "{seen}");
    assert_eq!(
        seen["pinned"]["data"]["supported"],
        serde_json::json!(["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"]),
        "{seen}"
    );
}

#[test]
fn bad_http_flags_are_usage_errors() {
    for (args, needle) in [
        (vec!["--http", "example.com:80"], "--http"),
        (vec!["--http", "127.0.0.1:99999"], "--http"),
        (vec!["--http-token", "x"], "--http"),
        (
            vec!["--http", "0", "--http-allow-origin", "not an origin"],
            "--http-allow-origin",
        ),
        (
            vec!["--http", "0", "--http-max-sessions", "0"],
            "--http-max-sessions",
        ),
        (
            vec!["--http", "0", "--http-max-connections", "0"],
            "--http-max-connections",
        ),
        (
            vec!["--http", "0", "--http-max-unauthenticated", "-1"],
            "--http-max-unauthenticated",
        ),
        (
            vec!["--http", "0", "--http-header-timeout-ms", "0"],
            "--http-header-timeout-ms",
        ),
        (
            vec!["--http", "0", "--http-body-timeout-ms", "nan"],
            "--http-body-timeout-ms",
        ),
        (
            vec!["--http", "0", "--http-token", "a", "--http-token-file", "f"],
            "--http-token",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_dsh-host"))
            .arg("mcp")
            .args(&args)
            .env("DSH_CACHE_DIR", component_cache())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
    let dir = scratch();
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_dsh-host"))
        .args(["mcp", "--http", "0", "--http-token-file"])
        .arg(&empty)
        .env("DSH_CACHE_DIR", component_cache())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("holds no token"), "{stderr}");
}

/// Two sessions on one server, one quiet and one abusive (small per-session limits): B's churn
/// of 20 tasks evicts only B's own oldest results, B's start burst and calls past its limits are
/// refused at once with errors naming the per-session flags, B's flood of spill files past its
/// spill budget deletes only B's own oldest files (a later read of one says so), and A's unread
/// result, numbering, start, call and spill files are untouched.
#[test]
fn an_abusive_session_leaves_a_quiet_one_unaffected() {
    let server = Server::start(&[
        "--max-session-tasks",
        "3",
        "--max-session-finished-tasks",
        "4",
        "--max-finished-tasks",
        "4",
        "--max-calls-in-flight",
        "2",
        "--max-output-bytes",
        "1000",
        "--max-session-spill-bytes",
        "20000",
    ]);
    let dir = scratch();
    let seen = server.client("fairness", TOKEN, dir.path());

    // A's first task is bash-1 and B's tasks count from bash-1 too, whatever the other did.
    assert_eq!(
        seen["a_started"], "started background task bash-1",
        "{seen}"
    );
    let b_ids: Vec<String> = (1..=20).map(|i| format!("bash-{i}")).collect();
    assert_eq!(seen["b_ids"], serde_json::json!(b_ids), "{seen}");

    // B's churn evicted B's oldest (its limit is 4, and 4 in all), never A's unread result.
    assert_eq!(
        texts(&seen["b_first_after_churn"]["text"]),
        ["Error: unknown bash task \"bash-1\""],
        "{seen}"
    );
    assert!(
        texts(&seen["b_last_after_churn"]["text"])[0].starts_with("(no new output)"),
        "{seen}"
    );
    // (Its completion notice rides on this result, the session's next.)
    assert_eq!(
        texts(&seen["a_after_churn"]["text"])[0],
        "quiet-a\n\n[status: completed, exit code: 0]",
        "{seen}"
    );

    // B's fourth start is refused, naming its per-session limit; A's start goes through, as
    // A's second task.
    let burst = seen["b_burst"].as_array().unwrap();
    for (i, start) in burst[..3].iter().enumerate() {
        assert_eq!(
            texts(&start["text"]),
            [format!("started background task bash-{}", 21 + i)],
            "{seen}"
        );
    }
    let refused = texts(&burst[3]["text"]).join("");
    assert!(
        refused.contains("too many background tasks in this session: 3 are running")
            && refused.contains("(--max-session-tasks)"),
        "{seen}"
    );
    assert_eq!(
        texts(&seen["a_start_during_burst"]["text"]),
        ["started background task bash-2"],
        "{seen}"
    );

    // B's third call at once is refused at once; A's call is answered without waiting for B's.
    let calls = seen["b_calls"].as_array().unwrap();
    let refused: Vec<&Value> = calls.iter().filter(|c| c.get("error").is_some()).collect();
    assert_eq!(refused.len(), 1, "{seen}");
    let message = refused[0]["error"].as_str().unwrap();
    assert!(
        message.contains("too many tool calls in flight in this session: the limit is 2"),
        "{message}"
    );
    // Neither waited for B's calls to end (A's was sent 0.3 s after them).
    let b_done = calls
        .iter()
        .filter(|c| c.get("error").is_none())
        .map(|c| c["s"].as_f64().unwrap())
        .fold(f64::INFINITY, f64::min);
    assert!(refused[0]["s"].as_f64().unwrap() < b_done, "{seen}");
    let a_call = &seen["a_call_during_b_calls"];
    assert_eq!(texts(&a_call["text"])[0], "a-call\n", "{seen}");
    assert!(0.3 + a_call["s"].as_f64().unwrap() < b_done, "{seen}");

    // B's flood of spill files past its budget deleted B's own oldest files (its unread task's
    // first), and each of its files while they were the newest held the whole stream; A's
    // files, older than all of B's flood, are whole.
    let spill_of = |text: &str, marker: &str| -> Option<String> {
        let (_, rest) = text.split_once(marker)?;
        let path = rest.split(']').next()?.split(',').next()?.trim();
        (path != "(unavailable)").then(|| path.to_string())
    };
    let whole = |path: &str, byte: u8| {
        let bytes = std::fs::read(path).unwrap_or_default();
        bytes.len() == 5000 && bytes.iter().all(|b| *b == byte)
    };
    let a_call = texts(&seen["a_spill_call"]["text"]).join("");
    let a_call_path = spill_of(&a_call, "full output: ").expect("A's call names its file");
    assert!(whole(&a_call_path, b'a'), "{a_call}");
    let flood: Vec<String> = seen["b_flood"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let text = texts(&r["text"]).join("");
            spill_of(&text, "full output: ").unwrap_or_else(|| panic!("a flood file: {text}"))
        })
        .collect();
    let kept = flood.iter().filter(|p| std::path::Path::new(p).exists());
    assert_eq!(kept.count(), 4, "B keeps 20,000 bytes: {flood:?}");
    for path in &flood[6..] {
        assert!(whole(path, b'b'), "{path}");
    }
    assert!(!std::path::Path::new(&flood[0]).exists());
    let b_big = texts(&seen["b_big_after_flood"]["text"]).join("");
    assert!(
        b_big.contains("full output: (unavailable)]")
            && b_big.ends_with(
                "[status: completed, exit code: 0]\n[full output evicted: the spill file of \
                 stdout was deleted to keep this session within its spill budget]"
            ),
        "{b_big}"
    );
    let a_big = texts(&seen["a_big_after_flood"]["text"]).join("");
    let a_big_path = spill_of(&a_big, "full output: ").expect("A's task names its file");
    assert!(whole(&a_big_path, b't'), "{a_big}");
    assert!(!a_big.contains("evicted"), "{a_big}");
    assert!(whole(&a_call_path, b'a'), "{a_call}");
}

/// Under a descriptor limit of 400, 1,000 idle or slow unauthenticated connections (every other
/// one sent half a request) do not keep an authenticated client out: the oldest unauthenticated
/// connections are closed to make room (here at `--http-max-unauthenticated`, 128), and
/// accepting never runs out of descriptors.
#[test]
fn unauthenticated_connections_do_not_keep_out_an_authenticated_client() {
    flood_then_call(&[]);
}

/// The same with an unauthenticated cap above the flood: the descriptor limit caps connections
/// (400 less the 128 the server keeps for itself).
#[test]
fn the_descriptor_limit_caps_connections_below_it() {
    let log = flood_then_call(&["--http-max-unauthenticated", "5000"]);
    assert!(
        log.contains("the descriptor limit of 400 leaves room for 272 HTTP connections"),
        "{log}"
    );
}

/// Opens 1,000 unauthenticated connections to a server started with `flags` under a
/// descriptor limit of 400, then a session whose `tools/call` must be answered at once; the
/// server's log.
fn flood_then_call(flags: &[&str]) -> String {
    let own = raise_own_descriptor_limit();
    assert!(
        own >= 1100,
        "this test opens 1,000 connections: the hard limit is {own}"
    );
    let server = Server::start_limited(flags, 400);
    // From the start of the flood: a server that stops accepting makes connects wait too.
    let flood = Instant::now();
    let mut idle = Vec::new();
    for i in 0..1000 {
        let mut stream = TcpStream::connect(&server.authority).expect("connect");
        if i % 2 == 1 {
            // Slow: half a request, the rest never comes.
            let _ = stream.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le");
        }
        idle.push(stream);
    }
    let flooded = flood.elapsed();

    let started = Instant::now();
    let session = server.open_session();
    let opened = started.elapsed();
    let started = Instant::now();
    let (status, response) = server.post_in(
        &session,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"bash","arguments":{"command":"echo served","description":"d"}}}"#,
    );
    let called = started.elapsed();
    assert_eq!(status, 200, "{response}");
    let answer = jsonrpc_message(&response);
    assert_eq!(texts_of(&answer), ["served\n"], "{answer}");
    // Measured here: the flood and the client took 0.1 s in all, the call 15 ms; the old
    // listener, which waited for descriptors while idle connections held them all, 28 to 75 s.
    // The bounds are generous.
    assert!(
        flood.elapsed() < Duration::from_secs(10) && called < Duration::from_secs(2),
        "the 1,000 connections took {flooded:?} to open, the session {opened:?}, the call \
         {called:?}"
    );
    let log = server.stderr();
    assert!(
        log.contains("unauthenticated HTTP connection(s) to make room"),
        "{log}"
    );
    assert!(!log.contains("cannot accept"), "{log}");
    drop(idle);
    log
}

/// The texts of a `tools/call` answer's content.
fn texts_of(answer: &Value) -> Vec<String> {
    answer["result"]["content"]
        .as_array()
        .unwrap_or_else(|| panic!("no content in {answer}"))
        .iter()
        .map(|c| c["text"].as_str().unwrap().to_string())
        .collect()
}

/// How long until the server closes `stream` (a read sees the end or a reset), waiting at
/// most `limit`; what it sent before.
fn closed_within(stream: &mut TcpStream, limit: Duration) -> (Duration, String) {
    let started = Instant::now();
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => received.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
        assert!(
            started.elapsed() < limit,
            "the server kept the connection open {limit:?}; it sent {:?}",
            String::from_utf8_lossy(&received)
        );
    }
    (
        started.elapsed(),
        String::from_utf8_lossy(&received).into_owned(),
    )
}

/// A connection that sends nothing, one that sends its headers a byte at a time, a keep-alive
/// connection left idle after a request, and one whose body stops half-way are all closed by
/// the timeouts, the last with 408.
#[test]
fn slow_and_idle_connections_are_closed_by_the_timeouts() {
    let server = Server::start(&[
        "--http-header-timeout-ms",
        "1000",
        "--http-body-timeout-ms",
        "1000",
    ]);
    let connect = || TcpStream::connect(&server.authority).expect("connect");
    let mut silent = connect();
    let mut trickling = connect();
    let mut writer = trickling.try_clone().unwrap();
    // Slow loris: a byte every 100 ms for 10 s, were the connection kept open.
    let trickle = std::thread::spawn(move || {
        let headers = format!("POST /mcp HTTP/1.1\r\nX-Slow: {}", "a".repeat(100));
        for byte in headers.bytes() {
            if writer.write_all(&[byte]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    let mut kept_alive = connect();
    write!(
        kept_alive,
        "GET /other HTTP/1.1\r\nHost: {}\r\n\r\n",
        server.authority
    )
    .unwrap();
    let mut half_body = connect();
    write!(
        half_body,
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Content-Length: 100\r\n\r\n{{\"jsonrpc\":",
        server.authority
    )
    .unwrap();

    let limit = Duration::from_secs(5);
    let (_, sent) = closed_within(&mut silent, limit);
    assert_eq!(sent, "");
    closed_within(&mut trickling, limit);
    let (_, sent) = closed_within(&mut kept_alive, limit);
    assert!(sent.starts_with("HTTP/1.1 404"), "{sent}");
    let (_, sent) = closed_within(&mut half_body, limit);
    assert!(sent.starts_with("HTTP/1.1 408"), "{sent}");
    assert!(sent.contains("--http-body-timeout-ms"), "{sent}");
    trickle.join().unwrap();
}

/// `"timeoutMs": 1e400` (beyond f64) reaches the tool over HTTP as on stdio, and gets the
/// tool's own validation error in the same answer.
#[test]
fn numbers_out_of_range_get_the_tools_answer_as_on_stdio() {
    let server = Server::start(&[]);
    let session = server.open_session();
    let call = r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"bash","arguments":{"command":"echo ran","description":"d","timeoutMs":1e400}}}"#;
    let (status, response) = server.post_in(&session, call);
    assert_eq!(status, 200, "{response}");
    let over_http = jsonrpc_message(&response);
    assert_eq!(over_http, stdio_answer(call));
    assert_eq!(over_http["result"]["isError"], true, "{over_http}");
    assert_eq!(
        texts_of(&over_http),
        ["Error: invalid timeoutMs: expected a positive number, got null"]
    );
}

/// Ids rmcp cannot hold get the same answer over HTTP as on stdio: beyond f64, an invalid
/// request with a null id (never a stand-in string); beyond i64, an invalid request for the id.
#[test]
fn big_ids_get_the_same_answer_as_on_stdio() {
    let server = Server::start(&[]);
    let session = server.open_session();
    for (id, expected) in [
        ("1e400", Value::Null),
        ("-1E+999", Value::Null),
        (
            "9223372036854775808",
            serde_json::json!(9223372036854775808u64),
        ),
        (
            "18446744073709551616",
            serde_json::json!(18446744073709551616.0),
        ),
    ] {
        let ping = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
        let (status, response) = server.post_in(&session, &ping);
        assert_eq!(status, 400, "{id}: {response}");
        let over_http = jsonrpc_message(&response);
        assert_eq!(over_http, stdio_answer(&ping), "{id}");
        assert_eq!(over_http["id"], expected, "{id}: {over_http}");
        assert_eq!(over_http["error"]["code"], -32600, "{id}: {over_http}");
    }
    // An id in range is served.
    let (status, response) = server.post_in(
        &session,
        r#"{"jsonrpc":"2.0","id":9007199254740991,"method":"ping"}"#,
    );
    assert_eq!(status, 200, "{response}");
    assert_eq!(jsonrpc_message(&response)["id"], 9007199254740991u64);
}

/// A body beyond 16 MiB gets stdio's answer to a line that long (HTTP 413): an invalid request
/// for the id read before the cut, else for a null id; the server serves on.
#[test]
fn an_oversized_body_gets_the_same_answer_as_on_stdio() {
    let server = Server::start(&[]);
    let session = server.open_session();
    let big = "x".repeat(17 << 20);
    for (body, id) in [
        (
            format!(
                r#"{{"jsonrpc":"2.0","id":41,"method":"tools/call","params":{{"name":"bash","arguments":{{"command":"echo {big}","description":"d"}}}}}}"#
            ),
            serde_json::json!(41),
        ),
        (
            format!(
                r#"{{"jsonrpc":"2.0","method":"tools/call","params":{{"arguments":{{"command":"echo {big}"}}}},"id":42}}"#
            ),
            Value::Null,
        ),
    ] {
        let (status, response) = server.post_in(&session, &body);
        assert_eq!(status, 413, "{:.300}", response);
        let over_http = jsonrpc_message(&response);
        assert_eq!(over_http, stdio_answer(&body));
        assert_eq!(over_http["id"], id, "{over_http}");
        assert_eq!(
            over_http["error"]["message"],
            "Invalid request: message longer than 16777216 bytes"
        );
    }
    let (status, response) =
        server.post_in(&session, r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#);
    assert_eq!(status, 200, "{response}");
}

/// The server raises its own soft descriptor limit to hold connections; commands keep the one it
/// was started with, also those whose spawn helper factory was started after the raise (here:
/// the first factory killed, so that the next commands' helpers come from a new one).
#[test]
fn commands_keep_the_descriptor_limit_the_server_started_with() {
    let server = Server::start_with_nofile(&[], 1024, 4096);
    let session = server.open_session();
    let soft_limit = |id: u32| {
        let (status, response) = server.post_in(
            &session,
            &format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"bash","arguments":{{"command":"ulimit -Sn","description":"Limit"}}}}}}"#
            ),
        );
        assert_eq!(status, 200, "{response}");
        let message = jsonrpc_message(&response);
        message["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{message}"))
            .to_string()
    };
    assert_eq!(soft_limit(2), "1024\n");
    // The factory: the server's child whose command line names it.
    let server_pid = server.child.id().to_string();
    let factory = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .find(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline);
            cmdline.starts_with("dsh-spawn-factory")
                && cmdline.split('\0').any(|arg| arg == server_pid)
        })
        .expect("the spawn helper factory runs");
    // SAFETY: a signal to a process of this test's server.
    assert_eq!(unsafe { libc::kill(factory, libc::SIGKILL) }, 0);
    gone_within(factory, "the factory");
    // The helpers made ahead by the old factory serve the next two; then a new factory's.
    for id in 3..8 {
        assert_eq!(soft_limit(id), "1024\n", "call {id}");
    }
}
