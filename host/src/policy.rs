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
use std::time::{Duration, Instant};

use dsh_executor::{
    BoxFuture, ExecError, Executor, Limits, OutputMeter, Read, Refusal, RefusalKind, Request,
    RunResult, Spec, Task,
};
use dsh_policy::decide::{self, RefusedKind};
use dsh_policy::{Call, Finding, Grants, Policy, Verdict};
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

/// Read and check the policy files, in order; returns the policy and the files' `(name, text)`.
pub fn load(files: &[PathBuf]) -> Result<(Policy, Vec<(String, String)>), PolicyError> {
    let mut sources = Vec::with_capacity(files.len());
    for path in files {
        let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Read {
            path: path.clone(),
            source,
        })?;
        sources.push((path.display().to_string(), text));
    }
    let policy = Policy::from_sources(&sources).map_err(PolicyError::Invalid)?;
    Ok((policy, sources))
}

/// What a person is asked, and their answer: the engine's own, which the policy middleware
/// component uses as well.
pub use dsh_policy::decide::{Answer, Question};

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

/// How long a person's approval given through a middleware's `approval.ask` waits for the
/// command it approved to reach this host's own check.
const PASS_TTL: Duration = Duration::from_secs(60);

/// The permission rules in force and who to ask: what [`PolicyExecutor`] enforces, and what a
/// policy middleware component loaded with `--component` reaches through its `approval` import
/// (the same files, the session's grants, the same person). Cheap to clone.
#[derive(Clone)]
pub struct Rules {
    shared: Arc<Shared>,
}

struct Shared {
    policy: Policy,
    /// The files as read, `(name, text)`: a middleware component parses the same text.
    sources: Vec<(String, String)>,
    home: Option<String>,
    approvals: Approvals,
    ask_timeout: Duration,
    /// Commands a person approved through a middleware's question, single-use: this host's own
    /// check of the same command from the same session then does not ask again.
    passes: Mutex<Vec<Pass>>,
}

struct Pass {
    owner: Option<String>,
    command: String,
    cwd: String,
    until: std::time::Instant,
}

impl std::fmt::Debug for Rules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rules")
            .field("rules", &self.shared.policy.rule_count())
            .finish()
    }
}

/// What the person's answer came to.
enum Asked {
    Approved(Answer),
    Refused(Answer),
}

