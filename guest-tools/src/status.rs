//! A background task's status line, shared by `bash_output` and the completion notice.

use crate::world::{Task, TaskState};

/// The status line of a task whose executor is gone (our extension: the task state `lost`).
pub const LOST: &str =
    "[status: lost: the executor is gone; the command may or may not have finished]";

/// `[status: running]`, `[status: completed, exit code: <n>]`, `[status: killed by <SIG>]`,
/// `[status: killed]` or [`LOST`].
///
/// A signal always means killed, even with state `completed` (improved over the original, which
/// could report a self-signalled task as `completed, exit code: 0`); `completed` without an exit
/// code has nothing honest to print, so it reads as killed too. A lost task (its executor is
/// gone) reads as lost whatever else it carries: nobody knows how it ended, if it did.
pub fn line(task: &Task) -> String {
    match (&task.signal, task.state, task.exit_code) {
        (_, TaskState::Lost, _) => LOST.to_string(),
        (Some(signal), _, _) => format!("[status: killed by {signal}]"),
        (None, TaskState::Running, _) => "[status: running]".to_string(),
        (None, TaskState::Completed, Some(code)) => {
            format!("[status: completed, exit code: {code}]")
        }
        (None, TaskState::Completed | TaskState::Killed, _) => "[status: killed]".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(state: TaskState, exit_code: Option<i32>, signal: Option<&str>) -> Task {
        Task {
            id: "bash-1".into(),
            command: "x".into(),
            owner: None,
            state,
            exit_code,
            signal: signal.map(str::to_string),
            relocated: None,
        }
    }

    #[test]
    fn running() {
        assert_eq!(
            line(&task(TaskState::Running, None, None)),
            "[status: running]"
        );
    }

    #[test]
    fn completed_with_code() {
        assert_eq!(
            line(&task(TaskState::Completed, Some(0), None)),
            "[status: completed, exit code: 0]"
        );
        assert_eq!(
            line(&task(TaskState::Completed, Some(2), None)),
            "[status: completed, exit code: 2]"
        );
    }

    #[test]
    fn killed_by_signal() {
        assert_eq!(
            line(&task(TaskState::Killed, None, Some("SIGTERM"))),
            "[status: killed by SIGTERM]"
        );
    }

    #[test]
    fn killed_without_known_signal() {
        assert_eq!(
            line(&task(TaskState::Killed, None, None)),
            "[status: killed]"
        );
        assert_eq!(
            line(&task(TaskState::Killed, Some(1), None)),
            "[status: killed]"
        );
    }

    #[test]
    fn a_signal_is_never_completed() {
        assert_eq!(
            line(&task(TaskState::Completed, Some(0), Some("SIGKILL"))),
            "[status: killed by SIGKILL]"
        );
    }

    #[test]
    fn lost() {
        let lost = "[status: lost: the executor is gone; the command may or may not have finished]";
        assert_eq!(line(&task(TaskState::Lost, None, None)), lost);
        // Whatever else a lost task carries, nobody knows how it ended.
        assert_eq!(line(&task(TaskState::Lost, Some(0), None)), lost);
        assert_eq!(line(&task(TaskState::Lost, None, Some("SIGKILL"))), lost);
    }

    #[test]
    fn completed_without_code_is_killed() {
        assert_eq!(
            line(&task(TaskState::Completed, None, None)),
            "[status: killed]"
        );
    }
}
