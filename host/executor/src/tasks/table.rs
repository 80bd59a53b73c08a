//! The background task table: ids, states, read offsets, the running limit and the retention of
//! finished tasks. Pure bookkeeping; processes are driven elsewhere.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::output::stream::Output;
use crate::sandbox::log::{Cursor, DenialLog};
use crate::{ExecError, Read, Task, TaskState};

/// Signals between the table and a task's driver.
#[derive(Debug, Default)]
pub(crate) struct Control {
    /// Cancelled to stop the task (kill or shutdown).
    pub(crate) kill: CancellationToken,
    /// Cancelled by the driver once nothing of the task is left.
    pub(crate) ended: CancellationToken,
}

/// How a task's process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum End {
    Exited {
        code: Option<i32>,
        signal: Option<String>,
    },
    SpawnFailed,
}

#[derive(Debug)]
struct Record {
    task: Task,
    outputs: [Arc<Output>; 2],
    /// Whole-stream offsets already returned by `read`.
    offsets: [u64; 2],
    /// What the sandbox denied it, and how far `read` has returned that.
    denials: (Arc<DenialLog>, Cursor),
    control: Arc<Control>,
}

/// How many tasks may run and be retained, in all and per session (owner token).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TaskLimits {
    pub(crate) running: usize,
    pub(crate) finished: usize,
    pub(crate) session_running: usize,
    pub(crate) session_finished: usize,
}

/// One session's share of the table: what it runs (starts in progress included) and what it
/// finished, oldest first. Tasks without an owner form one share of their own, which only the
/// totals limit (a caller without a token is no session).
#[derive(Debug, Default)]
struct Share {
    running: usize,
    finished: VecDeque<String>,
}

#[derive(Debug)]
pub(crate) struct Tasks {
    next_id: u64,
    records: HashMap<String, Record>,
    /// Per owner: the running count and the finished ids, for the per-session limits and for
    /// retention, which evicts within a session (the one holding most, past the total).
    shares: HashMap<Option<String>, Share>,
    /// Finished tasks retained, in all.
    finished: usize,
    running: usize,
    limits: TaskLimits,
    /// Tasks whose processes may still exist, retained or not: shutdown waits for these.
    live: HashMap<String, Arc<Control>>,
    /// Starts in progress, counted as running: a slot is taken before the command starts and
    /// becomes a task only once it has (an id is never taken by a start that failed early).
    reserved: usize,
    shutdown: bool,
}

impl Tasks {
    /// A table whose limits per session are its totals.
    #[cfg(test)]
    pub(crate) fn new(max_running: usize, max_finished: usize) -> Self {
        Self::with_limits(TaskLimits {
            running: max_running,
            finished: max_finished,
            session_running: max_running,
            session_finished: max_finished,
        })
    }

    pub(crate) fn with_limits(limits: TaskLimits) -> Self {
        Self {
            next_id: 1,
            records: HashMap::new(),
            shares: HashMap::new(),
            finished: 0,
            running: 0,
            limits,
            live: HashMap::new(),
            reserved: 0,
            shutdown: false,
        }
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        self.shutdown
    }

    /// Refuses new tasks from now on, kills the running ones and returns every task whose
    /// processes may still exist.
    pub(crate) fn begin_shutdown(&mut self) -> Vec<Arc<Control>> {
        self.shutdown = true;
        let running: Vec<String> = self
            .records
            .values()
            .filter(|r| r.task.state == TaskState::Running)
            .map(|r| r.task.id.clone())
            .collect();
        for id in running {
            let _ = self.kill(&id);
        }
        self.live.values().cloned().collect()
    }

    /// Adds a running task, or refuses without any change.
    #[cfg(test)]
    pub(crate) fn insert(
        &mut self,
        command: &str,
        owner: Option<String>,
        outputs: [Arc<Output>; 2],
    ) -> Result<(Task, Arc<Control>), ExecError> {
        self.reserve(owner.as_deref())?;
        Ok(self.insert_reserved(command, owner, outputs, Arc::default()))
    }

