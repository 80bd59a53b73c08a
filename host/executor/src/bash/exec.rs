//! bash's side of a start, in the spawn helper's forked child: a new session, default signal
//! state, stdio on the command's pipes, the workdir, no other descriptor across the exec, and
//! the `exec` itself.
//!
//! Everything here runs between a (vfork-style) fork and the `exec`: raw system calls only, on
//! memory prepared before the fork (see [`crate::helper::fork`]).

use std::ffi::{CStr, c_char};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use crate::protocol::Step;

/// What the child needs to become bash, prepared before the fork.
pub(crate) struct BashExec<'a> {
    /// The program, looked up on the child's PATH unless it holds a `/`.
    pub(crate) program: &'a CStr,
    /// `program -c command`, or `program -c BOOTSTRAP program` for a long command
    /// ([`crate::bash::long_command`]), null-terminated.
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
    /// [`crate::bash::long_command::COMMAND_FD`] (and `argv` runs the bootstrap that reads it). No
    /// other descriptor used after `report` may be there.
    pub(crate) command: Option<BorrowedFd<'a>>,
    /// The sandbox to apply right before the exec, if any, and the socket its notifying
    /// filter's listener goes to the helper through.
    pub(crate) sandbox: Option<(&'a crate::sandbox::apply::Prepared, BorrowedFd<'a>)>,
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
        crate::protocol::send_with_fds(
            setup.report,
            &crate::protocol::Report::started_bytes(me),
            &[pidfd.as_fd()],
        )
    });
    if let Err(err) = reported {
        fail(Step::Setup, err);
    }
    if let Some(command) = setup.command
        && let Err(err) = crate::bash::long_command::install(command)
    {
        fail(Step::Setup, err);
    }
    // Last, so that nothing above runs confined: Landlock, then seccomp. Nothing the
    // notifying filter hands to the helper may come before the listener is sent: until it
    // has it, the helper is suspended (vfork) or waiting for it (fork fallback).
    if let Some((sandbox, to_helper)) = setup.sandbox {
        let sent = sandbox.apply().and_then(|listener| {
            crate::protocol::send_with_fds(to_helper, b"L", &[listener.as_fd()]).map(|_| ())
        });
        if let Err(err) = sent {
            fail(Step::Sandbox, err);
        }
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
