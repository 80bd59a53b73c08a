//! The Node package `dsh-tools` (`bindings/node`), installed from its `npm pack` tarball into a
//! fresh project (tests/support/node_package.rs): it carries exactly the component this
//! `dsh-host` embeds, its README example runs, its definitions are `dsh-host tools`' byte for
//! byte, its Vercel AI SDK adapter runs real commands through the SDK's own tool objects, its
//! TypeScript declarations type-check an example, and installed next to the package carrying
//! `dsh-host` it serves the executor with that binary. The golden cases run through it in
//! tests/polyglot.rs.

#[path = "support/component_file.rs"]
mod component_file;
#[path = "support/nested_cargo.rs"]
mod nested_cargo;
#[path = "support/node_package.rs"]
mod node_package;
#[path = "support/provision.rs"]
mod provision;
#[path = "support/search_path.rs"]
mod search_path;

use std::path::{Path, PathBuf};
use std::process::Command;

use component_file::sha256;
use node_package::run;
use serde_json::Value;

fn project() -> PathBuf {
    node_package::project("bindings_node")
}

fn node(project: &Path, args: &[&str]) -> String {
    run(Command::new("node").current_dir(project).args(args))
}

fn dsh_host(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_dsh-host"))
        .args(args)
        .output()
        .expect("dsh-host runs")
}

#[test]
fn the_package_carries_the_embedded_component() {
    let installed = project().join("node_modules/dsh-tools");
    let bundled = std::fs::read(installed.join("generated/guest_tools.wasm")).unwrap();
    assert_eq!(
        sha256(&bundled),
        sha256(dsh_host::engine::EMBEDDED_COMPONENT),
        "the packed component is not the one dsh-host embeds"
    );
    // The package holds what it needs to run and nothing of its tests.
    for needed in [
        "src/index.js",
        "src/index.d.ts",
        "src/ai.js",
        "src/ai.d.ts",
        "generated/tools.js",
    ] {
        assert!(
            installed.join(needed).is_file(),
            "{needed} is not in the package"
        );
    }
    assert!(
        !installed.join("test").exists(),
        "the package ships its tests"
    );
}

/// The "Use from Node" snippet of bindings/node/README.md, as written there.
/// The js block of a README's "Use from Node" section.
fn readme_example(readme: &Path) -> String {
    let readme = std::fs::read_to_string(readme).unwrap();
    let section = readme
        .split("## Use from Node\n")
        .nth(1)
        .expect("the README has a \"Use from Node\" section");
    let code = section
        .split("```js\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the section holds a js code block");
    code.to_string()
}

#[test]
fn readme_node_example_runs() {
    let project = project();
    let example = readme_example(&node_package::package_dir().join("README.md"));
    assert_eq!(
        readme_example(&provision::repo().join("README.md")),
        example,
        "the top README shows the package README's example"
    );
    assert!(
        example.lines().count() <= 6,
        "the README example grew:\n{example}"
    );
    std::fs::write(project.join("readme-example.mjs"), &example).unwrap();
    assert_eq!(node(&project, &["readme-example.mjs"]), "hello from bash\n");
}

