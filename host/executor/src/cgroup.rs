//! cgroup v2 containment: one cgroup per command, under one parent cgroup per executor.
//!
//! Layout: `<cgroup2 mount><the host's own cgroup>/dsh-<host pid>-<12 hex>/cmd-<n>`. The parent
//! (the executor's root) is created when the executor is built, after which a probe moves a forked
//! child into a test cgroup, kills it through `cgroup.kill` and waits for `populated 0`; any failure
//! means subreaper containment instead, with the reason. A command's `bash` starts inside its
//! cgroup (`clone3(CLONE_INTO_CGROUP)`, see [`crate::zygote`]; where that is unavailable it joins
//! before `exec`), so nothing of the command runs outside it.
//! No controller is ever enabled, so the "no internal processes" rule does not apply and the host
//! may stay in its own cgroup, the parent of the root.
//!
//! Reuse: a command's cgroup that is empty when the command ends is kept (up to [`SPARE`] of
//! them) for a later command, because starting a process in a cgroup that has been used before
//! costs less than in a new one (measured here: a spawn into a fresh cgroup, with its `mkdir`
//! and `rmdir`, 1.47 ms; into a reused one 1.20 ms; none 1.12 ms).
//!
//! Who removes what: the host removes a command's cgroup that is not kept, and the root with the
//! kept ones when the executor is dropped; should the host die, the spawner (or, for commands the
//! host forked itself, their supervisors) kills the commands' cgroups and removes them and the
//! root; a new executor removes empty roots of dead hosts it finds next to its own.

