//! The calling session's reach, enforced by the host.
//!
//! The tools component checks ownership itself (tool contract §6), but that check is only as
//! good as the component: one loaded with `--component` can skip it. So a call's store does not
//! hold the shared executor and session router directly; it holds a [`SessionGuard`], bound to
//! the owner token the host passes to the guest as `caller.owner` for that call, and every
//! import goes through it. Whatever the guest does, it can then only:
//! - start or run commands as its own session (a `request` or `spec` naming another owner is
//!   refused before the executor sees it; a run that continues as a background task must have
//!   become a task of the caller's);
//! - see and act on its own session's tasks, under its session's own names for them (its first
//!   task is `bash-1` whatever other sessions started: `crate::task_names`), and on tasks without
//!   an owner, which the contract opens to all, under the executor's ids; another session's task
//!   cannot be named at all (`unknown-task`, as the executor answers for an id it never had), so
//!   neither its output, state, command, owner token nor existence reaches the guest;
//! - inject only into its own session.
//!
//! A call without an owner token is no session: it reaches tasks without an owner only (the
//! contract: "a call without a token cannot touch an owned task") and injects into nobody.
//!
//! Task ids are never reused and a task's owner never changes, so a check made on a task's
//! record still holds when the operation on that id follows it.

use std::sync::Arc;

use dsh_executor::{
    ExecError, Executor, Limits, OutputMeter, Read, Request, RunResult, Spec, Task,
};
use tokio_util::sync::CancellationToken;

use crate::inject::{Injection, SessionRouter, UnknownOwner};

