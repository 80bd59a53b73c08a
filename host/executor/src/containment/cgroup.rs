//! cgroup v2 containment: one cgroup per command, under one parent cgroup per executor.
//!
//! Layout: `<cgroup2 mount><the host's own cgroup>/dsh-<host pid>-<12 hex>/cmd-<n>`. The parent
//! (the executor's root) is created when the executor is built, after which a probe starts a
//! child inside a test cgroup, kills it through `cgroup.kill` and waits for `populated 0`; any
//! failure means subreaper containment instead, with the reason. A command's bash starts inside
//! its cgroup (`clone3(CLONE_INTO_CGROUP)`, see [`crate::helper::fork`]), so nothing of the
//! command runs outside it. No controller is ever enabled, so the "no internal processes" rule does not apply
//! and the host may stay in its own cgroup, the parent of the root.
//!
//! Every command gets a new cgroup, made ahead with its spawn helper (which serves that one
//! command) and removed once empty; none is ever reused. A cgroup that has been killed through `cgroup.kill` kills every process
//! later started into it with `CLONE_INTO_CGROUP`, and a command can write its own cgroup's
//! `cgroup.kill`: "empty" is not "fresh". (Measured here: a spawn into a new cgroup with its
//! `mkdir` and `rmdir` costs ~0.27 ms more than into a reused one; both are off the command's
//! path, the `mkdir` on the helper's blocking thread, the `rmdir` after the command ended.)
//!
//! Who removes what: the host removes a command's cgroup once it is empty, and the root when the
//! executor is dropped; should the host die, each command's helper kills its cgroup and removes
//! it and, if it was the last, the root; a new executor removes empty roots of dead hosts it
//! finds next to its own.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::helper::fork::{self, Forked};

/// How long the probe waits for its child to die and its cgroup to empty.
const PROBE_WAIT: Duration = Duration::from_secs(2);

/// The executor's parent cgroup of the per-command cgroups. Removed when dropped (every command
/// cgroup holds it, so that happens after the last one is gone).
#[derive(Debug)]
pub(crate) struct CgroupRoot {
    dir: PathBuf,
    next: AtomicU64,
}

/// The files of a command cgroup the host reads, kept open: a read from an open file costs a
/// fraction of an open, read and close (measured here: 0.7 µs against 5.9 µs).
#[derive(Debug)]
struct CgroupFiles {
    events: std::fs::File,
    procs: std::fs::File,
    /// The directory itself, for starting processes inside (`clone3(CLONE_INTO_CGROUP)`).
    dir: std::fs::File,
}

impl CgroupFiles {
    fn open(dir: &Path) -> io::Result<Self> {
        Ok(Self {
            events: std::fs::File::open(dir.join("cgroup.events"))?,
            procs: std::fs::File::open(dir.join("cgroup.procs"))?,
            dir: std::fs::File::open(dir)?,
        })
    }
}

/// The whole of a cgroup file, read from its start (each read regenerates it).
fn read_whole(file: &std::fs::File) -> io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; 256];
    let mut len = 0;
    loop {
        if len == buf.len() {
            buf.resize(len * 2, 0);
        }
        let n = file.read_at(&mut buf[len..], len as u64)?;
        if n == 0 {
            buf.truncate(len);
            return Ok(buf);
        }
        len += n;
    }
}

impl CgroupRoot {
    /// Creates and probes the root under the host's own cgroup; the error says why cgroups cannot
    /// be used here.
    pub(crate) fn create() -> Result<Arc<Self>, String> {
        let base = own_cgroup_dir()?;
        sweep_stale(&base);
        let dir = loop {
            let dir = base.join(format!(
                "dsh-{}-{}",
                std::process::id(),
                crate::output::spill::random_hex()
            ));
            match std::fs::create_dir(&dir) {
                Ok(()) => break dir,
                Err(err) if err.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(err) => {
                    return Err(format!(
                        "cannot create a cgroup under {}: {err}",
                        base.display()
                    ));
                }
            }
        };
        let root = Arc::new(Self {
            dir,
            next: AtomicU64::new(1),
        });
        if !root.dir.join("cgroup.kill").exists() {
            return Err(format!(
                "{} has no cgroup.kill (Linux 5.14 or later is needed)",
                root.dir.display()
            ));
        }
        root.probe()?;
        Ok(root)
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// A new cgroup for one command (recreating the root if [`release`](Self::release)d).
    pub(crate) fn create_task(self: &Arc<Self>) -> io::Result<TaskCgroup> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let dir = self.dir.join(format!("cmd-{n}"));
        if let Err(err) = std::fs::create_dir(&dir) {
            if err.kind() != io::ErrorKind::NotFound {
                return Err(err);
            }
            match std::fs::create_dir(&self.dir) {
                Err(err) if err.kind() != io::ErrorKind::AlreadyExists => return Err(err),
                _ => std::fs::create_dir(&dir)?,
            }
        }
        match CgroupFiles::open(&dir) {
            Ok(files) => Ok(TaskCgroup {
                dir,
                files,
                removed: AtomicBool::new(false),
                root: self.clone(),
            }),
            Err(err) => {
                let _ = std::fs::remove_dir(&dir);
                Err(err)
            }
        }
    }

