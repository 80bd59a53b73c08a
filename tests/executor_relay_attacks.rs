//! Attacks on the sessions `dsh-host executor serve --stdio --reconnect-grace-ms` keeps for a new
//! connection, made by the commands those sessions run: a session's name is on disk (its
//! socket's), so it must not be what takes a session over; and a sandboxed command must not
//! reach the sessions directory, wherever the host put it.
//!
//! Each attack is run through the real binary: a command of a session lists the sessions
//! directory and says `hello` naming what it found through `dsh-host executor serve --stdio`, as
//! a reconnecting client does.

#[path = "support/line.rs"]
mod line;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use line::{BIN, Line};
use serde_json::{Value, json};

fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn path_text(path: &Path) -> String {
    quoted(&path.display().to_string())
}

/// A `run` request's parameters.
fn run_params(request_id: &str, command: &str, workdir: &Path) -> Value {
    json!({"request_id": request_id, "spec": {"command": command, "workdir": workdir,
        "timeout_ms": 60000.0, "owner": null}})
}

/// The stdout of a `run` answer that succeeded.
fn stdout_of(answer: &Value) -> String {
    answer["result"]["ok"]["stdout"]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("a run answered: {answer}"))
        .to_string()
}

/// A shell command that says, through `dsh-host executor serve --stdio` (with `env` before it),
/// a `hello` naming `session` (with `key` spliced into its parameters, e.g. `"resume_key":"…",`)
/// and then asks for `list`; the answers go to stdout.
fn hello_through_relay(env: &str, session: &str, key: &str) -> String {
    let lines = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"hello\",\"params\":{{{key}\"protocol\":1,\
         \"client\":\"attacker\",\"session\":\"{session}\"}}}}\n{{\"jsonrpc\":\"2.0\",\"id\":2,\
         \"method\":\"list\"}}\n"
    );
    format!(
        "printf '%s' {lines} | {env} timeout 20 {bin} executor serve --stdio",
        lines = quoted(&lines),
        bin = quoted(BIN)
    )
}

/// The answers in `text` (one JSON object per line), by id: each answer's error code, or 0 for
/// a result.
fn answer_codes(text: &str) -> Vec<(u64, i64)> {
    text.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|answer| {
            let id = answer["id"].as_u64()?;
            Some((id, answer["error"]["code"].as_i64().unwrap_or(0)))
        })
        .collect()
}