use std::ffi::{CStr, CString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use libc::c_int;

use crate::supervisor::errno;

/// Most empty command cgroups kept for reuse.
const SPARE: usize = 8;

/// How long the probe waits for its child to die and its cgroup to empty.
const PROBE_WAIT: Duration = Duration::from_secs(2);

/// Added to the errno of a failed join in the forked child, so that the host can tell it from a
/// failed `exec` (std hands the child's error code to the parent unchanged).
pub(crate) const JOIN_ERROR_BASE: i32 = 0x4000_0000;

/// The error of a spawn whose child could not join its cgroup, as the plain OS error.
pub(crate) fn join_error(err: &io::Error) -> Option<io::Error> {
    match err.raw_os_error() {
        Some(code) if code >= JOIN_ERROR_BASE => {
            Some(io::Error::from_raw_os_error(code - JOIN_ERROR_BASE))
        }
        _ => None,
    }
}

/// The executor's parent cgroup of the per-command cgroups. Removed when dropped (every command
/// cgroup holds it, so that happens after the last one is gone).
#[derive(Debug)]
pub(crate) struct CgroupRoot {
    dir: PathBuf,
    next: AtomicU64,
    /// Empty command cgroups kept for reuse.
    spare: Mutex<Vec<(PathBuf, Arc<CgroupFiles>)>>,
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
    fn open(dir: &Path) -> io::Result<Arc<Self>> {
        Ok(Arc::new(Self {
            events: std::fs::File::open(dir.join("cgroup.events"))?,
            procs: std::fs::File::open(dir.join("cgroup.procs"))?,
            dir: std::fs::File::open(dir)?,
        }))
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

/// The root's files as C strings, prepared for the spawner, which cleans up if the host dies.
#[derive(Debug, Clone)]
pub(crate) struct RootPaths {
    pub(crate) dir: CString,
    pub(crate) kill: CString,
    pub(crate) events: CString,
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
                crate::spill::random_hex()
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
            spare: Mutex::new(Vec::new()),
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

    pub(crate) fn raw_paths(&self) -> io::Result<RootPaths> {
        Ok(RootPaths {
            dir: c_path(&self.dir)?,
            kill: c_path(&self.dir.join("cgroup.kill"))?,
            events: c_path(&self.dir.join("cgroup.events"))?,
        })
    }

    fn spare(&self) -> MutexGuard<'_, Vec<(PathBuf, Arc<CgroupFiles>)>> {
        self.spare.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An empty cgroup for one command: a kept one, else a new one (recreating the root if
    /// [`release`](Self::release)d).
    pub(crate) fn create_task(self: &Arc<Self>) -> io::Result<TaskCgroup> {
        let kept = self.spare().pop();
        let (dir, files) = match kept {
            Some(kept) => kept,
            None => {
                let dir = self.new_task_dir()?;
                let files = CgroupFiles::open(&dir);
                match files {
                    Ok(files) => (dir, files),
                    Err(err) => {
                        let _ = std::fs::remove_dir(&dir);
                        return Err(err);
                    }
                }
            }
        };
        let paths = CgroupPaths {
            procs: c_path(&dir.join("cgroup.procs"))?,
            kill: c_path(&dir.join("cgroup.kill"))?,
            events: c_path(&dir.join("cgroup.events"))?,
            dir: c_path(&dir)?,
            root: c_path(&self.dir)?,
        };
        Ok(TaskCgroup {
            dir,
            paths,
            files,
            removed: AtomicBool::new(false),
            _root: self.clone(),
        })
    }

    fn new_task_dir(&self) -> io::Result<PathBuf> {
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
        Ok(dir)
    }

    /// Keeps the empty cgroup `dir` for a later command; false if enough are kept.
    fn keep(&self, dir: &Path, files: &Arc<CgroupFiles>) -> bool {
        let mut spare = self.spare();
        if spare.len() >= SPARE {
            return false;
        }
        spare.push((dir.to_path_buf(), files.clone()));
        true
    }

    /// Removes the kept cgroups and the root if no other command cgroup is in it (after a
    /// shutdown, so that a host that exits without dropping its executor leaves nothing); a later
    /// command recreates it.
    pub(crate) fn release(&self) {
        for (dir, _) in self.spare().drain(..) {
            if let Err(err) = std::fs::remove_dir(&dir)
                && err.kind() != io::ErrorKind::NotFound
            {
                tracing::debug!(dir = %dir.display(), %err, "cannot remove a kept command cgroup");
            }
        }
        match std::fs::remove_dir(&self.dir) {
            Ok(()) => {}
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => {
                tracing::debug!(dir = %self.dir.display(), %err, "the executor's cgroup is still in use")
            }
        }
    }

    /// Moves a forked child into a test cgroup, kills it with `cgroup.kill` and waits until the
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

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(io::Error::other)
}

fn probe_in(dir: &Path) -> Result<(), String> {
    let procs = c_path(&dir.join("cgroup.procs")).map_err(|e| e.to_string())?;
    let mut fds = [0 as c_int; 2];
    // SAFETY: pipe2 fills `fds` on success.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(format!("probe: {}", io::Error::last_os_error()));
    }
    let [read_fd, write_fd] = fds;
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // Start the probe inside its cgroup as commands are started; where clone3 cannot do that,
    // fork and let the child join through cgroup.procs.
    let dir_c = c_path(dir).map_err(|e| e.to_string())?;
    // SAFETY: opening a directory we own; the descriptor is closed below.
    let dirfd = unsafe {
        libc::open(
            dir_c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    // SAFETY: the child only makes async-signal-safe calls (prctl, getppid, open, write, close,
    // pause, _exit) on memory prepared before the fork, and never returns.
    let (child, joined) = unsafe {
        match if dirfd >= 0 {
            crate::supervisor::fork_into_cgroup(dirfd)
        } else {
            -libc::EBADF
        } {
            pid if pid >= 0 => (pid, true),
            _ => (libc::fork(), false),
        }
    };
    if child == 0 {
        unsafe {
            libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            );
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            let code: u8 = match if joined { Ok(()) } else { join(&procs) } {
                Ok(()) => 0,
                Err(errno) => errno.clamp(1, 255) as u8,
            };
            libc::write(write_fd, (&code as *const u8).cast(), 1);
            if code != 0 {
                libc::_exit(1);
            }
            loop {
                libc::pause();
            }
        }
    }
    // SAFETY: closing our copy of the write end and the directory, which we own.
    unsafe {
        libc::close(write_fd);
        if dirfd >= 0 {
            libc::close(dirfd);
        }
    }
    if child < 0 {
        // SAFETY: closing the read end, which we own.
        unsafe { libc::close(read_fd) };
        return Err(format!(
            "probe: cannot fork: {}",
            io::Error::last_os_error()
        ));
    }
    let mut code = [0u8; 1];
    let got = loop {
        // SAFETY: reading one byte into a local buffer.
        let n = unsafe { libc::read(read_fd, code.as_mut_ptr().cast(), 1) };
        if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        break n;
    };
    // SAFETY: closing the read end, which we own.
    unsafe { libc::close(read_fd) };

    let outcome = (|| {
        if got != 1 {
            return Err("the probe process ended before joining its cgroup".to_string());
        }
        if code[0] != 0 {
            return Err(format!(
                "cannot move a process into a cgroup: {}",
                io::Error::from_raw_os_error(i32::from(code[0]))
            ));
        }
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
    let deadline = Instant::now() + PROBE_WAIT;
    let mut killed_directly = outcome.is_err();
    if killed_directly {
        // SAFETY: `child` is our unreaped child.
        unsafe { libc::kill(child, libc::SIGKILL) };
    }
    // Woken by the child's death through a pidfd where there is one, else polled.
    // SAFETY: pidfd_open on our unreaped child; the result is ours.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, child, 0) } as c_int;
    let status = loop {
        let mut status: c_int = 0;
        // SAFETY: waiting for our own child only.
        let pid = unsafe { libc::waitpid(child, &mut status, libc::WNOHANG) };
        if pid == child {
            break Some(status);
        }
        if pid < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            break None;
        }
        let now = Instant::now();
        if !killed_directly && now >= deadline {
            // SAFETY: as above.
            unsafe { libc::kill(child, libc::SIGKILL) };
            killed_directly = true;
        }
        if pidfd >= 0 {
            let mut poll = libc::pollfd {
                fd: pidfd,
                events: libc::POLLIN,
                revents: 0,
            };
            let wait = deadline
                .saturating_duration_since(now)
                .as_millis()
                .clamp(1, 1000) as c_int;
            // SAFETY: polling one valid descriptor.
            unsafe { libc::poll(&mut poll, 1, wait) };
        } else {
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    if pidfd >= 0 {
        // SAFETY: closing the pidfd we opened.
        unsafe { libc::close(pidfd) };
    }
    outcome?;
    if killed_directly
        || !status.is_some_and(|s| libc::WIFSIGNALED(s) && libc::WTERMSIG(s) == libc::SIGKILL)
    {
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

/// The cgroup files of one command as C strings, prepared before `fork` for the child (which
/// joins) and the supervisor (which cleans up if the host dies).
#[derive(Debug, Clone)]
pub(crate) struct CgroupPaths {
    pub(crate) procs: CString,
    pub(crate) kill: CString,
    pub(crate) events: CString,
    pub(crate) dir: CString,
    pub(crate) root: CString,
}

/// One command's cgroup.
#[derive(Debug)]
pub(crate) struct TaskCgroup {
    dir: PathBuf,
    paths: CgroupPaths,
    files: Arc<CgroupFiles>,
    removed: AtomicBool,
    /// Keeps the root until this cgroup is gone.
    _root: Arc<CgroupRoot>,
}

impl TaskCgroup {
    pub(crate) fn paths(&self) -> &CgroupPaths {
        &self.paths
    }

    /// The cgroup's directory, open.
    pub(crate) fn dir_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
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
        read_whole(&self.files.events).is_ok_and(|text| says_populated(&text))
    }

    /// Done with the (empty) cgroup: kept for a later command, or removed.
    pub(crate) fn retire(&self) {
        if self.removed.swap(true, Ordering::Relaxed) {
            return;
        }
        if !self.populated() && self._root.keep(&self.dir, &self.files) {
            return;
        }
        match std::fs::remove_dir(&self.dir) {
            Ok(()) => {}
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => {
                tracing::warn!(dir = %self.dir.display(), %err, "cannot remove a command's cgroup")
            }
        }
    }
}

impl Drop for TaskCgroup {
    /// Normally the cgroup was removed once empty. Dropped while still populated, nothing drives
    /// the command any more (its runtime went away): kill what is left, and remove the cgroup
    /// once it is empty, off this thread.
    fn drop(&mut self) {
        if self.removed.load(Ordering::Relaxed) {
            return;
        }
        if !self.populated() {
            self.retire();
            return;
        }
        self.kill();
        self.removed.store(true, Ordering::Relaxed);
        let dir = self.dir.clone();
        let root = self._root.clone();
        let spawned = std::thread::Builder::new()
            .name("dsh-cgroup-cleanup".to_string())
            .spawn(move || {
                let events = dir.join("cgroup.events");
                let deadline = Instant::now() + Duration::from_secs(10);
                while populated_at(&events) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(5));
                }
                let _ = std::fs::remove_dir(&dir);
                drop(root);
            });
        if let Err(err) = spawned {
            tracing::debug!(%err, "cannot start a cgroup cleanup thread");
        }
    }
}

fn populated_at(events: &Path) -> bool {
    std::fs::read(events).is_ok_and(|text| says_populated(&text))
}

fn says_populated(events: &[u8]) -> bool {
    events.split(|&b| b == b'\n').any(|l| l == b"populated 1")
}

fn parse_pids(text: &str) -> Vec<i32> {
    text.lines().filter_map(|l| l.trim().parse().ok()).collect()
}

// ---------------------------------------------------------------------------------------------
// Async-signal-safe helpers for forked children: raw libc on prepared paths, no allocation.

/// Writes `bytes` to the file at `path` in one `write`.
///
/// # Safety
/// Async-signal-safe; may be called between `fork` and `exec`.
pub(crate) unsafe fn write_file(path: &CStr, bytes: &[u8]) -> Result<(), c_int> {
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(errno());
        }
        let n = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        let result = if n == bytes.len() as isize {
            Ok(())
        } else {
            Err(errno())
        };
        libc::close(fd);
        result
    }
}

/// Moves the calling process into the cgroup whose `cgroup.procs` is `procs`.
///
/// # Safety
/// Async-signal-safe; may be called between `fork` and `exec`.
pub(crate) unsafe fn join(procs: &CStr) -> Result<(), c_int> {
    unsafe { write_file(procs, b"0") }
}

/// [`join`] for the spawn hook: the error as an `io::Error` the host recognises ([`join_error`]).
///
/// # Safety
/// Async-signal-safe; may be called between `fork` and `exec`.
pub(crate) unsafe fn join_for_spawn(paths: &CgroupPaths) -> io::Result<()> {
    unsafe { join(&paths.procs) }.map_err(|e| io::Error::from_raw_os_error(JOIN_ERROR_BASE + e))
}

/// Removes every (empty) cgroup under `dir`, then `dir` itself; populated ones stay, and so
/// does `dir` then.
///
/// # Safety
/// Async-signal-safe.
pub(crate) unsafe fn remove_raw(dir: &CStr) {
    unsafe {
        let fd = libc::open(
            dir.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if fd >= 0 {
            // `struct linux_dirent64`: inode (8), offset (8), record length (2), type (1), name.
            let mut buf = [0u64; 512];
            loop {
                let n = libc::syscall(
                    libc::SYS_getdents64,
                    fd,
                    buf.as_mut_ptr(),
                    std::mem::size_of_val(&buf),
                );
                if n <= 0 {
                    break;
                }
                let bytes = std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n as usize);
                let mut at = 0;
                while at + 19 < bytes.len() {
                    let reclen = u16::from_ne_bytes([bytes[at + 16], bytes[at + 17]]) as usize;
                    let kind = bytes[at + 18];
                    let name = bytes[at + 19..].as_ptr().cast::<libc::c_char>();
                    if kind == libc::DT_DIR && *name != b'.' as libc::c_char {
                        libc::unlinkat(fd, name, libc::AT_REMOVEDIR);
                    }
                    if reclen == 0 {
                        break;
                    }
                    at += reclen;
                }
            }
            libc::close(fd);
        }
        libc::rmdir(dir.as_ptr());
    }
}

/// Whether `cgroup.events` at `events` says populated; unreadable counts as empty.
///
/// # Safety
/// Async-signal-safe.
pub(crate) unsafe fn populated_raw(events: &CStr) -> bool {
    unsafe {
        let fd = libc::open(events.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return false;
        }
        let mut buf = [0u8; 256];
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        if n <= 0 {
            return false;
        }
        let text = &buf[..n as usize];
        let needle = b"populated 1";
        text.windows(needle.len()).any(|w| w == needle)
    }
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
    String::from_utf8_lossy(&out).into_owned()
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
        if let Ok(children) = std::fs::read_dir(&dir) {
            for child in children.flatten() {
                if child.file_type().is_ok_and(|t| t.is_dir()) {
                    let _ = std::fs::remove_dir(child.path());
                }
            }
        }
        match std::fs::remove_dir(&dir) {
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

    #[test]
    fn recognises_join_errors() {
        let err = io::Error::from_raw_os_error(JOIN_ERROR_BASE + libc::ENOENT);
        assert_eq!(join_error(&err).unwrap().raw_os_error(), Some(libc::ENOENT));
        assert!(join_error(&io::Error::from_raw_os_error(libc::ENOENT)).is_none());
        assert!(join_error(&io::Error::other("x")).is_none());
    }

    /// Where this machine allows cgroups: the whole life of a command cgroup, and a join that
    /// fails in the child being told apart from a failed exec.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn command_cgroups_live_and_die_with_their_command() {
        let Ok(root) = CgroupRoot::create() else {
            eprintln!("NOTICE: no cgroup v2 can be created here");
            return;
        };
        assert!(root.dir().join("cgroup.kill").exists());
        let cg = root.create_task().unwrap();
        let dir = cg.dir().to_path_buf();
        assert!(!cg.populated());
        let spawned = crate::spawn::spawn(
            std::ffi::OsStr::new("sleep"),
            "unused",
            Path::new("/"),
            &[],
            Some(cg),
        );
        // `sleep -c unused` fails at once; that is fine, it ran inside the cgroup.
        assert!(spawned.is_ok());
        drop(spawned);
        // Once empty, the cgroup is kept for the next command.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !root.spare().iter().any(|(kept, _)| *kept == dir) {
            assert!(Instant::now() < deadline, "{dir:?} was not kept");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(!populated_at(&dir.join("cgroup.events")));

        let cg = root.create_task().unwrap();
        assert_eq!(cg.dir(), dir, "the kept cgroup is reused");
        std::fs::remove_dir(cg.dir()).unwrap();
        match crate::spawn::spawn(
            std::ffi::OsStr::new("bash"),
            "true",
            Path::new("/"),
            &[],
            Some(cg),
        ) {
            Ok(_) => panic!("joined a removed cgroup"),
            Err(err) => assert_eq!(
                join_error(&err).and_then(|e| e.raw_os_error()),
                Some(libc::ENOENT),
                "{err}"
            ),
        }
        // The root goes with its last holder, kept cgroups and all.
        for _ in 0..3 {
            let kept = root.create_task().unwrap();
            drop(kept);
        }
        assert!(!root.spare().is_empty());
        let dir = root.dir().to_path_buf();
        drop(root);
        while dir.exists() {
            assert!(Instant::now() < deadline, "{dir:?} was not removed");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}
