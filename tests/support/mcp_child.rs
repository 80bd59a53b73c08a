//! A `dsh-host mcp` child whose output is read by threads: stdout as lines on a channel, stderr
//! collected as text.
//!
//! Shared through `#[path]` by the MCP tests and the sequence test.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex, PoisonError};

pub struct McpChild {
    pub child: Child,
    pub stdin: Option<ChildStdin>,
    pub lines: Receiver<String>,
    pub stderr: Arc<Mutex<String>>,
}

/// Starts `dsh-host mcp <args>` with its compiled-component cache in `cache_dir`.
pub fn spawn(args: impl IntoIterator<Item = impl AsRef<OsStr>>, cache_dir: &Path) -> McpChild {
    let mut child = Command::new(env!("CARGO_BIN_EXE_dsh-host"))
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
    }
}
