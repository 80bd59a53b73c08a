//! The Python package (`bindings/python`, `dsh-tools`) from the outside: installed with pip into
//! a venv under `target/` (`tests/support/python_venv.rs`), it carries the very component
//! `dsh-host` embeds, prints the same tool definitions as `dsh-host tools`, runs the README's
//! example, type-checks, and passes its own tests, the LangChain and OpenAI Agents adapters' among
//! them; its platform wheel carries `dsh-host` and serves the executor with it. The golden cases
//! run through it in `tests/polyglot.rs`.

#[path = "support/component_file.rs"]
mod component_file;
#[path = "support/nested_cargo.rs"]
mod nested_cargo;
#[path = "support/provision.rs"]
mod provision;
#[path = "support/python_venv.rs"]
mod python_venv;
#[path = "support/search_path.rs"]
mod search_path;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use component_file::sha256;

fn package_dir() -> PathBuf {
    provision::repo().join("bindings").join("python")
}

const REFRESH: &str = "cargo build -p dsh-host && \
     cp target/guest-wasm/guest_tools.wasm bindings/python/src/dsh_tools/";

/// Runs the venv's Python; fails the test, with its output, unless it succeeds.
fn python(args: &[&str], cwd: &Path) -> Output {
    let out = Command::new(python_venv::python())
        .args(args)
        .current_dir(cwd)
        // The served-executor tests run this build's `dsh-host executor serve`.
        .env("DSH_HOST_BIN", env!("CARGO_BIN_EXE_dsh-host"))
        .output()
        .expect("the venv's python runs");
    assert!(
        out.status.success(),
        "python {args:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn the_package_carries_the_embedded_component() {
    let embedded = sha256(dsh_host::engine::EMBEDDED_COMPONENT);
    let committed = std::fs::read(package_dir().join("src/dsh_tools/guest_tools.wasm"))
        .expect("bindings/python/src/dsh_tools/guest_tools.wasm exists");
    assert_eq!(
        sha256(&committed),
        embedded,
        "the package's component differs from the one dsh-host embeds; refresh it: {REFRESH}"
    );
    // And the installed package loads those bytes, not some other copy.
    let out = python(
        &[
            "-c",
            "import hashlib, dsh_tools; print(hashlib.sha256(dsh_tools.bundled_component()).hexdigest())",
        ],
        &provision::repo(),
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), embedded);
}

#[test]
fn definitions_are_what_dsh_host_tools_prints() {
    for format in ["mcp", "openai", "anthropic"] {
        let cli = Command::new(env!("CARGO_BIN_EXE_dsh-host"))
            .args(["tools", "--format", format])
            .output()
            .unwrap();
        assert!(cli.status.success(), "dsh-host tools --format {format}");
        let script = format!(
            "import json, sys\nfrom dsh_tools import Tools\nwith Tools() as tools:\n    \
             sys.stdout.write(json.dumps(tools.definitions(format={format:?}), indent=2, \
             ensure_ascii=False) + '\\n')\n"
        );
        let py = python(&["-c", &script], &provision::repo());
        assert_eq!(
            String::from_utf8_lossy(&py.stdout),
            String::from_utf8_lossy(&cli.stdout),
            "format {format}"
        );
    }
}

/// The first ```python block after the "Use from Python" heading of a README.
fn readme_example(readme: &Path) -> String {
    let readme = std::fs::read_to_string(readme).unwrap();
    let section = readme
        .split_once("## Use from Python")
        .expect("the README has a \"Use from Python\" section")
        .1;
    let code = section
        .split_once("```python\n")
        .expect("the section has a python block")
        .1;
    code.split_once("```")
        .expect("the block ends")
        .0
        .to_string()
}

#[test]
fn readme_example_runs() {
    let example = readme_example(&package_dir().join("README.md"));
    assert_eq!(
        readme_example(&provision::repo().join("README.md")),
        example,
        "the top README shows the package README's example"
    );
    assert!(
        example.lines().count() <= 5,
        "the README's example grew beyond five lines:\n{example}"
    );
    let out = python(&["-c", &example], &provision::repo());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "bash\nhello\n");
}

#[test]
fn package_and_langchain_adapter_tests_pass() {
    let out = python(
        &["-m", "unittest", "discover", "-v", "-s", "tests"],
        &package_dir(),
    );
    let report = String::from_utf8_lossy(&out.stderr);
    // A test file that failed to import would leave its tests out: each must have run.
    for module in [
        "test_langchain",
        "test_openai_agents",
        "test_tools",
        "test_executor",
        "test_async",
        "test_readme",
        "test_served",
    ] {
        assert!(
            report.contains(&format!("({module}.")),
            "no test of {module} ran:\n{report}"
        );
    }
    assert!(report.trim_end().ends_with("OK"), "{report}");
}

/// The typed API holds: the package and the README's example pass `mypy --strict`, the example
/// seeing the installed package's types (`py.typed`).
#[test]
fn the_package_and_its_example_type_check() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bindings-python");
    std::fs::create_dir_all(&dir).unwrap();
    let example = dir.join("readme_example.py");
    std::fs::write(&example, readme_example(&package_dir().join("README.md"))).unwrap();
    let cache = dir.join("mypy-cache");
    let out = python(
        &[
            "-m",
            "mypy",
            "--strict",
            "--cache-dir",
            cache.to_str().unwrap(),
            "src/dsh_tools",
            example.to_str().unwrap(),
        ],
        &package_dir(),
    );
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.starts_with("Success: no issues found in"),
        "{report}"
    );
}

