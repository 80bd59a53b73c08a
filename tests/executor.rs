//! The local executor against the executor contract, through the public API only.
//!
//! Grace periods and caps are small so the suite is quick; timing checks only bound from below or
//! with margins of seconds, because CI machines are small and noisy.

#[path = "support/exec.rs"]
mod exec;
#[allow(dead_code)]
#[macro_use]
#[path = "support/modes.rs"]
mod modes;
#[path = "support/procs.rs"]
mod procs;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_executor::{
    Config, ContainmentPreference, ExecError, Executor, LocalExecutor, Request, RunResult, Spec,
    Task, TaskState,
};
use modes::Mode;
use procs::alive;
use tokio::sync::mpsc::{UnboundedReceiver, error::TryRecvError, unbounded_channel};
use tokio_util::sync::CancellationToken;

const GRACE_MS: f64 = 200.0;
/// Generous bound for anything that should be "prompt".
const PROMPT: Duration = Duration::from_secs(8);

struct Harness {
    exec: Arc<LocalExecutor>,
    events: UnboundedReceiver<Task>,
    /// Spill parent; kept alive for the test's duration.
    spill: tempfile::TempDir,
}

fn config_with(spill: &Path) -> Config {
    Config {
        grace_ms: GRACE_MS,
        default_timeout_ms: 20_000.0,
        spill_dir: Some(spill.to_path_buf()),
        ..Config::default()
    }
}

fn harness(edit: impl FnOnce(&mut Config)) -> Harness {
    let spill = tempfile::tempdir().unwrap();
    let mut config = config_with(spill.path());
    edit(&mut config);
    let (tx, events) = unbounded_channel();
    let exec = LocalExecutor::new(config, tx).expect("valid config");
    Harness {
        exec,
        events,
        spill,
    }
}

impl Harness {
    fn spec(&self, command: &str) -> Spec {
        exec::spec(self.exec.as_ref(), command)
    }

    async fn run(&self, command: &str) -> RunResult {
        self.run_spec(self.spec(command)).await
    }

    async fn run_spec(&self, spec: Spec) -> RunResult {
        self.exec
            .run(spec, CancellationToken::new())
            .await
            .expect("run succeeds")
    }

    async fn run_timeout(&self, command: &str, timeout_ms: f64) -> RunResult {
        let spec = Spec {
            timeout_ms,
            ..self.spec(command)
        };
        self.run_spec(spec).await
    }

    async fn start(&self, command: &str) -> Task {
        self.exec
            .start(self.spec(command))
            .await
            .expect("start succeeds")
    }

    async fn next_event(&mut self) -> Task {
        exec::next_event(&mut self.events).await
    }

    /// Reads a task's stdout until `done(accumulated)` holds.
    async fn read_until(&self, id: &str, done: impl Fn(&str) -> bool) -> String {
        let mut acc = String::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            acc.push_str(&self.exec.read_output(id).unwrap().stdout.text);
            if done(&acc) {
                return acc;
            }
            assert!(Instant::now() < deadline, "output so far: {acc:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn spill_files(&self) -> Vec<PathBuf> {
        files_under(self.spill.path())
    }

    /// Exactly one spill file was written, and it holds `content`.
    fn assert_one_spill_file_holding(&self, content: &str) {
        let files = self.spill_files();
        assert_eq!(files.len(), 1, "{files:?}");
        assert_eq!(std::fs::read_to_string(&files[0]).unwrap(), content);
    }
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(files_under(&path));
        } else {
            found.push(path);
        }
    }
    found.sort();
    found
}

