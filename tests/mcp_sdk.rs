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

/// The question `elicit_client.py` expects for `command` (its lines) needing approval of `part`,
/// asked because of the policy's default (line 2 of `policy.toml` in `scratch`).
fn permission_question(command: &str, part: &str, scratch: &std::path::Path) -> String {
    let lines: String = command.lines().map(|l| format!("    {l}\n")).collect();
    format!(
        "A command needs your approval before it runs.\n\nCommand:\n{lines}\n\
         Working directory: {}\n\nNeeds approval:\n    {part}\n\n\
         Asked because of: no rule allows it; the default is to ask ({}:2)\n",
        scratch.display(),
        scratch.join("policy.toml").display()
    )
}

/// Checks the outcome of every scenario of `elicit_client.py` run in `scratch` (canonical);
/// `rounds`: the client is on revision 2026-07-28, asked through input-required results.
fn check_permission_questions(r: &Value, scratch: &std::path::Path, rounds: bool) {
    let at = |name: &str| scratch.join(name).to_str().unwrap().to_string();
    let touch = |name: &str| format!("touch {}", at(name));
    // The choices: once, for the session (naming the rule it grants), deny; one is required.
    let schema = json!({
        "type": "object",
        "title": "Permission",
        "properties": {"decision": {"type": "string", "title": "Decision", "oneOf": [
            {"const": "allow_once", "title": "Allow once"},
            {"const": "allow_for_session", "title": "Allow Bash(touch *) for the rest of this session"},
            {"const": "deny", "title": "Deny"},
        ]}},
        "required": ["decision"],
    });
    let asked = |questions: &Value, command: &str, part: &str| {
        assert_eq!(
            questions,
            &json!([{
                "mode": "form",
                "message": permission_question(command, part, scratch),
                "schema": schema,
            }]),
            "{r}"
        );
    };
    // A refusal: one line with the prefix, naming the command, and an error.
    let refused = |result: &Value, prefix: &str, name: &str| {
        let text = result["text"].as_array().unwrap();
        assert_eq!(text.len(), 1, "{r}");
        let text = text[0].as_str().unwrap();
        assert!(
            text.starts_with(prefix),
            "{text:?} does not start with {prefix:?}"
        );
        assert!(!text.contains('\n'), "{text:?} is not one line");
        assert!(text.contains(&format!("`{}`", touch(name))), "{text:?}");
        assert_eq!(result["isError"], true, "{r}");
    };
    let ran = |result: &Value, text: &str| {
        assert_eq!(result["text"], json!([text]), "{r}");
        assert_eq!(result["isError"], false, "{r}");
    };

    // Allowed once: asked, and it ran.
    let once = &r["once"];
    asked(&once["questions"], &touch("once"), &touch("once"));
    ran(&once["result"], "(no output)");
    assert_eq!(once["created"], true, "{r}");

    // Allowed for the session: later `touch`es of that session ran unasked; another session,
    // open at the same time, was asked.
    let session = &r["session"];
    asked(&session["questions"], &touch("s1"), &touch("s1"));
    assert_eq!(session["asked_after_first"], 1, "{r}");
    assert_eq!(session["asked_after_second"], 1, "{r}");
    assert_eq!(session["asked_after_third"], 1, "{r}");
    for step in ["first", "second", "fresh", "third"] {
        ran(&session[step], "(no output)");
    }
    asked(&session["fresh_questions"], &touch("s3"), &touch("s3"));
    assert_eq!(
        session["created"],
        json!({"s1": true, "s2": true, "s3": true, "s4": true}),
        "{r}"
    );

    // Declined, cancelled, or accepted with no offered choice: refused as declined.
    let decline = &r["decline"];
    for name in ["declined", "cancelled", "bogus"] {
        refused(&decline[name], "[policy: declined by the user — ", name);
        assert_eq!(decline[name]["asked"], 1, "{name}: {r}");
    }
    assert_eq!(
        decline["created"],
        json!({"declined": false, "cancelled": false, "bogus": false}),
        "{r}"
    );

    // No answer in 1.5 s: refused then (not after the 4 s answer), the question withdrawn, the
    // late answer ignored, the session serving on. Asked through a result, the person answers
    // (the server waits for nobody) and the retry that brings the late answer is refused.
    let timeout = &r["timeout"];
    refused(
        &timeout["result"],
        "[policy: not approved in time — ",
        "late",
    );
    let text = timeout["result"]["text"][0].as_str().unwrap_or_default();
    assert!(text.contains("got no answer within 1.5 s."), "{r}");
    let elapsed = timeout["result"]["elapsed_s"].as_f64().unwrap();
    let (when, answered) = match rounds {
        false => (1.4..3.5, 0),
        true => (4.0..7.0, 1),
    };
    assert!(when.contains(&elapsed), "refused after {elapsed} s: {r}");
    assert_eq!(timeout["asked"], 1, "{r}");
    assert_eq!(timeout["callback_cancelled"], !rounds, "{r}");
    assert_eq!(timeout["callback_answered"], answered, "{r}");
    assert_eq!(timeout["created_at_refusal"], false, "{r}");
    assert_eq!(timeout["created"], false, "{r}");
    assert_eq!(timeout["after"]["isError"], false, "{r}");
    assert!(
        timeout["after"]["text"][0]
            .as_str()
            .unwrap()
            .contains("policy.toml\n"),
        "{r}"
    );

    // A client that cannot be asked: refused as such, with the rule an operator could add.
    let noask = &r["noask"];
    refused(&noask["result"], "[policy: needs approval — ", "noask");
    let text = noask["result"]["text"][0].as_str().unwrap();
    assert!(text.contains("this client cannot ask the user"), "{text:?}");
    let rule = format!(
        "An operator can allow it with the rule Bash({}).]",
        touch("noask")
    );
    assert!(text.ends_with(&rule), "{text:?} does not end with {rule:?}");
    assert_eq!(noask["created"], false, "{r}");

    // Two lines: the question shows both; the part needing approval is the `touch`.
    let multi = &r["multi"];
    let command = format!("echo one\n{}", touch("multi"));
    assert_eq!(multi["command"], command.as_str(), "{r}");
    asked(&multi["questions"], &command, &touch("multi"));
    let message = multi["questions"][0]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("    echo one\n    {}\n", touch("multi"))),
        "{message:?}"
    );
    ran(&multi["result"], "one\n");
    assert_eq!(multi["created"], true, "{r}");

    // Every question could be put.
    for stderr in r["stderr"].as_array().unwrap() {
        let stderr = stderr.as_str().unwrap();
        assert!(!stderr.contains("could not be asked"), "{stderr}");
    }
}

