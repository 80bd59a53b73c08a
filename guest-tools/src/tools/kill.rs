//! `bash_kill`: stop a background task without waiting for it.

use super::{ToolError, task_id};
use crate::json::Json;
use crate::world::{Caller, Executor, TaskState, ToolAnnotations};

pub const TITLE: &str = "Stop a background task";

pub const ANNOTATIONS: ToolAnnotations = ToolAnnotations {
    // It ends processes.
    read_only_hint: false,
    // Whatever the task was doing is cut short and cannot be resumed.
    destructive_hint: true,
    // Killing a task again changes nothing: the executor's kill is idempotent (a second kill
    // does not restart the escalation), and the tool answers that the task had already finished.
    idempotent_hint: true,
    // It reaches only a task this host started (and this session owns or may touch).
    open_world_hint: false,
};

pub const DESCRIPTION: &str = "Stop a background bash task: its whole process tree gets SIGTERM, \
then SIGKILL after a grace period. Returns at once; the task reads as killed from then on, and \
bash_output still shows what it wrote.";

/// A `kill` that answers false is asked about once more, with `get`: a task whose executor is
/// gone (state `lost`) did not finish as far as anyone knows, and nothing here can stop it. A
/// task `get` cannot name (any more) reads as finished, as the kill said.
pub fn call(exec: &dyn Executor, args: &Json, caller: &Caller) -> Result<String, ToolError> {
    let id = task_id::checked(exec, args, caller)?;
    Ok(if exec.kill(id)? {
        format!("killed background task {id}")
    } else if exec.get(id).is_ok_and(|task| task.state == TaskState::Lost) {
        format!("task {id} was lost with the executor; it cannot be killed from here")
    } else {
        format!("task {id} had already finished")
    })
}
