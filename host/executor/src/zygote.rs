//! The spawner: a small process forked from the host once, when the executor is built (while the
//! host is still small), which starts commands on request.
//!
//! Why: forking the host itself for every command copies its page tables, which costs several
//! milliseconds once the engine and its instances are in memory; this small process starts bash
//! the way `posix_spawn` does (sharing its memory until the exec), which costs no more than a
//! bare spawn.
//!
//! Two ways to start a command:
//! - **direct** (cgroup mode): the spawner starts bash itself, inside the command's cgroup, in a
//!   session of its own. The cgroup holds the whole tree, so no supervisor is needed; the spawner
//!   is bash's parent (its `$PPID`), ignores every signal a command can send it but SIGKILL and
//!   SIGSTOP, reaps bash and writes its wait status to the command's status pipe. It is a child
//!   subreaper, so orphans of commands are reaped rather than left to init.
//! - **supervised** (subreaper mode): the spawner forks a supervisor ([`crate::supervisor`]), which
//!   starts bash, tracks the orphans of its command and reports through the status pipe.
//!
//! Protocol (a `SOCK_SEQPACKET` socket pair):
//! - host → spawner: one byte, with five descriptors (`SCM_RIGHTS`): the write ends of the
//!   command's stdout, stderr, status and start pipes, and a memfd holding the request (see
//!   [`encode`]).
//! - the start pipe carries the pid of bash (direct) or of the supervisor, then, if the start
//!   failed, an error code (an exec error, or a cgroup join error marked with
//!   [`crate::cgroup::join_error`]'s base); its end of file means bash runs. A request that
//!   cannot be served at all reports pid 0 and the errno.
//! - the status pipe carries bash's wait status; from a supervisor, then its word that the tree
//!   is empty.
//! - spawner → host: `(pid, wait status)` of every supervisor it reaps; a thread in the host
//!   hands them to the waiting [`crate::process::ProcTree`].
//!
//! The spawner is the host's child, with SIGCONT as its parent-death signal (a command may have
//! stopped it), and is reaped by the host once its socket closed. Host death: the spawner sees the
//! socket's end of file; in cgroup mode it kills the executor's whole cgroup subtree
//! (`cgroup.kill` on the root), waits until it is empty and removes it; supervisors get their
//! parent-death signal and kill their trees. Dropping the [`Zygote`] (after every tree holding it)
//! does the same.
//!
//! The spawner and the supervisors are forks of a multi-threaded host that never exec: raw libc
//! only, no allocation, no locks, no panics.

use std::collections::HashMap;
use std::ffi::{CStr, OsStr};
use std::io::{self, Write as _};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use libc::{c_int, pid_t};
use tokio::sync::oneshot;

use crate::cgroup::{RootPaths, TaskCgroup};
use crate::supervisor::{
    BashChild, close_from, errno, map_anonymous, read_full, set_handler, start_bash, write_all,
};

/// Most descriptors passed with a request: stdout, stderr, status, then the start pipe
/// (supervised starts) or the cgroup's directory (direct starts), then the memfd (large requests
/// only).
const REQUEST_FDS: usize = 5;
/// How long an answer from the spawner may take before it is continued (it may be stopped).
const ANSWER_PATIENCE_MS: c_int = 100;
/// Largest request sent in the message itself; larger ones go in a memfd.
const INLINE_MAX: usize = 32 * 1024;
/// How long an early exit status waits for its supervisor to be registered.
const EARLY_KEEP: Duration = Duration::from_secs(10);
/// Where the spawner keeps its socket.
const SOCK_FD: c_int = 3;

#[derive(Default)]
struct Waiters {
    pending: HashMap<pid_t, oneshot::Sender<c_int>>,
    /// Statuses that arrived before their supervisor was registered (normally a moment before).
    /// Kept for [`EARLY_KEEP`] at most, so that one whose supervisor is never registered cannot
    /// be handed to a later supervisor that got the same pid.
    early: HashMap<pid_t, (c_int, Instant)>,
    closed: bool,
}

/// The host's handle on its spawner.
pub(crate) struct Zygote {
    sock: OwnedFd,
    /// The spawner's pid; its own until `waiters.closed` is set, as only after that is the
    /// spawner reaped.
    pid: pid_t,
    waiters: Arc<Mutex<Waiters>>,
}

impl std::fmt::Debug for Zygote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Zygote").finish_non_exhaustive()
    }
}