/// Runs every scenario of `elicit_client.py` over `transport` in a scratch directory and checks
/// them (`rounds`: asked through input-required results).
fn permission_questions(transport: &str, rounds: bool) {
    let scratch = tempfile::tempdir().unwrap();
    let scratch = std::fs::canonicalize(scratch.path()).unwrap();
    let r = python_client("elicit_client.py", &scratch, &[transport]);
    assert_eq!(r["transport"], transport, "{r}");
    check_permission_questions(&r, &scratch, rounds);
}

/// Permission questions (`--policy`, default "ask") put to the Python SDK's client over stdio
/// as form elicitations: allow once, allow for the session (later matches run unasked, a new
/// session asks again), decline, cancel, no answer in time, a client that cannot be asked, and
/// a command of two lines. What ran is checked on disk.
#[test]
fn python_sdk_client_answers_permission_questions_over_stdio() {
    permission_questions("stdio", false);
}

/// The same questions to the Python SDK's client pinned to revision 2026-07-28 over stdio, which
/// forbids server-to-client requests: each comes back as an input-required result holding the
/// same form, the SDK asks its callback and calls again with the answer and the sealed request
/// state, and only then does the command run (tests/mcp_input_required.rs alters that state).
#[test]
fn python_sdk_client_answers_permission_questions_through_results_on_2026_07_28() {
    permission_questions("stdio-2026", true);
}

/// The same questions over streamable HTTP: one server, an MCP session per scenario, so the
/// grant of one session does not reach the next.
#[test]
fn python_sdk_client_answers_permission_questions_over_http() {
    permission_questions("http", false);
}
