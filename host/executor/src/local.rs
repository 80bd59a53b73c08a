//! [`LocalExecutor`]: the executor contract on this machine's processes.

use std::ffi::{OsStr, OsString};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use crate::config::duration_ms;
use crate::containment::cgroup::CgroupRoot;
use crate::output::spill::SpillDir;
use crate::output::stream::Output;
use crate::protocol::Step;
use crate::sandbox::log::{Cursor, DenialLog};
use crate::sandbox::{Sandbox, SandboxMode};
use crate::spawn::launcher::Launcher;
use crate::spawn::{Spawned, StartError};
use crate::tasks::handoff::Foreground;
use crate::tasks::lifecycle::{self, Outcome, Stop};
use crate::tasks::table::{End, Tasks};
use crate::{
    BoxFuture, Config, ConfigError, Containment, ContainmentPreference, ExecError, Executor,
    Limits, OutputMeter, Read, Request, RunResult, Spec, Task, Yielded, bash, containment, helper,
    output, spawn,
};

/// Helpers tried for one command whose request could not be delivered (the ready ones may all
/// have been killed; the last attempts start new ones).
const SPAWN_ATTEMPTS: usize = 4;

/// Runs commands as local processes. See the executor contract.
#[derive(Debug)]
pub struct LocalExecutor {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    config: Config,
    grace: Duration,
    tasks: Mutex<Tasks>,
    task_done: UnboundedSender<Task>,
    containment: Containment,
    /// The parent of the per-command cgroups, in cgroup mode.
    cgroups: Option<Arc<CgroupRoot>>,
    spill: Arc<SpillDir>,
    /// [`bash::SHELL`] as found on PATH when the executor was built (a lookup per command costs a
    /// failed `exec` per PATH entry before it); the bare name if it was not found then.
    shell: OsString,
    /// Fresh spawn helpers, one per command.
    launcher: Arc<Launcher>,
    /// The sandbox in force (its policy goes to the helper factory once, at its start).
    sandbox: Option<Sandbox>,
    /// Its proxy to the allowed hosts (`--sandbox-allow-net`), if it has one.
    proxy: Option<Arc<crate::sandbox::proxy::Proxy>>,
}

impl Drop for Shared {
    /// An executor dropped without [`Executor::shutdown`]: its sandbox's temporary base goes
    /// with it (the helper factory, killed with it, does not remove it).
    fn drop(&mut self) {
        if let Some(sandbox) = &self.sandbox {
            let _ = std::fs::remove_dir_all(&sandbox.tmp_base);
        }
    }
}

impl Shared {
    fn tasks(&self) -> MutexGuard<'_, Tasks> {
        self.tasks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a task's end and sends its task-done event, unless shutdown began. Both happen
    /// under the table lock, so no event can slip out after shutdown starts.
    fn finish(&self, base: &Task, end: End) {
        let mut tasks = self.tasks();
        let task = tasks.finish(base, end);
        if !tasks.is_shut_down() {
            // A closed receiver only means nobody listens any more.
            let _ = self.task_done.send(task);
        }
    }
}

impl LocalExecutor {
    /// Validates `config`, finds the spawn helper, sets up containment (see
    /// [`LocalExecutor::containment`]); `task_done` receives one event per background task when
    /// it ends.
    ///
    /// Commands run on the tokio runtime that calls [`Executor::run`] or [`Executor::start`].
    pub fn new(
        config: Config,
        task_done: UnboundedSender<Task>,
    ) -> Result<Arc<LocalExecutor>, ConfigError> {
        config.validate()?;
        let helper =
            helper::locate(config.spawn_helper.as_deref()).map_err(|reason| ConfigError {
                setting: "spawn-helper",
                reason,
            })?;
        let tasks = Tasks::with_limits(crate::tasks::table::TaskLimits {
            running: config.max_tasks,
            finished: config.max_finished_tasks,
            session_running: config.max_session_tasks,
            session_finished: config.max_session_finished_tasks,
        });
        let (containment, cgroups) = match config.containment {
            ContainmentPreference::Subreaper => (
                Containment::Subreaper {
                    reason: "cgroups disabled by configuration".to_string(),
                },
                None,
            ),
            ContainmentPreference::Auto => match CgroupRoot::create() {
                Ok(root) => (
                    Containment::Cgroup {
                        root: root.dir().to_path_buf(),
                    },
                    Some(root),
                ),
                Err(reason) => (Containment::Subreaper { reason }, None),
            },
        };
        match &containment {
            Containment::Cgroup { .. } => tracing::debug!(%containment, "process containment"),
            Containment::Subreaper { reason } => {
                tracing::debug!(%containment, reason = %reason, "process containment")
            }
        }
        let sandbox = sandbox_for(&config, &helper)?;
        let spill = SpillDir::with_budgets(
            config.spill_dir.clone(),
            config.max_spill_total_bytes,
            config.max_session_spill_bytes,
        );
        let mut env = bash::env::host_child_env(&config.env);
        if let Some(sandbox) = &sandbox {
            // For the factory only, which takes it out of its environment at once.
            env.push((
                crate::sandbox::policy::POLICY_ENV.into(),
                crate::hex::hex(&sandbox.policy().encode()).into(),
            ));
        }
        let launcher = Launcher::new(helper, env, cgroups.clone());
        launcher.refill();
        Ok(Arc::new(Self {
            shared: Arc::new(Shared {
                grace: duration_ms(config.grace_ms),
                config,
                tasks: Mutex::new(tasks),
                task_done,
                containment,
                cgroups,
                spill,
                shell: bash::find_on_path(bash::SHELL),
                launcher,
                proxy: sandbox
                    .as_ref()
                    .filter(|s| s.proxy_port.is_some())
                    .map(|s| {
                        Arc::new(crate::sandbox::proxy::Proxy::new(
                            s.allow_net.clone(),
                            s.upstreams.clone(),
                        ))
                    }),
                sandbox,
            }),
        }))
    }

