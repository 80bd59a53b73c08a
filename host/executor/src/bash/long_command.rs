//! Commands longer than one `exec` argument may be, and the limit on a command's length.
//!
//! A command goes to bash as `bash -c <command>`, one argument, and Linux refuses any single
//! argument above `MAX_ARG_STRLEN` (32 pages, the terminating NUL included: 128 KiB with the
//! smallest page size, 4 KiB; larger pages only raise it) with `E2BIG`. Commands up to
//! [`ARGV_MAX`] bytes therefore go exactly as they always did. A longer one (up to the
//! configured `Config::max_command_bytes`, at most [`MAX_COMMAND_BYTES`]) travels in the spawn
//! request like any other; the spawn helper writes it, followed by a NUL, into a memfd, which
//! bash gets as descriptor [`COMMAND_FD`], and bash runs the fixed [`BOOTSTRAP`] with `$0` set as
//! for a short command: `bash -c <BOOTSTRAP> <bash>`. The bootstrap reads the text into
//! `BASH_EXECUTION_STRING` (where `bash -c` keeps its command, so that variable holds the command
//! as it would), closes the descriptor and `eval`s the text.
//!
//! Compared with `bash -c <command>` (probed with bash 5.2 on commands of both kinds), the same:
//! `$0`, `$#` and `$@` (none), `$?` (0), `$_` (see below), `$LINENO` (the command's first line is
//! 1), `$BASH_EXECUTION_STRING`, `$-`, `shopt`, `$FUNCNAME`, `$BASH_SOURCE`, `$BASH_LINENO`,
//! `caller`, `$SHLVL`, `$BASH_SUBSHELL`, the environment, every other variable, descriptors 0, 1
//! and 2 only (in bash and in its children), stdin `/dev/null`, exit codes (`exit 7`, `false`,
//! a syntax error's 2, `set -e`, `return` at top level failing with the same message, an `EXIT`
//! trap, an `ERR` trap firing once), heredocs and aliases. What differs:
//! - a syntax error is reported as `bash: eval: line N: …` instead of `bash: -c: line N: …` (same
//!   line number, same exit status 2);
//! - `PIPESTATUS` is `(0)` before the command's first command ends, instead of unset;
//! - bash does not `exec` the command's last simple command in its own place, as `bash -c` does
//!   (for `eval`ed text it never does): that command runs as bash's child, so `$$` is bash rather
//!   than it, and when it dies of a signal bash exits with 128 + the signal's number (and reports
//!   e.g. `Terminated` on stderr) instead of dying of the same signal itself;
//! - bash's command line (`/proc/<pid>/cmdline`, `ps`) shows the bootstrap, not the command;
//! - a `BASH_ENV` file, read by bash before any command, sees descriptor [`COMMAND_FD`] open.
//!
//! Why this design: the alternatives probed worse. A script file (`bash /dev/fd/3`) has `$0`
//! `/dev/fd/3`, keeps the script descriptor open in bash (255) and the passed one in every child,
//! has no `BASH_EXECUTION_STRING` and says `bash: line N:` in errors; `source` (`. /dev/fd/3`)
//! makes a top-level `return` end the command with its status, sets `BASH_SOURCE` and keeps the
//! descriptor open; both also lose the last command's `exec`. A pipe would need a writer while
//! bash reads (1 MiB is more than a pipe holds); a memfd is written whole before bash starts.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use crate::ExecError;

/// The longest command passed to bash as its argument: `MAX_ARG_STRLEN` (32 pages of at least
/// 4 KiB) less the terminating NUL.
pub(crate) const ARGV_MAX: usize = 32 * 4096 - 1;

/// The largest `Config::max_command_bytes`: the longest field a spawn request carries.
pub(crate) const MAX_COMMAND_BYTES: u64 = crate::protocol::MAX_FIELD as u64;

/// The descriptor on which bash finds a long command (closed by [`BOOTSTRAP`] before the command
/// runs). It must stay what the bootstrap names.
pub(crate) const COMMAND_FD: i32 = 3;

/// What bash runs (as `bash -c BOOTSTRAP <bash>`) for a command longer than [`ARGV_MAX`].
///
/// Two rounds of one loop whose variable is `_`: the first reads the command (up to the NUL the
/// helper wrote after it; without that NUL it did not arrive whole, and bash exits 126 saying so)
/// into `BASH_EXECUTION_STRING` and closes the descriptor; the second round finds the text long
/// (the bootstrap itself is short, a long command never is) and runs only `((1))`, which leaves
/// `$_` alone, so that `$_` is again what it was when bash started (the loop's words are that
/// value), as the command's first statement would see it under `bash -c`. `builtin` and
/// `command` keep functions a host exports under these names out of the way (`command exec`
/// still makes its redirection permanent). Then `eval` runs the text.
pub(crate) const BOOTSTRAP: &CStr = c"for _ in \"$_\" \"$_\"; do if ((${#BASH_EXECUTION_STRING} >= 4096)); then ((1)); else IFS= builtin read -r -d '' BASH_EXECUTION_STRING <&3 || { builtin echo \"bash: the command did not arrive whole on descriptor 3\" >&2; builtin exit 126; }; command exec 3<&-; fi; done; builtin eval \"$BASH_EXECUTION_STRING\"";

