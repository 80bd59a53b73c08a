//! Search paths for the tests of where the packages find `dsh-host`: this process's `PATH` less
//! every directory holding a `dsh-host`, and one with a `dsh-host` of the test's choosing first.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// This process's `PATH` without the directories that hold a `dsh-host`.
pub fn without_dsh_host() -> OsString {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let kept: Vec<PathBuf> = std::env::split_paths(&path)
        .filter(|dir| !dir.join("dsh-host").exists())
        .collect();
    std::env::join_paths(kept).expect("PATH's directories join again")
}

/// A directory under `base` holding a working `dsh-host`: a script that runs `real`.
pub fn dir_with_dsh_host(base: &Path, real: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = base.join("path-bin");
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("dsh-host");
    std::fs::write(
        &script,
        format!("#!/bin/sh\nexec '{}' \"$@\"\n", real.display()),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// `first` followed by the directories of `rest`.
pub fn prepend(first: &Path, rest: &OsString) -> OsString {
    let mut dirs = vec![first.to_path_buf()];
    dirs.extend(std::env::split_paths(rest));
    std::env::join_paths(dirs).expect("PATH's directories join again")
}
