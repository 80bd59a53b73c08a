//! The executor as a service: `dsh-host executor serve --stdio` and the host's `RemoteExecutor`.
//!
//! The contract cases run against two executors, the in-process `LocalExecutor` and a
//! `RemoteExecutor` talking to the real binary, and must give the same answers. The protocol's
//! own promises (a request id runs once, a read can be asked for again, a version mismatch is
//! refused, a lost far side reports its tasks once) are tested on the wire and through the
//! binary.

#[path = "support/exec.rs"]
mod exec;
#[path = "support/line.rs"]
mod line;
#[path = "support/procs.rs"]
mod procs;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_host::executor::{
    Config, ExecError, Executor, LocalExecutor, RemoteExecutor, Request, RunResult, Spec, Task,
    TaskState,
};
use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};
use tokio_util::sync::CancellationToken;

const BIN: &str = env!("CARGO_BIN_EXE_dsh-host");
const GRACE_MS: f64 = 200.0;
/// Generous bound for anything that should be "prompt".
const PROMPT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------------
// One suite, two executors
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Local,
    Remote,
}

/// The settings both executors get: the in-process one as a `Config`, the served one as flags.
#[derive(Default)]
struct Settings {
    yield_after_ms: Option<f64>,
    max_tasks: Option<usize>,
    max_finished_tasks: Option<usize>,
    max_output_bytes: Option<u64>,
}

struct Under {
    exec: Arc<dyn Executor>,
    events: UnboundedReceiver<Task>,
    dir: tempfile::TempDir,
}

fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The command line that serves an executor with `flags`; `exec` so that the shell's pid is the
/// server's.
fn serve_command(flags: &[String]) -> String {
    let mut line = format!("exec {} executor serve --stdio", quoted(BIN));
    for flag in flags {
        line.push(' ');
        line.push_str(&quoted(flag));
    }
    line
}

fn under(kind: Kind, settings: Settings) -> Under {
    let dir = tempfile::tempdir().unwrap();
    let spill = dir.path().join("spill");
    std::fs::create_dir(&spill).unwrap();
    let (tx, events) = unbounded_channel();
    let exec: Arc<dyn Executor> = match kind {
        Kind::Local => LocalExecutor::new(
            Config {
                grace_ms: GRACE_MS,
                default_timeout_ms: 20_000.0,
                spill_dir: Some(spill),
                yield_after_ms: settings.yield_after_ms,
                max_tasks: settings.max_tasks.unwrap_or(64),
                max_session_tasks: settings.max_tasks.unwrap_or(64),
                max_finished_tasks: settings.max_finished_tasks.unwrap_or(1024),
                max_session_finished_tasks: settings.max_finished_tasks.unwrap_or(1024),
                max_output_bytes: settings.max_output_bytes.unwrap_or(64_000),
                ..Config::default()
            },
            tx,
        )
        .unwrap(),
        Kind::Remote => {
            let mut flags = vec![
                format!("--grace-ms={GRACE_MS}"),
                "--timeout-ms=20000".to_string(),
                format!("--spill-dir={}", spill.display()),
            ];
            if let Some(ms) = settings.yield_after_ms {
                flags.push(format!("--yield-after-ms={ms}"));
            }
            if let Some(n) = settings.max_tasks {
                flags.push(format!("--max-tasks={n}"));
                flags.push(format!("--max-session-tasks={n}"));
            }
            if let Some(n) = settings.max_finished_tasks {
                flags.push(format!("--max-finished-tasks={n}"));
                flags.push(format!("--max-session-finished-tasks={n}"));
            }
            if let Some(n) = settings.max_output_bytes {
                flags.push(format!("--max-output-bytes={n}"));
            }
            RemoteExecutor::connect(&serve_command(&flags), tx).unwrap()
        }
    };
    Under { exec, events, dir }
}

impl Under {
    fn spec(&self, command: &str) -> Spec {
        exec::spec(self.exec.as_ref(), command)
    }

    async fn run(&self, command: &str) -> RunResult {
        exec::run(self.exec.as_ref(), command).await
    }

    async fn start(&self, command: &str) -> Task {
        exec::start(self.exec.as_ref(), command).await
    }

    async fn next_event(&mut self) -> Task {
        exec::next_event(&mut self.events).await
    }

