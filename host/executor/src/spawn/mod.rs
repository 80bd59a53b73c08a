//! Starting one command on a fresh spawn helper ([`crate::helper`]) and following it:
//! host → helper (forked by the factory, inside the command's cgroup in cgroup mode; bash's
//! `$PPID`) → bash (leader of its own session).
//!
//! Nothing here blocks: the request goes out on a non-blocking socket, the outcome and the
//! helper's reports are awaited. A start is never retried, so a command runs at most once; it is
//! reported as not started only when that is certain (the helper refused the workdir, or bash's
//! `exec` or the steps before it failed, as the outcome pipe says).

pub(crate) mod fair;
pub(crate) mod launcher;

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::Duration;

use rustix::pipe::PipeFlags;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe::Receiver;
use tokio::sync::oneshot;

use crate::containment::process::{Exit, ProcTree};
use crate::protocol::{self, Report, Step};
use crate::sandbox::log::DenialLog;
use crate::sandbox::proxy::Proxy;
use crate::spawn::launcher::Helper;

/// How often a start waiting for a report continues the helper (a command may stop it).
const RESUME_HELPER: Duration = Duration::from_secs(1);

/// A started command.
pub(crate) struct Spawned {
    pub(crate) tree: Arc<ProcTree>,
    pub(crate) stdout: Receiver,
    pub(crate) stderr: Receiver,
    pub(crate) leader: Leader,
}

/// Why a command did not start. In each case it certainly did not run.
#[derive(Debug)]
pub(crate) enum StartError {
    /// The helper found the workdir unusable; the tools' message.
    Workdir(String),
    /// Entering the workdir, setting up or `exec`ing bash failed.
    Failed { step: Step, err: io::Error },
    /// The helper could not be started or followed.
    Helper(io::Error),
    /// The request did not reach the helper (it had died): nothing was started, another helper
    /// may take it.
    Undelivered(io::Error),
    /// The helper declined (its state, inherited from the factory, was changed): nothing was
    /// started; a new factory's helper may take it.
    Declined,
}

/// Reports how bash (the tree's leader) ended.
pub(crate) struct Leader {
    status: oneshot::Receiver<i32>,
    /// bash's pidfd, readable once bash has ended.
    pidfd: Option<OwnedFd>,
}

impl Leader {
    /// Waits for bash to end. If the helper died without reporting it (a command can SIGKILL
    /// its parent), bash was killed with it (its parent-death signal): wait until it is gone.
    pub(crate) async fn wait(self) -> Exit {
        if let Ok(status) = self.status.await {
            return Exit::from_wait_status(status);
        }
        if let Some(pidfd) = self.pidfd {
            crate::containment::pidfd::exit_of(pidfd).await;
        }
        Exit {
            code: None,
            signal: Some(libc::SIGKILL),
        }
    }
}