    /// Takes a running slot for a start of `owner`'s session, or refuses without any change: the
    /// session's own limit first, then the host's (whose message says nothing of other
    /// sessions' tasks).
    pub(crate) fn reserve(&mut self, owner: Option<&str>) -> Result<(), ExecError> {
        if self.shutdown {
            return Err(shutting_down());
        }
        let own = self
            .shares
            .get(&owner.map(str::to_string))
            .map_or(0, |s| s.running);
        if owner.is_some() && own >= self.limits.session_running {
            return Err(ExecError::TaskLimit(format!(
                "too many background tasks in this session: {own} are running, the limit per \
                 session is {} (--max-session-tasks); wait for one to finish or kill one",
                self.limits.session_running
            )));
        }
        if self.running + self.reserved >= self.limits.running {
            return Err(ExecError::TaskLimit(format!(
                "too many background tasks running on this host: the limit is {} \
                 (--max-tasks); wait for one to finish or kill one",
                self.limits.running
            )));
        }
        self.reserved += 1;
        self.shares
            .entry(owner.map(str::to_string))
            .or_default()
            .running += 1;
        Ok(())
    }

    /// Gives back a slot taken by [`reserve`](Self::reserve) for a start that did not happen.
    pub(crate) fn unreserve(&mut self, owner: Option<&str>) {
        self.reserved -= 1;
        let owner = owner.map(str::to_string);
        if let Some(share) = self.shares.get_mut(&owner) {
            share.running -= 1;
            if share.running == 0 && share.finished.is_empty() {
                self.shares.remove(&owner);
            }
        }
    }

    /// Starts in progress.
    pub(crate) fn reserved(&self) -> usize {
        self.reserved
    }

    /// Every task whose processes may still exist.
    pub(crate) fn live(&self) -> Vec<Arc<Control>> {
        self.live.values().cloned().collect()
    }

    /// Turns a slot taken by [`reserve`](Self::reserve) into a running task. Should shutdown
    /// have begun meanwhile, the task is killed at once (and shutdown waits for it).
    pub(crate) fn insert_reserved(
        &mut self,
        command: &str,
        owner: Option<String>,
        outputs: [Arc<Output>; 2],
        denials: Arc<DenialLog>,
    ) -> (Task, Arc<Control>) {
        let control = Arc::new(Control::default());
        let task = self.adopt_reserved(
            command,
            owner,
            outputs,
            [0, 0],
            (denials, Cursor::default()),
            control.clone(),
        );
        (task, control)
    }

    /// [`insert_reserved`](Self::insert_reserved) for a command already running: a foreground
    /// command handed over to the table. Its driver answers to `control` already, and `read_from`
    /// are the stream offsets up to which the call returned the output, so the task's first read
    /// starts after them; likewise the denials, from their cursor.
    pub(crate) fn adopt_reserved(
        &mut self,
        command: &str,
        owner: Option<String>,
        outputs: [Arc<Output>; 2],
        read_from: [u64; 2],
        denials: (Arc<DenialLog>, Cursor),
        control: Arc<Control>,
    ) -> Task {
        self.reserved -= 1;
        let task = Task {
            id: format!("bash-{}", self.next_id),
            command: command.to_string(),
            owner,
            state: TaskState::Running,
            exit_code: None,
            signal: None,
            relocated: None,
        };
        self.next_id += 1;
        self.records.insert(
            task.id.clone(),
            Record {
                task: task.clone(),
                outputs,
                offsets: read_from,
                denials,
                control: control.clone(),
            },
        );
        self.live.insert(task.id.clone(), control);
        self.running += 1;
        if self.shutdown {
            let _ = self.kill(&task.id);
        }
        task
    }

    fn record(&self, id: &str) -> Result<&Record, ExecError> {
        self.records
            .get(id)
            .ok_or_else(|| ExecError::UnknownTask(id.to_string()))
    }

    pub(crate) fn get(&self, id: &str) -> Result<Task, ExecError> {
        Ok(self.record(id)?.task.clone())
    }

    pub(crate) fn owner_of(&self, id: &str) -> Option<String> {
        self.records.get(id).and_then(|r| r.task.owner.clone())
    }

    /// Retained tasks in id order.
    pub(crate) fn list(&self) -> Vec<Task> {
        let mut tasks: Vec<Task> = self.records.values().map(|r| r.task.clone()).collect();
        tasks.sort_by_key(|t| id_number(&t.id));
        tasks
    }

    /// Output since the previous read of this task.
    pub(crate) fn read(&mut self, id: &str) -> Result<Read, ExecError> {
        let record = self
            .records
            .get_mut(id)
            .ok_or_else(|| ExecError::UnknownTask(id.to_string()))?;
        let (stdout, out_next) = record.outputs[0].read_since(record.offsets[0]);
        let (stderr, err_next) = record.outputs[1].read_since(record.offsets[1]);
        record.offsets = [out_next, err_next];
        let (denials, next) = record.denials.0.since(record.denials.1);
        record.denials.1 = next;
        Ok(Read {
            stdout,
            stderr,
            task: record.task.clone(),
            denials,
        })
    }

