"""Run the dsh:bash tools component from Python with wasmtime-py (PyPI `wasmtime` 50).

The component holds every model-facing rule (validation, rendering, notices); this module
supplies its two imports in Python: `dsh:bash/bash-executor` (``LocalExecutor``, real processes)
and `dsh:bash/agent` (``ToolHost`` sessions collect the injected notices).

    host = ToolHost("guest_tools.wasm", LocalExecutor())
    session = host.open_session(cwd="/tmp")
    result = session.call("bash", {"command": "ls", "description": "List the files"})
    print(result.text, result.is_error)

wasmtime-py specifics handled here: record fields are read and written by their kebab-case WIT
names (``timeout-ms``); `f64` values must be Python floats; a `result` whose ok and err types
overlap (``result<_, inject-error>``) is passed as a tagged ``Variant("ok" | "err", payload)``,
other results as the bare value. The component imports these two interfaces and nothing else (no
WASI), so the linker holds nothing else: a component that reaches for more fails to instantiate.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import math
import os
import secrets
import selectors
import signal
import stat
import subprocess
import threading
import time
from collections import deque
from typing import Any, Callable, Optional

import wasmtime
from wasmtime.component import Component, Linker, Record, Variant

WIT_VERSION = "0.2.0"
EXECUTOR = f"dsh:bash/bash-executor@{WIT_VERSION}"
AGENT = f"dsh:bash/agent@{WIT_VERSION}"
TOOLS = f"dsh:bash/tools@{WIT_VERSION}"

# ---------------------------------------------------------------------------------------------
# The executor: plain Python data in, plain Python data out (snake_case dicts).
# ---------------------------------------------------------------------------------------------


class ExecutorError(Exception):
    """One case of the WIT `executor-error` variant (`invalid-request`, `unknown-task`, ...)."""

    def __init__(self, case: str, message: Optional[str] = None):
        super().__init__(message or case)
        self.case = case
        self.message = message


def _os_error_text(err: OSError) -> str:
    # The Rust executor's wording, so that every host renders the same text.
    code = err.errno or 0
    return f"{os.strerror(code)} (os error {code})"


def _workdir_unusable(workdir: str, err: OSError) -> ExecutorError:
    return ExecutorError("workdir-unusable", f"workdir {json.dumps(workdir)} is not usable: {_os_error_text(err)}")


def _check_workdir(workdir: str) -> None:
    try:
        st = os.stat(workdir)
    except OSError as err:
        raise _workdir_unusable(workdir, err) from None
    if not stat.S_ISDIR(st.st_mode):
        raise _workdir_unusable(workdir, OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR)))
    if not os.access(workdir, os.X_OK):
        raise _workdir_unusable(workdir, OSError(errno.EACCES, os.strerror(errno.EACCES)))


def child_env() -> dict[str, str]:
    """The host's environment minus secrets, plus the non-interactive settings."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not any(word in k.upper() for word in ("KEY", "SECRET", "TOKEN", "PASSWORD"))
    }
    env.update(NO_COLOR="1", TERM="dumb", PAGER="cat", GIT_PAGER="cat", GIT_TERMINAL_PROMPT="0")
    return env


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"SIG{num}"


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group, read from /proc."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                raw = f.read()
        except OSError:
            continue
        fields = raw[raw.rfind(b")") + 2 :].split()
        if fields and fields[0] != b"Z" and int(fields[2]) == pgid:
            members.append(int(entry))
    return members


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class _Stream:
    """The tail of one output stream (byte-exact, bounded) and its whole-stream length."""

    def __init__(self, limit: int):
        self.limit = limit
        self.buf = bytearray()
        self.total = 0

    def write(self, data: bytes) -> None:
        self.total += len(data)
        self.buf += data
        if len(self.buf) > self.limit:
            del self.buf[: len(self.buf) - self.limit]

    def snapshot(self) -> dict:
        # This small executor keeps no spill files: a truncated stream has no complete copy.
        return {
            "text": self.buf.decode("utf-8", "replace"),
            "truncated": self.total > len(self.buf),
            "spill_path": None,
        }

    def read_since(self, offset: int) -> tuple[dict, int]:
        start = self.total - len(self.buf)
        lossy = offset < start
        chunk = bytes(self.buf) if lossy else bytes(self.buf[offset - start :])
        return {"text": chunk.decode("utf-8", "replace"), "lossy": lossy, "spill_path": None}, self.total


