//! Spawn helpers, made ahead: each command gets a helper (and, in cgroup mode, the cgroup made
//! with it) that no command has had as its parent, and the helper serves that one command only,
//! so nothing one command does to its parent or its cgroup reaches the next.
//!
//! A helper made ahead waits in the ready list; when taken it must still be alive, alone in its
//! cgroup and the child of a factory that still runs, and it declines the command itself when its
//! nice value, limits, OOM score, scheduling, CPU affinity or timer slack differ from the
//! factory's (something found it idle and changed it, or changed the factory): the host then
//! starts a new factory.
//!
//! Helpers are forked by the factory ([`crate::helper`]), which the host exec's once and
//! again whenever it has died or refused; forks and checks happen on blocking threads, off the
//! command's path and never on the async runtime.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::containment::cgroup::{CgroupRoot, TaskCgroup};
use crate::containment::pidfd::readable_within;
use crate::helper::{FACTORY_ARGV0, HELPER_ARG, NOFILE_ENV};
use crate::protocol::{self, Report};

/// Helpers kept ready: one command at a time takes none from the runtime thread's path; a burst
/// of background starts forks the rest on demand.
const READY: usize = 2;

/// How long the factory may take to answer before it counts as gone (continued meanwhile, in
/// case a process stopped it).
const FACTORY_ANSWER: Duration = Duration::from_secs(5);

/// A forked, idle helper with its command cgroup.
#[derive(Debug)]
pub(crate) struct Helper {
    pub(crate) pid: i32,
    /// The helper's pidfd, to signal it and see it exit whatever happens to its pid.
    pub(crate) pidfd: OwnedFd,
    pub(crate) sock: UnixStream,
    pub(crate) cgroup: Option<Arc<TaskCgroup>>,
    /// The pidfd of the factory that forked it.
    pub(crate) factory: Arc<OwnedFd>,
}

impl Helper {
    /// Whether the helper looks fit to take now: alive, the child of a factory that still runs,
    /// and alone in its cgroup, which is not frozen.
    ///
    /// A helper whose factory died (a command can SIGKILL the factory's group) lives on as an
    /// orphan, re-parented to init or whatever subreaper is above the host: a command on it
    /// would find there a `$PPID`'s parent that is none of the executor's, and signalling that
    /// one's process group (`kill -9 -- -0` where init's group reads 0, which is the command's
    /// own) would hit someone else's processes or the command itself. A live factory cannot
    /// have lost its children, so its helpers are still its own.
    fn fit(&self) -> bool {
        crate::containment::pidfd::running(&self.pidfd)
            && crate::containment::pidfd::running(&*self.factory)
            && self.cgroup.as_ref().is_none_or(|c| c.holds_only(self.pid))
    }

    /// Lets the helper go (it exits when its socket closes) and removes its cgroup once it has.
    pub(crate) fn discard(self) {
        let Helper {
            pidfd,
            sock,
            cgroup,
            ..
        } = self;
        drop(sock);
        if let Some(cgroup) = cgroup {
            cgroup.retire(Some(pidfd));
        }
    }
}

/// The running factory.
#[derive(Debug)]
struct Factory {
    /// Killed when dropped (it would exit anyway once its socket closes).
    _child: tokio::process::Child,
    /// Shared with the helpers it forks, which are fit only while it runs.
    pidfd: Arc<OwnedFd>,
    control: UnixStream,
}

#[derive(Debug)]
pub(crate) struct Launcher {
    program: OsString,
    env: Vec<(OsString, OsString)>,
    cgroups: Option<Arc<CgroupRoot>>,
    factory: Mutex<Option<Factory>>,
    ready: Mutex<Vec<Helper>>,
    /// Takes served round-robin over sessions.
    gate: Arc<super::fair::FairGate>,
    /// Helpers being forked or checked for the ready list.
    filling: Mutex<usize>,
    /// The soft descriptor limit when the executor was made, which every factory (so every
    /// command) gets: a host that raises its own limit later (the HTTP server does, to hold many
    /// connections) does not pass the raised one to commands, even through a factory it starts
    /// after the raise.
    nofile: Option<u64>,
}

