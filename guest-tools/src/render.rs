//! The text the model reads for a foreground run and for a background delta.
//!
//! The executor reports facts only (texts, flags, codes); turning them into words is the guest's
//! job so that every executor reads the same.

use crate::jsnum;
use crate::world::{
    Denial, DenialReason, Denials, DeniedAccess, Read, Relocation, RelocationReason, RunResult,
    StreamOutput, TaskState, Yielded,
};

/// Shown instead of a spill path when no complete spill file exists.
const UNAVAILABLE: &str = "(unavailable)";

/// A foreground run's text (contract §2, "Foreground result text").
///
/// A run that continues as a background task (our extension, the executor's opt-in foreground
/// limit) is rendered by the same rules: its output so far is the body, and one marker names the
/// task instead of the end markers, since nothing ended.
///
/// A spill file deleted to keep the session within its spill budget, and what a sandbox denied
/// the command (our extensions) are more markers after all the others, so that the model reads
/// how the command ended first; the session's move to another node of an executor pool (our
/// extension) comes last of all.
pub fn foreground(result: &RunResult) -> String {
    let mut body = join_streams(&stream_text(&result.stdout), &stream_text(&result.stderr));
    if body.is_empty() {
        body.push_str("(no output)");
    }
    let mut markers = match &result.yielded {
        Some(yielded) => vec![yielded_marker(yielded)],
        None => end_markers(result),
    };
    markers.extend(evicted_line(
        result.stdout.spill_evicted,
        result.stderr.spill_evicted,
    ));
    markers.extend(sandbox_line(&result.denials));
    markers.extend(result.relocated.as_ref().map(relocation_line));
    if markers.is_empty() {
        return body;
    }
    if !body.ends_with('\n') {
        body.push('\n');
    }
    body.push_str(&markers.join("\n"));
    body
}

/// How the command ended: timeout, signal or exit code, leftovers.
fn end_markers(result: &RunResult) -> Vec<String> {
    let mut markers = Vec::new();
    if result.timed_out {
        markers.push(format!(
            "[timed out after {}ms]",
            jsnum::to_js_string(result.timeout_ms)
        ));
    }
    if let Some(signal) = &result.signal {
        markers.push(format!("[killed by signal: {signal}]"));
    } else if let Some(code) = result.exit_code.filter(|code| *code != 0) {
        markers.push(format!("[exit code: {code}]"));
    }
    if result.leftover_processes > 0 {
        markers.push(format!(
            "[stopped {} leftover background process(es); use run_in_background for long-lived processes]",
            result.leftover_processes
        ));
    }
    markers
}

/// The marker of a run that continues as a background task: where it went and how to follow it,
/// worded like the start line of a background task (`started background task <id>`).
fn yielded_marker(yielded: &Yielded) -> String {
    format!(
        "[still running after {}ms; continues as background task {}; read its output with bash_output]",
        jsnum::to_js_string(yielded.after_ms),
        yielded.task.id
    )
}

/// `[full output evicted: …]` when the complete spill file of stdout, stderr or both was
/// deleted to keep the session within the executor's spill budget: the file a `(unavailable)`
/// stands for, or one named earlier, is gone, and reading its path would fail. None otherwise.
pub fn evicted_line(stdout: bool, stderr: bool) -> Option<String> {
    let what = match (stdout, stderr) {
        (true, true) => "the spill files of stdout and stderr were",
        (true, false) => "the spill file of stdout was",
        (false, true) => "the spill file of stderr was",
        (false, false) => return None,
    };
    Some(format!(
        "[full output evicted: {what} deleted to keep this session within its spill budget]"
    ))
}

/// `[sandbox: <phrase>; <phrase>; and <n> more]`: what the sandbox denied, as the host reported
/// it; none when it reported no denial. Only the first few denials are named (the host keeps
/// those), the rest counted, so the line stays short however often a command was denied.
pub fn sandbox_line(denials: &Denials) -> Option<String> {
    if denials.first.is_empty() {
        return None;
    }
    let mut phrases: Vec<String> = denials.first.iter().map(denial_phrase).collect();
    if denials.more > 0 {
        phrases.push(format!("and {} more", denials.more));
    }
    Some(format!("[sandbox: {}]", phrases.join("; ")))
}

