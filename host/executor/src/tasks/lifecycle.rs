//! One command from start to end, foreground or background: pump the output, wait for bash, stop
//! the tree when asked (timeout, abort, kill), otherwise drain the pipes for at most the grace
//! period and stop whatever is left, counting it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::containment::process::{Exit, ProcTree};
use crate::output::stream::{Output, pump};
use crate::spawn::Spawned;

/// Why a command was stopped before bash ended on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    Timeout,
    Abort,
    Kill,
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Outcome {
    /// How bash ended.
    pub(crate) exit: Exit,
    /// Set when the command was stopped; the first cause wins.
    pub(crate) stop: Option<Stop>,
    /// Processes still alive after bash exited and the drain ended, then stopped.
    pub(crate) leftovers: u32,
}

/// Runs a spawned command to its end. Returns once nothing of it is left and its output is in
/// `outputs` (stdout, stderr). If this future is dropped early, the tree is terminated.
pub(crate) async fn drive(
    spawned: Spawned,
    outputs: [Arc<Output>; 2],
    grace: Duration,
    stop: impl Future<Output = Stop>,
) -> Outcome {
    let Spawned {
        tree,
        stdout,
        stderr,
        leader,
    } = spawned;
    let mut guard = TerminateOnDrop {
        tree: Some(tree.clone()),
        grace,
    };
    let mut pumps = [
        Some(tokio::spawn(pump(stdout, outputs[0].clone()))),
        Some(tokio::spawn(pump(stderr, outputs[1].clone()))),
    ];
    let leader = leader.wait();
    tokio::pin!(leader, stop);

    let mut cause = None;
    let exit = tokio::select! {
        // Bash having ended already beats a timeout or abort that fires at the same moment.
        biased;
        exit = &mut leader => exit,
        why = &mut stop => {
            cause = Some(why);
            tree.terminate_in_background(grace);
            leader.await
        }
    };

    // Bash is done: its output may still be in the pipes, but background children holding the
    // pipes open must not hold the call too.
    let drained = tokio::time::timeout(grace, join(&mut pumps)).await.is_ok();
    let mut leftovers = 0;
    if cause.is_none() {
        let members = tree.members();
        if !members.is_empty() {
            leftovers = u32::try_from(members.len()).unwrap_or(u32::MAX);
            tree.terminate(grace).await;
        }
    }
    // The command has ended only when nothing of it is left.
    if tokio::time::timeout(grace, tree.wait_gone()).await.is_err() {
        tree.terminate(grace).await;
    }
    if !drained && tokio::time::timeout(grace, join(&mut pumps)).await.is_err() {
        // Only a process outside the tree could still hold a pipe: stop listening to it.
        for pump in pumps.iter().flatten() {
            pump.abort();
        }
        for output in &outputs {
            output.close();
        }
    }
    guard.tree = None;
    Outcome {
        exit,
        stop: cause,
        leftovers,
    }
}

/// Waits for the pumps still running; finished ones are forgotten so they are never polled again.
async fn join(pumps: &mut [Option<JoinHandle<()>>; 2]) {
    for slot in pumps.iter_mut() {
        if let Some(pump) = slot {
            let _ = pump.await;
            *slot = None;
        }
    }
}

/// Terminates the tree if the command's future is dropped before it ended (e.g. the caller gave
/// up on a foreground run): nothing may outlive the call that started it.
struct TerminateOnDrop {
    tree: Option<Arc<ProcTree>>,
    grace: Duration,
}

impl Drop for TerminateOnDrop {
    fn drop(&mut self) {
        if let Some(tree) = self.tree.take()
            && !tree.is_gone()
        {
            tree.terminate_in_background(self.grace);
        }
    }
}
