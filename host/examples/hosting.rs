//! The worked Rust host of `docs/hosting.md`: the tools component run with nothing but the WIT,
//! wasmtime's generated bindings and a tiny executor on `std::process`. It does not use this
//! crate's engine or executor (an embedder wants those: see `examples/embed.rs`); it shows what
//! any host must supply. `tests/hosting.rs` runs it and checks every line it prints.
//!
//! `cargo run -p dsh-host --example hosting -- target/guest-wasm/guest_tools.wasm`
//!
//! The executor keeps the contract's shape but not all of its mechanics: output goes to files
//! (so a full pipe never blocks the command), the process group is the tree, and there are no
//! limits on tasks.

// The generated `executor-error` holds the `refused` case's record inline (bindgen cannot box
// it); this executor returns it by value like every other error.
#![allow(clippy::result_large_err)]

use std::collections::HashSet;
use std::io::Write;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Engine, Store};

// Sync bindings: imports are plain trait methods, exports plain functions.
wasmtime::component::bindgen!({ path: "../wit", world: "tools-component" });

use dsh::bash::agent::{self, InjectError, Source};
use dsh::bash::bash_executor::{
    self as ex, Denials, ExecutorError, Limits, Read, Request, RunResult, Spec, StreamDelta,
    StreamOutput, Task, TaskState,
};
use exports::dsh::bash::tools::Caller;

const LIMITS: Limits = Limits {
    default_timeout_ms: 120_000.0,
    max_timeout_ms: 600_000.0,
    max_output_bytes: 64_000,
    grace_ms: 3_000.0,
    // No sandbox: commands run with this user's authority, and nothing is ever denied them.
    sandbox: None,
};

/// What this executor reports of denials: none, as it has no sandbox.
fn no_denials() -> Denials {
    Denials {
        first: Vec::new(),
        more: 0,
    }
}

/// A background task: its record, its process while it runs, and how far each stream was read.
struct Background {
    task: Task,
    child: Option<Child>,
    files: [PathBuf; 2],
    read: [u64; 2],
}

/// Everything the host keeps between calls. Each call gets a fresh store (and instance) whose
/// data is a handle to this.
struct HostState {
    dir: tempfile::TempDir,
    tasks: Vec<Background>,
    /// Owner tokens of the open sessions, and the notices injected for them.
    sessions: HashSet<String>,
    notices: Vec<(String, String)>,
    /// The imports the component called during the current export call, in order.
    trace: Vec<&'static str>,
    files_made: u32,
}

#[derive(Clone)]
struct Host(Arc<Mutex<HostState>>);

impl Host {
    fn state(&self) -> std::sync::MutexGuard<'_, HostState> {
        self.0.lock().unwrap()
    }
}

impl HostState {
    /// `bash -c <command>` in its own process group, stdin from /dev/null, output to two files.
    fn spawn(&mut self, spec: &Spec) -> Result<(Child, [PathBuf; 2]), ExecutorError> {
        if !std::path::Path::new(&spec.workdir).is_dir() {
            let message = format!(
                "workdir {:?} is not usable: no such directory",
                spec.workdir
            );
            return Err(ExecutorError::WorkdirUnusable(message));
        }
        self.files_made += 1;
        let files = ["stdout", "stderr"]
            .map(|s| self.dir.path().join(format!("{}-{s}.log", self.files_made)));
        let open = |p: &PathBuf| std::fs::File::create(p).map_err(internal);
        let child = Command::new("bash")
            .arg("-c")
            .arg(&spec.command)
            .current_dir(&spec.workdir)
            .env_clear()
            .envs(child_env())
            .stdin(Stdio::null())
            .stdout(open(&files[0])?)
            .stderr(open(&files[1])?)
            .process_group(0)
            .spawn()
            .map_err(|e| ExecutorError::SpawnFailed(format!("cannot start bash: {e}")))?;
        Ok((child, files))
    }

    fn background(&mut self, id: &str) -> Result<&mut Background, ExecutorError> {
        self.tasks
            .iter_mut()
            .find(|b| b.task.id == id)
            .ok_or_else(|| ExecutorError::UnknownTask(id.to_string()))
    }
}

// The nine `bash-executor` functions. The component calls only some of them, but it imports all
// nine, so all must be linked for it to instantiate.
impl ex::Host for Host {
    fn current_limits(&mut self) -> Limits {
        self.state().trace.push("current-limits");
        LIMITS
    }

