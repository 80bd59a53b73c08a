//! Black-box tests of `dsh-host mcp`: a real MCP session over the child's stdin/stdout,
//! newline-delimited JSON-RPC, every read bounded by a timeout.

#[allow(dead_code)]
#[path = "support/mcp_child.rs"]
mod mcp_child;
#[path = "support/procs.rs"]
mod procs;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::Arc;
use std::time::{Duration, Instant};

use procs::alive;
use serde_json::{Value, json};

/// A read that takes longer than this fails the test.
const READ_TIMEOUT: Duration = Duration::from_secs(20);
/// The first answer waits for the component to load (and, on a cold cache, to compile).
const STARTUP_TIMEOUT: Duration = Duration::from_secs(180);

const NOTICE: &str = "background bash task bash-1 finished [status: completed, exit code: 0]. Read its output with bash_output.";

/// A `dsh-host mcp` child and the messages it wrote; each step panics where
/// [`mcp_child::McpChild`]'s answers an error.
struct Mcp(mcp_child::McpChild);

impl std::ops::Deref for Mcp {
    type Target = mcp_child::McpChild;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Mcp {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Mcp {
    fn spawn(extra_args: &[&str]) -> Mcp {
        let mut args = vec!["--grace-ms", "200"];
        args.extend(extra_args);
        // One compiled-component cache for every test process: debug builds compile slowly.
        let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("component-cache");
        Mcp(mcp_child::spawn(args, &cache))
    }

    /// Spawned and initialized.
    fn start(extra_args: &[&str]) -> Mcp {
        let mut mcp = Mcp::spawn(extra_args);
        mcp.initialize();
        mcp
    }

    fn initialize(&mut self) -> Value {
        let id = self.request(
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": { "name": "dsh-host-tests", "version": "0" },
            }),
        );
        let result = self.result_within(id, STARTUP_TIMEOUT);
        self.notify("notifications/initialized", json!({}));
        result
    }

    fn send_line(&mut self, line: &str) {
        self.0.send_line(line).unwrap_or_else(|e| panic!("{e}"));
    }

