//! A connection to `dsh-host executor serve --stdio`, spoken to line by line, as a client of the
//! executor protocol would (`docs/executor-protocol.md`).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub const BIN: &str = env!("CARGO_BIN_EXE_dsh-host");

/// How long an answer may take.
pub const ANSWER: Duration = Duration::from_secs(15);

pub struct Line {
    pub child: std::process::Child,
    pub stdin: Option<std::process::ChildStdin>,
    lines: Receiver<Value>,
    /// Notifications that arrived while waiting for an answer.
    pub notifications: Vec<Value>,
    next_id: u64,
}

impl Line {
    /// `dsh-host executor serve --stdio` with `flags`.
    pub fn start(flags: &[&str]) -> Line {
        let mut command = Command::new(BIN);
        command.args(["executor", "serve", "--stdio"]).args(flags);
        Line::spawn(command)
    }

    /// [`Line::start`], and said hello.
    pub fn greeted(flags: &[&str]) -> Line {
        let mut line = Line::start(flags);
        let welcome = line.request("hello", json!({"protocol": 1, "client": "test"}));
        assert_eq!(welcome["result"]["protocol"], 1, "{welcome}");
        line
    }

    /// `dsh-host executor serve --stdio` with `flags`, its runtime directory `runtime`
    /// (`XDG_RUNTIME_DIR`).
    pub fn open(runtime: &Path, flags: &[&str]) -> Line {
        let mut command = Command::new(BIN);
        command
            .args(["executor", "serve", "--stdio"])
            .args(flags)
            .env("XDG_RUNTIME_DIR", runtime);
        Line::spawn(command)
    }

    /// `command`, its stdin and stdout the connection (stderr inherited).
    pub fn spawn(mut command: Command) -> Line {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                let value = serde_json::from_str(&line).unwrap_or_else(|e| {
                    panic!("the server wrote a line that is not JSON ({e}): {line}")
                });
                if tx.send(value).is_err() {
                    return;
                }
            }
        });
        Line {
            stdin: child.stdin.take(),
            child,
            lines,
            notifications: Vec::new(),
            next_id: 0,
        }
    }

    /// Writes `line` and its newline.
    pub fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// Sends a request; returns its JSON-RPC id.
    pub fn send(&mut self, method: &str, params: Value) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send_line(&line.to_string());
        id
    }

    /// The next message that is not a notification (those are kept in `notifications`).
    pub fn next_answer(&mut self) -> Value {
        loop {
            let msg = match self.lines.recv_timeout(ANSWER) {
                Ok(msg) => msg,
                Err(RecvTimeoutError::Timeout) => panic!("no answer in time"),
                Err(RecvTimeoutError::Disconnected) => panic!("the server closed its output"),
            };
            if msg.get("method").is_some() {
                self.notifications.push(msg);
            } else {
                return msg;
            }
        }
    }

    /// The answer to request `id` (another that arrives first is an error).
    pub fn answer_to(&mut self, id: u64) -> Value {
        let msg = self.next_answer();
        assert_eq!(msg["id"], id, "{msg}");
        msg
    }

    /// Waits until `n` notifications arrived.
    pub fn wait_for_events(&mut self, n: usize) {
        let deadline = Instant::now() + ANSWER;
        while self.notifications.len() < n {
            assert!(Instant::now() < deadline, "{:?}", self.notifications);
            match self.lines.recv_timeout(Duration::from_millis(50)) {
                Ok(msg) if msg.get("method").is_some() => self.notifications.push(msg),
                Ok(msg) => panic!("an unexpected answer: {msg}"),
                Err(_) => {}
            }
        }
    }

    /// Ends the connection and checks the server ended well.
    pub fn stop(self) {
        let status = self.end();
        assert!(status.success(), "the server ended with {status}");
    }

    /// Sends a request and returns its answer (notifications before it are skipped).
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        self.request_within(method, params, ANSWER)
            .unwrap_or_else(|why| panic!("no answer to {method}: {why}"))
    }

    /// Sends a request and waits `within` for its answer; the error says why there is none.
    pub fn request_within(
        &mut self,
        method: &str,
        params: Value,
        within: Duration,
    ) -> Result<Value, String> {
        self.next_id += 1;
        let line =
            json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params});
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").map_err(|err| format!("cannot write: {err}"))?;
        stdin
            .flush()
            .map_err(|err| format!("cannot write: {err}"))?;
        loop {
            let msg = self.lines.recv_timeout(within).map_err(|err| match err {
                RecvTimeoutError::Timeout => format!("none within {within:?}"),
                RecvTimeoutError::Disconnected => "the connection was closed".to_string(),
            })?;
            if msg.get("method").is_some() {
                self.notifications.push(msg);
            } else {
                assert_eq!(msg["id"], self.next_id, "{msg}");
                return Ok(msg);
            }
        }
    }

    /// Whether the server closed this connection's output within a moment.
    pub fn closed(&self) -> bool {
        self.closed_within(ANSWER)
    }

    /// Whether the server closed this connection's output within `within`.
    pub fn closed_within(&self, within: Duration) -> bool {
        loop {
            match self.lines.recv_timeout(within) {
                Ok(msg) if msg.get("method").is_some() => continue,
                Ok(msg) => panic!("an unexpected answer: {msg}"),
                Err(RecvTimeoutError::Disconnected) => return true,
                Err(RecvTimeoutError::Timeout) => return false,
            }
        }
    }

    /// Ends the connection (the end of the server's input) and waits for the process.
    pub fn end(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        self.child.wait().unwrap()
    }
}
