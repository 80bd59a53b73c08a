//! Guest faults stay in their call, and the guest gets no authority it was not given: no files,
//! sockets or environment, and no other session's tasks or notices.
//!
//! Uses `tests/fault-guest`, a component that misbehaves on request, built here for wasm32-wasip2.

#[path = "support/nested_cargo.rs"]
mod nested_cargo;

#[path = "support/rust_target.rs"]
mod rust_target;

#[path = "support/fault_guest.rs"]
mod fault_guest;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use fault_guest::fault_guest;

use dsh_host::executor::{Config, Executor, LocalExecutor, TaskState};
use dsh_host::{Caller, ComponentSource, HostOptions, SessionRouter, ToolHost};
use tokio_util::sync::CancellationToken;

async fn faulty_host() -> ToolHost {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let executor: Arc<dyn Executor> = LocalExecutor::new(Config::default(), tx).unwrap();
    let options = HostOptions {
        component: ComponentSource::File(fault_guest()),
        cache_dir: Some(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("component-cache")),
        ..Default::default()
    };
    ToolHost::new(options, executor, rx)
        .await
        .expect("fault guest loads")
}

async fn call(host: &ToolHost, name: &str) -> dsh_host::ToolResult {
    host.call(name, "{}", &Caller::default(), CancellationToken::new())
        .await
}

async fn assert_next_call_works(host: &ToolHost) {
    let r = call(host, "ok").await;
    assert_eq!((r.text.as_str(), r.is_error), ("ok", false));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trap_fails_only_its_call() {
    let host = faulty_host().await;
    let r = call(&host, "trap").await;
    assert!(r.is_error);
    assert!(r.text.starts_with("Error: guest trapped: "), "{}", r.text);
    assert_next_call_works(&host).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_infinite_loop_runs_out_of_cpu_budget() {
    let host = faulty_host().await;
    let r = call(&host, "loop").await;
    assert!(r.is_error);
    assert_eq!(r.text, "Error: guest exceeded its CPU budget");
    assert_next_call_works(&host).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allocation_past_the_cap_is_named() {
    let host = faulty_host().await;
    let r = call(&host, "alloc").await;
    assert!(r.is_error);
    assert_eq!(r.text, "Error: guest exceeded its memory limit");
    assert_next_call_works(&host).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_sockets_and_environment_give_nothing() {
    let host = faulty_host().await;
    for tool in ["read-file", "connect"] {
        let r = call(&host, tool).await;
        // Either the import traps or the guest sees an error; never data.
        assert!(
            r.is_error && r.text.starts_with("Error: guest trapped")
                || r.text.starts_with("error: "),
            "{tool}: {}",
            r.text
        );
        assert!(
            !r.text.contains("read ") && r.text != "connected",
            "{tool}: {}",
            r.text
        );
    }
    let r = call(&host, "env").await;
    assert_eq!(r.text, "0 variables, 0 arguments");
    assert_next_call_works(&host).await;
}

/// The instructions are the loaded component's own: the fault guest's, not the tools', are read
/// at load and served as MCP's `instructions`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_serves_the_loaded_components_instructions() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

    let host = faulty_host().await;
    assert_eq!(host.instructions(), fault_guest::INSTRUCTIONS);

    let (client, server) = tokio::io::duplex(1 << 16);
    let (server_read, server_write) = tokio::io::split(server);
    let serving = tokio::spawn(dsh_host::mcp::serve(
        host.clone(),
        dsh_host::mcp::McpOptions::default(),
        server_read,
        server_write,
    ));
    let (client_read, mut client_write) = tokio::io::split(client);
    let initialize = serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "t", "version": "0" } },
    });
    client_write
        .write_all(format!("{initialize}\n").as_bytes())
        .await
        .unwrap();
    let line = tokio::time::timeout(
        Duration::from_secs(20),
        tokio::io::BufReader::new(client_read).lines().next_line(),
    )
    .await
    .expect("an answer in time")
    .unwrap()
    .expect("an answer");
    let init: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(
        init["result"]["instructions"],
        fault_guest::INSTRUCTIONS,
        "{init}"
    );
    drop(client_write);
    tokio::time::timeout(Duration::from_secs(20), serving)
        .await
        .expect("the server ends with its input")
        .unwrap()
        .unwrap();
}