    fn request(&mut self, method: &str, params: Value) -> i64 {
        self.0
            .request(method, params)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn notify(&mut self, method: &str, params: Value) {
        self.0
            .notify(method, params)
            .unwrap_or_else(|e| panic!("{e}"));
    }

    /// The first message, stashed or new, that `matches`; others are stashed.
    fn find(&mut self, timeout: Duration, what: &str, matches: impl Fn(&Value) -> bool) -> Value {
        self.0
            .find(timeout, what, matches)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn result_within(&mut self, id: i64, timeout: Duration) -> Value {
        let response = self.response(id, timeout).unwrap_or_else(|e| panic!("{e}"));
        match response.get("result") {
            Some(result) => result.clone(),
            None => panic!("request {id} failed: {response}"),
        }
    }

    fn result(&mut self, id: i64) -> Value {
        self.result_within(id, READ_TIMEOUT)
    }

    /// A `tools/call` result.
    fn call(&mut self, name: &str, arguments: Value) -> Value {
        let id = self.request(
            "tools/call",
            json!({ "name": name, "arguments": arguments }),
        );
        self.result(id)
    }

    fn bash(&mut self, command: &str) -> Value {
        self.call(
            "bash",
            json!({ "command": command, "description": "Run a test command" }),
        )
    }

    fn notification(&mut self, method: &str) -> Value {
        self.find(READ_TIMEOUT, method, |m| {
            m.get("method") == Some(&json!(method)) && m.get("id").is_none()
        })
    }

    /// Send `sig` to the server process.
    fn signal(&self, sig: i32) {
        let server = i32::try_from(self.child.id()).unwrap();
        assert_eq!(unsafe { libc::kill(server, sig) }, 0);
    }

    fn close_stdin(&mut self) {
        drop(self.stdin.take());
    }

    fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for dsh-host") {
                return status;
            }
            if Instant::now() > deadline {
                panic!(
                    "dsh-host still running after {timeout:?}; stderr:\n{}",
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The text blocks of a `tools/call` result.
fn texts(result: &Value) -> Vec<&str> {
    result["content"]
        .as_array()
        .unwrap_or_else(|| panic!("no content: {result}"))
        .iter()
        .map(|block| {
            assert_eq!(block["type"], "text", "not a text block: {block}");
            block["text"].as_str().unwrap()
        })
        .collect()
}

fn is_error(result: &Value) -> bool {
    result["isError"]
        .as_bool()
        .unwrap_or_else(|| panic!("no isError: {result}"))
}

/// Wait until `path` holds a pid, and return it.
fn read_pid(path: &Path) -> i32 {
    let deadline = Instant::now() + READ_TIMEOUT;
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && let Ok(pid) = text.trim().parse()
        {
            return pid;
        }
        assert!(
            Instant::now() < deadline,
            "no pid in {} within {READ_TIMEOUT:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_gone(pid: i32, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while alive(pid) {
        assert!(
            Instant::now() < deadline,
            "process {pid} still alive after {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The embedded component's instructions (its `instructions` export), read through the library
/// as `dsh-host` reads them at load.
fn component_instructions() -> String {
    use dsh_host::executor::{Config, Executor, LocalExecutor};
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            let executor: Arc<dyn Executor> = LocalExecutor::new(Config::default(), tx).unwrap();
            let mut options = dsh_host::HostOptions::new();
            options.cache_dir =
                Some(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("component-cache"));
            let host = dsh_host::ToolHost::new(options, executor, rx)
                .await
                .expect("host loads");
            let text = host.instructions().to_string();
            assert!(
                text.starts_with("These tools run shell commands"),
                "not the tools' instructions: {text}"
            );
            text
        })
    })
    .clone()
}

/// Start `sleeper` as background task `bash-1`; returns its pid once it runs.
fn start_sleeper_task(mcp: &mut Mcp, pid_file: &Path) -> i32 {
    let r = mcp.call(
        "bash",
        json!({ "command": sleeper(pid_file), "description": "Sleep in the background", "run_in_background": true }),
    );
    assert_eq!(texts(&r), ["started background task bash-1"]);
    read_pid(pid_file)
}

/// A command that records its pid in `pid_file` and then sleeps as that same process.
fn sleeper(pid_file: &Path) -> String {
    format!("echo $$ > '{}'; exec sleep 30", pid_file.display())
}

#[test]
fn initialize_names_the_server_and_its_capabilities() {
    let mut mcp = Mcp::spawn(&[]);
    let init = mcp.initialize();
    assert_eq!(init["protocolVersion"], "2025-06-18");
    assert_eq!(init["serverInfo"]["name"], "dsh-host");
    assert_eq!(init["serverInfo"]["title"], "dsh bash tools");
    assert_eq!(init["serverInfo"]["version"], env!("CARGO_PKG_VERSION"));
    // The component's own text (its `instructions` export), as the library reads it at load.
    assert_eq!(init["instructions"], component_instructions(), "{init}");
    assert!(
        init["capabilities"]["tools"].is_object(),
        "tools capability: {init}"
    );
    assert!(
        init["capabilities"]["logging"].is_object(),
        "logging capability: {init}"
    );
    // A ping still works after the handshake.
    let id = mcp.request("ping", json!({}));
    assert_eq!(mcp.result(id), json!({}));
}

#[test]
fn tools_list_passes_the_component_schema_through() {
    let mut mcp = Mcp::start(&[]);
    let id = mcp.request("tools/list", json!({}));
    let list = mcp.result(id);
    let tools = list["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["bash", "bash_output", "bash_kill"]);
    let bash = &tools[0]["inputSchema"];
    let keys: Vec<&String> = bash["properties"].as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "command",
            "description",
            "timeoutMs",
            "workdir",
            "run_in_background"
        ]
    );
    assert_eq!(bash["required"], json!(["command", "description"]));
    assert_eq!(bash["type"], "object");
    assert!(tools[0]["description"].as_str().unwrap().contains("120000"));

    // The component's titles and hints (each argued in guest-tools/src/tools/*.rs): clients
    // ask for approval of bash and bash_kill, and may let bash_output through.
    let expected = [
        ("Run a shell command", [false, true, false, true]),
        ("Read background task output", [true, false, false, false]),
        ("Stop a background task", [false, true, true, false]),
    ];
    for (tool, (title, [read_only, destructive, idempotent, open_world])) in
        tools.iter().zip(expected)
    {
        assert_eq!(tool["title"], title, "{tool}");
        assert_eq!(
            tool["annotations"],
            json!({
                "title": title,
                "readOnlyHint": read_only,
                "destructiveHint": destructive,
                "idempotentHint": idempotent,
                "openWorldHint": open_world,
            }),
            "{tool}"
        );
    }

    // Exactly the definitions `dsh-host tools` prints, key order included.
    let out = Command::new(env!("CARGO_BIN_EXE_dsh-host"))
        .arg("tools")
        .env(
            "DSH_CACHE_DIR",
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("component-cache"),
        )
        .output()
        .expect("dsh-host tools runs");
    assert!(
        out.status.success(),
        "dsh-host tools: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let defs: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(defs.as_array().map(Vec::len), Some(3));
    for (tool, def) in tools.iter().zip(defs.as_array().unwrap()) {
        assert_eq!(tool.to_string(), def.to_string());
    }
}

#[test]
fn tools_call_returns_the_tool_text_and_error_flag() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().canonicalize().unwrap();
    let mut mcp = Mcp::start(&["--cwd", cwd.to_str().unwrap()]);

    let r = mcp.bash("echo hi");
    assert_eq!(texts(&r), ["hi\n"]);
    assert!(!is_error(&r));

    let r = mcp.call("bash", json!({}));
    assert!(is_error(&r));
    assert_eq!(
        texts(&r),
        [
            r#"Error: invalid arguments: missing required property "command"; missing required property "description""#
        ]
    );

    // No arguments at all are an empty object.
    let id = mcp.request("tools/call", json!({ "name": "bash" }));
    let r = mcp.result(id);
    assert!(is_error(&r));
    assert!(
        texts(&r)[0].starts_with("Error: invalid arguments: missing required property \"command\"")
    );

    // Unknown tools reach the component, which answers them.
    let r = mcp.call("nope", json!({}));
    assert!(is_error(&r));
    assert_eq!(texts(&r), [r#"Error: unknown tool "nope""#]);

    // A failing command is a result like any other, and the session's cwd applies.
    let r = mcp.bash("pwd; exit 3");
    assert!(!is_error(&r));
    assert_eq!(texts(&r), [format!("{}\n[exit code: 3]", cwd.display())]);
}

/// The default `--max-command-bytes`.
const MAX_COMMAND_BYTES: usize = 1 << 20;

/// A command of exactly `len` bytes that writes a file through a quoted heredoc (lines of shell
/// syntax that must stay literal, UTF-8, CR, tabs), then prints the file's size and `$0` and
/// exits 3; with the bytes the file must hold.
fn heredoc_command(file: &Path, len: usize) -> (String, String) {
    let head = format!("cat > '{}' <<'EOF'\n", file.display());
    let tail = format!("EOF\nwc -c < '{}'; echo \"$0\"; exit 3", file.display());
    let size = len - head.len() - tail.len();
    let mut content = String::with_capacity(size);
    for i in 0.. {
        let line = format!("{i:07} $HOME ${{x}} `id` $(id) \\ 'q' \"d\" \tEOF é 日本\r\n");
        if content.len() + line.len() >= size {
            break;
        }
        content.push_str(&line);
    }
    content.push_str(&"z".repeat(size - content.len() - 1));
    content.push('\n');
    let command = format!("{head}{content}{tail}");
    assert_eq!(command.len(), len);
    (command, content)
}

/// Commands from just under the kernel's limit on one argument (128 KiB) to exactly the
/// default `--max-command-bytes` run whole, as `bash -c` would: a heredoc writes its file byte
/// for byte, `$0` is what a short command sees, the exit code is kept.
#[test]
fn commands_up_to_the_limit_write_files_through_heredocs() {
    let dir = tempfile::tempdir().unwrap();
    let mut mcp = Mcp::start(&[]);
    let short = mcp.bash("echo \"$0\"");
    let dollar0 = texts(&short)[0].to_string();
    assert!(dollar0.ends_with("bash\n"), "{dollar0}");
    for len in [100_000, 200_000, MAX_COMMAND_BYTES] {
        let file = dir.path().join(format!("written-{len}"));
        let (command, content) = heredoc_command(&file, len);
        let r = mcp.bash(&command);
        assert!(!is_error(&r), "{len} bytes: {r}");
        assert_eq!(
            texts(&r),
            [format!("{}\n{dollar0}[exit code: 3]", content.len())],
            "{len} bytes"
        );
        let written = std::fs::read(&file).unwrap_or_else(|e| panic!("{len} bytes: {e}"));
        assert!(
            written == content.as_bytes(),
            "{len} bytes: the file differs"
        );
    }
}

/// A command one byte over the limit, the default one or one lowered with
/// `--max-command-bytes`, is an error naming the limit and the flag, and nothing of it runs.
#[test]
fn commands_over_the_limit_are_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    for (flags, limit) in [
        (vec![], MAX_COMMAND_BYTES),
        (vec!["--max-command-bytes", "5000"], 5000),
    ] {
        let mut mcp = Mcp::start(&flags);
        let marker = dir.path().join(format!("ran-{limit}"));
        let touch = format!("touch '{}'\n#", marker.display());
        let over = format!("{touch}{}", "x".repeat(limit + 1 - touch.len()));
        for background in [false, true] {
            let r = mcp.call(
                "bash",
                json!({
                    "command": over,
                    "description": "Run an oversized command",
                    "run_in_background": background,
                }),
            );
            assert!(is_error(&r), "{r}");
            assert_eq!(
                texts(&r),
                [format!(
                    "Error: command too long: {} bytes, more than the limit of {limit} bytes \
                     (--max-command-bytes); nothing was run. Split the work into smaller \
                     commands (write a large file in parts, e.g. appending with >>)",
                    limit + 1
                )]
            );
        }
        assert!(!marker.exists(), "a refused command ran");
        // Nothing was started in the background either.
        let r = mcp.call("bash_output", json!({ "task_id": "bash-1" }));
        assert_eq!(texts(&r), [r#"Error: unknown bash task "bash-1""#]);
    }
}

#[test]
fn completion_notices_are_notified_and_ride_on_the_next_result_once() {
    let mut mcp = Mcp::start(&[]);
    let r = mcp.call(
        "bash",
        json!({ "command": "sleep 0.2; echo done", "description": "Finish soon", "run_in_background": true }),
    );
    assert_eq!(texts(&r), ["started background task bash-1"]);
    assert!(!is_error(&r));

    let message = mcp.notification("notifications/message");
    assert_eq!(message["params"]["logger"], "tool-bash");
    assert_eq!(message["params"]["level"], "info");
    assert_eq!(message["params"]["data"], NOTICE);

    let r = mcp.call("bash_output", json!({ "task_id": "bash-1" }));
    let blocks = texts(&r);
    assert_eq!(blocks.len(), 2, "{r}");
    assert!(blocks[0].starts_with("done\n"), "{r}");
    assert_eq!(blocks[1], NOTICE);

    // Once only.
    let r = mcp.bash("echo again");
    assert_eq!(texts(&r), ["again\n"]);
    assert!(mcp.stash.is_empty(), "unexpected messages: {:?}", mcp.stash);
}

#[test]
fn cancelled_notification_kills_the_foreground_command() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let mut mcp = Mcp::start(&[]);
    let cancelled = mcp.request(
        "tools/call",
        json!({ "name": "bash", "arguments": { "command": sleeper(&pid_file), "description": "Sleep long" } }),
    );
    let pid = read_pid(&pid_file);
    assert!(alive(pid));
    mcp.notify(
        "notifications/cancelled",
        json!({ "requestId": cancelled, "reason": "test" }),
    );
    wait_gone(pid, Duration::from_secs(10));

    // The server keeps serving.
    let r = mcp.bash("echo still here");
    assert_eq!(texts(&r), ["still here\n"]);
    // rmcp drops the response of a cancelled request; should one come, it is the abort error.
    if let Some(i) = mcp
        .stash
        .iter()
        .position(|m| m.get("id") == Some(&json!(cancelled)))
    {
        let response = &mcp.stash[i];
        assert_eq!(
            texts(&response["result"]),
            ["Error: command aborted"],
            "{response}"
        );
    }
}

#[test]
fn malformed_json_gets_a_parse_error_and_serving_goes_on() {
    let mut mcp = Mcp::spawn(&[]);
    // Before the handshake...
    mcp.send_line("this is not json");
    let error = mcp.find(STARTUP_TIMEOUT, "parse error", |m| m.get("error").is_some());
    assert_eq!(error["error"]["code"], -32700, "{error}");
    assert_eq!(error.get("id"), Some(&Value::Null), "{error}");
    mcp.initialize();

    // ...and after it.
    mcp.send_line(r#"{"jsonrpc": "2.0", "id": 99, "method": "#);
    let error = mcp.find(READ_TIMEOUT, "parse error", |m| m.get("error").is_some());
    assert_eq!(error["error"]["code"], -32700, "{error}");
    assert_eq!(error.get("id"), Some(&Value::Null), "{error}");
    assert_eq!(error["jsonrpc"], "2.0");

    let r = mcp.bash("echo ok");
    assert_eq!(texts(&r), ["ok\n"]);
}

/// More calls at once than the server runs (240, the guest instance pool less what it keeps for
/// notices), with a session limit above that: the calls beyond it are answered at once with the
/// server's limit, never queued unseen; every other call gets its own answer, and none shows the
/// pool's limit as a trap.
#[test]
fn more_calls_at_once_than_the_server_runs_are_refused_not_queued() {
    let mut mcp = Mcp::start(&["--max-calls-in-flight", "300"]);
    let ids: Vec<i64> = (0..300)
        .map(|i| {
            mcp.request(
                "tools/call",
                json!({"name": "bash", "arguments": {"command": format!("sleep 1; echo {i}"), "description": "Wait"}}),
            )
        })
        .collect();
    let mut refused = 0;
    for (i, id) in ids.into_iter().enumerate() {
        let answer = mcp.find(Duration::from_secs(60), "a call's answer", |m| {
            m.get("id") == Some(&id.into())
        });
        if let Some(error) = answer.get("error") {
            assert_eq!(
                error["message"],
                "too many tool calls in flight on this server: the limit is 240 \
                 (--max-calls-total); wait for a call to finish",
                "{answer}"
            );
            refused += 1;
            continue;
        }
        assert_eq!(texts(&answer["result"]), [format!("{i}\n")], "{answer}");
    }
    assert_eq!(refused, 60);
}

/// A message longer than the 16 MiB line limit is answered with an error for its id when the id
/// comes before the limit, with a null id otherwise; serving goes on.
#[test]
fn an_oversized_message_is_answered_for_its_id() {
    let mut mcp = Mcp::start(&[]);
    let big = "x".repeat(17 << 20);
    mcp.send_line(&format!(
        r#"{{"jsonrpc":"2.0","id":41,"method":"tools/call","params":{{"name":"bash","arguments":{{"command":"echo {big}","description":"d"}}}}}}"#
    ));
    let error = mcp.find(READ_TIMEOUT, "the answer to 41", |m| {
        m.get("id") == Some(&41.into())
    });
    assert_eq!(error["error"]["code"], -32600, "{error}");
    assert_eq!(
        error["error"]["message"],
        "Invalid request: message longer than 16777216 bytes"
    );
    mcp.send_line(&format!(
        r#"{{"jsonrpc":"2.0","method":"tools/call","params":{{"arguments":{{"command":"echo {big}"}}}},"id":42}}"#
    ));
    let error = mcp.find(READ_TIMEOUT, "an answer with a null id", |m| {
        m.get("id") == Some(&Value::Null)
    });
    assert_eq!(error["error"]["code"], -32600, "{error}");
    let r = mcp.bash("echo ok");
    assert_eq!(texts(&r), ["ok\n"]);
}

#[test]
fn stdin_eof_ends_the_server_and_kills_running_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let mut mcp = Mcp::start(&[]);
    let pid = start_sleeper_task(&mut mcp, &pid_file);
    assert!(alive(pid));

    mcp.close_stdin();
    let status = mcp.wait_exit(READ_TIMEOUT);
    assert!(
        status.success(),
        "exit status {status}; stderr:\n{}",
        mcp.stderr()
    );
    // Killed and waited for before the server exited.
    assert!(!alive(pid), "background task {pid} survived the server");
}

#[test]
fn sigterm_ends_the_server_and_kills_running_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let mut mcp = Mcp::start(&[]);
    let pid = start_sleeper_task(&mut mcp, &pid_file);

    // stdin stays open: the signal alone ends the server.
    mcp.signal(libc::SIGTERM);
    let status = mcp.wait_exit(READ_TIMEOUT);
    assert!(
        status.success(),
        "exit status {status}; stderr:\n{}",
        mcp.stderr()
    );
    assert!(!alive(pid), "background task {pid} survived the server");
}

/// The library entry point over an in-process byte stream: the same session, and the same end
/// when the input ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_runs_a_session_over_any_byte_stream() {
    use dsh_host::executor::{Config, Executor, LocalExecutor};
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let config = Config {
        grace_ms: 200.0,
        ..Config::default()
    };
    let executor: Arc<dyn Executor> = LocalExecutor::new(config, tx).expect("valid config");
    let mut options = dsh_host::HostOptions::new();
    options.cache_dir = Some(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("component-cache"));
    let host = dsh_host::ToolHost::new(options, executor, rx)
        .await
        .expect("host loads");

    let (client, server) = tokio::io::duplex(1 << 16);
    let (server_read, server_write) = tokio::io::split(server);
    let serving = tokio::spawn(dsh_host::mcp::serve(
        host.clone(),
        dsh_host::mcp::McpOptions::default(),
        server_read,
        server_write,
    ));
    let (client_read, mut client_write) = tokio::io::split(client);
    let mut lines = tokio::io::BufReader::new(client_read).lines();
    let mut exchange = async |request: Value| -> Value {
        client_write
            .write_all(format!("{request}\n").as_bytes())
            .await
            .unwrap();
        let line = tokio::time::timeout(READ_TIMEOUT, lines.next_line())
            .await
            .expect("an answer in time")
            .unwrap()
            .expect("an answer before the end of the stream");
        serde_json::from_str(&line).unwrap()
    };

    let init = exchange(json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "t", "version": "0" } },
    }))
    .await;
    assert_eq!(init["result"]["serverInfo"]["name"], "dsh-host");
    assert_eq!(
        init["result"]["serverInfo"]["title"],
        dsh_host::mcp::SERVER_TITLE
    );
    assert_eq!(init["result"]["instructions"], host.instructions());
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let started = exchange(json!({
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": { "name": "bash", "arguments": {
            "command": sleeper(&pid_file), "description": "Sleep in the background", "run_in_background": true,
        } },
    }))
    .await;
    assert_eq!(
        texts(&started["result"]),
        ["started background task bash-1"]
    );
    let pid = read_pid(&pid_file);
    assert!(alive(pid));

    client_write.shutdown().await.unwrap();
    drop(client_write);
    tokio::time::timeout(READ_TIMEOUT, serving)
        .await
        .expect("serve returns at the end of its input")
        .unwrap()
        .expect("serve ends cleanly");
    assert!(!alive(pid), "background task {pid} survived serve");
    let task = host.executor().get("bash-1").unwrap();
    assert_eq!(task.state, dsh_host::executor::TaskState::Killed);
}

