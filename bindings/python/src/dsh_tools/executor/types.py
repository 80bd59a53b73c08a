"""The data of the `dsh:bash/bash-executor` interface, as plain Python (snake_case keys).

Every executor, the bundled subprocess one or your own, takes and returns these shapes; the
host converts them to and from the component's WIT records.
"""

from __future__ import annotations

from typing import Callable, List, Literal, Optional, Protocol, TypedDict, runtime_checkable

TaskState = Literal["running", "completed", "killed", "lost"]
"""Where a task stands. `lost`: the executor that ran it is gone (a served executor's server lost
for good); whether the command still runs or finished, and how, is unknown, and its output can no
longer be read. `LocalExecutor` never produces it."""

ErrorCase = Literal[
    "invalid-request",
    "workdir-unusable",
    "spawn-failed",
    "unknown-task",
    "task-limit",
    "aborted",
    "internal",
]


DeniedAccess = Literal["read", "write", "socket", "connect", "undone"]

DenialReason = Literal["outside-writable-roots", "denied-read", "protected-path", "network-off", "loopback-only", "created-after-setup", "host-not-allowed"]

SandboxMode = Literal["read-only", "workspace-write"]

SandboxNetwork = Literal["off", "loopback", "on"]


class Denial(TypedDict):
    """One operation a sandbox denied. `target`: the path as the kernel resolved it, the address
    (`203.0.113.7:443`, `[2001:db8::1]:443`) or the socket family (`AF_INET`)."""

    access: DeniedAccess
    target: str
    reason: DenialReason


class Denials(TypedDict):
    """What a sandbox denied a command, as the executor knows it (never guessed from output): the
    first few distinct denials in order, and how many more distinct ones there were. An executor
    without a sandbox reports `{"first": [], "more": 0}`."""

    first: List[Denial]
    more: int


class SandboxPolicy(TypedDict):
    """The sandbox every command runs in, for the tools to describe to the model."""

    mode: SandboxMode
    # Directories a command may write beneath, besides its own TMPDIR; empty in read-only.
    writable: List[str]
    denied_reads: List[str]
    network: SandboxNetwork
    # The hosts a command may reach through the sandbox's proxy (`registry.npmjs.org`,
    # `*.pythonhosted.org`); the network is then "loopback". Executors give it; the tools
    # read one an executor of an older version leaves out as none.
    allowed_hosts: List[str]


class Limits(TypedDict):
    default_timeout_ms: float
    max_timeout_ms: float
    max_output_bytes: int
    grace_ms: float
    # None when commands run unconfined.
    sandbox: Optional[SandboxPolicy]


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
    # The complete spill file was deleted to keep within a spill budget (read as False when
    # an executor written for an older version leaves it out).
    spill_evicted: bool


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
    denials: Denials


class StreamDelta(TypedDict):
    text: str
    lossy: bool
    spill_path: Optional[str]
    # The complete spill file was deleted to keep within a spill budget (read as False when
    # an executor written for an older version leaves it out).
    spill_evicted: bool


class Read(TypedDict):
    stdout: StreamDelta
    stderr: StreamDelta
    task: Task
    # Denied since the previous read.
    denials: Denials


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
        killed, failed to spawn, or lost with its executor), from any thread, and never after
        `shutdown` began."""
        ...

    def shutdown(self) -> None:
        """Kill every running task and wait until each has ended."""
        ...
