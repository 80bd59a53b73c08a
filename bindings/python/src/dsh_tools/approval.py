"""Permission rules: the host side of `dsh:bash/approval`.

A component composed with the policy middleware decides every command itself (the engine and
the words of `dsh-host --policy`); what it asks of its host is the policy files, the home
directory, the grants a person made for a session, and a person to ask. This module is that
host: the files given to `Tools(policy=...)`, `$HOME`, a grant table per session, and the
embedder's `approve` callback, bounded by a timeout. The callback is reached only from the
component's `ask`, never from a tool call's arguments: the model has no way to answer it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

PolicySource = Union[str, "os.PathLike[str]", Tuple[str, str]]
"""One policy file: a path (read at construction; errors and refusals cite it as given) or a
`(name, text)` pair (the name is what they cite; a name ending in `.json` is read as JSON)."""


@dataclass(frozen=True)
class Question:
    """What the person is asked about a command that needs approval."""

    owner: Optional[str]
    """The owner token of the session the command is for (`Session.owner`), None without one."""
    command: str
    """The whole command, every line of it."""
    cwd: str
    """Where it would run."""
    parts: Tuple[str, ...]
    """The parts of it that need approval."""
    rule: Optional[str]
    """The ask rule that asked, as written; None for the policy's default or a part that cannot
    be analysed."""
    source: Optional[str]
    """Where that rule or default is set: `FILE:LINE`."""
    construct: Optional[str]
    """Why the command cannot be analysed, if that is why it is asked."""
    session_rule: Optional[str]
    """The rule an answer of "session" grants for the rest of the session (`Bash(git push *)`);
    None when only "once" can be given (then "session" runs it once)."""


ApproveCallback = Callable[[Question], Union[Optional[str], Awaitable[Optional[str]]]]
"""Answers a `Question` with "once", "session" or "decline" (or a coroutine that does). Any
other answer, None, or an exception declines; no answer within the timeout refuses the command
as not approved in time."""

ANSWERS = ("once", "session", "decline")

# Seconds after the timeout at which a coroutine still awaiting is cancelled.
_CANCEL_AFTER = 0.05


class _NoAnswer(Exception):
    """The coroutine was cancelled at the timeout: no answer, as opposed to a failing callback."""


class PolicyError(ValueError):
    """The policy files cannot be read, or do not load (the message names the file and line)."""


def read_sources(policy: Union[PolicySource, Iterable[PolicySource]]) -> List[Tuple[str, str]]:
    """The `(name, text)` of each policy file, paths read now (once: the files are the rules of
    these tools for their lifetime, as `dsh-host --policy` reads its files at start)."""
    # A bare path or pair is one file; a str is never meant as a list of one-letter paths.
    if isinstance(policy, (str, os.PathLike)) or (isinstance(policy, tuple) and _is_pair(policy)):
        policy = [policy]
    if isinstance(policy, (bytes, bytearray)):
        raise TypeError("policy= takes paths or (name, text) pairs, not bytes")
    files: List[Tuple[str, str]] = []
    for item in policy:
        if isinstance(item, tuple):
            if not _is_pair(item):
                raise TypeError(f"a policy file given as a pair is (name, text), two strings; got {item!r}")
            files.append((item[0], item[1]))
            continue
        if not isinstance(item, (str, os.PathLike)):
            raise TypeError(f"a policy file is a path or a (name, text) pair; got {item!r}")
        name = os.fspath(item)
        if not isinstance(name, str):
            raise TypeError(f"a policy file's path is text, got {item!r}")
        try:
            with open(name, encoding="utf-8") as f:
                files.append((name, f.read()))
        except OSError as e:
            raise PolicyError(f"cannot read the policy file {name}: {e.strerror or e}") from None
        except UnicodeDecodeError as e:
            raise PolicyError(f"the policy file {name} is not UTF-8 text: {e.reason} at byte {e.start}") from None
    return files


def _is_pair(value: Tuple[Any, ...]) -> bool:
    return len(value) == 2 and all(isinstance(v, str) for v in value)


def home() -> Optional[str]:
    """The home directory `~` stands for in rules and commands: `$HOME` when it is absolute."""
    value = os.environ.get("HOME")
    return value if value and os.path.isabs(value) else None


class Approval:
    """The policy files, the sessions' grants and the person behind `approve`.

    `ask` blocks the calling thread (the tool call waiting for its answer) and no other: each
    question runs the callback in a thread of its own, so a callback that hangs costs its own
    call the timeout and nothing else. A synchronous callback still running at the timeout keeps
    its thread until it returns (Python cannot stop a thread); its late answer is dropped. A
    coroutine runs on `loop` when one is given (`asyncio.run_coroutine_threadsafe`: for
    callbacks bound to the embedder's running loop, which must then not be the thread making the
    tool call), else in a fresh event loop of that thread (`asyncio.run`); at the timeout it is
    cancelled either way.
    """

    def __init__(
        self,
        files: Sequence[Tuple[str, str]],
        approve: Optional[ApproveCallback],
        timeout: float,
        loop: Optional[asyncio.AbstractEventLoop],
        is_open: Callable[[Optional[str]], bool],
    ):
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < 2**32 / 1000:
            raise ValueError(f"approve_timeout is a number of seconds above 0, got {timeout!r}")
        if approve is not None and not callable(approve):
            raise TypeError(f"approve= is a callable, got {approve!r}")
        self.files = list(files)
        self.approve = approve
        self.timeout = float(timeout)
        self.loop = loop
        self._is_open = is_open
        self._lock = threading.Lock()
        self._grants: Dict[str, List[str]] = {}
        self.failures: List[str] = []

    def grants(self, owner: Optional[str]) -> List[str]:
        if owner is None:
            return []
        with self._lock:
            return list(self._grants.get(owner, ()))

    def end_session(self, owner: str) -> None:
        with self._lock:
            self._grants.pop(owner, None)

    def ask(self, q: Question) -> Tuple[str, Optional[int]]:
        """The component's answer: ("once" | "session" | "declined" | "cannot-ask", None) or
        ("timed-out", the milliseconds waited)."""
        if self.approve is None:
            return ("cannot-ask", None)
        answer = self._answer(q)
        if answer is None:
            waited = min(round(self.timeout * 1000), 2**32 - 1)
            return ("timed-out", waited)
        if answer == "session":
            self._grant(q)
            return ("session", None)
        return ("once", None) if answer == "once" else ("declined", None)

    def _grant(self, q: Question) -> None:
        # Only a session holds grants, and only while it is open: a grant for a call without a
        # session, or answered after its session closed, would outlive what the person approved.
        if q.owner is None or q.session_rule is None:
            return
        with self._lock:
            if self._is_open(q.owner):
                rules = self._grants.setdefault(q.owner, [])
                if q.session_rule not in rules:
                    rules.append(q.session_rule)

    def _answer(self, q: Question) -> Optional[str]:
        """The callback's answer as one of ANSWERS ("decline" for anything else), or None when
        it gave none in time."""
        deadline = time.monotonic() + self.timeout
        done: "concurrent.futures.Future[Tuple[bool, object]]" = concurrent.futures.Future()
        worker = threading.Thread(
            target=self._run_callback, args=(q, deadline, done), name="dsh-tools-approve", daemon=True
        )
        worker.start()
        try:
            raised, value = done.result(timeout=max(0.0, deadline - time.monotonic()))
        except concurrent.futures.TimeoutError:
            return None
        if raised:
            self.note_failure(f"approve raised {type(value).__name__}: {value}: declined")
            return "decline"
        if isinstance(value, str) and value in ANSWERS:
            return value
        self.note_failure(f"approve answered {value!r}, not one of {', '.join(map(repr, ANSWERS))}: declined")
        return "decline"

    def _run_callback(self, q: Question, deadline: float, done: "concurrent.futures.Future[Tuple[bool, object]]") -> None:
        """In the question's own thread: the callback's (raised, answer or exception)."""
        assert self.approve is not None
        try:
            value: object = self.approve(q)
            if inspect.isawaitable(value):
                value = self._await(value, deadline)
        except _NoAnswer:
            return  # the caller's own timeout reports it, with the time waited
        except BaseException as e:  # whatever the callback raises declines; it stays in this thread
            done.set_result((True, e))
            return
        done.set_result((False, value))

    def _await(self, awaitable: Awaitable[Any], deadline: float) -> object:
        # The coroutine is cancelled a little after the caller stopped waiting, so that the
        # caller, not this thread, decides that no answer came, and a coroutine's own
        # TimeoutError before the deadline still reads as a failure of the callback.
        async def bounded() -> object:
            try:
                return await asyncio.wait_for(awaitable, max(0.0, deadline - time.monotonic()) + _CANCEL_AFTER)
            except asyncio.TimeoutError:
                if time.monotonic() >= deadline:
                    raise _NoAnswer() from None
                raise

        if self.loop is None:
            return asyncio.run(bounded())
        return asyncio.run_coroutine_threadsafe(bounded(), self.loop).result()

    def note_failure(self, why: str) -> None:
        with self._lock:
            self.failures.append(why)