/// A started supervisor, as the spawner reported it.
pub(crate) struct Started {
    pub(crate) pid: pid_t,
    /// Supervised starts: resolves to the supervisor's wait status once the spawner reaped it
    /// (an error if the spawner went away first). Direct starts report through the status pipe.
    pub(crate) exit: Option<oneshot::Receiver<c_int>>,
    pub(crate) stdout: OwnedFd,
    pub(crate) stderr: OwnedFd,
    /// Read end of the status pipe, positioned after the start record.
    pub(crate) status: OwnedFd,
}

/// A pipe whose ends close on exec.
pub(crate) fn cloexec_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills `fds` with two new descriptors on success.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors are fresh and owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

impl Zygote {
    /// Forks the spawner. Call early, while the host is small. `root` is the executor's cgroup
    /// (cgroup mode), which the spawner empties and removes should the host die.
    pub(crate) fn start(root: Option<&RootPaths>) -> io::Result<Arc<Self>> {
        let mut fds = [0 as c_int; 2];
        // SAFETY: socketpair fills `fds` on success.
        if unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        } < 0
        {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fresh descriptors.
        let (ours, theirs) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // The spawner is the host's child, so that the kernel continues it when the host dies
        // (its parent-death signal is SIGCONT): a command may have stopped it (it is the `$PPID`
        // of direct starts), and only a running spawner sees the host's socket close and cleans
        // up. The host reaps it once its socket closed (see `read_exits`).
        // SAFETY: the child only makes async-signal-safe calls (prctl, getppid, and `serve`,
        // which never returns).
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            unsafe {
                libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGCONT as libc::c_ulong,
                    0,
                    0,
                    0,
                );
                // Should the host have died before the prctl, the socket's end of file says so.
                serve(theirs.as_raw_fd(), root)
            }
        }
        drop(theirs);
        let waiters = Arc::new(Mutex::new(Waiters::default()));
        let reader_fd = ours.as_raw_fd();
        let reader_waiters = waiters.clone();
        let reader = std::thread::Builder::new()
            .name("dsh-spawner".to_string())
            .spawn(move || read_exits(reader_fd, pid, &reader_waiters));
        if let Err(err) = reader {
            // SAFETY: shutting down our socket ends the spawner, which is then reaped here.
            unsafe { libc::shutdown(ours.as_raw_fd(), libc::SHUT_RDWR) };
            reap_spawner(pid);
            return Err(err);
        }
        Ok(Arc::new(Self {
            sock: ours,
            pid,
            waiters,
        }))
    }

    fn register(&self, pid: pid_t) -> oneshot::Receiver<c_int> {
        let (tx, rx) = oneshot::channel();
        let mut waiters = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((status, at)) = waiters.early.remove(&pid)
            && at.elapsed() < EARLY_KEEP
        {
            let _ = tx.send(status);
        } else if !waiters.closed {
            waiters.pending.insert(pid, tx);
        }
        rx
    }

    /// Starts `<program> -c <command>`: directly in `cgroup` if given, else under a fresh
    /// supervisor. Errors of the start itself (exec, cgroup join) are reported as the
    /// `pre_exec` path reports them.
    pub(crate) fn spawn(
        &self,
        program: &OsStr,
        command: &str,
        workdir: &Path,
        env: &[(std::ffi::OsString, std::ffi::OsString)],
        cgroup: Option<&TaskCgroup>,
    ) -> io::Result<Started> {
        let request = encode(program, command, workdir, env, cgroup)?;
        let direct = cgroup.is_some();
        let (stdout_r, stdout_w) = cloexec_pipe()?;
        let (stderr_r, stderr_w) = cloexec_pipe()?;
        let (status_r, status_w) = cloexec_pipe()?;
        let mut fds = vec![
            stdout_w.as_raw_fd(),
            stderr_w.as_raw_fd(),
            status_w.as_raw_fd(),
        ];
        let started = if direct { None } else { Some(cloexec_pipe()?) };
        match (&started, cgroup) {
            (Some((_, started_w)), _) => fds.push(started_w.as_raw_fd()),
            (None, Some(cgroup)) => fds.push(cgroup.dir_fd().as_raw_fd()),
            (None, None) => {}
        }
        // Small requests travel in the message itself; large ones in a memfd.
        let memfd = if request.len() > INLINE_MAX {
            // SAFETY: memfd_create with a valid name; the result is ours.
            let memfd = unsafe { libc::memfd_create(c"dsh-spawn".as_ptr(), libc::MFD_CLOEXEC) };
            if memfd < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: fresh descriptor.
            let memfd = unsafe { OwnedFd::from_raw_fd(memfd) };
            std::fs::File::from(memfd.try_clone()?).write_all(&request)?;
            fds.push(memfd.as_raw_fd());
            Some(memfd)
        } else {
            None
        };
        let payload: &[u8] = if memfd.is_some() { &[0] } else { &request };
        send_request(self.sock.as_raw_fd(), payload, &fds)?;
        drop((stdout_w, stderr_w, status_w, memfd));
        self.resume();
        let mut word = [0u8; 4];
        let (pid, exit) = match started {
            None => {
                // Direct: bash's pid, then 0 or an error code, on the status pipe.
                self.read_answer(status_r.as_raw_fd(), &mut word, None)?;
                let pid = pid_t::from_ne_bytes(word);
                self.read_answer(status_r.as_raw_fd(), &mut word, None)?;
                let err = c_int::from_ne_bytes(word);
                if err != 0 {
                    return Err(io::Error::from_raw_os_error(err));
                }
                (pid, None)
            }
            Some((started_r, started_w)) => {
                drop(started_w);
                self.read_answer(started_r.as_raw_fd(), &mut word, None)?;
                let pid = pid_t::from_ne_bytes(word);
                let exit = (pid > 0).then(|| self.register(pid));
                // End of file once bash's exec closed the last copy of the write end; a code
                // otherwise.
                let supervisor = (pid > 0).then_some(pid);
                if self
                    .read_answer(started_r.as_raw_fd(), &mut word, supervisor)
                    .is_ok()
                {
                    return Err(io::Error::from_raw_os_error(c_int::from_ne_bytes(word)));
                }
                (pid, exit)
            }
        };
        if pid <= 0 {
            return Err(io::Error::other("the spawner reported no process"));
        }
        Ok(Started {
            pid,
            exit,
            stdout: stdout_r,
            stderr: stderr_r,
            status: status_r,
        })
    }
}

