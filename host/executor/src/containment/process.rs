//! A running command's process tree, seen from the host: who is in it, how to stop it, and when
//! it is gone.
//!
//! The tree's root is the command's spawn helper ([`crate::helper`]), bash's parent. It is
//! a child subreaper, so orphans (double forks, `setsid` daemons) are re-parented to it and stay
//! below it; it says so once no descendant is left, and exits. In cgroup mode the command's
//! cgroup holds every process of the command as well, escapees included.
//!
//! What can outlive the helper is what it lost when the command killed it (`kill -9 $PPID`):
//! in cgroup mode the cgroup still holds it; in subreaper mode orphans then go to init, and the
//! host still finds those that stayed in bash's session (bash leads it; a session id is not
//! reused while the session has members).
//!
//! Signals go through pidfds opened for members found in the cgroup or below the helper, and only
//! to those still found there after the pidfd was opened: a member that ended meanwhile (its pid
//! possibly reused) is never hit.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use rustix::process::{Pid, PidfdFlags, Signal};
use tokio_util::sync::CancellationToken;

use crate::containment::cgroup::TaskCgroup;
use crate::containment::pidfd::exit_of;
use crate::containment::procfs::{ProcInfo, snapshot, subtree};

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Exit {
    pub(crate) code: Option<i32>,
    pub(crate) signal: Option<i32>,
}

impl Exit {
    /// From a raw `waitpid` status.
    pub(crate) fn from_wait_status(status: i32) -> Self {
        if libc::WIFEXITED(status) {
            Self {
                code: Some(libc::WEXITSTATUS(status)),
                signal: None,
            }
        } else if libc::WIFSIGNALED(status) {
            Self {
                code: None,
                signal: Some(libc::WTERMSIG(status)),
            }
        } else {
            Self::default()
        }
    }
}

/// Poll period while waiting for SIGKILLed processes to be reaped.
const KILL_POLL: Duration = Duration::from_millis(20);
/// Longest pause between checks for what outlived the helper.
const GONE_POLL: Duration = Duration::from_millis(25);
/// How long the tree may look empty while the helper still has not exited before the helper
/// itself is killed (it was stopped by the command).
const STUCK_HELPER: Duration = Duration::from_secs(3);

/// The process tree of one command.
#[derive(Debug)]
pub(crate) struct ProcTree {
    /// The spawn helper: root of the tree, a child of the factory.
    pid: i32,
    /// The helper's pidfd.
    pidfd: OwnedFd,
    /// bash's pid, the id of the session it leads (bash reports it before it runs anything).
    session: i32,
    /// The command's cgroup (cgroup mode), shared with the helper that sits in it.
    cgroup: Option<Arc<TaskCgroup>>,
    /// The helper has exited.
    reaped: CancellationToken,
    /// Whether the helper said its tree was empty before it exited (set once known).
    exit: Arc<OnceLock<bool>>,
    /// Nothing of the command is left.
    gone: CancellationToken,
    /// Set just before `gone` is cancelled.
    ended: AtomicBool,
    terminating: AtomicBool,
    /// Subreaper mode: no process of bash's session was left at some scan after the helper
    /// died, so the session id (reusable from then on) is not looked at again.
    session_over: AtomicBool,
}

