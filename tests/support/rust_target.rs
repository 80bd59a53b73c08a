//! Installing a Rust compilation target with rustup when it is missing, for the host's build
//! script (the tools' `wasm32-unknown-unknown`) and the tests that build a guest for another one
//! (the fault guest's `wasm32-wasip2`). Shared through `#[path]`, so there is one rule for it.

use std::path::PathBuf;
use std::process::Command;

/// Makes sure `target` is installed for the toolchain that builds; installs it with rustup when
/// it is missing. The error says what failed and how to install it by hand.
pub fn ensure(target: &str) -> Result<(), String> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let sysroot = Command::new(rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    let installed = sysroot
        .as_ref()
        .is_some_and(|s| s.join("lib/rustlib").join(target).exists());
    if installed {
        return Ok(());
    }
    eprintln!("installing the {target} target with rustup");
    match Command::new("rustup")
        .args(["target", "add", target])
        .status()
    {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!(
            "the {target} target is missing and `rustup target add {target}` failed ({s}); \
             install it by hand"
        )),
        Err(e) => Err(format!(
            "the {target} target is missing and rustup could not be run ({e}); install the \
             target with your toolchain manager"
        )),
    }
}
