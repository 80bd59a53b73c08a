"""The worked Python host of docs/hosting.md: the tools component run with wasmtime-py alone.

    python3 docs/hosting/host.py target/guest-wasm/guest_tools.wasm

It supplies the component's two imports, `dsh:bash/bash-executor` (a tiny executor on
subprocess) and `dsh:bash/agent` (notices collected per session), calls the `tools` exports,
and prints each step with the imports the component called during it. tests/hosting.rs runs it
and checks every line. wasmtime-py is pinned as in tests/polyglot/python/requirements.txt.

The executor keeps the contract's shape but not all of its mechanics: output goes to files (so
a full pipe never blocks the command), the process group is the tree, and there are no limits
on tasks.
"""

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import wasmtime
from wasmtime.component import Component, Linker, Record, Variant

EXECUTOR = "dsh:bash/bash-executor@0.9.0"
AGENT = "dsh:bash/agent@0.9.0"
TOOLS = "dsh:bash/tools@0.9.0"

# f64 fields must be Python floats: an int there fails the call. No sandbox: `sandbox` is none.
LIMITS = {"default-timeout-ms": 120_000.0, "max-timeout-ms": 600_000.0, "max-output-bytes": 64_000, "grace-ms": 3_000.0, "sandbox": None}


def record(**fields):
    """A WIT record: wasmtime-py reads its fields by their kebab-case WIT names."""
    r = Record()
    for name, value in fields.items():
        setattr(r, name.replace("_", "-"), value)
    return r


def field(r, name):
    return getattr(r, name.replace("_", "-"))


class ExecutorError(Exception):
    """One case of `executor-error`. Several cases carry a string, so wasmtime-py needs them
    tagged: `Variant(case, message)`."""

    def __init__(self, case, message):
        super().__init__(message)
        self.variant = Variant(case, message)


def no_denials():
    """What this executor reports of denials: none, as it has no sandbox."""
    return record(first=[], more=0)


def child_env():
    """The host's environment minus secrets, plus the settings for non-interactive use."""
    env = {k: v for k, v in os.environ.items() if not any(w in k.upper() for w in ("KEY", "SECRET", "TOKEN", "PASSWORD"))}
    env.update(NO_COLOR="1", TERM="dumb", PAGER="cat", GIT_PAGER="cat", GIT_TERMINAL_PROMPT="0")
    return env


def end_of(returncode):
    """(exit code, signal name) of a finished process."""
    if returncode < 0:
        return None, signal.Signals(-returncode).name
    return returncode, None


class Executor:
    """The nine `bash-executor` functions on this machine's processes."""

    def __init__(self, trace):
        self.trace = trace
        self.dir = tempfile.mkdtemp()
        self.tasks = []  # [task record fields, Popen or None, [stdout path, stderr path], [read offsets]]
        self.files_made = 0

    def spawn(self, command, workdir):
        """`bash -c <command>` in a new session (its own process group), output to two files."""
        if not os.path.isdir(workdir):
            raise ExecutorError("workdir-unusable", f"workdir {json.dumps(workdir)} is not usable: no such directory")
        self.files_made += 1
        files = [os.path.join(self.dir, f"{self.files_made}-{s}.log") for s in ("stdout", "stderr")]
        with open(files[0], "wb") as out, open(files[1], "wb") as err:
            try:
                proc = subprocess.Popen(["bash", "-c", command], cwd=workdir, env=child_env(), stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True)
            except OSError as e:
                raise ExecutorError("spawn-failed", f"cannot start bash: {e}") from None
        return proc, files

    def task(self, task_id):
        for t in self.tasks:
            if t[0]["id"] == task_id:
                return t
        # unknown-task carries the id; the component words the message.
        raise ExecutorError("unknown-task", task_id)

    def current_limits(self, _store):
        self.trace.append("current-limits")
        return record(**LIMITS)

    def resolve(self, _store, req):
        self.trace.append("resolve")
        requested = field(req, "timeout_ms")
        if requested is None:
            requested = LIMITS["default-timeout-ms"]
        if not (math.isfinite(requested) and requested > 0):
            return ExecutorError("invalid-request", f"invalid timeoutMs: expected a positive number, got {requested}").variant
        workdir = req.workdir if req.workdir is not None else os.getcwd()
        return record(command=req.command, workdir=workdir, timeout_ms=float(min(requested, LIMITS["max-timeout-ms"])), owner=req.owner)

    def run(self, _store, spec):
        self.trace.append("run")
        try:
            proc, files = self.spawn(spec.command, spec.workdir)
        except ExecutorError as e:
            return e.variant
        timed_out = False
        try:
            proc.wait(timeout=field(spec, "timeout_ms") / 1000)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=LIMITS["grace-ms"] / 1000)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        code, sig = end_of(proc.returncode)
        return record(
            exit_code=code,
            signal=sig,
            timed_out=timed_out,
            aborted=False,
            timeout_ms=field(spec, "timeout_ms"),
            stdout=self.tail(files[0]),
            stderr=self.tail(files[1]),
            leftover_processes=0,
            yielded=None,
            denials=no_denials(),
            relocated=None,
        )

    def tail(self, path):
        with open(path, "rb") as f:
            data = f.read()
        keep = LIMITS["max-output-bytes"]
        truncated = len(data) > keep
        # The file holds the complete stream.
        return record(text=data[-keep:].decode("utf-8", "replace"), truncated=truncated, spill_path=path if truncated else None, spill_evicted=False)

    def start(self, _store, spec):
        self.trace.append("start")
        try:
            proc, files = self.spawn(spec.command, spec.workdir)
        except ExecutorError as e:
            return e.variant
        task = {"id": f"bash-{len(self.tasks) + 1}", "command": spec.command, "owner": spec.owner, "state": "running", "exit_code": None, "signal": None, "relocated": None}
        self.tasks.append([task, proc, files, [0, 0]])
        return record(**task)

    def read_output(self, _store, task_id):
        self.trace.append("read-output")
        try:
            task, _, files, offsets = self.task(task_id)
        except ExecutorError as e:
            return e.variant
        deltas = []
        for i in (0, 1):
            with open(files[i], "rb") as f:
                f.seek(offsets[i])
                data = f.read()
            offsets[i] += len(data)
            deltas.append(record(text=data.decode("utf-8", "replace"), lossy=False, spill_path=None, spill_evicted=False))
        return record(stdout=deltas[0], stderr=deltas[1], task=record(**task), denials=no_denials())

    def kill(self, _store, task_id):
        self.trace.append("kill")
        try:
            task, proc, _, _ = self.task(task_id)
        except ExecutorError as e:
            return e.variant
        if task["state"] != "running":
            return False
        task["state"] = "killed"
        os.killpg(proc.pid, signal.SIGTERM)
        return True

    def owner_of(self, _store, task_id):
        self.trace.append("owner-of")
        try:
            return self.task(task_id)[0]["owner"]
        except ExecutorError:
            return None

    def get(self, _store, task_id):
        self.trace.append("get")
        try:
            return record(**self.task(task_id)[0])
        except ExecutorError as e:
            return e.variant

    def list_tasks(self, _store):
        self.trace.append("list-tasks")
        return [record(**t[0]) for t in self.tasks]

    def ended(self):
        """Tasks whose process ended since the last look, each once."""
        ended = []
        for t in self.tasks:
            task, proc = t[0], t[1]
            if proc is None or proc.poll() is None:
                continue
            t[1] = None
            task["exit_code"], task["signal"] = end_of(proc.returncode)
            if task["state"] == "running":
                task["state"] = "killed" if task["signal"] else "completed"
            ended.append(task)
        return ended


