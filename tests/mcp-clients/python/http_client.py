"""Drives `dsh-host mcp --http` with the official Python MCP SDK's streamable HTTP client.

Usage: python3 http_client.py <scenario> <endpoint url> <token> <scratch dir>
Prints one JSON object with what the scenario saw; tests/mcp_http.rs starts the server and
checks it.

Scenarios:
  isolation  two sessions at once: B reads, kills and waits on A's task; each sees only its
             own completion notice (as a log message and as the extra result block)
  close      a session starts a background command and ends (the SDK sends DELETE)
  leave      a session starts a background command and goes without ending the session
  limit      sessions up to the server's limit of 2, then one more, then one after a close
  calls      two calls at once in one session and one in another (--max-calls-in-flight 1), the
             first with a progressToken
  modern     the SDK's Client as it connects by default (mode "auto": server/discover at revision
             2026-07-28 first, then initialize on a legacy answer) and pinned to 2026-07-28
  roots      sessions offering different roots (`x`, `y` in the scratch dir) at once, one offering
             none, one a root that is not file://, one a missing directory: each runs `pwd`
  fairness   a quiet session A beside an abusive B (the server run with small per-session
             limits): B churns 20 background tasks, bursts starts past its running limit and
             calls past its calls limit; A's finished result, task numbering, starts and calls are
             unaffected
  untouched  with --http-max-sessions 1: a session that never calls a tool ends with DELETE,
             another goes without DELETE and is waited out until it expired, and the next one
             sets its log level before its first call, then starts a task
"""

import functools
import json
import os
import re
import sys
import time
import warnings
from contextlib import AsyncExitStack, asynccontextmanager

import anyio
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types import ListRootsResult, Root

# Roots are deprecated from revision 2026-07-28 on; the SDK's handshake negotiates an earlier one.
warnings.simplefilter("ignore")


def texts(result):
    return [block.text for block in result.content]


@asynccontextmanager
async def open_session(url, token, terminate_on_close=True, roots=None):
    """One MCP session, offering `roots` (a list of `Root`) when given; yields the session and
    the log messages it received."""
    logged = []
    arrived = anyio.Event()

    async def on_log(params):
        logged.append({"level": params.level, "logger": params.logger, "data": params.data})
        arrived.set()

    client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with client:
        async with streamable_http_client(url, http_client=client, terminate_on_close=terminate_on_close) as (
            read,
            write,
        ):
            async def list_roots(context):
                return ListRootsResult(roots=roots)

            callbacks = {"list_roots_callback": list_roots} if roots is not None else {}
            async with ClientSession(read, write, logging_callback=on_log, **callbacks) as session:
                await session.initialize()
                session.logged = logged
                session.log_arrived = arrived
                yield session


async def start_background(session, command):
    r = await session.call_tool(
        "bash", {"command": command, "description": "Background", "run_in_background": True}
    )
    text = texts(r)[0]
    # "started background task bash-<n>"
    return text.split()[-1], text


def read_pid(path):
    for _ in range(200):
        try:
            with open(path) as f:
                content = f.read().strip()
            if content:
                return int(content)
        except FileNotFoundError:
            pass
        time.sleep(0.02)
    raise RuntimeError(f"no pid in {path}")


