//! End-to-end tests of the exported interface against the fake executor and agent.

use super::*;
use crate::fake::{Call, FakeAgent, FakeExecutor};
use crate::world::{
    Denial, DenialReason, Denials, DeniedAccess, ExecError, Limits, Read, Relocation,
    RelocationReason, Request, RunResult, SandboxMode, SandboxNetwork, SandboxPolicy, Spec,
    StreamDelta, StreamOutput, TaskState, ToolAnnotations,
};

fn ok(text: &str) -> ToolResult {
    ToolResult {
        text: text.into(),
        is_error: false,
        error_code: None,
    }
}

fn err(text: &str, code: &str) -> ToolResult {
    ToolResult {
        text: text.into(),
        is_error: true,
        error_code: Some(code.into()),
    }
}

fn session(owner: &str, cwd: &str) -> Caller {
    Caller {
        owner: Some(owner.into()),
        cwd: Some(cwd.into()),
    }
}

fn owner_only(owner: Option<&str>) -> Caller {
    Caller {
        owner: owner.map(str::to_string),
        cwd: None,
    }
}

fn exited(code: i32, stdout: &str) -> RunResult {
    RunResult {
        exit_code: Some(code),
        timeout_ms: 120000.0,
        stdout: StreamOutput {
            text: stdout.into(),
            ..Default::default()
        },
        ..Default::default()
    }
}

// ---- list-tools -------------------------------------------------------------------------------

#[test]
fn tools_are_listed_in_stable_order() {
    let exec = FakeExecutor::default();
    let names: Vec<String> = list_tools(&exec).into_iter().map(|t| t.name).collect();
    assert_eq!(names, ["bash", "bash_output", "bash_kill"]);
}

#[test]
fn bash_schema_is_exact() {
    let exec = FakeExecutor::default();
    let tools = list_tools(&exec);
    assert_eq!(
        tools[0].input_schema,
        concat!(
            r#"{"type":"object","properties":{"#,
            r#""command":{"type":"string","description":"The command line to run with bash -c, in a fresh shell."},"#,
            r#""description":{"type":"string","description":"What the command does, in 5-10 words of active voice. Shown to the user; never run."},"#,
            r#""timeoutMs":{"type":"number","description":"Timeout in milliseconds. When omitted the default applies; larger values are capped at the maximum. Not used with run_in_background."},"#,
            r#""workdir":{"type":"string","description":"Directory to run the command in; use this instead of cd. A relative path is resolved against the session's working directory."},"#,
            r#""run_in_background":{"type":"boolean","description":"Start the command as a background task and return its id at once, with no timeout. Read it with bash_output and stop it with bash_kill."}"#,
            r#"},"required":["command","description"]}"#
        )
    );
}

#[test]
fn task_tool_schemas_are_exact() {
    let exec = FakeExecutor::default();
    let tools = list_tools(&exec);
    let expected = concat!(
        r#"{"type":"object","properties":{"task_id":{"type":"string","#,
        r#""description":"Id of the background task, as returned by bash (for example bash-1)."}},"#,
        r#""required":["task_id"]}"#
    );
    assert_eq!(tools[1].input_schema, expected);
    assert_eq!(tools[2].input_schema, expected);
}

#[test]
fn bash_description_is_exact_and_states_the_limits() {
    let exec = FakeExecutor::default();
    let tools = list_tools(&exec);
    assert_eq!(exec.calls(), vec![Call::CurrentLimits]);
    assert_eq!(
        tools[0].description,
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
         Timeout: 120000 ms by default (set timeoutMs to change it), at most 600000 ms; a \
         command that runs out of time is stopped.\n\
         \n\
         For servers, watchers and anything else long-running, set run_in_background: the call \
         returns a task id at once and no timeout applies. Poll the task's new output and status \
         with bash_output, and stop it with bash_kill."
    );
}

#[test]
fn bash_description_follows_configured_limits() {
    let exec = FakeExecutor {
        limits: Limits {
            default_timeout_ms: 1500.5,
            max_timeout_ms: 1e21,
            max_output_bytes: 1,
            grace_ms: 1.0,
            sandbox: None,
        },
        ..Default::default()
    };
    let description = &list_tools(&exec)[0].description;
    assert!(
        description.contains(
            "Timeout: 1500.5 ms by default (set timeoutMs to change it), at most 1e+21 ms;"
        ),
        "{description}"
    );
}

#[test]
fn task_tool_descriptions_are_exact() {
    let exec = FakeExecutor::default();
    let tools = list_tools(&exec);
    assert_eq!(
        tools[1].description,
        "Read a background bash task's new output: everything it wrote since the previous \
         bash_output call on it (stdout, then stderr after a [stderr] line), followed by its \
         status line: running, completed with its exit code, or killed. Poll again later while \
         it is running."
    );
    assert_eq!(
        tools[2].description,
        "Stop a background bash task: its whole process tree gets SIGTERM, then SIGKILL after a \
         grace period. Returns at once; the task reads as killed from then on, and bash_output \
         still shows what it wrote."
    );
}

#[test]
fn titles_are_exact() {
    let exec = FakeExecutor::default();
    let titles: Vec<String> = list_tools(&exec).into_iter().map(|t| t.title).collect();
    assert_eq!(
        titles,
        [
            "Run a shell command",
            "Read background task output",
            "Stop a background task",
        ]
    );
}

