//! `bash_output`: what a background task produced since the last read, and where it stands.

use super::{ToolError, task_id};
use crate::json::Json;
use crate::world::{Caller, Executor};
use crate::{render, status};

pub const DESCRIPTION: &str = "Read a background bash task's new output: everything it wrote \
since the previous bash_output call on it (stdout, then stderr after a [stderr] line), followed \
by its status line: running, completed with its exit code, or killed. Poll again later while it \
is running.";

pub fn call(exec: &dyn Executor, args: &Json, caller: &Caller) -> Result<String, ToolError> {
    let id = task_id::checked(exec, args, caller)?;
    let read = exec.read_output(id)?;
    Ok(format!(
        "{}\n{}",
        render::delta(&read),
        status::line(&read.task)
    ))
}
