//! What the tests need from outside Rust (pinned Python packages, Node packages, `wac`),
//! installed on first use inside the repository, so that `cargo test --workspace --locked` works
//! on a fresh machine and touches nothing outside the checkout.
//!
//! - Python packages go into a venv under `target/test-env/<name>/`, from a requirements file
//!   pinned with hashes;
//! - Node packages go into the project's own `node_modules` (`npm ci`, from its lock file);
//! - `wac` is installed by `cargo install --locked` into `target/test-env/wac/`, unless the one
//!   on `PATH` is the pinned version.
//!
//! Each is done once: a stamp records the pin it was installed from (the requirements or lock
//! file's bytes, the `wac` version), and a changed pin installs anew. A file lock serializes the
//! work across the tests of one process and across test processes. What cannot be installed fails
//! the test that needs it, with the installer's output: nothing is skipped.
//!
//! A test crate that includes this module includes `nested_cargo.rs` beside it, at its root.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::nested_cargo;

/// The repository's root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the host crate lives one level below the repository root")
        .to_path_buf()
}

/// `target/test-env/`, where installed tools live.
fn env_dir() -> PathBuf {
    let dir = repo().join("target/test-env");
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}

/// Runs `work` holding the lock `name` (a file under `target/test-env/`).
pub fn locked<T>(name: &str, work: impl FnOnce() -> T) -> T {
    let path = env_dir().join(format!("{name}.lock"));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
    file.lock()
        .unwrap_or_else(|e| panic!("cannot lock {}: {e}", path.display()));
    let result = work();
    drop(file);
    result
}

/// Whether `stamp` holds exactly `pin`.
fn stamped(stamp: &Path, pin: &[u8]) -> bool {
    std::fs::read(stamp).is_ok_and(|held| held == pin)
}

/// Runs a command to success and returns its stdout, or fails the test saying `what` failed,
/// with the command's output.
pub fn run(what: &str, cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}): {cmd:?}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The interpreter of the venv `target/test-env/<name>/venv`, holding exactly the packages of
/// `requirements` (a file pinned with hashes), made or remade when they changed.
pub fn python_venv(name: &str, requirements: &Path) -> PathBuf {
    let pin = std::fs::read(requirements)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", requirements.display()));
    let dir = env_dir().join(name);
    let venv = dir.join("venv");
    let python = venv.join("bin/python");
    let stamp = dir.join("installed-requirements.txt");
    locked(name, || {
        if python.is_file() && stamped(&stamp, &pin) {
            return;
        }
        let _ = std::fs::remove_file(&stamp);
        if venv.exists() {
            std::fs::remove_dir_all(&venv)
                .unwrap_or_else(|e| panic!("cannot remove {}: {e}", venv.display()));
        }
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        run(
            "creating a Python venv (needs python3 with its venv module)",
            Command::new("python3").arg("-m").arg("venv").arg(&venv),
        );
        run(
            &format!("installing {}", requirements.display()),
            pip_install(&python)
                .args(["--require-hashes", "-r"])
                .arg(requirements),
        );
        std::fs::write(&stamp, &pin)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", stamp.display()));
    });
    python
}

/// `python -m pip install`, quiet and without pip's version check; the caller adds what to install.
pub fn pip_install(python: &Path) -> Command {
    let mut cmd = Command::new(python);
    cmd.args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
    ]);
    cmd
}

/// Makes `project/node_modules` hold exactly what `project/package-lock.json` pins (`npm ci`),
/// unless it already does.
pub fn npm_ci(project: &Path) {
    let lock = project.join("package-lock.json");
    let pin =
        std::fs::read(&lock).unwrap_or_else(|e| panic!("cannot read {}: {e}", lock.display()));
    let stamp = project.join("node_modules/.dsh-installed-lock.json");
    // One lock per project, named after its path inside the repository.
    let project = project
        .canonicalize()
        .unwrap_or_else(|e| panic!("cannot resolve {}: {e}", project.display()));
    let repo = repo()
        .canonicalize()
        .unwrap_or_else(|e| panic!("cannot resolve the repository's root: {e}"));
    let name = project
        .strip_prefix(&repo)
        .unwrap_or(&project)
        .to_string_lossy()
        .replace('/', "-");
    locked(&format!("npm-{name}"), || {
        if stamped(&stamp, &pin) {
            return;
        }
        run(
            "npm ci (needs node and npm)",
            Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund", "--prefix"])
                .arg(&project),
        );
        std::fs::write(&stamp, &pin)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", stamp.display()));
    });
}

/// The version of `wac` the composition tests use.
pub const WAC_VERSION: &str = "0.12.0";

/// The `wac` binary: the one on `PATH` when it is [`WAC_VERSION`], else one installed into
/// `target/test-env/wac/` (building it takes minutes; a machine that has it skips that).
pub fn wac() -> PathBuf {
    let on_path = Command::new("wac").arg("--version").output();
    if on_path.is_ok_and(|out| {
        out.status.success()
            && String::from_utf8_lossy(&out.stdout).trim() == format!("wac-cli {WAC_VERSION}")
    }) {
        return PathBuf::from("wac");
    }
    let root = env_dir().join("wac");
    let bin = root.join("bin/wac");
    let stamp = root.join("installed-version");
    locked("wac", || {
        if bin.is_file() && stamped(&stamp, WAC_VERSION.as_bytes()) {
            return;
        }
        let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        cmd.args([
            "install",
            "wac-cli",
            "--version",
            WAC_VERSION,
            "--no-default-features",
            "--locked",
            "--force",
            "--root",
        ])
        .arg(&root);
        nested_cargo::scrub_outer_cargo_env(&mut cmd);
        run(&format!("installing wac-cli {WAC_VERSION}"), &mut cmd);
        std::fs::write(&stamp, WAC_VERSION)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", stamp.display()));
    });
    bin
}
