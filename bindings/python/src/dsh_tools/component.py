"""Loading the tools component and linking its imports.

The tools component imports `dsh:bash/bash-executor` and `dsh:bash/agent` and nothing else (no
WASI); composed with the policy middleware it also imports `dsh:bash/approval`. The linker holds
those three and nothing else: a component that imports more is refused at load, naming what it
imports. Every export call runs in a fresh instance: the component keeps no state between calls,
and a trap cannot leave a poisoned instance behind.
"""

from __future__ import annotations

import contextvars
import hashlib
import inspect
import os
import threading
from importlib import resources
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import wasmtime
from wasmtime.component import Component, Linker, Record, Variant

from . import wit
from .approval import Approval, Question
from .approval import home as approval_home
from .executor.types import Executor, ExecutorError

WIT_VERSION = "0.9.0"
EXECUTOR = f"dsh:bash/bash-executor@{WIT_VERSION}"
AGENT = f"dsh:bash/agent@{WIT_VERSION}"
TOOLS = f"dsh:bash/tools@{WIT_VERSION}"
APPROVAL = f"dsh:bash/approval@{WIT_VERSION}"
POLICY_CHECK = f"dsh:bash/policy-check@{WIT_VERSION}"
LINKED = frozenset({EXECUTOR, AGENT, APPROVAL})

ComponentSource = Union[str, "os.PathLike[str]", bytes, None]

# inject(owner, text, source) -> True when delivered, False for an unknown owner.
InjectFn = Callable[[str, str, Dict[str, Optional[str]]], bool]


# The abort event of the tool call running in this thread (`Tools.call(..., abort=)`): the
# executor's `run` is called from inside the component's call, on the caller's thread.
CALL_ABORT: "contextvars.ContextVar[Optional[threading.Event]]" = contextvars.ContextVar("dsh_tools_call_abort", default=None)


def takes_abort(run: Callable[..., Any]) -> bool:
    """Whether an executor's `run` takes the keyword `abort` (a `threading.Event`)."""
    try:
        params = inspect.signature(run).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "abort" and p.kind != p.POSITIONAL_ONLY or p.kind == p.VAR_KEYWORD for p in params)


class ComponentError(Exception):
    """The component cannot be loaded or linked, or a call into it trapped."""


def bundled_component() -> bytes:
    """The tools component shipped in this package (the one `dsh-host` embeds)."""
    return resources.files(__package__).joinpath("guest_tools.wasm").read_bytes()


_COMPILED: Dict[str, Tuple[wasmtime.Engine, Component]] = {}
_COMPILE_LOCK = threading.Lock()


def _read(source: ComponentSource) -> bytes:
    if source is None:
        return bundled_component()
    if isinstance(source, (bytes, bytearray)):
        return bytes(source)
    try:
        with open(source, "rb") as f:
            return f.read()
    except OSError as e:
        raise ComponentError(f"cannot read the tools component {os.fspath(source)!r}: {e.strerror}") from None


def load(source: ComponentSource) -> Tuple[wasmtime.Engine, Component]:
    """The engine and compiled component, once per distinct component per process."""
    data = _read(source)
    key = hashlib.sha256(data).hexdigest()
    with _COMPILE_LOCK:
        if key not in _COMPILED:
            engine = wasmtime.Engine()
            try:
                component = Component(engine, data)
            except wasmtime.WasmtimeError as e:
                raise ComponentError(f"not a loadable component: {e}") from None
            extra = sorted(set(component.type.imports(engine)) - LINKED)
            if extra:
                raise ComponentError(
                    "the component imports more than dsh:bash/bash-executor and dsh:bash/agent "
                    "(and dsh:bash/approval, for the policy middleware), which is all this host "
                    f"links: {', '.join(extra)}"
                )
            _COMPILED[key] = (engine, component)
        return _COMPILED[key]


