"""Measures `dsh-host mcp --http` with many sessions: calls from 100 active sessions at once, the
same again while one more session floods the server (as many `bash true` calls in flight as its
per-session limit allows, one after another, for as long as the others call), and the memory
1,000 idle sessions take. The floor: the same number of `bash -c true` spawns, run
from this client with the same concurrency (each worker spawning one after another, all at once).

Usage: python3 http_bench.py <dsh-host binary> [active sessions] [calls each] [idle sessions] [rounds]
(defaults 100, 10, 1000, 2). Starts its own server on a free port and prints what it measured.
Speaks plain HTTP (httpx2, the SDK's HTTP client) rather than the SDK's session machinery, so
that the client's own cost stays small next to the server's.
"""

import asyncio
import json
import os
import statistics
import subprocess
import sys
import time

import httpx2

TOKEN = "bench-token"
# The flooding session's calls in flight: the server's default per-session limit
# (--max-calls-in-flight).
FLOOD_WIDTH = 16
HEADERS = {
    "authorization": f"Bearer {TOKEN}",
    "content-type": "application/json",
    "accept": "application/json, text/event-stream",
}


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def sse_result(text):
    """The JSON-RPC message with a result or an error in an SSE body."""
    for line in text.splitlines():
        if line.startswith("data: ") and len(line) > 6:
            message = json.loads(line[6:])
            if "result" in message or "error" in message:
                return message
    raise RuntimeError(f"no result in {text!r}")