async def isolation(url, token, scratch):
    seen = {}
    async with open_session(url, token) as a, open_session(url, token) as b:
        a_task, seen["a_started"] = await start_background(a, "sleep 0.5; echo done-a")
        seen["a_task"] = a_task

        r = await b.call_tool("bash_output", {"task_id": a_task})
        seen["b_output_of_a"] = {"text": texts(r), "isError": r.is_error}
        r = await b.call_tool("bash_kill", {"task_id": a_task})
        seen["b_kill_of_a"] = {"text": texts(r), "isError": r.is_error}

        # A's notice reaches A (as a log message), not B.
        with anyio.fail_after(10):
            await a.log_arrived.wait()
        # Give a stray notice for B the time to arrive, should there be one.
        await anyio.sleep(0.5)
        seen["a_logged"] = list(a.logged)
        seen["b_logged"] = list(b.logged)

        # The notice also rides on A's next result, and on none of B's.
        r = await a.call_tool("bash", {"command": "echo a-next", "description": "Next"})
        seen["a_next"] = texts(r)
        r = await b.call_tool("bash", {"command": "echo b-next", "description": "Next"})
        seen["b_next"] = texts(r)

        # A still reads its own task: B's kill did not reach it.
        r = await a.call_tool("bash_output", {"task_id": a_task})
        seen["a_output"] = texts(r)

        # B's own task, and A cannot read it either.
        b_task, _ = await start_background(b, "echo b-own")
        seen["b_task"] = b_task
        r = await a.call_tool("bash_output", {"task_id": b_task})
        seen["a_output_of_b"] = {"text": texts(r), "isError": r.is_error}
        # B's notice reaches B, and A not.
        with anyio.fail_after(10):
            await b.log_arrived.wait()
        await anyio.sleep(0.5)
        seen["a_logged_end"] = list(a.logged)
        seen["b_logged_end"] = list(b.logged)
    print(json.dumps(seen))


async def close(url, token, scratch, terminate_on_close=True):
    pid_file = os.path.join(scratch, "pid")
    # The shell notes a SIGTERM (the kill the server sends first, before SIGKILL) in `term`.
    term_file = os.path.join(scratch, "term")
    command = f"echo $$ > {pid_file}; trap 'echo TERM > {term_file}; exit 0' TERM; sleep 60 & wait"
    seen = {}
    async with open_session(url, token, terminate_on_close=terminate_on_close) as s:
        task, seen["started"] = await start_background(s, command)
        seen["task"] = task
        seen["pid"] = read_pid(pid_file)
    print(json.dumps(seen))


async def leave(url, token, scratch):
    await close(url, token, scratch, terminate_on_close=False)


async def limit(url, token, scratch):
    seen = {}
    async with open_session(url, token) as a:
        async with open_session(url, token) as b:
            r = await b.call_tool("bash", {"command": "echo two", "description": "Two"})
            seen["second"] = texts(r)
            try:
                async with open_session(url, token) as c:
                    seen["third"] = "opened"
            except Exception as e:  # the SDK's McpError, carrying the server's JSON-RPC error
                while isinstance(e, BaseExceptionGroup) and len(e.exceptions) == 1:
                    e = e.exceptions[0]
                seen["third"] = {"type": type(e).__name__, "message": str(e)}
        # B ended (DELETE): there is room again.
        async with open_session(url, token) as c:
            r = await c.call_tool("bash", {"command": "echo again", "description": "Again"})
            seen["after_close"] = texts(r)
        r = await a.call_tool("bash", {"command": "echo first", "description": "First"})
        seen["first"] = texts(r)
    print(json.dumps(seen))


async def calls(url, token, scratch):
    """With --max-calls-in-flight 1: a second call in flight in one session is refused, while
    another session's call runs."""
    seen = {}
    async with open_session(url, token) as a, open_session(url, token) as b:

        reports = []

        async def on_progress(progress, total, message):
            reports.append({"progress": progress, "message": message})

        async def slow():
            r = await a.call_tool(
                "bash",
                {"command": "sleep 1; echo slow", "description": "Slow"},
                progress_callback=on_progress,
            )
            seen["a_slow"] = texts(r)
            seen["a_slow_progress"] = reports

        async def second():
            await anyio.sleep(0.3)
            try:
                r = await a.call_tool("bash", {"command": "echo a2", "description": "Second"})
                seen["a_second"] = texts(r)
            except Exception as e:
                seen["a_second"] = {"type": type(e).__name__, "message": str(e)}

        async def other():
            await anyio.sleep(0.3)
            r = await b.call_tool("bash", {"command": "echo b", "description": "Other"})
            seen["b"] = texts(r)

        async with anyio.create_task_group() as tg:
            tg.start_soon(slow)
            tg.start_soon(second)
            tg.start_soon(other)
    print(json.dumps(seen))