    /// Removes the root if no command cgroup is in it (after a shutdown, so that a host that
    /// exits without dropping its executor leaves nothing); a later command recreates it.
    pub(crate) fn release(&self) {
        match std::fs::remove_dir(&self.dir) {
            Ok(()) => {}
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => {
                tracing::debug!(dir = %self.dir.display(), %err, "the executor's cgroup is still in use")
            }
        }
    }

    /// Starts a child inside a test cgroup, kills it with `cgroup.kill` and waits until the
    /// cgroup is empty: the whole mechanism, end to end.
    fn probe(&self) -> Result<(), String> {
        let dir = self.dir.join("probe");
        std::fs::create_dir(&dir)
            .map_err(|err| format!("cannot create a cgroup under {}: {err}", self.dir.display()))?;
        let result = probe_in(&dir);
        if let Err(err) = std::fs::remove_dir(&dir) {
            tracing::debug!(dir = %dir.display(), %err, "cannot remove the probe cgroup");
        }
        result
    }
}

impl Drop for CgroupRoot {
    fn drop(&mut self) {
        self.release();
    }
}

fn probe_in(dir: &Path) -> Result<(), String> {
    let dir_file = std::fs::File::open(dir).map_err(|err| format!("probe: {err}"))?;
    let host = std::process::id() as i32;
    // SAFETY: the child only makes raw system calls (prctl, getppid, pause, _exit): safe in the
    // fork of a multi-threaded process.
    let (child, pidfd) = match unsafe { fork::fork_into(Some(dir_file.as_fd())) } {
        Ok(Forked::Child) => {
            let _ = rustix::process::set_parent_process_death_signal(Some(
                rustix::process::Signal::KILL,
            ));
            if rustix::process::getppid().map(|p| p.as_raw_nonzero().get()) == Some(host) {
                loop {
                    // SAFETY: pause has no preconditions.
                    unsafe { libc::pause() };
                }
            }
            // SAFETY: ends the child at once.
            unsafe { libc::_exit(1) }
        }
        Ok(Forked::Parent { pid, pidfd }) => (pid, pidfd),
        Err(err) => return Err(format!("probe: cannot start a process: {err}")),
    };
    let outcome = (|| {
        let listed = std::fs::read_to_string(dir.join("cgroup.procs"))
            .map_err(|err| format!("cannot read cgroup.procs: {err}"))?;
        if !parse_pids(&listed).contains(&child) {
            return Err("the probe process did not show up in its cgroup".to_string());
        }
        std::fs::write(dir.join("cgroup.kill"), "1")
            .map_err(|err| format!("cannot write cgroup.kill: {err}"))?;
        Ok(())
    })();
    // The child should die of cgroup.kill; if it does not in time, it is killed directly.
    let mut killed_directly = outcome.is_err();
    if killed_directly {
        let _ = rustix::process::pidfd_send_signal(&pidfd, rustix::process::Signal::KILL);
    }
    if !matches!(
        crate::containment::pidfd::readable_within(&pidfd, PROBE_WAIT),
        Ok(true)
    ) {
        let _ = rustix::process::pidfd_send_signal(&pidfd, rustix::process::Signal::KILL);
        killed_directly = true;
    }
    let status = loop {
        match rustix::process::waitpid(
            rustix::process::Pid::from_raw(child),
            rustix::process::WaitOptions::empty(),
        ) {
            Err(rustix::io::Errno::INTR) => continue,
            Ok(Some((_, status))) => break Some(status),
            _ => break None,
        }
    };
    outcome?;
    if killed_directly || status.is_none_or(|s| s.terminating_signal() != Some(libc::SIGKILL)) {
        return Err("cgroup.kill did not kill the probe process".to_string());
    }
    let events = dir.join("cgroup.events");
    let deadline = Instant::now() + PROBE_WAIT;
    while populated_at(&events) {
        if Instant::now() >= deadline {
            return Err("the probe cgroup stayed populated after its process died".to_string());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// One command's cgroup.
#[derive(Debug)]
pub(crate) struct TaskCgroup {
    dir: PathBuf,
    files: CgroupFiles,
    removed: AtomicBool,
    /// Keeps the root until this cgroup is gone.
    root: Arc<CgroupRoot>,
}

impl TaskCgroup {
    /// The cgroup's directory, open.
    pub(crate) fn dir_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.files.dir.as_fd()
    }

    #[cfg(test)]
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The processes in the cgroup (zombies have left it already).
    pub(crate) fn procs(&self) -> Vec<i32> {
        read_whole(&self.files.procs)
            .map(|text| parse_pids(&String::from_utf8_lossy(&text)))
            .unwrap_or_default()
    }

    /// SIGKILLs every process in the cgroup at once, including ones forking meanwhile.
    pub(crate) fn kill(&self) {
        if let Err(err) = std::fs::write(self.dir.join("cgroup.kill"), "1")
            && !self.removed.load(Ordering::Relaxed)
        {
            tracing::warn!(dir = %self.dir.display(), %err, "cannot write cgroup.kill");
        }
    }

    /// Whether any process is left in the cgroup. An unreadable cgroup counts as empty, so that
    /// nobody waits forever on a cgroup someone else removed.
    pub(crate) fn populated(&self) -> bool {
        read_whole(&self.files.events).is_ok_and(|text| events_say(&text, b"populated 1"))
    }

    /// Whether the cgroup holds exactly `helper` and is not frozen: what a helper made ahead
    /// must still find when it is taken for a command (anything else was put there, or done to
    /// it, from outside).
    pub(crate) fn holds_only(&self, helper: i32) -> bool {
        let frozen =
            read_whole(&self.files.events).is_ok_and(|text| events_say(&text, b"frozen 1"));
        !frozen && self.procs() == [helper]
    }

    /// Removes a cgroup whose processes are gone (or never were), now.
    pub(crate) fn remove_unused(&self) {
        self.removed.store(true, Ordering::Relaxed);
        if let Err(err) = remove_tree(&self.dir) {
            tracing::debug!(dir = %self.dir.display(), %err, "cannot remove an unused cgroup");
        }
    }

    /// Done with the cgroup: removed once `helper` (the command's spawn helper, which may still
    /// be in it, exiting) has exited and it is empty; waited for on the runtime, without a
    /// thread.
    pub(crate) fn retire(&self, helper: Option<OwnedFd>) {
        if self.removed.swap(true, Ordering::Relaxed) {
            return;
        }
        let dir = self.dir.clone();
        let root = self.root.clone();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            remove_on_thread(dir, root);
            return;
        };
        // Should the runtime go away first, the removal moves to a thread.
        let mut pending = PendingRemoval(Some((dir, root)));
        runtime.spawn(async move {
            if let Some(helper) = helper {
                let exit = crate::containment::pidfd::exit_of(helper);
                let _ = tokio::time::timeout(Duration::from_secs(10), exit).await;
            }
            if let Some((dir, _)) = &pending.0 {
                let events = dir.join("cgroup.events");
                let deadline = Instant::now() + Duration::from_secs(10);
                while populated_at(&events) && Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                remove(dir);
            }
            pending.0.take();
        });
    }
}

/// A cgroup removal still to do; done on a thread if dropped undone.
struct PendingRemoval(Option<(PathBuf, Arc<CgroupRoot>)>);

impl Drop for PendingRemoval {
    fn drop(&mut self) {
        if let Some((dir, root)) = self.0.take() {
            remove_on_thread(dir, root);
        }
    }
}

/// Removes the command cgroup `dir` (empty by now), saying why not if it cannot.
fn remove(dir: &Path) {
    match remove_tree(dir) {
        Ok(()) => {}
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        Err(err) => {
            tracing::warn!(dir = %dir.display(), %err, "cannot remove a command's cgroup")
        }
    }
}

/// Removes the cgroup `dir` and every cgroup below it, deepest first: a command may have made
/// sub-cgroups in its own, and a cgroup with a child cannot be removed. All must be free of
/// processes by now. Iterative, so that no nesting depth a command made can exhaust the stack.
pub(crate) fn remove_tree(dir: &Path) -> io::Result<()> {
    // Every directory below `dir`, each after its parent; removed in reverse, children first.
    let mut below = Vec::new();
    let mut to_list = vec![dir.to_path_buf()];
    while let Some(path) = to_list.pop() {
        for entry in std::fs::read_dir(&path).into_iter().flatten().flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                below.push(entry.path());
                to_list.push(entry.path());
            }
        }
    }
    for path in below.iter().rev() {
        let _ = std::fs::remove_dir(path);
    }
    std::fs::remove_dir(dir)
}

