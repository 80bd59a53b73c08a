//! Starting a command: `bash -c <command>` in a new session, stdin `/dev/null`, stdout and stderr
//! on separate pipes, and a status pipe for bash's wait status.
//!
//! Normally the spawner starts it ([`spawn_via`], see [`crate::zygote`]): directly in cgroup mode,
//! under a supervisor otherwise. [`spawn`] is the fallback where the host has no spawner, and
//! forks the supervisor itself.
//!
//! Process layout of [`spawn`]: host → supervisor (session and group leader, child subreaper; see
//! [`crate::supervisor`]) → bash. Both are created by the one `fork` std performs plus a second
//! `fork` in the `pre_exec` hook; only bash execs. In cgroup mode bash joins the command's cgroup
//! before it execs, so the cgroup holds every process of the command and never the supervisor,
//! which therefore survives `cgroup.kill`, reaps, and reports how bash ended.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::process::{ChildStderr, ChildStdout};
use tokio::sync::oneshot;

use crate::cgroup::TaskCgroup;
use crate::process::{Exit, ProcTree};

/// How often a start that waits for its status continues the process that reports it.
const RESUME_SPAWNER: Duration = Duration::from_secs(1);

/// A started command.
pub(crate) struct Spawned {
    pub(crate) tree: Arc<ProcTree>,
    pub(crate) stdout: ChildStdout,
    pub(crate) stderr: ChildStderr,
    pub(crate) leader: Leader,
}

/// Reports how bash (the tree's leader) ended.
pub(crate) struct Leader {
    status: LeaderStatus,
}

enum LeaderStatus {
    /// The status pipe itself.
    Pipe(ChildStdout),
    /// Bash's wait status as read from the status pipe by the tree's watcher.
    Relayed(oneshot::Receiver<i32>),
    /// Bash is the tree's root (a direct start): its end is the tree's.
    Root,
}

impl Leader {
    /// Waits for bash to end. Should the supervisor die without reporting (the command can
    /// SIGKILL it), its own end stands for the leader's.
    pub(crate) async fn wait(self, tree: Arc<ProcTree>) -> Exit {
        let status = match self.status {
            // A supervisor the host forked itself (no spawner).
            LeaderStatus::Pipe(mut pipe) => read_word(&mut pipe, || {}).await,
            LeaderStatus::Relayed(status) => status.await.ok(),
            LeaderStatus::Root => None,
        };
        match status {
            Some(status) => Exit::from_wait_status(status),
            None => {
                tree.wait_reaped().await;
                tree.supervisor_exit()
            }
        }
    }
}

/// Starts `<program> -c <command>` in `workdir` with exactly `env`, in `cgroup` if given. Must run
/// inside a tokio runtime context. A failure to join the cgroup is an error that
/// [`crate::cgroup::join_error`] recognises.
pub(crate) fn spawn(
    program: &OsStr,
    command: &str,
    workdir: &Path,
    env: &[(OsString, OsString)],
    cgroup: Option<TaskCgroup>,
) -> io::Result<Spawned> {
    let (status_read, status_write) = status_pipe()?;
    let status = ChildStdout::from_std(std::process::ChildStdout::from(status_read))?;

    let mut cmd = tokio::process::Command::new(program);
    cmd.arg("-c")
        .arg(command)
        .current_dir(workdir)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let host = std::process::id() as libc::pid_t;
    let status_fd = status_write.as_raw_fd();
    let cgroup_paths = cgroup.as_ref().map(|c| c.paths().clone());
    // SAFETY: the hook runs between fork and exec and only makes async-signal-safe calls (see
    // `supervisor` and `cgroup`) on data prepared before the fork; io::Error::last_os_error and
    // io::Error::from_raw_os_error do not allocate.
    unsafe {
        cmd.pre_exec(move || {
            // A new session: own process group, no controlling terminal.
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            let supervisor = libc::getpid();
            // Every signal stays blocked until the supervisor has its handlers, so that the
            // command cannot kill it (`kill $PPID` as its first act) before it is ready; bash
            // unblocks them before it execs.
            let mut all: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::sigprocmask(libc::SIG_SETMASK, &all, std::ptr::null_mut());
            match libc::fork() {
                -1 => Err(io::Error::last_os_error()),
                0 => {
                    let mut none: libc::sigset_t = std::mem::zeroed();
                    libc::sigemptyset(&mut none);
                    libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
                    // bash: dies with its supervisor, then std execs it.
                    libc::prctl(
                        libc::PR_SET_PDEATHSIG,
                        libc::SIGKILL as libc::c_ulong,
                        0,
                        0,
                        0,
                    );
                    if libc::getppid() != supervisor {
                        libc::_exit(127);
                    }
                    // Into the command's cgroup before the first instruction of the command.
                    if let Some(paths) = &cgroup_paths {
                        crate::cgroup::join_for_spawn(paths)?;
                    }
                    Ok(())
                }
                bash => crate::supervisor::supervise(
                    bash,
                    status_fd,
                    host,
                    cgroup_paths.as_ref().map(Into::into),
                ),
            }
        });
    }
    let mut child = cmd.spawn()?;
    // Our copy must go, or the status pipe would never report EOF.
    drop(status_write);
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let tree = ProcTree::watch(child, cgroup);
    match (tree, stdout, stderr) {
        (Some(tree), Some(stdout), Some(stderr)) => Ok(Spawned {
            tree,
            stdout,
            stderr,
            leader: Leader {
                status: LeaderStatus::Pipe(status),
            },
        }),
        _ => Err(io::Error::other("the started process has no pid or pipes")),
    }
}

