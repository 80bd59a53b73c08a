//! Black-box tests of the `dsh-host` command line: `tools`, `call`, flags and bad input.

#[path = "support/procs.rs"]
mod procs;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn bin() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dsh-host"));
    // One compiled-component cache for every test process: debug builds compile slowly.
    cmd.env(
        "DSH_CACHE_DIR",
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("component-cache"),
    );
    cmd.env_remove("DSH_LOG");
    cmd
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("dsh-host runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("utf-8 stdout")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn tools_lists_three_tools_with_the_component_schema() {
    let o = run(&["tools"]);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    let defs: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let names: Vec<&str> = defs
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["bash", "bash_output", "bash_kill"]);
    let bash = &defs[0]["inputSchema"];
    let keys: Vec<&String> = bash["properties"].as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "command",
            "description",
            "timeoutMs",
            "workdir",
            "run_in_background"
        ]
    );
    assert_eq!(
        bash["required"],
        serde_json::json!(["command", "description"])
    );
    assert_eq!(bash["type"], "object");
    let desc = defs[0]["description"].as_str().unwrap();
    assert!(
        desc.contains("120000") && desc.contains("600000"),
        "timeouts named: {desc}"
    );
}

#[test]
fn tools_formats_share_one_schema() {
    let mcp: serde_json::Value =
        serde_json::from_slice(&run(&["tools", "--format", "mcp"]).stdout).unwrap();
    let openai: serde_json::Value =
        serde_json::from_slice(&run(&["tools", "--format", "openai"]).stdout).unwrap();
    let anthropic: serde_json::Value =
        serde_json::from_slice(&run(&["tools", "--format", "anthropic"]).stdout).unwrap();
    let keys =
        |v: &serde_json::Value| -> Vec<String> { v.as_object().unwrap().keys().cloned().collect() };
    for i in 0..3 {
        assert_eq!(openai[i]["type"], "function");
        assert_eq!(openai[i]["function"]["parameters"], mcp[i]["inputSchema"]);
        assert_eq!(anthropic[i]["input_schema"], mcp[i]["inputSchema"]);
        assert_eq!(anthropic[i]["name"], mcp[i]["name"]);
        // MCP has a place for a title and hints; OpenAI's and Anthropic's function tools have
        // none, and none is made up for them.
        assert_eq!(
            keys(&mcp[i]),
            ["name", "title", "description", "inputSchema", "annotations"]
        );
        assert_eq!(keys(&openai[i]), ["type", "function"]);
        assert_eq!(
            keys(&openai[i]["function"]),
            ["name", "description", "parameters"]
        );
        assert_eq!(keys(&anthropic[i]), ["name", "description", "input_schema"]);
    }
}

/// The titles and hints are the component's (guest-tools/src/tools/*.rs, where each is argued),
/// passed through in MCP's shape; the title also goes into `annotations.title`.
#[test]
fn tools_carry_the_component_titles_and_annotations() {
    let o = run(&["tools", "--format", "mcp"]);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    let defs: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let expected = [
        ("bash", "Run a shell command", [false, true, false, true]),
        (
            "bash_output",
            "Read background task output",
            [true, false, false, false],
        ),
        (
            "bash_kill",
            "Stop a background task",
            [false, true, true, false],
        ),
    ];
    for (def, (name, title, [read_only, destructive, idempotent, open_world])) in
        defs.as_array().unwrap().iter().zip(expected)
    {
        assert_eq!(def["name"], name);
        assert_eq!(def["title"], title, "{name}");
        assert_eq!(
            def["annotations"],
            serde_json::json!({
                "title": title,
                "readOnlyHint": read_only,
                "destructiveHint": destructive,
                "idempotentHint": idempotent,
                "openWorldHint": open_world,
            }),
            "{name}"
        );
    }
    // The default format is MCP's.
    assert_eq!(run(&["tools"]).stdout, o.stdout);
}

#[test]
fn call_prints_the_result_text() {
    let o = run(&[
        "call",
        "bash",
        r#"{"command":"echo hi","description":"Say hi to the user"}"#,
    ]);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert_eq!(stdout(&o), "hi\n");
}

