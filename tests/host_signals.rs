//! A signal the host handles (tokio's SIGCHLD handler, say, when a replaced factory exits)
//! interrupts whatever blocking system call it lands in: no start may fail because of one.

#[path = "support/exec.rs"]
mod exec;
#[allow(dead_code)]
#[macro_use]
#[path = "support/modes.rs"]
mod modes;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use dsh_executor::{Config, Executor};
use modes::Mode;
use tokio_util::sync::CancellationToken;

both_modes!(starts_survive_signals_the_host_handles);

extern "C" fn ignore(_: libc::c_int) {}

/// While SIGUSR1 (handled, without `SA_RESTART`, so that every blocking call it lands in fails
/// with EINTR) hits the process every 50 µs, new executors probe their cgroups, start their
/// factories, fork helpers and run commands, six at a time: every command runs.
async fn starts_survive_signals_the_host_handles(mode: Mode) {
    if mode.unavailable() {
        return;
    }
    // SAFETY: a handler that does nothing, installed with a zeroed (empty) mask and no flags.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = ignore as *const () as usize;
        assert_eq!(
            libc::sigaction(libc::SIGUSR1, &action, std::ptr::null_mut()),
            0
        );
    }
    let stop = Arc::new(AtomicBool::new(false));
    let sender = {
        let stop = stop.clone();
        let me = std::process::id() as libc::pid_t;
        std::thread::spawn(move || {
            let mut sent = 0u64;
            while !stop.load(Ordering::SeqCst) {
                // To every thread in turn: a signal sent to the process goes to whichever thread
                // the kernel picks, mostly one that waits anyway.
                for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
                    let Some(tid) = task
                        .file_name()
                        .to_str()
                        .and_then(|t| t.parse::<libc::pid_t>().ok())
                    else {
                        continue;
                    };
                    // SAFETY: tgkill has no memory arguments; a thread that ended meanwhile
                    // gives ESRCH.
                    unsafe { libc::syscall(libc::SYS_tgkill, me, tid, libc::SIGUSR1) };
                    sent += 1;
                }
                std::thread::sleep(Duration::from_micros(50));
            }
            sent
        })
    };
    for round in 0..4 {
        let config = Config {
            grace_ms: 200.0,
            ..Config::default()
        };
        let (exec, _events) = modes::executor_in(mode, config);
        let runs: Vec<_> = (0..6)
            .map(|i| {
                let exec = exec.clone();
                tokio::spawn(async move {
                    let spec = exec::spec(exec.as_ref(), &format!("echo {i}"));
                    exec.run(spec, CancellationToken::new()).await
                })
            })
            .collect();
        for (i, run) in runs.into_iter().enumerate() {
            let r = run.await.unwrap().unwrap_or_else(|err| {
                panic!("{mode:?} mode, round {round}: command {i} did not run: {err}")
            });
            assert_eq!(r.stdout.text, format!("{i}\n"), "{mode:?} mode: {r:?}");
        }
        exec.shutdown().await;
    }
    stop.store(true, Ordering::SeqCst);
    assert!(sender.join().unwrap() > 100, "too few signals were sent");
}
