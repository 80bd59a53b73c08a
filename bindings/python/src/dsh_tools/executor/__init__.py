"""Executors: what runs the commands the tools ask for."""

from .env import EnvPolicy
from .local import LocalExecutor
from .types import (
    Denial,
    Denials,
    Executor,
    ExecutorError,
    Limits,
    Read,
    RunResult,
    SandboxPolicy,
    Spec,
    StreamDelta,
    StreamOutput,
    Task,
    TaskDoneHandler,
    Yielded,
)

__all__ = [
    "Denial",
    "Denials",
    "EnvPolicy",
    "Executor",
    "ExecutorError",
    "Limits",
    "Read",
    "RunResult",
    "SandboxPolicy",
    "Spec",
    "StreamDelta",
    "StreamOutput",
    "LocalExecutor",
    "Task",
    "TaskDoneHandler",
    "Yielded",
]
