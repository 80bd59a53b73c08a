"""The Rust executor as a Python executor: `dsh-host executor serve --stdio` behind the package's
`Executor` protocol.

`ServedExecutor` starts the server as a child process and speaks the executor protocol
(`docs/executor-protocol.md`, version 1) with it: JSON-RPC 2.0, one JSON object per line on the
child's stdin and stdout. Every command then runs in `dsh-host`'s executor, with everything it
has and `LocalExecutor` lacks: containment of the whole process tree (a `setsid` escapee is
stopped and reported), spill files for long output, commands up to 1 MiB, the sandbox and the
limits the server was started with.

What the protocol guarantees is kept here:

- `run` and `start` carry a request id (a random prefix per connection and a counter), so the
  server runs each call at most once.
- Reads name explicit offsets: the `to` of the previous answer this side consumed, so an answer
  that never reached its caller is asked for again (same `from`) and nothing is lost.
- Task-done events are passed on once each (by their `seq`) and then acknowledged.
- A foreground run's abort event becomes a `cancel` notification.

When the server goes away, nothing is retried elsewhere and nothing is restarted: a `run` or
`start` that was sent fails with `internal` ("... it may or may not have run"), one that
provably never reached the server with `spawn-failed` ("... the command did not start"); each
task that was running gets exactly one task-done event, `lost` (nobody knows whether its command
still runs or finished); afterwards `get`, `list_tasks` and `owner_of` answer from the tasks as
last seen, `kill` answers False, a read of a lost task answers no output and the state `lost`
(the tools then say the output can no longer be read), and every other operation, a read of any
other task among them, fails naming why the service is gone.
"""

from __future__ import annotations

import json
import math
import os
import queue
import secrets
import shutil
import subprocess
import threading
from collections import OrderedDict
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Dict, List, Literal, Mapping, Optional, Sequence, Tuple

from .types import (
    Denial,
    Denials,
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
)

PROTOCOL_VERSION = 1
"""The executor protocol version this client speaks."""

HELLO_TIMEOUT = 30.0
"""Seconds the server may take to answer `hello` (an `ssh` asking for a password never does)."""

MAX_LINE_BYTES = 512 * 1024 * 1024
"""The longest line the server reads; a longer one is never sent (the server could not tell
whose it was, and its call would wait for an answer that never comes)."""

ENV_VAR = "DSH_HOST"
"""The environment variable naming the `dsh-host` binary to serve the executor."""

# Finished tasks whose last state is kept for `get`, `owner_of`, `list_tasks` and `wait` once
# the server is gone (and to know that a task's event came before its `start` answer).
_KEPT_TASKS = 4096

# The wire's executor error kinds and the package's `ExecutorError` cases.
_ERROR_CASES = {
    "invalid_request": "invalid-request",
    "workdir_unusable": "workdir-unusable",
    "spawn_failed": "spawn-failed",
    "unknown_task": "unknown-task",
    "task_limit": "task-limit",
    "internal": "internal",
}


class ServedExecutorError(RuntimeError):
    """The executor service cannot be started or refused the connection (no binary, the
    command ended before answering `hello`, a protocol version mismatch, no answer in time)."""


PACKAGED_BINARY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bin", "dsh-host")
"""Where a platform wheel of this package carries its `dsh-host` (`dsh_tools/bin/dsh-host`); the
pure wheel and a source install have none there."""

BinarySource = Literal["env", "package", "path"]
"""Where a `dsh-host` was found: `$DSH_HOST` (`env`), the binary a platform wheel carries
(`package`), or `PATH` (`path`)."""


def find_binaries() -> List[Tuple[str, BinarySource]]:
    """Every `dsh-host` that may serve the executor, in the order they are tried, each with where
    it was found: `$DSH_HOST` alone when it is set (it was asked for by name); otherwise the
    binary this package carries (when there and executable), then `dsh-host` on `PATH`."""
    named = os.environ.get(ENV_VAR)
    if named:
        return [(named, "env")]
    found: List[Tuple[str, BinarySource]] = []
    if os.path.isfile(PACKAGED_BINARY) and os.access(PACKAGED_BINARY, os.X_OK):
        found.append((PACKAGED_BINARY, "package"))
    on_path = shutil.which("dsh-host")
    if on_path is not None:
        found.append((on_path, "path"))
    return found