/// A session's hello answer: its name and resume key (empty if none was given: checked where
/// it matters).
fn welcome(line: &mut Line, client: &str) -> (String, String) {
    let welcome = line.request("hello", json!({"protocol": 1, "client": client}));
    let result = &welcome["result"];
    let session = result["session"].as_str().unwrap().to_string();
    let key = result["resume_key"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    (session, key)
}

#[test]
fn a_command_that_lists_the_sessions_and_names_one_in_a_hello_takes_none_over() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = dir.path().join("run");
    std::fs::create_dir(&runtime).unwrap();
    let sessions = runtime.join("dsh-host/executor-sessions");
    let mut mine = Line::open(&runtime, &["--reconnect-grace-ms=20000"]);
    let (session, key) = welcome(&mut mine, "mine");
    let mut other = Line::open(&runtime, &["--reconnect-grace-ms=20000"]);
    let (other_session, _) = welcome(&mut other, "other");
    let on_disk: Vec<String> = std::fs::read_dir(&sessions)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(on_disk.len(), 2, "{on_disk:?}");
    let started = mine.request(
        "start",
        json!({"request_id": "r1", "spec": {"command": "sleep 30", "workdir": dir.path(),
            "timeout_ms": 60000.0, "owner": null}}),
    );
    let task = started["result"]["ok"]["id"].as_str().unwrap().to_string();

    // A command of the session finds every session and names each in a hello through the
    // relay: without a key, and with one made up; and straight to the socket, with one made up.
    let env = format!("XDG_RUNTIME_DIR={}", path_text(&runtime));
    let zeros = "0".repeat(64);
    let made_up = format!("\"resume_key\":\"{zeros}\",");
    let attack = format!(
        "cd {sessions} || exit 9\nfor s in *.sock; do n=${{s%.sock}}\n{bare}\n{guessed}\n\
         /usr/bin/python3 -c {connect} \"$s\" \"$n\" {zeros}\ndone",
        sessions = path_text(&sessions),
        bare = hello_through_relay(&env, "$n", ""),
        guessed = hello_through_relay(&env, "$n", &made_up),
        connect = quoted(CONNECT),
    )
    .replace("\"session\":\"$n\"", "\"session\":\"'\"$n\"'\"");
    let answer = mine
        .request_within(
            "run",
            run_params("attack", &attack, dir.path()),
            Duration::from_secs(40),
        )
        .unwrap_or_else(|why| {
            panic!("the session's own connection got no answer to the attacking run: {why}")
        });
    let out = stdout_of(&answer);
    // Each hello was refused, and nothing was served to the attacker: without a key by the
    // session's server (-32006), with a made-up one by the relay (-32005: the socket's server
    // could not prove itself with that key, so the hello was not passed on), and straight to
    // the socket by the session's server (-32006).
    assert_eq!(
        answer_codes(&out),
        [(1, -32006), (2, -32002), (1, -32005), (2, -32002)].repeat(2),
        "{out}"
    );
    assert!(out.contains("resume_key is missing"), "{out}");
    let direct: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("connected:"))
        .collect();
    assert_eq!(direct.len(), 2, "{out}");
    assert!(
        direct
            .iter()
            .all(|l| l.contains("-32006") && l.contains("resume_key is not the session's")),
        "{out}"
    );
    assert!(
        out.contains(&session) && out.contains(&other_session),
        "{out}"
    );

    // Ground truth: both sessions stay with their own connections, which serve on.
    let got = mine.request("get", json!({"task": task}));
    assert_eq!(got["result"]["ok"]["state"], "running", "{got}");
    let listed = other.request("list", Value::Null);
    assert_eq!(listed["result"], json!([]), "{listed}");
    let again = mine.request("run", run_params("after", "echo still mine", dir.path()));
    assert_eq!(stdout_of(&again), "still mine\n");

    // The key: 256 random bits, apart from the name, and nowhere on disk.
    assert_eq!(key.len(), 64, "{key}");
    assert!(key.bytes().all(|b| b.is_ascii_hexdigit()), "{key}");
    assert!(
        on_disk.iter().all(|name| !name.contains(&key)),
        "{on_disk:?}"
    );
    // The key, and only the key, takes the session over.
    let mut taker = Line::open(&runtime, &[]);
    let resumed = taker.request(
        "hello",
        json!({"protocol": 1, "client": "taker", "session": session, "resume_key": key}),
    );
    assert_eq!(resumed["result"]["session"], session.as_str(), "{resumed}");
    assert!(mine.closed(), "the connection it was taken from was closed");
    for line in [&mut taker, &mut other] {
        assert_eq!(line.request("shutdown", Value::Null)["result"], Value::Null);
    }
    assert!(taker.end().success());
    assert!(other.end().success());
    assert!(mine.child.wait().unwrap().success());
}

// ---------------------------------------------------------------------------------------------
// Sandboxed commands
// ---------------------------------------------------------------------------------------------

/// Where the host finds its runtime directory (and so the sessions directory).
#[derive(Debug, Clone, Copy)]
enum Location {
    /// `$XDG_RUNTIME_DIR/dsh-host`.
    Xdg,
    /// No `XDG_RUNTIME_DIR`: the cache directory, `~/.cache/dsh-host`.
    HomeCache,
    /// No `XDG_RUNTIME_DIR`, the cache moved: `$DSH_CACHE_DIR`.
    MovedCache,
    /// No `XDG_RUNTIME_DIR`, no cache (`DSH_CACHE_DIR=`): a per-user directory of the system's.
    NoCache,
}

/// A served session in `location`, sandboxed with `flags`, and where its socket is.
struct Sandboxed {
    line: Line,
    base: tempfile::TempDir,
    session: String,
    sessions: PathBuf,
    /// What a command needs in its environment to find the same sessions directory.
    env: String,
}