async def open_session(client, url):
    r = await client.post(
        url,
        headers=HEADERS,
        json={
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "bench", "version": "1"},
            },
        },
    )
    r.raise_for_status()
    sid = r.headers["mcp-session-id"]
    headers = {**HEADERS, "mcp-session-id": sid, "mcp-protocol-version": "2025-06-18"}
    r = await client.post(url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    r.raise_for_status()
    return headers


async def call(client, url, headers, n):
    started = time.perf_counter()
    r = await client.post(
        url,
        headers=headers,
        json={
            "jsonrpc": "2.0",
            "id": n,
            "method": "tools/call",
            "params": {"name": "bash", "arguments": {"command": "true", "description": "Do nothing"}},
        },
    )
    r.raise_for_status()
    message = sse_result(r.text)
    assert message["result"]["content"][0]["text"] == "(no output)", message
    return time.perf_counter() - started


async def flood(client, url, headers, width, stop):
    """`width` loops of `bash true` calls in one session until `stop` is set; (answered, refused)."""
    counts = [0, 0]

    async def loop(k):
        n = 0
        while not stop.is_set():
            n += 1
            r = await client.post(
                url,
                headers=headers,
                json={
                    "jsonrpc": "2.0",
                    "id": 1_000_000 * (k + 1) + n,
                    "method": "tools/call",
                    "params": {"name": "bash", "arguments": {"command": "true", "description": "Flood"}},
                },
            )
            counts["error" in sse_result(r.text)] += 1

    await asyncio.gather(*(loop(k) for k in range(width)))
    return counts


async def spawn_true():
    started = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        "bash", "-c", "true", stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    await process.communicate()
    assert process.returncode == 0
    return time.perf_counter() - started


def summary(latencies, wall):
    latencies = sorted(latencies)
    return {
        "calls": len(latencies),
        "wall_s": round(wall, 3),
        "calls_per_s": round(len(latencies) / wall, 1),
        "latency_ms_p50": round(statistics.median(latencies) * 1000, 2),
        "latency_ms_p99": round(latencies[max(int(len(latencies) * 0.99) - 1, 0)] * 1000, 2),
    }


async def floor(workers, each):
    async def worker():
        return [await spawn_true() for _ in range(each)]

    started = time.perf_counter()
    latencies = [x for per in await asyncio.gather(*(worker() for _ in range(workers))) for x in per]
    return summary(latencies, time.perf_counter() - started)


async def close(client, url, headers):
    r = await client.delete(url, headers=headers)
    assert r.status_code in (200, 204), r.status_code


async def main():
    binary = sys.argv[1]
    active = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    calls_each = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    idle = int(sys.argv[4]) if len(sys.argv) > 4 else 1000
    rounds = int(sys.argv[5]) if len(sys.argv) > 5 else 2

    server = subprocess.Popen(
        [binary, "mcp", "--http", "127.0.0.1:0", "--http-max-sessions", str(max(active, idle) + 1)],
        env={**os.environ, "DSH_HTTP_TOKEN": TOKEN},
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = None
        for line in server.stderr:
            if line.startswith("dsh-host: serving MCP over HTTP at "):
                url = line.split()[-1]
                break
        assert url, "the server printed no address"
        limits = httpx2.Limits(
            max_connections=active + FLOOD_WIDTH + 50, max_keepalive_connections=active + FLOOD_WIDTH + 50
        )
        async with httpx2.AsyncClient(limits=limits, timeout=120) as client:
            out = {"binary": binary}
            warm = await open_session(client, url)
            await call(client, url, warm, 1)
            await close(client, url, warm)
            await asyncio.sleep(0.5)
            out["rss_kib_start"] = rss_kib(server.pid)

            # Active: every session makes its calls one after another, all sessions at once.
            started = time.perf_counter()
            sessions = await asyncio.gather(*(open_session(client, url) for _ in range(active)))
            opened = time.perf_counter() - started

            async def run(headers):
                return [await call(client, url, headers, n) for n in range(calls_each)]

            out["floor"] = await floor(active, calls_each)
            started = time.perf_counter()
            latencies = [x for per in await asyncio.gather(*(run(h) for h in sessions)) for x in per]
            wall = time.perf_counter() - started
            out["active"] = {
                "sessions": active,
                "open_all_s": round(opened, 3),
                **summary(latencies, wall),
                "rss_kib": rss_kib(server.pid),
            }
            # The same calls while one more session floods at its calls-in-flight limit.
            flooder = await open_session(client, url)
            stop = asyncio.Event()
            flooding = asyncio.create_task(flood(client, url, flooder, FLOOD_WIDTH, stop))
            await asyncio.sleep(0.5)
            started = time.perf_counter()
            latencies = [x for per in await asyncio.gather(*(run(h) for h in sessions)) for x in per]
            wall = time.perf_counter() - started
            stop.set()
            answered, refused = await flooding
            out["flooded"] = {
                "sessions": active,
                **summary(latencies, wall),
                "flood_width": FLOOD_WIDTH,
                "flood_answered": answered,
                "flood_refused": refused,
            }
            await close(client, url, flooder)

            await asyncio.gather(*(close(client, url, h) for h in sessions))
            await asyncio.sleep(1)
            out["rss_kib_after_active_closed"] = rss_kib(server.pid)

            # Idle: sessions opened and left alone, twice over (the second round shows whether
            # closed sessions give their memory back for reuse).
            out["idle"] = []
            before = out["rss_kib_after_active_closed"]
            for _ in range(rounds):
                started = time.perf_counter()
                idle_sessions = []
                for chunk in range(0, idle, 100):
                    idle_sessions += await asyncio.gather(
                        *(open_session(client, url) for _ in range(min(100, idle - chunk)))
                    )
                opened = time.perf_counter() - started
                await asyncio.sleep(1)
                rss = rss_kib(server.pid)
                for chunk in range(0, idle, 100):
                    await asyncio.gather(*(close(client, url, h) for h in idle_sessions[chunk : chunk + 100]))
                await asyncio.sleep(1)
                out["idle"].append(
                    {
                        "sessions": idle,
                        "open_all_s": round(opened, 3),
                        "rss_kib": rss,
                        "kib_per_session": round((rss - before) / idle, 1),
                        "rss_kib_after_closed": rss_kib(server.pid),
                    }
                )
                before = out["idle"][-1]["rss_kib_after_closed"]
        print(json.dumps(out, indent=1))
    finally:
        server.terminate()
        server.wait(timeout=30)


asyncio.run(main())