#[test]
fn call_non_zero_exit_is_not_an_error() {
    let o = run(&[
        "call",
        "bash",
        r#"{"command":"echo failing; exit 3","description":"Fail on purpose"}"#,
    ]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(stdout(&o), "failing\n[exit code: 3]\n");
}

/// With `call`, a command past `--yield-after-ms` returns its output so far and the task line;
/// the host then exits, which stops the task.
#[test]
fn call_with_yield_after_ms_returns_early_and_stops_the_task_at_exit() {
    let started = std::time::Instant::now();
    let o = run(&[
        "--yield-after-ms",
        "300",
        "call",
        "bash",
        r#"{"command":"echo $$; exec sleep 30","description":"Sleep for a while"}"#,
    ]);
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    assert_eq!(o.status.code(), Some(0));
    let text = stdout(&o);
    let (pid, marker) = text.split_once('\n').unwrap();
    assert_eq!(
        marker,
        "[still running after 300ms; continues as background task bash-1; read its output with \
         bash_output]\n"
    );
    let pid: i32 = pid.parse().unwrap();
    assert!(
        !procs::alive(pid),
        "the task's process {pid} outlived the host"
    );
}

#[test]
fn call_json_output_and_error_exit_status() {
    let o = run(&["call", "--json", "bash", "{}"]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v,
        serde_json::json!({
            "text": "Error: invalid arguments: missing required property \"command\"; missing required property \"description\"",
            "isError": true
        })
    );
}

#[test]
fn call_unknown_tool_is_an_error() {
    let o = run(&["call", "nope", "{}"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stdout(&o), "Error: unknown tool \"nope\"\n");
}

#[test]
fn call_malformed_json_arguments_is_a_clear_error() {
    let o = run(&["call", "bash", "{not json"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stdout(&o).starts_with("Error: invalid arguments: "),
        "{}",
        stdout(&o)
    );
}

#[test]
fn call_timeout_renders_markers() {
    let o = run(&[
        "--timeout-ms",
        "200",
        "--grace-ms",
        "100",
        "call",
        "bash",
        r#"{"command":"sleep 5","description":"Sleep past the timeout"}"#,
    ]);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "(no output)\n[timed out after 200ms]\n[killed by signal: SIGTERM]\n"
    );
}

#[test]
fn call_relative_workdir_resolves_against_cwd_flag() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let cwd = dir.path().to_str().unwrap();
    let o = run(&[
        "--cwd",
        cwd,
        "call",
        "bash",
        r#"{"command":"pwd","description":"Print the directory","workdir":"sub"}"#,
    ]);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    let expected = dir.path().canonicalize().unwrap().join("sub");
    assert_eq!(stdout(&o).trim_end(), expected.to_str().unwrap());
}

/// `..` is resolved lexically against the session cwd, as Node's `path.resolve` does: through a
/// directory that does not exist, and through a symlink (to the directory holding the link, not
/// to the parent of its target).
#[test]
fn call_relative_workdir_resolves_dot_dot_lexically() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::fs::create_dir_all(root.join("far/target")).unwrap();
    std::os::unix::fs::symlink(root.join("far/target"), root.join("lnk")).unwrap();
    for (workdir, expected) in [
        ("missing/../sub", root.join("sub")),
        ("lnk/..", root.clone()),
        ("./sub/./", root.join("sub")),
    ] {
        let args = format!(
            r#"{{"command":"pwd","description":"Print the directory","workdir":"{workdir}"}}"#
        );
        let o = run(&["--cwd", root.to_str().unwrap(), "call", "bash", &args]);
        assert_eq!(o.status.code(), Some(0), "{workdir}: {}", stdout(&o));
        assert_eq!(
            stdout(&o).trim_end(),
            expected.to_str().unwrap(),
            "{workdir}"
        );
    }
}