#[test]
fn definitions_are_dsh_host_tools_output() {
    let project = project();
    for format in ["mcp", "openai", "anthropic"] {
        let want = dsh_host(&["tools", "--format", format]);
        assert!(
            want.status.success(),
            "dsh-host tools --format {format} failed"
        );
        let got = node(&project, &["definitions.mjs", format]);
        assert_eq!(
            got,
            String::from_utf8(want.stdout).unwrap(),
            "format {format}"
        );
    }
    // A format that does not exist is refused, naming the ones that do.
    let out = Command::new("node")
        .current_dir(&project)
        .args(["definitions.mjs", "gemini"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && stderr.contains("\"gemini\"")
            && stderr.contains("mcp, openai, anthropic"),
        "{stderr}"
    );
}

/// The AI SDK adapter through the SDK's own `generateText` loop with its mock model: what the
/// SDK puts in front of the model after each call is what dsh-host gives an MCP client: the
/// component's text, an error result as the SDK's error output with exactly that text, and a
/// completion notice as one more text part on the next result (once).
#[test]
fn vercel_ai_sdk_tools_run_the_component() {
    let project = project();
    let report: Value = serde_json::from_str(&node(&project, &["ai-adapter.mjs"])).unwrap();
    assert_eq!(
        report["names"],
        serde_json::json!(["bash", "bash_output", "bash_kill"])
    );
    assert_eq!(report["schemaIsTheComponents"], true);
    assert_eq!(report["finalText"], "finished");
    // The component's own texts, as dsh-host renders them for the same arguments.
    let component_text = |tool: &str, args: &str| {
        let out = dsh_host(&["call", tool, args]);
        let text = String::from_utf8(out.stdout).unwrap();
        text.strip_suffix('\n').unwrap_or(&text).to_string()
    };
    let seen = report["seen"].as_array().unwrap();
    assert_eq!(seen.len(), 6, "{report}");
    assert_eq!(
        seen[0],
        serde_json::json!({"type": "text", "value": "ran in bash\n"})
    );
    // Errors reach the model as errors, with the component's text.
    let bad_argument = component_text("bash", r#"{"command":42}"#);
    assert!(bad_argument.contains("\"command\" must be a string"));
    assert_eq!(
        seen[1],
        serde_json::json!({"type": "error-text", "value": bad_argument})
    );
    assert_eq!(
        seen[2],
        serde_json::json!({
            "type": "error-text",
            "value": component_text("bash_output", r#"{"task_id":"bash-9"}"#)
        })
    );
    assert_eq!(
        seen[3],
        serde_json::json!({"type": "text", "value": "started background task bash-1"})
    );
    // The task's completion notice rides on the next result, after its text, and only there.
    let parts = seen[4]["value"]
        .as_array()
        .unwrap_or_else(|| panic!("{report}"));
    assert_eq!(seen[4]["type"], "content", "{report}");
    assert_eq!(
        parts[0],
        serde_json::json!({"type": "text", "text": "later\n"})
    );
    assert_eq!(parts.len(), 2, "{report}");
    assert_eq!(
        parts[1]["text"],
        "background bash task bash-1 finished [status: completed, exit code: 0]. Read its output \
         with bash_output.",
        "{report}"
    );
    assert_eq!(
        seen[5],
        serde_json::json!({"type": "text", "value": "plain\n"})
    );
}

/// Once `tools.close()` resolved, nothing of the package keeps Node alive: no timer is left
/// pending (a script that made calls exits at once, not a grace period later).
#[test]
fn nothing_keeps_node_alive_after_close() {
    let project = project();
    let left: Vec<String> = serde_json::from_str(&node(&project, &["exit.mjs"])).unwrap();
    assert!(
        !left.iter().any(|kind| kind == "Timeout"),
        "timers left after close: {left:?}"
    );
}

/// The package against `dsh-host executor serve --stdio` (its `ServedExecutor`), as a newcomer
/// tries it: the same texts as `dsh-host call` for an escaping process (and it is stopped), a
/// `kill $PPID` (Node survives), a 200 KB command and a 100 KB output (whose spill file holds
/// every byte); a far side killed with SIGKILL ends its running task once, as lost, the tools
/// say so in its notice, `bash_output` and `bash_kill`, and later calls say the executor is
/// gone; a far side speaking another protocol version is refused, naming both.
#[test]
fn the_package_runs_against_executor_serve() {
    let project = project();
    let scratch = tempfile::tempdir().unwrap();
    let dsh = env!("CARGO_BIN_EXE_dsh-host");
    let report: Value = serde_json::from_str(&node(
        &project,
        &["served.mjs", dsh, scratch.path().to_str().unwrap()],
    ))
    .unwrap();
    assert_eq!(report["kind"], "served");
    assert_eq!(
        report["server"],
        format!("dsh-host {}", env!("CARGO_PKG_VERSION"))
    );
    // dsh-host's text for the same call, exactly (`--json`).
    let call = |command: String| {
        let args = serde_json::json!({"command": command, "description": "Try"}).to_string();
        let out = dsh_host(&["call", "bash", &args, "--json"]);
        let result: Value = serde_json::from_slice(&out.stdout).unwrap();
        result["text"].as_str().unwrap().to_string()
    };
    let pid_file = scratch.path().join("escapee.pid");
    let escapee = format!(
        "setsid sleep 300 & echo $! > {}; echo started",
        pid_file.display()
    );
    assert_eq!(report["escapee"], call(escapee), "{report}");
    assert!(report["escapeePid"].as_i64().unwrap_or(0) > 0, "{report}");
    assert_eq!(report["escapeeAlive"], false, "the escapee was stopped");
    assert_eq!(
        report["killParent"],
        call("kill -TERM $PPID; echo survived".into())
    );
    assert_eq!(report["killParent"], "survived\n");
    assert_eq!(report["longCommand"], "long-ok\n");
    // The spill path differs between the two runs; everything else is the same.
    let spill = report["spillPath"].as_str().expect("a spill file is named");
    assert_eq!(report["spillBytes"], 100_000, "{spill}");
    let big = call("head -c 100000 /dev/zero | tr '\\0' a".into());
    let unnamed = |text: &str| text.split("full output: ").next().unwrap().to_string();
    assert_eq!(
        unnamed(report["bigOutput"].as_str().unwrap()),
        unnamed(&big)
    );
    assert!(big.contains("full output: /"), "{big}");

    assert_eq!(
        report["backgroundStarted"],
        serde_json::json!(["started background task bash-1", false])
    );
    assert_eq!(
        report["finishedStarted"],
        serde_json::json!(["started background task bash-2", false])
    );
    // bash-2 ended before the loss; bash-1 was running: nobody knows whether it still runs.
    assert_eq!(
        report["endedAfterKill"],
        serde_json::json!([["bash-2", "completed"], ["bash-1", "lost"]]),
        "{report}"
    );
    let lost = "[status: lost: the executor is gone; the command may or may not have finished]";
    assert_eq!(
        report["noticesAfterKill"],
        serde_json::json!([
            "background bash task bash-2 finished [status: completed, exit code: 0]. Read its \
             output with bash_output.",
            format!(
                "background bash task bash-1 was lost {lost}. Its output can no longer be read."
            )
        ])
    );
    assert_eq!(
        report["outputAfterKill"],
        serde_json::json!([
            format!("(output unavailable: the executor is gone)\n{lost}"),
            false
        ])
    );
    assert_eq!(
        report["killAfterKill"],
        serde_json::json!([
            "task bash-1 was lost with the executor; it cannot be killed from here",
            false
        ])
    );
    // A read of a lost task answers no output and its state.
    assert_eq!(
        report["readAfterKill"],
        serde_json::json!({"stdout": "", "stderr": "", "state": "lost"})
    );
    // A task that ended before the loss: its output went with the far side, worded as dsh-host's
    // own client words a read after the loss.
    let gone = "the executor service is gone (it closed the connection); the output of bash-2 \
                can no longer be read";
    assert_eq!(report["finishedReadAfterKill"], format!("internal: {gone}"));
    assert_eq!(
        report["finishedOutputAfterKill"],
        serde_json::json!([format!("Error: {gone}"), true])
    );
    assert_eq!(
        report["finishedKillAfterKill"],
        serde_json::json!(["task bash-2 had already finished", false])
    );
    assert_eq!(report["quickStartsSettled"], true, "{report}");
    let mismatch = report["mismatch"].as_str().unwrap();
    assert!(
        mismatch.contains("refused the connection: protocol version mismatch")
            && mismatch.contains("version 1")
            && mismatch.contains("version 9"),
        "{mismatch}"
    );
}

/// With dsh-host installed, `new Tools()` serves its commands through `dsh-host executor serve`,
/// and a program that never calls `close()` (after tools that failed to be made, too) still
/// exits on its own once its background task ended, leaving no far side running.
#[test]
fn a_program_that_forgets_close_still_exits() {
    let project = project();
    let mut child = Command::new("node")
        .current_dir(&project)
        .arg("forgotten.mjs")
        .env("DSH_HOST", env!("CARGO_BIN_EXE_dsh-host"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A hang shows as a process still there long after its work; 60 s is far beyond it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("node did not exit on its own");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out).unwrap();
    assert!(status.success(), "{status}: {out}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["kind"], "served");
    assert_eq!(report["text"], "forgotten\n");
    // The far side saw its input end and exited (a moment later than node, at most).
    for pid in report["pids"].as_array().unwrap() {
        let pid = pid.as_i64().unwrap();
        let gone = (0..100).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(50));
            !std::path::Path::new(&format!("/proc/{pid}")).exists()
                || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|s| s.contains(") Z "))
        });
        assert!(gone, "the far side {pid} outlived the program");
    }
}

#[test]
fn typescript_declarations_check_an_example() {
    let project = project();
    run(Command::new(project.join("node_modules/.bin/tsc"))
        .current_dir(&project)
        .args(["--project", "tsconfig.json"]));
}

#[test]
fn sessions_settings_and_the_environment() {
    let project = project();
    let out = run(Command::new("node")
        .current_dir(&project)
        .arg("sessions.mjs")
        .env("API_KEY", "secret")
        .env("DSH_TEST_X", "denied by pattern")
        .env("DSH_TEST_API_KEY_ALLOWED", "allowed"));
    let facts: Value = serde_json::from_str(&out).unwrap();
    let expected = serde_json::json!({
        "cwd": true,
        "relativeWorkdir": true,
        "env": "unset unset allowed dumb\n",
        "eventLoopRuns": "went\n",
        "aborted": "Error: command aborted",
        "tail": true,
        "started": ["started background task bash-1", "started background task bash-2"],
        "othersTask": true,
        "afterClose": ["killed", "running"],
        "processGone": true,
        "callAfterClose": "Error: this session is closed",
        "afterToolsClose": "killed",
        "badSettings": [
            "RangeError: executor settings: graceMs must be a finite number > 0, got -1",
            "RangeError: executor settings: maxTasks must be a finite whole number > 0, got 1.5",
            "TypeError: executor settings: unknown setting \"timeoutMs\"; known: defaultTimeoutMs, maxTimeoutMs, maxOutputBytes, graceMs, maxTasks, maxFinishedTasks, cwd, envDeny, envAllow",
            "TypeError: envDeny: \"A=B\" is no variable name (empty, or holds '=' or NUL)",
            "TypeError: executor: missing the bash-executor function(s) currentLimits, resolve, run, start, readOutput, kill, ownerOf, get, listTasks",
            "TypeError: new Tools: unknown option \"exeuctor\"; known: executor, component, policy, approve, approveTimeoutMs",
            "TypeError: a session's cwd must be an absolute path, got 3",
            "TypeError: a session's cwd must be an absolute path, got \"relative\"",
            "Error: these tools are closed",
        ],
        "badName": "TypeError: tool name: expected a string, got number",
        "otherTools": "Error: the session is closed or belongs to other tools",
        "noSandbox": [true, false],
        "sandboxInstructions": [
            "Commands run in a sandbox (read-only): they can write only to their own $TMPDIR and \
             to devices such as /dev/null.",
            "They cannot read: /root/.ssh, /root/.aws.",
            "The network is limited to each command's own loopback interface: a server a command \
             starts is reachable only from within that command.",
        ],
        "sandboxRun": "hi\n[sandbox: read of /root/.ssh/id denied (a denied path); connect to \
                       203.0.113.7:443 denied (only loopback is reachable); and 2 more]",
        "sandboxRead": "(no new output)\n[status: completed, exit code: 0]\n[sandbox: read of \
                        /root/.ssh/id denied (a denied path); connect to 203.0.113.7:443 denied \
                        (only loopback is reachable); and 2 more]",
    });
    assert_eq!(facts, expected);
}

/// `npm install ./bindings/node` (npm links the directory) works once `npm run build` made
/// `generated/` there, as the package README says: the main entry needs no other package.
#[test]
fn installs_from_the_package_directory() {
    let tools = node_package::build_tools();
    let base = project().parent().unwrap().join("directory-install");
    if base.exists() {
        std::fs::remove_dir_all(&base).unwrap();
    }
    std::fs::create_dir_all(&base).unwrap();
    let component = component_file::embedded_component(&base);
    run(Command::new("npm")
        .current_dir(&tools)
        .args(["run", "build", "--silent"])
        .env("DSH_GUEST_WASM", &component));
    std::fs::write(
        base.join("package.json"),
        r#"{"name": "fresh", "private": true, "type": "module"}"#,
    )
    .unwrap();
    run(Command::new("npm")
        .current_dir(&base)
        .args(["install", "--no-audit", "--no-fund", "--loglevel=error"])
        .arg(&tools));
    let installed = base.join("node_modules/dsh-tools");
    assert!(
        installed.is_symlink(),
        "npm did not link the package directory"
    );
    std::fs::write(
        base.join("readme-example.mjs"),
        readme_example(&node_package::package_dir().join("README.md")),
    )
    .unwrap();
    assert_eq!(node(&base, &["readme-example.mjs"]), "hello from bash\n");
}

/// `loadComponent` imports the JavaScript jco made from a component, so it keeps that code only
/// where no one else may write: a cache directory that group or others can write is not used
/// (the component is transpiled into a private directory instead), an own 0700 one is.
#[test]
fn transpiled_components_are_kept_only_where_no_one_else_may_write() {
    use std::os::unix::fs::PermissionsExt;
    // The package's own directory: `dsh-tools` resolves to it, and jco is among its build tools.
    let package = node_package::build_tools();
    let cache = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let shared = cache.path().join("dsh-tools/jco");
    std::fs::create_dir_all(&shared).unwrap();
    let component = component_file::embedded_component(&cache.path().join("component"));
    // The private directory used instead of an unsafe cache must not outlive the load.
    let tmp = cache.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let script = r#"
const { Tools, loadComponent } = await import("dsh-tools");
const tools = new Tools({ component: await loadComponent(process.argv[1]) });
process.stdout.write((await tools.call("bash", { command: "echo ok", description: "Say ok" })).text);
await tools.close();
"#;
    let load = || {
        run(Command::new("node")
            .args(["--input-type=module", "-e", script])
            .arg(&component)
            .env("XDG_CACHE_HOME", cache.path())
            .env("TMPDIR", &tmp)
            .current_dir(&package))
    };
    let entries = || std::fs::read_dir(&shared).unwrap().count();

    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    assert_eq!(load(), "ok\n");
    assert_eq!(
        entries(),
        0,
        "code was kept in a directory others may write"
    );
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "the private directory was left: {left:?}");

    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o700)).unwrap();
    assert_eq!(load(), "ok\n");
    assert_eq!(
        entries(),
        1,
        "an own private cache directory keeps the transpiled component"
    );
}

