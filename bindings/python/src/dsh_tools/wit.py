"""Conversions between the executor's plain Python data and wasmtime-py's WIT values.

wasmtime-py names record fields by their kebab-case WIT names (``timeout-ms``); `f64` values
must be Python floats; a `result` whose ok and err types overlap is a tagged ``Variant``, and
so is a `variant` whose cases overlap (``executor-error``: several carry a string).
"""

from __future__ import annotations

from typing import Any, Mapping

from wasmtime.component import Record, Variant

from .executor.types import Denials, ExecutorError, Read, RunResult, SandboxPolicy, Spec, StreamDelta, StreamOutput, Task


def record(**fields: Any) -> Record:
    """A WIT record: attributes named as in WIT (kebab-case)."""
    r = Record()
    for name, value in fields.items():
        setattr(r, name.replace("_", "-"), value)
    return r


def field(value: Record, name: str) -> Any:
    return getattr(value, name.replace("_", "-"))


def _u32(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**32:
        raise TypeError(f"{what}: expected a whole number from 0 to 2^32-1, got {value!r}")
    return value


def task(t: Task) -> Record:
    return record(
        id=t["id"],
        command=t["command"],
        owner=t["owner"],
        state=t["state"],
        exit_code=t["exit_code"],
        signal=t["signal"],
        # This package's executors run commands on one machine: a session never moves.
        relocated=None,
    )


def task_from_wit(r: Record) -> Task:
    return {
        "id": field(r, "id"),
        "command": field(r, "command"),
        "owner": field(r, "owner"),
        "state": field(r, "state"),
        "exit_code": field(r, "exit_code"),
        "signal": field(r, "signal"),
    }


def spec_from_wit(r: Record) -> Spec:
    return {
        "command": field(r, "command"),
        "workdir": field(r, "workdir"),
        "timeout_ms": field(r, "timeout_ms"),
        "owner": field(r, "owner"),
    }


def spec(s: Spec) -> Record:
    return record(command=s["command"], workdir=s["workdir"], timeout_ms=float(s["timeout_ms"]), owner=s["owner"])


def _stream(s: StreamOutput) -> Record:
    return record(
        text=s["text"], truncated=s["truncated"], spill_path=s["spill_path"], spill_evicted=bool(s.get("spill_evicted", False))
    )


def _delta(s: StreamDelta) -> Record:
    return record(text=s["text"], lossy=s["lossy"], spill_path=s["spill_path"], spill_evicted=bool(s.get("spill_evicted", False)))


def _denials(d: Denials) -> Record:
    first = [record(access=x["access"], target=x["target"], reason=x["reason"]) for x in d["first"]]
    return record(first=first, more=_u32(d["more"], "denials.more"))


def _sandbox(p: SandboxPolicy) -> Record:
    return record(
        mode=p["mode"],
        writable=list(p["writable"]),
        denied_reads=list(p["denied_reads"]),
        network=p["network"],
        allowed_hosts=list(p.get("allowed_hosts", [])),
    )


def run_result(r: RunResult) -> Record:
    y = r["yielded"]
    return record(
        exit_code=r["exit_code"],
        signal=r["signal"],
        timed_out=r["timed_out"],
        aborted=r["aborted"],
        timeout_ms=float(r["timeout_ms"]),
        stdout=_stream(r["stdout"]),
        stderr=_stream(r["stderr"]),
        leftover_processes=_u32(r["leftover_processes"], "leftover_processes"),
        yielded=None if y is None else record(task=task(y["task"]), after_ms=float(y["after_ms"])),
        denials=_denials(r["denials"]),
        # This package's executors run commands on one machine: a session never moves.
        relocated=None,
    )


def read(r: Read) -> Record:
    return record(stdout=_delta(r["stdout"]), stderr=_delta(r["stderr"]), task=task(r["task"]), denials=_denials(r["denials"]))


def limits(values: Mapping[str, Any]) -> Record:
    return record(
        default_timeout_ms=float(values["default_timeout_ms"]),
        max_timeout_ms=float(values["max_timeout_ms"]),
        max_output_bytes=int(values["max_output_bytes"]),
        grace_ms=float(values["grace_ms"]),
        sandbox=None if values["sandbox"] is None else _sandbox(values["sandbox"]),
    )


def executor_error(e: ExecutorError) -> Variant:
    return Variant(e.case, None if e.case == "aborted" else (e.message or ""))