/// An empty workdir means the default: the session cwd, or without one the executor's default.
#[test]
fn call_empty_workdir_is_the_default() {
    let o = run(&[
        "call",
        "bash",
        r#"{"command":"echo ran","description":"Run in the default dir","workdir":""}"#,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert_eq!(stdout(&o), "ran\n");
}

/// Commands get the host's environment without names holding a secret word (the executor
/// contract's rule, all that is withheld by default) and without the operator's `--env-deny`
/// patterns (here docs/configuration.md's credential patterns and one more), except the names
/// `--env-allow` passes; `doctor` lists what is withheld.
#[test]
fn the_environment_policy_withholds_and_passes_what_the_operator_says() {
    let vars = [
        ("DSHT_GITHUB_PAT", "p"),
        ("DSHT_CLOUD_CREDENTIALS", "c"),
        ("DSHT_ROOT_PASSWD", "w"),
        ("DATABASE_URL", "postgres://u:p@h/db"),
        ("SSH_AUTH_SOCK", "/tmp/agent"),
        ("DSHT_API_TOKEN", "t"),
        ("DSHT_CORP_PROXY", "x"),
        ("DSHT_KEPT_KEY", "k"),
        ("DSHT_PLAIN", "plain"),
    ];
    let mut args = Vec::new();
    for pattern in [
        "*_PAT",
        "*_CREDENTIALS",
        "*_PASSWD",
        "DATABASE_URL",
        "SSH_AUTH_SOCK",
        "dsht_corp_*",
    ] {
        args.extend(["--env-deny", pattern]);
    }
    args.extend(["--env-allow", "DSHT_KEPT_KEY"]);
    let listing = r#"{"command":"env | grep -E '^(DSHT_|DATABASE_URL|SSH_AUTH_SOCK)' | sort","description":"List variables"}"#;
    let mut by_default = bin();
    by_default.args(["call", "bash", listing]);
    let mut call = bin();
    call.args(&args).args(["call", "bash", listing]);
    let mut doctor = bin();
    doctor.args(&args).arg("doctor");
    for (name, value) in vars {
        by_default.env(name, value);
        call.env(name, value);
        doctor.env(name, value);
    }
    let o = by_default.output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "DATABASE_URL=postgres://u:p@h/db\nDSHT_CLOUD_CREDENTIALS=c\nDSHT_CORP_PROXY=x\n\
         DSHT_GITHUB_PAT=p\nDSHT_PLAIN=plain\nDSHT_ROOT_PASSWD=w\nSSH_AUTH_SOCK=/tmp/agent\n"
    );
    let o = call.output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "DSHT_KEPT_KEY=k\nDSHT_PLAIN=plain\n");
    let o = doctor.output().unwrap();
    let report = stdout(&o);
    let line = report
        .lines()
        .find(|l| l.starts_with("variables withheld from commands: "))
        .unwrap_or_else(|| panic!("{report}"));
    for (name, _) in vars {
        let listed = line.split(' ').any(|word| word == name);
        let kept = matches!(name, "DSHT_KEPT_KEY" | "DSHT_PLAIN");
        assert_eq!(listed, !kept, "{name} in {line}");
    }
    let o = run(&["--env-deny", "A=B", "doctor"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("no variable name"), "{}", stderr(&o));
}

#[test]
fn call_missing_workdir_is_an_error_naming_it() {
    let o = run(&[
        "call",
        "bash",
        r#"{"command":"true","description":"Run in a missing dir","workdir":"/nonexistent-dsh-dir"}"#,
    ]);
    assert_eq!(o.status.code(), Some(1));
    let text = stdout(&o);
    assert!(
        text.starts_with("Error: ") && text.contains("/nonexistent-dsh-dir"),
        "{text}"
    );
}

#[test]
fn sigint_aborts_a_foreground_call() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let args = format!(
        r#"{{"command":"echo $$ > {}; exec sleep 30","description":"Sleep until aborted"}}"#,
        pidfile.display()
    );
    let child = bin()
        .args(["--grace-ms", "200", "call", "bash", &args])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let pid: i32 = loop {
        if let Ok(Ok(pid)) = std::fs::read_to_string(&pidfile).map(|s| s.trim().parse()) {
            break pid;
        }
        assert!(Instant::now() < deadline, "command never started");
        std::thread::sleep(Duration::from_millis(20));
    };
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let o = child.wait_with_output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "Error: command aborted\n"
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        !procs::alive(pid),
        "the aborted command's process {pid} still runs"
    );
}

#[test]
fn bad_flag_values_exit_2_naming_the_flag() {
    for (flag, value) in [
        ("--timeout-ms", "0"),
        ("--timeout-ms", "abc"),
        ("--max-timeout-ms", "-5"),
        ("--grace-ms", "NaN"),
        ("--grace-ms", "inf"),
        ("--max-output-bytes", "0"),
        ("--max-spill-bytes", "x"),
        ("--max-spill-total-bytes", "0"),
        ("--max-spill-total-bytes", "-1"),
        ("--max-tasks", "-1"),
        ("--max-command-bytes", "0"),
        ("--max-command-bytes", "67108865"),
        ("--yield-after-ms", "0"),
        ("--yield-after-ms", "-1"),
        ("--yield-after-ms", "inf"),
    ] {
        let o = run(&[flag, value, "tools"]);
        assert_eq!(o.status.code(), Some(2), "{flag} {value}");
        assert!(stderr(&o).contains(flag), "{flag} {value}: {}", stderr(&o));
    }
}