def find_binary() -> Optional[str]:
    """The first `dsh-host` of `find_binaries()`: `$DSH_HOST` when set, else the binary this
    package carries, else `dsh-host` on `PATH`."""
    found = find_binaries()
    return found[0][0] if found else None


def _package_version() -> str:
    try:
        from importlib.metadata import version

        return version("dsh-tools")
    except Exception:  # not installed (run from a source tree)
        return "unknown"


def _rust_float(value: float) -> str:
    # How the Rust executor prints a non-finite f64 in its messages.
    if math.isnan(value):
        return "NaN"
    return "inf" if value > 0 else "-inf"


def _finite_timeout(value: Optional[float]) -> None:
    # JSON has no NaN or infinity: the Rust executor's own answer for them is given here.
    if value is not None and isinstance(value, float) and not math.isfinite(value):
        raise ExecutorError("invalid-request", f"invalid timeoutMs: expected a positive number, got {_rust_float(value)}")


def _kebab(value: str) -> Any:
    # A wire enum (`outside_writable_roots`) as the package's literal (`outside-writable-roots`).
    return value.replace("_", "-")


def _task(value: Mapping[str, Any]) -> Task:
    return {
        "id": value["id"],
        "command": value["command"],
        "owner": value.get("owner"),
        "state": value["state"],
        "exit_code": value.get("exit_code"),
        "signal": value.get("signal"),
    }


def _denials(value: Optional[Mapping[str, Any]]) -> Denials:
    if not value:
        return {"first": [], "more": 0}
    first: List[Denial] = [
        {"access": _kebab(d["access"]), "target": d["target"], "reason": _kebab(d["reason"])} for d in value.get("first", [])
    ]
    return {"first": first, "more": int(value.get("more", 0))}


def _stream(value: Mapping[str, Any]) -> StreamOutput:
    return {
        "text": value["text"],
        "truncated": bool(value["truncated"]),
        "spill_path": value.get("spill_path"),
        "spill_evicted": bool(value.get("spill_evicted", False)),
    }


def _delta(value: Mapping[str, Any]) -> StreamDelta:
    return {
        "text": value["text"],
        "lossy": bool(value["lossy"]),
        "spill_path": value.get("spill_path"),
        "spill_evicted": bool(value.get("spill_evicted", False)),
    }


def _run_result(value: Mapping[str, Any]) -> RunResult:
    y = value.get("yielded")
    return {
        "exit_code": value.get("exit_code"),
        "signal": value.get("signal"),
        "timed_out": bool(value["timed_out"]),
        "aborted": bool(value["aborted"]),
        "timeout_ms": float(value["timeout_ms"]),
        "stdout": _stream(value["stdout"]),
        "stderr": _stream(value["stderr"]),
        "leftover_processes": int(value["leftover_processes"]),
        "yielded": None if y is None else {"task": _task(y["task"]), "after_ms": float(y["after_ms"])},
        "denials": _denials(value.get("denials")),
    }


def _read(value: Mapping[str, Any]) -> Read:
    return {
        "stdout": _delta(value["stdout"]),
        "stderr": _delta(value["stderr"]),
        "task": _task(value["task"]),
        "denials": _denials(value.get("denials")),
    }


def _sandbox(value: Optional[Mapping[str, Any]]) -> Optional[SandboxPolicy]:
    if value is None:
        return None
    return {
        "mode": _kebab(value["mode"]),
        "writable": list(value.get("writable", [])),
        "denied_reads": list(value.get("denied_reads", [])),
        "network": _kebab(value["network"]),
        "allowed_hosts": list(value.get("allowed_hosts", [])),
    }


def _lost_read(task: Task) -> Read:
    """A read of a task lost with the server: no output (it can no longer be read), no denials,
    and the task as last seen."""

    def empty() -> StreamDelta:
        return {"text": "", "lossy": False, "spill_path": None, "spill_evicted": False}

    return {"stdout": empty(), "stderr": empty(), "task": _task(task), "denials": {"first": [], "more": 0}}


def _limits(value: Mapping[str, Any]) -> Limits:
    return {
        "default_timeout_ms": float(value["default_timeout_ms"]),
        "max_timeout_ms": float(value["max_timeout_ms"]),
        "max_output_bytes": int(value["max_output_bytes"]),
        "grace_ms": float(value["grace_ms"]),
        "sandbox": _sandbox(value.get("sandbox")),
    }


