//! `--policy FILE`: permission rules enforced by the host, in front of whatever executor runs
//! the commands.
//!
//! [`PolicyExecutor`] wraps the executor: `run` and `start` (a foreground call, a background
//! one, one with any `workdir`) are decided by `dsh-policy` on the spec that would run, before
//! the executor sees it, and a refused one fails with [`ExecError::Refused`], which the tools
//! word for the model. The guest reaches the executor only through this wrapper (behind its
//! session's guard), so no component can skip the check. The other operations pass through.
//!
//! A command that needs approval is put to the person behind its session, through the
//! [`Approver`] the front end registered for that session ([`Approvals`]; `dsh-host mcp` asks
//! with MCP elicitation). A session without one, an approver that cannot ask, and no answer
//! within the time allowed all refuse the command; nothing runs before an answer. "For this
//! session" answers become grants of that session only, which end with it and never lift a deny.
//! The question goes to the person, never to the model: no tool call can answer it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_executor::{
    BoxFuture, ExecError, Executor, Limits, OutputMeter, Read, Refusal, RefusalKind, Request,
    RunResult, Spec, Task,
};
use dsh_policy::{Call, Cause, Finding, Grants, Policy, Verdict};
use tokio_util::sync::CancellationToken;

/// Why the policy files could not be used (the host does not start).
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// A file could not be read.
    #[error("--policy {path}: {source}")]
    Read {
        /// The file as named.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A file did not parse, or holds an unknown key or a bad rule.
    #[error("--policy {0}")]
    Invalid(dsh_policy::LoadError),
}

/// Read and check the policy files, in order.
pub fn load(files: &[PathBuf]) -> Result<Policy, PolicyError> {
    let mut sources = Vec::with_capacity(files.len());
    for path in files {
        let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Read {
            path: path.clone(),
            source,
        })?;
        sources.push((path.display().to_string(), text));
    }
    Policy::from_sources(&sources).map_err(PolicyError::Invalid)
}

/// What a person is asked.
#[derive(Debug, Clone)]
pub struct Question {
    /// The whole command, every line of it.
    pub command: String,
    /// Where it would run.
    pub cwd: String,
    /// The parts of it that need approval.
    pub parts: Vec<String>,
    /// The rule that asked (`Bash(git push *)`), none for the policy's default or a part that
    /// cannot be analysed.
    pub rule: Option<String>,
    /// Where that rule or default is set (`FILE:LINE`).
    pub source: Option<String>,
    /// Why it cannot be analysed, if that is why.
    pub construct: Option<String>,
    /// What approving it "for this session" grants; none when only "once" is possible.
    pub session_rule: Option<String>,
}

/// A person's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Run it, this once.
    Once,
    /// Run it, and allow [`Question::session_rule`] for the rest of the session.
    Session,
    /// Do not run it.
    Declined,
    /// No answer in time.
    TimedOut,
    /// Nobody can be asked (the client cannot show a question).
    CannotAsk,
}

/// Asks the person behind one session.
pub trait Approver: Send + Sync {
    /// Put `question` to the person; resolves with the answer within `timeout`.
    fn ask(&self, question: Question, timeout: Duration) -> BoxFuture<'static, Answer>;
}

/// The approvers of the open sessions, by owner token, and the grants each session's person made.
#[derive(Clone, Default)]
pub struct Approvals {
    inner: Arc<Mutex<HashMap<String, SessionApprovals>>>,
}

impl std::fmt::Debug for Approvals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Approvals")
            .field("sessions", &lock(&self.inner).len())
            .finish()
    }
}

struct SessionApprovals {
    approver: Arc<dyn Approver>,
    grants: Grants,
}

/// Holds a session's approver in place; dropping it (the session ended) removes the approver
/// and the session's grants.
pub struct Registration {
    approvals: Approvals,
    owner: String,
}