impl Zygote {
    /// Reads the spawner's answer to a start. A command could stop the spawner meanwhile: it is
    /// continued whenever the answer is late.
    /// The supervisor of a supervised start, once known, is continued too: the command's first
    /// act can stop it before it finished the start.
    fn read_answer(&self, fd: RawFd, buf: &mut [u8], supervisor: Option<pid_t>) -> io::Result<()> {
        loop {
            let mut poll = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: poll on one descriptor we own.
            match unsafe { libc::poll(&mut poll, 1, ANSWER_PATIENCE_MS) } {
                0 => {
                    self.resume();
                    if let Some(pid) = supervisor {
                        self.resume_supervisor(pid);
                    }
                }
                n if n < 0 && errno() != libc::EINTR => return Err(io::Error::last_os_error()),
                n if n < 0 => {}
                _ => return read_exact(fd, buf),
            }
        }
    }

    /// Continues the supervisor `pid`, should its command have stopped it, unless its exit was
    /// reported (until then its pid is its own: the spawner reaps it, then reports it).
    pub(crate) fn resume_supervisor(&self, pid: pid_t) {
        let waiters = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
        if !waiters.closed && waiters.pending.contains_key(&pid) {
            // SAFETY: plain kill(2) on a live or unreaped process, under the lock that keeps
            // its exit from being reported meanwhile.
            unsafe { libc::kill(pid, libc::SIGCONT) };
        }
    }

    /// Continues the spawner, should a command have stopped it (it is the `$PPID` of direct
    /// starts): before each start, and now and then while a direct start waits for its status.
    pub(crate) fn resume(&self) {
        let waiters = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
        if !waiters.closed {
            // SAFETY: plain kill(2) on our unreaped child (see `pid`), under the lock that
            // keeps it unreaped.
            unsafe { libc::kill(self.pid, libc::SIGCONT) };
        }
    }
}

impl Drop for Zygote {
    fn drop(&mut self) {
        // SAFETY: shutting down our socket ends the spawner, once it runs, and the reader, which
        // then reaps it (continuing it meanwhile, should it be stopped).
        unsafe { libc::shutdown(self.sock.as_raw_fd(), libc::SHUT_RDWR) };
    }
}