impl Sandboxed {
    fn start(location: Location, flags: &[&str]) -> Sandboxed {
        // Short (a socket's path is at most 107 bytes), and not under /tmp, which
        // workspace-write makes writable.
        let base = tempfile::Builder::new()
            .prefix("dsh-relay-")
            .tempdir_in("/var/tmp")
            .unwrap();
        let home = base.path().join("home");
        let work = base.path().join("work");
        let run = base.path().join("run");
        for dir in [&home, &work, &run] {
            std::fs::create_dir_all(dir).unwrap();
        }
        let mut command = Command::new(BIN);
        command
            .args(["executor", "serve", "--stdio", "--reconnect-grace-ms=20000"])
            .args(flags)
            .arg("--cwd")
            .arg(&work)
            .current_dir(&work)
            .env("HOME", &home)
            .env_remove("XDG_RUNTIME_DIR")
            .env_remove("XDG_CACHE_HOME")
            .env_remove("DSH_CACHE_DIR")
            .env_remove("DSH_LOG");
        let mut env = format!("HOME={}", path_text(&home));
        match location {
            Location::Xdg => {
                command.env("XDG_RUNTIME_DIR", &run);
                env += &format!(" XDG_RUNTIME_DIR={}", path_text(&run));
            }
            Location::HomeCache => {}
            Location::MovedCache => {
                let cache = base.path().join("cache");
                command.env("DSH_CACHE_DIR", &cache);
                env += &format!(" DSH_CACHE_DIR={}", path_text(&cache));
            }
            Location::NoCache => {
                command.env("DSH_CACHE_DIR", "");
                env += " DSH_CACHE_DIR=";
            }
        }
        let mut line = Line::spawn(command);
        let (session, key) = welcome(&mut line, "sandboxed");
        assert_eq!(
            key.len(),
            64,
            "a session kept for reconnection has a resume key"
        );
        let uid = rustix::process::geteuid().as_raw();
        let candidates = match location {
            Location::Xdg => vec![run.join("dsh-host")],
            Location::HomeCache => vec![home.join(".cache/dsh-host")],
            Location::MovedCache => vec![base.path().join("cache")],
            Location::NoCache => vec![
                PathBuf::from(format!("/var/tmp/dsh-host-{uid}")),
                std::env::temp_dir().join(format!("dsh-host-{uid}")),
            ],
        };
        let sessions = candidates
            .iter()
            .map(|dir| dir.join("executor-sessions"))
            .find(|dir| dir.join(format!("{session}.sock")).exists())
            .unwrap_or_else(|| panic!("the session's socket is in none of {candidates:?}"));
        Sandboxed {
            line,
            base,
            session,
            sessions,
            env,
        }
    }

    fn work(&self) -> PathBuf {
        self.base.path().join("work")
    }
}

/// Connects to the socket `$1` and says hello naming session `$2` with its resume key `$3`;
/// prints what happened.
const CONNECT: &str = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print("connect failed:", e.strerror)
    sys.exit(0)
hello = '{"jsonrpc":"2.0","id":1,"method":"hello","params":{"protocol":1,"session":"%s","resume_key":"%s"}}\n'
s.sendall((hello % (sys.argv[2], sys.argv[3])).encode())
s.settimeout(10)
print("connected:", s.recv(65536).decode().strip())
"#;

