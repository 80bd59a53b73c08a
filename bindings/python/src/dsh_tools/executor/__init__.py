"""Executors: what runs the commands the tools ask for."""

from .default import default_executor, describe_executor
from .env import EnvPolicy
from .local import LocalExecutor
from .served import RefusedError, ServedExecutor, ServedExecutorError
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
    "RefusedError",
    "ServedExecutor",
    "ServedExecutorError",
    "Task",
    "TaskDoneHandler",
    "Yielded",
    "default_executor",
    "describe_executor",
]
