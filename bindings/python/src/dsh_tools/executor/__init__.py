"""Executors: what runs the commands the tools ask for."""

from .env import EnvPolicy
from .local import LocalExecutor
from .types import (
    Executor,
    ExecutorError,
    Limits,
    Read,
    RunResult,
    Spec,
    StreamDelta,
    StreamOutput,
    Task,
    TaskDoneHandler,
    Yielded,
)

__all__ = [
    "EnvPolicy",
    "Executor",
    "ExecutorError",
    "Limits",
    "Read",
    "RunResult",
    "Spec",
    "StreamDelta",
    "StreamOutput",
    "LocalExecutor",
    "Task",
    "TaskDoneHandler",
    "Yielded",
]