    /// The containment in force, e.g. for `dsh-host doctor` or a startup log line.
    pub fn containment(&self) -> Containment {
        self.shared.containment.clone()
    }

    /// The sandbox in force, if any (e.g. for `dsh-host doctor`).
    pub fn sandbox(&self) -> Option<Sandbox> {
        self.shared.sandbox.clone()
    }

    /// This executor's spill directory, once a command has spilled (until it is removed at
    /// shutdown, unless [`Config::keep_spill`] is set).
    pub fn spill_dir(&self) -> Option<std::path::PathBuf> {
        self.shared.spill.path()
    }

    /// Fresh stdout and stderr buffers for one command.
    /// The outputs of a command of the session `owner`.
    fn outputs(&self, owner: Option<&str>) -> [Arc<Output>; 2] {
        let config = &self.shared.config;
        let (stdout, stderr) =
            output::spill::targets_for(&self.shared.spill, config.max_spill_bytes, owner);
        [
            Output::new(config.max_output_bytes, stdout),
            Output::new(config.max_output_bytes, stderr),
        ]
    }

    /// Starts a command on a fresh spawn helper. Retried only when the request never reached
    /// the helper (a command killed idle helpers): an error means the command did not run.
    async fn spawn(
        &self,
        program: &OsStr,
        spec: &Spec,
        denials: &Arc<DenialLog>,
    ) -> Result<Spawned, ExecError> {
        let cannot = |err: &dyn std::fmt::Display| {
            ExecError::SpawnFailed(format!("cannot start {}: {err}", bash::SHELL))
        };
        let mut attempts = 0;
        loop {
            attempts += 1;
            let helper = self
                .shared
                .launcher
                .take(spec.owner.as_deref())
                .await
                .map_err(|err| cannot(&format!("no spawn helper: {err}")))?;
            let started = spawn::spawn(
                helper,
                program,
                &spec.command,
                &spec.workdir,
                denials.clone(),
                self.shared.proxy.clone(),
            )
            .await;
            // Once this task next waits (bash is running by then): not on the start's path.
            let launcher = self.shared.launcher.clone();
            tokio::spawn(async move { launcher.refill() });
            return match started {
                Ok(spawned) => Ok(spawned),
                Err(StartError::Undelivered(err)) if attempts < SPAWN_ATTEMPTS => {
                    tracing::debug!(%err, "a spawn helper died before its request; taking another");
                    continue;
                }
                Err(StartError::Declined) if attempts < SPAWN_ATTEMPTS => {
                    tracing::warn!(
                        "a spawn helper's inherited settings (nice value, limits, OOM score, \
                         scheduling, affinity or timer slack) were changed from outside, or its \
                         factory died; starting a new factory"
                    );
                    self.shared.launcher.reset();
                    continue;
                }
                Err(StartError::Workdir(message)) => Err(ExecError::WorkdirUnusable(message)),
                Err(StartError::Failed {
                    step: Step::Sandbox,
                    err,
                }) => Err(cannot(&format!("the sandbox could not be applied: {err}"))),
                Err(StartError::Failed {
                    step: Step::Chdir,
                    err,
                }) => Err(bash::workdir::unusable(&spec.workdir, &err)),
                Err(
                    StartError::Failed { err, .. }
                    | StartError::Helper(err)
                    | StartError::Undelivered(err),
                ) => Err(cannot(&err)),
                Err(StartError::Declined) => Err(cannot(&"every spawn helper declined")),
            };
        }
    }