/// Removes the cgroup `dir` once it is empty, on a thread of its own: for a cgroup dropped with
/// its runtime, whose tasks then run no more.
fn remove_on_thread(dir: PathBuf, root: Arc<CgroupRoot>) {
    let work = move || {
        let events = dir.join("cgroup.events");
        let deadline = Instant::now() + Duration::from_secs(10);
        while populated_at(&events) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        remove(&dir);
        drop(root);
    };
    if let Err(err) = std::thread::Builder::new()
        .name("dsh-cgroup-cleanup".to_string())
        .spawn(work)
    {
        tracing::debug!(%err, "cannot start a cgroup cleanup thread");
    }
}

impl Drop for TaskCgroup {
    /// Normally the cgroup was retired once empty. Dropped while still populated, nothing drives
    /// the command any more (its runtime went away): kill what is left and remove the cgroup
    /// once it is empty.
    fn drop(&mut self) {
        if self.removed.swap(true, Ordering::Relaxed) {
            return;
        }
        if self.populated() {
            self.kill();
        }
        remove_on_thread(self.dir.clone(), self.root.clone());
    }
}

fn populated_at(events: &Path) -> bool {
    std::fs::read(events).is_ok_and(|text| events_say(&text, b"populated 1"))
}

/// Whether the text of a `cgroup.events` file has `line` (`populated 1`, `frozen 1`).
fn events_say(events: &[u8], line: &[u8]) -> bool {
    events.split(|&b| b == b'\n').any(|l| l == line)
}