/// The `wasmtime` requirement of the tests' hash-pinned requirements file, hashes and all: the
/// one dependency a fresh install of the package needs.
fn pinned_wasmtime() -> String {
    let requirements =
        std::fs::read_to_string(provision::repo().join("tests/polyglot/python/requirements.txt"))
            .unwrap();
    let mut lines = requirements
        .lines()
        .skip_while(|line| !line.starts_with("wasmtime=="));
    let mut requirement = String::new();
    for line in lines.by_ref() {
        requirement.push_str(line);
        requirement.push('\n');
        if !line.ends_with('\\') {
            break;
        }
    }
    assert!(
        requirement.contains("--hash="),
        "no hash-pinned wasmtime in the requirements:\n{requirement}"
    );
    requirement
}

/// A platform wheel made by `scripts/build_platform_wheel.py` carries this build's `dsh-host`.
/// Installed into a fresh venv (hash-checked, with nothing but wasmtime beside it) and run with
/// neither `DSH_HOST` nor a `dsh-host` on PATH, the tools serve their commands through the binary
/// it carries and `doctor()` says so; that binary comes before one on PATH, and `DSH_HOST` before
/// it.
#[test]
fn a_platform_wheel_serves_the_executor_with_the_binary_it_carries() {
    let dsh_host = Path::new(env!("CARGO_BIN_EXE_dsh-host"));
    let work = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let dist = work.path().join("dist");
    let script = package_dir().join("scripts/build_platform_wheel.py");
    let built = python(
        &[
            script.to_str().unwrap(),
            dsh_host.to_str().unwrap(),
            "--out",
            dist.to_str().unwrap(),
        ],
        work.path(),
    );
    let wheel = PathBuf::from(String::from_utf8(built.stdout).unwrap().trim());
    let name = wheel.file_name().unwrap().to_string_lossy().into_owned();
    assert_eq!(
        name,
        format!(
            "dsh_tools-{}-py3-none-linux_{}.whl",
            env!("CARGO_PKG_VERSION"),
            std::env::consts::ARCH
        )
    );
    let digest = python(
        &[
            "-c",
            "import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], 'rb').read()).hexdigest())",
            wheel.to_str().unwrap(),
        ],
        work.path(),
    );
    let digest = String::from_utf8(digest.stdout).unwrap();

    // A fresh venv without pip; the tests' pip installs into it, checking every hash.
    let venv = work.path().join("venv");
    provision::run(
        "creating a fresh venv",
        Command::new("python3")
            .args(["-m", "venv", "--without-pip"])
            .arg(&venv),
    );
    let fresh = venv.join("bin/python");
    let requirements = work.path().join("requirements.txt");
    std::fs::write(
        &requirements,
        format!(
            "{}dsh-tools @ file://{} --hash=sha256:{}\n",
            pinned_wasmtime(),
            wheel.display(),
            digest.trim()
        ),
    )
    .unwrap();
    provision::run(
        "installing the platform wheel into the fresh venv",
        Command::new(python_venv::python())
            .args(["-m", "pip", "--python"])
            .arg(&fresh)
            .args([
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
                "--require-hashes",
                "-r",
            ])
            .arg(&requirements),
    );

    let report = |path: &std::ffi::OsStr, env_dsh_host: Option<&Path>| -> Value {
        let mut cmd = Command::new(&fresh);
        cmd.args([
            "-c",
            "import json\nfrom dsh_tools import Tools\nwith Tools() as tools:\n    \
             text = tools.call('bash', {'command': 'echo hi', 'description': 'Say hi'}).text\n    \
             print(json.dumps({'doctor': tools.doctor(), 'text': text}))\n",
        ])
        .current_dir(work.path())
        .env("PATH", path)
        .env_remove("DSH_HOST");
        if let Some(named) = env_dsh_host {
            cmd.env("DSH_HOST", named);
        }
        serde_json::from_str(&provision::run("the installed package", &mut cmd)).unwrap()
    };
    let carried = venv
        .join("lib")
        .read_dir()
        .unwrap()
        .next()
        .expect("the venv has lib/pythonX.Y")
        .unwrap()
        .path()
        .join("site-packages/dsh_tools/bin/dsh-host");
    assert_eq!(
        std::fs::read(&carried).ok().as_deref(),
        Some(std::fs::read(dsh_host).unwrap().as_slice()),
        "the wheel did not install this build's dsh-host at {}",
        carried.display()
    );

    // Nothing but the package's own binary.
    let no_dsh_host = search_path::without_dsh_host();
    let served = report(&no_dsh_host, None);
    assert_eq!(served["text"], "hi\n", "{served}");
    assert_eq!(served["doctor"]["kind"], "served", "{served}");
    assert_eq!(served["doctor"]["binary_source"], "package", "{served}");
    assert_eq!(
        served["doctor"]["binary"],
        carried.to_str().unwrap(),
        "{served}"
    );
    assert_eq!(
        served["doctor"]["server"],
        format!("dsh-host {}", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(served["doctor"]["lacks"], serde_json::json!([]));

    // A dsh-host on PATH comes after it; DSH_HOST before.
    let with_path = search_path::prepend(
        &search_path::dir_with_dsh_host(work.path(), dsh_host),
        &no_dsh_host,
    );
    let served = report(&with_path, None);
    assert_eq!(served["doctor"]["binary_source"], "package", "{served}");
    let served = report(&with_path, Some(dsh_host));
    assert_eq!(served["doctor"]["binary_source"], "env", "{served}");
    assert_eq!(
        served["doctor"]["binary"],
        dsh_host.to_str().unwrap(),
        "{served}"
    );
    assert_eq!(served["text"], "hi\n", "{served}");
}
