//! `dsh-host mcp` driven by the official MCP SDKs' clients, as MCP users run it.
//!
//! The clients live in `tests/mcp-clients/` with pinned lock files; the tests install them on
//! first use (`support/provision.rs`: `npm ci` in `tests/mcp-clients/node`, the Python SDK into
//! the venv `target/test-env/mcp-clients/venv`). A client that cannot be installed fails the
//! test, saying why.

use std::path::PathBuf;
use std::process::Command;

#[path = "support/nested_cargo.rs"]
mod nested_cargo;
#[path = "support/procs.rs"]
mod procs;
#[path = "support/provision.rs"]
mod provision;
use procs::alive;

use serde_json::{Value, json};

fn clients_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/mcp-clients")
}

fn component_cache() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("component-cache")
}

/// The checked output of a client run: its one JSON line.
fn client_output(script: &str, out: std::process::Output) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{script} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{script} printed {stdout}: {e}"))
}

/// Runs a Python client script against the `dsh-host` binary.
fn python_client(script: &str, scratch: &std::path::Path, flags: &[&str]) -> Value {
    let python = provision::python_venv(
        "mcp-clients",
        &clients_dir().join("python/requirements.txt"),
    );
    let out = Command::new(&python)
        .arg(clients_dir().join("python").join(script))
        .arg(env!("CARGO_BIN_EXE_dsh-host"))
        .arg(scratch)
        .args(flags)
        .env("DSH_CACHE_DIR", component_cache())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    client_output(script, out)
}

/// Runs a Node client script against the `dsh-host` binary; its one JSON line of output.
fn node_client(script: &str, flags: &[&str]) -> Value {
    let dir = clients_dir().join("node");
    provision::npm_ci(&dir);
    let out = Command::new("node")
        .arg(dir.join(script))
        .arg(env!("CARGO_BIN_EXE_dsh-host"))
        .args(flags)
        .env("DSH_CACHE_DIR", component_cache())
        .output()
        .unwrap_or_else(|e| panic!("cannot run node: {e}"));
    client_output(script, out)
}

/// The TypeScript SDK times a request out unless progress arrives and the caller asked it to
/// reset the timeout on progress: a command that outlasts the timeout then completes with its
/// full result. Without the reset, the same call times out, so the progress is what kept it.
#[test]
fn typescript_sdk_client_outlasts_its_request_timeout_on_progress() {
    let r = node_client("progress.mjs", &["--progress-interval-ms", "300"]);
    assert_eq!(r["text"], serde_json::json!(["done\n"]), "{r}");
    assert_eq!(r["isError"], false, "{r}");
    let reports = r["reports"].as_array().unwrap();
    assert!(reports.len() >= 4, "{r}");
    assert!(
        reports
            .windows(2)
            .all(|w| w[0]["progress"].as_f64() < w[1]["progress"].as_f64()),
        "{r}"
    );
    assert_eq!(
        r["withoutReset"], "MCP error -32001: Request timed out",
        "{r}"
    );
}

/// The Python SDK's client over stdio: initialize, list, every tool, a completion notice as a log
/// message and as an extra block, cancellation by the client's own timeout (which kills the
/// command), and progress reports.
#[test]
fn python_sdk_client_uses_every_tool_over_stdio() {
    let scratch = tempfile::tempdir().unwrap();
    let r = python_client(
        "stdio_client.py",
        scratch.path(),
        &["--progress-interval-ms", "200", "--grace-ms", "200"],
    );
    assert_eq!(r["server"], "dsh-host", "{r}");
    let names: Vec<&str> = r["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["bash", "bash_output", "bash_kill"], "{r}");
    // Titles and hints as the SDK parsed them.
    assert_eq!(r["tools"][0]["title"], "Run a shell command", "{r}");
    assert_eq!(
        r["tools"][1]["annotations"],
        json!({"title": "Read background task output", "readOnlyHint": true,
               "destructiveHint": false, "idempotentHint": false, "openWorldHint": false}),
        "{r}"
    );
    assert_eq!(r["tools"][2]["annotations"]["idempotentHint"], true, "{r}");
    assert_eq!(r["foreground"], json!({"text": ["hi\n"], "isError": false}));
    assert_eq!(r["background"], json!(["started background task bash-1"]));
    let notice = "background bash task bash-1 finished [status: completed, exit code: 0]. \
                  Read its output with bash_output.";
    assert_eq!(
        r["logged"][0],
        json!({"level": "info", "logger": "tool-bash", "data": notice}),
        "{r}"
    );
    assert_eq!(
        r["output"],
        json!(["bg\n\n[status: completed, exit code: 0]", notice]),
        "{r}"
    );
    assert_eq!(r["second"], json!(["started background task bash-2"]));
    assert_eq!(r["kill"], json!(["killed background task bash-2"]));
    assert_eq!(r["cancelled"], "MCPError", "{r}");
    let pid = r["cancelled_pid"].as_i64().unwrap() as i32;
    assert!(!alive(pid), "the cancelled call's command {pid} still runs");
    assert_eq!(r["progress"]["text"][0], "slow\n", "{r}");
    let reports = r["progress"]["reports"].as_array().unwrap();
    assert!(reports.len() >= 3, "{r}");
}

/// The Python SDK's client offering roots over stdio: the first root is the session's cwd (the
/// first call waits for the slow answer), a change announced with `roots/list_changed` applies
/// to the next call, and a root the server cannot use (not `file://`, missing, none at all)
/// falls back to `--cwd`, with a log line saying why.
#[test]
fn python_sdk_client_roots_set_the_session_cwd_over_stdio() {
    let scratch = tempfile::tempdir().unwrap();
    // As bash's `pwd` prints it.
    let scratch = std::fs::canonicalize(scratch.path()).unwrap();
    let (x, y, default) = (
        scratch.join("x"),
        scratch.join("y"),
        scratch.join("default"),
    );
    for dir in [&x.join("sub"), &y, &default] {
        std::fs::create_dir_all(dir).unwrap();
    }
    let r = python_client(
        "stdio_roots.py",
        &scratch,
        &["--cwd", default.to_str().unwrap()],
    );
    let path = |p: &std::path::Path| json!(p.to_str().unwrap());
    assert_eq!(r["first"], path(&x), "{r}");
    assert_eq!(r["relative"], path(&x.join("sub")), "{r}");
    assert_eq!(r["changed"], path(&y), "{r}");
    assert_eq!(r["not_file"], path(&default), "{r}");
    assert_eq!(r["missing"], path(&default), "{r}");
    assert_eq!(r["none"], path(&default), "{r}");
    assert_eq!(r["back"], path(&x), "{r}");
    // Asked once after initialized, and once per change.
    assert_eq!(r["asked"], 6, "{r}");
    let stderr = r["stderr"].as_str().unwrap();
    let using = format!("; using --cwd {}", default.display());
    for reason in [
        "the first root \"https://example.com/repo\" is not a file:// URI".to_string(),
        format!(
            "the first root \"file://{}/missing\" names {}/missing: No such file or directory (os error 2)",
            scratch.display(),
            scratch.display()
        ),
        "the client offers no roots".to_string(),
    ] {
        let line = format!("session cwd: no client root used ({reason}){using}");
        assert!(stderr.contains(&line), "no line {line:?} in:\n{stderr}");
    }
    assert_eq!(
        stderr.matches("session cwd: no client root used").count(),
        3,
        "{stderr}"
    );
}
