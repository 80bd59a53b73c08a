//! The `instructions` export: how the three tools work together, in a few lines for the model.
//!
//! A host hands this text to the model once per session, next to the tool descriptions; an MCP
//! server serves it as the `instructions` of its `initialize` result. Each tool's description
//! says what that tool does; this says when to use which (foreground or background, polling and
//! stopping) and what every call has in common (a fresh shell).

/// The instructions, exactly as the model gets them.
pub const INSTRUCTIONS: &str = "\
These tools run shell commands on the machine that serves them.
- Use bash in the foreground for commands that finish within its timeout (the bash tool's \
description names the default and the maximum); the call returns their output.
- For servers, watchers, long builds and anything else that keeps running, set \
run_in_background: the call returns a task id at once and no timeout applies. Poll the task's new \
output and status with bash_output, and stop it with bash_kill. When a task ends, a notice says \
so on a later result.
- Every call starts a fresh shell: cd, variables and functions do not carry over. Set workdir \
instead of using cd.
- Running tasks are stopped when this session ends.";

/// The text of the `instructions` export.
pub fn instructions() -> String {
    INSTRUCTIONS.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::Tool;

    #[test]
    fn instructions_are_exact() {
        assert_eq!(
            instructions(),
            "These tools run shell commands on the machine that serves them.\n\
             - Use bash in the foreground for commands that finish within its timeout (the bash \
             tool's description names the default and the maximum); the call returns their \
             output.\n\
             - For servers, watchers, long builds and anything else that keeps running, set \
             run_in_background: the call returns a task id at once and no timeout applies. Poll \
             the task's new output and status with bash_output, and stop it with bash_kill. When \
             a task ends, a notice says so on a later result.\n\
             - Every call starts a fresh shell: cd, variables and functions do not carry over. \
             Set workdir instead of using cd.\n\
             - Running tasks are stopped when this session ends."
        );
    }

    /// Every tool and parameter the text names exists under that name.
    #[test]
    fn instructions_name_the_tools_and_parameters_as_declared() {
        // Whole words: `bash` must be named on its own, not only inside `bash_output`.
        let words: Vec<&str> = INSTRUCTIONS
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .collect();
        for tool in Tool::ALL {
            assert!(words.contains(&tool.name()), "{}", tool.name());
        }
        let bash = Tool::Bash.params();
        for param in ["run_in_background", "workdir"] {
            assert!(bash.iter().any(|p| p.name == param), "{param}");
            assert!(words.contains(&param), "{param}");
        }
    }
}
