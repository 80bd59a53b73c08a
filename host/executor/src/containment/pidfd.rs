//! Waiting on pidfds: a pidfd turns readable once its process has exited.

use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

/// Whether `fd` turns readable within `wait` (a pidfd: its process has exited). Blocking; a
/// signal handled meanwhile (the host's SIGCHLD, say) does not cut the wait short.
pub(crate) fn readable_within(fd: impl AsFd, wait: Duration) -> std::io::Result<bool> {
    let deadline = std::time::Instant::now() + wait;
    loop {
        let mut fds = [rustix::event::PollFd::new(
            &fd,
            rustix::event::PollFlags::IN,
        )];
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let left = rustix::event::Timespec {
            tv_sec: i64::try_from(left.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(left.subsec_nanos()),
        };
        match rustix::event::poll(&mut fds, Some(&left)) {
            Err(rustix::io::Errno::INTR) => continue,
            other => return Ok(other? > 0),
        }
    }
}

/// Whether the process whose pidfd is `pidfd` has not exited, asked now.
pub(crate) fn running(pidfd: impl AsFd) -> bool {
    matches!(readable_within(pidfd, Duration::ZERO), Ok(false))
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
