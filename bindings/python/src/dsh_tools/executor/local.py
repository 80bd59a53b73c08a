"""The default executor: the executor contract on this machine's processes, in plain Python."""

from __future__ import annotations

import errno
import json
import math
import os
import stat
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Deque, Dict, List, Optional, Sequence

from .env import EnvPolicy
from .process import Process, Tail
from .types import Denials, ExecutorError, Limits, Read, RunResult, Spec, Task, TaskDoneHandler


def _no_denials() -> Denials:
    # Without a sandbox nothing is ever denied a command.
    return {"first": [], "more": 0}


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


def _positive(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name}: expected a finite number > 0, got {value!r}")
    return float(value)


def _positive_int(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name}: expected a whole number > 0, got {value!r}")
    return value


@dataclass
class _TaskRecord:
    task: Task
    stop: threading.Event = field(default_factory=threading.Event)
    proc: Optional[Process] = None
    thread: Optional[threading.Thread] = None
    offsets: List[int] = field(default_factory=lambda: [0, 0])
    # The stderr of a task whose shell could not start: `spawn failed: <reason>`.
    spawn_error: Optional[Tail] = None


class LocalExecutor:
    """Runs each command as `bash -c` in a new session (own process group, no terminal, stdin
    from /dev/null), with the host's environment minus secrets.

    A timeout or kill sends SIGTERM to the group and SIGKILL after the grace period. Background
    tasks are driven by a thread each; `read_output` returns what arrived since the previous
    read. Settings default to the executor contract's; each must be finite and > 0.

    Differences from the Rust executor: no spill files (a truncated stream keeps its in-memory
    tail and names no file), the process group is the tree's boundary (no cgroup or subreaper:
    a command that calls `setsid` escapes it), a foreground run never yields to the background,
    and there is no sandbox (so the limits name
    none and no denial is ever reported).
    """

    def __init__(
        self,
        *,
        cwd: Optional[str] = None,
        default_timeout_ms: float = 120_000,
        max_timeout_ms: float = 600_000,
        max_output_bytes: int = 64_000,
        grace_ms: float = 3_000,
        max_tasks: int = 64,
        max_finished_tasks: int = 1024,
        env_deny: Sequence[str] = (),
        env_allow: Sequence[str] = (),
    ):
        self.cwd = cwd
        self.default_timeout_ms = _positive("default_timeout_ms", default_timeout_ms)
        self.max_timeout_ms = _positive("max_timeout_ms", max_timeout_ms)
        self.max_output_bytes = _positive_int("max_output_bytes", max_output_bytes)
        self.grace_ms = _positive("grace_ms", grace_ms)
        self.max_tasks = _positive_int("max_tasks", max_tasks)
        self.max_finished_tasks = _positive_int("max_finished_tasks", max_finished_tasks)
        self.env_policy = EnvPolicy(deny=tuple(env_deny), allow=tuple(env_allow))
        self._lock = threading.Lock()
        self._tasks: Dict[str, _TaskRecord] = {}
        self._finished: Deque[str] = deque()
        # Tasks whose processes may still exist, retained or not (a killed task is retired at
        # once and may be forgotten before its tree is stopped): shutdown waits for each.
        self._live: Dict[str, _TaskRecord] = {}
        # Starts between taking a slot and handing their task to its thread (or failing).
        self._starting = 0
        self._running = 0
        self._next_id = 1
        self._handler: Optional[TaskDoneHandler] = None
        self._shutting_down = False

    # -- the bash-executor operations -----------------------------------------------------

    def current_limits(self) -> Limits:
        return {
            "default_timeout_ms": self.default_timeout_ms,
            "max_timeout_ms": self.max_timeout_ms,
            "max_output_bytes": self.max_output_bytes,
            "grace_ms": self.grace_ms,
            "sandbox": None,
        }

    def resolve(self, command: str, workdir: Optional[str], timeout_ms: Optional[float], owner: Optional[str]) -> Spec:
        requested = self.default_timeout_ms if timeout_ms is None else timeout_ms
        if not math.isfinite(requested) or requested <= 0:
            raise ExecutorError("invalid-request", f"invalid timeoutMs: expected a positive number, got {requested}")
        return {
            "command": command,
            "workdir": workdir if workdir is not None else (self.cwd or os.getcwd()),
            "timeout_ms": float(min(requested, self.max_timeout_ms)),
            "owner": owner,
        }

    def run(self, spec: Spec, abort: Optional[threading.Event] = None) -> RunResult:
        """Run in the foreground to the end. `abort` set before the start refuses the run
        (`aborted`); set while it runs, it stops the command as a timeout does (TERM to the
        group, KILL after the grace period) and the result says `aborted`."""
        if abort is not None and abort.is_set():
            raise ExecutorError("aborted")
        if not math.isfinite(spec["timeout_ms"]) or spec["timeout_ms"] <= 0:
            raise ExecutorError("invalid-request", f"invalid timeoutMs: expected a positive number, got {spec['timeout_ms']}")
        timeout_ms = min(spec["timeout_ms"], self.max_timeout_ms)
        _check_workdir(spec["workdir"])
        proc = self._spawn(spec)
        end = proc.drive(timeout_ms / 1000, self.grace_ms / 1000, abort)
        return {
            "exit_code": end["exit_code"],
            "signal": end["signal"],
            "timed_out": end["cause"] == "timeout",
            "aborted": end["cause"] == "kill",
            "timeout_ms": float(timeout_ms),
            "stdout": proc.out.snapshot(),
            "stderr": proc.err.snapshot(),
            "leftover_processes": end["leftovers"],
            "yielded": None,
            "denials": _no_denials(),
        }

    def start(self, spec: Spec) -> Task:
        _check_workdir(spec["workdir"])
        with self._lock:
            if self._shutting_down:
                raise ExecutorError("internal", "the executor is shutting down")
            if self._running >= self.max_tasks:
                raise ExecutorError(
                    "task-limit",
                    f"too many background tasks: {self._running} are running, the limit is "
                    f"{self.max_tasks}; wait for one to finish or kill one",
                )
            task: Task = {
                "id": f"bash-{self._next_id}",
                "command": spec["command"],
                "owner": spec["owner"],
                "state": "running",
                "exit_code": None,
                "signal": None,
            }
            self._next_id += 1
            record = _TaskRecord(task)
            self._tasks[task["id"]] = record
            self._running += 1
            self._starting += 1
        try:
            try:
                record.proc = self._spawn(spec)
            except ExecutorError as e:
                # A spawn failure ends the task as killed, with the reason on its stderr.
                record.spawn_error = Tail(self.max_output_bytes)
                record.spawn_error.write(f"spawn failed: {e.message}".encode())
                self._finish(record, None, None, spawn_failed=True)
                return dict(task)  # type: ignore[return-value]
            thread = threading.Thread(target=self._watch, args=(record,), daemon=True, name=task["id"])
            with self._lock:
                record.thread = thread
                self._live[task["id"]] = record
            thread.start()
            return dict(task)  # type: ignore[return-value]
        finally:
            with self._lock:
                self._starting -= 1

    def read_output(self, task_id: str) -> Read:
        with self._lock:
            record = self._record(task_id)
            if record.proc is None:
                out, err = Tail(self.max_output_bytes), record.spawn_error or Tail(self.max_output_bytes)
                lock: Optional[threading.Lock] = None
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
            return {"stdout": stdout, "stderr": stderr, "task": dict(record.task), "denials": _no_denials()}  # type: ignore[typeddict-item]

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

    def get(self, task_id: str) -> Task:
        with self._lock:
            return dict(self._record(task_id).task)  # type: ignore[return-value]

    def list_tasks(self) -> List[Task]:
        with self._lock:
            records = sorted(self._tasks.values(), key=lambda r: int(r.task["id"][len("bash-") :]))
            return [dict(r.task) for r in records]  # type: ignore[misc]

    # -- events and lifecycle -------------------------------------------------------------

    def set_task_done_handler(self, handler: Optional[TaskDoneHandler]) -> None:
        with self._lock:
            self._handler = handler

    def wait(self, task_id: str, timeout: Optional[float] = None) -> bool:
        """Wait until a task's process tree is stopped; False if `timeout` seconds passed first."""
        with self._lock:
            thread = self._record(task_id).thread
        if thread is not None:
            thread.join(timeout)
            return not thread.is_alive()
        return True

    def shutdown(self) -> None:
        """Kill every running task and wait until no process of any task is left (also of
        tasks killed earlier and already forgotten). No task-done events after this."""
        with self._lock:
            self._shutting_down = True
        while True:
            with self._lock:
                running = [r for r in self._tasks.values() if r.task["state"] == "running"]
                threads = [r.thread for r in self._live.values() if r.thread is not None]
                starting = self._starting
            for record in running:
                self.kill(record.task["id"])
            if not threads and not starting:
                return
            unstarted = False
            for thread in threads:
                if thread.ident is None:
                    unstarted = True
                else:
                    thread.join()
            if unstarted or not threads:
                # A start still between its slot and its thread's start: done soon either way.
                time.sleep(0.001)

    # -- internals ------------------------------------------------------------------------

    def _spawn(self, spec: Spec) -> Process:
        try:
            return Process(spec["command"], spec["workdir"], self.env_policy.child_env(), self.max_output_bytes)
        except OSError as err:
            _check_workdir(spec["workdir"])
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
            self._live.pop(task["id"], None)
            task["exit_code"] = code
            task["signal"] = sig
            if task["state"] == "running":
                task["state"] = "killed" if (sig is not None or spawn_failed) else "completed"
                self._running -= 1
                self._retire(task["id"])
            handler = None if self._shutting_down else self._handler
            done: Task = dict(task)  # type: ignore[assignment]
        if handler is not None:
            handler(done)

    def _retire(self, task_id: str) -> None:
        self._finished.append(task_id)
        while len(self._finished) > self.max_finished_tasks:
            self._tasks.pop(self._finished.popleft(), None)