impl Launcher {
    pub(crate) fn new(
        program: OsString,
        env: Vec<(OsString, OsString)>,
        cgroups: Option<Arc<CgroupRoot>>,
    ) -> Arc<Self> {
        Arc::new(Self {
            program,
            env,
            cgroups,
            factory: Mutex::new(None),
            ready: Mutex::new(Vec::new()),
            gate: Arc::default(),
            nofile: rustix::process::getrlimit(rustix::process::Resource::Nofile).current,
            filling: Mutex::new(0),
        })
    }

    fn ready(&self) -> std::sync::MutexGuard<'_, Vec<Helper>> {
        self.ready.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A helper fit to take for a start of `owner`'s session, in its turn among the sessions
    /// waiting ([`super::fair`]): a ready one, else one forked now (on a blocking thread). The
    /// caller [`refill`](Self::refill)s once its command has started, so that making the next
    /// helper does not compete with this start for the processor.
    pub(crate) async fn take(self: &Arc<Self>, owner: Option<&str>) -> io::Result<Helper> {
        let _turn = self.gate.enter(owner).await;
        loop {
            let ready = self.ready().pop();
            match ready {
                Some(helper) if helper.fit() => return Ok(helper),
                Some(unfit) => unfit.discard(),
                None => break,
            }
        }
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.start_helper())
            .await
            .map_err(io::Error::other)?
    }

    /// Starts helpers in the background until [`READY`] are ready or being started.
    pub(crate) fn refill(self: &Arc<Self>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let wanted = {
            let mut filling = self.filling.lock().unwrap_or_else(|e| e.into_inner());
            let wanted = READY.saturating_sub(self.ready().len() + *filling);
            *filling += wanted;
            wanted
        };
        for _ in 0..wanted {
            let this = self.clone();
            runtime.spawn_blocking(move || {
                match this.start_helper() {
                    Ok(helper) => this.ready().push(helper),
                    Err(err) => tracing::debug!(%err, "cannot start a spawn helper ahead"),
                }
                // Only now, so that `clear` sees it in the list once the count drops.
                *this.filling.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
            });
        }
    }

    /// Lets the ready helpers go (they exit when their socket closes) and removes their unused
    /// cgroups, waiting for helpers being started meanwhile: afterwards no cgroup of this
    /// launcher exists. A later command starts new ones.
    pub(crate) async fn clear(&self) {
        loop {
            let idle: Vec<Helper> = self.ready().drain(..).collect();
            if !idle.is_empty() {
                // Each idle helper sits in its cgroup until it has exited.
                let _ = tokio::task::spawn_blocking(move || {
                    for helper in idle {
                        let Helper {
                            pidfd,
                            sock,
                            cgroup,
                            ..
                        } = helper;
                        drop(sock);
                        let _ = readable_within(&pidfd, Duration::from_secs(2));
                        if let Some(cgroup) = cgroup {
                            cgroup.remove_unused();
                        }
                    }
                })
                .await;
            }
            if *self.filling.lock().unwrap_or_else(|e| e.into_inner()) == 0 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    }

    /// Drops the factory and the helpers it made (their state was changed from outside): the
    /// next helper comes from a new factory.
    pub(crate) fn reset(&self) {
        *self.factory.lock().unwrap_or_else(|e| e.into_inner()) = None;
        let idle: Vec<Helper> = self.ready().drain(..).collect();
        for helper in idle {
            helper.discard();
        }
    }

    /// Forks one helper, with a new cgroup in cgroup mode. Blocking.
    fn start_helper(&self) -> io::Result<Helper> {
        let cgroup = match &self.cgroups {
            Some(root) => match root.create_task() {
                Ok(cgroup) => Some(Arc::new(cgroup)),
                Err(err) => {
                    tracing::warn!(root = %root.dir().display(), %err, "cannot create a cgroup for a command; it runs under subreaper tracking only");
                    None
                }
            },
            None => None,
        };
        let mut factory = self.factory.lock().unwrap_or_else(|e| e.into_inner());
        let mut last = None;
        // A factory that died or refused is replaced once per helper.
        for _ in 0..2 {
            if factory.is_none() {
                *factory = Some(self.start_factory()?);
            }
            let cgroup_dir = cgroup.as_deref().map(TaskCgroup::dir_fd);
            match factory
                .as_ref()
                .map(|f| (f.fork_helper(cgroup_dir), f.pidfd.clone()))
            {
                Some((Ok((pid, pidfd, sock)), factory)) => {
                    return Ok(Helper {
                        pid,
                        pidfd,
                        sock,
                        cgroup,
                        factory,
                    });
                }
                Some((Err(err), _)) => {
                    tracing::debug!(%err, "the spawn helper factory is gone; starting another");
                    *factory = None;
                    last = Some(err);
                }
                None => {}
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("no spawn helper factory")))
    }

    /// Exec's the factory. Blocking.
    fn start_factory(&self) -> io::Result<Factory> {
        // Both ends close-on-exec; ours stays ours, the factory's becomes its stdin.
        let (ours, theirs) = UnixStream::pair()?;
        let mut command = tokio::process::Command::new(&self.program);
        command
            .arg0(FACTORY_ARGV0)
            .arg(HELPER_ARG)
            .arg(std::process::id().to_string())
            .args(self.cgroups.as_ref().map(|root| root.dir()))
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        if let Some(soft) = self.nofile {
            // Set by the factory itself: a closure run between fork and exec would make the
            // start a fork() of this multi-threaded process, whose fork handlers (a library's)
            // may wait forever on a lock another thread held; without one it is a posix_spawn,
            // which runs none.
            command.env(NOFILE_ENV, soft.to_string());
        }
        let child = command.spawn()?;
        let pid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .and_then(rustix::process::Pid::from_raw)
            .ok_or_else(|| io::Error::other("the spawn helper factory has no pid"))?;
        // Our unreaped child: the pid is its own.
        let pidfd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty())?;
        Ok(Factory {
            _child: child,
            pidfd: Arc::new(pidfd),
            control: ours,
        })
    }
}