/// `[executor: node <from> <what happened>; this session now runs on node <to>, where files
/// written by earlier commands may be missing]`: the caller's session moved to another node of
/// an executor pool before this command ran (or started). Node ids are escaped like targets:
/// they are the pool operators' choice.
pub fn relocation_line(relocation: &Relocation) -> String {
    let from = escaped(&relocation.from_node);
    let what = match relocation.reason {
        RelocationReason::NodeLost => "was lost",
        RelocationReason::NodeLeft => "left the pool",
        RelocationReason::NodeRestarted => "restarted",
        RelocationReason::SessionDropped => "dropped this session",
    };
    format!(
        "[executor: node {from} {what}; this session now runs on node {}, where files written by \
         earlier commands may be missing]",
        escaped(&relocation.to_node)
    )
}

/// `target` with its control characters escaped: a file name is the command's choice, and a
/// newline in it must not start a line that reads as a marker of ours.
fn escaped(target: &str) -> String {
    let mut out = String::with_capacity(target.len());
    for c in target.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() && (c as u32) < 0x100 => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// One denial in words: what was attempted on which target, and why it was denied.
fn denial_phrase(denial: &Denial) -> String {
    let (target, reason) = (escaped(&denial.target), reason_text(denial.reason));
    match denial.access {
        DeniedAccess::Read => format!("read of {target} denied ({reason})"),
        DeniedAccess::Write => format!("write to {target} denied ({reason})"),
        DeniedAccess::Socket => format!("{target} socket denied ({reason})"),
        DeniedAccess::Connect => format!("connect to {target} denied ({reason})"),
        DeniedAccess::Undone => format!("change to {target} undone ({reason})"),
    }
}

fn reason_text(reason: DenialReason) -> &'static str {
    match reason {
        DenialReason::OutsideWritableRoots => "outside the writable roots",
        DenialReason::DeniedRead => "a denied path",
        DenialReason::ProtectedPath => "a protected git path",
        DenialReason::NetworkOff => "the network is off",
        DenialReason::LoopbackOnly => "only loopback is reachable",
        DenialReason::CreatedAfterSetup => {
            "created after this command's sandbox was set up; readable from the next command"
        }
        DenialReason::HostNotAllowed => "not an allowed host",
    }
}

/// A stream's kept text, plus the truncation marker when bytes were dropped.
fn stream_text(stream: &StreamOutput) -> String {
    if !stream.truncated {
        return stream.text.clone();
    }
    let path = stream.spill_path.as_deref().unwrap_or(UNAVAILABLE);
    format!("{}\n[output truncated; full output: {path}]", stream.text)
}

/// stdout, then `[stderr]` and stderr when there is any, with a newline between only if needed.
fn join_streams(stdout: &str, stderr: &str) -> String {
    let mut body = stdout.to_string();
    if !stderr.is_empty() {
        if !body.is_empty() && !body.ends_with('\n') {
            body.push('\n');
        }
        body.push_str("[stderr]\n");
        body.push_str(stderr);
    }
    body
}

