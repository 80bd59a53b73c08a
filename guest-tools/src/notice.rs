//! Completion notices: when a background task ends, tell its owner's session.

use crate::status;
use crate::world::{Agent, InjectError, Source, Task, TaskState};

/// The plugin name the notices are injected under, as in the original harness.
const PLUGIN: &str = "tool-bash";

/// The notice for a finished task; for a lost one (its executor is gone), that it was lost and
/// its output can no longer be read, so the model is not sent to read it.
pub fn text(task: &Task) -> String {
    if task.state == TaskState::Lost {
        return format!(
            "background bash task {} was lost {}. Its output can no longer be read.",
            task.id,
            status::line(task)
        );
    }
    format!(
        "background bash task {} finished {}. Read its output with bash_output.",
        task.id,
        status::line(task)
    )
}

/// Inject the notice into the owner's session, if the task has an owner.
///
/// An owner that no longer exists is not a failure (the notice has nobody to inform); any other
/// inject failure is returned for the host's log and never affects the task.
pub fn deliver(agent: &dyn Agent, task: &Task) -> Result<(), String> {
    let Some(owner) = &task.owner else {
        return Ok(());
    };
    let source = Source {
        kind: "plugin".to_string(),
        plugin: Some(PLUGIN.to_string()),
    };
    match agent.inject(owner, &text(task), source) {
        Ok(()) | Err(InjectError::UnknownOwner) => Ok(()),
        Err(InjectError::Failed(message)) => Err(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::{FakeAgent, Injection};

    fn task(owner: Option<&str>, state: TaskState, code: Option<i32>, sig: Option<&str>) -> Task {
        Task {
            id: "bash-7".into(),
            command: "sleep 1".into(),
            owner: owner.map(str::to_string),
            state,
            exit_code: code,
            signal: sig.map(str::to_string),
            relocated: None,
        }
    }

    #[test]
    fn notice_texts() {
        assert_eq!(
            text(&task(None, TaskState::Completed, Some(0), None)),
            "background bash task bash-7 finished [status: completed, exit code: 0]. Read its output with bash_output."
        );
        assert_eq!(
            text(&task(None, TaskState::Killed, None, Some("SIGTERM"))),
            "background bash task bash-7 finished [status: killed by SIGTERM]. Read its output with bash_output."
        );
        assert_eq!(
            text(&task(None, TaskState::Killed, None, None)),
            "background bash task bash-7 finished [status: killed]. Read its output with bash_output."
        );
        assert_eq!(
            text(&task(None, TaskState::Lost, None, None)),
            "background bash task bash-7 was lost [status: lost: the executor is gone; the command may or may not have finished]. Its output can no longer be read."
        );
    }

    #[test]
    fn injects_into_owner_session_as_plugin() {
        let agent = FakeAgent::default();
        let t = task(Some("s1"), TaskState::Completed, Some(3), None);
        assert_eq!(deliver(&agent, &t), Ok(()));
        assert_eq!(
            agent.injections.borrow().clone(),
            vec![Injection {
                owner: "s1".into(),
                text: "background bash task bash-7 finished [status: completed, exit code: 3]. Read its output with bash_output.".into(),
                source: Source {
                    kind: "plugin".into(),
                    plugin: Some("tool-bash".into())
                },
            }]
        );
    }

    #[test]
    fn no_owner_injects_nothing() {
        let agent = FakeAgent::default();
        let t = task(None, TaskState::Completed, Some(0), None);
        assert_eq!(deliver(&agent, &t), Ok(()));
        assert!(agent.injections.borrow().is_empty());
    }

    #[test]
    fn unknown_owner_is_dropped_silently() {
        let agent = FakeAgent {
            error: Some(InjectError::UnknownOwner),
            ..Default::default()
        };
        let t = task(Some("gone"), TaskState::Killed, None, None);
        assert_eq!(deliver(&agent, &t), Ok(()));
        assert_eq!(agent.injections.borrow().len(), 1);
    }

    #[test]
    fn other_inject_failure_is_reported() {
        let agent = FakeAgent {
            error: Some(InjectError::Failed("queue full".into())),
            ..Default::default()
        };
        let t = task(Some("s1"), TaskState::Killed, None, None);
        assert_eq!(deliver(&agent, &t), Err("queue full".to_string()));
    }
}
