//! Executors swap by composition: `policy/middleware/compose.sh` (docs/composing.md's "Compose an
//! executor" recipe) puts the policy middleware component in front of the tools component's
//! `bash-executor` import with `wac compose`. Loaded with `dsh-host --component`, the composed
//! component obeys the permission rules, with the host's words and the host's person to ask,
//! while the tools component's bytes are the same ones the host embeds, unchanged and embedded
//! verbatim in the composition.
//!
//! Needs `wac`, which the test installs on first use into `target/test-env/wac/`
//! (`support/provision.rs`); when it cannot, the test fails, saying why.

#[path = "support/component_file.rs"]
mod component_file;
#[path = "support/nested_cargo.rs"]
mod nested_cargo;
#[path = "support/policy_component.rs"]
mod policy_component;
#[path = "support/provision.rs"]
mod provision;

#[path = "support/python_venv.rs"]
mod python_venv;

#[path = "support/node_package.rs"]
mod node_package;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use dsh_host::executor::{BoxFuture, Config, Executor, LocalExecutor};
use dsh_host::policy::{Answer, Approvals, Approver, PolicyExecutor, Question, Rules};
use dsh_host::{ComponentSource, HostOptions, ToolHost};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

fn tmp() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("compose");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn sha256(path: &Path) -> String {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {path:?}: {e}"));
    component_file::sha256(&bytes)
}

struct Composed {
    path: PathBuf,
    tools_sha_before: String,
    tools_sha_after: String,
}

/// Runs the recipe of docs/composing.md once per test process.
fn composed() -> &'static Composed {
    static COMPOSED: OnceLock<Composed> = OnceLock::new();
    COMPOSED.get_or_init(|| {
        let tools = policy_component::tools_file();
        let tools_sha_before = sha256(&tools);
        let path = policy_component::composed();
        Composed {
            path,
            tools_sha_before,
            tools_sha_after: sha256(&tools),
        }
    })
}

/// Rules for these tests: `rm` denied, `git push` asked, everything else runs.
const POLICY: &str = r#"[permissions]
ask = ["Bash(git push *)"]
deny = ["Bash(rm *)"]
default = "allow"
"#;

fn policy_file() -> PathBuf {
    let path = tmp().join("policy.toml");
    std::fs::write(&path, POLICY).unwrap();
    path
}

fn dsh_host(component: Option<&Path>, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dsh-host"));
    cmd.env(
        "DSH_CACHE_DIR",
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("component-cache"),
    );
    cmd.env_remove("DSH_LOG");
    if let Some(path) = component {
        cmd.arg("--component").arg(path);
    }
    cmd.args(args).output().expect("dsh-host runs")
}

fn call(component: Option<&Path>, tool: &str, args: Value) -> Value {
    let out = dsh_host(component, &["call", tool, &args.to_string(), "--json"]);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "dsh-host call printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn bash(command: &str, timeout_ms: Option<f64>) -> Value {
    let mut args = json!({"command": command, "description": "Run a command through the policy"});
    if let Some(ms) = timeout_ms {
        args["timeoutMs"] = json!(ms);
    }
    args
}

#[test]
fn the_tools_component_is_unchanged_and_embedded_verbatim() {
    let c = composed();
    let embedded = dsh_host::engine::EMBEDDED_COMPONENT;
    let embedded_file = tmp().join("embedded.wasm");
    std::fs::write(&embedded_file, embedded).unwrap();
    assert_eq!(
        c.tools_sha_before, c.tools_sha_after,
        "composing changed the tools component"
    );
    assert_eq!(
        c.tools_sha_after,
        sha256(&embedded_file),
        "the tools component file is not the one dsh-host embeds"
    );
    let composed = std::fs::read(&c.path).unwrap();
    assert!(
        composed.windows(embedded.len()).any(|w| w == embedded),
        "the composed component does not hold the tools component's bytes verbatim"
    );
}

