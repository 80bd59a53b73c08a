//! The per-command supervisor: a process between the host and `bash`, forked by the spawner
//! ([`crate::zygote`], a small copy of the host made when the executor is built) or, where
//! there is no spawner, by the host itself ([`crate::spawn::spawn`]).
//!
//! Why it exists:
//! - it is a child subreaper, so every descendant the command orphans (double fork, `setsid`,
//!   daemonising) is re-parented to it and stays inside the tree the host can see and kill;
//! - the command's `$PPID` is the supervisor, so `kill -TERM $PPID` hits the task, not the host;
//! - it hands bash's wait status to the host through a pipe, keeps reaping, and exits only when
//!   no descendant is left, so "supervisor exited" means "nothing of the command is left";
//! - when the host dies abruptly (its parent, the spawner, exits when the host's socket closes),
//!   it kills the whole tree before exiting; in cgroup mode it kills the command's cgroup (which
//!   holds even processes that escaped it) and removes it.
//!
//! It runs in a fork of a multi-threaded host and never execs, so it may only make
//! async-signal-safe calls: raw libc, no allocation, no locks, no panics. Under the spawner, bash
//! is started with `clone3(CLONE_INTO_CGROUP)` in cgroup mode, which avoids migrating it into
//! its cgroup (a write to `cgroup.procs` takes a global lock and waits for an RCU grace period).

use libc::{c_int, pid_t};

use std::ffi::CStr;

use crate::cgroup::{self, CgroupPaths};

/// The cgroup files the supervisor needs when its host dies.
#[derive(Clone, Copy)]
pub(crate) struct RawCgroup<'a> {
    pub(crate) kill: &'a CStr,
    pub(crate) events: &'a CStr,
    pub(crate) dir: &'a CStr,
    pub(crate) root: &'a CStr,
}

impl<'a> From<&'a CgroupPaths> for RawCgroup<'a> {
    fn from(p: &'a CgroupPaths) -> Self {
        Self {
            kill: &p.kill,
            events: &p.events,
            dir: &p.dir,
            root: &p.root,
        }
    }
}

/// Written to the status pipe after bash's wait status once no descendant is left, right before
/// the supervisor exits.
pub(crate) const TREE_EMPTY: c_int = 0x7ee0_0e00;

/// Where the supervisor keeps its end of the status pipe.
const STATUS_FD: c_int = 3;

/// Signals the supervisor ignores (bash gets their defaults back).
const IGNORED_BY_SUPERVISOR: [c_int; 4] =
    [libc::SIGPIPE, libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU];

/// Catchable signals only interrupt `waitpid`, so that the loop re-checks whether the host lives.
extern "C" fn wake(_: c_int) {}

/// Supervises `bash` (the supervisor's only direct child so far) until the tree is empty.
///
/// # Safety
/// Must be called in the child of a fork, with fd 0 open on `/dev/null` and `status_fd` the write
/// end of the status pipe; `cgroup` (the command's cgroup, which bash joins) was prepared before
/// the fork. Never returns.
pub(crate) unsafe fn supervise(
    bash: pid_t,
    status_fd: c_int,
    host: pid_t,
    cgroup: Option<RawCgroup<'_>>,
) -> ! {
    unsafe {
        // Keep only the status pipe: copies of the command's output pipes would delay their EOF,
        // and copies of the host's descriptors (std's exec-error pipe, sockets) would confuse it.
        if status_fd != STATUS_FD {
            libc::dup2(status_fd, STATUS_FD);
        }
        close_from(STATUS_FD + 1);
        libc::dup2(0, 1);
        libc::dup2(0, 2);

        // Nothing the command sends may end the supervisor except SIGKILL.
        for sig in 1..32 {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                set_handler(sig, libc::SIG_DFL);
            }
        }
        for sig in [
            libc::SIGTERM,
            libc::SIGINT,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGUSR1,
            libc::SIGUSR2,
            libc::SIGALRM,
            libc::SIGCONT,
        ] {
            set_handler(sig, wake as extern "C" fn(c_int) as libc::sighandler_t);
        }
        for sig in IGNORED_BY_SUPERVISOR {
            set_handler(sig, libc::SIG_IGN);
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        // Also fires when the host *thread* that forked us exits, hence the parent re-check.
        // SIGCONT, so that it also reaches a supervisor a command stopped (`kill -STOP $PPID`).
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGCONT as libc::c_ulong,
            0,
            0,
            0,
        );

        let mut reported = false;
        loop {
            if libc::getppid() != host {
                kill_tree_and_exit(cgroup);
            }
            let mut status: c_int = 0;
            let pid = libc::waitpid(-1, &mut status, libc::__WALL);
            if pid == bash && !reported {
                reported = true;
                write_all(STATUS_FD, &status.to_ne_bytes());
            } else if pid < 0 && errno() != libc::EINTR {
                // ECHILD: no descendant is left. Saying so spares the host the wait for this
                // exit to be reaped and reported.
                write_all(STATUS_FD, &TREE_EMPTY.to_ne_bytes());
                libc::_exit(0);
            }
        }
    }
}

