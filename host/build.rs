//! Builds the tools component from `guest-tools/` and embeds it.
//!
//! The guest is compiled for `wasm32-unknown-unknown`, whose standard library imports nothing:
//! the core module's only imports are the functions wit-bindgen generates for the world's two
//! interfaces, `dsh:bash/bash-executor` and `dsh:bash/agent` (a panic is an `unreachable` trap,
//! which the host reports as the call's fault). `wit-component` then wraps the module into a
//! component, reading the world from the `component-type` custom section wit-bindgen put in it.
//! The encoder refuses a module with any import outside that world, so should the guest ever
//! reach for the platform (files, clocks, random), this build fails instead of embedding it.
//!
//! The core module is built by a nested cargo in its own target directory (`target/guest-wasm`),
//! so it never contends for the outer build's lock and keeps its own profile. The component is
//! embedded, and also written to `target/guest-wasm/guest_tools.wasm` for the other hosts, the
//! composition recipe and the tests.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "../tests/support/nested_cargo.rs"]
mod nested_cargo;

#[path = "../tests/support/rust_target.rs"]
mod rust_target;

const TARGET: &str = "wasm32-unknown-unknown";

/// Where the built component is published, relative to the workspace root.
const PUBLISHED: &str = "target/guest-wasm/guest_tools.wasm";

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

    let dest = out_dir.join("guest_tools.wasm");
    // An embedder or packager may hand over a prebuilt component instead; it is embedded as is.
    if let Some(path) = env::var_os("DSH_GUEST_WASM") {
        let path = PathBuf::from(path);
        std::fs::copy(&path, &dest)
            .unwrap_or_else(|e| panic!("cannot copy the tools component {}: {e}", path.display()));
        return;
    }
    let module = build_guest(&root);
    let core = std::fs::read(&module)
        .unwrap_or_else(|e| panic!("cannot read the guest module {}: {e}", module.display()));
    let component = componentize(&core);
    write_atomically(&dest, &component);
    write_atomically(&root.join(PUBLISHED), &component);
}

/// Builds guest-tools' core module; returns its path.
fn build_guest(root: &Path) -> PathBuf {
    rust_target::ensure(TARGET)
        .unwrap_or_else(|e| panic!("{e}, or set DSH_GUEST_WASM to a prebuilt tools component"));
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
    // Panic locations in dependencies name their sources under cargo's home; mapped to a fixed
    // prefix, the component is the same byte for byte wherever it is built with this toolchain
    // (the Python package carries a copy that must equal the embedded one).
    if let Some(home) = cargo_home() {
        cmd.env(
            "CARGO_ENCODED_RUSTFLAGS",
            format!("--remap-path-prefix={}=/cargo", home.display()),
        );
    }
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

/// Cargo's home directory, where dependencies' sources are unpacked.
fn cargo_home() -> Option<PathBuf> {
    env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")))
}

/// The component of a core module that carries wit-bindgen's `component-type` section.
fn componentize(core: &[u8]) -> Vec<u8> {
    wit_component::ComponentEncoder::default()
        .module(core)
        .and_then(|encoder| encoder.validate(true).encode())
        .unwrap_or_else(|e| {
            panic!(
                "cannot make the tools component from the guest module (an import outside \
                 dsh:bash/bash-executor and dsh:bash/agent is refused here): {e:?}"
            )
        })
}

/// Writes `bytes` to `path` through a temporary file and a rename, so that a reader (or a build
/// of another profile running this script at the same time) never sees a partial file.
fn write_atomically(path: &Path, bytes: &[u8]) {
    let tmp = path.with_extension(format!("wasm.{}", std::process::id()));
    std::fs::write(&tmp, bytes)
        .and_then(|()| std::fs::rename(&tmp, path))
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}