// The bootstrap tells itself from the command by length: every long command has more than 4096
// characters (at most 4 bytes each in UTF-8), and the bootstrap fewer.
const _: () = assert!(ARGV_MAX / 4 >= 4096 && BOOTSTRAP.to_bytes().len() < 4096);

/// Whether `command` is too long to be bash's argument.
pub(crate) fn needs_descriptor(command: &[u8]) -> bool {
    command.len() > ARGV_MAX
}

/// Refuses a command longer than `limit` bytes (the configured `max_command_bytes`).
pub(crate) fn check(command: &str, limit: u64) -> Result<(), ExecError> {
    let len = command.len() as u64;
    if len <= limit {
        return Ok(());
    }
    Err(ExecError::InvalidRequest(format!(
        "command too long: {len} bytes, more than the limit of {limit} bytes \
         (--max-command-bytes); nothing was run. Split the work into smaller commands (write a \
         large file in parts, e.g. appending with >>)"
    )))
}

/// A sealed memfd holding `command` and a NUL, at offset 0, closed on `exec` (bash gets a copy
/// as [`COMMAND_FD`], see [`install`]).
pub(crate) fn memfd(command: &[u8]) -> io::Result<OwnedFd> {
    use rustix::fs::{MemfdFlags, SealFlags};
    let fd = rustix::fs::memfd_create(
        c"dsh-command",
        MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
    )?;
    for mut rest in [command, b"\0".as_slice()] {
        while !rest.is_empty() {
            match rustix::io::write(&fd, rest) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => rest = &rest[n..],
                Err(rustix::io::Errno::INTR) => {}
                Err(err) => return Err(err.into()),
            }
        }
    }
    rustix::fs::seek(&fd, rustix::fs::SeekFrom::Start(0))?;
    // bash reads exactly what the host sent: nobody can change it any more.
    rustix::fs::fcntl_add_seals(
        &fd,
        SealFlags::WRITE | SealFlags::GROW | SealFlags::SHRINK | SealFlags::SEAL,
    )?;
    Ok(fd)
}

/// Moves `fd` off [`COMMAND_FD`] if it is there (the copy is closed on `exec` too), so that
/// installing the command there in the child cannot replace it. Unchanged on failure.
pub(crate) fn off_command_fd(fd: &mut OwnedFd) -> io::Result<()> {
    if fd.as_raw_fd() == COMMAND_FD {
        *fd = rustix::io::fcntl_dupfd_cloexec(&*fd, COMMAND_FD + 1)?;
    }
    Ok(())
}

/// In the child, right before `exec` (every descriptor from 3 up already closed on `exec`):
/// `command` becomes [`COMMAND_FD`], kept across the `exec`. Raw system calls only.
pub(crate) fn install(command: BorrowedFd<'_>) -> io::Result<()> {
    if command.as_raw_fd() == COMMAND_FD {
        rustix::io::fcntl_setfd(command.as_fd(), rustix::io::FdFlags::empty())?;
        return Ok(());
    }
    // SAFETY: dup2 onto a number this process may or may not have open (rustix's dup2 needs it
    // owned, hence libc); it touches no memory. The copy has no close-on-exec flag.
    if unsafe { libc::dup2(command.as_raw_fd(), COMMAND_FD) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_commands_past_one_argument_need_the_descriptor() {
        assert!(!needs_descriptor(&vec![b'x'; ARGV_MAX]));
        assert!(needs_descriptor(&vec![b'x'; ARGV_MAX + 1]));
    }

    #[test]
    fn the_limit_is_inclusive_and_its_error_names_the_flag() {
        assert_eq!(check("12345", 5), Ok(()));
        let Err(ExecError::InvalidRequest(message)) = check("123456", 5) else {
            panic!("refused")
        };
        assert!(
            message.starts_with("command too long: 6 bytes, more than the limit of 5 bytes")
                && message.contains("--max-command-bytes"),
            "{message}"
        );
    }

    #[test]
    fn the_memfd_holds_the_command_and_a_nul_and_is_sealed() {
        let fd = memfd(b"echo hi").unwrap();
        let mut text = Vec::new();
        std::io::Read::read_to_end(&mut std::fs::File::from(fd.try_clone().unwrap()), &mut text)
            .unwrap();
        assert_eq!(text, b"echo hi\0");
        assert!(rustix::io::write(&fd, b"x").is_err());
    }
}
