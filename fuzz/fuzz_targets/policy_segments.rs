//! The policy engine's reading of a command against real bash's: every command bash runs must be
//! a segment the engine found (or the engine must call the command unanalysable). A command bash
//! runs that the engine did not see is a command its rules never checked.
//!
//! bash runs each input with tracing on (`bash -x -c INPUT`), as `nobody`, with no `PATH` (so
//! only builtins and absolute paths run), a process limit, a 1 s timeout and a fresh working
//! directory; the traced command names (`+ name …`, at any depth) are compared with
//! `dsh_policy::command_names`. Inputs that touch the tracing itself are skipped.
//!
//! Run from the workspace root, as root (for `setpriv`):
//!
//! ```text
//! cargo install cargo-fuzz --locked
//! RUSTC_BOOTSTRAP=1 cargo fuzz run policy_segments fuzz/corpus/policy_segments \
//!     fuzz/seeds/policy_segments -- -dict=fuzz/policy_segments.dict -max_total_time=600
//! ```

#![no_main]

use std::process::{Command, Stdio};

use libfuzzer_sys::fuzz_target;

/// The home directory of `nobody`.
const HOME: &str = "/nonexistent";

fuzz_target!(|data: &[u8]| {
    let Ok(command) = std::str::from_utf8(data) else {
        return;
    };
    if command.len() > 400 || skipped(command) {
        return;
    }
    // The engine never panics, whatever the input.
    let Some(names) = dsh_policy::command_names(command) else {
        return;
    };
        let traced = bash_trace(command);
    // `~` is the home directory of `nobody`, whom bash runs as.
    let names: Vec<String> = names
        .iter()
        .map(|n| match n.strip_prefix('~') {
            Some(rest) if rest.is_empty() || rest.starts_with('/') => format!("{HOME}{rest}"),
            _ => n.clone(),
        })
        .collect();
    for name in traced {
        assert!(
            names.iter().any(|n| *n == name),
            "bash ran {name:?}, which the engine did not see in {command:?} (it saw {names:?})"
        );
    }
});

/// Inputs that change or hide the trace, or that bash reads differently from `bash -c` here.
fn skipped(command: &str) -> bool {
    command.contains('\0')
        || [
            // Change or hide the trace.
            "PS4", "xtrace", "set", "BASH_XTRACEFD", "exec", "2>", ">&", "&>", "shopt",
            // Change what a name runs, or run a file (a known limit of the engine).
            "enable", "hash", "source", ". ",
        ]
        .iter()
        .any(|s| command.contains(s))
}

/// The command names bash traced running `command`.
fn bash_trace(command: &str) -> Vec<String> {
    let dir = tempfile_dir();
    // Absolute paths: the commands run with no PATH.
    let out = Command::new("/usr/bin/timeout")
        .args(["-s", "KILL", "1", "/usr/bin/setpriv", "--reuid=nobody", "--regid=nogroup"])
        .args(["--clear-groups", "/usr/bin/prlimit", "--nproc=32", "--", "/bin/bash", "-x"])
        .args(["-c", command])
        .env_clear()
        .env("PATH", "/nonexistent")
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("bash runs");
    let _ = std::fs::remove_dir_all(&dir);
    let mut names = Vec::new();
    for line in String::from_utf8_lossy(&out.stderr).lines() {
        let Some(rest) = line.strip_prefix('+') else { continue };
        let rest = rest.trim_start_matches('+');
        let Some(rest) = rest.strip_prefix(' ') else { continue };
        let Some(first) = first_word(rest) else { continue };
        // Assignments, tests and arithmetic are traced too; they run no command.
        if first.contains('=') || matches!(first.as_str(), "[[" | "((" | "for" | "case" | "select") {
            continue;
        }
        names.push(first);
    }
    names
}

/// The first word of a trace line, unquoted as xtrace quotes it (`'a b'`, `$'\n'`).
fn first_word(line: &str) -> Option<String> {
    let mut out = String::new();
    let mut chars = line.chars().peekable();
    match chars.peek() {
        Some('$') => return None, // `$'…'`: control characters; the engine calls them unanalysable
                Some('\'') => {
            // `'…'`, with `'\''` for a quote inside, up to a blank outside quotes.
            let mut quoted = false;
            while let Some(c) = chars.next() {
                match c {
                    '\'' => quoted = !quoted,
                    '\\' if !quoted => out.extend(chars.next()),
                    ' ' if !quoted => break,
                    c => out.push(c),
                }
            }
        }
        _ => {
            for c in chars {
                if c == ' ' {
                    break;
                }
                out.push(c);
            }
        }
    }
    (!out.is_empty()).then_some(out)
}

fn tempfile_dir() -> std::path::PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "policy-fuzz-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    // bash runs as nobody: let it in.
    let _ = std::process::Command::new("chmod").args(["777"]).arg(&dir).status();
    dir
}