#[test]
fn the_server_is_not_a_target_of_its_commands() {
    let mut mcp = Mcp::start(&[]);
    for command in [
        "kill -TERM $PPID; sleep 0.2; echo after-term",
        "kill -HUP $PPID; kill -INT $PPID; sleep 0.2; echo after-hup",
        "kill -TERM 0",
    ] {
        let r = mcp.bash(command);
        assert!(!is_error(&r), "{command}: {r}");
    }
    // The server still serves, in the same session.
    let r = mcp.bash("echo still here");
    assert_eq!(texts(&r), ["still here\n"]);
    assert!(mcp.child.try_wait().unwrap().is_none(), "the server exited");
}

/// No process group or session a command can name holds the server, the process that started
/// it (whose group the server shares, as when a client spawns its server without a group of its
/// own) or another task: `kill 0`, the group and the session of `$PPID`, the group of the
/// factory that forked `$PPID`, with TERM and KILL, in both containment modes. Each hits at most
/// the command and its own helper; the server serves the next call. (`kill -1` is left out: as
/// root it signals every process of the machine. The host's own group is left out too: a
/// command that looks the host's pid up deliberately can signal it, as docs/security.md says.)
#[test]
fn no_group_or_session_a_command_can_name_holds_the_server_or_its_caller() {
    use std::os::unix::process::CommandExt;
    let factory = "f=$(ps -o ppid= -p $PPID | tr -d ' ')";
    let attacks = [
        "kill -TERM 0; echo after".to_string(),
        "kill -KILL 0".to_string(),
        "kill -TERM -- -$(ps -o pgid= -p $PPID | tr -d ' '); echo after".to_string(),
        "kill -KILL -- -$(ps -o pgid= -p $PPID | tr -d ' ')".to_string(),
        "kill -HUP -- -$(ps -o sid= -p $PPID | tr -d ' '); echo after".to_string(),
        format!("{factory}; kill -TERM -- -$(ps -o pgid= -p $f | tr -d ' '); echo after"),
        format!("{factory}; kill -KILL -- -$(ps -o pgid= -p $f | tr -d ' '); echo after"),
    ];
    for containment in ["auto", "subreaper"] {
        let mut caller = Command::new("sleep")
            .arg("60")
            .process_group(0)
            .spawn()
            .unwrap();
        let group = caller.id() as i32;
        let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("component-cache");
        let args = ["--grace-ms", "200", "--containment", containment];
        let mut mcp = Mcp(mcp_child::spawn_with(args, &cache, |c| {
            c.process_group(group);
        }));
        mcp.initialize();
        let dir = tempfile::tempdir().unwrap();
        let task = start_sleeper_task(&mut mcp, &dir.path().join("pid"));
        for attack in &attacks {
            // Whatever becomes of the command itself, as long as its target was found.
            let r = mcp.bash(attack);
            let what = format!("{containment}: `{attack}`");
            assert!(!texts(&r).concat().contains("kill:"), "{what}: {r}");
            assert!(
                mcp.child.try_wait().unwrap().is_none(),
                "{what} ended the server"
            );
            assert!(
                caller.try_wait().unwrap().is_none(),
                "{what} ended the caller"
            );
            assert!(alive(task), "{what} ended another task");
            assert_eq!(texts(&mcp.bash("echo next")), ["next\n"], "{what}");
        }
        let _ = caller.kill();
        let _ = caller.wait();
    }
}