/// The body of a `bash_output` answer, before its status line (contract §3).
///
/// A lost task (its executor is gone; our extension) has no output left to read: where the
/// contract's body would say `(no new output)`, it says the output is unavailable.
pub fn delta(read: &Read) -> String {
    let mut body = join_streams(&read.stdout.text, &read.stderr.text);
    if body.is_empty() {
        body.push_str(if read.task.state == TaskState::Lost {
            "(output unavailable: the executor is gone)"
        } else {
            "(no new output)"
        });
    }
    let lossy: Vec<&str> = [&read.stdout, &read.stderr]
        .into_iter()
        .filter(|d| d.lossy)
        .map(|d| d.spill_path.as_deref().unwrap_or(UNAVAILABLE))
        .collect();
    if !lossy.is_empty() {
        body.push_str(&format!(
            "\n[some output was dropped from memory; full output: {}]",
            lossy.join(", ")
        ));
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::world::{StreamDelta, Task, TaskState};

    fn out(text: &str) -> StreamOutput {
        StreamOutput {
            text: text.into(),
            ..Default::default()
        }
    }

    fn exited(code: i32, stdout: &str, stderr: &str) -> RunResult {
        RunResult {
            exit_code: Some(code),
            timeout_ms: 120000.0,
            stdout: out(stdout),
            stderr: out(stderr),
            ..Default::default()
        }
    }

    #[test]
    fn example_hello() {
        assert_eq!(foreground(&exited(0, "hello\n", "")), "hello\n");
    }

    #[test]
    fn example_no_output() {
        assert_eq!(foreground(&exited(0, "", "")), "(no output)");
    }

    #[test]
    fn example_stderr_after_newline_terminated_stdout() {
        assert_eq!(
            foreground(&exited(0, "out\n", "err\n")),
            "out\n[stderr]\nerr\n"
        );
    }

    #[test]
    fn example_stderr_adds_separator_newline() {
        assert_eq!(foreground(&exited(0, "out", "err")), "out\n[stderr]\nerr");
        assert_eq!(
            foreground(&exited(0, "out", "err\n")),
            "out\n[stderr]\nerr\n"
        );
    }

    #[test]
    fn stderr_only() {
        assert_eq!(foreground(&exited(0, "", "err\n")), "[stderr]\nerr\n");
    }

    #[test]
    fn example_exit_code() {
        assert_eq!(
            foreground(&exited(3, "failing\n", "")),
            "failing\n[exit code: 3]"
        );
        assert_eq!(
            foreground(&exited(3, "failing", "")),
            "failing\n[exit code: 3]"
        );
        assert_eq!(
            foreground(&exited(-1, "", "")),
            "(no output)\n[exit code: -1]"
        );
    }

    #[test]
    fn exit_zero_has_no_marker() {
        assert_eq!(foreground(&exited(0, "ok", "")), "ok");
    }

    #[test]
    fn example_timeout_then_signal() {
        let r = RunResult {
            signal: Some("SIGTERM".into()),
            timed_out: true,
            timeout_ms: 100.0,
            ..Default::default()
        };
        assert_eq!(
            foreground(&r),
            "(no output)\n[timed out after 100ms]\n[killed by signal: SIGTERM]"
        );
    }

    #[test]
    fn example_timeout_shown_even_when_process_exited_zero() {
        let r = RunResult {
            timed_out: true,
            timeout_ms: 1000.0,
            ..exited(0, "", "")
        };
        assert_eq!(foreground(&r), "(no output)\n[timed out after 1000ms]");
    }

    #[test]
    fn timeout_with_exit_code() {
        let r = RunResult {
            timed_out: true,
            timeout_ms: 1500.5,
            ..exited(143, "partial\n", "")
        };
        assert_eq!(
            foreground(&r),
            "partial\n[timed out after 1500.5ms]\n[exit code: 143]"
        );
    }

    #[test]
    fn signal_wins_over_exit_code() {
        let r = RunResult {
            signal: Some("SIGKILL".into()),
            ..exited(137, "x\n", "")
        };
        assert_eq!(foreground(&r), "x\n[killed by signal: SIGKILL]");
    }

    #[test]
    fn example_truncated_without_spill_file() {
        let r = RunResult {
            stdout: StreamOutput {
                text: "tail".into(),
                truncated: true,
                spill_path: None,
                spill_evicted: false,
            },
            ..exited(0, "", "")
        };
        assert_eq!(
            foreground(&r),
            "tail\n[output truncated; full output: (unavailable)]"
        );
    }

    #[test]
    fn truncated_streams_with_spill_files() {
        let r = RunResult {
            stdout: StreamOutput {
                text: "tail\n".into(),
                truncated: true,
                spill_path: Some("/tmp/o.log".into()),
                spill_evicted: false,
            },
            stderr: StreamOutput {
                text: "etail".into(),
                truncated: true,
                spill_path: Some("/tmp/e.log".into()),
                spill_evicted: false,
            },
            ..exited(2, "", "")
        };
        assert_eq!(
            foreground(&r),
            "tail\n\n[output truncated; full output: /tmp/o.log]\n[stderr]\netail\n\
             [output truncated; full output: /tmp/e.log]\n[exit code: 2]"
        );
    }

    #[test]
    fn leftover_marker_is_last() {
        let r = RunResult {
            leftover_processes: 2,
            timed_out: true,
            timeout_ms: 100.0,
            signal: Some("SIGTERM".into()),
            ..exited(0, "srv\n", "")
        };
        assert_eq!(
            foreground(&r),
            "srv\n[timed out after 100ms]\n[killed by signal: SIGTERM]\n\
             [stopped 2 leftover background process(es); use run_in_background for long-lived processes]"
        );
        let r = RunResult {
            leftover_processes: 1,
            ..exited(0, "started", "")
        };
        assert_eq!(
            foreground(&r),
            "started\n[stopped 1 leftover background process(es); use run_in_background for long-lived processes]"
        );
    }

    fn yielded(id: &str, after_ms: f64, stdout: StreamOutput, stderr: StreamOutput) -> RunResult {
        RunResult {
            timeout_ms: 1000.0,
            stdout,
            stderr,
            yielded: Some(Yielded {
                task: Task {
                    id: id.into(),
                    command: "x".into(),
                    owner: Some("s1".into()),
                    state: TaskState::Running,
                    exit_code: None,
                    signal: None,
                    relocated: None,
                },
                after_ms,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_yielded_run_shows_its_output_so_far_and_names_its_task() {
        assert_eq!(
            foreground(&yielded("bash-3", 300.0, out("a\n"), out(""))),
            "a\n[still running after 300ms; continues as background task bash-3; read its output with bash_output]"
        );
        assert_eq!(
            foreground(&yielded("bash-1", 60000.0, out("a"), out("e"))),
            "a\n[stderr]\ne\n[still running after 60000ms; continues as background task bash-1; read its output with bash_output]"
        );
        assert_eq!(
            foreground(&yielded("bash-12", 1500.5, out(""), out(""))),
            "(no output)\n[still running after 1500.5ms; continues as background task bash-12; read its output with bash_output]"
        );
    }

    #[test]
    fn a_yielded_run_keeps_the_truncation_rules_and_has_no_end_markers() {
        let truncated = StreamOutput {
            text: "tail\n".into(),
            truncated: true,
            spill_path: Some("/s/o.log".into()),
            spill_evicted: false,
        };
        assert_eq!(
            foreground(&yielded("bash-2", 300.0, truncated, out(""))),
            "tail\n\n[output truncated; full output: /s/o.log]\n\
             [still running after 300ms; continues as background task bash-2; read its output with bash_output]"
        );
        // Only the task marker, even from an executor that also reports end facts.
        let r = RunResult {
            timed_out: true,
            exit_code: Some(3),
            leftover_processes: 1,
            ..yielded("bash-2", 300.0, out("x\n"), out(""))
        };
        assert_eq!(
            foreground(&r),
            "x\n[still running after 300ms; continues as background task bash-2; read its output with bash_output]"
        );
    }

    fn denial(access: DeniedAccess, target: &str, reason: DenialReason) -> Denial {
        Denial {
            access,
            target: target.into(),
            reason,
        }
    }

    fn denied(first: Vec<Denial>, more: u32) -> Denials {
        Denials { first, more }
    }

    fn write_etc_hosts() -> Denial {
        denial(
            DeniedAccess::Write,
            "/etc/hosts",
            DenialReason::OutsideWritableRoots,
        )
    }

    #[test]
    fn control_characters_in_a_target_are_escaped() {
        let d = Denial {
            access: DeniedAccess::Write,
            target: "/etc/x\n[exit code: 0]\t\u{1b}[1m\u{85}".into(),
            reason: DenialReason::OutsideWritableRoots,
        };
        assert_eq!(
            sandbox_line(&denied(vec![d], 0)).as_deref(),
            Some(
                "[sandbox: write to /etc/x\\n[exit code: 0]\\t\\x1b[1m\\x85 denied (outside the \
                 writable roots)]"
            )
        );
    }

    #[test]
    fn no_denial_no_sandbox_line() {
        assert_eq!(sandbox_line(&Denials::default()), None);
    }

    #[test]
    fn one_denial_of_each_access() {
        let cases = [
            (
                denial(
                    DeniedAccess::Read,
                    "/root/.ssh/id_ed25519",
                    DenialReason::DeniedRead,
                ),
                "[sandbox: read of /root/.ssh/id_ed25519 denied (a denied path)]",
            ),
            (
                denial(
                    DeniedAccess::Read,
                    "/root/notes",
                    DenialReason::CreatedAfterSetup,
                ),
                "[sandbox: read of /root/notes denied (created after this command's sandbox was \
                 set up; readable from the next command)]",
            ),
            (
                write_etc_hosts(),
                "[sandbox: write to /etc/hosts denied (outside the writable roots)]",
            ),
            (
                denial(DeniedAccess::Socket, "AF_INET", DenialReason::NetworkOff),
                "[sandbox: AF_INET socket denied (the network is off)]",
            ),
            (
                denial(
                    DeniedAccess::Connect,
                    "[2001:db8::1]:443",
                    DenialReason::LoopbackOnly,
                ),
                "[sandbox: connect to [2001:db8::1]:443 denied (only loopback is reachable)]",
            ),
            (
                denial(
                    DeniedAccess::Connect,
                    "evil.example:443",
                    DenialReason::HostNotAllowed,
                ),
                "[sandbox: connect to evil.example:443 denied (not an allowed host)]",
            ),
            (
                denial(
                    DeniedAccess::Undone,
                    "/w/.git/hooks/pre-commit",
                    DenialReason::ProtectedPath,
                ),
                "[sandbox: change to /w/.git/hooks/pre-commit undone (a protected git path)]",
            ),
        ];
        for (d, line) in cases {
            assert_eq!(sandbox_line(&denied(vec![d], 0)).as_deref(), Some(line));
        }
    }

    #[test]
    fn three_denials_and_more() {
        let first = vec![
            denial(
                DeniedAccess::Read,
                "/root/.ssh/id_ed25519",
                DenialReason::DeniedRead,
            ),
            denial(DeniedAccess::Socket, "AF_INET", DenialReason::NetworkOff),
            denial(
                DeniedAccess::Connect,
                "203.0.113.7:443",
                DenialReason::NetworkOff,
            ),
        ];
        assert_eq!(
            sandbox_line(&denied(first.clone(), 0)).as_deref(),
            Some(
                "[sandbox: read of /root/.ssh/id_ed25519 denied (a denied path); AF_INET socket \
                 denied (the network is off); connect to 203.0.113.7:443 denied (the network is \
                 off)]"
            )
        );
        assert_eq!(
            sandbox_line(&denied(first, 2)).as_deref(),
            Some(
                "[sandbox: read of /root/.ssh/id_ed25519 denied (a denied path); AF_INET socket \
                 denied (the network is off); connect to 203.0.113.7:443 denied (the network is \
                 off); and 2 more]"
            )
        );
        assert_eq!(
            sandbox_line(&denied(vec![write_etc_hosts()], 1)).as_deref(),
            Some("[sandbox: write to /etc/hosts denied (outside the writable roots); and 1 more]")
        );
    }

    #[test]
    fn the_sandbox_line_follows_the_exit_code() {
        let r = RunResult {
            denials: denied(
                vec![denial(
                    DeniedAccess::Read,
                    "/root/.ssh/id",
                    DenialReason::DeniedRead,
                )],
                0,
            ),
            ..exited(1, "", "cat: /root/.ssh/id: Permission denied\n")
        };
        assert_eq!(
            foreground(&r),
            "[stderr]\ncat: /root/.ssh/id: Permission denied\n[exit code: 1]\n\
             [sandbox: read of /root/.ssh/id denied (a denied path)]"
        );
    }

    #[test]
    fn the_sandbox_line_alone_is_placed_as_a_marker() {
        let line = "[sandbox: write to /etc/hosts denied (outside the writable roots)]";
        let with = |stdout: &str| RunResult {
            denials: denied(vec![write_etc_hosts()], 0),
            ..exited(0, stdout, "")
        };
        // A newline before it only when the body does not end in one; none after it.
        assert_eq!(foreground(&with("out")), format!("out\n{line}"));
        assert_eq!(foreground(&with("out\n")), format!("out\n{line}"));
        assert_eq!(foreground(&with("")), format!("(no output)\n{line}"));
    }

    fn moved(from: &str, to: &str, reason: RelocationReason) -> Relocation {
        Relocation {
            from_node: from.into(),
            to_node: to.into(),
            reason,
        }
    }

    #[test]
    fn the_relocation_line_names_both_nodes_and_why() {
        let tail = "where files written by earlier commands may be missing]";
        for (reason, line) in [
            (
                RelocationReason::NodeLost,
                "[executor: node n0 was lost; this session now runs on node n1, ",
            ),
            (
                RelocationReason::NodeLeft,
                "[executor: node n0 left the pool; this session now runs on node n1, ",
            ),
            (
                RelocationReason::NodeRestarted,
                "[executor: node n0 restarted; this session now runs on node n1, ",
            ),
            (
                RelocationReason::SessionDropped,
                "[executor: node n0 dropped this session; this session now runs on node n1, ",
            ),
        ] {
            assert_eq!(
                relocation_line(&moved("n0", "n1", reason)),
                format!("{line}{tail}")
            );
        }
    }

    #[test]
    fn the_relocation_line_escapes_node_ids() {
        assert_eq!(
            relocation_line(&moved(
                "a\n[exit code: 0]",
                "b\tc",
                RelocationReason::NodeLost
            )),
            "[executor: node a\\n[exit code: 0] was lost; this session now runs on node b\\tc, \
             where files written by earlier commands may be missing]"
        );
    }

    #[test]
    fn the_relocation_line_is_the_last_marker() {
        let line = "[executor: node n0 was lost; this session now runs on node n1, where files \
                    written by earlier commands may be missing]";
        let r = RunResult {
            denials: denied(vec![write_etc_hosts()], 0),
            relocated: Some(moved("n0", "n1", RelocationReason::NodeLost)),
            ..exited(2, "out", "")
        };
        assert_eq!(
            foreground(&r),
            format!(
                "out\n[exit code: 2]\n\
                 [sandbox: write to /etc/hosts denied (outside the writable roots)]\n{line}"
            )
        );
        // Alone, it is placed as any marker: a newline before it only when needed, none after.
        let alone = |stdout: &str| RunResult {
            relocated: Some(moved("n0", "n1", RelocationReason::NodeLost)),
            ..exited(0, stdout, "")
        };
        assert_eq!(foreground(&alone("ok\n")), format!("ok\n{line}"));
        assert_eq!(foreground(&alone("")), format!("(no output)\n{line}"));
        // A yielded run carries it after the line naming its task.
        let yielded = RunResult {
            yielded: Some(Yielded {
                task: Task {
                    id: "bash-2".into(),
                    command: "make".into(),
                    owner: None,
                    state: TaskState::Running,
                    exit_code: None,
                    signal: None,
                    relocated: None,
                },
                after_ms: 10.0,
            }),
            relocated: Some(moved("n0", "n1", RelocationReason::NodeLost)),
            ..exited(0, "so far\n", "")
        };
        assert_eq!(
            foreground(&yielded),
            format!(
                "so far\n[still running after 10ms; continues as background task bash-2; read \
                 its output with bash_output]\n{line}"
            )
        );
    }

    #[test]
    fn the_sandbox_line_comes_after_every_other_marker() {
        let r = RunResult {
            leftover_processes: 1,
            timed_out: true,
            timeout_ms: 100.0,
            signal: Some("SIGTERM".into()),
            denials: denied(vec![write_etc_hosts()], 4),
            ..exited(0, "srv\n", "")
        };
        assert_eq!(
            foreground(&r),
            "srv\n[timed out after 100ms]\n[killed by signal: SIGTERM]\n\
             [stopped 1 leftover background process(es); use run_in_background for long-lived processes]\n\
             [sandbox: write to /etc/hosts denied (outside the writable roots); and 4 more]"
        );
    }

    #[test]
    fn a_yielded_run_shows_its_denials_so_far_after_the_task_line() {
        let r = RunResult {
            denials: denied(
                vec![denial(
                    DeniedAccess::Connect,
                    "203.0.113.7:443",
                    DenialReason::NetworkOff,
                )],
                0,
            ),
            ..yielded("bash-2", 300.0, out("fetching"), out(""))
        };
        assert_eq!(
            foreground(&r),
            "fetching\n\
             [still running after 300ms; continues as background task bash-2; read its output with bash_output]\n\
             [sandbox: connect to 203.0.113.7:443 denied (the network is off)]"
        );
    }

    fn read(stdout: StreamDelta, stderr: StreamDelta) -> Read {
        Read {
            stdout,
            stderr,
            task: Task {
                id: "bash-1".into(),
                command: "x".into(),
                owner: None,
                state: TaskState::Running,
                exit_code: None,
                signal: None,
                relocated: None,
            },
            denials: Denials::default(),
        }
    }

    fn d(text: &str) -> StreamDelta {
        StreamDelta {
            text: text.into(),
            ..Default::default()
        }
    }

    fn lossy(text: &str, path: Option<&str>) -> StreamDelta {
        StreamDelta {
            text: text.into(),
            lossy: true,
            spill_path: path.map(str::to_string),
            ..Default::default()
        }
    }

    #[test]
    fn delta_bodies() {
        assert_eq!(delta(&read(d(""), d(""))), "(no new output)");
        assert_eq!(delta(&read(d("first\n"), d(""))), "first\n");
        assert_eq!(delta(&read(d("a"), d("b"))), "a\n[stderr]\nb");
        assert_eq!(delta(&read(d("a\n"), d("b\n"))), "a\n[stderr]\nb\n");
        assert_eq!(delta(&read(d(""), d("b"))), "[stderr]\nb");
    }

    #[test]
    fn delta_of_a_lost_task() {
        let lost = |stdout, stderr| Read {
            task: Task {
                state: TaskState::Lost,
                ..read(d(""), d("")).task
            },
            ..read(stdout, stderr)
        };
        assert_eq!(
            delta(&lost(d(""), d(""))),
            "(output unavailable: the executor is gone)"
        );
        // What did come is shown as usual.
        assert_eq!(delta(&lost(d("a\n"), d(""))), "a\n");
        assert_eq!(delta(&lost(d(""), d("b"))), "[stderr]\nb");
    }

    #[test]
    fn delta_lossy_paths_in_stream_order() {
        assert_eq!(
            delta(&read(lossy("a\n", Some("/s/out.log")), d(""))),
            "a\n\n[some output was dropped from memory; full output: /s/out.log]"
        );
        assert_eq!(
            delta(&read(lossy("a", Some("/s/out.log")), lossy("b", None))),
            "a\n[stderr]\nb\n[some output was dropped from memory; full output: /s/out.log, (unavailable)]"
        );
        assert_eq!(
            delta(&read(d(""), lossy("", Some("/s/err.log")))),
            "(no new output)\n[some output was dropped from memory; full output: /s/err.log]"
        );
    }

    #[test]
    fn an_evicted_spill_file_is_one_more_marker_before_the_sandbox_line() {
        let evicted = |text: &str| StreamOutput {
            text: text.into(),
            truncated: true,
            spill_path: None,
            spill_evicted: true,
        };
        let mut result = exited(2, "", "");
        result.stdout = evicted("tail\n");
        result.denials = Denials {
            first: vec![Denial {
                access: DeniedAccess::Read,
                target: "/root/.netrc".into(),
                reason: DenialReason::DeniedRead,
            }],
            more: 0,
        };
        assert_eq!(
            foreground(&result),
            "tail\n\n[output truncated; full output: (unavailable)]\n[exit code: 2]\n\
             [full output evicted: the spill file of stdout was deleted to keep this session within its spill budget]\n\
             [sandbox: read of /root/.netrc denied (a denied path)]"
        );
        assert_eq!(
            evicted_line(true, true).unwrap(),
            "[full output evicted: the spill files of stdout and stderr were deleted to keep this session within its spill budget]"
        );
        assert_eq!(
            evicted_line(false, true).unwrap(),
            "[full output evicted: the spill file of stderr was deleted to keep this session within its spill budget]"
        );
        assert_eq!(evicted_line(false, false), None);
        // Without an eviction nothing changes.
        result.stdout.spill_evicted = false;
        assert!(!foreground(&result).contains("evicted"));
    }
}