pub(crate) unsafe fn set_handler(sig: c_int, handler: libc::sighandler_t) {
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler;
        // No SA_RESTART: a signal must interrupt waitpid.
        action.sa_flags = 0;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(sig, &action, std::ptr::null_mut());
    }
}

pub(crate) fn errno() -> c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

pub(crate) unsafe fn close_from(first: c_int) {
    unsafe {
        if libc::syscall(
            libc::SYS_close_range,
            first as libc::c_uint,
            libc::c_uint::MAX,
            0,
        ) == 0
        {
            return;
        }
        // Kernels before 5.9: close one by one up to the descriptor limit.
        let mut limit: libc::rlimit = std::mem::zeroed();
        let max = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur.min(1 << 16) as c_int
        } else {
            1024
        };
        for fd in first..max {
            libc::close(fd);
        }
    }
}

pub(crate) unsafe fn write_all(fd: c_int, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n > 0 {
            bytes = &bytes[n as usize..];
        } else if n < 0 && errno() == libc::EINTR {
            continue;
        } else {
            return; // the host is gone or stopped listening
        }
    }
}

/// The host died: SIGKILL every descendant (and the command's cgroup), reap, and exit once none
/// is left, removing the cgroup on the way out.
unsafe fn kill_tree_and_exit(cgroup: Option<RawCgroup<'_>>) -> ! {
    unsafe {
        if let Some(paths) = cgroup {
            let _ = cgroup::write_file(paths.kill, b"1");
        }
        'reap: loop {
            loop {
                let mut status: c_int = 0;
                let pid = libc::waitpid(-1, &mut status, libc::WNOHANG | libc::__WALL);
                if pid > 0 || (pid < 0 && errno() == libc::EINTR) {
                    continue;
                }
                if pid < 0 {
                    break 'reap; // ECHILD: no descendant is left
                }
                break;
            }
            // Killing direct children re-parents their children to us: the next round gets them.
            if !kill_children() {
                // No children list: at least take our process group down (ourselves included).
                libc::kill(0, libc::SIGKILL);
            }
            pause_ms(10);
        }
        if let Some(paths) = cgroup {
            // What escaped the supervisor is still in the cgroup: wait (bounded) until it is
            // empty, then remove it, and the executor's root if this was its last command.
            for round in 0..300 {
                if !cgroup::populated_raw(paths.events) {
                    break;
                }
                if round % 10 == 9 {
                    let _ = cgroup::write_file(paths.kill, b"1");
                }
                pause_ms(10);
            }
            libc::rmdir(paths.dir.as_ptr());
            // The root, with the empty cgroups kept for reuse, if this was the last command.
            cgroup::remove_raw(paths.root);
        }
        libc::_exit(0);
    }
}

fn pause_ms(ms: i64) {
    let pause = libc::timespec {
        tv_sec: 0,
        tv_nsec: ms * 1_000_000,
    };
    // SAFETY: nanosleep with a valid timespec.
    unsafe { libc::nanosleep(&pause, std::ptr::null_mut()) };
}

/// SIGKILLs every direct child listed in `/proc/thread-self/children`; false if unreadable.
unsafe fn kill_children() -> bool {
    unsafe {
        let fd = libc::open(
            c"/proc/thread-self/children".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return false;
        }
        let mut buf = [0u8; 512];
        let mut pid: pid_t = 0;
        loop {
            let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
            if n < 0 && errno() == libc::EINTR {
                continue;
            }
            if n <= 0 {
                break;
            }
            for &b in &buf[..n as usize] {
                if b.is_ascii_digit() {
                    pid = pid.saturating_mul(10).saturating_add(pid_t::from(b - b'0'));
                } else {
                    if pid > 0 {
                        libc::kill(pid, libc::SIGKILL);
                    }
                    pid = 0;
                }
            }
        }
        if pid > 0 {
            libc::kill(pid, libc::SIGKILL);
        }
        libc::close(fd);
        true
    }
}