/// The policy middleware is built without WASI like the tools, so the composition imports what
/// the tools do and the middleware's `approval`, nothing else: the middleware's own
/// `bash-executor` import and `approval` (which the host supplies) and the tools' `agent`.
#[test]
fn the_composed_component_imports_exactly_the_world() {
    let c = composed();
    let mut config = wasmtime::Config::new();
    config.wasm_component_model(true);
    let engine = wasmtime::Engine::new(&config).unwrap();
    let component = wasmtime::component::Component::from_file(&engine, &c.path)
        .expect("the composed component compiles");
    let mut imports: Vec<String> = component
        .component_type()
        .imports(&engine)
        .map(|(name, _)| name.to_string())
        .collect();
    imports.sort();
    assert_eq!(
        imports,
        [
            "dsh:bash/agent@0.9.0",
            "dsh:bash/approval@0.9.0",
            "dsh:bash/bash-executor@0.9.0"
        ]
    );
}

fn bash_json(component: Option<&Path>, policy: Option<&Path>, command: &str) -> Value {
    let mut args: Vec<String> = Vec::new();
    if let Some(policy) = policy {
        args.extend(["--policy".into(), policy.display().to_string()]);
    }
    args.extend([
        "call".into(),
        "bash".into(),
        bash(command, None).to_string(),
        "--json".into(),
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = dsh_host(component, &args);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "dsh-host call printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Through `dsh-host --policy`, the composed component gives the model the very answers the
/// embedded tools do: the middleware is handed the host's files, and its refusals are worded
/// by the same engine. (The host's own check stands behind the middleware here, so this shows
/// the pair; `the_middleware_alone_refuses` shows the middleware without it.)
#[test]
fn the_middleware_refuses_with_the_hosts_words() {
    let c = composed();
    let policy = policy_file();
    let marker = tmp().join("refused-marker");
    let _ = std::fs::remove_file(&marker);
    for command in [
        format!("echo a && rm -f {0}; touch {0}", marker.display()),
        format!("git push origin main; touch {}", marker.display()),
        "printf 'hello\\n'".to_string(),
    ] {
        let composed = bash_json(Some(&c.path), Some(&policy), &command);
        let embedded = bash_json(None, Some(&policy), &command);
        assert_eq!(composed, embedded, "{command}");
    }
    assert!(!marker.exists(), "a refused command ran");
    assert_eq!(
        bash_json(Some(&c.path), Some(&policy), "rm -rf /nonexistent-dir")["text"],
        json!(format!(
            "[policy: denied — `rm -rf /nonexistent-dir` matches deny rule Bash(rm *) ({}:3). The command did not run; do not retry it in another form.]",
            policy.display()
        ))
    );
    // Titles, descriptions and hints are the tools component's own: the middleware in front
    // changes none of them.
    let definitions = |component: Option<&Path>| -> Value {
        let out = dsh_host(component, &["tools"]);
        serde_json::from_slice(&out.stdout).unwrap()
    };
    assert_eq!(definitions(Some(&c.path)), definitions(None));
}

/// With the rules handed to the component and no check of the host's own in front of the
/// executor, the middleware alone refuses: with the host's words, and nothing runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_middleware_alone_refuses() {
    let c = composed();
    let marker = tmp().join("alone-marker");
    std::fs::write(&marker, "").unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let local: Arc<dyn Executor> = LocalExecutor::new(Config::default(), tx).unwrap();
    let (policy, sources) = dsh_host::policy::load(&[policy_file()]).unwrap();
    let rules = Rules::new(
        policy,
        sources,
        Approvals::default(),
        Duration::from_secs(5),
    );
    let options = HostOptions {
        component: ComponentSource::File(c.path.clone()),
        cache_dir: Some(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("component-cache")),
        rules: Some(rules),
    };
    let host = ToolHost::new(options, local, rx).await.unwrap();
    let session = host.open_session(None);
    let command = format!("rm -f {}", marker.display());
    let r = host
        .call(
            "bash",
            &bash(&command, None).to_string(),
            &session.caller(),
            CancellationToken::new(),
        )
        .await;
    assert_eq!(
        (r.text.as_str(), r.is_error),
        (
            format!(
                "[policy: denied — `{command}` matches deny rule Bash(rm *) ({}:3). The command did not run; do not retry it in another form.]",
                policy_file().display()
            )
            .as_str(),
            true
        )
    );
    assert!(marker.exists(), "the denied command ran");
    host.shutdown().await;
}

/// Answers the host's questions as told, counting them.
struct Person {
    answer: Answer,
    asked: std::sync::Mutex<Vec<Question>>,
}

impl Approver for Person {
    fn ask(&self, question: Question, _timeout: Duration) -> BoxFuture<'static, Answer> {
        self.asked.lock().unwrap().push(question);
        let answer = self.answer;
        Box::pin(async move { answer })
    }
}

/// A question the middleware puts through `approval.ask` reaches the person behind the
/// session once: the host's own check of the same command, which follows, takes the approval
/// instead of asking again; a declined command runs nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_of_the_middleware_reaches_the_person_once() {
    let c = composed();
    for (answer, runs) in [(Answer::Once, true), (Answer::Declined, false)] {
        let marker = tmp().join(format!("asked-marker-{answer:?}"));
        let _ = std::fs::remove_file(&marker);
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let local: Arc<dyn Executor> = LocalExecutor::new(Config::default(), tx).unwrap();
        let (policy, sources) = dsh_host::policy::load(&[policy_file()]).unwrap();
        let approvals = Approvals::default();
        let rules = Rules::new(policy, sources, approvals.clone(), Duration::from_secs(5));
        let executor = Arc::new(PolicyExecutor::new(local, rules.clone()));
        let options = HostOptions {
            component: ComponentSource::File(c.path.clone()),
            cache_dir: Some(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("component-cache")),
            rules: Some(rules),
        };
        let host = ToolHost::new(options, executor, rx).await.unwrap();
        let session = host.open_session(None);
        let person = Arc::new(Person {
            answer,
            asked: std::sync::Mutex::new(Vec::new()),
        });
        let caller = session.caller();
        let _registration = approvals.register(caller.owner.as_deref().unwrap(), person.clone());
        let command = format!(
            "git push origin main 2>/dev/null; touch {}",
            marker.display()
        );
        let args = bash(&command, None).to_string();
        let call = || host.call("bash", &args, &caller, CancellationToken::new());
        let r = call().await;
        let asked = person.asked.lock().unwrap().clone();
        assert_eq!(asked.len(), 1, "{answer:?}: asked {asked:?}");
        assert_eq!(asked[0].command, command);
        assert_eq!(asked[0].rule.as_deref(), Some("Bash(git push *)"));
        assert_eq!(marker.exists(), runs, "{answer:?}: {}", r.text);
        assert_eq!(r.is_error, !runs, "{answer:?}: {}", r.text);
        // An approval is good for that one call: the same command again is asked again.
        let _ = std::fs::remove_file(&marker);
        let again = call().await;
        assert_eq!(person.asked.lock().unwrap().len(), 2, "{}", again.text);
        assert_eq!(marker.exists(), runs, "{answer:?} again: {}", again.text);
        if !runs {
            assert!(
                r.text.starts_with("[policy: declined by the user — `git")
                    && r.text.contains("ask rule Bash(git push *)"),
                "{}",
                r.text
            );
        }
        host.shutdown().await;
    }
}

