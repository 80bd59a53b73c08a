//! The Node package (`bindings/node`) installed the way a user installs it: its build tools from
//! its lock file, `npm pack` (which generates the package's component files from the component
//! this `dsh-host` embeds), and the tarball installed into a fresh project under `target/`
//! whose other packages come from `bindings/node/test/project/package-lock.json`.
//!
//! Each test binary gets its own project directory, made once per process; the shared build
//! tools in `bindings/node/node_modules` are installed under a file lock, so test binaries
//! running at once do not install over each other (`provision.rs`, which a test crate including
//! this module includes at its root, as it does `component_file.rs`). Anything missing (node, npm, the registry)
//! fails the test, saying what.

// Each test binary uses its own part of this module.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::provision;

/// The package's source directory.
pub fn package_dir() -> PathBuf {
    provision::repo().join("bindings").join("node")
}

fn work_dir() -> PathBuf {
    provision::repo().join("target").join("bindings-node")
}

/// Runs a command to success and returns its stdout, or fails naming it and its output.
pub fn run(cmd: &mut Command) -> String {
    provision::run(
        "a command of the Node package's tests (node and npm must be in PATH)",
        cmd,
    )
}

fn npm(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new("npm");
    cmd.current_dir(dir)
        .args(args)
        .args(["--no-audit", "--no-fund", "--loglevel=error"]);
    cmd
}

/// `bindings/node/node_modules` as its lock file says (jco for `npm pack`), installed when the
/// lock file differs from the one last installed.
pub fn build_tools() -> PathBuf {
    static DONE: OnceLock<PathBuf> = OnceLock::new();
    DONE.get_or_init(|| {
        let dir = package_dir();
        provision::npm_ci(&dir);
        dir
    })
    .clone()
}

/// A fresh project with the packed package installed; `name` keeps each test binary's apart.
pub fn project(name: &str) -> PathBuf {
    static DONE: OnceLock<PathBuf> = OnceLock::new();
    DONE.get_or_init(|| make_project(name)).clone()
}

fn make_project(name: &str) -> PathBuf {
    let base = work_dir().join(name);
    if base.exists() {
        std::fs::remove_dir_all(&base).unwrap();
    }
    let source = build_tools();
    let component = crate::component_file::embedded_component(&base);

    // Pack a copy of the package's own files, so that packing never writes into the source
    // tree (another test binary may be packing too); its build tools are the shared ones.
    let copy = base.join("package");
    for entry in [
        "package.json",
        "package-lock.json",
        "README.md",
        "src",
        "scripts",
    ] {
        copy_tree(&source.join(entry), &copy.join(entry));
    }
    std::os::unix::fs::symlink(source.join("node_modules"), copy.join("node_modules")).unwrap();
    let destination = format!("--pack-destination={}", base.display());
    let packed =
        run(npm(&copy, &["pack", "--json", &destination]).env("DSH_GUEST_WASM", &component));
    let packed: serde_json::Value =
        serde_json::from_str(&packed).unwrap_or_else(|e| panic!("npm pack --json: {e}: {packed}"));
    let tarball = base.join(
        packed[0]["filename"]
            .as_str()
            .expect("npm pack names the tarball"),
    );

    let project = base.join("project");
    let template = source.join("test");
    copy_tree(&template.join("project"), &project);
    run(&mut npm(&project, &["ci"]));
    run(npm(&project, &["install", "--no-save"]).arg(&tarball));
    for script in [
        "golden.mjs",
        "ai-adapter.mjs",
        "exit.mjs",
        "served.mjs",
        "forgotten.mjs",
        "definitions.mjs",
        "sessions.mjs",
        "example.ts",
        "tsconfig.json",
    ] {
        std::fs::copy(template.join(script), project.join(script)).unwrap();
    }
    project
}

fn copy_tree(from: &Path, to: &Path) {
    if from.is_dir() {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            copy_tree(&entry.path(), &to.join(entry.file_name()));
        }
    } else {
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(from, to).unwrap_or_else(|e| panic!("cannot copy {}: {e}", from.display()));
    }
}
