//! The `instructions` export: how the three tools work together, in a few lines for the model.
//!
//! A host hands this text to the model once per session, next to the tool descriptions; an MCP
//! server serves it as the `instructions` of its `initialize` result. Each tool's description
//! says what that tool does; this says when to use which (foreground or background, polling and
//! stopping) and what every call has in common (a fresh shell). Under a sandbox (the executor's
//! limits name one) a paragraph follows saying what commands may write, read and reach, and how
//! a denial shows, so that the model neither guesses at a failure's cause nor tries to work
//! around the sandbox.

use crate::world::{Limits, SandboxMode, SandboxNetwork, SandboxPolicy};

/// The instructions, exactly as the model gets them without a sandbox.
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

/// The last line of the sandbox paragraph: what a denial looks like and what to do about it.
const DENIAL_LINE: &str = "A denied operation fails (Permission denied, Read-only file system \
or Network is unreachable), and the result then ends with a [sandbox: …] line naming it; do not try to get around \
the sandbox: tell the user what was denied.";

/// The text of the `instructions` export for an executor with these limits: [`INSTRUCTIONS`],
/// then, under a sandbox, a blank line (as between the paragraphs of a tool description) and
/// the sandbox paragraph. Without a sandbox the text is exactly [`INSTRUCTIONS`].
pub fn instructions(limits: &Limits) -> String {
    match &limits.sandbox {
        None => INSTRUCTIONS.to_string(),
        Some(policy) => format!("{INSTRUCTIONS}\n\n{}", sandbox_paragraph(policy)),
    }
}

/// The sandbox paragraph, one sentence per line: what commands may write, what they may not
/// read (left out when nothing is denied), what they may reach (under `loopback`, the hosts the
/// sandbox's proxy may reach, when there are any), and how a denial shows.
pub fn sandbox_paragraph(policy: &SandboxPolicy) -> String {
    let mut lines = vec![match policy.mode {
        SandboxMode::ReadOnly => "Commands run in a sandbox (read-only): they can write only to \
                                  their own $TMPDIR and to devices such as /dev/null."
            .to_string(),
        SandboxMode::WorkspaceWrite => format!(
            "Commands run in a sandbox (workspace-write): they can write only under {}; git \
             hooks and configuration there stay read-only, and git init, add and commit work.",
            writable_places(&policy.writable)
        ),
    }];
    if !policy.denied_reads.is_empty() {
        lines.push(format!(
            "They cannot read: {}.",
            policy.denied_reads.join(", ")
        ));
    }
    lines.push(
        match policy.network {
            SandboxNetwork::Off => "The network is off: no sockets but Unix sockets.",
            SandboxNetwork::Loopback => {
                "The network is limited to each command's own loopback interface: a server a \
                 command starts is reachable only from within that command."
            }
            SandboxNetwork::On => "The network is on.",
        }
        .to_string(),
    );
    if policy.network == SandboxNetwork::Loopback && !policy.allowed_hosts.is_empty() {
        lines.push(format!(
            "Beyond that interface, only these hosts are reachable, through the proxy that \
             HTTP_PROXY and HTTPS_PROXY name (it answers 403 Forbidden for any other): {}.",
            policy.allowed_hosts.join(", ")
        ));
    }
    lines.push(DENIAL_LINE.to_string());
    lines.join("\n")
}