impl ProcTree {
    /// Takes over the helper `pid` (whose pidfd is `pidfd`) and the command's cgroup, and
    /// watches them in the background. `tree_empty` resolves to true when the helper says it
    /// has no descendant left (it then exits), to false if it ends without saying so. The
    /// cgroup is removed once the helper has exited.
    pub(crate) fn watch(
        pid: i32,
        pidfd: OwnedFd,
        session: i32,
        tree_empty: impl std::future::Future<Output = bool> + Send + 'static,
        cgroup: Option<Arc<TaskCgroup>>,
    ) -> Arc<Self> {
        let exited = rustix::io::dup(&pidfd);
        let tree = Arc::new(Self {
            pid,
            pidfd,
            session,
            cgroup,
            reaped: CancellationToken::new(),
            exit: Arc::new(OnceLock::new()),
            gone: CancellationToken::new(),
            ended: AtomicBool::new(false),
            terminating: AtomicBool::new(false),
            session_over: AtomicBool::new(false),
        });
        let watcher = tree.clone();
        tokio::spawn(async move {
            // Holds only what it sets, so that the tree (and its cgroup) can go before it ends.
            let (clean_slot, reaped_token) = (watcher.exit.clone(), watcher.reaped.clone());
            let reap = async move {
                if let Ok(fd) = exited {
                    exit_of(fd).await;
                }
                reaped_token.cancel();
            };
            let tree_empty = async move {
                let empty = tree_empty.await;
                let _ = clean_slot.set(empty);
                empty
            };
            tokio::pin!(reap, tree_empty);
            let mut reaped = false;
            tokio::select! {
                () = &mut reap => {
                    reaped = true;
                    // It may still be relaying: let it finish (the socket is closed).
                    let _ = tokio::time::timeout(Duration::from_secs(1), &mut tree_empty).await;
                }
                empty = &mut tree_empty => {
                    // Checked too: a process outside the helper's tree may be in the cgroup.
                    // A clean end needs no wait for the helper, which is exiting.
                    if !(empty && watcher.members().is_empty()) {
                        (&mut reap).await;
                        reaped = true;
                    }
                }
            }
            // Usually nothing is left at this point; what is left escaped the helper and is
            // stopped by whoever drives the command, while this only watches.
            let mut pause = Duration::from_millis(1);
            while watcher.outlived_helper() {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(GONE_POLL);
            }
            watcher.ended.store(true, Ordering::SeqCst);
            // From here on this tree never looks at the helper or its cgroup again.
            if let Some(cgroup) = &watcher.cgroup {
                // The helper, still in it while it exits, is waited for off this thread.
                cgroup.retire(rustix::io::dup(&watcher.pidfd).ok());
            }
            let gone = watcher.gone.clone();
            drop(watcher);
            gone.cancel();
            if !reaped {
                reap.await;
            }
        });
        tree
    }

    /// Whether nothing of the command is left.
    pub(crate) fn is_gone(&self) -> bool {
        self.gone.is_cancelled() || self.ended.load(Ordering::SeqCst)
    }

    pub(crate) async fn wait_gone(&self) {
        self.gone.cancelled().await;
    }

    fn is_reaped(&self) -> bool {
        self.reaped.is_cancelled()
    }

    /// Whether the helper has not exited yet, asked of its pidfd now.
    fn helper_running(&self) -> bool {
        crate::containment::pidfd::running(&self.pidfd)
    }

    /// The helper exited without having finished its job (saying that no descendant is left):
    /// something may have escaped it.
    fn helper_lost_track(&self) -> bool {
        self.is_reaped() && self.exit.get().copied() != Some(true)
    }

    /// After the helper was reaped: whether any process of the command is still alive.
    fn outlived_helper(&self) -> bool {
        match &self.cgroup {
            // The helper may still be in it, exiting: it is no member.
            Some(cgroup) => cgroup.procs().iter().any(|&pid| pid != self.pid),
            None if self.session_scan_needed() => !self.session_members(&snapshot()).is_empty(),
            None => false,
        }
    }

    fn session_scan_needed(&self) -> bool {
        self.cgroup.is_none()
            && self.helper_lost_track()
            && !self.session_over.load(Ordering::Relaxed)
    }

    /// Subreaper mode, after the helper died: live processes still in bash's session. `procs`
    /// must be a snapshot taken after the helper was reaped.
    fn session_members(&self, procs: &[ProcInfo]) -> Vec<i32> {
        if !self.session_scan_needed() {
            return Vec::new();
        }
        let session = self.session;
        // While the session has members its id cannot be reused, so a process holding that pid
        // outside the session means the session is over.
        let reused = procs.iter().any(|p| p.pid == session && p.sid != session);
        let found: Vec<i32> = if reused {
            Vec::new()
        } else {
            procs
                .iter()
                .filter(|p| p.alive && p.sid == session)
                .map(|p| p.pid)
                .collect()
        };
        if found.is_empty() {
            self.session_over.store(true, Ordering::Relaxed);
        }
        found
    }

