//! A `dsh-host mcp` child speaking newline-delimited JSON-RPC: stdout read by a thread into a
//! channel of lines, stderr collected as text, messages not yet asked for kept in a stash. Every
//! step answers with a `Result`, so that a test can panic and a soak can record a violation.
//!
//! Shared through `#[path]` by the MCP tests and the sequence test.

use std::collections::VecDeque;
use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError, channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub struct McpChild {
    pub child: Child,
    pub stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
    /// Messages read while waiting for another one, in arrival order.
    pub stash: VecDeque<Value>,
    next_id: i64,
}

/// Starts `dsh-host mcp <args>` with its compiled-component cache in `cache_dir`.
pub fn spawn(args: impl IntoIterator<Item = impl AsRef<OsStr>>, cache_dir: &Path) -> McpChild {
    spawn_with(args, cache_dir, |_| {})
}

/// [`spawn`], with `configure` applied to the command first (a process group, say).
pub fn spawn_with(
    args: impl IntoIterator<Item = impl AsRef<OsStr>>,
    cache_dir: &Path,
    configure: impl FnOnce(&mut Command),
) -> McpChild {
    let mut command = Command::new(env!("CARGO_BIN_EXE_dsh-host"));
    configure(&mut command);
    let mut child = command
        .arg("mcp")
        .args(args)
        .env("DSH_CACHE_DIR", cache_dir)
        .env("DSH_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("dsh-host starts");
    let stdin = child.stdin.take();
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, lines) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let stderr = Arc::new(Mutex::new(String::new()));
    let sink = stderr.clone();
    let mut err = child.stderr.take().expect("piped stderr");
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = std::io::Read::read(&mut err, &mut buf) {
            if n == 0 {
                break;
            }
            sink.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    McpChild {
        child,
        stdin,
        lines,
        stderr,
        stash: VecDeque::new(),
        next_id: 1,
    }
}

impl McpChild {
    /// Everything the server wrote on stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub fn send_line(&mut self, line: &str) -> Result<(), String> {
        let stdin = self.stdin.as_mut().ok_or("stdin closed")?;
        writeln!(stdin, "{line}")
            .and_then(|()| stdin.flush())
            .map_err(|e| format!("write to dsh-host: {e}"))
    }

    /// Sends a request; its id.
    pub fn request(&mut self, method: &str, params: Value) -> Result<i64, String> {
        let id = self.next_id;
        self.next_id += 1;
        let message = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        self.send_line(&message.to_string())?;
        Ok(id)
    }

    pub fn notify(&mut self, method: &str, params: Value) -> Result<(), String> {
        self.send_line(&json!({ "jsonrpc": "2.0", "method": method, "params": params }).to_string())
    }

    /// The next message from stdout (not the stash), `None` if none came within `timeout`.
    pub fn next_message(&mut self, timeout: Duration) -> Result<Option<Value>, String> {
        match self.lines.recv_timeout(timeout) {
            Ok(line) => parse(&line).map(Some),
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => Err(self.closed()),
        }
    }

    /// The first message, stashed or new, that `matches`; the others are stashed.
    pub fn find(
        &mut self,
        timeout: Duration,
        what: &str,
        matches: impl Fn(&Value) -> bool,
    ) -> Result<Value, String> {
        if let Some(i) = self.stash.iter().position(&matches) {
            return Ok(self.stash.remove(i).expect("position is in range"));
        }
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(message) = self.next_message(left)? else {
                return Err(format!(
                    "no {what} within {timeout:?}; stashed: {:?}; stderr:\n{}",
                    self.stash,
                    self.stderr()
                ));
            };
            if matches(&message) {
                return Ok(message);
            }
            self.stash.push_back(message);
        }
    }

    /// The response (result or error) to request `id`.
    pub fn response(&mut self, id: i64, timeout: Duration) -> Result<Value, String> {
        self.find(timeout, &format!("response to request {id}"), |m| {
            m.get("id") == Some(&json!(id)) && m.get("method").is_none()
        })
    }

    /// Moves the messages that have arrived into the stash, without waiting.
    pub fn stash_arrived(&mut self) -> Result<(), String> {
        loop {
            match self.lines.try_recv() {
                Ok(line) => self.stash.push_back(parse(&line)?),
                Err(TryRecvError::Empty) => return Ok(()),
                Err(TryRecvError::Disconnected) => return Err(self.closed()),
            }
        }
    }

    fn closed(&self) -> String {
        format!(
            "dsh-host closed its stdout; stashed: {:?}; stderr:\n{}",
            self.stash,
            self.stderr()
        )
    }
}

impl Drop for McpChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn parse(line: &str) -> Result<Value, String> {
    serde_json::from_str(line).map_err(|e| format!("stdout line is not JSON ({e}): {line}"))
}