async fn gone_soon(pid: i32) -> bool {
    let deadline = Instant::now() + PROMPT;
    while Instant::now() < deadline {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

fn pids(text: &str) -> Vec<i32> {
    text.split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect()
}

fn seq(from: u32, to: u32) -> String {
    (from..=to).map(|i| format!("{i}\n")).collect()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

// ---------------------------------------------------------------------------------------------
// Configuration and resolution

#[test]
fn defaults_match_the_contract() {
    let config = Config::default();
    assert_eq!(config.default_timeout_ms, 120_000.0);
    assert_eq!(config.max_timeout_ms, 600_000.0);
    assert_eq!(config.max_output_bytes, 64_000);
    assert_eq!(config.grace_ms, 3_000.0);
    assert_eq!(config.max_spill_bytes, 64 * 1024 * 1024);
    assert_eq!(config.max_tasks, 64);
    assert_eq!(config.max_finished_tasks, 1024);
    assert_eq!(config.max_command_bytes, 1024 * 1024);
    assert_eq!(config.containment, ContainmentPreference::Auto);
    assert!(!config.keep_spill);
    assert_eq!(config.validate(), Ok(()));
    let (tx, _rx) = unbounded_channel();
    let limits = LocalExecutor::new(config, tx).unwrap().limits();
    assert_eq!(limits.default_timeout_ms, 120_000.0);
    assert_eq!(limits.max_timeout_ms, 600_000.0);
    assert_eq!(limits.max_output_bytes, 64_000);
    assert_eq!(limits.grace_ms, 3_000.0);
}

#[test]
fn invalid_config_names_the_setting() {
    type Edit = Box<dyn Fn(&mut Config)>;
    let file = tempfile::NamedTempFile::new().unwrap();
    let file_path = file.path().to_path_buf();
    let cases: Vec<(Edit, &str)> = vec![
        (Box::new(|c| c.default_timeout_ms = 0.0), "timeout-ms"),
        (Box::new(|c| c.default_timeout_ms = f64::NAN), "timeout-ms"),
        (Box::new(|c| c.default_timeout_ms = 600_001.0), "timeout-ms"),
        (Box::new(|c| c.max_timeout_ms = -5.0), "max-timeout-ms"),
        (
            Box::new(|c| c.max_timeout_ms = f64::INFINITY),
            "max-timeout-ms",
        ),
        (Box::new(|c| c.max_output_bytes = 0), "max-output-bytes"),
        (Box::new(|c| c.grace_ms = 0.0), "grace-ms"),
        (Box::new(|c| c.grace_ms = f64::INFINITY), "grace-ms"),
        (Box::new(|c| c.max_spill_bytes = 0), "max-spill-bytes"),
        (Box::new(|c| c.max_tasks = 0), "max-tasks"),
        (Box::new(|c| c.max_finished_tasks = 0), "max-finished-tasks"),
        (Box::new(|c| c.max_command_bytes = 0), "max-command-bytes"),
        (
            Box::new(|c| c.max_command_bytes = (64 << 20) + 1),
            "max-command-bytes",
        ),
        (Box::new(|c| c.cwd = Some("/no/such/dsh/dir".into())), "cwd"),
        (Box::new(move |c| c.cwd = Some(file_path.clone())), "cwd"),
        (Box::new(|c| c.yield_after_ms = Some(0.0)), "yield-after-ms"),
        (
            Box::new(|c| c.yield_after_ms = Some(f64::INFINITY)),
            "yield-after-ms",
        ),
    ];
    for (edit, setting) in cases {
        let mut config = Config::default();
        edit(&mut config);
        let (tx, _rx) = unbounded_channel();
        let err = LocalExecutor::new(config, tx).unwrap_err();
        assert_eq!(err.setting, setting, "{err}");
        assert!(err.to_string().starts_with(&format!("invalid {setting}: ")));
    }
}

#[test]
fn resolve_applies_defaults_caps_and_rejects_bad_timeouts() {
    let cwd = tempfile::tempdir().unwrap();
    let (tx, _rx) = unbounded_channel();
    let exec = LocalExecutor::new(
        Config {
            default_timeout_ms: 1_000.0,
            max_timeout_ms: 5_000.0,
            cwd: Some(cwd.path().to_path_buf()),
            ..Config::default()
        },
        tx,
    )
    .unwrap();
    let req = |workdir: Option<&str>, timeout_ms: Option<f64>| Request {
        command: "echo hi".into(),
        workdir: workdir.map(str::to_string),
        timeout_ms,
        owner: Some("owner-1".into()),
    };
    let spec = exec.resolve(req(None, None)).unwrap();
    assert_eq!(
        spec,
        Spec {
            command: "echo hi".into(),
            workdir: cwd.path().to_str().unwrap().into(),
            timeout_ms: 1_000.0,
            owner: Some("owner-1".into()),
        }
    );
    assert_eq!(
        exec.resolve(req(Some("/usr"), None)).unwrap().workdir,
        "/usr"
    );
    assert_eq!(
        exec.resolve(req(None, Some(3_000.0))).unwrap().timeout_ms,
        3_000.0
    );
    assert_eq!(exec.resolve(req(None, Some(0.5))).unwrap().timeout_ms, 0.5);
    assert_eq!(
        exec.resolve(req(None, Some(1e9))).unwrap().timeout_ms,
        5_000.0
    );
    for (bad, shown) in [
        (0.0, "0"),
        (-1.0, "-1"),
        (f64::NAN, "NaN"),
        (f64::INFINITY, "inf"),
    ] {
        match exec.resolve(req(None, Some(bad))) {
            Err(ExecError::InvalidRequest(msg)) => {
                assert!(msg.ends_with(&format!("got {shown}")), "{msg}")
            }
            other => panic!("{bad}: {other:?}"),
        }
    }

    // Without a configured cwd the host's cwd applies.
    let (tx, _rx) = unbounded_channel();
    let exec = LocalExecutor::new(Config::default(), tx).unwrap();
    let here = std::env::current_dir().unwrap();
    assert_eq!(
        exec.resolve(req(None, None)).unwrap().workdir,
        here.to_str().unwrap()
    );
    assert_eq!(exec.resolve(req(None, None)).unwrap().timeout_ms, 120_000.0);
}

/// A command over `max_command_bytes` is refused by `resolve`, `run` and `start` alike, with an
/// error naming the limit and the flag, and nothing runs; one of exactly the limit runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_over_the_limit_are_refused_and_nothing_runs() {
    const LIMIT: usize = 200;
    let h = harness(|c| c.max_command_bytes = LIMIT as u64);
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    // `touch <marker>`, then a comment up to `len` bytes.
    let command = |len: usize| {
        let touch = format!("touch '{}'\n#", marker.display());
        format!("{touch}{}", "x".repeat(len - touch.len()))
    };
    let refusal = format!(
        "command too long: {} bytes, more than the limit of {LIMIT} bytes (--max-command-bytes)",
        LIMIT + 1
    );
    let refused = |result: Result<_, ExecError>, what: &str| match result {
        Err(ExecError::InvalidRequest(message)) => {
            assert!(message.starts_with(&refusal), "{what}: {message}")
        }
        Err(other) => panic!("{what}: {other:?}"),
        Ok(_) => panic!("{what}: accepted"),
    };
    let long = command(LIMIT + 1);
    refused(
        h.exec
            .resolve(Request {
                command: long.clone(),
                workdir: None,
                timeout_ms: None,
                owner: None,
            })
            .map(drop),
        "resolve",
    );
    // A spec made without `resolve` is checked too.
    let spec = Spec {
        command: long,
        ..h.spec("true")
    };
    refused(
        h.exec
            .run(spec.clone(), CancellationToken::new())
            .await
            .map(drop),
        "run",
    );
    refused(h.exec.start(spec).await.map(drop), "start");
    assert!(h.exec.list().is_empty(), "no task was made");
    assert!(!marker.exists(), "a refused command ran");

    let r = h.run(&command(LIMIT)).await;
    assert_eq!(r.exit_code, Some(0), "{:?}", r.stderr);
    assert!(marker.exists(), "a command of exactly the limit runs");
}

// ---------------------------------------------------------------------------------------------
// Foreground runs

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_bash_with_separate_streams_and_exit_code() {
    let h = harness(|_| {});
    let r = h
        .run("echo out; echo err >&2; [[ -n $BASH_VERSION ]] && echo bash; exit 3")
        .await;
    assert_eq!(r.exit_code, Some(3));
    assert_eq!(r.signal, None);
    assert!(!r.timed_out && !r.aborted);
    assert_eq!(r.timeout_ms, 20_000.0);
    assert_eq!(r.stdout.text, "out\nbash\n");
    assert_eq!(r.stderr.text, "err\n");
    assert!(!r.stdout.truncated && r.stdout.spill_path.is_none());
    assert_eq!(r.leftover_processes, 0);
}

/// Commands (and so the requests that start them) of any size up to the limit start, in either
/// containment: up to 128 KiB as bash's argument, longer ones through a memfd
/// (`long_commands_run_as_bash_c_would` checks what bash makes of those).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_of_any_size_run() {
    for containment in [
        ContainmentPreference::Auto,
        ContainmentPreference::Subreaper,
    ] {
        let h = harness(|c| c.containment = containment);
        for size in [10, 30_000, 40_000, 120_000, 200_000, 1_000_000] {
            // A comment of `size` bytes, then a command that proves the whole text arrived.
            let command = format!("# {}\necho {size}", "x".repeat(size));
            let r = h.run(&command).await;
            assert_eq!(
                (r.stdout.text.as_str(), r.exit_code),
                (format!("{size}\n").as_str(), Some(0)),
                "{containment:?}, {size} bytes"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_in_the_requested_workdir_in_a_new_session() {
    for containment in [
        ContainmentPreference::Auto,
        ContainmentPreference::Subreaper,
    ] {
        let h = harness(|c| c.containment = containment);
        let dir = tempfile::tempdir().unwrap();
        let spec = Spec {
            workdir: dir.path().to_str().unwrap().into(),
            ..h.spec("pwd; ps -o sid= -p $$; ps -o pgid= -p $$; echo $PPID; echo $$; tty || true")
        };
        let r = h.run_spec(spec).await;
        let lines: Vec<&str> = r.stdout.text.lines().map(str::trim).collect();
        assert_eq!(
            lines[0],
            dir.path().canonicalize().unwrap().to_str().unwrap()
        );
        let (sid, pgid, ppid, bash) = (lines[1], lines[2], lines[3], lines[4]);
        let shown = h.exec.containment();
        // A session and group of its own, led by bash itself in either containment mode
        // (changed with the per-command spawn helper: in subreaper mode the supervisor used to
        // lead it); bash's parent is its spawn helper, never the host.
        assert_eq!(sid, bash, "{shown}: bash leads its session");
        assert_eq!(pgid, bash, "{shown}: bash leads its process group");
        assert_ne!(ppid, std::process::id().to_string(), "{shown}: parent");
        assert_eq!(lines[5], "not a tty", "{shown}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_with_term_trap_reports_how_bash_ended() {
    let h = harness(|_| {});
    let r = h
        .run_timeout(
            "trap 'echo trapped; exit 0' TERM; sleep 30; echo never",
            300.0,
        )
        .await;
    assert!(r.timed_out);
    assert!(!r.aborted);
    assert_eq!(r.timeout_ms, 300.0);
    assert_eq!(r.exit_code, Some(0));
    assert_eq!(r.signal, None);
    assert_eq!(r.stdout.text, "trapped\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_without_trap_is_sigterm() {
    let h = harness(|_| {});
    let started = Instant::now();
    let r = h.run_timeout("echo begun; sleep 30", 300.0).await;
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(started.elapsed() < PROMPT);
    assert!(r.timed_out && !r.aborted);
    assert_eq!(r.exit_code, None);
    assert_eq!(r.signal.as_deref(), Some("SIGTERM"));
    assert_eq!(r.stdout.text, "begun\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_ignoring_term_escalates_to_sigkill_after_grace() {
    let h = harness(|_| {});
    let started = Instant::now();
    let r = h
        .run_timeout("trap '' TERM; echo $$; sleep 30", 200.0)
        .await;
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(200 + GRACE_MS as u64),
        "{elapsed:?}"
    );
    assert!(elapsed < PROMPT);
    assert!(r.timed_out);
    assert_eq!(r.signal.as_deref(), Some("SIGKILL"));
    assert_eq!(r.exit_code, None);
    assert!(!alive(pids(&r.stdout.text)[0]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_kills_grandchildren_and_escaped_descendants() {
    let h = harness(|_| {});
    let r = h
        .run_timeout(
            "setsid sleep 30 & echo $!; bash -c 'sleep 30 & echo $!; wait' & wait",
            500.0,
        )
        .await;
    assert!(r.timed_out);
    let found = pids(&r.stdout.text);
    assert_eq!(found.len(), 2, "{:?}", r.stdout.text);
    for pid in found {
        assert!(gone_soon(pid).await, "pid {pid} survived");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leftover_background_process_is_stopped_and_counted() {
    let h = harness(|_| {});
    let started = Instant::now();
    let r = h.run("sleep 30 & echo $!; echo started").await;
    assert!(started.elapsed() < PROMPT, "{:?}", started.elapsed());
    assert_eq!(r.exit_code, Some(0));
    assert!(!r.timed_out);
    assert_eq!(r.leftover_processes, 1);
    let lines: Vec<&str> = r.stdout.text.lines().collect();
    assert_eq!(lines[1], "started");
    assert!(!alive(lines[0].parse().unwrap()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leftovers_outside_the_process_group_are_stopped_too() {
    let h = harness(|_| {});
    let r = h
        .run(
            "setsid sleep 30 >/dev/null 2>&1 & echo $!; \
             ( sleep 31 >/dev/null 2>&1 & echo $! ); echo done",
        )
        .await;
    assert_eq!(r.exit_code, Some(0));
    assert_eq!(r.leftover_processes, 2);
    let found = pids(r.stdout.text.trim_end_matches("done\n"));
    assert_eq!(found.len(), 2);
    for pid in found {
        assert!(!alive(pid), "pid {pid} survived");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quick_command_has_no_leftovers_and_returns_at_once() {
    let h = harness(|c| c.grace_ms = 5_000.0);
    let started = Instant::now();
    let r = h.run("echo hi").await;
    assert_eq!(r.stdout.text, "hi\n");
    assert_eq!(r.leftover_processes, 0);
    // Completion does not wait out the grace period when nothing is left.
    assert!(started.elapsed() < Duration::from_secs(4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_is_at_eof() {
    let h = harness(|_| {});
    let started = Instant::now();
    let r = h.run("cat; echo done").await;
    assert!(started.elapsed() < PROMPT);
    assert_eq!(r.stdout.text, "done\n");
    assert_eq!(r.exit_code, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn environment_is_scrubbed_and_forced() {
    // SAFETY: set once, before any command of this test runs; other tests do not read these
    // names, and std serialises its own environment access.
    unsafe {
        std::env::set_var("DSH_EXEC_TEST_API_KEY", "k");
        std::env::set_var("dsh_exec_test_secret_v", "s");
        std::env::set_var("DSH_EXEC_TEST_GhToken", "t");
        std::env::set_var("DSH_EXEC_TEST_PASSWORD", "p");
        std::env::set_var("DSH_EXEC_TEST_PLAIN", "kept");
    }
    let h = harness(|_| {});
    let r = h.run("env").await;
    let vars: Vec<(&str, &str)> = r
        .stdout
        .text
        .lines()
        .filter_map(|l| l.split_once('='))
        .collect();
    let get = |k: &str| {
        vars.iter()
            .filter(|(n, _)| *n == k)
            .map(|(_, v)| *v)
            .collect::<Vec<_>>()
    };
    for secret in [
        "DSH_EXEC_TEST_API_KEY",
        "dsh_exec_test_secret_v",
        "DSH_EXEC_TEST_GhToken",
        "DSH_EXEC_TEST_PASSWORD",
    ] {
        assert!(get(secret).is_empty(), "{secret} leaked");
    }
    assert_eq!(get("DSH_EXEC_TEST_PLAIN"), ["kept"]);
    for (k, v) in [
        ("NO_COLOR", "1"),
        ("TERM", "dumb"),
        ("PAGER", "cat"),
        ("GIT_PAGER", "cat"),
        ("GIT_TERMINAL_PROMPT", "0"),
    ] {
        assert_eq!(get(k), [v], "{k}");
    }
    assert!(!get("PATH").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unusable_workdir_is_an_error() {
    let h = harness(|_| {});
    let missing = Spec {
        workdir: "/nope/dsh-missing".into(),
        ..h.spec("true")
    };
    assert_eq!(
        h.exec.run(missing.clone(), CancellationToken::new()).await,
        Err(ExecError::WorkdirUnusable(
            "workdir \"/nope/dsh-missing\" is not usable: No such file or directory (os error 2)"
                .into()
        ))
    );
    let file = tempfile::NamedTempFile::new().unwrap();
    let path = file.path().to_str().unwrap().to_string();
    let not_dir = Spec {
        workdir: path.clone(),
        ..h.spec("true")
    };
    assert_eq!(
        h.exec.run(not_dir, CancellationToken::new()).await,
        Err(ExecError::WorkdirUnusable(format!(
            "workdir {path:?} is not usable: Not a directory (os error 20)"
        )))
    );
    // Background: refused, no task created, no id used up.
    assert!(matches!(
        h.exec.start(missing).await,
        Err(ExecError::WorkdirUnusable(_))
    ));
    assert!(h.exec.list().is_empty());
    assert_eq!(h.start("true").await.id, "bash-1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_before_and_during_a_run() {
    let h = harness(|_| {});
    let token = CancellationToken::new();
    token.cancel();
    assert_eq!(
        h.exec.run(h.spec("echo never"), token).await,
        Err(ExecError::Aborted)
    );

    let token = CancellationToken::new();
    let canceller = token.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        canceller.cancel();
    });
    let started = Instant::now();
    let r = h
        .exec
        .run(h.spec("echo $$; sleep 30"), token)
        .await
        .unwrap();
    assert!(started.elapsed() < PROMPT);
    assert!(r.aborted);
    assert!(!r.timed_out);
    assert_eq!(r.signal.as_deref(), Some("SIGTERM"));
    assert!(!alive(pids(&r.stdout.text)[0]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_run_stops_its_processes() {
    let h = harness(|_| {});
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let command = format!("echo $$ > {}; sleep 30", pid_file.display());
    let spec = h.spec(&command);
    let run = h.exec.run(spec, CancellationToken::new());
    let wait_file = async {
        while std::fs::read_to_string(&pid_file).map_or(true, |s| !s.ends_with('\n')) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::select! {
        _ = run => panic!("the run ended by itself"),
        _ = wait_file => {}
    }
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(gone_soon(pid).await, "pid {pid} survived its dropped run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signal_deaths_are_named() {
    let h = harness(|_| {});
    for (sig, name) in [("USR1", "SIGUSR1"), ("KILL", "SIGKILL"), ("HUP", "SIGHUP")] {
        let r = h.run(&format!("kill -{sig} $$; sleep 5")).await;
        assert_eq!(r.signal.as_deref(), Some(name));
        assert_eq!(r.exit_code, None);
        assert!(!r.timed_out);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_survives_signals_from_the_command() {
    let h = harness(|_| {});
    let r = h
        .run("kill -TERM $PPID; kill -INT $PPID; kill -HUP $PPID; echo alive")
        .await;
    assert_eq!(r.stdout.text, "alive\n");
    assert_eq!(r.exit_code, Some(0));
    // `kill 0` signals the command's own process group.
    let r = h.run("kill -TERM 0; echo after").await;
    assert_eq!(r.signal.as_deref(), Some("SIGTERM"));
    assert_eq!(r.stdout.text, "");
    // Still here, and still working.
    assert_eq!(h.run("echo ok").await.stdout.text, "ok\n");
}

// ---------------------------------------------------------------------------------------------
// Output bounding and spill files

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_of_exactly_the_cap_is_kept_whole() {
    let h = harness(|c| c.max_output_bytes = 1000);
    let r = h.run("head -c 1000 /dev/zero | tr '\\0' a").await;
    assert_eq!(r.stdout.text, "a".repeat(1000));
    assert!(!r.stdout.truncated);
    assert_eq!(r.stdout.spill_path, None);
    assert!(h.spill_files().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overflow_keeps_the_exact_tail_and_spills_the_whole_stream() {
    let h = harness(|c| c.max_output_bytes = 1000);
    let r = h.run("seq 1 5000; seq 1 3000 >&2").await;
    for (stream, expected, suffix) in [
        (&r.stdout, seq(1, 5000), "-stdout.log"),
        (&r.stderr, seq(1, 3000), "-stderr.log"),
    ] {
        assert!(stream.truncated);
        assert_eq!(stream.text, expected[expected.len() - 1000..]);
        let path = PathBuf::from(stream.spill_path.as_deref().expect("complete spill"));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), expected);
        assert_eq!(mode(&path), 0o600);
        let dir = path.parent().unwrap();
        assert_eq!(dir.parent().unwrap(), h.spill.path());
        assert_eq!(mode(dir), 0o700);
        let name = path.file_name().unwrap().to_str().unwrap();
        let stem = name.strip_suffix(suffix).expect(name);
        let parts: Vec<&str> = stem.split('-').collect();
        assert_eq!(parts.len(), 5, "{name}");
        assert_eq!(parts[..2], ["dsh", "bash"]);
        assert_eq!(parts[2], std::process::id().to_string());
        assert!(parts[3].parse::<u64>().is_ok(), "{name}");
        assert_eq!(parts[4].len(), 12);
        assert!(
            parts[4]
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
    }
    // Both streams of one command share the name stem.
    let out = r.stdout.spill_path.unwrap();
    assert_eq!(
        out.replace("-stdout.log", "-stderr.log"),
        r.stderr.spill_path.unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capped_spill_is_not_presented() {
    let h = harness(|c| {
        c.max_output_bytes = 100;
        c.max_spill_bytes = 1000;
    });
    let r = h.run("seq 1 2000").await;
    let expected = seq(1, 2000);
    assert!(r.stdout.truncated);
    assert_eq!(r.stdout.text, expected[expected.len() - 100..]);
    assert_eq!(r.stdout.spill_path, None);
    h.assert_one_spill_file_holding(&expected[..1000]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capped_spill_is_not_presented_to_task_reads_either() {
    let mut h = harness(|c| {
        c.max_output_bytes = 100;
        c.max_spill_bytes = 1000;
    });
    let task = h.start("seq 1 2000").await;
    h.next_event().await;
    let read = h.exec.read_output(&task.id).unwrap();
    assert!(read.stdout.lossy);
    assert_eq!(read.stdout.spill_path, None);
    let expected = seq(1, 2000);
    h.assert_one_spill_file_holding(&expected[..1000]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unwritable_spill_dir_degrades_to_memory_only() {
    let not_a_dir = tempfile::NamedTempFile::new().unwrap();
    let h = harness(|c| {
        c.max_output_bytes = 100;
        c.spill_dir = Some(not_a_dir.path().to_path_buf());
    });
    let r = h.run("seq 1 2000; echo fine >&2").await;
    let expected = seq(1, 2000);
    assert_eq!(r.exit_code, Some(0));
    assert!(r.stdout.truncated);
    assert_eq!(r.stdout.text, expected[expected.len() - 100..]);
    assert_eq!(r.stdout.spill_path, None);
    assert_eq!(r.stderr.text, "fine\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_utf8_is_replaced_in_text_and_raw_in_the_spill() {
    let h = harness(|c| c.max_output_bytes = 64);
    let r = h.run("printf 'a\\xffb'").await;
    assert_eq!(r.stdout.text, "a\u{FFFD}b");

    let r = h
        .run("printf 'ok\\xff\\xfe'; for i in $(seq 1 50); do printf 'x\\xc3'; done")
        .await;
    let mut raw = b"ok\xff\xfe".to_vec();
    for _ in 0..50 {
        raw.extend_from_slice(b"x\xc3");
    }
    assert_eq!(
        r.stdout.text,
        String::from_utf8_lossy(&raw[raw.len() - 64..])
    );
    assert!(r.stdout.text.contains('\u{FFFD}'));
    let spill = r.stdout.spill_path.expect("complete spill");
    assert_eq!(std::fs::read(spill).unwrap(), raw);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_output_stays_bounded() {
    let h = harness(|c| {
        c.max_output_bytes = 1000;
        c.max_spill_bytes = 4096;
    });
    let r = h
        .run("head -c 20000000 /dev/zero | tr '\\0' z; printf END")
        .await;
    assert_eq!(r.exit_code, Some(0));
    assert!(r.stdout.truncated);
    assert_eq!(r.stdout.text, format!("{}END", "z".repeat(997)));
    assert_eq!(r.stdout.spill_path, None);
    let files = h.spill_files();
    assert_eq!(std::fs::metadata(&files[0]).unwrap().len(), 4096);
}

// ---------------------------------------------------------------------------------------------
// Background tasks

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_get_sequential_ids_and_keep_their_owner() {
    let mut h = harness(|_| {});
    let owned = h
        .exec
        .start(Spec {
            owner: Some("session-a".into()),
            ..h.spec("exit 4")
        })
        .await
        .unwrap();
    assert_eq!(owned.id, "bash-1");
    assert_eq!(owned.state, TaskState::Running);
    assert_eq!(owned.owner.as_deref(), Some("session-a"));
    assert_eq!(owned.command, "exit 4");
    assert_eq!(h.start("true").await.id, "bash-2");
    assert_eq!(h.start("true").await.id, "bash-3");
    assert_eq!(h.exec.owner_of("bash-1").as_deref(), Some("session-a"));
    assert_eq!(h.exec.owner_of("bash-2"), None);
    assert_eq!(h.exec.owner_of("bash-9"), None);
    for _ in 0..3 {
        h.next_event().await;
    }
    let list = h.exec.list();
    let ids: Vec<&str> = list.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["bash-1", "bash-2", "bash-3"]);
    let first = h.exec.get("bash-1").unwrap();
    assert_eq!(
        (first.state, first.exit_code, first.signal),
        (TaskState::Completed, Some(4), None)
    );
    assert_eq!(
        h.exec.get("bash-7"),
        Err(ExecError::UnknownTask("bash-7".into()))
    );
    assert_eq!(
        h.exec.read_output("bash-7"),
        Err(ExecError::UnknownTask("bash-7".into()))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_are_incremental_and_stay_valid_after_the_end() {
    let mut h = harness(|_| {});
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("go");
    let c_fifo = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo on a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c_fifo.as_ptr(), 0o600) }, 0);
    let task = h
        .start(&format!(
            "echo one; echo err1 >&2; read line < {}; echo \"two $line\"",
            fifo.display()
        ))
        .await;
    let first = h.read_until(&task.id, |s| s == "one\n").await;
    assert_eq!(first, "one\n");
    let read = h.exec.read_output(&task.id).unwrap();
    assert_eq!(read.stdout.text, "");
    assert!(!read.stdout.lossy);
    assert_eq!(read.task.state, TaskState::Running);
    let writer = tokio::task::spawn_blocking(move || std::fs::write(&fifo, "x\n"));
    let done = h.next_event().await;
    writer.await.unwrap().unwrap();
    assert_eq!(
        (done.state, done.exit_code),
        (TaskState::Completed, Some(0))
    );
    let read = h.exec.read_output(&task.id).unwrap();
    assert_eq!(read.stdout.text, "two x\n");
    assert_eq!(read.task.state, TaskState::Completed);
    let again = h.exec.read_output(&task.id).unwrap();
    assert_eq!(
        (again.stdout.text.as_str(), again.stderr.text.as_str()),
        ("", "")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stderr_is_read_separately() {
    let mut h = harness(|_| {});
    let task = h.start("echo out; echo err >&2").await;
    h.next_event().await;
    let read = h.exec.read_output(&task.id).unwrap();
    assert_eq!(read.stdout.text, "out\n");
    assert_eq!(read.stderr.text, "err\n");
    assert!(!read.stdout.lossy && !read.stderr.lossy);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_that_fell_out_of_the_window_is_lossy() {
    let mut h = harness(|c| c.max_output_bytes = 100);
    let task = h.start("seq 1 400").await;
    h.next_event().await;
    let expected = seq(1, 400);
    let read = h.exec.read_output(&task.id).unwrap();
    assert!(read.stdout.lossy);
    assert_eq!(read.stdout.text, expected[expected.len() - 100..]);
    let spill = read.stdout.spill_path.expect("complete spill");
    assert_eq!(std::fs::read_to_string(spill).unwrap(), expected);
    let again = h.exec.read_output(&task.id).unwrap();
    assert_eq!(again.stdout.text, "");
    assert!(!again.stdout.lossy);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_running_finished_and_unknown() {
    let mut h = harness(|_| {});
    let task = h.start("echo $$; sleep 30").await;
    let pid = pids(&h.read_until(&task.id, |s| s.ends_with('\n')).await)[0];
    assert_eq!(h.exec.kill(&task.id), Ok(true));
    // Killed at once, before the process is even gone.
    assert_eq!(h.exec.get(&task.id).unwrap().state, TaskState::Killed);
    assert_eq!(h.exec.kill(&task.id), Ok(false));
    let done = h.next_event().await;
    assert_eq!(done.id, task.id);
    assert_eq!(done.state, TaskState::Killed);
    assert_eq!(done.signal.as_deref(), Some("SIGTERM"));
    assert_eq!(
        h.exec.get(&task.id).unwrap().signal.as_deref(),
        Some("SIGTERM")
    );
    assert!(!alive(pid));

    let quick = h.start("true").await;
    let done = h.next_event().await;
    assert_eq!(done.id, quick.id);
    assert_eq!(h.exec.kill(&quick.id), Ok(false));
    assert_eq!(
        h.exec.kill("bash-99"),
        Err(ExecError::UnknownTask("bash-99".into()))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_escalates_once_to_sigkill() {
    let mut h = harness(|_| {});
    let task = h.start("trap '' TERM; echo $$; sleep 30 & wait").await;
    let pid = pids(&h.read_until(&task.id, |s| s.ends_with('\n')).await)[0];
    let started = Instant::now();
    assert_eq!(h.exec.kill(&task.id), Ok(true));
    assert_eq!(h.exec.kill(&task.id), Ok(false));
    let done = h.next_event().await;
    assert!(started.elapsed() >= Duration::from_millis(GRACE_MS as u64));
    assert_eq!(done.signal.as_deref(), Some("SIGKILL"));
    assert_eq!(done.state, TaskState::Killed);
    assert!(!alive(pid));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_dying_of_a_signal_is_killed() {
    let mut h = harness(|_| {});
    h.start("kill -SEGV $$").await;
    let done = h.next_event().await;
    assert_eq!(done.state, TaskState::Killed);
    assert_eq!(done.signal.as_deref(), Some("SIGSEGV"));
    assert_eq!(done.exit_code, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_done_is_sent_exactly_once_per_task() {
    let mut h = harness(|_| {});
    let completed = h.start("exit 3").await;
    let killed = h.start("sleep 30").await;
    assert_eq!(h.exec.kill(&killed.id), Ok(true));
    let mut events = [h.next_event().await, h.next_event().await];
    events.sort_by(|a, b| a.id.cmp(&b.id));
    assert_eq!(events[0].id, completed.id);
    assert_eq!(
        (events[0].state, events[0].exit_code),
        (TaskState::Completed, Some(3))
    );
    assert_eq!(events[1].id, killed.id);
    assert_eq!(events[1].state, TaskState::Killed);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(h.events.try_recv().unwrap_err(), TryRecvError::Empty);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_leftovers_are_stopped_when_the_leader_exits() {
    let mut h = harness(|_| {});
    let task = h.start("sleep 30 & echo $!").await;
    let done = h.next_event().await;
    assert_eq!(
        (done.state, done.exit_code),
        (TaskState::Completed, Some(0))
    );
    let read = h.exec.read_output(&task.id).unwrap();
    assert!(!alive(pids(&read.stdout.text)[0]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_kills_and_awaits_tasks_and_sends_no_events() {
    let mut h = harness(|_| {});
    let plain = h.start("echo $$; sleep 30").await;
    let stubborn = h
        .start("trap '' TERM; echo $$; sleep 30 & echo $!; wait")
        .await;
    let mut found = pids(&h.read_until(&plain.id, |s| s.ends_with('\n')).await);
    found.extend(pids(
        &h.read_until(&stubborn.id, |s| s.lines().count() == 2).await,
    ));
    let started = Instant::now();
    h.exec.shutdown().await;
    assert!(started.elapsed() >= Duration::from_millis(GRACE_MS as u64));
    for pid in found {
        assert!(!alive(pid), "pid {pid} survived shutdown");
    }
    for task in h.exec.list() {
        assert_eq!(task.state, TaskState::Killed, "{task:?}");
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(h.events.try_recv().unwrap_err(), TryRecvError::Empty);
    assert!(h.exec.start(h.spec("true")).await.is_err());
}

/// A task's slot is free once its completion can be seen anywhere: a start made the moment a
/// completion arrives (its event, or `read_output` saying it finished) is never refused, with
/// every other slot taken, over many rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_right_after_a_seen_completion_is_never_refused() {
    const LIMIT: usize = 3;
    let mut h = harness(|c| c.max_tasks = LIMIT);
    let mut running = Vec::new();
    for _ in 0..LIMIT {
        running.push(h.start("sleep 0.0$RANDOM").await);
    }
    for round in 0..150 {
        let start = |running: &Vec<Task>, started: Result<Task, ExecError>| {
            started.unwrap_or_else(|err| {
                panic!(
                    "round {round}: refused with {} seen running: {err}",
                    running.len()
                )
            })
        };
        if round % 2 == 0 {
            // Seen through its event.
            let done = h.next_event().await;
            running.retain(|t| t.id != done.id);
            let task = start(&running, h.exec.start(h.spec("sleep 0.0$RANDOM")).await);
            running.push(task);
        } else {
            // Seen through a read, and started on before its event is taken.
            let finished = loop {
                let found = running.iter().position(|t| {
                    h.exec.read_output(&t.id).unwrap().task.state != TaskState::Running
                });
                match found {
                    Some(i) => break running.remove(i),
                    None => tokio::time::sleep(Duration::from_millis(1)).await,
                }
            };
            let task = start(&running, h.exec.start(h.spec("sleep 0.0$RANDOM")).await);
            running.push(task);
            // Its event, and those of any others that ended meanwhile (their slots are free).
            loop {
                let done = h.next_event().await;
                running.retain(|t| t.id != done.id);
                if done.id == finished.id {
                    break;
                }
            }
        }
    }
    h.exec.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_limit_refuses_without_change_and_finished_tasks_are_retained() {
    let mut h = harness(|c| {
        c.max_tasks = 2;
        c.max_finished_tasks = 2;
    });
    let a = h.start("sleep 30").await;
    let b = h.start("sleep 30").await;
    let before = h.exec.list();
    match h.exec.start(h.spec("true")).await {
        Err(ExecError::TaskLimit(msg)) => assert!(msg.contains('2'), "{msg}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(h.exec.list(), before);

    assert_eq!(h.exec.kill(&a.id), Ok(true));
    let c = h.start("true").await;
    assert_eq!(c.id, "bash-3");
    let mut ids = vec![h.next_event().await.id, h.next_event().await.id];
    ids.sort();
    assert_eq!(ids, ["bash-1", "bash-3"]);

    // Finished: bash-1 (killed first), bash-3; killing bash-2 pushes bash-1 out.
    assert_eq!(h.exec.kill(&b.id), Ok(true));
    assert_eq!(
        h.exec.get("bash-1"),
        Err(ExecError::UnknownTask("bash-1".into()))
    );
    assert_eq!(
        h.exec.read_output("bash-1"),
        Err(ExecError::UnknownTask("bash-1".into()))
    );
    assert!(h.exec.get("bash-2").is_ok());
    assert!(h.exec.get("bash-3").is_ok());
    assert_eq!(h.next_event().await.id, "bash-2");
}

// ---------------------------------------------------------------------------------------------
// Commands longer than one exec argument

/// The longest command that goes to bash as its argument (`MAX_ARG_STRLEN`, 128 KiB with the
/// terminating NUL); longer ones go through a descriptor.
const ARGV_MAX: usize = 128 * 1024 - 1;

/// `probe`, then a comment line that makes the command exactly `len` bytes long.
fn padded(probe: &str, len: usize) -> String {
    let command = format!("{probe}\n#{}", "p".repeat(len - probe.len() - 2));
    assert_eq!(command.len(), len);
    command
}

/// Runs `command` in the foreground with the executor's defaults, to its end.
async fn run_to_end(exec: &LocalExecutor, command: String) -> RunResult {
    let spec = exec::spec(exec, &command);
    exec.run(spec, CancellationToken::new()).await.unwrap()
}

both_modes!(long_commands_run_as_bash_c_would);

/// A command longer than one `exec` argument runs as `bash -c` would run it: each probe gives
/// the same output and exit code as a short command (the same probe with a short comment), but
/// for the documented wording of syntax errors (`eval:` for `-c:`). Commands on both sides of
/// the argument limit run, the longest short one still as bash's argument.
async fn long_commands_run_as_bash_c_would(mode: Mode) {
    if mode.unavailable() {
        return;
    }
    let spill = tempfile::tempdir().unwrap();
    let (exec, _events) = modes::executor_in(mode, config_with(spill.path()));
    let run = |command: String| run_to_end(&exec, command);

    // Both sides of the limit, and the largest command the default limit accepts: bash gets the
    // whole text (its length as bash sees it), and only a short one is on bash's command line.
    let probe = "printf '%s' \"$BASH_EXECUTION_STRING\" | wc -c; tr '\\0' ' ' < /proc/$$/cmdline | head -c 300";
    for len in [ARGV_MAX, ARGV_MAX + 1, 1 << 20] {
        let r = run(padded(probe, len)).await;
        assert_eq!(r.exit_code, Some(0), "{len} bytes: {:?}", r.stderr.text);
        let (count, cmdline) = r.stdout.text.split_once('\n').unwrap();
        assert_eq!(count, len.to_string(), "{mode:?}, {len} bytes");
        assert_eq!(
            cmdline.contains(probe),
            len <= ARGV_MAX,
            "{mode:?}, {len} bytes: bash's command line holds the command only up to the limit"
        );
    }

    let probes = [
        "echo \"$_\"",
        "echo \"$0|$#|$*|$?|$LINENO|$BASH_SUBSHELL|$-\"; echo \"$LINENO\"",
        // Descriptors 0, 1 and 2 only, in bash and in its children; stdin at its end.
        "ls /proc/self/fd; ls /proc/$$/fd; cat; echo \"stdin: $?\"",
        "env | sort",
        // (`PPID` is the helper, which may differ between two commands.)
        "set | grep -v -e '^BASH_EXECUTION_STRING=' -e '^PIPESTATUS=' -e '^PPID='",
        "exit 7",
        "false",
        "set -e; false; echo not reached",
        "return; echo \"after: $?\"",
        "trap 'echo trapped $?' EXIT; exit 4",
        "trap 'echo ERR' ERR; false",
        "cat <<'EOF'\n$HOME `x` \\ 'q'\nEOF\necho done",
        "echo before\nif then",
    ];
    for probe in probes {
        let short = run(format!("{probe}\n#")).await;
        let long = run(padded(probe, ARGV_MAX + 1)).await;
        let pad = format!("#{}", "p".repeat(ARGV_MAX - 1 - probe.len()));
        let same = |text: &str| {
            text.replace(&pad, "#")
                .replace(": eval: line ", ": -c: line ")
        };
        assert_eq!(
            (
                long.exit_code,
                long.signal.as_deref(),
                same(&long.stdout.text),
                same(&long.stderr.text)
            ),
            (
                short.exit_code,
                short.signal.as_deref(),
                short.stdout.text.clone(),
                short.stderr.text.clone()
            ),
            "{mode:?}: {probe:?}"
        );
    }
}

both_modes!(bash_is_bash);

/// bash's `argv[0]` is `bash`, not the path it was found at, for short and long commands: `$0`,
/// `BASH_ARGV0` and the prefix of bash's own messages are as under plain `bash -c`.
async fn bash_is_bash(mode: Mode) {
    if mode.unavailable() {
        return;
    }
    let spill = tempfile::tempdir().unwrap();
    let (exec, _events) = modes::executor_in(mode, config_with(spill.path()));
    let probe = "echo \"$0 $BASH_ARGV0\"; nonexistent_cmd_xyz";
    for command in [probe.to_string(), padded(probe, ARGV_MAX + 1)] {
        let r = run_to_end(&exec, command).await;
        assert_eq!(
            (r.stdout.text.as_str(), r.stderr.text.as_str(), r.exit_code),
            (
                "bash bash\n",
                "bash: line 1: nonexistent_cmd_xyz: command not found\n",
                Some(127)
            ),
            "{mode:?}"
        );
    }
    exec.shutdown().await;
}

both_modes!(long_commands_differ_only_where_bash_makes_them);

/// What bash itself makes differ for a long command (docs/guarantees.md, "Commands of any size"), pinned so
/// that a change shows: `eval` names itself in a syntax error, and `eval`ed text never `exec`s
/// its last command, so a last command's signal death is bash's exit status 128 + N, with
/// bash's own line about it, where `bash -c` dies of the signal itself.
async fn long_commands_differ_only_where_bash_makes_them(mode: Mode) {
    if mode.unavailable() {
        return;
    }
    let spill = tempfile::tempdir().unwrap();
    let (exec, _events) = modes::executor_in(mode, config_with(spill.path()));
    let run = |command: String| run_to_end(&exec, command);
    let short = run("echo (".into()).await;
    let long = run(padded("echo (", ARGV_MAX + 1)).await;
    assert_eq!(
        (short.exit_code, short.stderr.text.as_str()),
        (
            Some(2),
            "bash: -c: line 1: syntax error near unexpected token `newline'\n\
             bash: -c: line 1: `echo ('\n"
        ),
        "{mode:?}"
    );
    assert_eq!(
        (long.exit_code, long.stderr.text.as_str()),
        (
            Some(2),
            "bash: eval: line 1: syntax error near unexpected token `newline'\n\
             bash: eval: line 1: `echo ('\n"
        ),
        "{mode:?}"
    );
    // No core file where the tests run.
    let probe = "ulimit -c 0; sh -c 'kill -SEGV $$'";
    let short = run(probe.into()).await;
    assert_eq!(
        (
            short.exit_code,
            short.signal.as_deref(),
            short.stderr.text.as_str()
        ),
        (None, Some("SIGSEGV"), ""),
        "{mode:?}"
    );
    let long = run(padded(probe, ARGV_MAX + 1)).await;
    assert_eq!(
        (long.exit_code, long.signal.as_deref()),
        (Some(139), None),
        "{mode:?}"
    );
    assert!(
        long.stderr.text.starts_with("bash: line 1: ")
            && long.stderr.text.contains("Segmentation fault"),
        "{mode:?}: {:?}",
        long.stderr.text
    );
    exec.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// The opt-in foreground limit (`yield_after_ms`)

/// Milliseconds after which a foreground command continues as a task, in these tests: long
/// enough for bash to have printed its first line on a busy machine.
const YIELD_MS: f64 = 400.0;

/// A spec of the tools' kind, owned by `me`, with a timeout of its own.
fn owned_spec(h: &Harness, command: &str, timeout_ms: f64) -> Spec {
    Spec {
        owner: Some("me".to_string()),
        timeout_ms,
        ..h.spec(command)
    }
}

#[test]
fn yielding_is_off_by_default() {
    assert_eq!(Config::default().yield_after_ms, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_still_running_at_the_limit_continues_as_a_task() {
    let mut h = harness(|c| c.yield_after_ms = Some(YIELD_MS));
    // A timeout shorter than the command: once it is a task, no timeout applies.
    let spec = owned_spec(
        &h,
        "echo a; echo e >&2; sleep 1.5; echo b; echo f >&2",
        1000.0,
    );
    let abort = CancellationToken::new();
    let started = Instant::now();
    let r = h.exec.run(spec, abort.clone()).await.unwrap();
    let returned = started.elapsed();
    assert!(
        returned >= Duration::from_millis(YIELD_MS as u64),
        "{returned:?}"
    );
    assert!(returned < Duration::from_millis(1400), "{returned:?}");
    let yielded = r.yielded.clone().expect("the run yielded");
    assert_eq!(yielded.after_ms, YIELD_MS);
    assert_eq!(yielded.task.id, "bash-1");
    assert_eq!(yielded.task.owner.as_deref(), Some("me"));
    assert_eq!(yielded.task.state, TaskState::Running);
    assert_eq!(
        (r.stdout.text.as_str(), r.stderr.text.as_str()),
        ("a\n", "e\n")
    );
    assert!(!r.stdout.truncated && !r.stderr.truncated);
    assert_eq!((r.exit_code, r.signal.as_deref()), (None, None));
    assert!(!r.timed_out && !r.aborted);
    assert_eq!((r.timeout_ms, r.leftover_processes), (1000.0, 0));
    // The call is over: its abort token no longer reaches the command.
    abort.cancel();

    assert_eq!(h.exec.get("bash-1").unwrap().state, TaskState::Running);
    assert_eq!(h.exec.owner_of("bash-1").as_deref(), Some("me"));
    let done = h.next_event().await;
    assert_eq!(done.id, "bash-1");
    assert_eq!(done.owner.as_deref(), Some("me"));
    assert_eq!(
        (done.state, done.exit_code, done.signal.as_deref()),
        (TaskState::Completed, Some(0), None)
    );
    // The first read holds only what came after the call's output.
    let read = h.exec.read_output("bash-1").unwrap();
    assert_eq!(
        (read.stdout.text.as_str(), read.stderr.text.as_str()),
        ("b\n", "f\n")
    );
    assert!(!read.stdout.lossy && !read.stderr.lossy);
    assert_eq!(read.task.state, TaskState::Completed);
    let again = h.exec.read_output("bash-1").unwrap();
    assert_eq!(
        (again.stdout.text.as_str(), again.stderr.text.as_str()),
        ("", "")
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(h.events.try_recv().unwrap_err(), TryRecvError::Empty);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_around_the_hand_over_is_neither_lost_nor_doubled() {
    let mut h = harness(|c| c.yield_after_ms = Some(YIELD_MS));
    let r = h
        .run("for i in $(seq 1 1000); do echo $i; echo $i >&2; sleep 0.002; done")
        .await;
    let task = r.yielded.expect("the run yielded").task;
    assert!(
        !r.stdout.text.is_empty(),
        "some output came before the limit"
    );
    h.next_event().await;
    let read = h.exec.read_output(&task.id).unwrap();
    assert!(
        !read.stdout.text.is_empty(),
        "some output came after the limit"
    );
    // Compared as line lists, so that a failure shows where the split went wrong.
    let lines = |a: &str, b: &str| -> Vec<u32> {
        (a.to_string() + b)
            .lines()
            .map(|l| l.parse().unwrap())
            .collect()
    };
    let all: Vec<u32> = (1..=1000).collect();
    let stdout = lines(&r.stdout.text, &read.stdout.text);
    let stderr = lines(&r.stderr.text, &read.stderr.text);
    assert!(
        stdout == all,
        "stdout split at {:?}",
        r.stdout.text.lines().last()
    );
    assert!(
        stderr == all,
        "stderr split at {:?}",
        r.stderr.text.lines().last()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_yielded_task_is_killed_like_any_task_and_by_shutdown() {
    let mut h = harness(|c| c.yield_after_ms = Some(YIELD_MS));
    let r = h.run("echo $$; sleep 30").await;
    let task = r.yielded.expect("the run yielded").task;
    let pid = pids(&r.stdout.text)[0];
    assert_eq!(h.exec.kill(&task.id), Ok(true));
    assert_eq!(h.exec.get(&task.id).unwrap().state, TaskState::Killed);
    let done = h.next_event().await;
    assert_eq!(
        (done.id.as_str(), done.state, done.signal.as_deref()),
        (task.id.as_str(), TaskState::Killed, Some("SIGTERM"))
    );
    assert!(!alive(pid));

    let r = h.run("echo $$; sleep 30").await;
    let pid = pids(&r.stdout.text)[0];
    assert!(r.yielded.is_some());
    h.exec.shutdown().await;
    assert!(!alive(pid), "shutdown kills and awaits a yielded task");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(h.events.try_recv().unwrap_err(), TryRecvError::Empty);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_task_slot_taken_the_command_stays_in_the_foreground() {
    let mut h = harness(|c| {
        c.yield_after_ms = Some(YIELD_MS);
        c.max_tasks = 1;
    });
    let blocker = h.start("sleep 30").await;
    let r = h.run("echo a; sleep 1; echo b").await;
    assert_eq!(r.yielded, None);
    assert_eq!((r.stdout.text.as_str(), r.exit_code), ("a\nb\n", Some(0)));
    // ... and its timeout still applies.
    let r = h.run_spec(owned_spec(&h, "echo a; sleep 30", 1000.0)).await;
    assert_eq!(r.yielded, None);
    assert!(r.timed_out);
    assert_eq!(r.stdout.text, "a\n");
    assert_eq!(h.exec.list().len(), 1, "no task was made");

    // A free slot again: the same command yields, and takes the next id.
    assert_eq!(h.exec.kill(&blocker.id), Ok(true));
    h.next_event().await;
    let r = h.run("echo a; sleep 1; echo b").await;
    assert_eq!(r.yielded.expect("the run yielded").task.id, "bash-2");
    // Now the yielded task holds the only slot.
    assert!(matches!(
        h.exec.start(h.spec("true")).await,
        Err(ExecError::TaskLimit(_))
    ));
    assert_eq!(h.next_event().await.id, "bash-2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_ending_before_the_limit_and_runs_without_it_end_in_the_call() {
    let h = harness(|c| c.yield_after_ms = Some(YIELD_MS));
    let r = h.run("echo quick").await;
    assert_eq!((r.yielded, r.stdout.text.as_str()), (None, "quick\n"));
    // A timeout before the limit still fires.
    let r = h.run_timeout("sleep 30", 100.0).await;
    assert!(r.timed_out && r.yielded.is_none());
    assert!(h.exec.list().is_empty());

    let h = harness(|_| {});
    let r = h.run("echo a; sleep 1; echo b").await;
    assert_eq!(r.yielded, None);
    assert_eq!(r.stdout.text, "a\nb\n");
    assert!(h.exec.list().is_empty());
}

/// Commands ending around the moment of the hand-over: each end is reported exactly once,
/// either in the call's result or, for one that was handed over, as its task's event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_racing_the_hand_over_is_reported_once() {
    let mut h = harness(|c| c.yield_after_ms = Some(300.0));
    let mut yielded = 0;
    for i in 0..12 {
        let r = h.run(&format!("sleep 0.{}; echo done", 290 + 2 * i)).await;
        match r.yielded {
            Some(y) => {
                yielded += 1;
                let done = h.next_event().await;
                assert_eq!(
                    (done.id, done.state, done.exit_code),
                    (y.task.id.clone(), TaskState::Completed, Some(0))
                );
                let read = h.exec.read_output(&y.task.id).unwrap();
                assert_eq!(r.stdout.text + &read.stdout.text, "done\n");
            }
            None => assert_eq!((r.exit_code, r.stdout.text.as_str()), (Some(0), "done\n")),
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(h.events.try_recv().unwrap_err(), TryRecvError::Empty);
    assert_eq!(h.exec.list().len(), yielded);
}

// What a sandbox denied, as the executor reports it (rendered by the tools: tests/sandbox.rs).

fn sandboxed(c: &mut Config) {
    c.sandbox = dsh_executor::SandboxConfig {
        mode: dsh_executor::SandboxMode::ReadOnly,
        tier: dsh_executor::TierPreference::Landlock,
        ..Default::default()
    };
}

fn write_denied(path: &str) -> dsh_executor::Denial {
    dsh_executor::Denial {
        access: dsh_executor::DeniedAccess::Write,
        target: path.to_string(),
        reason: dsh_executor::DenialReason::OutsideWritableRoots,
    }
}

/// A background task's denials come with the read after them, each once; a foreground call has
/// every denial of its command, distinct, the first three named and the rest counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denials_reach_the_result_and_each_read_once() {
    let mut h = harness(sandboxed);
    let r = h
        .run(
            "for p in a b a c d e; do echo x > /etc/dsh-denied-$p; done 2>/dev/null; \
             echo ok > /dev/null",
        )
        .await;
    assert_eq!(r.exit_code, Some(0));
    assert_eq!(
        r.denials.first,
        ["a", "b", "c"].map(|p| write_denied(&format!("/etc/dsh-denied-{p}")))
    );
    assert_eq!(r.denials.more, 2);

    let task = h
        .start("echo x > /etc/dsh-denied-bg1; echo first; sleep 0.5; echo x > /etc/dsh-denied-bg2")
        .await;
    // Read while it runs, and after its end: bg1 once, then bg2 once.
    let mut denials = Vec::new();
    let mut out = String::new();
    while !out.contains("first") {
        let read = h.exec.read_output(&task.id).unwrap();
        out.push_str(&read.stdout.text);
        denials.extend(read.denials.first);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(denials, [write_denied("/etc/dsh-denied-bg1")]);
    h.next_event().await;
    denials.extend(h.exec.read_output(&task.id).unwrap().denials.first);
    assert_eq!(
        denials,
        [
            write_denied("/etc/dsh-denied-bg1"),
            write_denied("/etc/dsh-denied-bg2")
        ]
    );
    assert!(h.exec.read_output(&task.id).unwrap().denials.is_empty());

    // Unsandboxed, the same command reports nothing (and writes: cleaned up).
    let plain = harness(|_| {});
    let r = plain
        .run("echo x > /etc/dsh-denied-plain; rm /etc/dsh-denied-plain")
        .await;
    assert!(r.denials.is_empty());
}

/// The sandboxed executor's temporary base: where its commands' `TMPDIR`s are.
async fn temporary_base(h: &Harness) -> std::path::PathBuf {
    let r = h.run("echo \"$TMPDIR\"").await;
    let tmpdir = std::path::PathBuf::from(r.stdout.text.trim_end());
    tmpdir.parent().expect("a TMPDIR in the base").to_path_buf()
}

/// An executor dropped without `shutdown` takes its sandbox's temporary base (every command's
/// `TMPDIR` lies in it) along: the helper factory, killed with it, would leave it behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_sandboxed_executor_leaves_no_temporary_base() {
    let h = harness(sandboxed);
    let base = temporary_base(&h).await;
    assert!(base.is_dir(), "{base:?}");
    drop(h);
    let deadline = Instant::now() + Duration::from_secs(10);
    while base.exists() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!base.exists(), "{base:?} left behind");
}

/// A temporary base that no host holds, of a pid that runs nothing (a host killed before its
/// shutdown), is removed when the next sandboxed executor starts; the bases of live executors,
/// and an unlocked one of a live pid, stay, and the live executor's commands still run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_hosts_temporary_base_goes_when_the_next_host_starts() {
    let h = harness(sandboxed);
    let base = temporary_base(&h).await;
    let parent = base.parent().expect("the bases' directory").to_path_buf();
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = gone.id();
    gone.wait().unwrap();
    let dead = parent.join(format!("{dead_pid}-0123456789ab"));
    std::fs::create_dir_all(dead.join("tmp-1/deep")).unwrap();
    std::fs::write(dead.join("tmp-1/deep/f"), "x").unwrap();
    let unlocked_live = parent.join(format!("{}-abcdefabcdef", std::process::id()));
    std::fs::create_dir_all(&unlocked_live).unwrap();
    // Held by a host whose pid means nothing here (one in another pid namespace).
    let held = parent.join(format!("{dead_pid}-fedcba987654"));
    std::fs::create_dir_all(&held).unwrap();
    let lock = std::fs::File::open(&held).unwrap();
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive).unwrap();
    let next = harness(sandboxed);
    assert!(!dead.exists(), "{dead:?} left behind");
    assert!(unlocked_live.exists(), "{unlocked_live:?} removed");
    assert!(held.exists(), "{held:?}, held, removed");
    std::fs::remove_dir(&held).unwrap();
    assert!(base.exists(), "{base:?} of a live executor removed");
    std::fs::remove_dir(&unlocked_live).unwrap();
    let r = h.run("echo ok > \"$TMPDIR/f\" && cat \"$TMPDIR/f\"").await;
    assert_eq!(r.stdout.text, "ok\n", "{r:?}");
    drop(next);
}

/// A command handed over to the background: the result names what was denied before, the
/// task's first read only what came after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_yielded_command_splits_its_denials_at_the_hand_over() {
    let mut h = harness(|c| {
        sandboxed(c);
        c.yield_after_ms = Some(400.0);
    });
    let r = h
        .run("echo x > /etc/dsh-denied-y1; sleep 1; echo x > /etc/dsh-denied-y2")
        .await;
    let yielded = r.yielded.expect("handed over");
    assert_eq!(r.denials.first, [write_denied("/etc/dsh-denied-y1")]);
    h.next_event().await;
    let read = h.exec.read_output(&yielded.task.id).unwrap();
    assert_eq!(read.denials.first, [write_denied("/etc/dsh-denied-y2")]);
}