/// Reaps the spawner, our child, once its socket closed; continues it while it has not exited
/// (a command may have stopped it before it could see the end of the socket).
fn reap_spawner(pid: pid_t) {
    loop {
        let mut status: c_int = 0;
        // SAFETY: waiting for our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid || (r < 0 && errno() != libc::EINTR) {
            return;
        }
        if r == 0 {
            // SAFETY: plain kill(2) on our unreaped child.
            unsafe { libc::kill(pid, libc::SIGCONT) };
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Whether a spawn failed because the spawner process is gone (rather than the command).
pub(crate) fn spawner_gone(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::UnexpectedEof | io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
    ) || err.raw_os_error() == Some(libc::ENOTCONN)
}

fn read_exact(fd: RawFd, buf: &mut [u8]) -> io::Result<()> {
    read_full(fd, buf).map_err(|err| match err {
        0 => io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the command spawner went away",
        ),
        err => io::Error::from_raw_os_error(err),
    })
}

fn send_request(sock: RawFd, payload: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: payload.as_ptr().cast_mut().cast(),
        iov_len: payload.len(),
    };
    // SAFETY: CMSG_SPACE is a pure computation.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of_val(fds) as u32) } as usize;
    let mut control = vec![0u8; space];
    // SAFETY: an all-zero msghdr is valid; the buffers outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: the control buffer has room for one header with the descriptors.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of_val(fds) as u32) as _;
        std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(cmsg).cast(), fds.len());
    }
    loop {
        // SAFETY: a valid message on our socket.
        let n = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return Ok(());
        }
        if errno() != libc::EINTR {
            return Err(io::Error::last_os_error());
        }
    }
}