impl Drop for Registration {
    fn drop(&mut self) {
        lock(&self.approvals.inner).remove(&self.owner);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Approvals {
    /// Ask the person behind the session `owner` through `approver`, until the registration
    /// is dropped.
    pub fn register(&self, owner: &str, approver: Arc<dyn Approver>) -> Registration {
        lock(&self.inner).insert(
            owner.to_string(),
            SessionApprovals {
                approver,
                grants: Grants::default(),
            },
        );
        Registration {
            approvals: self.clone(),
            owner: owner.to_string(),
        }
    }

    fn grants(&self, owner: Option<&str>) -> Grants {
        owner
            .and_then(|o| lock(&self.inner).get(o).map(|s| s.grants.clone()))
            .unwrap_or_default()
    }

    fn approver(&self, owner: Option<&str>) -> Option<Arc<dyn Approver>> {
        owner.and_then(|o| lock(&self.inner).get(o).map(|s| s.approver.clone()))
    }

    fn grant(&self, owner: &str, rule: &str) {
        if let Some(session) = lock(&self.inner).get_mut(owner)
            && let Err(e) = session.grants.add(rule)
        {
            tracing::warn!(rule, "a session grant does not parse: {e}");
        }
    }
}

/// The longest a person is given to answer, unless `--policy-ask-timeout-ms` says otherwise:
/// below the 60 s after which common MCP clients give up on a request.
pub const ASK_TIMEOUT: Duration = Duration::from_secs(50);

/// An executor whose `run` and `start` obey a policy.
pub struct PolicyExecutor {
    inner: Arc<dyn Executor>,
    policy: Policy,
    home: Option<String>,
    approvals: Approvals,
    ask_timeout: Duration,
}

impl PolicyExecutor {
    /// `inner`, behind `policy`; what needs approval is asked through `approvals`.
    pub fn new(
        inner: Arc<dyn Executor>,
        policy: Policy,
        approvals: Approvals,
        ask_timeout: Duration,
    ) -> Self {
        let home = std::env::var("HOME")
            .ok()
            .filter(|h| Path::new(h).is_absolute());
        Self {
            inner,
            policy,
            home,
            approvals,
            ask_timeout,
        }
    }

    /// The policy in force.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Refuse `spec` unless the policy allows it, or a person approves it.
    async fn check(&self, spec: &Spec, abort: &CancellationToken) -> Result<(), ExecError> {
        let call = Call {
            command: &spec.command,
            cwd: &spec.workdir,
            home: self.home.as_deref(),
        };
        let owner = spec.owner.as_deref();
        let finding = match self.policy.evaluate(&call, &self.approvals.grants(owner)) {
            Verdict::Allow => return Ok(()),
            Verdict::Deny(finding) => {
                return Err(ExecError::Refused(Box::new(refusal(finding, None))));
            }
            Verdict::Ask(finding) => finding,
        };
        let Some(approver) = self.approvals.approver(owner) else {
            return Err(ExecError::Refused(Box::new(refusal(
                finding,
                Some(Answer::CannotAsk),
            ))));
        };
        let (rule, source, construct) = match &finding.cause {
            Cause::Rule { rule, source, .. } => (Some(rule.clone()), Some(source.clone()), None),
            Cause::Default { source } => (None, Some(source.clone()), None),
            Cause::Unanalysable { construct } => (None, None, Some(construct.clone())),
        };
        let question = Question {
            command: spec.command.clone(),
            cwd: spec.workdir.clone(),
            parts: finding.pending.clone(),
            rule,
            source,
            construct,
            session_rule: finding.session_rule.clone(),
        };
        let answer = tokio::select! {
            answer = approver.ask(question, self.ask_timeout) => answer,
            _ = abort.cancelled() => return Err(ExecError::Aborted),
        };
        tracing::info!(answer = ?answer, part = %finding.part, "permission asked");
        match answer {
            Answer::Once => Ok(()),
            Answer::Session => {
                if let (Some(owner), Some(rule)) = (owner, &finding.session_rule) {
                    self.approvals.grant(owner, rule);
                }
                Ok(())
            }
            other => {
                let mut refused = refusal(finding, Some(other));
                if other == Answer::TimedOut {
                    refused.waited_ms =
                        Some(self.ask_timeout.as_millis().min(u32::MAX as u128) as u32);
                }
                Err(ExecError::Refused(Box::new(refused)))
            }
        }
    }
}

/// The refusal of a finding: denied (or not analysable) without an answer, else as answered.
fn refusal(finding: Finding, answer: Option<Answer>) -> Refusal {
    let (kind, rule, source, message) = match finding.cause {
        Cause::Rule {
            rule,
            source,
            message,
        } => (RefusalKind::Denied, Some(rule), Some(source), message),
        Cause::Default { source } => (RefusalKind::Denied, None, Some(source), None),
        Cause::Unanalysable { construct } => {
            (RefusalKind::NotAnalysable, None, None, Some(construct))
        }
    };
    let kind = match answer {
        None => kind,
        Some(Answer::Declined | Answer::Once | Answer::Session) => RefusalKind::Declined,
        Some(Answer::TimedOut) => RefusalKind::TimedOut,
        Some(Answer::CannotAsk) => RefusalKind::CannotAsk,
    };
    let asked = answer.is_some();
    Refusal {
        kind,
        part: finding.part,
        // An ask rule's message is for the person asked; the model gets the rule and its line.
        message: if asked && rule.is_some() {
            None
        } else {
            message
        },
        rule,
        source,
        allow_rule: if kind == RefusalKind::CannotAsk {
            finding.allow_rule
        } else {
            None
        },
        waited_ms: None,
    }
}

impl Executor for PolicyExecutor {
    fn limits(&self) -> Limits {
        self.inner.limits()
    }

    fn resolve(&self, req: Request) -> Result<Spec, ExecError> {
        self.inner.resolve(req)
    }

    fn run(
        &self,
        spec: Spec,
        abort: CancellationToken,
    ) -> BoxFuture<'_, Result<RunResult, ExecError>> {
        self.run_metered(spec, abort, OutputMeter::new())
    }

    fn run_metered(
        &self,
        spec: Spec,
        abort: CancellationToken,
        meter: OutputMeter,
    ) -> BoxFuture<'_, Result<RunResult, ExecError>> {
        Box::pin(async move {
            self.check(&spec, &abort).await?;
            self.inner.run_metered(spec, abort, meter).await
        })
    }

    fn start(&self, spec: Spec) -> BoxFuture<'_, Result<Task, ExecError>> {
        Box::pin(async move {
            // A background start has no abort of its own: only an answer ends the wait.
            self.check(&spec, &CancellationToken::new()).await?;
            self.inner.start(spec).await
        })
    }

    fn read_output(&self, id: &str) -> Result<Read, ExecError> {
        self.inner.read_output(id)
    }

    fn kill(&self, id: &str) -> Result<bool, ExecError> {
        self.inner.kill(id)
    }

    fn owner_of(&self, id: &str) -> Option<String> {
        self.inner.owner_of(id)
    }

    fn get(&self, id: &str) -> Result<Task, ExecError> {
        self.inner.get(id)
    }

    fn list(&self) -> Vec<Task> {
        self.inner.list()
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        self.inner.shutdown()
    }
}
