//! The tests' Python: a venv under `target/test-env/bindings-python/venv` holding the hash-pinned
//! requirements of `tests/polyglot/python/requirements.txt` (wasmtime, langchain-core,
//! openai-agents, the build backend and the `wheel` tool) and the `dsh_tools` package installed
//! from `bindings/python`.
//!
//! Made by the tests themselves (`provision.rs`), so `cargo test` works on a machine with only
//! `python3` (with its `venv` module) and access to PyPI. Idempotent: the requirements are
//! installed again only when the file changed, the package only when its sources changed. A lock
//! file serializes the setup across test threads and test processes. A setup that cannot finish
//! fails the test.

//!
//! A test crate that includes this module includes `provision.rs` (and what it needs) at its root.

use crate::provision;

use std::hash::{DefaultHasher, Hasher};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The package's sources, installed into the venv.
fn package_dir() -> PathBuf {
    provision::repo().join("bindings").join("python")
}

fn requirements() -> PathBuf {
    provision::repo().join("tests/polyglot/python/requirements.txt")
}

/// A fingerprint of the package's sources (paths and contents), skipping build output.
fn package_fingerprint() -> String {
    fn walk(dir: &Path, base: &Path, hasher: &mut DefaultHasher) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            let name = path.file_name().unwrap().to_string_lossy();
            if name == "build" || name == "__pycache__" || name.ends_with(".egg-info") {
                continue;
            }
            if path.is_dir() {
                walk(&path, base, hasher);
            } else {
                hasher.write(
                    path.strip_prefix(base)
                        .unwrap()
                        .to_string_lossy()
                        .as_bytes(),
                );
                hasher.write(&std::fs::read(&path).unwrap());
            }
        }
    }
    let mut hasher = DefaultHasher::new();
    walk(&package_dir(), &package_dir(), &mut hasher);
    format!("{:016x}", hasher.finish())
}

fn setup() -> PathBuf {
    let python = provision::python_venv("bindings-python", &requirements());
    let fingerprint = package_fingerprint();
    let stamp = python
        .parent()
        .and_then(Path::parent)
        .expect("the interpreter lives in the venv's bin/")
        .join("dsh-package.txt");
    provision::locked("bindings-python-package", || {
        if std::fs::read_to_string(&stamp).ok().as_deref() == Some(fingerprint.as_str()) {
            return;
        }
        // The build backend comes from the hash-pinned requirements, hence no build isolation
        // (which would fetch it unchecked); the dependencies are installed already.
        provision::run(
            "installing dsh-tools from bindings/python",
            provision::pip_install(&python)
                .args(["--no-deps", "--no-build-isolation", "--force-reinstall"])
                .arg(package_dir()),
        );
        std::fs::write(&stamp, &fingerprint).unwrap();
    });
    python
}

/// The venv's interpreter, with the package installed from this checkout.
pub fn python() -> PathBuf {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(setup).clone()
}