#[test]
fn annotations_are_exact() {
    let exec = FakeExecutor::default();
    let tools = list_tools(&exec);
    let hints = |read_only, destructive, idempotent, open_world| ToolAnnotations {
        read_only_hint: read_only,
        destructive_hint: destructive,
        idempotent_hint: idempotent,
        open_world_hint: open_world,
    };
    // bash runs anything: it writes and deletes, a repeat runs again, and it reaches the world.
    assert_eq!(tools[0].annotations, hints(false, true, false, true));
    // bash_output changes no file or process, but each read consumes the output it returns.
    assert_eq!(tools[1].annotations, hints(true, false, false, false));
    // bash_kill ends processes, and a second kill of the same task has no further effect.
    assert_eq!(tools[2].annotations, hints(false, true, true, false));
}

/// Titles and hints do not depend on the executor's limits; only bash's description does.
#[test]
fn titles_and_annotations_do_not_follow_the_limits() {
    let small = FakeExecutor {
        limits: Limits {
            default_timeout_ms: 1.0,
            max_timeout_ms: 2.0,
            max_output_bytes: 1,
            grace_ms: 1.0,
            sandbox: None,
        },
        ..Default::default()
    };
    let default = FakeExecutor::default();
    for (a, b) in list_tools(&small).into_iter().zip(list_tools(&default)) {
        assert_eq!((&a.title, a.annotations), (&b.title, b.annotations));
    }
}

// ---- call-tool: dispatch and validation -------------------------------------------------------

#[test]
fn unknown_tool() {
    let exec = FakeExecutor::default();
    assert_eq!(
        call_tool(&exec, "shell", "{}", &Caller::default()),
        err("Error: unknown tool \"shell\"", "UNKNOWN_TOOL")
    );
    // The name is checked before the arguments.
    assert_eq!(
        call_tool(&exec, "Bash", "not json", &Caller::default()),
        err("Error: unknown tool \"Bash\"", "UNKNOWN_TOOL")
    );
    assert!(exec.calls().is_empty());
}

#[test]
fn arguments_that_are_not_json() {
    let exec = FakeExecutor::default();
    assert_eq!(
        call_tool(&exec, "bash", "{\"command\":", &Caller::default()),
        err(
            "Error: invalid arguments: arguments are not valid JSON: EOF while parsing a value at line 1 column 11",
            "INVALID_ARGS"
        )
    );
    assert_eq!(
        call_tool(&exec, "bash_output", "", &Caller::default()),
        err(
            "Error: invalid arguments: arguments are not valid JSON: EOF while parsing a value at line 1 column 0",
            "INVALID_ARGS"
        )
    );
    assert!(exec.calls().is_empty());
}

#[test]
fn arguments_that_are_not_an_object() {
    let exec = FakeExecutor::default();
    for text in ["null", "[]", "\"ls\"", "3"] {
        assert_eq!(
            call_tool(&exec, "bash", text, &Caller::default()),
            err(
                "Error: invalid arguments: \"arguments\" must be an object",
                "INVALID_ARGS"
            ),
            "{text}"
        );
    }
    assert!(exec.calls().is_empty());
}

#[test]
fn bash_with_empty_object_is_the_contract_example() {
    let exec = FakeExecutor::default();
    assert_eq!(
        call_tool(&exec, "bash", "{}", &Caller::default()),
        err(
            "Error: invalid arguments: missing required property \"command\"; missing required property \"description\"",
            "INVALID_ARGS"
        )
    );
    assert!(exec.calls().is_empty());
}

#[test]
fn bash_type_violations_are_all_reported() {
    let exec = FakeExecutor::default();
    assert_eq!(
        call_tool(
            &exec,
            "bash",
            r#"{"command":1,"description":null,"timeoutMs":"100","workdir":[],"run_in_background":"yes"}"#,
            &Caller::default()
        ),
        err(
            "Error: invalid arguments: \"command\" must be a string; \"description\" must be a string; \"timeoutMs\" must be a number; \"workdir\" must be a string; \"run_in_background\" must be a boolean",
            "INVALID_ARGS"
        )
    );
    assert!(exec.calls().is_empty());
}

