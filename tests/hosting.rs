//! The worked hosts of `docs/hosting.md`, run so that the guide cannot rot.
//!
//! - Rust: `host/examples/hosting.rs`, included here and run in process;
//! - Python: `docs/hosting/host.py` on wasmtime-py, as pinned in `docs/hosting/requirements.txt`;
//! - Node: `docs/hosting/host.mjs` on jco, from `docs/hosting/package-lock.json`.
//!
//! The tests install both on first use (`support/provision.rs`). Each host prints the same walk-through (every tool, the imports the
//! component called for each, a notice), which must be exactly [`EXPECTED`]. The guide's own
//! code blocks must be verbatim excerpts of these files, and its expected output this one.

use std::path::PathBuf;
use std::process::Command;

#[path = "support/component_file.rs"]
mod component_file;
#[path = "support/nested_cargo.rs"]
mod nested_cargo;
#[path = "support/provision.rs"]
mod provision;

// The example's `main` is not used here, only its `walk_through`.
#[allow(dead_code)]
#[path = "../host/examples/hosting.rs"]
mod hosting;

/// What every worked host prints for the embedded component.
const EXPECTED: &str = r#"list-tools: bash bash_output bash_kill [current-limits]
bash: "Error: invalid arguments: missing required property \"command\"; missing required property \"description\"" error=true INVALID_ARGS []
bash: "/\n[stderr]\noops\n[exit code: 3]" error=false - [resolve run]
bash: "Error: workdir \"/no/such/dir\" is not usable: no such directory" error=true TOOL_ERROR [resolve run]
bash: "started background task bash-1" error=false - [resolve start]
task-done bash-1: ok [inject]
notice for session-1: background bash task bash-1 finished [status: completed, exit code: 0]. Read its output with bash_output.
bash_output: "done\n\n[status: completed, exit code: 0]" error=false - [owner-of read-output]
bash_kill: "task bash-1 had already finished" error=false - [owner-of kill get]
bash_output: "Error: task bash-1 belongs to another session" error=true TOOL_ERROR [owner-of]
"#;

/// The very bytes `dsh-host` embeds, as a file the foreign hosts load.
fn component_file() -> PathBuf {
    component_file::embedded_component(&PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("hosting"))
}

/// Runs a host program and returns what it printed, failing with its stderr if it failed.
fn printed(cmd: &mut Command, hint: &str) -> String {
    let out = cmd
        .arg(component_file())
        .current_dir(provision::repo())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}; {hint}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}); {hint}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn rust_host_prints_the_walk_through() {
    let mut out = Vec::new();
    hosting::walk_through(dsh_host::engine::EMBEDDED_COMPONENT, &mut out).unwrap();
    assert_eq!(String::from_utf8(out).unwrap(), EXPECTED);
}

#[test]
fn python_host_prints_the_walk_through() {
    let python = provision::python_venv(
        "hosting",
        &provision::repo().join("docs/hosting/requirements.txt"),
    );
    let hint = "docs/hosting/host.py runs on wasmtime-py";
    let out = printed(Command::new(python).arg("docs/hosting/host.py"), hint);
    assert_eq!(out, EXPECTED);
}

#[test]
fn node_host_prints_the_walk_through() {
    provision::npm_ci(&provision::repo().join("docs/hosting"));
    let hint = "docs/hosting/host.mjs runs on node with jco";
    let out = printed(Command::new("node").arg("docs/hosting/host.mjs"), hint);
    assert_eq!(out, EXPECTED);
}

/// Every fenced block of the guide is the expected output, or a verbatim excerpt of the file its
/// language names (pieces separated by a line `...` may skip lines between them), so the guide
/// shows no code that the tests above do not run.
#[test]
fn the_guide_quotes_only_what_runs() {
    let guide = std::fs::read_to_string(provision::repo().join("docs/hosting.md")).unwrap();
    let source = |lang: &str| -> Option<String> {
        let path = match lang {
            "rust" => "host/examples/hosting.rs",
            "python" => "docs/hosting/host.py",
            "js" => "docs/hosting/host.mjs",
            "wit" => "wit/bash.wit",
            "text" => return Some(EXPECTED.to_string()),
            _ => return None,
        };
        Some(std::fs::read_to_string(provision::repo().join(path)).unwrap())
    };
    let mut blocks = 0;
    let mut lines = guide.lines();
    while let Some(line) = lines.next() {
        let Some(lang) = line.strip_prefix("```") else {
            continue;
        };
        let body: Vec<&str> = lines.by_ref().take_while(|l| *l != "```").collect();
        let text = source(lang).unwrap_or_else(|| {
            panic!("a ```{lang} block: the guide quotes rust, python, js, wit or text")
        });
        let mut from = 0;
        for piece in body.split(|l| *l == "...") {
            let piece = format!("{}\n", piece.join("\n"));
            let at = text[from..]
                .find(&piece)
                .unwrap_or_else(|| panic!("not in the {lang} source (in order):\n{piece}"));
            from += at + piece.len();
        }
        blocks += 1;
    }
    assert!(
        blocks >= 4,
        "the guide shows the hosts' key parts ({blocks} blocks)"
    );
}
