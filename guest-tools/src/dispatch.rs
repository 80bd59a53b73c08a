//! The exported `tools` interface in plain Rust: list the tools, call one by name, handle a
//! finished task.
//!
//! Every failure becomes a tool result here, with its code, so the model always gets text back.

use crate::instructions;
use crate::json::Json;
use crate::notice;
use crate::schema;
use crate::tools::{Tool, ToolError};
use crate::validate;
use crate::world::{Agent, Caller, Executor, Task, ToolDefinition, ToolResult};

pub const INVALID_ARGS: &str = "INVALID_ARGS";
pub const UNKNOWN_TOOL: &str = "UNKNOWN_TOOL";
pub const ABORTED: &str = "ABORTED";
pub const TOOL_ERROR: &str = "TOOL_ERROR";
pub const POLICY_REFUSED: &str = "POLICY_REFUSED";

/// The tools in their stable order, each with its title, schema as compact JSON, and hints.
pub fn list_tools(exec: &dyn Executor) -> Vec<ToolDefinition> {
    let limits = exec.current_limits();
    Tool::ALL
        .into_iter()
        .map(|tool| ToolDefinition {
            name: tool.name().to_string(),
            title: tool.title().to_string(),
            description: tool.description(&limits),
            input_schema: schema::to_json_schema(&tool.params()).to_json_string(),
            annotations: tool.annotations(),
        })
        .collect()
}

/// The instructions for the model, with the executor's sandbox (from its limits) stated.
pub fn instructions(exec: &dyn Executor) -> String {
    instructions::instructions(&exec.current_limits())
}

/// Validate `arguments` (JSON text) against the tool's declaration and run it.
pub fn call_tool(exec: &dyn Executor, name: &str, arguments: &str, caller: &Caller) -> ToolResult {
    let Some(tool) = Tool::by_name(name) else {
        return error(format!("unknown tool \"{name}\""), UNKNOWN_TOOL);
    };
    let args = match Json::parse(arguments) {
        Ok(args) => args,
        Err(e) => {
            return error(
                format!("invalid arguments: arguments are not valid JSON: {e}"),
                INVALID_ARGS,
            );
        }
    };
    let violations = validate::validate(&tool.params(), &args);
    if !violations.is_empty() {
        return error(
            format!("invalid arguments: {}", violations.join("; ")),
            INVALID_ARGS,
        );
    }
    match tool.call(exec, &args, caller) {
        Ok(text) => ToolResult {
            text,
            is_error: false,
            error_code: None,
        },
        Err(ToolError::Aborted) => error("command aborted".to_string(), ABORTED),
        Err(ToolError::Message(message)) => error(message, TOOL_ERROR),
        Err(ToolError::Refused(text)) => ToolResult {
            text,
            is_error: true,
            error_code: Some(POLICY_REFUSED.to_string()),
        },
    }
}

/// A background task ended: notify its owner. An error is a message for the host's log.
pub fn task_done(agent: &dyn Agent, task: &Task) -> Result<(), String> {
    notice::deliver(agent, task)
}

fn error(message: String, code: &str) -> ToolResult {
    ToolResult {
        text: format!("Error: {message}"),
        is_error: true,
        error_code: Some(code.to_string()),
    }
}

#[cfg(test)]
mod tests;
