//! Spawn helpers made ahead: each command takes a fresh, never-used helper (and, in cgroup mode,
//! a fresh, never-used cgroup made with it), so nothing one command does to its parent or its
//! cgroup reaches the next; starting the helper (an `exec`) happens off the command's path, on
//! a blocking thread, never on the async runtime.

use std::ffi::OsString;
use std::io;
use std::os::unix::net::UnixStream;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use crate::cgroup::{CgroupRoot, TaskCgroup};
use crate::spawn_helper::HELPER_ARG;

/// Helpers kept ready: one command at a time takes none from the runtime thread's path; a burst
/// of background starts spawns the rest on demand.
const READY: usize = 2;

/// A started, idle helper with its command cgroup.
#[derive(Debug)]
pub(crate) struct Helper {
    pub(crate) child: tokio::process::Child,
    pub(crate) pid: i32,
    /// The helper's pidfd, to signal it whatever happens to its pid.
    pub(crate) pidfd: std::os::fd::OwnedFd,
    pub(crate) sock: UnixStream,
    pub(crate) cgroup: Option<TaskCgroup>,
}

#[derive(Debug)]
pub(crate) struct Launcher {
    program: OsString,
    env: Vec<(OsString, OsString)>,
    cgroups: Option<Arc<CgroupRoot>>,
    ready: Mutex<Vec<Helper>>,
    /// Helpers being started for the ready list.
    filling: Mutex<usize>,
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
            ready: Mutex::new(Vec::new()),
            filling: Mutex::new(0),
        })
    }

    fn ready(&self) -> std::sync::MutexGuard<'_, Vec<Helper>> {
        self.ready.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A fresh helper: a ready one, else one started now (on a blocking thread). Refills the
    /// ready list in the background either way.
    pub(crate) async fn take(self: &Arc<Self>) -> io::Result<Helper> {
        let ready = self.ready().pop();
        self.refill();
        match ready {
            Some(helper) => Ok(helper),
            None => {
                let this = self.clone();
                tokio::task::spawn_blocking(move || this.start_helper())
                    .await
                    .map_err(io::Error::other)?
            }
        }
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
            for helper in idle {
                if let Some(cgroup) = helper.cgroup {
                    cgroup.remove_unused();
                }
            }
            if *self.filling.lock().unwrap_or_else(|e| e.into_inner()) == 0 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    }

    /// Starts one helper, with a new cgroup in cgroup mode. Blocking.
    fn start_helper(&self) -> io::Result<Helper> {
        let cgroup = match &self.cgroups {
            Some(root) => match root.create_task() {
                Ok(cgroup) => Some(cgroup),
                Err(err) => {
                    tracing::warn!(root = %root.dir().display(), %err, "cannot create a cgroup for a command; it runs under subreaper tracking only");
                    None
                }
            },
            None => None,
        };
        // Both ends close-on-exec; ours stays ours, the helper's becomes its stdin.
        let (ours, theirs) = UnixStream::pair()?;
        let mut command = tokio::process::Command::new(&self.program);
        command
            .arg(HELPER_ARG)
            .arg(std::process::id().to_string())
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .current_dir("/");
        let child = command.spawn()?;
        let pid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .ok_or_else(|| io::Error::other("the spawn helper has no pid"))?;
        // Our unreaped child: the pid is its own.
        let pidfd = rustix::process::pidfd_open(
            rustix::process::Pid::from_raw(pid).ok_or_else(|| io::Error::other("pid 0"))?,
            rustix::process::PidfdFlags::empty(),
        )?;
        Ok(Helper {
            child,
            pid,
            pidfd,
            sock: ours,
            cgroup,
        })
    }
}