async def roots(url, token, scratch):
    seen = {}

    def file_root(name):
        return Root(uri=f"file://{os.path.join(scratch, name)}")

    async def pwd(session, **extra):
        r = await session.call_tool("bash", {"command": "pwd", "description": "Where", **extra})
        return texts(r)[0].strip()

    async with (
        open_session(url, token, roots=[file_root("x")]) as a,
        open_session(url, token, roots=[file_root("y")]) as b,
    ):
        async def run(name, session, **extra):
            seen[name] = await pwd(session, **extra)

        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "a", a)
            tg.start_soon(run, "b", b)
            tg.start_soon(functools.partial(run, "a_relative", a, workdir="sub"))
        seen["a_again"] = await pwd(a)
    async with open_session(url, token) as c:
        seen["no_roots"] = await pwd(c)
    # Built unchecked: the SDK's Root accepts file:// only.
    async with open_session(url, token, roots=[Root.model_construct(uri="https://example.com/repo")]) as d:
        seen["not_file"] = await pwd(d)
    async with open_session(url, token, roots=[file_root("missing")]) as e:
        seen["missing"] = await pwd(e)
    print(json.dumps(seen))


async def modern(url, token, scratch):
    seen = {}

    def transport():
        client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        return streamable_http_client(url, http_client=client)

    async with Client(transport(), mode="auto") as client:
        seen["auto_version"] = client.session.protocol_version
        r = await client.call_tool("bash", {"command": "echo auto", "description": "Auto"})
        seen["auto"] = texts(r)
    try:
        async with Client(transport(), mode="2026-07-28") as client:
            r = await client.call_tool("bash", {"command": "echo modern", "description": "Modern"})
            seen["pinned"] = texts(r)
    except Exception as e:
        while isinstance(e, BaseExceptionGroup) and len(e.exceptions) == 1:
            e = e.exceptions[0]
        error = getattr(e, "error", None)
        seen["pinned"] = {
            "type": type(e).__name__,
            "code": getattr(error, "code", None),
            "message": getattr(error, "message", str(e)),
            "data": getattr(error, "data", None),
        }
    print(json.dumps(seen))


async def untouched(url, token, scratch):
    """Sessions that never call a tool still end; a level set before the first call holds."""
    seen = {}
    # Ends with DELETE; the next one opens only if this one is gone (the limit is 1).
    async with open_session(url, token):
        pass
    async with open_session(url, token, terminate_on_close=False):
        seen["second_opened"] = True
    # The second went without DELETE: the next is refused until the second expired.
    started = time.monotonic()
    refused = 0
    async with AsyncExitStack() as stack:
        while True:
            try:
                s = await stack.enter_async_context(open_session(url, token))
                break
            except Exception:  # the SDK's McpError for the server's 503, perhaps in a group
                refused += 1
                if time.monotonic() - started > 20:
                    raise
                await anyio.sleep(0.2)
        seen["refused"] = refused
        seen["waited_s"] = time.monotonic() - started

        # The level comes before the session's first call, which opens its dsh side.
        await s.set_logging_level("warning")
        task, _ = await start_background(s, "echo quiet")
        seen["task"] = task
        # The notice (level info) rides on a later result; no log message carries it.
        for _ in range(100):
            r = await s.call_tool("bash", {"command": "echo next", "description": "Next"})
            if len(r.content) > 1:
                break
            await anyio.sleep(0.1)
        seen["next"] = texts(r)
        await anyio.sleep(0.5)
        seen["logged"] = list(s.logged)
    print(json.dumps(seen))


