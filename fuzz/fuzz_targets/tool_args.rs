//! Arbitrary bytes as the arguments of every tool, through the guest's whole call path
//! (`dispatch::call_tool`: parse, validate, value checks, the tool body, rendering) against the
//! recording fake executor.
//!
//! Besides "no panic, no abort, no overflow" (cargo-fuzz builds with debug assertions), each
//! result is held to the contract's shape: an error result has a code and `Error: ` text, an
//! unknown tool is reported as such, and arguments that fail parsing or validation never reach
//! the executor.
//!
//! Run from the workspace root (stable toolchain; RUSTC_BOOTSTRAP unlocks the -Z flags):
//!
//! ```text
//! cargo install cargo-fuzz --locked
//! RUSTC_BOOTSTRAP=1 cargo fuzz run tool_args fuzz/corpus/tool_args fuzz/seeds/tool_args -- \
//!     -dict=fuzz/tool_args.dict -max_total_time=600
//! ```

#![no_main]

use std::collections::BTreeMap;

use guest_tools::dispatch::{INVALID_ARGS, UNKNOWN_TOOL, call_tool};
use guest_tools::fake::{Call, FakeExecutor};
use guest_tools::world::{
    Caller, Read, RunResult, StreamDelta, StreamOutput, Task, TaskState, ToolResult,
};
use libfuzzer_sys::fuzz_target;

const TOOLS: [&str; 4] = ["bash", "bash_output", "bash_kill", "no_such_tool"];

fuzz_target!(|data: &[u8]| {
    let arguments = String::from_utf8_lossy(data);
    for caller in callers() {
        for name in TOOLS {
            let exec = executor();
            let result = call_tool(&exec, name, &arguments, &caller);
            check(name, &result, &exec.calls());
        }
    }
});

/// The contract's shape of every result.
fn check(name: &str, result: &ToolResult, calls: &[Call]) {
    assert_eq!(result.is_error, result.error_code.is_some(), "{result:?}");
    if result.is_error {
        assert!(result.text.starts_with("Error: "), "{result:?}");
    } else {
        assert!(!result.text.is_empty(), "{result:?}");
    }
    match result.error_code.as_deref() {
        Some(UNKNOWN_TOOL) => {
            assert_eq!(name, "no_such_tool");
            assert_eq!(result.text, "Error: unknown tool \"no_such_tool\"");
        }
        Some(INVALID_ARGS) => {
            assert!(result.text.starts_with("Error: invalid arguments: "));
            assert!(
                calls.is_empty(),
                "invalid arguments reached the executor: {calls:?}"
            );
        }
        _ => assert_ne!(name, "no_such_tool", "{result:?}"),
    }
}

fn callers() -> [Caller; 3] {
    [
        Caller {
            owner: Some("s1".into()),
            cwd: Some("/home/u".into()),
        },
        Caller {
            owner: Some("s2".into()),
            cwd: None,
        },
        Caller {
            owner: None,
            cwd: None,
        },
    ]
}

/// A fake with something to find: `bash-1` running and owned by `s1`, `bash-2` finished and
/// unowned, and a foreground run that failed with output on both streams.
fn executor() -> FakeExecutor {
    let task = |id: &str, owner: Option<&str>, state| Task {
        id: id.into(),
        command: "sleep 1".into(),
        owner: owner.map(str::to_string),
        state,
        exit_code: (state == TaskState::Completed).then_some(0),
        signal: None,
        relocated: None,
    };
    let delta = |text: &str| StreamDelta {
        text: text.into(),
        lossy: false,
        spill_path: None,
        spill_evicted: false,
    };
    FakeExecutor {
        run: Ok(RunResult {
            exit_code: Some(2),
            timeout_ms: 120000.0,
            stdout: StreamOutput {
                text: "out\n".into(),
                ..Default::default()
            },
            stderr: StreamOutput {
                text: "err".into(),
                truncated: true,
                spill_path: None,
                spill_evicted: false,
            },
            ..Default::default()
        }),
        reads: BTreeMap::from([
            (
                "bash-1".into(),
                Read {
                    stdout: delta("first\n"),
                    stderr: delta(""),
                    task: task("bash-1", Some("s1"), TaskState::Running),
                    denials: Default::default(),
                },
            ),
            (
                "bash-2".into(),
                Read {
                    stdout: delta(""),
                    stderr: delta("warn"),
                    task: task("bash-2", None, TaskState::Completed),
                    denials: Default::default(),
                },
            ),
        ]),
        kills: BTreeMap::from([("bash-1".into(), true), ("bash-2".into(), false)]),
        owners: BTreeMap::from([("bash-1".into(), "s1".into())]),
        ..FakeExecutor::default()
    }
}
