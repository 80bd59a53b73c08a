//! The per-command supervisor: a forked copy of the host that sits between the host and `bash`.
//!
//! Why it exists:
//! - it is a child subreaper, so every descendant the command orphans (double fork, `setsid`,
//!   daemonising) is re-parented to it and stays inside the tree the host can see and kill;
//! - the command's `$PPID` is the supervisor, so `kill -TERM $PPID` hits the task, not the host;
//! - it hands bash's wait status to the host through a pipe, keeps reaping, and exits only when
//!   no descendant is left, so "supervisor exited" means "nothing of the command is left";
//! - when the host dies abruptly, it kills the whole tree before exiting; in cgroup mode it kills
//!   the command's cgroup (which holds even processes that escaped it) and removes it.
//!
//! It runs in a child forked from a multi-threaded host and never execs, so it may only make
//! async-signal-safe calls: raw libc, no allocation, no locks, no panics.

use libc::{c_int, pid_t};

use crate::cgroup::{self, CgroupPaths};

/// Where the supervisor keeps its end of the status pipe.
const STATUS_FD: c_int = 3;

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
    cgroup: Option<&CgroupPaths>,
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
        ] {
            set_handler(sig, wake as extern "C" fn(c_int) as libc::sighandler_t);
        }
        for sig in [libc::SIGPIPE, libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU] {
            set_handler(sig, libc::SIG_IGN);
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        // Also fires when the host *thread* that forked us exits, hence the parent re-check.
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGTERM as libc::c_ulong,
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
                // ECHILD: no descendant is left.
                libc::_exit(0);
            }
        }
    }
}

unsafe fn set_handler(sig: c_int, handler: libc::sighandler_t) {
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler;
        // No SA_RESTART: a signal must interrupt waitpid.
        action.sa_flags = 0;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(sig, &action, std::ptr::null_mut());
    }
}

fn errno() -> c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

unsafe fn close_from(first: c_int) {
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

unsafe fn write_all(fd: c_int, mut bytes: &[u8]) {
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
unsafe fn kill_tree_and_exit(cgroup: Option<&CgroupPaths>) -> ! {
    unsafe {
        if let Some(paths) = cgroup {
            let _ = cgroup::write_file(&paths.kill, b"1");
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
                if !cgroup::populated_raw(&paths.events) {
                    break;
                }
                if round % 10 == 9 {
                    let _ = cgroup::write_file(&paths.kill, b"1");
                }
                pause_ms(10);
            }
            libc::rmdir(paths.dir.as_ptr());
            libc::rmdir(paths.root.as_ptr());
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
