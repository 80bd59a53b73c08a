//! Signal numbers as the names the tools show (`SIGTERM`, `SIGKILL`, ...).

/// The conventional name of a signal number; real-time signals as `SIGRTMIN+n`, anything else as
/// `SIG<n>` so that a name is always available.
pub(crate) fn name(sig: i32) -> String {
    let known = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGSTKFLT => "SIGSTKFLT",
        libc::SIGCHLD => "SIGCHLD",
        libc::SIGCONT => "SIGCONT",
        libc::SIGSTOP => "SIGSTOP",
        libc::SIGTSTP => "SIGTSTP",
        libc::SIGTTIN => "SIGTTIN",
        libc::SIGTTOU => "SIGTTOU",
        libc::SIGURG => "SIGURG",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGVTALRM => "SIGVTALRM",
        libc::SIGPROF => "SIGPROF",
        libc::SIGWINCH => "SIGWINCH",
        libc::SIGIO => "SIGIO",
        libc::SIGPWR => "SIGPWR",
        libc::SIGSYS => "SIGSYS",
        _ => "",
    };
    if !known.is_empty() {
        return known.to_string();
    }
    let (min, max) = (libc::SIGRTMIN(), libc::SIGRTMAX());
    match sig {
        s if s == min => "SIGRTMIN".to_string(),
        s if s == max => "SIGRTMAX".to_string(),
        s if s > min && s < max => format!("SIGRTMIN+{}", s - min),
        s => format!("SIG{s}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(name(libc::SIGTERM), "SIGTERM");
        assert_eq!(name(9), "SIGKILL");
        assert_eq!(name(libc::SIGSEGV), "SIGSEGV");
        assert_eq!(name(libc::SIGRTMIN() + 2), "SIGRTMIN+2");
        assert_eq!(name(200), "SIG200");
    }
}
