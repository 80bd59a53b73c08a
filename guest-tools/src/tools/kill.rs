//! `bash_kill`: stop a background task without waiting for it.

use super::{ToolError, task_id};
use crate::json::Json;
use crate::world::{Caller, Executor};

pub const DESCRIPTION: &str = "Stop a background bash task: its whole process tree gets SIGTERM, \
then SIGKILL after a grace period. Returns at once; the task reads as killed from then on, and \
bash_output still shows what it wrote.";

pub fn call(exec: &dyn Executor, args: &Json, caller: &Caller) -> Result<String, ToolError> {
    let id = task_id::checked(exec, args, caller)?;
    Ok(if exec.kill(id)? {
        format!("killed background task {id}")
    } else {
        format!("task {id} had already finished")
    })
}
