//! Calls into the executor under test that both executor test files make.
//!
//! Shared through `#[path]`.

use std::time::Duration;

use dsh_executor::{Executor, Request, Spec, Task};
use tokio::sync::mpsc::UnboundedReceiver;

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

/// The next task-done event, which must come within 20 s.
pub async fn next_event(events: &mut UnboundedReceiver<Task>) -> Task {
    tokio::time::timeout(Duration::from_secs(20), events.recv())
        .await
        .expect("a task-done event in time")
        .expect("channel open")
}
