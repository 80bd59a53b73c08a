//! Starting the spawn helper factory runs no fork handler of the host process. A library the
//! host links may register one that is unsafe in a child forked from a multi-threaded process
//! (wasmtime's waits on a lazily made value that another thread may be making at that moment,
//! and then never returns); the factory is therefore started without `fork`.
//!
//! The only test of this binary: the child-side fork handler it registers would end any child
//! this process forks.

#[path = "support/exec.rs"]
mod exec;
#[allow(dead_code, unused_macros)]
#[path = "support/modes.rs"]
mod modes;

use dsh_executor::{Config, Executor};
use modes::Mode;

/// Ends a forked child at once, before it could exec anything.
extern "C" fn end_the_child() {
    // SAFETY: _exit is async-signal-safe and ends only the child.
    unsafe { libc::_exit(97) }
}

#[tokio::test]
async fn the_factory_starts_without_running_the_hosts_fork_handlers() {
    // A finite soft descriptor limit, which the factory is to pass on to commands (an
    // unlimited one needs nothing set for them).
    let now = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    rustix::process::setrlimit(
        rustix::process::Resource::Nofile,
        rustix::process::Rlimit {
            current: Some(now.maximum.map_or(1024, |hard| hard.min(1024))),
            maximum: now.maximum,
        },
    )
    .unwrap();
    // SAFETY: registering a handler that only calls _exit.
    assert_eq!(
        unsafe { libc::pthread_atfork(None, None, Some(end_the_child)) },
        0
    );
    let (exec, _events) = modes::executor_in(Mode::Subreaper, Config::default());
    let r = exec::run(exec.as_ref(), "ulimit -Sn; env | grep -c DSH_SPAWN_NOFILE").await;
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap();
    assert_eq!(r.stdout.text, format!("{soft}\n0\n"));
    exec.shutdown().await;
}
