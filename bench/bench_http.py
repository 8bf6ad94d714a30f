"""`bundlectl serve` over streamable HTTP under load, side by side with a peer proxy in one run.

    python bench/bench_http.py [--calls 300] [--sessions 16] [--rounds 3]

Both front one `mcp-server-time` (stdio, started by each proxy; `serve` with `concurrency: 16`,
as the peer sends calls to its one process concurrently) and are driven the way a busy
client drives them: httpx2 with keep-alive connections (a fresh connection per call, as curl
makes, or the SDK's client, hides a delayed-ACK stall), JSON-RPC `tools/call` of
`get_current_time` on an initialized 2025-11-25 session.

1. One session, sequential calls: p50/p90 latency and calls/s.
2. `--sessions` sessions at once, each making `--calls / --sessions` calls: calls/s in all.

The peer is FastMCP's proxy (`fastmcp.server.create_proxy`, pip install fastmcp; skipped with a
note when it is not installed; `--peer-python PATH` runs it with another environment's Python,
e.g. a venv of its own, so its dependencies need not fit ours), served by uvicorn on loopback.
Rounds alternate the two so that the machine's drift falls on both alike; medians of the rounds
are printed. `cpu ms/call` is the proxy process's own CPU time (Linux, /proc) over both parts
divided by their calls — its server's excluded: steadier than latency on a busy machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio

INIT = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "1"},
    },
}
PEER = """
import sys
import uvicorn
from fastmcp.server import create_proxy

config = {"mcpServers": {"time": {"command": sys.argv[2], "args": []}}}
proxy = create_proxy(config, name="peer")
app = proxy.http_app(path="/mcp", transport="http")
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def bundlectl_serve(folder: Path, time_server: str, *flags: str) -> Iterator[tuple[str, str, int]]:
    """`serve` over HTTP (with `flags`) in front of mcp-server-time: (url, tool name, pid)."""
    (folder / "bundlectl.yaml").write_text(
        f"version: 1\nservers:\n  time: {{command: {time_server}, concurrency: 16}}\n"
        "agents:\n  bench: {allow: ['time.*']}\npolicy: {default: deny}\n"
    )
    argv = [sys.executable, "-m", "bundlectl", "serve", "--transport", "streamable-http"]
    proc = subprocess.Popen(
        [*argv, "--port", "0", "--agent", "bench", *flags],
        cwd=folder,
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "BUNDLECTL_HOME": str(folder / "home")},
    )
    assert proc.stderr is not None
    line = proc.stderr.readline().decode()
    found = re.search(r"on (http://\S+/mcp)", line)
    try:
        assert found, line
        yield found.group(1), "time__get_current_time", proc.pid
    finally:
        proc.terminate()
        proc.wait(10)


