"""The data of the `dsh:bash/bash-executor` interface, as plain Python (snake_case keys).

Every executor, the bundled subprocess one or your own, takes and returns these shapes; the
host converts them to and from the component's WIT records.
"""

from __future__ import annotations

from typing import Callable, List, Literal, Optional, Protocol, TypedDict, runtime_checkable

TaskState = Literal["running", "completed", "killed"]

ErrorCase = Literal[
    "invalid-request",
    "workdir-unusable",
    "spawn-failed",
    "unknown-task",
    "task-limit",
    "aborted",
    "internal",
]


class Limits(TypedDict):
    default_timeout_ms: float
    max_timeout_ms: float
    max_output_bytes: int
    grace_ms: float


class Spec(TypedDict):
    """A resolved command: what `run` and `start` get."""

    command: str
    workdir: str
    timeout_ms: float
    owner: Optional[str]


class StreamOutput(TypedDict):
    text: str
    truncated: bool
    spill_path: Optional[str]


class Task(TypedDict):
    id: str
    command: str
    owner: Optional[str]
    state: TaskState
    exit_code: Optional[int]
    signal: Optional[str]


class Yielded(TypedDict):
    task: Task
    after_ms: float


class RunResult(TypedDict):
    exit_code: Optional[int]
    signal: Optional[str]
    timed_out: bool
    aborted: bool
    timeout_ms: float
    stdout: StreamOutput
    stderr: StreamOutput
    leftover_processes: int
    yielded: Optional[Yielded]


class StreamDelta(TypedDict):
    text: str
    lossy: bool
    spill_path: Optional[str]


class Read(TypedDict):
    stdout: StreamDelta
    stderr: StreamDelta
    task: Task


class ExecutorError(Exception):
    """One case of the WIT `executor-error` variant; the component renders it for the model."""

    def __init__(self, case: ErrorCase, message: Optional[str] = None):
        super().__init__(message or case)
        self.case: ErrorCase = case
        self.message = message


TaskDoneHandler = Callable[[Task], None]


@runtime_checkable
class Executor(Protocol):
    """What the tools need from an executor: the nine `bash-executor` operations, a way to
    report finished background tasks, and a shutdown.

    An operation that fails raises `ExecutorError`; any other exception is a fault of the
    executor, reported to the model as an internal error of that one call.
    """

    def current_limits(self) -> Limits: ...

    def resolve(self, command: str, workdir: Optional[str], timeout_ms: Optional[float], owner: Optional[str]) -> Spec: ...

    def run(self, spec: Spec) -> RunResult: ...

    def start(self, spec: Spec) -> Task: ...

    def read_output(self, task_id: str) -> Read: ...

    def kill(self, task_id: str) -> bool: ...

    def owner_of(self, task_id: str) -> Optional[str]: ...

    def get(self, task_id: str) -> Task: ...

    def list_tasks(self) -> List[Task]: ...

    def set_task_done_handler(self, handler: Optional[TaskDoneHandler]) -> None:
        """Call `handler(task)` exactly once per background task when it ends (completed,
        killed or failed to spawn), from any thread, and never after `shutdown` began."""
        ...

    def shutdown(self) -> None:
        """Kill every running task and wait until each has ended."""
        ...