#[test]
fn a_background_server_in_the_foreground_returns_with_the_marker() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let mut mcp = Mcp::start(&[]);
    let started = Instant::now();
    let r = mcp.bash(&format!("{} & echo started", sleeper(&pid_file)));
    // Leader exit, a drain of at most the grace (200 ms), then TERM and grace: far below 30 s.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        texts(&r),
        [
            "started\n[stopped 1 leftover background process(es); use run_in_background for long-lived processes]"
        ]
    );
    let pid = read_pid(&pid_file);
    assert!(!alive(pid), "leftover {pid} survived");
}

#[test]
fn sigkill_of_the_server_takes_its_commands_along() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let mut mcp = Mcp::start(&[]);
    let pid = start_sleeper_task(&mut mcp, &pid_file);
    mcp.signal(libc::SIGKILL);
    let _ = mcp.wait_exit(READ_TIMEOUT);
    // Measured in tens of milliseconds; the bound is one second.
    wait_gone(pid, Duration::from_secs(1));
}

#[test]
fn numbers_beyond_f64_reach_the_tool_and_get_its_validation_error() {
    let mut mcp = Mcp::start(&[]);
    // `JSON.parse` reads 1e400 as Infinity, which is not a finite timeout (printed as null).
    for (id, timeout) in [(51, "1e400"), (52, "-1E+999")] {
        mcp.send_line(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"bash","arguments":{{"command":"echo ran","description":"d","timeoutMs":{timeout}}}}}}}"#
        ));
        let answer = mcp.find(READ_TIMEOUT, "the tool's answer", |m| {
            m.get("id") == Some(&id.into())
        });
        assert_eq!(answer["result"]["isError"], true, "{answer}");
        assert_eq!(
            texts(&answer["result"]),
            ["Error: invalid timeoutMs: expected a positive number, got null"],
            "{answer}"
        );
    }
    // A big number inside a string stays a string; one in range is used as is.
    let r = mcp.call(
        "bash",
        serde_json::json!({"command": "echo '1e400'", "description": "d", "timeoutMs": 1e300}),
    );
    assert_eq!(texts(&r), ["1e400\n"]);
}

