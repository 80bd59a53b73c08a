//! `tests/fault-guest`, a component that misbehaves on request, built for wasm32-wasip2 once per
//! test process (installing that target with rustup when it is missing). Needs
//! `support/nested_cargo.rs` and `support/rust_target.rs` as the sibling modules `nested_cargo` and
//! `rust_target`.

use std::path::PathBuf;
use std::sync::OnceLock;

use super::{nested_cargo, rust_target};

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The fault guest's component file, built on first use.
pub fn fault_guest() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            rust_target::ensure("wasm32-wasip2").unwrap_or_else(|e| panic!("{e}"));
            let root = workspace_root();
            let target_dir = root.join("target").join("guest-wasm");
            let mut cmd = std::process::Command::new(env!("CARGO"));
            cmd.current_dir(&root)
                .args([
                    "build",
                    "-p",
                    "fault-guest",
                    "--release",
                    "--target",
                    "wasm32-wasip2",
                    "--target-dir",
                ])
                .arg(&target_dir);
            nested_cargo::scrub_outer_cargo_env(&mut cmd);
            let status = cmd.status().expect("cargo runs");
            assert!(status.success(), "building fault-guest failed");
            target_dir.join("wasm32-wasip2/release/fault_guest.wasm")
        })
        .clone()
}

/// The fault guest's `instructions` export, which differs from the tools component's.
#[allow(dead_code)]
pub const INSTRUCTIONS: &str =
    "Fault guest: its tools misbehave on request. For the host's tests only.";