class Host:
    def __init__(self, wasm_path):
        self.trace = []
        self.sessions = set()
        self.notices = []
        self.executor = Executor(self.trace)
        self.engine = wasmtime.Engine()
        self.component = Component.from_file(self.engine, wasm_path)
        # The two imported interfaces, and nothing else: the component imports no WASI.
        self.linker = Linker(self.engine)
        with self.linker.root() as root:
            with root.add_instance(EXECUTOR) as ex:
                e = self.executor
                for name, func in [
                    ("current-limits", e.current_limits),
                    ("resolve", e.resolve),
                    ("run", e.run),
                    ("start", e.start),
                    ("read-output", e.read_output),
                    ("kill", e.kill),
                    ("owner-of", e.owner_of),
                    ("get", e.get),
                    ("list-tasks", e.list_tasks),
                ]:
                    ex.add_func(name, func)
            with root.add_instance(AGENT) as agent:
                agent.add_func("inject", self.inject)

    def inject(self, _store, owner, text, source):
        self.trace.append("inject")
        assert (source.kind, source.plugin) == ("plugin", "tool-bash")
        # result<_, inject-error>: ok and unknown-owner are both "nothing", so both are tagged.
        if owner not in self.sessions:
            return Variant("err", None)  # unknown-owner: the component drops the notice
        self.notices.append((owner, text))
        return Variant("ok")

    def export(self, name):
        """An export of a fresh instance: one whose call trapped is never reused."""
        store = wasmtime.Store(self.engine)
        instance = self.linker.instantiate(store, self.component)
        index = instance.get_export_index(store, name, instance.get_export_index(store, TOOLS))
        func = instance.get_func(store, index)
        return lambda *args: func(store, *args)

    def imports_called(self):
        called = "[" + " ".join(self.trace) + "]"
        self.trace.clear()
        return called

    def call(self, name, arguments, caller):
        r = self.export("call-tool")(name, arguments, caller)
        code = field(r, "error_code") or "-"
        error = "true" if field(r, "is_error") else "false"
        print(f"{name}: {json.dumps(r.text)} error={error} {code} {self.imports_called()}")

    def deliver_ended(self):
        """Hand each ended task to the component, which injects the notice into its session."""
        ended = self.executor.ended()
        for task in ended:
            # result<_, string>: None is ok, a string is a message for the host's log.
            outcome = self.export("task-done")(record(**task))
            print(f"task-done {task['id']}: {'ok' if outcome is None else 'error ' + outcome} {self.imports_called()}")
        return len(ended)


def main():
    host = Host(sys.argv[1] if len(sys.argv) > 1 else "target/guest-wasm/guest_tools.wasm")

    names = " ".join(d.name for d in host.export("list-tools")())
    print(f"list-tools: {names} {host.imports_called()}")

    host.sessions.add("session-1")
    caller = record(owner="session-1", cwd="/")
    # Arguments that fail validation never reach the executor.
    host.call("bash", "{}", caller)
    host.call("bash", '{"command":"pwd; echo oops >&2; exit 3","description":"Show the dir"}', caller)
    host.call("bash", '{"command":"ls","description":"List files","workdir":"/no/such/dir"}', caller)
    host.call("bash", '{"command":"echo done","description":"Echo","run_in_background":true}', caller)

    while host.deliver_ended() == 0:
        time.sleep(0.005)
    for owner, text in host.notices:
        print(f"notice for {owner}: {text}")

    task = '{"task_id":"bash-1"}'
    host.call("bash_output", task, caller)
    host.call("bash_kill", task, caller)
    # A caller without the owner token cannot touch the task.
    host.call("bash_output", task, record(owner=None, cwd=None))

    shutil.rmtree(host.executor.dir)


if __name__ == "__main__":
    main()
