//! Running cargo from inside a cargo build (the host's build script, tests that build guests).
//!
//! Shared by `host/build.rs` and the tests through `#[path]`, so there is one rule for it.

use std::process::Command;

/// Remove the outer build's settings (flags, wrappers, profile and target overrides) from `cmd`:
/// they describe the outer build, not the nested one.
pub fn scrub_outer_cargo_env(cmd: &mut Command) {
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        let outer =
            (key.starts_with("CARGO_") && key != "CARGO_HOME" && key != "CARGO_NET_OFFLINE")
                || key.starts_with("RUSTC")
                || key == "RUSTFLAGS"
                || key == "RUSTDOCFLAGS";
        if outer {
            cmd.env_remove(key.as_ref());
        }
    }
}