/// Reads one word from the status pipe (none at its end), calling `resume` every
/// [`RESUME_SPAWNER`] meanwhile.
async fn read_word(pipe: &mut ChildStdout, resume: impl Fn()) -> Option<i32> {
    let mut raw = [0u8; 4];
    let read = pipe.read_exact(&mut raw);
    tokio::pin!(read);
    loop {
        tokio::select! {
            read = &mut read => return read.ok().map(|_| i32::from_ne_bytes(raw)),
            () = tokio::time::sleep(RESUME_SPAWNER) => resume(),
        }
    }
}

/// A close-on-exec pipe whose ends are at fd 3 or above, so that the supervisor's stdio setup
/// cannot clobber them.
fn status_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let (read, write) = crate::zygote::cloexec_pipe()?;
    Ok((above_stdio(read)?, above_stdio(write)?))
}

fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: F_DUPFD_CLOEXEC returns a new descriptor, which we then own.
    let dup = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if dup < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `dup` is fresh.
    Ok(unsafe { OwnedFd::from_raw_fd(dup) })
}

/// [`spawn`] through the spawner process ([`crate::zygote`]) instead of a fork of the host: in
/// cgroup mode bash is started directly (the cgroup holds its tree), else under a supervisor.
pub(crate) fn spawn_via(
    zygote: &Arc<crate::zygote::Zygote>,
    program: &OsStr,
    command: &str,
    workdir: &Path,
    env: &[(OsString, OsString)],
    cgroup: Option<TaskCgroup>,
) -> io::Result<Spawned> {
    let started = zygote.spawn(program, command, workdir, env, cgroup.as_ref())?;
    let stdout = ChildStdout::from_std(std::process::ChildStdout::from(started.stdout))?;
    let stderr = ChildStderr::from_std(std::process::ChildStderr::from(started.stderr))?;
    let mut status = ChildStdout::from_std(std::process::ChildStdout::from(started.status))?;
    let Some(exit) = started.exit else {
        // Direct: the spawner writes bash's wait status to the status pipe once it reaped it.
        // Without it, the spawner died (SIGKILLed by a command), and bash with it. A stopped
        // spawner (`kill -STOP $PPID`) reaps nothing: it is continued now and then meanwhile.
        let spawner = zygote.clone();
        let exit = async move {
            match read_word(&mut status, || spawner.resume()).await {
                Some(status) => Exit::from_wait_status(status),
                None => Exit {
                    code: None,
                    signal: Some(libc::SIGKILL),
                },
            }
        };
        let tree = ProcTree::watch_pid(
            started.pid,
            exit,
            None::<std::future::Ready<bool>>,
            cgroup,
            Some(zygote.clone()),
        );
        return Ok(Spawned {
            tree,
            stdout,
            stderr,
            leader: Leader {
                status: LeaderStatus::Root,
            },
        });
    };
    let (leader_tx, leader_rx) = oneshot::channel();
    // The status pipe carries bash's wait status, then the supervisor's word that its tree is
    // empty: the tree need not wait for the spawner to reap and report the supervisor.
    // A stopped supervisor (`kill -STOP $PPID`) reports nothing: it is continued now and then
    // meanwhile.
    let (supervisor, spawner) = (started.pid, zygote.clone());
    let resume = move || spawner.resume_supervisor(supervisor);
    let tree_empty = async move {
        let Some(leader) = read_word(&mut status, &resume).await else {
            return false;
        };
        let _ = leader_tx.send(leader);
        read_word(&mut status, &resume).await == Some(crate::supervisor::TREE_EMPTY)
    };
    let tree = ProcTree::watch_pid(
        started.pid,
        async move {
            match exit.await {
                Ok(status) => Exit::from_wait_status(status),
                Err(_) => Exit::default(),
            }
        },
        Some(tree_empty),
        cgroup,
        Some(zygote.clone()),
    );
    Ok(Spawned {
        tree,
        stdout,
        stderr,
        leader: Leader {
            status: LeaderStatus::Relayed(leader_rx),
        },
    })
}
