//! Black-box tests of the embedding API: a `ToolHost` over the local executor.

use std::sync::Arc;
use std::time::Duration;

use dsh_host::executor::{
    BoxFuture, Config, Denial, DenialReason, Denials, DeniedAccess, ExecError, Executor, Limits,
    LocalExecutor, NetworkMode, Read, Request, RunResult, SandboxMode, SandboxPolicy, Spec, Task,
};
use dsh_host::{Caller, HostOptions, ToolHost};
use tokio_util::sync::CancellationToken;

async fn host_with(config: Config) -> ToolHost {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let executor: Arc<dyn Executor> = LocalExecutor::new(config, tx).expect("valid config");
    let mut options = HostOptions::new();
    options.cache_dir =
        Some(std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("component-cache"));
    ToolHost::new(options, executor, rx)
        .await
        .expect("host loads")
}

fn quick() -> Config {
    Config {
        grace_ms: 200.0,
        ..Config::default()
    }
}

fn bash(command: &str) -> String {
    serde_json::json!({ "command": command, "description": "Run a test command" }).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_runs_through_guest_and_executor() {
    let host = host_with(quick()).await;
    let r = host
        .call(
            "bash",
            &bash("echo out; echo err >&2"),
            &Caller::default(),
            CancellationToken::new(),
        )
        .await;
    assert_eq!(r.text, "out\n[stderr]\nerr\n");
    assert!(!r.is_error);
    assert_eq!(r.error_code, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validation_errors_carry_their_code() {
    let host = host_with(quick()).await;
    let r = host
        .call("bash", "{}", &Caller::default(), CancellationToken::new())
        .await;
    assert!(r.is_error);
    assert_eq!(r.error_code.as_deref(), Some("INVALID_ARGS"));
    let r = host
        .call("nope", "{}", &Caller::default(), CancellationToken::new())
        .await;
    assert_eq!(r.error_code.as_deref(), Some("UNKNOWN_TOOL"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_run_concurrently() {
    let host = host_with(quick()).await;
    let started = std::time::Instant::now();
    let calls: Vec<_> = (0..4)
        .map(|_| {
            let host = host.clone();
            tokio::spawn(async move {
                host.call(
                    "bash",
                    &bash("sleep 1; echo done"),
                    &Caller::default(),
                    CancellationToken::new(),
                )
                .await
            })
        })
        .collect();
    for c in calls {
        assert_eq!(c.await.unwrap().text, "done\n");
    }
    // Four one-second sleeps in sequence would take four seconds.
    assert!(
        started.elapsed() < Duration::from_millis(3500),
        "calls were serialized: {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_kills_the_command_and_reports_it() {
    let host = host_with(quick()).await;
    let abort = CancellationToken::new();
    let call = {
        let host = host.clone();
        let abort = abort.clone();
        tokio::spawn(async move {
            host.call("bash", &bash("sleep 30"), &Caller::default(), abort)
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    abort.cancel();
    let r = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("abort ends the call")
        .unwrap();
    assert_eq!(r.text, "Error: command aborted");
    assert!(r.is_error);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_task_notice_reaches_its_session_only() {
    let host = host_with(quick()).await;
    let mut session = host.open_session(None);
    let mut other = host.open_session(None);
    let r = host
        .call(
            "bash",
            &serde_json::json!({"command":"echo bg","description":"Start a background task","run_in_background":true}).to_string(),
            &session.caller(),
            CancellationToken::new(),
        )
        .await;
    assert_eq!(r.text, "started background task bash-1");
    let notice = tokio::time::timeout(Duration::from_secs(10), session.next_injection())
        .await
        .expect("notice arrives")
        .expect("channel open");
    assert_eq!(
        notice.text,
        "background bash task bash-1 finished [status: completed, exit code: 0]. Read its output with bash_output."
    );
    assert_eq!(notice.source.kind, "plugin");
    assert_eq!(notice.source.plugin.as_deref(), Some("tool-bash"));
    assert!(other.drain_injections().is_empty());

    let read = host
        .call(
            "bash_output",
            r#"{"task_id":"bash-1"}"#,
            &other.caller(),
            CancellationToken::new(),
        )
        .await;
    // Another session cannot even name it: its own numbering holds no bash-1.
    assert_eq!(read.text, "Error: unknown bash task \"bash-1\"");
    let read = host
        .call(
            "bash_output",
            r#"{"task_id":"bash-1"}"#,
            &session.caller(),
            CancellationToken::new(),
        )
        .await;
    assert_eq!(read.text, "bg\n\n[status: completed, exit code: 0]");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_kills_running_tasks() {
    let host = host_with(quick()).await;
    let session = host.open_session(None);
    let r = host
        .call(
            "bash",
            &serde_json::json!({"command":"sleep 30","description":"Sleep in the background","run_in_background":true}).to_string(),
            &session.caller(),
            CancellationToken::new(),
        )
        .await;
    assert_eq!(r.text, "started background task bash-1");
    tokio::time::timeout(Duration::from_secs(10), host.shutdown())
        .await
        .expect("shutdown ends");
    let task = host.executor().get("bash-1").unwrap();
    assert_eq!(task.state, dsh_host::executor::TaskState::Killed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_session_kills_its_running_tasks_only() {
    use dsh_host::executor::TaskState;
    let host = host_with(quick()).await;
    let (session, other) = (host.open_session(None), host.open_session(None));
    let sleep = serde_json::json!({"command":"sleep 30","description":"Sleep in the background","run_in_background":true}).to_string();
    // Each session numbers its own tasks; the executor's ids are bash-1 and bash-2.
    for caller in [session.caller(), other.caller()] {
        let r = host
            .call("bash", &sleep, &caller, CancellationToken::new())
            .await;
        assert_eq!(r.text, "started background task bash-1");
    }
    drop(session);
    let state = |id: &str| host.executor().get(id).unwrap().state;
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        while state("bash-1") == TaskState::Running {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(ended.is_ok(), "the dropped session's task still runs");
    assert_eq!(state("bash-1"), TaskState::Killed);
    assert_eq!(
        state("bash-2"),
        TaskState::Running,
        "another session's task"
    );
    drop(other);
    host.shutdown().await;
}

/// The local executor, claiming a sandbox and reporting fixed denials for every run and read:
/// what the host hands the component of an executor's sandbox facts, and how they read.
struct Denying {
    inner: Arc<LocalExecutor>,
}

impl Denying {
    fn denials() -> Denials {
        Denials {
            first: vec![
                Denial {
                    access: DeniedAccess::Read,
                    target: "/root/.ssh/id_ed25519".into(),
                    reason: DenialReason::DeniedRead,
                },
                Denial {
                    access: DeniedAccess::Socket,
                    target: "AF_INET".into(),
                    reason: DenialReason::NetworkOff,
                },
                Denial {
                    access: DeniedAccess::Undone,
                    target: "/w/.git/hooks/pre-commit".into(),
                    reason: DenialReason::ProtectedPath,
                },
            ],
            more: 2,
        }
    }
}

impl Executor for Denying {
    fn limits(&self) -> Limits {
        Limits {
            sandbox: Some(SandboxPolicy {
                mode: SandboxMode::WorkspaceWrite,
                writable: vec!["/w".into(), "/tmp".into()],
                denied_reads: vec!["/root/.ssh".into()],
                network: NetworkMode::Off,
                allowed_hosts: Vec::new(),
            }),
            ..self.inner.limits()
        }
    }
    fn resolve(&self, req: Request) -> Result<Spec, ExecError> {
        self.inner.resolve(req)
    }
    fn run(
        &self,
        spec: Spec,
        abort: CancellationToken,
    ) -> BoxFuture<'_, Result<RunResult, ExecError>> {
        Box::pin(async move {
            let result = self.inner.run(spec, abort).await?;
            Ok(RunResult {
                denials: Self::denials(),
                ..result
            })
        })
    }
    fn start(&self, spec: Spec) -> BoxFuture<'_, Result<Task, ExecError>> {
        self.inner.start(spec)
    }
    fn read_output(&self, id: &str) -> Result<Read, ExecError> {
        Ok(Read {
            denials: Self::denials(),
            ..self.inner.read_output(id)?
        })
    }
    fn kill(&self, id: &str) -> Result<bool, ExecError> {
        self.inner.kill(id)
    }
    fn owner_of(&self, id: &str) -> Option<String> {
        self.inner.owner_of(id)
    }
    fn get(&self, id: &str) -> Result<Task, ExecError> {
        self.inner.get(id)
    }
    fn list(&self) -> Vec<Task> {
        self.inner.list()
    }
    fn shutdown(&self) -> BoxFuture<'_, ()> {
        self.inner.shutdown()
    }
}

/// The executor's sandbox and denials reach the component unchanged: its instructions state the
/// policy, and a foreground result and a read end with the line naming the denials.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_facts_pass_through_to_the_tools_text() {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let inner = LocalExecutor::new(quick(), tx).expect("valid config");
    let executor: Arc<dyn Executor> = Arc::new(Denying { inner });
    let mut options = HostOptions::new();
    options.cache_dir =
        Some(std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("component-cache"));
    let host = ToolHost::new(options, executor, rx)
        .await
        .expect("host loads");
    let paragraph: Vec<&str> = host
        .instructions()
        .rsplit("\n\n")
        .next()
        .unwrap()
        .lines()
        .collect();
    assert_eq!(
        paragraph[..3],
        [
            "Commands run in a sandbox (workspace-write): they can write only under /w, /tmp and \
             their own $TMPDIR; git hooks and configuration there stay read-only, and git init, \
             add and commit work.",
            "They cannot read: /root/.ssh.",
            "The network is off: no sockets but Unix sockets.",
        ]
    );
    let line = "[sandbox: read of /root/.ssh/id_ed25519 denied (a denied path); AF_INET socket \
                denied (the network is off); change to /w/.git/hooks/pre-commit undone (a \
                protected git path); and 2 more]";
    let session = host.open_session(None);
    let r = host
        .call(
            "bash",
            &bash("echo out; exit 2"),
            &session.caller(),
            CancellationToken::new(),
        )
        .await;
    assert_eq!(r.text, format!("out\n[exit code: 2]\n{line}"));
    assert!(!r.is_error);
    let r = host
        .call(
            "bash",
            &serde_json::json!({"command":"true","description":"Do nothing","run_in_background":true}).to_string(),
            &session.caller(),
            CancellationToken::new(),
        )
        .await;
    assert_eq!(r.text, "started background task bash-1");
    let r = host
        .call(
            "bash_output",
            r#"{"task_id":"bash-1"}"#,
            &session.caller(),
            CancellationToken::new(),
        )
        .await;
    assert!(r.text.ends_with(&format!("]\n{line}")), "{}", r.text);
}