impl Rules {
    /// `policy` (read from `sources`); what needs approval is asked through `approvals`.
    pub fn new(
        policy: Policy,
        sources: Vec<(String, String)>,
        approvals: Approvals,
        ask_timeout: Duration,
    ) -> Self {
        let home = std::env::var("HOME")
            .ok()
            .filter(|h| Path::new(h).is_absolute());
        Self {
            shared: Arc::new(Shared {
                policy,
                sources,
                home,
                approvals,
                ask_timeout,
                passes: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The policy in force.
    pub fn policy(&self) -> &Policy {
        &self.shared.policy
    }

    /// The policy files, `(name, text)`, in order.
    pub fn sources(&self) -> &[(String, String)] {
        &self.shared.sources
    }

    /// `~` in rules and commands.
    pub fn home(&self) -> Option<&str> {
        self.shared.home.as_deref()
    }

    /// The rules the person behind `owner` allowed for the session.
    pub fn grants(&self, owner: Option<&str>) -> Vec<String> {
        let grants = self.shared.approvals.grants(owner);
        grants.rules().map(str::to_string).collect()
    }

    /// How long a person is given to answer.
    pub fn ask_timeout(&self) -> Duration {
        self.shared.ask_timeout
    }

    fn verdict(&self, owner: Option<&str>, command: &str, cwd: &str) -> Verdict {
        let call = Call {
            command,
            cwd,
            home: self.home(),
        };
        self.shared
            .policy
            .evaluate(&call, &self.shared.approvals.grants(owner))
    }

    /// A middleware's question about `command` in `cwd`, for the session `owner`. The host
    /// decides itself what to ask: the command is evaluated again here, and only what this
    /// host's policy would ask is put to the person; an approval leaves a single-use pass for
    /// this host's own check of the same command. What the policy allows or denies by itself is
    /// answered `once`, since that check follows and decides it (a denied command is refused
    /// there, with its rule).
    pub async fn ask(
        &self,
        owner: Option<&str>,
        command: &str,
        cwd: &str,
        abort: &CancellationToken,
    ) -> Result<Answer, ExecError> {
        let Verdict::Ask(finding) = self.verdict(owner, command, cwd) else {
            return Ok(Answer::Once);
        };
        match self.put(owner, command, cwd, &finding, abort).await? {
            Asked::Approved(answer) => {
                let pass = Pass {
                    owner: owner.map(str::to_string),
                    command: command.to_string(),
                    cwd: cwd.to_string(),
                    until: Instant::now() + PASS_TTL,
                };
                leave_pass(&mut lock(&self.shared.passes), pass, Instant::now());
                Ok(answer)
            }
            Asked::Refused(answer) => Ok(answer),
        }
    }

    /// Take the pass a person's approval left for exactly this command, if any.
    fn take_pass(&self, owner: Option<&str>, command: &str, cwd: &str) -> bool {
        let passes = &mut lock(&self.shared.passes);
        take_pass(passes, owner, command, cwd, Instant::now())
    }

    /// Put `finding` to the person behind `owner`; records a session grant.
    async fn put(
        &self,
        owner: Option<&str>,
        command: &str,
        cwd: &str,
        finding: &Finding,
        abort: &CancellationToken,
    ) -> Result<Asked, ExecError> {
        let approvals = &self.shared.approvals;
        let Some(approver) = approvals.approver(owner) else {
            return Ok(Asked::Refused(Answer::CannotAsk));
        };
        let question = decide::question(finding, command, cwd);
        let answer = tokio::select! {
            answer = approver.ask(question, self.shared.ask_timeout) => answer,
            _ = abort.cancelled() => return Err(ExecError::Aborted),
        };
        tracing::info!(answer = ?answer, part = %finding.part, "permission asked");
        Ok(match answer {
            Answer::Once => Asked::Approved(answer),
            Answer::Session => {
                if let (Some(owner), Some(rule)) = (owner, &finding.session_rule) {
                    approvals.grant(owner, rule);
                }
                Asked::Approved(answer)
            }
            other => Asked::Refused(other),
        })
    }

    /// Refuse `spec` unless the policy allows it, or a person approves it.
    async fn check(&self, spec: &Spec, abort: &CancellationToken) -> Result<(), ExecError> {
        let owner = spec.owner.as_deref();
        let finding = match self.verdict(owner, &spec.command, &spec.workdir) {
            Verdict::Allow => return Ok(()),
            Verdict::Deny(finding) => {
                return Err(ExecError::Refused(Box::new(refusal(finding, None))));
            }
            Verdict::Ask(finding) => finding,
        };
        if self.take_pass(owner, &spec.command, &spec.workdir) {
            return Ok(());
        }
        match self
            .put(owner, &spec.command, &spec.workdir, &finding, abort)
            .await?
        {
            Asked::Approved(_) => Ok(()),
            Asked::Refused(answer) => {
                let mut refused = refusal(finding, Some(answer));
                if answer == Answer::TimedOut {
                    refused.waited_ms = Some(self.waited_ms());
                }
                Err(ExecError::Refused(Box::new(refused)))
            }
        }
    }

    /// The ask timeout in whole milliseconds, as a refusal names it.
    pub fn waited_ms(&self) -> u32 {
        self.shared.ask_timeout.as_millis().min(u32::MAX as u128) as u32
    }
}

/// Keeps `pass` among `passes`, dropping those expired at `now`.
fn leave_pass(passes: &mut Vec<Pass>, pass: Pass, now: Instant) {
    passes.retain(|p| p.until > now);
    passes.push(pass);
}

/// Takes the pass left at `now` for exactly this command of this session, if any.
fn take_pass(
    passes: &mut Vec<Pass>,
    owner: Option<&str>,
    command: &str,
    cwd: &str,
    now: Instant,
) -> bool {
    passes.retain(|p| p.until > now);
    let found = passes
        .iter()
        .position(|p| p.owner.as_deref() == owner && p.command == command && p.cwd == cwd);
    found.map(|i| passes.swap_remove(i)).is_some()
}

/// An executor whose `run` and `start` obey a policy.
pub struct PolicyExecutor {
    inner: Arc<dyn Executor>,
    rules: Rules,
}

impl PolicyExecutor {
    /// `inner`, behind `rules`.
    pub fn new(inner: Arc<dyn Executor>, rules: Rules) -> Self {
        Self { inner, rules }
    }

    /// The policy in force.
    pub fn policy(&self) -> &Policy {
        self.rules.policy()
    }

    async fn check(&self, spec: &Spec, abort: &CancellationToken) -> Result<(), ExecError> {
        self.rules.check(spec, abort).await
    }
}

/// The refusal of a finding, in the executor's terms: the engine words it
/// ([`decide::refusal`]), the host adds how long it waited.
fn refusal(finding: Finding, answer: Option<Answer>) -> Refusal {
    let r = decide::refusal(finding, answer);
    Refusal {
        kind: match r.kind {
            RefusedKind::Denied => RefusalKind::Denied,
            RefusedKind::Declined => RefusalKind::Declined,
            RefusedKind::TimedOut => RefusalKind::TimedOut,
            RefusedKind::CannotAsk => RefusalKind::CannotAsk,
            RefusedKind::NotAnalysable => RefusalKind::NotAnalysable,
        },
        part: r.part,
        rule: r.rule,
        source: r.source,
        message: r.message,
        allow_rule: r.allow_rule,
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

    fn resolution(&self) -> Option<dsh_executor::Resolution> {
        self.inner.resolution()
    }

    fn end_session(&self, owner: &str) {
        self.inner.end_session(owner);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn pass(owner: &str, command: &str, until: Instant) -> Pass {
        Pass {
            owner: Some(owner.to_string()),
            command: command.to_string(),
            cwd: "/w".to_string(),
            until,
        }
    }

    /// A pass serves the same command of the same session once, and only before it expires.
    #[test]
    fn a_pass_is_single_use_bound_and_expires() {
        let t0 = Instant::now();
        let mut passes = Vec::new();
        leave_pass(&mut passes, pass("a", "git push", t0 + PASS_TTL), t0);
        // Another session, command or directory finds none.
        assert!(!take_pass(&mut passes, Some("b"), "git push", "/w", t0));
        assert!(!take_pass(&mut passes, None, "git push", "/w", t0));
        assert!(!take_pass(&mut passes, Some("a"), "git push -f", "/w", t0));
        assert!(!take_pass(&mut passes, Some("a"), "git push", "/x", t0));
        // Its own, once.
        let later = t0 + PASS_TTL - Duration::from_millis(1);
        assert!(take_pass(&mut passes, Some("a"), "git push", "/w", later));
        assert!(!take_pass(&mut passes, Some("a"), "git push", "/w", later));
        // Past its time it is gone, and leaving another drops it.
        leave_pass(&mut passes, pass("a", "git push", t0 + PASS_TTL), t0);
        assert!(!take_pass(
            &mut passes,
            Some("a"),
            "git push",
            "/w",
            t0 + PASS_TTL
        ));
        leave_pass(&mut passes, pass("a", "ls", t0 + PASS_TTL), t0);
        leave_pass(
            &mut passes,
            pass("a", "ls", t0 + 3 * PASS_TTL),
            t0 + 2 * PASS_TTL,
        );
        assert_eq!(passes.len(), 1);
    }
}
