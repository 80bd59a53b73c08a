//! Creating a process, optionally straight inside a cgroup, and turning it into bash.
//!
//! The only module that forks. [`fork_into`] (the factory starting a helper) uses `clone3` with
//! `CLONE_INTO_CGROUP` (the child starts inside the command's cgroup: no migration through
//! `cgroup.procs`, which takes a global lock and waits for an RCU grace period) and
//! `CLONE_PIDFD`. It passes no stack and no `CLONE_VM`, so it is an ordinary fork: the child gets
//! a copy of the caller's memory and runs on its copy of the caller's stack. [`spawn_bash`] (a
//! helper starting bash, which inherits the helper's cgroup) is vfork-style, through the C
//! library's `clone` with a stack of its own. Where `clone3` is missing, or `DSH_SPAWN_FORK=1`
//! asks for the fallbacks (which the tests exercise), both are a plain `fork` plus `pidfd_open`,
//! and a child that should start in a cgroup joins it through `cgroup.procs`.
//!
//! Safety argument, for every caller: the forked child of a multi-threaded process may only make
//! async-signal-safe calls, because another thread may have held a lock (malloc's, say) at the
//! fork. The spawn helper is single-threaded, so its child may do anything; the host's cgroup
//! probe is multi-threaded and its child only makes raw system calls. [`exec_bash`] itself
//! makes only raw system calls on memory prepared before the fork, so it is safe in either.

use std::ffi::{CStr, c_char};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use crate::wire::Step;

/// `clone3`'s argument block (`struct clone_args`, as of Linux 5.7).
#[repr(C)]
#[derive(Default)]
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

const CLONE_PIDFD: u64 = 0x1000;
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// Which side of a fork this is.
pub(crate) enum Forked {
    Child,
    /// The parent, with the child's pid and pidfd.
    Parent {
        pid: i32,
        pidfd: OwnedFd,
    },
}

/// Forks, the child starting inside the cgroup whose directory is `cgroup` if given.
///
/// # Safety
/// In a multi-threaded caller, the child may only make async-signal-safe calls until it execs or
/// exits (see the module documentation).
pub(crate) unsafe fn fork_into(cgroup: Option<BorrowedFd<'_>>) -> io::Result<Forked> {
    if std::env::var_os("DSH_SPAWN_FORK").is_none_or(|v| v != "1") {
        // SAFETY: as this function's contract.
        match unsafe { clone3(cgroup) } {
            Err(err) if err.raw_os_error() == Some(libc::ENOSYS) => {}
            other => return other,
        }
    }
    // SAFETY: as this function's contract; fork's child runs the caller's code.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => {
            if let Some(dir) = cgroup {
                // Costs the child its cgroup, not its run: it stays in the caller's
                // tree, which the caller tracks as well.
                let _ = join(dir);
            }
            Ok(Forked::Child)
        }
        pid => {
            // Our unreaped child: the pid cannot have been reused.
            let pidfd = rustix::process::pidfd_open(
                rustix::process::Pid::from_raw(pid).expect("a positive pid"),
                rustix::process::PidfdFlags::empty(),
            )?;
            Ok(Forked::Parent { pid, pidfd })
        }
    }
}

/// # Safety
/// As [`fork_into`].
unsafe fn clone3(cgroup: Option<BorrowedFd<'_>>) -> io::Result<Forked> {
    let mut pidfd: RawFd = -1;
    let mut args = CloneArgs {
        flags: CLONE_PIDFD,
        pidfd: std::ptr::addr_of_mut!(pidfd) as u64,
        exit_signal: libc::SIGCHLD as u64,
        ..CloneArgs::default()
    };
    if let Some(dir) = cgroup {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = dir.as_raw_fd() as u64;
    }
    // SAFETY: a fork-like clone (no CLONE_VM, no stack): the child continues on its own copy of
    // our memory. `args` and `pidfd` outlive the call.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            std::ptr::addr_of_mut!(args),
            std::mem::size_of::<CloneArgs>(),
        )
    };
    match pid {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent {
            pid: pid as i32,
            // SAFETY: the kernel filled in a fresh descriptor, which is ours now.
            pidfd: unsafe { OwnedFd::from_raw_fd(pidfd) },
        }),
    }
}