#[test]
fn task_tools_validate_task_id() {
    let exec = FakeExecutor::default();
    for name in ["bash_output", "bash_kill"] {
        assert_eq!(
            call_tool(&exec, name, "{}", &Caller::default()),
            err(
                "Error: invalid arguments: missing required property \"task_id\"",
                "INVALID_ARGS"
            )
        );
        assert_eq!(
            call_tool(&exec, name, r#"{"task_id":1}"#, &Caller::default()),
            err(
                "Error: invalid arguments: \"task_id\" must be a string",
                "INVALID_ARGS"
            )
        );
    }
    assert!(exec.calls().is_empty());
}

// ---- bash: value checks -----------------------------------------------------------------------

#[test]
fn blank_command() {
    let exec = FakeExecutor::default();
    assert_eq!(
        call_tool(
            &exec,
            "bash",
            r#"{"command":" \t\n","description":"d"}"#,
            &Caller::default()
        ),
        err(
            "Error: invalid command: expected a non-empty string",
            "TOOL_ERROR"
        )
    );
    assert!(exec.calls().is_empty());
}

#[test]
fn blank_description() {
    let exec = FakeExecutor::default();
    assert_eq!(
        call_tool(
            &exec,
            "bash",
            r#"{"command":"ls","description":"\u00a0"}"#,
            &Caller::default()
        ),
        err(
            "Error: invalid description: expected a non-empty string",
            "TOOL_ERROR"
        )
    );
    assert!(exec.calls().is_empty());
}

#[test]
fn non_positive_timeouts() {
    let exec = FakeExecutor::default();
    for (value, shown) in [
        ("0", "0"),
        ("-0", "0"),
        ("-5", "-5"),
        ("-1.50", "-1.5"),
        ("-1e-7", "-1e-7"),
        ("-1e21", "-1e+21"),
    ] {
        let args = format!(r#"{{"command":"ls","description":"d","timeoutMs":{value}}}"#);
        assert_eq!(
            call_tool(&exec, "bash", &args, &Caller::default()),
            err(
                &format!("Error: invalid timeoutMs: expected a positive number, got {shown}"),
                "TOOL_ERROR"
            ),
            "{value}"
        );
    }
    assert!(exec.calls().is_empty());
}

#[test]
fn value_checks_run_in_contract_order() {
    let exec = FakeExecutor::default();
    assert_eq!(
        call_tool(
            &exec,
            "bash",
            r#"{"command":"","description":"","timeoutMs":0}"#,
            &Caller::default()
        )
        .text,
        "Error: invalid command: expected a non-empty string"
    );
    assert_eq!(
        call_tool(
            &exec,
            "bash",
            r#"{"command":"ls","description":" ","timeoutMs":0}"#,
            &Caller::default()
        )
        .text,
        "Error: invalid description: expected a non-empty string"
    );
}

#[test]
fn validation_comes_before_value_checks() {
    let exec = FakeExecutor::default();
    assert_eq!(
        call_tool(&exec, "bash", r#"{"command":""}"#, &Caller::default()).text,
        "Error: invalid arguments: missing required property \"description\""
    );
}

// ---- bash: what reaches the executor ----------------------------------------------------------

#[test]
fn only_command_workdir_timeout_and_owner_reach_the_executor() {
    let exec = FakeExecutor {
        run: Ok(exited(0, "hello\n")),
        ..Default::default()
    };
    let result = call_tool(
        &exec,
        "bash",
        r#"{"command":"echo hello","description":"Print a greeting","timeoutMs":2500,"workdir":"sub","env":{"A":"1"},"stdin":"data","shell":"zsh"}"#,
        &session("s1", "/repo"),
    );
    assert_eq!(result, ok("hello\n"));
    assert_eq!(
        exec.calls(),
        vec![
            Call::Resolve(Request {
                command: "echo hello".into(),
                workdir: Some("/repo/sub".into()),
                timeout_ms: Some(2500.0),
                owner: Some("s1".into()),
            }),
            Call::Run(Spec {
                command: "echo hello".into(),
                workdir: "/repo/sub".into(),
                timeout_ms: 2500.0,
                owner: Some("s1".into()),
            }),
        ]
    );
}

#[test]
fn defaults_are_left_to_the_executor() {
    let exec = FakeExecutor::default();
    call_tool(
        &exec,
        "bash",
        r#"{"command":"ls","description":"List files"}"#,
        &Caller::default(),
    );
    assert_eq!(
        exec.calls()[0],
        Call::Resolve(Request {
            command: "ls".into(),
            workdir: None,
            timeout_ms: None,
            owner: None,
        })
    );
}

#[test]
fn workdir_resolution_through_the_tool() {
    let cases = [
        ("", Some("/home/u")),
        (r#","workdir":"/abs""#, Some("/abs")),
        (r#","workdir":"rel/dir""#, Some("/home/u/rel/dir")),
    ];
    for (extra, expected) in cases {
        let exec = FakeExecutor::default();
        let args = format!(r#"{{"command":"pwd","description":"Show dir"{extra}}}"#);
        let result = call_tool(&exec, "bash", &args, &session("s", "/home/u"));
        assert!(!result.is_error, "{args}: {result:?}");
        match &exec.calls()[0] {
            Call::Resolve(req) => assert_eq!(req.workdir.as_deref(), expected, "{args}"),
            other => panic!("unexpected call {other:?}"),
        }
    }
    // Without a session cwd a relative workdir goes as given.
    let exec = FakeExecutor::default();
    call_tool(
        &exec,
        "bash",
        r#"{"command":"pwd","description":"d","workdir":"rel"}"#,
        &Caller::default(),
    );
    assert!(matches!(&exec.calls()[0], Call::Resolve(r) if r.workdir.as_deref() == Some("rel")));
}

#[test]
fn timeout_is_capped_by_the_executor_not_the_tool() {
    let exec = FakeExecutor::default();
    call_tool(
        &exec,
        "bash",
        r#"{"command":"ls","description":"d","timeoutMs":9e9}"#,
        &Caller::default(),
    );
    assert!(matches!(&exec.calls()[0], Call::Resolve(r) if r.timeout_ms == Some(9e9)));
    assert!(matches!(&exec.calls()[1], Call::Run(s) if s.timeout_ms == 600000.0));
}

// ---- bash: results ----------------------------------------------------------------------------

#[test]
fn non_zero_exit_is_not_an_error() {
    let exec = FakeExecutor {
        run: Ok(exited(3, "failing\n")),
        ..Default::default()
    };
    assert_eq!(
        call_tool(
            &exec,
            "bash",
            r#"{"command":"exit 3","description":"d"}"#,
            &Caller::default()
        ),
        ok("failing\n[exit code: 3]")
    );
}

#[test]
fn timeout_and_signal_are_not_errors() {
    let exec = FakeExecutor {
        run: Ok(RunResult {
            signal: Some("SIGTERM".into()),
            timed_out: true,
            timeout_ms: 100.0,
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(
        call_tool(
            &exec,
            "bash",
            r#"{"command":"sleep 9","description":"d","timeoutMs":100}"#,
            &Caller::default()
        ),
        ok("(no output)\n[timed out after 100ms]\n[killed by signal: SIGTERM]")
    );
}

#[test]
fn a_run_continuing_in_the_background_is_no_error_and_names_its_task() {
    let exec = FakeExecutor {
        run: Ok(RunResult {
            yielded: Some(crate::world::Yielded {
                task: crate::world::Task {
                    id: "bash-4".into(),
                    command: "make".into(),
                    owner: Some("s1".into()),
                    state: TaskState::Running,
                    exit_code: None,
                    signal: None,
                    relocated: None,
                },
                after_ms: 50000.0,
            }),
            exit_code: None,
            ..exited(0, "compiling\n")
        }),
        ..Default::default()
    };
    assert_eq!(
        call_tool(
            &exec,
            "bash",
            r#"{"command":"make","description":"Build the project"}"#,
            &session("s1", "/w")
        ),
        ok(
            "compiling\n[still running after 50000ms; continues as background task bash-4; \
            read its output with bash_output]"
        )
    );
    // A foreground run, as far as the tools are concerned: nothing was started for it.
    assert!(matches!(exec.calls().last(), Some(Call::Run(_))));
}

#[test]
fn aborted_run_discards_output() {
    let exec = FakeExecutor {
        run: Ok(RunResult {
            aborted: true,
            signal: Some("SIGTERM".into()),
            ..exited(0, "partial output\n")
        }),
        ..Default::default()
    };
    assert_eq!(
        call_tool(
            &exec,
            "bash",
            r#"{"command":"sleep 9","description":"d"}"#,
            &Caller::default()
        ),
        err("Error: command aborted", "ABORTED")
    );
}

#[test]
fn aborted_before_start() {
    let exec = FakeExecutor {
        run: Err(ExecError::Aborted),
        ..Default::default()
    };
    assert_eq!(
        call_tool(
            &exec,
            "bash",
            r#"{"command":"ls","description":"d"}"#,
            &Caller::default()
        ),
        err("Error: command aborted", "ABORTED")
    );
}

#[test]
fn executor_errors_become_error_results() {
    let cases = [
        (
            ExecError::WorkdirUnusable(
                "workdir /nope is unusable: No such file or directory (os error 2)".into(),
            ),
            "Error: workdir /nope is unusable: No such file or directory (os error 2)",
        ),
        (
            ExecError::SpawnFailed("cannot start bash: not found".into()),
            "Error: cannot start bash: not found",
        ),
        (ExecError::Internal("boom".into()), "Error: boom"),
        (
            ExecError::UnknownTask("bash-3".into()),
            "Error: unknown bash task \"bash-3\"",
        ),
    ];
    for (error, text) in cases {
        let exec = FakeExecutor {
            run: Err(error),
            ..Default::default()
        };
        assert_eq!(
            call_tool(
                &exec,
                "bash",
                r#"{"command":"ls","description":"d"}"#,
                &Caller::default()
            ),
            err(text, "TOOL_ERROR")
        );
    }
}

#[test]
fn resolve_error_stops_before_running() {
    let exec = FakeExecutor {
        resolve_error: Some(ExecError::InvalidRequest("timeout too large".into())),
        ..Default::default()
    };
    assert_eq!(
        call_tool(
            &exec,
            "bash",
            r#"{"command":"ls","description":"d"}"#,
            &Caller::default()
        ),
        err("Error: timeout too large", "TOOL_ERROR")
    );
    assert_eq!(exec.calls().len(), 1);
}

// ---- bash: sandbox denials --------------------------------------------------------------------

fn denials(first: &[(DeniedAccess, &str, DenialReason)], more: u32) -> Denials {
    Denials {
        first: first
            .iter()
            .map(|&(access, target, reason)| Denial {
                access,
                target: target.into(),
                reason,
            })
            .collect(),
        more,
    }
}

#[test]
fn a_denied_read_ends_the_result_after_the_exit_code() {
    let exec = FakeExecutor {
        run: Ok(RunResult {
            stderr: StreamOutput {
                text: "cat: /root/.ssh/id: Permission denied\n".into(),
                ..Default::default()
            },
            denials: denials(
                &[(
                    DeniedAccess::Read,
                    "/root/.ssh/id",
                    DenialReason::DeniedRead,
                )],
                0,
            ),
            ..exited(1, "")
        }),
        ..Default::default()
    };
    let result = call_tool(
        &exec,
        "bash",
        r#"{"command":"cat /root/.ssh/id","description":"Show the key"}"#,
        &Caller::default(),
    );
    // Still no error: the model reads what failed and why, and decides.
    assert_eq!(
        result,
        ok(
            "[stderr]\ncat: /root/.ssh/id: Permission denied\n[exit code: 1]\n\
            [sandbox: read of /root/.ssh/id denied (a denied path)]"
        )
    );
}

#[test]
fn denials_of_a_successful_command_are_its_only_marker() {
    let exec = FakeExecutor {
        run: Ok(RunResult {
            denials: denials(
                &[
                    (
                        DeniedAccess::Read,
                        "/root/.ssh/id_ed25519",
                        DenialReason::DeniedRead,
                    ),
                    (DeniedAccess::Socket, "AF_INET", DenialReason::NetworkOff),
                    (
                        DeniedAccess::Write,
                        "/etc/hosts",
                        DenialReason::OutsideWritableRoots,
                    ),
                ],
                2,
            ),
            ..exited(0, "out")
        }),
        ..Default::default()
    };
    assert_eq!(
        call_tool(
            &exec,
            "bash",
            r#"{"command":"./probe","description":"Probe"}"#,
            &Caller::default()
        ),
        ok(
            "out\n[sandbox: read of /root/.ssh/id_ed25519 denied (a denied path); AF_INET socket \
            denied (the network is off); write to /etc/hosts denied (outside the writable \
            roots); and 2 more]"
        )
    );
}

#[test]
fn a_host_the_proxy_refused_ends_the_result() {
    let exec = FakeExecutor {
        run: Ok(RunResult {
            stderr: StreamOutput {
                text: "curl: (56) CONNECT tunnel failed, response 403\n".into(),
                ..Default::default()
            },
            denials: denials(
                &[(
                    DeniedAccess::Connect,
                    "evil.example:443",
                    DenialReason::HostNotAllowed,
                )],
                0,
            ),
            ..exited(56, "")
        }),
        ..Default::default()
    };
    assert_eq!(
        call_tool(
            &exec,
            "bash",
            r#"{"command":"curl https://evil.example","description":"Fetch"}"#,
            &Caller::default()
        ),
        ok(
            "[stderr]\ncurl: (56) CONNECT tunnel failed, response 403\n[exit code: 56]\n\
            [sandbox: connect to evil.example:443 denied (not an allowed host)]"
        )
    );
}

#[test]
fn an_aborted_run_shows_no_denials() {
    let exec = FakeExecutor {
        run: Ok(RunResult {
            aborted: true,
            denials: denials(
                &[(DeniedAccess::Socket, "AF_INET6", DenialReason::NetworkOff)],
                0,
            ),
            ..exited(0, "partial\n")
        }),
        ..Default::default()
    };
    assert_eq!(
        call_tool(
            &exec,
            "bash",
            r#"{"command":"curl x","description":"d"}"#,
            &Caller::default()
        ),
        err("Error: command aborted", "ABORTED")
    );
}

#[test]
fn bash_output_ends_with_the_denials_since_the_last_read() {
    let mut exec = with_read(
        "bash-1",
        "first\n",
        "",
        task("bash-1", TaskState::Running, None, None),
    );
    exec.reads.get_mut("bash-1").unwrap().denials = denials(
        &[(
            DeniedAccess::Connect,
            "203.0.113.7:443",
            DenialReason::LoopbackOnly,
        )],
        0,
    );
    assert_eq!(
        call_tool(
            &exec,
            "bash_output",
            r#"{"task_id":"bash-1"}"#,
            &Caller::default()
        ),
        ok("first\n\n[status: running]\n\
            [sandbox: connect to 203.0.113.7:443 denied (only loopback is reachable)]")
    );
    let mut exec = with_read(
        "bash-2",
        "",
        "",
        task("bash-2", TaskState::Completed, Some(0), None),
    );
    exec.reads.get_mut("bash-2").unwrap().denials = denials(
        &[(
            DeniedAccess::Undone,
            "/w/.git/config",
            DenialReason::ProtectedPath,
        )],
        1,
    );
    assert_eq!(
        call_tool(
            &exec,
            "bash_output",
            r#"{"task_id":"bash-2"}"#,
            &Caller::default()
        ),
        ok("(no new output)\n[status: completed, exit code: 0]\n\
            [sandbox: change to /w/.git/config undone (a protected git path); and 1 more]")
    );
}

// ---- instructions -----------------------------------------------------------------------------

#[test]
fn instructions_without_a_sandbox_ask_the_limits_and_are_the_constant() {
    let exec = FakeExecutor::default();
    assert_eq!(instructions(&exec), instructions::INSTRUCTIONS);
    assert_eq!(exec.calls(), vec![Call::CurrentLimits]);
}

#[test]
fn instructions_state_the_executors_sandbox() {
    let mut exec = FakeExecutor::default();
    exec.limits.sandbox = Some(SandboxPolicy {
        mode: SandboxMode::WorkspaceWrite,
        writable: vec!["/work".into(), "/tmp".into()],
        denied_reads: vec!["/home/u/.ssh".into(), "/home/u/.netrc".into()],
        network: SandboxNetwork::Off,
        allowed_hosts: Vec::new(),
    });
    assert_eq!(
        instructions(&exec),
        format!(
            "{}\n\n\
             Commands run in a sandbox (workspace-write): they can write only under /work, /tmp \
             and their own $TMPDIR; git hooks and configuration there stay read-only, and git \
             init, add and commit work.\n\
             They cannot read: /home/u/.ssh, /home/u/.netrc.\n\
             The network is off: no sockets but Unix sockets.\n\
             A denied operation fails (Permission denied, Read-only file system or Network is \
             unreachable), and the result then ends with a [sandbox: …] line naming it; do not try to get around the \
             sandbox: tell the user what was denied.",
            instructions::INSTRUCTIONS
        )
    );
    // The tools' descriptions do not change with the sandbox.
    let plain = FakeExecutor::default();
    assert_eq!(list_tools(&exec), list_tools(&plain));
}

#[test]
fn instructions_name_the_hosts_the_sandboxs_proxy_may_reach() {
    let mut exec = FakeExecutor::default();
    exec.limits.sandbox = Some(SandboxPolicy {
        mode: SandboxMode::ReadOnly,
        writable: Vec::new(),
        denied_reads: vec!["/home/u/.ssh".into()],
        network: SandboxNetwork::Loopback,
        allowed_hosts: vec!["registry.npmjs.org".into(), "*.pythonhosted.org".into()],
    });
    assert_eq!(
        instructions(&exec),
        format!(
            "{}\n\n\
             Commands run in a sandbox (read-only): they can write only to their own $TMPDIR and \
             to devices such as /dev/null.\n\
             They cannot read: /home/u/.ssh.\n\
             The network is limited to each command's own loopback interface: a server a command \
             starts is reachable only from within that command.\n\
             Beyond that interface, only these hosts are reachable, through the proxy that \
             HTTP_PROXY and HTTPS_PROXY name (it answers 403 Forbidden for any other): \
             registry.npmjs.org, *.pythonhosted.org.\n\
             A denied operation fails (Permission denied, Read-only file system or Network is \
             unreachable), and the result then ends with a [sandbox: …] line naming it; do not try to get around the \
             sandbox: tell the user what was denied.",
            instructions::INSTRUCTIONS
        )
    );
}

// ---- bash: background -------------------------------------------------------------------------

#[test]
fn background_start() {
    let exec = FakeExecutor::default();
    assert_eq!(
        call_tool(
            &exec,
            "bash",
            r#"{"command":"npm run dev","description":"Start the dev server","run_in_background":true}"#,
            &session("s1", "/app"),
        ),
        ok("started background task bash-1")
    );
    assert_eq!(
        exec.calls()[1],
        Call::Start(Spec {
            command: "npm run dev".into(),
            workdir: "/app".into(),
            timeout_ms: 120000.0,
            owner: Some("s1".into()),
        })
    );
    assert_eq!(exec.calls().len(), 2);
}

#[test]
fn a_session_moved_to_another_node_is_told_with_the_result() {
    let moved = Some(Relocation {
        from_node: "n0".into(),
        to_node: "n1".into(),
        reason: RelocationReason::NodeLost,
    });
    let line = "[executor: node n0 was lost; this session now runs on node n1, where files \
                written by earlier commands may be missing]";
    let exec = FakeExecutor {
        run: Ok(RunResult {
            relocated: moved.clone(),
            ..exited(0, "hi\n")
        }),
        start_relocated: moved,
        ..Default::default()
    };
    assert_eq!(
        call_tool(
            &exec,
            "bash",
            r#"{"command":"echo hi","description":"d"}"#,
            &session("s1", "/w")
        ),
        ok(&format!("hi\n{line}"))
    );
    assert_eq!(
        call_tool(
            &exec,
            "bash",
            r#"{"command":"npm run dev","description":"d","run_in_background":true}"#,
            &session("s1", "/w")
        ),
        ok(&format!("started background task bash-1\n{line}"))
    );
}

#[test]
fn run_in_background_false_runs_in_foreground() {
    let exec = FakeExecutor::default();
    assert_eq!(
        call_tool(
            &exec,
            "bash",
            r#"{"command":"true","description":"d","run_in_background":false}"#,
            &Caller::default()
        ),
        ok("(no output)")
    );
    assert!(matches!(exec.calls()[1], Call::Run(_)));
}

#[test]
fn background_start_failure() {
    let exec = FakeExecutor {
        start_error: Some(ExecError::TaskLimit(
            "too many running background tasks (64)".into(),
        )),
        ..Default::default()
    };
    assert_eq!(
        call_tool(
            &exec,
            "bash",
            r#"{"command":"x","description":"d","run_in_background":true}"#,
            &Caller::default()
        ),
        err(
            "Error: too many running background tasks (64)",
            "TOOL_ERROR"
        )
    );
}

// ---- bash_output ------------------------------------------------------------------------------

fn task(id: &str, state: TaskState, exit_code: Option<i32>, signal: Option<&str>) -> Task {
    Task {
        id: id.into(),
        command: "cmd".into(),
        owner: None,
        state,
        exit_code,
        signal: signal.map(str::to_string),
        relocated: None,
    }
}

fn delta(text: &str) -> StreamDelta {
    StreamDelta {
        text: text.into(),
        ..Default::default()
    }
}

fn with_read(id: &str, stdout: &str, stderr: &str, t: Task) -> FakeExecutor {
    let mut exec = FakeExecutor::default();
    exec.reads.insert(
        id.into(),
        Read {
            stdout: delta(stdout),
            stderr: delta(stderr),
            task: t,
            denials: Denials::default(),
        },
    );
    exec
}

#[test]
fn output_of_running_task() {
    let exec = with_read(
        "bash-1",
        "first\n",
        "",
        task("bash-1", TaskState::Running, None, None),
    );
    assert_eq!(
        call_tool(
            &exec,
            "bash_output",
            r#"{"task_id":"bash-1"}"#,
            &Caller::default()
        ),
        ok("first\n\n[status: running]")
    );
    assert_eq!(
        exec.calls(),
        vec![
            Call::OwnerOf("bash-1".into()),
            Call::ReadOutput("bash-1".into())
        ]
    );
}

#[test]
fn output_with_no_new_output_and_statuses() {
    let cases = [
        (
            task("bash-2", TaskState::Completed, Some(0), None),
            "(no new output)\n[status: completed, exit code: 0]",
        ),
        (
            task("bash-2", TaskState::Completed, Some(1), None),
            "(no new output)\n[status: completed, exit code: 1]",
        ),
        (
            task("bash-2", TaskState::Killed, None, Some("SIGKILL")),
            "(no new output)\n[status: killed by SIGKILL]",
        ),
        (
            task("bash-2", TaskState::Killed, None, None),
            "(no new output)\n[status: killed]",
        ),
        (
            task("bash-2", TaskState::Completed, Some(0), Some("SIGUSR1")),
            "(no new output)\n[status: killed by SIGUSR1]",
        ),
    ];
    for (t, text) in cases {
        let exec = with_read("bash-2", "", "", t);
        assert_eq!(
            call_tool(
                &exec,
                "bash_output",
                r#"{"task_id":"bash-2"}"#,
                &Caller::default()
            ),
            ok(text)
        );
    }
}

#[test]
fn output_of_a_lost_task() {
    let lost = "[status: lost: the executor is gone; the command may or may not have finished]";
    let exec = with_read(
        "bash-6",
        "",
        "",
        task("bash-6", TaskState::Lost, None, None),
    );
    assert_eq!(
        call_tool(
            &exec,
            "bash_output",
            r#"{"task_id":"bash-6"}"#,
            &Caller::default()
        ),
        ok(&format!(
            "(output unavailable: the executor is gone)\n{lost}"
        ))
    );
    // Output that did come back is shown as usual, then the status line.
    let exec = with_read(
        "bash-6",
        "partial\n",
        "warn",
        task("bash-6", TaskState::Lost, None, None),
    );
    assert_eq!(
        call_tool(
            &exec,
            "bash_output",
            r#"{"task_id":"bash-6"}"#,
            &Caller::default()
        ),
        ok(&format!("partial\n[stderr]\nwarn\n{lost}"))
    );
}

#[test]
fn output_with_stderr_and_dropped_output() {
    let mut exec = FakeExecutor::default();
    exec.reads.insert(
        "bash-1".into(),
        Read {
            stdout: StreamDelta {
                text: "tail of out".into(),
                lossy: true,
                spill_path: Some("/tmp/s/out.log".into()),
                spill_evicted: false,
            },
            stderr: StreamDelta {
                text: "warn\n".into(),
                lossy: true,
                spill_path: None,
                spill_evicted: false,
            },
            task: task("bash-1", TaskState::Completed, Some(0), None),
            denials: Denials::default(),
        },
    );
    assert_eq!(
        call_tool(
            &exec,
            "bash_output",
            r#"{"task_id":"bash-1"}"#,
            &Caller::default()
        ),
        ok(
            "tail of out\n[stderr]\nwarn\n\n[some output was dropped from memory; full output: /tmp/s/out.log, (unavailable)]\n[status: completed, exit code: 0]"
        )
    );
}

#[test]
fn output_of_an_evicted_spill_file_says_so_after_the_status_line() {
    let mut exec = FakeExecutor::default();
    exec.reads.insert(
        "bash-1".into(),
        Read {
            stdout: StreamDelta {
                text: "tail of out".into(),
                lossy: true,
                spill_path: None,
                spill_evicted: true,
            },
            stderr: StreamDelta::default(),
            task: task("bash-1", TaskState::Completed, Some(0), None),
            denials: Denials::default(),
        },
    );
    assert_eq!(
        call_tool(
            &exec,
            "bash_output",
            r#"{"task_id":"bash-1"}"#,
            &Caller::default()
        ),
        ok(
            "tail of out\n[some output was dropped from memory; full output: (unavailable)]\n[status: completed, exit code: 0]\n[full output evicted: the spill file of stdout was deleted to keep this session within its spill budget]"
        )
    );
}

#[test]
fn output_blank_task_id() {
    let exec = FakeExecutor::default();
    for name in ["bash_output", "bash_kill"] {
        assert_eq!(
            call_tool(&exec, name, r#"{"task_id":"  "}"#, &Caller::default()),
            err(
                "Error: invalid task_id: expected a non-empty string",
                "TOOL_ERROR"
            )
        );
    }
    assert!(exec.calls().is_empty());
}

#[test]
fn output_unknown_task() {
    let exec = FakeExecutor::default();
    assert_eq!(
        call_tool(
            &exec,
            "bash_output",
            r#"{"task_id":"bash-9"}"#,
            &Caller::default()
        ),
        err("Error: unknown bash task \"bash-9\"", "TOOL_ERROR")
    );
}

fn owned(id: &str, owner: &str) -> FakeExecutor {
    let mut exec = with_read(id, "x\n", "", task(id, TaskState::Running, None, None));
    exec.owners.insert(id.into(), owner.into());
    exec.kills.insert(id.into(), true);
    exec
}

#[test]
fn owned_task_is_open_to_its_owner() {
    let exec = owned("bash-1", "s1");
    assert_eq!(
        call_tool(
            &exec,
            "bash_output",
            r#"{"task_id":"bash-1"}"#,
            &owner_only(Some("s1"))
        ),
        ok("x\n\n[status: running]")
    );
    assert_eq!(
        call_tool(
            &exec,
            "bash_kill",
            r#"{"task_id":"bash-1"}"#,
            &owner_only(Some("s1"))
        ),
        ok("killed background task bash-1")
    );
}

#[test]
fn owned_task_is_closed_to_other_sessions_and_to_callers_without_token() {
    for caller in [owner_only(Some("s2")), owner_only(None)] {
        for name in ["bash_output", "bash_kill"] {
            let exec = owned("bash-1", "s1");
            assert_eq!(
                call_tool(&exec, name, r#"{"task_id":"bash-1"}"#, &caller),
                err(
                    "Error: task bash-1 belongs to another session",
                    "TOOL_ERROR"
                )
            );
            // The check comes first: the task is neither read nor killed.
            assert_eq!(exec.calls(), vec![Call::OwnerOf("bash-1".into())]);
        }
    }
}

#[test]
fn unowned_task_is_open_to_all() {
    for caller in [owner_only(Some("s2")), owner_only(None)] {
        let mut exec = with_read(
            "bash-4",
            "",
            "",
            task("bash-4", TaskState::Running, None, None),
        );
        exec.kills.insert("bash-4".into(), true);
        assert_eq!(
            call_tool(&exec, "bash_output", r#"{"task_id":"bash-4"}"#, &caller),
            ok("(no new output)\n[status: running]")
        );
        assert_eq!(
            call_tool(&exec, "bash_kill", r#"{"task_id":"bash-4"}"#, &caller),
            ok("killed background task bash-4")
        );
    }
}

// ---- bash_kill --------------------------------------------------------------------------------

#[test]
fn kill_finished_task_is_not_an_error() {
    let mut exec = FakeExecutor::default();
    exec.kills.insert("bash-2".into(), false);
    assert_eq!(
        call_tool(
            &exec,
            "bash_kill",
            r#"{"task_id":"bash-2"}"#,
            &Caller::default()
        ),
        ok("task bash-2 had already finished")
    );
    // The executor's `get` could not name it: finished, as the kill said.
    assert_eq!(
        exec.calls(),
        vec![
            Call::OwnerOf("bash-2".into()),
            Call::Kill("bash-2".into()),
            Call::Get("bash-2".into())
        ]
    );
    exec.tasks.insert(
        "bash-2".into(),
        task("bash-2", TaskState::Completed, Some(0), None),
    );
    assert_eq!(
        call_tool(
            &exec,
            "bash_kill",
            r#"{"task_id":"bash-2"}"#,
            &Caller::default()
        ),
        ok("task bash-2 had already finished")
    );
}

#[test]
fn kill_of_a_lost_task_says_it_cannot_be_killed() {
    let mut exec = FakeExecutor::default();
    exec.kills.insert("bash-5".into(), false);
    exec.tasks
        .insert("bash-5".into(), task("bash-5", TaskState::Lost, None, None));
    assert_eq!(
        call_tool(
            &exec,
            "bash_kill",
            r#"{"task_id":"bash-5"}"#,
            &Caller::default()
        ),
        ok("task bash-5 was lost with the executor; it cannot be killed from here")
    );
    assert_eq!(
        exec.calls(),
        vec![
            Call::OwnerOf("bash-5".into()),
            Call::Kill("bash-5".into()),
            Call::Get("bash-5".into())
        ]
    );
}

#[test]
fn a_kill_that_stops_the_task_asks_nothing_more() {
    let mut exec = FakeExecutor::default();
    exec.kills.insert("bash-4".into(), true);
    assert_eq!(
        call_tool(
            &exec,
            "bash_kill",
            r#"{"task_id":"bash-4"}"#,
            &Caller::default()
        ),
        ok("killed background task bash-4")
    );
    assert_eq!(
        exec.calls(),
        vec![Call::OwnerOf("bash-4".into()), Call::Kill("bash-4".into())]
    );
}

#[test]
fn kill_unknown_task() {
    let exec = FakeExecutor::default();
    assert_eq!(
        call_tool(
            &exec,
            "bash_kill",
            r#"{"task_id":"bash-9"}"#,
            &Caller::default()
        ),
        err("Error: unknown bash task \"bash-9\"", "TOOL_ERROR")
    );
}

// ---- task-done --------------------------------------------------------------------------------

#[test]
fn task_done_injects_notice_for_owner() {
    let agent = FakeAgent::default();
    let mut t = task("bash-3", TaskState::Killed, None, Some("SIGTERM"));
    t.owner = Some("s1".into());
    assert_eq!(task_done(&agent, &t), Ok(()));
    let injections = agent.injections.borrow();
    assert_eq!(injections.len(), 1);
    assert_eq!(injections[0].owner, "s1");
    assert_eq!(
        injections[0].text,
        "background bash task bash-3 finished [status: killed by SIGTERM]. Read its output with bash_output."
    );
}

#[test]
fn task_done_of_a_lost_task_says_its_output_is_gone() {
    let agent = FakeAgent::default();
    let mut t = task("bash-7", TaskState::Lost, None, None);
    t.owner = Some("s1".into());
    assert_eq!(task_done(&agent, &t), Ok(()));
    let injections = agent.injections.borrow();
    assert_eq!(injections.len(), 1);
    assert_eq!(injections[0].owner, "s1");
    assert_eq!(
        injections[0].text,
        "background bash task bash-7 was lost [status: lost: the executor is gone; the command may or may not have finished]. Its output can no longer be read."
    );
}

#[test]
fn task_done_without_owner_injects_nothing() {
    let agent = FakeAgent::default();
    let t = task("bash-3", TaskState::Completed, Some(0), None);
    assert_eq!(task_done(&agent, &t), Ok(()));
    assert!(agent.injections.borrow().is_empty());
}