/// The host's reader of supervisor exits.
fn read_exits(sock: RawFd, spawner: pid_t, waiters: &Mutex<Waiters>) {
    loop {
        let mut buf = [0u8; 8];
        // SAFETY: reading into a local buffer.
        let n = unsafe { libc::recv(sock, buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 && errno() == libc::EINTR {
            continue;
        }
        let mut waiters = waiters.lock().unwrap_or_else(|e| e.into_inner());
        if n != 8 {
            waiters.closed = true;
            waiters.pending.clear();
            waiters.early.clear();
            drop(waiters);
            reap_spawner(spawner);
            return;
        }
        let pid = pid_t::from_ne_bytes(buf[..4].try_into().unwrap_or_default());
        let status = c_int::from_ne_bytes(buf[4..].try_into().unwrap_or_default());
        match waiters.pending.remove(&pid) {
            Some(tx) => {
                let _ = tx.send(status);
            }
            None => {
                let now = Instant::now();
                waiters
                    .early
                    .retain(|_, (_, at)| now.duration_since(*at) < EARLY_KEEP);
                waiters.early.insert(pid, (status, now));
            }
        }
    }
}

/// The request: `u32` counts of arguments and variables and a cgroup flag, then NUL-terminated
/// strings: program, workdir, the cgroup's `cgroup.procs` if any (for a start that must join it
/// late; the cgroup itself comes as its open directory), the arguments, `NAME=value` pairs.
fn encode(
    program: &OsStr,
    command: &str,
    workdir: &Path,
    env: &[(std::ffi::OsString, std::ffi::OsString)],
    cgroup: Option<&TaskCgroup>,
) -> io::Result<Vec<u8>> {
    let argv0 = Path::new(program).file_name().unwrap_or(program).as_bytes();
    let args: [&[u8]; 3] = [argv0, b"-c", command.as_bytes()];
    let mut out = Vec::with_capacity(4096);
    out.extend_from_slice(&(args.len() as u32).to_ne_bytes());
    out.extend_from_slice(&(env.len() as u32).to_ne_bytes());
    // Flags: a cgroup (then the start is direct).
    out.extend_from_slice(&u32::from(cgroup.is_some()).to_ne_bytes());
    let mut push = |parts: &[&[u8]]| -> io::Result<()> {
        for part in parts {
            if part.contains(&0) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "nul byte found in provided data",
                ));
            }
            out.extend_from_slice(part);
        }
        out.push(0);
        Ok(())
    };
    push(&[program.as_bytes()])?;
    push(&[workdir.as_os_str().as_bytes()])?;
    if let Some(cgroup) = cgroup {
        push(&[cgroup.paths().procs.to_bytes()])?;
    }
    for arg in args {
        push(&[arg])?;
    }
    for (name, value) in env {
        push(&[name.as_bytes(), b"=", value.as_bytes()])?;
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// The spawner process: raw libc only.

/// Most children the spawner keeps track of at once (bash of direct starts, supervisors).
const MAX_CHILDREN: usize = 4096;

/// A child the spawner started: where its wait status goes.
#[derive(Clone, Copy)]
struct Child {
    /// 0 marks a free slot.
    pid: pid_t,
    /// The status pipe of a direct start; -1 for a supervisor (reported on the socket).
    status: c_int,
}

/// The spawner's table of its children, in memory it mapped itself.
struct Children(&'static mut [Child]);

impl Children {
    unsafe fn new() -> Option<Self> {
        unsafe {
            let map = map_anonymous(MAX_CHILDREN * std::mem::size_of::<Child>(), 0);
            if map.is_null() {
                return None;
            }
            // Anonymous memory is zeroed: every slot is free.
            Some(Self(std::slice::from_raw_parts_mut(
                map.cast::<Child>(),
                MAX_CHILDREN,
            )))
        }
    }

    fn free_slot(&self) -> Option<usize> {
        self.0.iter().position(|c| c.pid == 0)
    }

    fn take(&mut self, pid: pid_t) -> Option<Child> {
        let slot = self.0.iter_mut().find(|c| c.pid == pid)?;
        let child = *slot;
        slot.pid = 0;
        Some(child)
    }
}

/// Memory the spawner maps once and reuses for every request.
struct Scratch {
    /// Bash's stack between its clone and its exec.
    stack: *mut libc::c_void,
    /// execve's pointer arrays.
    ptrs: *mut *const libc::c_char,
}

/// Pointers [`Scratch`] holds: arguments and variables of any request the host sends inline.
const SCRATCH_PTRS: usize = INLINE_MAX / 2;

impl Scratch {
    fn new() -> Option<Self> {
        let stack = crate::supervisor::child_stack();
        let ptrs = map_anonymous(SCRATCH_PTRS * std::mem::size_of::<*const libc::c_char>(), 0);
        if stack.is_null() || ptrs.is_null() {
            return None;
        }
        Some(Self {
            stack,
            ptrs: ptrs.cast(),
        })
    }
}

/// A request mapped from its memfd: C strings in the mapping, pointer arrays for execve.
pub(crate) struct Mapped<'a> {
    pub(crate) program: &'a CStr,
    pub(crate) workdir: &'a CStr,
    /// The command's `cgroup.procs`: a direct start's cgroup.
    pub(crate) cgroup_procs: Option<&'a CStr>,
    pub(crate) argv: *const *const libc::c_char,
    pub(crate) envp: *const *const libc::c_char,
    /// The memfd's mapping, for requests that came in one.
    bytes: Option<(*mut libc::c_void, usize)>,
    /// The pointer arrays' own mapping, for requests too large for the scratch area.
    ptrs: Option<(*mut libc::c_void, usize)>,
}

impl Mapped<'_> {
    /// Direct starts are those with a cgroup.
    fn direct(&self) -> bool {
        self.cgroup_procs.is_some()
    }

    unsafe fn unmap(self) {
        unsafe {
            for (map, len) in [self.bytes, self.ptrs].into_iter().flatten() {
                libc::munmap(map, len);
            }
        }
    }
}

/// Maps the request in the memfd `request` and parses it; the error is an errno.
unsafe fn map_request(request: c_int, scratch: &Scratch) -> Result<Mapped<'static>, c_int> {
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(request, &mut st) < 0 || st.st_size < 12 {
            return Err(libc::EINVAL);
        }
        let len = st.st_size as usize;
        let map = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_PRIVATE,
            request,
            0,
        );
        if map == libc::MAP_FAILED {
            return Err(errno());
        }
        let parsed = parse_request(std::slice::from_raw_parts(map.cast::<u8>(), len), scratch);
        match parsed {
            Ok(mut mapped) => {
                mapped.bytes = Some((map, len));
                Ok(mapped)
            }
            Err(err) => {
                libc::munmap(map, len);
                Err(err)
            }
        }
    }
}