/// A run that continues as a background task (`--yield-after-ms`) passes through the policy
/// with its task: the composed tools name it as the embedded ones do.
#[test]
fn a_run_continuing_as_a_task_passes_through() {
    let c = composed();
    let args = bash("echo a; sleep 5; echo b", None).to_string();
    let policy = policy_file();
    let out = dsh_host(
        Some(&c.path),
        &[
            "--policy",
            policy.to_str().unwrap(),
            "--yield-after-ms",
            "300",
            "call",
            "bash",
            &args,
            "--json",
        ],
    );
    let result: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON ({e}): {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(
        result,
        json!({
            "text": "a\n[still running after 300ms; continues as background task bash-1; read its output with bash_output]",
            "isError": false
        })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_else_passes_through() {
    let c = composed();
    assert_eq!(
        call(
            Some(&c.path),
            "bash",
            bash("printf 'hello\\n'; exit 3", None)
        ),
        json!({"text": "hello\n[exit code: 3]", "isError": false})
    );

    // Background tasks: start, read, kill, ownership and the notice, through the policy.
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let config = Config {
        grace_ms: 200.0,
        ..Config::default()
    };
    let executor: Arc<dyn Executor> = LocalExecutor::new(config, tx).unwrap();
    let options = HostOptions {
        component: ComponentSource::File(c.path.clone()),
        cache_dir: Some(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("component-cache")),
        ..Default::default()
    };
    let host = ToolHost::new(options, executor, rx).await.unwrap();
    let mut session = host.open_session(None);
    let other = host.open_session(None);
    let call = |caller: dsh_host::Caller, tool: &'static str, args: Value| {
        let host = host.clone();
        async move {
            let r = host
                .call(tool, &args.to_string(), &caller, CancellationToken::new())
                .await;
            (r.text, r.is_error)
        }
    };
    let mut args = bash("printf 'bg\\n'", None);
    args["run_in_background"] = json!(true);
    assert_eq!(
        call(session.caller(), "bash", args).await,
        ("started background task bash-1".to_string(), false)
    );
    let notice = tokio::time::timeout(Duration::from_secs(10), session.next_injection())
        .await
        .expect("a notice arrives")
        .unwrap();
    assert_eq!(
        notice.text,
        "background bash task bash-1 finished [status: completed, exit code: 0]. Read its output with bash_output."
    );
    // Another session cannot even name it: its own numbering holds no bash-1.
    assert_eq!(
        call(other.caller(), "bash_output", json!({"task_id": "bash-1"})).await,
        ("Error: unknown bash task \"bash-1\"".to_string(), true)
    );
    assert_eq!(
        call(
            session.caller(),
            "bash_output",
            json!({"task_id": "bash-1"})
        )
        .await,
        ("bg\n\n[status: completed, exit code: 0]".to_string(), false)
    );
    assert_eq!(
        call(session.caller(), "bash_kill", json!({"task_id": "bash-1"})).await,
        ("task bash-1 had already finished".to_string(), false)
    );
    assert_eq!(
        call(session.caller(), "bash_kill", json!({"task_id": "bash-9"})).await,
        ("Error: unknown bash task \"bash-9\"".to_string(), true)
    );
    host.shutdown().await;
}

/// The composed component is still one .wasm for every host: the Python and Node packages load
/// it too (their permission rules and approval callbacks: `tests/policy_python.rs`,
/// `tests/policy_node.rs`). Given no rules, the middleware lets these through.
#[test]
fn the_composed_component_runs_in_the_python_and_node_packages() {
    let c = composed();
    let script = r#"
import json, sys
from dsh_tools import LocalExecutor, Tools
tools = Tools(LocalExecutor(grace_ms=200), component=sys.argv[1])
for command in ["echo rm -rf /", "printf 'hello\\n'"]:
    r = tools.call("bash", {"command": command, "description": "Run a command through the policy"})
    print(json.dumps({"text": r.text, "isError": r.is_error}))
tools.close()
"#;
    let out = Command::new(python_venv::python())
        .arg("-c")
        .arg(script)
        .arg(&c.path)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the test venv's python: {e}"));
    assert!(
        out.status.success(),
        "the Python package failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expected = vec![
        json!({"text": "rm -rf /\n", "isError": false}),
        json!({"text": "hello\n", "isError": false}),
    ];
    let lines = |out: &Output| -> Vec<Value> {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    assert_eq!(lines(&out), expected);

    // The Node package's own directory: `dsh-tools` resolves to it, and jco (which loading
    // another component needs) is among its build tools.
    let package = node_package::build_tools();
    let script = r#"
const { LocalExecutor, Tools, loadComponent } = await import("dsh-tools");
const component = await loadComponent(process.argv[1]);
const tools = new Tools({ component, executor: new LocalExecutor({ graceMs: 200 }) });
for (const command of ["echo rm -rf /", "printf 'hello\\n'"]) {
  const r = await tools.call("bash", { command, description: "Run a command through the policy" });
  console.log(JSON.stringify({ text: r.text, isError: r.isError }));
}
await tools.close();
"#;
    let out = Command::new("node")
        .args(["--input-type=module", "-e", script])
        .arg(&c.path)
        .current_dir(&package)
        .output()
        .unwrap_or_else(|e| panic!("cannot run node: {e}"));
    assert!(
        out.status.success(),
        "the Node package failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(lines(&out), expected);
}