/// Calls beyond the session's limit, or the server's, are answered at once with an error naming
/// that limit and its flag (never queued); the calls in flight are not disturbed, and a slot frees
/// when a call ends. Without flags, 20 calls at once meet the session's default of 16.
#[test]
fn calls_beyond_the_in_flight_limits_get_an_error_naming_them() {
    for (flags, calls, limit, scope, flag) in [
        (
            &["--max-calls-in-flight", "3"][..],
            5,
            3,
            "in this session",
            "--max-calls-in-flight",
        ),
        (
            &["--max-calls-total", "3"][..],
            5,
            3,
            "on this server",
            "--max-calls-total",
        ),
        (&[][..], 20, 16, "in this session", "--max-calls-in-flight"),
    ] {
        let mut mcp = Mcp::start(flags);
        let ids: Vec<i64> = (0..calls)
            .map(|i| {
                mcp.request(
                    "tools/call",
                    json!({"name": "bash", "arguments": {"command": format!("sleep 2; echo {i}"), "description": "Wait"}}),
                )
            })
            .collect();
        let answers: Vec<Value> = ids
            .iter()
            .map(|&id| {
                mcp.find(READ_TIMEOUT, "a call's answer", |m| {
                    m.get("id") == Some(&id.into())
                })
            })
            .collect();
        let refused: Vec<&Value> = answers
            .iter()
            .filter(|a| a.get("error").is_some())
            .collect();
        assert_eq!(refused.len(), calls - limit, "{flags:?}: {answers:?}");
        for answer in refused {
            assert_eq!(answer["error"]["code"], -32000, "{answer}");
            assert_eq!(
                answer["error"]["message"],
                format!(
                    "too many tool calls in flight {scope}: the limit is {limit} ({flag}); \
                     wait for a call to finish"
                )
            );
        }
        let ran: Vec<&str> = answers
            .iter()
            .filter_map(|a| a.get("result"))
            .flat_map(|r| texts(r))
            .collect();
        assert_eq!(ran.len(), limit, "{flags:?}: {answers:?}");
        // Every slot is free again.
        for i in 0..3 {
            let r = mcp.bash(&format!("echo again {i}"));
            assert_eq!(texts(&r), [format!("again {i}\n")]);
        }
    }
}