/// `CLONE_INTO_CGROUP` (Linux 5.7): the child starts in the cgroup given by a directory
/// descriptor, without the costly migration a write to `cgroup.procs` is.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// `struct clone_args` of clone3(2), version 2 (with `cgroup`).
#[repr(C)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// `fork` straight into the cgroup whose directory is open as `dirfd` (`clone3` with
/// `CLONE_INTO_CGROUP`, no shared memory): returns 0 in the child, the child's pid in the parent,
/// or `-errno`. Starting inside the cgroup spares the migration a write to `cgroup.procs` costs
/// (it waits for an RCU grace period: ~10 ms measured here).
///
/// # Safety
/// As for `fork`: in a multi-threaded parent the child may only make async-signal-safe calls.
pub(crate) unsafe fn fork_into_cgroup(dirfd: c_int) -> pid_t {
    unsafe {
        let mut args: CloneArgs = std::mem::zeroed();
        args.flags = CLONE_INTO_CGROUP;
        args.exit_signal = libc::SIGCHLD as u64;
        args.cgroup = dirfd as u64;
        let pid = libc::syscall(
            libc::SYS_clone3,
            &mut args as *mut CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        );
        if pid < 0 { -errno() } else { pid as pid_t }
    }
}

/// What bash's child side needs, prepared by whoever starts it (a supervisor, or the spawner
/// itself in cgroup mode).
pub(crate) struct BashChild<'a> {
    pub(crate) stdout: c_int,
    pub(crate) stderr: c_int,
    /// Where a failed start writes its error code before `_exit(127)`; -1: into `failed` (see
    /// [`start_bash`]).
    pub(crate) errors: c_int,
    /// A failed start's error code, where `errors` is -1.
    pub(crate) failed: c_int,
    /// The stack bash's side runs on while it shares its parent's memory; null: one is mapped
    /// for the start.
    pub(crate) stack: *mut libc::c_void,
    /// Bash's parent; bash dies with it.
    pub(crate) parent: pid_t,
    /// Bash starts its own session (when it has no supervisor to lead one for it).
    pub(crate) new_session: bool,
    pub(crate) workdir: &'a CStr,
    pub(crate) program: &'a CStr,
    pub(crate) argv: *const *const libc::c_char,
    pub(crate) envp: *const *const libc::c_char,
    /// Set where bash could not be started inside its cgroup and has to join it (by
    /// [`start_bash`]; `None` from callers).
    pub(crate) joined_late: Option<&'a CStr>,
}

/// Bash's side between the clone and its exec. Runs either in a forked copy of its parent or
/// on its own stack in the parent's memory (which is suspended meanwhile): only system calls,
/// no writes to shared data.
extern "C" fn bash_child(arg: *mut libc::c_void) -> ! {
    unsafe {
        let child = arg.cast::<BashChild<'_>>();
        // Copies of what is read; the one write goes through the pointer.
        let BashChild {
            stdout,
            stderr,
            errors,
            parent,
            new_session,
            workdir,
            program,
            argv,
            envp,
            joined_late,
            ..
        } = *child;
        let failed = std::ptr::addr_of_mut!((*child).failed);
        let report = |err: c_int| -> ! {
            if errors >= 0 {
                write_all(errors, &err.to_ne_bytes());
            } else {
                // Only when sharing the parent's memory (start_bash makes sure), whose thread is
                // suspended until we exit.
                failed.write_volatile(err);
            }
            libc::_exit(127);
        };
        // A supervisor ignores these, and ignored signals would survive the exec (caught ones
        // do not; the spawner blocks rather than ignores). Then bash starts with none blocked.
        for sig in IGNORED_BY_SUPERVISOR {
            set_handler(sig, libc::SIG_DFL);
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        if new_session && libc::setsid() < 0 {
            report(errno());
        }
        // bash: dies with its parent.
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        );
        if libc::getppid() != parent {
            libc::_exit(127);
        }
        if libc::dup2(stdout, 1) < 0 || libc::dup2(stderr, 2) < 0 {
            report(errno());
        }
        if libc::chdir(workdir.as_ptr()) < 0 {
            report(errno());
        }
        // Into the command's cgroup before the first instruction of the command.
        if let Some(procs) = joined_late
            && let Err(err) = cgroup::join(procs)
        {
            report(cgroup::JOIN_ERROR_BASE + err);
        }
        if program.to_bytes().contains(&b'/') {
            libc::execve(program.as_ptr(), argv, envp);
        } else {
            libc::execvpe(program.as_ptr(), argv, envp);
        }
        report(errno())
    }
}