def _refusal_record(value: Mapping[str, Any]) -> Any:
    # The WIT `policy-refusal` record, which the component words as a `[policy: …]` line.
    from ..wit import record

    return record(
        kind=_kebab(value["kind"]),
        part=value["part"],
        rule=value.get("rule"),
        source=value.get("source"),
        message=value.get("message"),
        allow_rule=value.get("allow_rule"),
        waited_ms=value.get("waited_ms"),
    )


class RefusedError(ExecutorError):
    """The executor's `refused` error: a permission rule of the server (`--policy`) kept the
    command from running, and nothing of it ran. `refusal` holds the facts as the wire carries
    them; the component words them."""

    def __init__(self, refusal: Mapping[str, Any]):
        # The payload of the WIT `refused` case is the refusal record, not a message.
        super().__init__("internal")
        self.case = "refused"  # type: ignore[assignment]
        self.message = _refusal_record(refusal)
        self.refusal: Dict[str, Any] = dict(refusal)
        self.args = (f"refused by the permission rules: {refusal.get('part')}",)


def _executor_error(value: Any) -> ExecutorError:
    """The package's error for the wire's `{"<kind>": "<message>"}`, `"aborted"` or `refused`."""
    if value == "aborted":
        return ExecutorError("aborted")
    if isinstance(value, dict) and len(value) == 1:
        ((kind, payload),) = value.items()
        if kind == "refused" and isinstance(payload, dict):
            return RefusedError(payload)
        case = _ERROR_CASES.get(kind)
        if case is not None and isinstance(payload, str):
            return ExecutorError(case, payload)  # type: ignore[arg-type]
    return ExecutorError("internal", f"the executor service answered an error this client does not know: {json.dumps(value)}")


