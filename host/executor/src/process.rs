//! A running command's process tree, seen from the host: who is in it, how to stop it, and when
//! it is gone.
//!
//! The tree's root is the command's spawn helper ([`crate::spawn_helper`]), the host's own child
//! and bash's parent. It is a child subreaper, so orphans (double forks, `setsid` daemons) are
//! re-parented to it and stay below it; it exits 0 once no descendant is left. In cgroup mode the
//! command's cgroup holds every process of the command as well, escapees included.
//!
//! What can outlive the helper is what it lost when the command killed it (`kill -9 $PPID`):
//! in cgroup mode the cgroup still holds it; in subreaper mode orphans then go to init, and the
//! host still finds those that stayed in bash's session (bash leads it; a session id is not
//! reused while the session has members).
//!
//! Signals go through pidfds opened for members found in the cgroup or below the helper, and only
//! to those still found there after the pidfd was opened: a member that ended meanwhile (its pid
//! possibly reused) is never hit.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Read as _;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use rustix::process::{Pid, PidfdFlags, Signal};
use tokio_util::sync::CancellationToken;

use crate::cgroup::TaskCgroup;

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
    /// The spawn helper: root of the tree, our child.
    pid: i32,
    /// The helper's pidfd.
    pidfd: OwnedFd,
    /// bash's pid, the id of the session it leads (none if the helper died before telling it).
    session: Option<i32>,
    /// The command's cgroup (cgroup mode).
    cgroup: Option<TaskCgroup>,
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
    /// watches them in the background. `tree_empty` resolves to true when the helper says it has
    /// no descendant left and is exiting, false if it ends without saying so.
    pub(crate) fn watch(
        pid: i32,
        pidfd: OwnedFd,
        session: Option<i32>,
        tree_empty: impl std::future::Future<Output = bool> + Send + 'static,
        cgroup: Option<TaskCgroup>,
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
                    // Checked too: a command could have written to the helper's socket.
                    if !empty || !watcher.members().is_empty() {
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
        matches!(readable_within(&self.pidfd, Duration::ZERO), Ok(false))
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
            && self.session.is_some()
            && self.helper_lost_track()
            && !self.session_over.load(Ordering::Relaxed)
    }

    /// Subreaper mode, after the helper died: live processes still in bash's session. `procs`
    /// must be a snapshot taken after the helper was reaped.
    fn session_members(&self, procs: &[ProcInfo]) -> Vec<i32> {
        let Some(session) = self.session.filter(|_| self.session_scan_needed()) else {
            return Vec::new();
        };
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
            .map(TaskCgroup::procs)
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

/// Whether `fd` turns readable within `wait` (a pidfd: its process has exited). Blocking.
pub(crate) fn readable_within(fd: impl std::os::fd::AsFd, wait: Duration) -> std::io::Result<bool> {
    let mut fds = [rustix::event::PollFd::new(
        &fd,
        rustix::event::PollFlags::IN,
    )];
    let wait = rustix::event::Timespec {
        tv_sec: i64::try_from(wait.as_secs()).unwrap_or(i64::MAX),
        tv_nsec: i64::from(wait.subsec_nanos()),
    };
    Ok(rustix::event::poll(&mut fds, Some(&wait))? > 0)
}

/// Resolves once the process whose pidfd is `pidfd` has exited (a pidfd turns readable then);
/// at once if the pidfd cannot be watched.
pub(crate) async fn exit_of(pidfd: OwnedFd) {
    // SAFETY: an OwnedFd, moved in: it stays open and the same until the AsyncFd drops it.
    let registered = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE)
    };
    if let Ok(fd) = registered {
        let _ = fd.readable().await;
    }
}

/// One process as `/proc/<pid>/stat` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcInfo {
    pub(crate) pid: i32,
    pub(crate) ppid: i32,
    pub(crate) pgid: i32,
    pub(crate) sid: i32,
    pub(crate) alive: bool,
}

