//! Guest faults stay in their call, and the guest gets no authority it was not given.
//!
//! Uses `tests/fault-guest`, a component that misbehaves on request, built here for wasm32-wasip2.

#[path = "support/nested_cargo.rs"]
mod nested_cargo;

#[path = "support/fault_guest.rs"]
mod fault_guest;

use std::path::PathBuf;
use std::sync::Arc;

use fault_guest::fault_guest;

use dsh_host::executor::{Config, Executor, LocalExecutor};
use dsh_host::{Caller, ComponentSource, HostOptions, ToolHost};
use tokio_util::sync::CancellationToken;

async fn faulty_host() -> ToolHost {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let executor: Arc<dyn Executor> = LocalExecutor::new(Config::default(), tx).unwrap();
    let options = HostOptions {
        component: ComponentSource::File(fault_guest()),
        cache_dir: Some(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("component-cache")),
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
