//! Builds the tools component from `guest-tools/` for `wasm32-wasip2` and embeds it.
//!
//! The guest is built by a nested cargo in its own target directory (`target/guest-wasm`), so it
//! never contends for the outer build's lock and keeps its own profile.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "../tests/support/nested_cargo.rs"]
mod nested_cargo;

const TARGET: &str = "wasm32-wasip2";

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let root = manifest_dir
        .parent()
        .expect("host/ sits in the workspace")
        .to_path_buf();
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));

    for watched in [
        "guest-tools/src",
        "guest-tools/Cargo.toml",
        "wit",
        "Cargo.lock",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(watched).display());
    }
    println!("cargo:rerun-if-env-changed=DSH_GUEST_WASM");

    // An embedder or packager may hand over a prebuilt component instead.
    let wasm = match env::var_os("DSH_GUEST_WASM") {
        Some(path) => PathBuf::from(path),
        None => build_guest(&root),
    };
    let dest = out_dir.join("guest_tools.wasm");
    std::fs::copy(&wasm, &dest)
        .unwrap_or_else(|e| panic!("cannot copy the tools component {}: {e}", wasm.display()));
}

fn build_guest(root: &Path) -> PathBuf {
    ensure_target();
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let target_dir = root.join("target").join("guest-wasm");
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root)
        .args([
            "build",
            "-p",
            "guest-tools",
            "--release",
            "--lib",
            "--target",
            TARGET,
        ])
        .arg("--target-dir")
        .arg(&target_dir);
    nested_cargo::scrub_outer_cargo_env(&mut cmd);
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("cannot run cargo to build guest-tools: {e}"));
    if !status.success() {
        panic!("building guest-tools for {TARGET} failed ({status}); see the output above");
    }
    target_dir
        .join(TARGET)
        .join("release")
        .join("guest_tools.wasm")
}

/// Installs the wasm target with rustup when it is missing.
fn ensure_target() {
    let sysroot = Command::new(env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    let installed = sysroot
        .as_ref()
        .is_some_and(|s| s.join("lib/rustlib").join(TARGET).exists());
    if installed {
        return;
    }
    println!("cargo:warning=installing the {TARGET} target with rustup");
    let added = Command::new("rustup")
        .args(["target", "add", TARGET])
        .status();
    match added {
        Ok(s) if s.success() => {}
        Ok(s) => panic!(
            "the {TARGET} target is missing and `rustup target add {TARGET}` failed ({s}); \
             install it by hand, or set DSH_GUEST_WASM to a prebuilt tools component"
        ),
        Err(e) => panic!(
            "the {TARGET} target is missing and rustup could not be run ({e}); \
             install the target with your toolchain manager, or set DSH_GUEST_WASM to a \
             prebuilt tools component"
        ),
    }
}