class Instance:
    """The component linked to one executor, one inject function and, when it imports
    `approval` (the policy middleware's), the permission rules' host."""

    def __init__(self, source: ComponentSource, executor: Executor, inject: InjectFn, approval: Approval):
        self.engine, self.component = load(source)
        self.executor = executor
        self._inject_fn = inject
        self.approval = approval
        self.imports_approval = APPROVAL in self.component.type.imports(self.engine)
        self.linker = Linker(self.engine)
        with self.linker.root() as root:
            with root.add_instance(EXECUTOR) as ex:
                self._link_executor(ex)
            with root.add_instance(AGENT) as agent:
                agent.add_func("inject", self._inject)
            if self.imports_approval:
                with root.add_instance(APPROVAL) as ap:
                    self._link_approval(ap)

    def export(self, name: str, interface: str = TOOLS) -> Optional[Callable[..., Any]]:
        """A fresh instance's export `name` of `interface` (`tools` unless named), or None when
        the component lacks it."""
        store = wasmtime.Store(self.engine)
        try:
            instance = self.linker.instantiate(store, self.component)
        except wasmtime.WasmtimeError as e:
            raise ComponentError(f"cannot instantiate the tools component: {e}") from None
        iface = instance.get_export_index(store, interface)
        if iface is None:
            if interface != TOOLS:
                return None
            raise ComponentError(f"the component does not export {TOOLS}")
        index = instance.get_export_index(store, name, iface)
        func = None if index is None else instance.get_func(store, index)
        if func is None:
            return None

        def call(*args: Any) -> Any:
            try:
                return func(store, *args)
            except wasmtime.WasmtimeError as e:
                raise ComponentError(f"the tools component failed in {name}: {e}") from e

        return call

    def require(self, name: str) -> Callable[..., Any]:
        func = self.export(name)
        if func is None:
            raise ComponentError(f"the component's {TOOLS} has no {name}")
        return func

    def check_policy(self, files: List[Tuple[str, str]]) -> Union[int, str]:
        """The middleware's `policy-check.check`: the rule count of `files`, or why they do not
        load (naming file and line)."""
        check = self.export("check", POLICY_CHECK)
        if check is None:
            raise ComponentError(f"the component imports {APPROVAL} but does not export {POLICY_CHECK}")
        # result<u32, string>: the cases do not overlap, so wasmtime-py gives the value untagged.
        outcome: Union[int, str] = check([wit.record(name=n, text=t) for n, t in files])
        return outcome

    # -- imports --------------------------------------------------------------------------

    def _link_approval(self, ap: Any) -> None:
        a = self.approval

        def ask(_s: Any, q: Record) -> Variant:
            question = Question(
                owner=wit.field(q, "owner"),
                command=wit.field(q, "command"),
                cwd=wit.field(q, "cwd"),
                parts=tuple(wit.field(q, "parts")),
                rule=wit.field(q, "rule"),
                source=wit.field(q, "source"),
                construct=wit.field(q, "construct"),
                session_rule=wit.field(q, "session_rule"),
            )
            try:
                case, waited_ms = a.ask(question)
            except Exception as e:  # a fault of this host must refuse the command, not trap the call
                a.note_failure(f"asking failed ({type(e).__name__}: {e}): declined")
                case, waited_ms = "declined", None
            # The cases overlap (several have no payload), so the variant is tagged.
            return Variant(case) if waited_ms is None else Variant(case, waited_ms)

        ap.add_func("policy-files", lambda _s: [wit.record(name=n, text=t) for n, t in a.files])
        ap.add_func("home", lambda _s: approval_home())
        ap.add_func("grants", lambda _s, owner: a.grants(owner))
        ap.add_func("ask", ask)

    def _inject(self, _store: Any, owner: str, text: str, source: Record) -> Variant:
        # result<_, inject-error> overlaps (unknown-owner has no payload, like ok), so it is
        # tagged; inject-error's cases do not overlap: None is unknown-owner.
        try:
            delivered = self._inject_fn(owner, text, {"kind": wit.field(source, "kind"), "plugin": wit.field(source, "plugin")})
        except Exception as e:  # a failing callback is the agent's failure, reported as such
            return Variant("err", f"{type(e).__name__}: {e}")
        return Variant("ok") if delivered else Variant("err", None)

    def _link_executor(self, ex: Any) -> None:
        e = self.executor

        def guarded(op: Callable[[], Any], wrap: Callable[[Any], Any] = lambda v: v) -> Any:
            # An executor's own failure is an `internal` error of that call, not a trap.
            try:
                return wrap(op())
            except ExecutorError as err:
                return wit.executor_error(err)
            except Exception as err:
                return Variant("internal", f"{type(err).__name__}: {err}")

        def resolve(_s: Any, req: Record) -> Any:
            command, workdir, timeout, owner = (wit.field(req, k) for k in ("command", "workdir", "timeout_ms", "owner"))
            return guarded(lambda: e.resolve(command, workdir, timeout, owner), wit.spec)

        ex.add_func("current-limits", lambda _s: wit.limits(e.current_limits()))
        ex.add_func("resolve", resolve)
        abortable = takes_abort(e.run)

        def run(_s: Any, spec: Record) -> Any:
            abort = CALL_ABORT.get()
            if abortable and abort is not None:
                # The Protocol's `run` is `run(spec)`; an executor that can abort takes `abort=`.
                run_abortable: Callable[..., Any] = e.run
                return guarded(lambda: run_abortable(wit.spec_from_wit(spec), abort=abort), wit.run_result)
            return guarded(lambda: e.run(wit.spec_from_wit(spec)), wit.run_result)

        ex.add_func("run", run)
        ex.add_func("start", lambda _s, spec: guarded(lambda: e.start(wit.spec_from_wit(spec)), wit.task))
        ex.add_func("read-output", lambda _s, task_id: guarded(lambda: e.read_output(task_id), wit.read))
        ex.add_func("kill", lambda _s, task_id: guarded(lambda: bool(e.kill(task_id))))
        ex.add_func("owner-of", lambda _s, task_id: e.owner_of(task_id))
        ex.add_func("get", lambda _s, task_id: guarded(lambda: e.get(task_id), wit.task))
        ex.add_func("list-tasks", lambda _s: [wit.task(t) for t in e.list_tasks()])