/// The writable roots and the command's own `$TMPDIR` as one list in prose: `, ` between the
/// items and ` and ` before the last (`/w, /tmp and their own $TMPDIR`), no serial comma.
fn writable_places(writable: &[String]) -> String {
    let tmpdir = "their own $TMPDIR";
    if writable.is_empty() {
        return tmpdir.to_string();
    }
    format!("{} and {tmpdir}", writable.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::Tool;

    fn limits(sandbox: Option<SandboxPolicy>) -> Limits {
        Limits {
            default_timeout_ms: 120000.0,
            max_timeout_ms: 600000.0,
            max_output_bytes: 64000,
            grace_ms: 3000.0,
            sandbox,
        }
    }

    fn policy(
        mode: SandboxMode,
        writable: &[&str],
        denied_reads: &[&str],
        network: SandboxNetwork,
    ) -> SandboxPolicy {
        SandboxPolicy {
            mode,
            writable: writable.iter().map(|w| w.to_string()).collect(),
            denied_reads: denied_reads.iter().map(|d| d.to_string()).collect(),
            network,
            allowed_hosts: Vec::new(),
        }
    }

    const DENIAL: &str = "A denied operation fails (Permission denied, Read-only file system or \
                          Network is unreachable), and the result then ends with a [sandbox: …] line naming it; do not \
                          try to get around the sandbox: tell the user what was denied.";

    #[test]
    fn instructions_are_exact() {
        assert_eq!(
            instructions(&limits(None)),
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

    #[test]
    fn without_a_sandbox_the_instructions_are_the_constant() {
        assert_eq!(instructions(&limits(None)), INSTRUCTIONS);
    }

    #[test]
    fn read_only_with_the_network_off() {
        let p = policy(
            SandboxMode::ReadOnly,
            &[],
            &["/home/u/.ssh", "/home/u/.aws"],
            SandboxNetwork::Off,
        );
        assert_eq!(
            instructions(&limits(Some(p))),
            format!(
                "{INSTRUCTIONS}\n\n\
                 Commands run in a sandbox (read-only): they can write only to their own $TMPDIR \
                 and to devices such as /dev/null.\n\
                 They cannot read: /home/u/.ssh, /home/u/.aws.\n\
                 The network is off: no sockets but Unix sockets.\n\
                 {DENIAL}"
            )
        );
    }

    #[test]
    fn workspace_write_with_loopback() {
        let p = policy(
            SandboxMode::WorkspaceWrite,
            &["/work", "/tmp", "/opt/cache"],
            &["/home/u/.ssh"],
            SandboxNetwork::Loopback,
        );
        assert_eq!(
            sandbox_paragraph(&p),
            format!(
                "Commands run in a sandbox (workspace-write): they can write only under /work, \
                 /tmp, /opt/cache and their own $TMPDIR; git hooks and configuration there stay \
                 read-only, and git init, add and commit work.\n\
                 They cannot read: /home/u/.ssh.\n\
                 The network is limited to each command's own loopback interface: a server a \
                 command starts is reachable only from within that command.\n\
                 {DENIAL}"
            )
        );
    }

    #[test]
    fn loopback_with_allowed_hosts_names_them_after_the_network_line() {
        let p = SandboxPolicy {
            allowed_hosts: vec!["registry.npmjs.org".into(), "*.pythonhosted.org".into()],
            ..policy(
                SandboxMode::WorkspaceWrite,
                &["/work"],
                &[],
                SandboxNetwork::Loopback,
            )
        };
        assert_eq!(
            sandbox_paragraph(&p),
            format!(
                "Commands run in a sandbox (workspace-write): they can write only under /work and \
                 their own $TMPDIR; git hooks and configuration there stay read-only, and git \
                 init, add and commit work.\n\
                 The network is limited to each command's own loopback interface: a server a \
                 command starts is reachable only from within that command.\n\
                 Beyond that interface, only these hosts are reachable, through the proxy that \
                 HTTP_PROXY and HTTPS_PROXY name (it answers 403 Forbidden for any other): \
                 registry.npmjs.org, *.pythonhosted.org.\n\
                 {DENIAL}"
            )
        );
    }

    #[test]
    fn workspace_write_with_the_network_on_and_no_denied_reads() {
        let p = policy(
            SandboxMode::WorkspaceWrite,
            &["/work"],
            &[],
            SandboxNetwork::On,
        );
        // No denied reads: no line for them.
        assert_eq!(
            instructions(&limits(Some(p))),
            format!(
                "{INSTRUCTIONS}\n\n\
                 Commands run in a sandbox (workspace-write): they can write only under /work and \
                 their own $TMPDIR; git hooks and configuration there stay read-only, and git \
                 init, add and commit work.\n\
                 The network is on.\n\
                 {DENIAL}"
            )
        );
    }

    #[test]
    fn the_writable_places_read_as_a_list() {
        assert_eq!(writable_places(&[]), "their own $TMPDIR");
        assert_eq!(writable_places(&["/w".into()]), "/w and their own $TMPDIR");
        assert_eq!(
            writable_places(&["/w".into(), "/tmp".into()]),
            "/w, /tmp and their own $TMPDIR"
        );
    }

    #[test]
    fn every_network_mode_has_its_line() {
        let lines = [
            (
                SandboxNetwork::Off,
                "The network is off: no sockets but Unix sockets.",
            ),
            (
                SandboxNetwork::Loopback,
                "The network is limited to each command's own loopback interface: a server a \
                 command starts is reachable only from within that command.",
            ),
            (SandboxNetwork::On, "The network is on."),
        ];
        for (network, line) in lines {
            let paragraph = sandbox_paragraph(&policy(SandboxMode::ReadOnly, &[], &[], network));
            let got: Vec<&str> = paragraph.lines().collect();
            assert_eq!(got.len(), 3, "{paragraph}");
            assert_eq!(got[1], line);
            assert_eq!(got[2], DENIAL);
        }
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