/// [`vfork_bash`]'s answer where it cannot be used; then bash is forked.
const VFORK_UNAVAILABLE: pid_t = pid_t::MIN;
/// Stack of bash's child side while it shares its parent's memory.
const CHILD_STACK: usize = 64 * 1024;

/// Starts bash with `clone3(CLONE_VM | CLONE_VFORK [| CLONE_INTO_CGROUP])` on a stack of its own:
/// the caller is suspended until bash execs or exits. Returns bash's pid, `-errno`, or
/// [`VFORK_UNAVAILABLE`].
#[cfg(target_arch = "x86_64")]
unsafe fn vfork_bash(child: &mut BashChild<'_>, cgroup_fd: Option<c_int>) -> pid_t {
    unsafe {
        let mapped = child.stack.is_null();
        let stack = if mapped { child_stack() } else { child.stack };
        if stack.is_null() {
            return VFORK_UNAVAILABLE;
        }
        let mut args: CloneArgs = std::mem::zeroed();
        args.flags = (libc::CLONE_VM | libc::CLONE_VFORK) as u64;
        args.exit_signal = libc::SIGCHLD as u64;
        args.stack = stack as u64;
        args.stack_size = CHILD_STACK as u64;
        if let Some(fd) = cgroup_fd {
            args.flags |= CLONE_INTO_CGROUP;
            args.cgroup = fd as u64;
        }
        let ret: i64;
        // The child starts on the new stack right after `syscall` with rax = 0 and the other
        // registers as they were: it calls `bash_child(child)`, which never returns.
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "mov rdi, r12",
            "call r13",
            "ud2",
            "2:",
            inlateout("rax") libc::SYS_clone3 => ret,
            in("rdi") &mut args as *mut CloneArgs,
            in("rsi") std::mem::size_of::<CloneArgs>(),
            in("r12") (child as *mut BashChild<'_>).cast::<libc::c_void>(),
            in("r13") bash_child as extern "C" fn(*mut libc::c_void) -> ! as usize,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
        if mapped {
            libc::munmap(stack, CHILD_STACK);
        }
        if ret >= 0 {
            return ret as pid_t;
        }
        let err = (-ret) as c_int;
        if matches!(err, libc::ENOSYS | libc::E2BIG | libc::EINVAL | libc::EPERM) {
            return VFORK_UNAVAILABLE;
        }
        -err
    }
}

/// A stack for bash's side of [`vfork_bash`]; null if none can be mapped.
pub(crate) fn child_stack() -> *mut libc::c_void {
    map_anonymous(CHILD_STACK, libc::MAP_STACK)
}

/// `len` bytes of fresh zeroed read-write memory (an anonymous private mapping, with `flags`
/// added); null if none can be mapped. Async-signal-safe, unlike allocation.
pub(crate) fn map_anonymous(len: usize, flags: c_int) -> *mut libc::c_void {
    // SAFETY: an anonymous private mapping at an address of the kernel's choosing.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | flags,
            -1,
            0,
        )
    };
    if map == libc::MAP_FAILED {
        std::ptr::null_mut()
    } else {
        map
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn vfork_bash(_child: &mut BashChild<'_>, _cgroup_fd: Option<c_int>) -> pid_t {
    VFORK_UNAVAILABLE
}

/// Starts bash as `child` says, inside the cgroup whose directory is open as `cgroup_dir` (if
/// any), sharing the caller's memory until it execs where possible, else with a fork. Returns
/// bash's pid; a failure to start inside the cgroup is `JOIN_ERROR_BASE + errno`, any other
/// `errno`. Errors of bash's own side (exec, chdir) go to `child.errors`, or where that is -1, to
/// `child.failed` once this returns (bash has then exited 127).
///
/// # Safety
/// Async-signal-safe; the caller is a process that never execs (the spawner or a supervisor).
pub(crate) unsafe fn start_bash<'a>(
    child: &mut BashChild<'a>,
    cgroup_dir: Option<c_int>,
    cgroup_procs: Option<&'a CStr>,
) -> Result<pid_t, c_int> {
    unsafe {
        child.failed = 0;
        // Bash is started sharing our memory until it execs (as posix_spawn does), which spares
        // copying it; where that is unavailable, with a plain fork.
        let bash = vfork_bash(child, cgroup_dir);
        if bash != VFORK_UNAVAILABLE {
            return match bash {
                pid if pid >= 0 => Ok(pid),
                err if cgroup_dir.is_some() => Err(cgroup::JOIN_ERROR_BASE - err),
                err => Err(-err),
            };
        }
        // A forked bash cannot write into our memory: its errors come through a pipe.
        let mut errors = [-1 as c_int; 2];
        let shared = child.errors < 0;
        if shared {
            if libc::pipe2(errors.as_mut_ptr(), libc::O_CLOEXEC) < 0 {
                return Err(errno());
            }
            child.errors = errors[1];
        }
        let bash = match cgroup_dir {
            Some(fd) => {
                let pid = fork_into_cgroup(fd);
                let err = -pid;
                if pid < 0 && matches!(err, libc::ENOSYS | libc::E2BIG | libc::EINVAL | libc::EPERM)
                {
                    // Without clone3 into a cgroup, bash joins it after a plain fork.
                    child.joined_late = cgroup_procs;
                    libc::fork()
                } else {
                    pid
                }
            }
            None => libc::fork(),
        };
        if bash == 0 {
            bash_child((child as *mut BashChild<'_>).cast());
        }
        let result = match bash {
            -1 => Err(errno()),
            pid if pid < 0 => Err(cgroup::JOIN_ERROR_BASE - pid),
            pid => Ok(pid),
        };
        if shared {
            libc::close(errors[1]);
            child.errors = -1;
            // End of file: bash's exec closed the last copy. Otherwise its error code.
            let mut word = [0u8; 4];
            if result.is_ok() && read_full(errors[0], &mut word).is_ok() {
                child.failed = c_int::from_ne_bytes(word);
            }
            libc::close(errors[0]);
        }
        result
    }
}

/// Reads exactly `buf.len()` bytes; the error is the errno, or 0 at end of file.
/// Async-signal-safe.
pub(crate) fn read_full(fd: c_int, buf: &mut [u8]) -> Result<(), c_int> {
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: reading into the rest of a live buffer.
        let n = unsafe { libc::read(fd, buf[got..].as_mut_ptr().cast(), buf.len() - got) };
        if n > 0 {
            got += n as usize;
        } else if n == 0 {
            return Err(0);
        } else if errno() != libc::EINTR {
            return Err(errno());
        }
    }
    Ok(())
}

/// A supervisor forked by the spawner ([`crate::zygote`]): sets itself up, starts bash as the
/// mapped `request` says, reports the start on `started` and supervises.
///
/// # Safety
/// Must be called in a freshly forked child of the spawner, which never returns; fd 0 is
/// `/dev/null`. Async-signal-safe calls only.
pub(crate) unsafe fn start(
    spawner: pid_t,
    stdout: c_int,
    stderr: c_int,
    status: c_int,
    started: c_int,
    request: &crate::zygote::Mapped<'_>,
) -> ! {
    unsafe {
        // The start pipe: our pid first, then an error code if the start fails; its end of file
        // (bash's exec closed the last copy) means bash runs.
        write_all(started, &libc::getpid().to_ne_bytes());
        let fail = |err: c_int| -> ! {
            write_all(started, &err.to_ne_bytes());
            libc::_exit(127);
        };
        // A new session: own process group, no controlling terminal.
        if libc::setsid() < 0 || libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0 {
            fail(errno());
        }
        // As in the spawn hook: every signal stays blocked until the handlers are in place.
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::sigprocmask(libc::SIG_SETMASK, &all, std::ptr::null_mut());

        let mut child = BashChild {
            stdout,
            stderr,
            errors: started,
            failed: 0,
            stack: std::ptr::null_mut(),
            parent: libc::getpid(),
            new_session: false,
            workdir: request.workdir,
            program: request.program,
            argv: request.argv,
            envp: request.envp,
            joined_late: None,
        };
        // Supervised starts have no cgroup (cgroup mode starts bash directly).
        let bash = match start_bash(&mut child, None, None) {
            Ok(bash) => bash,
            Err(err) => fail(err),
        };
        libc::close(started);
        libc::close(stdout);
        libc::close(stderr);
        supervise(bash, status, spawner, None)
    }
}