/// Parses a request (see [`encode`]) that stays where it is while the result is used; the error
/// is an errno.
unsafe fn parse_request(bytes: &'static [u8], scratch: &Scratch) -> Result<Mapped<'static>, c_int> {
    unsafe {
        let len = bytes.len();
        if len < 12 {
            return Err(libc::EINVAL);
        }
        let word = |i: usize| -> usize {
            let mut w = [0u8; 4];
            w.copy_from_slice(&bytes[i * 4..i * 4 + 4]);
            u32::from_ne_bytes(w) as usize
        };
        let (nargs, nenv, has_cgroup) = (word(0), word(1), word(2) & 1 != 0);
        // Pointer arrays for execve, NULL-terminated.
        let slots = nargs.saturating_add(nenv).saturating_add(2);
        if slots > len {
            // More strings than bytes: not a request encode made.
            return Err(libc::EINVAL);
        }
        let own_ptrs = if slots <= SCRATCH_PTRS {
            None
        } else {
            let len = slots * std::mem::size_of::<*const libc::c_char>();
            let map = map_anonymous(len, 0);
            if map.is_null() {
                return Err(errno());
            }
            Some((map, len))
        };
        let fail = |err: c_int| -> Result<Mapped<'static>, c_int> {
            if let Some((map, len)) = own_ptrs {
                libc::munmap(map, len);
            }
            Err(err)
        };
        let base = own_ptrs.map_or(scratch.ptrs, |(map, _)| map.cast());
        let ptrs = std::slice::from_raw_parts_mut(base, slots);
        let mut pos = 12;
        let mut next = || -> Option<&'static CStr> {
            let rest = bytes.get(pos..)?;
            let end = rest.iter().position(|&b| b == 0)?;
            pos += end + 1;
            Some(CStr::from_bytes_with_nul_unchecked(&rest[..=end]))
        };
        let (Some(program), Some(workdir)) = (next(), next()) else {
            return fail(libc::EINVAL);
        };
        let mut cgroup_procs = None;
        if has_cgroup {
            let Some(procs) = next() else {
                return fail(libc::EINVAL);
            };
            cgroup_procs = Some(procs);
        }
        for slot in &mut ptrs[..nargs] {
            let Some(arg) = next() else {
                return fail(libc::EINVAL);
            };
            *slot = arg.as_ptr();
        }
        ptrs[nargs] = std::ptr::null();
        for slot in &mut ptrs[nargs + 1..nargs + 1 + nenv] {
            let Some(var) = next() else {
                return fail(libc::EINVAL);
            };
            *slot = var.as_ptr();
        }
        ptrs[nargs + 1 + nenv] = std::ptr::null();
        Ok(Mapped {
            program,
            workdir,
            cgroup_procs,
            argv: ptrs.as_ptr(),
            envp: ptrs[nargs + 1..].as_ptr(),
            bytes: None,
            ptrs: own_ptrs,
        })
    }
}

unsafe fn write_record(fd: c_int, pid: pid_t, err: c_int) {
    let mut record = [0u8; 8];
    record[..4].copy_from_slice(&pid.to_ne_bytes());
    record[4..].copy_from_slice(&err.to_ne_bytes());
    unsafe { write_all(fd, &record) };
}