    /// Marks a running task killed and asks its driver to stop it. False when it had already
    /// finished (including an earlier kill: the escalation is never restarted).
    pub(crate) fn kill(&mut self, id: &str) -> Result<bool, ExecError> {
        let record = self
            .records
            .get_mut(id)
            .ok_or_else(|| ExecError::UnknownTask(id.to_string()))?;
        if record.task.state != TaskState::Running {
            return Ok(false);
        }
        record.task.state = TaskState::Killed;
        record.control.kill.cancel();
        self.running -= 1;
        self.retire(id);
        Ok(true)
    }

    /// Records how a task ended and returns its final state. `base` is the task as started, used
    /// when the record was already dropped by retention (possible only after a kill).
    pub(crate) fn finish(&mut self, base: &Task, end: End) -> Task {
        self.live.remove(&base.id);
        let Some(record) = self.records.get_mut(&base.id) else {
            let mut task = base.clone();
            task.state = TaskState::Killed;
            apply(&mut task, end);
            return task;
        };
        let was_running = record.task.state == TaskState::Running;
        apply(&mut record.task, end);
        let task = record.task.clone();
        if was_running {
            self.running -= 1;
            self.retire(&base.id);
        }
        task
    }

    /// Moves a task to its session's finished list and forgets the session's oldest beyond the
    /// per-session retention limit; past the total, the oldest of the session holding most, so
    /// that no session's churn evicts a quieter session's results. A forgotten task's spill files
    /// are deleted with it (their bytes return to the spill budget): nobody can read its output
    /// any more. Its processes may still be ending after a kill; their output then stays in
    /// memory only.
    fn retire(&mut self, id: &str) {
        let owner = self.records.get(id).and_then(|r| r.task.owner.clone());
        let share = self.shares.entry(owner.clone()).or_default();
        share.running -= 1;
        share.finished.push_back(id.to_string());
        self.finished += 1;
        while owner.is_some() && self.shares[&owner].finished.len() > self.limits.session_finished {
            self.evict(&owner);
        }
        while self.finished > self.limits.finished {
            let Some(fullest) = self
                .shares
                .iter()
                .max_by_key(|(_, share)| share.finished.len())
                .map(|(owner, _)| owner.clone())
            else {
                break;
            };
            self.evict(&fullest);
        }
    }

    /// Forgets the oldest finished task of `owner`'s session.
    fn evict(&mut self, owner: &Option<String>) {
        let Some(share) = self.shares.get_mut(owner) else {
            return;
        };
        let Some(old) = share.finished.pop_front() else {
            return;
        };
        if share.running == 0 && share.finished.is_empty() {
            self.shares.remove(owner);
        }
        self.finished -= 1;
        if let Some(record) = self.records.remove(&old) {
            for output in &record.outputs {
                output.discard_spill();
            }
        }
    }
}

/// Sets the end facts; a still-running task becomes Killed when a signal (or a failed spawn)
/// ended it, Completed otherwise. A task already killed stays Killed.
fn apply(task: &mut Task, end: End) {
    let killed = match end {
        End::Exited { code, signal } => {
            let killed = signal.is_some();
            task.exit_code = code;
            task.signal = signal;
            killed
        }
        End::SpawnFailed => true,
    };
    if task.state == TaskState::Running {
        task.state = if killed {
            TaskState::Killed
        } else {
            TaskState::Completed
        };
    }
}

fn id_number(id: &str) -> u64 {
    id.strip_prefix("bash-")
        .and_then(|n| n.parse().ok())
        .unwrap_or(u64::MAX)
}

