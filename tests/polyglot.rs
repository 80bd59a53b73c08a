//! One .wasm, many hosts: the golden cases in `tests/polyglot/golden/*.json` run in the Rust host
//! (this library), in the Python package (`bindings/python`, wasmtime-py, driven by
//! `tests/polyglot/python/golden.py`) and in the Node package (`bindings/node`, jco, installed from
//! its tarball into a fresh project), each with its own executor, and must give identical results.
//! The foreign hosts are shown to link nothing beyond the component's two `dsh:bash` interfaces.
//! (The README's examples run in `tests/bindings_python.rs` and `tests/bindings_node.rs`.)
//!
//! Both packages install themselves on first use: the Python one into a venv under `target/`
//! from hash-pinned requirements (`tests/support/python_venv.rs`), the Node one from its lock
//! files (`tests/support/node_package.rs`). What cannot be installed fails the tests, saying why.

#[path = "support/component_file.rs"]
mod component_file;
#[path = "support/nested_cargo.rs"]
mod nested_cargo;

#[path = "support/node_package.rs"]
mod node_package;

#[path = "support/rust_target.rs"]
mod rust_target;

#[path = "support/nats.rs"]
mod nats;
#[path = "support/provision.rs"]
mod provision;
#[path = "support/python_venv.rs"]
mod python_venv;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use dsh_host::executor::pool::{PoolExecutor, PoolOptions};
use dsh_host::executor::{Config, Executor, LocalExecutor, RemoteExecutor, TaskState};
use dsh_host::{Caller, ComponentSource, HostOptions, Session, ToolHost};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(10);
const SETTLE: Duration = Duration::from_millis(500);

fn polyglot_dir() -> PathBuf {
    provision::repo().join("tests").join("polyglot")
}

fn golden_dir() -> PathBuf {
    polyglot_dir().join("golden")
}

fn settings_path() -> PathBuf {
    polyglot_dir().join("settings.json")
}

fn settings() -> Value {
    serde_json::from_str(&std::fs::read_to_string(settings_path()).unwrap()).unwrap()
}

/// The very bytes the Rust host embeds, as a file the foreign hosts load.
fn component_file() -> PathBuf {
    component_file::embedded_component(&PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("polyglot"))
}

struct Case {
    name: String,
    value: Value,
}

fn cases() -> Vec<Case> {
    let mut cases: Vec<Case> = std::fs::read_dir(golden_dir())
        .expect("tests/polyglot/golden exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .map(|p| Case {
            name: p.file_stem().unwrap().to_string_lossy().into_owned(),
            value: serde_json::from_str(&std::fs::read_to_string(&p).unwrap())
                .unwrap_or_else(|e| panic!("{}: {e}", p.display())),
        })
        .collect();
    cases.sort_by(|a, b| a.name.cmp(&b.name));
    assert!(cases.len() >= 20, "the golden cases are missing");
    cases
}

/// A case's steps; a case without `steps` is one tool-call step.
fn steps(case: &Value) -> Vec<Value> {
    match case.get("steps") {
        Some(steps) => steps.as_array().unwrap().clone(),
        None => {
            let mut step = case.as_object().unwrap().clone();
            step.remove("about");
            step.remove("caller");
            vec![Value::Object(step)]
        }
    }
}

