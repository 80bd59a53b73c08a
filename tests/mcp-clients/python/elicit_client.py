"""Drives the permission questions of `dsh-host --policy FILE mcp` (MCP elicitation, form mode)
with the official Python MCP SDK's client, over stdio or streamable HTTP.

Usage: python3 elicit_client.py <dsh-host binary> <scratch dir> <stdio|stdio-2026|http> [dsh-host flags...]
Writes `policy.toml` in the scratch dir (default "ask", `ls` allowed) and runs each scenario in
its own MCP session: over stdio a server process per session, over HTTP one server
(`--http 127.0.0.1:0`, its token in DSH_HTTP_TOKEN; the address from its stderr) with a
session per scenario, and a second server for the timeout; `stdio-2026` as stdio, with the
SDK's `Client` pinned to revision 2026-07-28, where the question comes back as an input-required
result and the SDK calls again with the answer. Every server runs with
`--cwd <scratch dir>`. Prints one JSON object; tests/mcp_sdk.rs checks it.

Scenarios (the files they touch are checked on disk):
  once     the callback answers allow_once to `touch once`: it runs
  session  allow_for_session to `touch s1`; `touch s2` in the same session runs unasked; another
           session, opened meanwhile, is asked again about `touch s3` (answered allow_once);
           the first session's `touch s4` still runs unasked
  decline  the callback declines `touch declined` (also: cancels `touch cancelled`, accepts
           with a decision that is not offered for `touch bogus`): nothing runs
  timeout  with --policy-ask-timeout-ms 1500, the callback sleeps 4 s before allowing `touch
           late`: refused in time, and it stays refused after the late answer
  noask    a client without the elicitation capability: refused as one that cannot ask
  multi    `echo one` + newline + `touch multi`, answered allow_once: the question shows both
"""

import json
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import asynccontextmanager

import anyio
from mcp import Client, ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types import ElicitResult

# The line the HTTP server prints on stderr once it listens.
SERVING = "dsh-host: serving MCP over HTTP at "
# The answer timeout of the timeout scenario's server, and how long its callback takes.
ASK_TIMEOUT_MS = 1500
SLOW_ANSWER_S = 4.0


def texts(result):
    return [block.text for block in result.content]


def outcome(result, started):
    return {
        "text": texts(result),
        "isError": result.is_error,
        "elapsed_s": round(time.monotonic() - started, 3),
    }


def accept(decision):
    return ElicitResult(action="accept", content={"decision": decision})


class Asker:
    """An elicitation callback: notes each question, waits `delay` seconds, then answers."""

    def __init__(self, answer, delay=0.0):
        self.answer = answer
        self.delay = delay
        self.questions = []
        self.cancelled = False
        self.answered = 0

    async def __call__(self, context, params):
        self.questions.append(
            {
                "mode": params.mode,
                "message": params.message,
                "schema": params.requested_schema,
            }
        )
        if self.delay:
            try:
                await anyio.sleep(self.delay)
            except anyio.get_cancelled_exc_class():
                self.cancelled = True
                raise
        self.answered += 1
        return self.answer


class Stdio:
    """A new `dsh-host mcp` process per session."""

    def __init__(self, binary, base_args, flags):
        self.binary = binary
        self.base_args = base_args
        self.flags = flags
        self.stderr = []

    @asynccontextmanager
    async def session(self, asker=None, slow=False):
        args = list(self.base_args)
        if slow:
            args += ["--policy-ask-timeout-ms", str(ASK_TIMEOUT_MS)]
        args += ["mcp", *self.flags]
        server = StdioServerParameters(command=self.binary, args=args, env=dict(os.environ))
        with tempfile.TemporaryFile("w+") as errlog:
            try:
                callbacks = {"elicitation_callback": asker} if asker else {}
                async with self.connect(stdio_client(server, errlog=errlog), callbacks) as session:
                    yield session
            finally:
                errlog.seek(0)
                self.stderr.append(errlog.read())

    @asynccontextmanager
    async def connect(self, transport, callbacks):
        async with transport as (read, write):
            async with ClientSession(read, write, **callbacks) as session:
                await session.initialize()
                yield session

    def close(self):
        pass


class Stdio2026(Stdio):
    """As `Stdio`, the client on revision 2026-07-28 (no `initialize`; questions come back as
    input-required results, answered by a retry)."""

    @asynccontextmanager
    async def connect(self, transport, callbacks):
        async with Client(transport, mode="2026-07-28", **callbacks) as client:
            yield client