/// The spawner's main loop.
unsafe fn serve(sock: c_int, root: Option<&RootPaths>) -> ! {
    unsafe {
        // Out of the host's session and process group: terminal signals meant for the host
        // (Ctrl-C) do not reach it; it ends when the host's socket does.
        libc::setsid();
        if sock != SOCK_FD {
            libc::dup2(sock, SOCK_FD);
        }
        close_from(SOCK_FD + 1);
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            for fd in 0..3 {
                libc::dup2(null, fd);
            }
            if null > 2 {
                libc::close(null);
            }
        }
        // Bash of a direct start is our child: `kill $PPID` (any signal but SIGKILL and
        // SIGSTOP) must not end us, so every signal stays blocked, pending at most, never
        // delivered. Blocked rather than ignored: children inherit no pending signals, while
        // ignored ones would survive their exec. SIGCHLD is read from a signalfd.
        for sig in 1..65 {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                set_handler(sig, libc::SIG_DFL);
            }
        }
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::sigprocmask(libc::SIG_SETMASK, &all, std::ptr::null_mut());
        let mut chld: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut chld);
        libc::sigaddset(&mut chld, libc::SIGCHLD);
        let sigfd = libc::signalfd(-1, &chld, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        // Orphans of direct starts come to us (and stay in their cgroups): reap them.
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        let Some(mut children) = Children::new() else {
            libc::_exit(1)
        };
        // Requests up to INLINE_MAX bytes arrive here.
        let inbox = map_anonymous(INLINE_MAX, 0);
        if inbox.is_null() {
            libc::_exit(1);
        }
        let inbox = std::slice::from_raw_parts_mut(inbox.cast::<u8>(), INLINE_MAX);
        let Some(scratch) = Scratch::new() else {
            libc::_exit(1)
        };
        if sigfd < 0 {
            libc::_exit(1);
        }
        let me = libc::getpid();
        loop {
            let mut polls = [
                libc::pollfd {
                    fd: SOCK_FD,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: sigfd,
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            if libc::poll(polls.as_mut_ptr(), 2, -1) < 0 {
                if errno() == libc::EINTR {
                    continue;
                }
                libc::_exit(1);
            }
            if polls[1].revents != 0 {
                let mut info = [0u8; 128];
                while libc::read(sigfd, info.as_mut_ptr().cast(), info.len()) > 0 {}
                reap(&mut children);
            }
            if polls[0].revents != 0 {
                let mut fds = [-1 as c_int; REQUEST_FDS];
                let len = match recv_request(inbox, &mut fds) {
                    RecvOutcome::Closed => host_gone(root, &mut children),
                    RecvOutcome::Retry => continue,
                    RecvOutcome::Request(len) => len,
                };
                let count = fds.iter().take_while(|&&fd| fd >= 0).count();
                serve_request(
                    &inbox[..len],
                    &fds[..count],
                    me,
                    sigfd,
                    &mut children,
                    &scratch,
                );
                for fd in fds {
                    if fd >= 0 {
                        libc::close(fd);
                    }
                }
            }
        }
    }
}

/// Starts one command (see the module documentation); the caller closes `fds` afterwards.
/// `message` is the request itself, or one byte when it came in a memfd (the last of `fds`).
unsafe fn serve_request(
    message: &[u8],
    fds: &[c_int],
    me: pid_t,
    sigfd: c_int,
    children: &mut Children,
    scratch: &Scratch,
) {
    unsafe {
        let (fds, memfd) = match fds.split_last() {
            Some((&memfd, rest)) if message.len() == 1 => (rest, Some(memfd)),
            _ => (fds, None),
        };
        let &[stdout, stderr, status, fourth] = fds else {
            return;
        };
        // SAFETY (lifetime): the inbox is only overwritten by the next request.
        let parsed = match memfd {
            Some(memfd) => map_request(memfd, scratch),
            None => parse_request(
                std::slice::from_raw_parts(message.as_ptr(), message.len()),
                scratch,
            ),
        };
        let mapped = match parsed {
            Ok(mapped) => mapped,
            Err(err) => {
                // Where the host waits for the answer depends on the kind of start, which an
                // unreadable request does not tell: answer on both.
                write_record(status, 0, err);
                write_record(fourth, 0, err);
                return;
            }
        };
        // Direct starts come with the cgroup's directory, supervised ones with a start pipe.
        let (direct, started) = if mapped.direct() {
            (Some(fourth), status)
        } else {
            (None, fourth)
        };
        match (direct, children.free_slot()) {
            (_, None) => write_record(started, 0, libc::EAGAIN),
            (Some(cgroup_dir), Some(slot)) => {
                // Kept until bash is reaped: its wait status goes there. Taken first, so that
                // a bash that runs always has somewhere to report to.
                let kept = libc::fcntl(status, libc::F_DUPFD_CLOEXEC, SOCK_FD + 1);
                if kept < 0 {
                    write_record(started, 0, errno());
                } else {
                    match start_direct(&mapped, stdout, stderr, status, cgroup_dir, me, scratch) {
                        Some(pid) => children.0[slot] = Child { pid, status: kept },
                        None => {
                            libc::close(kept);
                        }
                    }
                }
            }
            (None, Some(slot)) => match libc::fork() {
                0 => {
                    libc::close(SOCK_FD);
                    libc::close(sigfd);
                    if let Some(memfd) = memfd {
                        libc::close(memfd);
                    }
                    crate::supervisor::start(me, stdout, stderr, status, started, &mapped)
                }
                -1 => write_record(started, 0, errno()),
                pid => children.0[slot] = Child { pid, status: -1 },
            },
        }
        mapped.unmap();
    }
}

/// Starts bash in its cgroup (open as `cgroup_dir`), in a session of its own, as our child;
/// reports `(pid, 0)` or `(pid or 0, error code)` on `started` (the status pipe). Returns bash's
/// pid if it runs.
unsafe fn start_direct(
    request: &Mapped<'_>,
    stdout: c_int,
    stderr: c_int,
    started: c_int,
    cgroup_dir: c_int,
    me: pid_t,
    scratch: &Scratch,
) -> Option<pid_t> {
    unsafe {
        let mut child = BashChild {
            stdout,
            stderr,
            errors: -1,
            failed: 0,
            stack: scratch.stack,
            parent: me,
            new_session: true,
            workdir: request.workdir,
            program: request.program,
            argv: request.argv,
            envp: request.envp,
            joined_late: None,
        };
        match start_bash(&mut child, Some(cgroup_dir), request.cgroup_procs) {
            Ok(pid) if child.failed != 0 => {
                // Bash exits 127 and is reaped as an orphan would be.
                write_record(started, pid, child.failed);
                None
            }
            Ok(pid) => {
                write_record(started, pid, 0);
                Some(pid)
            }
            Err(err) => {
                write_record(started, 0, err);
                None
            }
        }
    }
}

/// Reaps every exited child: bash's status goes to its status pipe, a supervisor's to the host;
/// orphans are just reaped.
unsafe fn reap(children: &mut Children) {
    unsafe {
        loop {
            let mut status: c_int = 0;
            let pid = libc::waitpid(-1, &mut status, libc::WNOHANG | libc::__WALL);
            if pid < 0 && errno() == libc::EINTR {
                continue;
            }
            if pid <= 0 {
                return;
            }
            match children.take(pid) {
                Some(Child { status: fd, .. }) if fd >= 0 => {
                    write_all(fd, &status.to_ne_bytes());
                    libc::close(fd);
                }
                Some(_) => {
                    let mut msg = [0u8; 8];
                    msg[..4].copy_from_slice(&pid.to_ne_bytes());
                    msg[4..].copy_from_slice(&status.to_ne_bytes());
                    loop {
                        let n =
                            libc::send(SOCK_FD, msg.as_ptr().cast(), msg.len(), libc::MSG_NOSIGNAL);
                        if n < 0 && errno() == libc::EINTR {
                            continue;
                        }
                        break;
                    }
                }
                None => {}
            }
        }
    }
}

/// The host's socket closed: in cgroup mode, kill every command's tree (`cgroup.kill` on the
/// executor's root takes the whole subtree), wait (bounded) until it is empty and remove it.
/// Supervisors see us go and stop their own trees.
unsafe fn host_gone(root: Option<&RootPaths>, children: &mut Children) -> ! {
    unsafe {
        if let Some(root) = root {
            for round in 0..300 {
                if round % 10 == 0 {
                    let _ = crate::cgroup::write_file(&root.kill, b"1");
                }
                while libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG | libc::__WALL) > 0 {}
                if !crate::cgroup::populated_raw(&root.events) {
                    break;
                }
                let pause = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 10_000_000,
                };
                libc::nanosleep(&pause, std::ptr::null_mut());
            }
            crate::cgroup::remove_raw(&root.dir);
        }
        for child in children.0.iter() {
            if child.pid != 0 && child.status >= 0 {
                libc::close(child.status);
            }
        }
        libc::_exit(0)
    }
}