/// All processes visible in `/proc`.
pub(crate) fn snapshot() -> Vec<ProcInfo> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut procs = Vec::new();
    let mut path = String::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        path.clear();
        path.push_str("/proc/");
        path.push_str(name.to_str().unwrap_or_default());
        path.push_str("/stat");
        if let Some(info) = std::fs::read_to_string(&path)
            .ok()
            .and_then(|stat| parse_stat(pid, &stat))
        {
            procs.push(info);
        }
    }
    procs
}

/// The descendants of `root` (zombies included, marked dead), found by walking the `children`
/// lists of their threads rather than all of `/proc`; from a full [`snapshot`] where the kernel
/// has no such lists.
pub(crate) fn subtree(root: i32) -> Vec<ProcInfo> {
    static CHILDREN_LISTS: OnceLock<bool> = OnceLock::new();
    if !*CHILDREN_LISTS.get_or_init(|| std::path::Path::new("/proc/thread-self/children").exists())
    {
        let all = snapshot();
        let found = descendants(root, &all);
        return all.into_iter().filter(|p| found.contains(&p.pid)).collect();
    }
    let mut procs = Vec::new();
    let mut queue = vec![root];
    let mut path = String::new();
    let mut text = String::new();
    while let Some(parent) = queue.pop() {
        path.clear();
        let _ = write!(path, "/proc/{parent}/task");
        let Ok(tasks) = std::fs::read_dir(&path) else {
            continue;
        };
        for task in tasks.flatten() {
            let mut children = task.path();
            children.push("children");
            text.clear();
            if std::fs::File::open(&children)
                .and_then(|mut f| f.read_to_string(&mut text))
                .is_err()
            {
                continue;
            }
            for pid in text
                .split_ascii_whitespace()
                .filter_map(|p| p.parse::<i32>().ok())
            {
                if pid == root || procs.iter().any(|p: &ProcInfo| p.pid == pid) {
                    continue;
                }
                path.clear();
                let _ = write!(path, "/proc/{pid}/stat");
                if let Some(info) = std::fs::read_to_string(&path)
                    .ok()
                    .and_then(|stat| parse_stat(pid, &stat))
                {
                    procs.push(info);
                    queue.push(pid);
                }
            }
        }
    }
    procs
}

/// Parses `pid (comm) state ppid ...`; `comm` may contain anything, so split after its last `)`.
fn parse_stat(pid: i32, stat: &str) -> Option<ProcInfo> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgid = fields.next()?.parse().ok()?;
    let sid = fields.next()?.parse().ok()?;
    Some(ProcInfo {
        pid,
        ppid,
        pgid,
        sid,
        alive: !matches!(state, "Z" | "X" | "x"),
    })
}

/// Live descendants of `root` in `procs`.
pub(crate) fn descendants(root: i32, procs: &[ProcInfo]) -> Vec<i32> {
    let mut children: HashMap<i32, Vec<&ProcInfo>> = HashMap::new();
    for p in procs {
        children.entry(p.ppid).or_default().push(p);
    }
    let mut found = Vec::new();
    let mut queue = vec![root];
    while let Some(parent) = queue.pop() {
        for child in children.get(&parent).into_iter().flatten() {
            if child.pid != root {
                queue.push(child.pid);
                if child.alive {
                    found.push(child.pid);
                }
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_names() {
        let info = parse_stat(42, "42 (a) b (c)) S 7 42 40 0 -1").unwrap();
        assert_eq!(
            info,
            ProcInfo {
                pid: 42,
                ppid: 7,
                pgid: 42,
                sid: 40,
                alive: true
            }
        );
        assert!(!parse_stat(1, "1 (z) Z 0 1 1 1").unwrap().alive);
    }

    #[test]
    fn finds_descendants_but_not_zombies() {
        let p = |pid, ppid, alive| ProcInfo {
            pid,
            ppid,
            pgid: 1,
            sid: 1,
            alive,
        };
        let procs = [
            p(1, 0, true),
            p(10, 1, true),
            p(11, 10, true),
            p(12, 11, false),
            p(13, 12, true),
            p(20, 1, true),
        ];
        let mut found = descendants(10, &procs);
        found.sort();
        assert_eq!(found, [11, 13]);
    }

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