fn parse_pids(text: &str) -> Vec<i32> {
    text.lines().filter_map(|l| l.trim().parse().ok()).collect()
}

// ---------------------------------------------------------------------------------------------
// Finding the host's cgroup

/// The directory of the host's own cgroup in the cgroup v2 hierarchy.
fn own_cgroup_dir() -> Result<PathBuf, String> {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|err| format!("cannot read /proc/self/cgroup: {err}"))?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|err| format!("cannot read /proc/self/mountinfo: {err}"))?;
    let dir = cgroup_dir_from(&cgroup, &mountinfo)?;
    if !dir.is_dir() {
        return Err(format!("{} is not a directory", dir.display()));
    }
    Ok(dir)
}

/// [`own_cgroup_dir`] from the texts of `/proc/self/cgroup` and `/proc/self/mountinfo`.
fn cgroup_dir_from(cgroup: &str, mountinfo: &str) -> Result<PathBuf, String> {
    let own = cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or("the host is in no cgroup v2 hierarchy (no 0:: line in /proc/self/cgroup)")?;
    if !own.starts_with('/') || own.ends_with(" (deleted)") {
        return Err(format!("the host's cgroup {own:?} is not usable"));
    }
    let mut mounted = false;
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        if right.split_whitespace().next() != Some("cgroup2") {
            continue;
        }
        mounted = true;
        let fields: Vec<&str> = left.split_whitespace().collect();
        let (Some(root), Some(mount_point)) = (fields.get(3), fields.get(4)) else {
            continue;
        };
        let (root, mount_point) = (unescape(root), unescape(mount_point));
        let rel = if root == "/" {
            Some(own.trim_start_matches('/'))
        } else if own == root {
            Some("")
        } else {
            own.strip_prefix(root.as_str())
                .and_then(|r| r.strip_prefix('/'))
        };
        if let Some(rel) = rel {
            let mut dir = PathBuf::from(mount_point);
            if !rel.is_empty() {
                dir.push(rel);
            }
            return Ok(dir);
        }
    }
    Err(if mounted {
        format!("no cgroup v2 mount shows the host's cgroup {own}")
    } else {
        "no cgroup v2 hierarchy is mounted".to_string()
    })
}

/// Undoes mountinfo's octal escapes (`\040` for a space, ...).
fn unescape(field: &str) -> String {
    String::from_utf8_lossy(&unescape_bytes(field)).into_owned()
}