/// The package made by `scripts/platform-package.mjs` carries this build's `dsh-host`. Packed and
/// installed offline next to the packed dsh-tools in a fresh project (it is no dependency npm
/// fetches: dsh-tools names it an optional peer), and run with neither `DSH_HOST` nor a
/// `dsh-host` on PATH, `new Tools()` serves its commands through the binary it carries and
/// `doctor()` says so; that binary comes before one on PATH, and `DSH_HOST` before it.
#[test]
fn a_platform_package_serves_the_executor_with_the_binary_it_carries() {
    let dsh_host = Path::new(env!("CARGO_BIN_EXE_dsh-host"));
    let version = env!("CARGO_PKG_VERSION");
    let packed = project()
        .parent()
        .unwrap()
        .join(format!("dsh-tools-{version}.tgz"));
    assert!(packed.is_file(), "{} is not there", packed.display());
    let base = project().parent().unwrap().join("platform-package");
    if base.exists() {
        std::fs::remove_dir_all(&base).unwrap();
    }
    std::fs::create_dir_all(&base).unwrap();

    let script = node_package::package_dir().join("scripts/platform-package.mjs");
    let made = run(Command::new("node")
        .arg(&script)
        .arg(dsh_host)
        .arg(base.join("platform")));
    let platform = PathBuf::from(made.trim());
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(platform.join("package.json")).unwrap())
            .unwrap();
    let arch = match std::env::consts::ARCH {
        "x86_64" => "x64",
        "aarch64" => "arm64",
        other => panic!("no platform package for {other}"),
    };
    let name = format!("@dsh-tools/dsh-host-linux-{arch}");
    assert_eq!(manifest["name"], name.as_str());
    assert_eq!(manifest["version"], version);
    assert_eq!(manifest["os"], serde_json::json!(["linux"]));
    assert_eq!(manifest["cpu"], serde_json::json!([arch]));
    assert!(platform.join("README.md").is_file());
    let packed_platform: Value = serde_json::from_str(&run(Command::new("npm")
        .args(["pack", "--json", "--loglevel=error"])
        .arg(&platform)
        .arg(format!("--pack-destination={}", base.display()))))
    .unwrap();
    let platform_tarball = base.join(packed_platform[0]["filename"].as_str().unwrap());

    let fresh = base.join("project");
    std::fs::create_dir_all(&fresh).unwrap();
    std::fs::write(
        fresh.join("package.json"),
        r#"{"name": "platform-check", "private": true, "type": "module"}"#,
    )
    .unwrap();
    run(Command::new("npm")
        .current_dir(&fresh)
        .args([
            "install",
            "--offline",
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
        ])
        .arg(&packed)
        .arg(&platform_tarball));
    let carried = fresh.join("node_modules").join(&name).join("bin/dsh-host");
    assert_eq!(
        std::fs::read(&carried).ok().as_deref(),
        Some(std::fs::read(dsh_host).unwrap().as_slice()),
        "npm did not install this build's dsh-host at {}",
        carried.display()
    );
    std::fs::write(
        fresh.join("check.mjs"),
        r#"import { Tools } from "dsh-tools";
const tools = new Tools();
const { text } = await tools.call("bash", { command: "echo hi", description: "Say hi" });
process.stdout.write(JSON.stringify({ doctor: tools.doctor(), text }));
await tools.close();
"#,
    )
    .unwrap();
    let report = |path: &std::ffi::OsStr, env_dsh_host: Option<&Path>| -> Value {
        let mut cmd = Command::new("node");
        cmd.current_dir(&fresh)
            .arg("check.mjs")
            .env("PATH", path)
            .env_remove("DSH_HOST");
        if let Some(named) = env_dsh_host {
            cmd.env("DSH_HOST", named);
        }
        serde_json::from_str(&run(&mut cmd)).unwrap()
    };

    // Nothing but the package's binary.
    let no_dsh_host = search_path::without_dsh_host();
    let served = report(&no_dsh_host, None);
    assert_eq!(served["text"], "hi\n", "{served}");
    assert_eq!(served["doctor"]["kind"], "served", "{served}");
    assert_eq!(served["doctor"]["binarySource"], "package", "{served}");
    assert_eq!(
        served["doctor"]["binary"],
        carried.canonicalize().unwrap().to_str().unwrap(),
        "{served}"
    );
    assert_eq!(served["doctor"]["server"], format!("dsh-host {version}"));

    // A dsh-host on PATH comes after it; DSH_HOST before.
    let with_path = search_path::prepend(
        &search_path::dir_with_dsh_host(&base, dsh_host),
        &no_dsh_host,
    );
    let served = report(&with_path, None);
    assert_eq!(served["doctor"]["binarySource"], "package", "{served}");
    let served = report(&with_path, Some(dsh_host));
    assert_eq!(served["doctor"]["binarySource"], "env", "{served}");
    assert_eq!(
        served["doctor"]["binary"],
        dsh_host.to_str().unwrap(),
        "{served}"
    );
    assert_eq!(served["text"], "hi\n", "{served}");
}
