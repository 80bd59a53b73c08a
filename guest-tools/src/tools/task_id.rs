//! The `task_id` parameter and the checks `bash_output` and `bash_kill` share.

use super::{ToolError, str_arg};
use crate::json::Json;
use crate::jstrim;
use crate::schema::{Param, Prop};
use crate::world::{Caller, Executor};

pub fn params() -> Vec<Param> {
    vec![Param::new(
        "task_id",
        Prop::string()
            .required()
            .describe("Id of the background task, as returned by bash (for example bash-1)."),
    )]
}

/// The task id once it is non-blank and the caller may touch the task (contract §6).
///
/// Ownership is checked before the id is looked up, so a foreign task and an unknown one are
/// told apart only for callers entitled to know.
pub fn checked<'a>(
    exec: &dyn Executor,
    args: &'a Json,
    caller: &Caller,
) -> Result<&'a str, ToolError> {
    let id = str_arg(args, "task_id").unwrap_or_default();
    if jstrim::is_blank(id) {
        return Err(ToolError::Message(
            "invalid task_id: expected a non-empty string".into(),
        ));
    }
    if let Some(owner) = exec.owner_of(id)
        && caller.owner.as_deref() != Some(owner.as_str())
    {
        return Err(ToolError::Message(format!(
            "task {id} belongs to another session"
        )));
    }
    Ok(id)
}