    /// Refuses a command longer than the configured limit.
    fn check_command(&self, command: &str) -> Result<(), ExecError> {
        bash::long_command::check(command, self.shared.config.max_command_bytes)
    }

    fn timeout_ms(&self, requested: f64) -> Result<f64, ExecError> {
        crate::effective_timeout(requested, self.shared.config.max_timeout_ms)
    }

    /// The working directory of a request without one: the configured cwd, else the host's.
    fn default_workdir(&self) -> Result<String, ExecError> {
        match &self.shared.config.cwd {
            Some(cwd) => Ok(cwd.to_string_lossy().into_owned()),
            None => Ok(std::env::current_dir()
                .map_err(|err| bash::workdir::unusable(".", &err))?
                .to_string_lossy()
                .into_owned()),
        }
    }

    /// [`Executor::run`] with the shell program as a parameter, so tests can make spawning fail.
    async fn run_program(
        &self,
        program: &OsStr,
        spec: Spec,
        abort: CancellationToken,
        meter: OutputMeter,
    ) -> Result<RunResult, ExecError> {
        if abort.is_cancelled() {
            return Err(ExecError::Aborted);
        }
        self.check_command(&spec.command)?;
        let timeout_ms = self.timeout_ms(spec.timeout_ms)?;
        let outputs = self.outputs(spec.owner.as_deref());
        meter.attach(&outputs);
        let denials = Arc::new(DenialLog::default());
        let spawned = tokio::select! {
            spawned = self.spawn(program, &spec, &denials) => spawned?,
            () = abort.cancelled() => return Err(ExecError::Aborted),
        };
        let shared = self.shared.clone();
        let mut command = Foreground::launch(
            spawned,
            outputs.clone(),
            self.shared.grace,
            move |task, outcome| shared.finish(task, end_of(&outcome)),
        );
        let timeout = tokio::time::sleep(duration_ms(timeout_ms));
        let yield_after_ms = self.shared.config.yield_after_ms;
        // Off by default: then this deadline is never armed.
        let mut may_yield = yield_after_ms.is_some();
        let yield_at = tokio::time::sleep(duration_ms(yield_after_ms.unwrap_or(f64::MAX)));
        tokio::pin!(timeout, yield_at);
        let outcome = loop {
            tokio::select! {
                // An end beats a deadline passing at the same moment; a timeout beats a yield.
                biased;
                outcome = command.outcome() => break outcome?,
                () = &mut timeout, if !command.stopping() => command.stop(Stop::Timeout),
                () = abort.cancelled(), if !command.stopping() => command.stop(Stop::Abort),
                () = &mut yield_at, if may_yield && !command.stopping() => {
                    // One try: with every slot taken it stays in the foreground, timeout and all.
                    may_yield = false;
                    let after_ms = yield_after_ms.unwrap_or_default();
                    let handed =
                        self.hand_over(&mut command, &spec, &outputs, &denials, after_ms);
                    if let Some(yielded) = handed {
                        return Ok(RunResult { timeout_ms, ..yielded });
                    }
                }
            }
        };
        Ok(RunResult {
            exit_code: outcome.exit.code,
            signal: outcome.exit.signal.map(containment::signal::name),
            timed_out: outcome.stop == Some(Stop::Timeout),
            aborted: outcome.stop == Some(Stop::Abort),
            timeout_ms,
            stdout: outputs[0].snapshot(),
            stderr: outputs[1].snapshot(),
            leftover_processes: outcome.leftovers,
            yielded: None,
            denials: denials.since(Cursor::default()).0,
            relocated: None,
        })
    }

