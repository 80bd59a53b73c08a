//! The tests' Python: a venv under `target/bindings-python/venv` holding the hash-pinned
//! requirements of `tests/polyglot/python/requirements.txt` (wasmtime, langchain-core and the
//! build backend) and the `dsh_tools` package installed from `bindings/python`.
//!
//! Made by the tests themselves, so `cargo test` works on a machine with only `python3` (with
//! its `venv` module) and access to PyPI. Idempotent: the requirements are installed again only
//! when the file changed, the package only when its sources changed. A lock file serializes the
//! setup across test threads and test processes. A setup that cannot finish fails the test.

use std::hash::{DefaultHasher, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ sits in the workspace")
        .to_path_buf()
}

/// The package's sources, installed into the venv.
fn package_dir() -> PathBuf {
    root().join("bindings").join("python")
}

fn requirements() -> PathBuf {
    root().join("tests/polyglot/python/requirements.txt")
}

/// The interpreter the venv is made from: `DSH_PYTHON`, else `python3` from PATH.
fn base_python() -> String {
    std::env::var("DSH_PYTHON").unwrap_or_else(|_| "python3".to_string())
}

fn run(what: &str, cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}): {cmd:?}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
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
    let dir = root().join("target").join("bindings-python");
    std::fs::create_dir_all(&dir).unwrap();
    let lock = std::fs::File::create(dir.join("setup.lock")).unwrap();
    lock.lock().expect("the venv setup lock");

    let venv = dir.join("venv");
    let python = venv.join("bin").join("python");
    let usable = Command::new(&python)
        .args(["-c", "import sys"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !usable {
        // A venv left half-made by an interrupted run is made again from scratch.
        let _ = std::fs::remove_dir_all(&venv);
        run(
            "making the test venv (python3 needs its venv module)",
            Command::new(base_python()).args(["-m", "venv"]).arg(&venv),
        );
    }

    let wanted = std::fs::read_to_string(requirements()).unwrap();
    let stamp = venv.join("dsh-requirements.txt");
    if std::fs::read_to_string(&stamp).ok().as_deref() != Some(wanted.as_str()) {
        run(
            "installing the hash-pinned requirements",
            Command::new(&python)
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                ])
                .args(["--require-hashes", "-r"])
                .arg(requirements()),
        );
        std::fs::write(&stamp, &wanted).unwrap();
    }

    let fingerprint = package_fingerprint();
    let stamp = venv.join("dsh-package.txt");
    if std::fs::read_to_string(&stamp).ok().as_deref() != Some(fingerprint.as_str()) {
        // The build backend comes from the hash-pinned requirements, hence no build isolation
        // (which would fetch it unchecked); the dependencies are installed already.
        run(
            "installing dsh-tools from bindings/python",
            Command::new(&python)
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                ])
                .args(["--no-deps", "--no-build-isolation", "--force-reinstall"])
                .arg(package_dir()),
        );
        std::fs::write(&stamp, &fingerprint).unwrap();
    }
    python
}

/// The venv's interpreter, with the package installed from this checkout.
pub fn python() -> PathBuf {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(setup).clone()
}
