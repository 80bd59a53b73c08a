//! Black-box tests of the embedding API: a `ToolHost` over the local executor.

use std::sync::Arc;
use std::time::Duration;

use dsh_host::executor::{Config, Executor, LocalExecutor};
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
    assert_eq!(read.text, "Error: task bash-1 belongs to another session");
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
    for (caller, id) in [(session.caller(), "bash-1"), (other.caller(), "bash-2")] {
        let r = host
            .call("bash", &sleep, &caller, CancellationToken::new())
            .await;
        assert_eq!(r.text, format!("started background task {id}"));
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