/// A sandboxed command of the session cannot take it over, wherever the host put the sessions
/// directory. In the namespace tier it can neither list the directory nor connect to a socket in
/// it (hidden); in the Landlock tier, which cannot keep names from being listed nor a socket
/// known by name from being connected to (before Landlock ABI 9), its hello is refused for want
/// of the key. Either way the session serves on, with its own connection.
fn sandboxed_commands_cannot_reach_the_sessions(location: Location) {
    for tier in ["namespaces", "landlock"] {
        for mode in ["workspace-write", "read-only"] {
            let case = format!("{location:?}, {mode}, {tier}");
            let mut served =
                Sandboxed::start(location, &["--sandbox", mode, "--sandbox-tier", tier]);
            let sock = served.sessions.join(format!("{}.sock", served.session));
            // A file of the host's in its runtime directory, as its generated HTTP token is.
            let planted = served
                .sessions
                .parent()
                .unwrap()
                .join(format!("planted-{}", served.session));
            std::fs::write(&planted, "PLANTED-TOKEN").unwrap();
            let made_up = "0".repeat(64);
            let command = format!(
                "cat {planted}; echo \"cat: $?\"\n\
                 ls -a {dir}; echo \"ls: $?\"\n\
                 /usr/bin/python3 -c {connect} {sock} {session} {made_up}\n{relay}",
                dir = path_text(&served.sessions),
                planted = path_text(&planted),
                connect = quoted(CONNECT),
                sock = path_text(&sock),
                session = served.session,
                relay = hello_through_relay(
                    &served.env,
                    &served.session,
                    &format!("\"resume_key\":\"{made_up}\",")
                ),
            );
            let work = served.work();
            let answer = served
                .line
                .request("run", run_params("probe", &command, &work));
            let out = stdout_of(&answer);
            let err = answer["result"]["ok"]["stderr"]["text"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let both = format!("{case}\nstdout:\n{out}\nstderr:\n{err}\nanswer: {answer}");
            std::fs::remove_file(&planted).unwrap();
            // The runtime directory's files are not read: hidden, or denied and reported.
            assert!(!out.contains("PLANTED-TOKEN"), "{both}");
            assert!(out.contains("cat: 1"), "{both}");
            if tier == "landlock" {
                assert!(err.contains("Permission denied"), "{both}");
                let denials = answer["result"]["ok"]["denials"]["first"].to_string();
                assert!(
                    denials.contains(&format!(
                        "{{\"access\":\"read\",\"target\":\"{}\"",
                        planted.display()
                    )),
                    "{both}"
                );
            }
            if tier == "namespaces" {
                // Not listed, not connected to, directly or through the relay (which finds no
                // sessions directory, serves a session of its own and knows no such session).
                let listing = out.split("ls: ").next().unwrap();
                assert!(out.contains("ls: 2"), "{both}");
                assert!(!listing.contains(&served.session), "{both}");
                assert!(out.contains("connect failed"), "{both}");
                assert!(!out.contains("connected:"), "{both}");
                assert_eq!(answer_codes(&out), [(1, -32005), (2, -32002)], "{both}");
            } else {
                // Connected to: refused for the key by the session's server, straight on the
                // socket; through the relay, refused by the relay (the socket's server could not
                // prove itself with that key).
                assert!(out.contains("connected:"), "{both}");
                let direct = out.lines().find(|l| l.starts_with("connected:")).unwrap();
                assert!(direct.contains("-32006"), "{both}");
                assert_eq!(answer_codes(&out), [(1, -32005), (2, -32002)], "{both}");
            }
            // The session is still its connection's, which serves on.
            let after = served
                .line
                .request("run", run_params("after", "echo on", &work));
            assert_eq!(stdout_of(&after), "on\n", "{case}");
            assert_eq!(
                served.line.request("shutdown", Value::Null)["result"],
                Value::Null
            );
            assert!(served.line.end().success(), "{case}");
            assert!(!sock.exists(), "{case}: the socket outlived its session");
        }
    }
}

#[test]
fn sandboxed_commands_cannot_reach_sessions_under_xdg_runtime_dir() {
    sandboxed_commands_cannot_reach_the_sessions(Location::Xdg);
}

#[test]
fn sandboxed_commands_cannot_reach_sessions_in_the_home_cache() {
    sandboxed_commands_cannot_reach_the_sessions(Location::HomeCache);
}

#[test]
fn sandboxed_commands_cannot_reach_sessions_in_a_moved_cache() {
    sandboxed_commands_cannot_reach_the_sessions(Location::MovedCache);
}

#[test]
fn sandboxed_commands_cannot_reach_sessions_without_a_cache() {
    sandboxed_commands_cannot_reach_the_sessions(Location::NoCache);
}

/// A connection to a session's socket that ends without a hello, before the session's own
/// client said hello, or while its connection is lost, does not end the session.
#[test]
fn a_connection_to_the_socket_that_ends_unanswered_does_not_end_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = dir.path().join("run");
    std::fs::create_dir(&runtime).unwrap();
    let sessions = runtime.join("dsh-host/executor-sessions");
    let mut mine = Line::open(&runtime, &["--reconnect-grace-ms=20000"]);
    let socket = || {
        let deadline = std::time::Instant::now() + line::ANSWER;
        loop {
            let found = std::fs::read_dir(&sessions).ok().and_then(|entries| {
                entries
                    .flatten()
                    .map(|e| e.path())
                    .find(|p| p.extension().is_some_and(|x| x == "sock"))
            });
            if let Some(found) = found {
                return found;
            }
            assert!(std::time::Instant::now() < deadline, "no session socket");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    // Before the session's client said hello (its first line was another request, refused):
    // connected to, and closed.
    let early = mine.request("list", Value::Null);
    assert_eq!(early["error"]["code"], -32002, "{early}");
    let sock = socket();
    drop(std::os::unix::net::UnixStream::connect(&sock).unwrap());
    std::thread::sleep(Duration::from_millis(300));
    let (session, key) = welcome(&mut mine, "mine");
    assert!(!key.is_empty());
    let echoed = mine.request("run", run_params("r1", "echo here", dir.path()));
    assert_eq!(stdout_of(&echoed), "here\n");
    // While its connection is lost: the same.
    drop(mine.stdin.take());
    assert!(mine.closed(), "the session's connection ended");
    drop(std::os::unix::net::UnixStream::connect(&sock).unwrap());
    std::thread::sleep(Duration::from_millis(300));
    let mut back = Line::open(&runtime, &[]);
    let resumed = back.request(
        "hello",
        json!({"protocol": 1, "client": "back", "session": session, "resume_key": key}),
    );
    assert_eq!(resumed["result"]["session"], session.as_str(), "{resumed}");
    // The same session: the run's answer is remembered, not run again.
    let again = back.request("run", run_params("r1", "echo twice", dir.path()));
    assert_eq!(again["result"], echoed["result"]);
    assert_eq!(back.request("shutdown", Value::Null)["result"], Value::Null);
    assert!(back.end().success());
    assert!(mine.child.wait().unwrap().success(), "the server ended");
}

/// Connections to a session's socket that never say `hello`, opened by the hundred, exhaust
/// nothing of the session's: past a few, each is closed at once, and the session's own
/// connection is served throughout, then resumes through the socket with its key.
#[test]
fn connections_to_the_socket_that_never_say_hello_are_bounded() {
    use std::io::Read;
    let dir = tempfile::tempdir().unwrap();
    let runtime = dir.path().join("run");
    std::fs::create_dir(&runtime).unwrap();
    let mut mine = Line::open(&runtime, &["--reconnect-grace-ms=20000"]);
    let (session, key) = welcome(&mut mine, "mine");
    let sock = runtime
        .join("dsh-host/executor-sessions")
        .join(format!("{session}.sock"));
    let mut silent: Vec<std::os::unix::net::UnixStream> = (0..200)
        .map(|_| std::os::unix::net::UnixStream::connect(&sock).unwrap())
        .collect();
    let echoed = mine.request("run", run_params("r1", "echo served", dir.path()));
    assert_eq!(stdout_of(&echoed), "served\n");
    // Most were closed by the session's server as soon as it took them.
    let mut closed = 0;
    for stream in &mut silent {
        stream
            .set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        if matches!(stream.read(&mut [0u8; 16]), Ok(0)) {
            closed += 1;
        }
    }
    assert!(
        closed >= 180,
        "only {closed} of 200 silent connections were closed"
    );
    drop(mine.stdin.take());
    assert!(mine.closed(), "the session's connection ended");
    let mut back = Line::open(&runtime, &[]);
    let resumed = back.request(
        "hello",
        json!({"protocol": 1, "client": "back", "session": session, "resume_key": key}),
    );
    assert_eq!(resumed["result"]["session"], session.as_str(), "{resumed}");
    assert_eq!(back.request("shutdown", Value::Null)["result"], Value::Null);
    assert!(back.end().success());
    drop(silent);
}

/// A `hello` naming a session without its key is refused by the server it reached, never
/// relayed: what listens under a session's name is not asked (it could answer anything).
#[test]
fn a_hello_without_a_key_is_never_relayed() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = dir.path().join("run");
    let sessions = runtime.join("dsh-host/executor-sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    use std::os::unix::fs::PermissionsExt;
    for d in [runtime.join("dsh-host"), sessions.clone()] {
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    let planted = std::os::unix::net::UnixListener::bind(sessions.join("00ff.sock")).unwrap();
    planted.set_nonblocking(true).unwrap();
    let mut line = Line::open(&runtime, &[]);
    let answer = line.request(
        "hello",
        json!({"protocol": 1, "client": "keyless", "session": "00ff"}),
    );
    assert_eq!(answer["error"]["code"], -32006, "{answer}");
    assert!(
        planted.accept().is_err(),
        "the planted socket was connected to"
    );
    assert!(line.end().success());
}
