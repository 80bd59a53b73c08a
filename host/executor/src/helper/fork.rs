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
//! probe is multi-threaded and its child only makes raw system calls. [`exec_bash`](crate::bash::exec::exec_bash) itself
//! makes only raw system calls on memory prepared before the fork, so it is safe in either.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use crate::bash::exec::{BashExec, exec_bash};

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
