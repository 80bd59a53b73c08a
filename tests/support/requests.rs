//! A command resolved by the executor under test into the spec it would run, as the tools
//! component asks for it (no workdir, timeout or owner of its own).
//!
//! Shared by the executor test files through `#[path]`.

use dsh_executor::{Executor, Request, Spec};

pub fn spec(exec: &dyn Executor, command: &str) -> Spec {
    exec.resolve(Request {
        command: command.to_string(),
        workdir: None,
        timeout_ms: None,
        owner: None,
    })
    .expect("the executor resolves a plain command")
}
