"""Drives `dsh-host mcp` over stdio with the official Python MCP SDK's client offering roots.

Usage: python3 stdio_roots.py <dsh-host binary> <scratch dir> [dsh-host flags...]
The scratch dir holds `x` (with `x/sub`) and `y`. The client offers `x` as its root, answering
the server's first roots/list only after a second, then changes its roots (to `y`, to roots the
server cannot use) and announces each change with notifications/roots/list_changed; after each,
`pwd` shows where the session's calls run. Prints one JSON object; tests/mcp_sdk.rs checks it.
"""

import json
import os
import sys
import tempfile
import warnings

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import ListRootsResult, Root

# Roots are deprecated from revision 2026-07-28 on; the SDK's handshake negotiates an earlier one.
warnings.simplefilter("ignore")


def texts(result):
    return [block.text for block in result.content]


def file_root(path):
    return Root(uri=f"file://{path}", name=os.path.basename(path))


async def main():
    binary, scratch, *flags = sys.argv[1:]
    x, y = os.path.join(scratch, "x"), os.path.join(scratch, "y")
    seen = {}
    asked = []
    # What the client answers, and whether the next answer comes only after a second.
    offered = {"roots": [file_root(x)], "slow": True}

    async def list_roots(context):
        asked.append(len(asked) + 1)
        if offered["slow"]:
            offered["slow"] = False
            await anyio.sleep(1.0)
        return ListRootsResult(roots=offered["roots"])

    async def pwd(session, **extra):
        r = await session.call_tool("bash", {"command": "pwd", "description": "Where", **extra})
        return texts(r)[0].strip()

    async def change_roots(session, roots):
        offered["roots"] = roots
        await session.send_roots_list_changed()

    server = StdioServerParameters(command=binary, args=["mcp", *flags], env=dict(os.environ))
    with tempfile.TemporaryFile("w+") as errlog:
        async with stdio_client(server, errlog=errlog) as (read, write):
            async with ClientSession(read, write, list_roots_callback=list_roots) as session:
                await session.initialize()
                # Sent at once: the call waits for the slow first answer.
                seen["first"] = await pwd(session)
                seen["relative"] = await pwd(session, workdir="sub")
                await change_roots(session, [file_root(y), file_root(x)])
                seen["changed"] = await pwd(session)
                # Not a file:// URI (built unchecked: the SDK's Root accepts file:// only).
                await change_roots(session, [Root.model_construct(uri="https://example.com/repo")])
                seen["not_file"] = await pwd(session)
                await change_roots(session, [file_root(os.path.join(scratch, "missing")), file_root(x)])
                seen["missing"] = await pwd(session)
                await change_roots(session, [])
                seen["none"] = await pwd(session)
                await change_roots(session, [file_root(x)])
                seen["back"] = await pwd(session)
        errlog.seek(0)
        seen["stderr"] = errlog.read()
    seen["asked"] = len(asked)
    print(json.dumps(seen))


anyio.run(main)