pub(crate) fn shutting_down() -> ExecError {
    ExecError::Internal("the executor is shutting down; no new background tasks".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outputs() -> [Arc<Output>; 2] {
        let (a, b) = crate::output::spill::targets(&crate::output::spill::SpillDir::new(None), 10);
        [Output::new(10, a), Output::new(10, b)]
    }

    fn exited(code: i32) -> End {
        End::Exited {
            code: Some(code),
            signal: None,
        }
    }

    #[test]
    fn ids_count_up_and_limit_changes_nothing() {
        let mut tasks = Tasks::new(2, 10);
        let (a, _) = tasks.insert("a", None, outputs()).unwrap();
        let (b, _) = tasks.insert("b", Some("s".into()), outputs()).unwrap();
        assert_eq!((a.id.as_str(), b.id.as_str()), ("bash-1", "bash-2"));
        let before = tasks.list();
        assert!(matches!(
            tasks.insert("c", None, outputs()),
            Err(ExecError::TaskLimit(_))
        ));
        assert_eq!(tasks.list(), before);
        assert_eq!(tasks.kill("bash-1"), Ok(true));
        assert_eq!(tasks.kill("bash-1"), Ok(false));
        let (c, _) = tasks.insert("c", None, outputs()).unwrap();
        assert_eq!(c.id, "bash-3");
        assert_eq!(tasks.owner_of("bash-2").as_deref(), Some("s"));
        assert_eq!(tasks.owner_of("bash-1"), None);
    }

    #[test]
    fn retains_latest_finished() {
        let mut tasks = Tasks::new(10, 2);
        let mut started = Vec::new();
        for _ in 0..3 {
            started.push(tasks.insert("x", None, outputs()).unwrap().0);
        }
        for (i, task) in started.iter().enumerate() {
            let done = tasks.finish(task, exited(i as i32));
            assert_eq!(done.state, TaskState::Completed);
        }
        assert_eq!(
            tasks.get("bash-1"),
            Err(ExecError::UnknownTask("bash-1".into()))
        );
        assert_eq!(tasks.get("bash-3").unwrap().exit_code, Some(2));
        assert_eq!(tasks.list().len(), 2);
    }

    #[test]
    fn evicted_tasks_lose_their_spill_files() {
        let parent = tempfile::tempdir().unwrap();
        let dir = crate::output::spill::SpillDir::with_budget(Some(parent.path().into()), 1000);
        let spilling = || {
            let (a, b) = crate::output::spill::targets(&dir, 100);
            let outputs = [Output::new(4, a), Output::new(4, b)];
            outputs[0].write(b"0123456789");
            outputs
        };
        let path = |tasks: &mut Tasks, id: &str| {
            std::path::PathBuf::from(tasks.read(id).unwrap().stdout.spill_path.unwrap())
        };
        let mut tasks = Tasks::new(10, 1);
        let (a, _) = tasks.insert("a", None, spilling()).unwrap();
        let (b, _) = tasks.insert("b", None, spilling()).unwrap();
        tasks.insert("c", None, spilling()).unwrap();
        let a_path = path(&mut tasks, "bash-1");
        let b_path = path(&mut tasks, "bash-2");
        let c_path = path(&mut tasks, "bash-3");
        assert_eq!(dir.used_bytes(), 30);
        tasks.finish(&a, exited(0));
        assert!(a_path.exists());
        // B finishing evicts A: A's file goes, and its bytes with it.
        tasks.finish(&b, exited(0));
        assert!(!a_path.exists());
        assert!(b_path.exists());
        assert_eq!(dir.used_bytes(), 20);
        // A kill retires too; the killed task's output keeps coming, in memory only.
        let c_out = tasks.records["bash-3"].outputs[0].clone();
        tasks.kill("bash-3").unwrap();
        assert!(!b_path.exists());
        assert!(c_path.exists());
        let (d, _) = tasks.insert("d", None, spilling()).unwrap();
        tasks.finish(&d, exited(0));
        assert!(!c_path.exists());
        c_out.write(b"more");
        assert_eq!(c_out.snapshot().spill_path, None);
        assert_eq!(dir.used_bytes(), 10);
        assert_eq!(std::fs::read_dir(dir.path().unwrap()).unwrap().count(), 1);
    }

    fn limited(session_running: usize, session_finished: usize, finished: usize) -> Tasks {
        Tasks::with_limits(TaskLimits {
            running: 8,
            finished,
            session_running,
            session_finished,
        })
    }

    /// A session at its running limit is refused with the per-session flag; another session and
    /// tasks without an owner still start, up to the total, whose message names no count.
    #[test]
    fn each_session_has_its_own_running_limit() {
        let mut tasks = limited(2, 10, 10);
        let a = || Some("a".to_string());
        tasks.insert("a1", a(), outputs()).unwrap();
        tasks.insert("a2", a(), outputs()).unwrap();
        let Err(ExecError::TaskLimit(m)) = tasks.insert("a3", a(), outputs()) else {
            panic!("a third task of a started")
        };
        assert!(m.contains("in this session: 2 are running") && m.contains("--max-session-tasks"));
        tasks.insert("b1", Some("b".into()), outputs()).unwrap();
        for _ in 0..5 {
            tasks.insert("x", None, outputs()).unwrap();
        }
        let Err(ExecError::TaskLimit(m)) = tasks.insert("b2", Some("b".into()), outputs()) else {
            panic!("past the total")
        };
        assert_eq!(
            m,
            "too many background tasks running on this host: the limit is 8 (--max-tasks); \
             wait for one to finish or kill one"
        );
        // A reservation given back frees the session's slot.
        tasks.kill("bash-1").unwrap();
        tasks.reserve(Some("a")).unwrap();
        assert!(tasks.reserve(Some("a")).is_err());
        tasks.unreserve(Some("a"));
        tasks.reserve(Some("a")).unwrap();
    }

    /// One session's churn evicts its own finished tasks only; past the total, the session
    /// holding most loses its oldest.
    #[test]
    fn retention_evicts_within_the_churning_session() {
        let mut tasks = limited(8, 3, 5);
        let (quiet, _) = tasks.insert("q", Some("q".into()), outputs()).unwrap();
        tasks.finish(&quiet, exited(0));
        for _ in 0..100 {
            let (t, _) = tasks.insert("c", Some("c".into()), outputs()).unwrap();
            tasks.finish(&t, exited(0));
        }
        assert!(
            tasks.get(&quiet.id).is_ok(),
            "the quiet session's result is kept"
        );
        let churn: Vec<String> = tasks
            .list()
            .into_iter()
            .filter(|t| t.owner.as_deref() == Some("c"))
            .map(|t| t.id)
            .collect();
        assert_eq!(churn, ["bash-99", "bash-100", "bash-101"]);
        // Past the total (5): unowned tasks, the fullest share, lose theirs; q keeps its one.
        for _ in 0..3 {
            let (t, _) = tasks.insert("n", None, outputs()).unwrap();
            tasks.finish(&t, exited(0));
        }
        assert_eq!(tasks.finished, 5);
        assert!(tasks.get(&quiet.id).is_ok());
        assert_eq!(tasks.list().len(), 5);
    }

    #[test]
    fn end_states() {
        let mut tasks = Tasks::new(10, 10);
        let (a, _) = tasks.insert("a", None, outputs()).unwrap();
        let signal = End::Exited {
            code: None,
            signal: Some("SIGSEGV".into()),
        };
        assert_eq!(tasks.finish(&a, signal).state, TaskState::Killed);
        let (b, _) = tasks.insert("b", None, outputs()).unwrap();
        assert_eq!(tasks.finish(&b, End::SpawnFailed).state, TaskState::Killed);
        let (c, control) = tasks.insert("c", None, outputs()).unwrap();
        tasks.kill("bash-3").unwrap();
        assert!(control.kill.is_cancelled());
        let done = tasks.finish(&c, exited(0));
        assert_eq!((done.state, done.exit_code), (TaskState::Killed, Some(0)));
        assert_eq!(tasks.running, 0);
    }

    #[test]
    fn an_adopted_task_reads_from_the_given_offsets() {
        let mut tasks = Tasks::new(1, 10);
        let outputs = outputs();
        outputs[0].write(b"seen");
        outputs[1].write(b"e1");
        tasks.reserve(None).unwrap();
        let control = Arc::new(Control::default());
        let task = tasks.adopt_reserved(
            "x",
            None,
            outputs.clone(),
            [4, 2],
            Default::default(),
            control.clone(),
        );
        assert_eq!(task.id, "bash-1");
        assert!(matches!(tasks.reserve(None), Err(ExecError::TaskLimit(_))));
        outputs[0].write(b"new");
        let read = tasks.read("bash-1").unwrap();
        assert_eq!(
            (read.stdout.text.as_str(), read.stderr.text.as_str()),
            ("new", "")
        );
        tasks.kill("bash-1").unwrap();
        assert!(
            control.kill.is_cancelled(),
            "the table kills through the given control"
        );
    }

    #[test]
    fn shutdown_refuses_and_kills() {
        let mut tasks = Tasks::new(10, 10);
        let (_, control) = tasks.insert("a", None, outputs()).unwrap();
        let live = tasks.begin_shutdown();
        assert_eq!(live.len(), 1);
        assert!(control.kill.is_cancelled());
        assert_eq!(tasks.get("bash-1").unwrap().state, TaskState::Killed);
        assert!(tasks.insert("b", None, outputs()).is_err());
    }
}