enum RecvOutcome {
    /// A request of this many bytes.
    Request(usize),
    Retry,
    Closed,
}

/// Receives one request into `inbox` and its descriptors into `fds`.
unsafe fn recv_request(inbox: &mut [u8], fds: &mut [c_int; REQUEST_FDS]) -> RecvOutcome {
    unsafe {
        let mut iov = libc::iovec {
            iov_base: inbox.as_mut_ptr().cast(),
            iov_len: inbox.len(),
        };
        // Aligned room for one header with the descriptors.
        let mut control = [0u64; 16];
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        let n = libc::recvmsg(SOCK_FD, &mut msg, libc::MSG_CMSG_CLOEXEC);
        if n < 0 {
            return if crate::supervisor::errno() == libc::EINTR {
                RecvOutcome::Retry
            } else {
                RecvOutcome::Closed
            };
        }
        if n == 0 {
            return RecvOutcome::Closed;
        }
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg).cast::<c_int>();
                let len = ((*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize)
                    / std::mem::size_of::<c_int>();
                for i in 0..len {
                    let fd = std::ptr::read_unaligned(data.add(i));
                    match fds.get_mut(i) {
                        Some(slot) => *slot = fd,
                        None => {
                            libc::close(fd);
                        }
                    }
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
        if msg.msg_flags & libc::MSG_TRUNC != 0 {
            // Larger than any request the host sends inline: not one of ours.
            return RecvOutcome::Request(0);
        }
        RecvOutcome::Request(n as usize)
    }
}
