//! Test doubles for the imports: an executor and an agent that answer from fixed tables and
//! record every call, so tests can assert exactly what reached the host.

use std::cell::RefCell;
use std::collections::BTreeMap;

use crate::world::{
    Agent, ExecError, Executor, InjectError, Limits, Read, Relocation, Request, RunResult, Source,
    Spec, Task, TaskState,
};

/// One call into the fake executor.
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    CurrentLimits,
    Resolve(Request),
    Run(Spec),
    Start(Spec),
    ReadOutput(String),
    Kill(String),
    OwnerOf(String),
    Get(String),
}

pub struct FakeExecutor {
    pub limits: Limits,
    /// When set, `resolve` fails with it; otherwise it applies the limits like a real executor.
    pub resolve_error: Option<ExecError>,
    pub run: Result<RunResult, ExecError>,
    /// When set, `start` fails with it; otherwise it returns a running `bash-1`.
    pub start_error: Option<ExecError>,
    /// What `start`'s answer says of a move of the session to another node.
    pub start_relocated: Option<Relocation>,
    pub reads: BTreeMap<String, Read>,
    pub kills: BTreeMap<String, bool>,
    pub owners: BTreeMap<String, String>,
    /// What `get` answers; an id not here is unknown.
    pub tasks: BTreeMap<String, Task>,
    pub calls: RefCell<Vec<Call>>,
}

impl Default for FakeExecutor {
    fn default() -> Self {
        FakeExecutor {
            limits: Limits {
                default_timeout_ms: 120000.0,
                max_timeout_ms: 600000.0,
                max_output_bytes: 64000,
                grace_ms: 3000.0,
                sandbox: None,
            },
            resolve_error: None,
            run: Ok(RunResult::default()),
            start_error: None,
            start_relocated: None,
            reads: BTreeMap::new(),
            kills: BTreeMap::new(),
            owners: BTreeMap::new(),
            tasks: BTreeMap::new(),
            calls: RefCell::new(Vec::new()),
        }
    }
}

impl FakeExecutor {
    pub fn calls(&self) -> Vec<Call> {
        self.calls.borrow().clone()
    }

    fn record(&self, call: Call) {
        self.calls.borrow_mut().push(call);
    }
}

impl Executor for FakeExecutor {
    fn current_limits(&self) -> Limits {
        self.record(Call::CurrentLimits);
        self.limits.clone()
    }

    fn resolve(&self, request: Request) -> Result<Spec, ExecError> {
        self.record(Call::Resolve(request.clone()));
        if let Some(error) = &self.resolve_error {
            return Err(error.clone());
        }
        let timeout = request
            .timeout_ms
            .unwrap_or(self.limits.default_timeout_ms)
            .min(self.limits.max_timeout_ms);
        Ok(Spec {
            command: request.command,
            workdir: request.workdir.unwrap_or_else(|| "/exec/default".into()),
            timeout_ms: timeout,
            owner: request.owner,
        })
    }

    fn run(&self, spec: Spec) -> Result<RunResult, ExecError> {
        self.record(Call::Run(spec));
        self.run.clone()
    }

    fn start(&self, spec: Spec) -> Result<Task, ExecError> {
        self.record(Call::Start(spec.clone()));
        match &self.start_error {
            Some(error) => Err(error.clone()),
            None => Ok(Task {
                id: "bash-1".into(),
                command: spec.command,
                owner: spec.owner,
                state: TaskState::Running,
                exit_code: None,
                signal: None,
                relocated: self.start_relocated.clone(),
            }),
        }
    }

    fn read_output(&self, id: &str) -> Result<Read, ExecError> {
        self.record(Call::ReadOutput(id.into()));
        self.reads
            .get(id)
            .cloned()
            .ok_or_else(|| ExecError::UnknownTask(id.into()))
    }

    fn kill(&self, id: &str) -> Result<bool, ExecError> {
        self.record(Call::Kill(id.into()));
        self.kills
            .get(id)
            .copied()
            .ok_or_else(|| ExecError::UnknownTask(id.into()))
    }

    fn owner_of(&self, id: &str) -> Option<String> {
        self.record(Call::OwnerOf(id.into()));
        self.owners.get(id).cloned()
    }

    fn get(&self, id: &str) -> Result<Task, ExecError> {
        self.record(Call::Get(id.into()));
        self.tasks
            .get(id)
            .cloned()
            .ok_or_else(|| ExecError::UnknownTask(id.into()))
    }

    fn list_tasks(&self) -> Vec<Task> {
        Vec::new()
    }
}

/// One injection the fake agent received.
#[derive(Debug, Clone, PartialEq)]
pub struct Injection {
    pub owner: String,
    pub text: String,
    pub source: Source,
}

#[derive(Default)]
pub struct FakeAgent {
    pub error: Option<InjectError>,
    pub injections: RefCell<Vec<Injection>>,
}

impl Agent for FakeAgent {
    fn inject(&self, owner: &str, text: &str, source: Source) -> Result<(), InjectError> {
        self.injections.borrow_mut().push(Injection {
            owner: owner.into(),
            text: text.into(),
            source,
        });
        match &self.error {
            Some(error) => Err(error.clone()),
            None => Ok(()),
        }
    }
}
