//! A lost connection to `dsh-host executor serve --stdio --reconnect-grace-ms`: the session keeps
//! running for the grace, the host's `RemoteExecutor` connects again and carries on where it
//! stopped (nothing runs twice, no byte and no task-done event is lost or delivered twice), and
//! past the grace the far side kills its tasks and the host reports them once.
//!
//! The connection runs through two `cat`s, as through an `ssh` between two machines: killing
//! them (the connection command's process group) drops the connection, and leaves the server,
//! which left that group, running.

#[path = "support/exec.rs"]
mod exec;
#[path = "support/line.rs"]
mod line;
#[path = "support/procs.rs"]
mod procs;
#[path = "support/wait.rs"]
mod wait;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_host::executor::{ExecError, Executor, RemoteExecutor, Task, TaskState};
use line::Line;
use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};
use tokio_util::sync::CancellationToken;

const BIN: &str = env!("CARGO_BIN_EXE_dsh-host");
/// Generous bound for anything that should be "prompt".
const PROMPT: Duration = Duration::from_secs(15);

fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// A served executor behind a connection the test can drop.
struct Far {
    exec: Arc<RemoteExecutor>,
    events: UnboundedReceiver<Task>,
    dir: tempfile::TempDir,
}

impl Far {
    /// A far side keeping its session `grace_ms` after a lost connection. Its session sockets
    /// go in a runtime directory of the test's own; while the file `down` exists, the
    /// connection command fails (the far machine cannot be reached).
    fn new(grace_ms: u64) -> Far {
        let dir = tempfile::tempdir().unwrap();
        let runtime = dir.path().join("run");
        std::fs::create_dir(&runtime).unwrap();
        let path = |name: &str| quoted(&dir.path().join(name).display().to_string());
        // Each run of the server's command line appends its pid: the first is the server, the
        // later ones the connections relayed to it.
        let command = format!(
            "test -e {down} && exit 1; cat | XDG_RUNTIME_DIR={runtime} sh -c 'echo $$ >> {pids}; \
             exec \"$0\" executor serve --stdio --reconnect-grace-ms={grace_ms} --grace-ms=200 \
             --timeout-ms=60000' {bin} | cat",
            down = path("down"),
            runtime = quoted(&runtime.display().to_string()),
            pids = dir.path().join("pids").display(),
            bin = quoted(BIN),
        );
        let (tx, events) = unbounded_channel();
        let exec = RemoteExecutor::connect(&command, tx).unwrap();
        Far { exec, events, dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The server's pid (the first line of `pids`).
    fn server_pid(&self) -> i32 {
        let pids = std::fs::read_to_string(self.path("pids")).unwrap();
        pids.lines().next().unwrap().trim().parse().unwrap()
    }

    /// How many times the server's command line ran (the server, then one relay per new
    /// connection).
    fn connections(&self) -> usize {
        lines_of(&self.path("pids"))
    }

    /// Kills the connection (the two `cat`s and their shell), not the server.
    fn drop_connection(&self) {
        let pid = self.exec.connection_pid().expect("a connection");
        let killed = Command::new("kill")
            .args(["-9", "--", &format!("-{pid}")])
            .status()
            .unwrap();
        assert!(killed.success());
    }

    /// While `down` exists, new connections fail.
    fn unreachable(&self, down: bool) {
        if down {
            std::fs::write(self.path("down"), "").unwrap();
        } else {
            std::fs::remove_file(self.path("down")).unwrap();
        }
    }

    /// The session sockets present in the test's runtime directory.
    fn session_sockets(&self) -> Vec<String> {
        let dir = self.path("run/dsh-host/executor-sessions");
        std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// All of a task's stdout, read until it ended.
    async fn read_to_end(&self, id: &str) -> String {
        let deadline = Instant::now() + PROMPT;
        let mut text = String::new();
        loop {
            let read = self.exec.read_output(id).unwrap();
            assert!(!read.stdout.lossy, "the window was not outgrown");
            text.push_str(&read.stdout.text);
            if read.task.state != TaskState::Running {
                return text;
            }
            assert!(Instant::now() < deadline, "{id} did not end: {text}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn no_more_events(&mut self) {
        let more = tokio::time::timeout(Duration::from_millis(500), self.events.recv()).await;
        assert!(matches!(more, Err(_) | Ok(None)), "another event: {more:?}");
    }
}

fn lines_of(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |s| s.lines().count())
}

fn numbers(n: usize) -> String {
    (1..=n).map(|i| format!("{i}\n")).collect()
}

async fn wait_until(what: &str, done: impl FnMut() -> bool) {
    wait::until(what, PROMPT, done).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_connection_is_lost_is_answered_once_it_is_taken_up_again() {
    let far = Far::new(20_000);
    let runs = far.path("runs");
    let command = format!(
        "echo start >> {runs}; sleep 1.5; echo out; echo end >> {runs}",
        runs = quoted(&runs.display().to_string())
    );
    let run = {
        let exec = far.exec.clone();
        let spec = exec::spec(exec.as_ref(), &command);
        tokio::spawn(async move { exec.run(spec, CancellationToken::new()).await })
    };
    wait_until("the command started", || lines_of(&runs) == 1).await;
    let server = far.server_pid();
    far.drop_connection();
    let result = tokio::time::timeout(PROMPT, run)
        .await
        .expect("the run is answered")
        .unwrap()
        .expect("the run succeeds");
    assert_eq!(result.stdout.text, "out\n");
    assert_eq!(result.exit_code, Some(0));
    // It ran once, on the same server, reached through a new connection.
    assert_eq!(std::fs::read_to_string(&runs).unwrap(), "start\nend\n");
    assert!(procs::alive(server));
    assert_eq!(far.connections(), 2);
    // And the session carries on.
    assert_eq!(
        exec::run(far.exec.as_ref(), "echo again").await.stdout.text,
        "again\n"
    );
    far.exec.shutdown().await;
    wait_until("the server exited", || !procs::alive(server)).await;
    assert_eq!(far.session_sockets(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_task_loses_no_byte_and_no_event_across_lost_connections() {
    let mut far = Far::new(20_000);
    let counting = exec::start(
        far.exec.as_ref(),
        "for i in $(seq 1 40); do echo $i; sleep 0.05; done",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let mut text = far.exec.read_output(&counting.id).unwrap().stdout.text;
    assert!(!text.is_empty());

    // Lost twice while it runs, read in between.
    far.drop_connection();
    tokio::time::sleep(Duration::from_millis(300)).await;
    text.push_str(&far.exec.read_output(&counting.id).unwrap().stdout.text);
    far.drop_connection();

    // A task that ends while no connection can be made: its event is sent to nobody, and
    // asked for once a connection is made again.
    let short = exec::start(far.exec.as_ref(), "sleep 0.2").await;
    far.unreachable(true);
    far.drop_connection();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    far.unreachable(false);

    text.push_str(&far.read_to_end(&counting.id).await);
    assert_eq!(text, numbers(40));
    let mut ended = [
        exec::next_event(&mut far.events).await,
        exec::next_event(&mut far.events).await,
    ];
    ended.sort_by(|a, b| a.id.cmp(&b.id));
    assert_eq!(
        ended
            .iter()
            .map(|t| (t.id.as_str(), t.state, t.exit_code))
            .collect::<Vec<_>>(),
        [
            (counting.id.as_str(), TaskState::Completed, Some(0)),
            (short.id.as_str(), TaskState::Completed, Some(0)),
        ]
    );
    far.no_more_events().await;
    assert!(far.connections() >= 4, "{}", far.connections());
    far.exec.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_grace_the_far_side_kills_its_tasks_and_the_host_reports_each_once() {
    let mut far = Far::new(1_500);
    let pid_file = far.path("task.pid");
    let task = exec::start(
        far.exec.as_ref(),
        &format!(
            "echo $$ > {}; exec sleep 60",
            quoted(&pid_file.display().to_string())
        ),
    )
    .await;
    wait_until("the task wrote its pid", || lines_of(&pid_file) == 1).await;
    let task_pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let in_flight = {
        let exec = far.exec.clone();
        let spec = exec::spec(exec.as_ref(), "sleep 60");
        tokio::spawn(async move { exec.run(spec, CancellationToken::new()).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let server = far.server_pid();
    let later = exec::spec(far.exec.as_ref(), "true");
    far.unreachable(true);
    let lost_at = Instant::now();
    far.drop_connection();

    let ended = exec::next_event(&mut far.events).await;
    assert_eq!(ended.id, task.id);
    assert_eq!(ended.state, TaskState::Lost);
    assert!(
        lost_at.elapsed() >= Duration::from_millis(1_400),
        "reported before the grace ran out: {:?}",
        lost_at.elapsed()
    );
    let err = in_flight.await.unwrap().unwrap_err();
    assert!(
        matches!(&err, ExecError::Internal(m) if m.contains("may or may not have run") && m.contains("reconnect grace")),
        "{err:?}"
    );
    // Ground truth: the far side killed the task and ended.
    wait_until("the task was killed", || !procs::alive(task_pid)).await;
    wait_until("the server exited", || !procs::alive(server)).await;
    assert_eq!(far.session_sockets(), Vec::<String>::new());
    far.no_more_events().await;
    // Nothing is retried elsewhere: a new command provably was not sent.
    far.unreachable(false);
    let err = far
        .exec
        .run(later, CancellationToken::new())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ExecError::SpawnFailed(m) if m.contains("did not start")),
        "{err:?}"
    );
    assert_eq!(
        far.connections(),
        1,
        "no connection was made after the loss"
    );
    far.exec.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// On the wire
// ---------------------------------------------------------------------------------------------

#[test]
fn a_new_connection_naming_the_session_takes_it_over_and_the_old_one_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = Line::open(dir.path(), &["--reconnect-grace-ms=20000"]);
    let welcome = first.request("hello", json!({"protocol": 1, "client": "first"}));
    let session = welcome["result"]["session"].as_str().unwrap().to_string();
    let key = welcome["result"]["resume_key"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(welcome["result"]["reconnect_grace_ms"], 20000.0);
    assert_eq!(welcome["result"]["max_line_bytes"], 512 * 1024 * 1024);
    let started = first.request(
        "start",
        json!({"request_id": "r1", "spec": {"command": "sleep 30", "workdir": dir.path(), "timeout_ms": 60000.0, "owner": null}}),
    );
    let task = started["result"]["ok"]["id"].as_str().unwrap().to_string();

    // The same command line, whose hello names the session: relayed to the first server.
    let mut second = Line::open(dir.path(), &[]);
    let resumed = second.request(
        "hello",
        json!({"protocol": 1, "client": "second", "session": session, "resume_key": key}),
    );
    assert_eq!(resumed["result"]["session"], session.as_str(), "{resumed}");
    assert!(first.closed(), "the first connection was closed");
    // The session's task, and the answer remembered for its request id.
    let got = second.request("get", json!({"task": task}));
    assert_eq!(got["result"]["ok"]["state"], "running", "{got}");
    let again = second.request(
        "start",
        json!({"request_id": "r1", "spec": {"command": "sleep 30", "workdir": dir.path(), "timeout_ms": 60000.0, "owner": null}}),
    );
    assert_eq!(again["result"], started["result"]);
    assert_eq!(
        second.request("list", Value::Null)["result"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    assert_eq!(
        second.request("shutdown", Value::Null)["result"],
        Value::Null
    );
    drop(second.stdin.take());
    assert!(second.child.wait().unwrap().success());
    assert!(first.child.wait().unwrap().success(), "the server ended");
}

#[test]
fn a_hello_naming_an_unknown_session_is_refused_and_the_connection_serves_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut line = Line::open(dir.path(), &[]);
    for session in ["0123456789abcdef01234567", "../../etc/passwd"] {
        let refused = line.request(
            "hello",
            json!({"protocol": 1, "client": "test", "session": session, "resume_key": "00"}),
        );
        assert_eq!(refused["error"]["code"], -32005, "{refused}");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("it ended, or its reconnect grace ran out"),
            "{message}"
        );
    }
    let welcome = line.request("hello", json!({"protocol": 1, "client": "test"}));
    assert_eq!(welcome["result"]["reconnect_grace_ms"], 0.0, "{welcome}");
    drop(line.stdin.take());
    assert!(line.child.wait().unwrap().success());
}

// ---------------------------------------------------------------------------------------------
// Commands hostile to the sessions directory
// ---------------------------------------------------------------------------------------------

/// A listening socket of the attacker's (this user's, as the session's commands are): what it
/// is sent goes to the file `heard`. With `forward_to`, it passes each connection on to that
/// socket both ways (a man in the middle), recording what it passes towards it.
struct Listener {
    child: std::process::Child,
    heard: PathBuf,
}

impl Listener {
    fn start(socket: &Path, heard: &Path, forward_to: Option<&Path>) -> Listener {
        let script = r#"
import socket, sys, threading
listening = socket.socket(socket.AF_UNIX)
listening.bind(sys.argv[1])
listening.listen(8)
open(sys.argv[1] + ".ready", "w").close()
def pump(a, b, log):
    while True:
        try:
            data = a.recv(65536)
        except OSError:
            data = b""
        if log is not None:
            with open(sys.argv[2], "ab") as f:
                f.write(data or b"(closed)")
        if not data:
            try:
                b.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            return
        b.sendall(data)
while True:
    c, _ = listening.accept()
    if len(sys.argv) > 3:
        far = socket.socket(socket.AF_UNIX)
        far.connect(sys.argv[3])
        threading.Thread(target=pump, args=(c, far, True), daemon=True).start()
        threading.Thread(target=pump, args=(far, c, None), daemon=True).start()
    else:
        c.settimeout(2)
        try:
            data = c.recv(65536)
        except OSError:
            data = b""
        with open(sys.argv[2], "ab") as f:
            f.write(data or b"(connected)")
        c.close()
"#;
        let mut command = Command::new("/usr/bin/python3");
        command.args(["-c", script]).arg(socket).arg(heard);
        if let Some(to) = forward_to {
            command.arg(to);
        }
        let child = command.spawn().unwrap();
        let ready = PathBuf::from(format!("{}.ready", socket.display()));
        let deadline = Instant::now() + PROMPT;
        while !ready.exists() {
            assert!(Instant::now() < deadline, "the attacker's socket listens");
            std::thread::sleep(Duration::from_millis(20));
        }
        Listener {
            child,
            heard: heard.to_path_buf(),
        }
    }

    /// What the attacker's socket was sent.
    fn heard(&self) -> String {
        std::fs::read_to_string(&self.heard).unwrap_or_default()
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A command of the session removes its session's socket, or puts a regular file, a directory,
/// a symlink to a socket of the attacker's, or the attacker's own socket in its place (the real
/// one moved aside, with or without the attacker passing connections on to it): the connection
/// serves on; once it is lost, the new connection is refused cleanly (the session is gone for
/// it), the attacker's socket is never sent the hello (nor so the resume key), and the server
/// ends at the end of its grace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_replaces_its_sessions_socket_leaves_its_connection_serving_and_a_new_one_refused()
 {
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Attacker {
        /// Listens at `evil.sock`.
        Aside,
        /// Listens under the session's own name once the command moved the real socket aside.
        InPlace,
        /// The same, passing every connection on to the real socket.
        InTheMiddle,
    }
    for (poison, attacker) in [
        ("rm -f \"$s\"", Attacker::Aside),
        ("rm -f \"$s\"; echo junk > \"$s\"", Attacker::Aside),
        ("rm -f \"$s\"; mkdir \"$s\"", Attacker::Aside),
        ("rm -f \"$s\"; ln -s \"$EVIL\" \"$s\"", Attacker::Aside),
        ("mv \"$s\" \"$s.moved\"", Attacker::InPlace),
        ("mv \"$s\" \"$s.moved\"", Attacker::InTheMiddle),
    ] {
        let case = format!("{poison} ({attacker:?})");
        let far = Far::new(2_000);
        let evil = far.path("evil.sock");
        let heard = far.path("heard");
        let server = far.server_pid();
        let sockets = far.session_sockets();
        assert_eq!(sockets.len(), 1, "{case}");
        let sessions = far.path("run/dsh-host/executor-sessions");
        let socket = sessions.join(&sockets[0]);
        let mut listener =
            (attacker == Attacker::Aside).then(|| Listener::start(&evil, &heard, None));
        let command = format!(
            "export EVIL={evil}; for s in {sessions}/*.sock; do {poison}; done; ls -l {sessions}",
            evil = quoted(&evil.display().to_string()),
            sessions = quoted(&sessions.display().to_string()),
        );
        exec::run(far.exec.as_ref(), &command).await;
        let moved = PathBuf::from(format!("{}.moved", socket.display()));
        match attacker {
            Attacker::Aside => {}
            Attacker::InPlace => listener = Some(Listener::start(&socket, &heard, None)),
            Attacker::InTheMiddle => {
                listener = Some(Listener::start(&socket, &heard, Some(&moved)));
            }
        }
        // The connection serves on.
        assert_eq!(
            exec::run(far.exec.as_ref(), "echo after").await.stdout.text,
            "after\n",
            "{case}"
        );
        let later = exec::spec(far.exec.as_ref(), "echo later");
        far.drop_connection();
        let err = far
            .exec
            .run(later, CancellationToken::new())
            .await
            .unwrap_err();
        let heard = listener.as_ref().map(Listener::heard).unwrap_or_default();
        assert!(
            !heard.contains("hello") && !heard.contains("resume_key"),
            "{case}: the attacker's socket was sent the hello: {heard}"
        );
        if attacker == Attacker::Aside {
            // Not under the session's name itself: never connected to.
            assert_eq!(heard, "", "{case}: the attacker's socket was connected to");
        }
        // Written to the lost connection or not yet (either may be told): refused, not lost
        // for want of an answer.
        assert!(
            matches!(&err, ExecError::SpawnFailed(m) | ExecError::Internal(m)
                if m.contains("its session is gone (no session")),
            "{case}: {err:?}"
        );
        // Ground truth: the server ended once its grace ran out (no connection took the
        // session up), and nothing more reached the attacker's socket.
        wait_until("the server exited", || !procs::alive(server)).await;
        let after = listener.as_ref().map(Listener::heard).unwrap_or_default();
        assert!(!after.contains("hello"), "{case}: {after}");
        far.exec.shutdown().await;
    }
}

/// A command fills the sessions directory with junk named like sessions (regular files, a
/// directory, a FIFO, symlinks to the attacker's socket and to `/dev/null`): hellos naming them
/// are refused cleanly (no such session) and the attacker's socket hears nothing; the session's
/// own socket still takes a lost connection up, and a run in flight is answered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn junk_named_like_sessions_is_never_relayed_to_and_the_session_is_still_taken_up() {
    let far = Far::new(20_000);
    let evil = far.path("evil.sock");
    let listener = Listener::start(&evil, &far.path("heard"), None);
    let sessions = far.path("run/dsh-host/executor-sessions");
    let junk = [
        ("aaaaaaaaaaaaaaaaaaaaaaa1", "echo junk > \"$d/$n.sock\""),
        ("aaaaaaaaaaaaaaaaaaaaaaa2", "mkdir \"$d/$n.sock\""),
        ("aaaaaaaaaaaaaaaaaaaaaaa3", "mkfifo \"$d/$n.sock\""),
        ("aaaaaaaaaaaaaaaaaaaaaaa4", "ln -s \"$EVIL\" \"$d/$n.sock\""),
        ("aaaaaaaaaaaaaaaaaaaaaaa5", "ln -s /dev/null \"$d/$n.sock\""),
    ];
    let mut command = format!(
        "export EVIL={evil} d={sessions}",
        evil = quoted(&evil.display().to_string()),
        sessions = quoted(&sessions.display().to_string()),
    );
    for (name, make) in junk {
        command += &format!("\nn={name}; {make}");
        // And a hello naming it, through the relay, as a reconnecting client would say it.
        command += &format!(
            "\nprintf '%s\\n' '{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"hello\",\"params\":\
             {{\"protocol\":1,\"session\":\"{name}\",\"resume_key\":\"{key}\"}}}}' | timeout 20 \
             {bin} executor serve --stdio",
            key = "0".repeat(64),
            bin = quoted(BIN),
        );
    }
    let out = exec::run(far.exec.as_ref(), &command).await;
    let refusals = out
        .stdout
        .text
        .lines()
        .filter(|line| line.contains("\"code\":-32005"))
        .count();
    assert_eq!(refusals, junk.len(), "{out:?}");
    assert_eq!(far.session_sockets().len(), 1 + junk.len());

    // The session is still taken up through its own socket.
    let runs = far.path("runs");
    let in_flight = {
        let exec = far.exec.clone();
        let spec = exec::spec(
            exec.as_ref(),
            &format!(
                "echo start >> {runs}; sleep 1; echo out",
                runs = quoted(&runs.display().to_string())
            ),
        );
        tokio::spawn(async move { exec.run(spec, CancellationToken::new()).await })
    };
    wait_until("the command started", || lines_of(&runs) == 1).await;
    far.drop_connection();
    let result = tokio::time::timeout(PROMPT, in_flight)
        .await
        .expect("the run is answered")
        .unwrap()
        .expect("the run succeeds");
    assert_eq!(result.stdout.text, "out\n");
    assert_eq!(lines_of(&runs), 1, "it ran once");
    assert_eq!(far.connections(), 2);
    assert_eq!(listener.heard(), "", "the attacker's socket was sent this");
    far.exec.shutdown().await;
}

/// A client that never acknowledges a task-done event, while many background tasks end, is
/// still answered at once; the events kept for it are at most the protocol's bound (checked
/// at the bound itself by the session's unit tests).
#[test]
fn events_never_acknowledged_do_not_hold_up_the_next_command() {
    const TASKS: usize = 200;
    let dir = tempfile::tempdir().unwrap();
    let mut line = Line::open(dir.path(), &["--reconnect-grace-ms=20000"]);
    line.request("hello", json!({"protocol": 1, "client": "flood"}));
    for i in 0..TASKS {
        let started = line.request(
            "start",
            json!({"request_id": format!("t{i}"), "spec": {"command": "true",
                "workdir": dir.path(), "timeout_ms": 60000.0, "owner": null}}),
        );
        assert!(started["result"]["ok"]["id"].is_string(), "{started}");
    }
    let deadline = Instant::now() + PROMPT;
    let events = loop {
        let events = line.request("events", json!({"cursor": 0}));
        let events = events["result"].as_array().unwrap().clone();
        if events.len() == TASKS || Instant::now() > deadline {
            break events;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        events.len(),
        TASKS,
        "every event is kept until acknowledged"
    );
    // Answered (the line client waits a bounded time), not held up behind the events.
    let ran = line.request(
        "run",
        json!({"request_id": "next", "spec": {"command": "echo next", "workdir": dir.path(),
            "timeout_ms": 60000.0, "owner": null}}),
    );
    assert_eq!(ran["result"]["ok"]["stdout"]["text"], "next\n", "{ran}");
    assert_eq!(line.request("shutdown", Value::Null)["result"], Value::Null);
    assert!(line.end().success());
}