    /// Makes a running foreground command a background task, if a running slot is free: the
    /// result (its `timeout_ms` left for the caller to set) holds the output so far, and the
    /// task's reads start after it. `None` when the command stays the call's (no free slot,
    /// shutting down, or it has just ended).
    fn hand_over(
        &self,
        command: &mut Foreground,
        spec: &Spec,
        outputs: &[Arc<Output>; 2],
        denials: &Arc<DenialLog>,
        after_ms: f64,
    ) -> Option<RunResult> {
        let (task, ([stdout, stderr], denied)) = command.hand_over(|control| {
            let mut tasks = self.shared.tasks();
            if let Err(err) = tasks.reserve(spec.owner.as_deref()) {
                tracing::debug!(%err, "a foreground command stays in the foreground");
                return None;
            }
            // Under the table lock, so the snapshot and the offsets are taken at one moment for
            // each stream; output arriving later is the task's first read.
            let (stdout, stdout_at) = outputs[0].snapshot_so_far();
            let (stderr, stderr_at) = outputs[1].snapshot_so_far();
            let (denied, denied_at) = denials.since(Cursor::default());
            let task = tasks.adopt_reserved(
                &spec.command,
                spec.owner.clone(),
                outputs.clone(),
                [stdout_at, stderr_at],
                (denials.clone(), denied_at),
                control,
            );
            Some((task, ([stdout, stderr], denied)))
        })?;
        Some(RunResult {
            exit_code: None,
            signal: None,
            timed_out: false,
            aborted: false,
            timeout_ms: spec.timeout_ms,
            stdout,
            stderr,
            leftover_processes: 0,
            yielded: Some(Yielded { task, after_ms }),
            denials: denied,
            relocated: None,
        })
    }

    /// [`Executor::start`] with the shell program as a parameter, so tests can make spawning fail.
    async fn start_program(&self, program: &OsStr, spec: Spec) -> Result<Task, ExecError> {
        // A slot first, so that a full table starts nothing; the id only once the command has
        // started, so that an unusable workdir leaves no trace.
        self.check_command(&spec.command)?;
        self.shared.tasks().reserve(spec.owner.as_deref())?;
        let outputs = self.outputs(spec.owner.as_deref());
        let denials = Arc::new(DenialLog::default());
        let spawned = match self.spawn(program, &spec, &denials).await {
            Err(ExecError::WorkdirUnusable(message)) => {
                self.shared.tasks().unreserve(spec.owner.as_deref());
                return Err(ExecError::WorkdirUnusable(message));
            }
            other => other,
        };
        let (task, control) = self.shared.tasks().insert_reserved(
            &spec.command,
            spec.owner.clone(),
            outputs.clone(),
            denials,
        );
        match spawned {
            Ok(spawned) => {
                let shared = self.shared.clone();
                let base = task.clone();
                tokio::spawn(async move {
                    let stop = async {
                        control.kill.cancelled().await;
                        Stop::Kill
                    };
                    let outcome = lifecycle::drive(spawned, outputs, shared.grace, stop).await;
                    shared.finish(&base, end_of(&outcome));
                    control.ended.cancel();
                });
            }
            Err(err) => {
                let reason = match err {
                    ExecError::SpawnFailed(msg) => msg,
                    other => other.to_string(),
                };
                outputs[1].write(format!("spawn failed: {reason}").as_bytes());
                for output in &outputs {
                    output.close();
                }
                self.shared.finish(&task, End::SpawnFailed);
                control.ended.cancel();
            }
        }
        Ok(task)
    }
}

/// The sandbox `config` asks for, after a preflight of what the machine supports; an error
/// (naming what is missing and the flag that changes it) when it cannot be enforced.
fn sandbox_for(config: &Config, helper: &OsStr) -> Result<Option<Sandbox>, ConfigError> {
    config.sandbox.check_off().map_err(|err| ConfigError {
        setting: "sandbox",
        reason: err.0,
    })?;
    if config.sandbox.mode == SandboxMode::Off {
        return Ok(None);
    }
    let support = crate::sandbox::preflight::probe(std::path::Path::new(helper));
    let cwd = match &config.cwd {
        Some(cwd) => cwd.clone(),
        None => std::env::current_dir().map_err(|err| ConfigError {
            setting: "sandbox",
            reason: format!("no working directory to make writable: {err}"),
        })?,
    };
    let sandbox = Sandbox::resolve(&config.sandbox, &cwd, &support).map_err(|err| ConfigError {
        setting: "sandbox",
        reason: err.0,
    })?;
    if let Some(sandbox) = &sandbox {
        tracing::debug!(mode = %sandbox.mode, tier = %sandbox.tier, "sandbox");
    }
    Ok(sandbox)
}

/// How a task's command ended, for the table.
fn end_of(outcome: &Outcome) -> End {
    End::Exited {
        code: outcome.exit.code,
        signal: outcome.exit.signal.map(containment::signal::name),
    }
}

impl Executor for LocalExecutor {
    fn limits(&self) -> Limits {
        let config = &self.shared.config;
        Limits {
            default_timeout_ms: config.default_timeout_ms,
            max_timeout_ms: config.max_timeout_ms,
            max_output_bytes: config.max_output_bytes,
            grace_ms: config.grace_ms,
            sandbox: self.shared.sandbox.as_ref().map(Sandbox::described),
        }
    }