    /// No further event within a moment.
    async fn no_more_events(&mut self) {
        let more = tokio::time::timeout(Duration::from_millis(300), self.events.recv()).await;
        assert!(matches!(more, Err(_) | Ok(None)), "another event: {more:?}");
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// Each case as two tests: `<case>::local` and `<case>::remote`.
macro_rules! both {
    ($case:ident) => {
        mod $case {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn local() {
                super::$case(super::Kind::Local).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn remote() {
                super::$case(super::Kind::Remote).await;
            }
        }
    };
}

both!(streams_exit_codes_and_signals);
async fn streams_exit_codes_and_signals(kind: Kind) {
    let h = under(kind, Settings::default());
    let r = h.run("echo out; echo err >&2; exit 3").await;
    assert_eq!(
        (r.stdout.text.as_str(), r.stderr.text.as_str(), r.exit_code),
        ("out\n", "err\n", Some(3))
    );
    assert_eq!((r.signal, r.timed_out, r.aborted), (None, false, false));
    let r = h.run("kill -KILL $$").await;
    assert_eq!((r.exit_code, r.signal.as_deref()), (None, Some("SIGKILL")));
    // Bytes that are not UTF-8 arrive replaced, as in process.
    let r = h.run(r"printf 'a\377b'").await;
    assert_eq!(r.stdout.text, "a\u{fffd}b");
    h.exec.shutdown().await;
}

both!(resolve_applies_the_far_sides_defaults_and_refuses_alike);
async fn resolve_applies_the_far_sides_defaults_and_refuses_alike(kind: Kind) {
    let h = under(kind, Settings::default());
    let request = |timeout_ms| Request {
        command: "true".to_string(),
        workdir: Some("/".to_string()),
        timeout_ms,
        owner: Some("me".to_string()),
    };
    let spec = h.exec.resolve(request(Some(1e9))).unwrap();
    assert_eq!(
        (spec.timeout_ms, spec.owner.as_deref()),
        (600_000.0, Some("me"))
    );
    assert_eq!(h.exec.resolve(request(None)).unwrap().timeout_ms, 20_000.0);
    assert_eq!(
        h.exec.resolve(request(Some(-1.0))),
        Err(ExecError::InvalidRequest(
            "invalid timeoutMs: expected a positive number, got -1".to_string()
        ))
    );
    assert_eq!(h.exec.limits().grace_ms, GRACE_MS);
    let missing = Spec {
        workdir: "/nonexistent/dsh-test".to_string(),
        ..h.spec("true")
    };
    let err = h
        .exec
        .run(missing, CancellationToken::new())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ExecError::WorkdirUnusable(m) if m.contains("/nonexistent/dsh-test")),
        "{err:?}"
    );
    h.exec.shutdown().await;
}

both!(timeouts_and_aborts_stop_the_command);
async fn timeouts_and_aborts_stop_the_command(kind: Kind) {
    let h = under(kind, Settings::default());
    let spec = Spec {
        timeout_ms: 300.0,
        ..h.spec("sleep 30")
    };
    let started = Instant::now();
    let r = h.exec.run(spec, CancellationToken::new()).await.unwrap();
    assert!(started.elapsed() < PROMPT);
    assert_eq!((r.timed_out, r.signal.as_deref()), (true, Some("SIGTERM")));

    let token = CancellationToken::new();
    token.cancel();
    assert_eq!(
        h.exec.run(h.spec("echo never"), token).await,
        Err(ExecError::Aborted)
    );

    let token = CancellationToken::new();
    let canceller = token.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        canceller.cancel();
    });
    let started = Instant::now();
    let r = h
        .exec
        .run(h.spec("echo $$; sleep 30"), token)
        .await
        .unwrap();
    assert!(started.elapsed() < PROMPT, "{:?}", started.elapsed());
    assert_eq!((r.aborted, r.timed_out), (true, false));
    let pid: i32 = r.stdout.text.trim().parse().unwrap();
    assert!(!procs::alive(pid));
    h.exec.shutdown().await;
}

