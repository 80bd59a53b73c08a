"""Drives `dsh-host mcp` over stdio with the official Python MCP SDK's client.

Usage: python3 stdio_client.py <dsh-host binary> <scratch dir> [dsh-host flags...]
Prints one JSON object with what each step saw; tests/mcp_sdk.rs checks it.
"""

import json
import os
import sys
import time

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def texts(result):
    return [block.text for block in result.content]


async def main():
    binary, scratch, *flags = sys.argv[1:]
    seen = {}
    logged = []
    notice_logged = anyio.Event()

    async def on_log(params):
        logged.append({"level": params.level, "logger": params.logger, "data": params.data})
        notice_logged.set()

    server = StdioServerParameters(command=binary, args=["mcp", *flags], env=dict(os.environ))
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write, logging_callback=on_log) as session:
            init = await session.initialize()
            seen["server"] = init.server_info.name
            tools = await session.list_tools()
            seen["tools"] = [
                {
                    "name": t.name,
                    "title": t.title,
                    "annotations": t.annotations.model_dump(by_alias=True, exclude_none=True) if t.annotations else None,
                }
                for t in tools.tools
            ]

            r = await session.call_tool("bash", {"command": "echo hi", "description": "Say hi"})
            seen["foreground"] = {"text": texts(r), "isError": r.is_error}

            r = await session.call_tool(
                "bash",
                {"command": "sleep 0.3; echo bg", "description": "Finish soon", "run_in_background": True},
            )
            seen["background"] = texts(r)
            with anyio.fail_after(10):
                await notice_logged.wait()
            seen["logged"] = logged
            r = await session.call_tool("bash_output", {"task_id": "bash-1"})
            seen["output"] = texts(r)

            r = await session.call_tool(
                "bash",
                {"command": "sleep 30", "description": "Sleep", "run_in_background": True},
            )
            seen["second"] = texts(r)
            r = await session.call_tool("bash_kill", {"task_id": "bash-2"})
            seen["kill"] = texts(r)

            # A request the client gives up on is cancelled, which kills its command.
            pid_file = os.path.join(scratch, "pid")
            try:
                await session.call_tool(
                    "bash",
                    {"command": f"echo $$ > {pid_file}; exec sleep 30", "description": "Sleep"},
                    read_timeout_seconds=1.0,
                )
                seen["cancelled"] = "completed"
            except Exception as e:  # the SDK's timeout error
                seen["cancelled"] = type(e).__name__
            with open(pid_file) as f:
                seen["cancelled_pid"] = int(f.read().strip())

            reports = []

            async def on_progress(progress, total, message):
                reports.append({"progress": progress, "message": message})

            r = await session.call_tool(
                "bash",
                {"command": "sleep 1; echo slow", "description": "Take a second"},
                progress_callback=on_progress,
            )
            seen["progress"] = {"text": texts(r), "reports": reports}
    print(json.dumps(seen))


anyio.run(main)