class HttpServer:
    """One `dsh-host mcp --http 127.0.0.1:0`; its URL as its stderr names it."""

    def __init__(self, binary, args, token):
        env = dict(os.environ, DSH_HTTP_TOKEN=token)
        self.proc = subprocess.Popen(
            [binary, *args],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines = []
        self.url = None
        listening = threading.Event()

        def drain():
            for line in self.proc.stderr:
                line = line.rstrip("\n")
                self.lines.append(line)
                if self.url is None and line.startswith(SERVING):
                    self.url = line[len(SERVING):]
                    listening.set()
            listening.set()

        threading.Thread(target=drain, daemon=True).start()
        if not listening.wait(120) or self.url is None:
            self.proc.kill()
            raise RuntimeError("the server printed no address:\n" + "\n".join(self.lines))

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Http:
    """One server (a second for the short answer timeout), a new MCP session per scenario."""

    def __init__(self, binary, base_args, flags):
        self.binary = binary
        self.base_args = base_args
        self.flags = flags
        self.token = secrets.token_hex(16)
        self.servers = {}

    def server(self, slow):
        if slow not in self.servers:
            args = list(self.base_args)
            if slow:
                args += ["--policy-ask-timeout-ms", str(ASK_TIMEOUT_MS)]
            args += ["mcp", "--http", "127.0.0.1:0", *self.flags]
            self.servers[slow] = HttpServer(self.binary, args, self.token)
        return self.servers[slow]

    @asynccontextmanager
    async def session(self, asker=None, slow=False):
        url = self.server(slow).url
        client = create_mcp_http_client(headers={"Authorization": f"Bearer {self.token}"})
        async with client:
            async with streamable_http_client(url, http_client=client) as (read, write):
                callbacks = {"elicitation_callback": asker} if asker else {}
                async with ClientSession(read, write, **callbacks) as session:
                    await session.initialize()
                    yield session

    @property
    def stderr(self):
        return ["\n".join(s.lines) for s in self.servers.values()]

    def close(self):
        for server in self.servers.values():
            server.close()


async def touch(session, path):
    started = time.monotonic()
    r = await session.call_tool("bash", {"command": f"touch {path}", "description": "Touch"})
    return outcome(r, started)


async def once(transport, scratch):
    path = os.path.join(scratch, "once")
    asker = Asker(accept("allow_once"))
    async with transport.session(asker) as s:
        result = await touch(s, path)
    return {"result": result, "questions": asker.questions, "created": os.path.exists(path)}


async def session_grant(transport, scratch):
    s1, s2, s3, s4 = (os.path.join(scratch, n) for n in ("s1", "s2", "s3", "s4"))
    seen = {}
    asker = Asker(accept("allow_for_session"))
    fresh = Asker(accept("allow_once"))
    async with transport.session(asker) as s:
        seen["first"] = await touch(s, s1)
        seen["asked_after_first"] = len(asker.questions)
        seen["second"] = await touch(s, s2)
        seen["asked_after_second"] = len(asker.questions)
        # Another session, while the first is open: its person is asked.
        async with transport.session(fresh) as other:
            seen["fresh"] = await touch(other, s3)
        # And the first session's grant still holds.
        seen["third"] = await touch(s, s4)
        seen["asked_after_third"] = len(asker.questions)
    seen["questions"] = asker.questions
    seen["fresh_questions"] = fresh.questions
    seen["created"] = {
        n: os.path.exists(p) for n, p in (("s1", s1), ("s2", s2), ("s3", s3), ("s4", s4))
    }
    return seen


async def decline(transport, scratch):
    seen = {"created": {}}
    for name, answer in (
        ("declined", ElicitResult(action="decline")),
        ("cancelled", ElicitResult(action="cancel")),
        # Accepted, with a value that is not one of the choices.
        ("bogus", accept("allow_forever")),
    ):
        path = os.path.join(scratch, name)
        asker = Asker(answer)
        async with transport.session(asker) as s:
            seen[name] = await touch(s, path)
        seen[name]["asked"] = len(asker.questions)
        seen["created"][name] = os.path.exists(path)
    return seen


async def timeout(transport, scratch):
    path = os.path.join(scratch, "late")
    asker = Asker(accept("allow_once"), delay=SLOW_ANSWER_S)
    seen = {}
    async with transport.session(asker, slow=True) as s:
        started = time.monotonic()
        seen["result"] = await touch(s, path)
        seen["created_at_refusal"] = os.path.exists(path)
        # Past the time the callback answers (or was cancelled): the late answer runs nothing.
        await anyio.sleep(max(0.0, SLOW_ANSWER_S + 0.5 - (time.monotonic() - started)))
        seen["callback_cancelled"] = asker.cancelled
        seen["callback_answered"] = asker.answered
        # The session serves on.
        r = await s.call_tool("bash", {"command": f"ls {scratch}", "description": "List"})
        seen["after"] = {"text": texts(r), "isError": r.is_error}
    seen["asked"] = len(asker.questions)
    seen["created"] = os.path.exists(path)
    return seen


async def noask(transport, scratch):
    path = os.path.join(scratch, "noask")
    async with transport.session(None) as s:
        result = await touch(s, path)
    return {"result": result, "created": os.path.exists(path)}


async def multi(transport, scratch):
    path = os.path.join(scratch, "multi")
    command = f"echo one\ntouch {path}"
    asker = Asker(accept("allow_once"))
    async with transport.session(asker) as s:
        started = time.monotonic()
        r = await s.call_tool("bash", {"command": command, "description": "Two lines"})
        result = outcome(r, started)
    return {
        "command": command,
        "result": result,
        "questions": asker.questions,
        "created": os.path.exists(path),
    }


SCENARIOS = {
    "once": once,
    "session": session_grant,
    "decline": decline,
    "timeout": timeout,
    "noask": noask,
    "multi": multi,
}


async def main():
    binary, scratch, transport_name, *flags = sys.argv[1:]
    policy = os.path.join(scratch, "policy.toml")
    with open(policy, "w") as f:
        f.write('[permissions]\ndefault = "ask"\nallow = ["Bash(ls *)"]\n')
    base_args = ["--policy", policy, "--cwd", scratch]
    transports = {"stdio": Stdio, "stdio-2026": Stdio2026, "http": Http}
    transport = transports[transport_name](binary, base_args, flags)
    seen = {"transport": transport_name, "policy": policy}
    try:
        for name, scenario in SCENARIOS.items():
            seen[name] = await scenario(transport, scratch)
    finally:
        transport.close()
    seen["stderr"] = transport.stderr
    print(json.dumps(seen))


anyio.run(main)
