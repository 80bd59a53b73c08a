//! How bash is invoked: the program, its arguments, its environment, its working directory, and
//! (in [`exec`], which runs in the spawn helper's child) its descriptors and signal state.

pub(crate) mod env;
pub(crate) mod exec;
pub(crate) mod long_command;
pub(crate) mod workdir;

use std::ffi::OsString;

/// The shell every command runs in, looked up on PATH.
pub(crate) const SHELL: &str = "bash";

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