both!(background_reads_are_incremental_and_each_task_ends_once);
async fn background_reads_are_incremental_and_each_task_ends_once(kind: Kind) {
    let mut h = under(kind, Settings::default());
    let gate = h.path("gate");
    let command = format!(
        "echo one; while [ ! -e {} ]; do sleep 0.02; done; echo two; echo bad >&2; exit 4",
        gate.display()
    );
    let task = h.start(&command).await;
    assert_eq!(
        (task.id.as_str(), task.state),
        ("bash-1", TaskState::Running)
    );
    let deadline = Instant::now() + PROMPT;
    let mut first = String::new();
    while first.is_empty() {
        assert!(Instant::now() < deadline);
        first.push_str(&h.exec.read_output("bash-1").unwrap().stdout.text);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(first, "one\n");
    assert_eq!(h.exec.get("bash-1").unwrap().state, TaskState::Running);
    assert_eq!(h.exec.list().len(), 1);
    std::fs::write(&gate, "").unwrap();
    let done = h.next_event().await;
    assert_eq!(
        (done.state, done.exit_code),
        (TaskState::Completed, Some(4))
    );
    let read = h.exec.read_output("bash-1").unwrap();
    assert_eq!(
        (read.stdout.text.as_str(), read.stderr.text.as_str()),
        ("two\n", "bad\n")
    );
    assert_eq!(read.task.state, TaskState::Completed);
    let again = h.exec.read_output("bash-1").unwrap();
    assert_eq!(
        (again.stdout.text.as_str(), again.stderr.text.as_str()),
        ("", "")
    );
    assert_eq!(h.exec.kill("bash-1"), Ok(false));
    assert_eq!(
        h.exec.kill("bash-9"),
        Err(ExecError::UnknownTask("bash-9".to_string()))
    );
    assert_eq!(
        h.exec.read_output("bash-9").unwrap_err(),
        ExecError::UnknownTask("bash-9".to_string())
    );
    assert_eq!(h.exec.owner_of("bash-1"), None);
    h.no_more_events().await;
    h.exec.shutdown().await;
}

both!(kill_and_shutdown_end_tasks_with_one_event_each);
async fn kill_and_shutdown_end_tasks_with_one_event_each(kind: Kind) {
    let mut h = under(kind, Settings::default());
    let task = h.start("echo $$; sleep 30").await;
    assert_eq!(h.exec.kill(&task.id), Ok(true));
    let done = h.next_event().await;
    assert_eq!(
        (done.id.as_str(), done.state),
        (task.id.as_str(), TaskState::Killed)
    );
    assert_eq!(h.exec.kill(&task.id), Ok(false));
    h.no_more_events().await;

    let second = h.start("echo $$; sleep 30").await;
    let deadline = Instant::now() + PROMPT;
    let pid = loop {
        let text = h.exec.read_output(&second.id).unwrap().stdout.text;
        if let Ok(pid) = text.trim().parse::<i32>() {
            break pid;
        }
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    h.exec.shutdown().await;
    assert!(!procs::alive(pid), "shutdown waits for its tasks");
    // The contract: no task-done event once shutdown began.
    h.no_more_events().await;
}

both!(a_yielded_command_continues_as_a_task);
async fn a_yielded_command_continues_as_a_task(kind: Kind) {
    let mut h = under(
        kind,
        Settings {
            yield_after_ms: Some(300.0),
            ..Settings::default()
        },
    );
    let r = h.run("echo early; sleep 1; echo late").await;
    let yielded = r.yielded.expect("the command continued as a task");
    assert_eq!(r.stdout.text, "early\n");
    let done = h.next_event().await;
    assert_eq!(
        (done.id.as_str(), done.state),
        (yielded.task.id.as_str(), TaskState::Completed)
    );
    assert_eq!(
        h.exec.read_output(&yielded.task.id).unwrap().stdout.text,
        "late\n"
    );
    h.no_more_events().await;
    h.exec.shutdown().await;
}

both!(the_task_limit_refuses_without_change_and_old_tasks_are_forgotten);
async fn the_task_limit_refuses_without_change_and_old_tasks_are_forgotten(kind: Kind) {
    let mut h = under(
        kind,
        Settings {
            max_tasks: Some(2),
            max_finished_tasks: Some(2),
            ..Settings::default()
        },
    );
    let a = h.start("sleep 30").await;
    let b = h.start("sleep 30").await;
    let before = h.exec.list();
    match h.exec.start(h.spec("true")).await {
        Err(ExecError::TaskLimit(msg)) => assert!(msg.contains('2'), "{msg}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(h.exec.list(), before);
    assert_eq!(h.exec.kill(&a.id), Ok(true));
    let c = h.start("true").await;
    assert_eq!(c.id, "bash-3");
    let mut ids = [h.next_event().await.id, h.next_event().await.id];
    ids.sort();
    assert_eq!(ids, ["bash-1", "bash-3"]);
    // Finished: bash-1 and bash-3; killing bash-2 pushes bash-1 out.
    assert_eq!(h.exec.kill(&b.id), Ok(true));
    assert_eq!(h.next_event().await.id, "bash-2");
    assert_eq!(
        h.exec.get("bash-1"),
        Err(ExecError::UnknownTask("bash-1".into()))
    );
    assert_eq!(
        h.exec.read_output("bash-1"),
        Err(ExecError::UnknownTask("bash-1".into()))
    );
    h.exec.shutdown().await;
}

both!(output_beyond_the_window_keeps_the_tail_and_spills_the_whole);
async fn output_beyond_the_window_keeps_the_tail_and_spills_the_whole(kind: Kind) {
    let h = under(
        kind,
        Settings {
            max_output_bytes: Some(1000),
            ..Settings::default()
        },
    );
    let r = h.run("seq 1 2000").await;
    let whole: String = (1..=2000).map(|i| format!("{i}\n")).collect();
    assert!(r.stdout.truncated);
    assert_eq!(r.stdout.text, whole[whole.len() - 1000..]);
    let spill = r.stdout.spill_path.expect("a complete spill file");
    assert_eq!(std::fs::read_to_string(spill).unwrap(), whole);
    // A background task's read past the window is lossy and gives the window.
    let mut h = h;
    let task = h.start("seq 1 2000").await;
    h.next_event().await;
    let read = h.exec.read_output(&task.id).unwrap();
    assert!(read.stdout.lossy);
    assert_eq!(read.stdout.text, whole[whole.len() - 1000..]);
    h.exec.shutdown().await;
}

both!(a_command_of_200_kb_runs);
async fn a_command_of_200_kb_runs(kind: Kind) {
    let h = under(kind, Settings::default());
    let command = format!("echo ok\n#{}", "x".repeat(200 * 1024));
    let r = h.run(&command).await;
    assert_eq!((r.stdout.text.as_str(), r.exit_code), ("ok\n", Some(0)));
    let too_long = "x".repeat(1024 * 1024 + 1);
    let err = h
        .exec
        .resolve(Request {
            command: too_long,
            workdir: None,
            timeout_ms: None,
            owner: None,
        })
        .unwrap_err();
    assert!(
        matches!(&err, ExecError::InvalidRequest(m) if m.contains("max-command-bytes")),
        "{err:?}"
    );
    h.exec.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// On the wire
// ---------------------------------------------------------------------------------------------

/// `dsh-host executor serve --stdio` driven line by line.
use line::Line as Wire;

fn spec(command: &str, dir: &Path) -> Value {
    json!({"command": command, "workdir": dir, "timeout_ms": 20000.0, "owner": "s1"})
}

fn lines_of(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |s| s.lines().count())
}

#[test]
fn a_repeated_request_id_starts_its_command_once() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("marker");
    let mut wire = Wire::greeted(&[]);
    let command = format!("echo ran >> {}; sleep 0.3; echo done", marker.display());
    let params = json!({"request_id": "r-1", "spec": spec(&command, dir.path())});
    // Concurrently: the second arrives while the first runs.
    let first = wire.send("run", params.clone());
    let second = wire.send("run", params.clone());
    let a = wire.answer_to(first);
    let b = wire.answer_to(second);
    assert_eq!(a["result"]["ok"]["stdout"]["text"], "done\n", "{a}");
    assert_eq!(a["result"], b["result"]);
    // After completion: the first answer again, nothing run.
    let c = wire.request("run", params);
    assert_eq!(a["result"], c["result"]);
    assert_eq!(lines_of(&marker), 1, "the command ran more than once");

    // A start likewise: one task, the same id in every answer.
    let command = format!("echo started >> {}.start", marker.display());
    let params = json!({"request_id": "r-2", "spec": spec(&command, dir.path())});
    let first = wire.send("start", params.clone());
    let second = wire.send("start", params.clone());
    let a = wire.answer_to(first);
    let b = wire.answer_to(second);
    wire.wait_for_events(1);
    let c = wire.request("start", params);
    assert_eq!(a["result"]["ok"]["id"], "bash-1", "{a}");
    assert_eq!((&a["result"], &a["result"]), (&b["result"], &c["result"]));
    let list = wire.request("list", Value::Null);
    assert_eq!(list["result"].as_array().unwrap().len(), 1, "{list}");
    assert_eq!(lines_of(&dir.path().join("marker.start")), 1);
    wire.stop();
}

/// A sandbox denial reaches the reads once: a task that was denied and then wrote nothing gets
/// the denial on its next read, and later reads from where that one ended carry none (an empty
/// answer's end is its start, which must not make a next read pass for a repeat of it).
#[test]
fn a_denial_is_read_once_even_when_the_delta_is_empty() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "s3cret").unwrap();
    let secret = secret.to_str().unwrap();
    let mut wire = Wire::greeted(&["--sandbox", "read-only", "--sandbox-deny-read", secret]);
    let command = format!("cat {secret} 2>/dev/null; true");
    let started = wire.request(
        "start",
        json!({"request_id": "r-1", "spec": spec(&command, dir.path())}),
    );
    assert_eq!(started["result"]["ok"]["id"], "bash-1", "{started}");
    wire.wait_for_events(1);
    let read = |wire: &mut Wire| {
        wire.request(
            "read",
            json!({"task": "bash-1", "from": {"stdout": 0, "stderr": 0}}),
        )
    };
    let first = read(&mut wire);
    let ok = &first["result"]["ok"];
    assert_eq!(ok["read"]["stdout"]["text"], "", "{first}");
    assert_eq!(
        ok["read"]["denials"]["first"][0]["target"], secret,
        "{first}"
    );
    assert_eq!(ok["to"], json!({"stdout": 0, "stderr": 0}));
    for _ in 0..2 {
        let next = read(&mut wire);
        assert_eq!(
            next["result"]["ok"]["read"]["denials"],
            json!({"first": [], "more": 0}),
            "{next}"
        );
    }
}

/// The end of the server's input stops a foreground run too: nothing the client started
/// outlives the connection, and the server exits at once rather than when the run would end.
#[test]
fn the_end_of_the_input_stops_a_foreground_run() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let mut wire = Wire::greeted(&[]);
    let command = format!("echo $$ > {}; exec sleep 30", pid_file.display());
    wire.send(
        "run",
        json!({"request_id": "r-1", "spec": spec(&command, dir.path())}),
    );
    let deadline = Instant::now() + PROMPT;
    let pid = loop {
        if let Ok(pid) = std::fs::read_to_string(&pid_file)
            && let Ok(pid) = pid.trim().parse::<i32>()
        {
            break pid;
        }
        assert!(Instant::now() < deadline, "the run never started");
        std::thread::sleep(Duration::from_millis(20));
    };
    drop(wire.stdin.take());
    let exited = loop {
        if let Some(status) = wire.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the server waited for the run to end"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(exited.success(), "{exited}");
    assert!(!procs::alive(pid), "the run's command outlived the server");
}

#[test]
fn a_read_asked_for_again_at_the_same_offsets_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let gate = dir.path().join("gate");
    let mut wire = Wire::greeted(&[]);
    let command = format!(
        "printf first; while [ ! -e {} ]; do sleep 0.02; done; printf second; printf oops >&2",
        gate.display()
    );
    let started = wire.request(
        "start",
        json!({"request_id": "r-1", "spec": spec(&command, dir.path())}),
    );
    assert_eq!(started["result"]["ok"]["id"], "bash-1", "{started}");
    let read = |wire: &mut Wire, stdout: u64, stderr: u64| {
        wire.request(
            "read",
            json!({"task": "bash-1", "from": {"stdout": stdout, "stderr": stderr}}),
        )
    };
    // The first part, once it is there.
    let deadline = Instant::now() + PROMPT;
    let first = loop {
        let answer = read(&mut wire, 0, 0);
        if answer["result"]["ok"]["read"]["stdout"]["text"] != "" {
            break answer;
        }
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(20));
    };
    let ok = &first["result"]["ok"];
    assert_eq!(ok["read"]["stdout"]["text"], "first", "{first}");
    assert_eq!(ok["to"], json!({"stdout": 5, "stderr": 0}));
    std::fs::write(&gate, "").unwrap();
    wire.wait_for_events(1);
    // That answer was "dropped": asked for again from the same offsets, it comes again, though
    // more output arrived since; nothing of it is lost.
    let again = read(&mut wire, 0, 0);
    assert_eq!(again["result"], first["result"]);
    let next = read(&mut wire, 5, 0);
    let ok = &next["result"]["ok"];
    assert_eq!(
        (&ok["read"]["stdout"]["text"], &ok["read"]["stderr"]["text"]),
        (&json!("second"), &json!("oops")),
        "{next}"
    );
    assert_eq!(ok["to"], json!({"stdout": 11, "stderr": 4}));
    assert_eq!(ok["read"]["task"]["state"], "completed");
    // And that one again, then the (empty) rest.
    assert_eq!(read(&mut wire, 5, 0)["result"], next["result"]);
    let rest = read(&mut wire, 11, 4);
    assert_eq!(rest["result"]["ok"]["read"]["stdout"]["text"], "", "{rest}");
    // Offsets that are neither the last answer's start nor its end are refused, naming both.
    let stale = read(&mut wire, 0, 0);
    assert_eq!(stale["error"]["code"], -32003, "{stale}");
    wire.stop();
}

