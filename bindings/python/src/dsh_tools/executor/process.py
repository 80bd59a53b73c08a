"""One `bash -c` in its own session and process group, driven to its end.

Completion follows the executor contract: the leader's exit, then a drain of the pipes bounded
by the grace period; group members still alive then are stopped (TERM, grace, KILL) and
counted. A timeout or a kill sends SIGTERM to the group and SIGKILL after the grace period.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import threading
import time
from typing import Dict, List, Literal, Optional, Tuple, TypedDict

from .types import StreamDelta, StreamOutput


class End(TypedDict):
    exit_code: Optional[int]
    signal: Optional[str]
    cause: Optional[Literal["timeout", "kill"]]
    leftovers: int


def signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"SIG{num}"


def group_members(pgid: int) -> List[int]:
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
        # The command name may hold spaces and parentheses: the fields start after the last ')'.
        fields = raw[raw.rfind(b")") + 2 :].split()
        if len(fields) > 2 and fields[0] != b"Z" and int(fields[2]) == pgid:
            members.append(int(entry))
    return members


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class Tail:
    """The last `limit` bytes of one output stream (byte-exact) and its whole-stream length."""

    def __init__(self, limit: int):
        self.limit = limit
        self.buf = bytearray()
        self.total = 0

    def write(self, data: bytes) -> None:
        self.total += len(data)
        self.buf += data
        if len(self.buf) > self.limit:
            del self.buf[: len(self.buf) - self.limit]

    def snapshot(self) -> StreamOutput:
        # No spill files here: a truncated stream has no complete copy to name.
        return {
            "text": self.buf.decode("utf-8", "replace"),
            "truncated": self.total > len(self.buf),
            "spill_path": None,
            "spill_evicted": False,
        }

    def read_since(self, offset: int) -> Tuple[StreamDelta, int]:
        """What arrived since whole-stream byte `offset`; lossy when it left the window."""
        start = self.total - len(self.buf)
        lossy = offset < start
        chunk = bytes(self.buf) if lossy else bytes(self.buf[offset - start :])
        return {"text": chunk.decode("utf-8", "replace"), "lossy": lossy, "spill_path": None, "spill_evicted": False}, self.total


class Process:
    """A started `bash -c`: its pipes, its tails and its process group."""

    def __init__(self, command: str, workdir: str, env: Dict[bytes, bytes], max_output_bytes: int):
        self.out = Tail(max_output_bytes)
        self.err = Tail(max_output_bytes)
        self.popen = subprocess.Popen(
            ["bash", "-c", command],
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            # A new session: its own process group, no controlling terminal, and a `kill 0`
            # from the command reaches the command, not this process.
            start_new_session=True,
            close_fds=True,
        )
        self.pgid = self.popen.pid
        self.lock = threading.Lock()
        self.sel = selectors.DefaultSelector()
        assert self.popen.stdout is not None and self.popen.stderr is not None
        for pipe, tail in ((self.popen.stdout, self.out), (self.popen.stderr, self.err)):
            os.set_blocking(pipe.fileno(), False)
            self.sel.register(pipe, selectors.EVENT_READ, tail)

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
                key.fileobj.close()  # type: ignore[union-attr]

    def _drain(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while self.sel.get_map() and time.monotonic() < deadline:
            self._pump(min(0.05, deadline - time.monotonic()))

    def _stop_group(self, grace: float) -> None:
        """TERM to the group, KILL after the grace period if anything is left."""
        signal_group(self.pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            self._pump(0.01)
            if self.popen.poll() is not None and not group_members(self.pgid):
                return
        signal_group(self.pgid, signal.SIGKILL)

    def drive(self, timeout: Optional[float], grace: float, stop: Optional[threading.Event] = None) -> End:
        """Run to the end. `timeout` (seconds) or `stop` stop the group; returns the facts."""
        deadline = None if timeout is None else time.monotonic() + timeout
        cause: Optional[Literal["timeout", "kill"]] = None
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
            members = group_members(self.pgid)
            if members:
                leftovers = len(members)
                self._stop_group(grace)
        elif group_members(self.pgid):
            signal_group(self.pgid, signal.SIGKILL)
        self._drain(grace)
        for key in list(self.sel.get_map().values()):
            self.sel.unregister(key.fileobj)
            key.fileobj.close()  # type: ignore[union-attr]
        self.sel.close()
        code = self.popen.returncode
        return {
            "exit_code": code if code >= 0 else None,
            "signal": signal_name(-code) if code < 0 else None,
            "cause": cause,
            "leftovers": leftovers,
        }