/// `--max-calls-total` above what the server runs at once is a usage error naming the bound.
#[test]
fn a_server_wide_call_limit_above_the_hosts_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_dsh-host"))
        .args(["mcp", "--max-calls-total", "241"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--max-calls-total") && stderr.contains("expected 1 to 240"),
        "{stderr}"
    );
}

/// A client that leaves mid-call (its input ends): the call is aborted at once, its command
/// killed, and the server exits within the kill grace, not after waiting for the call's answer.
#[test]
fn a_client_leaving_mid_call_ends_the_command_and_the_server_promptly() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let mut mcp = Mcp::start(&[]);
    mcp.request(
        "tools/call",
        json!({"name": "bash", "arguments": {"command": sleeper(&pid_file), "description": "Sleep"}}),
    );
    let deadline = Instant::now() + READ_TIMEOUT;
    let pid = loop {
        if let Some(pid) = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
        {
            break pid;
        }
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(10));
    };
    let left = Instant::now();
    mcp.close_stdin();
    let status = mcp.wait_exit(READ_TIMEOUT);
    // The grace is 200 ms here; waiting for the call's answer took 5 s.
    let took = left.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "the server took {took:?} to exit"
    );
    assert!(
        status.success(),
        "exit status {status}; stderr:\n{}",
        mcp.stderr()
    );
    assert!(!alive(pid), "the command {pid} survived the server");
}