/// What `owner-of` answers a call without an owner token for an owned task.
///
/// The tool contract (§3, §4, §6) has the tools tell the model `task <id> belongs to another
/// session` for such a task, and the tools learn it from `owner-of` naming an owner that is not
/// the caller's. Answering none would turn that message into `unknown bash task`; the real token
/// would give another session's secret away. So the guest gets a stand-in that is never the
/// caller's own token: that the task is someone else's, and nothing more. (A session is never
/// told even that: it names only its own tasks.)
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

    /// Fails (a trap) unless `owner` is the calling session's: for imports other than the
    /// executor's, which have no error case of their own for it.
    pub fn check_own(&self, owner: Option<&str>) -> wasmtime::Result<()> {
        if owner == self.owner.as_deref() {
            Ok(())
        } else {
            wasmtime::bail!("the component spoke for another session than the caller's")
        }
    }

    pub fn limits(&self) -> Limits {
        self.executor.limits()
    }

    pub fn resolve(&self, req: Request) -> Result<Spec, ExecError> {
        self.check_claim(req.owner.as_deref())?;
        self.executor.resolve(req)
    }

    pub async fn run(
        &self,
        spec: Spec,
        abort: CancellationToken,
        meter: OutputMeter,
    ) -> Result<RunResult, ExecError> {
        self.check_claim(spec.owner.as_deref())?;
        let mut result = self.executor.run_metered(spec, abort, meter).await?;
        if let Some(yielded) = &mut result.yielded {
            if yielded.task.owner.as_deref() != self.caller() {
                // The executor gives the task the spec's owner, the caller's (checked above);
                // any other is an executor fault. Such a task is out of the caller's reach, and
                // its notice would go elsewhere: stop it rather than hand it to the guest.
                tracing::error!(task = %yielded.task.id, "a yielded task is not the caller's; killed");
                let _ = self.executor.kill(&yielded.task.id);
                return Err(ExecError::Internal(
                    "the command continued as a task of another session; it was stopped"
                        .to_string(),
                ));
            }
            yielded.task = self.shown(yielded.task.clone());
        }
        Ok(result)
    }

    pub async fn start(&self, spec: Spec) -> Result<Task, ExecError> {
        self.check_claim(spec.owner.as_deref())?;
        let task = self.executor.start(spec).await?;
        Ok(self.shown(task))
    }

    pub fn read_output(&self, id: &str) -> Result<Read, ExecError> {
        let task = self.reach(id)?;
        let mut read = self.executor.read_output(&task).map_err(as_unknown(id))?;
        read.task = self.shown(read.task);
        Ok(read)
    }

    pub fn kill(&self, id: &str) -> Result<bool, ExecError> {
        let task = self.reach(id)?;
        self.executor.kill(&task).map_err(as_unknown(id))
    }

    pub fn get(&self, id: &str) -> Result<Task, ExecError> {
        let task = self.reach(id)?;
        let task = self.executor.get(&task).map_err(as_unknown(id))?;
        Ok(self.shown(task))
    }

    pub fn owner_of(&self, id: &str) -> Option<String> {
        let Some(caller) = self.caller() else {
            // No session: the executor's ids, and a stand-in for an owned task.
            return self.executor.owner_of(id).map(|_| stand_in(None));
        };
        // A session names only its own tasks and those without an owner: another session's
        // task cannot be named, and reads as unknown.
        let task = self.executor_id(caller, id)?;
        self.executor.owner_of(&task)
    }

    pub fn list(&self) -> Vec<Task> {
        let mut tasks = self.executor.list();
        tasks.retain(|task| may_touch(self.caller(), task.owner.as_deref()));
        tasks.into_iter().map(|task| self.shown(task)).collect()
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

    /// The executor's id of the task the caller calls `id`, where the caller may touch it;
    /// else the executor's own answer for an id it does not hold.
    fn reach(&self, id: &str) -> Result<String, ExecError> {
        let task = match self.caller() {
            None => Some(id.to_string()),
            Some(caller) => self.executor_id(caller, id),
        };
        let task = task.ok_or_else(|| ExecError::UnknownTask(id.to_string()))?;
        match self.executor.get(&task) {
            Ok(t) if may_touch(self.caller(), t.owner.as_deref()) => Ok(task),
            _ => Err(ExecError::UnknownTask(id.to_string())),
        }
    }

    /// The executor's id of the task session `caller` calls `id`: one of its own names, else
    /// the executor's id of a task without an owner (open to all, under the executor's id).
    fn executor_id(&self, caller: &str, id: &str) -> Option<String> {
        let names = self.sessions.names();
        names.resolve(caller, id).or_else(|| {
            let unowned = self.executor.get(id).is_ok_and(|t| t.owner.is_none());
            unowned.then(|| id.to_string())
        })
    }

    /// An executor's task as the caller sees it: the caller's own under its session's name.
    fn shown(&self, mut task: Task) -> Task {
        if let Some(caller) = self.caller()
            && task.owner.as_deref() == Some(caller)
        {
            // Named only while the session is open: a call that outlives its session names
            // nothing (which would keep names of an ended session for good).
            task.id = self.sessions.name_task(caller, &task.id);
            let names = self.sessions.names();
            if names.wants_pruning(caller) {
                names.prune(caller, |id| self.executor.get(id).is_ok());
            }
        }
        task
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

/// Names an unknown task as the caller named it (the executor named its own id).
fn as_unknown(id: &str) -> impl Fn(ExecError) -> ExecError + '_ {
    move |e| match e {
        ExecError::UnknownTask(_) => ExecError::UnknownTask(id.to_string()),
        other => other,
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

    /// An executor holding `bash-1` (owner `a`) and `bash-2` (no owner) that logs which
    /// operations reached it.
    #[derive(Default)]
    struct Recording {
        reached: std::sync::Mutex<Vec<String>>,
    }

    impl Recording {
        fn task(id: &str) -> Option<Task> {
            let owner = match id {
                "bash-1" => Some("a".to_string()),
                "bash-2" => None,
                _ => return None,
            };
            Some(Task {
                id: id.into(),
                command: "sleep 30".into(),
                owner,
                state: dsh_executor::TaskState::Running,
                exit_code: None,
                signal: None,
                relocated: None,
            })
        }

        fn log(&self, op: &str, id: &str) {
            self.reached.lock().unwrap().push(format!("{op} {id}"));
        }

        fn reached(&self) -> Vec<String> {
            self.reached.lock().unwrap().clone()
        }
    }

    fn unknown(id: &str) -> ExecError {
        ExecError::UnknownTask(id.to_string())
    }

    impl Executor for Recording {
        fn limits(&self) -> Limits {
            unreachable!()
        }
        fn resolve(&self, _: Request) -> Result<Spec, ExecError> {
            unreachable!("a claim for another owner never reaches the executor")
        }
        /// Runs as a faulty executor would: the command continues as `bash-1`, owned by `a`,
        /// whoever asked.
        fn run(
            &self,
            spec: Spec,
            _: CancellationToken,
        ) -> dsh_executor::BoxFuture<'_, Result<RunResult, ExecError>> {
            self.log("run", &spec.command);
            let result = RunResult {
                exit_code: None,
                signal: None,
                timed_out: false,
                aborted: false,
                timeout_ms: spec.timeout_ms,
                stdout: Default::default(),
                stderr: Default::default(),
                leftover_processes: 0,
                yielded: Some(dsh_executor::Yielded {
                    task: Self::task("bash-1").unwrap(),
                    after_ms: 100.0,
                }),
                denials: Default::default(),
                relocated: None,
            };
            Box::pin(async move { Ok(result) })
        }
        fn start(&self, _: Spec) -> dsh_executor::BoxFuture<'_, Result<Task, ExecError>> {
            unreachable!("a claim for another owner never reaches the executor")
        }
        fn read_output(&self, id: &str) -> Result<Read, ExecError> {
            self.log("read-output", id);
            Err(unknown(id))
        }
        fn kill(&self, id: &str) -> Result<bool, ExecError> {
            self.log("kill", id);
            Ok(true)
        }
        fn owner_of(&self, id: &str) -> Option<String> {
            Self::task(id)?.owner
        }
        fn get(&self, id: &str) -> Result<Task, ExecError> {
            Self::task(id).ok_or_else(|| unknown(id))
        }
        fn list(&self) -> Vec<Task> {
            ["bash-1", "bash-2"]
                .into_iter()
                .filter_map(Self::task)
                .collect()
        }
        fn shutdown(&self) -> dsh_executor::BoxFuture<'_, ()> {
            Box::pin(async {})
        }
    }

    fn guard(owner: Option<&str>) -> (Arc<Recording>, SessionGuard) {
        let executor = Arc::new(Recording::default());
        let sessions = SessionRouter::default();
        // The session stays open for the test (its guard names tasks only while it is).
        if let Some(owner) = owner {
            std::mem::forget(sessions.open_as(owner));
        }
        let mut guard = SessionGuard::new(executor.clone(), sessions);
        guard.bind(owner.map(str::to_string));
        (executor, guard)
    }

    #[test]
    fn a_foreign_task_is_unknown_and_never_reaches_the_executor() {
        for caller in [Some("b"), None] {
            let (executor, guard) = guard(caller);
            assert_eq!(guard.read_output("bash-1").unwrap_err(), unknown("bash-1"));
            assert_eq!(guard.kill("bash-1"), Err(unknown("bash-1")));
            assert_eq!(guard.get("bash-1"), Err(unknown("bash-1")));
            // A session cannot name another's task at all; a call without a session learns
            // that the id is someone's, not whose.
            let owner = caller.map_or(Some(ANOTHER_SESSION), |_| None);
            assert_eq!(guard.owner_of("bash-1").as_deref(), owner);
            let listed: Vec<String> = guard.list().into_iter().map(|t| t.id).collect();
            assert_eq!(listed, ["bash-2"]);
            // Unknown ids get the executor's own answer, and do not reach its operations either.
            assert_eq!(guard.kill("bash-9"), Err(unknown("bash-9")));
            assert!(executor.reached().is_empty(), "{:?}", executor.reached());
        }
    }

    #[test]
    fn own_and_unowned_tasks_reach_the_executor() {
        let (executor, guard) = guard(Some("a"));
        // The session has not seen its task yet: the executor's id is no name of its own.
        assert_eq!(guard.kill("bash-1"), Err(unknown("bash-1")));
        // Listed, it is named (its session's first: bash-1).
        assert_eq!(guard.list()[0].id, "bash-1");
        assert_eq!(guard.kill("bash-1"), Ok(true));
        assert_eq!(guard.kill("bash-2"), Ok(true));
        assert_eq!(guard.owner_of("bash-1").as_deref(), Some("a"));
        assert_eq!(guard.owner_of("bash-2"), None);
        assert_eq!(guard.list().len(), 2);
        assert_eq!(executor.reached(), ["kill bash-1", "kill bash-2"]);
    }

    #[tokio::test]
    async fn a_claim_for_another_owner_never_reaches_the_executor() {
        let refused =
            || ExecError::InvalidRequest("the owner must be the calling session's own".into());
        let spec = |owner: Option<&str>| Spec {
            command: "true".into(),
            workdir: "/".into(),
            timeout_ms: 1000.0,
            owner: owner.map(str::to_string),
        };
        for (caller, claim) in [(Some("b"), Some("a")), (None, Some("a")), (Some("b"), None)] {
            let (executor, guard) = guard(caller);
            let request = Request {
                command: "true".into(),
                workdir: None,
                timeout_ms: None,
                owner: claim.map(str::to_string),
            };
            assert_eq!(guard.resolve(request), Err(refused()));
            assert_eq!(guard.start(spec(claim)).await, Err(refused()));
            let run = guard
                .run(spec(claim), CancellationToken::new(), OutputMeter::new())
                .await;
            assert_eq!(run.unwrap_err(), refused());
            assert!(executor.reached().is_empty(), "{:?}", executor.reached());
        }
    }

    #[tokio::test]
    async fn a_run_continuing_as_a_task_of_another_owner_is_stopped() {
        let spec = |owner: Option<&str>| Spec {
            command: "sleep 30".into(),
            workdir: "/".into(),
            timeout_ms: 1000.0,
            owner: owner.map(str::to_string),
        };
        for caller in [Some("b"), None] {
            let (executor, guard) = guard(caller);
            let run = guard
                .run(spec(caller), CancellationToken::new(), OutputMeter::new())
                .await;
            assert!(matches!(run, Err(ExecError::Internal(_))), "{run:?}");
            assert_eq!(executor.reached(), ["run sleep 30", "kill bash-1"]);
        }
        let (executor, guard) = guard(Some("a"));
        let run = guard
            .run(
                spec(Some("a")),
                CancellationToken::new(),
                OutputMeter::new(),
            )
            .await;
        assert_eq!(run.unwrap().yielded.unwrap().task.id, "bash-1");
        assert_eq!(executor.reached(), ["run sleep 30"]);
    }

    #[test]
    fn inject_reaches_the_callers_session_only() {
        let sessions = SessionRouter::default();
        let mut a = sessions.open(None);
        let b = sessions.open(None);
        let injection = |owner: &str| Injection {
            owner: owner.into(),
            text: "notice".into(),
            source: crate::inject::Source {
                kind: "plugin".into(),
                plugin: None,
            },
        };
        for caller in [Some(b.owner()), None] {
            let mut guard = SessionGuard::new(Arc::new(Recording::default()), sessions.clone());
            guard.bind(caller.map(str::to_string));
            let refused = guard.inject(injection(a.owner()));
            assert_eq!(refused, Err(UnknownOwner(a.owner().to_string())));
        }
        assert!(a.drain_injections().is_empty());
        let mut guard = SessionGuard::new(Arc::new(Recording::default()), sessions.clone());
        guard.bind(Some(a.owner().to_string()));
        assert_eq!(guard.inject(injection(a.owner())), Ok(()));
        assert_eq!(a.drain_injections().len(), 1);
    }

    #[test]
    fn the_stand_in_is_never_the_callers_token() {
        for caller in [None, Some("a"), Some(ANOTHER_SESSION), Some("")] {
            assert_ne!(Some(stand_in(caller).as_str()), caller);
        }
    }
}