#[test]
fn a_protocol_version_mismatch_is_refused_naming_both_versions() {
    let mut wire = Wire::start(&[]);
    // Nothing before hello.
    let early = wire.request("list", Value::Null);
    assert_eq!(early["error"]["code"], -32002, "{early}");
    let refused = wire.request("hello", json!({"protocol": 99, "client": "test"}));
    assert_eq!(refused["error"]["code"], -32001, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("protocol version mismatch")
            && message.contains("version 99")
            && message.contains("version 1"),
        "{message}"
    );
    assert_eq!(refused["error"]["data"], json!({"client": 99, "server": 1}));
    // Malformed lines get an error each and the server serves on.
    wire.send_line("{not json");
    assert_eq!(wire.next_answer()["error"]["code"], -32700);
    wire.send_line(r#"{"jsonrpc":"2.0","id":77,"method":"hello","params":{"protocol":"one"}}"#);
    assert_eq!(wire.next_answer()["error"]["code"], -32602);
    let welcome = wire.request("hello", json!({"protocol": 1}));
    assert_eq!(welcome["result"]["protocol"], 1, "{welcome}");
    let unknown = wire.request("frobnicate", Value::Null);
    assert_eq!(unknown["error"]["code"], -32601, "{unknown}");
    wire.stop();

    // The host's side: a far side speaking another version stops `dsh-host call` with its
    // message, and nothing runs.
    let far_side = r#"read -r line; echo '{"jsonrpc":"2.0","id":1,"error":{"code":-32001,"message":"protocol version mismatch: the client speaks version 1, this server (dsh-host 9.0.0) speaks version 2"}}'"#;
    let out = dsh_host_call(&[
        "bash",
        r#"{"command":"echo hi","description":"x"}"#,
        "--executor-command",
        far_side,
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        stderr.contains("refused the connection: protocol version mismatch: the client speaks version 1, this server (dsh-host 9.0.0) speaks version 2"),
        "{stderr}"
    );
}

/// The far side's pid, written by the command line before it becomes the server.
fn served_with_pid_file(dir: &Path) -> (Arc<RemoteExecutor>, UnboundedReceiver<Task>, i32) {
    let pid_file = dir.join("server.pid");
    let command = format!(
        "echo $$ > {}; {}",
        quoted(&pid_file.display().to_string()),
        serve_command(&[
            format!("--grace-ms={GRACE_MS}"),
            // Long enough for the run in flight below to be in flight when the far side dies.
            "--yield-after-ms=1500".to_string(),
        ])
    );
    let (tx, events) = unbounded_channel();
    let exec = RemoteExecutor::connect(&command, tx).unwrap();
    let pid = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    (exec, events, pid)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_far_side_killed_mid_background_ends_each_task_once() {
    let dir = tempfile::tempdir().unwrap();
    let (exec, mut events, pid) = served_with_pid_file(dir.path());
    let spec = |command: &str| exec::spec(exec.as_ref(), command);
    let finished = exec.start(spec("true")).await.unwrap();
    let done = exec::next_event(&mut events).await;
    assert_eq!(
        (done.id.as_str(), done.state),
        (finished.id.as_str(), TaskState::Completed)
    );
    let first = exec.start(spec("sleep 30")).await.unwrap();
    let second = exec.start(spec("sleep 30")).await.unwrap();
    // A foreground run that continued as a task is one of them too.
    let yielded = exec
        .run(spec("sleep 30"), CancellationToken::new())
        .await
        .unwrap()
        .yielded
        .expect("the run continued as a task")
        .task;
    // A foreground run in flight when the far side dies.
    let in_flight = {
        let exec = exec.clone();
        let spec = spec("sleep 30");
        tokio::spawn(async move { exec.run(spec, CancellationToken::new()).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let killed = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());

    let mut ended = [
        exec::next_event(&mut events).await,
        exec::next_event(&mut events).await,
        exec::next_event(&mut events).await,
    ];
    ended.sort_by(|a, b| a.id.cmp(&b.id));
    assert_eq!(
        ended
            .iter()
            .map(|t| (t.id.as_str(), t.state))
            .collect::<Vec<_>>(),
        [
            (first.id.as_str(), TaskState::Lost),
            (second.id.as_str(), TaskState::Lost),
            (yielded.id.as_str(), TaskState::Lost),
        ]
    );
    let err = in_flight.await.unwrap().unwrap_err();
    assert!(
        matches!(&err, ExecError::Internal(m) if m.contains("may or may not have run")),
        "{err:?}"
    );
    // Nothing more, not even for the task that had ended before, and no silent retry: a new
    // command provably was not sent, and says so.
    let more = tokio::time::timeout(Duration::from_millis(500), events.recv()).await;
    assert!(matches!(more, Err(_) | Ok(None)), "{more:?}");
    let err = exec
        .run(spec_of(&first), CancellationToken::new())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ExecError::SpawnFailed(m) if m.contains("did not start")),
        "{err:?}"
    );
    assert_eq!(exec.get(&first.id).unwrap().state, TaskState::Lost);
    assert_eq!(exec.kill(&first.id), Ok(false));
    // A lost task reads as no output and its state; one that had ended before cannot be read.
    let read = exec.read_output(&first.id).unwrap();
    assert_eq!(
        (read.task.state, read.stdout.text.as_str()),
        (TaskState::Lost, "")
    );
    assert!(exec.read_output(&finished.id).is_err());
    exec.shutdown().await;
    let more = tokio::time::timeout(Duration::from_millis(200), events.recv()).await;
    assert!(matches!(more, Err(_) | Ok(None)), "{more:?}");
}

fn spec_of(task: &Task) -> Spec {
    Spec {
        command: task.command.clone(),
        workdir: "/".to_string(),
        timeout_ms: 1000.0,
        owner: task.owner.clone(),
    }
}

/// `dsh-host call ARGS`, with the tests' component cache.
fn dsh_host_call(args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .arg("call")
        .args(args)
        .env(
            "DSH_CACHE_DIR",
            Path::new(env!("CARGO_TARGET_TMPDIR")).join("component-cache"),
        )
        .output()
        .unwrap()
}

#[test]
fn call_runs_through_executor_serve() {
    let dir = tempfile::tempdir().unwrap();
    let serve = serve_command(&[]);
    let out = dsh_host_call(&[
        "bash",
        r#"{"command":"echo hi; echo err >&2; exit 3","description":"x"}"#,
        "--cwd",
        dir.path().to_str().unwrap(),
        "--executor-command",
        &serve,
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hi\n[stderr]\nerr\n[exit code: 3]\n"
    );
    assert!(stderr.is_empty(), "{stderr}");
    // The executor's own flags belong on the far side's command line.
    let out = dsh_host_call(&[
        "bash",
        r#"{"command":"true","description":"x"}"#,
        "--timeout-ms",
        "5",
        "--executor-command",
        &serve,
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("put them on its command line"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_caller_stops_waiting_is_stopped_on_the_far_side() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("run.pid");
    let (tx, _events) = unbounded_channel();
    let exec =
        RemoteExecutor::connect(&serve_command(&[format!("--grace-ms={GRACE_MS}")]), tx).unwrap();
    let spec = exec::spec(
        exec.as_ref(),
        &format!(
            "echo $$ > {}; exec sleep 60",
            quoted(&pid_file.display().to_string())
        ),
    );
    let run = {
        let exec = exec.clone();
        tokio::spawn(async move { exec.run(spec, CancellationToken::new()).await })
    };
    let deadline = Instant::now() + PROMPT;
    while lines_of(&pid_file) == 0 {
        assert!(Instant::now() < deadline, "the command did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The caller drops the call (its future), as a host does when its own caller goes away.
    run.abort();
    let deadline = Instant::now() + PROMPT;
    while procs::alive(pid) {
        assert!(
            Instant::now() < deadline,
            "the command outlived its dropped call"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // And the executor serves on.
    assert_eq!(
        exec::run(exec.as_ref(), "echo on").await.stdout.text,
        "on\n"
    );
    exec.shutdown().await;
}
