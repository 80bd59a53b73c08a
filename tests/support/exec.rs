//! Calls into the executor under test that the executor test files make.
//!
//! Shared through `#[path]`; each test file uses a part of it.
#![allow(dead_code)]

use std::time::Duration;

use dsh_executor::{Executor, Request, RunResult, Spec, Task};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

/// A command resolved into the spec the executor would run, as the tools component asks for it
/// (no workdir, timeout or owner of its own).
pub fn spec(exec: &dyn Executor, command: &str) -> Spec {
    exec.resolve(Request {
        command: command.to_string(),
        workdir: None,
        timeout_ms: None,
        owner: None,
    })
    .expect("the executor resolves a plain command")
}

/// `command` run in the foreground to its end; the run must succeed.
pub async fn run(exec: &dyn Executor, command: &str) -> RunResult {
    exec.run(spec(exec, command), CancellationToken::new())
        .await
        .expect("run succeeds")
}

/// `command` started in the background; the start must succeed.
pub async fn start(exec: &dyn Executor, command: &str) -> Task {
    exec.start(spec(exec, command))
        .await
        .expect("start succeeds")
}

/// The next task-done event, which must come within 20 s.
pub async fn next_event(events: &mut UnboundedReceiver<Task>) -> Task {
    tokio::time::timeout(Duration::from_secs(20), events.recv())
        .await
        .expect("a task-done event in time")
        .expect("channel open")
}