/// Moves the calling process into the cgroup whose directory is `dir`. Raw system calls only.
pub(crate) fn join(dir: BorrowedFd<'_>) -> io::Result<()> {
    let procs = rustix::fs::openat(
        dir,
        c"cgroup.procs",
        rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    rustix::io::write(&procs, b"0")?;
    Ok(())
}

/// Starts bash as `setup` says: the calling process (the helper, single-threaded) is suspended
/// until bash has exec'd (or failed to), vfork-style, sharing its memory with the child instead
/// of copying it: the copy, and its teardown at `exec`, cost more than bash's own start (measured
/// here: the request to bash's exec took 0.58 ms with a fork). Returns bash's pid and pidfd.
///
/// The child runs [`exec_bash`] on a stack of its own (allocated here, freed once the child has
/// left it); it makes raw system calls only, on memory prepared before, so sharing the caller's
/// memory is safe, and the caller does not run until the child has exec'd or exited. Where
/// `DSH_SPAWN_FORK=1` (tests), an ordinary fork instead.
pub(crate) fn spawn_bash(setup: &BashExec<'_>) -> io::Result<(i32, OwnedFd)> {
    let pid = if std::env::var_os("DSH_SPAWN_FORK").is_some_and(|v| v == "1") {
        // SAFETY: the callers are single-threaded; the child execs or exits.
        match unsafe { fork_into(None)? } {
            Forked::Child => exec_bash(setup),
            Forked::Parent { pid, pidfd } => return Ok((pid, pidfd)),
        }
    } else {
        const STACK: usize = 256 * 1024;
        let mut stack = vec![0u8; STACK];
        // The stack grows down: its top, 16-byte aligned.
        let top = (stack.as_mut_ptr() as usize + STACK) & !15;
        extern "C" fn entry(arg: *mut libc::c_void) -> libc::c_int {
            // SAFETY: `arg` is the `BashExec` the parent passed, alive while it is suspended.
            exec_bash(unsafe { &*(arg as *const BashExec<'_>) })
        }
        // SAFETY: CLONE_VM|CLONE_VFORK suspends us until the child execs or exits, so `setup`
        // and `stack` outlive its use of them; the child runs `entry` on `stack`, which nothing
        // else uses.
        let pid = unsafe {
            libc::clone(
                entry,
                top as *mut libc::c_void,
                libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                std::ptr::from_ref(setup) as *mut libc::c_void,
            )
        };
        drop(stack);
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        pid
    };
    // Our unreaped child: the pid is its own.
    let pidfd = rustix::process::pidfd_open(
        rustix::process::Pid::from_raw(pid).expect("a positive pid"),
        rustix::process::PidfdFlags::empty(),
    )?;
    Ok((pid, pidfd))
}

/// What the child needs to become bash, prepared before the fork.
pub(crate) struct BashExec<'a> {
    /// The program, looked up on the child's PATH unless it holds a `/`.
    pub(crate) program: &'a CStr,
    /// `program -c command`, or `program -c BOOTSTRAP program` for a long command
    /// ([`crate::long_command`]), null-terminated.
    pub(crate) argv: &'a [*const c_char],
    pub(crate) workdir: &'a CStr,
    pub(crate) stdout: BorrowedFd<'a>,
    pub(crate) stderr: BorrowedFd<'a>,
    /// The exec-outcome pipe: `[step, errno]` on failure, closed by a successful exec.
    pub(crate) started: BorrowedFd<'a>,
    /// The process bash must be a child of; bash dies with it.
    pub(crate) parent: i32,
    /// Signals whose disposition is not the default here ([`changed_signals`]).
    pub(crate) changed_signals: &'a [i32],
    /// The helper's socket to the host: bash reports itself there before its `exec`.
    pub(crate) report: BorrowedFd<'a>,
    /// For a command too long to be an argument: the memfd holding it, which bash gets as
    /// [`crate::long_command::COMMAND_FD`] (and `argv` runs the bootstrap that reads it). No
    /// other descriptor used after `report` may be there.
    pub(crate) command: Option<BorrowedFd<'a>>,
}

/// In the forked child: a new session, every signal back to its default and unblocked, dies
/// with `parent`, stdin `/dev/null`, stdout and stderr on the command's pipes, in the workdir,
/// nothing else open across the exec (but a long command's memfd, for bash to read and close);
/// then exec. Raw system calls only.
pub(crate) fn exec_bash(setup: &BashExec<'_>) -> ! {
    let fail = |step: Step, err: io::Error| -> ! {
        let mut record = [0u8; 8];
        record[..4].copy_from_slice(&(step as u32).to_ne_bytes());
        record[4..].copy_from_slice(&err.raw_os_error().unwrap_or(libc::EIO).to_ne_bytes());
        let _ = rustix::io::write(setup.started, &record);
        // SAFETY: _exit ends the process at once, as a failed fork child must.
        unsafe { libc::_exit(127) }
    };
    if let Err(err) = rustix::process::setsid() {
        fail(Step::Setup, err.into());
    }
    reset_signals(setup.changed_signals);
    if let Err(err) =
        rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
    {
        fail(Step::Setup, err.into());
    }
    // The parent may have died before the death signal was armed.
    if rustix::process::getppid().map(|p| p.as_raw_nonzero().get()) != Some(setup.parent) {
        // SAFETY: as above.
        unsafe { libc::_exit(127) };
    }
    if let Err(err) = stdio(setup) {
        fail(Step::Setup, err);
    }
    if let Err(err) = rustix::process::chdir(setup.workdir) {
        fail(Step::Chdir, err.into());
    }
    // Only 0, 1 and 2 may cross the exec; the outcome pipe stays open until it.
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only marks descriptors.
    if unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    } < 0
    {
        fail(Step::Setup, io::Error::last_os_error());
    }
    // The host learns who bash is before any of the command runs: a command that kills its
    // parent at once is still known (and awaited) as bash. Without this report bash does not
    // exec, so that its absence tells the host the command never ran. Nothing allocated: a
    // vfork child.
    let reported = rustix::process::pidfd_open(
        rustix::process::getpid(),
        rustix::process::PidfdFlags::empty(),
    )
    .map_err(io::Error::from)
    .and_then(|pidfd| {
        let me = rustix::process::getpid().as_raw_nonzero().get();
        crate::wire::send_with_fds(
            setup.report,
            &crate::wire::Report::started_bytes(me),
            &[pidfd.as_fd()],
        )
    });
    if let Err(err) = reported {
        fail(Step::Setup, err);
    }
    if let Some(command) = setup.command
        && let Err(err) = crate::long_command::install(command)
    {
        fail(Step::Setup, err);
    }
    // SAFETY: `program` and `argv` are valid, null-terminated, prepared before the fork;
    // execvp returns only on failure.
    unsafe { libc::execvp(setup.program.as_ptr(), setup.argv.as_ptr()) };
    fail(Step::Exec, io::Error::last_os_error())
}

fn stdio(setup: &BashExec<'_>) -> io::Result<()> {
    let null = rustix::fs::open(
        c"/dev/null",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    rustix::stdio::dup2_stdin(&null)?;
    rustix::stdio::dup2_stdout(setup.stdout)?;
    rustix::stdio::dup2_stderr(setup.stderr)?;
    Ok(())
}

/// The kernel's `struct sigaction` (x86_64 and aarch64 layout), for `rt_sigaction` itself: the C
/// library's wrapper refuses the two signals it reserves for its threads, which a process
/// started by `posix_spawn` may have inherited as ignored.
#[repr(C)]
struct KernelSigaction {
    handler: usize,
    flags: u64,
    restorer: usize,
    mask: u64,
}

/// The signals whose disposition in this process is not the default (ignored or handled), read
/// once, so that a child resets only those.
pub(crate) fn changed_signals() -> Vec<i32> {
    (1..=64)
        .filter(|&sig| sig != libc::SIGKILL && sig != libc::SIGSTOP)
        .filter(|&sig| {
            let mut old = KernelSigaction {
                handler: libc::SIG_DFL,
                flags: 0,
                restorer: 0,
                mask: 0,
            };
            // SAFETY: rt_sigaction reading the current action into a valid kernel sigaction.
            let read = unsafe {
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    sig,
                    std::ptr::null::<KernelSigaction>(),
                    std::ptr::addr_of_mut!(old),
                    8usize,
                )
            };
            read != 0 || old.handler != libc::SIG_DFL
        })
        .collect()
}

/// `changed` (see [`changed_signals`]) back to their default action, and none blocked: what a
/// process started by a shell of the host's own would have (whatever the helper blocked or
/// ignored for itself).
fn reset_signals(changed: &[i32]) {
    let default = KernelSigaction {
        handler: libc::SIG_DFL,
        flags: 0,
        restorer: 0,
        mask: 0,
    };
    for &sig in changed {
        // SAFETY: rt_sigaction with a valid kernel sigaction and no old-action pointer.
        unsafe {
            libc::syscall(
                libc::SYS_rt_sigaction,
                sig,
                std::ptr::addr_of!(default),
                std::ptr::null_mut::<KernelSigaction>(),
                8usize,
            );
        }
    }
    let none: u64 = 0;
    // SAFETY: rt_sigprocmask with a valid 8-byte set and no old-set pointer.
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            std::ptr::addr_of!(none),
            std::ptr::null_mut::<u64>(),
            8usize,
        );
    }
}