    fn resolve(&self, req: Request) -> Result<Spec, ExecError> {
        let config = &self.shared.config;
        crate::resolve_request(
            req,
            config.default_timeout_ms,
            config.max_timeout_ms,
            config.max_command_bytes,
            || self.default_workdir(),
        )
    }

    fn resolution(&self) -> Option<crate::Resolution> {
        let config = &self.shared.config;
        Some(crate::Resolution {
            default_timeout_ms: config.default_timeout_ms,
            max_timeout_ms: config.max_timeout_ms,
            max_command_bytes: config.max_command_bytes,
            workdir: self.default_workdir().ok()?,
        })
    }

    fn run(
        &self,
        spec: Spec,
        abort: CancellationToken,
    ) -> BoxFuture<'_, Result<RunResult, ExecError>> {
        Box::pin(self.run_program(&self.shared.shell, spec, abort, OutputMeter::new()))
    }

    fn run_metered(
        &self,
        spec: Spec,
        abort: CancellationToken,
        meter: OutputMeter,
    ) -> BoxFuture<'_, Result<RunResult, ExecError>> {
        Box::pin(self.run_program(&self.shared.shell, spec, abort, meter))
    }

    fn start(&self, spec: Spec) -> BoxFuture<'_, Result<Task, ExecError>> {
        Box::pin(self.start_program(&self.shared.shell, spec))
    }

    fn read_output(&self, id: &str) -> Result<Read, ExecError> {
        self.shared.tasks().read(id)
    }

    fn kill(&self, id: &str) -> Result<bool, ExecError> {
        self.shared.tasks().kill(id)
    }

    fn owner_of(&self, id: &str) -> Option<String> {
        self.shared.tasks().owner_of(id)
    }

    fn get(&self, id: &str) -> Result<Task, ExecError> {
        self.shared.tasks().get(id)
    }

    fn list(&self) -> Vec<Task> {
        self.shared.tasks().list()
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.shared.tasks().begin_shutdown();
            // A start in progress becomes a task (killed at once) or nothing.
            while self.shared.tasks().reserved() > 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let live = self.shared.tasks().live();
            for control in live {
                control.ended.cancelled().await;
            }
            self.shared.launcher.clear().await;
            if let Some(root) = &self.shared.cgroups {
                root.release();
            }
            if let Some(sandbox) = &self.shared.sandbox {
                let _ = std::fs::remove_dir_all(&sandbox.tmp_base);
            }
            if !self.shared.config.keep_spill
                && let Err(err) = self.shared.spill.remove()
            {
                tracing::warn!(%err, "cannot remove the spill directory");
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TaskState;

    fn spec(command: &str) -> Spec {
        Spec {
            command: command.to_string(),
            workdir: "/".to_string(),
            timeout_ms: 10_000.0,
            owner: Some("me".to_string()),
        }
    }

    const MISSING: &str = "/nonexistent/dsh-no-such-shell";

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn foreground_spawn_failure_is_an_error() {
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let exec = LocalExecutor::new(Config::default(), tx).unwrap();
        // A command long enough to go through a memfd fails alike: the outcome pipe is not
        // where the command's descriptor goes.
        let long = format!("true #{}", "x".repeat(bash::long_command::ARGV_MAX));
        for command in ["true", &long] {
            let err = exec
                .run_program(
                    OsStr::new(MISSING),
                    spec(command),
                    CancellationToken::new(),
                    OutputMeter::new(),
                )
                .await
                .unwrap_err();
            assert_eq!(
                err,
                ExecError::SpawnFailed(
                    "cannot start bash: No such file or directory (os error 2)".into()
                )
            );
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn background_spawn_failure_ends_killed_with_one_event() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let exec = LocalExecutor::new(Config::default(), tx).unwrap();
        let task = exec
            .start_program(OsStr::new(MISSING), spec("true"))
            .await
            .unwrap();
        assert_eq!(task.id, "bash-1");
        assert_eq!(task.owner.as_deref(), Some("me"));
        let done = rx.recv().await.unwrap();
        assert_eq!(
            (done.id.as_str(), done.state, done.signal.clone()),
            ("bash-1", TaskState::Killed, None)
        );
        let read = exec.read_output("bash-1").unwrap();
        assert_eq!(
            read.stderr.text,
            "spawn failed: cannot start bash: No such file or directory (os error 2)"
        );
        assert_eq!(read.task.state, TaskState::Killed);
        assert_eq!(exec.kill("bash-1"), Ok(false));
        exec.shutdown().await;
        assert!(rx.try_recv().is_err(), "exactly one event");
        // The failed task does not hold a running slot.
        assert!(exec.list().iter().all(|t| t.state != TaskState::Running));
    }
}
