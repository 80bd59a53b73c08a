//! `bash_output`: what a background task produced since the last read, and where it stands.

use super::{ToolError, task_id};
use crate::json::Json;
use crate::world::{Caller, Executor, ToolAnnotations};
use crate::{render, status};

pub const TITLE: &str = "Read background task output";

pub const ANNOTATIONS: ToolAnnotations = ToolAnnotations {
    // It changes no file and no process: it only moves the caller's read position in the task's
    // output, which is the host's bookkeeping of what this session was shown.
    read_only_hint: true,
    destructive_hint: false,
    // Yet a second identical call is not a repeat of the first: it returns only what the task
    // wrote since, so a retried call whose answer was lost does not get that output back.
    idempotent_hint: false,
    // It reaches only a task this host started (and this session may read).
    open_world_hint: false,
};

pub const DESCRIPTION: &str = "Read a background bash task's new output: everything it wrote \
since the previous bash_output call on it (stdout, then stderr after a [stderr] line), followed \
by its status line: running, completed with its exit code, or killed. Poll again later while it \
is running.";

pub fn call(exec: &dyn Executor, args: &Json, caller: &Caller) -> Result<String, ToolError> {
    let id = task_id::checked(exec, args, caller)?;
    let read = exec.read_output(id)?;
    let mut text = format!("{}\n{}", render::delta(&read), status::line(&read.task));
    if let Some(line) = render::evicted_line(read.stdout.spill_evicted, read.stderr.spill_evicted) {
        text.push('\n');
        text.push_str(&line);
    }
    // What the sandbox denied the task since the last read comes last, after where it stands.
    if let Some(line) = render::sandbox_line(&read.denials) {
        text.push('\n');
        text.push_str(&line);
    }
    Ok(text)
}
