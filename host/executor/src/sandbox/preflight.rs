//! What the machine supports, found at startup in a process of its own (the spawn helper program,
//! run with [`PROBE_ARG`]): single-threaded, so that it may create a user namespace, and
//! bounded in time, so that a kernel that hangs on a probe refuses the sandbox instead of the
//! host.
//!
//! Each probe runs in a forked child that tries what a sandboxed command's start does (a
//! Landlock ruleset, a seccomp filter, a user + mount + network namespace with a private mount
//! tree and a loopback interface brought up) and reports the first failure.

use std::io::{self, Read};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The argument (after [`crate::helper::HELPER_ARG`]) that makes the helper program probe.
pub(crate) const PROBE_ARG: &str = "--probe-sandbox";

/// How long the probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// What the machine supports, each `Err` saying why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Support {
    /// The Landlock ABI version.
    pub landlock: Result<u32, String>,
    /// seccomp filters.
    pub seccomp: Result<(), String>,
    /// A user, mount and network namespace per command.
    pub namespaces: Result<(), String>,
}

impl Support {
    fn unavailable(why: &str) -> Support {
        Support {
            landlock: Err(why.to_string()),
            seccomp: Err(why.to_string()),
            namespaces: Err(why.to_string()),
        }
    }
}

/// Runs the probe in `helper` (the spawn helper program), within [`PROBE_TIMEOUT`].
pub fn probe(helper: &Path) -> Support {
    let mut child = match Command::new(helper)
        .arg(crate::helper::HELPER_ARG)
        .arg(PROBE_ARG)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(child) => child,
        Err(err) => {
            return Support::unavailable(&format!(
                "the sandbox probe ({}) did not start: {err}",
                helper.display()
            ));
        }
    };
    let deadline = Instant::now() + PROBE_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(2)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Support::unavailable(&format!(
                    "the sandbox probe did not finish within {} s",
                    PROBE_TIMEOUT.as_secs()
                ));
            }
        }
    }
    let mut text = String::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_string(&mut text);
    }
    parse(&text)
}

fn parse(text: &str) -> Support {
    let mut support = Support::unavailable("the sandbox probe said nothing about it");
    for line in text.lines() {
        let Some((key, value)) = line.split_once(' ') else {
            continue;
        };
        let outcome = match value.strip_prefix("ok") {
            Some(rest) => Ok(rest.trim().to_string()),
            None => Err(value.to_string()),
        };
        match key {
            "landlock" => {
                support.landlock = outcome.and_then(|abi| {
                    abi.parse::<u32>()
                        .map_err(|_| format!("unreadable ABI {abi:?}"))
                })
            }
            "seccomp" => support.seccomp = outcome.map(drop),
            "namespaces" => support.namespaces = outcome.map(drop),
            _ => {}
        }
    }
    support
}

/// The probe itself, in the helper program: prints one line per feature and returns the exit
/// code.
pub(crate) fn run_probe() -> i32 {
    let landlock = match super::landlock::abi() {
        Ok(abi) => format!("ok {abi}"),
        Err(err) => format!("Landlock is not enabled in this kernel ({err})"),
    };
    let seccomp = in_child(|| {
        super::apply::no_new_privs().map_err(|e| ("prctl(PR_SET_NO_NEW_PRIVS)", e))?;
        // The commands' filter, with its listener (which the probe then closes, calling
        // nothing it notifies).
        let flags =
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER | libc::SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV;
        let filter = super::seccomp::filter(super::NetworkMode::On)
            .map_err(|e| ("the seccomp filter", io::Error::other(e)))?;
        super::apply::install_filter(&filter, flags as u32)
            .map(|fd| {
                // SAFETY: the listener's descriptor, ours.
                unsafe { libc::close(fd) };
            })
            .map_err(|e| ("seccomp(SET_MODE_FILTER, NEW_LISTENER)", e))
    });
    let namespaces = in_child(|| super::namespaces::NsSetup::new(true, true).enter());
    println!("landlock {landlock}");
    println!("seccomp {}", outcome(seccomp));
    println!("namespaces {}", outcome(namespaces));
    0
}

fn outcome(result: Result<(), String>) -> String {
    match result {
        Ok(()) => "ok".to_string(),
        Err(why) => why,
    }
}

/// Runs `probe` in a forked child; its error (the step and the OS error) comes back on a pipe.
fn in_child(probe: impl FnOnce() -> Result<(), (&'static str, io::Error)>) -> Result<(), String> {
    let (read, write) = rustix::pipe::pipe().map_err(|e| format!("pipe: {e}"))?;
    // SAFETY: this process (the probe) is single-threaded.
    match unsafe { libc::fork() } {
        -1 => Err(format!("fork: {}", io::Error::last_os_error())),
        0 => {
            drop(read);
            let code = match probe() {
                Ok(()) => 0,
                Err((step, err)) => {
                    let _ = rustix::io::write(&write, format!("{step}: {err}").as_bytes());
                    1
                }
            };
            // SAFETY: ends the probe child at once.
            unsafe { libc::_exit(code) }
        }
        pid => {
            drop(write);
            let mut message = String::new();
            let _ = std::fs::File::from(read).read_to_string(&mut message);
            let mut status = 0;
            // SAFETY: our own child.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
                Ok(())
            } else if message.is_empty() {
                Err(format!("the probe child ended with wait status {status}"))
            } else {
                Err(message)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_output_is_read_feature_by_feature() {
        let support =
            parse("landlock ok 7\nseccomp ok\nnamespaces unshare: Operation not permitted\n");
        assert_eq!(support.landlock, Ok(7));
        assert_eq!(support.seccomp, Ok(()));
        assert_eq!(
            support.namespaces,
            Err("unshare: Operation not permitted".to_string())
        );
        assert!(parse("").landlock.is_err());
    }
}
