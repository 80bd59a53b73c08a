//! A foreground command that may become a background task while it runs
//! ([`Config::yield_after_ms`](crate::Config::yield_after_ms)).
//!
//! The command is driven in a task of its own from the start, so that the call can return while
//! the command keeps running, unrestarted, with the same outputs. Until a hand-over, it stops
//! when the call says so (timeout, abort) or when the call is dropped, as an inline run would;
//! after one, only when the task table's kill control fires, as a started task does.
//!
//! Whether the command's end belongs to the call or to a task is decided once, under one lock:
//! an end racing the hand-over is then neither lost (the task gets its end and its task-done
//! event) nor doubled (the call does not report it as well).

use std::mem;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::output::stream::Output;
use crate::spawn::Spawned;
use crate::tasks::lifecycle::{self, Outcome, Stop};
use crate::tasks::table::Control;
use crate::{ExecError, Task};

/// Who the command's end belongs to.
enum Fate {
    /// The call's, as long as it has not ended or been handed over.
    Call,
    /// It ended while it was the call's: the call gets the outcome.
    Ended,
    /// Handed over: it is this task now.
    Task(Task),
}

/// What the driver and the call share.
struct Link {
    fate: Mutex<Fate>,
    /// The kill control the command answers to once it is a task; made up front, so that the
    /// driver can watch it without a second hand-over step.
    control: Arc<Control>,
    /// Cancelled after a hand-over: the driver's stop becomes `control.kill`.
    handed: CancellationToken,
}

impl Link {
    fn fate(&self) -> MutexGuard<'_, Fate> {
        self.fate.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A running foreground command, held by its call.
pub(crate) struct Foreground {
    /// The call's stop; taken by the first [`stop`](Self::stop). Dropping it (the call gave up)
    /// stops the command as an abort does.
    stop: Option<oneshot::Sender<Stop>>,
    link: Arc<Link>,
    /// Yields the outcome when the end is the call's, `None` when it was a task's.
    driver: JoinHandle<Option<Outcome>>,
}

impl Foreground {
    /// Starts driving `spawned`. Should it be handed over, `task_ended` gets the task and its
    /// outcome when it ends (before the task's control reports it ended).
    pub(crate) fn launch(
        spawned: Spawned,
        outputs: [Arc<Output>; 2],
        grace: Duration,
        task_ended: impl FnOnce(&Task, Outcome) + Send + 'static,
    ) -> Self {
        let (stop_tx, stop_rx) = oneshot::channel();
        let link = Arc::new(Link {
            fate: Mutex::new(Fate::Call),
            control: Arc::new(Control::default()),
            handed: CancellationToken::new(),
        });
        let shared = link.clone();
        let driver = tokio::spawn(async move {
            let link = shared;
            let stop = async {
                tokio::select! {
                    // A hand-over is followed by the call dropping its stop sender: the hand-over
                    // must win when both are seen at once.
                    biased;
                    () = link.handed.cancelled() => {
                        link.control.kill.cancelled().await;
                        Stop::Kill
                    }
                    why = stop_rx => why.unwrap_or(Stop::Abort),
                }
            };
            let outcome = lifecycle::drive(spawned, outputs, grace, stop).await;
            let fate = mem::replace(&mut *link.fate(), Fate::Ended);
            match fate {
                Fate::Task(task) => {
                    task_ended(&task, outcome);
                    link.control.ended.cancel();
                    None
                }
                Fate::Call | Fate::Ended => Some(outcome),
            }
        });
        Self {
            stop: Some(stop_tx),
            link,
            driver,
        }
    }

    /// Stops the command (the first cause wins; later ones are ignored).
    pub(crate) fn stop(&mut self, why: Stop) {
        if let Some(stop) = self.stop.take() {
            // The driver is gone only once the command has ended: nothing left to stop.
            let _ = stop.send(why);
        }
    }

    /// Whether a stop was asked for.
    pub(crate) fn stopping(&self) -> bool {
        self.stop.is_none()
    }

    /// Waits for the end of a command that is still the call's. Await it to completion once.
    pub(crate) async fn outcome(&mut self) -> Result<Outcome, ExecError> {
        match (&mut self.driver).await {
            Ok(Some(outcome)) => Ok(outcome),
            Ok(None) => Err(ExecError::Internal(
                "the command was handed over to the task table".to_string(),
            )),
            Err(err) => Err(ExecError::Internal(format!(
                "the command's driver failed: {err}"
            ))),
        }
    }

    /// Hands the command over, unless it has ended or a stop was asked for. `adopt` makes it a
    /// task in the table, answering to the given control, and may decline (no free slot); it
    /// runs under the decision's lock, so the command cannot end unnoticed in between.
    pub(crate) fn hand_over<T>(
        &mut self,
        adopt: impl FnOnce(Arc<Control>) -> Option<(Task, T)>,
    ) -> Option<(Task, T)> {
        if self.stopping() {
            return None;
        }
        let mut fate = self.link.fate();
        if !matches!(*fate, Fate::Call) {
            return None;
        }
        let (task, extra) = adopt(self.link.control.clone())?;
        *fate = Fate::Task(task.clone());
        drop(fate);
        self.link.handed.cancel();
        Some((task, extra))
    }
}
