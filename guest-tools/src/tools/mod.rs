//! The three tools: their declarations, descriptions and bodies.
//!
//! A body runs only after its arguments passed validation against its own declaration, so it
//! reads them without re-checking types.

pub mod bash;
pub mod kill;
pub mod output;
mod task_id;

use crate::json::Json;
use crate::schema::Param;
use crate::world::{Caller, ExecError, Executor, Limits, ToolAnnotations};

/// Why a tool body failed. The dispatcher turns it into an error result.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolError {
    /// The caller aborted: `Error: command aborted`, code `ABORTED`, output discarded.
    Aborted,
    /// Anything else: `Error: <message>`.
    Message(String),
    /// A permission rule kept the command from running: the whole text is one `[policy: …]`
    /// line (README, contract extension), code `POLICY_REFUSED`.
    Refused(String),
}

impl From<ExecError> for ToolError {
    fn from(error: ExecError) -> ToolError {
        match error {
            ExecError::Aborted => ToolError::Aborted,
            // The executor carries only the id; the wording is the tools' (contract §3, §4).
            ExecError::UnknownTask(id) => ToolError::Message(format!("unknown bash task \"{id}\"")),
            ExecError::InvalidRequest(message)
            | ExecError::WorkdirUnusable(message)
            | ExecError::SpawnFailed(message)
            | ExecError::TaskLimit(message)
            | ExecError::Internal(message) => ToolError::Message(message),
            ExecError::Refused(refusal) => ToolError::Refused(crate::policy::line(&refusal)),
        }
    }
}

/// The tools, in list order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    Bash,
    BashOutput,
    BashKill,
}

impl Tool {
    /// The stable order of `list-tools`.
    pub const ALL: [Tool; 3] = [Tool::Bash, Tool::BashOutput, Tool::BashKill];

    pub fn name(self) -> &'static str {
        match self {
            Tool::Bash => "bash",
            Tool::BashOutput => "bash_output",
            Tool::BashKill => "bash_kill",
        }
    }

    pub fn by_name(name: &str) -> Option<Tool> {
        Tool::ALL.into_iter().find(|tool| tool.name() == name)
    }

    /// The declaration: the single source of both the schema and the validation.
    pub fn params(self) -> Vec<Param> {
        match self {
            Tool::Bash => bash::params(),
            Tool::BashOutput | Tool::BashKill => task_id::params(),
        }
    }

    /// A short human title, for clients to display.
    pub fn title(self) -> &'static str {
        match self {
            Tool::Bash => bash::TITLE,
            Tool::BashOutput => output::TITLE,
            Tool::BashKill => kill::TITLE,
        }
    }

    /// What the tool may do to its environment, for clients deciding what needs approval.
    pub fn annotations(self) -> ToolAnnotations {
        match self {
            Tool::Bash => bash::ANNOTATIONS,
            Tool::BashOutput => output::ANNOTATIONS,
            Tool::BashKill => kill::ANNOTATIONS,
        }
    }

    /// What the model is told about the tool; `bash` states the executor's limits.
    pub fn description(self, limits: &Limits) -> String {
        match self {
            Tool::Bash => bash::description(limits),
            Tool::BashOutput => output::DESCRIPTION.to_string(),
            Tool::BashKill => kill::DESCRIPTION.to_string(),
        }
    }

    /// Run the body on validated arguments.
    pub fn call(
        self,
        exec: &dyn Executor,
        args: &Json,
        caller: &Caller,
    ) -> Result<String, ToolError> {
        match self {
            Tool::Bash => bash::call(exec, args, caller),
            Tool::BashOutput => output::call(exec, args, caller),
            Tool::BashKill => kill::call(exec, args, caller),
        }
    }
}

/// A validated string argument.
fn str_arg<'a>(args: &'a Json, key: &str) -> Option<&'a str> {
    match args.get(key) {
        Some(Json::String(s)) => Some(s),
        _ => None,
    }
}
