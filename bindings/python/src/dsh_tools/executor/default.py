"""Which executor the tools use by default, and how to tell which one is in use.

`default_executor()` gives the Rust executor (`ServedExecutor`, `dsh-host executor serve
--stdio`) when a `dsh-host` is available (`$DSH_HOST`, the binary a platform wheel carries, or
one on `PATH`), so that the same commands give the same text as in `dsh-host`, and
`LocalExecutor` otherwise. `describe_executor()` says which one an executor is, which `dsh-host`
serves it and where that came from, and what it lacks next to `dsh-host`'s.
"""

from __future__ import annotations

import weakref
from typing import Any, Dict, List, Optional, Sequence

from .local import LocalExecutor
from .served import ServedExecutor, ServedExecutorError, find_binaries
from .types import Executor

LOCAL_LACKS: List[str] = [
    "spill files: a truncated output names no file holding all of it",
    "containment: a command that calls setsid (or double-forks out of its process group) outlives the call and is not reported",
    "host protection: a command's `kill $PPID` reaches this Python process",
    "long commands: one over the OS argument limit (about 128 KiB) fails to start",
    "yielding: a foreground command never continues in the background",
    "sandbox: commands run unconfined",
]
"""What `LocalExecutor` lacks next to the Rust executor (`dsh-host`'s)."""

# Why `default_executor` fell back to a LocalExecutor although a dsh-host was found.
_FALLBACK: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()


def default_executor(*, args: Sequence[str] = (), **local_options: Any) -> Executor:
    """A `ServedExecutor` when a `dsh-host` is available, else a `LocalExecutor(**local_options)`.

    The binaries are tried in the order of `find_binaries()`: `$DSH_HOST` when set, else the
    binary this package carries (a platform wheel's `dsh_tools/bin/dsh-host`), then `dsh-host`
    on `PATH`. `args` are executor flags for the server. A `$DSH_HOST` that cannot serve the
    executor raises `ServedExecutorError`: it was asked for by name. A carried binary that cannot
    (built for another C library, say) gives way to the one on `PATH`, and one on `PATH` that
    cannot (an older one, without `executor serve`) to a `LocalExecutor`; `describe_executor`
    then says why.
    """
    failures: List[str] = []
    for binary, source in find_binaries():
        try:
            executor = ServedExecutor(binary=binary, args=args)
        except ServedExecutorError as e:
            if source == "env":
                raise
            failures.append(str(e))
            continue
        executor.binary_source = source
        return executor
    local = LocalExecutor(**local_options)
    if failures:
        _FALLBACK[local] = "; ".join(failures)
    return local


def describe_executor(executor: Executor) -> Dict[str, Any]:
    """Which executor this is — `kind` `served` (the Rust executor through `dsh-host executor
    serve`), `local` (`LocalExecutor`) or `custom` — and what it lacks next to the Rust one. A
    served one names its `binary` and `binary_source` (`env`, `package`, `path`, or `argument`
    for one given to `ServedExecutor`)."""
    if isinstance(executor, ServedExecutor):
        return executor.describe()
    if isinstance(executor, LocalExecutor):
        info: Dict[str, Any] = {"kind": "local", "lacks": list(LOCAL_LACKS)}
        why: Optional[str] = _FALLBACK.get(executor)
        if why is not None:
            info["fallback_reason"] = why
        return info
    return {"kind": "custom", "class": f"{type(executor).__module__}.{type(executor).__qualname__}", "lacks": None}
