"""The dsh bash tools (`bash`, `bash_output`, `bash_kill`) for Python agents.

The tools' model-facing logic is a WebAssembly component, the very one `dsh-host` embeds, run
with wasmtime; this package links it to an executor that runs the commands (by default
dsh-host's own through `dsh-host executor serve --stdio` when a `dsh-host` is installed,
else `LocalExecutor`) and to your sessions, which receive completion notices.

    from dsh_tools import Tools

    with Tools() as tools, tools.session(cwd="/tmp") as session:
        result = session.call("bash", {"command": "ls", "description": "List the files"})
        print(result.text, result.is_error)
"""

from .approval import ApproveCallback, PolicyError, PolicySource, Question
from .component import ComponentError, bundled_component
from .definitions import Annotations, ToolDefinition
from .executor import (
    EnvPolicy,
    Executor,
    ExecutorError,
    LocalExecutor,
    ServedExecutor,
    ServedExecutorError,
    default_executor,
    describe_executor,
)
from .tools import Notice, NoticeCallback, NoticeSource, Session, ToolResult, Tools

__all__ = [
    "Annotations",
    "ApproveCallback",
    "ComponentError",
    "EnvPolicy",
    "Executor",
    "ExecutorError",
    "Notice",
    "NoticeCallback",
    "NoticeSource",
    "PolicyError",
    "PolicySource",
    "Question",
    "Session",
    "LocalExecutor",
    "ServedExecutor",
    "ServedExecutorError",
    "ToolDefinition",
    "ToolResult",
    "Tools",
    "bundled_component",
    "default_executor",
    "describe_executor",
]