/// mountinfo's field `field` with its octal escapes undone, as bytes (a path).
pub(crate) fn unescape_bytes(field: &str) -> Vec<u8> {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && bytes[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let value =
                (bytes[i + 1] - b'0') * 64 + (bytes[i + 2] - b'0') * 8 + (bytes[i + 3] - b'0');
            out.push(value);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}

/// Removes the empty roots (and their empty command cgroups) of executors whose host process is
/// gone, e.g. after a host was SIGKILLed while idle. Populated ones are left alone.
fn sweep_stale(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = stale_root_pid(&name.to_string_lossy()) else {
            continue;
        };
        if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let dir = entry.path();
        match remove_tree(&dir) {
            Ok(()) => tracing::debug!(dir = %dir.display(), "removed a dead host's cgroup"),
            Err(err) => {
                tracing::debug!(dir = %dir.display(), %err, "cannot remove a dead host's cgroup")
            }
        }
    }
}

/// The host pid in a root's name `dsh-<pid>-<12 hex>`.
fn stale_root_pid(name: &str) -> Option<u32> {
    let (pid, hex) = name.strip_prefix("dsh-")?.split_once('-')?;
    if hex.len() != 12 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    pid.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn finds_the_hybrid_mount() {
        let cgroup = "4:memory:/x\n0::/\n";
        assert_eq!(
            cgroup_dir_from(cgroup, HYBRID).unwrap(),
            PathBuf::from("/sys/fs/cgroup/unified")
        );
        let cgroup = "0::/user.slice/a b.scope\n";
        assert_eq!(
            cgroup_dir_from(cgroup, HYBRID).unwrap(),
            PathBuf::from("/sys/fs/cgroup/unified/user.slice/a b.scope")
        );
    }

    #[test]
    fn maps_a_bind_mounted_subtree_and_unescapes() {
        let mountinfo =
            "30 1 0:26 /lxc/c1 /sys/fs/cgroup\\040x rw - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(
            cgroup_dir_from("0::/lxc/c1/init.scope\n", mountinfo).unwrap(),
            PathBuf::from("/sys/fs/cgroup x/init.scope")
        );
        assert_eq!(
            cgroup_dir_from("0::/lxc/c1\n", mountinfo).unwrap(),
            PathBuf::from("/sys/fs/cgroup x")
        );
        assert!(cgroup_dir_from("0::/lxc/c10\n", mountinfo).is_err());
    }

    #[test]
    fn explains_missing_pieces() {
        assert!(
            cgroup_dir_from("1:name=systemd:/\n", HYBRID)
                .unwrap_err()
                .contains("no cgroup v2")
        );
        let v1_only = "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
        assert_eq!(
            cgroup_dir_from("0::/\n", v1_only).unwrap_err(),
            "no cgroup v2 hierarchy is mounted"
        );
        assert!(cgroup_dir_from("0::/gone (deleted)\n", HYBRID).is_err());
    }

    #[test]
    fn recognises_root_names() {
        assert_eq!(stale_root_pid("dsh-123-0123456789ab"), Some(123));
        assert_eq!(stale_root_pid("dsh-123-0123456789a"), None);
        assert_eq!(stale_root_pid("dsh-x-0123456789ab"), None);
        assert_eq!(stale_root_pid("other"), None);
    }

    /// Where this machine allows cgroups: the whole life of a command cgroup, and a join that
    /// fails in the child being told apart from a failed exec.
    #[test]
    fn every_command_gets_a_fresh_cgroup_removed_after_it() {
        let root = match CgroupRoot::create() {
            Ok(root) => root,
            Err(reason) => {
                assert!(
                    std::env::var_os("DSH_REQUIRE_CGROUPS").is_none(),
                    "cgroups are required here: {reason}"
                );
                eprintln!("NOTICE: no cgroup v2 can be created here: {reason}");
                return;
            }
        };
        let a = root.create_task().unwrap();
        let b = root.create_task().unwrap();
        assert_ne!(a.dir(), b.dir(), "no two commands share a cgroup");
        assert!(!a.populated());
        let dir = a.dir().to_path_buf();
        a.retire(None);
        let deadline = Instant::now() + Duration::from_secs(10);
        while dir.exists() {
            assert!(Instant::now() < deadline, "{dir:?} was not removed");
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(a);
        drop(b);
        let root_dir = root.dir().to_path_buf();
        drop(root);
        while root_dir.exists() {
            assert!(Instant::now() < deadline, "{root_dir:?} was not removed");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