    fn resolve(&mut self, req: Request) -> Result<Spec, ExecutorError> {
        self.state().trace.push("resolve");
        let requested = req.timeout_ms.unwrap_or(LIMITS.default_timeout_ms);
        if !(requested.is_finite() && requested > 0.0) {
            return Err(ExecutorError::InvalidRequest(format!(
                "invalid timeoutMs: expected a positive number, got {requested}"
            )));
        }
        let workdir = match req.workdir {
            Some(dir) => dir,
            None => std::env::current_dir()
                .map_err(internal)?
                .display()
                .to_string(),
        };
        Ok(Spec {
            command: req.command,
            workdir,
            timeout_ms: requested.min(LIMITS.max_timeout_ms),
            owner: req.owner,
        })
    }

    fn run(&mut self, spec: Spec) -> Result<RunResult, ExecutorError> {
        let mut state = self.state();
        state.trace.push("run");
        let (mut child, files) = state.spawn(&spec)?;
        let deadline = Instant::now() + Duration::from_secs_f64(spec.timeout_ms / 1000.0);
        let mut timed_out = false;
        let status = loop {
            if let Some(status) = child.try_wait().map_err(internal)? {
                break status;
            }
            if Instant::now() >= deadline && !timed_out {
                timed_out = true;
                stop_group(&mut child);
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let (exit_code, signal) = end_of(status);
        Ok(RunResult {
            exit_code,
            signal,
            timed_out,
            aborted: false,
            timeout_ms: spec.timeout_ms,
            stdout: tail(&files[0])?,
            stderr: tail(&files[1])?,
            leftover_processes: 0,
            yielded: None,
            denials: no_denials(),
            relocated: None,
        })
    }

    fn start(&mut self, spec: Spec) -> Result<Task, ExecutorError> {
        let mut state = self.state();
        state.trace.push("start");
        let (child, files) = state.spawn(&spec)?;
        let task = Task {
            id: format!("bash-{}", state.tasks.len() + 1),
            command: spec.command,
            owner: spec.owner,
            state: TaskState::Running,
            exit_code: None,
            signal: None,
            relocated: None,
        };
        state.tasks.push(Background {
            task: task.clone(),
            child: Some(child),
            files,
            read: [0, 0],
        });
        Ok(task)
    }

    fn read_output(&mut self, id: String) -> Result<Read, ExecutorError> {
        let mut state = self.state();
        state.trace.push("read-output");
        let b = state.background(&id)?;
        // What each stream's file gained since the previous read.
        let mut delta = |i: usize| -> Result<StreamDelta, ExecutorError> {
            let bytes = std::fs::read(&b.files[i]).map_err(internal)?;
            let new = &bytes[(b.read[i] as usize).min(bytes.len())..];
            b.read[i] = bytes.len() as u64;
            Ok(StreamDelta {
                text: String::from_utf8_lossy(new).into_owned(),
                lossy: false,
                spill_path: None,
                spill_evicted: false,
            })
        };
        let (stdout, stderr) = (delta(0)?, delta(1)?);
        Ok(Read {
            stdout,
            stderr,
            task: b.task.clone(),
            denials: no_denials(),
        })
    }

    fn kill(&mut self, id: String) -> Result<bool, ExecutorError> {
        let mut state = self.state();
        state.trace.push("kill");
        let b = state.background(&id)?;
        if b.task.state != TaskState::Running {
            return Ok(false);
        }
        b.task.state = TaskState::Killed;
        if let Some(child) = &mut b.child {
            signal_group(child, libc::SIGTERM);
        }
        Ok(true)
    }

    fn owner_of(&mut self, id: String) -> Option<String> {
        let mut state = self.state();
        state.trace.push("owner-of");
        state.background(&id).ok()?.task.owner.clone()
    }

    fn get(&mut self, id: String) -> Result<Task, ExecutorError> {
        let mut state = self.state();
        state.trace.push("get");
        Ok(state.background(&id)?.task.clone())
    }

    fn list_tasks(&mut self) -> Vec<Task> {
        let mut state = self.state();
        state.trace.push("list-tasks");
        state.tasks.iter().map(|b| b.task.clone()).collect()
    }
}

impl agent::Host for Host {
    fn inject(&mut self, owner: String, text: String, source: Source) -> Result<(), InjectError> {
        let mut state = self.state();
        state.trace.push("inject");
        assert_eq!(
            (source.kind.as_str(), source.plugin.as_deref()),
            ("plugin", Some("tool-bash"))
        );
        if !state.sessions.contains(&owner) {
            // The notice's session is gone: the component drops it.
            return Err(InjectError::UnknownOwner);
        }
        state.notices.push((owner, text));
        Ok(())
    }
}

/// The component, compiled once, instantiated fresh for every export call.
struct Tools {
    engine: Engine,
    pre: ToolsComponentPre<Host>,
    host: Host,
}

impl Tools {
    fn load(wasm: &[u8]) -> wasmtime::Result<Tools> {
        let engine = Engine::default();
        let component = Component::new(&engine, wasm)?;
        let mut linker = Linker::new(&engine);
        // The two imported interfaces, and nothing else: the component imports no WASI.
        ToolsComponent::add_to_linker::<Host, HasSelf<Host>>(&mut linker, |h| h)?;
        let pre = ToolsComponentPre::new(linker.instantiate_pre(&component)?)?;
        let host = Host(Arc::new(Mutex::new(HostState {
            dir: tempfile::tempdir()?,
            tasks: Vec::new(),
            sessions: HashSet::new(),
            notices: Vec::new(),
            trace: Vec::new(),
            files_made: 0,
        })));
        Ok(Tools { engine, pre, host })
    }

    /// A fresh instance: one whose call trapped (in the guest or in an import) is never reused.
    fn instance(&self) -> wasmtime::Result<(Store<Host>, ToolsComponent)> {
        let mut store = Store::new(&self.engine, self.host.clone());
        let instance = self.pre.instantiate(&mut store)?;
        Ok((store, instance))
    }

    /// The imports the last export call made, as `[a b c]`.
    /// One tool call, printed as `<name>: <text as JSON> error=<bool> <code or -> [imports]`.
    fn call(
        &self,
        name: &str,
        arguments: &str,
        caller: &Caller,
        out: &mut dyn Write,
    ) -> wasmtime::Result<()> {
        let (mut store, instance) = self.instance()?;
        let r = instance
            .dsh_bash_tools()
            .call_call_tool(&mut store, name, arguments, caller)?;
        let text = serde_json::to_string(&r.text)?;
        let code = r.error_code.as_deref().unwrap_or("-");
        writeln!(
            out,
            "{name}: {text} error={} {code} {}",
            r.is_error,
            self.trace()
        )?;
        Ok(())
    }

    fn trace(&self) -> String {
        format!(
            "[{}]",
            std::mem::take(&mut self.host.state().trace).join(" ")
        )
    }

    /// Hand every background task that ended since the last look to the component, which
    /// writes the notice and injects it into the owner's session. Each task exactly once.
    fn deliver_ended(&self, out: &mut dyn Write) -> wasmtime::Result<usize> {
        let ended: Vec<Task> = {
            let mut state = self.host.state();
            let mut ended = Vec::new();
            for b in &mut state.tasks {
                let Some(child) = &mut b.child else { continue };
                let Some(status) = child.try_wait()? else {
                    continue;
                };
                b.child = None;
                let (exit_code, signal) = end_of(status);
                b.task.exit_code = exit_code;
                b.task.signal = signal;
                if b.task.state == TaskState::Running {
                    b.task.state = match b.task.signal {
                        Some(_) => TaskState::Killed,
                        None => TaskState::Completed,
                    };
                }
                ended.push(b.task.clone());
            }
            ended
        };
        for task in &ended {
            let (mut store, instance) = self.instance()?;
            // An error is a message for the host's log; the task is not affected.
            let outcome = match instance.dsh_bash_tools().call_task_done(&mut store, task)? {
                Ok(()) => "ok".to_string(),
                Err(message) => format!("error {message}"),
            };
            writeln!(out, "task-done {}: {outcome} {}", task.id, self.trace())?;
        }
        Ok(ended.len())
    }
}

/// Runs the walk-through against the component bytes `wasm`, writing what happens to `out`.
pub fn walk_through(wasm: &[u8], out: &mut dyn Write) -> wasmtime::Result<()> {
    let tools = Tools::load(wasm)?;

    let (mut store, instance) = tools.instance()?;
    let defs = instance.dsh_bash_tools().call_list_tools(&mut store)?;
    let names: Vec<&str> = defs.iter().map(|d| d.name.as_str()).collect();
    writeln!(out, "list-tools: {} {}", names.join(" "), tools.trace())?;

    let owner = "session-1".to_string();
    tools.host.state().sessions.insert(owner.clone());
    let caller = Caller {
        owner: Some(owner.clone()),
        cwd: Some("/".to_string()),
    };
    // Arguments that fail validation never reach the executor.
    tools.call("bash", "{}", &caller, out)?;
    let foreground = r#"{"command":"pwd; echo oops >&2; exit 3","description":"Show the dir"}"#;
    tools.call("bash", foreground, &caller, out)?;
    let unusable = r#"{"command":"ls","description":"List files","workdir":"/no/such/dir"}"#;
    tools.call("bash", unusable, &caller, out)?;
    let background = r#"{"command":"echo done","description":"Echo","run_in_background":true}"#;
    tools.call("bash", background, &caller, out)?;

    // Wait for the background task to end; its notice then reaches session-1.
    while tools.deliver_ended(out)? == 0 {
        std::thread::sleep(Duration::from_millis(5));
    }
    for (owner, text) in std::mem::take(&mut tools.host.state().notices) {
        writeln!(out, "notice for {owner}: {text}")?;
    }

    let task = r#"{"task_id":"bash-1"}"#;
    tools.call("bash_output", task, &caller, out)?;
    tools.call("bash_kill", task, &caller, out)?;
    // A caller without the owner token cannot touch the task.
    tools.call(
        "bash_output",
        task,
        &Caller {
            owner: None,
            cwd: None,
        },
        out,
    )?;
    Ok(())
}

/// The last `max-output-bytes` of a stream's file.
fn tail(path: &PathBuf) -> Result<StreamOutput, ExecutorError> {
    let bytes = std::fs::read(path).map_err(internal)?;
    let keep = LIMITS.max_output_bytes as usize;
    let truncated = bytes.len() > keep;
    let kept = &bytes[bytes.len().saturating_sub(keep)..];
    Ok(StreamOutput {
        text: String::from_utf8_lossy(kept).into_owned(),
        truncated,
        // The file holds the complete stream.
        spill_path: truncated.then(|| path.display().to_string()),
        spill_evicted: false,
    })
}

/// The host's environment minus secrets, plus the settings for non-interactive use.
fn child_env() -> Vec<(String, String)> {
    let secret = |k: &str| {
        let k = k.to_uppercase();
        ["KEY", "SECRET", "TOKEN", "PASSWORD"]
            .iter()
            .any(|w| k.contains(w))
    };
    let mut env: Vec<(String, String)> = std::env::vars().filter(|(k, _)| !secret(k)).collect();
    for (k, v) in [
        ("NO_COLOR", "1"),
        ("TERM", "dumb"),
        ("PAGER", "cat"),
        ("GIT_PAGER", "cat"),
    ] {
        env.push((k.to_string(), v.to_string()));
    }
    env.push(("GIT_TERMINAL_PROMPT".to_string(), "0".to_string()));
    env
}

/// TERM to the group, KILL after the grace period if the leader has not ended.
fn stop_group(child: &mut Child) {
    signal_group(child, libc::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs_f64(LIMITS.grace_ms / 1000.0);
    while Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    signal_group(child, libc::SIGKILL);
}

fn signal_group(child: &Child, signal: i32) {
    // The leader's pid is its group's id (`process_group(0)`).
    // SAFETY: kill(2) takes plain integers and touches no memory of this process.
    unsafe { libc::kill(-(child.id() as i32), signal) };
}

fn end_of(status: ExitStatus) -> (Option<i32>, Option<String>) {
    let name = |n: i32| match n {
        libc::SIGHUP => "SIGHUP".to_string(),
        libc::SIGINT => "SIGINT".to_string(),
        libc::SIGKILL => "SIGKILL".to_string(),
        libc::SIGTERM => "SIGTERM".to_string(),
        n => format!("SIG{n}"),
    };
    (status.code(), status.signal().map(name))
}

fn internal(e: impl std::fmt::Display) -> ExecutorError {
    ExecutorError::Internal(e.to_string())
}

fn main() -> wasmtime::Result<()> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "target/guest-wasm/guest_tools.wasm".to_string());
    let wasm = std::fs::read(&path).map_err(|e| wasmtime::format_err!("{path}: {e}"))?;
    walk_through(&wasm, &mut std::io::stdout())
}