fn substitute(value: &Value, case_dir: &str) -> Value {
    match value {
        Value::String(s) => Value::String(s.replace("$CASE_DIR", case_dir)),
        Value::Array(items) => {
            Value::Array(items.iter().map(|v| substitute(v, case_dir)).collect())
        }
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), substitute(v, case_dir)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// What a step is expected to give, in the shape every host reports.
/// What `host` must answer for `step`: the step's own expectation, or for the Rust host
/// (`dsh-host`, which numbers each session's tasks on its own) the step's `inDshHost` where it
/// has one.
fn expected(host: &str, step: &Value) -> Option<Value> {
    if step.get("tool").is_some() {
        let want = match step.get("inDshHost") {
            Some(own) if host == "rust" => own,
            _ => step,
        };
        Some(json!({"text": want["text"], "isError": want["isError"]}))
    } else {
        step.get("texts").map(|texts| json!({ "notices": texts }))
    }
}

/// Compares a host's outcomes with the expectations; returns one line per mismatch.
fn mismatches(host: &str, case: &Case, outcomes: &[Value]) -> Vec<String> {
    let steps = steps(&case.value);
    let mut out = Vec::new();
    if outcomes.len() != steps.len() {
        out.push(format!(
            "{host} {}: {} outcomes for {} steps",
            case.name,
            outcomes.len(),
            steps.len()
        ));
        return out;
    }
    for (i, (step, got)) in steps.iter().zip(outcomes).enumerate() {
        let Some(want) = expected(host, step) else {
            continue;
        };
        let mut got_cmp = got.clone();
        if let Some(obj) = got_cmp.as_object_mut() {
            obj.remove("errorCode");
        }
        if got_cmp != want {
            out.push(format!(
                "{host} {} step {}: expected {want}, got {got}",
                case.name,
                i + 1
            ));
        }
        if let Some(code) = step.get("errorCode")
            && got.get("errorCode") != Some(code)
        {
            out.push(format!(
                "{host} {} step {}: expected error code {code}, got {}",
                case.name,
                i + 1,
                got.get("errorCode").unwrap_or(&Value::Null)
            ));
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The Rust host
// ---------------------------------------------------------------------------------------------

fn executor_config() -> Config {
    let s = settings();
    Config {
        default_timeout_ms: s["defaultTimeoutMs"].as_f64().unwrap(),
        max_timeout_ms: s["maxTimeoutMs"].as_f64().unwrap(),
        max_output_bytes: s["maxOutputBytes"].as_u64().unwrap(),
        grace_ms: s["graceMs"].as_f64().unwrap(),
        ..Config::default()
    }
}

/// Which executor the Rust host runs the cases on.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Behind {
    /// The in-process `LocalExecutor`.
    InProcess,
    /// `dsh-host executor serve --stdio` with the same settings, through `RemoteExecutor`.
    Served,
}

/// The command line serving an executor with the golden cases' settings.
fn serve_command() -> String {
    let s = settings();
    format!(
        "exec '{}' executor serve --stdio --timeout-ms {} --max-timeout-ms {} --max-output-bytes {} \
         --grace-ms {}",
        env!("CARGO_BIN_EXE_dsh-host"),
        s["defaultTimeoutMs"],
        s["maxTimeoutMs"],
        s["maxOutputBytes"],
        s["graceMs"]
    )
}

async fn rust_host() -> ToolHost {
    rust_host_on(Behind::InProcess).await
}

async fn rust_host_on(behind: Behind) -> ToolHost {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let executor: Arc<dyn Executor> = match behind {
        Behind::InProcess => LocalExecutor::new(executor_config(), tx).unwrap(),
        Behind::Served => RemoteExecutor::connect(&serve_command(), tx).unwrap(),
    };
    host_on(executor, rx).await
}

async fn host_on(
    executor: Arc<dyn Executor>,
    rx: tokio::sync::mpsc::UnboundedReceiver<dsh_host::executor::Task>,
) -> ToolHost {
    let options = HostOptions {
        component: ComponentSource::Embedded,
        cache_dir: Some(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("component-cache")),
        ..Default::default()
    };
    ToolHost::new(options, executor, rx).await.unwrap()
}

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < WAIT, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn run_case_in_rust(host: &ToolHost, case: &Case) -> Vec<Value> {
    let case_dir = tempfile::tempdir().unwrap();
    let dir = case_dir.path().to_str().unwrap().to_string();
    let default_caller = case.value.get("caller").cloned().unwrap_or(json!({}));
    let mut sessions: HashMap<String, Session> = HashMap::new();
    let mut outcomes = Vec::new();
    for step in steps(&case.value) {
        let step = substitute(&step, &dir);
        if let Some(tool) = step.get("tool").and_then(Value::as_str) {
            let mut caller = json!({"owner": "a", "cwd": null});
            for layer in [substitute(&default_caller, &dir), step["caller"].clone()] {
                for (k, v) in layer.as_object().into_iter().flatten() {
                    caller[k] = v.clone();
                }
            }
            let owner = caller["owner"].as_str().map(|name| {
                sessions
                    .entry(name.to_string())
                    .or_insert_with(|| host.open_session(None))
                    .owner()
                    .to_string()
            });
            let caller = Caller {
                owner,
                cwd: caller["cwd"].as_str().map(str::to_string),
            };
            let r = host
                .call(
                    tool,
                    &step["arguments"].to_string(),
                    &caller,
                    CancellationToken::new(),
                )
                .await;
            outcomes
                .push(json!({"text": r.text, "isError": r.is_error, "errorCode": r.error_code}));
        } else if let Some(file) = step.get("waitForFile").and_then(Value::as_str) {
            let path = case_dir.path().join(file);
            wait_until(file, || path.exists()).await;
            tokio::time::sleep(SETTLE).await;
            outcomes.push(Value::Null);
        } else if let Some(file) = step.get("createFile").and_then(Value::as_str) {
            std::fs::write(case_dir.path().join(file), "").unwrap();
            outcomes.push(Value::Null);
        } else if let Some(id) = step.get("waitForTask").and_then(Value::as_str) {
            let executor = host.executor().clone();
            wait_until(id, || {
                executor.get(id).map(|t| t.state) != Ok(TaskState::Running)
            })
            .await;
            outcomes.push(Value::Null);
        } else if let Some(name) = step.get("notices").and_then(Value::as_str) {
            let want = step["texts"].as_array().unwrap().len();
            let session = sessions
                .entry(name.to_string())
                .or_insert_with(|| host.open_session(None));
            let mut texts = Vec::new();
            let start = Instant::now();
            loop {
                for n in session.drain_injections() {
                    let good = n.source.kind == "plugin"
                        && n.source.plugin.as_deref() == Some("tool-bash");
                    texts.push(if good {
                        n.text
                    } else {
                        format!("BAD SOURCE {:?}: {}", n.source, n.text)
                    });
                }
                if texts.len() >= want {
                    break;
                }
                assert!(
                    start.elapsed() < WAIT,
                    "timed out waiting for notices for {name}"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            outcomes.push(json!({ "notices": texts }));
        } else {
            panic!("{}: unknown step {step}", case.name);
        }
    }
    outcomes
}

fn rust_tools(host: &ToolHost) -> Value {
    Value::Array(
        host.tools()
            .iter()
            .map(|t| {
                let a = t.annotations;
                json!({
                    "name": t.name,
                    "title": t.title,
                    "description": t.description,
                    "inputSchema": t.input_schema,
                    "annotations": {
                        "readOnlyHint": a.read_only_hint,
                        "destructiveHint": a.destructive_hint,
                        "idempotentHint": a.idempotent_hint,
                        "openWorldHint": a.open_world_hint,
                    },
                })
            })
            .collect(),
    )
}

async fn golden_cases_pass_on(behind: Behind) {
    let mut failures = Vec::new();
    for case in cases() {
        let host = rust_host_on(behind).await;
        let outcomes = run_case_in_rust(&host, &case).await;
        host.shutdown().await;
        failures.extend(mismatches("rust", &case, &outcomes));
    }
    assert!(failures.is_empty(), "{behind:?}:\n{}", failures.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn golden_cases_pass_in_the_rust_host() {
    golden_cases_pass_on(Behind::InProcess).await;
}

/// The same cases, the same expectations, with the executor behind `executor serve --stdio`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn golden_cases_pass_through_executor_serve() {
    golden_cases_pass_on(Behind::Served).await;
    // And the tool definitions, which name the executor's limits, are the in-process ones.
    let (served, local) = (rust_host_on(Behind::Served).await, rust_host().await);
    assert_eq!(rust_tools(&served), rust_tools(&local));
    served.shutdown().await;
    local.shutdown().await;
}

/// The same cases, the same expectations, with each case's sessions placed on a pool of two
/// nodes on NATS (`executor serve --nats`), through the host's `PoolExecutor`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn golden_cases_pass_through_the_pool() {
    /// The nodes, killed however the test ends.
    struct Nodes(Vec<std::process::Child>);
    impl Drop for Nodes {
        fn drop(&mut self) {
            for node in &mut self.0 {
                let _ = node.kill();
                let _ = node.wait();
            }
        }
    }
    let cluster = tokio::task::spawn_blocking(|| nats::Cluster::start(1))
        .await
        .unwrap();
    let s = settings();
    let _nodes = Nodes(
        (0..2)
            .map(|i| {
                Command::new(env!("CARGO_BIN_EXE_dsh-host"))
                    .args(["executor", "serve", "--nats", &cluster.url(0)])
                    .args(["--node-id", &format!("golden-{i}")])
                    .args(["--nats-heartbeat-ms", "200", "--nats-lease-ms", "1500"])
                    .arg(format!("--timeout-ms={}", s["defaultTimeoutMs"]))
                    .arg(format!("--max-timeout-ms={}", s["maxTimeoutMs"]))
                    .arg(format!("--max-output-bytes={}", s["maxOutputBytes"]))
                    .arg(format!("--grace-ms={}", s["graceMs"]))
                    .stdin(std::process::Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect(),
    );
    let options = PoolOptions {
        urls: cluster.urls(),
        heartbeat: Duration::from_millis(200),
        lease: Duration::from_millis(1500),
        ..PoolOptions::default()
    };
    let mut failures = Vec::new();
    let mut first = None;
    for case in cases() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let connect = options.clone();
        let pool = tokio::task::spawn_blocking(move || PoolExecutor::connect(connect, tx))
            .await
            .unwrap()
            .unwrap();
        let host = host_on(pool, rx).await;
        let outcomes = run_case_in_rust(&host, &case).await;
        failures.extend(mismatches("rust", &case, &outcomes));
        match first {
            None => first = Some(host),
            Some(_) => host.shutdown().await,
        }
    }
    // The tool definitions, which name the executor's limits, are the in-process ones.
    let (pooled, local) = (first.unwrap(), rust_host().await);
    assert_eq!(rust_tools(&pooled), rust_tools(&local));
    pooled.shutdown().await;
    local.shutdown().await;
    assert!(failures.is_empty(), "the pool:\n{}", failures.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// The foreign hosts
// ---------------------------------------------------------------------------------------------

/// Runs a foreign host to its end, killing it if it hangs.
fn output_within(cmd: &mut Command, limit: Duration) -> std::process::Output {
    use std::process::Stdio;
    let program = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    let read = |mut pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            pipe.read_to_end(&mut buf).unwrap();
            buf
        })
    };
    let stdout = read(Box::new(child.stdout.take().unwrap()));
    let stderr = read(Box::new(child.stderr.take().unwrap()));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{program} did not finish within {limit:?}:\n{}",
                String::from_utf8_lossy(&stderr.join().unwrap())
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    std::process::Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
}

const FOREIGN_LIMIT: Duration = Duration::from_secs(180);

fn run_foreign(program: &str, args: &[&Path], cwd: &Path) -> Value {
    let started = Instant::now();
    let out = output_within(
        Command::new(program).args(args).current_dir(cwd),
        FOREIGN_LIMIT,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{program} {args:?} failed ({}):\n{stderr}",
        out.status
    );
    eprintln!("{program} ran the golden cases in {:?}", started.elapsed());
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{program} printed no JSON ({e}):\n{}\n{stderr}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Checks a foreign host's report: every case as expected and the same tool definitions (the
/// descriptions name the executor's limits) as the Rust host.
async fn check_foreign(host: &str, report: Value) {
    let rust = rust_host().await;
    let mut failures = Vec::new();
    if report["tools"] != rust_tools(&rust) {
        failures.push(format!(
            "{host}: tool definitions differ from the Rust host's:\n{}\nvs\n{}",
            report["tools"],
            rust_tools(&rust)
        ));
    }
    for case in cases() {
        match report["cases"][&case.name].as_array() {
            Some(outcomes) => failures.extend(mismatches(host, &case, outcomes)),
            None => failures.push(format!("{host} {}: not run", case.name)),
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

/// The golden cases through the Python package: its own executor, or with `dsh_host`, one behind
/// `dsh_host executor serve --stdio` (a `ServedExecutor` given the same settings as flags).
async fn python_golden(host: &str, dsh_host: Option<&Path>) {
    let python = python_venv::python();
    let dir = polyglot_dir().join("python");
    let (script, component) = (dir.join("golden.py"), component_file());
    let (golden, settings) = (golden_dir(), settings_path());
    let mut args = vec![&*script, &*component, &*golden, &*settings];
    args.extend(dsh_host);
    let report = run_foreign(
        python.to_str().expect("the venv path is UTF-8"),
        &args,
        &dir,
    );
    check_foreign(host, report).await;
}

/// The same through the Node package.
async fn node_golden(host: &str, dsh_host: Option<&Path>) {
    let project = node_package::project("polyglot");
    let (script, golden, settings) = (project.join("golden.mjs"), golden_dir(), settings_path());
    let mut args = vec![&*script, &*golden, &*settings];
    args.extend(dsh_host);
    let report = run_foreign("node", &args, &project);
    check_foreign(host, report).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn golden_cases_pass_in_the_python_package() {
    python_golden("python", None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn golden_cases_pass_in_the_python_package_through_executor_serve() {
    let dsh_host = Path::new(env!("CARGO_BIN_EXE_dsh-host"));
    python_golden("python through executor serve", Some(dsh_host)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn golden_cases_pass_in_the_node_package() {
    node_golden("node", None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn golden_cases_pass_in_the_node_package_through_executor_serve() {
    let dsh_host = Path::new(env!("CARGO_BIN_EXE_dsh-host"));
    node_golden("node through executor serve", Some(dsh_host)).await;
}

// ---------------------------------------------------------------------------------------------
// Nothing but the world
// ---------------------------------------------------------------------------------------------

/// The same tools built for `wasm32-wasip2`, whose std adds 13 `wasi:cli` and `wasi:io` imports:
/// the component the hosts were given before the tools were built without WASI. Built once per
/// test process.
fn wasip2_tools() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            rust_target::ensure("wasm32-wasip2").unwrap_or_else(|e| panic!("{e}"));
            let target_dir = provision::repo().join("target").join("guest-wasm");
            let mut cmd = Command::new(env!("CARGO"));
            cmd.current_dir(provision::repo())
                .args(["build", "-p", "guest-tools", "--release", "--lib"])
                .args(["--target", "wasm32-wasip2", "--target-dir"])
                .arg(&target_dir);
            nested_cargo::scrub_outer_cargo_env(&mut cmd);
            assert!(
                cmd.status().expect("cargo runs").success(),
                "building guest-tools for wasm32-wasip2 failed"
            );
            target_dir.join("wasm32-wasip2/release/guest_tools.wasm")
        })
        .clone()
}

/// The Python and Node packages link the two `dsh:bash` interfaces and nothing else: a tools
/// component that also imports WASI is refused at load, naming a WASI import. The Rust host
/// still runs it, with its deny-all WASI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_foreign_hosts_link_no_wasi() {
    // The package's own directory: `dsh-tools` resolves to it, and jco (which loading another
    // component needs) is among its build tools.
    let package = node_package::build_tools();
    let component = wasip2_tools();
    let python = output_within(
        Command::new(python_venv::python())
            .args([
                "-c",
                "import sys, dsh_tools; dsh_tools.Tools(component=sys.argv[1])",
            ])
            .arg(&component),
        FOREIGN_LIMIT,
    );
    let node = output_within(
        Command::new("node")
            .args([
                "--input-type=module",
                "-e",
                "const { Tools, loadComponent } = await import('dsh-tools'); \
                 new Tools({ component: await loadComponent(process.argv[1]) });",
            ])
            .arg(&component)
            .current_dir(&package),
        FOREIGN_LIMIT,
    );
    // Each package refuses it by its own import check, before any instantiation is tried.
    let python_refusal = "dsh_tools.component.ComponentError: the component imports more than \
                          dsh:bash/bash-executor and dsh:bash/agent";
    let node_refusal = "which this host does not provide";
    for (host, out, says) in [
        ("python", python, python_refusal),
        ("node", node, node_refusal),
    ] {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains("wasi:") && stderr.contains(says),
            "the {host} host loaded a component importing WASI ({}):\n{stderr}",
            out.status
        );
    }

    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let executor: Arc<dyn Executor> = LocalExecutor::new(executor_config(), tx).unwrap();
    let options = HostOptions {
        component: ComponentSource::File(component),
        cache_dir: Some(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("component-cache")),
        ..Default::default()
    };
    let host = ToolHost::new(options, executor, rx).await.unwrap();
    let args = json!({"command": "echo hello", "description": "Say hello"}).to_string();
    let r = host
        .call("bash", &args, &Caller::default(), CancellationToken::new())
        .await;
    assert_eq!((r.text.as_str(), r.is_error), ("hello\n", false));
    host.shutdown().await;
}
