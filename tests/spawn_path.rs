//! The spawn path itself: a start that is stuck blocks no other call or timer, and the `fork`
//! fallback (used where `clone3` is missing) keeps every guarantee.
//!
//! Both use a wrapper in front of the real spawn helper, passed as `Config::spawn_helper`, the
//! way an operator passes one: a shell script that delays the helper, or that sets
//! `DSH_SPAWN_FORK=1` for it.

#[path = "support/exec.rs"]
mod exec;
#[allow(dead_code)]
#[macro_use]
#[path = "support/modes.rs"]
mod modes;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_executor::{Config, Executor, LocalExecutor, TaskState};
use modes::Mode;
use tokio_util::sync::CancellationToken;

const HELPER: &str = env!("CARGO_BIN_EXE_dsh-spawn-helper");

/// A script in `dir` that runs `prelude`, then execs the real helper with its arguments.
fn wrapper(dir: &Path, prelude: &str) -> PathBuf {
    let path = dir.join("helper-wrapper");
    std::fs::write(
        &path,
        format!("#!/bin/sh\n{prelude}\nexec {HELPER} \"$@\"\n"),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn executor(mode: Mode, helper: Option<PathBuf>) -> Arc<LocalExecutor> {
    let config = Config {
        grace_ms: 200.0,
        spawn_helper: helper,
        ..Config::default()
    };
    modes::executor_in(mode, config).0
}

/// One thread runs everything, as in `dsh-host`: if a start waited on it, the timer and the other
/// executor's call below would wait too.
#[tokio::test(flavor = "current_thread")]
async fn a_stuck_start_blocks_no_other_call_or_timer() {
    let dir = tempfile::tempdir().unwrap();
    // Every helper of this executor takes 3 s to come up: its command's start is stuck that long.
    let stuck = executor(Mode::Subreaper, Some(wrapper(dir.path(), "sleep 3")));
    let other = executor(Mode::Subreaper, None);
    let began = Instant::now();
    let spec = exec::spec(stuck.as_ref(), "echo late");
    let stuck_run = {
        let stuck = stuck.clone();
        tokio::spawn(async move { stuck.run(spec, CancellationToken::new()).await })
    };
    tokio::task::yield_now().await;

    let tick = Instant::now();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        tick.elapsed() < Duration::from_millis(1000),
        "a 50 ms timer took {:?} while a start was stuck",
        tick.elapsed()
    );
    let r = other
        .run(
            exec::spec(other.as_ref(), "echo ok"),
            CancellationToken::new(),
        )
        .await
        .expect("the other executor runs");
    assert_eq!(r.stdout.text, "ok\n");
    assert!(
        began.elapsed() < Duration::from_millis(2500),
        "another call waited {:?} for a stuck start",
        began.elapsed()
    );
    assert!(!stuck_run.is_finished(), "the stuck start was not stuck");

    let r = stuck_run
        .await
        .unwrap()
        .expect("the stuck command runs in the end");
    assert_eq!((r.stdout.text.as_str(), r.exit_code), ("late\n", Some(0)));
    assert!(began.elapsed() >= Duration::from_secs(3));
    stuck.shutdown().await;
    other.shutdown().await;
}

both_modes!(the_fork_fallback_keeps_the_guarantees);

/// The `fork` fallback (no `clone3`; the child joins its cgroup through `cgroup.procs`): a
/// command runs in a cgroup of its own (cgroup mode) with only 0, 1, 2 open, a TERM-proof timeout
/// ends in SIGKILL, an escapee is counted and stopped, and the next command starts clean.
async fn the_fork_fallback_keeps_the_guarantees(mode: Mode) {
    if mode.unavailable() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exec = executor(mode, Some(wrapper(dir.path(), "export DSH_SPAWN_FORK=1")));
    let run = |command: &str, timeout_ms: f64| {
        let mut spec = exec::spec(exec.as_ref(), command);
        spec.timeout_ms = timeout_ms;
        let exec = exec.clone();
        async move {
            exec.run(spec, CancellationToken::new())
                .await
                .expect("run succeeds")
        }
    };
    let r = run(
        "echo $DSH_SPAWN_FORK; grep '^0::' /proc/self/cgroup; \
         ls /proc/$$/fd; true",
        10_000.0,
    )
    .await;
    let lines: Vec<&str> = r.stdout.text.lines().collect();
    assert_eq!(lines.first(), Some(&"1"), "the fallback is in force: {r:?}");
    if mode == Mode::Cgroup {
        assert!(lines[1].contains("/cmd-"), "not in a command cgroup: {r:?}");
    }
    // bash's own descriptors, listed by a child of it.
    assert_eq!(&lines[2..], ["0", "1", "2"], "{r:?}");

    let began = Instant::now();
    let r = run("trap '' TERM; sleep 30", 300.0).await;
    assert!(r.timed_out, "{r:?}");
    assert_eq!(r.signal.as_deref(), Some("SIGKILL"), "{r:?}");
    assert!(began.elapsed() < Duration::from_secs(8));

    let pid_file = dir.path().join("escapee");
    let r = run(
        &format!("setsid sleep 30 & echo $! > {}", pid_file.display()),
        10_000.0,
    )
    .await;
    let escapee: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(r.leftover_processes, 1, "{r:?}");
    let stat = std::fs::read_to_string(format!("/proc/{escapee}/stat")).unwrap_or_default();
    assert!(
        stat.is_empty() || stat.contains(") Z "),
        "the escapee outlived its command: {stat}"
    );

    for _ in 0..3 {
        let r = run("echo ok", 10_000.0).await;
        assert_eq!(
            (r.stdout.text.as_str(), r.signal.as_deref()),
            ("ok\n", None),
            "{r:?}"
        );
    }
    let task = exec
        .start(exec::spec(exec.as_ref(), "sleep 30"))
        .await
        .expect("start");
    assert_eq!(exec.kill(&task.id), Ok(true));
    exec.shutdown().await;
    assert_eq!(exec.get(&task.id).unwrap().state, TaskState::Killed);
}

/// Sandboxed, the `fork` fallback hands the notifying filter's listener to the helper as the
/// `vfork` path does, though the helper runs on before bash's side has sent it: commands run
/// (the loader's opens are answered) and a denial is reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fork_fallback_supervises_a_sandboxed_command() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        grace_ms: 200.0,
        spawn_helper: Some(wrapper(dir.path(), "export DSH_SPAWN_FORK=1")),
        sandbox: dsh_executor::SandboxConfig {
            mode: dsh_executor::SandboxMode::ReadOnly,
            tier: dsh_executor::TierPreference::Landlock,
            ..Default::default()
        },
        ..Config::default()
    };
    let exec = modes::executor_in(Mode::Subreaper, config).0;
    for _ in 0..5 {
        let spec = exec::spec(
            exec.as_ref(),
            "echo $DSH_SPAWN_FORK; echo x > /etc/dsh-fork-denied",
        );
        let r = exec
            .run(spec, CancellationToken::new())
            .await
            .expect("run succeeds");
        assert_eq!(r.stdout.text, "1\n", "{r:?}");
        assert_eq!(r.exit_code, Some(1), "{r:?}");
        assert_eq!(
            r.denials.first,
            [dsh_executor::Denial {
                access: dsh_executor::DeniedAccess::Write,
                target: "/etc/dsh-fork-denied".to_string(),
                reason: dsh_executor::DenialReason::OutsideWritableRoots,
            }],
            "{r:?}"
        );
    }
}
