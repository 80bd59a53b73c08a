//! How bash is invoked: the program, its arguments, its environment, its working directory, and
//! (in [`exec`], which runs in the spawn helper's child) its descriptors and signal state.

pub(crate) mod env;
pub(crate) mod exec;
pub(crate) mod long_command;
pub(crate) mod workdir;

use std::ffi::{CStr, OsString, c_char};

/// The shell every command runs in, looked up on PATH.
pub(crate) const SHELL: &str = "bash";

/// `argv[0]` of every bash: the name, not the path found on PATH (which is only what is exec'd),
/// so that `$0`, `BASH_ARGV0` and the prefix of bash's own messages (`bash: line 1: …`) are as
/// under plain `bash -c`.
pub(crate) const ARGV0: &CStr = c"bash";

/// bash's arguments, null-terminated: `bash -c <command>`; for a command too long to be an
/// argument (`None`: it travels in a descriptor, see [`long_command`]) `bash -c <BOOTSTRAP>
/// bash`, which sets `$0` the same way. The pointers are valid while `command` is.
pub(crate) fn argv(command: Option<&CStr>) -> [*const c_char; 5] {
    let null = std::ptr::null();
    match command {
        Some(command) => [ARGV0.as_ptr(), c"-c".as_ptr(), command.as_ptr(), null, null],
        None => [
            ARGV0.as_ptr(),
            c"-c".as_ptr(),
            long_command::BOOTSTRAP.as_ptr(),
            ARGV0.as_ptr(),
            null,
        ],
    }
}

/// The first executable `name` in the host's PATH, else `name` itself (to be looked up at spawn).
pub(crate) fn find_on_path(name: &str) -> OsString {
    let Some(path) = std::env::var_os("PATH") else {
        return name.into();
    };
    for dir in std::env::split_paths(&path) {
        if dir.as_os_str().is_empty() || !dir.is_absolute() {
            // Relative entries depend on each command's workdir: keep the per-spawn lookup.
            return name.into();
        }
        let candidate = dir.join(name);
        if candidate.is_file()
            && rustix::fs::access(&candidate, rustix::fs::Access::EXEC_OK).is_ok()
        {
            return candidate.into_os_string();
        }
    }
    name.into()
}
