//! The tools component composed with the policy middleware, as the README's recipe makes it:
//! `policy/middleware/compose.sh TOOLS.wasm OUT.wasm` (needs `wac`, which `provision` installs
//! into the checkout on first use). Made once per test process, under a lock shared by every
//! test process (compose.sh writes `target/guest-wasm/policy_middleware.wasm`).
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use super::nested_cargo;
use super::provision;

/// The tools component as built: the file the host's build script embedded.
pub fn tools_file() -> PathBuf {
    match std::env::var_os("DSH_GUEST_WASM") {
        Some(path) => PathBuf::from(path),
        None => provision::repo().join("target/guest-wasm/guest_tools.wasm"),
    }
}

/// The middleware component alone, as compose.sh leaves it.
pub fn middleware_file() -> PathBuf {
    composed();
    provision::repo().join("target/guest-wasm/policy_middleware.wasm")
}

/// The composed component: imports `bash-executor`, `agent` and `approval`; exports `tools`,
/// `bash-executor` and `policy-check`.
pub fn composed() -> PathBuf {
    static COMPOSED: OnceLock<PathBuf> = OnceLock::new();
    COMPOSED
        .get_or_init(|| {
            let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("policy-component");
            std::fs::create_dir_all(&dir).unwrap();
            let out = dir.join(format!("composed-{}.wasm", std::process::id()));
            let wac = provision::wac();
            provision::locked("policy-compose", || {
                let mut cmd = Command::new(provision::repo().join("policy/middleware/compose.sh"));
                cmd.arg(tools_file()).arg(&out).env("WAC", &wac);
                nested_cargo::scrub_outer_cargo_env(&mut cmd);
                let status = cmd.status().expect("compose.sh runs");
                assert!(status.success(), "compose.sh failed ({status})");
            });
            out
        })
        .clone()
}
