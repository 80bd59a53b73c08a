"""The tools: definitions, calls, sessions and their completion notices."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Union

from . import wit
from .approval import Approval, ApproveCallback, PolicyError, PolicySource, read_sources
from .component import APPROVAL, CALL_ABORT, ComponentError, ComponentSource, Instance
from .definitions import ToolDefinition, from_wit, render
from .executor.default import default_executor, describe_executor
from .executor.types import Executor, ExecutorError, Task

Arguments = Union[str, bytes, Dict[str, Any], Any]


@dataclass(frozen=True)
class ToolResult:
    """What a tool call gives the model: `text`, and whether it is an error result."""

    text: str
    is_error: bool
    error_code: Optional[str] = None
    """A stable code for error results (`invalid-arguments`, `unknown-tool`, ...), else None."""


@dataclass(frozen=True)
class NoticeSource:
    """Who wrote a notice: kind `plugin`, plugin `tool-bash` for the tools' completion notices."""

    kind: str
    plugin: Optional[str]


@dataclass(frozen=True)
class Notice:
    """A message the component injected into a session (a background task finished)."""

    owner: str
    text: str
    source: NoticeSource


NoticeCallback = Callable[[Notice], None]


class Session:
    """One agent conversation: its own owner token, working directory and background tasks.

    Completion notices of its tasks go to `on_notice` (called from the executor's thread) and
    are also kept until `take_notices()` takes them. `close()` stops the session's running tasks.
    """

    def __init__(self, tools: "Tools", cwd: Optional[str], on_notice: Optional[NoticeCallback]):
        self.tools = tools
        self.owner = "session-" + secrets.token_hex(16)
        self.cwd = cwd
        self.on_notice = on_notice
        self._notices: List[Notice] = []
        self._cond = threading.Condition()
        self.closed = False

    def call(self, name: str, arguments: Arguments, *, abort: Optional[threading.Event] = None) -> ToolResult:
        """Run one tool call in this session; `abort` set aborts its foreground command."""
        return self.tools.call(name, arguments, self, abort=abort)

    async def acall(self, name: str, arguments: Arguments) -> ToolResult:
        """`call` off the event loop; cancelling the awaiting task aborts the foreground command
        (see `Tools.acall`)."""
        return await self.tools.acall(name, arguments, self)

    def take_notices(self, timeout: float = 0.0) -> List[Notice]:
        """The notices received since the previous take, waiting up to `timeout` seconds for one."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._notices and time.monotonic() < deadline:
                self._cond.wait(deadline - time.monotonic())
            notices, self._notices = self._notices, []
            return notices

    def grants(self) -> List[str]:
        """The rules the person allowed "for this session" in this session (`tools.grants`)."""
        return self.tools.grants(self.owner)

    def close(self) -> None:
        """Stop this session's running tasks and wait until they ended. No notices after this;
        its session grants end."""
        if self.closed:
            return
        self.closed = True
        self.tools._forget(self)
        self.tools._approval.end_session(self.owner)
        self.tools._stop_tasks(lambda t: t["owner"] == self.owner)

    def _receive(self, notice: Notice) -> None:
        with self._cond:
            self._notices.append(notice)
            self._cond.notify_all()
        if self.on_notice is not None:
            self.on_notice(notice)

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def _cwd(cwd: Union[str, "os.PathLike[str]", None]) -> Optional[str]:
    if cwd is None:
        return None
    path = os.fspath(cwd)
    if not isinstance(path, str) or not os.path.isabs(path):
        raise ValueError(f"a session's cwd must be an absolute path, got {cwd!r}")
    return path


def _arguments_json(arguments: Arguments) -> str:
    if isinstance(arguments, str):
        return arguments
    if isinstance(arguments, bytes):
        return arguments.decode("utf-8", "replace")
    try:
        return json.dumps(arguments)
    except (TypeError, ValueError) as e:
        raise TypeError(f"tool arguments must be JSON text or a JSON-serializable value: {e}") from None


class Tools:
    """The bash tools: the component (bundled unless `component` names another, as a path or
    bytes) linked to an executor (unless given, `default_executor()`: dsh-host's own through
    `dsh-host executor serve --stdio` when a `dsh-host` is installed, else a `LocalExecutor`
    with the contract's defaults; `doctor()` says which).

    Calls may run from several threads at once; each runs in a fresh component instance.
    `close()` stops every session's tasks, and shuts down the executor if it made it.

    Permission rules need a component composed with the policy middleware (it imports
    `dsh:bash/approval`): `policy` is its files (paths, or `(name, text)` pairs; a bare path is
    one file), checked now; `approve` answers the commands they ask about (see `Question` and
    `ApproveCallback`), within `approve_timeout` seconds; `approve_loop` is the event loop its
    coroutines run on (else each runs in a fresh loop of its own thread).
    """

    def __init__(
        self,
        executor: Optional[Executor] = None,
        component: ComponentSource = None,
        *,
        policy: Union[PolicySource, Iterable[PolicySource], None] = None,
        approve: Optional[ApproveCallback] = None,
        approve_timeout: float = 50.0,
        approve_loop: Optional[asyncio.AbstractEventLoop] = None,
    ):
        # Read and checked before anything starts: a file that cannot be read or does not load
        # stops the construction, as it stops `dsh-host --policy`; no rule is dropped silently.
        files = [] if policy is None else read_sources(policy)
        self._lock = threading.Lock()
        self._sessions: Dict[str, Session] = {}
        self._closed = False
        self._approval = Approval(files, approve, approve_timeout, approve_loop, self._is_open)
        self.undelivered: List[str] = []
        """Why notices could not be delivered (their session was closed, a callback failed)."""
        self.approval_failures = self._approval.failures
        """Why `approve` answers were taken as declined (it raised, or answered something else)."""
        self.policy_rule_count: Optional[int] = None
        """How many rules the policy files hold, for a component with permission rules."""
        self._owns_executor = executor is None
        self.executor: Executor = executor if executor is not None else default_executor()
        try:
            self._instance = Instance(component, self.executor, self._deliver, self._approval)
            self._check_policy(policy is not None, approve is not None)
        except BaseException:
            if self._owns_executor:
                self.executor.shutdown()
            raise
        self.tool_definitions: List[ToolDefinition] = [from_wit(d) for d in self._instance.require("list-tools")()]
        self.executor.set_task_done_handler(self._task_done)

    def _check_policy(self, has_policy: bool, has_approve: bool) -> None:
        if not self._instance.imports_approval:
            if has_policy or has_approve:
                given = "policy=" if has_policy else "approve="
                raise ComponentError(
                    f"{given} needs a component that imports {APPROVAL}: the tools composed with the "
                    "policy middleware (policy/middleware/compose.sh TOOLS.wasm OUT.wasm); this one "
                    "does not import it, so it would enforce no rules"
                )
            return
        outcome = self._instance.check_policy(self._approval.files)
        if isinstance(outcome, str):
            raise PolicyError(f"the policy files do not load: {outcome}")
        self.policy_rule_count = outcome

    # -- definitions ----------------------------------------------------------------------

    def doctor(self) -> Dict[str, Any]:
        """Which executor runs the commands (`kind`: `served`, `local` or `custom`) and what it
        lacks next to dsh-host's own (see `describe_executor`)."""
        return describe_executor(self.executor)

    def definitions(self, format: str = "mcp") -> List[Dict[str, Any]]:
        """The tool definitions as JSON-ready data: "mcp", "openai" or "anthropic"."""
        return render(self.tool_definitions, format)

    def grants(self, owner: Optional[str]) -> List[str]:
        """The rules the person allowed "for this session" in the session `owner` (a
        `Session.owner`), in the order granted; none once it closed."""
        return self._approval.grants(owner)

    def instructions(self) -> Optional[str]:
        """The component's usage instructions for a system prompt, or None when it has none."""
        func = self._instance.export("instructions")
        return None if func is None else func()

    # -- sessions and calls ---------------------------------------------------------------

    def session(
        self,
        cwd: Union[str, "os.PathLike[str]", None] = None,
        on_notice: Optional[NoticeCallback] = None,
    ) -> Session:
        """A new session; relative `workdir`s resolve against `cwd` (absolute)."""
        session = Session(self, _cwd(cwd), on_notice)
        with self._lock:
            if self._closed:
                raise RuntimeError("these tools are closed")
            self._sessions[session.owner] = session
        return session

    def call(
        self,
        name: str,
        arguments: Arguments,
        session: Optional[Session] = None,
        *,
        abort: Optional[threading.Event] = None,
    ) -> ToolResult:
        """Run one tool call; without a session it owns no tasks and reaches only ownerless ones.

        `abort`, once set, aborts the call's foreground command: the executor stops it (TERM to
        its group, KILL after the grace period; one set before it starts never starts it) and
        the result is the component's aborted error. Background tasks are not touched. An
        executor whose `run` takes no `abort` keyword runs the command to its end."""
        if not isinstance(name, str):
            raise TypeError(f"a tool name is a string, got {name!r}")
        if session is not None and (session.closed or session.tools is not self):
            raise RuntimeError("the session is closed or belongs to other tools")
        if self._closed:
            raise RuntimeError("these tools are closed")
        caller = wit.record(
            owner=None if session is None else session.owner,
            cwd=None if session is None else session.cwd,
        )
        token = CALL_ABORT.set(abort)
        try:
            r = self._instance.require("call-tool")(name, _arguments_json(arguments), caller)
        finally:
            CALL_ABORT.reset(token)
        return ToolResult(r.text, wit.field(r, "is_error"), wit.field(r, "error_code"))

    async def acall(self, name: str, arguments: Arguments, session: Optional[Session] = None) -> ToolResult:
        """`call` in a thread of its own, awaited without blocking the event loop.

        Cancelling the awaiting task aborts the call: its foreground command is stopped (as
        `call(..., abort=)` does), and once the call has ended, `CancelledError` goes on; the
        aborted result is dropped, as `dsh-host mcp` drops the answer of a cancelled request."""
        abort = threading.Event()
        loop = asyncio.get_running_loop()
        done: "asyncio.Future[ToolResult]" = loop.create_future()

        def settle(result: Optional[ToolResult], error: Optional[BaseException]) -> None:
            if done.done():
                return
            if error is not None:
                done.set_exception(error)
            else:
                assert result is not None
                done.set_result(result)

        def work() -> None:
            result: Optional[ToolResult] = None
            error: Optional[BaseException] = None
            try:
                result = self.call(name, arguments, session, abort=abort)
            except BaseException as e:  # handed to the awaiting task, which raises it
                error = e
            try:
                loop.call_soon_threadsafe(settle, result, error)
            except RuntimeError:
                pass  # the loop closed meanwhile: nobody awaits the call any more

        # A thread per call, not the loop's default executor: a foreground call may take up to
        # its timeout, and a pool of a few threads would make other calls wait for it.
        threading.Thread(target=work, name=f"dsh-tools-{name}", daemon=True).start()
        try:
            return await asyncio.shield(done)
        except asyncio.CancelledError:
            abort.set()
            # The command is stopped before the cancellation goes on. A second cancellation
            # stops this wait; the call still ends soon, aborted.
            await asyncio.wait([done])
            if not done.cancelled():
                done.exception()  # retrieved: the aborted call's outcome is dropped
            raise

    def close(self) -> None:
        """Stop every session's tasks (and the executor, if these tools made it)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            sessions = list(self._sessions.values())
        for session in sessions:
            session.close()
        if self._owns_executor:
            self.executor.shutdown()
        else:
            self._stop_tasks(lambda t: t["owner"] is None)
        self.executor.set_task_done_handler(None)

    def __enter__(self) -> "Tools":
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- internals ------------------------------------------------------------------------

    def _is_open(self, owner: Optional[str]) -> bool:
        with self._lock:
            return owner in self._sessions

    def _forget(self, session: Session) -> None:
        with self._lock:
            self._sessions.pop(session.owner, None)

    def _stop_tasks(self, which: Callable[[Task], bool]) -> None:
        running = [t["id"] for t in self.executor.list_tasks() if t["state"] == "running" and which(t)]
        for task_id in running:
            try:
                self.executor.kill(task_id)
            except ExecutorError:
                continue  # it ended and was forgotten meanwhile
        wait = getattr(self.executor, "wait", None)
        for task_id in running:
            if callable(wait):
                wait(task_id)

    def _task_done(self, task: Task) -> None:
        """From the executor: hand the finished task to the component, which writes the notice."""
        try:
            outcome = self._instance.require("task-done")(wit.task(task))
        except ComponentError as e:
            outcome = str(e)
        if outcome is not None:  # result<_, string>: None is ok, a string is the error
            with self._lock:
                self.undelivered.append(f"notice for task {task['id']} not delivered: {outcome}")

    def _deliver(self, owner: str, text: str, source: Dict[str, Optional[str]]) -> bool:
        with self._lock:
            session = self._sessions.get(owner)
        if session is None:
            return False
        session._receive(Notice(owner, text, NoticeSource(source["kind"] or "", source["plugin"])))
        return True