/// A request before `initialize` is answered saying the session is not initialized (not with the
/// 2026-07-28 revision's missing `_meta` fields); `ping` is answered; after `initialize` calls run.
#[test]
fn a_call_before_initialize_is_told_the_session_is_not_initialized() {
    let mut mcp = Mcp::spawn(&[]);
    let early = mcp.request(
        "tools/call",
        json!({"name": "bash", "arguments": {"command": "echo early", "description": "d"}}),
    );
    let answer = mcp.find(READ_TIMEOUT, "the early call's answer", |m| {
        m.get("id") == Some(&early.into())
    });
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    assert!(
        answer["error"]["message"].as_str().unwrap().starts_with(
            "Invalid request: the session is not initialized; send initialize before tools/call"
        ),
        "{answer}"
    );
    let ping = mcp.request("ping", json!({}));
    assert_eq!(mcp.result(ping), json!({}));
    mcp.initialize();
    assert_eq!(texts(&mcp.bash("echo later")), ["later\n"]);
}

/// A 2026-07-28 client opens the session without `initialize`, with the revision's `_meta`.
#[test]
fn a_request_with_the_inline_lifecycle_meta_needs_no_initialize() {
    let mut mcp = Mcp::spawn(&[]);
    let id = mcp.request(
        "tools/list",
        json!({"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}
        }}),
    );
    let tools = mcp.result_within(id, STARTUP_TIMEOUT);
    assert_eq!(tools["tools"].as_array().map(Vec::len), Some(3), "{tools}");
}

/// A 2026-07-28 client learns the instructions and the server's title from `server/discover`,
/// as older ones do from `initialize`.
#[test]
fn discovery_carries_the_instructions_and_the_title() {
    let mut mcp = Mcp::spawn(&[]);
    let id = mcp.request(
        "server/discover",
        json!({"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}
        }}),
    );
    let found = mcp.result_within(id, STARTUP_TIMEOUT);
    assert_eq!(found["instructions"], component_instructions(), "{found}");
    let info = &found["_meta"]["io.modelcontextprotocol/serverInfo"];
    assert_eq!(info["name"], "dsh-host", "{found}");
    assert_eq!(info["title"], "dsh bash tools", "{found}");
}

/// From revision 2026-07-28 on, a request opts in to log messages with the `_meta` log level: a
/// completion notice is sent as `notifications/message` only to a session whose latest call asked
/// for `info` or lower, and always rides on the next result.
#[test]
fn per_request_log_levels_decide_whether_notices_are_logged() {
    for (opt_in, logged) in [
        (None, false),
        (Some("error"), false),
        (Some("info"), true),
        (Some("debug"), true),
    ] {
        let mut meta = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}
        });
        if let Some(level) = opt_in {
            meta["io.modelcontextprotocol/logLevel"] = json!(level);
        }
        let mut mcp = Mcp::spawn(&[]);
        let call = |mcp: &mut Mcp, arguments: Value| {
            let id = mcp.request(
                "tools/call",
                json!({"name": "bash", "arguments": arguments, "_meta": meta}),
            );
            mcp.result_within(id, STARTUP_TIMEOUT)
        };
        let r = call(
            &mut mcp,
            json!({"command": "true", "description": "d", "run_in_background": true}),
        );
        assert_eq!(texts(&r), ["started background task bash-1"], "{opt_in:?}");
        let r = call(
            &mut mcp,
            json!({"command": "sleep 0.5; echo x", "description": "d"}),
        );
        assert_eq!(texts(&r), ["x\n", NOTICE], "{opt_in:?}");
        // A round trip (2026-07-28 has no ping): a notice logged was written before its answer.
        let list = mcp.request("tools/list", json!({"_meta": meta}));
        mcp.result(list);
        let message = mcp
            .0
            .find(Duration::from_millis(300), "a log message", |m| {
                m.get("method") == Some(&json!("notifications/message"))
            });
        assert_eq!(message.is_ok(), logged, "{opt_in:?}: {message:?}");
    }
}