async def fairness(url, token, scratch):
    """Run with --max-session-tasks 3, --max-session-finished-tasks 4, --max-finished-tasks 4,
    --max-calls-in-flight 2, --max-output-bytes 1000 and --max-session-spill-bytes 20000."""
    seen = {}

    async def outcome(coro):
        started = time.monotonic()
        try:
            r = await coro
            return {"text": texts(r), "isError": r.is_error, "s": time.monotonic() - started}
        except Exception as e:
            return {"error": str(e), "s": time.monotonic() - started}

    async def wait_done(session, task):
        for _ in range(500):
            r = await session.call_tool("bash_output", {"task_id": task})
            if "[status: running]" not in texts(r)[0]:
                return
            await anyio.sleep(0.02)
        raise RuntimeError(f"{task} never finished")

    async with open_session(url, token) as a, open_session(url, token) as b:
        # A's task finishes; its result waits unread.
        a_task, seen["a_started"] = await start_background(a, "echo quiet-a")
        with anyio.fail_after(10):
            await a.log_arrived.wait()

        # B churns: 20 tasks, one after another, each to its end.
        b_ids = []
        for i in range(20):
            task, _ = await start_background(b, f"echo churn-{i}")
            await wait_done(b, task)
            b_ids.append(task)
        seen["b_ids"] = b_ids
        seen["b_first_after_churn"] = await outcome(
            b.call_tool("bash_output", {"task_id": b_ids[0]})
        )
        seen["b_last_after_churn"] = await outcome(
            b.call_tool("bash_output", {"task_id": b_ids[-1]})
        )
        seen["a_after_churn"] = await outcome(a.call_tool("bash_output", {"task_id": a_task}))

        # B bursts starts: 4 long tasks against its limit of 3; A still starts one.
        seen["b_burst"] = [
            await outcome(
                b.call_tool(
                    "bash",
                    {"command": "sleep 30", "description": "Hold", "run_in_background": True},
                )
            )
            for _ in range(4)
        ]
        seen["a_start_during_burst"] = await outcome(
            a.call_tool(
                "bash", {"command": "echo a-two", "description": "Two", "run_in_background": True}
            )
        )

        # B calls past its calls limit (2): 3 slow calls at once; A's call meanwhile.
        b_calls = []

        async def b_call(i):
            b_calls.append(
                await outcome(b.call_tool("bash", {"command": f"sleep 1; echo b{i}", "description": "Slow"}))
            )

        async def a_call():
            await anyio.sleep(0.3)
            seen["a_call_during_b_calls"] = await outcome(
                a.call_tool("bash", {"command": "echo a-call", "description": "Quick"})
            )

        async with anyio.create_task_group() as tg:
            for i in range(3):
                tg.start_soon(b_call, i)
            tg.start_soon(a_call)
        seen["b_calls"] = b_calls

        # Spill files: A keeps one from a foreground call and one of a finished, unread task;
        # B's finished task spills first, then B floods 10 foreground spills of 5,000 bytes
        # against its budget of 20,000.
        for start in seen["b_burst"][:3]:
            await b.call_tool("bash_kill", {"task_id": start["text"][0].split()[-1]})
        big = "head -c 5000 /dev/zero | tr '\\0' {}"
        seen["a_spill_call"] = await outcome(
            a.call_tool("bash", {"command": big.format("a"), "description": "Big"})
        )
        a_big, _ = await start_background(a, big.format("t"))
        b_big, _ = await start_background(b, big.format("u"))
        # Both end before the flood (their completion notices arrive), unread.
        for session, task in ((a, a_big), (b, b_big)):
            done = re.compile(rf"\b{task}\b")
            with anyio.fail_after(10):
                while not any(done.search(json.dumps(entry)) for entry in session.logged):
                    await anyio.sleep(0.02)
        seen["b_flood"] = [
            await outcome(b.call_tool("bash", {"command": big.format("b"), "description": "Flood"}))
            for _ in range(10)
        ]
        seen["b_big_after_flood"] = await outcome(b.call_tool("bash_output", {"task_id": b_big}))
        seen["a_big_after_flood"] = await outcome(a.call_tool("bash_output", {"task_id": a_big}))
    print(json.dumps(seen))


SCENARIOS = {
    "fairness": fairness,
    "isolation": isolation,
    "close": close,
    "leave": leave,
    "limit": limit,
    "calls": calls,
    "roots": roots,
    "modern": modern,
    "untouched": untouched,
}


def main():
    scenario, url, token, scratch = sys.argv[1:5]
    anyio.run(SCENARIOS[scenario], url, token, scratch)


main()