/// A component that skips the tools' ownership checks still reaches only its own session: the
/// host hands each call an executor and an inject bound to the caller's session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_component_cannot_reach_another_sessions_task() {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let executor: Arc<dyn Executor> = LocalExecutor::new(Config::default(), tx).unwrap();
    let sessions = SessionRouter::default();
    let cache_dir = Some(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("component-cache"));
    // The real tools and the hostile component serve the same sessions on the same executor.
    let tools = ToolHost::new_with_sessions(
        HostOptions {
            component: ComponentSource::Embedded,
            cache_dir: cache_dir.clone(),
            ..Default::default()
        },
        executor.clone(),
        rx,
        sessions.clone(),
    )
    .await
    .expect("the tools load");
    let (_no_events, no_events) = tokio::sync::mpsc::unbounded_channel();
    let hostile = ToolHost::new_with_sessions(
        HostOptions {
            component: ComponentSource::File(fault_guest()),
            cache_dir,
            ..Default::default()
        },
        executor.clone(),
        no_events,
        sessions.clone(),
    )
    .await
    .expect("the fault guest loads");
    let mut a = tools.open_session(None);
    let mut b = tools.open_session(None);

    // Session A starts a task with the real tools; it prints, then runs on.
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    let command = format!(
        "printf 'secret of a\\n'; touch {}; sleep 30",
        ready.display()
    );
    let r = tools
        .call(
            "bash",
            &serde_json::json!({"command": command, "description": "Start a task for A", "run_in_background": true})
                .to_string(),
            &a.caller(),
            CancellationToken::new(),
        )
        .await;
    assert_eq!(r.text, "started background task bash-1");
    let start = std::time::Instant::now();
    while !ready.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "A's task never printed"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let spy = |tool: &'static str, arg: String, caller: Caller| {
        let hostile = hostile.clone();
        async move {
            let r = hostile
                .call(tool, &arg, &caller, CancellationToken::new())
                .await;
            assert!(!r.is_error, "{tool} {arg}: {}", r.text);
            r.text
        }
    };
    let a_owner = a.owner().to_string();
    // As session B, and as a call without a session.
    for caller in [b.caller(), Caller::default()] {
        let who = format!("caller {:?}", caller.owner);
        for tool in ["spy-read", "spy-kill", "spy-get"] {
            let foreign = spy(tool, "bash-1".into(), caller.clone()).await;
            let unknown = spy(tool, "bash-99".into(), caller.clone()).await;
            assert_eq!(
                foreign,
                unknown.replace("bash-99", "bash-1"),
                "{who}: {tool} on A's task must answer as for an unknown one"
            );
            assert_eq!(foreign, "error: unknown-task: bash-1", "{who}: {tool}");
        }
        // A call without a session learns that the id is someone's, not whose; a session
        // cannot even name another session's task.
        let owner = spy("spy-owner-of", "bash-1".into(), caller.clone()).await;
        let expected = match caller.owner {
            None => r#"owner Some("(another session)")"#,
            Some(_) => "owner None",
        };
        assert_eq!(owner, expected, "{who}");
        assert_eq!(
            spy("spy-list", String::new(), caller.clone()).await,
            "tasks []",
            "{who}"
        );
        assert_eq!(
            spy("spy-inject", a_owner.clone(), caller.clone()).await,
            "error: unknown-owner",
            "{who}"
        );
        for tool in ["spy-resolve", "spy-run", "spy-start"] {
            assert_eq!(
                spy(tool, a_owner.clone(), caller.clone()).await,
                "error: invalid-request: the owner must be the calling session's own",
                "{who}: {tool} claiming A's token"
            );
        }
    }
    assert!(
        a.drain_injections().is_empty(),
        "nothing was injected into A"
    );
    assert_eq!(executor.list().len(), 1, "no task was started for A");

    // The same imports do work within B's own reach: its own task (its session's first,
    // bash-1, though the executor's second), an unowned one, its session.
    let b_owner = b.owner().to_string();
    let own = spy("spy-start", b_owner.clone(), b.caller()).await;
    assert_eq!(
        own,
        format!(r#"task bash-1 owner Some("{b_owner}") command "sleep 30" state running"#)
    );
    assert!(
        spy("spy-get", "bash-1".into(), b.caller())
            .await
            .starts_with(&format!(r#"task bash-1 owner Some("{b_owner}")"#))
    );
    let open = spy("spy-start", String::new(), Caller::default()).await;
    assert!(open.starts_with("task bash-3 owner None "), "{open}");
    assert!(
        spy("spy-read", "bash-3".into(), b.caller())
            .await
            .starts_with("stdout ")
    );
    let listed = spy("spy-list", String::new(), b.caller()).await;
    assert!(
        listed.starts_with(&format!(r#"tasks [task bash-1 owner Some("{b_owner}")"#))
            && listed.contains(", task bash-3 owner None")
            && listed.matches("task bash-").count() == 2
            && !listed.contains(&a_owner),
        "{listed}"
    );
    assert_eq!(spy("spy-inject", b_owner, b.caller()).await, "injected");
    assert_eq!(b.drain_injections().len(), 1);

    // A's task ran on untouched: not killed, and its output still unread.
    let task = executor.get("bash-1").unwrap();
    assert_eq!(task.state, TaskState::Running);
    let r = tools
        .call(
            "bash_output",
            r#"{"task_id":"bash-1"}"#,
            &a.caller(),
            CancellationToken::new(),
        )
        .await;
    assert_eq!(r.text, "secret of a\n\n[status: running]");
    assert!(!r.text.contains(&a_owner));
    tools.shutdown().await;
}

/// A person's approver that answers "once" and counts the questions it got.
struct Counting(std::sync::atomic::AtomicUsize);

impl dsh_host::policy::Approver for Counting {
    fn ask(
        &self,
        _question: dsh_host::policy::Question,
        _timeout: Duration,
    ) -> dsh_host::executor::BoxFuture<'static, dsh_host::policy::Answer> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Box::pin(async { dsh_host::policy::Answer::Once })
    }
}

/// A component importing `approval` (as a policy middleware does) asks and reads grants only for
/// the session of the call it serves: naming another session traps the call, and that session's
/// person is never asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_component_cannot_ask_or_read_grants_for_another_session() {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let executor: Arc<dyn Executor> = LocalExecutor::new(Config::default(), tx).unwrap();
    let text = "[permissions]\ndefault = \"ask\"\n".to_string();
    let policy = dsh_policy::Policy::from_sources(&[("p.toml".into(), text.clone())]).unwrap();
    let approvals = dsh_host::policy::Approvals::default();
    let rules = dsh_host::policy::Rules::new(
        policy,
        vec![("p.toml".into(), text)],
        approvals.clone(),
        Duration::from_secs(5),
    );
    let host = ToolHost::new(
        HostOptions {
            component: ComponentSource::File(fault_guest()),
            cache_dir: Some(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("component-cache")),
            rules: Some(rules),
        },
        executor,
        rx,
    )
    .await
    .expect("the fault guest loads");
    let a = host.open_session(None);
    let b = host.open_session(None);
    let person_of_b = Arc::new(Counting(Default::default()));
    let _registered = approvals.register(b.owner(), person_of_b.clone());
    let asked = || person_of_b.0.load(std::sync::atomic::Ordering::SeqCst);
    let spy = |tool: &'static str, owner: &str, caller: Caller| {
        let host = host.clone();
        let owner = owner.to_string();
        async move {
            host.call(tool, &owner, &caller, CancellationToken::new())
                .await
        }
    };

    // A names B: the call traps, B's person is not asked.
    for tool in ["spy-ask", "spy-grants"] {
        let r = spy(tool, b.owner(), a.caller()).await;
        assert!(r.is_error, "{tool}: {}", r.text);
        assert!(
            r.text.starts_with("Error: guest trapped: "),
            "{tool}: {}",
            r.text
        );
    }
    // Naming no session from A's call traps too.
    let r = spy("spy-ask", "", a.caller()).await;
    assert!(r.text.starts_with("Error: guest trapped: "), "{}", r.text);
    assert_eq!(asked(), 0);

    // Each session's own: A has nobody to ask; B's person is asked once.
    let r = spy("spy-ask", a.owner(), a.caller()).await;
    assert_eq!(
        (r.text.as_str(), r.is_error),
        ("answer Answer::CannotAsk", false)
    );
    let r = spy("spy-ask", b.owner(), b.caller()).await;
    assert_eq!(
        (r.text.as_str(), r.is_error),
        ("answer Answer::Once", false)
    );
    assert_eq!(asked(), 1);
    let r = spy("spy-grants", b.owner(), b.caller()).await;
    assert_eq!(r.text, "grants []");
    host.shutdown().await;
}