/// A call whose request carries a `progressToken` gets `notifications/progress` at the interval,
/// with growing progress, until its result; a call without one gets none.
#[test]
fn a_call_with_a_progress_token_reports_progress_until_its_result() {
    let mut mcp = Mcp::start(&["--progress-interval-ms", "150"]);
    let id = mcp.request(
        "tools/call",
        json!({"name": "bash", "arguments": {"command": "printf 12345; sleep 1; echo done", "description": "d"},
               "_meta": {"progressToken": "p-1"}}),
    );
    let result = mcp.result(id);
    assert_eq!(texts(&result), ["12345done\n"]);
    let plain = mcp.request(
        "tools/call",
        json!({"name": "bash", "arguments": {"command": "sleep 0.5", "description": "d"}}),
    );
    mcp.result(plain);
    let mut reports = Vec::new();
    while let Ok(report) = mcp.0.find(Duration::from_millis(300), "progress", |m| {
        m.get("method") == Some(&json!("notifications/progress"))
    }) {
        reports.push(report["params"].clone());
    }
    assert!(reports.len() >= 3, "{reports:?}");
    let mut last = 0.0;
    for report in &reports {
        assert_eq!(report["progressToken"], "p-1", "{reports:?}");
        let progress = report["progress"].as_f64().unwrap();
        assert!(progress > last && progress < 1.5, "{reports:?}");
        last = progress;
        assert!(
            report["message"]
                .as_str()
                .unwrap()
                .starts_with("running for "),
            "{report}"
        );
    }
    // By the last report the command had written its first 5 bytes.
    let last = reports.last().unwrap()["message"].as_str().unwrap();
    assert!(last.ends_with(" s; 5 bytes of output so far"), "{last}");
}

/// The line that follows the output so far of a call that continues as task `bash-1`.
const YIELDED_AT_300: &str = "[still running after 300ms; continues as background task bash-1; read its output with bash_output]";

#[test]
fn with_yield_after_ms_a_long_call_returns_its_output_so_far_and_continues_as_a_task() {
    let mut mcp = Mcp::start(&["--yield-after-ms", "300"]);
    let started = Instant::now();
    let r = mcp.bash("echo a; sleep 2; echo b");
    let returned = started.elapsed();
    assert_eq!(texts(&r), [format!("a\n{YIELDED_AT_300}")]);
    assert!(!is_error(&r));
    assert!(returned < Duration::from_millis(1800), "{returned:?}");

    // What the call returned is not read again.
    let r = mcp.call("bash_output", json!({ "task_id": "bash-1" }));
    assert_eq!(texts(&r), ["(no new output)\n[status: running]"]);

    let message = mcp.notification("notifications/message");
    assert_eq!(message["params"]["logger"], "tool-bash");
    assert_eq!(message["params"]["data"], NOTICE);
    let r = mcp.call("bash_output", json!({ "task_id": "bash-1" }));
    assert_eq!(
        texts(&r),
        ["b\n\n[status: completed, exit code: 0]", NOTICE]
    );
}

#[test]
fn a_yielded_task_is_stopped_with_bash_kill() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let mut mcp = Mcp::start(&["--yield-after-ms", "300"]);
    let r = mcp.bash(&sleeper(&pid_file));
    assert_eq!(texts(&r), [format!("(no output)\n{YIELDED_AT_300}")]);
    let pid = read_pid(&pid_file);
    let r = mcp.call("bash_kill", json!({ "task_id": "bash-1" }));
    assert_eq!(texts(&r), ["killed background task bash-1"]);
    wait_gone(pid, READ_TIMEOUT);
    let message = mcp.notification("notifications/message");
    assert_eq!(
        message["params"]["data"],
        "background bash task bash-1 finished [status: killed by SIGTERM]. Read its output with bash_output."
    );
}

#[test]
fn without_yield_after_ms_a_long_call_runs_to_its_end() {
    let mut mcp = Mcp::start(&[]);
    let started = Instant::now();
    let r = mcp.bash("echo a; sleep 2; echo b");
    assert_eq!(texts(&r), ["a\nb\n"]);
    assert!(started.elapsed() >= Duration::from_secs(2));
    let r = mcp.call("bash_output", json!({ "task_id": "bash-1" }));
    assert_eq!(texts(&r), [r#"Error: unknown bash task "bash-1""#]);
}

/// A command nesting `$(` 25,000 deep inside a quoted value (about 75 KB) is refused as not
/// analysable under permission rules; the server stays up and serves the next call (the engine
/// once recursed through it and overflowed the stack, which aborted the whole server).
#[test]
fn a_deeply_nested_command_under_permission_rules_leaves_the_server_up() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("p.toml");
    std::fs::write(
        &policy,
        "[permissions]\ndefault = \"allow\"\ndeny = [\"Bash(rm *)\"]\n",
    )
    .unwrap();
    let mut mcp = Mcp::start(&["--policy", policy.to_str().unwrap()]);
    for command in [
        format!("x='{}l\\s{}'", "$(".repeat(25_000), ")".repeat(25_000)),
        format!(
            "cat <<EOF\n'{}ls{}'\nEOF",
            "$(".repeat(25_000),
            ")".repeat(25_000)
        ),
    ] {
        let r = mcp.bash(&command);
        assert!(is_error(&r), "{r}");
        let text = texts(&r)[0].to_string();
        assert!(
            text.starts_with("[policy: ") && text.contains("nesting more than 64 levels deep"),
            "{text}"
        );
    }
    assert_eq!(texts(&mcp.bash("echo still here")), ["still here\n"]);
}