/// `--max-command-bytes` lowers the limit: a command of exactly the limit runs, one byte more is
/// an error naming the limit and the flag, and nothing of it runs. (Commands longer than one
/// argument of `dsh-host` itself are tested through `dsh-host mcp`, in `tests/mcp.rs`.)
#[test]
fn call_refuses_a_command_over_max_command_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let touch = format!("touch '{}'; : ", marker.display());
    let command = |len: usize| {
        serde_json::json!({
            "command": format!("{touch}{}", "x".repeat(len - touch.len())),
            "description": "Run a command near the limit",
        })
        .to_string()
    };
    let o = run(&["--max-command-bytes", "300", "call", "bash", &command(301)]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with(
            "Error: command too long: 301 bytes, more than the limit of 300 bytes \
             (--max-command-bytes)"
        ),
        "{}",
        stdout(&o)
    );
    assert!(!marker.exists(), "a refused command ran");
    let o = run(&["--max-command-bytes", "300", "call", "bash", &command(300)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "(no output)\n");
    assert!(marker.exists(), "a command of exactly the limit runs");
}

#[test]
fn default_timeout_above_the_maximum_is_a_usage_error() {
    let o = run(&["--timeout-ms", "700000", "tools"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--timeout-ms"), "{}", stderr(&o));
}

#[test]
fn missing_component_file_fails_clearly() {
    let o = run(&["--component", "/nonexistent/tools.wasm", "tools"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("/nonexistent/tools.wasm"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn component_without_the_tools_export_fails_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.wasm");
    // The smallest valid component: header only, no imports, no exports.
    std::fs::write(&path, b"\0asm\x0d\x00\x01\x00").unwrap();
    let o = run(&["--component", path.to_str().unwrap(), "tools"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("dsh:bash/tools@0.9.0"),
        "{}",
        stderr(&o)
    );
}

/// A component of the previous contract version (`dsh:bash@0.2.0`, before run results and reads
/// carried a sandbox's denials and the limits its policy) is refused at load, naming the import
/// this host does not provide.
#[test]
fn component_of_the_previous_contract_version_is_refused_naming_its_import() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.wasm");
    std::fs::write(&path, component_importing("dsh:bash/bash-executor@0.2.0")).unwrap();
    let o = run(&["--component", path.to_str().unwrap(), "tools"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains(
            "it imports `dsh:bash/bash-executor@0.2.0`, which this host does not provide \
             (it provides dsh:bash/bash-executor@0.9.0, dsh:bash/agent@0.9.0, \
             dsh:bash/approval@0.9.0)"
        ),
        "{}",
        stderr(&o)
    );
}

/// The binary of a component whose only content is the import of an (empty) instance `name`.
fn component_importing(name: &str) -> Vec<u8> {
    fn section(id: u8, payload: &[u8]) -> Vec<u8> {
        let len = u8::try_from(payload.len()).expect("a short section");
        assert!(len < 0x80, "one-byte LEB128 length");
        [&[id, len][..], payload].concat()
    }
    let name_len = u8::try_from(name.len()).expect("a short name");
    assert!(name_len < 0x80, "one-byte LEB128 length");
    let mut bytes = b"\0asm\x0d\x00\x01\x00".to_vec();
    // Type section: one instance type without declarations.
    bytes.extend(section(7, &[1, 0x42, 0]));
    // Import section: one import, a plain name, of instance type 0.
    let import = [&[1, 0, name_len][..], name.as_bytes(), &[0x05, 0]].concat();
    bytes.extend(section(10, &import));
    bytes
}

fn call_true_with_cache(cache: &std::path::Path) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dsh-host"));
    cmd.env("DSH_CACHE_DIR", cache).env_remove("DSH_LOG");
    cmd.args([
        "call",
        "bash",
        r#"{"command":"echo cached","description":"Use the component cache"}"#,
    ])
    .output()
    .expect("dsh-host runs")
}

#[test]
fn the_compiled_component_cache_is_used_and_survives_damage() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let o = call_true_with_cache(&cache);
    assert_eq!(stdout(&o), "cached\n", "stderr: {}", stderr(&o));
    let entries: Vec<_> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(entries.len(), 1, "one compiled component: {entries:?}");
    assert!(entries[0].extension().is_some_and(|e| e == "cwasm"));

    // A damaged (stale, truncated, foreign) cache file falls back to compiling.
    std::fs::write(&entries[0], b"not a compiled component").unwrap();
    let o = call_true_with_cache(&cache);
    assert_eq!(stdout(&o), "cached\n", "stderr: {}", stderr(&o));
}

#[test]
fn an_unwritable_cache_falls_back_to_compiling() {
    let dir = tempfile::tempdir().unwrap();
    // A file where the cache directory should be: nothing can be created under it.
    let blocker = dir.path().join("file");
    std::fs::write(&blocker, b"").unwrap();
    let o = call_true_with_cache(&blocker.join("cache"));
    assert_eq!(stdout(&o), "cached\n", "stderr: {}", stderr(&o));
    assert_eq!(o.status.code(), Some(0));
}

#[test]
fn call_numbers_beyond_f64_get_the_tools_validation_error() {
    // `JSON.parse` reads 1e400 as Infinity, which is not a finite timeout (printed as null).
    let o = run(&[
        "call",
        "bash",
        r#"{"command":"echo ran","description":"d","timeoutMs":1e400}"#,
    ]);
    assert_eq!(
        stdout(&o),
        "Error: invalid timeoutMs: expected a positive number, got null\n"
    );
    assert_eq!(o.status.code(), Some(1));
}

/// Settings from `--config FILE` apply like their flags; the command line wins over the file,
/// and a bad file is refused naming it and the setting.
#[test]
fn a_config_file_sets_flags_and_the_command_line_wins() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dsh.toml");
    std::fs::write(
        &file,
        "timeout-ms = 300\nenv-deny = [\"DSH_TEST_*_X\"]\nenv-allow = [\"DSH_TEST_TOKEN_OK\"]\n",
    )
    .unwrap();
    let config = file.to_str().unwrap();
    let command = r#"{"command":"echo ${DSH_TEST_A_X-unset} ${DSH_TEST_TOKEN_OK-unset} ${DSH_TEST_B-unset}; sleep 1; echo slept","description":"d"}"#;
    let o = bin()
        .args(["--config", config, "call", "bash", command])
        .env("DSH_TEST_A_X", "1")
        .env("DSH_TEST_TOKEN_OK", "2")
        .env("DSH_TEST_B", "3")
        .output()
        .unwrap();
    assert_eq!(
        stdout(&o),
        "unset 2 3\n[timed out after 300ms]\n[killed by signal: SIGTERM]\n"
    );
    let o = bin()
        .args([
            "call",
            "--config",
            config,
            "--timeout-ms",
            "5000",
            "bash",
            command,
        ])
        .env("DSH_TEST_A_X", "1")
        .output()
        .unwrap();
    assert_eq!(stdout(&o), "unset unset unset\nslept\n", "{}", stderr(&o));

    for (text, error) in [
        ("timeout = 5\n", "unknown setting `timeout`"),
        (
            "timeout-ms = -1\n",
            "invalid value '-1' for '--timeout-ms <MS>': expected a finite number > 0, got -1",
        ),
        ("env-deny = \"A\"\nenv-deny = \"B\"\n", "duplicate key"),
        // `mcp`'s settings get their flags' checks too, whatever the command.
        (
            "http = \"example.com:80\"\n",
            "invalid value 'example.com:80' for '--http <ADDR>': expected IP:PORT",
        ),
        (
            "http-max-sessions = 0\n",
            "invalid value '0' for '--http-max-sessions <N>': expected a whole number > 0, got 0",
        ),
        (
            "http-token = \"a\"\nhttp-token-file = \"f\"\n",
            "the argument '--http-token <TOKEN>' cannot be used with '--http-token-file <FILE>'",
        ),
    ] {
        std::fs::write(&file, text).unwrap();
        let o = run(&["--config", config, "doctor"]);
        assert_eq!(o.status.code(), Some(2), "{text}");
        assert!(
            stderr(&o).starts_with(&format!("dsh-host: config file {config}: ")),
            "{}",
            stderr(&o)
        );
        assert!(stderr(&o).contains(error), "{}", stderr(&o));
    }
    // `mcp`'s settings leave the other commands alone.
    std::fs::write(
        &file,
        "http = \"127.0.0.1:0\"\nhttp-max-sessions = 4\nmax-calls-in-flight = 2\n",
    )
    .unwrap();
    let o = run(&[
        "--config",
        config,
        "call",
        "bash",
        r#"{"command":"echo ok","description":"d"}"#,
    ]);
    assert_eq!(stdout(&o), "ok\n", "{}", stderr(&o));
    // A token in a file others may read is worth a warning.
    std::fs::write(&file, "http-token = \"s3cret\"\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let o = run(&["--config", config, "doctor"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!(
            "dsh-host: warning: the config file {config} holds http-token and is readable by \
             other users (chmod 600 it)"
        )),
        "{}",
        stderr(&o)
    );
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let o = run(&["--config", config, "doctor"]);
    assert!(!stderr(&o).contains("warning"), "{}", stderr(&o));

    let o = run(&["--config", "/nonexistent/dsh.toml", "doctor"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).starts_with("dsh-host: cannot read the config file /nonexistent/dsh.toml: "),
        "{}",
        stderr(&o)
    );
}

/// `--policy`: a refused command is an error result of one `[policy: …]` line and nothing runs;
/// a file that does not read stops the host (exit 2) naming its line, before anything runs; the
/// config file's `policy` list works like the flag; `doctor` names the rules in force.
#[test]
fn permission_rules_refuse_before_anything_runs_and_bad_files_stop_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("p.toml");
    std::fs::write(
        &policy,
        "[permissions]\ndefault = \"allow\"\ndeny = [{ rule = \"Bash(touch *)\", message = \"no new files\" }]\n",
    )
    .unwrap();
    let marker = dir.path().join("marker");
    let command = serde_json::json!({
        "command": format!("echo hi && touch '{}'", marker.display()),
        "description": "Try the rules"
    })
    .to_string();
    let o = run(&[
        "--policy",
        policy.to_str().unwrap(),
        "call",
        "bash",
        &command,
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        format!(
            "[policy: denied — `touch '{}'` matches deny rule Bash(touch *) ({}:3): no new files. \
             The command did not run; do not retry it in another form.]\n",
            marker.display(),
            policy.display()
        )
    );
    assert!(!marker.exists(), "the refused command ran");

    // The same through the config file.
    let config = dir.path().join("c.toml");
    std::fs::write(
        &config,
        format!("policy = [{:?}]\n", policy.to_str().unwrap()),
    )
    .unwrap();
    let o = run(&[
        "--config",
        config.to_str().unwrap(),
        "call",
        "bash",
        &command,
    ]);
    assert!(
        stdout(&o).starts_with("[policy: denied — "),
        "{}",
        stdout(&o)
    );
    assert!(!marker.exists(), "the refused command ran");
    let o = run(&["--policy", policy.to_str().unwrap(), "doctor"]);
    assert!(
        stdout(&o).contains(&format!(
            "permissions: 1 rules from {}; unmatched commands: allow ({}:2)",
            policy.display(),
            policy.display()
        )),
        "{}",
        stdout(&o)
    );

    // Files that do not read: the host does not start, and nothing runs.
    let bad = dir.path().join("bad.toml");
    for (text, line) in [
        ("[permissions]\nalow = []\n", 2),
        ("[permissions]\ndeny = [\"Bash(rm\"]\n", 2),
        ("[permissions]\ndefault = \"perhaps\"\n", 2),
    ] {
        std::fs::write(&bad, text).unwrap();
        let o = run(&["--policy", bad.to_str().unwrap(), "call", "bash", &command]);
        assert_eq!(o.status.code(), Some(2), "{text}: {}", stderr(&o));
        assert!(
            stderr(&o).contains(&format!("--policy {}:{line}: ", bad.display())),
            "{text}: {}",
            stderr(&o)
        );
        assert!(stdout(&o).is_empty(), "{}", stdout(&o));
    }
    let missing = dir.path().join("missing.toml");
    let o = run(&[
        "--policy",
        missing.to_str().unwrap(),
        "call",
        "bash",
        &command,
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("missing.toml"), "{}", stderr(&o));
    assert!(!marker.exists());
}

/// A cache directory given relative (the host's runtime directory falls back to it, and a
/// sandbox hides that directory from every command) still lets a sandbox start.
#[test]
fn a_sandbox_starts_with_a_relative_cache_directory() {
    let dir = tempfile::tempdir().unwrap();
    let out = bin()
        .current_dir(dir.path())
        .env("DSH_CACHE_DIR", ".cache/dsh")
        .env_remove("XDG_RUNTIME_DIR")
        .args(["call", "--sandbox", "workspace-write", "bash"])
        .arg(r#"{"command":"echo inside","description":"Echo"}"#)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "inside\n");
}