@contextlib.contextmanager
def peer_proxy(time_server: str, python: str) -> Iterator[tuple[str, str, int]]:
    port = _free_port()
    proc = subprocess.Popen([python, "-c", PEER, str(port), time_server], stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        _wait_listening(port)
        yield url, "get_current_time", proc.pid
    finally:
        proc.terminate()
        proc.wait(10)


def _wait_listening(port: int, within: float = 30.0) -> None:
    import socket

    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on port {port}")


def _answer(response: object) -> dict[str, object]:
    text = response.text  # type: ignore[attr-defined]
    if response.headers.get("content-type", "").startswith("text/event-stream"):  # type: ignore[attr-defined]
        data = [line[5:] for line in text.splitlines() if line.startswith("data:")]
        return json.loads(data[-1])  # type: ignore[no-any-return]
    return json.loads(text)  # type: ignore[no-any-return]


async def session_calls(url: str, tool: str, calls: int) -> list[float]:
    """One keep-alive session: initialize, then `calls` sequential tool calls (latencies, s)."""
    import httpx2

    headers = {"Accept": "application/json, text/event-stream"}
    async with httpx2.AsyncClient(timeout=60, headers=headers) as http:
        first = await http.post(url, json=INIT)
        sid = first.headers.get("mcp-session-id")
        if sid:
            headers["mcp-session-id"] = sid
        headers["mcp-protocol-version"] = "2025-11-25"
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        await http.post(url, json=note, headers=headers)
        latencies = []
        arguments = {"timezone": "UTC"}
        for i in range(calls):
            call = {
                "jsonrpc": "2.0",
                "id": i + 1,
                "method": "tools/call",
                "params": {"name": tool, "arguments": arguments},
            }
            started = time.perf_counter()
            response = await http.post(url, json=call, headers=headers)
            latencies.append(time.perf_counter() - started)
            answer = _answer(response)
            result = answer.get("result")
            if not isinstance(result, dict) or result.get("isError"):
                raise RuntimeError(f"call failed: {answer}")
        return latencies


async def load(url: str, tool: str, sessions: int, calls: int) -> float:
    """Calls/s with `sessions` sessions at once."""
    each = max(1, calls // sessions)
    started = time.perf_counter()
    async with anyio.create_task_group() as group:
        for _ in range(sessions):
            group.start_soon(session_calls, url, tool, each)
    return each * sessions / (time.perf_counter() - started)


def _cpu_seconds(pid: int) -> float:
    """A process's own CPU time so far (user + system), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(url: str, tool: str, calls: int, sessions: int, pid: int) -> dict[str, float]:
    anyio.run(session_calls, url, tool, 20)  # warm: the server started, caches filled
    cpu = _cpu_seconds(pid)
    latencies = sorted(anyio.run(session_calls, url, tool, calls))
    one = {
        "p50_ms": statistics.median(latencies) * 1000,
        "p90_ms": latencies[int(len(latencies) * 0.9)] * 1000,
        "calls_s": len(latencies) / sum(latencies),
    }
    one["concurrent_calls_s"] = anyio.run(load, url, tool, sessions, calls)
    made = calls + max(1, calls // sessions) * sessions
    one["cpu_ms"] = (_cpu_seconds(pid) - cpu) * 1000 / made
    return one


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--sessions", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--peer-python", default=sys.executable, help="the peer's interpreter")
    args = parser.parse_args()
    time_server = shutil.which("mcp-server-time") or str(
        Path(sys.executable).parent / "mcp-server-time"
    )
    found = subprocess.run(
        [args.peer_python, "-c", "import fastmcp, sys; sys.stdout.write(fastmcp.__version__)"],
        capture_output=True,
        text=True,
        check=False,
    )
    peers: dict[str, Any] = {"bundlectl serve": bundlectl_serve}
    if found.returncode == 0:
        peers[f"fastmcp {found.stdout} proxy"] = peer_proxy
    else:
        print(f"note: {args.peer_python} has no fastmcp (pip install fastmcp): bundlectl alone")
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in peers}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            for name, start in peers.items():
                folder = Path(tmp) / name.replace(" ", "-")
                folder.mkdir(exist_ok=True)
                cm = (
                    start(folder, time_server)
                    if start is bundlectl_serve
                    else start(time_server, args.peer_python)
                )
                with cm as (url, tool, pid):
                    runs[name].append(measure(url, tool, args.calls, args.sessions, pid))
    print(
        f"{'':<16} {'p50 ms':>8} {'p90 ms':>8} {'calls/s':>8} "
        f"{f'{args.sessions} sessions calls/s':>24} {'cpu ms/call':>12}"
        f"   (median of {args.rounds} rounds)"
    )
    for name, found in runs.items():
        row = {key: statistics.median(r[key] for r in found) for key in found[0]}
        print(
            f"{name:<16} {row['p50_ms']:>8.2f} {row['p90_ms']:>8.2f} {row['calls_s']:>8.0f} "
            f"{row['concurrent_calls_s']:>24.0f} {row['cpu_ms']:>12.2f}"
        )


if __name__ == "__main__":
    main()