class _Failure(Exception):
    """Why a call got no answer: `sent` says whether its line reached the server."""

    def __init__(self, reason: str, sent: bool, protocol: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.sent = sent
        self.protocol = protocol

    def starting(self) -> ExecutorError:
        """The contract-shaped error of a `run` or `start` (it may have started a command)."""
        if self.protocol:
            return ExecutorError(
                "internal", f"the executor service failed the call ({self.reason}); the command may or may not have run"
            )
        if not self.sent:
            return ExecutorError("spawn-failed", f"the executor service is gone ({self.reason}); the command did not start")
        return ExecutorError(
            "internal",
            f"the executor service was lost ({self.reason}) while the command was in flight; it may or may not have run",
        )

    def other(self) -> ExecutorError:
        """The error of an operation that starts nothing."""
        if self.protocol:
            return ExecutorError("internal", f"the executor service failed the call: {self.reason}")
        if not self.sent:
            # Worded as dsh-host's own client words a call that never left.
            return ExecutorError("internal", f"the executor service was not reached ({self.reason})")
        return ExecutorError("internal", f"the executor service is gone ({self.reason})")


class ServedExecutor:
    """The executor of `dsh-host executor serve --stdio`, started as a child process.

    `command` is the complete command line of a server speaking the executor protocol (for
    example `["ssh", "build-box", "dsh-host", "executor", "serve", "--stdio"]`). Without it the
    server is `BINARY executor serve --stdio ARGS...`, where BINARY is `binary`, else the first of
    `find_binaries()` (`$DSH_HOST`, else the binary a platform wheel carries, else `dsh-host` on
    `PATH`), and `args` are executor flags for the server (`--sandbox workspace-write`,
    `--max-output-bytes 100000`, ...). `binary` and `binary_source` say which binary runs and
    where it came from: `"argument"` for a `binary` given, `"env"`, `"package"` or `"path"` for
    one found (both are None with `command`).

    The constructor says `hello` and raises `ServedExecutorError` when the server cannot be
    started, ends or does not answer within `hello_timeout` seconds, or speaks another protocol
    version. The server runs in a session of its own (a terminal's Ctrl-C does not reach it) and
    ends, killing its tasks, when its stdin closes: at `shutdown()`, or when this process exits.
    """

    kind = "served"

    def __init__(
        self,
        command: Optional[Sequence[str]] = None,
        *,
        binary: Optional[str] = None,
        args: Sequence[str] = (),
        env: Optional[Mapping[str, str]] = None,
        hello_timeout: float = HELLO_TIMEOUT,
    ):
        self.binary: Optional[str] = None
        """The `dsh-host` serving the executor (None when `command` was given)."""
        self.binary_source: Optional[str] = None
        """Where `binary` came from: `"argument"`, `"env"`, `"package"` or `"path"`."""
        if command is not None:
            argv = [os.fspath(c) for c in command]
            if not argv:
                raise ServedExecutorError("the executor command is empty")
        else:
            if binary is not None:
                self.binary, self.binary_source = os.fspath(binary), "argument"
            else:
                found = find_binaries()
                if not found:
                    raise ServedExecutorError(
                        f"no dsh-host to serve the executor: none given, ${ENV_VAR} is not set, "
                        "this package carries none and none is on PATH"
                    )
                self.binary, self.binary_source = found[0]
            argv = [self.binary, "executor", "serve", "--stdio", *[os.fspath(a) for a in args]]
        self.command: List[str] = argv
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._pending: Dict[int, "Future[Any]"] = {}
        self._next_id = 1
        self._request_prefix = secrets.token_hex(8)
        self._next_request = 1
        self._lost: Optional[str] = None
        self._shutting_down = False
        self._handler: Optional[TaskDoneHandler] = None
        # Background tasks known to be running (a `start` or yielded `run` answered, no event yet).
        self._running: Dict[str, Task] = {}
        # Ended tasks as last seen, oldest first.
        self._ended: "OrderedDict[str, Task]" = OrderedDict()
        self._ended_cond = threading.Condition(self._lock)
        # The highest event sequence number passed on.
        self._cursor = 0
        # Where each task's next read starts: the `to` of the last answer a caller consumed.
        self._offsets: Dict[str, Dict[str, int]] = {}
        self._read_locks: Dict[str, threading.Lock] = {}
        self._events: "queue.Queue[Optional[Tuple[Optional[int], Task]]]" = queue.Queue()
        try:
            self._child = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=None if env is None else dict(env),
                start_new_session=True,
            )
        except OSError as e:
            raise ServedExecutorError(f"cannot start the executor command {argv!r}: {e}") from None
        assert self._child.stdin is not None and self._child.stdout is not None
        self._stdin: Optional[Any] = self._child.stdin
        self._reader = threading.Thread(target=self._read_loop, name="dsh-executor-client", daemon=True)
        self._reader.start()
        self._dispatcher = threading.Thread(target=self._dispatch_loop, name="dsh-executor-events", daemon=True)
        self._dispatcher.start()
        hello = {"protocol": self.protocol_version(), "client": f"dsh-tools-python {_package_version()}", "session": None}
        try:
            welcome = self._call("hello", hello, timeout=hello_timeout)
            if not isinstance(welcome, dict) or welcome.get("protocol") != PROTOCOL_VERSION:
                got = welcome.get("protocol") if isinstance(welcome, dict) else welcome
                raise _Failure(
                    f"protocol version mismatch: this client speaks version {PROTOCOL_VERSION}, "
                    f"the executor service answered version {got}",
                    sent=True,
                    protocol=True,
                )
            self._limits = _limits(welcome["limits"])
        except _Failure as f:
            self._abandon()
            if f.protocol:
                raise ServedExecutorError(f"the executor command {argv!r} refused the connection: {f.reason}") from None
            if f.reason == "no answer in time":
                raise ServedExecutorError(
                    f"the executor command {argv!r} did not answer hello within {hello_timeout:g} s"
                ) from None
            status = self._child.returncode
            ended = "" if status is None else (f"; it exited with status {status}" if status >= 0 else f"; it was killed by signal {-status}")
            raise ServedExecutorError(f"the executor command {argv!r} ended before answering hello ({f.reason}{ended})") from None
        except (KeyError, TypeError, ValueError) as e:
            self._abandon()
            raise ServedExecutorError(f"the executor command {argv!r} answered hello with something else: {e}") from None
        self.server: str = str(welcome.get("server", ""))
        """The server's name and version, as its `hello` answer gives them."""
        self.session: str = str(welcome.get("session", ""))
        """The server's session id."""

    @staticmethod
    def protocol_version() -> int:
        """The protocol version this client says `hello` with."""
        return PROTOCOL_VERSION

    def describe(self) -> Dict[str, Any]:
        """Which executor this is: kind `served`, the server's command line and version, which
        `dsh-host` serves it and where that came from (`binary`, `binary_source`), and whether the
        service is still there."""
        with self._lock:
            lost = self._lost
        return {
            "kind": self.kind,
            "command": list(self.command),
            "binary": self.binary,
            "binary_source": self.binary_source,
            "server": self.server,
            "protocol": PROTOCOL_VERSION,
            "lost": lost,
            "lacks": [],
        }

    # -- the bash-executor operations -----------------------------------------------------

    def current_limits(self) -> Limits:
        limits = dict(self._limits)
        return limits  # type: ignore[return-value]

    def resolve(self, command: str, workdir: Optional[str], timeout_ms: Optional[float], owner: Optional[str]) -> Spec:
        _finite_timeout(timeout_ms)
        request = {"command": command, "workdir": workdir, "timeout_ms": timeout_ms, "owner": owner}
        value = self._outcome(self._ask("resolve", {"request": request}))
        return {"command": value["command"], "workdir": value["workdir"], "timeout_ms": float(value["timeout_ms"]), "owner": value.get("owner")}

    def run(self, spec: Spec, abort: Optional[threading.Event] = None) -> RunResult:
        """Run in the foreground to the end. `abort` set before the start refuses the run
        (`aborted`); set while it runs, the server stops the command (TERM to the tree, KILL
        after the grace period) and the result says `aborted`."""
        if abort is not None and abort.is_set():
            raise ExecutorError("aborted")
        _finite_timeout(spec["timeout_ms"])
        request_id = self._request_id()
        params = {"request_id": request_id, "spec": self._spec(spec)}
        try:
            future = self._send("run", params)
            if abort is not None:
                answered = threading.Event()
                future.add_done_callback(lambda _f: answered.set())
                while not answered.wait(0.05):
                    if abort.is_set():
                        self._notify("cancel", {"request_id": request_id})
                        break
            outcome = self._wait(future)
        except _Failure as f:
            raise f.starting() from None
        result = _run_result(self._outcome(outcome))
        if result["yielded"] is not None:
            self._started(result["yielded"]["task"])
        return result

    def start(self, spec: Spec) -> Task:
        _finite_timeout(spec["timeout_ms"])
        params = {"request_id": self._request_id(), "spec": self._spec(spec)}
        try:
            outcome = self._wait(self._send("start", params))
        except _Failure as f:
            raise f.starting() from None
        task = _task(self._outcome(outcome))
        self._started(task)
        return task

    def read_output(self, task_id: str) -> Read:
        with self._lock:
            if self._lost is not None:
                task = self._ended.get(task_id)
                if task is not None and task["state"] == "lost":
                    # Its output went with the server: nothing more to read, and the state says so.
                    return _lost_read(task)
                raise ExecutorError(
                    "internal", f"the executor service is gone ({self._lost}); the output of {task_id} can no longer be read"
                )
            lock = self._read_locks.setdefault(task_id, threading.Lock())
        # One read of a task at a time: two at once would both be answered the same delta.
        with lock:
            with self._lock:
                start = dict(self._offsets.get(task_id, {"stdout": 0, "stderr": 0}))
            answer = self._outcome(self._ask("read", {"task": task_id, "from": start}))
            # Consumed: the next read starts at its end. (An answer that never got here leaves
            # the offsets as they were, and the next read gets that answer again.)
            with self._lock:
                self._offsets[task_id] = {"stdout": int(answer["to"]["stdout"]), "stderr": int(answer["to"]["stderr"])}
            return _read(answer["read"])

    def kill(self, task_id: str) -> bool:
        with self._lock:
            if self._lost is not None:
                # Every task of a lost server has ended already (lost, if it was running).
                if task_id in self._ended:
                    return False
                raise ExecutorError("unknown-task", task_id)
        return bool(self._outcome(self._ask("kill", {"task": task_id})))

    def owner_of(self, task_id: str) -> Optional[str]:
        with self._lock:
            if self._lost is not None:
                task = self._ended.get(task_id)
                return None if task is None else task["owner"]
        try:
            owner = self._ask("owner_of", {"task": task_id})
        except ExecutorError:
            return None
        return owner if isinstance(owner, str) else None

    def get(self, task_id: str) -> Task:
        with self._lock:
            if self._lost is not None:
                task = self._ended.get(task_id)
                if task is None:
                    raise ExecutorError("unknown-task", task_id)
                return dict(task)  # type: ignore[return-value]
        return _task(self._outcome(self._ask("get", {"task": task_id})))

    def list_tasks(self) -> List[Task]:
        with self._lock:
            if self._lost is not None:
                return [dict(t) for t in self._ended.values()]  # type: ignore[misc]
        tasks = self._ask("list", None)
        return [_task(t) for t in tasks or []]

    # -- events and lifecycle -------------------------------------------------------------

    def set_task_done_handler(self, handler: Optional[TaskDoneHandler]) -> None:
        with self._lock:
            self._handler = handler

    def wait(self, task_id: str, timeout: Optional[float] = None) -> bool:
        """Wait until the server reported the task ended (or was lost); False if `timeout`
        seconds passed first. A task this executor does not know counts as ended."""
        with self._ended_cond:
            return self._ended_cond.wait_for(lambda: task_id not in self._running, timeout)

    @property
    def lost(self) -> Optional[str]:
        """Why the executor service is gone, once it is; None while it serves."""
        with self._lock:
            return self._lost

    def shutdown(self) -> None:
        """Kill every running task and wait until each has ended (the server answers
        `shutdown` only then), then close the server's stdin and wait for it to exit. No
        task-done events after this."""
        with self._lock:
            self._shutting_down = True
            lost = self._lost
        if lost is None:
            try:
                self._ask("shutdown", None)
            except ExecutorError:
                pass  # it went away meanwhile: its tasks went with it
        self._close_stdin()
        try:
            self._child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            # A server that does not end at the end of its input is stopped.
            self._child.kill()
            self._child.wait()
        self._reader.join(timeout=10)
        self._events.put(None)

    close = shutdown

    def __enter__(self) -> "ServedExecutor":
        return self

    def __exit__(self, *_exc: object) -> None:
        self.shutdown()

    # -- the connection -------------------------------------------------------------------

    def _request_id(self) -> str:
        with self._lock:
            n = self._next_request
            self._next_request += 1
        return f"{self._request_prefix}-{n}"

    @staticmethod
    def _spec(spec: Spec) -> Dict[str, Any]:
        return {"command": spec["command"], "workdir": spec["workdir"], "timeout_ms": float(spec["timeout_ms"]), "owner": spec["owner"]}

    def _write(self, message: Mapping[str, Any]) -> None:
        """Writes one line, whole; `_Failure(sent=False)` when it cannot have reached the server."""
        try:
            line = json.dumps(message, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8") + b"\n"
        except (TypeError, ValueError) as e:
            raise _Failure(f"the call cannot be encoded: {e}", sent=False, protocol=True) from None
        if len(line) > MAX_LINE_BYTES:
            # Never sent, so a `run` or `start` provably did not start; worded as dsh-host's client.
            raise _Failure(f"the request is longer than the protocol's line limit of {MAX_LINE_BYTES} bytes", sent=False)
        with self._write_lock:
            stdin = self._stdin
            if stdin is None:
                with self._lock:
                    reason = self._lost or "the connection is closed"
                raise _Failure(reason, sent=False)
            try:
                stdin.write(line)
                stdin.flush()
            except (OSError, ValueError) as e:
                self._stdin = None
                raise _Failure(f"cannot write to it: {e}", sent=False) from None

    def _notify(self, method: str, params: Any) -> None:
        try:
            self._write({"jsonrpc": "2.0", "method": method, "params": params})
        except _Failure:
            pass  # a server that is gone has nobody to tell

    def _send(self, method: str, params: Any) -> "Future[Any]":
        future: "Future[Any]" = Future()
        with self._lock:
            if self._lost is not None:
                raise _Failure(self._lost, sent=False)
            request = self._next_id
            self._next_id += 1
            self._pending[request] = future
        try:
            self._write({"jsonrpc": "2.0", "id": request, "method": method, "params": params})
        except _Failure:
            with self._lock:
                self._pending.pop(request, None)
            raise
        return future

    @staticmethod
    def _wait(future: "Future[Any]", timeout: Optional[float] = None) -> Any:
        try:
            return future.result(timeout)
        except FutureTimeout:
            raise _Failure("no answer in time", sent=True) from None

    def _call(self, method: str, params: Any, timeout: Optional[float] = None) -> Any:
        return self._wait(self._send(method, params), timeout)

    def _ask(self, method: str, params: Any) -> Any:
        """A call that starts nothing; a failure is the `internal` error of that call."""
        try:
            return self._call(method, params)
        except _Failure as f:
            raise f.other() from None

    @staticmethod
    def _outcome(value: Any) -> Any:
        """The value of an `{"ok": …}` answer; the executor's error of an `{"err": …}` one."""
        if isinstance(value, dict) and len(value) == 1:
            if "ok" in value:
                return value["ok"]
            if "err" in value:
                raise _executor_error(value["err"])
        raise ExecutorError("internal", f"the executor service failed the call: an answer that does not decode: {json.dumps(value)[:200]}")

    def _read_loop(self) -> None:
        stdout = self._child.stdout
        assert stdout is not None
        reason = "it closed the connection"
        try:
            for line in stdout:
                self._received(line)
        except (OSError, ValueError) as e:
            reason = f"cannot read from it: {e}"
        finally:
            stdout.close()
        self._lose(reason)

    def _received(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            return  # not JSON: nothing to answer, nobody waits for it
        if not isinstance(message, dict):
            return
        method = message.get("method")
        if method is not None:
            if method == "task_done" and isinstance(message.get("params"), dict):
                self._event(message["params"])
            return
        request = message.get("id")
        if not isinstance(request, int) or isinstance(request, bool):
            return
        with self._lock:
            future = self._pending.pop(request, None)
        if future is None:
            return
        error = message.get("error")
        if isinstance(error, dict):
            future.set_exception(_Failure(str(error.get("message", error)), sent=True, protocol=True))
        else:
            future.set_result(message.get("result"))

    def _event(self, params: Mapping[str, Any]) -> None:
        """Passes a task-done event on once: a repeat (a `seq` already passed on) is dropped."""
        try:
            seq = int(params["seq"])
            task = _task(params["task"])
        except (KeyError, TypeError, ValueError):
            return
        with self._lock:
            if seq <= self._cursor:
                return
            self._cursor = seq
            self._record_ended(task)
        self._events.put((seq, task))

    def _dispatch_loop(self) -> None:
        # The handler runs here, not on the reader thread: it calls into the component, which
        # may call this executor again and needs the reader to take the answers.
        while True:
            item = self._events.get()
            if item is None:
                return
            seq, task = item
            with self._lock:
                handler = None if self._shutting_down else self._handler
            if handler is not None:
                try:
                    handler(task)
                except Exception:
                    pass  # the handler's own failure; the event was delivered
            if seq is not None:
                self._notify("ack", {"cursor": seq})

    def _record_ended(self, task: Task) -> None:
        # Under self._lock.
        self._running.pop(task["id"], None)
        self._ended[task["id"]] = task
        self._ended.move_to_end(task["id"])
        while len(self._ended) > _KEPT_TASKS:
            old, _ = self._ended.popitem(last=False)
            self._offsets.pop(old, None)
            self._read_locks.pop(old, None)
        self._ended_cond.notify_all()

    def _started(self, task: Task) -> None:
        """A task a `start` or a yielded `run` answered: running, unless its event came first."""
        with self._lock:
            if task["state"] == "running" and task["id"] not in self._ended and self._lost is None:
                self._running[task["id"]] = dict(task)  # type: ignore[assignment]

    def _lose(self, reason: str) -> None:
        """The server is gone: every waiting call fails, and every task still running ends,
        lost, with one event."""
        with self._lock:
            if self._lost is None:
                self._lost = reason
            pending, self._pending = self._pending, {}
            running = list(self._running.values())
            for task in running:
                ended: Task = dict(task)  # type: ignore[assignment]
                ended["state"] = "lost"
                ended["exit_code"] = None
                ended["signal"] = None
                self._record_ended(ended)
                self._events.put((None, ended))
            self._ended_cond.notify_all()
        for future in pending.values():
            future.set_exception(_Failure(reason, sent=True))
        self._close_stdin()

    def _close_stdin(self) -> None:
        with self._write_lock:
            stdin, self._stdin = self._stdin, None
        if stdin is not None:
            try:
                stdin.close()
            except OSError:
                pass

    def _abandon(self) -> None:
        # A server that refused or never answered hello is stopped, not left waiting.
        with self._lock:
            self._shutting_down = True
        self._close_stdin()
        try:
            self._child.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self._child.kill()
            self._child.wait()
        self._events.put(None)