    /// Live members of the tree (zombies excluded: they are already dead).
    pub(crate) fn members(&self) -> Vec<i32> {
        if self.is_gone() {
            // The pids may have been reused: never look again.
            return Vec::new();
        }
        // The helper sits in the command's cgroup too, but is no member of the command.
        let mut found: Vec<i32> = self
            .cgroup
            .as_ref()
            .map(|cgroup| cgroup.procs())
            .unwrap_or_default()
            .into_iter()
            .filter(|&pid| pid != self.pid)
            .collect();
        if self.cgroup.is_some() {
            // The cgroup holds everything below the helper (only a root process can move itself
            // out of it, see the README's limits): no walk of the process tree.
        } else if self.helper_running() {
            let below = subtree(self.pid);
            // Still running after the walk, so its pid was its own throughout (a pid is reused
            // only after its process exited and was reaped).
            if self.helper_running() {
                found.extend(below.iter().filter(|p| p.alive).map(|p| p.pid));
            }
        } else if self.session_scan_needed() {
            found.extend(self.session_members(&snapshot()));
        }
        found.sort_unstable();
        found.dedup();
        found
    }

    /// Sends `sig` to every live member; returns how many there were.
    ///
    /// Each member gets a pidfd first, and the signal only if it is still a member after that:
    /// a pid that ended meanwhile (and may belong to someone else now) is never signalled.
    /// SIGKILL also goes through `cgroup.kill` where there is a cgroup, which is atomic against
    /// members forking meanwhile; callers repeat it.
    fn signal_members(&self, sig: Signal) -> usize {
        if self.is_gone() {
            return 0;
        }
        if sig == Signal::KILL
            && let Some(cgroup) = &self.cgroup
        {
            cgroup.kill();
        }
        let first = self.members();
        let opened: Vec<(i32, OwnedFd)> = first
            .iter()
            .filter_map(|&pid| {
                let fd = rustix::process::pidfd_open(Pid::from_raw(pid)?, PidfdFlags::empty());
                fd.ok().map(|fd| (pid, fd))
            })
            .collect();
        let still = self.members();
        for (pid, fd) in &opened {
            if still.contains(pid) {
                // ESRCH for a member that just ended is fine.
                let _ = rustix::process::pidfd_send_signal(fd, sig);
            }
        }
        first.len()
    }

    /// SIGTERM to the whole tree, SIGKILL after `grace` to whatever is left, until it is gone.
    /// Only the first call escalates; later calls just wait for the tree to be gone.
    pub(crate) async fn terminate(&self, grace: Duration) {
        if self.terminating.swap(true, Ordering::SeqCst) || self.is_gone() {
            self.wait_gone().await;
            return;
        }
        self.signal_members(Signal::TERM);
        // A member forked while the first round was sent gets its TERM from a second one.
        let mut termed = self.members();
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            if tokio::time::timeout(KILL_POLL, self.wait_gone())
                .await
                .is_ok()
            {
                return;
            }
            if tokio::time::Instant::now() >= deadline {
                break;
            }
            let now = self.members();
            if now.iter().any(|pid| !termed.contains(pid)) {
                self.signal_members(Signal::TERM);
                termed.extend(now);
            }
        }
        let mut empty_since: Option<Instant> = None;
        loop {
            if self.signal_members(Signal::KILL) == 0 {
                let since = *empty_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= STUCK_HELPER {
                    // Our child, through its pidfd: safe whatever happened to it.
                    let _ = rustix::process::pidfd_send_signal(&self.pidfd, Signal::KILL);
                }
            } else {
                empty_since = None;
            }
            if tokio::time::timeout(KILL_POLL, self.wait_gone())
                .await
                .is_ok()
            {
                return;
            }
        }
    }

    /// Starts [`terminate`](Self::terminate) without waiting for it.
    pub(crate) fn terminate_in_background(self: &Arc<Self>, grace: Duration) {
        let tree = self.clone();
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move { tree.terminate(grace).await });
        }
    }
}

impl Drop for ProcTree {
    /// Normally the tree is gone before its last holder lets go. If not, nothing drives the
    /// command any more (its runtime went away): SIGKILL what is left, once. The helper, whose
    /// socket closes with it, kills the rest.
    fn drop(&mut self) {
        if !self.is_gone() {
            self.signal_members(Signal::KILL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_wait_status() {
        assert_eq!(
            Exit::from_wait_status(3 << 8),
            Exit {
                code: Some(3),
                signal: None
            }
        );
        assert_eq!(
            Exit::from_wait_status(libc::SIGKILL),
            Exit {
                code: None,
                signal: Some(9)
            }
        );
    }
}
