//! The calling session's reach, enforced by the host.
//!
//! The tools component checks ownership itself (tool contract §6), but that check is only as
//! good as the component: one loaded with `--component` can skip it. So a call's store does not
//! hold the shared executor and session router directly; it holds a [`SessionGuard`], bound to
//! the owner token the host passes to the guest as `caller.owner` for that call, and every
//! import goes through it. Whatever the guest does, it can then only:
//! - start or run commands as its own session (a `request` or `spec` naming another owner is
//!   refused before the executor sees it);
//! - see and act on its own session's tasks and on tasks without an owner, which the contract
//!   opens to all; a task of another session reads as an unknown one (`unknown-task`, as the
//!   executor answers for an id it never had), so neither its output, state, command nor owner
//!   token reaches the guest, and it cannot be read (which would consume its delta) or killed;
//! - inject only into its own session.
//!
//! A call without an owner token is no session: it reaches tasks without an owner only (the
//! contract: "a call without a token cannot touch an owned task") and injects into nobody.
//!
//! Task ids are never reused and a task's owner never changes, so a check made on a task's
//! record still holds when the operation on that id follows it.

use std::sync::Arc;

use dsh_executor::{ExecError, Executor, Limits, Read, Request, RunResult, Spec, Task};
use tokio_util::sync::CancellationToken;

use crate::inject::{Injection, SessionRouter, UnknownOwner};

/// What `owner-of` answers for a task of another session.
///
/// The tool contract (§3, §4, §6) has the tools tell the model `task <id> belongs to another
/// session` for such a task, and the tools learn it from `owner-of` naming an owner that is not
/// the caller's. Answering none would turn that message into `unknown bash task`; the real token
/// would give another session's secret away. So the guest gets a stand-in that is never the
/// caller's own token: that the task is someone else's, and nothing more. (That an id exists is
/// no secret anyway: ids count up per executor, so any session's own ids reveal earlier ones.)
const ANOTHER_SESSION: &str = "(another session)";

/// The executor and the session router as one call may use them.
pub struct SessionGuard {
    executor: Arc<dyn Executor>,
    sessions: SessionRouter,
    /// The calling session's owner token: the `caller.owner` of the call this store serves.
    owner: Option<String>,
}

impl SessionGuard {
    /// A guard for no session; [`SessionGuard::bind`] names the caller before a call.
    pub fn new(executor: Arc<dyn Executor>, sessions: SessionRouter) -> Self {
        Self {
            executor,
            sessions,
            owner: None,
        }
    }

    /// Serve the session with `owner` (or none): set by the host, never by the guest.
    pub fn bind(&mut self, owner: Option<String>) {
        self.owner = owner;
    }

    pub fn limits(&self) -> Limits {
        self.executor.limits()
    }

    pub fn resolve(&self, req: Request) -> Result<Spec, ExecError> {
        self.check_claim(req.owner.as_deref())?;
        self.executor.resolve(req)
    }

    pub async fn run(&self, spec: Spec, abort: CancellationToken) -> Result<RunResult, ExecError> {
        self.check_claim(spec.owner.as_deref())?;
        self.executor.run(spec, abort).await
    }

    pub async fn start(&self, spec: Spec) -> Result<Task, ExecError> {
        self.check_claim(spec.owner.as_deref())?;
        self.executor.start(spec).await
    }

    pub fn read_output(&self, id: &str) -> Result<Read, ExecError> {
        self.get(id)?;
        self.executor.read_output(id)
    }

    pub fn kill(&self, id: &str) -> Result<bool, ExecError> {
        self.get(id)?;
        self.executor.kill(id)
    }

    pub fn get(&self, id: &str) -> Result<Task, ExecError> {
        let task = self.executor.get(id)?;
        if may_touch(self.caller(), task.owner.as_deref()) {
            Ok(task)
        } else {
            // Exactly what the executor answers for an id it does not hold.
            Err(ExecError::UnknownTask(id.to_string()))
        }
    }

    pub fn owner_of(&self, id: &str) -> Option<String> {
        let owner = self.executor.owner_of(id)?;
        if may_touch(self.caller(), Some(&owner)) {
            Some(owner)
        } else {
            Some(stand_in(self.caller()))
        }
    }

    pub fn list(&self) -> Vec<Task> {
        let mut tasks = self.executor.list();
        tasks.retain(|task| may_touch(self.caller(), task.owner.as_deref()));
        tasks
    }

    /// Deliver an injection to the calling session only. Another owner is refused as if no
    /// session had it, the answer the guest gets for a closed session too.
    pub fn inject(&self, injection: Injection) -> Result<(), UnknownOwner> {
        if self.caller() != Some(injection.owner.as_str()) {
            tracing::warn!("refused an injection into a session other than the caller's");
            return Err(UnknownOwner(injection.owner));
        }
        self.sessions.inject(injection)
    }

    fn caller(&self) -> Option<&str> {
        self.owner.as_deref()
    }

    /// A request or spec must carry the caller's own token (none for a call without one), as the
    /// tools send it (tool contract §2: the task records the caller's owner token).
    ///
    /// Refused rather than rewritten: an honest guest never sends anything else, so for it both
    /// are the same, byte for byte; for any other, a refusal leaves nothing running under a
    /// premise the host changed, and every answer stays what was asked (a `spec` that `resolve`
    /// returns, a `task` that `start` returns carry the owner the guest sent).
    fn check_claim(&self, claimed: Option<&str>) -> Result<(), ExecError> {
        if claimed == self.caller() {
            return Ok(());
        }
        tracing::warn!("refused a command for an owner other than the calling session");
        Err(ExecError::InvalidRequest(
            "the owner must be the calling session's own".to_string(),
        ))
    }
}

/// Tool contract §6: a task without an owner is open to all, an owned one to its owner only (so
/// not to a call without a token).
fn may_touch(caller: Option<&str>, task_owner: Option<&str>) -> bool {
    task_owner.is_none() || task_owner == caller
}

/// [`ANOTHER_SESSION`], or, for a caller whose own token happens to be exactly that, another
/// stand-in: it must never read as the caller's.
fn stand_in(caller: Option<&str>) -> String {
    if caller == Some(ANOTHER_SESSION) {
        format!("{ANOTHER_SESSION}.")
    } else {
        ANOTHER_SESSION.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unowned_task_is_open_to_every_caller() {
        assert!(may_touch(None, None));
        assert!(may_touch(Some("a"), None));
    }

    #[test]
    fn an_owned_task_is_open_to_its_owner_only() {
        assert!(may_touch(Some("a"), Some("a")));
        assert!(!may_touch(Some("b"), Some("a")));
        assert!(!may_touch(None, Some("a")), "a call without a token");
    }

    #[test]
    fn the_stand_in_is_never_the_callers_token() {
        for caller in [None, Some("a"), Some(ANOTHER_SESSION), Some("")] {
            assert_ne!(Some(stand_in(caller).as_str()), caller);
        }
    }
}