impl Factory {
    /// Asks for one helper, started inside `cgroup` if given: its pid, pidfd and our end of its
    /// socket. Blocking.
    fn fork_helper(
        &self,
        cgroup: Option<std::os::fd::BorrowedFd<'_>>,
    ) -> io::Result<(i32, OwnedFd, UnixStream)> {
        let (ours, theirs) = UnixStream::pair()?;
        let mut fds = vec![theirs.as_fd()];
        fds.extend(cgroup);
        protocol::send_with_fds(self.control.as_fd(), &[0], &fds)?;
        drop(fds);
        drop(theirs);
        let deadline = Instant::now() + FACTORY_ANSWER;
        let mut answer = Vec::new();
        let mut pidfd = None;
        loop {
            if let Some((report, _)) = Report::decode(&answer)? {
                return match (report, pidfd) {
                    (Report::Started(pid), Some(pidfd)) => Ok((pid, pidfd, ours)),
                    _ => Err(io::Error::other("an unexpected answer from the factory")),
                };
            }
            if !readable_within(&self.control, Duration::from_millis(100))? {
                if Instant::now() >= deadline {
                    return Err(io::Error::other("the factory did not answer"));
                }
                // A process may have stopped it.
                let _ =
                    rustix::process::pidfd_send_signal(&self.pidfd, rustix::process::Signal::CONT);
                continue;
            }
            let mut chunk = [0u8; 64];
            let (n, fds) = match protocol::recv_some(self.control.as_fd(), &mut chunk) {
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => continue,
                other => other?,
            };
            if n == 0 {
                return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
            }
            answer.extend_from_slice(&chunk[..n]);
            if let Some(fd) = fds.into_iter().next() {
                pidfd = Some(fd);
            }
        }
    }
}