/// Starts bash (`program`, as found on PATH) with `command` in `workdir` on `helper`, which
/// serves this one command. What its sandbox denies it goes to `denials`; `proxy` serves its
/// connections to the allowed hosts, when it has one (`--sandbox-allow-net`).
pub(crate) async fn spawn(
    helper: Helper,
    program: &OsStr,
    command: &str,
    workdir: &str,
    denials: Arc<DenialLog>,
    proxy: Option<Arc<Proxy>>,
) -> Result<Spawned, StartError> {
    let Helper {
        pid,
        pidfd,
        sock,
        cgroup,
        ..
    } = helper;
    let pipe =
        || rustix::pipe::pipe_with(PipeFlags::CLOEXEC).map_err(|e| StartError::Helper(e.into()));
    let (stdout_r, stdout_w) = pipe()?;
    let (stderr_r, stderr_w) = pipe()?;
    let (started_r, started_w) = pipe()?;
    let frame = protocol::Request {
        program: program.as_bytes().to_vec(),
        command: command.as_bytes().to_vec(),
        workdir: workdir.as_bytes().to_vec(),
    }
    .encode();
    // A command may have stopped an idle helper: it is continued now and then while we wait.
    let resume = || {
        let _ = rustix::process::pidfd_send_signal(&pidfd, rustix::process::Signal::CONT);
    };
    sock.set_nonblocking(true)
        .map_err(StartError::Undelivered)?;
    let fds = [stdout_w.as_fd(), stderr_w.as_fd(), started_w.as_fd()];
    let sent =
        protocol::send_with_fds(sock.as_fd(), &frame, &fds).map_err(StartError::Undelivered)?;
    // Only bash keeps the write ends.
    drop((stdout_w, stderr_w, started_w));
    let mut sock = tokio::net::UnixStream::from_std(sock).map_err(StartError::Undelivered)?;
    // A helper reads the whole request before it starts anything: a request cut short by the
    // helper's death started nothing.
    with_resume(sock.write_all(&frame[sent..]), resume)
        .await
        .map_err(StartError::Undelivered)?;

    // Nothing on the outcome pipe at its end: bash was exec'd (or died before, killed with its
    // helper). A record: it was not.
    let mut outcome = Vec::new();
    let mut started = receiver(started_r)?;
    // Set up while the helper works.
    let (stdout, stderr) = (receiver(stdout_r)?, receiver(stderr_r)?);
    with_resume(started.read_to_end(&mut outcome), resume)
        .await
        .map_err(StartError::Helper)?;
    if outcome.len() >= 8 {
        let step = Step::from_u32(u32::from_ne_bytes(
            outcome[..4].try_into().expect("4 bytes"),
        ));
        let errno = i32::from_ne_bytes(outcome[4..8].try_into().expect("4 bytes"));
        return Err(StartError::Failed {
            step,
            err: io::Error::from_raw_os_error(errno),
        });
    }
    let mut reports = Reports::new(sock);
    // The command's proxy (`--sandbox-allow-net`), served from before bash starts until its
    // tree is empty.
    let mut serving = None;
    let (bash, bash_pidfd) = loop {
        match with_resume(reports.next(), resume).await {
            Ok(Some(Report::Proxy)) if serving.is_none() => {
                serving = Some(serve_proxy(reports.fd.take(), proxy.clone(), &denials)?);
            }
            Ok(Some(Report::Refused(message))) => {
                // It started nothing, and exits.
                drop(reports);
                if let Some(cgroup) = cgroup {
                    cgroup.retire(Some(pidfd));
                }
                return Err(StartError::Workdir(message));
            }
            Ok(Some(Report::Declined)) => return Err(StartError::Declined),
            Ok(Some(Report::Started(bash))) => break (bash, reports.fd.take()),
            // Any other report before `Started` breaks the protocol; bash may have run, so the
            // command is not handed to another helper.
            Ok(Some(other)) => {
                return Err(StartError::Helper(io::Error::other(format!(
                    "the spawn helper reported {other:?} before bash started"
                ))));
            }
            // No word from bash, which reports itself before its `exec` and does not exec when
            // it cannot: the command never ran. Its helper died before starting it (a command
            // may kill idle helpers, and a killed one can still look alive for a moment); its
            // death ended the stream, and another helper may take the command.
            Ok(None) | Err(_) => {
                return Err(StartError::Undelivered(io::Error::new(
                    io::ErrorKind::BrokenPipe,
                    "the spawn helper ended before starting bash",
                )));
            }
        }
    };

    let (leader_tx, leader_rx) = oneshot::channel();
    // The helper reports bash's status, then that its tree is empty, so the tree need not wait
    // for the helper's own exit (it exits right after). Dropping the reports (and so the
    // socket) before that makes the helper kill the tree: the watcher holds them until the end.
    let resume_pidfd = rustix::io::dup(&pidfd).ok();
    let tree_empty = async move {
        // Held until the tree is empty; dropping it ends the proxy and its connections.
        let _serving = serving;
        let resume = || {
            if let Some(pidfd) = &resume_pidfd {
                let _ = rustix::process::pidfd_send_signal(pidfd, rustix::process::Signal::CONT);
            }
        };
        let mut leader_tx = Some(leader_tx);
        loop {
            match with_resume(reports.next(), resume).await {
                Ok(Some(Report::Exited(status))) => {
                    if let Some(tx) = leader_tx.take() {
                        let _ = tx.send(status);
                    }
                }
                Ok(Some(Report::Denied(denial))) => denials.add(denial),
                // Nothing may follow.
                Ok(Some(Report::TreeEmpty)) => return reports.buf.is_empty(),
                _ => return false,
            }
        }
    };
    let tree = ProcTree::watch(pid, pidfd, bash, tree_empty, cgroup);
    Ok(Spawned {
        tree,
        stdout,
        stderr,
        leader: Leader {
            status: leader_rx,
            pidfd: bash_pidfd,
        },
    })
}

/// Serves the listener that came with the helper's [`Report::Proxy`] through `proxy`; an error
/// where none came, or the executor has no proxy to serve it with.
fn serve_proxy(
    listener: Option<OwnedFd>,
    proxy: Option<Arc<Proxy>>,
    denials: &Arc<DenialLog>,
) -> Result<crate::sandbox::proxy::Serving, StartError> {
    let (Some(listener), Some(proxy)) = (listener, proxy) else {
        return Err(StartError::Helper(io::Error::other(
            "the spawn helper offered a proxy without a listener, or unasked",
        )));
    };
    crate::sandbox::proxy::serve(listener, proxy, denials.clone()).map_err(StartError::Helper)
}

fn receiver(fd: OwnedFd) -> Result<Receiver, StartError> {
    Receiver::from_owned_fd(fd).map_err(StartError::Helper)
}

/// Awaits `fut`, calling `resume` every [`RESUME_HELPER`] meanwhile.
async fn with_resume<T>(fut: impl std::future::Future<Output = T>, resume: impl Fn()) -> T {
    tokio::pin!(fut);
    loop {
        tokio::select! {
            out = &mut fut => return out,
            () = tokio::time::sleep(RESUME_HELPER) => resume(),
        }
    }
}

/// The helper's reports, read from the socket.
struct Reports {
    sock: tokio::net::UnixStream,
    buf: Vec<u8>,
    /// A descriptor that came with a report (bash's pidfd).
    fd: Option<OwnedFd>,
}

impl Reports {
    fn new(sock: tokio::net::UnixStream) -> Self {
        Self {
            sock,
            buf: Vec::new(),
            fd: None,
        }
    }

    /// The next report; `None` at the end of the stream.
    async fn next(&mut self) -> io::Result<Option<Report>> {
        loop {
            if let Some((report, len)) = Report::decode(&self.buf)? {
                self.buf.drain(..len);
                return Ok(Some(report));
            }
            self.sock.readable().await?;
            let mut chunk = [0u8; 512];
            let got = self.sock.try_io(tokio::io::Interest::READABLE, || {
                let (n, fds) = protocol::recv_some(self.sock.as_fd(), &mut chunk)?;
                Ok((n, fds.into_iter().next()))
            });
            match got {
                Ok((0, _)) => return Ok(None),
                Ok((n, fd)) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    if fd.is_some() {
                        self.fd = fd;
                    }
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
                Err(err) => return Err(err),
            }
        }
    }
}
