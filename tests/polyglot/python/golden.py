"""Run the golden cases (tests/polyglot/golden/*.json) through the dsh_tools package and print
the outcomes.

Usage: python golden.py COMPONENT GOLDEN_DIR SETTINGS_JSON [DSH_HOST]

With DSH_HOST, each case runs against `DSH_HOST executor serve --stdio` (a ServedExecutor given
the same settings as flags) instead of the package's LocalExecutor.

Prints one JSON object: {"tools": [...], "cases": {name: [outcome, ...]}}; the Rust test
tests/polyglot.rs compares it with the expectations and with the other hosts. An outcome is
{"text", "isError", "errorCode"} for a tool call, {"notices": [...]} for a notices step, and null
for the other steps. A case's session keeps the cwd of its first call; a case that gives one
session two cwds is refused, since a package session has one.
"""

import json
import os
import shutil
import sys
import tempfile
import time

from dsh_tools import LocalExecutor, ServedExecutor, Tools

WAIT_S = 10.0
SETTLE_S = 0.5


def substitute(value, case_dir):
    if isinstance(value, str):
        return value.replace("$CASE_DIR", case_dir)
    if isinstance(value, list):
        return [substitute(v, case_dir) for v in value]
    if isinstance(value, dict):
        return {k: substitute(v, case_dir) for k, v in value.items()}
    return value


def steps_of(case):
    if "steps" in case:
        return case["steps"]
    return [{k: v for k, v in case.items() if k not in ("about", "caller")}]


def wait_until(predicate, what):
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.01)


def executor_for(settings, dsh_host):
    """The executor a case runs against: local, or served by `dsh_host` with the same settings."""
    if dsh_host is None:
        return LocalExecutor(
            default_timeout_ms=settings["defaultTimeoutMs"],
            max_timeout_ms=settings["maxTimeoutMs"],
            max_output_bytes=settings["maxOutputBytes"],
            grace_ms=settings["graceMs"],
        )
    flags = {
        "defaultTimeoutMs": "--timeout-ms",
        "maxTimeoutMs": "--max-timeout-ms",
        "maxOutputBytes": "--max-output-bytes",
        "graceMs": "--grace-ms",
    }
    args = [part for key, value in settings.items() if key != "about" for part in (flags[key], str(value))]
    return ServedExecutor(binary=dsh_host, args=args)


def run_case(component, settings, case, dsh_host=None):
    executor = executor_for(settings, dsh_host)
    tools = Tools(executor=executor, component=component)
    case_dir = tempfile.mkdtemp(prefix="dsh-golden-")
    sessions = {}
    default_caller = case.get("caller", {})
    outcomes = []

    def session(name, cwd=None):
        if name not in sessions:
            sessions[name] = tools.session(cwd=cwd)
        elif cwd is not None and sessions[name].cwd != cwd:
            raise ValueError(f"session {name} is given a second cwd {cwd}")
        return sessions[name]

    try:
        for step in steps_of(case):
            step = substitute(step, case_dir)
            if "tool" in step:
                caller = {"owner": "a", "cwd": None, **substitute(default_caller, case_dir), **step.get("caller", {})}
                if caller["owner"] is None:
                    if caller["cwd"] is not None:
                        raise ValueError("a call without a session has no cwd")
                    r = tools.call(step["tool"], step["arguments"])
                else:
                    r = session(caller["owner"], caller["cwd"]).call(step["tool"], step["arguments"])
                outcomes.append({"text": r.text, "isError": r.is_error, "errorCode": r.error_code})
            elif "waitForFile" in step:
                path = os.path.join(case_dir, step["waitForFile"])
                wait_until(lambda: os.path.exists(path), path)
                time.sleep(SETTLE_S)
                outcomes.append(None)
            elif "createFile" in step:
                open(os.path.join(case_dir, step["createFile"]), "w").close()
                outcomes.append(None)
            elif "waitForTask" in step:
                wait_until(lambda: executor.get(step["waitForTask"])["state"] != "running", step["waitForTask"])
                outcomes.append(None)
            elif "notices" in step:
                s = session(step["notices"])
                got = []

                def enough():
                    got.extend(s.take_notices())
                    return len(got) >= len(step["texts"])

                wait_until(enough, f"notices for {step['notices']}")
                texts = []
                for n in got:
                    ok = (n.source.kind, n.source.plugin) == ("plugin", "tool-bash")
                    texts.append(n.text if ok else f"BAD SOURCE {n.source}: {n.text}")
                outcomes.append({"notices": texts})
            else:
                raise ValueError(f"unknown step {step}")
    finally:
        tools.close()
        # Given to the tools, not made by them: theirs to stop here.
        executor.shutdown()
        shutil.rmtree(case_dir, ignore_errors=True)
    return tools, outcomes


def tool_report(tools):
    return [
        {
            "name": t.name,
            "title": t.title,
            "description": t.description,
            "inputSchema": t.input_schema,
            "annotations": {
                "readOnlyHint": t.annotations.read_only_hint,
                "destructiveHint": t.annotations.destructive_hint,
                "idempotentHint": t.annotations.idempotent_hint,
                "openWorldHint": t.annotations.open_world_hint,
            },
        }
        for t in tools.tool_definitions
    ]


def main():
    component, golden_dir, settings_path = sys.argv[1:4]
    dsh_host = sys.argv[4] if len(sys.argv) > 4 else None
    with open(settings_path) as f:
        settings = json.load(f)
    result = {"tools": None, "cases": {}}
    for name in sorted(os.listdir(golden_dir)):
        if not name.endswith(".json"):
            continue
        with open(os.path.join(golden_dir, name)) as f:
            case = json.load(f)
        tools, outcomes = run_case(component, settings, case, dsh_host)
        result["cases"][name[: -len(".json")]] = outcomes
        if result["tools"] is None:
            result["tools"] = tool_report(tools)
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
