//! `bash`: run a command in the foreground, or start it as a background task.

use super::{ToolError, str_arg};
use crate::json::Json;
use crate::schema::{Param, Prop};
use crate::world::{Caller, Executor, Limits, Request, ToolAnnotations};
use crate::{jsnum, jstrim, render, workdir};

pub const TITLE: &str = "Run a shell command";

/// A command can do anything the host's user can: `bash` is the one tool that needs approval.
pub const ANNOTATIONS: ToolAnnotations = ToolAnnotations {
    // It runs whatever it is given, and most commands change something.
    read_only_hint: false,
    // `rm`, `>` and `git reset --hard` overwrite and delete what the tool did not create.
    destructive_hint: true,
    // Running a command again runs it again: appends append twice, counters count twice.
    idempotent_hint: false,
    // Commands reach the whole file system, the network and every program on the machine.
    open_world_hint: true,
};

pub fn params() -> Vec<Param> {
    vec![
        Param::new(
            "command",
            Prop::string()
                .required()
                .describe("The command line to run with bash -c, in a fresh shell."),
        ),
        Param::new(
            "description",
            Prop::string().required().describe(
                "What the command does, in 5-10 words of active voice. Shown to the user; \
                 never run.",
            ),
        ),
        Param::new(
            "timeoutMs",
            Prop::number().describe(
                "Timeout in milliseconds. When omitted the default applies; larger values are \
                 capped at the maximum. Not used with run_in_background.",
            ),
        ),
        Param::new(
            "workdir",
            Prop::string().describe(
                "Directory to run the command in; use this instead of cd. A relative path is \
                 resolved against the session's working directory.",
            ),
        ),
        Param::new(
            "run_in_background",
            Prop::boolean().describe(
                "Start the command as a background task and return its id at once, with no \
                 timeout. Read it with bash_output and stop it with bash_kill.",
            ),
        ),
    ]
}

/// The tool description, stating the timeouts the executor enforces.
pub fn description(limits: &Limits) -> String {
    format!(
        "Run a shell command with bash -c and return what it printed.\n\
         \n\
         Every call starts a fresh, non-interactive shell: nothing (cd, variables, functions) \
         carries over to the next call. To run somewhere else, set workdir instead of using cd.\n\
         \n\
         The result is stdout, then stderr after a [stderr] line. A non-zero exit is not an \
         error: it shows as [exit code: N] after the output, as do timeouts and signals. Long \
         output keeps only its tail, with a note naming a file that holds the full output. \
         Processes the command leaves running in the background (cmd &) are stopped when it \
         exits.\n\
         \n\
         Timeout: {} ms by default (set timeoutMs to change it), at most {} ms; a command that \
         runs out of time is stopped.\n\
         \n\
         For servers, watchers and anything else long-running, set run_in_background: the call \
         returns a task id at once and no timeout applies. Poll the task's new output and status \
         with bash_output, and stop it with bash_kill.",
        jsnum::to_js_string(limits.default_timeout_ms),
        jsnum::to_js_string(limits.max_timeout_ms),
    )
}

pub fn call(exec: &dyn Executor, args: &Json, caller: &Caller) -> Result<String, ToolError> {
    let command = str_arg(args, "command").unwrap_or_default();
    if jstrim::is_blank(command) {
        return Err(ToolError::Message(
            "invalid command: expected a non-empty string".into(),
        ));
    }
    if jstrim::is_blank(str_arg(args, "description").unwrap_or_default()) {
        return Err(ToolError::Message(
            "invalid description: expected a non-empty string".into(),
        ));
    }
    let timeout_ms = match args.get("timeoutMs") {
        Some(Json::Number(ms)) => Some(*ms),
        _ => None,
    };
    if let Some(ms) = timeout_ms
        && !(ms.is_finite() && ms > 0.0)
    {
        return Err(ToolError::Message(format!(
            "invalid timeoutMs: expected a positive number, got {}",
            jsnum::to_js_json(ms)
        )));
    }
    // Only these four facts reach the executor; `description` and unknown keys stay here.
    let request = Request {
        command: command.to_string(),
        workdir: workdir::resolve(str_arg(args, "workdir"), caller.cwd.as_deref()),
        timeout_ms,
        owner: caller.owner.clone(),
    };
    let spec = exec.resolve(request)?;
    if matches!(args.get("run_in_background"), Some(Json::Bool(true))) {
        let task = exec.start(spec)?;
        let mut text = format!("started background task {}", task.id);
        if let Some(relocation) = &task.relocated {
            text.push('\n');
            text.push_str(&render::relocation_line(relocation));
        }
        return Ok(text);
    }
    let result = exec.run(spec)?;
    if result.aborted {
        return Err(ToolError::Aborted);
    }
    Ok(render::foreground(&result))
}
