//! `--policy FILE`: permission rules enforced by the host, in front of whatever executor runs
//! the commands.
//!
//! [`PolicyExecutor`] wraps the executor: `run` and `start` (a foreground call, a background
//! one, one with any `workdir`) are decided by `dsh-policy` on the spec that would run, before
//! the executor sees it, and a refused one fails with [`ExecError::Refused`], which the tools
//! word for the model. The guest reaches the executor only through this wrapper (behind its
//! session's guard), so no component can skip the check. The other operations pass through.
//!
//! A command that needs approval is refused as one nobody can be asked about, with the rule line
//! that would allow it: no front end asks a person yet.

use std::path::{Path, PathBuf};
use std::sync::Arc;

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

/// An executor whose `run` and `start` obey a policy.
pub struct PolicyExecutor {
    inner: Arc<dyn Executor>,
    policy: Policy,
    home: Option<String>,
}

impl PolicyExecutor {
    /// `inner`, behind `policy`.
    pub fn new(inner: Arc<dyn Executor>, policy: Policy) -> Self {
        let home = std::env::var("HOME")
            .ok()
            .filter(|h| Path::new(h).is_absolute());
        Self {
            inner,
            policy,
            home,
        }
    }

    /// The policy in force.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Refuse `spec` unless the policy allows it.
    fn check(&self, spec: &Spec) -> Result<(), ExecError> {
        let call = Call {
            command: &spec.command,
            cwd: &spec.workdir,
            home: self.home.as_deref(),
        };
        match self.policy.evaluate(&call, &Grants::default()) {
            Verdict::Allow => Ok(()),
            Verdict::Deny(finding) => Err(ExecError::Refused(refusal(finding, false))),
            Verdict::Ask(finding) => Err(ExecError::Refused(refusal(finding, true))),
        }
    }
}

/// The refusal of a finding: denied (or not analysable), or one nobody could be asked about.
fn refusal(finding: Finding, asked: bool) -> Refusal {
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
    let kind = if asked { RefusalKind::CannotAsk } else { kind };
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
        allow_rule: if asked { finding.allow_rule } else { None },
        waited_s: None,
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
        match self.check(&spec) {
            Ok(()) => self.inner.run_metered(spec, abort, meter),
            Err(refused) => Box::pin(std::future::ready(Err(refused))),
        }
    }

    fn start(&self, spec: Spec) -> BoxFuture<'_, Result<Task, ExecError>> {
        match self.check(&spec) {
            Ok(()) => self.inner.start(spec),
            Err(refused) => Box::pin(std::future::ready(Err(refused))),
        }
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