class _Proc:
    """One `bash -c` in its own session (so its own process group), driven to its end."""

    def __init__(self, spec: dict, max_output_bytes: int):
        self.out = _Stream(max_output_bytes)
        self.err = _Stream(max_output_bytes)
        self.popen = subprocess.Popen(
            ["bash", "-c", spec["command"]],
            cwd=spec["workdir"],
            env=child_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
        )
        self.pgid = self.popen.pid
        self.lock = threading.Lock()
        self.sel = selectors.DefaultSelector()
        for pipe, stream in ((self.popen.stdout, self.out), (self.popen.stderr, self.err)):
            os.set_blocking(pipe.fileno(), False)
            self.sel.register(pipe, selectors.EVENT_READ, stream)

    def _pump(self, timeout: float) -> None:
        """Read what the pipes have, waiting at most `timeout` seconds for something."""
        if not self.sel.get_map():
            time.sleep(timeout)
            return
        for key, _ in self.sel.select(max(timeout, 0)):
            try:
                data = os.read(key.fd, 65536)
            except BlockingIOError:
                continue
            if data:
                with self.lock:
                    key.data.write(data)
            else:
                self.sel.unregister(key.fileobj)
                key.fileobj.close()

    def _drain(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while self.sel.get_map() and time.monotonic() < deadline:
            self._pump(min(0.05, deadline - time.monotonic()))

    def _stop_group(self, grace: float) -> None:
        """TERM to the group, KILL after the grace period if anything is left."""
        _signal_group(self.pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            self._pump(0.01)
            if self.popen.poll() is not None and not _group_members(self.pgid):
                return
        _signal_group(self.pgid, signal.SIGKILL)

    def drive(self, timeout: Optional[float], grace: float, stop: Optional[threading.Event] = None) -> dict:
        """Run to the end. `timeout` (seconds) or `stop` stop the group; returns the facts."""
        deadline = None if timeout is None else time.monotonic() + timeout
        cause = None
        while self.popen.poll() is None:
            if cause is None and deadline is not None and time.monotonic() >= deadline:
                cause = "timeout"
            if cause is None and stop is not None and stop.is_set():
                cause = "kill"
            if cause is not None:
                self._stop_group(grace)
                self.popen.wait()
                break
            wait = 0.05 if deadline is None else min(0.05, max(0.0, deadline - time.monotonic()))
            self._pump(wait)
        # The leader ended: drain the pipes for at most the grace period, then stop leftovers.
        self._drain(grace)
        leftovers = 0
        if cause is None:
            members = _group_members(self.pgid)
            if members:
                leftovers = len(members)
                self._stop_group(grace)
        elif _group_members(self.pgid):
            _signal_group(self.pgid, signal.SIGKILL)
        self._drain(grace)
        for key in list(self.sel.get_map().values()):
            self.sel.unregister(key.fileobj)
            key.fileobj.close()
        self.sel.close()
        code = self.popen.returncode
        return {
            "exit_code": code if code >= 0 else None,
            "signal": _signal_name(-code) if code < 0 else None,
            "cause": cause,
            "leftovers": leftovers,
        }


@dataclasses.dataclass
class _TaskRecord:
    task: dict
    proc: Optional[_Proc]
    stop: threading.Event
    offsets: list
    # The stderr of a task whose shell could not start: `spawn failed: <reason>`.
    spawn_error: Optional[_Stream] = None


class LocalExecutor:
    """The executor contract on this machine's processes, in plain Python.

    Each command is `bash -c` in a new session (own process group, no terminal, stdin from
    /dev/null); a timeout or kill sends SIGTERM to the group and SIGKILL after the grace period.
    Background tasks are read by a thread each; `read_output` returns what arrived since the
    previous read. Simplifications against the Rust executor: no spill files (a truncated
    stream reports `(unavailable)`), and the process group is the tree's boundary.
    """

    def __init__(
        self,
        cwd: Optional[str] = None,
        default_timeout_ms: float = 120_000,
        max_timeout_ms: float = 600_000,
        max_output_bytes: int = 64_000,
        grace_ms: float = 3_000,
        max_tasks: int = 64,
        max_finished_tasks: int = 1024,
    ):
        self.cwd = cwd
        self.default_timeout_ms = float(default_timeout_ms)
        self.max_timeout_ms = float(max_timeout_ms)
        self.max_output_bytes = int(max_output_bytes)
        self.grace_ms = float(grace_ms)
        self.max_tasks = max_tasks
        self.max_finished_tasks = max_finished_tasks
        self._lock = threading.Lock()
        self._tasks: dict[str, _TaskRecord] = {}
        self._finished: deque[str] = deque()
        self._running = 0
        self._next_id = 1
        self._done: list[dict] = []  # task-done events not yet delivered
        self._threads: list[threading.Thread] = []

    # -- the bash-executor operations -----------------------------------------------------

    def limits(self) -> dict:
        return {
            "default_timeout_ms": self.default_timeout_ms,
            "max_timeout_ms": self.max_timeout_ms,
            "max_output_bytes": self.max_output_bytes,
            "grace_ms": self.grace_ms,
        }

    def resolve(self, command: str, workdir: Optional[str], timeout_ms: Optional[float], owner: Optional[str]) -> dict:
        requested = self.default_timeout_ms if timeout_ms is None else timeout_ms
        if not math.isfinite(requested) or requested <= 0:
            raise ExecutorError("invalid-request", f"invalid timeoutMs: expected a positive number, got {requested}")
        return {
            "command": command,
            "workdir": workdir if workdir is not None else (self.cwd or os.getcwd()),
            "timeout_ms": float(min(requested, self.max_timeout_ms)),
            "owner": owner,
        }

    def run(self, spec: dict) -> dict:
        if not math.isfinite(spec["timeout_ms"]) or spec["timeout_ms"] <= 0:
            raise ExecutorError("invalid-request", f"invalid timeoutMs: expected a positive number, got {spec['timeout_ms']}")
        timeout_ms = min(spec["timeout_ms"], self.max_timeout_ms)
        _check_workdir(spec["workdir"])
        proc = self._spawn(spec)
        end = proc.drive(timeout_ms / 1000, self.grace_ms / 1000)
        return {
            "exit_code": end["exit_code"],
            "signal": end["signal"],
            "timed_out": end["cause"] == "timeout",
            "aborted": False,
            "timeout_ms": float(timeout_ms),
            "stdout": proc.out.snapshot(),
            "stderr": proc.err.snapshot(),
            "leftover_processes": end["leftovers"],
            # This executor has no foreground limit: a run never continues as a task.
            "yielded": None,
        }

    def start(self, spec: dict) -> dict:
        _check_workdir(spec["workdir"])
        with self._lock:
            if self._running >= self.max_tasks:
                raise ExecutorError(
                    "task-limit",
                    f"too many background tasks: {self._running} are running, the limit is "
                    f"{self.max_tasks}; wait for one to finish or kill one",
                )
            task = {
                "id": f"bash-{self._next_id}",
                "command": spec["command"],
                "owner": spec["owner"],
                "state": "running",
                "exit_code": None,
                "signal": None,
            }
            self._next_id += 1
            record = _TaskRecord(task, None, threading.Event(), [0, 0])
            self._tasks[task["id"]] = record
            self._running += 1
        try:
            record.proc = self._spawn(spec)
        except ExecutorError as e:
            # A spawn failure ends the task as killed, with the reason on its stderr.
            record.spawn_error = _Stream(self.max_output_bytes)
            record.spawn_error.write(f"spawn failed: {e.message}".encode())
            self._finish(record, None, None, spawn_failed=True)
            return dict(task)
        thread = threading.Thread(target=self._watch, args=(record,), daemon=True)
        self._threads.append(thread)
        thread.start()
        return dict(task)

    def read_output(self, task_id: str) -> dict:
        with self._lock:
            record = self._record(task_id)
            if record.proc is None:
                out = _Stream(self.max_output_bytes)
                err = record.spawn_error or _Stream(self.max_output_bytes)
                lock = None
            else:
                out, err, lock = record.proc.out, record.proc.err, record.proc.lock
            if lock:
                lock.acquire()
            try:
                stdout, record.offsets[0] = out.read_since(record.offsets[0])
                stderr, record.offsets[1] = err.read_since(record.offsets[1])
            finally:
                if lock:
                    lock.release()
            return {"stdout": stdout, "stderr": stderr, "task": dict(record.task)}

    def kill(self, task_id: str) -> bool:
        with self._lock:
            record = self._record(task_id)
            if record.task["state"] != "running":
                return False
            record.task["state"] = "killed"
            self._running -= 1
            self._retire(task_id)
            record.stop.set()
            return True

    def owner_of(self, task_id: str) -> Optional[str]:
        with self._lock:
            record = self._tasks.get(task_id)
            return record.task["owner"] if record else None

    def get(self, task_id: str) -> dict:
        with self._lock:
            return dict(self._record(task_id).task)

    def list_tasks(self) -> list[dict]:
        with self._lock:
            return [dict(r.task) for r in sorted(self._tasks.values(), key=lambda r: int(r.task["id"][5:]))]

    # -- events and lifecycle -------------------------------------------------------------

    def take_finished(self) -> list[dict]:
        """Task-done events since the previous call, each exactly once."""
        with self._lock:
            done, self._done = self._done, []
            return done

    def shutdown(self) -> None:
        """Kill every running task and wait for each to end. No events after this."""
        with self._lock:
            running = [r for r in self._tasks.values() if r.task["state"] == "running"]
        for record in running:
            self.kill(record.task["id"])
        for thread in self._threads:
            thread.join()
        with self._lock:
            self._done = []

    # -- internals ------------------------------------------------------------------------

    def _spawn(self, spec: dict) -> _Proc:
        try:
            return _Proc(spec, self.max_output_bytes)
        except OSError as err:
            try:
                _check_workdir(spec["workdir"])
            except ExecutorError as unusable:
                raise unusable from None
            raise ExecutorError("spawn-failed", f"cannot start bash: {_os_error_text(err)}") from None

    def _record(self, task_id: str) -> _TaskRecord:
        record = self._tasks.get(task_id)
        if record is None:
            raise ExecutorError("unknown-task", task_id)
        return record

    def _watch(self, record: _TaskRecord) -> None:
        assert record.proc is not None
        end = record.proc.drive(None, self.grace_ms / 1000, record.stop)
        self._finish(record, end["exit_code"], end["signal"])

    def _finish(self, record: _TaskRecord, code: Optional[int], sig: Optional[str], spawn_failed: bool = False) -> None:
        with self._lock:
            task = record.task
            task["exit_code"] = code
            task["signal"] = sig
            if task["state"] == "running":
                task["state"] = "killed" if (sig is not None or spawn_failed) else "completed"
                self._running -= 1
                self._retire(task["id"])
            self._done.append(dict(task))

    def _retire(self, task_id: str) -> None:
        self._finished.append(task_id)
        while len(self._finished) > self.max_finished_tasks:
            self._tasks.pop(self._finished.popleft(), None)


# ---------------------------------------------------------------------------------------------
# The host: links the executor and the agent to the component and calls its tools.
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class ToolResult:
    text: str
    is_error: bool
    error_code: Optional[str]


@dataclasses.dataclass
class Notice:
    owner: str
    text: str
    source: dict


def _record(**fields: Any) -> Record:
    """A WIT record for wasmtime-py: attributes named as in WIT (kebab-case)."""
    r = Record()
    for name, value in fields.items():
        setattr(r, name.replace("_", "-"), value)
    return r


def _get(record: Record, name: str) -> Any:
    return getattr(record, name.replace("_", "-"))


def _wit_task(task: dict) -> Record:
    return _record(
        id=task["id"],
        command=task["command"],
        owner=task["owner"],
        state=task["state"],
        exit_code=task["exit_code"],
        signal=task["signal"],
    )


def _wit_error(e: ExecutorError) -> Variant:
    # executor-error's cases overlap (several carry a string), so wasmtime-py tags them.
    return Variant(e.case, None if e.case == "aborted" else (e.message or ""))


class Session:
    """One agent session: an owner token, a working directory and the notices injected for it."""

    def __init__(self, host: "ToolHost", owner: str, cwd: Optional[str]):
        self.host = host
        self.owner = owner
        self.cwd = cwd
        self.notices: list[Notice] = []

    def call(self, tool: str, arguments: Any) -> ToolResult:
        return self.host.call(tool, arguments, owner=self.owner, cwd=self.cwd)

    def take_notices(self) -> list[Notice]:
        self.host.pump()
        notices, self.notices = self.notices, []
        return notices

    def close(self) -> None:
        self.host.sessions.pop(self.owner, None)


_COMPILED: dict[tuple, tuple[wasmtime.Engine, Component]] = {}


def _compile(path: str) -> tuple[wasmtime.Engine, Component]:
    """One engine and compiled component per file (and version of it) per process."""
    st = os.stat(path)
    key = (os.path.abspath(path), st.st_size, st.st_mtime_ns)
    if key not in _COMPILED:
        engine = wasmtime.Engine()
        _COMPILED[key] = (engine, Component.from_file(engine, path))
    return _COMPILED[key]


class ToolHost:
    """Loads the tools component and links `executor` and the sessions' `agent.inject` to it.

    Every call runs in a fresh instance (the component keeps no state between calls). Task-done
    events are delivered to the component by `pump()`, which every call runs first and last;
    call it yourself (or `Session.take_notices()`) to get notices between calls.
    """

    def __init__(self, component: str, executor: LocalExecutor, on_inject: Optional[Callable[[Notice], bool]] = None):
        self.executor = executor
        self.sessions: dict[str, Session] = {}
        self.on_inject = on_inject
        self.log: list[str] = []
        self.engine, self.component = _compile(component)
        # The executor and the agent are all the component imports, and all this linker holds.
        self.linker = Linker(self.engine)
        with self.linker.root() as root:
            with root.add_instance(EXECUTOR) as ex:
                self._link_executor(ex)
            with root.add_instance(AGENT) as agent:
                agent.add_func("inject", self._inject)
        self.tools = [
            {
                "name": d.name,
                "title": d.title,
                "description": d.description,
                "input_schema": json.loads(_get(d, "input_schema")),
                "annotations": {
                    hint: _get(d.annotations, hint)
                    for hint in ("read_only_hint", "destructive_hint", "idempotent_hint", "open_world_hint")
                },
            }
            for d in self._export("list-tools")()
        ]

    # -- public API -----------------------------------------------------------------------

    def open_session(self, cwd: Optional[str] = None) -> Session:
        session = Session(self, "session-" + secrets.token_hex(16), cwd)
        self.sessions[session.owner] = session
        return session

    def call(self, tool: str, arguments: Any, owner: Optional[str] = None, cwd: Optional[str] = None) -> ToolResult:
        """Run one tool call; `arguments` is JSON text or a value to serialize."""
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments)
        self.pump()
        r = self._export("call-tool")(tool, arguments, _record(owner=owner, cwd=cwd))
        self.pump()
        return ToolResult(r.text, _get(r, "is_error"), _get(r, "error_code"))

    def pump(self) -> None:
        """Hand every finished background task to the component, which injects its notice."""
        for task in self.executor.take_finished():
            outcome = self._export("task-done")(_wit_task(task))
            if outcome is not None:  # result<_, string>: None is ok, a string is the error
                self.log.append(f"notice for task {task['id']} not delivered: {outcome}")

    def shutdown(self) -> None:
        self.executor.shutdown()

    # -- internals ------------------------------------------------------------------------

    def _export(self, name: str) -> Callable[..., Any]:
        store = wasmtime.Store(self.engine)
        instance = self.linker.instantiate(store, self.component)
        iface = instance.get_export_index(store, TOOLS)
        index = instance.get_export_index(store, name, iface)
        func = instance.get_func(store, index)
        return lambda *args: func(store, *args)

    def _inject(self, _store: Any, owner: str, text: str, source: Record) -> Variant:
        # result<_, inject-error> overlaps (unknown-owner has no payload, like ok), so it is tagged;
        # inject-error itself does not overlap: None is unknown-owner, a string is failed(...).
        notice = Notice(owner, text, {"kind": source.kind, "plugin": source.plugin})
        if self.on_inject is not None:
            return Variant("ok") if self.on_inject(notice) else Variant("err", None)
        session = self.sessions.get(owner)
        if session is None:
            return Variant("err", None)
        session.notices.append(notice)
        return Variant("ok")

    def _link_executor(self, ex: Any) -> None:
        e = self.executor

        def guarded(op: Callable[[], Any], wrap: Callable[[Any], Any] = lambda v: v) -> Any:
            try:
                return wrap(op())
            except ExecutorError as err:
                return _wit_error(err)

        def current_limits(_s: Any) -> Record:
            return _record(**e.limits())

        def resolve(_s: Any, req: Record) -> Any:
            return guarded(
                lambda: e.resolve(req.command, req.workdir, _get(req, "timeout_ms"), req.owner),
                lambda spec: _record(**spec),
            )

        def run(_s: Any, spec: Record) -> Any:
            def wrap(r: dict) -> Record:
                r = dict(r)
                r["stdout"] = _record(**r["stdout"])
                r["stderr"] = _record(**r["stderr"])
                return _record(**r)

            py_spec = {k: _get(spec, k) for k in ("command", "workdir", "timeout_ms", "owner")}
            return guarded(lambda: e.run(py_spec), wrap)

        def start(_s: Any, spec: Record) -> Any:
            py_spec = {k: _get(spec, k) for k in ("command", "workdir", "timeout_ms", "owner")}
            return guarded(lambda: e.start(py_spec), _wit_task)

        def read_output(_s: Any, task_id: str) -> Any:
            def wrap(r: dict) -> Record:
                return _record(stdout=_record(**r["stdout"]), stderr=_record(**r["stderr"]), task=_wit_task(r["task"]))

            return guarded(lambda: e.read_output(task_id), wrap)

        ex.add_func("current-limits", current_limits)
        ex.add_func("resolve", resolve)
        ex.add_func("run", run)
        ex.add_func("start", start)
        ex.add_func("read-output", read_output)
        ex.add_func("kill", lambda _s, task_id: guarded(lambda: e.kill(task_id)))
        ex.add_func("owner-of", lambda _s, task_id: e.owner_of(task_id))
        ex.add_func("get", lambda _s, task_id: guarded(lambda: e.get(task_id), _wit_task))
        ex.add_func("list-tasks", lambda _s: [_wit_task(t) for t in e.list_tasks()])
