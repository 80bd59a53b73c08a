//! The very bytes this `dsh-host` embeds, as a file the foreign hosts and packages load, and the
//! digest the tests compare components by.

// Each test binary uses its own part of this module.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The SHA-256 of `bytes`, as lowercase hex: how the tests compare components.
pub fn sha256(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

/// `dir/guest_tools.wasm` holding the embedded component. Rewritten only when it differs, through
/// a temporary file and a rename, so that tests on other threads or in other processes reading
/// it meanwhile never see a partial file.
pub fn embedded_component(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("guest_tools.wasm");
    let bytes = dsh_host::engine::EMBEDDED_COMPONENT;
    if std::fs::read(&path).ok().as_deref() != Some(bytes) {
        let tmp = dir.join(format!(
            "guest_tools.wasm.{}.{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::write(&tmp, bytes).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
    }
    path
}
